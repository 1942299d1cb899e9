//! `lab fuzz`: randomized scenarios (seeded, `fuzzplan`), each run beside the live daemon and judged against the truth of a capture at the sender.
use crate::daemon::Daemon;
use crate::error::{LabError, Result};
use crate::fuzzjudge::{judge, Matrix, Verdict};
pub use crate::fuzzplan::{draw, draw_base, draw_family, first_retry_after, Client, Plan, Rng, MAX_RATE_MBIT};
use crate::mechanism::{mechanisms, MechTruth};
use crate::mechjudge::{judge_mechanisms, MechMatrix, MechVerdict};
use crate::stalls::{self, FlowTruth};
use crate::topo::Family;
use crate::traffic::Traffic;
use crate::RunOptions;
use std::path::PathBuf;
use std::time::{Duration, Instant};

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
    /// Run every plan over this family instead of the drawn one (e.g. v4 to replay a campaign of
    /// the IPv4-only lab exactly).
    pub family: Option<Family>,
    /// Plans as the lab drew them before congestion control, long RTTs and mechanism cases
    /// ([`draw_base`]): to replay an older campaign exactly.
    pub base_draws: bool,
    /// A mechanism the run contains and no finding names, or one named where the run does not
    /// contain it, fails the run. Off: counted in the mechanism matrix only (the daemon does not
    /// name mechanisms yet).
    pub judge_mechanism: bool,
}

impl Default for FuzzOptions {
    fn default() -> Self {
        FuzzOptions {
            seed: 1,
            runs: vec![0],
            max_s: 40.0,
            tcpvigil: PathBuf::from("tcpvigil"),
            out_dir: PathBuf::from("lab-runs/fuzz"),
            keep: false,
            progress: false,
            family: None,
            base_draws: false,
            judge_mechanism: std::env::var("TV_LAB_JUDGE_MECHANISM").is_ok_and(|v| v == "1"),
        }
    }
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
    /// The mechanisms the run contains and what the findings named.
    pub mechanisms: Vec<MechTruth>,
    pub mech: MechVerdict,
}

impl RunReport {
    pub fn failed(&self) -> bool {
        self.error.is_some() || !self.verdict.failures.is_empty()
    }
}

/// A run judged: the truth of its capture, the daemon's findings about it, the verdict.
#[derive(Debug, Clone)]
pub struct Judged {
    pub flows: Vec<FlowTruth>,
    pub findings: Vec<serde_json::Value>,
    pub verdict: Verdict,
    /// The mechanisms the run contains (injected, confirmed on the wire) and the judgement of the
    /// findings' `mechanism` against them (failures only under `judge_mechanism`).
    pub mechanisms: Vec<MechTruth>,
    pub mech: MechVerdict,
}

impl Judged {
    /// Makes the mechanism judgement fail the run (`--judge-mechanism`).
    pub fn judge_mechanism(&mut self) {
        self.verdict.failures.extend(self.mech.failures.iter().cloned());
    }
}

/// Judges a finished run (its truth with a capture) against `all` the daemon wrote meanwhile: the
/// findings about its sender namespaces since the lab came up, the capture's connections of the
/// senders' addresses of either family. Err says why nothing could be judged.
pub fn judge_run(truth: &crate::Truth, all: Vec<serde_json::Value>, rtt_s: f64) -> std::result::Result<Judged, String> {
    let inos: Vec<u64> = truth.senders.iter().map(|h| h.netns_ino).collect();
    let up = truth.lab_up.unix_ns as f64 / 1e9;
    let findings: Vec<serde_json::Value> = all
        .into_iter()
        .filter(|f| f["conn"]["netns"].as_u64().map(|n| inos.contains(&n)).unwrap_or(false))
        .filter(|f| crate::fuzzjudge::parse_rfc3339(f["start"].as_str().unwrap_or("")) >= up)
        .collect();
    let senders: Vec<std::net::IpAddr> =
        truth.senders.iter().flat_map(|h| [h.ip(Family::V4), h.ip(Family::V6)]).collect();
    let segs = match truth.capture.as_deref().map(crate::pcap::read) {
        Some(Ok(segs)) => segs,
        Some(Err(e)) => return Err(format!("capture: {e}")),
        None => return Err("no capture".into()),
    };
    let mut flows = stalls::flows(&segs, |ip| senders.contains(ip), 64 * 1024);
    mark_after_close(&mut flows, truth);
    let verdict = judge(&flows, &findings, rtt_s);
    let mechanisms = mechanisms(truth, &crate::wire::wires(&segs, |ip| senders.contains(ip)));
    let mech = judge_mechanisms(&mechanisms, &findings);
    Ok(Judged { flows, findings, verdict, mechanisms, mech })
}

