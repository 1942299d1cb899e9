//! Communication stops: data outstanding, almost nothing delivered for many RTTs, and why.
use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::owner::{Hold, StopOwner};
use crate::model::record::{CA_LOSS, CA_RECOVERY};
use crate::model::{Body, ConnId, Event, Finding, FindingKind};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StopConfig {
    /// A stop lasts at least max(rtt_factor x srtt + extra_ms, floor_ms).
    pub rtt_factor: f64,
    pub extra_ms: u64,
    pub floor_ms: u64,
    /// "Almost nothing": below this fraction of the connection's recent delivery rate ...
    pub rate_fraction: f64,
    /// ... and below this many segments per RTT.
    pub segments_per_rtt: f64,
    /// This many unanswered timeouts in a row make the path silent (an outage), fewer an RTO stop.
    pub silent_rtos: u32,
    /// Only bulk connections can stop: this many bytes acknowledged first.
    pub min_bytes: u64,
    /// How long a stop whose owner the last look cannot decide waits for a fresh snapshot before
    /// it is reported as `undetermined`.
    pub confirm_ms: u64,
}

impl Default for StopConfig {
    fn default() -> Self {
        StopConfig {
            rtt_factor: 2.0,
            extra_ms: 100,
            floor_ms: 150,
            rate_fraction: 0.05,
            segments_per_rtt: 2.0,
            silent_rtos: 3,
            min_bytes: 1 << 20,
            confirm_ms: 250,
        }
    }
}

impl StopConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=100.0).contains(&self.rtt_factor) || !(0.0..1.0).contains(&self.rate_fraction) {
            return Err("detect.stop: rtt_factor from 0 to 100, rate_fraction from 0 to 1".into());
        }
        if self.floor_ms == 0 || self.silent_rtos == 0 {
            return Err("detect.stop: floor_ms and silent_rtos must be positive".into());
        }
        Ok(())
    }

    fn threshold_ns(&self, srtt_us: u32) -> u64 {
        let scaled = (self.rtt_factor * srtt_us as f64 * 1e3) as u64 + self.extra_ms * 1_000_000;
        scaled.max(self.floor_ms * 1_000_000)
    }
}

/// How long past the threshold a stop seen only as silence waits for the fresh look it asked for.
const LOOK_WAIT_NS: u64 = 40_000_000;

/// What happened since delivery was last healthy.
#[derive(Debug, Default, Clone)]
struct Evidence {
    rtos: u32,
    max_backoff: u32,
    rto_wait_us: u64,
    lost_retrans: u32,
    max_lost_delay_ns: u64,
    retrans_segs: u64,
    min_cwnd: Option<u32>,
    ca_states: BTreeSet<u8>,
    /// Timeouts that fired before anything was delivered in this stop.
    silent_rtos: u32,
    /// Observations that showed some (slow) progress, and the bytes they delivered.
    acks: u32,
    delivered: u64,
    /// When the last timeout or retransmission was seen (what proves data was outstanding then).
    last_loss_ns: u64,
}

#[derive(Debug)]
struct Conn {
    id: ConnId,
    /// Last point of healthy delivery: (time, bytes acked).
    anchor: (u64, u64),
    acked: u64,
    srtt_us: u32,
    mss: u32,
    rate_bps: f64,
    /// The last look at what the sender holds.
    hold: Hold,
    closed: bool,
    ev: Evidence,
    /// Start of the stop in progress.
    active: Option<u64>,
    /// Recent (time of ACK, bytes acked) points, two seconds at most.
    hist: std::collections::VecDeque<(u64, u64)>,
    /// When delivery became healthy again during a stop (it must last before the stop ends).
    resume: Option<u64>,
    /// Delivery was seen healthy at least once (a baseline exists).
    seen_healthy: bool,
    /// Left ESTABLISHED: the final ACKs are not sampled, so no stop is judged.
    closing: bool,
    /// (start, end, owner) of the last stop that ended: a new one soon after it is the same stop
    /// going on (delivery seen late can end a stop for a moment, e.g. while a receive buffer fills).
    /// Only one of the same owner: a receiver's stall right after a network stop is a stop of its
    /// own (lab fuzz seed 31 run 9: an outage, 0.2 s of delivery, then the receiver's window closed;
    /// one stop network -> receiver from the outage's start).
    last_stop: Option<(u64, u64, StopOwner)>,
    /// When a fresh look was asked for because the last one could not decide the owner.
    asked: Option<u64>,
    /// Owner and cause of the stop in progress as last reported.
    verdict: Option<(StopOwner, &'static str)>,
    /// The stop in progress was reported as the receiver's at some point.
    was_receivers: bool,
    /// When a look last showed nothing to send, until something is delivered after it: data in
    /// flight since then left after it.
    idle_at: Option<u64>,
}

impl Conn {
    fn new(id: ConnId, ts: u64) -> Self {
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
            hist: Default::default(),
            resume: None,
            seen_healthy: false,
            closing: false,
            last_stop: None,
            asked: None,
            verdict: None,
            was_receivers: false,
            idle_at: None,
        }
    }

    /// Delivery below this rate (bytes/s) is "almost nothing".
    fn slow_rate(&self, cfg: &StopConfig) -> f64 {
        let srtt = (self.srtt_us.max(1000)) as f64 / 1e6;
        (cfg.segments_per_rtt * self.mss as f64 / srtt).max(cfg.rate_fraction * self.rate_bps)
    }

    /// Delivery rate over the last max(2 srtt, 100 ms) ending at `ts`, from the progress history.
    fn recent_rate(&self, ts: u64, acked: u64) -> f64 {
        let w = (2 * self.srtt_us as u64 * 1000).max(100_000_000);
        let base = self.hist.iter().rev().find(|(t, _)| *t + w <= ts).or(self.hist.front());
        match base {
            Some(&(t, a)) if ts > t => acked.saturating_sub(a) as f64 / ((ts - t) as f64 / 1e9),
            _ => 0.0,
        }
    }

