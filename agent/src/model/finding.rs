//! Findings: what the detectors conclude (a stop, an unfair group, a limit), with evidence.
use serde::{Deserialize, Serialize};

use super::conn::ConnId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Data to send, almost nothing delivered, for many RTTs.
    Stop,
    /// Streams of one transfer settled at very different rates.
    Unfair,
    /// Held back by buffers, missing options or a small MSS.
    Limit,
}

/// One diagnosis. Times are CLOCK_MONOTONIC nanoseconds; exporters turn them into wall time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// When the finding was made (or updated).
    pub ts_ns: u64,
    pub kind: FindingKind,
    /// The connection, for stops and limits; the slowest stream for an unfair group.
    pub conn: Option<ConnId>,
    /// The group key, for unfair groups.
    pub group: Option<String>,
    pub start_ns: u64,
    /// None while the finding is still in progress.
    pub duration_s: Option<f64>,
    pub ongoing: bool,
    /// A short snake_case cause, e.g. `rto_backoff`, `cwnd_collapse`, `rwnd_limited`.
    pub cause: String,
    pub evidence: serde_json::Value,
}
