//! The daemon's configuration file (TOML): every section, defaults embedded, unknown keys refused.
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bpf::load::Settings;

/// `[bpf]`: what the kernel side collects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BpfConfig {
    /// Milliseconds between samples of each bulk connection (0: no periodic samples).
    pub bulk_interval_ms: u64,
    /// A connection counts as bulk once this many bytes were acknowledged.
    pub bulk_min_bytes: u64,
    /// Milliseconds between snapshots of every connection (iter/tcp, every namespace).
    pub snapshot_interval_ms: u64,
    /// Ring buffer size in MiB (a power of two).
    pub ringbuf_mib: u32,
    /// Estimate each program's run time for the health metrics from the kernel's run-time
    /// statistics, switched on for 2 s of every 20 s (bpf/runstats.rs).
    pub bpf_stats: bool,
    /// Events the reader thread may queue for the daemon before it counts drops.
    pub channel: usize,
}

impl Default for BpfConfig {
    fn default() -> Self {
        BpfConfig {
            bulk_interval_ms: 50,
            bulk_min_bytes: 1 << 20,
            snapshot_interval_ms: 1000,
            ringbuf_mib: 8,
            bpf_stats: true,
            channel: 1 << 16,
        }
    }
}

impl BpfConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=1024).contains(&self.ringbuf_mib) || !self.ringbuf_mib.is_power_of_two() {
            return Err(format!("bpf.ringbuf_mib = {}: a power of two from 1 to 1024", self.ringbuf_mib));
        }
        if !(50..=60_000).contains(&self.snapshot_interval_ms) {
            return Err(format!("bpf.snapshot_interval_ms = {}: from 50 to 60000", self.snapshot_interval_ms));
        }
        if self.bulk_interval_ms > 60_000 {
            return Err(format!("bpf.bulk_interval_ms = {}: at most 60000 (0 turns it off)", self.bulk_interval_ms));
        }
        if !(1024..=1 << 24).contains(&self.channel) {
            return Err(format!("bpf.channel = {}: from 1024 to 16777216", self.channel));
        }
        Ok(())
    }

    pub fn settings(&self) -> Settings {
        Settings {
            bulk_interval_ns: self.bulk_interval_ms * 1_000_000,
            bulk_min_bytes: self.bulk_min_bytes,
            select_all: false,
            rules: Vec::new(),
            ringbuf_bytes: self.ringbuf_mib << 20,
            snapshot_interval_ms: self.snapshot_interval_ms,
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub export: crate::export::ExportConfig,
    pub detect: crate::detect::DetectConfig,
    pub bpf: BpfConfig,
    pub recorder: crate::export::recorder::RecorderConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("{path}: {err}")]
    Parse { path: String, err: String },
    #[error("{path}: {err}")]
    Invalid { path: String, err: String },
}

/// Config files (daemon, web) are small; anything larger is not one (/dev/zero would never end).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Read a whole text file of at most `limit` bytes: larger, or not UTF-8, is an error saying so.
pub fn read_capped(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} KiB: not a config file", limit >> 10),
        ));
    }
    String::from_utf8(buf).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

impl Config {
    pub fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        let c: Config =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.into(), err: e.to_string() })?;
        c.validate().map_err(|err| ConfigError::Invalid { path: path.into(), err })?;
        Ok(c)
    }

    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            None => Ok(Config::default()),
            Some(p) => {
                let text = read_capped(p, MAX_CONFIG_BYTES)
                    .map_err(|err| ConfigError::Read { path: p.display().to_string(), err })?;
                Config::parse(&text, &p.display().to_string())
            }
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        self.bpf.validate()?;
        self.detect.validate()?;
        self.recorder.validate().map_err(|e| e.to_string())?;
        self.export.validate().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_the_defaults() {
        assert_eq!(Config::parse("", "t").unwrap(), Config::default());
    }

    #[test]
    fn the_shipped_config_file_is_the_defaults() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/tcpvigil.toml");
        let text = std::fs::read_to_string(path).unwrap();
        assert_eq!(Config::parse(&text, path).unwrap(), Config::default());
        let shown = toml::to_string(&Config::default()).unwrap();
        for line in shown.lines().filter(|l| l.contains(" = ") && !l.contains('[')) {
            assert!(text.contains(line), "deploy/tcpvigil.toml lacks `{line}`");
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_with_the_key_named() {
        let e = Config::parse("[bpf]\nbulk_intreval_ms = 5\n", "t").unwrap_err().to_string();
        assert!(e.contains("bulk_intreval_ms"), "{e}");
        let e = Config::parse("[bpf]\nringbuf_mib = 3\n", "t").unwrap_err().to_string();
        assert!(e.contains("ringbuf_mib"), "{e}");
        let e = Config::parse("[nope]\n", "t").unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
        let e = Config::parse("[recorder]\nmax_dumps = 0\n", "t").unwrap_err().to_string();
        assert!(e.contains("recorder.max_dumps"), "{e}");
        let e = Config::parse("[recorder]\nmax_dump = 5\n", "t").unwrap_err().to_string();
        assert!(e.contains("max_dump"), "{e}");
    }
}
