//! The daemon's configuration file (TOML): every section, defaults embedded, unknown keys refused.
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bpf::load::Settings;
use crate::textfile::{read_capped, MAX_CONFIG_BYTES};

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

/// What is wrong with a `[bpf]` section, with the key and its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BpfConfigError {
    #[error("bpf.ringbuf_mib = {0}: a power of two from 1 to 1024")]
    RingbufMib(u32),
    #[error("bpf.snapshot_interval_ms = {0}: from 50 to 60000")]
    SnapshotInterval(u64),
    #[error("bpf.bulk_interval_ms = {0}: at most 60000 (0 turns it off)")]
    BulkInterval(u64),
    #[error("bpf.channel = {0}: from 1024 to 16777216")]
    Channel(usize),
}

impl BpfConfig {
    pub fn validate(&self) -> Result<(), BpfConfigError> {
        if !(1..=1024).contains(&self.ringbuf_mib) || !self.ringbuf_mib.is_power_of_two() {
            return Err(BpfConfigError::RingbufMib(self.ringbuf_mib));
        }
        if !(50..=60_000).contains(&self.snapshot_interval_ms) {
            return Err(BpfConfigError::SnapshotInterval(self.snapshot_interval_ms));
        }
        if self.bulk_interval_ms > 60_000 {
            return Err(BpfConfigError::BulkInterval(self.bulk_interval_ms));
        }
        if !(1024..=1 << 24).contains(&self.channel) {
            return Err(BpfConfigError::Channel(self.channel));
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
            hold_start_pass: false,
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

/// A section's value that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum InvalidSection {
    #[error(transparent)]
    Bpf(#[from] BpfConfigError),
    #[error(transparent)]
    Detect(#[from] crate::detect::DetectConfigError),
    #[error(transparent)]
    Recorder(#[from] crate::export::recorder::RecorderConfigError),
    #[error(transparent)]
    Export(#[from] crate::export::config::ExportConfigError),
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("{path}: {err}")]
    Parse { path: String, err: String },
    #[error("{path}: {}", crate::files::clip(&err.to_string(), 4 * crate::files::QUOTE_BYTES))]
    Invalid { path: String, err: InvalidSection },
}

/// A TOML error in one line: where, what, and at most a few hundred bytes of the line (toml's
/// own message quotes the whole line twice: a 1 MB line became 2 MB of stderr).
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    use crate::files::{clip, QUOTE_BYTES};
    let msg = clip(e.message().trim(), QUOTE_BYTES);
    let Some(span) = e.span() else { return msg };
    let mut at = span.start.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_no = text[..at].matches('\n').count() + 1;
    let col = text[line_start..at].chars().count() + 1;
    let line = text[line_start..].lines().next().unwrap_or("").trim();
    format!("line {line_no}, column {col}: {msg}: {}", clip(line, QUOTE_BYTES))
}

impl Config {
    pub fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        let c: Config =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.into(), err: toml_error(text, &e) })?;
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

    pub fn validate(&self) -> Result<(), InvalidSection> {
        self.bpf.validate()?;
        self.detect.validate()?;
        self.recorder.validate()?;
        Ok(self.export.validate()?)
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
        (
            "metrics",
            match cfg.export.listen.host {
                crate::export::config::Host::Any => {
                    format!("{scheme}://*{}/metrics (every address)", cfg.export.listen)
                }
                _ => format!("{scheme}://{}/metrics", cfg.export.listen),
            },
        ),
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

    #[test]
    fn a_huge_bad_line_is_quoted_briefly_with_where_it_is() {
        let long = "a".repeat(1 << 20);
        for text in [format!("[export]\nevents = \"{long}\n"), format!("[export]\ntop_k = \"{long}\"\n")] {
            let e = Config::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(e.len() < 1000, "{} bytes of error", e.len());
            assert!(e.starts_with("t.toml: line 2, column"), "{e}");
        }
        let e = Config::parse("[bpf]\nringbuf_mib = 3\n", "t").unwrap_err().to_string();
        assert!(e.contains("ringbuf_mib"), "{e}");
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_at_once() {
        let fifo = std::env::temp_dir().join(format!("tcpvigil-cfg-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let t = std::time::Instant::now();
        let e = Config::load(Some(&fifo)).unwrap_err().to_string();
        assert!(e.contains("FIFO") && e.contains("not a config file"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        let e = Config::load(Some(Path::new("/dev/zero"))).unwrap_err().to_string();
        assert!(e.contains("character device"), "{e}");
        std::fs::remove_file(&fifo).unwrap();
    }
}
