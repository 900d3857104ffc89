//! The connection's timers and RTCP: webrtc-rs's timers (connected, at most
//! every second), our own sender or receiver report when due, the retirement
//! when due, and what received audio and sender reports tell those reports.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::BytesMut;
use rtc::rtcp::receiver_report::ReceiverReport;
use rtc::rtcp::sender_report::SenderReport;
use rtc::sansio::Protocol;

#[cfg(doc)]
use super::connection::build_connection;
use super::datagram::Transmit;
use super::rtcp::{FIRST_REPORT, REPORT_INTERVAL, ReceptionBlock, SenderReportInfo, ntp_time};
use super::{CONNECTED_TIMER_GRAIN, Media};
use crate::reception::Reception;

impl Media {
    /// That this connection was built without webrtc-rs's receiver reports
    /// ([`build_connection`]): the reception statistics of what it receives
    /// go out in our own RTCP instead (see [`Media::handle_timeout`]).
    pub(crate) fn set_own_reports(&mut self) {
        self.own_reports = true;
    }

    /// The last sender report the remote side sent.
    pub(crate) fn last_sender_report(&self) -> Option<SenderReportInfo> {
        self.last_sender_report
    }

    /// Runs the connection's due timers, and sends the lean path's sender
    /// report when due (a retired connection's into `transmits`); then
    /// retires the connection if it is time ([`Media::retire`]).
    pub(crate) fn handle_timeout(&mut self, now: Instant, transmits: &mut VecDeque<Transmit>) {
        self.timers_ran = now;
        if let Some(pc) = self.pc.as_deref_mut() {
            let _ = pc.handle_timeout(now);
        }
        if !self.is_connected() {
            return;
        }
        // The first timer run after the connection came up (within a second).
        self.connected_at.get_or_insert(now);
        self.report(now, transmits);
        if self.retire_wanted && self.retired.is_none() && self.retirable(now) {
            self.retire(now);
        }
    }

    /// Sends our RTCP report when due: a sender report (with the reception
    /// block) while the lean path sends, else a receiver report.
    fn report(&mut self, now: Instant, transmits: &mut VecDeque<Transmit>) {
        let receiver_report_due = self.next_receiver_report.is_some_and(|due| now >= due);
        let mut report: Option<Box<dyn rtc::rtcp::Packet>> = None;
        if let Some(lean) = self.lean.as_deref_mut()
            && let (Some(due), Some((ts, at))) = (lean.next_report, lean.last)
            && now >= due
        {
            lean.next_report = Some(now + REPORT_INTERVAL);
            let elapsed = now.saturating_duration_since(at);
            // The reception report block rides on the sender report.
            let block = self.reception.as_mut().and_then(|r| r.report(now));
            if block.is_some() {
                self.next_receiver_report = Some(now + REPORT_INTERVAL);
            }
            report = Some(Box::new(SenderReport {
                ssrc: self.ssrc,
                ntp_time: ntp_time(self.wall, now),
                rtp_time: ts.wrapping_add((elapsed.as_secs_f64() * 48_000.0) as u32),
                packet_count: lean.packets,
                octet_count: lean.octets,
                reports: block.into_iter().collect(),
                ..Default::default()
            }));
        } else if receiver_report_due {
            // Nothing sent on the lean path to carry it: a receiver report of its own.
            self.next_receiver_report = Some(now + REPORT_INTERVAL);
            if let Some(block) = self.reception.as_mut().and_then(|r| r.report(now)) {
                report = Some(Box::new(ReceiverReport { ssrc: self.ssrc, reports: vec![block], ..Default::default() }));
            }
        }
        let Some(report) = report else { return };
        // A report that cannot be written is a lost report; the next one
        // carries the totals.
        if let Some(retired) = self.retired.as_deref_mut() {
            let Some(to) = self.remote else { return };
            let Ok(plain) = report.marshal() else { return };
            let mut buf = BytesMut::from(&plain[..]);
            if retired.srtcp.protect_rtcp(&mut buf).is_ok() {
                transmits.push_back(Transmit { to, data: buf, tcp: self.remote_tcp });
            }
        } else if let Some(mut sender) = self.pc.as_deref_mut().and_then(|pc| pc.rtp_sender(self.sender)) {
            let _ = sender.write_rtcp(now, vec![report]);
        }
    }

    /// Counts an audio packet the lean receive path authenticated (for the
    /// reception report), arriving at `now`; a new SSRC starts new statistics.
    pub(crate) fn note_received(&mut self, ssrc: u32, seq: u16, timestamp: u32, now: Instant) {
        if self.reception.as_ref().is_none_or(|r| r.ssrc() != ssrc) {
            self.reception = Some(Reception::new(ssrc, 48_000));
            self.next_receiver_report.get_or_insert(now + FIRST_REPORT);
        }
        if let Some(r) = &mut self.reception {
            r.on_packet(seq, timestamp, now);
        }
    }

    /// When [`Media::handle_timeout`] has work next.
    /// Connected, at most every [`CONNECTED_TIMER_GRAIN`].
    pub(crate) fn poll_timeout(&mut self) -> Option<Instant> {
        let report = self.lean.as_ref().and_then(|l| l.next_report).filter(|_| self.is_connected());
        let next = [
            self.pc.as_deref_mut().and_then(|pc| pc.poll_timeout()),
            report,
            self.next_receiver_report.filter(|_| self.is_connected()),
        ]
        .into_iter()
        .flatten()
        .min();
        if self.is_connected() && self.ice_steady {
            next.map(|at| at.max(self.timers_ran + CONNECTED_TIMER_GRAIN))
        } else {
            next
        }
    }

    /// Takes what we use of received RTCP: the remote side's sender reports.
    pub(super) fn on_rtcp(&mut self, packets: &[Box<dyn rtc::rtcp::Packet>], at: Instant) {
        for p in packets {
            let Some(sr) = p.as_any().downcast_ref::<SenderReport>() else { continue };
            if let Some(r) = &mut self.reception {
                r.on_sender_report(sr.ntp_time, at);
            }
            self.last_sender_report = Some(SenderReportInfo {
                ssrc: sr.ssrc,
                ntp_time: sr.ntp_time,
                rtp_time: sr.rtp_time,
                packet_count: sr.packet_count,
                octet_count: sr.octet_count,
                reception: sr.reports.first().map(|b| ReceptionBlock {
                    ssrc: b.ssrc,
                    fraction_lost: b.fraction_lost,
                    total_lost: b.total_lost,
                    highest_sequence: b.last_sequence_number,
                    jitter: b.jitter,
                }),
            });
        }
    }
}
