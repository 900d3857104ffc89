//! `tutti load --webhook-listen ADDR`: a minimal HTTP/1.1 receiver for the
//! server's webhooks that counts events by name (and those carrying an
//! `Authorization` signature), so a load run shows what the server sent.
//! It checks no signature: that is the server's own tests' job.
//!
//! One thread accepts; each connection gets a thread (at most
//! [`MAX_CONNECTIONS`] at once, more are closed), which reads requests in a
//! loop (keep-alive), answers `200` with no body, and ends on EOF, an error
//! or [`IDLE`] without a byte.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::LoadError;

/// Connections served at once.
const MAX_CONNECTIONS: usize = 16;
/// A connection silent this long is closed.
const IDLE: Duration = Duration::from_secs(30);
/// Largest request body read.
const MAX_BODY: usize = 1 << 20;

#[derive(Default)]
struct Counts {
    events: BTreeMap<String, u64>,
    signed: u64,
    bad: u64,
}

/// A running receiver (its threads end with the process).
pub struct Receiver {
    addr: SocketAddr,
    counts: Arc<Mutex<Counts>>,
}

impl Receiver {
    /// Binds `addr` and serves.
    pub fn start(addr: SocketAddr) -> Result<Self, LoadError> {
        let listener =
            TcpListener::bind(addr).map_err(|e| LoadError::Io(format!("webhook receiver on {addr}: {e}")))?;
        let addr = listener.local_addr().map_err(|e| LoadError::Io(e.to_string()))?;
        let counts = Arc::new(Mutex::new(Counts::default()));
        let open = Arc::new(AtomicUsize::new(0));
        let c = counts.clone();
        std::thread::Builder::new()
            .name("webhooks".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    if open.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                        continue; // dropped: closed
                    }
                    open.fetch_add(1, Ordering::Relaxed);
                    let (c, open) = (c.clone(), open.clone());
                    let spawned = std::thread::Builder::new().name("webhook-conn".into()).spawn(move || {
                        serve(stream, &c);
                        open.fetch_sub(1, Ordering::Relaxed);
                    });
                    if spawned.is_err() {
                        // The connection was dropped with the closure.
                    }
                }
            })
            .map_err(|e| LoadError::Io(format!("starting the webhook receiver: {e}")))?;
        Ok(Self { addr, counts })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Events received so far, by name.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.counts.lock().map(|c| c.events.clone()).unwrap_or_default()
    }

    /// The counts as lines of text.
    pub fn counts_text(&self) -> String {
        let Ok(c) = self.counts.lock() else { return String::new() };
        let total: u64 = c.events.values().sum();
        let mut out = format!("{total} events ({} signed, {} unreadable)\n", c.signed, c.bad);
        for (name, n) in &c.events {
            out.push_str(&format!("  {name:<20} {n}\n"));
        }
        out
    }
}

/// Reads requests off one connection until it ends.
fn serve(stream: TcpStream, counts: &Mutex<Counts>) {
    let _ = stream.set_read_timeout(Some(IDLE));
    let Ok(mut out) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    // Bounded: each turn reads one request or ends the connection.
    loop {
        let mut len = 0usize;
        let mut signed = false;
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                } else if k.eq_ignore_ascii_case("authorization") {
                    signed = !v.trim().is_empty();
                }
            }
        }
        if len > MAX_BODY {
            return;
        }
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let event = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["event"].as_str().map(str::to_owned));
        if let Ok(mut c) = counts.lock() {
            match event {
                Some(e) => *c.events.entry(e).or_default() += 1,
                None => c.bad += 1,
            }
            if signed {
                c.signed += 1;
            }
        }
        if out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_events_over_one_kept_alive_connection() {
        let r = Receiver::start("127.0.0.1:0".parse().expect("addr")).expect("binds");
        let mut s = TcpStream::connect(r.addr()).expect("connects");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        for body in
            [r#"{"event":"room_started"}"#, r#"{"event":"participant_joined"}"#, r#"{"event":"room_started"}"#, "junk"]
        {
            let req = format!(
                "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: t\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).expect("write");
            let mut buf = [0u8; 38];
            s.read_exact(&mut buf).expect("an answer");
            assert!(buf.starts_with(b"HTTP/1.1 200 OK"));
        }
        let counts = r.counts();
        assert_eq!(counts.get("room_started"), Some(&2));
        assert_eq!(counts.get("participant_joined"), Some(&1));
        assert!(r.counts_text().contains("4 signed, 1 unreadable"), "{}", r.counts_text());
    }
}
