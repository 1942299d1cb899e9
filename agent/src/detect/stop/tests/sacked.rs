//! Delivery behind a hole: SACKed segments count as the path delivering, as the capture's truth counts them.
use super::*;

/// A bulk sample with the cumulative ACK at `acked`, `delivered` segments delivered in all and
/// `sacked` of them SACKed above a hole, in Recovery.
fn behind_hole(acked: u64, delivered: u32, sacked: u32) -> Body {
    let mut s = tests_support::sample(acked);
    (s.delivered, s.sacked_out, s.ca_state, s.cwnd) = (delivered, sacked, CA_RECOVERY, 300);
    Body::Sample(s)
}

/// The lab's sndbuf-sysctl under load (mechanisms_named in CI): a burst of about a thousand drops
/// at the end of slow start, repaired over 0.38 s while SACKs kept arriving at the full rate, was
/// reported as a slow_recovery stop the capture contradicts. While SACKs arrive no stop starts;
/// once they stop too, one does, its clock from the last of them.
#[test]
fn segments_sacked_at_a_healthy_rate_behind_a_stuck_cumulative_ack_are_no_stop_until_they_stop() {
    let (mut r, mut t, acked) = Run::healthy(1000);
    r.see_and_tick(t, behind_hole(acked, 10_000, 0));
    let mut delivered = 10_000;
    for i in 1..=12u32 {
        t += 50 * MS;
        delivered += 600;
        r.see(t, Body::Retrans(retrans(CA_RECOVERY, 300, 800)));
        r.see_and_tick(t, behind_hole(acked, delivered, 600 * i));
    }
    assert!(r.out.is_empty(), "a stop while SACKs flow: {:?}", r.out);
    let last_sack = t;
    for _ in 0..12 {
        t += 50 * MS;
        r.see_and_tick(t, behind_hole(acked, delivered, 7200));
    }
    let f = r.first();
    assert_eq!(f.owner, Some(StopOwner::Network), "{:?}", f);
    assert_eq!(f.start_ns, last_sack, "the stop's clock starts at the last SACKed delivery");
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
