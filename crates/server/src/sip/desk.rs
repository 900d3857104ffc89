//! The PIN desk: the PINs of `[sip] pins`, the spoken prompts (built in,
//! or an operator's `[sip] prompts` directory, read at start) and the calls
//! entering a PIN now, with where their keys go (`pin` drives each call).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::SipConfig;
use crate::room::playback::Clip;
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
pub(super) struct Prompts {
    pub(super) enter: Arc<Clip>,
    pub(super) invalid: Arc<Clip>,
    pub(super) joining: Arc<Clip>,
    pub(super) goodbye: Arc<Clip>,
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
    pub(super) pins: Vec<(String, String)>,
    pub(super) prompts: Prompts,
    pub(super) tries: u32,
    pub(super) digit_timeout: Duration,
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

    /// Lists lobby leg `leg` of dialog `dialog`: where its keys will come;
    /// `None` when too many calls are entering a PIN.
    pub(super) fn wait_for(&self, leg: u64, dialog: String) -> Option<mpsc::Receiver<char>> {
        let mut waiting = lock(&self.waiting);
        if waiting.len() >= MAX_WAITING {
            return None;
        }
        let (keys, pressed) = mpsc::channel(KEYS_QUEUE);
        waiting.insert(leg, Waiting { dialog, keys });
        Some(pressed)
    }

    /// Lobby leg `leg` is no longer entering a PIN.
    pub(super) fn forget(&self, leg: u64) {
        lock(&self.waiting).remove(&leg);
    }

    /// The lobby leg of dialog `dialog`, if that call is entering its PIN.
    pub(super) fn leg_of(&self, dialog: &str) -> Option<u64> {
        lock(&self.waiting).iter().find(|(_, w)| w.dialog == dialog).map(|(id, _)| *id)
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
