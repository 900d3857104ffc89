//! `tutti token` mints tokens the server accepts, with the configured
//! secret, for a lifetime in seconds or as people write it (`--ttl 1h`),
//! and refuses when no secret is configured.

use std::process::Command;

use tutti_server::auth::{Auth, Grant, unix_now};

const SECRET: &str = "a secret shared by tutti token and tutti serve";

fn tutti_token(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tutti"))
        .arg("token")
        .args(args)
        .env_remove("TUTTI_AUTH_SECRET")
        .output()
        .expect("tutti runs")
}

#[test]
fn tutti_token_mints_with_the_configured_secret() {
    let auth = Auth::new(SECRET).expect("secret");
    let set = format!("auth.secret={SECRET}");
    let out = tutti_token(&["--room", "demo", "--identity", "alice", "--set", &set]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).expect("UTF-8");
    assert_eq!(auth.verify(token.trim(), unix_now()), Ok(Grant::participant("demo", "alice")));

    let out = tutti_token(&["--room", "demo", "--identity", "bob", "--listen-only", "--ttl", "60", "--set", &set]);
    let token = String::from_utf8(out.stdout).expect("UTF-8");
    assert_eq!(auth.verify(token.trim(), unix_now()), Ok(Grant::listener("demo", "bob")));
    assert!(auth.verify(token.trim(), unix_now() + 61).is_err(), "--ttl 60 expires");

    // Human durations: 90m, 1h30m, 2d; plain seconds as before.
    for (ttl, secs) in [("90m", 5400), ("1h30m", 5400), ("2d", 172_800), ("45s", 45), ("120", 120)] {
        let out = tutti_token(&["--room", "demo", "--identity", "erin", "--ttl", ttl, "--set", &set]);
        assert!(out.status.success(), "--ttl {ttl}: {}", String::from_utf8_lossy(&out.stderr));
        let token = String::from_utf8(out.stdout).expect("UTF-8");
        let now = unix_now();
        assert!(auth.verify(token.trim(), now + secs - 2).is_ok(), "--ttl {ttl} lives {secs} s");
        assert!(auth.verify(token.trim(), now + secs + 1).is_err(), "--ttl {ttl} expires after {secs} s");
    }

    // Attributes, a reserved key among them (the backend's to set); a bad one is refused with the bound.
    let args = ["--room", "demo", "--identity", "fay", "--attribute", "role=host", "--attribute", "sip.trunk=a=b"];
    let out = tutti_token(&[&args[..], &["--set", &set]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).expect("UTF-8");
    let attributes = [("role", "host"), ("sip.trunk", "a=b")].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
    assert_eq!(
        auth.verify(token.trim(), unix_now()),
        Ok(Grant { attributes, ..Grant::participant("demo", "fay") }),
        "the value is what follows the first '='"
    );
    for bad in ["no-equals", "bad key=1"] {
        let out = tutti_token(&["--room", "demo", "--identity", "fay", "--attribute", bad, "--set", &set]);
        assert!(!out.status.success(), "--attribute {bad:?} is refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("KEY=VALUE") || err.contains("attribute key"), "{bad:?}: {err}");
    }

    let out = tutti_token(&["--room", "*", "--identity", "ops", "--admin", "--set", &set]);
    let token = String::from_utf8(out.stdout).expect("UTF-8");
    assert_eq!(auth.verify(token.trim(), unix_now()), Ok(Grant::admin("ops")));

    // The secret from the environment, as a deployment sets it.
    let out = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(["token", "--room", "demo", "--identity", "carol"])
        .env("TUTTI_AUTH_SECRET", SECRET)
        .output()
        .expect("tutti runs");
    let token = String::from_utf8(out.stdout).expect("UTF-8");
    assert_eq!(auth.verify(token.trim(), unix_now()).map(|g| g.identity), Ok("carol".to_owned()));

    // In a shell set up for a cluster node (docs/operating/cluster.md): its
    // node settings, incomplete for a node, do not stop the minting.
    let out = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(["token", "--room", "demo", "--identity", "dave"])
        .env("TUTTI_AUTH_SECRET", SECRET)
        .env("TUTTI_CLUSTER_REDIS_URL", "redis://127.0.0.1:6379/0")
        .output()
        .expect("tutti runs");
    let token = String::from_utf8_lossy(&out.stdout);
    assert_eq!(auth.verify(token.trim(), unix_now()).map(|g| g.identity), Ok("dave".to_owned()), "{out:?}");
}

#[test]
fn tutti_token_refuses_without_a_secret_or_with_a_bad_request() {
    let set = format!("auth.secret={SECRET}");
    for args in [
        &["--room", "demo", "--identity", "alice"][..],
        &["--room", "*", "--identity", "x", "--set", &set],
        &["--room", "demo", "--identity", "x", "--set", "auth.secret=short"],
        &["--room", "no spaces", "--identity", "x", "--set", &set],
        &["--room", "demo", "--identity", "x", "--ttl", "1x", "--set", &set],
        &["--room", "demo", "--identity", "x", "--ttl", "0", "--set", &set],
        &["--room", "demo", "--identity", "x", "--ttl", "1.5h", "--set", &set],
    ] {
        let out = tutti_token(args);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(out.stdout.is_empty(), "no token printed for {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("secret") || err.contains("--admin") || err.contains("room") || err.contains("duration"),
            "{args:?}: {err}"
        );
    }
}
