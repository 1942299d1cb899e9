//! What the stop detector keeps per connection, and how each kernel record moves it: delivery
//! progress against the last healthy point, the last look at the sender, idles, losses.
use std::collections::VecDeque;

use super::config::StopConfig;
use super::evidence::Evidence;
use crate::detect::owner::{Hold, StopOwner};
use crate::model::{Body, ConnId, Event, Finding, Mechanism, Sample, StopCause};

/// TCP states in a state-change record.
const ESTABLISHED: u8 = 1;
const CLOSE: u8 = 7;

#[derive(Debug)]
pub(super) struct Conn {
    pub id: ConnId,
    /// Last point of healthy delivery: (time, bytes acked).
    pub anchor: (u64, u64),
    pub acked: u64,
    pub srtt_us: u32,
    pub mss: u32,
    pub rate_bps: f64,
    /// The last look at what the sender holds.
    pub hold: Hold,
    pub closed: bool,
    pub ev: Evidence,
    /// Start of the stop in progress.
    pub active: Option<u64>,
    /// Recent (time of ACK, bytes acked, data still in flight after it) points, two seconds at most.
    pub hist: VecDeque<(u64, u64, bool)>,
    /// When delivery became healthy again during a stop (it must last before the stop ends).
    pub resume: Option<u64>,
    /// ACKs and bytes delivered since `resume`: the stop's own if the resumption falls through.
    pub resumed_delivery: (u32, u64),
    /// When delivery last began to resume during the stop in progress, whether or not it held.
    pub began_resuming: Option<u64>,
    /// Delivery was seen healthy at least once (a baseline exists).
    pub seen_healthy: bool,
    /// Left ESTABLISHED: the final ACKs are not sampled, so no stop is judged.
    pub closing: bool,
    /// (start, end, owner) of the last stop that ended: a new one soon after it, of the same
    /// owner, is the same stop going on (delivery seen late can end a stop for a moment, e.g.
    /// while a receive buffer fills); one of another owner is a stop of its own.
    pub last_stop: Option<(u64, u64, StopOwner)>,
    /// When a fresh look was asked for because the last one could not decide the owner.
    pub asked: Option<u64>,
    /// Process and cause of the stop in progress as last reported.
    pub verdict: Option<(StopOwner, StopCause)>,
    /// The stop in progress was reported as the receiver's at some point.
    pub was_receivers: bool,
    /// The receiver's stop in progress: when a look first showed its window open and data in
    /// flight again.
    pub opened: Option<u64>,
    /// The receiver's stop in progress: a look found its window closed and nothing in flight.
    pub emptied: bool,
    /// When a look last showed nothing to send, until something is delivered after it: data in
    /// flight since then left after it.
    pub idle_at: Option<u64>,
    /// Seen established (a sample, a look or a state change said so): a socket still connecting
    /// retransmits its SYN, which is no stop.
    pub established: bool,
    /// The last delivery: when it was acknowledged, and the largest segment it could have carried
    /// (what it delivered since the look before, at most one MSS).
    pub answered: Option<(u64, u32)>,
    /// Another connection's delivery that shows the path answers while this stop's segments do
    /// not (found by the detector across connections).
    pub path_answer: Option<Answer>,
    /// The mechanism the stop in progress was last reported with.
    pub named: Option<Mechanism>,
    /// The last sample's time and segments delivered, SACKed ones included (tp->delivered).
    pub delivered_at: Option<(u64, u32)>,
    /// When a sample last showed segments delivered, SACKed ones included.
    pub delivered_ts: u64,
    /// Ramping up after an idle long enough for the kernel to restart from its initial window:
    /// the rate before the idle is no yardstick until delivery reaches its share of it again.
    pub ramp: bool,
    /// A snapshot showed SACK not negotiated: the kernel sends no tail-loss probes then.
    pub no_sack: bool,
    /// When data last left again after an idle (nothing to send, or a window closed with nothing
    /// in flight): no delivery rate reaches back past it, into time when nothing could be delivered.
    pub sending_since: u64,
}

