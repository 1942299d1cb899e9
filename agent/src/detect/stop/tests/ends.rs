//! When a stop ends (delivery resumed for a while, everything delivered, the close), and when a
//! quiet spell is one stop going on or two stops.
use super::*;
use crate::detect::tests_support;
use crate::model::StateChange;

#[test]
fn a_stop_that_ends_for_a_moment_and_goes_on_is_one_stop() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.ticks(t, t + 400 * MS);
    let first = r.first().start_ns;
    // Delivery for just over the resume window ends it; then nothing again.
    let (t2, acked2) = r.healthy_from(t + 400 * MS, acked, 150);
    assert!(r.out.iter().any(|f| !f.ongoing), "the stop ended for a moment: {:?}", r.out);
    r.ticks(t2, t2 + 600 * MS);
    r.healthy_from(t2 + 600 * MS, acked2, 300);
    assert!(r.out.iter().all(|f| f.start_ns == first), "{:?}", r.out.iter().map(|f| f.start_ns).collect::<Vec<_>>());
    let last = r.last();
    assert!(!last.ongoing && last.duration_s.unwrap() > 0.9, "{last:?}");
}

/// Lab fuzz seed 31 run 9: an outage, 0.2 s of delivery, then the receiver's window closed; it
/// was reported as one stop, network -> receiver, from the outage's start.
#[test]
fn a_receivers_stall_right_after_a_network_stop_is_a_stop_of_its_own() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.ticks(t, t + 400 * MS);
    let network = r.first().start_ns;
    // Delivery for just over the resume window ends it; then the receiver's window closes.
    let (t2, acked2) = r.healthy_from(t + 400 * MS, acked, 150);
    r.see(t2 + 10 * MS, drained(acked2, 4 << 20, 0));
    r.ticks(t2 + 10 * MS, t2 + 1000 * MS);
    let (net, rcv): (Vec<_>, Vec<_>) = r.out.iter().partition(|f| f.start_ns == network);
    assert!(net.iter().all(|f| f.owner == Some(StopOwner::Network)), "{net:?}");
    assert!(net.last().is_some_and(|f| !f.ongoing), "{net:?}");
    assert!(!rcv.is_empty() && rcv.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{rcv:?}");
}

/// Lab fuzz seed 31 run 9, the same with the delivery shorter than the window that confirms it:
/// the network's stop ends with its last ACK; the receiver's stall after it is its own.
#[test]
fn a_network_stop_ends_when_everything_sent_is_delivered_though_the_window_then_closes() {
    let (mut r, t, acked) = Run::healthy(1000);
    let at = r.three_timeouts(t);
    assert_eq!(r.first().owner, Some(StopOwner::Network), "{:?}", r.out);
    // Delivery resumes for 50 ms (under the window that confirms it), then the last ACK
    // acknowledges everything sent and closes the window: the receiver stopped reading.
    let (t2, acked2) = r.healthy_from(at + 20 * MS, acked, 50);
    r.see(t2 + 10 * MS, drained(acked2 + 1448, 4 << 20, 0));
    r.ticks(t2 + 10 * MS, t2 + 1500 * MS);
    let network = r.out[0].start_ns;
    let (net, rcv): (Vec<_>, Vec<_>) = r.out.iter().partition(|f| f.start_ns == network);
    assert!(net.iter().all(|f| f.owner == Some(StopOwner::Network)), "{net:?}");
    let end = net.last().expect("network");
    assert!(!end.ongoing && end_ns(end) <= t2 + 10 * MS, "{end:?}");
    assert!(!rcv.is_empty() && rcv.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{rcv:?}");
}

#[test]
fn a_stop_whose_sender_runs_out_of_data_ends() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.ticks(t, t + 400 * MS);
    assert!(r.first().ongoing && r.first().owner == Some(StopOwner::Network), "{:?}", r.out);
    // Everything gets acknowledged at once and nothing waits (e.g. the last window of a download
    // acknowledged late): the stop ends there, it does not go on as the application's.
    r.see(t + 450 * MS, drained(acked + 50 * 1448, 0, 1 << 20));
    r.ticks(t + 450 * MS, t + 3000 * MS);
    assert!(!r.last().ongoing, "{:?}", r.out);
    assert!(r.all_owned_by(StopOwner::Network), "{:?}", r.out);
}

