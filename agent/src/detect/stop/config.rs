//! `[detect.stop]`: how long and how little delivery makes a stop, and how long a stop waits for a
//! fresh look at its sender.
use serde::{Deserialize, Serialize};

use crate::detect::DetectConfigError;

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
    /// Connections that moved this many bytes stop when they deliver almost nothing; others only
    /// by timeouts (two in a row with nothing acknowledged).
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
    pub fn validate(&self) -> Result<(), DetectConfigError> {
        if !(0.0..=100.0).contains(&self.rtt_factor) || !(0.0..1.0).contains(&self.rate_fraction) {
            return Err(DetectConfigError::StopRange);
        }
        if self.floor_ms == 0 || self.silent_rtos == 0 {
            return Err(DetectConfigError::StopZero);
        }
        Ok(())
    }

    /// How long almost nothing must be delivered before it is a stop.
    pub(super) fn threshold_ns(&self, srtt_us: u32) -> u64 {
        let scaled = (self.rtt_factor * srtt_us as f64 * 1e3) as u64 + self.extra_ms * 1_000_000;
        scaled.max(self.floor_ms * 1_000_000)
    }
}
