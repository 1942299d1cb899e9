//! Ground truth of one run, written as truth.json: what was injected and when, what the tools measured.
use crate::bpf::RetxStats;
use crate::clock::Stamp;
use crate::delay::DelayStats;
use crate::error::{LabError, Result};
use crate::lab::{LabConfig, TrimReport};
use crate::observe::{PingStats, SsSample};
use crate::plain::PlainResult;
use crate::topo::Host;
use crate::traffic::{FlowResult, Traffic};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A diagnosis the agent is expected to make for a scenario.
/// `kind`: "stop" | "unfair" | "limit" | "missing-option" | "lost-retransmit" | "burst-loss" | "none".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    pub kind: String,
    /// Cause in the agent's vocabulary, e.g. "rto", "outage", "zero-window", "receive-window",
    /// "send-order", "no-sack", "policer", "retransmission-lost", "fair-share", "healthy".
    pub cause: String,
    /// Approximate start, seconds after traffic start.
    pub start_s: Option<f64>,
    /// Approximate duration, seconds.
    pub duration_s: Option<f64>,
    /// Free text: what exactly should be seen and how sure it is.
    pub note: String,
}

impl Expected {
    /// Shorthand constructor.
    pub fn new(kind: &str, cause: &str, start_s: Option<f64>, duration_s: Option<f64>, note: &str) -> Self {
        Expected { kind: kind.into(), cause: cause.into(), start_s, duration_s, note: note.into() }
    }
}

/// One thing the lab did to the path, with when it was in force.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Injection {
    /// "delay", "shape", "police", "loss", "retx-drop", "outage", "zero-window", "sysctl".
    pub kind: String,
    /// "forward", "reverse", "both", or a namespace role for sysctls.
    pub dir: String,
    pub detail: serde_json::Value,
    pub start: Stamp,
    /// None while in force until teardown.
    pub end: Option<Stamp>,
}

/// Headline numbers of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    /// Sum of receiver goodput over all flows (or the plain pair), Mbit/s.
    pub goodput_mbit: f64,
    /// The bottleneck rate the path was set to (policer or shaper, forward), Mbit/s.
    pub bottleneck_mbit: Option<f64>,
    /// goodput / bottleneck (the communication-stops study's efficiency).
    pub efficiency: Option<f64>,
    /// Per-flow goodput, Mbit/s, in flow order.
    pub flow_goodput_mbit: Vec<f64>,
    /// Per-stream goodput across all flows, Mbit/s.
    pub stream_goodput_mbit: Vec<f64>,
    /// Jain's fairness index over streams (1 = equal).
    pub jain_index: Option<f64>,
    /// Senders' TcpRetransSegs delta.
    pub retrans_segs: i64,
    /// Senders' TcpExtTCPTimeouts delta.
    pub rto_timeouts: i64,
    /// Senders' TcpExtTCPLostRetransmit delta.
    pub lost_retransmits: i64,
}

/// Everything recorded for one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Truth {
    pub scenario: String,
    pub summary_text: String,
    pub paper: Option<String>,
    pub config: LabConfig,
    pub traffic_spec: Traffic,
    pub expected: Vec<Expected>,
    pub router: String,
    pub senders: Vec<Host>,
    pub receivers: Vec<Host>,
    pub lab_up: Stamp,
    pub traffic_start: Stamp,
    pub traffic_end: Stamp,
    pub delay_trim: Option<TrimReport>,
    /// Idle ping just before traffic (RTT as set).
    pub idle_ping: Option<PingStats>,
    pub injections: Vec<Injection>,
    pub flows: Vec<FlowResult>,
    pub plain: Option<PlainResult>,
    /// The applications' result (socket pair, http download).
    #[serde(default)]
    pub apps: Option<crate::apps::AppResult>,
    /// nstat deltas per namespace role (router, s0.., r0..): counters that changed.
    pub nstat: BTreeMap<String, BTreeMap<String, i64>>,
    pub ss_samples: Vec<SsSample>,
    /// nft rule counters by comment: [name, packets, bytes].
    pub nft_counters: Vec<(String, u64, u64)>,
    /// `tc -s -j qdisc show` per router interface.
    pub qdisc_stats: Vec<(String, serde_json::Value)>,
    pub delay_stats: Vec<DelayStats>,
    pub retx_drop: Option<RetxStats>,
    pub capture: Option<PathBuf>,
    pub run_dir: PathBuf,
    pub summary: Summary,
}

impl Truth {
    /// Writes `truth.json` into the run directory; returns its path.
    pub fn write(&self) -> Result<PathBuf> {
        let p = self.run_dir.join("truth.json");
        let f = std::fs::File::create(&p).map_err(|e| LabError::io(format!("create {}", p.display()), e))?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(f), self)
            .map_err(|e| LabError::io(format!("write {}", p.display()), std::io::Error::other(e)))?;
        Ok(p)
    }

    /// Reads a truth.json back.
    pub fn load(path: &Path) -> Result<Truth> {
        let f = std::fs::File::open(path).map_err(|e| LabError::io(format!("open {}", path.display()), e))?;
        serde_json::from_reader(std::io::BufReader::new(f))
            .map_err(|e| LabError::Parse { what: path.display().to_string(), detail: e.to_string() })
    }

    /// Sum of an nstat counter delta over the sender namespaces.
    pub fn sender_counter(&self, name: &str) -> i64 {
        self.nstat.iter().filter(|(k, _)| k.starts_with('s')).filter_map(|(_, m)| m.get(name)).sum()
    }

    /// Sum of an nstat counter delta over the receiver namespaces.
    pub fn receiver_counter(&self, name: &str) -> i64 {
        self.nstat
            .iter()
            .filter(|(k, _)| k.starts_with('r') && k.as_str() != "router")
            .filter_map(|(_, m)| m.get(name))
            .sum()
    }

    /// Injections of one kind.
    pub fn injections_of(&self, kind: &str) -> Vec<&Injection> {
        self.injections.iter().filter(|i| i.kind == kind).collect()
    }
}

/// Jain's fairness index of `x` (None when empty or all zero).
pub fn jain(x: &[f64]) -> Option<f64> {
    let s: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    (!x.is_empty() && sq > 0.0).then(|| s * s / (x.len() as f64 * sq))
}

#[cfg(test)]
mod tests {
    #[test]
    fn jain_index_is_one_for_equal_shares_and_lower_otherwise() {
        assert_eq!(super::jain(&[5.0, 5.0, 5.0, 5.0]), Some(1.0));
        let j = super::jain(&[10.0, 0.0]).unwrap_or(0.0);
        assert!((j - 0.5).abs() < 1e-9);
        assert_eq!(super::jain(&[]), None);
    }
}
