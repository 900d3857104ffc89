//! # tutti-load: the load tester and the capacity search
//!
//! A voice server is only as good as its measured capacity. This crate runs
//! N simulated WebRTC participants in one process against a tutti server,
//! as an operator's fleet: one room or many (equal rooms, or a mix of room
//! sizes; see [`rooms`]), each client holding its room's WebSocket as the
//! browser page does, some sending no RFC 6464 level. It measures what each
//! one receives, judges every room as well as the whole, and searches the
//! largest room (or the largest total in rooms of a size) that meets a
//! quality bar. `tutti load` and `tutti capacity` are its front ends.
//!
//! ## Data flow
//!
//! ```text
//! joiner (caller's thread)   rooms split and created (POST /v1/rooms, `<room>-<i>`); joins round-robin
//!                            over the rooms; per client: UDP socket on 127.0.0.1:0 ─► ClientPeer offer
//!                            ─► WebSocket /v1/rooms/{room}/ws?token= (blocking, bounded): `join {sdp}`
//!                               ─► `answer {id, sdp}` (the `room` snapshot first, counted)
//!                            (or with --no-ws: POST /v1/rooms/{room}/participants ─► answer)
//!                            ─► peer + sockets handed to load-(i mod T)
//! load-N threads (T)         asleep to the next 1 ms slot, then epoll (mio, no wait) over their
//!                            connecting clients' UDP sockets and (non-blocking) WebSockets:
//!                            messages and bytes counted, pings answered; a connected client's
//!                            UDP socket is read in its send slot; per datagram (kernel stamp):
//!                            ClientPeer (ICE, DTLS, SRTP) ─► RTP seq/ts ─► loss, jitter, drift
//!                            probe clients only: Opus decode ─► marker detector
//!                            every 1 ms slot (absolute schedule): 1/20 of the clients send
//!                            one pre-encoded Opus frame with its RFC 6464 level (none for
//!                            the --no-level-share clients)
//! controller (caller)        every --sint: snapshots of all clients ─► summary (overall, per
//!                            room, the worst room, WebSocket traffic, hand-overs); at the end,
//!                            the report (text, JSON) and the validity verdict
//! rejoin-K threads (4)       a client whose call moves (its room's WebSocket says `moved`: a
//!                            cluster node drains; or its node closes the call) is rejoined
//!                            there with the same identity (the `moved` ticket redeemed as the
//!                            page does, else through a known node, 307 followed), bounded
//!                            tries with backoff; its thread swaps the new peer, sockets and
//!                            WebSocket in place of the old (see `handover`)
//! ```
//!
//! What the clients send is encoded once at start: a speech clip (a WAV, or
//! a synthesized speech-like signal band-limited below 1.6 kHz), Opus
//! silence, and one marker burst per probe. Talkers follow the ITU-T P.59
//! on/off model (talkspurts 854 ms, pauses 456 ms on average); the others
//! send Opus silence at level 127 every 20 ms (or nothing with DTX). Each
//! client sends in its own 1 ms slot of the 20 ms frame, so a thread's
//! packets are spread over the frame as real clients' are.
//!
//! ## The figures (definitions in docs/load-testing.md, "Quality definitions")
//!
//! - **loss**: gap-based over the RTP sequence (u16, wrap-counted) with a
//!   64-packet reorder window: a late packet inside it fills its gap.
//! - **jitter**: RFC 3550 §6.4.1, `J += (|D| − J)/16`, in ms, over the
//!   kernel's arrival stamps (`SO_TIMESTAMPNS`; see `arrival`), so a worker
//!   busy with other clients does not add its own delay. Mouth-to-ear and
//!   drift take the same arrival (ICE-TCP clients: the read time).
//! - **drift delay**: wall time since the first packet − RTP timestamp
//!   progress: how far the stream fell behind real time.
//! - **mouth-to-ear latency**: a few probe talkers send a 100 ms tone burst
//!   (each its own frequency, 2 kHz and up, RFC 6464 level ≈ 4 so the
//!   mixer's top-K selection takes it at once) every marker period; probe
//!   listeners decode their mix and find the burst's onset with Goertzel
//!   filters. Latency = onset heard (packet arrival + onset position in the
//!   decoded frame) − marker frame sent. It covers the network both ways,
//!   the server's jitter buffer, tick wait, decode, mix and encode, and both
//!   codec look-aheads; not a real client's capture framing or playout
//!   buffer. A marker not heard within 1.5 s counts as missed (infinitely late).
//! - **self-echo**: a probe talker decodes its own mix; hearing its own
//!   frequency above −25 dB re its marker means N-minus-self failed.
//! - **MOS**: the simplified E-model of docs/load-testing.md per client, with one-way
//!   delay = the run's median mouth-to-ear + the client's positive drift,
//!   its jitter and its loss ([`mos`] documents the units).
//! - **fairness**: standard deviation of frames received per client;
//!   **perfect delivery**: share of clients with no loss whose stream covered
//!   every 20 ms frame a clock owed them (3 frames of slack): frames received,
//!   or skipped by the server's DTX with the RTP timestamps showing it (a
//!   quiet stretch at the window's edges counts up to one DTX interval)
//!
//! - **hand-over**: moves, rejoins, lost calls (a client whose every rejoin
//!   try failed), and the audio gap per move: from the last packet received
//!   on the old call to the first on the new one. A move starts a new
//!   stream (SSRC, sequence, timestamps): loss, jitter and drift start their
//!   baselines again, so the move itself counts as neither loss nor jitter.
//!
//! Figures cover the measurement window: from `warmup` after the last join
//! to the end (before that, summaries show everything since connect).
//!
//! ## Validity
//!
//! The generator measures itself: its CPU (/proc/self, per `load-N`
//! thread) and how late its 1 ms send slots fire. A run is **invalid**
//! (the generator, not the server, may have limited it) when the p99 slot
//! lateness exceeds 10 ms or a `load-N` thread was more than 90 % busy.
//! A machine more than 95 % busy is reported as a warning.
//!
//! ## Capacity
//!
//! [`search`] ramps N (doubling) with short trials, bisects between the last
//! pass and the first failure, then confirms with a full-length trial
//! (stepping down if it fails). It is generic over a [`TrialRunner`]; the
//! real one ([`LoadRunner`]) runs each trial in fresh rooms (the trial's N
//! split by the run's layout; `--room-size S`: ⌈N/S⌉ rooms of S). With
//! several rooms the worst room must meet the MOS and loss bars too. Server
//! CPU per participant per tick = server cores × 20 000 µs / N.

