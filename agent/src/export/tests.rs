//! Tests of the metric set as a scrape sees it: format, series cap, churn, and the HTTP server.
use std::collections::BTreeSet;
use std::net::SocketAddr;

use prometheus_client::registry::Registry;
use serde_json::json;

use super::config::{ExportConfig, TransferRule};
use super::health::{Health, KernelCounters, ProgStats};
use super::metrics::Metrics;
use super::series::{fixed_series, min_series_cap};
use crate::model::{
    Body, Cause, ConnId, ConnTable, Event, Finding, LimitReason, PathScope, PathTag, Process, Retrans, Rto, Snap,
    StopCause, Tuple,
};

pub(crate) fn scrape(r: &Registry) -> String {
    let mut s = String::new();
    prometheus_client::encoding::text::encode(&mut s, r).unwrap();
    s
}

/// Sample lines (series) in a scrape.
pub(crate) fn series(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect()
}

/// A strict-enough OpenMetrics check: every family has TYPE and HELP, every sample belongs to
/// the family declared before it with a suffix its type allows, label sets are well formed,
/// values parse, names are `tcpvigil_` (or the standard `process_`), counters end in `_total`, and `# EOF` closes the text.
pub(crate) fn check_openmetrics(text: &str) -> Result<(), String> {
    let mut lines: Vec<&str> = text.lines().collect();
    if lines.pop() != Some("# EOF") {
        return Err("no # EOF at the end".into());
    }
    let (mut family, mut kind) = (String::new(), String::new());
    let mut seen = BTreeSet::new();
    for l in lines {
        let meta = ["# TYPE ", "# HELP ", "# UNIT "].iter().find_map(|p| l.strip_prefix(p).map(|r| (*p, r)));
        if let Some((what, rest)) = meta {
            let (n, arg) = rest.split_once(' ').ok_or(format!("bad metadata line: {l}"))?;
            if n != family {
                if !seen.insert(n.to_string()) {
                    return Err(format!("family {n} declared twice"));
                }
                // The standard process metrics keep their standard names.
                if !n.starts_with("tcpvigil_") && !n.starts_with("process_") {
                    return Err(format!("{n} lacks the tcpvigil_ prefix"));
                }
                (family, kind) = (n.to_string(), String::new());
            }
            if what == "# TYPE " {
                kind = arg.to_string();
            }
            continue;
        }
        if l.starts_with('#') {
            return Err(format!("unexpected comment: {l}"));
        }
        let (name_labels, value) = l.rsplit_once(' ').ok_or(format!("no value: {l}"))?;
        value.parse::<f64>().map_err(|_| format!("bad value: {l}"))?;
        let name = match name_labels.split_once('{') {
            Some((n, labels)) => {
                let labels = labels.strip_suffix('}').ok_or(format!("unclosed labels: {l}"))?;
                check_labels(labels).map_err(|e| format!("{e}: {l}"))?;
                n
            }
            None => name_labels,
        };
        if kind.is_empty() {
            return Err(format!("family {family} has no TYPE"));
        }
        let suffix = name.strip_prefix(family.as_str()).ok_or(format!("{name} outside its family {family}"))?;
        let allowed: &[&str] = match kind.as_str() {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "gauge" | "info" | "unknown" => &[""],
            k => return Err(format!("unexpected type {k}")),
        };
        if !allowed.contains(&suffix) {
            return Err(format!("{name} in {kind} family {family}"));
        }
    }
    Ok(())
}

fn check_labels(s: &str) -> Result<(), String> {
    let mut rest = s;
    while !rest.is_empty() {
        let (k, v) = rest.split_once("=\"").ok_or("label without =\"")?;
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad label name {k:?}"));
        }
        let mut end = None;
        let mut esc = false;
        for (i, c) in v.char_indices() {
            match (esc, c) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let end = end.ok_or("unterminated label value")?;
        rest = v[end + 1..].strip_prefix(',').unwrap_or(&v[end + 1..]);
    }
    Ok(())
}

