//! Calls answered before they join a room (the SIP edge's PIN entry): their
//! leg is kept in the plain RTP thread's lobby, which reads their keys and
//! plays them prompts; nothing of them reaches a room.

use std::sync::Arc;

use crate::media::LobbyCommand;
use crate::refusal::{Refusal, Refused};
use crate::room::playback::Clip;

use super::sessions::Sessions;

impl Sessions {
    /// Answers a plain RTP/AVP offer from `client` into the lobby, checked
    /// as its join would check it (`[rtp_in] trusted`, a codec): the leg's
    /// id (its keys come as that participant id's, though it is none) and
    /// the SDP answer, the one its later join's media use (the same socket
    /// and codec).
    pub(crate) fn lobby_enter(&self, sdp: &str, client: std::net::IpAddr) -> Refused<(u64, String)> {
        let offer = self
            .plain_offer(sdp, client)?
            .ok_or_else(|| Refusal::bad_request("bad_sdp", "the offer is not plain RTP/AVP audio"))?;
        let (local, _) = self.media.plain_rtp().ok_or_else(Refusal::shutting_down)?;
        let leg = self.media.reserve_id();
        if !self.media.lobby(LobbyCommand::Add(leg, offer)) {
            return Err(Refusal::shutting_down());
        }
        Ok((leg.0, offer.answer(local, leg.0, None)))
    }

    /// Plays `prompt` to lobby leg `leg`, from its start.
    pub(crate) fn lobby_play(&self, leg: u64, prompt: &Arc<Clip>) {
        self.media.lobby(LobbyCommand::Play(tutti_rtc::PeerId(leg), prompt.clone()));
    }

    /// Lobby leg `leg` leaves the lobby (its call joins a room, or ends).
    pub(crate) fn lobby_leave(&self, leg: u64) {
        self.media.lobby(LobbyCommand::Remove(tutti_rtc::PeerId(leg)));
    }
}
