//! What each lab scenario must be diagnosed as, judged against the run's truth; shared by live and offline tests.
#![allow(dead_code)]
use serde_json::Value;
use tcpvigil_lab::Truth;

/// The daemon's config for lab runs: the parallel streams come from one iperf3 client per sender
/// namespace (different pids), so a rule makes everything sent to the lab's receivers one transfer.
pub const LAB_CONFIG: &str =
    "[detect.fairness]\n[[detect.fairness.rules]]\nremote_cidr = \"10.72.0.0/16\"\nkey = [\"remote_ip\"]\n";

/// One line of the expected-vs-reported table.
#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: String,
    pub expected: String,
    pub reported: String,
    pub start_s: Option<f64>,
    pub duration_s: Option<f64>,
    pub found_after_s: Option<f64>,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = |v: Option<f64>| v.map(|x| format!("{x:+.2}")).unwrap_or_else(|| "-".into());
        write!(
            f,
            "| {} | {} | {} | {} | {} | {} |",
            self.scenario,
            self.expected,
            self.reported,
            o(self.start_s),
            self.duration_s.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into()),
            o(self.found_after_s)
        )
    }
}

/// Findings about the lab's senders (matched by address and namespace inode: addresses repeat across
/// runs), one per (kind, conn, group, start, limit cause): the last report, with `first_ts` of the first.
pub fn sender_findings(all: &[Value], truth: &Truth) -> Vec<Value> {
    let mine = |c: &Value| {
        let local = c["local"].as_str().unwrap_or("");
        truth.senders.iter().any(|h| {
            local.starts_with(&format!("{}:", h.addr)) && (h.netns_ino == 0 || c["netns"].as_u64() == Some(h.netns_ino))
        })
    };
    let key = |x: &Value| {
        // A stop's cause may sharpen between its reports; limits of one connection differ by cause.
        let cause = if x["kind"] == "limit" { x["cause"].clone() } else { Value::Null };
        (x["kind"].clone(), x["conn"]["cookie"].clone(), x["group"].clone(), x["start"].clone(), cause)
    };
    let mut out: Vec<Value> = Vec::new();
    // An unfair group's `conn` is its slowest stream.
    for f in all.iter().filter(|f| mine(&f["conn"])) {
        let mut f = f.clone();
        match out.iter().position(|x| key(x) == key(&f)) {
            Some(i) => {
                f["first_ts"] = out[i]["first_ts"].clone();
                f["first_owner"] = out[i]["first_owner"].clone();
                let mut owners = out[i]["owners"].as_array().cloned().unwrap_or_default();
                owners.push(f["owner"].clone());
                f["owners"] = Value::Array(owners);
                out[i] = f;
            }
            None => {
                f["first_ts"] = f["ts"].clone();
                f["first_owner"] = f["owner"].clone();
                f["owners"] = Value::Array(vec![f["owner"].clone()]);
                out.push(f);
            }
        }
    }
    out
}

/// A stop's owner in its first report and in every report (stops carry `owner`, findings about
/// groups and limits do not).
pub fn owners(stop: &Value) -> (String, Vec<String>) {
    let s = |v: &Value| v.as_str().unwrap_or("none").to_string();
    let all = stop["owners"].as_array().map(|a| a.iter().map(s).collect()).unwrap_or_default();
    (s(&stop["first_owner"]), all)
}

/// Seconds from the traffic start to an RFC 3339 time in a finding.
pub fn secs_from_start(v: &Value, truth: &Truth) -> f64 {
    parse_rfc3339(v.as_str().unwrap_or("")) - truth.traffic_start.unix_ns as f64 / 1e9
}

pub use tcpvigil_lab::clock::parse_rfc3339;

/// Start and end (seconds from the traffic start) of the run's injection of `kind`.
pub fn injection(truth: &Truth, kind: &str) -> (f64, f64) {
    let i = truth.injections.iter().find(|i| i.kind == kind).unwrap_or_else(|| panic!("no {kind} injection"));
    let s = (i.start.mono_ns - truth.traffic_start.mono_ns) as f64 / 1e9;
    let e = i.end.as_ref().map(|e| (e.mono_ns - truth.traffic_start.mono_ns) as f64 / 1e9).unwrap_or(f64::NAN);
    (s, e)
}

