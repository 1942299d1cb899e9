//! Whose stop it is: the network's, the receiver's, or undetermined when no look can tell; and
//! the senders that only look stopped (trickling, ramping up, emptying the pipe every RTT).
use super::*;

#[test]
fn a_receiver_that_stops_reading_is_the_receivers_stop_from_the_first_report() {
    let (mut r, t, acked) = Run::healthy(1000);
    // The last ACK acknowledges everything sent and closes the window; 4 MiB wait.
    r.see(t + 10 * MS, drained(acked, 4 << 20, 0));
    r.ticks(t + 10 * MS, t + 3000 * MS);
    // The drained ACK names the owner; a look confirms it (on a path shorter than a clock tick a
    // later ACK of the same tick may have left something else), and none comes here.
    assert!(r.wants_snapshot(), "a look is asked for to confirm the drained ACK");
    let first = r.first();
    assert_eq!(verdict(first), (StopOwner::Receiver, StopCause::ZeroWindow));
    assert!(first.ongoing);
    assert_eq!(first.evidence["receiver_limited"], true);
    assert!(r.all_owned_by(StopOwner::Receiver), "{:?}", r.out);
    // The receiver reads again: the window opens and delivery resumes.
    r.healthy_from(t + 3000 * MS, acked, 500);
    let last = r.last();
    assert!(!last.ongoing);
    assert_eq!(verdict(last), (StopOwner::Receiver, StopCause::ZeroWindow));
}

/// `agent/tests/containers.rs` on loopback, a receiver reading in bursts: the kernel checks one
/// emptying ACK per clock tick there, and reported one that left data waiting behind an open window,
/// not the ACK of the same tick that closed it again. The stop turned `undetermined` for a while.
#[test]
fn an_emptying_acks_open_window_during_a_receivers_stop_waits_for_a_look() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 4 << 20, 0));
    r.ticks(t + 10 * MS, t + 1500 * MS);
    assert_eq!(verdict(r.first()), (StopOwner::Receiver, StopCause::ZeroWindow));
    r.wants_snapshot();
    // The receiver read a little: a burst went out and its last ACK (checked) left more waiting
    // with the window open. Data that waits behind an open window is sent at once.
    r.see(t + 1500 * MS, drained(acked + 65536, 4 << 20, 300_000));
    r.ticks(t + 1500 * MS, t + 1700 * MS);
    assert!(r.wants_snapshot(), "only a look tells what the ACKs after it left");
    assert!(r.all_owned_by(StopOwner::Receiver), "{:?}", r.out);
    // The look: the window closed again, nothing in flight.
    r.see(t + 1720 * MS, snapshot(acked + 65536, 0, 4 << 20, 0, 200_000));
    r.ticks(t + 1700 * MS, t + 2000 * MS);
    assert!(r.all_owned_by(StopOwner::Receiver), "{:?}", r.out);
}

/// Lab fuzz seed 2026 run 9: three fast retransmissions after a 3.3 s zero window made the
/// receiver's stop network/slow_recovery.
#[test]
fn fast_retransmits_of_the_burst_that_refills_the_window_leave_the_stop_the_receivers() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 4 << 20, 0));
    r.ticks(t + 10 * MS, t + 3000 * MS);
    assert_eq!(r.first().owner, Some(StopOwner::Receiver), "{:?}", r.out);
    // The window opens: a burst, three segments lost at the bottleneck and fast-retransmitted in
    // Recovery while delivery picks up slowly.
    let mut t = t + 3000 * MS;
    for i in 0..3u64 {
        t += 20 * MS;
        r.see(t, Body::Retrans(retrans(CA_RECOVERY, 300, 250)));
        r.see_and_tick(t, sample(acked + i * 1448, 300, CA_RECOVERY, 10 << 20));
    }
    r.healthy_from(t, acked + 5000, 1000);
    assert!(!r.last().ongoing, "{:?}", r.out);
    assert!(r.all_owned_by(StopOwner::Receiver), "{:?}", r.out);
}

