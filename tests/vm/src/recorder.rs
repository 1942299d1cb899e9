//! `tcpvigil record` in the background, stopped with SIGINT, its JSON lines read back.
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

pub struct Recorder {
    child: Child,
    out: PathBuf,
    err: PathBuf,
    pub ready_after: Duration,
}

pub struct Recording {
    pub header: Value,
    pub events: Vec<Value>,
    /// The recorder's stderr (its summary: events by type, losses).
    pub log: String,
}

impl Recorder {
    /// Start recording the connections matching `filter`; returns once the probes are attached.
    pub fn start(tcpvigil: &str, filter: &str, ready_timeout: Duration) -> Result<Recorder> {
        let dir = std::env::temp_dir();
        let id = std::process::id();
        let out = dir.join(format!("tvguest-{id}.jsonl"));
        let ready = dir.join(format!("tvguest-{id}.ready"));
        let err = dir.join(format!("tvguest-{id}.err"));
        let _ = std::fs::remove_file(&ready);
        let child = Command::new(tcpvigil)
            .arg("record")
            .arg("--out")
            .arg(&out)
            .arg("--ready-file")
            .arg(&ready)
            .args(["--conn", filter])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err)?)
            .spawn()
            .context("starting tcpvigil record")?;
        let mut rec = Recorder { child, out, err, ready_after: Duration::ZERO };
        let t0 = Instant::now();
        while !ready.exists() {
            if let Some(st) = rec.child.try_wait()? {
                bail!("tcpvigil record exited early ({st}): {}", std::fs::read_to_string(&rec.err).unwrap_or_default());
            }
            if t0.elapsed() > ready_timeout {
                let _ = rec.child.kill();
                bail!(
                    "tcpvigil record not ready after {ready_timeout:?}: {}",
                    std::fs::read_to_string(&rec.err).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        rec.ready_after = t0.elapsed();
        Ok(rec)
    }

    /// SIGINT, wait, read the file.
    pub fn finish(&mut self) -> Result<Recording> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT)?;
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait()? {
                break st;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                bail!("tcpvigil record did not stop within 30 s of SIGINT");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = std::fs::read_to_string(&self.err).unwrap_or_default();
        if !status.success() {
            bail!("tcpvigil record failed ({status}): {log}");
        }
        let text = std::fs::read_to_string(&self.out).context("reading the recording")?;
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header: Value = serde_json::from_str(lines.next().unwrap_or("")).context("recording header")?;
        let mut events = Vec::new();
        for (i, l) in lines.enumerate() {
            events.push(serde_json::from_str(l).with_context(|| format!("recording line {}", i + 2))?);
        }
        let _ = std::fs::remove_file(&self.out);
        let _ = std::fs::remove_file(&self.err);
        Ok(Recording { header, events, log })
    }
}

impl Drop for Recorder {
    /// A test that failed half-way leaves no recorder behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Recording {
    /// The variant the recording's header names for `need`.
    pub fn variant(&self, need: &str) -> String {
        self.header["variants"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p[0] == need))
            .and_then(|p| p[1].as_str())
            .unwrap_or("")
            .to_string()
    }

    pub fn of_netns(&self, netns: u64) -> impl Iterator<Item = &Value> {
        self.events.iter().filter(move |e| e["conn"]["netns"].as_u64() == Some(netns))
    }
}
