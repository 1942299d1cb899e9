//! When time must pass: the ticks the detector asks for (the daemon reads its ring buffer only
//! then), and stops that come out the same whether ticks come every 20 ms or only when due.
use super::*;
use crate::model::event::CA_LOSS;

/// A bulk connection delivering is due at three quarters of its threshold past its last healthy
/// delivery (the fresh look a stop would ask for), tick by tick while a stop runs, and not at all
/// once a look shows it has nothing left to send.
#[test]
fn a_bulk_connection_is_due_at_its_ask_while_it_delivers_tick_by_tick_while_stopped_and_never_when_idle() {
    let (mut r, t, acked) = Run::healthy(1000);
    // 20 ms srtt: the threshold is max(2 x 20 + 100, 150) = 150 ms; three quarters of it 112.5 ms.
    assert_eq!(r.d.next_due(), Some(t + 112_500_000), "due at the ask after the last healthy sample");
    r.ticks_when_due(t, t + 1000 * MS);
    assert!(!r.out.is_empty(), "the silence became a stop: {:?}", r.out);
    assert_eq!(r.first().start_ns, t, "{:?}", r.first());
    let now = t + 1000 * MS;
    r.tick(now);
    assert_eq!(r.d.next_due(), Some(now), "a stop in progress is watched tick by tick");

    let (mut r, t, _) = Run::healthy(1000);
    r.see(t + 10 * MS, snapshot(acked, 0, 0, 1 << 20, 10_000));
    r.tick(t + 20 * MS);
    assert_eq!(r.d.next_due(), None, "nothing to send: only a record can start its clock");
}

/// A connection that is not bulk restarts its clock at every tick until it resends; ticks now come
/// only when due, 200 ms apart while it sends nothing, so the first resend restarts it where a
/// tick just before it would have: without that, its stop was dated from a tick up to 200 ms before
/// its data left.
#[test]
fn a_stop_of_a_connection_not_bulk_starts_where_ticks_every_20_ms_start_it_when_ticks_come_only_when_due() {
    let black_hole = |paced: bool| {
        let mut r = Run::new();
        let t0 = 1000 * MS;
        let drive = |r: &mut Run, from: u64, to: u64| {
            if paced {
                r.ticks_when_due(from, to)
            } else {
                r.ticks_every(20, from, to)
            }
        };
        // Established, nothing in flight, then its first full-size segments are never delivered.
        let mut idle = snapshot(38, 0, 0, 1 << 20, 10_000);
        if let Body::Snapshot(s) = &mut idle {
            s.srtt_us = 40_000;
        }
        r.see(t0 - 250 * MS, idle);
        drive(&mut r, t0 - 250 * MS, t0 + 80 * MS);
        r.see(t0 + 80 * MS, not_bulk::full_size_resend(0, None));
        drive(&mut r, t0 + 80 * MS, t0 + 280 * MS);
        r.see(t0 + 280 * MS, Body::Rto(rto(240_000, 10, 10)));
        r.see(t0 + 280 * MS, not_bulk::full_size_resend(CA_LOSS, None));
        drive(&mut r, t0 + 280 * MS, t0 + 760 * MS);
        r.see(t0 + 760 * MS, Body::Rto(Rto { retransmits: 1, backoff: 1, ..rto(480_000, 1, 10) }));
        r.see(t0 + 760 * MS, not_bulk::full_size_resend(CA_LOSS, None));
        drive(&mut r, t0 + 760 * MS, t0 + 1200 * MS);
        r.first().clone()
    };
    let (fine, paced) = (black_hole(false), black_hole(true));
    assert_eq!(verdict(&paced), verdict(&fine), "{paced:?}\n{fine:?}");
    assert_eq!(paced.start_ns, fine.start_ns, "{paced:?}\n{fine:?}");
    assert!(paced.ts_ns <= fine.ts_ns + 20 * MS, "reported within a tick of the same: {paced:?}\n{fine:?}");
}
