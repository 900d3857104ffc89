//! Webhooks against a real HTTP receiver (axum on hyper, on 127.0.0.1:0):
//! bodies arrive in order with a signature the receiver verifies; a
//! receiver answering 500 twice gets the event on the third try; a
//! receiver that hangs times out without holding up another URL's events
//! or the caller; a full queue drops and counts. An `https://` receiver
//! (rustls, a certificate from a test CA) gets its events when
//! `webhooks.ca_file` names that CA, and none otherwise; a redirect is not
//! followed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use tokio::sync::mpsc;
use tutti_server::outputs::webhook::{
    CONTENT_TYPE, ParticipantInfo, RecordingInfo, WebhookConfig, WebhookEvent, WebhookSender, verify,
};

const SECRET: [u8; 32] = *b"0123456789abcdef0123456789abcdef";

#[derive(Clone)]
struct Receiver {
    got: mpsc::UnboundedSender<(String, HeaderMap, Bytes)>,
    flaky: Arc<AtomicU32>,
}

async fn record(path: &str, st: &Receiver, headers: HeaderMap, body: Bytes) {
    let _ = st.got.send((path.to_owned(), headers, body));
}

/// A receiver with `/ok` (200), `/flaky` (500, 500, then 200) and `/hang` (answers after a minute).
async fn receiver() -> (String, mpsc::UnboundedReceiver<(String, HeaderMap, Bytes)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let st = Receiver { got: tx, flaky: Arc::new(AtomicU32::new(0)) };
    let app = Router::new()
        .route(
            "/ok",
            post(|State(st): State<Receiver>, h: HeaderMap, b: Bytes| async move {
                record("/ok", &st, h, b).await;
                StatusCode::OK
            }),
        )
        .route(
            "/flaky",
            post(|State(st): State<Receiver>, h: HeaderMap, b: Bytes| async move {
                record("/flaky", &st, h, b).await;
                if st.flaky.fetch_add(1, Ordering::SeqCst) < 2 {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                }
            }),
        )
        .route(
            "/hang",
            post(|State(st): State<Receiver>, h: HeaderMap, b: Bytes| async move {
                record("/hang", &st, h, b).await;
                tokio::time::sleep(Duration::from_secs(60)).await;
                StatusCode::OK
            }),
        )
        .with_state(st);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), rx)
}

