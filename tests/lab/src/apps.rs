//! Real applications as traffic: the python socket sender/receiver (py/tcpflow.py) and curl downloading from python's http.server.
use crate::clock::Stamp;
use crate::cmd;
use crate::error::{LabError, Result};
use crate::lab::Lab;
use crate::plain::Pause;
use crate::traffic::wait_listening;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The socket pair's script, written into the run directory.
pub const TCPFLOW_PY: &str = include_str!("../py/tcpflow.py");

/// Which application carries the data (always from a sender namespace to a receiver namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum App {
    /// py/tcpflow.py: the sender writes 1 MiB buffers; the receiver reads (and may pause) then reads to the end.
    Socket,
    /// `python3 -m http.server` in the sender namespace serving one file; `curl` downloads it from the receiver.
    Http,
}

/// Settings of an application transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppSpec {
    pub app: App,
    pub sender: usize,
    pub receiver: usize,
    /// Parallel connections (socket streams or curl downloads).
    pub streams: u32,
    /// Socket: how long the sender writes (with `bytes`, a cap). Http: curl's --max-time is this + 30 s.
    pub duration_s: f64,
    /// Socket: bytes per stream (None = write for `duration_s`). Http: the file's size (required).
    pub bytes: Option<u64>,
    /// Socket: the receiving application stops reading at `at_s` after accepting, for `for_s`.
    pub recv_pause: Option<Pause>,
    /// Socket: SO_RCVBUF of the receiver (None: autotuning).
    pub rcvbuf: Option<u32>,
    pub port: u16,
    /// Socket: SO_SNDBUF of the sender (None: autotuning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sndbuf: Option<u32>,
    /// The client's local port for connection k is this + k (socket sender, curl): a lossy lane
    /// matches one of them. None: ephemeral ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_port: Option<u16>,
}

/// What the applications reported.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AppResult {
    pub started: Option<Stamp>,
    pub ended: Option<Stamp>,
    /// Bytes received per connection.
    pub bytes: Vec<u64>,
    /// When the socket receiver really stopped and resumed reading.
    pub pause_start: Option<Stamp>,
    pub pause_end: Option<Stamp>,
    pub goodput_mbit: f64,
    pub errors: Vec<String>,
}

/// A unix time (seconds, from a script) as a Stamp, its monotonic part from the current offset.
fn stamp_of_unix(t: f64) -> Stamp {
    let now = Stamp::now();
    let unix_ns = (t * 1e9) as u64;
    Stamp { mono_ns: now.mono_ns.saturating_sub(now.unix_ns.saturating_sub(unix_ns)), unix_ns }
}

fn url_host(a: &std::net::IpAddr) -> String {
    match a {
        std::net::IpAddr::V6(v) => format!("[{v}]"),
        v => v.to_string(),
    }
}

/// Waits for `child` until `deadline` or `stop`; then interrupts it. Returns its stdout.
fn finish(mut child: Child, deadline: Instant, stop: &AtomicBool) -> (String, Option<String>) {
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = stdout.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let mut err = None;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                if !st.success() {
                    let mut e = String::new();
                    if let Some(mut x) = child.stderr.take() {
                        let _ = x.read_to_string(&mut e);
                    }
                    err = Some(format!("{st}: {}", e.trim()));
                }
                break;
            }
            Ok(None) => {}
            Err(e) => {
                err = Some(e.to_string());
                break;
            }
        }
        if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
            cmd::interrupt_and_wait(&mut child, Duration::from_secs(3));
            err = Some("stopped before it finished".into());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (reader.join().unwrap_or_default(), err)
}

/// Servers of an application transfer, started before the traffic start and stopped on drop.
pub struct Servers {
    children: Vec<Child>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for c in self.children.iter_mut() {
            cmd::interrupt_and_wait(c, Duration::from_secs(2));
        }
    }
}

