//! The stop detector's tests, on one connection (cookie 1, 20 ms srtt) driven record by record.
//! Where a randomized lab run found a rule, the test that reproduces it says which.
mod causes;
mod closes;
mod ends;
mod idles;
mod mtu;
mod not_bulk;
mod owners;
mod pacing;
mod sacked;

use super::{StopConfig, StopDetector};
use crate::detect::owner::StopOwner;
use crate::detect::tests_support;
use crate::model::event::Options;
use crate::model::event::{Rto, CA_RECOVERY};
use crate::model::{Body, ConnId, Event, Finding, Retrans, Snap, StopCause, Tuple};

const MS: u64 = 1_000_000;

/// The connection under test and what the detector reported about it.
struct Run {
    d: StopDetector,
    out: Vec<Finding>,
}

impl Run {
    /// A connection nothing was seen of yet.
    fn new() -> Run {
        Run { d: StopDetector::new(StopConfig::default()), out: Vec::new() }
    }

    /// A connection that delivered 25 MB/s for `ms` from time 0, with the time and the bytes
    /// acknowledged at the end of it.
    fn healthy(ms: u64) -> (Run, u64, u64) {
        let mut r = Run::new();
        let (t, acked) = r.healthy_from(0, 0, ms);
        (r, t, acked)
    }

    /// 25 MB/s for `ms` from `t0` and `acked0`: a sample every 50 ms, each followed by a tick.
    /// Returns the time and the bytes acknowledged at the end.
    fn healthy_from(&mut self, t0: u64, acked0: u64, ms: u64) -> (u64, u64) {
        let (mut t, mut acked) = (t0, acked0);
        while t < t0 + ms * MS {
            t += 50 * MS;
            acked += 1_250_000;
            self.see_and_tick(t, sample(acked, 80, 0, 1 << 20));
        }
        (t, acked)
    }

    /// A record of the connection at `at`.
    fn see(&mut self, at: u64, body: Body) {
        self.see_other(1, "10.0.0.1:4000-10.0.0.2:5201", at, body);
    }

    /// A record of another connection of the host, `cookie`, "local-remote", at `at`.
    fn see_other(&mut self, cookie: u64, tuple: &str, at: u64, body: Body) {
        let (local, remote) = tuple.split_once('-').unwrap();
        let tuple = Tuple { local: local.parse().unwrap(), remote: remote.parse().unwrap() };
        let conn = ConnId { cookie, netns: 1, tuple };
        self.d.observe(&Event { ts_ns: at, conn, body }, &mut self.out);
    }

    fn tick(&mut self, at: u64) {
        self.d.tick(at, &mut self.out);
    }

    /// A record at `at` and the tick right after it (a look per tick).
    fn see_and_tick(&mut self, at: u64, body: Body) {
        self.see(at, body);
        self.tick(at);
    }

    /// Ticks every 50 ms after `from` up to `to`.
    fn ticks(&mut self, from: u64, to: u64) {
        let mut t = from;
        while t < to {
            t += 50 * MS;
            self.tick(t);
        }
    }

    /// Ticks every `step_ms` after `from` up to `to`.
    fn ticks_every(&mut self, step_ms: u64, from: u64, to: u64) {
        let mut t = from;
        while t + step_ms * MS <= to {
            t += step_ms * MS;
            self.tick(t);
        }
    }

    /// Ticks after `from` up to `to` only when the detector is next due, as the daemon reads its
    /// ring buffer (`clock::next_tick`).
    fn ticks_when_due(&mut self, from: u64, to: u64) {
        let mut t = from;
        loop {
            t = crate::clock::next_tick(t, self.d.next_due().unwrap_or(u64::MAX));
            if t > to {
                return;
            }
            self.tick(t);
        }
    }

    /// Nothing arrives after `t`; timeouts back off 220, 440, 880 ms with 50 segments in flight.
    /// Returns the time of the last one.
    fn three_timeouts(&mut self, t: u64) -> u64 {
        let mut at = t;
        for (i, wait) in [220u64, 440, 880].into_iter().enumerate() {
            self.ticks(at, at + wait * MS);
            at += wait * MS;
            let n = i as u32;
            self.see(at, Body::Rto(Rto { retransmits: n, backoff: n, ..rto(wait * 1000, 1, 50) }));
        }
        at
    }

    fn wants_snapshot(&mut self) -> bool {
        self.d.wants_snapshot()
    }

    fn first(&self) -> &Finding {
        self.out.first().unwrap_or_else(|| panic!("no stop reported"))
    }

    fn last(&self) -> &Finding {
        self.out.last().unwrap_or_else(|| panic!("no stop reported"))
    }

    /// Every report has this owner.
    fn all_owned_by(&self, owner: StopOwner) -> bool {
        self.out.iter().all(|f| f.owner == Some(owner))
    }

    /// No report blames the network.
    fn never_the_networks(&self) -> bool {
        self.out.iter().all(|f| f.owner != Some(StopOwner::Network))
    }
}

/// Process and cause of a stop's report.
fn verdict(f: &Finding) -> (StopOwner, StopCause) {
    (f.owner.expect("a stop has an owner"), f.cause.stop().expect("a stop cause"))
}

/// The end of a stop that ended.
fn end_ns(f: &Finding) -> u64 {
    f.start_ns + (f.duration_s.expect("ended") * 1e9) as u64
}

/// A bulk sample: `acked` bytes acknowledged, cwnd, CA state and the peer's window.
fn sample(acked: u64, cwnd: u32, ca: u8, wnd: u32) -> Body {
    let mut s = tests_support::sample(acked);
    (s.cwnd, s.ca_state, s.snd_wnd) = (cwnd, ca, wnd);
    Body::Sample(s)
}

/// The state an ACK of everything sent leaves: nothing in flight, `unsent` bytes waiting, the
/// window it advertises.
fn drained(acked: u64, unsent: u32, wnd: u32) -> Body {
    let mut s = tests_support::sample(acked);
    (s.drained, s.packets_out, s.in_flight, s.snd_una, s.snd_nxt) = (true, 0, 0, 5000, 5000);
    (s.write_queue, s.snd_wnd) = (unsent, wnd);
    Body::Sample(s)
}

/// A snapshot of a SACK connection: bytes acknowledged, segments in flight, bytes waiting, the
/// peer's window and how long ago the last ACK came.
fn snapshot(acked: u64, packets_out: u32, unsent: u32, wnd: u32, last_ack_age_us: u32) -> Body {
    Body::Snapshot(Snap {
        state: 1,
        options: Options { sack: true, ..Default::default() },
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

/// A retransmission of one segment in CA state `ca`, with cwnd and segments in flight.
fn retrans(ca: u8, cwnd: u32, packets_out: u32) -> Retrans {
    Retrans { segs: 1, count: 1, ca_state: ca, cwnd, packets_out, ..Default::default() }
}

/// A timeout of `rto_us`, with cwnd and segments in flight.
fn rto(rto_us: u64, cwnd: u32, packets_out: u32) -> Rto {
    Rto { rto_us: rto_us as u32, cwnd, packets_out, ..Default::default() }
}

#[test]
fn a_clean_transfer_raises_nothing() {
    let (r, _, _) = Run::healthy(5000);
    assert!(r.out.is_empty(), "{:?}", r.out);
}
