//! `lab fuzz`: randomized scenarios (seeded), each run beside the live daemon and judged against the truth of a capture at the sender.
use crate::apps::{App, AppSpec};
use crate::daemon::Daemon;
use crate::error::{LabError, Result};
use crate::fuzzjudge::{judge, Matrix, Verdict};
use crate::lab::LabConfig;
use crate::path::{Dir, PathConfig, Shape};
use crate::scenario::{Event, Scenario, Side};
use crate::stalls::{self, FlowTruth};
use crate::topo::TopoConfig;
use crate::traffic::{IperfFlow, Traffic};
use crate::RunOptions;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The highest bottleneck drawn. The issue asks for up to 2 Gbit/s; on this 2-core machine the
/// delay line, the capture at the sender and the daemon share the cores with the traffic, and
/// above ~600 Mbit/s the run measures the CPU, not the path (README: 500 Mbit/s carried with the
/// RTT within 5 %).
pub const MAX_RATE_MBIT: f64 = 600.0;

/// splitmix64: small, seedable, the same on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// Log-uniform in [lo, hi]: as many short values as long ones per decade.
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.unit()).exp()
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Which client carries the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Client {
    Iperf3,
    Socket,
    Http,
}

/// One drawn run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub seed: u64,
    pub run: u32,
    pub rtt_ms: u32,
    pub rate_mbit: u32,
    pub queue_bytes: u64,
    pub loss_pct: f64,
    pub client: Client,
    pub streams: u32,
    /// (at, for, dir: None both ways)
    pub outage: Option<(f64, f64, Option<Dir>)>,
    pub recv_pause: Option<(f64, f64)>,
    pub send_pause: Option<(f64, f64)>,
    /// How long the clients send (iperf3 -t, socket --seconds); http: the download's size decides.
    pub duration_s: f64,
    /// Http: the file's size.
    pub bytes: Option<u64>,
}

fn round(x: f64, step: f64) -> f64 {
    (x / step).round() * step
}

/// When the first retransmission after an outage of `len` s gets through: RTOs back off from
/// `rto0` (200 ms + RTT), doubling.
pub fn first_retry_after(len: f64, rto0: f64) -> f64 {
    let (mut t, mut rto) = (0.0, rto0);
    while t < len {
        t += rto;
        rto = (rto * 2.0).min(120.0);
    }
    t - len
}

