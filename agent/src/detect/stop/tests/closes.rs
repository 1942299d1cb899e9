//! When a stop ends once the application has closed: looks alone show it, a stop outlives the
//! close while data waits for the path, and timeouts start one after it.
use super::*;
use crate::model::StateChange;

/// Lab fuzz seed 7 run 1: a sender closed 18 s into a stop across a 10 s outage with 68 segments
/// in flight, delivered by a timeout 4.9 s later.
#[test]
fn a_network_stop_outlives_the_close_until_a_look_shows_delivery() {
    let (mut r, t, acked) = Run::healthy(2000);
    let at = r.three_timeouts(t);
    assert!(r.out.iter().any(|f| f.ongoing && f.owner == Some(StopOwner::Network)), "{:?}", r.out);
    // The application closes (FIN_WAIT1) while 50 segments still wait for the path.
    let closed = at + 10 * MS;
    r.see(closed, Body::State(StateChange { old: 1, new: 4 }));
    r.ticks(closed, closed + 1000 * MS);
    assert!(r.out.iter().all(|f| f.ongoing), "the close ended a stop whose data was still in flight: {:?}", r.out);
    // A look a second later: nothing more delivered, still stopped.
    let age = |ts: u64| ((ts - t) / 1000) as u32;
    r.see(closed + 1000 * MS, snapshot(acked, 50, 100_000, 1 << 20, age(closed + 1000 * MS)));
    r.ticks(closed + 1000 * MS, closed + 2000 * MS);
    assert!(r.out.iter().all(|f| f.ongoing), "{:?}", r.out);
    // Delivery resumed at `resumed`; the next look shows everything delivered by then.
    let resumed = closed + 1500 * MS;
    r.see(closed + 2000 * MS, snapshot(acked + 3_000_000, 0, 0, 1 << 20, 500_000));
    let last = r.last();
    assert!(!last.ongoing, "{:?}", r.out);
    assert_eq!(last.owner, Some(StopOwner::Network));
    let end = end_ns(last);
    assert!(end.abs_diff(resumed) < MS, "ended {} ms from the delivery", end.abs_diff(resumed) / MS);

    // Without data outstanding the close ends the stop at once.
    let (mut r, t, acked) = Run::healthy(1000);
    r.see(t + 10 * MS, drained(acked, 300_000, 0));
    r.ticks(t + 10 * MS, t + 1000 * MS);
    assert!(r.out.iter().any(|f| f.ongoing && f.owner == Some(StopOwner::Receiver)), "{:?}", r.out);
    r.see(t + 1010 * MS, Body::State(StateChange { old: 1, new: 4 }));
    assert!(!r.last().ongoing, "a receiver's stop ends at the close: {:?}", r.out);
}

/// Lab fuzz seed 179 run 1: an HTTP server closed with megabytes unsent just as a backed-off
/// retransmission was acknowledged with 3.3 MB behind it; the next advance came 1.5 srtt later.
/// The look that shows the jump begins a resumption, confirmed over its window as before the
/// close: a stall inside it is the stop going on.
#[test]
fn after_the_close_a_resumption_is_confirmed_over_its_window_by_looks() {
    // Looks every 50 ms from the jump at `jump`, with the cumulative ACK moving at each but for
    // `gap_ms` after the jump (1 MB at once after that, as the hole it waited for fills, then
    // 100 kB each); returns where the stop ended and the jump.
    let end_after = |gap_ms: u64| -> (u64, u64) {
        let (mut r, t, acked) = Run::healthy(2000);
        let at = r.three_timeouts(t);
        let closed = at + 10 * MS;
        r.see(closed, Body::State(StateChange { old: 1, new: 4 }));
        r.ticks(closed, closed + 500 * MS);
        let jump = closed + 500 * MS;
        let mut a = acked + 3_000_000;
        r.see_and_tick(jump, snapshot(a, 50, 1 << 20, 1 << 20, 1000));
        assert!(r.out.iter().all(|f| f.ongoing), "ended at the jump, before its window: {:?}", r.out);
        let mut ts = jump;
        while ts < jump + 1000 * MS && r.out.iter().all(|f| f.ongoing) {
            ts += 50 * MS;
            let moving = ts - jump > gap_ms * MS;
            if moving {
                a += if ts - jump <= (gap_ms + 50) * MS { 1_000_000 } else { 100_000 };
            }
            let age = if moving { 1000 } else { ((ts - jump) / 1000) as u32 };
            r.see_and_tick(ts, snapshot(a, 50, 1 << 20, 1 << 20, age));
        }
        let last = r.last();
        assert!(!last.ongoing && last.owner == Some(StopOwner::Network), "{:?}", r.out);
        (end_ns(last), jump)
    };
    // Steady delivery from the jump: the stop ended there.
    let (end, jump) = end_after(0);
    assert!(end.abs_diff(jump) < 2 * MS, "ended {} ms from the jump", end.abs_diff(jump) / MS);
    // 300 ms with nothing after it (the threshold is 150 ms): the stop went on to the next advance.
    let (end, jump) = end_after(300);
    assert!(
        end.abs_diff(jump + 349 * MS) < 2 * MS,
        "ended {} ms after the jump, not at the advance 350 ms after it",
        end.saturating_sub(jump) / MS
    );
}

