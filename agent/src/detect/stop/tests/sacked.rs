//! Delivery behind holes: SACKed segments show the path delivering while holes fill one by one;
//! a cumulative ACK stuck behind one is a stop all the same.
use super::*;

/// A bulk sample with the cumulative ACK at `acked`, `delivered` segments delivered in all and
/// `sacked` of them SACKed above a hole, in Recovery.
fn behind_hole(acked: u64, delivered: u32, sacked: u32) -> Body {
    let mut s = tests_support::sample(acked);
    (s.delivered, s.sacked_out, s.ca_state, s.cwnd) = (delivered, sacked, CA_RECOVERY, 300);
    Body::Sample(s)
}

/// The lab's sndbuf-sysctl under load (mechanisms_named in CI): a burst of about a thousand drops
/// at the end of slow start was repaired over 0.38 s, the cumulative ACK moving a hole at a time
/// while SACKs kept arriving at the full rate, and was reported as a slow_recovery stop the
/// capture contradicts. While SACKs arrive at a healthy rate each advance of the cumulative ACK,
/// however small, restarts the stop clock.
#[test]
fn holes_repaired_one_by_one_while_sacks_arrive_at_a_healthy_rate_are_no_stop() {
    let (mut r, mut t, mut acked) = Run::healthy(1000);
    r.see_and_tick(t, behind_hole(acked, 10_000, 0));
    let mut delivered = 10_000;
    for i in 1..=12u32 {
        t += 50 * MS;
        delivered += 600;
        acked += 1448;
        r.see(t, Body::Retrans(retrans(CA_RECOVERY, 300, 800)));
        r.see_and_tick(t, behind_hole(acked, delivered, 600 * i));
    }
    assert!(r.out.is_empty(), "a stop while SACKs flow: {:?}", r.out);
}

/// Lab fuzz seed 71 run 62 (212 ms RTT, a deep queue): SACKs arrived for 0.24 s behind a hole
/// that never filled, then a forward outage stopped everything. The stop was dated from the last
/// SACK, 0.25 s after the capture's start: the cumulative ACK's last advance. A cumulative ACK
/// stuck for the threshold is a stop, SACKs or not, and its clock runs from that advance.
#[test]
fn a_cumulative_ack_stuck_behind_one_hole_is_a_stop_from_its_last_advance_though_sacks_arrive() {
    let (mut r, mut t, acked) = Run::healthy(1000);
    r.see_and_tick(t, behind_hole(acked, 10_000, 0));
    let stuck = t;
    let mut delivered = 10_000;
    for i in 1..=12u32 {
        t += 50 * MS;
        delivered += 600;
        r.see(t, Body::Retrans(retrans(CA_RECOVERY, 300, 800)));
        r.see_and_tick(t, behind_hole(acked, delivered, 600 * i));
    }
    let f = r.first();
    assert_eq!(f.owner, Some(StopOwner::Network), "{:?}", f);
    assert_eq!(f.start_ns, stuck, "the stop's clock starts at the cumulative ACK's last advance");
}

/// Without SACK the kernel counts each duplicate ACK as a delivered segment: a hole repaired one
/// per RTT behind a stream of duplicate ACKs stays a stop (no SACKed segment on the scoreboard).
#[test]
fn duplicate_acks_without_sack_do_not_count_as_delivery() {
    let (mut r, mut t, acked) = Run::healthy(1000);
    let mut delivered = 10_000;
    for _ in 0..12 {
        t += 50 * MS;
        delivered += 600;
        r.see(t, Body::Retrans(retrans(CA_RECOVERY, 300, 800)));
        r.see_and_tick(t, behind_hole(acked, delivered, 0));
    }
    assert_eq!(verdict(r.first()).0, StopOwner::Network, "{:?}", r.out);
}
