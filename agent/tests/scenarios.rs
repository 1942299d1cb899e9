//! Every lab scenario against the live daemon: the expected diagnosis, found in time, and nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::require_root;
use tcpvigil_lab::{Lab, RunOptions, Scenario, Truth};

struct Daemon {
    child: Child,
    events: PathBuf,
    dumps: PathBuf,
}

fn start_daemon(tag: &str) -> Daemon {
    let dir = std::env::temp_dir();
    let events = dir.join(format!("tvs-{tag}-{}.jsonl", std::process::id()));
    let ready = events.with_extension("ready");
    // Flight-recorder dumps stay out of /var/lib (tests/flight_recorder.rs checks them).
    let dumps = events.with_extension("dumps");
    let _ = std::fs::remove_file(&events);
    let _ = std::fs::remove_file(&ready);
    let child = Command::new(env!("CARGO_BIN_EXE_tcpvigil"))
        .args(["run", "--listen", "127.0.0.1:0", "--events"])
        .arg(&events)
        .arg("--dump-dir")
        .arg(&dumps)
        .arg("--ready-file")
        .arg(&ready)
        .env("TCPVIGIL_LOG", "warn")
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tcpvigil run");
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

fn stop_daemon(mut d: Daemon) -> Vec<Value> {
    // Let the last ticks and snapshots through before stopping.
    std::thread::sleep(Duration::from_millis(1500));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.child.id() as i32), nix::sys::signal::Signal::SIGINT);
    let status = d.child.wait().expect("wait for the daemon");
    assert!(status.success(), "daemon exit: {status}");
    let text = std::fs::read_to_string(&d.events).unwrap_or_default();
    let _ = std::fs::remove_file(&d.events);
    let _ = std::fs::remove_dir_all(&d.dumps);
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// Findings about the lab's data senders (their addresses), last report per (kind, conn, start).
fn sender_findings(all: &[Value], truth: &Truth) -> Vec<Value> {
    // Lab addresses repeat across runs (and runs may overlap); the namespace inode does not.
    let mine = |c: &Value| {
        let local = c["local"].as_str().unwrap_or("");
        truth.senders.iter().any(|h| {
            local.starts_with(&format!("{}:", h.addr)) && (h.netns_ino == 0 || c["netns"].as_u64() == Some(h.netns_ino))
        })
    };
    let mut out: Vec<Value> = Vec::new();
    for f in all {
        // An unfair group's `conn` is its slowest stream.
        if !mine(&f["conn"]) {
            continue;
        }
        // A stop's cause may sharpen between its reports; limits of one connection differ by cause.
        let key = |x: &Value| {
            let cause = if x["kind"] == "limit" { x["cause"].clone() } else { Value::Null };
            (x["kind"].clone(), x["conn"]["cookie"].clone(), x["group"].clone(), x["start"].clone(), cause)
        };
        match out.iter().position(|x| key(x) == key(f)) {
            Some(i) => out[i] = f.clone(),
            None => out.push(f.clone()),
        }
    }
    out
}

fn secs_from_start(v: &Value, truth: &Truth) -> f64 {
    // Findings carry RFC 3339 wall time; the truth has unix ns of the traffic start.
    let s = v.as_str().unwrap_or("");
    let t = parse_rfc3339(s);
    (t - truth.traffic_start.unix_ns as f64 / 1e9) as f64
}