/// Writes the script / the served file into `dir` and starts the listening side.
pub fn start(lab: &Lab, spec: &AppSpec, dir: &Path) -> Result<Servers> {
    let (s, r) = lab.pair(spec.sender, spec.receiver)?;
    let port = spec.port.to_string();
    let child = match spec.app {
        App::Socket => {
            let py = dir.join("tcpflow.py");
            std::fs::write(&py, TCPFLOW_PY).map_err(|e| LabError::io("write tcpflow.py", e))?;
            let mut args = vec![
                "python3".to_string(),
                py.display().to_string(),
                "recv".into(),
                "--bind".into(),
                lab.addr(r).to_string(),
                "--port".into(),
                port.clone(),
                "--streams".into(),
                spec.streams.max(1).to_string(),
            ];
            if let Some(b) = spec.rcvbuf {
                args.extend(["--rcvbuf".into(), b.to_string()]);
            }
            if let Some(p) = spec.recv_pause {
                args.extend(["--pause-at".into(), p.at_s.to_string(), "--pause-for".into(), p.for_s.to_string()]);
            }
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let c = cmd::spawn_in(&r.netns, &argv)?;
            wait_listening(&r.netns, spec.port)?;
            c
        }
        App::Http => {
            let www = dir.join("www");
            std::fs::create_dir_all(&www).map_err(|e| LabError::io("create www", e))?;
            let bytes = spec.bytes.ok_or_else(|| LabError::Invalid("an http transfer needs its file size".into()))?;
            // A sparse file: served at the speed of the page cache, no disk.
            let f = std::fs::File::create(www.join("blob.bin")).map_err(|e| LabError::io("create blob.bin", e))?;
            f.set_len(bytes).map_err(|e| LabError::io("size blob.bin", e))?;
            let w = www.display().to_string();
            let addr = lab.addr(s).to_string();
            let c =
                cmd::spawn_in(&s.netns, &["python3", "-m", "http.server", &port, "--bind", &addr, "--directory", &w])?;
            wait_listening(&s.netns, spec.port)?;
            c
        }
    };
    Ok(Servers { children: vec![child] })
}

/// Runs the active side (socket sender / curl clients) to completion after `start`; waits for the
/// socket receiver's report too. `t0` is the traffic start.
pub fn run(
    lab: &Lab,
    spec: &AppSpec,
    servers: &mut Servers,
    dir: &Path,
    t0: Instant,
    stop: &AtomicBool,
) -> Result<AppResult> {
    let (s, r) = lab.pair(spec.sender, spec.receiver)?;
    while Instant::now() < t0 {
        std::thread::sleep((t0 - Instant::now()).min(Duration::from_millis(1)));
    }
    let started = Stamp::now();
    let cap = Instant::now() + Duration::from_secs_f64(spec.duration_s + 30.0);
    let mut res = AppResult { started: Some(started), ..AppResult::default() };
    match spec.app {
        App::Socket => {
            let py = dir.join("tcpflow.py").display().to_string();
            let mut args = vec![
                "python3".to_string(),
                py,
                "send".into(),
                "--to".into(),
                lab.addr(r).to_string(),
                "--port".into(),
                spec.port.to_string(),
                "--streams".into(),
                spec.streams.max(1).to_string(),
                "--seconds".into(),
                spec.duration_s.to_string(),
            ];
            if let Some(b) = spec.bytes {
                args.extend(["--bytes".into(), b.to_string()]);
            }
            if let Some(b) = spec.sndbuf {
                args.extend(["--sndbuf".into(), b.to_string()]);
            }
            if let Some(p) = spec.client_port {
                args.extend(["--cport".into(), p.to_string()]);
            }
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let (_, e) = finish(cmd::spawn_in(&s.netns, &argv)?, cap, stop);
            res.errors.extend(e.map(|e| format!("sender: {e}")));
            let rx = servers.children.remove(0);
            let (out, e) = finish(rx, Instant::now() + Duration::from_secs(20), stop);
            res.errors.extend(e.map(|e| format!("receiver: {e}")));
            match serde_json::from_str::<serde_json::Value>(out.trim()) {
                Ok(v) => {
                    res.bytes = v["bytes"].as_array().into_iter().flatten().filter_map(|b| b.as_u64()).collect();
                    res.pause_start = v["pause_start"].as_f64().map(stamp_of_unix);
                    res.pause_end = v["pause_end"].as_f64().map(stamp_of_unix);
                }
                Err(e) => res.errors.push(format!("receiver report is not JSON ({e}): {out}")),
            }
        }
        App::Http => {
            let url = format!("http://{}:{}/blob.bin", url_host(&lab.addr(s)), spec.port);
            let max = format!("{:.0}", spec.duration_s + 30.0);
            let mut clients = Vec::new();
            for k in 0..spec.streams.max(1) {
                let mut argv = vec!["curl", "-sS", "-o", "/dev/null", "-w", "%{size_download}", "--max-time", &max];
                let port = spec.client_port.map(|p| (p + k as u16).to_string());
                if let Some(p) = port.as_deref() {
                    argv.extend(["--local-port", p]);
                }
                argv.push(&url);
                clients.push(cmd::spawn_in(&r.netns, &argv)?);
            }
            for c in clients {
                let (out, e) = finish(c, cap, stop);
                res.bytes.push(out.trim().parse().unwrap_or(0));
                res.errors.extend(e.map(|e| format!("curl: {e}")));
            }
        }
    }
    let ended = Stamp::now();
    let secs = ended.secs_since(&started).max(1e-9);
    res.goodput_mbit = res.bytes.iter().sum::<u64>() as f64 * 8.0 / secs / 1e6;
    res.ended = Some(ended);
    Ok(res)
}
