//! Idles: an application or receiver idle is no stop, and the stop clock of data sent after one
//! runs from when that data left, however late the daemon learns of it.
use super::*;
use crate::model::event::CaState;

/// Issue 11: a 0.17 s application idle of http.server, ticked only after the next ACK, was
/// reported as a network stop.
#[test]
fn an_idle_the_ticks_missed_does_not_count_towards_a_stop() {
    // The ACK that empties the pipe leaves nothing to send; the daemon ticks again only after the
    // application wrote again and that data's first ACK came (a starved daemon): the idle was no
    // stop, and the new data has been out for one srtt only.
    let resumed = |acked_then: u64| {
        let (mut r, t, acked) = Run::healthy(1000);
        r.see(t + 10 * MS, drained(acked, 0, 1 << 20));
        let mut s = tests_support::sample(acked + acked_then);
        s.packets_out = 2000;
        r.see(t + 200 * MS, Body::Sample(s));
        (r, t, acked)
    };
    let (mut r, t, acked) = resumed(2896);
    r.ticks(t + 200 * MS, t + 260 * MS);
    assert!(r.out.is_empty(), "an application idle seen late is no stop: {:?}", r.out);
    r.healthy_from(t + 260 * MS, acked + 2896, 1000);
    assert!(r.out.is_empty(), "{:?}", r.out);
    // The same data never acknowledged is a network stop, timed from when it was sent.
    let (mut r, t, _) = resumed(0);
    r.ticks(t + 200 * MS, t + 1000 * MS);
    let first = r.first();
    assert_eq!(first.owner, Some(StopOwner::Network));
    assert!(first.start_ns >= t + 150 * MS, "start {} vs {}", first.start_ns, t + 180 * MS);
}

/// Lab fuzz seed 23 run 46: a 0.2 s zero window, then the refilling burst's first ACKs 0.1 s
/// after it left, was reported as a network stop dated from the window's closing.
#[test]
fn a_short_zero_window_then_the_refilling_burst_is_no_network_stop() {
    let (mut r, t, acked) = Run::healthy(1000);
    // The last ACK empties the pipe and closes the window for 100 ms (under the 150 ms threshold).
    r.see(t + 10 * MS, drained(acked, 4 << 20, 0));
    r.ticks(t + 10 * MS, t + 110 * MS);
    // The window opened unseen at 110 ms and a burst left; the next look, 60 ms later, has its
    // first ACK only: data out for one srtt, not a stop since the window closed.
    let mut s = tests_support::sample(acked + 1448);
    s.packets_out = 500;
    r.see_and_tick(t + 170 * MS, Body::Sample(s));
    r.healthy_from(t + 170 * MS, acked + 1448, 1000);
    assert!(r.out.is_empty(), "{:?}", r.out);
}

/// CI fuzz slice seed 2026 run 6 (10 ms path): the ACK that emptied the pipe closed the window for
/// 0.18 s; the window update that opened it moved the kernel's next sample 50 ms on, and the first
/// record after the refilling burst left was its fast retransmission, 100 segments in flight. The
/// stop clock still ran from the window's closing, so at its threshold that record made it a
/// network `no_ack` stop 10 ms after the burst's first ACK.
#[test]
fn a_zero_window_then_a_fast_retransmit_of_the_refilling_burst_is_no_network_stop() {
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 4 << 20, 0));
    r.ticks_every(10, t + 10 * MS, t + 130 * MS);
    // The window opened unseen at 130 ms; the burst's fast retransmission at 150 ms.
    r.see_and_tick(t + 150 * MS, Body::Retrans(retrans(CA_RECOVERY, 100, 100)));
    r.ticks_every(10, t + 150 * MS, t + 230 * MS);
    assert!(r.out.is_empty(), "{:?}", r.out);
    let mut s = tests_support::sample(acked + 50 * 1448);
    s.packets_out = 60;
    r.see_and_tick(t + 240 * MS, Body::Sample(s));
    r.healthy_from(t + 240 * MS, acked + 50 * 1448, 500);
    assert!(r.never_the_networks(), "{:?}", r.out);
}