/// The one finding of `kind`/`cause`, and nothing else.
pub fn only(f: &[Value], kind: &str, cause: &str) -> Value {
    let mine: Vec<&Value> = f.iter().filter(|x| x["kind"] == kind && x["cause"] == cause).collect();
    let others: Vec<&Value> = f.iter().filter(|x| !(x["kind"] == kind && x["cause"] == cause)).collect();
    assert_eq!(mine.len(), 1, "exactly one {kind}/{cause}: {f:#?}");
    assert!(others.is_empty(), "nothing else expected: {others:#?}");
    mine[0].clone()
}

fn rtt_s(truth: &Truth) -> f64 {
    (truth.config.path.forward.delay_ms + truth.config.path.reverse.delay_ms) / 1000.0
}

/// A stop must be reported while it lasts, within 2 RTT + 200 ms of its start (the threshold is
/// 2 srtt + 100 ms; srtt includes the bottleneck queue, so the RTT here is the larger of the two).
fn found_in_progress(stop: &Value, truth: &Truth) -> f64 {
    let start = secs_from_start(&stop["start"], truth);
    let first = secs_from_start(&stop["first_ts"], truth);
    let srtt = stop["evidence"]["srtt_ms"].as_f64().map(|x| x / 1e3).unwrap_or(0.0);
    let limit = 2.0 * rtt_s(truth).max(srtt) + 0.2;
    assert!(
        first - start <= limit + 1e-3,
        "stop first reported {:.3}s after its start (limit {limit:.3}s)",
        first - start
    );
    if let Some(d) = stop["duration_s"].as_f64() {
        assert!(first < start + d, "the first report came after the stop ended");
    }
    first - start
}

fn row(scenario: &str, expected: &str, f: Option<&Value>, truth: &Truth, found: Option<f64>) -> Row {
    Row {
        scenario: scenario.into(),
        expected: expected.into(),
        reported: f
            .map(|x| {
                let (kind, cause) = (x["kind"].as_str().unwrap_or(""), x["cause"].as_str().unwrap_or(""));
                match x["owner"].as_str() {
                    Some(o) => format!("{kind}/{o}/{cause} (first: {})", x["first_owner"].as_str().unwrap_or("?")),
                    None => format!("{kind}/{cause}"),
                }
            })
            .unwrap_or_else(|| "nothing".into()),
        start_s: f.map(|x| secs_from_start(&x["start"], truth)),
        duration_s: f.and_then(|x| x["duration_s"].as_f64()),
        found_after_s: found,
    }
}

