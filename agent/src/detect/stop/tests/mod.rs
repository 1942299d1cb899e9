//! The stop detector's tests.
use super::tests_support;
use super::*;
use crate::detect::owner::StopOwner;
use crate::model::record::{Rto, CA_RECOVERY};
use crate::model::{Body, ConnId, Event, Finding, Tuple};

const MS: u64 = 1_000_000;

fn id() -> ConnId {
    ConnId {
        cookie: 1,
        netns: 1,
        tuple: Tuple { local: "10.0.0.1:4000".parse().unwrap(), remote: "10.0.0.2:5201".parse().unwrap() },
    }
}

fn sample(acked: u64, cwnd: u32, ca: u8, wnd: u32) -> Body {
    let mut s = tests_support::sample(acked);
    s.cwnd = cwnd;
    s.ca_state = ca;
    s.snd_wnd = wnd;
    Body::Sample(s)
}

fn ev(ts: u64, body: Body) -> Event {
    Event { ts_ns: ts, conn: id(), body }
}

/// 25 MB/s for `ms` from `t0`: a sample every 50 ms; returns (end time, bytes acked).
fn healthy(d: &mut StopDetector, out: &mut Vec<Finding>, t0: u64, acked0: u64, ms: u64) -> (u64, u64) {
    let mut acked = acked0;
    let mut t = t0;
    while t < t0 + ms * MS {
        t += 50 * MS;
        acked += 1_250_000;
        d.observe(&ev(t, sample(acked, 80, 0, 1 << 20)), out);
        d.tick(t, out);
    }
    (t, acked)
}

/// Nothing arrives after `t`; timeouts back off 220, 440, 880 ms with 50 segments in flight.
/// Returns the time of the last one.
fn three_timeouts(d: &mut StopDetector, out: &mut Vec<Finding>, t: u64) -> u64 {
    let mut at = t;
    for (i, wait) in [220u64, 440, 880].iter().enumerate() {
        run_ticks(d, out, at, at + wait * MS);
        at += wait * MS;
        let rto = Rto {
            retransmits: i as u32,
            rto_us: (*wait * 1000) as u32,
            backoff: i as u32,
            cwnd: 1,
            packets_out: 50,
            ..Default::default()
        };
        d.observe(&ev(at, Body::Rto(rto)), out);
    }
    at
}

fn run_ticks(d: &mut StopDetector, out: &mut Vec<Finding>, from: u64, to: u64) {
    let mut t = from;
    while t < to {
        t += 50 * MS;
        d.tick(t, out);
    }
}

#[test]
fn a_clean_transfer_raises_nothing() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    healthy(&mut d, &mut out, 0, 0, 5000);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn silence_with_repeated_timeouts_is_a_path_silent_stop_found_while_it_lasts() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 2000);
    let at = three_timeouts(&mut d, &mut out, t);
    let first = out.first().expect("found while in progress").clone();
    assert!(first.ongoing);
    assert_eq!(first.start_ns, t);
    // 2 RTT + 200 ms = 240 ms at 20 ms RTT.
    assert!(first.ts_ns - t <= 240 * MS, "found {} ms after the start", (first.ts_ns - t) / MS);
    // Delivery resumes.
    run_ticks(&mut d, &mut out, at, at + 100 * MS);
    let resume = at + 150 * MS;
    d.observe(&ev(resume, sample(acked + 2_000_000, 2, 4, 1 << 20)), &mut out);
    d.observe(&ev(resume + 150 * MS, sample(acked + 6_000_000, 20, 0, 1 << 20)), &mut out);
    let last = out.last().unwrap();
    assert!(!last.ongoing);
    assert_eq!(last.cause.as_str(), "path_silent");
    let dur = last.duration_s.unwrap();
    let truth = (resume - t) as f64 / 1e9;
    assert!((dur - truth).abs() < 0.06, "{dur} vs {truth}");
}

#[test]
fn one_timeout_that_ends_the_stop_is_an_rto_stop() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    run_ticks(&mut d, &mut out, t, t + 300 * MS);
    d.observe(
        &ev(
            t + 300 * MS,
            Body::Rto(Rto {
                retransmits: 0,
                rto_us: 220_000,
                backoff: 0,
                cwnd: 1,
                packets_out: 50,
                ..Default::default()
            }),
        ),
        &mut out,
    );
    d.observe(&ev(t + 350 * MS, sample(acked + 3_000_000, 2, 4, 1 << 20)), &mut out);
    d.observe(&ev(t + 500 * MS, sample(acked + 7_000_000, 20, 0, 1 << 20)), &mut out);
    let last = out.last().expect("a stop");
    assert_eq!(last.cause.as_str(), "rto");
    assert!(!last.ongoing);
}

#[test]
fn cwnd_one_in_recovery_delivering_a_segment_per_rtt_is_cwnd_collapse() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    for _ in 0..40 {
        t += 20 * MS;
        acked += 1448;
        d.observe(&ev(t, sample(acked, 1, CA_RECOVERY, 1 << 20)), &mut out);
        d.tick(t, &mut out);
    }
    d.observe(&ev(t + 50 * MS, sample(acked + 5_000_000, 40, 0, 1 << 20)), &mut out);
    d.observe(&ev(t + 200 * MS, sample(acked + 9_000_000, 40, 0, 1 << 20)), &mut out);
    let last = out.last().expect("a stop");
    assert_eq!(last.cause.as_str(), "cwnd_collapse");
    assert!(out.iter().any(|f| f.ongoing), "reported while in progress");
}

