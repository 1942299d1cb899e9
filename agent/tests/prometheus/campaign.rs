//! The shared run behind the Prometheus tests: one daemon, one real Prometheus scraping it, lab
//! scenarios one after another, then the daemon stopped and the target removed (for `up == 0` and
//! `absent(up)`). Runs once per test process; every test then queries what Prometheus stored.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tcpvigil::config::Config;
use tcpvigil::detect::fairness::{GroupField, GroupRule};
use tcpvigil::export::config::TransferRule;
use tcpvigil_lab::traffic::Traffic;
use tcpvigil_lab::{RunOptions, Scenario, Truth};

use crate::support::daemon::Daemon;
use crate::support::prom::{self, Prometheus};
use crate::support::require_root;
use crate::{FOR_OVERRIDES, LAB_TRANSFER, RULE_INTERVAL, SCENARIOS, SETTLE};

/// One scenario as Prometheus saw it.
pub struct Run {
    pub name: String,
    pub truth: Truth,
    /// Traffic start and the end of the settle time after it (unix seconds).
    pub from: f64,
    pub to: f64,
    /// Findings about the lab's own senders (by address and network namespace inode).
    pub findings: Vec<Value>,
    /// Findings about other connections on the host during the run (other tests, other users).
    pub foreign: Vec<Value>,
}

pub struct Campaign {
    pub prom: Prometheus,
    /// The daemon's `instance` label.
    pub instance: String,
    pub runs: Vec<Run>,
    pub start: f64,
    pub end: f64,
    /// The rules as loaded (after the test rewrite) and Prometheus' view of them at the end.
    pub rules: String,
    pub rule_health: Value,
}

impl Campaign {
    pub fn run(&self, name: &str) -> &Run {
        self.runs.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no run of {name}"))
    }
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The campaign, run by the first test that asks; None when the tests must skip.
pub fn campaign(test: &str) -> Option<&'static Campaign> {
    static C: OnceLock<Result<Campaign, String>> = OnceLock::new();
    if !require_root(test) || !prom::require(test) {
        return None;
    }
    match C.get_or_init(run_campaign) {
        Ok(c) => Some(c),
        Err(e) => panic!("the Prometheus campaign failed: {e}"),
    }
}

/// Ports and receivers the lab's iperf3 flows use in the campaign's scenarios.
fn lab_endpoints() -> (usize, usize) {
    let (mut flows, mut receivers) = (1, 1);
    for n in SCENARIOS {
        let s = Scenario::by_name(n).expect("scenario");
        receivers = receivers.max(s.lab.topo.receivers);
        if let Traffic::Iperf { flows: f, .. } = &s.traffic {
            flows = flows.max(f.len());
        }
    }
    (flows, receivers)
}

/// The lab's receivers are 10.72.<j+1>.2 and its iperf3 servers listen on 5201 + flow index.
fn receiver_addr(j: usize) -> String {
    format!("10.72.{}.2", j + 1)
}

/// The daemon's config: embedded defaults, plus the lab's streams named as one transfer (for the
/// cross-host recording rules) and grouped by command across the sender namespaces (each iperf3
/// client is its own process, so the default key pid+remote_ip would never group them).
pub fn daemon_config() -> Config {
    let (flows, receivers) = lab_endpoints();
    let mut cfg = Config::default();
    cfg.export.transfers =
        (0..receivers).map(|j| TransferRule { name: LAB_TRANSFER.into(), filter: receiver_addr(j) }).collect();
    cfg.detect.fairness.rules = vec![GroupRule {
        remote_cidr: Some("10.72.0.0/16".into()),
        remote_ports: Some((5201, 5200 + flows as u16)),
        comm: Some("iperf3".into()),
        key: vec![GroupField::Comm],
    }];
    cfg
}

fn is_lab_sender(c: &Value, truth: &Truth) -> bool {
    let local = c["local"].as_str().unwrap_or("");
    truth.senders.iter().any(|h| {
        local.starts_with(&format!("{}:", h.addr)) && (h.netns_ino == 0 || c["netns"].as_u64() == Some(h.netns_ino))
    })
}

