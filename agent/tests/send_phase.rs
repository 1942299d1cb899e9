//! The send phase the daemon reports for parallel streams, against a packet capture of each stream's first transmission per round.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::daemon::Daemon;
use support::judge::parse_rfc3339;
use support::require_root;
use tcpvigil::detect::phase::{self, PhaseReport, StreamRounds};
use tcpvigil_lab::{Lab, RunOptions, Scenario};

/// Every group is reported (so the send phase of fair groups is seen too), once it has been so
/// for 8 s: the phase then covers the steady part of the transfer.
const CONFIG: &str = "[detect.fairness]\njain_below = 1.0\nratio_below = 1.0\npersist_s = 8.0\n\
    [[detect.fairness.rules]]\nremote_cidr = \"10.72.0.0/16\"\nkey = [\"remote_ip\"]\n";

/// Round starts per sender endpoint ("ip:port") from a capture at the sender: a round begins with
/// the ACK that acknowledges what had been sent when the previous one began; returns the time of
/// the first data segment sent after each such ACK, and of the ACK itself (unix ns).
fn capture_rounds(pcap: &Path) -> BTreeMap<String, (Vec<u64>, Vec<u64>)> {
    let out = Command::new("tcpdump").args(["-tt", "-n", "-S", "-r"]).arg(pcap).output().expect("tcpdump -r");
    #[derive(Default)]
    struct Flow {
        snd_nxt: Option<u32>,
        round_end: Option<u32>,
        pending: bool,
        starts: Vec<u64>,
        acks: Vec<u64>,
        bytes: u64,
    }
    let after = |a: u32, b: u32| (a.wrapping_sub(b) as i32) >= 0;
    let mut flows: BTreeMap<String, Flow> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 6 || w[1] != "IP" {
            continue;
        }
        let ts = (w[0].parse::<f64>().unwrap_or(0.0) * 1e9) as u64;
        let dot = |s: &str| s.trim_end_matches(':').rsplit_once('.').map(|(a, p)| format!("{a}:{p}"));
        let (Some(src), Some(dst)) = (dot(w[2]), dot(w[4])) else { continue };
        let field = |name: &str| w.iter().position(|x| *x == name).and_then(|i| w.get(i + 1));
        let len: u64 = field("length").and_then(|s| s.trim_end_matches(',').parse().ok()).unwrap_or(0);
        if src.starts_with("10.71.") && len > 0 {
            // Data: seq A:B.
            let Some(end) = field("seq").and_then(|s| s.trim_end_matches(',').split(':').nth(1)?.parse::<u32>().ok())
            else {
                continue;
            };
            let f = flows.entry(src).or_default();
            f.bytes += len;
            if f.snd_nxt.is_none_or(|n| after(end, n)) {
                f.snd_nxt = Some(end);
            }
            if f.pending {
                f.starts.push(ts);
                f.pending = false;
            }
        } else if dst.starts_with("10.71.") {
            let Some(ack) = field("ack").and_then(|s| s.trim_end_matches(',').parse::<u32>().ok()) else { continue };
            let f = flows.entry(dst).or_default();
            let Some(nxt) = f.snd_nxt else { continue };
            if f.round_end.is_none_or(|e| after(ack, e)) {
                if f.round_end.is_some() {
                    f.pending = true;
                    f.acks.push(ts);
                }
                f.round_end = Some(nxt);
            }
        }
    }
    flows.into_iter().filter(|(_, f)| f.bytes > 1_000_000).map(|(k, f)| (k, (f.starts, f.acks))).collect()
}