#[test]
fn a_stop_that_ends_for_a_moment_and_goes_on_is_one_stop() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    run_ticks(&mut d, &mut out, t, t + 400 * MS);
    let first = out.first().expect("a stop").start_ns;
    // Delivery for just over the resume window ends it; then nothing again.
    let (t2, acked2) = healthy(&mut d, &mut out, t + 400 * MS, acked, 150);
    assert!(out.iter().any(|f| !f.ongoing), "the stop ended for a moment: {out:?}");
    run_ticks(&mut d, &mut out, t2, t2 + 600 * MS);
    healthy(&mut d, &mut out, t2 + 600 * MS, acked2, 300);
    assert!(out.iter().all(|f| f.start_ns == first), "{:?}", out.iter().map(|f| f.start_ns).collect::<Vec<_>>());
    let last = out.last().unwrap();
    assert!(!last.ongoing && last.duration_s.unwrap() > 0.9, "{last:?}");
}

#[test]
fn a_receivers_stall_right_after_a_network_stop_is_a_stop_of_its_own() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    run_ticks(&mut d, &mut out, t, t + 400 * MS);
    let network = out.first().expect("a stop").start_ns;
    // Delivery for just over the resume window ends it; then the receiver's window closes.
    let (t2, acked2) = healthy(&mut d, &mut out, t + 400 * MS, acked, 150);
    d.observe(&ev(t2 + 10 * MS, drained(acked2, 4 << 20, 0)), &mut out);
    run_ticks(&mut d, &mut out, t2 + 10 * MS, t2 + 1000 * MS);
    let (net, rcv): (Vec<_>, Vec<_>) = out.iter().partition(|f| f.start_ns == network);
    assert!(net.iter().all(|f| f.owner == Some(StopOwner::Network)), "{net:?}");
    assert!(net.last().is_some_and(|f| !f.ongoing), "{net:?}");
    assert!(!rcv.is_empty() && rcv.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{rcv:?}");
}

#[test]
fn a_network_stop_ends_when_everything_sent_is_delivered_though_the_window_then_closes() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    let at = three_timeouts(&mut d, &mut out, t);
    assert!(out.first().is_some_and(|f| f.owner == Some(StopOwner::Network)), "{out:?}");
    // Delivery resumes for 50 ms (under the window that confirms it), then the last ACK
    // acknowledges everything sent and closes the window: the receiver stopped reading.
    let (t2, acked2) = healthy(&mut d, &mut out, at + 20 * MS, acked, 50);
    d.observe(&ev(t2 + 10 * MS, drained(acked2 + 1448, 4 << 20, 0)), &mut out);
    run_ticks(&mut d, &mut out, t2 + 10 * MS, t2 + 1500 * MS);
    let network = out[0].start_ns;
    let (net, rcv): (Vec<_>, Vec<_>) = out.iter().partition(|f| f.start_ns == network);
    assert!(net.iter().all(|f| f.owner == Some(StopOwner::Network)), "{net:?}");
    let end = net.last().expect("network");
    assert!(!end.ongoing && end.start_ns + (end.duration_s.unwrap() * 1e9) as u64 <= t2 + 10 * MS, "{end:?}");
    assert!(!rcv.is_empty() && rcv.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{rcv:?}");
}

#[test]
fn recovery_repairing_one_hole_per_rtt_with_cwnd_open_is_slow_recovery() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    // Without SACK each partial ACK repairs one hole: one retransmission and one segment per RTT.
    for i in 0..40 {
        t += 20 * MS;
        acked += 1448;
        let r = crate::model::Retrans {
            seq: i,
            end_seq: i + 1448,
            segs: 1,
            sacked: 0x84,
            ca_state: CA_RECOVERY,
            count: 1,
            since_prev_ns: 0,
            lost_retrans: false,
            failed: false,
            cwnd: 600,
            ssthresh: 600,
            packets_out: 1500,
            lost_out: 1,
            sacked_out: 0,
            retrans_out: 1,
            snd_una: 0,
        };
        d.observe(&ev(t, Body::Retrans(r)), &mut out);
        d.observe(&ev(t, sample(acked, 600, CA_RECOVERY, 1 << 20)), &mut out);
        d.tick(t, &mut out);
    }
    d.observe(&ev(t + 50 * MS, sample(acked + 5_000_000, 600, 0, 1 << 20)), &mut out);
    d.observe(&ev(t + 200 * MS, sample(acked + 9_000_000, 600, 0, 1 << 20)), &mut out);
    let last = out.last().expect("a stop");
    assert_eq!(last.cause.as_str(), "slow_recovery", "{}", last.evidence);
    let per_rtt = last.evidence["retransmissions_per_rtt"].as_f64().unwrap();
    assert!((0.7..=1.3).contains(&per_rtt), "{per_rtt} retransmissions per RTT");
}

