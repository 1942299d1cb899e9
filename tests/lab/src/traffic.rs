//! iperf3 traffic: servers in receiver namespaces, clients in sender namespaces with start offsets; JSON kept.
use crate::clock::Stamp;
use crate::cmd;
use crate::error::{LabError, Result};
use crate::lab::Lab;
use crate::plain::PlainSpec;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One iperf3 client (possibly with several parallel streams) from a sender to a receiver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IperfFlow {
    pub sender: usize,
    pub receiver: usize,
    /// iperf3 -P.
    pub streams: u32,
    /// When this client starts, relative to the traffic start (staggered streams).
    pub start_offset_ms: f64,
    /// iperf3 -b per stream, Mbit/s: an application-limited sender (None: as fast as it can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_mbit: Option<f64>,
    /// iperf3 --cport: stream k leaves from this port + k (a lossy lane matches one of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_port: Option<u16>,
}

/// What traffic a scenario drives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Traffic {
    /// iperf3 clients. With `bytes`, each client sends that many bytes (-n) and `duration_s` is a cap.
    Iperf {
        flows: Vec<IperfFlow>,
        duration_s: f64,
        bytes: Option<u64>,
        /// Congestion control for the clients (-C); None = the namespace default.
        cc: Option<String>,
    },
    /// The lab's own sender/receiver pair (the receiver can stop reading for a while).
    Plain(PlainSpec),
    /// Real applications: the python socket pair or curl against python's http.server.
    App(crate::apps::AppSpec),
}

impl Traffic {
    /// Longest time the traffic may take, seconds (used for progress and caps).
    pub fn max_seconds(&self) -> f64 {
        match self {
            Traffic::Iperf { flows, duration_s, .. } => {
                duration_s + flows.iter().map(|f| f.start_offset_ms / 1000.0).fold(0.0, f64::max)
            }
            Traffic::Plain(p) => p.duration_s,
            Traffic::App(a) => a.duration_s,
        }
    }
}

/// Outcome of one iperf3 client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowResult {
    pub flow: IperfFlow,
    pub port: u16,
    pub started: Stamp,
    pub ended: Stamp,
    /// Receiver-side goodput over the client's run (end.sum_received), Mbit/s.
    pub goodput_mbit: Option<f64>,
    pub bytes_received: Option<u64>,
    pub seconds: Option<f64>,
    /// Sender retransmissions as iperf3 reports them.
    pub retransmits: Option<u64>,
    /// Per-stream receiver goodput, Mbit/s (end.streams[].receiver).
    pub stream_goodput_mbit: Vec<f64>,
    pub error: Option<String>,
    /// iperf3 -J output of the client, as is.
    pub iperf: Option<serde_json::Value>,
}

const BASE_PORT: u16 = 5201;

/// Waits (up to 5 s) until something listens on TCP `port` in namespace `ns`.
pub fn wait_listening(ns: &str, port: u16) -> Result<()> {
    let filter = format!("sport = :{port}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if cmd::run_in(ns, &["ss", "-ltnH", &filter]).map(|o| !o.trim().is_empty()).unwrap_or(false) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(LabError::Command {
        cmd: format!("iperf3 -s -p {port}"),
        detail: "server did not start listening within 5 s".into(),
    })
}

fn parse_result(flow: &IperfFlow, port: u16, started: Stamp, ended: Stamp, out: &str) -> FlowResult {
    let mut r = FlowResult {
        flow: flow.clone(),
        port,
        started,
        ended,
        goodput_mbit: None,
        bytes_received: None,
        seconds: None,
        retransmits: None,
        stream_goodput_mbit: Vec::new(),
        error: None,
        iperf: None,
    };
    match serde_json::from_str::<serde_json::Value>(out) {
        Ok(v) => {
            let rx = &v["end"]["sum_received"];
            r.goodput_mbit = rx["bits_per_second"].as_f64().map(|b| b / 1e6);
            r.bytes_received = rx["bytes"].as_u64();
            r.seconds = rx["seconds"].as_f64();
            r.retransmits = v["end"]["sum_sent"]["retransmits"].as_u64();
            r.stream_goodput_mbit = v["end"]["streams"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["receiver"]["bits_per_second"].as_f64().map(|b| b / 1e6))
                .collect();
            r.error = v["error"].as_str().map(str::to_string);
            r.iperf = Some(v);
        }
        Err(e) => {
            r.error = Some(format!("iperf3 output is not JSON ({e}): {}", out.chars().take(200).collect::<String>()))
        }
    }
    r
}