impl Conn {
    pub fn new(id: ConnId, ts: u64) -> Self {
        Conn {
            id,
            anchor: (ts, 0),
            acked: 0,
            srtt_us: 0,
            mss: 1448,
            rate_bps: 0.0,
            hold: Hold::default(),
            closed: false,
            ev: Evidence::default(),
            active: None,
            hist: VecDeque::new(),
            resume: None,
            resumed_delivery: (0, 0),
            began_resuming: None,
            seen_healthy: false,
            closing: false,
            last_stop: None,
            asked: None,
            verdict: None,
            was_receivers: false,
            opened: None,
            emptied: false,
            idle_at: None,
            established: false,
            answered: None,
            path_answer: None,
            named: None,
            delivered_at: None,
            delivered_ts: 0,
            ramp: false,
            no_sack: false,
            sending_since: 0,
        }
    }

    /// One record of this connection.
    pub fn observe(&mut self, cfg: &StopConfig, ev: &Event, out: &mut Vec<Finding>) {
        let ts = ev.ts_ns;
        match &ev.body {
            Body::Sample(s) => {
                self.established = true;
                if s.srtt_us > 0 {
                    self.srtt_us = s.srtt_us;
                }
                if s.mss > 0 {
                    self.mss = s.mss;
                }
                self.take_hold(Hold::of_sample(ts, s));
                self.ev.saw_cwnd(s.cwnd, s.ca_state);
                let healthy_before = self.active.is_none();
                let acked_before = self.acked;
                self.progress(cfg, ts, ts, s.bytes_acked, out);
                self.sacked_progress(cfg, ts, s);
                self.note_idle(ts, acked_before);
                // Only healthy delivery moves the baseline (a slowdown is not its own yardstick).
                let healthy_now = self.anchor == (ts, self.acked) && self.acked > 0;
                // The baseline is the kernel's per-ACK rate sample, but never more than what was
                // delivered per second over the last window: an application-limited sender's
                // bursts leave at the link's speed, more than it ever averages, and 5 % of that
                // would make none of its delivery count as healthy
                // (agent/tests/app_limited_outage.rs).
                let avg = self.recent_rate(ts, self.acked);
                let r = match s.delivery_rate_bps() {
                    k if k > 0.0 && avg > 0.0 => k.min(avg),
                    k => k.max(avg),
                };
                if healthy_before && healthy_now && self.active.is_none() && r > 0.0 {
                    self.rate_bps = if self.rate_bps == 0.0 { r } else { 0.8 * self.rate_bps + 0.2 * r };
                }
            }
            Body::Snapshot(s) => {
                self.established |= s.state == ESTABLISHED;
                self.no_sack = s.state == ESTABLISHED && !s.options.sack;
                if s.srtt_us > 0 {
                    self.srtt_us = s.srtt_us;
                }
                if s.mss > 0 {
                    self.mss = s.mss;
                }
                self.take_hold(Hold::of_snapshot(ts, s));
                let ack_ts = ts.saturating_sub(s.last_ack_age_us as u64 * 1000);
                let acked_before = self.acked;
                self.progress(cfg, ts, ack_ts, s.bytes_acked, out);
                self.note_idle(ts, acked_before);
                if self.closing {
                    self.look_after_close(cfg, ts, ack_ts, out);
                }
            }
            Body::Retrans(r) => {
                self.restart_before_resend(cfg, ts);
                // Data in flight after none behind a closed window left once it opened.
                self.take_hold(self.hold.in_flight_at(ts, r.packets_out));
                // A tail-loss probe (CA state Open) fires 2 srtt after the last send; a fast
                // retransmit needs an ACK's round trip, one srtt at least.
                let srtt = u64::from(self.srtt_us) * 1000;
                self.sent_after_idle(cfg, ts, if r.ca_state == 0 { 2 * srtt } else { srtt });
                self.ev.retransmitted(ts, r);
            }
            Body::LostRetrans(r) => self.ev.lost_again(r.since_prev_ns),
            Body::Rto(r) => {
                self.restart_before_resend(cfg, ts);
                self.hold = self.hold.in_flight_at(ts, r.packets_out);
                // The timer was armed by the first send after the idle, rto before it fired, or
                // re-armed by a tail-loss probe 2 srtt (at most rto) after that send. A probe that
                // resends leaves a record (and dates the send itself); one that carried new data
                // leaves none, so a first timeout with no resend before it had one such probe
                // (SACK connections only: the kernel probes no other).
                let rto = u64::from(r.rto_us) * 1000;
                let probe = match (self.ev.rtos, self.ev.retrans_segs, self.no_sack) {
                    (0, 0, false) => (2 * u64::from(self.srtt_us) * 1000).min(rto),
                    _ => 0,
                };
                self.reopened_into_timeout(cfg, ts, ts.saturating_sub(rto + probe), out);
                self.sent_after_idle(cfg, ts, rto + probe);
                self.ev.timed_out(ts, r);
            }
            Body::CaState(s) => self.ev.saw_cwnd(s.cwnd, s.new),
            Body::Close(s) => {
                // Its last delivery is a path answer for the others (a control connection's
                // closing exchange, say).
                let ack_ts = ts.saturating_sub(s.last_ack_age_us as u64 * 1000);
                if s.bytes_acked > self.acked && !self.hist.is_empty() {
                    self.answered = Some((ack_ts, (s.bytes_acked - self.acked).min(u64::from(s.mss.max(1))) as u32));
                }
                self.closed = true;
                if let Some(start) = self.active {
                    // Delivery seen resuming (not yet for a whole window) ended the stop then.
                    let end = self.resume.map_or(ts, |r| self.resumption(cfg, r, ts).0).max(start);
                    self.end(cfg, ts, start, end, out);
                }
            }
            Body::State(st) => {
                self.established |= st.new == ESTABLISHED || st.old == ESTABLISHED;
                self.closing = st.new != ESTABLISHED;
                if let Some(start) = self.active.filter(|_| self.closing) {
                    if st.new == CLOSE && self.outlives_close() {
                        // Gone with data outstanding: the transfer was aborted (a reset, or the
                        // application gave up), and what it left unacknowledged is no measure of
                        // the path. A stop whose delivery had begun to resume ended there.
                        let end = self.resume.or(self.began_resuming);
                        let end = end.unwrap_or_else(|| self.aborted_end(cfg, start, ts)).max(start);
                        self.end(cfg, ts, start, end, out);
                    } else if st.new == CLOSE || !self.outlives_close() {
                        self.end(cfg, ts, start, ts, out);
                    }
                }
                // Gone (one that never moved data gets no Close record).
                self.closed |= st.new == CLOSE;
            }
            Body::Process(_) => {}
        }
    }

