//! RTCP on a plain RTP leg (a SIP phone, a gateway, ffmpeg: RTP/AVP, no
//! ICE): tutti's sender report every 5 s, with a reception report block on
//! what the leg sent it (RFC 3550 §6.4.1: packets lost, the fraction lost
//! since the last report, the highest sequence number, interarrival
//! jitter, the last sender report's time and the delay since), and a CNAME
//! (a compound packet, §6.1); and what the leg's own reports say of tutti's
//! stream. A phone and the carrier behind it read loss and jitter from
//! these; a phone that hears no RTCP may not mind, but monitoring does.
//!
//! No I/O: the `rtp-in` thread feeds packets in and sends what
//! [`PlainReports::due`] returns. About 80 bytes every 5 s per leg.

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use rtc::rtcp::receiver_report::ReceiverReport;
use rtc::rtcp::sender_report::SenderReport;
use rtc::rtcp::source_description::{SdesType, SourceDescription, SourceDescriptionChunk, SourceDescriptionItem};

use crate::media::rtcp::{FIRST_REPORT, REPORT_INTERVAL, ReceptionBlock, ntp_time};
use crate::reception::Reception;

/// One plain leg's RTCP state.
#[derive(Debug)]
pub struct PlainReports {
    /// Our SSRC on the leg, and its RTP clock (8000 for G.711, 48000 for Opus).
    ssrc: u32,
    clock_rate: u32,
    wall: (Instant, SystemTime),
    reception: Option<Reception>,
    /// Sent so far: packets and payload octets, and the last packet's RTP timestamp and time.
    packets: u32,
    octets: u32,
    last_sent: Option<(u32, Instant)>,
    next_report: Option<Instant>,
    cname: Bytes,
    /// What the leg's last report said of our stream.
    heard: Option<ReceptionBlock>,
    reports_in: u64,
}

impl PlainReports {
    /// The state of a leg we send as `ssrc` on a `clock_rate` RTP clock;
    /// `cname` names tutti in its reports.
    pub fn new(ssrc: u32, clock_rate: u32, cname: &str) -> Self {
        Self {
            ssrc,
            clock_rate,
            wall: (Instant::now(), SystemTime::now()),
            reception: None,
            packets: 0,
            octets: 0,
            last_sent: None,
            next_report: None,
            cname: Bytes::copy_from_slice(cname.as_bytes()),
            heard: None,
            reports_in: 0,
        }
    }

    /// Notes an RTP packet the leg sent us (after its source was checked);
    /// a new SSRC starts new statistics.
    pub fn on_received(&mut self, ssrc: u32, seq: u16, timestamp: u32, at: Instant) {
        if self.reception.as_ref().is_none_or(|r| r.ssrc() != ssrc) {
            self.reception = Some(Reception::new(ssrc, self.clock_rate));
        }
        if let Some(r) = &mut self.reception {
            r.on_packet(seq, timestamp, at);
        }
    }

    /// Notes an RTP packet we sent the leg (`payload` bytes, RTP `timestamp`).
    pub fn on_sent(&mut self, payload: usize, timestamp: u32, at: Instant) {
        self.packets = self.packets.wrapping_add(1);
        self.octets = self.octets.wrapping_add(payload as u32);
        self.last_sent = Some((timestamp, at));
        self.next_report.get_or_insert(at + FIRST_REPORT);
    }

    /// Reads an RTCP compound packet from the leg: its sender report's time
    /// (for our next block's LSR and DLSR) and its report block on our
    /// stream. False when it does not parse as RTCP.
    pub fn on_rtcp(&mut self, data: &[u8], at: Instant) -> bool {
        let mut buf = data;
        let Ok(packets) = rtc::rtcp::packet::unmarshal(&mut buf) else { return false };
        for p in &packets {
            let any = p.as_any();
            let blocks = if let Some(sr) = any.downcast_ref::<SenderReport>() {
                if let Some(r) = &mut self.reception {
                    r.on_sender_report(sr.ntp_time, at);
                }
                &sr.reports
            } else if let Some(rr) = any.downcast_ref::<ReceiverReport>() {
                &rr.reports
            } else {
                continue;
            };
            self.reports_in += 1;
            if let Some(b) = blocks.iter().find(|b| b.ssrc == self.ssrc) {
                self.heard = Some(ReceptionBlock {
                    ssrc: b.ssrc,
                    fraction_lost: b.fraction_lost,
                    total_lost: b.total_lost,
                    highest_sequence: b.last_sequence_number,
                    jitter: b.jitter,
                });
            }
        }
        true
    }