/// A sender in Recovery, its retransmissions unanswered for 400 ms (a network stop), then
/// stopped by its user (SIGSTOP): the kernel delivers what it holds and goes idle.
fn recovery_then_sender_stopped(last_ack: u64) -> Vec<Finding> {
    let (mut r, t, acked) = Run::healthy(1000);
    for i in 1..=8u64 {
        let lost = Retrans { count: 2, since_prev_ns: 100 * MS, lost_retrans: true, ..retrans(CA_RECOVERY, 700, 2800) };
        r.see_and_tick(t + i * 50 * MS, Body::Retrans(lost));
    }
    assert!(r.out.iter().any(|f| f.ongoing && f.owner == Some(StopOwner::Network)), "{:?}", r.out);
    // The holes repaired: everything sent is acknowledged and nothing waits.
    let emptied = t + 450 * MS;
    r.see(emptied, drained(acked + last_ack, 0, 1 << 22));
    let mut at = emptied;
    for _ in 0..3 {
        r.ticks(at, at + 1000 * MS);
        at += 1000 * MS;
        r.see(at, snapshot(acked + last_ack, 0, 0, 1 << 22, ((at - emptied) / 1000) as u32));
    }
    let out = r.out;
    let ended = out.iter().find(|f| !f.ongoing).unwrap_or_else(|| panic!("the stop never ended: {out:?}"));
    assert!(end_ns(ended) <= emptied, "{ended:?}");
    assert!(ended.ts_ns <= emptied + 100 * MS, "ended {} ms after the idle began", (ended.ts_ns - emptied) / MS);
    assert!(out.iter().all(|f| f.ts_ns <= ended.ts_ns), "reported again during the idle: {out:?}");
    out
}

/// Lab fuzz seed 2026 run 7: a sender stopped by SIGSTOP in Recovery, its last data delivered, was
/// reported as the network's for the 3.4 s of its idle.
#[test]
fn a_network_stop_ends_when_a_look_after_its_last_retransmission_shows_nothing_left() {
    // 4 MB acknowledged at once after the holes were repaired, or a trickle too small to count as
    // healthy delivery; either way the sender then holds nothing.
    for last_ack in [4_000_000, 20_000] {
        let out = recovery_then_sender_stopped(last_ack);
        assert_eq!(out[0].owner, Some(StopOwner::Network));
    }
}

#[test]
fn the_end_of_a_transfer_and_an_application_pause_are_no_stop() {
    // The last ACK acknowledges everything and nothing waits: the application is done.
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 0, 1 << 20));
    r.ticks(t + 10 * MS, t + 5000 * MS);
    assert!(r.out.is_empty(), "an app-limited sender is not stopped: {:?}", r.out);
    assert!(!r.wants_snapshot());
    // The application writes again and the transfer goes on: still nothing.
    r.healthy_from(t + 5000 * MS, acked, 1000);
    assert!(r.out.is_empty(), "{:?}", r.out);

    // A periodic sample showed data in flight; the ACKs after it that emptied the pipe were not
    // reported (a stale look): the snapshot shows the sender had nothing left to send.
    let (mut r, t, acked) = Run::healthy(1000);
    let mut stale = tests_support::sample(acked);
    stale.selected = true;
    r.see(t + 10 * MS, Body::Sample(stale));
    r.ticks(t + 10 * MS, t + 120 * MS);
    assert!(r.wants_snapshot());
    r.see(t + 125 * MS, snapshot(acked + 100_000, 0, 0, 1 << 20, 100_000));
    r.ticks(t + 125 * MS, t + 3000 * MS);
    assert!(r.out.is_empty(), "{:?}", r.out);
}

