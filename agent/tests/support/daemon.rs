//! `tcpvigil run` as a child of a test (the lab crate's launcher): its config, dump directory, scrapes, the events checked against the schema.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::http;

pub struct Daemon {
    inner: tcpvigil_lab::daemon::Daemon,
    /// Where /metrics and /healthz are served (the daemon listens on 127.0.0.1:0).
    pub addr: SocketAddr,
    pub events: PathBuf,
    /// The flight recorder's dump directory (`--dump-dir`), left in place for the test to read.
    pub dumps: PathBuf,
    dir: PathBuf,
}

impl Daemon {
    /// Start the daemon with `config` (TOML) and wait until its probes are attached and it serves.
    pub fn start(tag: &str, config: &str) -> Daemon {
        let base = std::env::temp_dir().join(format!("tvd-{tag}-{}", std::process::id()));
        let (events, dumps) = (base.with_extension("jsonl"), base.with_extension("dumps"));
        let _ = std::fs::remove_file(&events);
        let _ = std::fs::remove_dir_all(&dumps);
        Daemon::start_at(tag, config, events, dumps)
    }

    /// Like `start`, with the events file and dump directory where the test wants them.
    pub fn start_at(tag: &str, config: &str, events: PathBuf, dumps: PathBuf) -> Daemon {
        let dir = std::env::temp_dir().join(format!("tvd-{tag}-{}.d", std::process::id()));
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_tcpvigil"));
        let mut l = tcpvigil_lab::daemon::Launch::new(bin, &dir);
        (l.config, l.events, l.dumps) = (config, Some(events), Some(dumps.clone()));
        (l.log, l.ready_within) = (Some("warn".into()), Duration::from_secs(30));
        let inner = tcpvigil_lab::daemon::Daemon::launch(l).unwrap_or_else(|e| panic!("tcpvigil run: {e}"));
        Daemon { addr: inner.addr, events: inner.events.clone(), inner, dumps, dir }
    }

    /// One scrape of /metrics (the OpenMetrics text).
    pub fn scrape(&self) -> Result<String, String> {
        match http::get(self.addr, "/metrics")? {
            (200, body) => Ok(body),
            (code, body) => Err(format!("/metrics: HTTP {code}: {body}")),
        }
    }

    /// Findings written so far (JSON lines).
    pub fn findings(&self) -> Vec<Value> {
        self.inner.findings()
    }

    /// The daemon's process id (for signals and /proc).
    pub fn pid(&self) -> Option<u32> {
        self.inner.pid()
    }

    /// SIGINT, wait for a clean exit, and return every finding.
    pub fn stop(mut self) -> Vec<Value> {
        if let Some(status) = self.inner.stop() {
            assert!(status.success(), "daemon exit: {status}");
        }
        // Every line the live daemon wrote matches docs/schema/events-v1.schema.json.
        if self.events.exists() && super::schema::validator_available("the daemon's events against the schema") {
            match super::schema::validate(&self.events) {
                Ok(summary) => eprintln!("events against the schema: {}", summary.trim()),
                Err(e) => panic!("the daemon's events file does not match the schema:\n{e}"),
            }
        }
        self.findings()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.inner.stop();
        let _ = std::fs::remove_file(&self.events);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The sample lines of an exposition (what Prometheus stores as series): no comments, no blanks.
pub fn series(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

/// The value of the first sample line whose name and labels start with `prefix`.
pub fn value(text: &str, prefix: &str) -> Option<f64> {
    series(text).into_iter().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}
