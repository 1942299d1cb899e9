//! Connections that never became bulk: the kernel does not sample them; looks and loss records
//! show them, and timeouts in a row with data outstanding make their stop.
use super::*;
use crate::model::event::CA_LOSS;

/// CA state Open: a tail-loss probe.
const CA_OPEN: u8 = 0;

/// A look at a connection that is not bulk: `acked` bytes acknowledged, the last ACK `ack_age_ms`
/// ago, `packets_out` segments in flight and 60 kB waiting, in TCP state `state`, srtt 40 ms.
fn look(acked: u64, packets_out: u32, ack_age_ms: u64, state: u8) -> Body {
    let mut b = snapshot(acked, packets_out, 60_000, 1 << 20, (ack_age_ms * 1000) as u32);
    if let Body::Snapshot(s) = &mut b {
        (s.state, s.srtt_us) = (state, 40_000);
    }
    b
}

/// A resend of one full-size segment (1448 bytes) in CA state `ca`, the namespace's
/// tcp_mtu_probing `probing`.
pub(super) fn full_size_resend(ca: u8, probing: Option<u8>) -> Body {
    Body::Retrans(Retrans { seq: 1000, end_seq: 1000 + 1448, mtu_probing: probing, ..retrans(ca, 1, 10) })
}

/// The first RTT of a connection whose data never gets through, from `t0` (its handshake done and
/// 37 bytes acknowledged at t0 + 40 ms: 38 by the kernel's count, which includes the SYN): a
/// tail-loss probe, then timeouts of 240 and 480 ms (the second in a row at t0 + 760 ms), each
/// with its resend, a look between them. Ticks every 50 ms.
pub(super) fn never_delivered(r: &mut Run, t0: u64, probing: Option<u8>) {
    r.see(t0 + 80 * MS, full_size_resend(CA_OPEN, probing));
    r.ticks(t0 + 80 * MS, t0 + 280 * MS);
    r.see(t0 + 280 * MS, Body::Rto(rto(240_000, 10, 10)));
    r.see(t0 + 280 * MS, full_size_resend(CA_LOSS, probing));
    r.ticks(t0 + 280 * MS, t0 + 500 * MS);
    r.see(t0 + 500 * MS, look(38, 10, 460, 1));
    r.ticks(t0 + 500 * MS, t0 + 750 * MS);
    assert!(r.out.is_empty(), "one timeout is no stop of a connection not bulk: {:?}", r.out);
    r.see(t0 + 760 * MS, Body::Rto(Rto { retransmits: 1, backoff: 1, ..rto(480_000, 1, 10) }));
    r.see(t0 + 760 * MS, full_size_resend(CA_LOSS, probing));
    r.ticks(t0 + 750 * MS, t0 + 900 * MS);
}

/// `lab run mtu-blackhole-start`: the data connection's 16 segments (its initial window and 5
/// backed-off retransmissions) were never acknowledged, and nothing was reported: only bulk
/// connections were judged.
#[test]
fn a_connection_that_never_delivers_stops_at_its_second_timeout_in_a_row_and_ends_when_it_delivers() {
    let mut r = Run::new();
    let t0 = 1000 * MS;
    never_delivered(&mut r, t0, None);
    let first = r.first().clone();
    assert_eq!(verdict(&first), (StopOwner::Network, StopCause::Rto), "{first:?}");
    assert!(first.ongoing && first.ts_ns <= t0 + 800 * MS, "{first:?}");
    assert_eq!(first.start_ns, t0 + 40 * MS, "from the send the first timeout was armed by: {first:?}");
    assert_eq!(first.evidence["bytes_delivered_during"], 0);
    // The third timeout makes the path silent; then the path carries the window at last.
    r.see(t0 + 1720 * MS, Body::Rto(Rto { retransmits: 2, backoff: 2, ..rto(960_000, 1, 10) }));
    r.ticks(t0 + 1700 * MS, t0 + 1800 * MS);
    assert_eq!(verdict(r.last()).1, StopCause::PathSilent, "{:?}", r.out);
    assert!(r.wants_snapshot(), "the kernel does not sample it: looks tell when it delivers again");
    let delivered = t0 + 1800 * MS;
    r.see(delivered + 100 * MS, look(38 + 14_480, 0, 100, 1));
    r.see(delivered + 100 * MS, drained(38 + 14_480, 0, 1 << 20));
    r.ticks(delivered + 100 * MS, delivered + 500 * MS);
    let last = r.last();
    assert!(!last.ongoing, "{:?}", r.out);
    assert!(end_ns(last).abs_diff(delivered) <= 100 * MS, "ended at the delivery: {last:?}");
}

#[test]
fn one_timeout_that_repairs_a_short_exchange_is_no_stop() {
    let mut r = Run::new();
    let t0 = 1000 * MS;
    r.see(t0, look(5_000, 2, 10, 1));
    r.see(t0 + 250 * MS, Body::Rto(rto(240_000, 10, 2)));
    r.see(t0 + 250 * MS, full_size_resend(CA_LOSS, Some(0)));
    r.ticks(t0 + 250 * MS, t0 + 1000 * MS);
    // The resend is acknowledged and the exchange goes on; a later loss is repaired by one
    // timeout again.
    r.see(t0 + 1000 * MS, look(8_000, 2, 10, 1));
    r.ticks(t0 + 1000 * MS, t0 + 1250 * MS);
    r.see(t0 + 1250 * MS, Body::Rto(rto(240_000, 10, 2)));
    r.ticks(t0 + 1250 * MS, t0 + 3000 * MS);
    assert!(r.out.is_empty(), "{:?}", r.out);
}

#[test]
fn a_socket_retrying_its_syn_is_no_stop() {
    let mut r = Run::new();
    let mut at = 1000 * MS;
    for (n, wait) in [1000u64, 2000, 4000].into_iter().enumerate() {
        at += wait * MS;
        let n = n as u32;
        r.see(at, Body::Rto(Rto { retransmits: n, backoff: n, ..rto(wait * 1000, 1, 1) }));
        r.ticks(at, at + 100 * MS);
        if n == 1 {
            assert!(r.wants_snapshot(), "a look tells whether it is established");
            r.see(at + 20 * MS, look(0, 1, 0, 2));
        }
    }
    assert!(r.out.is_empty(), "{:?}", r.out);
}