fn unix_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn wait_for_data(p: &Prometheus, expr: &str, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let d = p.api("query", &[("query", expr)])?;
        if d["result"].as_array().is_some_and(|r| !r.is_empty()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("`{expr}` returned nothing within {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn run_campaign() -> Result<Campaign, String> {
    let repo = repo();
    let src = std::fs::read_to_string(repo.join("deploy/prometheus/tcpvigil.rules.yml")).map_err(|e| e.to_string())?;
    let rules = prom::rules_for_test(&src, RULE_INTERVAL, FOR_OVERRIDES)?;
    let cfg = daemon_config();
    let daemon = Daemon::start("prom", &toml::to_string(&cfg).map_err(|e| e.to_string())?);
    let dir = std::env::temp_dir().join(format!("tvprom-{}", std::process::id()));
    let p = Prometheus::start(&dir, &rules, &[daemon.addr])?;
    p.wait_targets_up(Duration::from_secs(30))?;
    eprintln!("== Prometheus {} scrapes tcpvigil {} every 1 s (rules every {RULE_INTERVAL})", p.addr, daemon.addr);
    let start = prom::now();
    let opts = RunOptions { out_dir: dir.join("lab-runs"), progress: false, ..Default::default() };
    let mut runs = Vec::new();
    for name in SCENARIOS {
        let sc = Scenario::by_name(name).map_err(|e| e.to_string())?;
        let (truth, to) =
            sc.run_with(&opts, |_| Ok(()), |(), _, _| Ok(settle())).map_err(|e| format!("scenario {name}: {e}"))?;
        for h in &truth.receivers {
            if !cfg.export.transfers.iter().any(|t| t.filter == h.addr.to_string()) {
                return Err(format!(
                    "receiver {} of {name} is not in the transfer rules: update receiver_addr()",
                    h.addr
                ));
            }
        }
        let from = unix_s(truth.traffic_start.unix_ns);
        let all = daemon.findings();
        let during = |f: &&Value| {
            let ts = f["ts"].as_str().map(crate::support::judge::parse_rfc3339).unwrap_or(f64::NAN);
            ts >= from - 1.0 && ts <= to
        };
        let (findings, foreign): (Vec<Value>, Vec<Value>) =
            all.iter().filter(during).cloned().partition(|f| is_lab_sender(&f["conn"], &truth));
        eprintln!(
            "== {name}: traffic {:.1} s, {} findings about the lab's senders, {} about other connections; Jain {:?}",
            to - from,
            findings.len(),
            foreign.len(),
            truth.summary.jain_index
        );
        runs.push(Run { name: name.to_string(), truth, from, to, findings, foreign });
    }
    // `up == 0` (TcpvigilDown): the daemon goes away while Prometheus still scrapes it.
    let instance = daemon.addr.to_string();
    daemon.stop();
    wait_for_data(&p, "up{job=\"tcpvigil\"} == 0", Duration::from_secs(15))?;
    // `absent(up)` (TcpvigilAbsent): the job loses its target.
    p.set_targets(&[] as &[SocketAddr])?;
    wait_for_data(&p, "absent(up{job=\"tcpvigil\"})", Duration::from_secs(15))?;
    let rule_health = p.api("rules", &[])?;
    let _ = std::fs::remove_dir_all(dir.join("lab-runs"));
    Ok(Campaign { instance, prom: p, runs, start, end: prom::now(), rules, rule_health })
}

/// Let the last scrapes and rule evaluations of a scenario happen; returns the time after.
fn settle() -> f64 {
    std::thread::sleep(SETTLE);
    prom::now()
}

/// What the truth of a run says about fairness, judged with the daemon's own detector thresholds.
pub struct FairnessTruth {
    pub jain: f64,
    pub ratio: f64,
    /// Unfair as the detector's config defines it (Jain or slowest/fastest below its thresholds).
    pub unfair: bool,
    /// Clearly fair (see `FAIR_JAIN`, `FAIR_RATIO`).
    pub fair: bool,
}

impl FairnessTruth {
    pub fn verdict(&self) -> &'static str {
        match (self.unfair, self.fair) {
            (true, _) => "unfair",
            (false, true) => "fair",
            (false, false) => "in between",
        }
    }
}

pub fn fairness_truth(run: &Run) -> FairnessTruth {
    let cfg = daemon_config().detect.fairness;
    let g = &run.truth.summary.stream_goodput_mbit;
    assert!(g.len() >= 2, "{}: {} streams in the truth, fairness needs two or more", run.name, g.len());
    let jain = run.truth.summary.jain_index.expect("the truth has a Jain index");
    let (min, max) = g.iter().fold((f64::MAX, 0.0f64), |(a, b), x| (a.min(*x), b.max(*x)));
    let ratio = if max > 0.0 { min / max } else { 1.0 };
    FairnessTruth {
        jain,
        ratio,
        unfair: jain < cfg.jain_below || ratio < cfg.ratio_below,
        fair: jain >= crate::FAIR_JAIN && ratio >= crate::FAIR_RATIO,
    }
}