/// `lab run parallel-3-lossy-lane` (bbr, 5 % loss on one of three streams, 100 ms): after a 0.38 s
/// stall Recovery filled hole after hole, the cumulative ACK moved at every other 50 ms sample,
/// and each sample without an advance cancelled the resumption: the stop went on to the end of
/// the transfer (7.5 s, `no_ack`, nothing delivered) over 28 MB acknowledged.
#[test]
fn a_stop_ends_when_delivery_resumes_in_jumps_with_samples_between_them() {
    let (mut r, t, mut acked) = Run::healthy(1000);
    r.ticks(t, t + 400 * MS);
    assert!(r.out.iter().any(|f| f.ongoing), "a stop: {:?}", r.out);
    let resumed = t + 450 * MS;
    let mut at = t + 400 * MS;
    for k in 0..40 {
        at += 50 * MS;
        if k % 2 == 0 {
            acked += 700_000;
        }
        let mut s = tests_support::sample(acked);
        (s.cwnd, s.ca_state, s.snd_wnd, s.srtt_us) = (80, CA_RECOVERY, 1 << 20, 100_000);
        r.see_and_tick(at, Body::Sample(s));
    }
    let ended: Vec<_> = r.out.iter().filter(|f| !f.ongoing).collect();
    assert_eq!(ended.len(), 1, "one stop, ended: {:?}", r.out);
    assert_eq!(end_ns(ended[0]), resumed, "{:?}", ended[0]);
    assert!(r.out.iter().all(|f| f.start_ns == t), "no stop after it: {:?}", r.out);
}

/// The same stop's evidence said nothing was delivered during it: what a resumption delivered
/// before it fell through is the stop's, and what the resumption that ends it delivers is not.
#[test]
fn a_resumption_that_falls_through_counts_its_delivery_as_the_stops() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.ticks(t, t + 400 * MS);
    // One jump, then ACKs that move nothing for longer than the resumption's window.
    r.see_and_tick(t + 450 * MS, sample(acked + 700_000, 80, CA_RECOVERY, 1 << 20));
    for at in [500, 550, 600, 650] {
        r.see_and_tick(t + at * MS, sample(acked + 700_000, 80, CA_RECOVERY, 1 << 20));
    }
    r.ticks(t + 650 * MS, t + 1000 * MS);
    assert!(r.out.iter().all(|f| f.ongoing), "the stop goes on: {:?}", r.out);
    // Delivery resumes for good: the stop ends there, with the first jump as its delivery.
    r.healthy_from(t + 1000 * MS, acked + 700_000, 300);
    let end = r.out.iter().find(|f| !f.ongoing).unwrap_or_else(|| panic!("never ended: {:?}", r.out));
    assert_eq!(end_ns(end), t + 1050 * MS, "{end:?}");
    assert_eq!(end.evidence["acks_during"], 1, "{}", end.evidence);
    assert_eq!(end.evidence["bytes_delivered_during"], 700_000, "{}", end.evidence);
    // In bits/s, as every `_bps` field of the events (they were bytes/s once).
    let secs = end.duration_s.expect("ended");
    let during = end.evidence["rate_during_bps"].as_f64().expect("a rate");
    assert!((during - 700_000.0 * 8.0 / secs).abs() < 1.0, "{during} over {secs} s");
    let before = end.evidence["rate_before_bps"].as_f64().expect("a rate");
    assert!(before > 8.0 * 1e6, "the healthy rate before, in bits/s: {before}");
}

/// A sample at `srtt_us`.
fn at_srtt(acked: u64, srtt_us: u32) -> Body {
    let mut s = tests_support::sample(acked);
    s.srtt_us = srtt_us;
    Body::Sample(s)
}

/// A sample on a 200 ms path: the window that confirms a resumption is 400 ms.
fn on_long_path(acked: u64, ca: u8) -> Body {
    let mut s = tests_support::sample(acked);
    (s.srtt_us, s.ca_state) = (200_000, ca);
    Body::Sample(s)
}

/// Lab fuzz seed 61 run 15 (201 ms RTT): after an outage the backed-off retransmission was
/// acknowledged with all the receiver held (one jump), then the holes the outage left took two RTTs
/// to repair: one segment in 0.4 s, and the next sample's own jump made the rate over the window
/// look healthy. The stop was ended at the first jump, 0.4 s before the capture's end: the window
/// after a resumption must deliver too, the jump that began it left out.
#[test]
fn one_jump_then_almost_nothing_for_the_window_after_it_does_not_end_a_stop() {
    let (mut r, t, acked) = Run::healthy(1000);
    let at = r.three_timeouts(t);
    let jump = at + 20 * MS;
    let mut a = acked + 5_000_000;
    r.see_and_tick(jump, on_long_path(a, 0));
    r.see_and_tick(jump + 150 * MS, on_long_path(a, CA_RECOVERY));
    a += 1448;
    r.see_and_tick(jump + 300 * MS, on_long_path(a, CA_RECOVERY));
    let repaired = jump + 450 * MS;
    let mut now = repaired;
    while now < repaired + 1000 * MS {
        a += 2_000_000;
        r.see_and_tick(now, on_long_path(a, 0));
        now += 50 * MS;
    }
    let end = r.out.iter().find(|f| !f.ongoing).unwrap_or_else(|| panic!("never ended: {:?}", r.out));
    assert_eq!(end.owner, Some(StopOwner::Network));
    // The 0.3 s without an advance after the jump is a stall by itself: the stop ends after it,
    // where delivery went on, at the latest when the repair's own jump came.
    assert!(
        end_ns(end) >= jump + 300 * MS && end_ns(end) <= repaired,
        "ended at {}, where delivery went on ({repaired}), not at the jump ({jump})",
        end_ns(end)
    );
}