/// An idle of 1.5 s ticked every 50 ms, then data sent at `resumed` into an outage: no ACK, only
/// `resend` at `resumed + after_ms`, seen after a tick that still thought the connection idle.
/// Returns the first stop and `resumed`.
fn first_stop_after_idle_resend(resend: Body, after_ms: u64, looked: bool) -> (Finding, u64) {
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 20 * MS, drained(acked + 100_000, 0, 1 << 22));
    let resumed = t + 1520 * MS;
    r.ticks(t + 20 * MS, resumed);
    r.tick(resumed + (after_ms - 10) * MS);
    if looked {
        // A periodic snapshot shows the burst in flight, nothing acknowledged since the idle.
        r.see(resumed + (after_ms - 5) * MS, snapshot(acked + 100_000, 92, 0, 1 << 22, 1_500_000));
    }
    assert!(r.out.is_empty(), "{:?}", r.out);
    r.see(resumed + after_ms * MS, resend);
    r.ticks(resumed + after_ms * MS, resumed + 600 * MS);
    (r.first().clone(), resumed)
}

/// Lab fuzz seed 23 run 1: a sender resumed into a reverse outage, its stop dated 0.28 s late;
/// run 82: a burst into an outage whose first sign was a tail-loss probe; seed 31 run 39: the
/// same after a snapshot showed the burst in flight. Seed 67 run 31 (175 ms path, a black hole):
/// the probe carried new data and re-armed the timer, and the stop was dated from the probe, 0.54 s
/// late: a first timeout with no resend before it comes 2 srtt + rto after the send.
#[test]
fn data_sent_into_an_outage_after_an_idle_is_dated_from_the_send_its_first_resend_reveals() {
    // The first timeout: a probe with new data 2 srtt (40 ms) after the send re-armed the timer.
    let timeout = Body::Rto(rto(210_000, 1, 500));
    let (first, resumed) = first_stop_after_idle_resend(timeout.clone(), 250, false);
    assert_eq!(first.owner, Some(StopOwner::Network));
    assert_eq!(first.start_ns, resumed, "dated from the send the timer was armed by");
    // A tail-loss probe in CA state Open, 2 srtt after the last send.
    let probe = Body::Retrans(retrans(0, 10, 10));
    let (first, resumed) = first_stop_after_idle_resend(probe.clone(), 40, false);
    assert_eq!(first.owner, Some(StopOwner::Network));
    assert_eq!(first.start_ns, resumed, "dated from the send the probe timer was armed by");
    // The same when a snapshot showed the data in flight before the resend.
    for (resend, after_ms) in [(timeout.clone(), 250), (probe, 40)] {
        let (first, resumed) = first_stop_after_idle_resend(resend, after_ms, true);
        assert_eq!(first.start_ns, resumed, "dated from the send after a look that showed it in flight");
    }
    // Without SACK the kernel sends no probe: the first timeout comes rto after the send.
    let (mut r, t, acked) = Run::healthy(1000);
    let mut plain = match snapshot(acked, 0, 0, 1 << 22, 10_000) {
        Body::Snapshot(s) => s,
        _ => unreachable!(),
    };
    plain.options.sack = false;
    r.see(t + 10 * MS, Body::Snapshot(plain));
    r.see(t + 20 * MS, drained(acked + 100_000, 0, 1 << 22));
    let resumed = t + 1520 * MS;
    r.ticks(t + 20 * MS, resumed + 200 * MS);
    r.see(resumed + 210 * MS, timeout);
    r.ticks(resumed + 210 * MS, resumed + 600 * MS);
    assert_eq!(r.first().start_ns, resumed, "no SACK, no probe: {:?}", r.first());
}

