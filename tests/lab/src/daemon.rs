//! `tcpvigil run` beside the lab (for `lab fuzz`): a temp config, events to a file, ready when its probes are attached.
use crate::error::{LabError, Result};
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Config for judged runs: no flight recorder (dumps cost CPU and disk, nothing reads them here).
pub const CONFIG: &str = "[recorder]\nenabled = false\n";

/// The running daemon's pid (0: none), so Ctrl-C handling can stop it before the process exits.
pub static PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// SIGINT to the daemon started here, if one runs (the `lab` binary's signal thread calls this).
pub fn interrupt_running() {
    let pid = PID.swap(0, std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGINT);
    }
}

pub struct Daemon {
    child: Option<Child>,
    pub events: PathBuf,
}

/// The tcpvigil binary: `explicit`, else next to the running `lab` (target/{release,debug}), else the
/// other profile's directory.
pub fn find_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(LabError::Invalid(format!("--tcpvigil {}: no such file", p.display())))
        };
    }
    let exe = std::env::current_exe().map_err(|e| LabError::io("current_exe", e))?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    // Test binaries live in target/<profile>/deps.
    let dirs = [
        dir.clone(),
        dir.join(".."),
        dir.join("../../release"),
        dir.join("../../debug"),
        dir.join("../release"),
        dir.join("../debug"),
    ];
    dirs.iter().map(|d| d.join("tcpvigil")).find(|p| p.is_file()).ok_or_else(|| {
        LabError::Invalid(
            "no tcpvigil binary next to lab: build it (cargo build -p tcpvigil) or pass --tcpvigil PATH".into(),
        )
    })
}

impl Daemon {
    /// Starts `bin run` with [`CONFIG`], writing events under `dir`; waits (up to 60 s) until ready.
    pub fn start(bin: &Path, dir: &Path) -> Result<Daemon> {
        std::fs::create_dir_all(dir).map_err(|e| LabError::io(format!("create {}", dir.display()), e))?;
        let (cfg, events, ready) = (dir.join("tcpvigil.toml"), dir.join("events.jsonl"), dir.join("tcpvigil.ready"));
        let _ = std::fs::remove_file(&ready);
        let _ = std::fs::remove_file(&events);
        std::fs::write(&cfg, CONFIG).map_err(|e| LabError::io("write tcpvigil.toml", e))?;
        let mut cmd = Command::new(bin);
        // `lab` blocks SIGINT/SIGTERM in its threads (a signal thread waits for them) and a child
        // inherits the mask: unblock them, or the daemon would never see the SIGINT that stops it.
        // SAFETY: between fork and exec only sigprocmask runs, which is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                nix::sys::signal::SigSet::empty().thread_set_mask().map_err(std::io::Error::from)
            });
        }
        let mut child = cmd
            .args(["run", "--listen", "127.0.0.1:0", "--config"])
            .arg(&cfg)
            .arg("--events")
            .arg(&events)
            .arg("--ready-file")
            .arg(&ready)
            // TV_LAB_DAEMON_LOG passes a filter through, e.g. `warn,tcpvigil::stop=trace` for the
            // stop detector's trace of every record and candidate (stderr).
            .env("TCPVIGIL_LOG", std::env::var("TV_LAB_DAEMON_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| LabError::Command { cmd: format!("{} run", bin.display()), detail: e.to_string() })?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() {
            if let Ok(Some(st)) = child.try_wait() {
                return Err(LabError::Command {
                    cmd: "tcpvigil run".into(),
                    detail: format!("exited before ready: {st}"),
                });
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(LabError::Command { cmd: "tcpvigil run".into(), detail: "not ready within 60 s".into() });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        PID.store(child.id() as i32, std::sync::atomic::Ordering::Relaxed);
        Ok(Daemon { child: Some(child), events })
    }

    /// Bytes written to the events file so far (a run reads from here on).
    pub fn offset(&self) -> u64 {
        std::fs::metadata(&self.events).map(|m| m.len()).unwrap_or(0)
    }

    /// Findings written since `offset`.
    pub fn findings_since(&self, offset: u64) -> Vec<Value> {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.events) {
            let _ = f.seek(SeekFrom::Start(offset)).and_then(|_| f.read_to_string(&mut s));
        }
        s.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// True while the daemon runs.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().map(|c| matches!(c.try_wait(), Ok(None))).unwrap_or(false)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            PID.store(0, std::sync::atomic::Ordering::Relaxed);
            crate::cmd::interrupt_and_wait(&mut c, Duration::from_secs(10));
        }
    }
}