/// Lab fuzz seed 23 run 85: a 24 s zero window went receiver -> undetermined -> network/unknown.
#[test]
fn a_receivers_stop_made_undetermined_by_a_stale_look_does_not_become_the_networks_without_a_timeout() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 4 << 20, 0));
    r.ticks(t + 10 * MS, t + 2000 * MS);
    assert_eq!(r.first().owner, Some(StopOwner::Receiver), "{:?}", r.out);
    // A per-ACK sample of a selected connection (one ACK behind, not exact): window open,
    // nothing in flight, data waiting: the look cannot tell.
    let mut s = tests_support::sample(acked);
    (s.selected, s.packets_out, s.in_flight, s.snd_nxt, s.snd_una, s.write_queue) = (true, 0, 0, 5000, 5000, 4 << 20);
    r.see(t + 2010 * MS, Body::Sample(s));
    r.ticks(t + 2010 * MS, t + 2100 * MS);
    assert!(r.out.iter().any(|f| f.owner == Some(StopOwner::Undetermined)), "{:?}", r.out);
    // Then data in flight again, nothing delivered yet, no timeout: the receiver's stop winds
    // down and never becomes the network's. Silence past a stall's length after the window opened
    // is a stop of its own, from the opening.
    let opened = t + 2120 * MS;
    r.see(opened, snapshot(acked, 200, 3 << 20, 8 << 20, 2_000_000));
    r.ticks(opened, t + 2300 * MS);
    let (receivers, after): (Vec<_>, Vec<_>) = r.out.iter().partition(|f| f.start_ns < opened);
    assert!(receivers.iter().all(|f| f.owner != Some(StopOwner::Network)), "{:?}", r.out);
    assert!(after.iter().all(|f| f.start_ns == opened), "{:?}", r.out);
}

#[test]
fn a_receiver_reading_a_trickle_with_its_window_full_is_the_receivers_stop() {
    let (mut r, mut t, mut acked) = Run::healthy(1000);
    // Every 100 ms an ACK for 2 KB opens the window by as much, which the sender fills at once.
    for _ in 0..20 {
        t += 100 * MS;
        acked += 2000;
        let mut s = tests_support::sample(acked);
        (s.packets_out, s.snd_una, s.snd_nxt, s.snd_wnd) = (2, 10_000, 12_000, 2000);
        r.see_and_tick(t, Body::Sample(s));
    }
    assert_eq!(verdict(r.first()), (StopOwner::Receiver, StopCause::ZeroWindow), "{:?}", r.out);
    assert!(r.never_the_networks(), "{:?}", r.out);
}

#[test]
fn a_look_that_still_finds_the_window_closed_does_not_restart_the_receivers_stop() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 4 << 20, 0));
    r.ticks(t + 10 * MS, t + 100 * MS);
    // The periodic snapshot, before the threshold: still nothing in flight, the window closed.
    r.see(t + 100 * MS, snapshot(acked, 0, 4 << 20, 0, 90_000));
    r.ticks(t + 100 * MS, t + 1000 * MS);
    let first = r.first();
    assert_eq!(first.owner, Some(StopOwner::Receiver));
    assert!(first.start_ns <= t + 10 * MS, "dated from the window's closing: {}", (first.start_ns - t) / MS);
}

/// Lab fuzz seed 151 run 53 (bbr, 35 ms RTT, a receiver pause of 18 s): as the window closed the
/// receiver offered 1 kB more; the sender filled it with one small segment, a look saw it in
/// flight, and its ACK closed the window again. When the window opened 17 s later, that look was
/// taken for the opening: the receiver's stop ended 17 s early, and the four segments sent into the
/// open window were a network stop dated from the last window probe's answer a second before.
#[test]
fn a_small_window_filled_once_and_closed_again_leaves_the_receivers_stop_going_on() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 4 << 20, 0));
    r.ticks(t + 10 * MS, t + 300 * MS);
    assert_eq!(verdict(r.first()), (StopOwner::Receiver, StopCause::ZeroWindow));
    // One small segment fills the 1 kB offered; its ACK at +320 ms closes the window again.
    r.see_and_tick(t + 300 * MS, snapshot(acked, 1, 4 << 20, 0, 290_000));
    let small = acked + 1024;
    let (answer, open) = (t + 2400 * MS, t + 3400 * MS);
    let mut at = t + 340 * MS;
    while at < open {
        // The last ACK: the small segment's, then a window probe's answer.
        let last_ack = if at >= answer { answer } else { t + 320 * MS };
        r.see_and_tick(at, snapshot(small, 0, 4 << 20, 0, ((at - last_ack) / 1000) as u32));
        at += 100 * MS;
    }
    // The window opens: four segments in flight, delivered a round trip later.
    r.see_and_tick(open, snapshot(small, 4, 4 << 20, 1 << 20, 10_000));
    r.ticks(open, open + 20 * MS);
    r.healthy_from(open + 20 * MS, small, 500);
    assert!(r.never_the_networks(), "{:?}", r.out);
    let last = r.last();
    assert!(
        !last.ongoing && end_ns(last) >= open - 20 * MS,
        "ended {} ms before the window opened",
        (open - end_ns(last)) / MS
    );
}

