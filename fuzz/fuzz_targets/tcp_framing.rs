//! RFC 4571 framing on the ICE-TCP port (`tutti_rtc::tcp`): any byte
//! stream, split anywhere, through the `FrameReader` and the
//! `TcpConnections` table. Checks beyond "no panic": frames and errors agree
//! with a naive parse, memory stays within one frame, nothing is handed on
//! before a STUN check, every connection closes in time. The check itself
//! lives with the workspace tests (which run it over seeded random inputs
//! on stable) so both exercise the same code.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/rtc/tests/tcp_framing_check/mod.rs"]
mod tcp_framing_check;

fuzz_target!(|data: &[u8]| tcp_framing_check::run(data));
