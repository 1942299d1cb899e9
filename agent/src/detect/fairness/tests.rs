//! The fairness detector's tests: groups, persistence, the send phase.
use super::*;
use crate::model::{Process, Tuple};

fn conn(i: u64) -> ConnId {
    ConnId {
        cookie: i,
        netns: 1,
        tuple: Tuple {
            local: format!("10.0.0.1:{}", 4000 + i).parse().unwrap(),
            remote: "10.0.0.2:5201".parse().unwrap(),
        },
    }
}

fn run(rates: &[u64], secs: u64) -> Vec<Finding> {
    run_lossy(rates, &vec![0.0; rates.len()], secs)
}

/// Streams at `rates` (bytes/s) whose snapshots show `retrans` retransmitted bytes per byte sent.
fn run_lossy(rates: &[u64], retrans: &[f64], secs: u64) -> Vec<Finding> {
    run_with(rates, retrans, secs, &|_, _| vec![]).0
}

/// As run_lossy, with `extra(from, to)` events of each 50 ms step; also returns what
/// phase_members said after each tick.
#[allow(clippy::type_complexity)]
fn run_with(
    rates: &[u64],
    retrans: &[f64],
    secs: u64,
    extra: &dyn Fn(u64, u64) -> Vec<Event>,
) -> (Vec<Finding>, Vec<HashSet<u64>>) {
    let mut table = ConnTable::new(false);
    for (i, r) in retrans.iter().enumerate() {
        let snap = crate::model::Snap {
            bytes_sent: 100_000_000,
            bytes_retrans: (r * 100_000_000.0) as u64,
            ..Default::default()
        };
        table.apply(&Event { ts_ns: 1, conn: conn(i as u64), body: Body::Snapshot(snap) });
    }
    let mut d = FairnessDetector::new(FairnessConfig::default());
    let mut out = vec![];
    for (i, _) in rates.iter().enumerate() {
        table.apply(&Event {
            ts_ns: 1,
            conn: conn(i as u64),
            body: Body::Process(Process { pid: 42, uid: 0, cgroup_id: 1, comm: "iperf3".into(), cgroup: None }),
        });
    }
    let mut t = 0;
    let mut said = vec![];
    let mut eps = Episodes::default();
    while t < secs * 1_000_000_000 {
        t += 50_000_000;
        let mut evs = extra(t - 50_000_000, t);
        evs.sort_by_key(|e| e.ts_ns);
        for ev in evs {
            table.apply(&ev);
            eps.observe(&ev);
            d.observe(&ev, &table);
        }
        for (i, r) in rates.iter().enumerate() {
            let mut s = crate::detect::tests_support::sample(2_000_000 + r * t / 1_000_000_000);
            s.srtt_us = 20_000;
            let ev = Event { ts_ns: t, conn: conn(i as u64), body: Body::Sample(s) };
            table.apply(&ev);
            d.observe(&ev, &table);
        }
        d.tick(t, &table, &eps, &mut out);
        said.extend(d.phase_members());
    }
    (out, said)
}

#[test]
fn the_stream_that_sends_last_in_the_round_and_loses_first_is_named() {
    // Rounds every 100 ms; stream 2 sends last (at 0.7 of the RTT) and enters Recovery first
    // in every loss episode (every 2 s, the others 5-15 ms later).
    const MS: u64 = 1_000_000;
    let phases = [0.1, 0.3, 0.7, 0.5];
    let extra = |from: u64, to: u64| {
        let mut v = vec![];
        for (i, p) in phases.iter().enumerate() {
            let mut k = from / (100 * MS);
            loop {
                let t = k * 100 * MS + (p * 100.0 * MS as f64) as u64;
                k += 1;
                if t < from {
                    continue;
                }
                if t >= to {
                    break;
                }
                let mut s = crate::detect::tests_support::sample(1 << 20);
                s.round = true;
                v.push(Event { ts_ns: t, conn: conn(i as u64), body: Body::Sample(s) });
            }
            let lag = [10, 5, 0, 15][i] * MS;
            let ep = (from / (2000 * MS)) * 2000 * MS + lag;
            if ep >= 2000 * MS && ep >= from && ep < to {
                let c = crate::model::CaState { old: 0, new: 3, ..Default::default() };
                v.push(Event { ts_ns: ep, conn: conn(i as u64), body: Body::CaState(c) });
            }
        }
        v
    };
    let (out, said) = run_with(&[10_000_000, 10_000_000, 1_000_000, 10_000_000], &[0.0; 4], 10, &extra);
    assert_eq!(said, vec![(0..4).collect::<HashSet<u64>>()], "the members once, when the group formed");
    let p = &out.first().expect("flagged").evidence["send_phase"];
    assert_eq!(p["last_in_round"], 2, "{p}");
    let order: Vec<u64> = p["streams"].as_array().unwrap().iter().map(|s| s["cookie"].as_u64().unwrap()).collect();
    assert_eq!(order, vec![0, 1, 3, 2], "{p}");
    assert!(p["order_stability"].as_f64().unwrap() > 0.9, "{p}");
    assert_eq!(p["loses_first"]["cookie"], 2, "{p}");
    assert_eq!(p["last_loses_first"], true, "{p}");
    assert!((p["rtt_ms"].as_f64().unwrap() - 100.0).abs() < 1.0, "{p}");
}