fn parse_rfc3339(s: &str) -> f64 {
    // 2026-11-22T11:58:02.575Z
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

fn run(name: &str) -> Option<(Truth, Vec<Value>)> {
    if !require_root(&format!("scenario {name}")) {
        return None;
    }
    let sc = Scenario::by_name(name).expect("scenario");
    let out = std::env::temp_dir().join(format!("tvs-runs-{}", std::process::id()));
    let opts = RunOptions { out_dir: out, progress: false, ..Default::default() };
    let (truth, all) = sc
        .run_with(&opts, |_lab: &Lab| Ok(start_daemon(name)), |d, _lab, _truth| Ok(stop_daemon(d)))
        .expect("scenario ran");
    let f = sender_findings(&all, &truth);
    eprintln!("== {name}: {} findings about the senders", f.len());
    for x in &f {
        eprintln!(
            "   {} {} start {:+.2}s duration {} found {:+.2}s",
            x["kind"],
            x["cause"],
            secs_from_start(&x["start"], &truth),
            x["duration_s"],
            secs_from_start(&x["ts"], &truth)
        );
    }
    Some((truth, f))
}

fn injection(truth: &Truth, kind: &str) -> (f64, f64) {
    let i = truth.injections.iter().find(|i| i.kind == kind).unwrap_or_else(|| panic!("no {kind} injection"));
    let s = (i.start.mono_ns - truth.traffic_start.mono_ns) as f64 / 1e9;
    let e = i.end.as_ref().map(|e| (e.mono_ns - truth.traffic_start.mono_ns) as f64 / 1e9).unwrap_or(f64::NAN);
    (s, e)
}

fn only(f: &[Value], kind: &str, cause: &str) -> Value {
    let mine: Vec<&Value> = f.iter().filter(|x| x["kind"] == kind && x["cause"] == cause).collect();
    let others: Vec<&Value> = f.iter().filter(|x| !(x["kind"] == kind && x["cause"] == cause)).collect();
    assert_eq!(mine.len(), 1, "exactly one {kind}/{cause}: {f:#?}");
    assert!(others.is_empty(), "nothing else expected: {others:#?}");
    mine[0].clone()
}

#[test]
fn clean_raises_nothing() {
    let Some((_, f)) = run("clean") else { return };
    assert!(f.is_empty(), "{f:#?}");
}

#[test]
fn outage_is_a_path_silent_stop_found_in_progress_with_its_start_and_end() {
    let Some((truth, f)) = run("outage") else { return };
    let stop = only(&f, "stop", "path_silent");
    let (t1, t2) = injection(&truth, "outage");
    let rtt = (truth.config.path.forward.delay_ms + truth.config.path.reverse.delay_ms) / 1000.0;
    let start = secs_from_start(&stop["start"], &truth);
    let tol = (0.1 * (t2 - t1)).max(rtt).max(0.06);
    assert!((start - t1).abs() <= tol, "stop start {start:.3}s vs outage {t1:.3}s (±{tol:.3})");
    // The stop lasts until the first backed-off retransmission after the outage gets through.
    let end = start + stop["duration_s"].as_f64().expect("ended");
    let max_rto = 3.2; // 200 ms x 2^4 backoffs
    assert!(end >= t2 - tol && end <= t2 + max_rto, "stop end {end:.3}s vs outage end {t2:.3}s");
    assert!(stop["evidence"]["rtos"].as_u64().unwrap_or(0) >= 3, "{}", stop["evidence"]);
}

#[test]
fn tail_loss_ending_in_a_timeout_is_an_rto_stop() {
    let Some((truth, f)) = run("tail-loss-rto") else { return };
    let stop = only(&f, "stop", "rto");
    let (t1, _) = injection(&truth, "outage");
    let start = secs_from_start(&stop["start"], &truth);
    assert!((start - t1).abs() <= 0.1, "stop start {start:.3}s vs blackhole {t1:.3}s");
    assert!(truth.summary.rto_timeouts >= 1);
}

#[test]
fn a_receiver_that_stops_reading_is_a_zero_window_stop() {
    let Some((truth, f)) = run("zero-window") else { return };
    let stop = only(&f, "stop", "zero_window");
    assert_eq!(stop["evidence"]["receiver_limited"], true);
    let (t1, t2) = injection(&truth, "zero-window");
    let start = secs_from_start(&stop["start"], &truth);
    let dur = stop["duration_s"].as_f64().expect("ended");
    // The window closes once the receive buffer is full, a little after reading stops.
    assert!(start >= t1 - 0.1 && start <= t1 + 1.0, "start {start:.2}s vs {t1:.2}s");
    assert!((start + dur - t2).abs() <= 0.5, "end {:.2}s vs reading resumes {t2:.2}s", start + dur);
}

#[test]
fn a_path_beyond_the_receive_buffer_is_receive_window_limited() {
    let Some((_, f)) = run("lfn-buffer") else { return };
    let l = only(&f, "limit", "rwnd_limited");
    assert_eq!(l["evidence"]["sysctl"], "net.ipv4.tcp_rmem");
    assert!(l["evidence"]["value"].as_u64().unwrap_or(0) >= 1 << 20, "{}", l["evidence"]);
}

#[test]
fn a_bulk_transfer_without_sack_is_flagged() {
    let Some((_, f)) = run("no-sack") else { return };
    let lim: Vec<&Value> = f.iter().filter(|x| x["kind"] == "limit").collect();
    assert!(lim.iter().any(|x| x["cause"] == "no_sack"), "{f:#?}");
}

#[test]
fn staggered_streams_are_not_flagged_unfair() {
    let Some((truth, f)) = run("parallel-4-staggered") else { return };
    let unfair: Vec<&Value> = f.iter().filter(|x| x["kind"] == "unfair").collect();
    if truth.summary.jain_index.unwrap_or(1.0) >= 0.95 {
        assert!(unfair.is_empty(), "Jain {:?} per iperf3: {unfair:#?}", truth.summary.jain_index);
    }
}