    /// Delivery below this rate (bytes/s) is "almost nothing".
    pub fn slow_rate(&self, cfg: &StopConfig) -> f64 {
        let srtt = (self.srtt_us.max(1000)) as f64 / 1e6;
        let floor = cfg.segments_per_rtt * self.mss as f64 / srtt;
        if self.ramp {
            floor
        } else {
            floor.max(cfg.rate_fraction * self.rate_bps)
        }
    }

    /// Delivery rate over the last resume window ending at `ts`, from the progress history.
    pub fn recent_rate(&self, ts: u64, acked: u64) -> f64 {
        rate_from(self.window_base(ts), ts, acked)
    }

    /// Where the resume window ending at `ts` begins: (time, bytes acked).
    fn window_base(&self, ts: u64) -> Option<(u64, u64)> {
        let w = self.resume_window();
        self.hist.iter().rev().find(|(t, ..)| *t + w <= ts).or(self.hist.front()).map(|&(t, a, _)| (t, a))
    }

    /// The window's base moved to when data left again if an idle lies within it: whether delivery
    /// is healthy is not judged on time when nothing could be delivered. (The ramp's exit and the
    /// yardstick keep the whole window: a first window's rate over one RTT is no measure of them.)
    fn after_idle_base(&self, base: Option<(u64, u64)>, ts: u64) -> Option<(u64, u64)> {
        match base {
            Some((t, _)) if (t..ts).contains(&self.sending_since) => {
                self.hist.iter().rev().find(|p| p.0 <= self.sending_since).map(|p| (self.sending_since, p.1))
            }
            b => b,
        }
    }

