//! ICE restarts: a client's restart offer answered (by webrtc-rs, or on a
//! retired connection with the answer the client has, its session version
//! one higher), and a client's own restart offer and the answer to it.

use std::net::SocketAddr;
use std::time::Instant;

use rtc::peer_connection::sdp::RTCSessionDescription;
use rtc::peer_connection::transport::RTCIceCandidateInit;

use super::connection::{add_host_candidate, local_sdp};
use super::error::{RtcError, bad_sdp};
use super::{Media, Retired};

impl Media {
    /// Answers an ICE-restart offer (new remote ufrag and password, perhaps a
    /// new address) on the established connection: the DTLS session, SRTP
    /// keys, SSRC and sequence numbers carry on. Returns the SDP answer.
    pub(crate) fn answer_restart(&mut self, offer: &str, now: Instant) -> Result<String, RtcError> {
        if self.closed {
            return Err(RtcError::NotConnected);
        }
        if let Some(retired) = self.retired.as_deref_mut() {
            return retired.answer_restart(offer);
        }
        let pc = self.pc.as_deref_mut().ok_or(RtcError::NotConnected)?;
        let offer = RTCSessionDescription::offer(offer.to_owned()).map_err(bad_sdp)?;
        pc.set_remote_description(now, offer).map_err(bad_sdp)?;
        // A restart puts gathering back to "gathering"; our candidates stay
        // (the server's address did not move): end it again.
        let _ = pc.add_local_candidate(RTCIceCandidateInit::default());
        let answer = pc.create_answer(None).map_err(bad_sdp)?;
        pc.set_local_description(now, answer).map_err(bad_sdp)?;
        local_sdp(pc)
    }

    /// Starts an ICE restart from `local` (a new socket): an offer with new
    /// ICE credentials and `local` as the one host candidate.
    pub(crate) fn offer_restart(&mut self, local: SocketAddr, now: Instant) -> Result<String, RtcError> {
        if self.closed {
            return Err(RtcError::NotConnected);
        }
        let pc = self.pc.as_deref_mut().ok_or(RtcError::NotConnected)?;
        pc.restart_ice();
        let offer = pc.create_offer(None).map_err(bad_sdp)?;
        pc.set_local_description(now, offer).map_err(bad_sdp)?;
        add_host_candidate(pc, local)?;
        local_sdp(pc)
    }

    /// Applies the answer to [`Media::offer_restart`].
    pub(crate) fn accept_restart(&mut self, answer: &str, now: Instant) -> Result<(), RtcError> {
        let answer = RTCSessionDescription::answer(answer.to_owned()).map_err(bad_sdp)?;
        let pc = self.pc.as_deref_mut().ok_or(RtcError::NotConnected)?;
        pc.set_remote_description(now, answer).map_err(bad_sdp)
    }
}

impl Retired {
    /// The answer to an ICE-restart offer on a retired connection: the
    /// answer the client has, its session version one higher (RFC 3264
    /// §8). The offer must still be an audio offer with ICE credentials;
    /// the caller takes its new ufrag for the consent checks.
    fn answer_restart(&mut self, offer: &str) -> Result<String, RtcError> {
        let has = |prefix: &str| offer.lines().any(|l| l.trim_end().starts_with(prefix));
        if !has("m=audio ") {
            return Err(RtcError::NoAudio);
        }
        if !has("a=ice-ufrag:") || !has("a=ice-pwd:") {
            return Err(bad_sdp("the restart offer has no ICE credentials"));
        }
        self.answer = bump_session_version(&self.answer).into_boxed_str();
        Ok(self.answer.to_string())
    }
}

/// `sdp` with its `o=` line's session version one higher.
fn bump_session_version(sdp: &str) -> String {
    let mut out = String::with_capacity(sdp.len() + 2);
    for line in sdp.split_inclusive('\n') {
        let body = line.trim_end_matches(['\r', '\n']);
        let mut fields: Vec<&str> = body.split(' ').collect();
        let bumped = match (body.starts_with("o="), fields.get(2).and_then(|v| v.parse::<u64>().ok())) {
            (true, Some(v)) if fields.len() == 6 => Some((v.wrapping_add(1)).to_string()),
            _ => None,
        };
        match bumped {
            Some(v) => {
                fields[2] = &v;
                out.push_str(&fields.join(" "));
                out.push_str(&line[body.len()..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_answer_bumps_only_the_session_version() {
        let sdp = "v=0\r\no=- 4611 2 IN IP4 0.0.0.0\r\ns=-\r\na=x:o=1 2 3\r\n";
        assert_eq!(bump_session_version(sdp), "v=0\r\no=- 4611 3 IN IP4 0.0.0.0\r\ns=-\r\na=x:o=1 2 3\r\n");
        assert_eq!(bump_session_version("o=- 1 x IN IP4 0.0.0.0\n"), "o=- 1 x IN IP4 0.0.0.0\n", "not a number: kept");
    }
}
