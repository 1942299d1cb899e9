//! Detectors: pure functions of events and time (no IO, clock or BPF) that produce findings.
pub mod buffers;
pub mod episodes;
pub mod fairness;
pub mod limits;
pub mod loss;
pub mod owner;
pub mod path;
pub mod phase;
pub mod pipeline;
pub mod stop;
#[cfg(test)]
pub(crate) mod tests_support;

pub use pipeline::{analyze, Input, Pipeline};

use serde::{Deserialize, Serialize};

use crate::model::{Cause, ConnTable, Event, Finding, FindingKind, LimitReason, StopCause};

/// `[detect]` section of the configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectConfig {
    pub stop: stop::StopConfig,
    pub fairness: fairness::FairnessConfig,
    pub limits: limits::LimitsConfig,
    pub path: path::PathConfig,
}

impl Default for DetectConfig {
    fn default() -> Self {
        DetectConfig {
            stop: stop::StopConfig::default(),
            fairness: fairness::FairnessConfig::default(),
            limits: limits::LimitsConfig::default(),
            path: path::PathConfig::default(),
        }
    }
}

/// What is wrong with a `[detect]` section, with the keys and their ranges.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetectConfigError {
    #[error("detect.stop: rtt_factor from 0 to 100, rate_fraction from 0 to 1")]
    StopRange,
    #[error("detect.stop: floor_ms and silent_rtos must be positive")]
    StopZero,
    #[error("detect.fairness: window_s from 0.1 to 600, jain_below and ratio_below from 0 to 1, phase_min_rtt_ms from 0 to 10000")]
    FairnessRange,
    #[error("detect.fairness.rules: bad remote_cidr {0:?}")]
    RemoteCidr(String),
    #[error("detect.limits: limited_fraction from 0 to 1, bdp_factor > 0, min_busy_s >= 0")]
    LimitsRange,
    #[error("detect.path: v4_prefix 0-32, v6_prefix 0-128, min_conns at least 2, window_rtts 0-100")]
    PathRange,
}

impl DetectConfig {
    pub fn validate(&self) -> Result<(), DetectConfigError> {
        self.stop.validate()?;
        self.fairness.validate()?;
        self.path.validate()?;
        self.limits.validate()
    }
}

/// All detectors behind one interface: feed events and ticks, collect findings. Driven only by
/// the `Pipeline`.
pub(crate) struct Detectors {
    /// Connections whose receiver closed its window: their rwnd-limited time is that stop.
    zero_window: std::collections::HashSet<u64>,
    stop: stop::StopDetector,
    /// Every connection's loss episodes: the limits and fairness detectors ask them for the
    /// mechanism behind a connection's or a group's losses.
    episodes: episodes::Episodes,
    fairness: fairness::FairnessDetector,
    limits: limits::LimitsDetector,
    path: path::PathDetector,
}

impl Detectors {
    pub fn new(cfg: &DetectConfig) -> Self {
        Detectors {
            zero_window: Default::default(),
            stop: stop::StopDetector::new(cfg.stop.clone()),
            episodes: episodes::Episodes::default(),
            fairness: fairness::FairnessDetector::new(cfg.fairness.clone()),
            limits: limits::LimitsDetector::new(cfg.limits.clone()),
            path: path::PathDetector::new(cfg.path.clone()),
        }
    }

    /// New settings for every detector (a reload): what is in progress carries on under them.
    pub fn reconfigure(&mut self, cfg: &DetectConfig) {
        self.stop.set_config(cfg.stop.clone());
        self.fairness.set_config(cfg.fairness.clone());
        self.limits.set_config(cfg.limits.clone());
        self.path.set_config(cfg.path.clone());
    }

    /// One event (already folded into `table`).
    pub fn observe(&mut self, ev: &Event, table: &ConnTable, out: &mut Vec<Finding>) {
        let from = out.len();
        self.stop.observe(ev, out);
        self.path.fold(table, out, from);
        // A closing connection's episodes are judged once more before they go.
        let closing = matches!(ev.body, crate::model::Body::Close(_));
        if !closing {
            self.episodes.observe(ev);
        }
        // A stream of a group has its losses judged with the group's (a shared queue, a lossy
        // member), not alone (asked before a close makes the fairness detector forget it).
        let grouped = self.fairness.in_group(ev.conn.cookie);
        self.fairness.observe(ev, table);
        self.limits.observe(ev, (!grouped).then_some(&self.episodes), out);
        if closing {
            self.episodes.observe(ev);
        }
        self.explain(from, out);
    }

