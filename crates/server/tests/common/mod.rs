//! A server on ephemeral loopback ports, requests to it, and real WebRTC
//! clients that join it and talk.
#![allow(dead_code, missing_docs)]

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tutti_mix::{FRAME_SAMPLES, level_of, tone};
use tutti_rtc::{AudioPacket, ClientEvent, ClientPeer};
use tutti_server::client::{Response, request};
use tutti_server::{Config, Server};

pub fn http(addr: SocketAddr, method: &str, path: &str, content_type: Option<&str>, body: &[u8]) -> Response {
    request(addr, method, path, content_type, body).expect("the API answers")
}

/// A server on ephemeral loopback ports (metrics too), and the runtime it runs on.
pub fn start() -> (tokio::runtime::Runtime, Server) {
    let rt = tutti_server::api_runtime(2).expect("runtime");
    let cfg = Config {
        http: "127.0.0.1:0".parse().expect("addr"),
        media: "127.0.0.1:0".parse().expect("addr"),
        mix_threads: 2,
        metrics: Some("127.0.0.1:0".parse().expect("addr")),
        ..Config::default()
    };
    let server = rt.block_on(Server::start(cfg)).expect("server starts");
    (rt, server)
}

/// How a [`ToneClient`] joins: WHIP-style (`application/sdp`) or JSON with a name.
pub enum Join<'a> {
    Whip,
    Json { name: &'a str },
}

/// A real WebRTC client on its own loopback socket that joins a room over
/// the API and, once connected, sends a tone every 20 ms (real Opus with its
/// RFC 6464 level); it keeps what it hears.
pub struct ToneClient {
    pub peer: ClientPeer,
    pub socket: UdpSocket,
    pub freq: f32,
    encoder: opus::Encoder,
    /// Frames sent.
    pub sent: u64,
    next_send: Option<Instant>,
    /// Audio packets received, in order.
    pub heard: Vec<AudioPacket>,
}

impl ToneClient {
    /// Joins `room` on the API at `api` and applies the answer.
    pub fn join(api: SocketAddr, room: &str, freq: f32, how: Join<'_>) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket.set_nonblocking(true).expect("nonblocking");
        let (mut peer, offer) = ClientPeer::new(socket.local_addr().expect("addr"), Instant::now()).expect("client");
        let path = format!("/v1/rooms/{room}/participants");
        let answer = match how {
            Join::Json { name } => {
                let body = serde_json::json!({ "sdp": offer, "name": name }).to_string();
                let r = http(api, "POST", &path, Some("application/json"), body.as_bytes());
                assert_eq!(r.status, 201, "{}", r.body);
                let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON answer");
                v["sdp"].as_str().expect("sdp").to_owned()
            }
            Join::Whip => {
                let r = http(api, "POST", &path, Some("application/sdp"), offer.as_bytes());
                assert_eq!(r.status, 201, "{}", r.body);
                assert_eq!(r.header("content-type"), Some("application/sdp"));
                assert!(r.header("location").is_some_and(|l| l.starts_with(&format!("{path}/"))));
                r.body
            }
        };
        peer.accept_answer(&answer, Instant::now()).expect("answer");
        let encoder = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip).expect("encoder");
        Self { peer, socket, freq, encoder, sent: 0, next_send: None, heard: Vec::new() }
    }

    /// One turn: drives the client's UDP and timers, keeps what it heard, and
    /// sends its next frame when due, up to `frames` frames in all.
    pub fn pump(&mut self, buf: &mut [u8], now: Instant, frames: u64) {
        self.peer.pump_udp(&self.socket, buf, now).expect("client socket");
        while let Some(event) = self.peer.poll_event() {
            match event {
                ClientEvent::Connected => self.next_send = Some(now),
                ClientEvent::Audio(p) => self.heard.push(p),
                ClientEvent::Closed => panic!("{} Hz client closed", self.freq),
            }
        }
        if let Some(due) = self.next_send
            && now >= due
            && self.sent < frames
        {
            let pcm = tone(self.freq, 0.2, self.sent * FRAME_SAMPLES as u64);
            let payload = Bytes::from(self.encoder.encode_vec_float(&pcm, 1500).expect("encode"));
            self.peer.send_audio(payload, Some(level_of(&pcm)), now).expect("send");
            self.sent += 1;
            self.next_send = Some(due + Duration::from_millis(20));
        }
    }
}

/// One scrape of a Prometheus text exposition: samples by series, each
/// series written `name{k="v",…}` with its labels sorted (`name` alone when
/// it has none).
pub fn scrape(metrics: SocketAddr) -> std::collections::BTreeMap<String, f64> {
    let r = http(metrics, "GET", "/metrics", None, b"");
    assert_eq!(r.status, 200, "{}", r.body);
    parse_exposition(&r.body)
}

/// Parses the text format (no escaped quotes or commas inside label values).
pub fn parse_exposition(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').expect("a sample line is `series value`");
        let value: f64 = value.parse().expect("a number");
        let key = match series.split_once('{') {
            Some((name, labels)) => {
                let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                labels.sort_unstable();
                format!("{name}{{{}}}", labels.join(","))
            }
            None => series.to_owned(),
        };
        out.insert(key, value);
    }
    out
}

/// The key [`scrape`] gives a series.
pub fn series(name: &str, labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return name.to_owned();
    }
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    labels.sort_unstable();
    format!("{name}{{{}}}", labels.join(","))
}
