//! Dispatch by PIN: a call on a trunk with `pin` (or on `[sip] trusted`
//! with `[sip] pin`) is answered at once, without a room, and asked for
//! its PIN by spoken prompts played to it alone; the right PIN joins the
//! room `[sip] pins` gives it, a wrong one (or none in time) is told so,
//! and after the last try the caller hears goodbye and gets a BYE. No
//! participant exists until the PIN is right.
//!
//! ```text
//! INVITE (pin trunk) ─► offer checked as a join's ─► a lobby leg on the rtp-in thread ─► 200 OK
//!   ─► "enter the PIN" ─► keys (RFC 4733 on the leg, or INFO) ─► PinEntry ─► room_for
//!        right ─► "joining" ─► the leg leaves the lobby ─► the ONE join (as `calls`) ─► the call goes on
//!        wrong ─► "not valid" ─► again, `pin_attempts` tries ─► "goodbye" ─► BYE
//! ```
//!
//! The prompts are Ogg/Opus clips read at start (built in, or `[sip] prompts`)
//! and played by the leg's thread; this side only waits (tokio timers).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rsipstack::dialog::dialog::DialogState;
use rsipstack::dialog::invite_dialog::InviteDialog;
use rsipstack::sip::{Header, StatusCode, headers::ContentType};
use tokio::sync::mpsc;
use tutti_rtc::PeerId;

use super::calls::{join_request, refuse};
use super::endpoint::{Call, Edge};
use super::pins::{PinEntry, Step, room_for};
use super::status;
use crate::auth::Grant;
use crate::config::SipConfig;
use crate::media::LobbyCommand;
use crate::room::playback::Clip;
use crate::session::join::{Joined, Offer};
use crate::sync::lock;

/// Keys queued per caller (more are dropped: nobody types faster).
const KEYS_QUEUE: usize = 32;
/// Calls entering a PIN at once, at most; more get 503.
const MAX_WAITING: usize = 1000;
/// Largest prompt file.
const MAX_PROMPT_BYTES: u64 = 2 << 20;

/// The built-in prompts (`crates/server/prompts`, made with espeak-ng: see its README).
const BUILT_IN: [(&str, &[u8]); 4] = [
    ("enter", include_bytes!("../../prompts/enter.opus")),
    ("invalid", include_bytes!("../../prompts/invalid.opus")),
    ("joining", include_bytes!("../../prompts/joining.opus")),
    ("goodbye", include_bytes!("../../prompts/goodbye.opus")),
];

/// The prompts, in the order of [`BUILT_IN`].
struct Prompts {
    enter: Arc<Clip>,
    invalid: Arc<Clip>,
    joining: Arc<Clip>,
    goodbye: Arc<Clip>,
}

impl Prompts {
    /// Each prompt from `dir` (`<name>.opus`) when it has it, else built in.
    fn load(dir: &str) -> Result<Self, String> {
        let mut clips = Vec::with_capacity(BUILT_IN.len());
        for (name, built_in) in BUILT_IN {
            let file = std::path::Path::new(dir).join(format!("{name}.opus"));
            let clip = if !dir.is_empty() && file.is_file() {
                let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
                if size > MAX_PROMPT_BYTES {
                    return Err(format!("{}: larger than {} MiB", file.display(), MAX_PROMPT_BYTES >> 20));
                }
                let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
                tracing::info!(prompt = name, file = %file.display(), "SIP prompt replaced");
                Clip::parse(name, &bytes).map_err(|e| format!("{}: {e}", file.display()))?
            } else {
                // Built in, made by the project: they parse (the unit test says so).
                Clip::parse(name, built_in).map_err(|e| format!("built-in prompt {name}: {e}"))?
            };
            clips.push(Arc::new(clip));
        }
        let mut clips = clips.into_iter();
        let mut next = || clips.next().ok_or("a prompt is missing");
        Ok(Self { enter: next()?, invalid: next()?, joining: next()?, goodbye: next()? })
    }
}

/// A call entering its PIN: its dialog, and where its keys go.
struct Waiting {
    dialog: String,
    keys: mpsc::Sender<char>,
}

/// The PINs, the prompts and the calls entering a PIN.
pub(super) struct PinDesk {
    pins: Vec<(String, String)>,
    prompts: Prompts,
    tries: u32,
    digit_timeout: Duration,
    /// By lobby leg id.
    waiting: Mutex<HashMap<u64, Waiting>>,
}