pub(crate) fn conn(i: u32) -> ConnId {
    // 1,000 peers, 10 connections each.
    let peer = i % 1000;
    let local: SocketAddr = format!("10.0.0.1:{}", 20000 + i).parse().unwrap();
    let remote: SocketAddr = format!("10.{}.{}.1:5201", 1 + peer / 250, peer % 250).parse().unwrap();
    ConnId { cookie: 1000 + i as u64, netns: 4026531840, tuple: Tuple { local, remote } }
}

pub(crate) fn snap(bytes: u64) -> Snap {
    Snap {
        cwnd: 100,
        packets_out: 80,
        sacked_out: 5,
        srtt_us: 10_000,
        mss: 1448,
        rate_delivered: 100,
        rate_interval_us: 10_000,
        bytes_acked: bytes,
        process: Process { pid: 7, uid: 0, cgroup_id: 1, comm: "iperf3".into(), cgroup: None },
        ..Snap::default()
    }
}

pub(crate) fn ev(ts_ns: u64, c: ConnId, body: Body) -> Event {
    Event { ts_ns, conn: c, body }
}

/// Two snapshots per connection, one second apart; connection i moves i MB/s.
pub(crate) fn feed(m: &mut Metrics, t: &mut ConnTable, n: u32) {
    for round in 0..2u64 {
        for i in 0..n {
            let e = ev(
                1_000_000_000 * (round + 1),
                conn(i),
                Body::Snapshot(snap((2 << 20) + round * i as u64 * 1_000_000)),
            );
            t.apply(&e);
            m.on_event(&e);
        }
        m.refresh(t, &Health::default());
    }
}

pub(crate) fn health() -> Health {
    Health {
        variants: vec![("sack_state".into(), "tp_btf/tcp_probe".into()), ("rto".into(), "sockops".into())],
        programs: vec![ProgStats {
            name: "tcp_probe".into(),
            run_time_ns: 2_000_000_000,
            run_cnt: 10,
            recursion_misses: 3,
        }],
        kernel: KernelCounters { ring_full: 3, samples: 100, ..Default::default() },
        ..Default::default()
    }
}

#[test]
fn an_idle_scrape_has_exactly_the_fixed_series_and_is_valid_openmetrics() {
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    m.refresh(&ConnTable::new(false), &Health::default());
    let text = scrape(&r);
    check_openmetrics(&text).unwrap();
    assert_eq!(series(&text).len(), fixed_series() + super::series::health_fixed_series(), "{text}");
}