/// A judged run as text: every connection's truth stalls, the daemon's stops on it, the failures
/// and notes (`lab run NAME --judge`).
pub fn judged_text(j: &Judged) -> String {
    let reported = crate::fuzzjudge::group_stops(&j.findings);
    let mut s = String::new();
    for f in &j.flows {
        s += &format!("{} -> {}: {} bytes acked, mss {}\n", f.local, f.remote, f.bytes_acked, f.mss);
        for st in &f.stalls {
            s += &format!(
                "  truth  {:<11} {:<14} {:>7.3} s from +{:.3} ({:?}{})\n",
                st.owner.as_str(),
                st.cause,
                st.duration(),
                st.start - f.first,
                st.level,
                if st.cut { ", cut" } else { "" }
            );
        }
        for r in reported.iter().filter(|r| r.local == f.local.to_string() && r.remote == f.remote.to_string()) {
            s += &format!(
                "  daemon stop {:>7.3} s from +{:.3}{} first reported +{:.3}: {:?}\n",
                r.end - r.start,
                r.start - f.first,
                if r.ended { "" } else { " (ongoing)" },
                r.first_ts - r.start,
                r.reports
            );
        }
    }
    let other: Vec<&serde_json::Value> = j.findings.iter().filter(|f| f["kind"] != "stop").collect();
    for f in other {
        s += &format!(
            "finding {} {} {} mechanism {}\n",
            f["kind"].as_str().unwrap_or("?"),
            f["cause"].as_str().unwrap_or("?"),
            f["conn"]["local"].as_str().unwrap_or(""),
            f["mechanism"].as_str().unwrap_or("-")
        );
    }
    for m in &j.mechanisms {
        s += &format!(
            "mechanism {} ({}{}): {}\n",
            m.mechanism,
            if m.required { "the run's" } else { "background" },
            if m.unconfirmed { ", not on the wire" } else { "" },
            m.evidence
        );
    }
    for (m, o) in &j.mech.outcomes {
        s += &format!("mechanism {m}: {o:?}\n");
    }
    for n in j.verdict.notes.iter().chain(j.mech.notes.iter()) {
        s += &format!("note: {n}\n");
    }
    for x in &j.verdict.failures {
        s += &format!("FAIL: {x}\n");
    }
    s += if j.verdict.failures.is_empty() { "verdict: pass\n" } else { "verdict: FAIL\n" };
    s
}

/// When the sending application closes its sockets by the run's schedule (iperf3 -t, the socket
/// pair's --seconds), Unix seconds; None when the data's size decides (a download, iperf3 -n). After
/// the close the kernel still sends what was written: a stall then is the last window draining (seed
/// 2026 run 2: 0.71 s of retransmissions that began 0.15 s after a socket sender's close).
pub fn sender_done(start: f64, traffic: &Traffic) -> Option<f64> {
    match traffic {
        Traffic::Iperf { flows, duration_s, bytes: None, .. } => {
            Some(start + duration_s + flows.iter().map(|f| f.start_offset_ms / 1000.0).fold(0.0, f64::min))
        }
        Traffic::App(a) if a.app == crate::apps::App::Socket && a.bytes.is_none() => Some(start + a.duration_s),
        _ => None,
    }
}