impl PinDesk {
    /// From `[sip]` (validated at load); a prompt file that is not a
    /// readable Ogg/Opus file of 20 ms frames is an error (named).
    pub(super) fn new(cfg: &SipConfig) -> Result<Self, String> {
        Ok(Self {
            pins: cfg.pin_map().map_err(|m| format!("sip.pins: {m}"))?,
            prompts: Prompts::load(cfg.prompts.trim()).map_err(|m| format!("sip.prompts: {m}"))?,
            tries: cfg.pin_attempts,
            digit_timeout: Duration::from_secs(cfg.pin_digit_timeout_seconds),
            waiting: Mutex::default(),
        })
    }

    /// Lobby leg `id` pressed `key`: true when it is one (the key is its PIN's).
    pub(super) fn key(&self, id: u64, key: char) -> bool {
        let waiting = lock(&self.waiting);
        let Some(w) = waiting.get(&id) else { return false };
        if w.keys.try_send(key).is_err() {
            tracing::debug!(leg = id, "PIN key dropped: its queue is full");
        }
        true
    }

    /// The lobby leg of dialog `dialog`, if that call is entering its PIN.
    pub(super) fn leg_of(&self, dialog: &str) -> Option<u64> {
        lock(&self.waiting).iter().find(|(_, w)| w.dialog == dialog).map(|(id, _)| *id)
    }
}

/// Who called, for the join once the PIN is right.
pub(super) struct Caller {
    pub(super) sdp: String,
    pub(super) source: SocketAddr,
    pub(super) identity: String,
    pub(super) name: String,
    pub(super) attributes: crate::attributes::Attributes,
    pub(super) trunk: String,
}

/// Takes the lobby leg out (of the desk and the rtp-in thread) however the call goes.
struct Leaves<'a> {
    edge: &'a Edge,
    leg: PeerId,
}

impl Drop for Leaves<'_> {
    fn drop(&mut self) {
        lock(&self.edge.pin.waiting).remove(&self.leg.0);
        self.edge.session.media.lobby(LobbyCommand::Remove(self.leg));
    }
}

impl Edge {
    /// A call that enters a PIN: answered, prompted, then joined or sent away.
    pub(super) async fn pin_call(self: Arc<Self>, dialog: InviteDialog, caller: Caller) {
        let (offer, local) = match self.session.lobby_offer(&caller.sdp, caller.source.ip()) {
            Ok(o) => o,
            Err(r) => {
                crate::metrics::sip_refused(if r.status == axum::http::StatusCode::BAD_REQUEST {
                    "media"
                } else {
                    "join"
                });
                return refuse(&dialog, status::for_refusal(&r), &r.message);
            }
        };
        let leg = self.session.media.reserve_id();
        let (keys, mut pressed) = mpsc::channel(KEYS_QUEUE);
        {
            let mut waiting = lock(&self.pin.waiting);
            if waiting.len() >= MAX_WAITING {
                drop(waiting);
                return refuse(&dialog, StatusCode::ServiceUnavailable, "too many calls are entering a PIN");
            }
            waiting.insert(leg.0, Waiting { dialog: dialog.id().to_string(), keys });
        }
        let leaves = Leaves { edge: &self, leg };
        if !self.session.media.lobby(LobbyCommand::Add(leg, offer)) {
            return refuse(&dialog, StatusCode::ServiceUnavailable, "the plain RTP thread is gone");
        }
        let answer = offer.answer(local, leg.0);
        if matches!(dialog.state(), DialogState::Terminated(..)) {
            return;
        }
        let headers = vec![Header::ContentType(ContentType::new("application/sdp"))];
        if let Err(e) = dialog.accept(Some(headers), Some(answer.clone().into_bytes())) {
            tracing::info!(error = %e, "SIP answer not sent");
            return;
        }
        tracing::info!(leg = leg.0, trunk = %caller.trunk, identity = %caller.identity, "SIP call answered: PIN entry");
        let ended = dialog.cancel_token().clone();
        let room = tokio::select! {
            room = self.enter_pin(leg, &mut pressed) => room,
            _ = ended.cancelled() => return,
        };
        let Some(room) = room else {
            crate::metrics::sip_refused("pin");
            tracing::info!(leg = leg.0, identity = %caller.identity, "no right PIN: BYE");
            dialog.bye().await.ok();
            return;
        };
        // Out of the lobby before the join: the leg's address becomes the participant's.
        drop(leaves);
        self.join_by_pin(dialog, caller, room, answer).await;
    }