#[test]
fn a_retransmission_lost_again_and_resent_late_is_named_with_its_delay() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    run_ticks(&mut d, &mut out, t, t + 400 * MS);
    let r = crate::model::Retrans {
        seq: 1,
        end_seq: 2,
        segs: 1,
        sacked: 0x94,
        ca_state: 3,
        count: 2,
        since_prev_ns: 380 * MS,
        lost_retrans: true,
        failed: false,
        cwnd: 1,
        ssthresh: 10,
        packets_out: 10,
        lost_out: 1,
        sacked_out: 5,
        retrans_out: 0,
        snd_una: 0,
    };
    d.observe(&ev(t + 400 * MS, Body::Retrans(r)), &mut out);
    d.observe(&ev(t + 450 * MS, sample(acked + 3_000_000, 10, 0, 1 << 20)), &mut out);
    d.observe(&ev(t + 600 * MS, sample(acked + 7_000_000, 10, 0, 1 << 20)), &mut out);
    let last = out.last().expect("a stop");
    assert_eq!(last.cause.as_str(), "lost_retransmit");
    assert_eq!(last.evidence["max_lost_retransmit_delay_s"], 0.38);
}

/// The state an ACK of everything sent leaves: nothing in flight, `unsent` bytes waiting,
/// the window it advertises.
fn drained(acked: u64, unsent: u32, wnd: u32) -> Body {
    let mut s = tests_support::sample(acked);
    s.drained = true;
    s.packets_out = 0;
    s.in_flight = 0;
    s.snd_una = 5000;
    s.snd_nxt = 5000;
    s.write_queue = unsent;
    s.snd_wnd = wnd;
    Body::Sample(s)
}

fn snapshot(acked: u64, packets_out: u32, unsent: u32, wnd: u32, last_ack_age_us: u32) -> Body {
    Body::Snapshot(crate::model::Snap {
        state: 1,
        srtt_us: 20_000,
        mss: 1448,
        packets_out,
        unsent,
        write_queue: unsent + packets_out * 1448,
        snd_una: 5000,
        snd_nxt: 5000 + packets_out * 1448,
        snd_wnd: wnd,
        bytes_acked: acked,
        last_ack_age_us,
        ..Default::default()
    })
}

#[test]
fn a_receiver_that_stops_reading_is_the_receivers_stop_from_the_first_report() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    // The last ACK acknowledges everything sent and closes the window; 4 MiB wait.
    d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 0)), &mut out);
    run_ticks(&mut d, &mut out, t + 10 * MS, t + 3000 * MS);
    assert!(!d.wants_snapshot(), "the drained ACK decides it: no snapshot needed");
    let first = out.first().expect("a stop");
    assert_eq!((first.owner, first.cause.as_str()), (Some(StopOwner::Receiver), "zero_window"));
    assert!(first.ongoing);
    assert_eq!(first.evidence["receiver_limited"], true);
    assert!(out.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{out:?}");
    // The receiver reads again: the window opens and delivery resumes.
    healthy(&mut d, &mut out, t + 3000 * MS, acked, 500);
    let last = out.last().unwrap();
    assert!(!last.ongoing);
    assert_eq!((last.owner, last.cause.as_str()), (Some(StopOwner::Receiver), "zero_window"));
}

#[test]
fn fast_retransmits_of_the_burst_that_refills_the_window_leave_the_stop_the_receivers() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 0)), &mut out);
    run_ticks(&mut d, &mut out, t + 10 * MS, t + 3000 * MS);
    assert!(out.first().is_some_and(|f| f.owner == Some(StopOwner::Receiver)), "{out:?}");
    // The window opens: a burst, three segments lost at the bottleneck and fast-retransmitted
    // in Recovery while delivery picks up slowly.
    let mut t = t + 3000 * MS;
    for i in 0..3u32 {
        t += 20 * MS;
        let r = crate::model::Retrans {
            seq: i,
            end_seq: i + 1448,
            segs: 1,
            sacked: 0x84,
            ca_state: CA_RECOVERY,
            count: 1,
            since_prev_ns: 0,
            lost_retrans: false,
            failed: false,
            cwnd: 300,
            ssthresh: 300,
            packets_out: 250,
            lost_out: 1,
            sacked_out: 10,
            retrans_out: 1,
            snd_una: 0,
        };
        d.observe(&ev(t, Body::Retrans(r)), &mut out);
        d.observe(&ev(t, sample(acked + u64::from(i) * 1448, 300, CA_RECOVERY, 10 << 20)), &mut out);
        d.tick(t, &mut out);
    }
    healthy(&mut d, &mut out, t, acked + 5000, 1000);
    let last = out.last().unwrap();
    assert!(!last.ongoing, "{out:?}");
    assert!(out.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{out:?}");
}