/// Marks the network stalls that began after the sender's scheduled close: allowed, not required.
fn mark_after_close(flows: &mut [FlowTruth], truth: &crate::Truth) {
    if let Some(done) = sender_done(truth.traffic_start.unix_ns as f64 / 1e9, &truth.traffic_spec) {
        for s in flows.iter_mut().flat_map(|f| f.stalls.iter_mut()).filter(|s| s.start >= done) {
            (s.after_close, s.level) = (true, crate::stalls::Level::Maybe);
        }
    }
}

/// Runs `sc` beside `daemon` with a capture at the senders into `run_dir`: its truth and every
/// finding the daemon wrote meanwhile (and in the 2 s after: its end reports follow its next look).
pub fn run_beside(
    sc: &crate::Scenario,
    daemon: &Daemon,
    run_dir: &std::path::Path,
    progress: bool,
) -> Result<(crate::Truth, Vec<serde_json::Value>)> {
    let ro = RunOptions {
        out_dir: run_dir.parent().map(std::path::Path::to_path_buf).unwrap_or_default(),
        run_dir: Some(run_dir.to_path_buf()),
        capture: true,
        ss_interval_ms: 0,
        progress,
    };
    sc.run_with(
        &ro,
        |_| Ok(daemon.offset()),
        |off, _lab, _truth| {
            std::thread::sleep(Duration::from_millis(2000));
            Ok(daemon.findings_since(off))
        },
    )
}