    /// New cumulative progress `acked`, seen at `obs` and reflecting ACKs up to `ack_ts`.
    fn progress(&mut self, cfg: &StopConfig, obs: u64, ack_ts: u64, acked: u64, out: &mut Vec<Finding>) {
        if acked < self.acked || self.hist.back().is_some_and(|&(t, _)| t > ack_ts) {
            return;
        }
        let healthy = self.recent_rate(ack_ts, acked) > self.slow_rate(cfg) && acked > self.acked;
        self.hist.push_back((ack_ts, acked));
        while self.hist.len() > 2 && self.hist.front().is_some_and(|&(t, _)| t + 2_000_000_000 < ack_ts) {
            self.hist.pop_front();
        }
        if !healthy {
            self.resume = None;
            if acked > self.acked {
                self.ev.acks += 1;
                self.ev.delivered += acked - self.acked;
            }
            self.acked = acked;
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
                let w = (2 * self.srtt_us as u64 * 1000).max(100_000_000);
                let resumed = *self.resume.get_or_insert(ack_ts);
                if ack_ts >= resumed + w {
                    self.last_stop = Some((start, resumed.max(start), self.owner_so_far()));
                    self.end(cfg, obs, start, resumed.max(start), out);
                    self.anchor = (ack_ts, acked);
                }
            }
            None => {
                self.anchor = (ack_ts, acked);
                self.ev = Evidence::default();
                self.asked = None;
            }
        }
    }

    /// A look at `ts` after `prev`: when `prev` was an exact look showing nothing to send, no stop
    /// could run then, however late the next tick comes (a starved daemon, an idle shorter than the
    /// tick). The data this look reports was written after `prev` and sent one srtt before `ts` at
    /// the latest, so the stop clock restarts there (issue 11: a 0.17 s application idle of
    /// http.server, ticked only after the next ACK, was reported as a network stop).
    /// The same holds after a look that showed nothing in flight behind a closed window: data went
    /// out only once the window opened, which the daemon does not see (lab fuzz seed 23 run 46: a
    /// 0.2 s zero window, then the refilling burst's first ACKs 0.1 s after it left, reported as a
    /// network stop dated from the window's closing).
    /// Only a look that shows data in flight ends such a wait: one still showing the window closed
    /// is the receiver's stall going on, whose clock runs from its start.
    fn after_idle(&mut self, prev: Hold, ts: u64) {
        let sent_since = match prev.decided_owner() {
            Some(StopOwner::Application) => true,
            Some(StopOwner::Receiver) => self.hold.in_flight > 0,
            _ => false,
        };
        if self.active.is_some() || prev.in_flight > 0 || !sent_since || prev.ts_ns == 0 {
            return;
        }
        let sent_by = ts.saturating_sub(self.srtt_us as u64 * 1000).max(prev.ts_ns);
        if sent_by > self.anchor.0 {
            self.anchor = (sent_by, self.acked);
            self.ev = Evidence::default();
            self.asked = None;
        }
    }

    /// After a look (and the progress it showed, from `acked_before`): an exact look with nothing
    /// to send starts an idle; delivery after it ends it.
    fn note_idle(&mut self, ts: u64, acked_before: u64) {
        if self.hold.exact && !self.hold.outstanding() {
            self.idle_at = Some(ts);
        } else if self.acked > acked_before {
            self.idle_at = None;
        }
    }

    /// A resend or timeout at `ts` of data sent after an idle, at least `armed_ns` after that data
    /// left: no ACK told the daemon it left (it learns of it from a later look, or from this), so
    /// the stop clock runs from that send, not from the daemon's tick (lab fuzz seed 23 run 1: a
    /// sender resumed into a reverse outage, dated 0.28 s late; run 82: a burst into an outage
    /// whose first sign was a tail-loss probe; seed 31 run 39: the same after a snapshot showed the
    /// burst in flight). Each such event bounds the send from above; the earliest bound holds.
    fn sent_after_idle(&mut self, ts: u64, armed_ns: u64) {
        let Some(idle) = self.idle_at.filter(|_| self.active.is_none()) else { return };
        let sent = ts.saturating_sub(armed_ns).max(idle);
        if sent < self.anchor.0 {
            self.anchor = (sent, self.acked);
        }
    }

    /// The owner the stop in progress was last reported with.
    fn owner_so_far(&self) -> StopOwner {
        self.verdict.map_or(StopOwner::Undetermined, |v| v.0)
    }

    /// A network stop with data still outstanding goes on after the application closes: its last
    /// data still waits for the path (lab fuzz seed 7 run 1: a sender closed 18 s into a stop
    /// across a 10 s outage with 68 segments in flight, delivered by a timeout 4.9 s later).
    fn outlives_close(&self) -> bool {
        self.verdict.is_some_and(|(o, _)| o == StopOwner::Network) && self.hold.outstanding()
    }

    /// After the close only snapshots look at the socket (the fallback's per-ACK hook is blind past
    /// ESTABLISHED, and no sample would confirm delivery for a whole window): a look that shows
    /// delivery resumed ends the stop there, one that shows nothing left ends it at the last ACK.
    fn look_after_close(&mut self, cfg: &StopConfig, now: u64, ack_ts: u64, out: &mut Vec<Finding>) {
        let Some(start) = self.active else { return };
        if let Some(resumed) = self.resume {
            self.end(cfg, now, start, resumed.max(start), out);
        } else if !self.hold.outstanding() {
            self.end(cfg, now, start, ack_ts.max(start), out);
        }
    }

    /// Each RTT the ACKs acknowledge about all that is in flight (a small cwnd, each window
    /// delivered one RTT after it left): the network holds nothing back; the sender sends little
    /// (lab fuzz seed 1 run 22: cwnd 4 without a loss, 4 segments per 10 ms RTT, 3 MB waiting).
    /// A look that finds all of it acknowledged with data waiting and the window open says the same
    /// (lab fuzz seed 23 run 44: cwnd 4 for 0.2 s without a loss, every ACK emptying the pipe).
    fn flight_cleared_each_rtt(&self) -> bool {
        let h = &self.hold;
        if h.exact && h.in_flight == 0 && h.unsent > 0 && h.usable_wnd >= u64::from(h.mss.max(1)) && self.ev.acks >= 2 {
            return true;
        }
        let last = self.hist.back().map(|&(t, _)| t).unwrap_or(0);
        if !h.exact || h.in_flight == 0 || self.ev.acks < 2 || last <= self.anchor.0 || self.srtt_us == 0 {
            return false;
        }
        let secs = (last - self.anchor.0) as f64 / 1e9;
        let per_rtt = self.ev.delivered as f64 * self.srtt_us as f64 / 1e6 / secs;
        per_rtt >= 0.75 * f64::from(h.in_flight) * f64::from(h.mss.max(1))
    }

    /// ACKs keep coming while the congestion window grows, with no loss, no timeout and no
    /// Recovery: the sender ramping up from a small window (after an idle the kernel restarts
    /// from the initial window; lab fuzz seed 1 run 39: an 8.5 s sender pause at 132 ms RTT, cwnd
    /// 11 and growing, every segment acknowledged an RTT after it left), not the network holding
    /// data back (that loses, retransmits or stops acknowledging).
    fn ramping(&self) -> bool {
        let e = &self.ev;
        e.acks >= 2
            && e.rtos == 0
            && e.retrans_segs == 0
            && e.ca_states.iter().all(|&s| s < CA_RECOVERY)
            && e.min_cwnd.is_some_and(|m| u64::from(self.hold.cwnd) * 2 >= u64::from(m) * 3 && self.hold.cwnd > m)
    }

    /// Owner and cause from what the sender holds and what happened since delivery was healthy.
    /// Timeouts and retransmissions prove data was outstanding, whatever an older look said; an
    /// exact look after the last of them that shows nothing left to send proves it was delivered
    /// (lab fuzz seed 2026 run 7: a sender stopped by SIGSTOP in Recovery, its last data
    /// delivered, was reported as the network's for the 3.4 s of its idle).
    fn judge(&self, cfg: &StopConfig, trusted: bool) -> (StopOwner, &'static str) {
        let e = &self.ev;
        let emptied = self.hold.exact && !self.hold.outstanding() && self.hold.ts_ns > e.last_loss_ns;
        let owner = if (e.rtos > 0 || e.retrans_segs > 0) && !emptied {
            StopOwner::Network
        } else if self.hold.exact
            && self.hold.in_flight > 0
            && self.hold.usable_wnd < self.hold.mss.max(1) as u64
            && e.acks > 0
        {
            // ACKs keep coming and each opens the window by a trickle: a receiver reading slowly,
            // not a network losing data (that would retransmit or time out).
            StopOwner::Receiver
        } else if e.acks > 0 && (self.hold.sender_held() || self.flight_cleared_each_rtt() || self.ramping()) {
            // ACKs keep acknowledging the little that is out while data waits with cwnd and window
            // to spare: the sending host trickles (lab fuzz seed 1 run 3: 4 segments per RTT, each
            // acknowledged one RTT later, 12 MB waiting, cwnd 2396), nothing is stuck in the network.
            StopOwner::Application
        } else if trusted {
            self.hold.owner()
        } else {
            self.hold.decided_owner().unwrap_or(StopOwner::Undetermined)
        };
        let cause = match owner {
            StopOwner::Receiver => "zero_window",
            StopOwner::Application | StopOwner::Undetermined => "undetermined",
            StopOwner::Network => self.network_cause(cfg),
        };
        (owner, cause)
    }

    fn network_cause(&self, cfg: &StopConfig) -> &'static str {
        let e = &self.ev;
        if e.silent_rtos >= cfg.silent_rtos {
            "path_silent"
        } else if e.rtos > 0 && e.silent_rtos == e.rtos {
            // Every timeout so far went unanswered: resends lost again are the silence's doing.
            "rto"
        } else if e.lost_retrans > 0 && e.max_lost_delay_ns > 2 * self.srtt_us as u64 * 1000 {
            "lost_retransmit"
        } else if e.rtos > 0 {
            "rto"
        } else if e.min_cwnd.is_some_and(|c| c <= 2) && e.ca_states.iter().any(|&s| s == CA_RECOVERY || s == CA_LOSS) {
            "cwnd_collapse"
        } else if e.acks == 0 {
            // Data in flight, nothing acknowledged, no timeout yet (a tail-loss probe or fast
            // retransmits may have gone out unanswered): the start of an outage or of heavy loss.
            // Several unanswered timeouts make it path_silent.
            "no_ack"
        } else if e.retrans_segs > 0 && e.ca_states.contains(&CA_RECOVERY) {
            // A window's worth of holes repaired about one per RTT with cwnd still open: recovery
            // without SACK (NewReno, paper 004) or with the scoreboard lost.
            "slow_recovery"
        } else {
            "unknown"
        }
    }

    /// The stop ends at `end`: reported with the owner and cause it had while it lasted.
    fn end(&mut self, cfg: &StopConfig, now: u64, start: u64, end: u64, out: &mut Vec<Finding>) {
        let verdict = self.verdict.take().unwrap_or_else(|| self.judge(cfg, false));
        // The evidence gathered since the last tick (a timeout, say) may name the network cause better.
        let verdict = match verdict {
            (StopOwner::Network, _) => (StopOwner::Network, self.network_cause(cfg)),
            v => v,
        };
        out.push(self.finding(now, start, Some(end), verdict));
        self.active = None;
        self.was_receivers = false;
        self.resume = None;
        self.asked = None;
        self.ev = Evidence::default();
    }

    fn finding(&self, now: u64, start: u64, end: Option<u64>, v: (StopOwner, &str)) -> Finding {
        let e = &self.ev;
        let during = e.delivered;
        let secs = end.unwrap_or(now).saturating_sub(start) as f64 / 1e9;
        let (owner, cause) = v;
        Finding {
            ts_ns: now,
            kind: FindingKind::Stop,
            conn: Some(self.id),
            group: None,
            start_ns: start,
            duration_s: end.map(|_| secs),
            ongoing: end.is_none(),
            cause: cause.into(),
            owner: Some(owner),
            evidence: json!({
                "owner": owner.as_str(),
                "receiver_limited": owner == StopOwner::Receiver,
                "sender_holds": self.hold.evidence(),
                "sender_holds_age_s": now.saturating_sub(self.hold.ts_ns) as f64 / 1e9,
                "srtt_ms": self.srtt_us as f64 / 1e3,
                "rate_before_bps": self.rate_bps,
                "rate_during_bps": if secs > 0.0 { during as f64 / secs } else { 0.0 },
                "bytes_delivered_during": during,
                "rtos": e.rtos,
                "max_backoff": e.max_backoff,
                "rto_wait_s": e.rto_wait_us as f64 / 1e6,
                "lost_retransmits": e.lost_retrans,
                "max_lost_retransmit_delay_s": e.max_lost_delay_ns as f64 / 1e9,
                "retransmitted_segments": e.retrans_segs,
                "retransmissions_per_rtt": if secs > 0.0 && self.srtt_us > 0 {
                    e.retrans_segs as f64 * self.srtt_us as f64 / 1e6 / secs
                } else {
                    0.0
                },
                "min_cwnd": e.min_cwnd,
                "ca_states": e.ca_states.iter().map(|&s| crate::model::record::ca_state_name(s)).collect::<Vec<_>>(),
                "acks_during": e.acks,
            }),
        }
    }
}

