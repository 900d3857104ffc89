//! The recipe for one VM (docs/operating/one-vm.md), run as far as a test
//! on loopback can: `tutti serve` started as deploy/vm/tutti.service
//! starts it (its ExecStart and Environment lines, the secret from an
//! environment file), and Debian's nginx with deploy/vm/nginx.conf as
//! shipped (only its addresses, certificate paths and upstream port put
//! on loopback) in front: `nginx -t` takes it, HTTPS reaches the API and
//! the SDK, plain HTTP is sent to HTTPS. (WebSockets through nginx with
//! this proxying: crates/server/tests/crowd_limits.rs.)

#![allow(clippy::unwrap_used)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tutti_client::{Client, Requester};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The unit's `[Service]` lines `key=value`, in order.
fn service_lines(unit: &str) -> Vec<(String, String)> {
    let mut in_service = false;
    let mut out = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            in_service = line == "[Service]";
            continue;
        }
        if in_service
            && !line.starts_with('#')
            && let Some((k, v)) = line.split_once('=')
        {
            out.push((k.to_owned(), v.to_owned()));
        }
    }
    out
}

/// A certificate for 127.0.0.1 and its key, as PEM files in `dir`.
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().self_signed(&key).unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

#[test]
fn the_systemd_unit_and_the_nginx_site_serve_the_api_over_https() {
    let dir = std::env::temp_dir().join(format!("tutti-one-vm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // tutti as the unit starts it.
    let unit = std::fs::read_to_string(repo().join("deploy/vm/tutti.service")).unwrap();
    let lines = service_lines(&unit);
    let get = |k: &str| lines.iter().filter(|(key, _)| key == k).map(|(_, v)| v.clone()).collect::<Vec<_>>();
    let exec = get("ExecStart");
    assert_eq!(exec.len(), 1, "one ExecStart: {exec:?}");
    let mut args = exec[0].split_whitespace();
    assert_eq!(args.next(), Some("/usr/local/bin/tutti"), "{exec:?}");
    assert_eq!(get("EnvironmentFile"), ["/etc/tutti/env"], "the secret comes from a file");
    for key in ["User", "TimeoutStopSec", "LimitNOFILE", "AmbientCapabilities"] {
        assert!(!get(key).is_empty(), "the unit sets {key}");
    }
    let api_port = free_port();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_tutti"));
    serve.args(args).current_dir(&dir).stdout(Stdio::null()).stderr(Stdio::null());
    for env in get("Environment") {
        let (k, v) = env.split_once('=').unwrap();
        let v = match k {
            // The unit's addresses, on ports free here.
            "TUTTI_HTTP" => {
                assert_eq!(v, "127.0.0.1:8080", "the API only on loopback, behind the proxy");
                format!("127.0.0.1:{api_port}")
            }
            "TUTTI_METRICS" => {
                assert!(v.starts_with("127.0.0.1:"), "metrics on loopback: {v}");
                format!("127.0.0.1:{}", free_port())
            }
            _ => v.to_owned(),
        };
        serve.env(k, v);
    }
    // /etc/tutti/env.
    serve.env("TUTTI_AUTH_SECRET", "the one-vm test's secret, thirty-two bytes+");
    serve.env("TUTTI_MEDIA", format!("127.0.0.1:{}", free_port()));
    let _tutti = Killed(serve.spawn().expect("tutti serve starts"));
    let api = SocketAddr::from(([127, 0, 0, 1], api_port));
    let deadline = Instant::now() + Duration::from_secs(20);
    while tutti_client::request(api, "GET", "/readyz", None, b"").map_or(true, |r| r.status != 200) {
        assert!(Instant::now() < deadline, "tutti as the unit starts it is not ready within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }

    // nginx with the shipped site, on loopback.
    let nginx = tutti_client::process::ensure_debian_package("/usr/sbin/nginx", "nginx");
    let (cert, key) = certificate(&dir);
    let (https, http) = (free_port(), free_port());
    let site = std::fs::read_to_string(repo().join("deploy/vm/nginx.conf"))
        .unwrap()
        .replace("listen 443 ssl;", &format!("listen 127.0.0.1:{https} ssl;"))
        .replace("listen 80;", &format!("listen 127.0.0.1:{http};"))
        .replace("/etc/letsencrypt/live/voice.example.org/fullchain.pem", &cert.display().to_string())
        .replace("/etc/letsencrypt/live/voice.example.org/privkey.pem", &key.display().to_string())
        .replace("http://127.0.0.1:8080", &format!("http://127.0.0.1:{api_port}"))
        .lines()
        .filter(|l| !l.contains("listen [::]"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.join("site.conf"), site).unwrap();
    let d = dir.display();
    let main = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n include {d}/site.conf;\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), main).unwrap();
    let check = Command::new(&nginx)
        .args(["-t", "-p", &d.to_string(), "-e", &format!("{d}/error.log"), "-c"])
        .arg(dir.join("nginx.conf"))
        .output()
        .unwrap();
    assert!(check.status.success(), "nginx -t: {}", String::from_utf8_lossy(&check.stderr));
    let _proxy = Killed(
        Command::new(&nginx)
            .args(["-p", &d.to_string(), "-e", &format!("{d}/error.log"), "-c"])
            .arg(dir.join("nginx.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", https)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not listen: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // HTTPS reaches the API, the page and the SDK.
    let client = Client::new(Some(&cert)).unwrap();
    let (addr, path) = client.locate(&format!("https://127.0.0.1:{https}/healthz")).unwrap();
    let r = client.request_as(addr, &Requester::default(), "GET", &path, None, b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = client.request_as(addr, &Requester::default(), "GET", "/tutti.js", None, b"").unwrap();
    assert!(r.status == 200 && r.body.contains("export class Room"), "the SDK through the proxy: {}", r.status);
    // The room socket's route is tutti's through the proxy (a plain GET: tutti's own 400).
    let r = client.request_as(addr, &Requester::default(), "GET", "/v1/rooms/demo/ws", None, b"").unwrap();
    assert_eq!((r.status, r.code().as_str()), (401, "token_missing"), "tutti answered: {}", r.body);
    let mut ws = TcpStream::connect(("127.0.0.1", http)).unwrap();
    ws.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Write::write_all(
        &mut ws,
        b"GET /?room=demo HTTP/1.1\r\nHost: voice.example.org\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut ws, &mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 301") && answer.contains("Location: https://voice.example.org/?room=demo"),
        "{answer}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
