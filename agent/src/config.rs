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
    /// Milliseconds between looks at the connections that moved lately (the live set).
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

/// Where `tcpvigil run` writes, for its start-up log: the config used, flight-recorder dumps,
/// JSON events and /metrics. `config` is the file given (None: the built-in defaults, whose
/// recorder writes to /var/lib/tcpvigil/dumps even in the foreground).
pub fn outputs(cfg: &Config, config: Option<&Path>) -> Vec<(&'static str, String)> {
    let default_dir = crate::export::recorder::RecorderConfig::default().dir;
    let dumps = if !cfg.recorder.enabled {
        "off (recorder.enabled = false)".to_string()
    } else if cfg.recorder.dir == default_dir {
        format!("{} (the default; --dump-dir DIR or recorder.dir to change)", cfg.recorder.dir.display())
    } else {
        cfg.recorder.dir.display().to_string()
    };
    let events = match cfg.export.events.as_deref() {
        None => "off (--events FILE or export.events to write them)".to_string(),
        Some("-") => "stdout".to_string(),
        Some(p) => p.to_string(),
    };
    let scheme = if cfg.export.web_config.is_some() { "http(s)" } else { "http" };
    vec![
        ("config", config.map_or("none (built-in defaults)".into(), |p| p.display().to_string())),
        ("dumps", dumps),
        ("events", events),
        ("metrics", format!("{scheme}://{}/metrics", cfg.export.listen)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_name_the_default_dump_dir_and_how_to_change_it() {
        let o = outputs(&Config::default(), None);
        let get = |k: &str| o.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(get("config"), "none (built-in defaults)");
        assert!(get("dumps").starts_with("/var/lib/tcpvigil/dumps (the default;"), "{o:?}");
        assert!(get("events").starts_with("off"), "{o:?}");
        assert_eq!(get("metrics"), "http://127.0.0.1:9977/metrics");
        let mut c = Config::default();
        c.recorder.dir = "/tmp/d".into();
        c.export.events = Some("/var/log/tcpvigil/findings.jsonl".into());
        let o = outputs(&c, Some(Path::new("/etc/tcpvigil/tcpvigil.toml")));
        assert_eq!(o[0].1, "/etc/tcpvigil/tcpvigil.toml");
        assert_eq!((o[1].1.as_str(), o[2].1.as_str()), ("/tmp/d", "/var/log/tcpvigil/findings.jsonl"));
        c.recorder.enabled = false;
        assert!(outputs(&c, None)[1].1.starts_with("off"));
    }

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