#[test]
fn a_stale_look_asks_for_a_snapshot_and_reports_nothing_network_before_it() {
    // The last report is a drained ACK with data waiting and the window open (the kernel sends at
    // once), so it cannot say whose the silence is.
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 4 << 20, 1 << 20));
    let mut asked = None;
    let mut at = t + 10 * MS;
    while asked.is_none() && at < t + 1000 * MS {
        at += 20 * MS;
        r.tick(at);
        if r.wants_snapshot() {
            asked = Some(at);
        }
    }
    let asked = asked.expect("a snapshot is asked for");
    // 3/4 of the 140 ms threshold (20 ms RTT): asked before the stop could be reported.
    assert!(asked - t <= 130 * MS, "asked {} ms after the last ACK", (asked - t) / MS);
    assert!(r.out.is_empty(), "nothing reported before the fresh look: {:?}", r.out);
    // The snapshot: the window is closed, nothing in flight.
    r.see(asked + 5 * MS, snapshot(acked, 0, 4 << 20, 0, 150_000));
    r.ticks(asked + 5 * MS, asked + 500 * MS);
    let first = r.first();
    assert_eq!(verdict(first), (StopOwner::Receiver, StopCause::ZeroWindow));
    assert!(first.ts_ns - t <= 240 * MS, "reported {} ms after the start", (first.ts_ns - t) / MS);
}

#[test]
fn a_look_that_never_comes_is_reported_as_undetermined_not_as_the_network() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 4 << 20, 1 << 20));
    r.ticks(t + 10 * MS, t + 2000 * MS);
    let first = r.first();
    assert_eq!(verdict(first), (StopOwner::Undetermined, StopCause::Undetermined));
    assert!(first.ts_ns - t <= (140 + 250 + 40) * MS);
    assert!(r.never_the_networks(), "{:?}", r.out);
}

/// Lab fuzz seed 7 runs 86 and 93: a receiver's ACKs 52 ms apart while its window closed were
/// reported network/no_ack.
#[test]
fn acks_seen_one_late_on_a_slow_ack_clock_are_no_stop_once_a_fresh_look_flushes_them() {
    // The fallback reports each ACK when the next arrives, every other one only: the daemon's last
    // delivery is 104-156 ms old at its ticks.
    let (mut r, t, acked) = Run::healthy(1000);
    r.ticks(t, t + 150 * MS);
    assert!(r.wants_snapshot(), "silence past 3/4 of the threshold asks for a look");
    r.tick(t + 170 * MS);
    assert!(r.out.is_empty(), "reported before the look it asked for: {:?}", r.out);
    // The look: the pending ACK of t + 104 ms flushed, then the snapshot itself. Two ACKs of
    // 75 kB each (the first never reported on its own): 1.4 MB/s, a tenth of the rate.
    r.see(t + 104 * MS, Body::Sample(tests_support::sample(acked + 150_000)));
    r.see(t + 175 * MS, snapshot(acked + 150_000, 30, 100_000, 1 << 20, 71_000));
    // Delivery at t + 104 ms: the quiet starts there (the ACKs that follow would go on moving it).
    r.ticks(t + 175 * MS, t + 225 * MS);
    assert!(r.out.is_empty(), "{:?}", r.out);

    // Real silence: the look shows nothing more delivered, and the stop is the network's.
    let (mut r, t, acked) = Run::healthy(1000);
    r.ticks(t, t + 150 * MS);
    assert!(r.wants_snapshot());
    r.see(t + 160 * MS, snapshot(acked, 30, 100_000, 1 << 20, 160_000));
    r.tick(t + 170 * MS);
    assert_eq!(
        verdict(r.first()),
        (StopOwner::Network, StopCause::NoAck),
        "reported at the first tick past the threshold"
    );
}

