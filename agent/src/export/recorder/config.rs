//! `[recorder]` in the config file: the flight recorder's memory cap, time window and disk bound.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::RecorderError;

/// `[recorder]` in the config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecorderConfig {
    /// Keep histories and write dumps (false: the daemon keeps no history at all).
    pub enabled: bool,
    /// Where dumps go, one folder per dump (created if missing).
    pub dir: PathBuf,
    /// History kept before a finding's start, seconds.
    pub seconds_before: f64,
    /// History recorded after a finding's latest report before the dump is written, seconds.
    pub seconds_after: f64,
    /// Memory cap of one connection's history, bytes (measured: ~46 bytes per stored sample, see the tests).
    pub max_bytes_per_conn: usize,
    /// Connections with a history at once; the least recently active is dropped first.
    pub max_conns: usize,
    /// Dumps kept in `dir`; the oldest are deleted first.
    pub max_dumps: usize,
    /// Disk space the dumps in `dir` may take together, MiB; the oldest are deleted first (the
    /// newest dump is always kept, so the bound is this plus one dump).
    pub max_disk_mib: u64,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            enabled: true,
            dir: PathBuf::from("/var/lib/tcpvigil/dumps"),
            seconds_before: 30.0,
            seconds_after: 10.0,
            max_bytes_per_conn: 8 << 20,
            max_conns: 64,
            max_dumps: 100,
            max_disk_mib: 1024,
        }
    }
}

impl RecorderConfig {
    /// Reject settings that cannot work, with the key that is wrong.
    pub fn validate(&self) -> Result<(), RecorderError> {
        let bad = |m: String| Err(RecorderError::Config(m));
        let secs = |k: &str, v: f64| {
            if v.is_finite() && (0.0..=3600.0).contains(&v) {
                Ok(())
            } else {
                bad(format!("recorder.{k} = {v}: must be 0 to 3600 seconds"))
            }
        };
        secs("seconds_before", self.seconds_before)?;
        secs("seconds_after", self.seconds_after)?;
        if self.dir.as_os_str().is_empty() {
            return bad("recorder.dir is empty: give a directory (or set recorder.enabled = false)".into());
        }
        if !(64 << 10..=1 << 30).contains(&self.max_bytes_per_conn) {
            return bad(format!(
                "recorder.max_bytes_per_conn = {}: from 65536 (about 400 samples) to 1073741824",
                self.max_bytes_per_conn
            ));
        }
        if !(1..=100_000).contains(&self.max_conns) {
            return bad(format!("recorder.max_conns = {}: from 1 to 100000", self.max_conns));
        }
        if !(1..=100_000).contains(&self.max_dumps) {
            return bad(format!("recorder.max_dumps = {}: from 1 to 100000", self.max_dumps));
        }
        if !(1..=1 << 20).contains(&self.max_disk_mib) {
            return bad(format!("recorder.max_disk_mib = {}: from 1 to 1048576", self.max_disk_mib));
        }
        Ok(())
    }
}