    /// New cumulative progress `acked`, seen at `obs` and reflecting ACKs up to `ack_ts`.
    fn progress(&mut self, cfg: &StopConfig, obs: u64, ack_ts: u64, acked: u64, out: &mut Vec<Finding>) {
        if acked < self.acked || self.hist.back().is_some_and(|&(t, ..)| t > ack_ts) {
            return;
        }
        if self.hist.is_empty() {
            // The first look at its progress: where it stands, not what it delivered (a
            // connection seen first by its resends must not count its earlier bytes as delivery).
            self.hist.push_back((ack_ts, acked, self.hold.in_flight > 0));
            self.acked = acked;
            return;
        }
        if acked > self.acked {
            self.answered = Some((ack_ts, (acked - self.acked).min(u64::from(self.mss.max(1))) as u32));
            // The first delivery after an idle longer than the retransmission timeout (srtt +
            // 200 ms at least; one more srtt for the data to be acknowledged): the kernel restarted
            // from its initial window, and the ramp up from it is slow by the old yardstick.
            let restart = 2 * u64::from(self.srtt_us) * 1000 + 200_000_000;
            if self.idle_at.is_some() && ack_ts.saturating_sub(self.last_advance()) > restart {
                self.ramp = true;
            }
        }
        // Only a rate fallen back to almost nothing cancels a resumption, not a look that finds the
        // cumulative ACK where the last one left it: in Recovery it moves in jumps as holes fill,
        // and one 50 ms sample in two shows no advance.
        let base = self.window_base(ack_ts);
        let recent = rate_from(base, ack_ts, acked);
        if self.ramp && recent >= cfg.rate_fraction * self.rate_bps {
            self.ramp = false;
        }
        let rate_ok = recent.max(rate_from(self.after_idle_base(base, ack_ts), ack_ts, acked)) > self.slow_rate(cfg);
        let healthy = rate_ok && acked > self.acked;
        self.hist.push_back((ack_ts, acked, self.hold.in_flight > 0));
        while self.hist.len() > 2 && self.hist.front().is_some_and(|&(t, ..)| t + 2_000_000_000 < ack_ts) {
            self.hist.pop_front();
        }
        let gained = acked - self.acked;
        let was_bulk = self.bulk(cfg);
        if !rate_ok {
            self.resume_failed();
        }
        if !healthy {
            if gained > 0 {
                self.delivered_during(gained);
            }
            self.acked = acked;
            if gained > 0 && self.active.is_none() && !was_bulk {
                // Not bulk (until this delivery perhaps): whatever it delivers starts its clock
                // afresh (its stop is timeouts with nothing acknowledged in between).
                self.restart(ack_ts);
            }
            return;
        }
        self.acked = acked;
        self.seen_healthy = true;
        match self.active {
            // Delivered before the silence began (seen late by a snapshot): the stop goes on.
            Some(_) if obs.saturating_sub(ack_ts) > cfg.threshold_ns(self.srtt_us) => self.anchor.1 = acked,
            Some(start) => {
                // Delivery must stay healthy for a window before the stop counts as over:
                // a window probe or one burst does not end it.
                let w = self.resume_window();
                self.began_resuming = Some(*self.resume.get_or_insert(ack_ts));
                self.delivered_during(gained);
                while let Some(resumed) = self.resume.filter(|&r| ack_ts >= r + w) {
                    let (holds_from, _) = self.resumption(cfg, resumed, ack_ts);
                    if holds_from != resumed {
                        // A stall of its own began within the window: the stop went on through it.
                        self.resume_failed();
                        self.resume = Some(holds_from);
                        continue;
                    }
                    if self.held_after(cfg, resumed, w) {
                        self.last_stop = Some((start, resumed.max(start), self.owner_so_far()));
                        self.end(cfg, obs, start, resumed.max(start), out);
                        self.anchor = (ack_ts, acked);
                        return;
                    }
                    // One jump, then almost nothing for the window: the stop went on. The next
                    // advance past the window is the next try.
                    self.resume_failed();
                    self.resume = self.hist.iter().map(|&(t, ..)| t).find(|&t| t >= resumed + w);
                }
            }
            None => self.restart(ack_ts),
        }
    }