    /// One diagnosis per phenomenon: a zero-window stop already says the receive window held
    /// the sender back, so no separate rwnd-limited finding for that connection.
    fn explain(&mut self, from: usize, out: &mut Vec<Finding>) {
        for f in &out[from..] {
            if f.cause == Cause::Stop(StopCause::ZeroWindow) {
                if let Some(c) = f.conn {
                    self.zero_window.insert(c.cookie);
                }
            }
        }
        let zw = &self.zero_window;
        let mut i = from;
        while i < out.len() {
            if out[i].cause == Cause::Limit(LimitReason::RwndLimited)
                && out[i].conn.is_some_and(|c| zw.contains(&c.cookie))
            {
                out.remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// A stop candidate needs a fresh look at its sender: take a snapshot soon. Cleared by the call.
    pub fn wants_snapshot(&mut self) -> bool {
        self.stop.wants_snapshot()
    }

    /// The streams whose rounds the kernel should report (for the send phase), when they changed.
    pub fn phase_members(&mut self) -> Option<std::collections::HashSet<u64>> {
        self.fairness.phase_members()
    }

    /// The shortest srtt (µs) whose rounds are reported (`detect.fairness.phase_min_rtt_ms`).
    pub fn phase_min_srtt_us(&self) -> u32 {
        self.fairness.phase_min_srtt_us()
    }

    /// When time alone can next change a finding (CLOCK_MONOTONIC ns), as of the last tick: the
    /// daemon reads the ring buffer and ticks no later than that (and more often while records
    /// arrive or a stop needs watching).
    pub fn next_due(&self) -> u64 {
        self.stop.next_due().unwrap_or(u64::MAX).min(self.fairness.next_due())
    }

    /// Time passes (when due in the daemon, 20 ms apart at least): stops are found here, while nothing arrives.
    pub fn tick(&mut self, now_ns: u64, table: &ConnTable, out: &mut Vec<Finding>) {
        let from = out.len();
        self.stop.tick(now_ns, out);
        self.path.fold(table, out, from);
        self.fairness.tick(now_ns, table, &self.episodes, out);
        self.explain(from, out);
    }
}

/// Latest finding per (kind, connection/group, start): ended reports replace ongoing ones.
pub fn final_findings(all: &[Finding]) -> Vec<Finding> {
    let mut v: Vec<Finding> = Vec::new();
    // A stop's cause may sharpen between its reports; limits of one connection differ by cause.
    let same = |a: &Finding, b: &Finding| {
        a.kind() == b.kind()
            && a.conn.map(|c| c.cookie) == b.conn.map(|c| c.cookie)
            && a.group == b.group
            && a.start_ns == b.start_ns
            && (a.kind() != FindingKind::Limit || a.cause == b.cause)
    };
    for f in all {
        match v.iter().position(|x| same(x, f)) {
            Some(i) => v[i] = f.clone(),
            None => v.push(f.clone()),
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PathTag;

    fn f(cause: Cause, start: u64, ongoing: bool) -> Finding {
        Finding {
            ts_ns: 0,
            conn: None,
            group: None,
            start_ns: start,
            duration_s: None,
            ongoing,
            cause,
            owner: None,
            mechanism: None,
            evidence: serde_json::Value::Null,
            path: PathTag::default(),
        }
    }

    #[test]
    fn final_findings_keep_the_last_report_of_a_stop_and_every_limit_cause() {
        let all = vec![
            f(StopCause::PathSilent.into(), 1, true),
            f(StopCause::Rto.into(), 1, false),
            f(LimitReason::NoSack.into(), 5, true),
            f(LimitReason::SndbufLimited.into(), 5, true),
        ];
        let fin = final_findings(&all);
        let causes: Vec<Cause> = fin.iter().map(|x| x.cause).collect();
        assert_eq!(causes, vec![StopCause::Rto.into(), LimitReason::NoSack.into(), LimitReason::SndbufLimited.into()]);
        assert!(!fin[0].ongoing);
    }
}
