//! The tick: phase A (per shard), the selection, the mode, the decodes of
//! the speakers and the K+1 encodes (listeners' mix and each speaker's
//! N-minus-self), the whisper pass, and the tick's report.

use std::sync::Arc;

use rayon::prelude::*;

use super::channel::ChannelId;
use super::delivery::{Delivery, MixMode, Render, Selected, Stream};
use super::report::{ActiveSpeaker, TickReport};
use super::shard::Observed;
use super::{PRIME_FRAMES, Room};
use crate::codec::Encoder;
use crate::config::DTX_INTERVAL_TICKS;
use crate::dsp::{FRAME_SAMPLES, Pcm, accumulate};
use crate::jitter::Playout;
use crate::probe::inspect;
use crate::spatial::{Stereo, accumulate_scaled, mono_gain};
use crate::{MixPool, ParticipantId};

/// After a switch from forwarded frames to the mix, the listener encoder
/// codes this many frames without inter-frame prediction
/// (`OPUS_SET_PREDICTION_DISABLED`): the listeners' decoders hold the
/// forwarded stream's history, which the mix's prediction must not lean on.
const INDEPENDENT_FRAMES_AFTER_SWITCH: u8 = 2;

impl Room {
    /// Runs one 20 ms tick on `pool`. `tick` counts 20 ms periods and must
    /// grow by one each call (a skipped number is a tick that overran and was
    /// not run; a repeated or older one is ignored and reported empty).
    pub fn tick(&mut self, pool: &MixPool, tick: u64) -> TickReport {
        pool.install(|| self.run_tick(tick, true))
    }

    /// Runs one tick as [`Room::tick`] does, but all of it on the calling
    /// thread: no pool, no hand-off. For ticks small enough (a few ms) that
    /// waking pool threads, and their idle spinning after, costs more CPU
    /// than splitting the work saves.
    pub fn tick_inline(&mut self, tick: u64) -> TickReport {
        self.run_tick(tick, false)
    }

