//! # tutti
//!
//! An MCU audio-conference server for very large voice rooms: every
//! participant hears everyone but themselves, mixed on the server, with
//! codec work that grows with the number of speakers (K), not the room (N).
//!
//! This package is the workspace's root: it holds the benchmarks
//! (`benches/mixer.rs`) and examples (`examples/mix_wavs.rs`) and re-exports
//! the crates that make up tutti. Today that is the mixing core,
//! [`mix`] (`tutti-mix`); the WebRTC transport and the server follow.

pub use tutti_mix as mix;