/// The same jump followed by delivery at the usual rate ends the stop at the jump.
#[test]
fn a_jump_followed_by_healthy_delivery_ends_the_stop_at_the_jump() {
    let (mut r, t, acked) = Run::healthy(1000);
    let at = r.three_timeouts(t);
    let jump = at + 20 * MS;
    let mut a = acked + 5_000_000;
    let mut now = jump;
    while now < jump + 1000 * MS {
        r.see_and_tick(now, on_long_path(a, 0));
        a += 2_000_000;
        now += 50 * MS;
    }
    let end = r.out.iter().find(|f| !f.ongoing).unwrap_or_else(|| panic!("never ended: {:?}", r.out));
    assert!(end_ns(end).abs_diff(jump) < MS, "ended at {}, not at the jump ({jump})", end_ns(end));
}

/// A closed socket whose peer is gone resends only its FIN: no transfer is held up, and a
/// connection that never became bulk is judged only while established.
#[test]
fn a_lone_fin_resent_or_a_small_connection_closing_is_no_stop() {
    let (mut r, t, acked) = Run::healthy(2000);
    r.see(t + 10 * MS, Body::State(StateChange { old: 1, new: 4 }));
    r.see(t + 20 * MS, snapshot(acked, 1, 0, 1 << 20, 10_000));
    let mut at = t + 20 * MS;
    for (i, wait) in [220u64, 440, 880].into_iter().enumerate() {
        r.ticks(at, at + wait * MS);
        at += wait * MS;
        let n = i as u32;
        r.see(at, Body::Rto(Rto { retransmits: n, backoff: n, ..rto(wait * 1000, 1, 1) }));
    }
    r.ticks(at, at + 500 * MS);
    assert!(r.out.is_empty(), "{:?}", r.out);

    let mut r = Run::new();
    r.see_and_tick(0, sample(100_000, 10, 0, 1 << 20));
    r.see(10 * MS, Body::State(StateChange { old: 1, new: 4 }));
    r.see(20 * MS, snapshot(100_000, 20, 50_000, 1 << 20, 10_000));
    r.ticks(20 * MS, 300 * MS);
    r.see(300 * MS, Body::Rto(rto(220_000, 1, 20)));
    r.ticks(300 * MS, 800 * MS);
    assert!(r.out.is_empty(), "{:?}", r.out);
}

/// Lab fuzz seed 67 run 48 (37 ms RTT, a reverse outage): the first ACK after the outage
/// acknowledged everything in flight with megabytes still waiting, the waiting data went out and
/// was delivered for 50 ms, then its burst's losses held delivery for 0.24 s. The capture's truth
/// takes the two stalls as one (parted by less than the resume window); the stop was ended at the
/// jump, 0.3 s before the capture's end.
#[test]
fn a_stall_inside_the_resume_window_after_everything_was_delivered_is_the_stop_going_on() {
    let (mut r, t, acked) = Run::healthy(1000);
    let at = r.three_timeouts(t);
    let jump = at + 20 * MS;
    let mut a = acked + 1_400_000;
    r.see_and_tick(jump, drained(a, 2_800_000, 1 << 22));
    for dt in [40, 50] {
        a += 200_000;
        r.see_and_tick(jump + dt * MS, sample(a, 2000, CA_RECOVERY, 1 << 22));
    }
    // Duplicate ACKs only, data in flight, for 0.24 s.
    for dt in [100, 150, 200, 250] {
        r.see(jump + dt * MS, Body::Retrans(retrans(CA_RECOVERY, 2000, 2000)));
        r.see_and_tick(jump + dt * MS, sample(a, 2000, CA_RECOVERY, 1 << 22));
    }
    r.ticks(jump + 250 * MS, jump + 290 * MS);
    let repaired = jump + 290 * MS;
    r.see_and_tick(repaired, sample(a + 1_250_000, 2000, CA_RECOVERY, 1 << 22));
    r.healthy_from(repaired, a + 1_250_000, 500);
    assert!(r.out.iter().all(|f| f.start_ns == t), "one stop: {:?}", r.out);
    let end = r.out.iter().find(|f| !f.ongoing).unwrap_or_else(|| panic!("never ended: {:?}", r.out));
    assert_eq!(end_ns(end), repaired, "ended at {}, not at the jump ({jump}) nor later", end_ns(end));
}

