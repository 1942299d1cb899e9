//! `tcpvigil run` beside the lab and in the agent's tests: a config, events to a file, ready when its probes are attached.
use crate::error::{LabError, Result};
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
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

/// One `tcpvigil run` for the lab and the agent's tests alike: its config, events file, ready file
/// (and dump directory) in `dir` unless given, listening on 127.0.0.1:0.
pub struct Daemon {
    child: Option<Child>,
    pub events: PathBuf,
    /// Where /metrics and /healthz are served (read from the ready file).
    pub addr: SocketAddr,
}

/// How to start one: `Launch::new(bin, dir)` gives the lab's defaults.
pub struct Launch<'a> {
    pub bin: &'a Path,
    pub dir: &'a Path,
    pub config: &'a str,
    /// Default `dir/events.jsonl`.
    pub events: Option<PathBuf>,
    /// `--dump-dir` (turns the flight recorder on); none by default.
    pub dumps: Option<PathBuf>,
    /// TCPVIGIL_LOG; default TV_LAB_DAEMON_LOG, else `warn` (e.g. `warn,tcpvigil::stop=trace` for
    /// the stop detector's trace of every record and candidate, on stderr).
    pub log: Option<String>,
    pub ready_within: Duration,
}

impl<'a> Launch<'a> {
    pub fn new(bin: &'a Path, dir: &'a Path) -> Self {
        Launch { bin, dir, config: CONFIG, events: None, dumps: None, log: None, ready_within: Duration::from_secs(60) }
    }
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
        Daemon::launch(Launch::new(bin, dir))
    }

    /// Starts `tcpvigil run` as `l` says and waits until its probes are attached and it serves.
    pub fn launch(l: Launch<'_>) -> Result<Daemon> {
        let dir = l.dir;
        std::fs::create_dir_all(dir).map_err(|e| LabError::io(format!("create {}", dir.display()), e))?;
        let (cfg, ready) = (dir.join("tcpvigil.toml"), dir.join("tcpvigil.ready"));
        let events = l.events.unwrap_or_else(|| dir.join("events.jsonl"));
        let _ = std::fs::remove_file(&ready);
        let _ = std::fs::remove_file(&events);
        std::fs::write(&cfg, l.config).map_err(|e| LabError::io("write tcpvigil.toml", e))?;
        let mut cmd = Command::new(l.bin);
        // `lab` blocks SIGINT/SIGTERM in its threads (a signal thread waits for them) and a child
        // inherits the mask: unblock them, or the daemon would never see the SIGINT that stops it.
        // SAFETY: between fork and exec only sigprocmask runs, which is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                nix::sys::signal::SigSet::empty().thread_set_mask().map_err(std::io::Error::from)
            });
        }
        cmd.args(["run", "--listen", "127.0.0.1:0", "--config"])
            .arg(&cfg)
            .arg("--events")
            .arg(&events)
            .arg("--ready-file")
            .arg(&ready);
        if let Some(d) = &l.dumps {
            cmd.arg("--dump-dir").arg(d);
        }
        let log = l.log.unwrap_or_else(|| std::env::var("TV_LAB_DAEMON_LOG").unwrap_or_else(|_| "warn".into()));
        let mut child = cmd
            .env("TCPVIGIL_LOG", log)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| LabError::Command { cmd: format!("{} run", l.bin.display()), detail: e.to_string() })?;
        let deadline = Instant::now() + l.ready_within;
        let addr = loop {
            if let Some(a) = std::fs::read_to_string(&ready).ok().and_then(|s| s.trim().parse().ok()) {
                break a;
            }
            if let Ok(Some(st)) = child.try_wait() {
                return Err(LabError::Command {
                    cmd: "tcpvigil run".into(),
                    detail: format!("exited before ready: {st}"),
                });
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let within = l.ready_within.as_secs();
                return Err(LabError::Command {
                    cmd: "tcpvigil run".into(),
                    detail: format!("not ready within {within} s"),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = std::fs::remove_file(&ready);
        PID.store(child.id() as i32, std::sync::atomic::Ordering::Relaxed);
        Ok(Daemon { child: Some(child), events, addr })
    }

    /// The daemon's process id (for signals and /proc).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGINT, and its exit status once it is gone (killed after 10 s).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        PID.store(0, std::sync::atomic::Ordering::Relaxed);
        crate::cmd::interrupt_and_wait(&mut c, Duration::from_secs(10))
    }

    /// Every finding written so far.
    pub fn findings(&self) -> Vec<Value> {
        self.findings_since(0)
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
        self.stop();
    }
}