#[test]
fn a_receivers_stop_made_undetermined_by_a_stale_look_does_not_become_the_networks_without_a_timeout() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 0)), &mut out);
    run_ticks(&mut d, &mut out, t + 10 * MS, t + 2000 * MS);
    assert!(out.first().is_some_and(|f| f.owner == Some(StopOwner::Receiver)), "{out:?}");
    // A per-ACK sample of a selected connection (one ACK behind, not exact): window open,
    // nothing in flight, data waiting: the look cannot tell.
    let mut s = tests_support::sample(acked);
    (s.selected, s.packets_out, s.in_flight, s.snd_nxt, s.snd_una, s.write_queue) = (true, 0, 0, 5000, 5000, 4 << 20);
    d.observe(&ev(t + 2010 * MS, Body::Sample(s)), &mut out);
    run_ticks(&mut d, &mut out, t + 2010 * MS, t + 2100 * MS);
    assert!(out.iter().any(|f| f.owner == Some(StopOwner::Undetermined)), "{out:?}");
    // Then data in flight again, nothing delivered yet, no timeout: the stop winding down.
    d.observe(&ev(t + 2120 * MS, snapshot(acked, 200, 3 << 20, 8 << 20, 2_000_000)), &mut out);
    run_ticks(&mut d, &mut out, t + 2120 * MS, t + 2300 * MS);
    assert!(out.iter().all(|f| f.owner != Some(StopOwner::Network)), "{out:?}");
}

#[test]
fn a_receiver_reading_a_trickle_with_its_window_full_is_the_receivers_stop() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    // Every 100 ms an ACK for 2 KB opens the window by as much, which the sender fills at once.
    for _ in 0..20 {
        t += 100 * MS;
        acked += 2000;
        let mut s = tests_support::sample(acked);
        s.packets_out = 2;
        s.snd_una = 10_000;
        s.snd_nxt = 12_000;
        s.snd_wnd = 2000;
        d.observe(&ev(t, Body::Sample(s)), &mut out);
        d.tick(t, &mut out);
    }
    let first = out.first().expect("a stop: almost nothing delivered");
    assert_eq!((first.owner, first.cause.as_str()), (Some(StopOwner::Receiver), "zero_window"), "{out:?}");
    assert!(out.iter().all(|f| f.owner != Some(StopOwner::Network)), "{out:?}");
}

#[test]
fn a_stale_look_asks_for_a_snapshot_and_reports_nothing_network_before_it() {
    // The last report is a drained ACK with data waiting and the window open (the kernel
    // sends at once), so it cannot say whose the silence is.
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 1 << 20)), &mut out);
    let mut asked = None;
    let mut at = t + 10 * MS;
    while asked.is_none() && at < t + 1000 * MS {
        at += 20 * MS;
        d.tick(at, &mut out);
        if d.wants_snapshot() {
            asked = Some(at);
        }
    }
    let asked = asked.expect("a snapshot is asked for");
    // 3/4 of the 140 ms threshold (20 ms RTT): asked before the stop could be reported.
    assert!(asked - t <= 130 * MS, "asked {} ms after the last ACK", (asked - t) / MS);
    assert!(out.is_empty(), "nothing reported before the fresh look: {out:?}");
    // The snapshot: the window is closed, nothing in flight.
    d.observe(&ev(asked + 5 * MS, snapshot(acked, 0, 4 << 20, 0, 150_000)), &mut out);
    run_ticks(&mut d, &mut out, asked + 5 * MS, asked + 500 * MS);
    let first = out.first().expect("a stop once the snapshot decided");
    assert_eq!((first.owner, first.cause.as_str()), (Some(StopOwner::Receiver), "zero_window"));
    assert!(first.ts_ns - t <= 240 * MS, "reported {} ms after the start", (first.ts_ns - t) / MS);
}

#[test]
fn a_look_that_never_comes_is_reported_as_undetermined_not_as_the_network() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 1 << 20)), &mut out);
    run_ticks(&mut d, &mut out, t + 10 * MS, t + 2000 * MS);
    let first = out.first().expect("reported once the wait for a look ran out");
    assert_eq!((first.owner, first.cause.as_str()), (Some(StopOwner::Undetermined), "undetermined"));
    assert!(first.ts_ns - t <= (140 + 250 + 40) * MS);
    assert!(out.iter().all(|f| f.owner != Some(StopOwner::Network)), "{out:?}");
}

#[test]
fn an_outage_is_the_network_from_the_first_report_and_becomes_path_silent_with_its_timeouts() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 2000);
    let at = three_timeouts(&mut d, &mut out, t);
    run_ticks(&mut d, &mut out, at, at + 100 * MS);
    // Silence alone may be the fallback's lag (it reports an ACK when the next one arrives): a
    // fresh look was asked for; none came, and the stop was reported all the same.
    assert!(d.wants_snapshot(), "silence alone asks for a fresh look");
    let causes: Vec<_> = out.iter().map(|f| (f.owner, f.cause.as_str(), f.ongoing)).collect();
    let net = Some(StopOwner::Network);
    assert_eq!(causes.first(), Some(&(net, "no_ack", true)), "{causes:?}");
    assert!(causes.contains(&(net, "rto", true)), "{causes:?}");
    assert_eq!(causes.last(), Some(&(net, "path_silent", true)), "{causes:?}");
    assert!(out.iter().all(|f| f.start_ns == t));
    d.observe(&ev(at + 150 * MS, sample(acked + 2_000_000, 2, 4, 1 << 20)), &mut out);
    d.observe(&ev(at + 300 * MS, sample(acked + 6_000_000, 20, 0, 1 << 20)), &mut out);
    let last = out.last().unwrap();
    assert_eq!((last.owner, last.cause.as_str(), last.ongoing), (net, "path_silent", false));
}