/// iperf3 servers, one per flow (port 5201 + flow index), stopped on drop.
pub struct Servers(Vec<std::process::Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for s in self.0.iter_mut() {
            cmd::interrupt_and_wait(s, Duration::from_secs(2));
        }
    }
}

/// Starts the servers for `flows` and waits until each listens (do this before taking t0).
pub fn start_servers(lab: &Lab, flows: &[IperfFlow]) -> Result<Servers> {
    let mut servers = Servers(Vec::new());
    for (i, f) in flows.iter().enumerate() {
        let (_, r) = lab.pair(f.sender, f.receiver)?;
        let port = BASE_PORT + i as u16;
        servers.0.push(cmd::spawn_in(&r.netns, &["iperf3", "-s", "-1", "-p", &port.to_string()])?);
        wait_listening(&r.netns, port)?;
    }
    Ok(servers)
}

/// Runs the iperf3 clients of `flows` against servers from [`start_servers`]; `t0` is the common
/// start the offsets count from. Returns when all clients ended (or were stopped).
pub fn run_iperf(
    lab: &Lab,
    flows: &[IperfFlow],
    duration_s: f64,
    bytes: Option<u64>,
    cc: Option<&str>,
    t0: Instant,
    stop: &AtomicBool,
) -> Result<Vec<FlowResult>> {
    let cap = Duration::from_secs_f64(duration_s + 15.0);
    let results = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (i, f) in flows.iter().enumerate() {
            let port = BASE_PORT + i as u16;
            handles.push(scope.spawn(move || -> Result<FlowResult> {
                let (s, r) = lab.pair(f.sender, f.receiver)?;
                let mut args: Vec<String> = [
                    "iperf3",
                    "-c",
                    &lab.addr(r).to_string(),
                    "-p",
                    &port.to_string(),
                    "-J",
                    "-P",
                    &f.streams.max(1).to_string(),
                    "--connect-timeout",
                    "3000",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                match bytes {
                    Some(b) => args.extend(["-n".to_string(), b.to_string()]),
                    None => args.extend(["-t".to_string(), format!("{duration_s}")]),
                }
                if let Some(cc) = cc {
                    args.extend(["-C".to_string(), cc.to_string()]);
                }
                if let Some(m) = f.rate_mbit {
                    args.extend(["-b".to_string(), format!("{:.0}", m * 1e6)]);
                }
                if let Some(p) = f.client_port {
                    args.extend(["--cport".to_string(), p.to_string()]);
                }
                let argv: Vec<&str> = args.iter().map(String::as_str).collect();
                let start_at = t0 + Duration::from_secs_f64(f.start_offset_ms.max(0.0) / 1000.0);
                while Instant::now() < start_at {
                    std::thread::sleep((start_at - Instant::now()).min(Duration::from_micros(500)));
                }
                let started = Stamp::now();
                let mut child = cmd::spawn_in(&s.netns, &argv)?;
                let mut stdout = child.stdout.take();
                let reader = std::thread::spawn(move || {
                    let mut buf = String::new();
                    if let Some(o) = stdout.as_mut() {
                        let _ = o.read_to_string(&mut buf);
                    }
                    buf
                });
                let deadline = Instant::now() + cap;
                loop {
                    if let Ok(Some(_)) = child.try_wait() {
                        break;
                    }
                    if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
                        cmd::interrupt_and_wait(&mut child, Duration::from_secs(3));
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let ended = Stamp::now();
                let out = reader.join().unwrap_or_default();
                Ok(parse_result(f, port, started, ended, &out))
            }));
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(LabError::Missing("iperf3 client thread panicked".into()))))
            .collect::<Result<Vec<_>>>()
    });
    results
}