/// The same jump with the waiting data then delivered at the usual rate ends the stop at the jump.
#[test]
fn everything_delivered_then_the_waiting_data_flowing_ends_the_stop_at_the_jump() {
    let (mut r, t, acked) = Run::healthy(1000);
    let at = r.three_timeouts(t);
    let jump = at + 20 * MS;
    let a = acked + 1_400_000;
    r.see_and_tick(jump, drained(a, 2_800_000, 1 << 22));
    r.healthy_from(jump, a, 500);
    assert!(r.out.iter().all(|f| f.start_ns == t), "one stop: {:?}", r.out);
    let end = r.out.iter().find(|f| !f.ongoing).unwrap_or_else(|| panic!("never ended: {:?}", r.out));
    assert_eq!(end_ns(end), jump);
}

/// On a longer path delivery resumed, went on for a moment and stalled again for longer than a
/// stall counts by itself, all inside the resume window, whose rate stayed healthy. The capture's
/// truth joins the two stalls (the lab's fuzz judge); the stop was ended at the first resumption.
#[test]
fn a_stall_inside_the_resume_window_ends_the_stop_only_after_it() {
    let (mut r, t, acked) = Run::healthy(1000);
    let at = r.three_timeouts(t);
    let resumed = at + 20 * MS;
    let mut a = acked + 2_000_000;
    r.see_and_tick(resumed, at_srtt(a, 100_000));
    a += 300_000;
    r.see_and_tick(resumed + 50 * MS, at_srtt(a, 100_000));
    // 0.19 s without an advance (a stall is 0.6 x 300 ms = 180 ms at 100 ms srtt).
    r.ticks(resumed + 50 * MS, resumed + 240 * MS);
    let again = resumed + 240 * MS;
    let mut now = again;
    while now < again + 600 * MS {
        a += 1_250_000;
        r.see_and_tick(now, at_srtt(a, 100_000));
        now += 50 * MS;
    }
    assert!(r.out.iter().all(|f| f.start_ns == t), "one stop: {:?}", r.out);
    let end = r.out.iter().find(|f| !f.ongoing).unwrap_or_else(|| panic!("never ended: {:?}", r.out));
    assert_eq!(end_ns(end), again, "ended at {}, not at the first resumption ({resumed})", end_ns(end));
}

/// Lab fuzz seed 73 run 11 (15 ms RTT, an outage both ways): after the outage the cumulative ACK
/// moved for 15 ms and then stood behind a hole never repaired, until the receiving application
/// ended the test and reset the connection 2.1 s later with 5000 segments outstanding. The stop
/// was ended at the close; the capture's truth ends it where delivery resumed, and the aborted
/// transfer's tail is no stall.
#[test]
fn a_connection_aborted_with_data_outstanding_ends_its_stop_where_delivery_began_to_resume() {
    let (mut r, t, acked) = Run::healthy(1000);
    let at = r.three_timeouts(t);
    let resumed = at + 20 * MS;
    r.see_and_tick(resumed, sample(acked + 5_000_000, 80, CA_RECOVERY, 1 << 20));
    let mut now = resumed;
    while now < resumed + 2000 * MS {
        now += 50 * MS;
        r.see_and_tick(now, sample(acked + 5_000_000, 80, CA_RECOVERY, 1 << 20));
    }
    assert!(r.out.iter().all(|f| f.ongoing), "{:?}", r.out);
    r.see(now + 10 * MS, Body::State(StateChange { old: 1, new: 8 }));
    r.see(now + 20 * MS, Body::State(StateChange { old: 9, new: 7 }));
    let last = r.last();
    assert!(!last.ongoing && end_ns(last) == resumed, "{last:?}");
}