/// One record as the detector's trace shows it (`TCPVIGIL_LOG=tcpvigil::stop=trace`).
fn trace_body(b: &Body) -> String {
    match b {
        Body::Sample(s) => format!(
            "sample acked={} packets_out={} unsent={} wnd={} cwnd={} ca={} srtt_us={} drained={}",
            s.bytes_acked,
            s.packets_out,
            s.write_queue.saturating_sub(s.snd_nxt.wrapping_sub(s.snd_una)),
            s.snd_wnd,
            s.cwnd,
            s.ca_state,
            s.srtt_us,
            s.drained
        ),
        Body::Snapshot(s) => format!(
            "snapshot acked={} packets_out={} unsent={} ack_age_us={}",
            s.bytes_acked, s.packets_out, s.unsent, s.last_ack_age_us
        ),
        Body::Retrans(r) => format!("retrans segs={} packets_out={} ca={}", r.segs, r.packets_out, r.ca_state),
        Body::Rto(r) => format!("rto rto_us={} packets_out={}", r.rto_us, r.packets_out),
        Body::CaState(c) => format!("ca_state {}", c.new),
        other => format!("{other:?}").chars().take(60).collect(),
    }
}

pub struct StopDetector {
    cfg: StopConfig,
    conns: HashMap<u64, Conn>,
    want_snapshot: bool,
}

impl StopDetector {
    pub fn new(cfg: StopConfig) -> Self {
        StopDetector { cfg, conns: HashMap::new(), want_snapshot: false }
    }

    pub fn observe(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        // Nothing is kept for a connection whose first records are its state, owner or close
        // (most never move data): its samples or snapshots open it here.
        if matches!(ev.body, Body::State(_) | Body::Owner(_) | Body::Close(_))
            && !self.conns.contains_key(&ev.conn.cookie)
        {
            return;
        }
        let cfg = &self.cfg;
        let c = self.conns.entry(ev.conn.cookie).or_insert_with(|| Conn::new(ev.conn, ev.ts_ns));
        tracing::trace!(target: "tcpvigil::stop", conn = %c.id.tuple, ts = ev.ts_ns, body = %trace_body(&ev.body),
            active = ?c.active, anchor = ?c.anchor, acked = c.acked, healthy = c.seen_healthy, "observe");
        match &ev.body {
            Body::Sample(s) => {
                if s.srtt_us > 0 {
                    c.srtt_us = s.srtt_us;
                }
                if s.mss > 0 {
                    c.mss = s.mss;
                }
                let idle = c.hold;
                c.hold = Hold::of_sample(ev.ts_ns, s);
                c.after_idle(idle, ev.ts_ns);
                c.ev.min_cwnd = Some(c.ev.min_cwnd.map_or(s.cwnd, |m| m.min(s.cwnd)));
                c.ev.ca_states.insert(s.ca_state);
                let healthy_before = c.active.is_none();
                let acked_before = c.acked;
                c.progress(cfg, ev.ts_ns, ev.ts_ns, s.bytes_acked, out);
                c.note_idle(ev.ts_ns, acked_before);
                // Only healthy delivery moves the baseline (a slowdown is not its own yardstick).
                let healthy_now = c.anchor == (ev.ts_ns, c.acked) && c.acked > 0;
                // The baseline is the kernel's per-ACK rate sample, but never more than what was
                // delivered per second over the last window: an application-limited sender's
                // bursts leave at the link's speed, and 5 % of that burst rate was more than it
                // ever averaged, so its delivery never counted as healthy and its outages went
                // unreported (iperf3 -b 50M over a 100 Mbit/s link: 5 of 6 outages missed,
                // agent/tests/app_limited_outage.rs).
                let avg = c.recent_rate(ev.ts_ns, c.acked);
                let r = match s.delivery_rate_bps() {
                    k if k > 0.0 && avg > 0.0 => k.min(avg),
                    k => k.max(avg),
                };
                if healthy_before && healthy_now && c.active.is_none() && r > 0.0 {
                    c.rate_bps = if c.rate_bps == 0.0 { r } else { 0.8 * c.rate_bps + 0.2 * r };
                }
            }
            Body::Snapshot(s) => {
                if s.srtt_us > 0 {
                    c.srtt_us = s.srtt_us;
                }
                let idle = c.hold;
                c.hold = Hold::of_snapshot(ev.ts_ns, s);
                c.after_idle(idle, ev.ts_ns);
                let ack_ts = ev.ts_ns.saturating_sub(s.last_ack_age_us as u64 * 1000);
                let acked_before = c.acked;
                c.progress(cfg, ev.ts_ns, ack_ts, s.bytes_acked, out);
                c.note_idle(ev.ts_ns, acked_before);
                if c.closing {
                    c.look_after_close(cfg, ev.ts_ns, ack_ts, out);
                }
            }
            Body::Retrans(r) => {
                c.hold = c.hold.in_flight_at(ev.ts_ns, r.packets_out);
                // A tail-loss probe (CA state Open) fires 2 srtt after the last send; a fast
                // retransmit needs an ACK's round trip, one srtt at least.
                let srtt = u64::from(c.srtt_us) * 1000;
                c.sent_after_idle(ev.ts_ns, if r.ca_state == 0 { 2 * srtt } else { srtt });
                c.ev.last_loss_ns = ev.ts_ns;
                c.ev.retrans_segs += r.segs as u64;
                if r.lost_retrans {
                    c.ev.lost_retrans += 1;
                    c.ev.max_lost_delay_ns = c.ev.max_lost_delay_ns.max(r.since_prev_ns);
                }
                c.ev.min_cwnd = Some(c.ev.min_cwnd.map_or(r.cwnd, |m| m.min(r.cwnd)));
                c.ev.ca_states.insert(r.ca_state);
            }
            Body::LostRetrans(r) => {
                c.ev.lost_retrans += 1;
                c.ev.max_lost_delay_ns = c.ev.max_lost_delay_ns.max(r.since_prev_ns);
            }
            Body::Rto(r) => {
                c.hold = c.hold.in_flight_at(ev.ts_ns, r.packets_out);
                // The timer was armed by the first send after the idle (or re-armed later), rto
                // before it fired.
                c.sent_after_idle(ev.ts_ns, u64::from(r.rto_us) * 1000);
                c.ev.last_loss_ns = ev.ts_ns;
                c.ev.rtos += 1;
                if c.ev.delivered == 0 {
                    c.ev.silent_rtos += 1;
                }
                c.ev.max_backoff = c.ev.max_backoff.max(r.backoff);
                c.ev.rto_wait_us += r.rto_us as u64;
                c.ev.ca_states.insert(CA_LOSS);
            }
            Body::CaState(s) => {
                c.ev.ca_states.insert(s.new);
                c.ev.min_cwnd = Some(c.ev.min_cwnd.map_or(s.cwnd, |m| m.min(s.cwnd)));
            }
            Body::Close(_) => {
                c.closed = true;
                if let Some(start) = c.active {
                    // Delivery seen resuming (not yet for a whole window) ended the stop then.
                    let end = c.resume.unwrap_or(ev.ts_ns).max(start);
                    c.end(cfg, ev.ts_ns, start, end, out);
                }
            }
            Body::State(st) => {
                const ESTABLISHED: u8 = 1;
                const CLOSE: u8 = 7;
                c.closing = st.new != ESTABLISHED;
                if let Some(start) = c.active.filter(|_| c.closing) {
                    if st.new == CLOSE || !c.outlives_close() {
                        c.end(cfg, ev.ts_ns, start, ev.ts_ns, out);
                    }
                }
                // Gone (one that never moved data gets no Close record).
                c.closed |= st.new == CLOSE;
            }
            Body::Owner(_) => {}
        }
    }

    /// Whether a stop candidate waits for a fresh look at its sender: the caller should take a
    /// snapshot now (its records come back through `observe`). Cleared by the call.
    pub fn wants_snapshot(&mut self) -> bool {
        std::mem::take(&mut self.want_snapshot)
    }

