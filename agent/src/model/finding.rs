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
    /// Network stops of several connections to one remote prefix that began together.
    Path,
}

/// Who holds a stopped connection back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopOwner {
    /// Data is in flight and not acknowledged: the path (loss, outage) or the timers repairing it.
    Network,
    /// Nothing in flight, data waiting behind a window below one MSS: the receiving application
    /// does not read.
    Receiver,
    /// Nothing in flight and nothing waiting: the sending application has nothing to send. Never a
    /// stop; a stop whose sender turns out to be here ends.
    Application,
    /// The last look at the sender is too old to tell (data waiting, window open, nothing in
    /// flight: the kernel sends at once, so only a stale view shows this).
    Undetermined,
}

impl StopOwner {
    pub fn as_str(self) -> &'static str {
        match self {
            StopOwner::Network => "network",
            StopOwner::Receiver => "receiver",
            StopOwner::Application => "application",
            StopOwner::Undetermined => "undetermined",
        }
    }
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
    /// Whose stop it is (stops only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<StopOwner>,
    pub evidence: serde_json::Value,
}