/// Lab fuzz seed 139 run 0 (bbr, 207 ms RTT, a 10 s outage both ways): after the outage one ACK
/// moved the cumulative ACK 289 kB at once, too little over the stop to count as delivery
/// resuming, and nothing was sent again until the receiver reset the connection 4 s later. The
/// stop was ended at the reset; the capture's truth ends it at the jump, as what waits behind an
/// abort without a resend is no stall. One resend after the jump that waits the threshold is the
/// stop going on until the reset.
#[test]
fn a_connection_aborted_after_one_advance_ends_its_stop_there_unless_it_resent_since() {
    for resent in [false, true] {
        let (mut r, t, acked) = Run::healthy(1000);
        let at = r.three_timeouts(t);
        let jump = at + 20 * MS;
        // 20 kB in the 1.6 s since the last healthy advance: almost nothing.
        r.see_and_tick(jump, sample(acked + 20_000, 4, 0, 1 << 20));
        if resent {
            r.see(jump + 300 * MS, Body::Rto(Rto { retransmits: 0, backoff: 0, ..rto(300_000, 1, 50) }));
        }
        r.ticks(jump, jump + 2000 * MS);
        assert!(r.out.iter().all(|f| f.ongoing), "{:?}", r.out);
        let reset = jump + 2010 * MS;
        r.see(reset, Body::State(StateChange { old: 1, new: 7 }));
        let last = r.last();
        let want = if resent { reset } else { jump };
        assert!(!last.ongoing && end_ns(last) == want, "resent {resent}: {last:?}, want the end at {want}");
    }
}

/// Lab fuzz seed 79 run 28 (282 ms RTT): a reverse outage held the last two segments before a
/// receiver's 27 s pause; when it lifted their ACK emptied the pipe behind a closed window. The
/// network's stop waited for a stall inside the resume window counted from each new look, and
/// looks came faster than that window: it went on as the network's through the receiver's pause.
#[test]
fn a_network_stop_ends_after_its_last_ack_though_looks_keep_finding_the_window_closed() {
    let (mut r, t, acked) = Run::healthy(1000);
    let at = r.three_timeouts(t);
    let last = at + 20 * MS;
    r.see_and_tick(last, drained(acked + 2896, 4 << 20, 0));
    let mut now = last;
    while now < last + 3000 * MS {
        now += 100 * MS;
        r.see_and_tick(now, snapshot(acked + 2896, 0, 4 << 20, 0, ((now - last) / 1000) as u32));
    }
    let network = r.out[0].start_ns;
    let (net, rcv): (Vec<_>, Vec<_>) = r.out.iter().partition(|f| f.start_ns == network);
    let end = net.last().expect("network");
    assert!(!end.ongoing && end_ns(end) == last, "{end:?}");
    assert!(!rcv.is_empty() && rcv.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{rcv:?}");
}

/// Lab fuzz seed 79 run 24 (75 ms RTT, an outage both ways): after the outage's jump the next
/// advance came 150 ms later, a stall by the capture's srtt (0.6 x 250 ms) but not by the
/// daemon's, which the recovery had raised to 81 ms: the stop ended 0.15 s early, at the jump. A
/// stall inside the window counts from half the threshold.
#[test]
fn a_stall_inside_the_resume_window_counts_from_half_the_threshold() {
    let (mut r, t, acked) = Run::healthy(1000);
    let at = r.three_timeouts(t);
    let jump = at + 20 * MS;
    let mut a = acked + 2_000_000;
    r.see_and_tick(jump, at_srtt(a, 81_000));
    r.ticks(jump, jump + 150 * MS);
    let again = jump + 150 * MS;
    let mut now = again;
    while now < again + 600 * MS {
        a += 1_250_000;
        r.see_and_tick(now, at_srtt(a, 81_000));
        now += 50 * MS;
    }
    let end = r.out.iter().find(|f| !f.ongoing).unwrap_or_else(|| panic!("never ended: {:?}", r.out));
    assert_eq!(end_ns(end), again, "ended at {}, not at the jump ({jump})", end_ns(end));
}
