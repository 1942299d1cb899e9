//! The loss-episode rules on episodes as the lab's recordings showed them (per-packet RTT at the
//! loss over the windowed minimum; flights in bytes).
use super::*;
use crate::model::{CaState, ConnId, Sample, Snap, Tuple};

fn ep(at_s: f64, base_ms: f64, queueing_ms: f64, flight: u64) -> Episode {
    Episode {
        at_ns: (at_s * 1e9) as u64,
        rtt_us: ((base_ms + queueing_ms) * 1e3) as u32,
        base_us: (base_ms * 1e3) as u32,
        flight_bytes: flight,
        rate_bps: 2.5e6,
        first: false,
        steady_sender: false,
        holes: 0,
    }
}

fn judge(eps: &[Episode]) -> Option<Mechanism> {
    verdict(&eps.iter().collect::<Vec<_>>()).map(|v| v.mechanism)
}

/// Queueing delays (ms) at a path RTT, with flights (segments of 1448 bytes) in turn.
fn series(base_ms: f64, q: &[f64], flights: &[u64]) -> Vec<Episode> {
    q.iter().zip(flights.iter().cycle()).enumerate().map(|(i, (q, f))| ep(i as f64, base_ms, *q, f * 1448)).collect()
}

#[test]
fn losses_at_the_paths_rtt_with_a_steady_flight_are_a_policer() {
    // bbr through a 100 Mbit/s policer with a 64 kB bucket at 40 ms: 0.5-1 ms over the minimum.
    let e = series(39.0, &[0.9, 0.9, 1.0, 0.9, 0.8, 1.0, 0.9, 0.9], &[300, 320, 290, 310]);
    assert_eq!(judge(&e), Some(Mechanism::Policer));
    // Three are not enough to tell a policer from chance.
    assert_eq!(judge(&e[..3]), None);
}

#[test]
fn flat_losses_at_a_steady_flight_that_each_repair_one_hole_are_random_loss_not_a_policer() {
    // lab `lost-retransmit` (cubic, 0.2 % random loss, 10 ms): the window's equilibrium keeps the
    // flight at each loss steady (about 47 kB), at the path's RTT, and was named a policer; each
    // episode repaired one hole (its resend lost again is the same hole), a policer's a run of them.
    let mut e = series(9.8, &[0.1, 0.2, 0.1, 0.3, 0.1, 0.2, 0.1, 0.2], &[33, 31, 34, 32]);
    e.iter_mut().for_each(|x| x.holes = 1);
    assert_eq!(judge(&e), None);
    e.iter_mut().for_each(|x| x.holes = 6);
    assert_eq!(judge(&e), Some(Mechanism::Policer));
}

#[test]
fn losses_at_the_paths_rtt_at_any_flight_are_no_policer() {
    // cubic under 0.3 % random loss at 100 ms: flat, but the flight at each loss anywhere.
    let e = series(99.8, &[0.0, 0.1, 0.1, 0.9, 1.0, 1.1, 0.9, 1.0], &[480, 120, 300, 60, 210, 90]);
    assert_eq!(judge(&e), None);
}

#[test]
fn losses_after_the_rtt_grew_are_a_full_queue_and_one_grown_by_half_the_rtt_suffices() {
    // bbr into a 50 kB queue at 100 Mbit/s, 40 ms: 4-10 ms of queueing before each loss.
    let shallow = series(39.0, &[3.4, 4.0, 4.2, 8.2, 4.5, 10.2], &[300, 250, 410]);
    let v = verdict(&shallow.iter().collect::<Vec<_>>()).expect("a verdict");
    assert_eq!(v.mechanism, Mechanism::QueueOverflow);
    assert!(v.queue_bdp() < 0.3, "{v:?}");
    // cubic into a 2 MB queue: the RTT grew from 40 to 200 ms, one loss in 5 s.
    let deep = series(40.0, &[160.0], &[1700]);
    let v = verdict(&deep.iter().collect::<Vec<_>>()).expect("a verdict");
    assert_eq!(v.mechanism, Mechanism::QueueOverflow);
    assert_eq!(v.queue_bytes(), 400_000, "160 ms at 2.5 MB/s");
    // One loss 5 ms over a 40 ms path is not enough.
    assert_eq!(judge(&series(40.0, &[5.0], &[300])), None);
}

#[test]
fn a_mix_of_flat_and_queued_losses_names_nothing() {
    // A standing queue at some losses, none at others (random loss on a path with a queue).
    let e = series(59.0, &[51.9, 60.8, 5.7, 0.9, 0.9, 0.9, 0.9, 0.9], &[900, 400, 120, 80]);
    assert_eq!(judge(&e), None);
}

#[test]
fn the_first_loss_ends_slow_start_and_its_flight_is_not_weighed() {
    let mut e = series(39.0, &[0.9; 6], &[300]);
    e[0].first = true;
    e[0].flight_bytes = 2_000 * 1448;
    assert_eq!(judge(&e), Some(Mechanism::Policer));
}

