//! Alerts as Prometheus evaluated them during the scenarios (the ALERTS series): a stop walks
//! pending -> firing -> resolved, a clean run fires nothing, the unfair-group alert follows the truth.
use serde_json::Value;

use crate::campaign::{campaign, fairness_truth, Campaign, Run};
use crate::support::prom::Series;
use crate::{LAB_GROUP, UNFAIR_SCENARIO};

fn unix(s: &tcpvigil_lab::clock::Stamp) -> f64 {
    s.unix_ns as f64 / 1e9
}

/// First and last sample time of the series in `state`.
fn span(series: &[Series], state: &str) -> Option<(f64, f64)> {
    let t = series.iter().filter(|s| s.labels["alertstate"] == state).flat_map(|s| s.points.iter().map(|p| p.0));
    t.fold(None, |acc, x| Some(acc.map_or((x, x), |(a, b): (f64, f64)| (a.min(x), b.max(x)))))
}

fn alerts(c: &Campaign, run: &Run, selector: &str) -> Vec<Series> {
    let s = c.prom.samples(selector, run.from, run.to).unwrap_or_else(|e| panic!("{selector}: {e}"));
    for x in &s {
        let (a, b) = x.points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        eprintln!("   {}: {:+.1} s .. {:+.1} s after traffic start", x.labels, a - run.from, b - run.from);
    }
    s
}

#[test]
fn outage_walks_the_stop_alert_from_pending_to_firing_and_back() {
    let Some(c) = campaign("stop alert during outage") else { return };
    let run = c.run("outage");
    let inj = run.truth.injections.iter().find(|i| i.kind == "outage").expect("the outage injection");
    let (t1, t2) = (unix(&inj.start), unix(inj.end.as_ref().expect("the outage ended")));
    eprintln!("== outage from {:+.2} s to {:+.2} s after traffic start", t1 - run.from, t2 - run.from);
    let s = alerts(c, run, r#"ALERTS{alertname="TcpvigilCommunicationStop"}"#);
    let (p1, _) = span(&s, "pending").expect("the stop alert was never pending");
    let (f1, f2) = span(&s, "firing").expect("the stop alert never fired");
    eprintln!("   pending at outage {:+.2} s, firing {:+.2} s .. {:+.2} s", p1 - t1, f1 - t1, f2 - t1);
    assert!(p1 < f1, "pending ({p1:.2}) must come before firing ({f1:.2})");
    assert!(p1 >= t1, "pending {:.2} s before the outage began: not this outage's stop", t1 - p1);
    // The stop lasts until a backed-off retransmission gets through (up to 3.2 s after the
    // outage); metrics refresh, scrape and evaluation add up to about 3 s more.
    assert!(f1 <= t2 + 3.0, "firing only {:.2} s after the outage ended", f1 - t2);
    assert!(f2 <= t2 + 3.2 + 3.0, "still firing {:.2} s after the outage ended", f2 - t2);
    let stops: Vec<&Value> = run.findings.iter().filter(|f| f["kind"] == "stop").collect();
    assert!(!stops.is_empty(), "the agent reported no stop of the lab's sender: {:#?}", run.findings);
}

#[test]
fn a_stalled_receiver_fires_the_receiver_alert_and_never_the_network_one() {
    let Some(c) = campaign("receiver alert during zero-window") else { return };
    let run = c.run("zero-window");
    let inj = run.truth.injections.iter().find(|i| i.kind == "zero-window").expect("the pause injection");
    let (t1, t2) = (unix(&inj.start), unix(inj.end.as_ref().expect("reading resumed")));
    eprintln!(
        "== the receiver does not read from {:+.2} s to {:+.2} s after traffic start",
        t1 - run.from,
        t2 - run.from
    );
    let net = alerts(c, run, r#"ALERTS{alertname="TcpvigilCommunicationStop"}"#);
    let ours: Vec<&Series> = net.iter().filter(|x| !caused_by_others(&x.labels, run)).collect();
    assert!(ours.is_empty(), "the network alert during a receiver stall: {ours:#?}\n{:#?}", run.findings);
    let rx = alerts(c, run, r#"ALERTS{alertname="TcpvigilReceiverStall"}"#);
    let (f1, f2) = span(&rx, "firing").expect("the receiver alert never fired");
    eprintln!("   receiver alert firing {:+.2} s .. {:+.2} s after the pause began", f1 - t1, f2 - t1);
    assert!(f1 >= t1 && f2 <= t2 + 4.0, "firing outside the pause (+ refresh, scrape and evaluation)");
}

/// Whether a firing alert during `run` is explained by connections that are not the lab's (other
/// tests on a shared machine: the daemon watches every namespace of the host).
fn caused_by_others(a: &Value, run: &Run) -> bool {
    // The stop alert is the network's stops only: a receiver's stop of the lab's own (the
    // zero-window run) explains none of it.
    let network_stop = |v: &[Value]| v.iter().any(|f| f["kind"] == "stop" && f["owner"] == "network");
    match a["alertname"].as_str() {
        Some("TcpvigilCommunicationStop") => !network_stop(&run.findings) && network_stop(&run.foreign),
        Some("TcpvigilUnfairGroup") => a["group"] != LAB_GROUP,
        _ => false,
    }
}

#[test]
fn clean_run_fires_no_tcpvigil_alert() {
    let Some(c) = campaign("no alert during clean") else { return };
    let run = c.run("clean");
    let s = alerts(c, run, r#"ALERTS{alertstate="firing",alertname=~"Tcpvigil.*"}"#);
    let (others, ours): (Vec<&Series>, Vec<&Series>) = s.iter().partition(|x| caused_by_others(&x.labels, run));
    assert!(ours.is_empty(), "alerts fired during clean: {:#?}\nlab findings: {:#?}", ours, run.findings);
    if !others.is_empty() {
        let msg =
            format!("alerts during clean caused by other connections on this host: {others:#?}\n{:#?}", run.foreign);
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}; under CI=true nothing else may run");
        eprintln!("NOTE {msg}");
    }
}

#[test]
fn unfair_group_alert_fires_when_the_truth_is_unfair_and_not_when_it_is_fair() {
    let Some(c) = campaign("unfair-group alert") else { return };
    let run = c.run(UNFAIR_SCENARIO);
    let t = fairness_truth(run);
    let sel = format!(r#"ALERTS{{alertname="TcpvigilUnfairGroup",group="{LAB_GROUP}"}}"#);
    let s = alerts(c, run, &sel);
    let fired = span(&s, "firing").is_some();
    for f in run.findings.iter().filter(|f| f["kind"] == "unfair") {
        eprintln!(
            "   agent: unfair ongoing={} evidence jain {} min/max {}",
            f["ongoing"], f["evidence"]["jain_index"], f["evidence"]["min_max_ratio"]
        );
    }
    eprintln!(
        "== {UNFAIR_SCENARIO}: per-stream goodput {:?} Mbit/s, Jain {:.3}, min/max {:.3} -> truth {}; alert fired: {fired}",
        run.truth.summary.stream_goodput_mbit,
        t.jain,
        t.ratio,
        t.verdict()
    );
    if t.unfair {
        assert!(fired, "the truth is unfair by the detector's own thresholds but the alert never fired");
    } else if t.fair {
        assert!(!fired, "the truth is fair but the unfair-group alert fired");
    } else {
        eprintln!("NOTE the truth is between unfair and clearly fair: no claim about the alert on this run");
    }
}
