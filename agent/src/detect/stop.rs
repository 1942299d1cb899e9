//! Communication stops: data outstanding, almost nothing delivered for many RTTs, and why.
use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::json;

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
    zero_window: bool,
    /// Timeouts that fired before anything was delivered in this stop.
    silent_rtos: u32,
    /// Observations that showed some (slow) progress, and the bytes they delivered.
    acks: u32,
    delivered: u64,
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
    outstanding: bool,
    snd_wnd_zero: bool,
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
    /// (start, end) of the last stop that ended: a new one soon after it is the same stop going on
    /// (delivery seen late can end a stop for a moment, e.g. while a receive buffer fills).
    last_stop: Option<(u64, u64)>,
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
            outstanding: false,
            snd_wnd_zero: false,
            closed: false,
            ev: Evidence::default(),
            active: None,
            hist: Default::default(),
            resume: None,
            seen_healthy: false,
            closing: false,
            last_stop: None,
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
                    self.active = None;
                    self.resume = None;
                    self.last_stop = Some((start, resumed.max(start)));
                    out.push(self.finding(cfg, obs, start, Some(resumed.max(start))));
                    self.anchor = (ack_ts, acked);
                    self.ev = Evidence::default();
                }
            }
            None => {
                self.anchor = (ack_ts, acked);
                self.ev = Evidence::default();
            }
        }
    }

    fn cause(&self, cfg: &StopConfig) -> &'static str {
        let e = &self.ev;
        if e.zero_window || self.snd_wnd_zero {
            "zero_window"
        } else if e.silent_rtos >= cfg.silent_rtos {
            "path_silent"
        } else if e.lost_retrans > 0 && e.max_lost_delay_ns > 2 * self.srtt_us as u64 * 1000 {
            "lost_retransmit"
        } else if e.rtos > 0 {
            "rto"
        } else if e.min_cwnd.is_some_and(|c| c <= 2) && e.ca_states.iter().any(|&s| s == CA_RECOVERY || s == CA_LOSS) {
            "cwnd_collapse"
        } else if e.acks == 0 && e.retrans_segs == 0 {
            "path_silent"
        } else if e.retrans_segs > 0 && e.ca_states.contains(&CA_RECOVERY) {
            // A window's worth of holes repaired about one per RTT with cwnd still open: recovery
            // without SACK (NewReno, paper 004) or with the scoreboard lost.
            "slow_recovery"
        } else {
            "unknown"
        }
    }

    fn finding(&self, cfg: &StopConfig, now: u64, start: u64, end: Option<u64>) -> Finding {
        let e = &self.ev;
        let during = e.delivered;
        let secs = end.unwrap_or(now).saturating_sub(start) as f64 / 1e9;
        let cause = self.cause(cfg);
        Finding {
            ts_ns: now,
            kind: FindingKind::Stop,
            conn: Some(self.id),
            group: None,
            start_ns: start,
            duration_s: end.map(|_| secs),
            ongoing: end.is_none(),
            cause: cause.into(),
            evidence: json!({
                "receiver_limited": cause == "zero_window",
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

pub struct StopDetector {
    cfg: StopConfig,
    conns: HashMap<u64, Conn>,
}

impl StopDetector {
    pub fn new(cfg: StopConfig) -> Self {
        StopDetector { cfg, conns: HashMap::new() }
    }

    pub fn observe(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        let cfg = &self.cfg;
        let c = self.conns.entry(ev.conn.cookie).or_insert_with(|| Conn::new(ev.conn, ev.ts_ns));
        match &ev.body {
            Body::Sample(s) => {
                if s.srtt_us > 0 {
                    c.srtt_us = s.srtt_us;
                }
                if s.mss > 0 {
                    c.mss = s.mss;
                }
                c.outstanding = s.packets_out > 0 || s.write_queue > 0;
                c.snd_wnd_zero = s.snd_wnd == 0 && s.write_queue > 0;
                if c.snd_wnd_zero {
                    c.ev.zero_window = true;
                }
                c.ev.min_cwnd = Some(c.ev.min_cwnd.map_or(s.cwnd, |m| m.min(s.cwnd)));
                c.ev.ca_states.insert(s.ca_state);
                let healthy_before = c.active.is_none();
                c.progress(cfg, ev.ts_ns, ev.ts_ns, s.bytes_acked, out);
                let r = s.delivery_rate_bps();
                if healthy_before && c.active.is_none() && r > 0.0 {
                    c.rate_bps = if c.rate_bps == 0.0 { r } else { 0.8 * c.rate_bps + 0.2 * r };
                }
            }
            Body::Snapshot(s) => {
                if s.srtt_us > 0 {
                    c.srtt_us = s.srtt_us;
                }
                c.outstanding = s.packets_out > 0 || s.write_queue > 0;
                c.snd_wnd_zero = s.snd_wnd == 0 && s.write_queue > 0;
                if c.snd_wnd_zero {
                    c.ev.zero_window = true;
                }
                let ack_ts = ev.ts_ns.saturating_sub(s.last_ack_age_us as u64 * 1000);
                c.progress(cfg, ev.ts_ns, ack_ts, s.bytes_acked, out);
            }
            Body::Retrans(r) => {
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
                if let Some(start) = c.active.take() {
                    out.push(c.finding(cfg, ev.ts_ns, start, Some(ev.ts_ns)));
                }
            }
            Body::State(st) => {
                const ESTABLISHED: u8 = 1;
                c.closing = st.new != ESTABLISHED;
                if c.closing {
                    if let Some(start) = c.active.take() {
                        out.push(c.finding(cfg, ev.ts_ns, start, Some(ev.ts_ns)));
                    }
                }
            }
            Body::Owner(_) => {}
        }
    }

    pub fn tick(&mut self, now: u64, out: &mut Vec<Finding>) {
        let cfg = &self.cfg;
        self.conns.retain(|_, c| !c.closed);
        for c in self.conns.values_mut() {
            if !c.outstanding || c.closing || !c.seen_healthy {
                // Nothing to send is not a stop: an idle connection starts afresh.
                if c.active.is_none() {
                    c.anchor = (now, c.acked);
                    c.ev = Evidence::default();
                }
                continue;
            }
            if c.active.is_none()
                && c.acked >= cfg.min_bytes
                && now.saturating_sub(c.anchor.0) > cfg.threshold_ns(c.srtt_us)
            {
                let threshold = cfg.threshold_ns(c.srtt_us);
                let start = match c.last_stop {
                    Some((s, e)) if c.anchor.0.saturating_sub(e) <= threshold => s,
                    _ => c.anchor.0,
                };
                c.active = Some(start);
                out.push(c.finding(cfg, now, start, None));
            }
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
        // Nothing arrives; timeouts back off: 220, 440, 880 ms.
        let mut at = t;
        for (i, wait) in [220u64, 440, 880].iter().enumerate() {
            run_ticks(&mut d, &mut out, at, at + wait * MS);
            at += wait * MS;
            d.observe(
                &ev(
                    at,
                    Body::Rto(Rto {
                        retransmits: i as u32,
                        rto_us: (*wait * 1000) as u32,
                        backoff: i as u32,
                        cwnd: 1,
                        packets_out: 50,
                        ..Default::default()
                    }),
                ),
                &mut out,
            );
        }
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

    #[test]
    fn a_zero_window_is_receiver_limited_and_an_idle_sender_is_no_stop() {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        d.observe(&ev(t + 10 * MS, sample(acked, 80, 0, 0)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 2000 * MS);
        assert_eq!(out.first().map(|f| f.cause.as_str()), Some("zero_window"));
        assert_eq!(out[0].evidence["receiver_limited"], true);

        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        let mut idle = match sample(acked, 80, 0, 1 << 20) {
            Body::Sample(s) => s,
            _ => unreachable!(),
        };
        idle.packets_out = 0;
        idle.write_queue = 0;
        d.observe(&ev(t + 10 * MS, Body::Sample(idle)), &mut out);
        run_ticks(&mut d, &mut out, t + 10 * MS, t + 5000 * MS);
        assert!(out.is_empty(), "an app-limited sender is not stopped: {out:?}");
    }
}