#[test]
fn a_busy_scrape_is_valid_openmetrics_with_the_documented_names() {
    let cfg = ExportConfig {
        transfers: vec![TransferRule { name: "bulk-a".into(), filter: ":5201".into() }],
        ..ExportConfig::default()
    };
    let (mut m, r) = Metrics::new_registered(&cfg);
    let mut t = ConnTable::new(false);
    feed(&mut m, &mut t, 20);
    let rtx = Retrans {
        seq: 1,
        end_seq: 2,
        segs: 3,
        sacked: 0x94,
        ca_state: 4,
        count: 2,
        since_prev_ns: 0,
        lost_retrans: true,
        failed: false,
        cwnd: 1,
        ssthresh: 2,
        packets_out: 3,
        lost_out: 0,
        sacked_out: 0,
        retrans_out: 1,
        snd_una: 1,
        mtu_probing: None,
    };
    m.on_event(&ev(3, conn(1), Body::Retrans(rtx)));
    m.on_event(&ev(
        3,
        conn(1),
        Body::Rto(Rto { retransmits: 1, rto_us: 200_000, backoff: 1, cwnd: 1, packets_out: 1, ..Default::default() }),
    ));
    m.on_finding(&finding(1, StopCause::Rto, true, None));
    m.on_finding(&finding(2, LimitReason::RwndLimited, true, None));
    m.on_finding(&Finding {
        group: Some("iperf3->10.1.0.1".into()),
        owner: None,
        mechanism: None,
        evidence: json!({"jain": 0.61, "min_max_ratio": 0.2, "even_split_efficiency": 0.45, "streams": 4,
            "send_phase": {"order_stability": 0.875}}),
        ..finding(3, Cause::UnfairStreams, true, None)
    });
    m.refresh(&t, &health());
    let text = scrape(&r);
    check_openmetrics(&text).unwrap();
    for want in [
        "tcpvigil_stops_total{owner=\"network\",cause=\"rto\"} 0",
        "tcpvigil_stops_in_progress{owner=\"network\",cause=\"rto\"} 1",
        "tcpvigil_retransmitted_segments_total 3",
        "tcpvigil_lost_retransmissions_total 3",
        "tcpvigil_retransmission_timeouts_total 1",
        "tcpvigil_limited_connections{reason=\"rwnd_limited\"} 1",
        "tcpvigil_unfair_groups 1",
        "tcpvigil_group_fairness_index{group=\"iperf3->10.1.0.1\"} 0.61",
        "tcpvigil_group_even_split_efficiency_ratio{group=\"iperf3->10.1.0.1\"} 0.45",
        "tcpvigil_group_min_max_ratio{group=\"iperf3->10.1.0.1\"} 0.2",
        "tcpvigil_group_send_order_stability{group=\"iperf3->10.1.0.1\"} 0.875",
        "tcpvigil_dropped_records_total{stage=\"ring_buffer\"} 3",
        "tcpvigil_hook_variant_info{need=\"sack_state\",variant=\"tp_btf/tcp_probe\"} 1",
        "tcpvigil_bpf_prog_run_time_seconds_total{prog=\"tcp_probe\"} 2.0",
        "tcpvigil_bpf_prog_runs_total{prog=\"tcp_probe\"} 10",
        "tcpvigil_bpf_prog_recursion_misses_total{prog=\"tcp_probe\"} 3",
        "tcpvigil_tracked_connections 20",
        "tcpvigil_conn_goodput_bytes_per_second{conn=\"10.0.0.1:20019>10.1.19.1:5201\",comm=\"iperf3\",transfer=\"bulk-a\",container=\"\",unit=\"\"} 19000000.0",
        "tcpvigil_conn_srtt_seconds{conn=\"10.0.0.1:20019>10.1.19.1:5201\",comm=\"iperf3\",transfer=\"bulk-a\",container=\"\",unit=\"\"} 0.01",
        "tcpvigil_conn_in_flight_segments{conn=\"10.0.0.1:20019>10.1.19.1:5201\",comm=\"iperf3\",transfer=\"bulk-a\",container=\"\",unit=\"\"} 75",
        "tcpvigil_conn_stop_in_progress{conn=\"10.0.0.1:20001>10.1.1.1:5201\",comm=\"iperf3\",transfer=\"bulk-a\",container=\"\",unit=\"\"} 1",
        "tcpvigil_stop_duration_seconds_count{owner=\"network\",cause=\"rto\"} 0",
    ] {
        assert!(text.contains(want), "missing {want}\n{text}");
    }
}

pub(crate) fn finding(i: u32, cause: impl Into<Cause>, ongoing: bool, duration_s: Option<f64>) -> Finding {
    Finding {
        ts_ns: 2_000_000_000,
        conn: Some(conn(i)),
        group: None,
        start_ns: 1_500_000_000,
        duration_s,
        ongoing,
        cause: cause.into(),
        owner: None,
        mechanism: None,
        evidence: json!({}),
        path: PathTag::default(),
    }
}

