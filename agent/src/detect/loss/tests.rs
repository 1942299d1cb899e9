//! What loss episodes say in findings: the limit of one connection and the mechanism of a group.
use super::*;
use crate::detect::episodes::verdict;
use crate::model::{Body, CaState, ConnId, Event, Snap, Tuple};

fn v(mechanism: Mechanism, queueing_ms: f64, base_ms: f64) -> Verdict {
    Verdict {
        mechanism,
        episodes: 6,
        since_ns: 0,
        queueing_us: (queueing_ms * 1e3) as u32,
        base_us: (base_ms * 1e3) as u32,
        rate_bps: 12.5e6,
        flight_bytes: 65_000,
        flight_cv: 0.05,
    }
}

#[test]
fn a_policer_is_named_with_its_bucket_and_pacing_advice() {
    let (m, e) = limit(&v(Mechanism::Policer, 1.1, 39.0), 0.0).expect("a limit");
    assert_eq!(m, Mechanism::Policer);
    assert_eq!(e["bucket_at_most_bytes"], 65_000);
    assert_eq!(e["rate_bps"], 100e6);
    let a = e["advice"].as_str().unwrap();
    assert!(a.contains("fq maxrate") && a.contains("SO_MAX_PACING_RATE") && a.contains("BBR"), "{a}");
}

#[test]
fn a_queue_is_reported_only_when_too_short_or_too_long_for_its_path() {
    // 4 ms over 40 ms: a 50 kB queue at 12.5 MB/s, a tenth of the BDP.
    let (m, e) = limit(&v(Mechanism::QueueOverflow, 4.0, 40.0), 0.0).expect("a short queue");
    assert_eq!(m, Mechanism::QueueOverflow);
    assert_eq!(e["queue_bytes"], 50_000);
    assert!(e["advice"].as_str().unwrap().contains("one BDP (500000 bytes)"), "{e}");
    // The queue drains at the bottleneck's rate, not at the slower rate before the loss.
    let (_, e) = limit(&v(Mechanism::QueueOverflow, 4.0, 40.0), 25e6).expect("a short queue");
    assert_eq!(e["queue_bytes"], 100_000);
    // 160 ms over 40 ms: bufferbloat, an AQM.
    let (_, e) = limit(&v(Mechanism::QueueOverflow, 160.0, 40.0), 0.0).expect("a long queue");
    assert!(e["advice"].as_str().unwrap().contains("fq_codel"), "{e}");
    // One BDP: a healthy bottleneck doing its job.
    assert_eq!(limit(&v(Mechanism::QueueOverflow, 40.0, 40.0), 0.0), None);
    // Half a BDP, measured a little under it (lab `tail-loss-rto`: 500 kB at 200 Mbit/s over 40 ms,
    // losses 19.4 ms over the RTT): no advice to grow a queue that is as the rule of thumb allows.
    assert_eq!(limit(&v(Mechanism::QueueOverflow, 19.4, 40.0), 0.0), None);
    assert_eq!(limit(&v(Mechanism::LossyMember, 0.0, 40.0), 0.0), None);
}

fn id(cookie: u64) -> ConnId {
    ConnId {
        cookie,
        netns: 1,
        tuple: Tuple { local: "10.0.0.1:1".parse().unwrap(), remote: "10.0.0.2:2".parse().unwrap() },
    }
}

/// Streams' entries into Recovery at (stream, time s, queueing ms) on a 100 ms path; every
/// stream sends until 14 s.
fn episodes(entries: &[(u64, f64, f64)]) -> Episodes {
    let mut d = losses_only(entries);
    for c in 0..4 {
        let s = crate::detect::tests_support::sample(0);
        d.observe(&Event { ts_ns: 14_000_000_000, conn: id(c), body: Body::Sample(s) });
    }
    d
}

/// As `episodes`, without the samples: no stream is seen sending.
fn losses_only(entries: &[(u64, f64, f64)]) -> Episodes {
    let mut d = Episodes::default();
    for c in 0..4 {
        d.observe(&Event {
            ts_ns: 1,
            conn: id(c),
            body: Body::Snapshot(Snap { mss: 1448, min_rtt_us: 100_000, ..Default::default() }),
        });
        // The first loss ends slow start, all together.
        let x = CaState {
            old: 0,
            new: 3,
            packets_out: 800,
            rack_rtt_us: 125_000,
            min_rtt_us: 100_000,
            ..Default::default()
        };
        d.observe(&Event { ts_ns: 500_000_000, conn: id(c), body: Body::CaState(x) });
    }
    for &(c, t, q) in entries {
        // Random losses strike at any flight.
        let packets_out = 30 + ((t * 1e3) as u32).wrapping_mul(7919) % 300;
        let x = CaState {
            old: 0,
            new: 3,
            packets_out,
            rack_rtt_us: 100_000 + (q * 1e3) as u32,
            min_rtt_us: 100_000,
            ..Default::default()
        };
        d.observe(&Event { ts_ns: (t * 1e9) as u64, conn: id(c), body: Body::CaState(x) });
    }
    d
}

