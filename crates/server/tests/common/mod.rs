//! A server on ephemeral loopback ports, and requests to it.
#![allow(dead_code, missing_docs)]

use std::net::SocketAddr;

use tutti_server::client::{Response, request};
use tutti_server::{Config, Server};

pub fn http(addr: SocketAddr, method: &str, path: &str, content_type: Option<&str>, body: &[u8]) -> Response {
    request(addr, method, path, content_type, body).expect("the API answers")
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