/// Round starts (unix ns) per sender endpoint in the daemon's flight-recorder dumps.
fn kernel_rounds(dir: &Path) -> BTreeMap<String, Vec<u64>> {
    // Dumps are written a few seconds after their finding; give the writer time to finish.
    std::thread::sleep(Duration::from_secs(3));
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(f) = std::fs::File::open(e.path().join("recording.jsonl")) else { continue };
        let rec = tcpvigil::recording::read(std::io::BufReader::new(f)).expect("the dump reads back");
        for ev in &rec.events {
            if let tcpvigil::model::Body::Sample(s) = &ev.body {
                // The lab's senders only (the daemon sees every namespace on the host).
                if s.round && ev.conn.tuple.local.to_string().starts_with("10.71.") {
                    let t = (ev.ts_ns as i64 + rec.header.mono_to_unix_ns) as u64;
                    out.entry(ev.conn.tuple.local.to_string()).or_default().push(t);
                }
            }
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    out
}

/// Is `b` the cyclic order `a`, started elsewhere?
fn same_cycle(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && (0..a.len()).any(|r| (0..a.len()).all(|i| a[(i + r) % a.len()] == b[i]))
}

/// Circular distance between two phases (fractions of the RTT).
fn dist(a: f64, b: f64) -> f64 {
    let d = (a - b).rem_euclid(1.0);
    d.min(1.0 - d)
}

struct Seen {
    order: Vec<String>,
    phase: BTreeMap<String, f64>,
    stability: f64,
    rtt_ms: f64,
}

fn seen_from_report(r: &Value) -> Seen {
    let local = |s: &Value| s["conn"].as_str().unwrap().split('-').next().unwrap().to_string();
    let streams = r["streams"].as_array().unwrap();
    Seen {
        order: streams.iter().map(local).collect(),
        phase: streams.iter().map(|s| (local(s), s["phase"].as_f64().unwrap())).collect(),
        stability: r["order_stability"].as_f64().unwrap(),
        rtt_ms: r["rtt_ms"].as_f64().unwrap(),
    }
}

fn seen_from_capture(r: &PhaseReport, names: &[String]) -> Seen {
    let name = |c: u64| names[c as usize].clone();
    Seen {
        order: r.streams.iter().map(|s| name(s.cookie)).collect(),
        phase: r.streams.iter().map(|s| (name(s.cookie), s.phase)).collect(),
        stability: r.stability,
        rtt_ms: r.rtt_ms,
    }
}

/// Runs `name` with a capture at every sender beside the daemon; compares the send phase of the
/// group's first report with the capture's over the same cycles (the last 64 before the report).
fn judged(name: &str) {
    if !require_root(&format!("send phase {name}")) {
        return;
    }
    let sc = Scenario::by_name(name).expect("scenario");
    let out = std::env::temp_dir().join(format!("tvp-runs-{}", std::process::id()));
    let opts = RunOptions { out_dir: out.clone(), progress: false, capture: true, ..Default::default() };
    let (truth, (all, kernel)) = sc
        .run_with(
            &opts,
            |_lab: &Lab| Ok(Daemon::start(name, CONFIG)),
            |d, _lab, _truth| {
                std::thread::sleep(Duration::from_millis(500));
                let dumps = d.dumps.clone();
                let all = d.stop();
                Ok((all, kernel_rounds(&dumps)))
            },
        )
        .expect("scenario ran");
    let report = all
        .iter()
        .find(|f| f["kind"] == "unfair" && !f["evidence"]["send_phase"].is_null())
        .unwrap_or_else(|| panic!("{name}: no group report with a send phase: {all:#?}"));
    let reported = seen_from_report(&report["evidence"]["send_phase"]);
    let until = (parse_rfc3339(report["ts"].as_str().unwrap()) * 1e9) as u64;

    let mut capture: BTreeMap<String, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for i in 0..truth.senders.len() {
        capture.extend(capture_rounds(&truth.run_dir.join(format!("capture-s{i}.pcap"))));
    }
    // The data path: every round start the kernel reported is an ACK the capture shows starting
    // a round (within 1 ms: the hook runs as the ACK is processed, tcpdump sees it on the link).
    assert!(!kernel.is_empty(), "the dump holds no round starts");
    for (who, starts) in &kernel {
        let acks = &capture
            .get(who)
            .unwrap_or_else(|| panic!("{who} not in the capture: {:?}", capture.keys().collect::<Vec<_>>()))
            .1;
        let (lo, hi) = (acks[0], *acks.last().unwrap());
        let inside: Vec<u64> = starts.iter().copied().filter(|&t| t >= lo && t <= hi).collect();
        let near = inside
            .iter()
            .filter(|&&t| {
                let i = acks.partition_point(|&a| a < t);
                [i.checked_sub(1), Some(i)]
                    .into_iter()
                    .flatten()
                    .filter_map(|j| acks.get(j))
                    .any(|&a| a.abs_diff(t) < 1_000_000)
            })
            .count();
        eprintln!("{name}: {who}: {near} of {} round starts in the dump match the capture's", inside.len());
        if std::env::var("TV_DEBUG_PHASE").is_ok() {
            let caps: Vec<u64> =
                acks.iter().copied().filter(|&a| a >= inside[0] && a <= *inside.last().unwrap()).collect();
            eprintln!("  capture has {} round-start ACKs in that span", caps.len());
            for &t in inside.iter().take(25) {
                let i = acks.partition_point(|&a| a < t);
                let d: Vec<i64> = [i.saturating_sub(1), i]
                    .iter()
                    .filter_map(|&j| acks.get(j))
                    .map(|&a| (a as i64 - t as i64) / 1000)
                    .collect();
                eprintln!("  kernel {:.6} nearest capture ACK at {:?} us", t as f64 / 1e9, d);
            }
        }
        assert!(inside.len() >= 20 && near * 10 >= inside.len() * 9, "{who}: {near} of {} match", inside.len());
    }
    let rounds: BTreeMap<String, Vec<u64>> = capture.into_iter().map(|(k, v)| (k, v.0)).collect();
    let names: Vec<String> = rounds.keys().cloned().collect();
    let cut: Vec<Vec<u64>> = rounds.values().map(|v| v.iter().copied().filter(|&t| t <= until).collect()).collect();
    let input: Vec<StreamRounds> =
        cut.iter().enumerate().map(|(i, v)| StreamRounds { cookie: i as u64, starts: v }).collect();
    let captured = seen_from_capture(&phase::analyze(&input, 8, 64).expect("the capture has rounds"), &names);
    let _ = std::fs::remove_dir_all(&out);

    let row = |s: &Seen| {
        let o: Vec<String> = s.order.iter().map(|c| format!("{c} {:.2}", s.phase[c])).collect();
        format!("rtt {:.1} ms, stability {:.2}, order [{}]", s.rtt_ms, s.stability, o.join(", "))
    };
    eprintln!("{name}: reported {}\n{name}: captured {}", row(&reported), row(&captured));
    let mut got = reported.order.clone();
    got.sort();
    assert_eq!(got, names, "the reported streams are the captured ones");
    assert!((reported.rtt_ms - captured.rtt_ms).abs() < 0.1 * captured.rtt_ms, "cycle length");
    if captured.stability >= 0.7 {
        // A stable order on the wire: the same order, stable too, each phase within 0.1 RTT.
        assert!(same_cycle(&reported.order, &captured.order), "order differs from the capture's");
        assert!(reported.stability >= captured.stability - 0.2, "stability {}", reported.stability);
        let (r0, c0) = (&reported.phase[&captured.order[0]], &captured.phase[&captured.order[0]]);
        for c in &captured.order {
            let (r, w) = ((reported.phase[c] - r0).rem_euclid(1.0), (captured.phase[c] - c0).rem_euclid(1.0));
            assert!(dist(r, w) < 0.1, "{c}: phase {r:.2} reported, {w:.2} captured");
        }
    } else {
        // No stable order on the wire: none reported either.
        assert!(reported.stability < captured.stability + 0.25, "stability {}", reported.stability);
    }
}

// Not passing yet, so not in CI: in the runs so far only 42-48 of ~110 round starts the kernel
// reported lay within 1 ms of a round-start ACK in the capture, and the staggered streams' phases
// differed from the capture's (reported 0/0.07/0.13/0.43 of the RTT, captured 0/0.27/0.47/0.67;
// started together they agreed within 0.03). Suspected: ACKs that wait in the socket backlog while
// iperf3 holds the socket are processed after more data went out, so the kernel's round ends
// later than the wire's. Run by hand: cargo test -p tcpvigil --test send_phase -- --ignored
#[test]
#[ignore = "the send phase's proof against the capture does not pass yet (see the comment above)"]
fn streams_started_rtt_over_4_apart_keep_the_phase_order_the_capture_shows() {
    judged("parallel-4-staggered");
}

#[test]
#[ignore = "the send phase's proof against the capture does not pass yet (see the comment above)"]
fn streams_started_together_have_the_send_phase_the_capture_shows() {
    judged("parallel-4");
}