/// Draws run `run` of campaign `seed`; `max_s` caps the traffic's length (CI's slice), shortening
/// outages and pauses to fit.
pub fn draw(seed: u64, run: u32, max_s: f64) -> Plan {
    let mut r = Rng::new(seed ^ u64::from(run).wrapping_mul(0xd6e8_feb8_6659_fd93));
    let rtt_ms = r.log_uniform(5.0, 200.0).round() as u32;
    let rate_mbit = r.log_uniform(20.0, MAX_RATE_MBIT).round() as u32;
    let bdp = f64::from(rate_mbit) * 1e6 / 8.0 * f64::from(rtt_ms) / 1e3;
    let queue_bytes = (bdp * r.uniform(0.25, 2.0)).clamp(30_000.0, 20e6).round() as u64;
    let loss_pct = if r.chance(0.3) { round(r.log_uniform(0.01, 0.5), 0.001) } else { 0.0 };
    let client = [Client::Iperf3, Client::Socket, Client::Http][r.below(3) as usize];
    let streams = if r.chance(0.6) { 1 } else { 2 + r.below(3) as u32 };
    let rto0 = 0.2 + f64::from(rtt_ms) / 1e3;
    let room = (max_s - 5.0).max(0.5);
    let (mut outage, mut recv_pause, mut send_pause) = (None, None, None);
    let mut tail: f64 = 0.0;
    let what = r.unit();
    let second = r.chance(0.2);
    let mut pick = |k: f64, r: &mut Rng| {
        let at = round(r.uniform(2.0, 4.0), 0.01);
        if k < 0.35 {
            let len = round(r.log_uniform(0.5, 20.0).min(room / 2.0), 0.01);
            let dir = [None, Some(Dir::Forward), Some(Dir::Reverse)][r.below(3) as usize];
            outage = Some((at, len, dir));
            tail = tail.max(at + len + first_retry_after(len, rto0));
        } else if k < 0.7 {
            let len = round(r.log_uniform(0.5, 30.0).min(room), 0.01);
            recv_pause = Some((at, len));
            tail = tail.max(at + len);
        } else if k < 0.9 {
            let len = round(r.log_uniform(0.5, 10.0).min(room), 0.01);
            send_pause = Some((at, len));
            tail = tail.max(at + len);
        }
    };
    pick(what, &mut r);
    if second {
        let k = r.unit();
        pick(k, &mut r);
    }
    let duration_s = round((tail + 3.0).max(8.0).min(max_s.max(8.0)), 0.1);
    // The download's size: about 6 s at what the path can carry (the bottleneck, or Mathis' bound
    // under random loss, or a 16 MB window per RTT), 2-600 MB.
    let bytes = (client == Client::Http).then(|| {
        let rtt = f64::from(rtt_ms) / 1e3;
        let mathis = if loss_pct > 0.0 { 1.22 * 1448.0 * 8.0 / (rtt * (loss_pct / 100.0).sqrt()) } else { f64::MAX };
        let bps = (f64::from(rate_mbit) * 1e6 * 0.8).min(mathis).min(16e6 * 8.0 / rtt);
        ((bps / 8.0 * 6.0 / f64::from(streams)).clamp(2e6, 600e6)) as u64
    });
    Plan {
        seed,
        run,
        rtt_ms,
        rate_mbit,
        queue_bytes,
        loss_pct,
        client,
        streams,
        outage,
        recv_pause,
        send_pause,
        duration_s,
        bytes,
    }
}

impl Plan {
    /// One line: what this run does.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{:?} x{} rtt {} ms, {} Mbit/s, queue {} kB, loss {:.3} %, {:.1} s",
            self.client,
            self.streams,
            self.rtt_ms,
            self.rate_mbit,
            self.queue_bytes / 1000,
            self.loss_pct,
            self.duration_s
        );
        if let Some(b) = self.bytes {
            s += &format!(" ({} MB file)", b / 1_000_000);
        }
        if let Some((at, len, dir)) = self.outage {
            s += &format!(
                ", outage {} {len:.2} s at {at:.2}",
                dir.map(|d| format!("{d:?}").to_lowercase()).unwrap_or("both".into())
            );
        }
        if let Some((at, len)) = self.recv_pause {
            s += &format!(", receiver pause {len:.2} s at {at:.2}");
        }
        if let Some((at, len)) = self.send_pause {
            s += &format!(", sender pause {len:.2} s at {at:.2}");
        }
        s
    }

    /// The lab scenario of this plan.
    pub fn scenario(&self) -> Scenario {
        let mut path = PathConfig::with_rtt(f64::from(self.rtt_ms));
        path.forward.shape = Some(Shape {
            rate_mbit: f64::from(self.rate_mbit),
            burst_bytes: None,
            limit_bytes: Some(self.queue_bytes),
        });
        path.forward.loss_ppm = (self.loss_pct * 10_000.0).round() as u32;
        let mut lab = LabConfig {
            topo: TopoConfig { senders: 1, ..TopoConfig::default() },
            path,
            trim_delay: true,
            ..LabConfig::default()
        };
        let max = (16u64 << 20).to_string();
        let kv = |k: &str, v: String| (k.to_string(), v);
        lab.sender_sysctls.push(kv("net.ipv4.tcp_wmem", format!("4096 16384 {max}")));
        lab.sender_sysctls.push(kv("net.core.wmem_max", max.clone()));
        lab.receiver_sysctls.push(kv("net.ipv4.tcp_rmem", format!("4096 131072 {max}")));
        lab.receiver_sysctls.push(kv("net.core.rmem_max", max));
        let traffic = match self.client {
            Client::Iperf3 => Traffic::Iperf {
                flows: vec![IperfFlow { sender: 0, receiver: 0, streams: self.streams, start_offset_ms: 0.0 }],
                duration_s: self.duration_s,
                bytes: None,
                cc: Some("cubic".into()),
            },
            Client::Socket | Client::Http => Traffic::App(AppSpec {
                app: if self.client == Client::Socket { App::Socket } else { App::Http },
                sender: 0,
                receiver: 0,
                streams: self.streams,
                duration_s: self.duration_s,
                bytes: self.bytes,
                recv_pause: None,
                rcvbuf: None,
                port: 8080,
            }),
        };
        let mut events = Vec::new();
        if let Some((at_s, for_s, dir)) = self.outage {
            events.push(Event::Outage { at_s, for_s, dir, receiver: None });
        }
        if let Some((at_s, for_s)) = self.recv_pause {
            events.push(Event::AppPause { at_s, for_s, side: Side::Receiver });
        }
        if let Some((at_s, for_s)) = self.send_pause {
            events.push(Event::AppPause { at_s, for_s, side: Side::Sender });
        }
        Scenario {
            name: format!("fuzz-{}-{}", self.seed, self.run),
            summary: self.describe(),
            paper: None,
            doc: "drawn by lab fuzz; judged against the capture at the sender".into(),
            lab,
            traffic,
            events,
            expected: Vec::new(),
        }
    }
}

