//! `tcpvigil run` as a child of a test: its own config file, dump directory, the address from its ready file, scrapes.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http;

pub struct Daemon {
    child: Option<Child>,
    /// Where /metrics and /healthz are served (the daemon listens on 127.0.0.1:0).
    pub addr: SocketAddr,
    pub events: PathBuf,
    /// The flight recorder's dump directory (`--dump-dir`), left in place for the test to read.
    pub dumps: PathBuf,
    config: PathBuf,
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
        let base = std::env::temp_dir().join(format!("tvd-{tag}-{}", std::process::id()));
        let (ready, cfg) = (base.with_extension("ready"), base.with_extension("toml"));
        let _ = std::fs::remove_file(&ready);
        std::fs::write(&cfg, config).expect("write the daemon's config");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tcpvigil"))
            .args(["run", "--listen", "127.0.0.1:0", "--config"])
            .arg(&cfg)
            .arg("--events")
            .arg(&events)
            .arg("--ready-file")
            .arg(&ready)
            .arg("--dump-dir")
            .arg(&dumps)
            .env("TCPVIGIL_LOG", "warn")
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tcpvigil run");
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = loop {
            if let Some(a) = std::fs::read_to_string(&ready).ok().and_then(|s| s.trim().parse().ok()) {
                break a;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("tcpvigil run exited before it was ready: {st}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("tcpvigil run did not become ready within 30 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = std::fs::remove_file(&ready);
        Daemon { child: Some(child), addr, events, dumps, config: cfg }
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
        let text = std::fs::read_to_string(&self.events).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// The daemon's process id (for signals and /proc).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGINT, wait for a clean exit, and return every finding.
    pub fn stop(mut self) -> Vec<Value> {
        if let Some(mut c) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let status = c.wait().expect("wait for the daemon");
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
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.events);
        let _ = std::fs::remove_file(&self.config);
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