/// Lab fuzz seed 23 run 56: a 2 Mbit/s sender's burst crossing 1 MiB after an idle the kernel did
/// not report was reported as a network stop dated from the burst before.
#[test]
fn a_connection_becoming_bulk_after_an_idle_starts_its_stop_clock_then() {
    let mut r = Run::new();
    let burst = |r: &mut Run, t: u64, acked: u64, packets_out: u32| {
        let mut s = tests_support::sample(acked);
        (s.srtt_us, s.packets_out, s.write_queue) = (12_000, packets_out, 113_936 + packets_out * 1448);
        r.see_and_tick(t, Body::Sample(s));
    };
    // Bursts below 1 MiB; the last one's fast retransmits, then its pipe-emptying ACK, which the
    // kernel does not report for a connection not bulk yet.
    burst(&mut r, 0, 800_000, 20);
    burst(&mut r, 50 * MS, 850_000, 20);
    burst(&mut r, 100 * MS, 917_542, 29);
    r.see(110 * MS, Body::Retrans(retrans(CA_RECOVERY, 0, 29)));
    r.ticks(100 * MS, 1000 * MS);
    // The next burst crosses 1 MiB: its first sample is the connection's first as a bulk one.
    burst(&mut r, 1000 * MS, 1_050_042, 11);
    burst(&mut r, 1050 * MS, 1_101_450, 18);
    assert!(r.out.is_empty(), "an idle before the connection was bulk is no stop: {:?}", r.out);
}

/// Lab fuzz seed 67 run 95 (20 ms RTT, bbr): after a 6 s sender pause the kernel restarted from its
/// initial window, the ramp lost a segment and delivered 0.38 MB/s in Recovery for 0.23 s, under 5 %
/// of the 33 MB/s before the pause: reported as a `slow_recovery` stop where the capture shows
/// delivery throughout. After such an idle the old rate is no yardstick until delivery reaches its
/// share of it again.
#[test]
fn the_ramp_after_a_long_idle_losing_a_segment_is_no_stop() {
    let ramp = |idle_ms: u64| {
        let (mut r, t, acked) = Run::healthy(1000);
        r.see(t + 10 * MS, drained(acked, 0, 1 << 22));
        r.ticks(t + 10 * MS, t + idle_ms * MS);
        let mut at = t + idle_ms * MS;
        let mut a = acked;
        // 20 kB every 50 ms (0.4 MB/s against the 25 MB/s before), one retransmission, Recovery.
        for k in 0..12 {
            at += 50 * MS;
            a += 20_000;
            if k == 2 {
                r.see(at, Body::Retrans(retrans(CA_RECOVERY, 20, 30)));
            }
            r.see_and_tick(at, sample(a, 20, if k >= 2 { CA_RECOVERY } else { 0 }, 1 << 22));
        }
        r
    };
    let r = ramp(2000);
    assert!(r.out.is_empty(), "{:?}", r.out);
    // Without the idle the same slow delivery is a stop: the rate before is the yardstick.
    let r = ramp(0);
    assert!(r.out.iter().any(|f| f.owner == Some(StopOwner::Network)), "{:?}", r.out);
}

/// Lab fuzz seed 2026 run 6 (CI, 10 ms path, reno): the sender paused 0.45 s; resumed, its first
/// window lost a segment, and the paused receiver acknowledged only every 50 ms. The fallback's
/// samples, one ACK late, showed 66 kB by 57 ms after the send, over a rate window reaching back
/// into the idle: 0.13 MB/s, "almost nothing", and a `slow_recovery` stop dated from the resumption
/// where the capture shows 1.4 MB/s throughout. A rate is measured from when data left again.
#[test]
fn the_first_window_after_an_idle_is_judged_from_when_it_left_not_from_before_the_idle() {
    let resumed = |after_send: &[(u64, u64)]| {
        let (mut r, t, acked) = Run::healthy(1000);
        r.see(t + 10 * MS, drained(acked, 0, 1 << 22));
        let resumed = t + 460 * MS;
        r.ticks(t + 10 * MS, resumed);
        let (mut a, mut last) = (acked, resumed);
        for &(ms, bytes) in after_send {
            // Ticks every 10 ms until the sample comes (each samples an ACK at `ms`, seen 20 ms on).
            let seen = resumed + (ms + 20) * MS;
            while last + 10 * MS < seen {
                last += 10 * MS;
                r.tick(last);
            }
            last = seen;
            a += bytes;
            if bytes == 0 {
                r.see(seen - 5 * MS, Body::Retrans(retrans(CA_RECOVERY, 20, 46)));
            }
            let mut s = tests_support::sample(a);
            (s.packets_out, s.cwnd, s.write_queue) = (46, 20, 1_450_000 + 46 * 1448);
            r.see_and_tick(seen, Body::Sample(s));
        }
        (r, last, a)
    };
    // 4 segments one srtt after the send, 66 kB by 70 ms, a loss repaired, 190 kB by 190 ms.
    let (mut r, at, a) = resumed(&[(0, 5792), (50, 60_816), (80, 0), (170, 189_688)]);
    assert!(r.out.is_empty(), "delivery from the send on is healthy: {:?}", r.out);
    r.healthy_from(at, a, 500);
    assert!(r.out.is_empty(), "{:?}", r.out);
    // The first window's first ACK, then nothing but a fast retransmission: the network's stop.
    let (mut r, at, _) = resumed(&[(0, 5792), (80, 0)]);
    r.ticks(at, at + 500 * MS);
    assert_eq!(r.first().owner, Some(StopOwner::Network), "{:?}", r.out);
}