/// How to run a campaign.
#[derive(Debug, Clone)]
pub struct FuzzOptions {
    pub seed: u64,
    /// Which runs of the seed (0..N, or the one to replay).
    pub runs: Vec<u32>,
    /// Cap on each run's traffic, seconds.
    pub max_s: f64,
    pub tcpvigil: PathBuf,
    /// Run directories go here; a passing run's is removed unless `keep`.
    pub out_dir: PathBuf,
    pub keep: bool,
    pub progress: bool,
}

/// One judged run.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub plan: Plan,
    pub verdict: Verdict,
    pub flows: Vec<FlowTruth>,
    /// A lab error (no judgement).
    pub error: Option<String>,
    pub seconds: f64,
    pub run_dir: Option<PathBuf>,
}

impl RunReport {
    pub fn failed(&self) -> bool {
        self.error.is_some() || !self.verdict.failures.is_empty()
    }
}

/// Runs one plan beside `daemon` and judges it.
fn one(plan: &Plan, daemon: &mut Daemon, opts: &FuzzOptions) -> RunReport {
    let t = Instant::now();
    let sc = plan.scenario();
    let run_dir = opts.out_dir.join(&sc.name);
    let _ = std::fs::remove_dir_all(&run_dir);
    let ro = RunOptions {
        out_dir: opts.out_dir.clone(),
        run_dir: Some(run_dir.clone()),
        capture: true,
        ss_interval_ms: 0,
        progress: false,
    };
    let res = sc.run_with(
        &ro,
        |_| Ok(daemon.offset()),
        |off, _lab, _truth| {
            // The daemon's end reports follow its next look (snapshots every second).
            std::thread::sleep(Duration::from_millis(2000));
            Ok(daemon.findings_since(off))
        },
    );
    let mut rep = RunReport {
        plan: plan.clone(),
        verdict: Verdict::default(),
        flows: Vec::new(),
        error: None,
        seconds: 0.0,
        run_dir: Some(run_dir.clone()),
    };
    match res {
        Err(e) => rep.error = Some(e.to_string()),
        Ok((truth, all)) => {
            let inos: Vec<u64> = truth.senders.iter().map(|h| h.netns_ino).collect();
            let up = truth.lab_up.unix_ns as f64 / 1e9;
            let mine: Vec<serde_json::Value> = all
                .into_iter()
                .filter(|f| f["conn"]["netns"].as_u64().map(|n| inos.contains(&n)).unwrap_or(false))
                .filter(|f| crate::fuzzjudge::parse_rfc3339(f["start"].as_str().unwrap_or("")) >= up)
                .collect();
            let senders: Vec<std::net::IpAddr> = truth.senders.iter().map(|h| std::net::IpAddr::V4(h.addr)).collect();
            match truth.capture.as_deref().map(crate::pcap::read) {
                Some(Ok(segs)) => {
                    rep.flows = stalls::flows(&segs, |ip| senders.contains(ip), 64 * 1024);
                    rep.verdict = judge(&rep.flows, &mine, f64::from(plan.rtt_ms) / 1e3);
                    if rep.flows.is_empty() {
                        rep.error = Some("the capture holds no connection that moved 64 kB".into());
                    }
                }
                Some(Err(e)) => rep.error = Some(format!("capture: {e}")),
                None => rep.error = Some("no capture".into()),
            }
            let _ = std::fs::write(
                run_dir.join("fuzz.json"),
                serde_json::to_string_pretty(&serde_json::json!({
                    "plan": plan, "flows": rep.flows, "failures": rep.verdict.failures,
                    "notes": rep.verdict.notes, "cells": rep.verdict.cells, "findings": mine,
                }))
                .unwrap_or_default(),
            );
        }
    }
    if !daemon.alive() {
        rep.error = Some("tcpvigil run exited".into());
    }
    rep.seconds = t.elapsed().as_secs_f64();
    if !rep.failed() && !opts.keep {
        let _ = std::fs::remove_dir_all(&run_dir);
        rep.run_dir = None;
    }
    rep
}

