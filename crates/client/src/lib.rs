//! # tutti-client: talking to a tutti server from tools and tests
//!
//! What the load tester, the integration tests and the examples share, kept
//! out of the server so that none of them links the server to reuse it:
//!
//! ```text
//! http      Client (ureq, rustls): one blocking request on its own connection to an
//!           http:// or https:// origin (a token as Bearer, optionally from another
//!           loopback address); a TCP or TLS stream for ws:// or wss://;
//!           request / request_as: the same over plain http, for tests
//! process   run_bounded: a helper program (npm, pip, apt-get) to its end, or killed after a bound
//! redis     RedisServer: a real redis-server on 127.0.0.1 (Debian's, installed when missing)
//! tone      ToneClient: UDP socket on 127.0.0.1 ─► tutti_rtc::ClientPeer (ICE, DTLS, SRTP)
//!           ─► a sine tone in Opus every 20 ms (absolute schedule), or silence / DTX
//!           ◄─ everything heard, with arrival times; Goertzel to tell which tones
//! ```
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use tutti_client::{JoinAs, ToneClient, request, run_for};
//!
//! let api = "127.0.0.1:8080".parse()?;
//! request(api, "POST", "/v1/rooms", Some("application/json"), br#"{"id":"demo"}"#)?;
//! let mut a = ToneClient::join(api, "demo", 440.0, JoinAs::Whip)?;
//! let mut b = ToneClient::join(api, "demo", 660.0, JoinAs::Json)?;
//! let since = Instant::now();
//! run_for(&mut [&mut a, &mut b], Duration::from_secs(3));
//! assert!(b.hears(440.0, since) > 10.0 * b.hears(660.0, since), "b hears a, not itself");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod http;
pub mod process;
pub mod redis;
mod tone;

pub use http::{
    Client, HttpError, Origin, Requester, Response, Stream, request, request_as, request_following, split_location,
    trusted_roots,
};
pub use tone::{JoinAs, JoinError, ToneClient, Transport, run_for, run_until};