#[test]
fn without_rounds_the_send_phase_is_null() {
    let out = run(&[10_000_000, 10_000_000, 1_000_000, 10_000_000], 10);
    assert!(out[0].evidence["send_phase"].is_null());
}

#[test]
fn one_stream_at_a_tenth_is_flagged_and_named() {
    let out = run(&[10_000_000, 10_000_000, 1_000_000, 10_000_000], 10);
    let f = out.first().expect("flagged");
    assert_eq!(f.cause.as_str(), "unfair_streams");
    assert_eq!(f.conn.map(|c| c.cookie), Some(2));
    assert_eq!(f.evidence["fell_behind_first"]["cookie"], 2);
    let eff = f.evidence["even_split_efficiency"].as_f64().unwrap();
    assert!((eff - 4.0 / 31.0).abs() < 0.02, "{eff}");
}

#[test]
fn each_stream_carries_its_retransmission_ratio() {
    let out = run_lossy(&[10_000_000, 10_000_000, 10_000_000, 1_000_000], &[0.002, 0.001, 0.003, 0.02], 10);
    let streams = out[0].evidence["streams"].as_array().unwrap();
    let slow = streams.iter().find(|s| s["cookie"] == 3).unwrap();
    assert!((slow["retrans_ratio"].as_f64().unwrap() - 0.02).abs() < 1e-9, "{slow}");
    assert!(out[0].evidence["remedy"].as_str().unwrap().contains("RTT/4 apart"));
}

#[test]
fn an_unfair_group_ends_when_its_streams_close() {
    let rates = [10_000_000u64, 10_000_000, 1_000_000, 10_000_000];
    let mut table = ConnTable::new(false);
    let mut d = FairnessDetector::new(FairnessConfig::default());
    let mut out = vec![];
    let mut t = 0;
    while t < 10_000_000_000 {
        t += 50_000_000;
        for (i, r) in rates.iter().enumerate() {
            let s = crate::detect::tests_support::sample(2_000_000 + r * t / 1_000_000_000);
            let ev = Event { ts_ns: t, conn: conn(i as u64), body: Body::Sample(s) };
            table.apply(&ev);
            d.observe(&ev, &table);
        }
        d.tick(t, &table, &Episodes::default(), &mut out);
    }
    assert_eq!(out.len(), 1, "{out:?}");
    for i in 0..rates.len() {
        let ev = Event { ts_ns: t + 1, conn: conn(i as u64), body: Body::Close(Default::default()) };
        table.apply(&ev);
        d.observe(&ev, &table);
    }
    d.tick(t + 1_000_000_000, &table, &Episodes::default(), &mut out);
    let end = out.last().expect("an end report");
    assert!(!end.ongoing && end.group == out[0].group && end.start_ns == out[0].start_ns, "{end:?}");
    assert_eq!(end.conn.map(|c| c.cookie), Some(2));
    assert!(end.duration_s.is_some_and(|d| d > 5.0), "{end:?}");
    // It still names every stream with its share (a dump draws the group from them).
    assert_eq!(end.evidence["ended"], "streams_closed");
    let streams = end.evidence["streams"].as_array().expect("streams in the end report");
    assert_eq!(streams.len(), 4, "{end:?}");
    assert!(streams.iter().any(|s| s["cookie"] == 2 && s["share"].as_f64().unwrap() < 0.05));
    // Nothing is kept for it, and nothing more is reported.
    assert!(d.groups.is_empty());
    d.tick(t + 2_000_000_000, &table, &Episodes::default(), &mut out);
    assert_eq!(out.len(), 2);
}

#[test]
fn equal_streams_are_not_flagged() {
    assert!(run(&[10_000_000; 4], 10).is_empty());
}