/// Runs the campaign: one daemon for all runs, each run judged; `each` sees every report as it comes.
pub fn campaign(opts: &FuzzOptions, mut each: impl FnMut(&RunReport)) -> Result<(Matrix, Vec<RunReport>)> {
    crate::lab::check_prerequisites()?;
    for tool in ["curl", "python3", "tcpdump"] {
        if !crate::cmd::have_tool(tool) {
            return Err(LabError::Missing(format!("{tool} (scripts/install-deps.sh installs it)")));
        }
    }
    let mut daemon = Daemon::start(&opts.tcpvigil, &opts.out_dir)?;
    let mut matrix = Matrix::default();
    let mut reports = Vec::new();
    for &k in &opts.runs {
        if crate::runner::STOP.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(LabError::Interrupted);
        }
        let plan = draw(opts.seed, k, opts.max_s);
        let rep = one(&plan, &mut daemon, opts);
        matrix.add(&rep.verdict.cells);
        each(&rep);
        reports.push(rep);
        if opts.progress && reports.len() % 10 == 0 && reports.len() < opts.runs.len() {
            let failed = reports.iter().filter(|r| r.failed()).count();
            eprintln!("[fuzz] after {} runs ({failed} failed):\n{}", reports.len(), matrix.render());
        }
    }
    Ok((matrix, reports))
}

/// Judges a kept run directory again (its fuzz.json and capture) with the current truth and judge,
/// e.g. after the truth was corrected: (plan, verdict).
pub fn rejudge(dir: &std::path::Path) -> Result<(Plan, Verdict)> {
    let f = dir.join("fuzz.json");
    let text = std::fs::read_to_string(&f).map_err(|e| LabError::io(format!("read {}", f.display()), e))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| LabError::Parse { what: f.display().to_string(), detail: e.to_string() })?;
    let plan: Plan = serde_json::from_value(v["plan"].clone())
        .map_err(|e| LabError::Parse { what: format!("{} plan", f.display()), detail: e.to_string() })?;
    let senders: Vec<std::net::IpAddr> = v["flows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x["local"].as_str()?.parse::<std::net::SocketAddr>().ok().map(|a| a.ip()))
        .collect();
    let findings: Vec<serde_json::Value> = v["findings"].as_array().cloned().unwrap_or_default();
    let segs = crate::pcap::read(&dir.join("capture-s0.pcap"))?;
    let flows = stalls::flows(&segs, |ip| senders.contains(ip), 64 * 1024);
    Ok((plan.clone(), judge(&flows, &findings, f64::from(plan.rtt_ms) / 1e3)))
}