    pub fn tick(&mut self, now: u64, out: &mut Vec<Finding>) {
        let cfg = &self.cfg;
        self.conns.retain(|_, c| !c.closed);
        for c in self.conns.values_mut() {
            let threshold = cfg.threshold_ns(c.srtt_us);
            if let Some(start) = c.active {
                let h = c.hold;
                if c.owner_so_far() == StopOwner::Network
                    && h.exact
                    && h.in_flight == 0
                    && h.ts_ns > c.ev.last_loss_ns.max(start)
                {
                    // Everything sent was delivered after the last loss: the network holds nothing
                    // back, whatever waits behind the window now (lab fuzz seed 31 run 9: an outage,
                    // 0.2 s of delivery, then a receiver's zero window, one network stop through
                    // both). It ended when delivery resumed; a receiver's stall is a stop of its own.
                    let end = c.resume.unwrap_or(h.ts_ns).max(start);
                    c.last_stop = Some((start, end, StopOwner::Network));
                    c.end(cfg, now, start, end, out);
                    c.anchor = (h.ts_ns, c.acked);
                    continue;
                }
                if let Some(resumed) = c.resume {
                    // Delivery resumed and a later exact look shows nothing left to send: the
                    // window that would confirm it never comes (the sender went idle), so the stop
                    // ended when delivery resumed.
                    if c.hold.exact && !c.hold.outstanding() && c.hold.ts_ns >= resumed {
                        c.last_stop = Some((start, resumed.max(start), c.owner_so_far()));
                        c.end(cfg, now, start, resumed.max(start), out);
                        c.anchor = (now, c.acked);
                    }
                    continue;
                }
                let mut v = c.judge(cfg, false);
                if c.was_receivers && v.0 == StopOwner::Network && c.ev.rtos == 0 {
                    // The window opened and data is in flight again: the receiver's stop winds
                    // down. The burst that refills the window may lose a few segments at the
                    // bottleneck and be repaired by fast retransmits (lab fuzz seed 2026 run 9:
                    // 3 retransmissions after a 3.3 s zero window turned it network/slow_recovery);
                    // that is not what stopped the transfer. Only a timeout makes it the network's,
                    // also when a stale look made it undetermined meanwhile (lab fuzz seed 23 run
                    // 85: receiver -> undetermined -> network/unknown in a 24 s zero window).
                    v = (StopOwner::Receiver, "zero_window");
                }
                if v.0 == StopOwner::Application && c.hold.ts_ns > start {
                    // Everything sent was delivered and nothing waits: the sender has nothing to
                    // send, which is no stop (the end of a transfer, an application pause).
                    let end = c.hold.ts_ns.max(start);
                    c.end(cfg, now, start, end, out);
                    c.anchor = (now, c.acked);
                    continue;
                }
                if c.verdict != Some(v) && v.0 != StopOwner::Application {
                    // The owner or cause became clearer (a fresh look, timeouts): say so now.
                    c.verdict = Some(v);
                    c.was_receivers |= v.0 == StopOwner::Receiver;
                    out.push(c.finding(now, start, None, v));
                }
                continue;
            }
            if !c.hold.outstanding() || c.closing || !c.seen_healthy || c.acked < cfg.min_bytes {
                // Nothing to send is not a stop: an idle connection starts afresh. Nor is a
                // connection that is not bulk yet: the kernel samples it only from then on, so its
                // clock starts there, not at its last sample before (lab fuzz seed 23 run 56: a
                // 2 Mbit/s sender's burst crossing 1 MiB after an idle the kernel did not report,
                // reported as a network stop dated from the burst before).
                c.anchor = (now, c.acked);
                c.ev = Evidence::default();
                c.asked = None;
                continue;
            }
            let quiet = now.saturating_sub(c.anchor.0);
            if quiet > threshold / 2 {
                tracing::trace!(target: "tcpvigil::stop", conn = %c.id.tuple, now, quiet, threshold, acked = c.acked,
                    hold = ?c.hold, retrans = c.ev.retrans_segs, rtos = c.ev.rtos, asked = ?c.asked, "candidate");
            }
            if quiet * 4 < threshold * 3 {
                continue;
            }
            // Past three quarters of the threshold: make sure the owner can be decided by then.
            // Silence alone (no timeout, no retransmission) may be the fallback's lag: it reports a
            // bulk connection's ACK when the next one arrives, so ACKs 50 ms apart look like 100-150
            // ms of silence (lab fuzz seed 7 runs 86 and 93: a receiver's ACKs 52 ms apart while its
            // window closed, reported network/no_ack). A fresh look flushes what the kernel holds
            // back; it is waited for a little past the threshold, within the time to report.
            let silent_only = c.ev.rtos == 0 && c.ev.retrans_segs == 0 && c.hold.in_flight > 0;
            let decided = c.ev.rtos > 0 || c.ev.retrans_segs > 0 || c.hold.decided_owner().is_some();
            if (!decided || silent_only) && c.asked.is_none() {
                c.asked = Some(now);
                self.want_snapshot = true;
            }
            if quiet <= threshold {
                continue;
            }
            let waited_out = c.asked.is_some_and(|t| now >= t + cfg.confirm_ms * 1_000_000);
            if !decided && !waited_out {
                continue;
            }
            let looked = c.asked.is_some_and(|t| c.hold.ts_ns >= t);
            if silent_only && !looked && now < c.anchor.0 + threshold + LOOK_WAIT_NS {
                continue;
            }
            let v = c.judge(cfg, false);
            if v.0 == StopOwner::Application {
                continue;
            }
            let start = match c.last_stop {
                Some((s, e, o)) if c.anchor.0.saturating_sub(e) <= threshold && o == v.0 => s,
                _ => c.anchor.0,
            };
            c.active = Some(start);
            c.verdict = Some(v);
            c.was_receivers = v.0 == StopOwner::Receiver;
            out.push(c.finding(now, start, None, v));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use crate::model::record::{Sample, SampleSrc};

    /// A bulk sample with `acked` bytes acknowledged and otherwise healthy numbers.
    pub fn sample(acked: u64) -> Sample {
        Sample {
            src: SampleSrc::Probe,
            selected: false,
            ack_seq: 0,
            snd_una: 0,
            snd_nxt: 0,
            high_seq: 0,
            cwnd: 80,
            ssthresh: 100,
            packets_out: 50,
            lost_out: 0,
            sacked_out: 0,
            retrans_out: 0,
            in_flight: 50,
            ca_state: 0,
            srtt_us: 20_000,
            rto_us: 220_000,
            mss: 1448,
            delivered: 0,
            total_retrans: 0,
            snd_wnd: 1 << 20,
            write_queue: 1 << 20,
            rate_delivered: 100,
            rate_interval_us: 10_000,
            bytes_acked: acked,
            sack: vec![],
            dsack: false,
            drained: false,
            round: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::record::Rto;
    use crate::model::Tuple;

    const MS: u64 = 1_000_000;

    fn id() -> ConnId {
        ConnId {
            cookie: 1,
            netns: 1,
            tuple: Tuple { local: "10.0.0.1:4000".parse().unwrap(), remote: "10.0.0.2:5201".parse().unwrap() },
        }
    }

    fn sample(acked: u64, cwnd: u32, ca: u8, wnd: u32) -> Body {
        let mut s = super::tests_support::sample(acked);
        s.cwnd = cwnd;
        s.ca_state = ca;
        s.snd_wnd = wnd;
        Body::Sample(s)
    }

    fn ev(ts: u64, body: Body) -> Event {
        Event { ts_ns: ts, conn: id(), body }
    }

    /// 25 MB/s for `ms` from `t0`: a sample every 50 ms; returns (end time, bytes acked).
    fn healthy(d: &mut StopDetector, out: &mut Vec<Finding>, t0: u64, acked0: u64, ms: u64) -> (u64, u64) {
        let mut acked = acked0;
        let mut t = t0;
        while t < t0 + ms * MS {
            t += 50 * MS;
            acked += 1_250_000;
            d.observe(&ev(t, sample(acked, 80, 0, 1 << 20)), out);
            d.tick(t, out);
        }
        (t, acked)
    }

    /// Nothing arrives after `t`; timeouts back off 220, 440, 880 ms with 50 segments in flight.
    /// Returns the time of the last one.
    fn three_timeouts(d: &mut StopDetector, out: &mut Vec<Finding>, t: u64) -> u64 {
        let mut at = t;
        for (i, wait) in [220u64, 440, 880].iter().enumerate() {
            run_ticks(d, out, at, at + wait * MS);
            at += wait * MS;
            let rto = Rto {
                retransmits: i as u32,
                rto_us: (*wait * 1000) as u32,
                backoff: i as u32,
                cwnd: 1,
                packets_out: 50,
                ..Default::default()
            };
            d.observe(&ev(at, Body::Rto(rto)), out);
        }
        at
    }

    fn run_ticks(d: &mut StopDetector, out: &mut Vec<Finding>, from: u64, to: u64) {
        let mut t = from;
        while t < to {
            t += 50 * MS;
            d.tick(t, out);
        }
    }

    #[test]
    fn a_clean_transfer_raises_nothing() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        healthy(&mut d, &mut out, 0, 0, 5000);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn silence_with_repeated_timeouts_is_a_path_silent_stop_found_while_it_lasts() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 2000);
        let at = three_timeouts(&mut d, &mut out, t);
        let first = out.first().expect("found while in progress").clone();
        assert!(first.ongoing);
        assert_eq!(first.start_ns, t);
        // 2 RTT + 200 ms = 240 ms at 20 ms RTT.
        assert!(first.ts_ns - t <= 240 * MS, "found {} ms after the start", (first.ts_ns - t) / MS);
        // Delivery resumes.
        run_ticks(&mut d, &mut out, at, at + 100 * MS);
        let resume = at + 150 * MS;
        d.observe(&ev(resume, sample(acked + 2_000_000, 2, 4, 1 << 20)), &mut out);
        d.observe(&ev(resume + 150 * MS, sample(acked + 6_000_000, 20, 0, 1 << 20)), &mut out);
        let last = out.last().unwrap();
        assert!(!last.ongoing);
        assert_eq!(last.cause, "path_silent");
        let dur = last.duration_s.unwrap();
        let truth = (resume - t) as f64 / 1e9;
        assert!((dur - truth).abs() < 0.06, "{dur} vs {truth}");
    }

    #[test]
    fn one_timeout_that_ends_the_stop_is_an_rto_stop() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        run_ticks(&mut d, &mut out, t, t + 300 * MS);
        d.observe(
            &ev(
                t + 300 * MS,
                Body::Rto(Rto {
                    retransmits: 0,
                    rto_us: 220_000,
                    backoff: 0,
                    cwnd: 1,
                    packets_out: 50,
                    ..Default::default()
                }),
            ),
            &mut out,
        );
        d.observe(&ev(t + 350 * MS, sample(acked + 3_000_000, 2, 4, 1 << 20)), &mut out);
        d.observe(&ev(t + 500 * MS, sample(acked + 7_000_000, 20, 0, 1 << 20)), &mut out);
        let last = out.last().expect("a stop");
        assert_eq!(last.cause, "rto");
        assert!(!last.ongoing);
    }

    #[test]
    fn cwnd_one_in_recovery_delivering_a_segment_per_rtt_is_cwnd_collapse() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        for _ in 0..40 {
            t += 20 * MS;
            acked += 1448;
            d.observe(&ev(t, sample(acked, 1, CA_RECOVERY, 1 << 20)), &mut out);
            d.tick(t, &mut out);
        }
        d.observe(&ev(t + 50 * MS, sample(acked + 5_000_000, 40, 0, 1 << 20)), &mut out);
        d.observe(&ev(t + 200 * MS, sample(acked + 9_000_000, 40, 0, 1 << 20)), &mut out);
        let last = out.last().expect("a stop");
        assert_eq!(last.cause, "cwnd_collapse");
        assert!(out.iter().any(|f| f.ongoing), "reported while in progress");
    }

