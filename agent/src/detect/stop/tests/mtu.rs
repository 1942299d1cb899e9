//! Path MTU black holes: full-size segments never acknowledged while smaller ones get through,
//! with the kernel's MTU probing off; never an outage, nor a path that taught the kernel its MTU.
use super::not_bulk::{full_size_resend, never_delivered};
use super::*;
use crate::model::event::CA_LOSS;
use crate::model::Mechanism;

/// The same remote host as the connection under test, another port: iperf3's control connection.
const CONTROL: &str = "10.0.0.1:4001-10.0.0.2:5201";

/// `lab run mtu-blackhole-start`: the handshake and 37 bytes got through, no full-size segment did.
#[test]
fn a_black_hole_from_the_first_segment_is_named_in_the_first_report_with_what_got_through() {
    let mut r = Run::new();
    never_delivered(&mut r, 1000 * MS, Some(0));
    let first = r.first();
    assert_eq!(first.mechanism, Some(Mechanism::MtuBlackhole), "{first:?}");
    let e = &first.evidence["mtu_blackhole"];
    assert_eq!((e["stuck_segment_bytes"].as_u64(), e["largest_through_bytes"].as_u64()), (Some(1448), Some(37)), "{e}");
    assert_eq!(e["tcp_mtu_probing"], 0);
    let advice = first.evidence["advice"].as_str().unwrap_or_default();
    assert!(advice.contains("net.ipv4.tcp_mtu_probing=1") && advice.contains("ICMP type 3 code 4"), "{advice}");

    // With MTU probing on, the kernel itself shrinks what vanishes: a stop, not named so.
    let mut r = Run::new();
    never_delivered(&mut r, 1000 * MS, Some(1));
    assert!(!r.out.is_empty() && r.out.iter().all(|f| f.mechanism.is_none()), "{:?}", r.out);
}

/// A bulk transfer whose path stops carrying its full-size segments: three timeouts, each resend
/// full-size and unanswered (the outage's signature too).
fn full_size_silence(probing: Option<u8>) -> (Run, u64, u64) {
    let (mut r, t, acked) = Run::healthy(2000);
    let mut at = t;
    for (i, wait) in [220u64, 440, 880].into_iter().enumerate() {
        r.ticks(at, at + wait * MS);
        at += wait * MS;
        let n = i as u32;
        r.see(at, Body::Rto(Rto { retransmits: n, backoff: n, ..rto(wait * 1000, 1, 50) }));
        r.see(at, full_size_resend(CA_LOSS, probing));
    }
    (r, at, acked)
}

/// `lab run mtu-blackhole`: at 3 s the next link's MTU went to 1200 with its ICMP filtered; the
/// stop was reported `no_ack -> rto -> path_silent` and nothing said why, while iperf3's control
/// connection to the same host exchanged its results in segments of at most 323 bytes.
#[test]
fn a_black_hole_mid_transfer_is_named_once_another_connection_to_the_host_delivers_smaller_segments() {
    let (mut r, at, _) = full_size_silence(Some(0));
    r.see_other(2, CONTROL, 100 * MS, snapshot(200, 0, 0, 1 << 20, 1000));
    r.ticks(at, at + 1000 * MS);
    assert!(r.out.iter().all(|f| f.mechanism.is_none()), "alone it is an outage: {:?}", r.out);
    let reports = r.out.len();
    // The control connection's closing exchange: 296 bytes more acknowledged, then its close.
    r.see_other(2, CONTROL, at + 1000 * MS, snapshot(496, 0, 0, 1 << 20, 20_000));
    r.ticks(at + 1000 * MS, at + 1100 * MS);
    let named = &r.out[reports..];
    assert_eq!(named.len(), 1, "one report more, naming it: {named:?}");
    assert_eq!((named[0].mechanism, named[0].ongoing), (Some(Mechanism::MtuBlackhole), true));
    let e = &named[0].evidence["mtu_blackhole"];
    assert_eq!(
        (e["stuck_segment_bytes"].as_u64(), e["largest_through_bytes"].as_u64()),
        (Some(1448), Some(296)),
        "{e}"
    );
    assert_eq!(e["through_by"], "10.0.0.1:4001-10.0.0.2:5201");
}

#[test]
fn no_black_hole_is_named_over_an_outage_a_path_that_carries_full_segments_or_probing_on() {
    // The other connection went to another host: nothing about this path.
    let (mut r, at, _) = full_size_silence(Some(0));
    r.see_other(2, "10.0.0.1:4001-10.0.0.3:5201", 100 * MS, snapshot(200, 0, 0, 1 << 20, 1000));
    r.see_other(2, "10.0.0.1:4001-10.0.0.3:5201", at, snapshot(496, 0, 0, 1 << 20, 20_000));
    r.ticks(at, at + 500 * MS);
    assert!(!r.out.is_empty() && r.out.iter().all(|f| f.mechanism.is_none()), "{:?}", r.out);

    // Another connection to the host delivers full-size segments meanwhile: the path carries them.
    let (mut r, at, _) = full_size_silence(Some(0));
    r.see_other(2, CONTROL, 100 * MS, snapshot(200, 0, 0, 1 << 20, 1000));
    r.see_other(2, CONTROL, at - 100 * MS, snapshot(200 + 3000, 0, 0, 1 << 20, 20_000));
    r.see_other(3, "10.0.0.1:4002-10.0.0.2:5201", 100 * MS, snapshot(1 << 20, 10, 0, 1 << 20, 1000));
    r.see_other(3, "10.0.0.1:4002-10.0.0.2:5201", at, snapshot(3 << 20, 10, 0, 1 << 20, 1000));
    r.ticks(at, at + 500 * MS);
    assert!(r.out.iter().all(|f| f.mechanism.is_none()), "{:?}", r.out);

    // MTU probing on, or unknown (a recording without it): not named.
    for probing in [Some(1), None] {
        let (mut r, at, _) = full_size_silence(probing);
        r.see_other(2, CONTROL, 100 * MS, snapshot(200, 0, 0, 1 << 20, 1000));
        r.see_other(2, CONTROL, at, snapshot(496, 0, 0, 1 << 20, 20_000));
        r.ticks(at, at + 500 * MS);
        assert!(r.out.iter().all(|f| f.mechanism.is_none()), "{probing:?}: {:?}", r.out);
    }
}

/// `lab run mtu-pmtud`: the router's ICMP reaches the sender, which lowers its MSS; segments
/// larger than it that are still resent are no black hole (the kernel knows the path's MTU).
#[test]
fn no_black_hole_is_named_once_the_kernel_lowered_its_segment_size() {
    let (mut r, at, acked) = full_size_silence(Some(0));
    let mut s = snapshot(acked, 50, 100_000, 1 << 20, 1_000_000);
    if let Body::Snapshot(s) = &mut s {
        s.mss = 1148;
    }
    r.see(at + 10 * MS, s);
    r.see_other(2, CONTROL, 100 * MS, snapshot(200, 0, 0, 1 << 20, 1000));
    r.see_other(2, CONTROL, at + 20 * MS, snapshot(496, 0, 0, 1 << 20, 20_000));
    r.ticks(at, at + 500 * MS);
    assert!(!r.out.is_empty() && r.out.iter().all(|f| f.mechanism.is_none()), "{:?}", r.out);
}