#[test]
fn a_stop_is_counted_once_when_it_ends_with_its_final_owner_and_cause() {
    use crate::model::StopOwner;
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    let stop = |i, owner, cause: StopCause, ongoing, d| Finding { owner: Some(owner), ..finding(i, cause, ongoing, d) };
    let net = StopOwner::Network;
    // An outage: first no ACK, then its timeouts make it path_silent; in progress under each in turn.
    m.on_finding(&stop(1, net, StopCause::NoAck, true, None));
    let text = scrape(&r);
    assert!(text.contains("tcpvigil_stops_in_progress{owner=\"network\",cause=\"no_ack\"} 1\n"), "{text}");
    m.on_finding(&stop(1, net, StopCause::PathSilent, true, None));
    let text = scrape(&r);
    assert!(text.contains("tcpvigil_stops_in_progress{owner=\"network\",cause=\"no_ack\"} 0\n"), "{text}");
    assert!(text.contains("tcpvigil_stops_in_progress{owner=\"network\",cause=\"path_silent\"} 1\n"), "{text}");
    assert!(text.contains("tcpvigil_stops_total{owner=\"network\",cause=\"path_silent\"} 0\n"), "{text}");
    m.on_finding(&stop(1, net, StopCause::PathSilent, false, Some(4.2)));
    // A stalled receiver, and a stop whose owner is not its cause's (an application's).
    m.on_finding(&stop(2, StopOwner::Receiver, StopCause::ZeroWindow, true, None));
    m.on_finding(&stop(3, StopOwner::Application, StopCause::Undetermined, false, Some(0.3)));
    let text = scrape(&r);
    assert!(text.contains("tcpvigil_stops_total{owner=\"network\",cause=\"path_silent\"} 1\n"), "{text}");
    assert!(text.contains("tcpvigil_stops_total{owner=\"network\",cause=\"no_ack\"} 0\n"), "{text}");
    assert!(text.contains("tcpvigil_stops_total{owner=\"network\",cause=\"unknown\"} 1\n"), "{text}");
    assert!(text.contains("tcpvigil_stops_in_progress{owner=\"network\",cause=\"path_silent\"} 0\n"), "{text}");
    assert!(text.contains("tcpvigil_stops_in_progress{owner=\"receiver\",cause=\"zero_window\"} 1\n"), "{text}");
    assert!(
        text.contains("tcpvigil_stop_duration_seconds_bucket{le=\"5.0\",owner=\"network\",cause=\"path_silent\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("tcpvigil_stop_duration_seconds_bucket{le=\"2.0\",owner=\"network\",cause=\"path_silent\"} 0\n"),
        "{text}"
    );
}

#[test]
fn a_stop_that_ends_with_a_mechanism_named_is_counted_under_it_too() {
    use crate::model::{Mechanism, StopOwner};
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    let owner = Some(StopOwner::Network);
    // Named while it lasts (another connection told it): counted once, when it ends.
    let named = Finding { owner, mechanism: Some(Mechanism::MtuBlackhole), ..finding(1, StopCause::Rto, true, None) };
    m.on_finding(&Finding { owner, ..finding(1, StopCause::NoAck, true, None) });
    m.on_finding(&named);
    assert!(scrape(&r).contains("tcpvigil_stop_mechanisms_total{mechanism=\"mtu_blackhole\"} 0\n"));
    m.on_finding(&Finding { ongoing: false, duration_s: Some(2.0), ..named });
    // A stop without a mechanism counts under none.
    m.on_finding(&Finding { owner, ..finding(2, StopCause::PathSilent, false, Some(3.0)) });
    let text = scrape(&r);
    assert!(text.contains("tcpvigil_stop_mechanisms_total{mechanism=\"mtu_blackhole\"} 1\n"), "{text}");
    assert!(text.contains("tcpvigil_stops_total{owner=\"network\",cause=\"rto\"} 1\n"), "{text}");
    let others: u64 = series(&text)
        .iter()
        .filter(|l| l.starts_with("tcpvigil_stop_mechanisms_total{") && !l.contains("mtu_blackhole"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(others, 0, "{text}");
}

#[test]
fn series_cap_holds_with_10000_connections_to_1000_peers() {
    for (top_k, cap) in [(50, 2000), (1000, 2000), (1000, min_series_cap())] {
        let cfg = ExportConfig { top_k, series_cap: cap, ..ExportConfig::default() };
        let (mut m, r) = Metrics::new_registered(&cfg);
        let mut t = ConnTable::new(false);
        feed(&mut m, &mut t, 10_000);
        for i in 0..200 {
            m.on_finding(&Finding { group: Some(format!("g{i}")), ..finding(i, Cause::UnfairStreams, true, None) });
        }
        m.refresh(&t, &health());
        let text = scrape(&r);
        let n = series(&text).len();
        eprintln!("top_k={top_k} series_cap={cap}: {n} series for 10000 connections");
        assert!(n <= cap, "{n} series > cap {cap}");
        let longest = series(&text).iter().filter_map(|l| l.split_once('{')).map(|(_, l)| l.len()).max().unwrap_or(0);
        assert!(longest < 120, "a label set of {longest} characters");
        assert!(text.contains("tcpvigil_overflow_connections "));
        check_openmetrics(&text).unwrap();
        // The fastest connections are the ones shown.
        if top_k == 50 {
            assert!(text.contains("conn=\"10.0.0.1:29999>10.4.249.1:5201\""), "fastest not shown");
            assert!(!text.contains("conn=\"10.0.0.1:20000>10.1.0.1:5201\""), "slowest shown");
        }
    }
}

#[test]
fn closed_connections_series_go_away_and_the_count_returns_to_baseline() {
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    let mut t = ConnTable::new(false);
    m.refresh(&t, &health());
    let baseline = series(&scrape(&r)).len();
    feed(&mut m, &mut t, 100);
    m.refresh(&t, &health());
    let busy = scrape(&r);
    assert!(series(&busy).len() > baseline);
    assert!(busy.contains("10.0.0.1:20099>"));
    for i in 0..100 {
        let e = ev(3_000_000_000, conn(i), Body::Close(snap(1 << 30)));
        t.apply(&e);
        m.on_event(&e);
    }
    m.refresh(&t, &health());
    let after = scrape(&r);
    assert!(!after.contains("10.0.0.1:"), "closed connection still exported:\n{after}");
    assert_eq!(series(&after).len(), baseline);
    t.reap(u64::MAX);
    m.refresh(&t, &health());
    assert_eq!(series(&scrape(&r)).len(), baseline);
}

#[test]
fn churn_of_5000_short_connections_returns_the_series_count_to_baseline() {
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    let mut t = ConnTable::new(false);
    m.refresh(&t, &health());
    let baseline = series(&scrape(&r)).len();
    let mut peak = 0;
    for round in 0..50u32 {
        let ts = |k: u64| (round as u64 * 10 + k) * 1_000_000_000;
        for j in 0..100u32 {
            let c = conn(round * 100 + j);
            for (k, body) in [(1, Body::Snapshot(snap(2 << 20))), (2, Body::Snapshot(snap(4 << 20)))] {
                let e = ev(ts(k), c, body);
                t.apply(&e);
                m.on_event(&e);
            }
        }
        m.refresh(&t, &health());
        peak = peak.max(series(&scrape(&r)).len());
        for j in 0..100u32 {
            let e = ev(ts(3), conn(round * 100 + j), Body::Close(snap(5 << 20)));
            t.apply(&e);
            m.on_event(&e);
        }
        m.refresh(&t, &health());
        t.reap(ts(4));
    }
    m.refresh(&t, &health());
    let after = scrape(&r);
    eprintln!("churn: baseline {baseline} series, peak {peak}, after {}", series(&after).len());
    assert!(peak > baseline);
    assert_eq!(series(&after).len(), baseline, "{after}");
    assert!(after.contains("tcpvigil_tracked_connections 0\n"));
}

#[test]
fn health_counters_stay_monotonic_when_kernel_totals_restart() {
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    let t = ConnTable::new(false);
    let mut h = health();
    h.channel_dropped = 10;
    m.refresh(&t, &h);
    h.channel_dropped = 4; // programs reloaded, totals restart
    m.refresh(&t, &h);
    assert!(scrape(&r).contains("tcpvigil_dropped_records_total{stage=\"channel\"} 14\n"));
    h.programs.clear();
    m.refresh(&t, &h);
    assert!(!scrape(&r).contains("prog=\"tcp_probe\""));
}

#[test]
fn exact_variant_counts_only_lost_retrans_events() {
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    m.set_exact_lost_retrans(true);
    let rtx = Retrans {
        seq: 1,
        end_seq: 2,
        segs: 2,
        sacked: 0x94,
        ca_state: 4,
        count: 2,
        since_prev_ns: 0,
        lost_retrans: true,
        failed: false,
        cwnd: 1,
        ssthresh: 2,
        packets_out: 3,
        lost_out: 0,
        sacked_out: 0,
        retrans_out: 1,
        snd_una: 1,
        mtu_probing: None,
    };
    m.on_event(&ev(1, conn(0), Body::Retrans(rtx.clone())));
    assert!(scrape(&r).contains("tcpvigil_lost_retransmissions_total 0\n"));
    m.on_event(&ev(1, conn(0), Body::LostRetrans(rtx)));
    assert!(scrape(&r).contains("tcpvigil_lost_retransmissions_total 2\n"));
}

/// With TCPVIGIL_SCRAPE_OUT=FILE, write a busy scrape there for `promtool check metrics`
/// (scripts/ci-export.sh does).
#[test]
fn a_busy_scrape_can_be_written_for_promtool() {
    let Some(path) = std::env::var_os("TCPVIGIL_SCRAPE_OUT") else { return };
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    let mut t = ConnTable::new(false);
    feed(&mut m, &mut t, 2000);
    m.on_finding(&finding(3, StopCause::Rto, false, Some(2.5)));
    m.on_finding(&Finding {
        group: Some("g".into()),
        owner: None,
        mechanism: None,
        evidence: json!({"jain": 0.7, "min_max_ratio": 0.3, "even_split_efficiency": 0.5, "streams": 4}),
        ..finding(3, Cause::UnfairStreams, true, None)
    });
    m.refresh(&t, &health());
    let text = scrape(&r);
    std::fs::write(&path, crate::export::http::to_prometheus_text(&text)).unwrap();
    let mut om = path.clone();
    om.push(".openmetrics");
    std::fs::write(om, text).unwrap();
}

#[test]
fn the_default_cap_is_valid_config() {
    assert!(ExportConfig::default().series_cap >= min_series_cap());
}

#[test]
fn path_events_and_stops_per_remote_prefix_are_counted_without_connection_labels() {
    use crate::model::StopOwner;
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    let stop = |i, prefix: &str| Finding {
        owner: Some(StopOwner::Network),
        mechanism: None,
        path: PathTag { remote_prefix: Some(prefix.into()), event: None },
        ..finding(i, StopCause::NoAck, true, None)
    };
    m.on_finding(&stop(1, "10.72.1.0/24"));
    m.on_finding(&stop(2, "10.72.1.0/24"));
    m.on_finding(&stop(3, "10.72.2.0/24"));
    let path = |ongoing, d| Finding {
        conn: None,
        group: Some("10.72.1.0/24".into()),
        owner: Some(StopOwner::Network),
        mechanism: None,
        ..finding(0, PathScope::Partial, ongoing, d)
    };
    m.on_finding(&path(true, None));
    let mut t = ConnTable::new(false);
    feed(&mut m, &mut t, 4);
    m.refresh(&t, &Health::default());
    let text = scrape(&r);
    check_openmetrics(&text).unwrap();
    for want in [
        "tcpvigil_prefix_stops_in_progress{prefix=\"10.72.1.0/24\"} 2\n",
        "tcpvigil_prefix_stops_in_progress{prefix=\"10.72.2.0/24\"} 1\n",
        "tcpvigil_path_events_in_progress{scope=\"partial\"} 1\n",
        "tcpvigil_path_events_total{scope=\"partial\"} 0\n",
    ] {
        assert!(text.contains(want), "missing {want}{text}");
    }
    // Everything ends: the prefix series go away, the event is counted once.
    for i in 1..=3 {
        m.on_finding(&finding(i, StopCause::NoAck, false, Some(2.0)));
    }
    m.on_finding(&path(false, Some(2.0)));
    m.refresh(&t, &Health::default());
    let text = scrape(&r);
    assert!(!text.contains("tcpvigil_prefix_stops_in_progress{"), "{text}");
    assert!(text.contains("tcpvigil_path_events_in_progress{scope=\"partial\"} 0\n"), "{text}");
    assert!(text.contains("tcpvigil_path_events_total{scope=\"partial\"} 1\n"), "{text}");
}

#[test]
fn build_info_names_the_revision_and_the_hook_variants_in_one_series() {
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    m.set_hooks(9, 10, &["rto"]);
    m.set_hooks(8, 10, &["rto", "sack"]);
    let text = scrape(&r);
    let lines: Vec<&str> = series(&text).into_iter().filter(|l| l.starts_with("tcpvigil_build_info")).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let rev = super::families::REVISION;
    assert!(!rev.is_empty());
    for want in [format!("revision=\"{rev}\""), "hooks_preferred=\"8/10\"".into(), "hooks_fallback=\"rto,sack\"".into()]
    {
        assert!(lines[0].contains(&want), "{want} not in {}", lines[0]);
    }
    assert!(text.contains("process_resident_memory_bytes "), "{text}");
}