    #[test]
    fn a_stop_that_ends_for_a_moment_and_goes_on_is_one_stop() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        run_ticks(&mut d, &mut out, t, t + 400 * MS);
        let first = out.first().expect("a stop").start_ns;
        // Delivery for just over the resume window ends it; then nothing again.
        let (t2, acked2) = healthy(&mut d, &mut out, t + 400 * MS, acked, 150);
        assert!(out.iter().any(|f| !f.ongoing), "the stop ended for a moment: {out:?}");
        run_ticks(&mut d, &mut out, t2, t2 + 600 * MS);
        healthy(&mut d, &mut out, t2 + 600 * MS, acked2, 300);
        assert!(out.iter().all(|f| f.start_ns == first), "{:?}", out.iter().map(|f| f.start_ns).collect::<Vec<_>>());
        let last = out.last().unwrap();
        assert!(!last.ongoing && last.duration_s.unwrap() > 0.9, "{last:?}");
    }

    #[test]
    fn a_receivers_stall_right_after_a_network_stop_is_a_stop_of_its_own() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        run_ticks(&mut d, &mut out, t, t + 400 * MS);
        let network = out.first().expect("a stop").start_ns;
        // Delivery for just over the resume window ends it; then the receiver's window closes.
        let (t2, acked2) = healthy(&mut d, &mut out, t + 400 * MS, acked, 150);
        d.observe(&ev(t2 + 10 * MS, drained(acked2, 4 << 20, 0)), &mut out);
        run_ticks(&mut d, &mut out, t2 + 10 * MS, t2 + 1000 * MS);
        let (net, rcv): (Vec<_>, Vec<_>) = out.iter().partition(|f| f.start_ns == network);
        assert!(net.iter().all(|f| f.owner == Some(StopOwner::Network)), "{net:?}");
        assert!(net.last().is_some_and(|f| !f.ongoing), "{net:?}");
        assert!(!rcv.is_empty() && rcv.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{rcv:?}");
    }

    #[test]
    fn a_network_stop_ends_when_everything_sent_is_delivered_though_the_window_then_closes() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        let at = three_timeouts(&mut d, &mut out, t);
        assert!(out.first().is_some_and(|f| f.owner == Some(StopOwner::Network)), "{out:?}");
        // Delivery resumes for 50 ms (under the window that confirms it), then the last ACK
        // acknowledges everything sent and closes the window: the receiver stopped reading.
        let (t2, acked2) = healthy(&mut d, &mut out, at + 20 * MS, acked, 50);
        d.observe(&ev(t2 + 10 * MS, drained(acked2 + 1448, 4 << 20, 0)), &mut out);
        run_ticks(&mut d, &mut out, t2 + 10 * MS, t2 + 1500 * MS);
        let network = out[0].start_ns;
        let (net, rcv): (Vec<_>, Vec<_>) = out.iter().partition(|f| f.start_ns == network);
        assert!(net.iter().all(|f| f.owner == Some(StopOwner::Network)), "{net:?}");
        let end = net.last().expect("network");
        assert!(!end.ongoing && end.start_ns + (end.duration_s.unwrap() * 1e9) as u64 <= t2 + 10 * MS, "{end:?}");
        assert!(!rcv.is_empty() && rcv.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{rcv:?}");
    }

    #[test]
    fn recovery_repairing_one_hole_per_rtt_with_cwnd_open_is_slow_recovery() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        // Without SACK each partial ACK repairs one hole: one retransmission and one segment per RTT.
        for i in 0..40 {
            t += 20 * MS;
            acked += 1448;
            let r = crate::model::Retrans {
                seq: i,
                end_seq: i + 1448,
                segs: 1,
                sacked: 0x84,
                ca_state: CA_RECOVERY,
                count: 1,
                since_prev_ns: 0,
                lost_retrans: false,
                failed: false,
                cwnd: 600,
                ssthresh: 600,
                packets_out: 1500,
                lost_out: 1,
                sacked_out: 0,
                retrans_out: 1,
                snd_una: 0,
            };
            d.observe(&ev(t, Body::Retrans(r)), &mut out);
            d.observe(&ev(t, sample(acked, 600, CA_RECOVERY, 1 << 20)), &mut out);
            d.tick(t, &mut out);
        }
        d.observe(&ev(t + 50 * MS, sample(acked + 5_000_000, 600, 0, 1 << 20)), &mut out);
        d.observe(&ev(t + 200 * MS, sample(acked + 9_000_000, 600, 0, 1 << 20)), &mut out);
        let last = out.last().expect("a stop");
        assert_eq!(last.cause, "slow_recovery", "{}", last.evidence);
        let per_rtt = last.evidence["retransmissions_per_rtt"].as_f64().unwrap();
        assert!((0.7..=1.3).contains(&per_rtt), "{per_rtt} retransmissions per RTT");
    }

    #[test]
    fn a_retransmission_lost_again_and_resent_late_is_named_with_its_delay() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        run_ticks(&mut d, &mut out, t, t + 400 * MS);
        let r = crate::model::Retrans {
            seq: 1,
            end_seq: 2,
            segs: 1,
            sacked: 0x94,
            ca_state: 3,
            count: 2,
            since_prev_ns: 380 * MS,
            lost_retrans: true,
            failed: false,
            cwnd: 1,
            ssthresh: 10,
            packets_out: 10,
            lost_out: 1,
            sacked_out: 5,
            retrans_out: 0,
            snd_una: 0,
        };
        d.observe(&ev(t + 400 * MS, Body::Retrans(r)), &mut out);
        d.observe(&ev(t + 450 * MS, sample(acked + 3_000_000, 10, 0, 1 << 20)), &mut out);
        d.observe(&ev(t + 600 * MS, sample(acked + 7_000_000, 10, 0, 1 << 20)), &mut out);
        let last = out.last().expect("a stop");
        assert_eq!(last.cause, "lost_retransmit");
        assert_eq!(last.evidence["max_lost_retransmit_delay_s"], 0.38);
    }

    /// The state an ACK of everything sent leaves: nothing in flight, `unsent` bytes waiting,
    /// the window it advertises.
    fn drained(acked: u64, unsent: u32, wnd: u32) -> Body {
        let mut s = super::tests_support::sample(acked);
        s.drained = true;
        s.packets_out = 0;
        s.in_flight = 0;
        s.snd_una = 5000;
        s.snd_nxt = 5000;
        s.write_queue = unsent;
        s.snd_wnd = wnd;
        Body::Sample(s)
    }

    fn snapshot(acked: u64, packets_out: u32, unsent: u32, wnd: u32, last_ack_age_us: u32) -> Body {
        Body::Snapshot(crate::model::Snap {
            state: 1,
            srtt_us: 20_000,
            mss: 1448,
            packets_out,
            unsent,
            write_queue: unsent + packets_out * 1448,
            snd_una: 5000,
            snd_nxt: 5000 + packets_out * 1448,
            snd_wnd: wnd,
            bytes_acked: acked,
            last_ack_age_us,
            ..Default::default()
        })
    }

    #[test]
    fn a_receiver_that_stops_reading_is_the_receivers_stop_from_the_first_report() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        // The last ACK acknowledges everything sent and closes the window; 4 MiB wait.
        d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 0)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 3000 * MS);
        assert!(!d.wants_snapshot(), "the drained ACK decides it: no snapshot needed");
        let first = out.first().expect("a stop");
        assert_eq!((first.owner, first.cause.as_str()), (Some(StopOwner::Receiver), "zero_window"));
        assert!(first.ongoing);
        assert_eq!(first.evidence["receiver_limited"], true);
        assert!(out.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{out:?}");
        // The receiver reads again: the window opens and delivery resumes.
        healthy(&mut d, &mut out, t + 3000 * MS, acked, 500);
        let last = out.last().unwrap();
        assert!(!last.ongoing);
        assert_eq!((last.owner, last.cause.as_str()), (Some(StopOwner::Receiver), "zero_window"));
    }

    #[test]
    fn fast_retransmits_of_the_burst_that_refills_the_window_leave_the_stop_the_receivers() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 0)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 3000 * MS);
        assert!(out.first().is_some_and(|f| f.owner == Some(StopOwner::Receiver)), "{out:?}");
        // The window opens: a burst, three segments lost at the bottleneck and fast-retransmitted
        // in Recovery while delivery picks up slowly.
        let mut t = t + 3000 * MS;
        for i in 0..3u32 {
            t += 20 * MS;
            let r = crate::model::Retrans {
                seq: i,
                end_seq: i + 1448,
                segs: 1,
                sacked: 0x84,
                ca_state: CA_RECOVERY,
                count: 1,
                since_prev_ns: 0,
                lost_retrans: false,
                failed: false,
                cwnd: 300,
                ssthresh: 300,
                packets_out: 250,
                lost_out: 1,
                sacked_out: 10,
                retrans_out: 1,
                snd_una: 0,
            };
            d.observe(&ev(t, Body::Retrans(r)), &mut out);
            d.observe(&ev(t, sample(acked + u64::from(i) * 1448, 300, CA_RECOVERY, 10 << 20)), &mut out);
            d.tick(t, &mut out);
        }
        healthy(&mut d, &mut out, t, acked + 5000, 1000);
        let last = out.last().unwrap();
        assert!(!last.ongoing, "{out:?}");
        assert!(out.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{out:?}");
    }

    #[test]
    fn a_receivers_stop_made_undetermined_by_a_stale_look_does_not_become_the_networks_without_a_timeout() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 0)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 2000 * MS);
        assert!(out.first().is_some_and(|f| f.owner == Some(StopOwner::Receiver)), "{out:?}");
        // A per-ACK sample of a selected connection (one ACK behind, not exact): window open,
        // nothing in flight, data waiting: the look cannot tell.
        let mut s = super::tests_support::sample(acked);
        (s.selected, s.packets_out, s.in_flight, s.snd_nxt, s.snd_una, s.write_queue) =
            (true, 0, 0, 5000, 5000, 4 << 20);
        d.observe(&ev(t + 2010 * MS, Body::Sample(s)), &mut out);
        run_ticks(&mut d, &mut out, t + 2010 * MS, t + 2100 * MS);
        assert!(out.iter().any(|f| f.owner == Some(StopOwner::Undetermined)), "{out:?}");
        // Then data in flight again, nothing delivered yet, no timeout: the stop winding down.
        d.observe(&ev(t + 2120 * MS, snapshot(acked, 200, 3 << 20, 8 << 20, 2_000_000)), &mut out);
        run_ticks(&mut d, &mut out, t + 2120 * MS, t + 2300 * MS);
        assert!(out.iter().all(|f| f.owner != Some(StopOwner::Network)), "{out:?}");
    }

    #[test]
    fn a_receiver_reading_a_trickle_with_its_window_full_is_the_receivers_stop() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        // Every 100 ms an ACK for 2 KB opens the window by as much, which the sender fills at once.
        for _ in 0..20 {
            t += 100 * MS;
            acked += 2000;
            let mut s = super::tests_support::sample(acked);
            s.packets_out = 2;
            s.snd_una = 10_000;
            s.snd_nxt = 12_000;
            s.snd_wnd = 2000;
            d.observe(&ev(t, Body::Sample(s)), &mut out);
            d.tick(t, &mut out);
        }
        let first = out.first().expect("a stop: almost nothing delivered");
        assert_eq!((first.owner, first.cause.as_str()), (Some(StopOwner::Receiver), "zero_window"), "{out:?}");
        assert!(out.iter().all(|f| f.owner != Some(StopOwner::Network)), "{out:?}");
    }

    #[test]
    fn a_stale_look_asks_for_a_snapshot_and_reports_nothing_network_before_it() {
        // The last report is a drained ACK with data waiting and the window open (the kernel
        // sends at once), so it cannot say whose the silence is.
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 1 << 20)), &mut out);
        let mut asked = None;
        let mut at = t + 10 * MS;
        while asked.is_none() && at < t + 1000 * MS {
            at += 20 * MS;
            d.tick(at, &mut out);
            if d.wants_snapshot() {
                asked = Some(at);
            }
        }
        let asked = asked.expect("a snapshot is asked for");
        // 3/4 of the 140 ms threshold (20 ms RTT): asked before the stop could be reported.
        assert!(asked - t <= 130 * MS, "asked {} ms after the last ACK", (asked - t) / MS);
        assert!(out.is_empty(), "nothing reported before the fresh look: {out:?}");
        // The snapshot: the window is closed, nothing in flight.
        d.observe(&ev(asked + 5 * MS, snapshot(acked, 0, 4 << 20, 0, 150_000)), &mut out);
        run_ticks(&mut d, &mut out, asked + 5 * MS, asked + 500 * MS);
        let first = out.first().expect("a stop once the snapshot decided");
        assert_eq!((first.owner, first.cause.as_str()), (Some(StopOwner::Receiver), "zero_window"));
        assert!(first.ts_ns - t <= 240 * MS, "reported {} ms after the start", (first.ts_ns - t) / MS);
    }

    #[test]
    fn a_look_that_never_comes_is_reported_as_undetermined_not_as_the_network() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 1 << 20)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 2000 * MS);
        let first = out.first().expect("reported once the wait for a look ran out");
        assert_eq!((first.owner, first.cause.as_str()), (Some(StopOwner::Undetermined), "undetermined"));
        assert!(first.ts_ns - t <= (140 + 250 + 40) * MS);
        assert!(out.iter().all(|f| f.owner != Some(StopOwner::Network)), "{out:?}");
    }

    #[test]
    fn an_outage_is_the_network_from_the_first_report_and_becomes_path_silent_with_its_timeouts() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 2000);
        let at = three_timeouts(&mut d, &mut out, t);
        run_ticks(&mut d, &mut out, at, at + 100 * MS);
        // Silence alone may be the fallback's lag (it reports an ACK when the next one arrives): a
        // fresh look was asked for; none came, and the stop was reported all the same.
        assert!(d.wants_snapshot(), "silence alone asks for a fresh look");
        let causes: Vec<_> = out.iter().map(|f| (f.owner, f.cause.as_str(), f.ongoing)).collect();
        let net = Some(StopOwner::Network);
        assert_eq!(causes.first(), Some(&(net, "no_ack", true)), "{causes:?}");
        assert!(causes.contains(&(net, "rto", true)), "{causes:?}");
        assert_eq!(causes.last(), Some(&(net, "path_silent", true)), "{causes:?}");
        assert!(out.iter().all(|f| f.start_ns == t));
        d.observe(&ev(at + 150 * MS, sample(acked + 2_000_000, 2, 4, 1 << 20)), &mut out);
        d.observe(&ev(at + 300 * MS, sample(acked + 6_000_000, 20, 0, 1 << 20)), &mut out);
        let last = out.last().unwrap();
        assert_eq!((last.owner, last.cause.as_str(), last.ongoing), (net, "path_silent", false));
    }

    #[test]
    fn acks_seen_one_late_on_a_slow_ack_clock_are_no_stop_once_a_fresh_look_flushes_them() {
        // A receiver's ACKs come 52 ms apart; the fallback reports each one when the next arrives,
        // every other one only: the daemon's last delivery is 104-156 ms old at its ticks.
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        run_ticks(&mut d, &mut out, t, t + 150 * MS);
        assert!(d.wants_snapshot(), "silence past 3/4 of the threshold asks for a look");
        d.tick(t + 170 * MS, &mut out);
        assert!(out.is_empty(), "reported before the look it asked for: {out:?}");
        // The look: the pending ACK of t + 104 ms flushed, then the snapshot itself.
        // Two ACKs of 75 kB each (the first never reported on its own): 1.4 MB/s, a tenth of the rate.
        let mut s = super::tests_support::sample(acked + 150_000);
        s.snd_wnd = 1 << 20;
        d.observe(&ev(t + 104 * MS, Body::Sample(s)), &mut out);
        d.observe(&ev(t + 175 * MS, snapshot(acked + 150_000, 30, 100_000, 1 << 20, 71_000)), &mut out);
        // Delivery at t + 104 ms: the quiet starts there (the ACKs that follow would go on moving it).
        run_ticks(&mut d, &mut out, t + 175 * MS, t + 225 * MS);
        assert!(out.is_empty(), "{out:?}");

        // Real silence: the look shows nothing more delivered, and the stop is the network's.
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        run_ticks(&mut d, &mut out, t, t + 150 * MS);
        assert!(d.wants_snapshot());
        d.observe(&ev(t + 160 * MS, snapshot(acked, 30, 100_000, 1 << 20, 160_000)), &mut out);
        d.tick(t + 170 * MS, &mut out);
        let first = out.first().expect("reported at the first tick past the threshold after the look");
        assert_eq!((first.owner, first.cause.as_str()), (Some(StopOwner::Network), "no_ack"));
    }

    #[test]
    fn a_network_stop_outlives_the_close_until_a_look_shows_delivery() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 2000);
        let at = three_timeouts(&mut d, &mut out, t);
        assert!(out.iter().any(|f| f.ongoing && f.owner == Some(StopOwner::Network)), "{out:?}");
        // The application closes (FIN_WAIT1) while 50 segments still wait for the path.
        let closed = at + 10 * MS;
        d.observe(&ev(closed, Body::State(crate::model::record::StateChange { old: 1, new: 4 })), &mut out);
        run_ticks(&mut d, &mut out, closed, closed + 1000 * MS);
        assert!(out.iter().all(|f| f.ongoing), "the close ended a stop whose data was still in flight: {out:?}");
        // A look a second later: nothing more delivered, still stopped.
        let age = |ts: u64| ((ts - t) / 1000) as u32;
        d.observe(&ev(closed + 1000 * MS, snapshot(acked, 50, 100_000, 1 << 20, age(closed + 1000 * MS))), &mut out);
        run_ticks(&mut d, &mut out, closed + 1000 * MS, closed + 2000 * MS);
        assert!(out.iter().all(|f| f.ongoing), "{out:?}");
        // Delivery resumed at `resumed`; the next look shows everything delivered by then.
        let resumed = closed + 1500 * MS;
        d.observe(&ev(closed + 2000 * MS, snapshot(acked + 3_000_000, 0, 0, 1 << 20, 500_000)), &mut out);
        let last = out.last().unwrap();
        assert!(!last.ongoing, "{out:?}");
        assert_eq!(last.owner, Some(StopOwner::Network));
        let end = last.start_ns + (last.duration_s.unwrap() * 1e9) as u64;
        assert!(end.abs_diff(resumed) < MS, "ended {} ms from the delivery", end.abs_diff(resumed) / MS);

        // Without data outstanding the close ends the stop at once, as before.
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 10 * MS, drained(acked, 300_000, 0)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 1000 * MS);
        assert!(out.iter().any(|f| f.ongoing && f.owner == Some(StopOwner::Receiver)), "{out:?}");
        d.observe(&ev(t + 1010 * MS, Body::State(crate::model::record::StateChange { old: 1, new: 4 })), &mut out);
        assert!(!out.last().unwrap().ongoing, "a receiver's stop ends at the close: {out:?}");
    }

    #[test]
    fn the_end_of_a_transfer_and_an_application_pause_are_no_stop() {
        // The last ACK acknowledges everything and nothing waits: the application is done.
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 10 * MS, drained(acked, 0, 1 << 20)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 5000 * MS);
        assert!(out.is_empty(), "an app-limited sender is not stopped: {out:?}");
        assert!(!d.wants_snapshot());
        // The application writes again and the transfer goes on: still nothing.
        healthy(&mut d, &mut out, t + 5000 * MS, acked, 1000);
        assert!(out.is_empty(), "{out:?}");

        // A periodic sample showed data in flight; the ACKs after it that emptied the pipe were
        // not reported (a stale look): the snapshot shows the sender had nothing left to send.
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        let mut stale = super::tests_support::sample(acked);
        stale.selected = true;
        d.observe(&ev(t + 10 * MS, Body::Sample(stale)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 120 * MS);
        assert!(d.wants_snapshot());
        d.observe(&ev(t + 125 * MS, snapshot(acked + 100_000, 0, 0, 1 << 20, 100_000)), &mut out);
        run_ticks(&mut d, &mut out, t + 125 * MS, t + 3000 * MS);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn an_idle_the_ticks_missed_does_not_count_towards_a_stop() {
        // The ACK that empties the pipe leaves nothing to send; the daemon ticks again only after
        // the application wrote again and that data's first ACK came (a starved daemon): the idle
        // was no stop, and the new data has been out for one srtt only.
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 10 * MS, drained(acked, 0, 1 << 20)), &mut out);
        let mut s = super::tests_support::sample(acked + 2896);
        s.packets_out = 2000;
        d.observe(&ev(t + 200 * MS, Body::Sample(s)), &mut out);
        run_ticks(&mut d, &mut out, t + 200 * MS, t + 260 * MS);
        assert!(out.is_empty(), "an application idle seen late is no stop: {out:?}");
        healthy(&mut d, &mut out, t + 260 * MS, acked + 2896, 1000);
        assert!(out.is_empty(), "{out:?}");
        // The same data never acknowledged is a network stop, timed from when it was sent.
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 10 * MS, drained(acked, 0, 1 << 20)), &mut out);
        let mut s = super::tests_support::sample(acked);
        s.packets_out = 2000;
        d.observe(&ev(t + 200 * MS, Body::Sample(s)), &mut out);
        run_ticks(&mut d, &mut out, t + 200 * MS, t + 1000 * MS);
        let first = out.first().expect("a stop");
        assert_eq!(first.owner, Some(StopOwner::Network));
        assert!(first.start_ns >= t + 150 * MS, "start {} vs {}", first.start_ns, t + 180 * MS);
    }

    #[test]
    fn a_sender_trickling_with_cwnd_and_window_to_spare_is_no_network_stop() {
        let trickle = |packets_out: u32, cwnd: u32| {
            let mut d = StopDetector::new(StopConfig::default());
            let mut out = vec![];
            let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
            // Every RTT (20 ms) an ACK for the 4 segments out; 12 MB wait; the window is open.
            for _ in 0..30 {
                t += 20 * MS;
                acked += 4 * 1448;
                let mut s = super::tests_support::sample(acked);
                (s.packets_out, s.cwnd, s.write_queue, s.snd_wnd) = (packets_out, cwnd, 12 << 20, 10 << 20);
                s.snd_nxt = s.snd_una.wrapping_add(packets_out * 1448);
                d.observe(&ev(t, Body::Sample(s)), &mut out);
                d.tick(t, &mut out);
            }
            out
        };
        let out = trickle(4, 2396);
        assert!(out.is_empty(), "the sending host held it back: {out:?}");
        // cwnd 4 without a loss: the 4 segments out are acknowledged every RTT.
        let out = trickle(4, 4);
        assert!(out.is_empty(), "each window delivered an RTT after it left: {out:?}");
        // The same trickle with the flight filling cwnd is delivery collapsing in the network.
        let out = trickle(80, 80);
        assert!(out.first().is_some_and(|f| f.owner == Some(StopOwner::Network)), "{out:?}");
    }

    #[test]
    fn a_sender_ramping_up_from_a_small_window_is_no_network_stop() {
        // After healthy delivery the sender starts again from cwnd 10 (as after an idle) at
        // 132 ms RTT: each RTT the ACKs acknowledge the last window and cwnd doubles.
        let ramp = |grows: bool| {
            let mut d = StopDetector::new(StopConfig::default());
            let mut out = vec![];
            let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
            let mut cwnd = 10u32;
            for _ in 0..6 {
                run_ticks(&mut d, &mut out, t, t + 130 * MS);
                t += 132 * MS;
                acked += u64::from(cwnd / 2) * 1448;
                let mut s = super::tests_support::sample(acked);
                (s.packets_out, s.cwnd, s.write_queue, s.snd_wnd, s.srtt_us) =
                    (cwnd, cwnd, 12 << 20, 10 << 20, 132_000);
                s.snd_nxt = s.snd_una.wrapping_add(cwnd * 1448);
                d.observe(&ev(t, Body::Sample(s)), &mut out);
                if grows {
                    cwnd *= 2;
                }
            }
            out
        };
        let out = ramp(true);
        assert!(out.iter().all(|f| f.owner != Some(StopOwner::Network)), "a ramp is the sender's: {out:?}");
        // Half of a window that does not grow acknowledged per RTT: the network holds data back.
        let out = ramp(false);
        assert!(out.iter().any(|f| f.owner == Some(StopOwner::Network)), "{out:?}");
    }

    /// A sender in Recovery, its retransmissions unanswered for 400 ms (a network stop), then
    /// stopped by its user (SIGSTOP): the kernel delivers what it holds and goes idle.
    fn recovery_then_sender_stopped(last_ack: u64) -> Vec<Finding> {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        for i in 0..8u64 {
            let r = crate::model::Retrans {
                seq: i as u32,
                end_seq: i as u32 + 1448,
                segs: 1,
                sacked: 0x84,
                ca_state: CA_RECOVERY,
                count: 2,
                since_prev_ns: 100 * MS,
                lost_retrans: true,
                failed: false,
                cwnd: 700,
                ssthresh: 700,
                packets_out: 2800,
                lost_out: 8,
                sacked_out: 2000,
                retrans_out: 8,
                snd_una: 0,
            };
            d.observe(&ev(t + (i + 1) * 50 * MS, Body::Retrans(r)), &mut out);
            d.tick(t + (i + 1) * 50 * MS, &mut out);
        }
        assert!(out.iter().any(|f| f.ongoing && f.owner == Some(StopOwner::Network)), "{out:?}");
        // The holes repaired: everything sent is acknowledged and nothing waits.
        let emptied = t + 450 * MS;
        d.observe(&ev(emptied, drained(acked + last_ack, 0, 1 << 22)), &mut out);
        let mut at = emptied;
        for _ in 0..3 {
            run_ticks(&mut d, &mut out, at, at + 1000 * MS);
            at += 1000 * MS;
            d.observe(&ev(at, snapshot(acked + last_ack, 0, 0, 1 << 22, ((at - emptied) / 1000) as u32)), &mut out);
        }
        let ended = out.iter().find(|f| !f.ongoing).unwrap_or_else(|| panic!("the stop never ended: {out:?}"));
        assert!(ended.start_ns + (ended.duration_s.unwrap() * 1e9) as u64 <= emptied, "{ended:?}");
        assert!(ended.ts_ns <= emptied + 100 * MS, "ended {} ms after the idle began", (ended.ts_ns - emptied) / MS);
        assert!(out.iter().all(|f| f.ts_ns <= ended.ts_ns), "reported again during the idle: {out:?}");
        out
    }

    #[test]
    fn a_network_stop_ends_when_a_look_after_its_last_retransmission_shows_nothing_left() {
        // Lab fuzz seed 2026 run 7: 4 MB acknowledged at once after the holes were repaired, or a
        // trickle too small to count as healthy delivery; either way the sender then holds nothing.
        for last_ack in [4_000_000, 20_000] {
            let out = recovery_then_sender_stopped(last_ack);
            assert_eq!(out.first().unwrap().owner, Some(StopOwner::Network));
        }
    }

    /// An idle of 1.5 s ticked every 50 ms, then data sent at `resumed` into an outage: no ACK,
    /// only `resend` at `resumed + after_ms`, seen after a tick that still thought the connection
    /// idle. Returns the first stop and `resumed`.
    fn first_stop_after_idle_resend(resend: Body, after_ms: u64, looked: bool) -> (Finding, u64) {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 20 * MS, drained(acked + 100_000, 0, 1 << 22)), &mut out);
        let resumed = t + 1520 * MS;
        run_ticks(&mut d, &mut out, t + 20 * MS, resumed);
        d.tick(resumed + (after_ms - 10) * MS, &mut out);
        if looked {
            // A periodic snapshot shows the burst in flight, nothing acknowledged since the idle.
            d.observe(
                &ev(resumed + (after_ms - 5) * MS, snapshot(acked + 100_000, 92, 0, 1 << 22, 1_500_000)),
                &mut out,
            );
        }
        assert!(out.is_empty(), "{out:?}");
        d.observe(&ev(resumed + after_ms * MS, resend), &mut out);
        run_ticks(&mut d, &mut out, resumed + after_ms * MS, resumed + 600 * MS);
        (out.first().expect("a stop").clone(), resumed)
    }

    #[test]
    fn data_sent_into_an_outage_after_an_idle_is_dated_from_the_send_its_first_resend_reveals() {
        // The first timeout, rto after the send that armed it.
        let rto = Rto { rto_us: 210_000, cwnd: 1, packets_out: 500, ..Default::default() };
        let (first, resumed) = first_stop_after_idle_resend(Body::Rto(rto.clone()), 210, false);
        assert_eq!(first.owner, Some(StopOwner::Network));
        assert_eq!(first.start_ns, resumed, "dated from the send the timer was armed by");
        // A tail-loss probe in CA state Open, 2 srtt after the last send (lab fuzz seed 23 run 82).
        let tlp =
            crate::model::Retrans { segs: 1, ca_state: 0, count: 1, cwnd: 10, packets_out: 10, ..Default::default() };
        let (first, resumed) = first_stop_after_idle_resend(Body::Retrans(tlp.clone()), 40, false);
        assert_eq!(first.owner, Some(StopOwner::Network));
        assert_eq!(first.start_ns, resumed, "dated from the send the probe timer was armed by");
        // The same when a snapshot showed the data in flight before the resend (seed 31 run 39).
        for resend in [(Body::Rto(rto), 210), (Body::Retrans(tlp), 40)] {
            let (first, resumed) = first_stop_after_idle_resend(resend.0, resend.1, true);
            assert_eq!(first.start_ns, resumed, "dated from the send after a look that showed it in flight");
        }
    }

    #[test]
    fn a_stop_whose_sender_runs_out_of_data_ends() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        run_ticks(&mut d, &mut out, t, t + 400 * MS);
        assert!(out.first().is_some_and(|f| f.ongoing && f.owner == Some(StopOwner::Network)), "{out:?}");
        // Everything gets acknowledged at once and nothing waits (e.g. the last window of a download
        // acknowledged late): the stop ends there, it does not go on as the application's.
        d.observe(&ev(t + 450 * MS, drained(acked + 50 * 1448, 0, 1 << 20)), &mut out);
        run_ticks(&mut d, &mut out, t + 450 * MS, t + 3000 * MS);
        let last = out.last().unwrap();
        assert!(!last.ongoing, "{out:?}");
        assert!(out.iter().all(|f| f.owner == Some(StopOwner::Network)), "{out:?}");
    }
    #[test]
    fn a_short_zero_window_then_the_refilling_burst_is_no_network_stop() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        // The last ACK empties the pipe and closes the window for 100 ms (under the 150 ms threshold).
        d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 0)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 110 * MS);
        // The window opened unseen at 110 ms and a burst left; the next look, 60 ms later, has its
        // first ACK only: data out for one srtt, not a stop since the window closed.
        let mut s = super::tests_support::sample(acked + 1448);
        s.packets_out = 500;
        d.observe(&ev(t + 170 * MS, Body::Sample(s)), &mut out);
        d.tick(t + 170 * MS, &mut out);
        healthy(&mut d, &mut out, t + 170 * MS, acked + 1448, 1000);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn a_look_that_still_finds_the_window_closed_does_not_restart_the_receivers_stop() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 0)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 100 * MS);
        // The periodic snapshot, before the threshold: still nothing in flight, the window closed.
        d.observe(&ev(t + 100 * MS, snapshot(acked, 0, 4 << 20, 0, 90_000)), &mut out);
        run_ticks(&mut d, &mut out, t + 100 * MS, t + 1000 * MS);
        let first = out.first().expect("a stop");
        assert_eq!(first.owner, Some(StopOwner::Receiver));
        assert!(first.start_ns <= t + 10 * MS, "dated from the window's closing: {}", (first.start_ns - t) / MS);
    }

    #[test]
    fn a_sender_whose_every_ack_empties_the_pipe_with_data_waiting_is_no_stop() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        // cwnd 4 without a loss (lab fuzz seed 23 run 44): every RTT the 4 segments out are all
        // acknowledged, 12 MB wait, the window is open.
        for _ in 0..30 {
            t += 20 * MS;
            acked += 4 * 1448;
            d.observe(&ev(t, drained(acked, 12 << 20, 10 << 20)), &mut out);
            d.tick(t, &mut out);
        }
        assert!(out.is_empty(), "the network held nothing back: {out:?}");
    }

    #[test]
    fn a_connection_becoming_bulk_after_an_idle_starts_its_stop_clock_then() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let at = |d: &mut StopDetector, out: &mut Vec<Finding>, t: u64, acked: u64, packets_out: u32| {
            let mut s = super::tests_support::sample(acked);
            (s.srtt_us, s.packets_out, s.write_queue) = (12_000, packets_out, 113_936 + packets_out * 1448);
            d.observe(&ev(t, Body::Sample(s)), out);
            d.tick(t, out);
        };
        // A 2 Mbit/s sender's bursts below 1 MiB; the last one's fast retransmits, then its
        // pipe-emptying ACK, which the kernel does not report for a connection not bulk yet.
        at(&mut d, &mut out, 0, 800_000, 20);
        at(&mut d, &mut out, 50 * MS, 850_000, 20);
        at(&mut d, &mut out, 100 * MS, 917_542, 29);
        let rtx =
            crate::model::Retrans { segs: 1, ca_state: CA_RECOVERY, count: 1, packets_out: 29, ..Default::default() };
        d.observe(&ev(110 * MS, Body::Retrans(rtx)), &mut out);
        run_ticks(&mut d, &mut out, 100 * MS, 1000 * MS);
        // The next burst crosses 1 MiB: its first sample is the connection's first as a bulk one.
        at(&mut d, &mut out, 1000 * MS, 1_050_042, 11);
        at(&mut d, &mut out, 1050 * MS, 1_101_450, 18);
        assert!(out.is_empty(), "an idle before the connection was bulk is no stop: {out:?}");
    }
}