//! ## Modules (imports go down the list)
//!
//! `cli` (the front ends) → `capacity` (the search) → `generator` (runs the
//! clients) → `handover` (rejoins moved clients) → `events` (a client's room WebSocket) and `report` (scores
//! them) → `rooms` (the fleet: split, join order, roles per room) → `model`
//! (what a run is and what it observed: configuration, roles, snapshots) →
//! `quality`, `marker`, `audio`, `talk`, `cpu` (the measuring parts). HTTP and the test client
//! come from `tutti-client`; this crate does not link the server.

mod arrival;
mod audio;
mod capacity;
mod cli;
mod cpu;
mod error;
mod events;
mod generator;
mod handover;
mod marker;
mod model;
mod nodes;
mod quality;
mod report;
pub mod rooms;
mod talk;
pub mod webhooks;

pub use audio::{Material, read_wav, speech_like};
pub use capacity::{CapacityResult, Phase, SearchPolicy, Slo, Trial, TrialFigures, TrialRunner, search};
pub use cli::{CapacityArgs, LoadArgs, LoadRunner, SloArgs, Verdict, run_capacity, run_load};
pub use cpu::CpuSource;
pub use error::LoadError;
pub use generator::{Progress, run};
pub use marker::{MarkerDetector, Onset, marker_freq, marker_pcm};
pub use model::{ClientSnapshot, ClientState, LoadConfig, Role, RoomLayout, SilenceMode, SizeShare, WsFigures};
pub use model::{JoinTimes, NodeSummary};
pub use nodes::{listening_pid, nodes_text};
pub use quality::{DriftTracker, JitterEstimator, LossTracker, mos};
pub use report::{ClientReport, HandoverSummary, LoadReport, NodeLatency, RoomSummary, Summary, WsSummary};
pub use rooms::parse_room_sizes;
pub use talk::{Rng, TalkModel};