/// Lab fuzz seed 1 run 3: 4 segments per RTT, each acknowledged one RTT later, 12 MB waiting,
/// cwnd 2396 (the sending host held it back). Run 22: cwnd 4 without a loss, 4 segments per
/// 10 ms RTT, 3 MB waiting.
#[test]
fn a_sender_trickling_with_cwnd_and_window_to_spare_is_no_network_stop() {
    let trickle = |packets_out: u32, cwnd: u32| {
        let (mut r, mut t, mut acked) = Run::healthy(1000);
        // Every RTT (20 ms) an ACK for the 4 segments out; 12 MB wait; the window is open.
        for _ in 0..30 {
            t += 20 * MS;
            acked += 4 * 1448;
            let mut s = tests_support::sample(acked);
            (s.packets_out, s.cwnd, s.write_queue, s.snd_wnd) = (packets_out, cwnd, 12 << 20, 10 << 20);
            s.snd_nxt = s.snd_una.wrapping_add(packets_out * 1448);
            r.see_and_tick(t, Body::Sample(s));
        }
        r.out
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

/// Lab fuzz seed 23 run 44: cwnd 4 for 0.2 s without a loss, every ACK emptying the pipe.
#[test]
fn a_sender_whose_every_ack_empties_the_pipe_with_data_waiting_is_no_stop() {
    let (mut r, mut t, mut acked) = Run::healthy(1000);
    // Every RTT the 4 segments out are all acknowledged, 12 MB wait, the window is open.
    for _ in 0..30 {
        t += 20 * MS;
        acked += 4 * 1448;
        r.see_and_tick(t, drained(acked, 12 << 20, 10 << 20));
    }
    assert!(r.out.is_empty(), "the network held nothing back: {:?}", r.out);
}

/// Lab fuzz seed 1 run 39: an 8.5 s sender pause at 132 ms RTT, then cwnd 11 and growing, every
/// segment acknowledged an RTT after it left.
#[test]
fn a_sender_ramping_up_from_a_small_window_is_no_network_stop() {
    // After healthy delivery the sender starts again from cwnd 10 (as after an idle) at 132 ms
    // RTT: each RTT the ACKs acknowledge the last window and cwnd doubles.
    let ramp = |grows: bool| {
        let (mut r, mut t, mut acked) = Run::healthy(1000);
        let mut cwnd = 10u32;
        for _ in 0..6 {
            r.ticks(t, t + 130 * MS);
            t += 132 * MS;
            acked += u64::from(cwnd / 2) * 1448;
            let mut s = tests_support::sample(acked);
            (s.packets_out, s.cwnd, s.write_queue, s.snd_wnd, s.srtt_us) = (cwnd, cwnd, 12 << 20, 10 << 20, 132_000);
            s.snd_nxt = s.snd_una.wrapping_add(cwnd * 1448);
            r.see(t, Body::Sample(s));
            if grows {
                cwnd *= 2;
            }
        }
        r.out
    };
    let out = ramp(true);
    assert!(out.iter().all(|f| f.owner != Some(StopOwner::Network)), "a ramp is the sender's: {out:?}");
    // Half of a window that does not grow acknowledged per RTT: the network holds data back.
    let out = ramp(false);
    assert!(out.iter().any(|f| f.owner == Some(StopOwner::Network)), "{out:?}");
}

/// Lab fuzz seed 71 run 12 (20 ms RTT, reno): a receiver paused, and as its window opened again a
/// path MTU black hole began. The window's first burst was delivered in part, then nothing for
/// 7.9 s. The stop went on as one, reported the receiver's first and the network's after its
/// timeouts; the capture shows two stalls, the receiver's and then the network's.
#[test]
fn a_receivers_stall_whose_window_opens_into_a_network_stall_is_two_stops() {
    let (mut r, t, acked) = receivers_stop_of_400ms();
    // The window opens: a burst goes out, part of it is delivered, then nothing.
    let opened = t + 400 * MS;
    r.see_and_tick(opened, sample(acked, 80, 0, 1 << 20));
    let delivered = opened + 40 * MS;
    r.see_and_tick(delivered, sample(acked + 64_000, 80, 0, 1 << 20));
    r.see_and_tick(delivered + 10 * MS, sample(acked + 72_000, 80, 0, 1 << 20));
    let last = delivered + 10 * MS;
    r.three_timeouts(last);
    let (end, from) = receivers_then_networks(&r, t);
    assert_eq!(end, opened, "the receiver's stop ended when the window opened");
    assert_eq!(from, last, "the network's from the last delivery");
}

/// Lab fuzz seed 83 run 74 (6 ms RTT, bbr): a black hole began as a receiver's 0.88 s pause
/// ended, and the burst that refilled its window used all of it (65 segments in flight, no room
/// for another). The split above waited for room for a segment, so the receiver's stop went on
/// into the network's and the network's was dated 0.38 s early, from the receiver's.
#[test]
fn a_window_refilled_to_the_brim_then_silence_is_two_stops() {
    let (mut r, t, acked) = receivers_stop_of_400ms();
    let opened = t + 400 * MS;
    let full = |acked: u64, packets_out: u32| {
        let mut s = tests_support::sample(acked);
        (s.packets_out, s.snd_una, s.snd_nxt, s.snd_wnd) =
            (packets_out, 5000, 5000 + packets_out * 1448, packets_out * 1448);
        Body::Sample(s)
    };
    r.see_and_tick(opened, full(acked, 65));
    let last = opened + 10 * MS;
    r.see_and_tick(last, full(acked + 8 * 1448, 65));
    r.three_timeouts(last);
    let (end, from) = receivers_then_networks(&r, t);
    assert_eq!(end, opened, "the receiver's stop ended when the window opened");
    assert_eq!(from, last, "the network's from the last delivery");
}

/// Lab fuzz seed 101 run 31 (7 ms RTT, bbr): a path MTU black hole lifted, the backlog was
/// acknowledged, and 90 ms later an ACK of everything closed the window: the receiver had stopped
/// reading meanwhile. The last advance had left data in flight, so the silence after it read as a
/// stall inside the resume window, and the network's stop went on 1.7 s into the receiver's.
#[test]
fn a_window_closed_right_after_delivery_resumed_ends_the_networks_stop_where_it_resumed() {
    let (mut r, t, acked) = Run::healthy(1000);
    let last = r.three_timeouts(t);
    assert_eq!(r.last().owner, Some(StopOwner::Network), "{:?}", r.out);
    let back = last + 20 * MS;
    r.see_and_tick(back, sample(acked + 300_000, 80, 0, 1 << 20));
    r.see_and_tick(back + 40 * MS, sample(acked + 340_000, 80, 0, 1 << 20));
    r.see_and_tick(back + 50 * MS, drained(acked + 340_000, 3 << 20, 0));
    r.ticks(back + 50 * MS, back + 2000 * MS);
    let end = r.out.iter().rev().find(|f| f.owner == Some(StopOwner::Network)).expect("the network's stop");
    // Ended as delivery resumed (its last advance: the jump alone is no healthy rate yet).
    assert!(!end.ongoing && end_ns(end) <= back + 40 * MS, "ended where delivery resumed: {end:?}");
    assert!(r
        .out
        .iter()
        .filter(|f| f.start_ns > t + 10 * MS)
        .all(|f| f.owner != Some(StopOwner::Network) || f.start_ns <= back));
}

/// Lab fuzz seed 83 run 74 again (6 ms RTT, bbr), replayed: the window opened and the burst that
/// refilled it left between two looks, into a black hole; the first the daemon heard of it was
/// the timeout, which made the receiver's stop the network's from the receiver's start (0.6 s
/// early). The timeout dates the send: the receiver's stop ended there.
#[test]
fn a_timeout_after_the_window_was_seen_closed_and_empty_is_a_stop_of_its_own_from_the_send() {
    let (mut r, t, _) = receivers_stop_of_400ms();
    // The window opened unseen at 600 ms; 97 segments left and nothing came back.
    let sent = t + 600 * MS;
    let mut at = sent;
    for (i, wait) in [228u64, 456, 912].into_iter().enumerate() {
        r.ticks(at, sent + wait * MS);
        at = sent + wait * MS;
        let n = i as u32;
        r.see(at, Body::Rto(Rto { retransmits: n, backoff: n, ..rto(228_000, 1, 97) }));
    }
    r.ticks(at, at + 500 * MS);
    let (end, from) = receivers_then_networks(&r, t);
    // Dated from the first timeout less its 228 ms and a tail-loss probe's 2 srtt.
    assert!(from >= sent.saturating_sub(50 * MS) && from <= sent, "from {} ms", (from - t) / MS);
    assert_eq!(end, from);
}

/// Lab fuzz seed 73 run 13 (35 ms RTT, a stream losing 2 % on its own lane): the burst that
/// refilled a receiver's window after 14.6 s lost segments, and the cumulative ACK stood still
/// behind them for a stall's length while SACKs arrived. That was split off the receiver's stop as
/// a `slow_recovery` stop of the network's, where the capture shows no stall: only silence,
/// SACKed segments included, makes the stall after the window opened one of its own.
#[test]
fn holes_in_the_burst_that_refills_the_window_repaired_while_sacks_arrive_stay_the_receivers() {
    let (mut r, t, acked) = receivers_stop_of_400ms();
    let opened = t + 400 * MS;
    let mut s = tests_support::sample(acked);
    (s.delivered, s.packets_out) = (10_000, 300);
    r.see_and_tick(opened, Body::Sample(s));
    // The cumulative ACK stuck behind a hole for 200 ms while SACKs arrive and holes are resent.
    for k in 1..=4u32 {
        let at = opened + u64::from(k) * 50 * MS;
        r.see(at, Body::Retrans(retrans(CA_RECOVERY, 300, 300)));
        let mut s = tests_support::sample(acked);
        (s.delivered, s.sacked_out, s.packets_out, s.ca_state) = (10_000 + 60 * k, 60 * k, 300, CA_RECOVERY);
        r.see_and_tick(at, Body::Sample(s));
    }
    r.healthy_from(opened + 200 * MS, acked + 500_000, 500);
    assert!(r.out.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{:?}", r.out);
}

/// A connection whose receiver closed its window after 1 s of delivery, 400 ms ago: a receiver's
/// stop runs. Returns it, when the window closed (less 10 ms) and the bytes acknowledged.
fn receivers_stop_of_400ms() -> (Run, u64, u64) {
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 4 << 20, 0));
    r.ticks(t + 10 * MS, t + 400 * MS);
    assert_eq!(r.first().owner, Some(StopOwner::Receiver), "{:?}", r.out);
    (r, t, acked)
}

/// A receiver's stop (reported from before `t` + 10 ms) followed by the network's: every report of
/// the first is the receiver's and it ended, every later one the network's. Returns when the
/// receiver's ended and when the network's began.
fn receivers_then_networks(r: &Run, t: u64) -> (u64, u64) {
    let receivers: Vec<_> = r.out.iter().filter(|f| f.start_ns <= t + 10 * MS).collect();
    assert!(receivers.iter().all(|f| f.owner == Some(StopOwner::Receiver)), "{:?}", r.out);
    let end = receivers.last().expect("the receiver's stop");
    assert!(!end.ongoing, "{end:?}");
    let network: Vec<_> = r.out.iter().filter(|f| f.start_ns > t + 10 * MS).collect();
    assert!(!network.is_empty() && network.iter().all(|f| f.owner == Some(StopOwner::Network)), "{:?}", r.out);
    (end_ns(end), network[0].start_ns)
}