/// Asserts the diagnosis of `scenario` against its truth; returns the table row.
pub fn check(scenario: &str, truth: &Truth, f: &[Value]) -> Row {
    match scenario {
        "clean" => {
            assert!(f.is_empty(), "a healthy transfer raised: {f:#?}");
            row(scenario, "nothing", None, truth, None)
        }
        "outage" => {
            let stop = only(f, "stop", "path_silent");
            let (first, all) = owners(&stop);
            assert!(first == "network" && all.iter().all(|o| o == "network"), "an outage is the network's: {all:?}");
            let (t1, t2) = injection(truth, "outage");
            let start = secs_from_start(&stop["start"], truth);
            let tol = (0.1 * (t2 - t1)).max(rtt_s(truth)).max(0.06);
            assert!((start - t1).abs() <= tol, "stop start {start:.3}s vs outage {t1:.3}s (±{tol:.3})");
            // The stop lasts until the first backed-off retransmission after the outage gets through.
            let end = start + stop["duration_s"].as_f64().expect("ended");
            let max_rto = 3.2; // 200 ms x 2^4 backoffs
            assert!(end >= t2 - tol && end <= t2 + max_rto, "stop end {end:.3}s vs outage end {t2:.3}s");
            assert!(stop["evidence"]["rtos"].as_u64().unwrap_or(0) >= 3, "{}", stop["evidence"]);
            let found = found_in_progress(&stop, truth);
            row(scenario, &format!("stop/path_silent {t1:+.2} {:.2}", t2 - t1), Some(&stop), truth, Some(found))
        }
        "tail-loss-rto" => {
            let stop = only(f, "stop", "rto");
            let (first, all) = owners(&stop);
            assert!(first == "network" && all.iter().all(|o| o == "network"), "a blackhole is the network's: {all:?}");
            let (t1, _) = injection(truth, "outage");
            let start = secs_from_start(&stop["start"], truth);
            assert!((start - t1).abs() <= 0.1, "stop start {start:.3}s vs blackhole {t1:.3}s");
            assert!(truth.summary.rto_timeouts >= 1, "the truth has no RTO");
            let found = found_in_progress(&stop, truth);
            row(scenario, &format!("stop/rto {t1:+.2}"), Some(&stop), truth, Some(found))
        }
        "zero-window" => {
            let stop = only(f, "stop", "zero_window");
            assert_eq!(stop["evidence"]["receiver_limited"], true);
            let (first, all) = owners(&stop);
            assert!(all.iter().all(|o| o != "network"), "a stalled receiver is never the network's: {all:?}");
            assert_eq!(first, "receiver", "the receiver's from the first report: {all:?}");
            let (t1, t2) = injection(truth, "zero-window");
            let start = secs_from_start(&stop["start"], truth);
            let dur = stop["duration_s"].as_f64().expect("ended");
            // The window closes once the receive buffer is full, a little after reading stops.
            assert!(start >= t1 - 0.1 && start <= t1 + 1.0, "start {start:.2}s vs {t1:.2}s");
            assert!((start + dur - t2).abs() <= 0.5, "end {:.2}s vs reading resumes {t2:.2}s", start + dur);
            let found = found_in_progress(&stop, truth);
            row(scenario, &format!("stop/zero_window {t1:+.2} {:.2}", t2 - t1), Some(&stop), truth, Some(found))
        }
        "receiver-stall" | "receiver-stall-3s" => {
            // Issue 11's first case: the receiving application sleeps; nothing is outstanding.
            let stops: Vec<&Value> = f.iter().filter(|x| x["kind"] == "stop").collect();
            for s in &stops {
                let (_, all) = owners(s);
                assert!(all.iter().all(|o| o != "network"), "a sleeping receiver reported as the network's: {s:#}");
            }
            assert_eq!(stops.len(), 1, "one stop, the receiver's: {stops:#?}");
            let stop = stops[0].clone();
            assert_eq!(
                (stop["owner"].as_str(), stop["cause"].as_str()),
                (Some("receiver"), Some("zero_window")),
                "{stop:#}"
            );
            let (first, all) = owners(&stop);
            assert_eq!(first, "receiver", "the receiver's from the first report: {all:?}");
            let (t1, t2) = injection(truth, "zero-window");
            let start = secs_from_start(&stop["start"], truth);
            let dur = stop["duration_s"].as_f64().expect("ended");
            // The window closes once the receive buffer is full, a little after reading stops.
            assert!(start >= t1 - 0.1 && start <= t1 + 1.5, "start {start:.2}s vs {t1:.2}s");
            assert!((start + dur - t2).abs() <= 0.5, "end {:.2}s vs reading resumes {t2:.2}s", start + dur);
            let found = found_in_progress(&stop, truth);
            row(
                scenario,
                &format!("stop/receiver/zero_window {t1:+.2} {:.2}", t2 - t1),
                Some(&stop),
                truth,
                Some(found),
            )
        }
        "http-download" => {
            // Issue 11's second case: no stop at all, the end of the download included.
            let stops: Vec<&Value> = f.iter().filter(|x| x["kind"] == "stop").collect();
            assert!(stops.is_empty(), "a stop in a healthy download: {stops:#?}");
            let got: u64 = truth.apps.as_ref().map(|a| a.bytes.iter().sum()).unwrap_or(0);
            assert!(got >= 300_000_000, "curl got {got} bytes of 300 MB: {:?}", truth.apps);
            row(scenario, "nothing, its end included", None, truth, None)
        }
        "lfn-buffer" => {
            let l = only(f, "limit", "rwnd_limited");
            assert_eq!(l["evidence"]["sysctl"], "net.ipv4.tcp_rmem");
            assert!(l["evidence"]["value"].as_u64().unwrap_or(0) >= 1 << 20, "{}", l["evidence"]);
            row(scenario, "limit/rwnd_limited", Some(&l), truth, None)
        }
        "no-sack" => {
            let l = f.iter().find(|x| x["kind"] == "limit" && x["cause"] == "no_sack");
            assert!(l.is_some(), "no_sack not flagged: {f:#?}");
            // Without SACK a burst of losses is repaired one hole per RTT (the SACK-over-ATM study): that may be a stop,
            // named slow_recovery; any other stop must come with an RTO in the truth.
            for x in f.iter().filter(|x| x["kind"] == "stop") {
                assert!(
                    x["cause"] == "slow_recovery" || truth.summary.rto_timeouts >= 1,
                    "a stop that is neither slow recovery nor backed by an RTO in the truth: {x:#}"
                );
            }
            assert!(f.iter().all(|x| x["kind"] != "unfair"), "{f:#?}");
            row(scenario, "limit/no_sack", l, truth, None)
        }
        "policer-burst" | "lost-retransmit" => {
            // Recovery is long and lossy but not a stop unless the truth shows a timeout; nothing else.
            // A retransmission lost again and resent late may stall delivery: that stop is named for it.
            for x in f {
                assert_eq!(x["kind"], "stop", "only a stop could be in question: {x:#}");
                let lost_late = scenario == "lost-retransmit" && x["cause"] == "lost_retransmit";
                assert!(lost_late || truth.summary.rto_timeouts >= 1, "a stop without an RTO in the truth: {x:#}");
            }
            if scenario == "lost-retransmit" {
                assert!(truth.summary.lost_retransmits >= 1, "the scenario lost no retransmission");
            }
            row(scenario, "nothing, or a stop if the truth has an RTO", f.first(), truth, None)
        }
        "parallel-4" | "parallel-4-staggered" => {
            let u = judge_parallel(truth, f);
            row(scenario, "unfair only if iperf3 shows a stream far behind", u.as_ref(), truth, None)
        }
        "parallel-4-lossy" => {
            let u = judge_parallel(truth, f).expect("the lossy stream falls far behind");
            let start = secs_from_start(&u["start"], truth);
            assert!((0.0..=6.0).contains(&start), "unfair from the first seconds: start {start:+.2}s");
            row(scenario, "unfair/unfair_streams naming sender 3", Some(&u), truth, None)
        }
        other => panic!("no judgement written for scenario {other}"),
    }
}