fn config(urls: Vec<String>) -> WebhookConfig {
    WebhookConfig {
        urls,
        secret: SECRET.to_vec(),
        timeout: Duration::from_millis(400),
        connect_timeout: Duration::from_millis(400),
        backoff: Duration::from_millis(50),
        ..WebhookConfig::default()
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn events() -> Vec<WebhookEvent> {
    let alice = ParticipantInfo { id: "1".into(), identity: "alice".into(), attributes: Default::default() };
    vec![
        WebhookEvent::RoomStarted { room: "demo".into() },
        WebhookEvent::ParticipantJoined { room: "demo".into(), participant: alice.clone() },
        WebhookEvent::ParticipantLeft { room: "demo".into(), participant: alice, reason: "kicked".into() },
        WebhookEvent::RecordingFinished {
            room: "demo".into(),
            recording: RecordingInfo {
                file: "demo-20260101T000000Z.opus".into(),
                bytes: 1234,
                duration_seconds: 2.5,
                reason: "stopped".into(),
                error: None,
                node: None,
            },
        },
        WebhookEvent::RoomFinished { room: "demo".into() },
    ]
}

async fn next(rx: &mut mpsc::UnboundedReceiver<(String, HeaderMap, Bytes)>) -> (String, HeaderMap, Bytes) {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a delivery within 5 s")
        .expect("receiver alive")
}

async fn wait_for(
    sender: &WebhookSender,
    what: &str,
    done: impl Fn(&tutti_server::outputs::webhook::WebhookStats) -> bool,
) {
    let t = Instant::now();
    while !done(&sender.stats()) {
        assert!(t.elapsed() < Duration::from_secs(10), "{what}: {:?}", sender.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_arrive_in_order_signed_and_verifiable() {
    let (base, mut rx) = receiver().await;
    let sender = WebhookSender::start(&config(vec![format!("{base}/ok")]), &tokio::runtime::Handle::current())
        .expect("valid config");
    for e in events() {
        assert_eq!(sender.send(&e), 1);
    }
    let mut ids = std::collections::HashSet::new();
    for e in events() {
        let (path, headers, body) = next(&mut rx).await;
        assert_eq!(path, "/ok");
        assert_eq!(headers.get("content-type").and_then(|v| v.to_str().ok()), Some(CONTENT_TYPE));
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).expect("an Authorization header");
        let claims = verify(&SECRET, auth, &body, now()).expect("the receiver verifies the signature and body hash");
        assert_eq!(claims.iss, "tutti");
        assert!(verify(b"another secret, 32 bytes long!!!", auth, &body, now()).is_err());
        let mut tampered = body.to_vec();
        tampered[2] ^= 1;
        assert!(verify(&SECRET, auth, &tampered, now()).is_err());
        let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON body");
        assert_eq!(v["event"], e.name());
        assert_eq!(v["room"], "demo");
        assert!(v["created_at"].as_u64().is_some_and(|t| t.abs_diff(now()) < 60));
        assert!(ids.insert(v["id"].as_str().expect("an id").to_owned()), "ids are unique");
        match e.name() {
            "participant_left" => {
                assert_eq!(v["reason"], "kicked");
                assert_eq!(v["participant"]["identity"], "alice");
            }
            "recording_finished" => assert_eq!(v["recording"]["reason"], "stopped"),
            _ => {}
        }
    }
    let stats = sender.close(Duration::from_secs(2)).await;
    assert_eq!((stats.queued, stats.sent, stats.failed, stats.retried, stats.dropped), (5, 5, 0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_failing_twice_gets_the_event_on_the_third_try() {
    let (base, mut rx) = receiver().await;
    let sender = WebhookSender::start(&config(vec![format!("{base}/flaky")]), &tokio::runtime::Handle::current())
        .expect("valid config");
    let t = Instant::now();
    sender.send(&WebhookEvent::RoomStarted { room: "demo".into() });
    let bodies: Vec<Bytes> = [next(&mut rx).await, next(&mut rx).await, next(&mut rx).await].map(|(_, _, b)| b).into();
    wait_for(&sender, "delivered", |s| s.sent == 1).await;
    let took = t.elapsed();
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "each retry carries the same body (same id)");
    assert!(took >= Duration::from_millis(150), "backoff 50 ms then 100 ms: {took:?}");
    let stats = sender.stats();
    assert_eq!((stats.sent, stats.retried, stats.failed), (1, 2, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_holds_up_neither_the_caller_nor_another_url() {
    let (base, mut rx) = receiver().await;
    let cfg = WebhookConfig { attempts: 2, ..config(vec![format!("{base}/hang"), format!("{base}/ok")]) };
    let sender = WebhookSender::start(&cfg, &tokio::runtime::Handle::current()).expect("valid config");
    let t = Instant::now();
    for e in events() {
        assert_eq!(sender.send(&e), 2);
    }
    assert!(t.elapsed() < Duration::from_millis(50), "send never waits: {:?}", t.elapsed());
    let mut ok = 0;
    let deadline = Instant::now() + Duration::from_secs(3);
    while ok < 5 {
        assert!(Instant::now() < deadline, "the /ok receiver got only {ok} of 5 in 3 s");
        let (path, _, _) = next(&mut rx).await;
        if path == "/ok" {
            ok += 1;
        }
    }
    // The first event to /hang: 400 ms, 50 ms backoff, 400 ms: given up, both attempts timed out.
    wait_for(&sender, "the hanging URL times out", |s| s.failed >= 1 && s.timeouts >= 2).await;
    assert!(t.elapsed() < Duration::from_secs(3));
    let stats = sender.stats();
    assert_eq!(stats.sent, 5, "only /ok's events are delivered: {stats:?}");
    drop(sender);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_drops_and_counts() {
    let (base, _rx) = receiver().await;
    let cfg = WebhookConfig { queue: 2, ..config(vec![format!("{base}/hang")]) };
    let sender = WebhookSender::start(&cfg, &tokio::runtime::Handle::current()).expect("valid config");
    let t = Instant::now();
    let queued: usize = (0..20).map(|_| sender.send(&WebhookEvent::RoomStarted { room: "demo".into() })).sum();
    assert!(t.elapsed() < Duration::from_millis(50), "send never waits: {:?}", t.elapsed());
    let stats = sender.stats();
    assert!((2..=3).contains(&queued), "queue of 2 (plus one in flight): {queued}");
    assert_eq!(stats.dropped, 20 - queued as u64);
    assert_eq!(stats.queued, queued as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_retried_then_counted_as_failed() {
    // A port nobody listens on: bind, note the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind").port();
    let sender =
        WebhookSender::start(&config(vec![format!("http://127.0.0.1:{port}/")]), &tokio::runtime::Handle::current())
            .expect("valid config");
    sender.send(&WebhookEvent::RoomStarted { room: "demo".into() });
    wait_for(&sender, "given up", |s| s.failed == 1).await;
    let stats = sender.stats();
    assert_eq!((stats.sent, stats.retried, stats.failed), (0, 2, 1));
}

/// A CA (its PEM file in a fresh directory) and a rustls server config
/// with a certificate it signed for 127.0.0.1.
fn tls_receiver_config() -> (std::path::PathBuf, Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.distinguished_name.push(DnType::CommonName, "tutti webhook test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let key = KeyPair::generate().expect("server key");
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("server params");
    let cert = params.signed_by(&key, &Issuer::new(ca_params, ca_key)).expect("server certificate");
    let dir = tutti_client::redis::fresh_dir("webhook-tls");
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

/// The same receiver as [`receiver`], over TLS (tokio-rustls, hyper): its
/// `https://127.0.0.1:port` base, what it got, and the CA file to trust it with.
async fn tls_receiver() -> (String, mpsc::UnboundedReceiver<(String, HeaderMap, Bytes)>, std::path::PathBuf) {
    let (plain, rx) = receiver().await;
    let (ca_file, tls) = tls_receiver_config();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    // Each TLS connection is relayed to the plain receiver: its handlers record what arrives.
    let upstream: std::net::SocketAddr = plain.trim_start_matches("http://").parse().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    (format!("https://{addr}"), rx, ca_file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_receivers_are_checked_against_the_system_roots_and_ca_file() {
    let (base, mut rx, ca_file) = tls_receiver().await;
    let url = format!("{base}/ok");
    let handle = tokio::runtime::Handle::current();

    // Trusted through webhooks.ca_file: delivered, signed.
    let cfg = WebhookConfig { ca_file: ca_file.display().to_string(), ..config(vec![url.clone()]) };
    let sender = WebhookSender::start(&cfg, &handle).expect("valid config");
    sender.send(&WebhookEvent::RoomStarted { room: "tls".into() });
    let (path, headers, body) = next(&mut rx).await;
    assert_eq!(path, "/ok");
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).expect("signed");
    verify(&SECRET, auth, &body, now()).expect("verifies");
    assert_eq!(headers.get("content-type").and_then(|v| v.to_str().ok()), Some(CONTENT_TYPE));
    wait_for(&sender, "delivered", |s| s.sent == 1).await;

    // A certificate no trusted CA signed: every attempt fails, nothing arrives.
    let cfg = WebhookConfig { attempts: 2, ..config(vec![url]) };
    let untrusted = WebhookSender::start(&cfg, &handle).expect("valid config");
    untrusted.send(&WebhookEvent::RoomStarted { room: "tls".into() });
    wait_for(&untrusted, "given up", |s| s.failed == 1).await;
    assert!(rx.try_recv().is_err(), "the receiver got nothing over an unchecked connection");

    // A CA file that is not one: a clear error at start.
    let bad = WebhookConfig { ca_file: "/nonexistent/ca.pem".into(), ..config(vec![format!("{base}/ok")]) };
    let err = WebhookSender::start(&bad, &handle).expect_err("a missing CA file");
    assert!(err.to_string().contains("webhooks.ca_file /nonexistent/ca.pem"), "{err}");
    let _ = std::fs::remove_dir_all(ca_file.parent().expect("its directory"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed() {
    let (base, mut rx) = receiver().await;
    let app = Router::new().route("/moved", post(|| async { (StatusCode::TEMPORARY_REDIRECT, [("location", "/ok")]) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    // The redirect points at a working receiver; it must still not be followed.
    let _ = base;
    let cfg = WebhookConfig { attempts: 1, ..config(vec![format!("http://{addr}/moved")]) };
    let sender = WebhookSender::start(&cfg, &tokio::runtime::Handle::current()).expect("valid config");
    sender.send(&WebhookEvent::RoomStarted { room: "r".into() });
    wait_for(&sender, "given up", |s| s.failed == 1).await;
    assert!(rx.try_recv().is_err(), "nothing was delivered anywhere");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_delivers_what_is_queued_then_ends() {
    let (base, mut rx) = receiver().await;
    let sender = WebhookSender::start(&config(vec![format!("{base}/ok")]), &tokio::runtime::Handle::current())
        .expect("valid config");
    for _ in 0..20 {
        sender.send(&WebhookEvent::RoomStarted { room: "demo".into() });
    }
    let stats = sender.close(Duration::from_secs(5)).await;
    assert_eq!(stats.sent, 20, "{stats:?}");
    let mut got = 0;
    while rx.try_recv().is_ok() {
        got += 1;
    }
    assert_eq!(got, 20);
}

/// A recording's end, through the webhook: the recorder's callback (on its
/// writer thread, outside any runtime) hands the event to the sender.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_recording_is_announced_by_webhook() {
    use tutti_server::outputs::recording::{Recorder, RecordingConfig, RecordingFinished};
    let (base, mut rx) = receiver().await;
    let sender = Arc::new(
        WebhookSender::start(&config(vec![format!("{base}/ok")]), &tokio::runtime::Handle::current())
            .expect("valid config"),
    );
    let dir = std::env::temp_dir().join(format!("tutti-rec-hook-{}", std::process::id()));
    let cfg = RecordingConfig { dir: dir.clone(), ..RecordingConfig::default() };
    let hook = Arc::clone(&sender);
    let on_finish = Box::new(move |f: &RecordingFinished| {
        hook.send(&WebhookEvent::RecordingFinished { room: f.room.clone(), recording: f.into() });
    });
    let rec = Recorder::start("demo", SystemTime::now(), &cfg, Some(on_finish)).expect("valid config");
    for t in 0..10u64 {
        rec.push(t, Bytes::from_static(&[0xF8, 0xFF, 0xFE]));
    }
    rec.stop();
    let (_, headers, body) = next(&mut rx).await;
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).expect("signed");
    verify(&SECRET, auth, &body, now()).expect("verifies");
    let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(v["event"], "recording_finished");
    assert_eq!(v["recording"]["reason"], "stopped");
    assert!(v["recording"]["file"].as_str().is_some_and(|f| f.starts_with("demo-") && !f.contains('/')));
    assert!(v["recording"]["bytes"].as_u64().is_some_and(|b| b > 100));
    let _ = std::fs::remove_dir_all(&dir);
}