#[test]
fn acks_seen_one_late_on_a_slow_ack_clock_are_no_stop_once_a_fresh_look_flushes_them() {
    // A receiver's ACKs come 52 ms apart; the fallback reports each one when the next arrives,
    // every other one only: the daemon's last delivery is 104-156 ms old at its ticks.
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    run_ticks(&mut d, &mut out, t, t + 150 * MS);
    assert!(d.wants_snapshot(), "silence past 3/4 of the threshold asks for a look");
    d.tick(t + 170 * MS, &mut out);
    assert!(out.is_empty(), "reported before the look it asked for: {out:?}");
    // The look: the pending ACK of t + 104 ms flushed, then the snapshot itself.
    // Two ACKs of 75 kB each (the first never reported on its own): 1.4 MB/s, a tenth of the rate.
    let mut s = tests_support::sample(acked + 150_000);
    s.snd_wnd = 1 << 20;
    d.observe(&ev(t + 104 * MS, Body::Sample(s)), &mut out);
    d.observe(&ev(t + 175 * MS, snapshot(acked + 150_000, 30, 100_000, 1 << 20, 71_000)), &mut out);
    // Delivery at t + 104 ms: the quiet starts there (the ACKs that follow would go on moving it).
    run_ticks(&mut d, &mut out, t + 175 * MS, t + 225 * MS);
    assert!(out.is_empty(), "{out:?}");

    // Real silence: the look shows nothing more delivered, and the stop is the network's.
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    run_ticks(&mut d, &mut out, t, t + 150 * MS);
    assert!(d.wants_snapshot());
    d.observe(&ev(t + 160 * MS, snapshot(acked, 30, 100_000, 1 << 20, 160_000)), &mut out);
    d.tick(t + 170 * MS, &mut out);
    let first = out.first().expect("reported at the first tick past the threshold after the look");
    assert_eq!((first.owner, first.cause.as_str()), (Some(StopOwner::Network), "no_ack"));
}

#[test]
fn a_network_stop_outlives_the_close_until_a_look_shows_delivery() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 2000);
    let at = three_timeouts(&mut d, &mut out, t);
    assert!(out.iter().any(|f| f.ongoing && f.owner == Some(StopOwner::Network)), "{out:?}");
    // The application closes (FIN_WAIT1) while 50 segments still wait for the path.
    let closed = at + 10 * MS;
    d.observe(&ev(closed, Body::State(crate::model::record::StateChange { old: 1, new: 4 })), &mut out);
    run_ticks(&mut d, &mut out, closed, closed + 1000 * MS);
    assert!(out.iter().all(|f| f.ongoing), "the close ended a stop whose data was still in flight: {out:?}");
    // A look a second later: nothing more delivered, still stopped.
    let age = |ts: u64| ((ts - t) / 1000) as u32;
    d.observe(&ev(closed + 1000 * MS, snapshot(acked, 50, 100_000, 1 << 20, age(closed + 1000 * MS))), &mut out);
    run_ticks(&mut d, &mut out, closed + 1000 * MS, closed + 2000 * MS);
    assert!(out.iter().all(|f| f.ongoing), "{out:?}");
    // Delivery resumed at `resumed`; the next look shows everything delivered by then.
    let resumed = closed + 1500 * MS;
    d.observe(&ev(closed + 2000 * MS, snapshot(acked + 3_000_000, 0, 0, 1 << 20, 500_000)), &mut out);
    let last = out.last().unwrap();
    assert!(!last.ongoing, "{out:?}");
    assert_eq!(last.owner, Some(StopOwner::Network));
    let end = last.start_ns + (last.duration_s.unwrap() * 1e9) as u64;
    assert!(end.abs_diff(resumed) < MS, "ended {} ms from the delivery", end.abs_diff(resumed) / MS);

    // Without data outstanding the close ends the stop at once, as before.
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    d.observe(&ev(t + 10 * MS, drained(acked, 300_000, 0)), &mut out);
    run_ticks(&mut d, &mut out, t + 10 * MS, t + 1000 * MS);
    assert!(out.iter().any(|f| f.ongoing && f.owner == Some(StopOwner::Receiver)), "{out:?}");
    d.observe(&ev(t + 1010 * MS, Body::State(crate::model::record::StateChange { old: 1, new: 4 })), &mut out);
    assert!(!out.last().unwrap().ongoing, "a receiver's stop ends at the close: {out:?}");
}