/// Lab fuzz seed 67 run 29: an HTTP server wrote its last 5 MB and closed (FIN_WAIT1), then an
/// 8.6 s outage held the download for 13.8 s, and nothing was reported: a closing connection was
/// never judged. Past the close only timeouts and looks tell; a timeout with nothing delivered
/// since is the network's stop, and a look that shows delivery ends it.
#[test]
fn a_connection_closed_with_data_outstanding_stops_by_its_timeouts() {
    let (mut r, t, acked) = Run::healthy(2000);
    let closed = t + 10 * MS;
    r.see(closed, Body::State(StateChange { old: 1, new: 4 }));
    r.ticks(closed, closed + 200 * MS);
    assert!(r.out.is_empty(), "silence after the close is no stop: {:?}", r.out);
    let first = closed + 220 * MS;
    r.see(first, Body::Rto(rto(220_000, 1, 88)));
    r.ticks(first, first + 100 * MS);
    let f = r.first();
    assert_eq!(verdict(f), (StopOwner::Network, StopCause::Rto), "{f:?}");
    assert!(f.start_ns >= t && f.start_ns < first, "dated after the last delivery, before the timeout: {}", f.start_ns);
    assert!(r.wants_snapshot() || r.out.iter().all(|f| f.ongoing), "looks are asked for while it lasts");
    // A look after the outage shows the data delivered, and the looks after it (every 30 ms while
    // a stop lasts) that delivery went on for the resume window: the stop ends where it resumed.
    let resumed = first + 2000 * MS;
    let mut a = acked + 3_000_000;
    r.see(resumed + 10 * MS, snapshot(a, 20, 0, 1 << 20, 10_000));
    for k in 1..=5 {
        a += 200_000;
        r.see(resumed + (10 + 30 * k) * MS, snapshot(a, 20, 0, 1 << 20, 5_000));
    }
    let last = r.last();
    assert!(!last.ongoing, "{:?}", r.out);
    assert!(end_ns(last).abs_diff(resumed) < MS, "ended {} ms from the delivery", end_ns(last).abs_diff(resumed) / MS);

    // The last window draining after the close, its tail resent by a probe and acknowledged at
    // once: no timeout, no stop.
    let (mut r, t, acked) = Run::healthy(2000);
    r.see(t + 10 * MS, Body::State(StateChange { old: 1, new: 4 }));
    r.see(t + 60 * MS, Body::Retrans(retrans(0, 80, 20)));
    r.ticks(t + 10 * MS, t + 600 * MS);
    r.see(t + 600 * MS, snapshot(acked + 100_000, 0, 0, 1 << 20, 500_000));
    r.ticks(t + 600 * MS, t + 1000 * MS);
    assert!(r.out.is_empty(), "{:?}", r.out);
}