#[test]
fn rules_choose_the_group_key() {
    let mut cfg = FairnessConfig::default();
    cfg.rules.push(GroupRule {
        remote_cidr: Some("10.0.0.0/24".into()),
        remote_ports: Some((5200, 5210)),
        comm: None,
        key: vec![GroupField::RemoteIp],
    });
    let mut t = ConnTable::new(false);
    t.apply(&Event { ts_ns: 1, conn: conn(1), body: Body::Process(Process { pid: 7, ..Default::default() }) });
    t.apply(&Event { ts_ns: 2, conn: conn(1), body: Body::Snapshot(Default::default()) });
    let e = t.get(1).unwrap();
    assert_eq!(group_key(&cfg, e), "remote=10.0.0.2");
    assert_eq!(group_key(&FairnessConfig::default(), e), "pid=7,remote=10.0.0.2");
}

#[test]
fn remote_cidr_matches_by_prefix_mapped_v4_included_and_bad_ones_are_refused() {
    let n = |s: &str| parse_cidr(s).unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(in_cidr(ip("10.20.7.1"), n("10.20.0.0/16")));
    assert!(!in_cidr(ip("10.21.0.1"), n("10.20.0.0/16")));
    assert!(in_cidr(ip("10.20.7.1"), n("10.20.9.9/16")), "host bits in the rule are ignored");
    assert!(in_cidr(ip("::ffff:10.20.7.1"), n("10.20.0.0/16")), "IPv4 through an IPv6 socket");
    assert!(in_cidr(ip("1.2.3.4"), n("0.0.0.0/0")));
    assert!(in_cidr(ip("fd00:72:1::2"), n("fd00:72::/32")) && !in_cidr(ip("fd00:73::1"), n("fd00:72::/32")));
    assert!(!in_cidr(ip("10.20.7.1"), n("::/0")), "families do not mix");
    for bad in ["10.0.0.0/33", "10.0.0.0", "x/8", "fd00::/129", ""] {
        assert!(parse_cidr(bad).is_none(), "{bad}");
    }
}

/// Entries into Recovery at (stream, ms) on a 100 ms path, `queueing` ms over it, as `extra`
/// events of the 50 ms steps of `run_with`.
fn recoveries(entries: Vec<(u64, u64, u32)>) -> impl Fn(u64, u64) -> Vec<Event> {
    move |from, to| {
        let ms = 1_000_000;
        entries
            .iter()
            .filter(|e| (from..to).contains(&(e.1 * ms)))
            .map(|&(c, t, q)| {
                let x = crate::model::CaState {
                    old: 0,
                    new: 3,
                    packets_out: 300,
                    rack_rtt_us: 100_000 + q * 1000,
                    min_rtt_us: 100_000,
                    ..Default::default()
                };
                Event { ts_ns: t * ms, conn: conn(c), body: Body::CaState(x) }
            })
            .collect()
    }
}

#[test]
fn a_slow_stream_that_loses_alone_at_a_flat_rtt_is_named_a_lossy_member() {
    // Stream 3 enters Recovery every ~0.7 s at the path's RTT; the others every 3 s together.
    let mut e: Vec<(u64, u64, u32)> = (0..14).map(|k| (3, 300 + 700 * k, 1)).collect();
    e.extend((0..3).flat_map(|c| [(c, 1_000 + 5 * c, 25), (c, 4_000 + 5 * c, 25), (c, 7_000 + 5 * c, 25)]));
    let rates = [10_000_000, 10_000_000, 10_000_000, 1_000_000];
    let (out, _) = run_with(&rates, &[0.0; 4], 10, &recoveries(e));
    let f = out.first().expect("an unfair group");
    assert_eq!(f.mechanism, Some(Mechanism::LossyMember), "{}", f.evidence);
    let remedy = f.evidence["remedy"].as_str().unwrap();
    assert!(remedy.contains("source port") && !remedy.contains("RTT/4 apart"), "{remedy}");
}

#[test]
fn streams_that_lose_together_after_the_rtt_grew_keep_the_shared_queue_remedy() {
    let e: Vec<(u64, u64, u32)> = (0..9).flat_map(|k| (0..4).map(move |c| (c, 300 + 1_000 * k + 5 * c, 25))).collect();
    let rates = [10_000_000, 10_000_000, 10_000_000, 1_000_000];
    let (out, _) = run_with(&rates, &[0.0; 4], 10, &recoveries(e));
    let f = out.first().expect("an unfair group");
    assert_eq!(f.mechanism, Some(Mechanism::QueueOverflow), "{}", f.evidence);
    assert!(f.evidence["remedy"].as_str().unwrap().contains("RTT/4 apart"), "{}", f.evidence);
    // Without loss episodes nothing is named, and the remedy says both.
    let out = run(&rates, 10);
    assert_eq!(out[0].mechanism, None);
}