    /// Prompts and reads the PIN until it is right (its room) or the tries
    /// run out (`None`, goodbye said).
    async fn enter_pin(&self, leg: PeerId, pressed: &mut mpsc::Receiver<char>) -> Option<String> {
        let desk = &self.pin;
        let mut entry = PinEntry::new(desk.tries);
        self.say(leg, &desk.prompts.enter).await;
        loop {
            let step = match tokio::time::timeout(desk.digit_timeout, pressed.recv()).await {
                Ok(Some(key)) => entry.key(key),
                Ok(None) => return None,
                // No key in time: the try ends, unfinished.
                Err(_) => Step::Check(None),
            };
            let Step::Check(pin) = step else { continue };
            if let Some(room) = pin.as_deref().and_then(|p| room_for(&desk.pins, p)) {
                self.say(leg, &desk.prompts.joining).await;
                return Some(room.to_owned());
            }
            tracing::info!(leg = leg.0, "SIP caller entered a wrong PIN (or none in time)");
            self.say(leg, &desk.prompts.invalid).await;
            if !entry.failed() {
                self.say(leg, &desk.prompts.goodbye).await;
                return None;
            }
            self.say(leg, &desk.prompts.enter).await;
        }
    }

    /// Plays `prompt` to lobby leg `leg` and waits until it is over.
    async fn say(&self, leg: PeerId, prompt: &Arc<Clip>) {
        self.session.media.lobby(LobbyCommand::Play(leg, prompt.clone()));
        let lasts = Duration::from_secs_f64(prompt.duration_seconds()) + Duration::from_millis(100);
        tokio::time::sleep(lasts).await;
    }

    /// The PIN was right: the call joins `room` through the one join; the
    /// call keeps the answer it was given (the same address and codec). A
    /// refused join ends the call (BYE): it was answered already.
    async fn join_by_pin(&self, dialog: InviteDialog, caller: Caller, room: String, answer: String) {
        let Caller { sdp, source, identity, name, attributes, trunk } = caller;
        let grant = Grant { attributes, ..Grant::participant(room.as_str(), identity.as_str()) };
        let joined = self.session.join(join_request(&room, &grant, source), || Ok(Offer { sdp, name })).await;
        let id = match joined {
            Ok(Joined::Here { id, .. }) => id,
            Ok(Joined::Elsewhere(_)) => {
                tracing::info!(%room, "SIP PIN call: the room is on another node: BYE");
                dialog.bye().await.ok();
                return;
            }
            Err(r) => {
                crate::metrics::sip_refused("join");
                tracing::info!(%room, reason = %r.message, "SIP PIN call: join refused: BYE");
                dialog.bye().await.ok();
                return;
            }
        };
        let Ok(state) = self.session.rooms.get(&room) else { return };
        let events = state.subscribe();
        lock(&self.calls).insert(dialog.id().to_string(), Call { room: state.clone(), id, answer });
        if matches!(dialog.state(), DialogState::Terminated(..)) {
            self.hang_up(&dialog.id());
            return;
        }
        tracing::info!(%room, participant = id, %identity, %trunk, "SIP caller joined by PIN");
        self.watch(state, events, id, dialog).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_prompts_are_clips_and_a_directory_replaces_them() {
        let built_in = Prompts::load("").expect("the built-in prompts parse");
        for p in [&built_in.enter, &built_in.invalid, &built_in.joining, &built_in.goodbye] {
            assert!((0.3..8.0).contains(&p.duration_seconds()), "{}: {}", p.name, p.duration_seconds());
        }
        let dir = std::env::temp_dir().join(format!("tutti-prompts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        std::fs::write(dir.join("goodbye.opus"), crate::room::playback::tone_file(440.0, 10)).expect("write");
        let mixed = Prompts::load(dir.to_str().expect("utf-8")).expect("loads");
        assert_eq!(mixed.goodbye.len(), 10, "the directory's goodbye");
        assert_eq!(mixed.enter.len(), built_in.enter.len(), "the others built in");
        std::fs::write(dir.join("enter.opus"), b"not ogg").expect("write");
        let err = Prompts::load(dir.to_str().expect("utf-8")).err().expect("a bad file is refused");
        assert!(err.contains("enter.opus") && err.contains("Ogg"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