/// A sample of a 165 ms path with 12 MB waiting behind a 10 MB window: bytes acknowledged,
/// segments in flight, cwnd, CA state; `drained` for an ACK that left nothing in flight.
fn probing_rtt(acked: u64, packets_out: u32, cwnd: u32, ca: u8, drained: bool) -> Body {
    let mut s = tests_support::sample(acked);
    (s.srtt_us, s.packets_out, s.in_flight, s.cwnd, s.ca_state) = (165_000, packets_out, packets_out, cwnd, ca);
    (s.write_queue, s.snd_wnd, s.drained) = (12 << 20, 10 << 20, drained);
    Body::Sample(s)
}

/// Lab fuzz seed 167 run 5 (bbr, 165 ms, 24 s of zero window): when the window opened, BBR's
/// RTT filter had expired and it held its window at 4 segments for two round trips, each flight
/// acknowledged in full with 12 MB waiting. Then its 4,000-segment burst left, and one RTT later
/// a loss in it put the connection in Recovery. The first record of the burst came 0.5 s after the
/// last healthy delivery, past the 0.43 s threshold, and the daemon reported a 0.73 s network
/// `slow_recovery` stop: the network had held nothing until the burst left.
#[test]
fn small_flights_acknowledged_in_full_then_a_burst_recovering_a_loss_is_no_network_stop() {
    let stopped = |emptied: bool| {
        let (mut r, t, acked) = Run::healthy(1000);
        let flight = |k: u64| acked + k * 4 * 1448;
        // Two rounds of 4 segments, each acknowledged in full (or, unseen, with 4 more out).
        let out = if emptied { 0 } else { 4 };
        r.see(t + 165 * MS, probing_rtt(flight(1), out, 4, 0, emptied));
        r.ticks_every(20, t + 165 * MS, t + 330 * MS);
        r.see(t + 330 * MS, probing_rtt(flight(2), out, 4, 0, emptied));
        r.ticks_every(20, t + 330 * MS, t + 490 * MS);
        // The burst's first ACKs one RTT after it left, a hole in it, a fast retransmit.
        r.see(t + 495 * MS, probing_rtt(flight(2) + 23_000, 4025, 8806, 0, false));
        let recovery = CaState { old: 0, new: CA_RECOVERY, cwnd: 8806, packets_out: 4025, ..Default::default() };
        r.see(t + 496 * MS, Body::CaState(recovery));
        r.see_and_tick(t + 497 * MS, Body::Retrans(retrans(CA_RECOVERY, 8806, 4022)));
        r.ticks_every(20, t + 497 * MS, t + 530 * MS);
        r.see(t + 535 * MS, probing_rtt(flight(2) + 71_000, 4979, 4018, CA_RECOVERY, false));
        r.ticks_every(20, t + 535 * MS, t + 700 * MS);
        // The hole repaired: the cumulative ACK jumps, and delivery is healthy from there.
        r.healthy_from(t + 700 * MS, flight(2) + 6_700_000, 500);
        r
    };
    let r = stopped(true);
    assert!(r.out.is_empty(), "{:?}", r.out);
    // Without a look that found the pipe empty, the network's clock runs from the last healthy
    // delivery, and the burst's loss makes it a network stop.
    let r = stopped(false);
    assert_eq!(r.first().owner, Some(StopOwner::Network), "{:?}", r.out);
}