/// Runs one plan beside `daemon` and judges it.
fn one(plan: &Plan, daemon: &mut Daemon, opts: &FuzzOptions) -> RunReport {
    let t = Instant::now();
    let sc = plan.scenario();
    let run_dir = opts.out_dir.join(&sc.name);
    let _ = std::fs::remove_dir_all(&run_dir);
    let res = run_beside(&sc, daemon, &run_dir, false);
    let mut rep = RunReport {
        plan: plan.clone(),
        verdict: Verdict::default(),
        flows: Vec::new(),
        error: None,
        seconds: 0.0,
        run_dir: Some(run_dir.clone()),
        mechanisms: Vec::new(),
        mech: MechVerdict::default(),
    };
    match res {
        Err(e) => rep.error = Some(e.to_string()),
        Ok((truth, all)) => match judge_run(&truth, all, f64::from(plan.rtt_ms) / 1e3) {
            Ok(mut j) => {
                if opts.judge_mechanism {
                    j.judge_mechanism();
                }
                let _ = std::fs::write(run_dir.join("fuzz.json"), fuzz_json(Some(plan), &j));
                (rep.flows, rep.verdict, rep.mechanisms, rep.mech) = (j.flows, j.verdict, j.mechanisms, j.mech);
                if rep.flows.is_empty() {
                    rep.error = Some("the capture holds no connection that moved 64 kB".into());
                }
            }
            Err(e) => rep.error = Some(e),
        },
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
        let mut plan =
            if opts.base_draws { draw_base(opts.seed, k, opts.max_s) } else { draw(opts.seed, k, opts.max_s) };
        plan.set_family(opts.family.unwrap_or(plan.family));
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
/// e.g. after the truth was corrected: (what ran, verdict). A `lab run --judge` directory has no
/// plan: its truth.json names the scenario and the RTT.
pub fn rejudge(dir: &std::path::Path) -> Result<(String, Judged)> {
    let f = dir.join("fuzz.json");
    let text = std::fs::read_to_string(&f).map_err(|e| LabError::io(format!("read {}", f.display()), e))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| LabError::Parse { what: f.display().to_string(), detail: e.to_string() })?;
    // Runs kept before the truth carried the schedule are judged without the after-close rule.
    let truth = std::fs::read_to_string(dir.join("truth.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<crate::Truth>(&t).ok());
    let (what, rtt_s) = match (&v["plan"], &truth) {
        (p, _) if !p.is_null() => {
            let plan: Plan = serde_json::from_value(p.clone())
                .map_err(|e| LabError::Parse { what: format!("{} plan", f.display()), detail: e.to_string() })?;
            (format!("seed {} run {}: {}", plan.seed, plan.run, plan.describe()), f64::from(plan.rtt_ms) / 1e3)
        }
        (_, Some(t)) => (t.scenario.clone(), t.config.path.rtt_ms() / 1e3),
        _ => return Err(LabError::Invalid(format!("{}: no plan and no truth.json", dir.display()))),
    };
    // The lab's senders, as the run judged them; a run whose old truth kept no connection names
    // them only in truth.json.
    let senders: Vec<std::net::IpAddr> = match &truth {
        Some(t) => t.senders.iter().flat_map(|h| [h.ip(Family::V4), h.ip(Family::V6)]).collect(),
        None => v["flows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x["local"].as_str()?.parse::<std::net::SocketAddr>().ok().map(|a| a.ip()))
            .collect(),
    };
    let findings: Vec<serde_json::Value> = v["findings"].as_array().cloned().unwrap_or_default();
    let segs = crate::pcap::read(&dir.join("capture-s0.pcap"))?;
    let mut flows = stalls::flows(&segs, |ip| senders.contains(ip), 64 * 1024);
    if let Some(t) = &truth {
        mark_after_close(&mut flows, t);
    }
    let verdict = judge(&flows, &findings, rtt_s);
    let mechanisms = truth
        .as_ref()
        .map(|t| {
            let hosts: Vec<std::net::IpAddr> =
                t.senders.iter().flat_map(|h| [h.ip(Family::V4), h.ip(Family::V6)]).collect();
            mechanisms(t, &crate::wire::wires(&segs, |ip| hosts.contains(ip)))
        })
        .unwrap_or_default();
    let mech = judge_mechanisms(&mechanisms, &findings);
    Ok((what, Judged { flows, findings, verdict, mechanisms, mech }))
}

/// What a judged run leaves in its directory beside truth.json (what `rejudge` reads).
pub fn fuzz_json(plan: Option<&Plan>, j: &Judged) -> String {
    let outcomes: Vec<String> = j.mech.outcomes.iter().map(|(m, o)| format!("{m}: {o:?}")).collect();
    serde_json::to_string_pretty(&serde_json::json!({
        "plan": plan, "flows": j.flows, "failures": j.verdict.failures,
        "notes": j.verdict.notes, "cells": j.verdict.cells, "findings": j.findings,
        "mechanisms": j.mechanisms, "mechanism_outcomes": outcomes, "mechanism_notes": j.mech.notes,
        "mechanism_failures": j.mech.failures,
    }))
    .unwrap_or_default()
}

/// The campaign's result as text: the matrix, the failing runs with their replay command, the time.
pub fn summary(opts: &FuzzOptions, m: &Matrix, reports: &[RunReport], secs: f64) -> String {
    let failed: Vec<&RunReport> = reports.iter().filter(|r| r.failed()).collect();
    let v6 = reports.iter().filter(|r| r.plan.family == Family::V6).count();
    let mut s = format!(
        "lab fuzz --seed {} : {} runs ({} IPv4, {v6} IPv6), {} failed, {:.0} s ({:.1} s per run)\n\n{}",
        opts.seed,
        reports.len(),
        reports.len() - v6,
        failed.len(),
        secs,
        secs / reports.len().max(1) as f64,
        m.render()
    );
    s += "\nRows: truth from the capture (owner/cause; \"(short)\": under 1.3 x the stop threshold + 100 ms or before 2 MiB, a report allowed, not required; \"none\": no stall there). Columns: the daemon's report (first owner->last owner/cause when they differ).\n";
    let mut mm = MechMatrix::default();
    for r in reports {
        mm.add(&r.mech.outcomes);
    }
    s += &format!(
        "\nMechanisms ({}): per run, what the findings' `mechanism` named against what the run contains (injected and seen on the wire). \"background\": present without being the run's case (ordinary queue drops, random loss on the whole path, a sysctl ceiling the path reaches), naming it is right, not naming it no miss.\n\n{}",
        if opts.judge_mechanism { "judged: a miss or a wrong name fails the run" } else { "counted, not judged: --judge-mechanism makes a miss fail" },
        mm.render()
    );
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