#[test]
fn the_end_of_a_transfer_and_an_application_pause_are_no_stop() {
    // The last ACK acknowledges everything and nothing waits: the application is done.
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    d.observe(&ev(t + 10 * MS, drained(acked, 0, 1 << 20)), &mut out);
    run_ticks(&mut d, &mut out, t + 10 * MS, t + 5000 * MS);
    assert!(out.is_empty(), "an app-limited sender is not stopped: {out:?}");
    assert!(!d.wants_snapshot());
    // The application writes again and the transfer goes on: still nothing.
    healthy(&mut d, &mut out, t + 5000 * MS, acked, 1000);
    assert!(out.is_empty(), "{out:?}");

    // A periodic sample showed data in flight; the ACKs after it that emptied the pipe were
    // not reported (a stale look): the snapshot shows the sender had nothing left to send.
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    let mut stale = tests_support::sample(acked);
    stale.selected = true;
    d.observe(&ev(t + 10 * MS, Body::Sample(stale)), &mut out);
    run_ticks(&mut d, &mut out, t + 10 * MS, t + 120 * MS);
    assert!(d.wants_snapshot());
    d.observe(&ev(t + 125 * MS, snapshot(acked + 100_000, 0, 0, 1 << 20, 100_000)), &mut out);
    run_ticks(&mut d, &mut out, t + 125 * MS, t + 3000 * MS);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn an_idle_the_ticks_missed_does_not_count_towards_a_stop() {
    // The ACK that empties the pipe leaves nothing to send; the daemon ticks again only after
    // the application wrote again and that data's first ACK came (a starved daemon): the idle
    // was no stop, and the new data has been out for one srtt only.
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    d.observe(&ev(t + 10 * MS, drained(acked, 0, 1 << 20)), &mut out);
    let mut s = tests_support::sample(acked + 2896);
    s.packets_out = 2000;
    d.observe(&ev(t + 200 * MS, Body::Sample(s)), &mut out);
    run_ticks(&mut d, &mut out, t + 200 * MS, t + 260 * MS);
    assert!(out.is_empty(), "an application idle seen late is no stop: {out:?}");
    healthy(&mut d, &mut out, t + 260 * MS, acked + 2896, 1000);
    assert!(out.is_empty(), "{out:?}");
    // The same data never acknowledged is a network stop, timed from when it was sent.
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    d.observe(&ev(t + 10 * MS, drained(acked, 0, 1 << 20)), &mut out);
    let mut s = tests_support::sample(acked);
    s.packets_out = 2000;
    d.observe(&ev(t + 200 * MS, Body::Sample(s)), &mut out);
    run_ticks(&mut d, &mut out, t + 200 * MS, t + 1000 * MS);
    let first = out.first().expect("a stop");
    assert_eq!(first.owner, Some(StopOwner::Network));
    assert!(first.start_ns >= t + 150 * MS, "start {} vs {}", first.start_ns, t + 180 * MS);
}

#[test]
fn a_sender_trickling_with_cwnd_and_window_to_spare_is_no_network_stop() {
    let trickle = |packets_out: u32, cwnd: u32| {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        // Every RTT (20 ms) an ACK for the 4 segments out; 12 MB wait; the window is open.
        for _ in 0..30 {
            t += 20 * MS;
            acked += 4 * 1448;
            let mut s = tests_support::sample(acked);
            (s.packets_out, s.cwnd, s.write_queue, s.snd_wnd) = (packets_out, cwnd, 12 << 20, 10 << 20);
            s.snd_nxt = s.snd_una.wrapping_add(packets_out * 1448);
            d.observe(&ev(t, Body::Sample(s)), &mut out);
            d.tick(t, &mut out);
        }
        out
    };
    let out = trickle(4, 2396);
    assert!(out.is_empty(), "the sending host held it back: {out:?}");
    // cwnd 4 without a loss: the 4 segments out are acknowledged every RTT.
    let out = trickle(4, 4);
    assert!(out.is_empty(), "each window delivered an RTT after it left: {out:?}");
    // The same trickle with the flight filling cwnd is delivery collapsing in the network.
    let out = trickle(80, 80);
    assert!(out.first().is_some_and(|f| f.owner == Some(StopOwner::Network)), "{out:?}");
}

#[test]
fn a_sender_ramping_up_from_a_small_window_is_no_network_stop() {
    // After healthy delivery the sender starts again from cwnd 10 (as after an idle) at
    // 132 ms RTT: each RTT the ACKs acknowledge the last window and cwnd doubles.
    let ramp = |grows: bool| {
        let mut d = StopDetector::new(StopConfig::default());
        let mut out = vec![];
        let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
        let mut cwnd = 10u32;
        for _ in 0..6 {
            run_ticks(&mut d, &mut out, t, t + 130 * MS);
            t += 132 * MS;
            acked += u64::from(cwnd / 2) * 1448;
            let mut s = tests_support::sample(acked);
            (s.packets_out, s.cwnd, s.write_queue, s.snd_wnd, s.srtt_us) = (cwnd, cwnd, 12 << 20, 10 << 20, 132_000);
            s.snd_nxt = s.snd_una.wrapping_add(cwnd * 1448);
            d.observe(&ev(t, Body::Sample(s)), &mut out);
            if grows {
                cwnd *= 2;
            }
        }
        out
    };
    let out = ramp(true);
    assert!(out.iter().all(|f| f.owner != Some(StopOwner::Network)), "a ramp is the sender's: {out:?}");
    // Half of a window that does not grow acknowledged per RTT: the network holds data back.
    let out = ramp(false);
    assert!(out.iter().any(|f| f.owner == Some(StopOwner::Network)), "{out:?}");
}

/// A sender in Recovery, its retransmissions unanswered for 400 ms (a network stop), then
/// stopped by its user (SIGSTOP): the kernel delivers what it holds and goes idle.
fn recovery_then_sender_stopped(last_ack: u64) -> Vec<Finding> {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    for i in 0..8u64 {
        let r = crate::model::Retrans {
            seq: i as u32,
            end_seq: i as u32 + 1448,
            segs: 1,
            sacked: 0x84,
            ca_state: CA_RECOVERY,
            count: 2,
            since_prev_ns: 100 * MS,
            lost_retrans: true,
            failed: false,
            cwnd: 700,
            ssthresh: 700,
            packets_out: 2800,
            lost_out: 8,
            sacked_out: 2000,
            retrans_out: 8,
            snd_una: 0,
        };
        d.observe(&ev(t + (i + 1) * 50 * MS, Body::Retrans(r)), &mut out);
        d.tick(t + (i + 1) * 50 * MS, &mut out);
    }
    assert!(out.iter().any(|f| f.ongoing && f.owner == Some(StopOwner::Network)), "{out:?}");
    // The holes repaired: everything sent is acknowledged and nothing waits.
    let emptied = t + 450 * MS;
    d.observe(&ev(emptied, drained(acked + last_ack, 0, 1 << 22)), &mut out);
    let mut at = emptied;
    for _ in 0..3 {
        run_ticks(&mut d, &mut out, at, at + 1000 * MS);
        at += 1000 * MS;
        d.observe(&ev(at, snapshot(acked + last_ack, 0, 0, 1 << 22, ((at - emptied) / 1000) as u32)), &mut out);
    }
    let ended = out.iter().find(|f| !f.ongoing).unwrap_or_else(|| panic!("the stop never ended: {out:?}"));
    assert!(ended.start_ns + (ended.duration_s.unwrap() * 1e9) as u64 <= emptied, "{ended:?}");
    assert!(ended.ts_ns <= emptied + 100 * MS, "ended {} ms after the idle began", (ended.ts_ns - emptied) / MS);
    assert!(out.iter().all(|f| f.ts_ns <= ended.ts_ns), "reported again during the idle: {out:?}");
    out
}

#[test]
fn a_network_stop_ends_when_a_look_after_its_last_retransmission_shows_nothing_left() {
    // Lab fuzz seed 2026 run 7: 4 MB acknowledged at once after the holes were repaired, or a
    // trickle too small to count as healthy delivery; either way the sender then holds nothing.
    for last_ack in [4_000_000, 20_000] {
        let out = recovery_then_sender_stopped(last_ack);
        assert_eq!(out.first().unwrap().owner, Some(StopOwner::Network));
    }
}

/// An idle of 1.5 s ticked every 50 ms, then data sent at `resumed` into an outage: no ACK,
/// only `resend` at `resumed + after_ms`, seen after a tick that still thought the connection
/// idle. Returns the first stop and `resumed`.
fn first_stop_after_idle_resend(resend: Body, after_ms: u64, looked: bool) -> (Finding, u64) {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    d.observe(&ev(t + 20 * MS, drained(acked + 100_000, 0, 1 << 22)), &mut out);
    let resumed = t + 1520 * MS;
    run_ticks(&mut d, &mut out, t + 20 * MS, resumed);
    d.tick(resumed + (after_ms - 10) * MS, &mut out);
    if looked {
        // A periodic snapshot shows the burst in flight, nothing acknowledged since the idle.
        d.observe(&ev(resumed + (after_ms - 5) * MS, snapshot(acked + 100_000, 92, 0, 1 << 22, 1_500_000)), &mut out);
    }
    assert!(out.is_empty(), "{out:?}");
    d.observe(&ev(resumed + after_ms * MS, resend), &mut out);
    run_ticks(&mut d, &mut out, resumed + after_ms * MS, resumed + 600 * MS);
    (out.first().expect("a stop").clone(), resumed)
}

#[test]
fn data_sent_into_an_outage_after_an_idle_is_dated_from_the_send_its_first_resend_reveals() {
    // The first timeout, rto after the send that armed it.
    let rto = Rto { rto_us: 210_000, cwnd: 1, packets_out: 500, ..Default::default() };
    let (first, resumed) = first_stop_after_idle_resend(Body::Rto(rto.clone()), 210, false);
    assert_eq!(first.owner, Some(StopOwner::Network));
    assert_eq!(first.start_ns, resumed, "dated from the send the timer was armed by");
    // A tail-loss probe in CA state Open, 2 srtt after the last send (lab fuzz seed 23 run 82).
    let tlp = crate::model::Retrans { segs: 1, ca_state: 0, count: 1, cwnd: 10, packets_out: 10, ..Default::default() };
    let (first, resumed) = first_stop_after_idle_resend(Body::Retrans(tlp.clone()), 40, false);
    assert_eq!(first.owner, Some(StopOwner::Network));
    assert_eq!(first.start_ns, resumed, "dated from the send the probe timer was armed by");
    // The same when a snapshot showed the data in flight before the resend (seed 31 run 39).
    for resend in [(Body::Rto(rto), 210), (Body::Retrans(tlp), 40)] {
        let (first, resumed) = first_stop_after_idle_resend(resend.0, resend.1, true);
        assert_eq!(first.start_ns, resumed, "dated from the send after a look that showed it in flight");
    }
}

#[test]
fn a_stop_whose_sender_runs_out_of_data_ends() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    run_ticks(&mut d, &mut out, t, t + 400 * MS);
    assert!(out.first().is_some_and(|f| f.ongoing && f.owner == Some(StopOwner::Network)), "{out:?}");
    // Everything gets acknowledged at once and nothing waits (e.g. the last window of a download
    // acknowledged late): the stop ends there, it does not go on as the application's.
    d.observe(&ev(t + 450 * MS, drained(acked + 50 * 1448, 0, 1 << 20)), &mut out);
    run_ticks(&mut d, &mut out, t + 450 * MS, t + 3000 * MS);
    let last = out.last().unwrap();
    assert!(!last.ongoing, "{out:?}");
    assert!(out.iter().all(|f| f.owner == Some(StopOwner::Network)), "{out:?}");
}
#[test]
fn a_short_zero_window_then_the_refilling_burst_is_no_network_stop() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    // The last ACK empties the pipe and closes the window for 100 ms (under the 150 ms threshold).
    d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 0)), &mut out);
    run_ticks(&mut d, &mut out, t + 10 * MS, t + 110 * MS);
    // The window opened unseen at 110 ms and a burst left; the next look, 60 ms later, has its
    // first ACK only: data out for one srtt, not a stop since the window closed.
    let mut s = tests_support::sample(acked + 1448);
    s.packets_out = 500;
    d.observe(&ev(t + 170 * MS, Body::Sample(s)), &mut out);
    d.tick(t + 170 * MS, &mut out);
    healthy(&mut d, &mut out, t + 170 * MS, acked + 1448, 1000);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn a_look_that_still_finds_the_window_closed_does_not_restart_the_receivers_stop() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (t, acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    d.observe(&ev(t + 10 * MS, drained(acked, 4 << 20, 0)), &mut out);
    run_ticks(&mut d, &mut out, t + 10 * MS, t + 100 * MS);
    // The periodic snapshot, before the threshold: still nothing in flight, the window closed.
    d.observe(&ev(t + 100 * MS, snapshot(acked, 0, 4 << 20, 0, 90_000)), &mut out);
    run_ticks(&mut d, &mut out, t + 100 * MS, t + 1000 * MS);
    let first = out.first().expect("a stop");
    assert_eq!(first.owner, Some(StopOwner::Receiver));
    assert!(first.start_ns <= t + 10 * MS, "dated from the window's closing: {}", (first.start_ns - t) / MS);
}