    /// The tick itself: with `parallel`, shards and encodes are split on
    /// whatever rayon pool the caller is in; without, all on this thread.
    pub(crate) fn run_tick(&mut self, tick: u64, parallel: bool) -> TickReport {
        if self.last_tick.is_some_and(|last| tick <= last) {
            return TickReport {
                tick,
                speakers: self.no_speakers.clone(),
                events: Vec::new(),
                decodes: 0,
                encodes: 0,
                whisper_encodes: 0,
                participants: self.len() - self.sources - self.remotes,
                lost: 0,
                concealed: 0,
                late: 0,
                mode: self.mode,
                forwarded: 0,
                dtx: 0,
                primes: 0,
                shed_level: self.shed,
                suppressed: 0,
                normalised: 0,
                remote_decodes: 0,
            };
        }
        self.last_tick = Some(tick);
        let k = self.speaker_limit();

        // A: per participant — pop, level, activity; per shard — top-K
        // candidates. Current speakers are decoded here, in parallel, when
        // the room is mixing (they are almost always selected again).
        let challenge = self.challenge_floor(k);
        let cfg = &self.cfg;
        let decode_speakers = !matches!(self.mode, MixMode::Forward(_));
        let keep_onsets = self.external.is_some() && self.fill;
        let phase_a = if let [shard] = &mut self.shards[..] {
            // One shard (every room up to `shard_size`): no pool round trip.
            shard.observe(cfg, tick, k, decode_speakers, challenge, keep_onsets)
        } else if !parallel {
            self.shards
                .iter_mut()
                .map(|shard| shard.observe(cfg, tick, k, decode_speakers, challenge, keep_onsets))
                .fold(Observed::default(), Observed::sum)
        } else {
            self.shards
                .par_iter_mut()
                .map(|shard| shard.observe(cfg, tick, k, decode_speakers, challenge, keep_onsets))
                .reduce(Observed::default, Observed::sum)
        };

        // B: merge the shards' candidates with the current speakers (O(shards·K)).
        self.select(k);
        if self.cfg.spatial {
            self.place_speakers();
        }
        // Whisper channels: each selected speaker's channel, and which
        // channels have a selected whisperer (their members hear a mix of
        // their own). The room's mode is chosen on the room's speakers only.
        let chan: Vec<Option<(ChannelId, bool)>> = if self.channels.is_empty() {
            Vec::new()
        } else {
            self.selected.iter().map(|sel| self.participant(sel.id).ok().and_then(|p| p.channel)).collect()
        };
        let whispers = |n: usize| chan.get(n).is_some_and(|c| c.is_some_and(|(_, w)| w));
        let mut whisper_listeners = 0;
        for ch in &mut self.channels {
            ch.active = chan.contains(&Some((ch.id, true)));
            if ch.active {
                let selected_in = chan.iter().filter(|c| c.is_some_and(|(id, _)| id == ch.id)).count();
                whisper_listeners += ch.members.saturating_sub(selected_in);
            }
        }
        let active = |c: &Option<(ChannelId, bool)>| {
            c.is_some_and(|(id, _)| self.channels.iter().any(|ch| ch.id == id && ch.active))
        };
        // Selected speakers served by the whisper pass (their channel is active).
        let in_active: Vec<bool> = chan.iter().map(active).collect();
        let handled = |n: usize| in_active.get(n).copied().unwrap_or(false);
        let room_speakers: Vec<ParticipantId> =
            self.selected.iter().enumerate().filter(|(n, _)| !whispers(*n)).map(|(_, sel)| sel.id).collect();
        let mode = self.next_mode(&room_speakers);
        let (mut decodes, mut concealed, mut encodes, mut primes) = (phase_a.decodes, phase_a.concealed, 0, 0);
        let mut remote_decodes = phase_a.remote_decodes;
        let (mut forwarded, mut dtx) = (0, 0);
        let dtx_due = tick.is_multiple_of(DTX_INTERVAL_TICKS) || self.mode != mode;
        let dtx_out = if dtx_due { Delivery::Dtx(self.dtx_frame.clone()) } else { Delivery::Nothing };
        // Those sent the listeners' delivery: neither a source, a remote nor selected.
        let selected_hearing = self.selected.iter().filter(|s| !s.source).count();
        let others = (self.len() - self.sources - self.remotes).saturating_sub(selected_hearing + whisper_listeners);

        let mut rendered_binaural = false;
        match mode {
            MixMode::Silent => {
                dtx += if dtx_due { others } else { 0 };
                self.listener_out = dtx_out.clone();
                self.recent.clear();
            }
            MixMode::Forward(id) => {
                let (s, i) = self.index[&id];
                let p = &mut self.shards[s].members[i];
                // Only a valid 20 ms frame is forwarded; a missing one is a
                // gap the listeners' decoders conceal, an invalid one is
                // counted as a decode error and heard as that gap.
                let frame = match &p.pending {
                    Playout::Frame(f) if inspect(&f.payload).is_some_and(|info| info.samples() == 960) => {
                        Some(f.payload.clone())
                    }
                    Playout::Frame(_) => {
                        p.decode_errors += 1;
                        None
                    }
                    _ => None,
                };
                if self.mode != mode {
                    self.recent.clear();
                }
                if self.recent.len() == PRIME_FRAMES {
                    self.recent.remove(0);
                }
                match frame {
                    Some(payload) => {
                        self.recent.push(payload.clone());
                        forwarded = others;
                        self.listener_out = Delivery::Forward { from: id, payload };
                    }
                    None => {
                        self.recent.clear();
                        self.listener_out = Delivery::Nothing;
                    }
                }
                if let Some(sel) = self.selected.iter_mut().find(|sel| sel.id == id) {
                    if sel.source {
                        sel.out = Delivery::Nothing;
                    } else {
                        dtx += usize::from(dtx_due);
                        sel.out = dtx_out.clone();
                        // Not encoded: a whisper pass that encodes it later starts afresh.
                        sel.idle = true;
                    }
                }
            }
            MixMode::Mix => {
                if self.mode != MixMode::Mix {
                    // The listener and speaker encoders sat idle: their
                    // look-ahead holds stale audio. Start them afresh, and
                    // after forwarded frames continue what listeners heard.
                    self.listener.encoder.reset();
                    if let Some(stereo) = &mut self.stereo_listener {
                        stereo.encoder.reset();
                    }
                    for sel in &mut self.selected {
                        sel.stream.encoder.reset();
                    }
                    if let MixMode::Forward(id) = self.mode
                        && self.cfg.prime_on_switch
                    {
                        primes = self.prime(id, tick);
                        decodes += primes;
                        if self.participant(id).is_ok_and(|p| p.remote) {
                            remote_decodes += primes;
                        }
                        encodes += primes;
                        self.independent_left = INDEPENDENT_FRAMES_AFTER_SWITCH;
                        self.listener.encoder.set_prediction_disabled(true);
                    }
                }
                self.recent.clear();
                // C: newly selected speakers' frames (and every speaker's
                // after forwarding; a switch is rare).
                for sel in &self.selected {
                    let (s, i) = self.index[&sel.id];
                    let p = &mut self.shards[s].members[i];
                    let lost = matches!(p.pending, Playout::Lost { .. });
                    let decoded = p.decode_pending(tick, &self.cfg).is_some();
                    decodes += usize::from(decoded);
                    remote_decodes += usize::from(decoded && p.remote);
                    concealed += u64::from(lost && decoded);
                }

                // D: total = Σ speakers; K+1 limited, encoded streams, in parallel.
                // Whisperers are not in the room's total, and the speakers
                // whose channel is active are encoded by the whisper pass.
                let spatial = self.cfg.spatial;
                let stereo_on = self.renders_stereo();
                if stereo_on && self.stereo_listener.is_none() {
                    // The first tick with stereo listeners; libopus out of
                    // memory leaves them the mono render, as listeners.
                    self.stereo_listener = Encoder::stereo(&self.encoder_config())
                        .ok()
                        .map(|e| Stream::new(e, self.listener.limiter.clone()));
                }
                let mut total = [0.0f32; FRAME_SAMPLES];
                let mut stereo = stereo_on.then(Stereo::default);
                // A binaural render sums the voices per seat, then filters each seat.
                let mut binaural =
                    (stereo_on && self.cfg.binaural).then(|| &mut **self.binaural.get_or_insert_with(Box::default));
                if let Some(binaural) = &mut binaural {
                    binaural.begin();
                }
                let mut own: Vec<(Option<&Pcm>, bool)> = Vec::with_capacity(self.selected.len());
                for (n, sel) in self.selected.iter().enumerate() {
                    let (s, i) = self.index[&sel.id];
                    let pcm =
                        self.shards[s].members[i].dec.as_ref().filter(|d| d.decoded_at == Some(tick)).map(|d| &*d.pcm);
                    if let Some(pcm) = pcm
                        && !whispers(n)
                    {
                        let seat = sel.seat.unwrap_or(0);
                        match (&mut stereo, &mut binaural) {
                            (Some(_), Some(binaural)) => binaural.add(pcm, seat),
                            (Some(stereo), None) => stereo.add(pcm, seat),
                            (None, _) if spatial => accumulate_scaled(&mut total, pcm, mono_gain(seat)),
                            (None, _) => accumulate(&mut total, pcm),
                        }
                    }
                    own.push((pcm, handled(n)));
                }
                if let (Some(stereo), Some(binaural)) = (&mut stereo, &mut binaural) {
                    binaural.render(stereo);
                }
                // The mono render is the stereo one's downmix (one pass, not K).
                if let Some(stereo) = &stereo {
                    stereo.downmix(&mut total);
                }
                rendered_binaural = binaural.is_some();
                let render = Render { mono: &total, stereo: stereo.as_ref(), binaural: binaural.as_deref() };
                let listener = &mut self.listener;
                let stereo_listener = if stereo_on { self.stereo_listener.as_mut() } else { None };
                let stereo_encoded = stereo_listener.is_some();
                let selected = &mut self.selected;
                // A lone mixed speaker (their voice processed, or pass-through
                // off) hears nobody: the DTX cadence, not an encode of silence
                // (with `dtx` off, encoded silence as before).
                let alone = room_speakers.len() == 1 && self.cfg.dtx;
                let dtx_out = &dtx_out;
                let render = &render;
                let speaker = |(sel, (own, handled)): (&mut Selected, &(Option<&Pcm>, bool))| {
                    if *handled {
                        return;
                    }
                    if sel.source {
                        // Sent nothing: no stream to encode.
                        sel.idle = true;
                        sel.out = Delivery::Nothing;
                        return;
                    }
                    if alone {
                        sel.idle = true;
                        sel.out = dtx_out.clone();
                        return;
                    }
                    if std::mem::take(&mut sel.idle) {
                        // Its last input is stale: start afresh, as a new speaker's does.
                        sel.stream.encoder.reset();
                    }
                    if spatial {
                        let seat = sel.seat.unwrap_or(0);
                        sel.stream.encode_render(render, own.map(|own| (own, seat)));
                    } else {
                        sel.stream.encode(&total, *own);
                    }
                    sel.out = Delivery::Mix(sel.stream.payload.clone());
                };
                // The mono listeners hear the stereo listeners' render
                // averaged, limiter included: the same level, whatever the seats.
                let listeners = || match (stereo_listener, render.stereo) {
                    (Some(stream), Some(stereo)) => {
                        let limited = stream.encode_stereo_listeners(stereo);
                        let mut mono = [0.0f32; FRAME_SAMPLES];
                        limited.downmix(&mut mono);
                        listener.encode(&mono, None);
                    }
                    _ => listener.encode(&total, None),
                };
                if parallel {
                    rayon::join(listeners, || selected.par_iter_mut().zip(own.par_iter()).for_each(speaker));
                } else {
                    listeners();
                    selected.iter_mut().zip(own.iter()).for_each(speaker);
                }
                drop(own);
                self.listener_out = Delivery::Mix(self.listener.payload.clone());
                self.stereo_out = match (&self.stereo_listener, stereo_encoded) {
                    (Some(stereo), true) => Delivery::Mix(stereo.payload.clone()),
                    _ => self.listener_out.clone(),
                };
                if self.independent_left > 0 {
                    self.independent_left -= 1;
                    if self.independent_left == 0 {
                        self.listener.encoder.set_prediction_disabled(false);
                    }
                }
                let unhandled = self.selected.iter().enumerate().filter(|(n, sel)| !sel.source && !handled(*n)).count();
                encodes += usize::from(stereo_encoded);
                if alone {
                    encodes += 1;
                    dtx += usize::from(dtx_due && unhandled == 1);
                } else {
                    encodes += 1 + unhandled;
                }
            }
        }
        if mode != MixMode::Mix {
            self.stereo_out = self.listener_out.clone();
        }
        if !rendered_binaural && let Some(binaural) = &mut self.binaural {
            binaural.quiet();
        }
        self.mode = mode;
        let mut whisper_encodes = 0;
        if self.channels.iter().any(|ch| ch.active) {
            let w = self.whisper(tick, &chan, &dtx_out);
            decodes += w.decodes;
            remote_decodes += w.remote_decodes;
            concealed += w.concealed;
            encodes += w.encodes + w.channels;
            dtx += w.dtx;
            whisper_encodes = w.channels;
        }
        for ch in &mut self.channels {
            ch.idle |= !ch.active;
        }

        let spatial = self.cfg.spatial;
        let speakers: Arc<[ActiveSpeaker]> = if self.selected.is_empty() {
            self.no_speakers.clone()
        } else {
            self.selected
                .iter()
                .map(|sel| {
                    let (s, i) = self.index[&sel.id];
                    ActiveSpeaker {
                        id: sel.id,
                        level: self.shards[s].members[i].level,
                        seat: sel.seat.filter(|_| spatial),
                    }
                })
                .collect()
        };

        let (mut suppressed, mut normalised) = (0, 0);
        if mode == MixMode::Mix {
            for sel in &self.selected {
                if let Ok(Some(v)) = self.participant(sel.id).map(|p| p.voice.as_deref()) {
                    suppressed += usize::from(v.suppressed_at == Some(tick));
                    normalised += usize::from(v.normalised_at == Some(tick));
                }
            }
        }
        let events = self.shards.iter_mut().flat_map(|s| s.events.drain(..)).collect();
        let late = std::mem::take(&mut self.late);
        TickReport {
            tick,
            speakers,
            events,
            decodes,
            encodes,
            whisper_encodes,
            participants: self.len() - self.sources - self.remotes,
            lost: phase_a.lost,
            concealed,
            late,
            mode,
            forwarded,
            dtx,
            primes,
            shed_level: self.shed,
            suppressed,
            normalised,
            remote_decodes,
        }
    }
}
