//! A tiny blocking HTTP/1.1 client and a server on ephemeral loopback ports.
#![allow(dead_code, missing_docs)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use tutti_server::{Config, Server};

pub struct Http {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Http {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The `code` of a JSON error body.
    pub fn code(&self) -> String {
        serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v["code"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

pub fn http(addr: SocketAddr, method: &str, path: &str, content_type: Option<&str>, body: &[u8]) -> Http {
    let mut s = TcpStream::connect(addr).expect("connect to the API");
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if let Some(ct) = content_type {
        req.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("write");
    let _ = s.write_all(body); // the server may answer (413) and close before reading it all
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    Http { status, headers, body: body.to_owned() }
}

/// A server on ephemeral loopback ports, and the runtime it runs on.
pub fn start() -> (tokio::runtime::Runtime, Server) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let cfg = Config {
        http: "127.0.0.1:0".parse().expect("addr"),
        media: "127.0.0.1:0".parse().expect("addr"),
        mix_threads: 2,
        ..Config::default()
    };
    let server = rt.block_on(Server::start(cfg)).expect("server starts");
    (rt, server)
}
