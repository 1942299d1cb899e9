//! `[recorder]` in the config file: the flight recorder's memory cap, time window and disk bound.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What is wrong with a `[recorder]` section, with the key and its range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecorderConfigError {
    #[error("recorder.{key} = {value}: must be 0 to 3600 seconds")]
    Seconds { key: &'static str, value: f64 },
    #[error("recorder.dir is empty: give a directory (or set recorder.enabled = false)")]
    EmptyDir,
    #[error("recorder.max_bytes_per_conn = {0}: from 65536 (about 400 samples) to 1073741824")]
    MaxBytesPerConn(usize),
    #[error("recorder.max_conns = {0}: from 1 to 100000")]
    MaxConns(usize),
    #[error("recorder.max_dumps = {0}: from 1 to 100000")]
    MaxDumps(usize),
    #[error("recorder.max_disk_mib = {0}: from 1 to 1048576")]
    MaxDiskMib(u64),
}

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
    pub fn validate(&self) -> Result<(), RecorderConfigError> {
        use RecorderConfigError as E;
        for (key, value) in [("seconds_before", self.seconds_before), ("seconds_after", self.seconds_after)] {
            if !(value.is_finite() && (0.0..=3600.0).contains(&value)) {
                return Err(E::Seconds { key, value });
            }
        }
        if self.dir.as_os_str().is_empty() {
            return Err(E::EmptyDir);
        }
        if !(64 << 10..=1 << 30).contains(&self.max_bytes_per_conn) {
            return Err(E::MaxBytesPerConn(self.max_bytes_per_conn));
        }
        if !(1..=100_000).contains(&self.max_conns) {
            return Err(E::MaxConns(self.max_conns));
        }
        if !(1..=100_000).contains(&self.max_dumps) {
            return Err(E::MaxDumps(self.max_dumps));
        }
        if !(1..=1 << 20).contains(&self.max_disk_mib) {
            return Err(E::MaxDiskMib(self.max_disk_mib));
        }
        Ok(())
    }
}