/// The campaign's result as text: the matrix, the failing runs with their replay command, the time.
pub fn summary(opts: &FuzzOptions, m: &Matrix, reports: &[RunReport], secs: f64) -> String {
    let failed: Vec<&RunReport> = reports.iter().filter(|r| r.failed()).collect();
    let mut s = format!(
        "lab fuzz --seed {} : {} runs, {} failed, {:.0} s ({:.1} s per run)\n\n{}",
        opts.seed,
        reports.len(),
        failed.len(),
        secs,
        secs / reports.len().max(1) as f64,
        m.render()
    );
    s += "\nRows: truth from the capture (owner/cause; \"(short)\": under 1.3 x the stop threshold + 100 ms or before 2 MiB, a report allowed, not required; \"none\": no stall there). Columns: the daemon's report (first owner->last owner/cause when they differ).\n";
    for r in &failed {
        s += &format!(
            "\nFAILED seed {} run {}: {}\n  replay: lab fuzz --seed {} --run {}\n",
            r.plan.seed,
            r.plan.run,
            r.plan.describe(),
            r.plan.seed,
            r.plan.run
        );
        if let Some(e) = &r.error {
            s += &format!("  error: {e}\n");
        }
        for f in &r.verdict.failures {
            s += &format!("  {f}\n");
        }
        if let Some(d) = &r.run_dir {
            s += &format!("  kept: {}\n", d.display());
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_reproducible_within_range_and_varied() {
        assert_eq!(draw(7, 3, 40.0), draw(7, 3, 40.0));
        assert_ne!(draw(7, 3, 40.0), draw(7, 4, 40.0));
        let plans: Vec<Plan> = (0..300).map(|k| draw(11, k, 40.0)).collect();
        for p in &plans {
            assert!((5..=200).contains(&p.rtt_ms), "{p:?}");
            assert!((20..=600).contains(&p.rate_mbit), "{p:?}");
            assert!(p.duration_s >= 8.0 && p.duration_s <= 40.0, "{p:?}");
            if let Some((_, len, _)) = p.outage {
                assert!((0.5..=20.0).contains(&len), "{p:?}");
            }
            if let Some((_, len)) = p.recv_pause {
                assert!((0.5..=30.0).contains(&len), "{p:?}");
            }
        }
        for c in [Client::Iperf3, Client::Socket, Client::Http] {
            assert!(plans.iter().any(|p| p.client == c));
        }
        assert!(plans.iter().any(|p| p.outage.is_some()) && plans.iter().any(|p| p.recv_pause.is_some()));
        assert!(plans.iter().any(|p| p.send_pause.is_some()) && plans.iter().any(|p| p.streams > 1));
        assert!(plans.iter().any(|p| p.outage.map(|o| o.1 > 10.0).unwrap_or(false)));
        // The CI slice's cap shortens what does not fit.
        assert!((0..50).map(|k| draw(11, k, 12.0)).all(|p| p.duration_s <= 12.0));
    }

    #[test]
    fn backed_off_retries_land_after_the_outage() {
        // 0.3 s RTO: tries at 0.3, 0.9, 2.1, 4.5 s; a 2.5 s outage ends 2.0 s before the fourth.
        assert!((first_retry_after(2.5, 0.3) - 2.0).abs() < 1e-9);
        assert!(first_retry_after(0.1, 0.3) > 0.0);
    }

    #[test]
    fn a_plan_becomes_its_scenario() {
        let mut p = draw(1, 0, 40.0);
        p.client = Client::Http;
        p.bytes = Some(5_000_000);
        p.outage = Some((2.0, 1.0, Some(Dir::Reverse)));
        let s = p.scenario();
        assert!(matches!(s.traffic, Traffic::App(AppSpec { app: App::Http, bytes: Some(5_000_000), .. })));
        assert_eq!(s.events[0], Event::Outage { at_s: 2.0, for_s: 1.0, dir: Some(Dir::Reverse), receiver: None });
        assert_eq!(s.lab.path.forward.shape.map(|x| x.limit_bytes), Some(Some(p.queue_bytes)));
        assert!(s.lab.path.validate().is_ok());
    }
}
