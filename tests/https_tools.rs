//! `tutti load` and the admin CLI against an `https://` deployment: tutti
//! serves plain HTTP behind a reverse proxy that holds the certificate, so
//! the test puts a TLS terminator (tokio-rustls, a certificate signed by a
//! CA that rcgen makes) in front of a real `tutti serve`, relaying bytes both
//! ways, WebSocket upgrades included. The real binaries trust it through
//! `--ca-file`; without it they stop with "certificate not trusted"; an
//! unknown scheme is named as such; proxy variables in the environment are
//! not followed.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

/// A CA's PEM file (in `dir`) and a rustls server config with a
/// certificate it signed for `localhost` and 127.0.0.1.
fn certificates(dir: &Path) -> (PathBuf, Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.distinguished_name.push(DnType::CommonName, "tutti https tools test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let key = KeyPair::generate().expect("server key");
    let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).expect("params");
    let cert = params.signed_by(&key, &Issuer::new(ca_params, ca_key)).expect("server certificate");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write the CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("a key");
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .expect("server TLS config");
    (ca_file, Arc::new(config))
}

/// A TLS terminator on 127.0.0.1 in front of `upstream` (plain HTTP): its
/// address, and the first line of every request that came through it.
struct Terminator {
    addr: SocketAddr,
    first_lines: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Terminator {
    fn start(upstream: SocketAddr, tls: Arc<rustls::ServerConfig>) -> Self {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the terminator");
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind loopback");
        let addr = listener.local_addr().expect("bound");
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let first_lines = Arc::new(Mutex::new(Vec::new()));
        let lines = first_lines.clone();
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, lines) = (acceptor.clone(), lines.clone());
                tokio::spawn(async move {
                    // A client that refuses the certificate ends here.
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else { return };
                    let mut first = vec![0; 16 * 1024];
                    let Ok(n) = tls.read(&mut first).await else { return };
                    let head = String::from_utf8_lossy(&first[..n]);
                    lines.lock().expect("lines").push(head.lines().next().unwrap_or_default().to_owned());
                    if up.write_all(&first[..n]).await.is_err() {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
        Self { addr, first_lines, _runtime: runtime }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    fn lines(&self) -> Vec<String> {
        self.first_lines.lock().expect("lines").clone()
    }
}

/// Runs `tutti ARGS…` with `TUTTI_TOKEN` set to `token`, and
/// proxy variables that point nowhere: the tools go straight to the server
/// (their WebSockets and media could not follow a proxy anyway).
fn tutti(token: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(args)
        .env("TUTTI_TOKEN", token)
        .envs(
            ["ALL_PROXY", "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"].map(|k| (k, "http://127.0.0.1:9")),
        )
        .env_remove("TUTTI_URL")
        .env_remove("TUTTI_CA_FILE")
        .output()
        .expect("tutti runs")
}

fn text(out: &Output) -> String {
    format!("{}\n-- stderr:\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn load_and_the_admin_cli_work_against_an_https_deployment() {
    let mut served = common::serve_loopback(&[]);
    let token = served.banner_token();
    let dir = tutti_client::redis::fresh_dir("https-tools");
    let (ca_file, tls) = certificates(&dir);
    let ca = ca_file.to_str().expect("a UTF-8 path");
    let proxy = Terminator::start(served.api, tls);
    let url = proxy.url();

    // Without the CA: the certificate is named as the problem, before anything else happens.
    let out = tutti(&token, &["rooms", "list", "--url", &url]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    print!("{err}");
    assert!(err.contains("certificate not trusted") && err.contains("--ca-file"), "{err}");
    let out = tutti(&token, &["load", "--url", &url, "-n", "2", "--life", "2"]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    print!("{err}");
    assert!(err.contains("certificate not trusted"), "{}", text(&out));
    // A scheme the tools do not speak.
    for tool in [&["rooms", "list", "--url", "ftp://127.0.0.1:21"][..], &["load", "--url", "ftp://127.0.0.1:21"]] {
        let out = tutti(&token, tool);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        print!("{err}");
        assert!(!out.status.success() && err.contains("unknown scheme 'ftp://'"), "{}", text(&out));
    }
    assert!(
        proxy.lines().is_empty(),
        "nothing went over a connection whose certificate was refused: {:?}",
        proxy.lines()
    );

    // With it: a short load run joins every client through wss:// and reports the https URL.
    let out = tutti(
        &token,
        &[
            "load",
            "--url",
            &url,
            "--ca-file",
            ca,
            "-n",
            "4",
            "--life",
            "6",
            "--warmup",
            "1",
            "--probes",
            "1",
            "--probe-listeners",
            "1",
            "--room",
            "tls-room",
            "--json",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|e| panic!("the JSON report on stdout ({e}): {}", text(&out)));
    let s = &report["summary"];
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{}", stderr.lines().find(|l| l.starts_with("tutti load:")).unwrap_or_default());
    println!(
        "{}",
        stderr.lines().rev().find(|l| l.contains(": ") && l.starts_with(['P', 'F', 'I'])).unwrap_or_default()
    );
    assert_eq!((s["clients"].as_u64(), s["join_failed"].as_u64()), (Some(4), Some(0)), "{}", text(&out));
    assert_eq!(report["config"]["url"], url.as_str(), "{}", report["config"]);
    // The sockets stayed open over TLS on the load threads (non-blocking reads) and carried the room's events.
    let ws = &s["ws"];
    assert_eq!([&ws["sockets"], &ws["open"], &ws["snapshots"]].map(|v| v.as_u64()), [Some(4); 3], "{ws}");
    assert!(ws["messages"].as_u64().is_some_and(|m| m > 0), "{ws}");
    let lines = proxy.lines();
    let upgrades = lines.iter().filter(|l| l.starts_with("GET /v1/rooms/tls-room/ws")).count();
    assert_eq!(upgrades, 4, "each client's room WebSocket came through the TLS terminator: {lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("POST /v1/rooms ")), "the room was created over https: {lines:?}");

    // The admin CLI through the same terminator: the room the load run made is listed.
    let out = tutti(&token, &["rooms", "list", "--url", &url, "--ca-file", ca]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(table.lines().any(|l| l.starts_with("tls-room ")), "{table}");
    // TUTTI_CA_FILE does what --ca-file does.
    let out = Command::new(env!("CARGO_BIN_EXE_tutti"))
        .args(["rooms", "get", "tls-room", "--url", &url])
        .env("TUTTI_TOKEN", &token)
        .env("TUTTI_CA_FILE", ca)
        .output()
        .expect("tutti runs");
    assert!(out.status.success(), "{}", text(&out));

    let _ = served.child.kill();
    let _ = served.child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