    /// Delivery the cumulative ACK shows only slowly: behind holes repaired one by one the
    /// receiver acknowledges the segments that arrive by SACK, and while they arrive at a healthy
    /// rate the path delivers; each advance of the cumulative ACK then restarts the stop clock,
    /// however small. The clock runs from the cumulative ACK's last advance all the same: SACKed
    /// data is not yet the receiving application's, and a cumulative ACK stuck behind one hole for
    /// the threshold is a stop whatever the SACKs say (the capture's truth counts the cumulative
    /// ACK). Without SACK a duplicate ACK also counts as delivered, so only a scoreboard with
    /// SACKed segments counts.
    fn sacked_progress(&mut self, cfg: &StopConfig, ts: u64, s: &Sample) {
        let Some((t0, d0)) = self.delivered_at.replace((ts, s.delivered)) else { return };
        let segs = s.delivered.wrapping_sub(d0);
        if segs > 0 {
            self.delivered_ts = ts;
        }
        if self.active.is_some() || s.sacked_out == 0 || segs == 0 || ts <= t0.max(self.anchor.0) || !self.bulk(cfg) {
            return;
        }
        let rate = f64::from(segs) * f64::from(self.mss.max(1)) / ((ts - t0) as f64 / 1e9);
        let last = self.last_advance();
        if rate > self.slow_rate(cfg) && last > self.anchor.0 {
            self.restart(last);
        }
    }

    /// Bulk: it delivered healthily and enough to be sampled by the kernel.
    pub fn bulk(&self, cfg: &StopConfig) -> bool {
        self.seen_healthy && self.acked >= cfg.min_bytes
    }

    /// No stop runs: the clock starts afresh at `ts`.
    pub fn restart(&mut self, ts: u64) {
        self.anchor = (ts, self.acked);
        self.ev = Evidence::default();
        self.asked = None;
        self.path_answer = None;
    }

    /// A timeout in a receiver's stop whose window a look found closed with nothing in flight: the
    /// window opened unseen, data left by `sent` at the latest, and the network has not
    /// acknowledged it since. The receiver's stop ended there; the timeout is a stop of its own,
    /// judged afresh from that send.
    fn reopened_into_timeout(&mut self, cfg: &StopConfig, ts: u64, sent: u64, out: &mut Vec<Finding>) {
        let Some(start) = self.active.filter(|_| self.emptied && self.owner_so_far() == StopOwner::Receiver) else {
            return;
        };
        let end = sent.max(start).max(self.last_advance());
        self.last_stop = Some((start, end, StopOwner::Receiver));
        self.end(cfg, ts, start, end, out);
        self.anchor = (end, self.acked);
    }

    /// After the close only snapshots look at the socket (the fallback's per-ACK hook is blind past
    /// ESTABLISHED); while the stop lasts the detector asks for one every tick (the agent takes at
    /// most one per 30 ms), and they confirm a resumption over its window as samples do (`progress`). A look that shows nothing left ends
    /// the stop at once: where delivery resumed, or at the last ACK. Lab fuzz seed 179 run 1: an
    /// HTTP server closed with 8 MB unsent just as a backed-off retransmission was acknowledged
    /// with 3.3 MB behind it, and the next advance came 0.55 s later (1.5 srtt); ended at the jump,
    /// the stop left out the stall after it.
    fn look_after_close(&mut self, cfg: &StopConfig, now: u64, ack_ts: u64, out: &mut Vec<Finding>) {
        let Some(start) = self.active else { return };
        if !self.hold.outstanding() {
            self.end(cfg, now, start, self.resume.unwrap_or(ack_ts).max(start), out);
        }
    }
}

/// Bytes per second from `base` (time, bytes acked) to `acked` at `ts`.
fn rate_from(base: Option<(u64, u64)>, ts: u64, acked: u64) -> f64 {
    match base {
        Some((t, a)) if ts > t => acked.saturating_sub(a) as f64 / ((ts - t) as f64 / 1e9),
        _ => 0.0,
    }
}

/// What got through the path while the stop's segments did not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Answer {
    /// The largest segment it could have carried, payload bytes (0: the handshake only).
    pub largest: u32,
    /// Another connection to the same address that delivered it; None: this one, before the stop.
    pub by: Option<crate::model::Tuple>,
}
