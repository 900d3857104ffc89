//! What the mixer does to the speakers' voices: noise suppression and
//! loudness normalisation, per room and per participant, switched at run
//! time (`PATCH /v1/rooms/{room}` and `PATCH …/participants/{id}`, admin
//! only). The defaults come from the config (`room.noise_suppression`,
//! `room.loudness`); a plain RTP participant is marked a raw source at
//! join, so `auto` suppresses its noise and leaves a browser's alone.

use serde::Serialize;

use tutti_mix::{NoiseSuppression, ParticipantId, VoiceStatus};

use super::{Room, RoomError, Rooms};
use crate::sync::lock;

/// A room's voice settings, as the API shows them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct RoomVoice {
    /// "auto", "on" or "off".
    pub(crate) noise_suppression: &'static str,
    /// Loudness normalisation on for the room.
    pub(crate) loudness: bool,
}

/// A participant's voice processing, as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct ParticipantVoice {
    /// Noise suppressed while they speak (their setting, else the room's).
    pub(crate) noise_suppression: bool,
    /// Loudness normalised while they speak (their setting, else the room's).
    pub(crate) loudness: bool,
    /// The normaliser's current gain, dB.
    pub(crate) loudness_gain_db: f32,
}

impl From<VoiceStatus> for ParticipantVoice {
    fn from(v: VoiceStatus) -> Self {
        Self { noise_suppression: v.noise_suppression, loudness: v.loudness, loudness_gain_db: v.loudness_gain_db }
    }
}

/// For a JSON field that may be absent (`None`: unchanged), `null`
/// (`Some(None)`: back to the room's setting) or a value (`Some(Some(v))`);
/// with `#[serde(default, deserialize_with = "double_option")]`.
pub(crate) fn double_option<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(d).map(Some)
}

/// Parses a room's `noise_suppression` value.
pub(crate) fn parse_noise_suppression(s: &str) -> Result<NoiseSuppression, RoomError> {
    NoiseSuppression::parse(s)
        .ok_or_else(|| RoomError::BadValue(format!("noise_suppression must be \"auto\", \"on\" or \"off\", not {s:?}")))
}

impl Room {
    /// Marks a participant as a source that does not suppress noise itself (plain RTP).
    pub(super) fn mark_raw_source(&self, id: ParticipantId) {
        let _ = lock(&self.mixing).mixer.set_raw_source(id, true);
    }

    /// The room's voice settings, changed where given (from the next tick).
    pub(crate) fn room_voice(&self, noise_suppression: Option<NoiseSuppression>, loudness: Option<bool>) -> RoomVoice {
        let mut m = lock(&self.mixing);
        if let Some(mode) = noise_suppression {
            m.mixer.set_room_noise_suppression(mode);
        }
        if let Some(on) = loudness {
            m.mixer.set_room_loudness(on);
        }
        let cfg = m.mixer.config();
        RoomVoice { noise_suppression: cfg.noise_suppression.as_str(), loudness: cfg.loudness }
    }
}

impl Rooms {
    /// Sets a participant's noise suppression and loudness where given
    /// (`Some(None)`: follow the room again); returns what now applies.
    pub(crate) fn set_voice(
        &self,
        room: &Room,
        id: u64,
        noise_suppression: Option<Option<bool>>,
        loudness: Option<Option<bool>>,
    ) -> Result<ParticipantVoice, RoomError> {
        if !lock(&room.members).contains_key(&id) {
            return Err(RoomError::NoParticipant(id));
        }
        let pid = ParticipantId(id);
        let mut m = lock(&room.mixing);
        let gone = |_| RoomError::NoParticipant(id);
        if let Some(on) = noise_suppression {
            m.mixer.set_noise_suppression(pid, on).map_err(gone)?;
        }
        if let Some(on) = loudness {
            m.mixer.set_loudness(pid, on).map_err(gone)?;
        }
        Ok(m.mixer.voice(pid).map_err(gone)?.into())
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use tutti_mix::RoomConfig;

    use super::*;
    use crate::room::PlainJoiner;

    #[test]
    fn plain_rtp_is_suppressed_under_auto_and_switches_hold() {
        let rooms = Rooms::new(RoomConfig::default(), 2, 10).expect("valid defaults");
        let room = rooms.create("r", None, None).expect("created");
        let acceptor = tutti_rtc::Acceptor::new(SocketAddr::from(([127, 0, 0, 1], 4000)), Duration::from_secs(10))
            .expect("acceptor");
        let joiner = PlainJoiner {
            id: acceptor.reserve_id(),
            name: "phone".into(),
            identity: String::new(),
            listen_only: false,
            admin: Default::default(),
            io: 0,
            attributes: Default::default(),
        };
        let (phone, _) = rooms.join_plain(&room, joiner).expect("joins");
        let v = rooms.set_voice(&room, phone, None, None).expect("a participant");
        assert!(v.noise_suppression && !v.loudness, "auto: a plain RTP caller is suppressed; loudness off by default");
        let v = rooms.set_voice(&room, phone, Some(Some(false)), Some(Some(true))).expect("set");
        assert!(!v.noise_suppression && v.loudness);
        let v = rooms.set_voice(&room, phone, Some(None), None).expect("back to the room's");
        assert!(v.noise_suppression && v.loudness);
        assert_eq!(room.room_voice(Some(NoiseSuppression::Off), Some(false)).noise_suppression, "off");
        let v = rooms.set_voice(&room, phone, None, Some(None)).expect("back to the room's");
        assert!(!v.noise_suppression && !v.loudness, "the room's off now");
        assert_eq!(rooms.set_voice(&room, 999, Some(Some(true)), None), Err(RoomError::NoParticipant(999)));
        assert!(matches!(parse_noise_suppression("loud"), Err(RoomError::BadValue(m)) if m.contains("\"auto\"")));
    }
}