fn id() -> ConnId {
    ConnId {
        cookie: 5,
        netns: 1,
        tuple: Tuple { local: "10.0.0.1:1".parse().unwrap(), remote: "10.0.0.2:2".parse().unwrap() },
    }
}

#[test]
fn episodes_begin_at_entries_into_recovery_with_rack_rtt_and_the_rate_before() {
    let mut d = Episodes::default();
    let ev = |t: u64, body| Event { ts_ns: t, conn: id(), body };
    d.observe(&ev(1, Body::Snapshot(Snap { mss: 1448, min_rtt_us: 39_000, srtt_us: 40_000, ..Default::default() })));
    let s = Sample { rate_delivered: 100, rate_interval_us: 10_000, ..crate::detect::tests_support::sample(0) };
    d.observe(&ev(500_000_000, Body::Sample(s)));
    let entry = |t, old, new| {
        ev(
            t,
            Body::CaState(CaState {
                old,
                new,
                packets_out: 100,
                rack_rtt_us: 43_000,
                srtt_us: 41_000,
                min_rtt_us: 39_000,
                ..Default::default()
            }),
        )
    };
    assert!(d.observe(&entry(1_000_000_000, 0, 3)));
    assert!(!d.observe(&entry(1_100_000_000, 3, 0)), "leaving Recovery begins nothing");
    assert!(!d.observe(&entry(1_200_000_000, 0, 4)), "a timeout is no episode of this kind");
    assert!(d.observe(&entry(2_000_000_000, 1, 3)), "from Disorder");
    let eps: Vec<&Episode> = d.of(5).collect();
    assert_eq!(eps.len(), 2);
    assert_eq!((eps[0].rtt_us, eps[0].base_us, eps[0].flight_bytes), (43_000, 39_000, 144_800));
    assert!(eps[0].first && !eps[1].first);
    assert!((eps[0].rate_bps - 14_480_000.0).abs() < 1.0, "{}", eps[0].rate_bps);
    assert_eq!(eps[1].rate_bps, 0.0, "no sample in the second before it");
    // Bounded: the last KEPT only; a close forgets the connection.
    for k in 0..30 {
        d.observe(&entry(3_000_000_000 + k, 0, 3));
    }
    assert_eq!(d.of(5).count(), KEPT);
    d.observe(&ev(4_000_000_000, Body::Close(Snap::default())));
    assert_eq!(d.len(), 0);
}

#[test]
fn the_recoveries_right_after_slow_start_do_not_hide_a_policer() {
    // cubic through a 100 Mbit/s policer with a 64 kB bucket at 40 ms (lab `policer`): two
    // recoveries with larger flights as slow start's overshoot drains, then ~45 segments each time.
    let e =
        series(39.0, &[0.0, 1.1, 1.1, 1.1, 1.2, 1.1, 1.2, 1.1, 1.2, 1.1], &[90, 58, 45, 48, 44, 45, 45, 49, 45, 46]);
    let v = verdict(&e.iter().collect::<Vec<_>>()).expect("a verdict");
    assert_eq!(v.mechanism, Mechanism::Policer, "{v:?}");
    assert!(v.flight_cv < 0.1, "{v:?}");
}

#[test]
fn flat_losses_at_a_steady_flight_but_at_random_times_are_no_policer() {
    // bbr under random loss keeps its flight whatever it loses: only the gaps tell it from a
    // policer (exponential, not the steady pace of a window growing back into the bucket).
    let mut e = series(39.0, &[0.9; 9], &[300, 305, 298, 302]);
    for (x, t) in e.iter_mut().zip([0.0, 0.3, 2.9, 3.1, 3.2, 6.8, 7.0, 9.9, 10.1]) {
        x.at_ns = (t * 1e9) as u64;
    }
    assert_eq!(judge(&e), Some(Mechanism::Policer), "a loss-based sender's steady flight suffices");
    for x in e.iter_mut() {
        x.steady_sender = true;
    }
    assert_eq!(judge(&e), None);
}

#[test]
fn an_episode_is_alone_when_no_other_connection_lost_within_half_an_rtt() {
    let mut d = Episodes::default();
    let at = |c: u64, t_ms: u64| {
        let x =
            CaState { old: 0, new: 3, packets_out: 10, rack_rtt_us: 40_000, min_rtt_us: 40_000, ..Default::default() };
        Event { ts_ns: t_ms * 1_000_000, conn: ConnId { cookie: c, ..id() }, body: Body::CaState(x) }
    };
    for (c, t) in [(1, 100), (1, 1_000), (2, 1_015), (1, 2_000), (2, 2_030), (1, 3_000)] {
        d.observe(&at(c, t));
    }
    let (judged, alone) = d.alone(1);
    // The first (slow start's) is not judged; at 2000 the other lost 30 ms later: more than 20 ms.
    assert_eq!(judged.len(), 3);
    assert_eq!(alone.iter().map(|e| e.at_ns / 1_000_000).collect::<Vec<_>>(), vec![2_000, 3_000]);
}