/// Judges a parallel scenario against iperf3's per-stream goodput: even shares raise nothing; a stream
/// far behind must be flagged and be the one named. Returns the unfair finding, if any.
pub fn judge_parallel(truth: &Truth, f: &[Value]) -> Option<Value> {
    // An episode is reported while it lasts and again when it ends: one per group and start. The
    // stream each report names is its slowest then, which may differ among streams equally far
    // behind (a CI run: iperf3 [56.3, 9.3, 9.3, 9.8], the report while it lasted named the 9.8 one,
    // the end report a 9.3 one).
    let reports: Vec<&Value> = f.iter().filter(|x| x["kind"] == "unfair").collect();
    let mut seen = std::collections::HashSet::new();
    let mut unfair = reports.clone();
    unfair.retain(|x| seen.insert((x["group"].to_string(), x["start"].to_string())));
    let others: Vec<&Value> = f.iter().filter(|x| x["kind"] != "unfair").collect();
    assert!(others.is_empty(), "only fairness is in question: {others:#?}");
    let rates = &truth.summary.stream_goodput_mbit;
    let (min, max) = (rates.iter().cloned().fold(f64::MAX, f64::min), rates.iter().cloned().fold(0.0, f64::max));
    let jain = truth.summary.jain_index.unwrap_or(1.0);
    eprintln!("   per iperf3: {rates:.1?} Mbit/s, Jain {jain:.3}, slowest/fastest {:.2}", min / max);
    if jain >= 0.95 && min / max >= 0.7 {
        assert!(unfair.is_empty(), "even shares per iperf3, yet flagged: {unfair:#?}");
        return None;
    }
    if min / max >= 0.4 {
        return unfair.first().map(|x| (*x).clone()); // in between: either answer is defensible
    }
    assert_eq!(unfair.len(), 1, "one episode of streams far behind per iperf3 ({rates:.1?}): {f:#?}");
    // Every report names a stream far behind (below 0.4 of the fastest, as the slowest is).
    let behind: Vec<String> = rates
        .iter()
        .enumerate()
        .filter(|(_, r)| **r < 0.4 * max)
        .map(|(i, _)| format!("{}:", truth.senders[i].addr))
        .collect();
    for r in &reports {
        let named = r["conn"]["local"].as_str().unwrap_or("");
        assert!(
            behind.iter().any(|a| named.starts_with(a.as_str())),
            "the streams far behind per iperf3 are {behind:?} ({rates:.1?}), named: {named}"
        );
    }
    Some(unfair[0].clone())
}