#[test]
fn a_stream_that_loses_alone_at_a_flat_rtt_is_a_lossy_member() {
    // Stream 3 enters Recovery every ~0.7 s at the path's RTT; the others every ~4 s, after the
    // RTT grew, never within half an RTT of it.
    let mut e: Vec<(u64, f64, f64)> =
        (0..10).map(|k| (3, 1.0 + 0.7 * f64::from(k) + 0.01 * f64::from(k % 3), 0.8)).collect();
    e.extend([(0, 2.35, 24.0), (1, 2.37, 23.0), (2, 2.36, 25.0), (0, 6.25, 24.0), (1, 6.27, 24.0)]);
    let (m, ev) = group(&episodes(&e), 3, &[0, 1, 2]).expect("a mechanism");
    assert_eq!(m, Mechanism::LossyMember, "{ev}");
    assert_eq!(ev["loss_episodes"], 10);
    // Too few of its own: nothing.
    assert_eq!(group(&episodes(&e[..3]), 3, &[0, 1, 2]), None);
}

#[test]
fn streams_that_lose_together_after_the_rtt_grew_share_a_queue() {
    // Every 2 s all four streams enter Recovery within 20 ms, 25 ms over the path's RTT.
    let e: Vec<(u64, f64, f64)> =
        (0..6).flat_map(|k| (0..4).map(move |c| (c, 2.0 + 2.0 * f64::from(k) + 0.005 * c as f64, 25.0))).collect();
    let (m, ev) = group(&episodes(&e), 3, &[0, 1, 2]).expect("a mechanism");
    assert_eq!(m, Mechanism::QueueOverflow, "{ev}");
    assert_eq!(ev["queueing_at_loss_ms"], 25.0);
    // The same losses at a flat RTT name nothing: together, yet no queue filled.
    let flat: Vec<(u64, f64, f64)> = e.iter().map(|&(c, t, _)| (c, t, 0.5)).collect();
    assert_eq!(group(&episodes(&flat), 3, &[0, 1, 2]), None);
}

#[test]
fn a_stream_alone_but_behind_a_queue_is_no_lossy_member() {
    let e: Vec<(u64, f64, f64)> = (0..8).map(|k| (3, 1.0 + 0.7 * f64::from(k), 30.0)).collect();
    assert_eq!(group(&episodes(&e), 3, &[0, 1, 2]), None);
    let _ = verdict(&[]);
}

#[test]
fn a_lossy_member_keeps_its_name_when_a_few_of_its_losses_fall_with_the_queues() {
    // lab `parallel-4-lossy`: the lossy stream's own losses at the path's RTT, and three that fell
    // with the others' when the shared queue overflowed (25 ms over the RTT).
    let own: [(f64, f64); 9] = [
        (0.78, 4.5),
        (1.33, 3.3),
        (1.44, 0.7),
        (2.17, 0.5),
        (2.58, 0.3),
        (3.85, 0.9),
        (4.37, 0.4),
        (6.04, 0.3),
        (8.15, 0.6),
    ];
    let mut e: Vec<(u64, f64, f64)> = own.iter().map(|&(t, q)| (3, t, q)).collect();
    for (t, q) in [(1.75, 13.5), (10.84, 19.5), (13.01, 25.0)] {
        e.push((3, t, q));
        e.extend((0..3).map(|c| (c, t - 0.03, 25.0)));
    }
    e.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (m, ev) = group(&episodes(&e), 3, &[0, 1, 2]).expect("a mechanism");
    assert_eq!(m, Mechanism::LossyMember, "{ev}");
}

#[test]
fn a_connection_that_loses_alone_at_a_flat_rtt_is_named_a_lossy_member() {
    // lab `parallel-4-lossy`'s lossy stream, seen alone (four processes: no group): its losses at
    // the path's RTT at shrinking flights, two of them with the other connections' queue drops.
    let mut e: Vec<(u64, f64, f64)> =
        [0.78, 1.33, 1.44, 2.17, 2.58, 3.85, 4.37, 6.04, 8.15].iter().map(|&t| (3, t, 0.5)).collect();
    e.extend([(3, 10.84, 19.5), (0, 10.81, 25.0), (3, 13.01, 25.0), (1, 12.98, 25.0)]);
    e.sort_by(|a, b| a.1.total_cmp(&b.1));
    let d = episodes(&e);
    let (m, ev) = connection(&d, 3, 0.0).expect("a mechanism");
    assert_eq!(m, Mechanism::LossyMember, "{ev}");
    assert_eq!((ev["alone"].clone(), ev["loss_episodes"].clone()), (9.into(), 11.into()));
    assert!(ev["advice"].as_str().unwrap().contains("source port"), "{ev}");
    // Its losses with the others' (a shared queue) are no path member's.
    let with: Vec<(u64, f64, f64)> = e.iter().flat_map(|&(c, t, q)| [(c, t, q), (0, t + 0.01, 25.0)]).collect();
    assert_eq!(connection(&episodes(&with), 3, 0.0), None);
    // Alone on its path (no other connection to its host sending): nothing to tell it from, a
    // shallow queue's losses look the same.
    let mine: Vec<(u64, f64, f64)> = e.iter().copied().filter(|x| x.0 == 3).collect();
    assert_eq!(connection(&losses_only(&mine), 3, 0.0), None);
}
