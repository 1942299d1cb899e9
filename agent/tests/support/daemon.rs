//! `tcpvigil run` beside a lab scenario: started with a ready file, stopped with SIGINT, its
//! findings (JSON lines) read back; flight-recorder dumps go to a directory of its own.
#![allow(clippy::expect_used)]
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub struct Daemon {
    child: Child,
    pub events: PathBuf,
    pub dumps: PathBuf,
}

impl Daemon {
    /// Start with `--events` and `--dump-dir` in the temp dir, plus `config` (TOML) if given.
    pub fn start(tag: &str, config: Option<&str>) -> Daemon {
        let dir = std::env::temp_dir();
        let base = dir.join(format!("tvd-{tag}-{}", std::process::id()));
        let (events, ready, dumps) =
            (base.with_extension("jsonl"), base.with_extension("ready"), base.with_extension("dumps"));
        let _ = std::fs::remove_file(&events);
        let _ = std::fs::remove_file(&ready);
        let _ = std::fs::remove_dir_all(&dumps);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tcpvigil"));
        cmd.args(["run", "--listen", "127.0.0.1:0", "--events"])
            .arg(&events)
            .arg("--dump-dir")
            .arg(&dumps)
            .arg("--ready-file")
            .arg(&ready);
        if let Some(text) = config {
            let path = base.with_extension("toml");
            std::fs::write(&path, text).expect("write the daemon config");
            cmd.arg("--config").arg(path);
        }
        let child = cmd.env("TCPVIGIL_LOG", "warn").stderr(Stdio::inherit()).spawn().expect("start tcpvigil run");
        for _ in 0..300 {
            if ready.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(ready.exists(), "the daemon did not become ready");
        let _ = std::fs::remove_file(&ready);
        Daemon { child, events, dumps }
    }

    /// SIGINT, wait for a clean exit, return every finding it wrote (the dumps stay).
    pub fn stop(mut self) -> (Vec<Value>, PathBuf) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let status = self.child.wait().expect("wait for the daemon");
        assert!(status.success(), "daemon exit: {status}");
        let text = std::fs::read_to_string(&self.events).unwrap_or_default();
        let _ = std::fs::remove_file(&self.events);
        let _ = std::fs::remove_file(self.events.with_extension("toml"));
        (text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect(), self.dumps.clone())
    }
}

/// `2026-11-22T11:58:02.575Z` as unix seconds (NaN if it does not parse).
pub fn parse_rfc3339(s: &str) -> f64 {
    let (date, time) = s.split_once('T').unwrap_or(("", ""));
    let d: Vec<i64> = date.split('-').filter_map(|x| x.parse().ok()).collect();
    let t: Vec<f64> = time.trim_end_matches('Z').split(':').filter_map(|x| x.parse().ok()).collect();
    if d.len() != 3 || t.len() != 3 {
        return f64::NAN;
    }
    let (y, m, day) = (d[0], d[1], d[2]);
    let (y2, m2) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days as f64 * 86_400.0 + t[0] * 3600.0 + t[1] * 60.0 + t[2]
}
