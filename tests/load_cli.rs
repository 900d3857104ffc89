//! `tutti load` as a person runs it, against `tutti serve`: with `--json`
//! the JSON report alone is on stdout and the human report on stderr, which
//! ends with one verdict line against the SLO (`PASS:`, `FAIL:` with the
//! figure that failed, or `INVALID:` with why); roles and states are plain
//! words. The verdict matches the report: an SLO nobody can meet fails
//! with the figure that missed it.

mod common;

use std::process::Command;

/// Runs `tutti load` with `extra` against `api`, its token in
/// `TUTTI_TOKEN`: (exit status, stdout, stderr).
fn load(api: std::net::SocketAddr, token: &str, extra: &[&str]) -> (std::process::ExitStatus, String, String) {
    load_with("TUTTI_TOKEN", api, token, extra)
}

/// [`load`] with the token in the environment variable `var` alone.
fn load_with(
    var: &str,
    api: std::net::SocketAddr,
    token: &str,
    extra: &[&str],
) -> (std::process::ExitStatus, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(["load", "--url", &format!("http://{api}"), "-n", "6", "--life", "8", "--warmup", "1"])
        .args(["--probes", "2", "--probe-listeners", "2", "--json"])
        .args(extra)
        .env_remove("TOKEN")
        .env_remove("TUTTI_TOKEN")
        .env(var, token)
        .output()
        .expect("tutti load runs");
    (out.status, String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The verdict line: the last line of stderr that starts with one.
fn verdict(stderr: &str) -> &str {
    stderr
        .lines()
        .rev()
        .find(|l| ["PASS: ", "FAIL: ", "INVALID: "].iter().any(|v| l.starts_with(v)))
        .unwrap_or_else(|| panic!("no verdict line in:\n{stderr}"))
}

#[test]
fn a_load_run_prints_its_json_on_stdout_and_one_verdict_line() {
    let mut served = common::serve_loopback(&[]);
    let token = served.banner_token();

    let (status, stdout, stderr) = load(served.api, &token, &[]);
    let report: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is the JSON report alone ({e}):\n{stdout}\n-- stderr:\n{stderr}"));
    let s = &report["summary"];
    assert_eq!(s["clients"], 6, "{s}");
    let line = verdict(&stderr);
    println!("{line}");
    // The verdict says what the report says.
    if s["valid"] == false {
        assert!(line.starts_with("INVALID: "), "{line}");
        assert_eq!(status.code(), Some(2), "an invalid run exits 2");
    } else if line.starts_with("PASS: ") {
        assert_eq!(s["connected"], 6, "{line}");
        assert!(status.success(), "a pass exits 0");
        assert!(line.contains("a valid run"), "a pass says whether the run was valid: {line}");
    } else {
        assert!(line.starts_with("FAIL: "), "{line}");
        assert_eq!(status.code(), Some(1), "a fail exits 1");
    }
    // Plain words, no Rust debug names.
    for debug in ["ProbeTalker", "ProbeListener", "Connected ", "JoinFailed", "Dtx"] {
        assert!(!stderr.contains(debug), "'{debug}' in the report:\n{stderr}");
    }
    assert!(stderr.contains("probe talker"), "{stderr}");
    // The server on this machine: its CPU read from /proc by itself, no flag given.
    let pid = served.child.id();
    assert!(stderr.contains(&format!("server CPU from /proc/{pid} ")), "the server's process found: {stderr}");
    assert!(s["server_cpu_cores"].as_f64().is_some_and(|c| c > 0.0), "the server's CPU measured: {s}");

    // An SLO nobody meets (a p5 MOS above 5): FAIL, naming the MOS, unless the run was invalid.
    let (status, stdout, stderr) = load(served.api, &token, &["--min-mos", "5.5"]);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("the JSON report");
    let line = verdict(&stderr);
    println!("{line}");
    if report["summary"]["valid"] == true {
        assert!(line.starts_with("FAIL: ") && line.contains("p5 MOS"), "{line}");
        assert_eq!(status.code(), Some(1), "a fail exits 1");
    } else {
        assert!(line.starts_with("INVALID: "), "{line}");
    }
    let _ = served.child.kill();
}

/// One token name: the banner's `export TUTTI_TOKEN=…` serves the admin
/// CLI and `tutti load` alike; the old `TOKEN` still works for `tutti load`,
/// with one deprecation line.
#[test]
fn the_banner_token_serves_the_admin_cli_and_load_under_one_name() {
    let mut served = common::serve_loopback(&[]);
    let token = served.banner_token();

    let rooms = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(["rooms", "list", "--url", &format!("http://{}", served.api)])
        .env_remove("TOKEN")
        .env("TUTTI_TOKEN", &token)
        .output()
        .expect("tutti rooms runs");
    assert!(rooms.status.success(), "{}", String::from_utf8_lossy(&rooms.stderr));

    let deprecated = "TOKEN is deprecated; set TUTTI_TOKEN";
    let (_, stdout, stderr) = load(served.api, &token, &[]);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("the JSON report");
    assert!(report["summary"]["connected"].as_u64() >= Some(1), "{stderr}");
    assert!(!stderr.contains(deprecated), "{stderr}");

    let (_, stdout, stderr) = load_with("TOKEN", served.api, &token, &[]);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("the JSON report");
    assert!(report["summary"]["connected"].as_u64() >= Some(1), "the old name still works: {stderr}");
    assert_eq!(stderr.matches(deprecated).count(), 1, "{stderr}");
    let _ = served.child.kill();
}

/// Joins the server refuses are counted with their reason, in the text
/// report (`joins failed: N × join refused: rate_limited …`) and in the
/// JSON summary's `join_errors`, so a person sees why, not only how many.
#[test]
fn refused_joins_are_reported_with_their_reason() {
    let mut served =
        common::serve_loopback(&["--set", "limits.join_rate_per_second=0.1", "--set", "limits.join_burst=2"]);
    let token = served.banner_token();
    let (_, stdout, stderr) = load(served.api, &token, &[]);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("the JSON report");
    let s = &report["summary"];
    let failed = s["join_failed"].as_u64().expect("join_failed");
    assert!(failed >= 1, "a burst of 2 at 0.1 joins/s refuses some of 6: {s}");
    let errors = s["join_errors"].as_object().unwrap_or_else(|| panic!("join_errors in {s}"));
    assert_eq!(errors.values().filter_map(|n| n.as_u64()).sum::<u64>(), failed, "{s}");
    assert!(errors.keys().all(|why| why.contains("rate_limited")), "{errors:?}");
    let line = stderr.lines().find(|l| l.trim_start().starts_with("joins failed: ")).expect("a reason line");
    println!("{line}");
    assert!(line.contains(&format!("{failed} × join refused: rate_limited")), "{line}");
    let _ = served.child.kill();
}

/// A server's per-address share of the connections refuses the sockets
/// past it: the report names the code, not just the status.
#[test]
fn a_socket_refused_by_the_per_address_share_is_reported_with_its_code() {
    let mut served = common::serve_loopback(&[
        "--set",
        "limits.join_rate_per_second=0",
        "--set",
        "limits.max_connections_per_address=3",
    ]);
    let token = served.banner_token();
    let (_, stdout, stderr) = load(served.api, &token, &[]);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("the JSON report");
    let s = &report["summary"];
    let failed = s["join_failed"].as_u64().expect("join_failed");
    assert!(failed >= 1, "3 connections from one address cannot hold 6 sockets: {s}");
    let errors = s["join_errors"].as_object().unwrap_or_else(|| panic!("join_errors in {s}"));
    assert!(errors.keys().all(|why| why == "WebSocket refused: 503 too_many_connections"), "{errors:?}\n{stderr}");
    let _ = served.child.kill();
}

/// The CPUs a process's thread may run on, from /proc (`Cpus_allowed_list`).
fn cpus_allowed(status: &str) -> Option<String> {
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_owned())
}

/// `tutti capacity --pin` runs its server on one CPU and its own generator
/// threads on another: read from /proc while it runs, and in its report.
#[test]
fn capacity_pins_the_server_and_the_generator_to_a_cpu_each() {
    let out = common::cluster::temp_dir("capacity-pin");
    let child = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(["capacity", "--pin", "--start", "4", "--max", "4", "--short", "3", "--full", "3"])
        .args(["--max-trials", "1", "--warmup", "1", "--probes", "1", "--probe-listeners", "1", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("tutti capacity runs");
    let me = child.id();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    // Its server: the child process running `serve`; its generator: its `load-0` thread.
    let (mut server, mut generator) = (None, None);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while (server.is_none() || generator.is_none()) && std::time::Instant::now() < deadline && cpus >= 2 {
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
            let parent = status.lines().find_map(|l| l.strip_prefix("PPid:")).map(str::trim);
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if parent == Some(&me.to_string()) && cmdline.split(|&b| b == 0).any(|a| a == b"serve") {
                server = cpus_allowed(&status);
            }
        }
        for task in std::fs::read_dir(format!("/proc/{me}/task")).into_iter().flatten().flatten() {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            if status.lines().any(|l| l == "Name:\tload-0") {
                generator = cpus_allowed(&status);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let result = child.wait_with_output().expect("it ends");
    let stdout = String::from_utf8_lossy(&result.stdout);
    if cpus < 2 {
        // One CPU: nothing to pin to, and it says so.
        assert!(!result.status.success(), "{stdout}");
        return;
    }
    let (server, generator) = (server.expect("the server's CPUs"), generator.expect("load-0's CPUs"));
    println!("server on CPU {server}, generator on CPU {generator}");
    let one = |s: &str| s.parse::<usize>().unwrap_or_else(|_| panic!("one CPU, not {s:?}"));
    assert_ne!(one(&server), one(&generator), "two different CPUs");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("capacity.json")).expect("capacity.json"))
            .expect("JSON");
    assert_eq!(json["pinned"]["server_cpu"].as_u64(), Some(one(&server) as u64), "{json}");
    assert_eq!(json["pinned"]["generator_cpu"].as_u64(), Some(one(&generator) as u64), "{json}");
    assert!(stdout.contains("participants per server core"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}

/// A local server that exits before it is ready (as when another process
/// takes one of its free ports before it binds them) is started again on
/// other ports, three times in all; then `tutti capacity` fails with why,
/// rather than searching without a server.
#[test]
fn capacity_starts_its_server_again_when_it_exits_at_once_then_gives_up() {
    let out = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(["capacity", "--start", "4", "--max", "4", "--short", "3", "--full", "3", "--max-trials", "1"])
        // A setting `serve` refuses: every start exits at once.
        .args(["--server-arg=--set", "--server-arg=room.complexity=11"])
        .output()
        .expect("tutti capacity runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("trying other ports").count(), 2, "three starts in all:\n{stderr}");
    assert_eq!(stderr.matches("room.complexity").count(), 3, "each start says why it exited:\n{stderr}");
    assert!(stderr.contains("tutti serve exited"), "{stderr}");
}