#[test]
fn a_sender_whose_every_ack_empties_the_pipe_with_data_waiting_is_no_stop() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let (mut t, mut acked) = healthy(&mut d, &mut out, 0, 0, 1000);
    // cwnd 4 without a loss (lab fuzz seed 23 run 44): every RTT the 4 segments out are all
    // acknowledged, 12 MB wait, the window is open.
    for _ in 0..30 {
        t += 20 * MS;
        acked += 4 * 1448;
        d.observe(&ev(t, drained(acked, 12 << 20, 10 << 20)), &mut out);
        d.tick(t, &mut out);
    }
    assert!(out.is_empty(), "the network held nothing back: {out:?}");
}

#[test]
fn a_connection_becoming_bulk_after_an_idle_starts_its_stop_clock_then() {
    let mut d = StopDetector::new(StopConfig::default());
    let mut out = vec![];
    let at = |d: &mut StopDetector, out: &mut Vec<Finding>, t: u64, acked: u64, packets_out: u32| {
        let mut s = tests_support::sample(acked);
        (s.srtt_us, s.packets_out, s.write_queue) = (12_000, packets_out, 113_936 + packets_out * 1448);
        d.observe(&ev(t, Body::Sample(s)), out);
        d.tick(t, out);
    };
    // A 2 Mbit/s sender's bursts below 1 MiB; the last one's fast retransmits, then its
    // pipe-emptying ACK, which the kernel does not report for a connection not bulk yet.
    at(&mut d, &mut out, 0, 800_000, 20);
    at(&mut d, &mut out, 50 * MS, 850_000, 20);
    at(&mut d, &mut out, 100 * MS, 917_542, 29);
    let rtx = crate::model::Retrans { segs: 1, ca_state: CA_RECOVERY, count: 1, packets_out: 29, ..Default::default() };
    d.observe(&ev(110 * MS, Body::Retrans(rtx)), &mut out);
    run_ticks(&mut d, &mut out, 100 * MS, 1000 * MS);
    // The next burst crosses 1 MiB: its first sample is the connection's first as a bulk one.
    at(&mut d, &mut out, 1000 * MS, 1_050_042, 11);
    at(&mut d, &mut out, 1050 * MS, 1_101_450, 18);
    assert!(out.is_empty(), "an idle before the connection was bulk is no stop: {out:?}");
}
