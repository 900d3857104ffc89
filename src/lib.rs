//! # tutti
//!
//! An MCU audio-conference server for very large voice rooms: every
//! participant hears everyone but themselves, mixed on the server, with
//! codec work that grows with the number of speakers (K), not the room (N).
//!
//! This package is the workspace's root: it holds the benchmarks
//! (`benches/mixer.rs`) and examples (`examples/mix_wavs.rs`) and re-exports
//! the crates that make up tutti: the mixing core, [`mix`] (`tutti-mix`),
//! and the WebRTC media transport, [`rtc`] (`tutti-rtc`). The server that
//! joins them follows.

pub use tutti_mix as mix;
pub use tutti_rtc as rtc;