    /// What the leg's last report said of our stream, if it sent one.
    pub fn heard(&self) -> Option<ReceptionBlock> {
        self.heard
    }

    /// Reports (sender or receiver) the leg sent us.
    pub fn reports_in(&self) -> u64 {
        self.reports_in
    }

    /// Our report, when one is due at `now`: a sender report (with the
    /// reception block once the leg has sent) and an SDES CNAME, as one
    /// compound packet. Nothing before our first packet.
    pub fn due(&mut self, now: Instant) -> Option<Vec<u8>> {
        let due = self.next_report?;
        if now < due {
            return None;
        }
        self.next_report = Some(now + jittered(REPORT_INTERVAL, self.packets));
        let (ts, at) = self.last_sent?;
        let elapsed = now.saturating_duration_since(at);
        let block = self.reception.as_mut().and_then(|r| r.report(now));
        let sr = SenderReport {
            ssrc: self.ssrc,
            ntp_time: ntp_time(self.wall, now),
            rtp_time: ts.wrapping_add((elapsed.as_secs_f64() * f64::from(self.clock_rate)) as u32),
            packet_count: self.packets,
            octet_count: self.octets,
            reports: block.into_iter().collect(),
            ..Default::default()
        };
        let sdes = SourceDescription {
            chunks: vec![SourceDescriptionChunk {
                source: self.ssrc,
                items: vec![SourceDescriptionItem { sdes_type: SdesType::SdesCname, text: self.cname.clone() }],
            }],
        };
        let packets: [Box<dyn rtc::rtcp::Packet>; 2] = [Box::new(sr), Box::new(sdes)];
        rtc::rtcp::packet::marshal(&packets).ok().map(|b| b.to_vec())
    }
}

/// The report interval, spread over 0.75 to 1.25 of it (RFC 3550 §6.3.1
/// randomises it so that legs set up together do not report together).
fn jittered(interval: Duration, seed: u32) -> Duration {
    let x = seed.wrapping_mul(2_654_435_761) >> 16;
    interval.mul_f64(0.75 + f64::from(x % 1000) / 2000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_tells_the_leg_what_it_lost_and_reads_what_it_says_of_ours() {
        let t0 = Instant::now();
        let mut ours = PlainReports::new(0xAAAA, 8_000, "tutti");
        let mut theirs = PlainReports::new(0xBBBB, 8_000, "phone");
        assert!(ours.due(t0 + Duration::from_secs(10)).is_none(), "nothing before our first packet");
        // The phone sends 100 packets, 10 of them lost; we send 50.
        for n in 0..100u16 {
            let at = t0 + Duration::from_millis(20 * u64::from(n));
            if n % 10 != 3 {
                ours.on_received(0xBBBB, 1_000 + n, 160 * u32::from(n), at);
            }
            if n % 2 == 0 {
                ours.on_sent(160, 160 * u32::from(n), at);
                theirs.on_received(0xAAAA, n / 2, 160 * u32::from(n), at);
            }
        }
        let report = ours.due(t0 + Duration::from_secs(2)).expect("due after the first second");
        assert!(ours.due(t0 + Duration::from_secs(2)).is_none(), "one report per interval");
        // The phone reads it as RTCP: a sender report saying what we sent and what we lost of it.
        let mut buf = &report[..];
        let packets = rtc::rtcp::packet::unmarshal(&mut buf).expect("a compound packet");
        let sr = packets[0].as_any().downcast_ref::<SenderReport>().expect("a sender report first");
        assert_eq!((sr.ssrc, sr.packet_count, sr.octet_count), (0xAAAA, 50, 50 * 160));
        let block = &sr.reports[0];
        assert_eq!((block.ssrc, block.total_lost, block.last_sequence_number), (0xBBBB, 10, 1_099));
        assert_eq!(block.fraction_lost, (10 * 256 / 100) as u8);
        assert!(packets[1].as_any().downcast_ref::<SourceDescription>().is_some(), "a CNAME");
        // Its own report on our stream is read back.
        theirs.on_sent(160, 0, t0);
        let back = theirs.due(t0 + Duration::from_secs(2)).expect("theirs");
        assert!(ours.on_rtcp(&back, t0 + Duration::from_secs(2)));
        let heard = ours.heard().expect("their block on our stream");
        assert_eq!((heard.ssrc, heard.total_lost, heard.highest_sequence), (0xAAAA, 0, 49));
        assert_eq!(ours.reports_in(), 1);
        assert!(!ours.on_rtcp(&[0x80, 0xC8, 0, 9], t0), "a truncated report is not RTCP");
    }
}
