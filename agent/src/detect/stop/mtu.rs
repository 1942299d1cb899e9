//! Path MTU black holes: full-size segments retransmitted and never acknowledged while smaller ones
//! get through, and the kernel's MTU probing off, so nothing will ever shrink them.
//!
//! One connection alone cannot tell a black hole from an outage: both swallow every full-size
//! segment. What tells them apart is that the path still answers: the connection never had more
//! acknowledged than one of the segments now stuck (its handshake and small first messages passed,
//! no full-size segment ever did: a black hole from the start), or another connection of this host
//! to the same address delivered smaller segments since the stop began (and none as large).
use std::net::IpAddr;

use serde_json::{json, Value};

use super::conn::{Answer, Conn};
use crate::model::StopOwner;

/// Payload that fits any path of the family (IPv4's 576-byte minimum MTU, IPv6's 1280): segments
/// no larger never fall into a black hole.
const MIN_PAYLOAD_V4: u32 = 536;
const MIN_PAYLOAD_V6: u32 = 1220;

/// Which stops look for another connection's answer, and where.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wanted {
    pub netns: u32,
    pub remote: IpAddr,
    /// The stop's start: deliveries after it count.
    pub since: u64,
    pub stuck: u32,
}

impl Conn {
    /// The payload of the segments stuck in the network stop in progress, when they are the kind a
    /// black hole swallows: full-size retransmissions, timeouts, nothing delivered since, the
    /// kernel's segment size as large as they are (no "fragmentation needed" taught it a smaller
    /// path MTU) and its MTU probing off.
    fn stuck(&self) -> Option<u32> {
        let e = &self.ev;
        self.active?;
        if self.owner_so_far() != StopOwner::Network || e.rtos == 0 || e.acks > 0 || e.delivered > 0 {
            return None;
        }
        let min = if self.id.tuple.remote.ip().to_canonical().is_ipv4() { MIN_PAYLOAD_V4 } else { MIN_PAYLOAD_V6 };
        let stuck = e.rtx_seg_min;
        // Full-size at the kernel's present MSS (a FIN adds a byte); larger ones were sent before
        // it learnt a smaller path MTU.
        let full_size = stuck <= self.mss + 1 && u64::from(stuck) * 10 >= u64::from(self.mss) * 9;
        (e.mtu_probing == Some(0) && stuck > min && full_size).then_some(stuck)
    }

    /// A stop that looks like a black hole and lacks the proof that the path answers: another
    /// connection's delivery can give it.
    pub fn wants_answer(&self) -> Option<Wanted> {
        let stuck = self.stuck()?;
        (self.acked >= u64::from(stuck)).then(|| Wanted {
            netns: self.id.netns,
            remote: self.id.tuple.remote.ip().to_canonical(),
            since: self.active.unwrap_or(0),
            stuck,
        })
    }

    /// Whether `w` is about a connection to the same address as this one, in the same namespace.
    pub fn same_path(&self, w: &Wanted) -> bool {
        self.id.netns == w.netns && self.id.tuple.remote.ip().to_canonical() == w.remote
    }

    /// The stop in progress is a path MTU black hole: its evidence, the advice with it.
    pub fn mtu_blackhole(&self) -> Option<(Value, String)> {
        let stuck = self.stuck()?;
        let answer = match self.path_answer {
            // The kernel's bytes_acked counts the SYN: the payload is one byte less.
            _ if self.acked < u64::from(stuck) => Answer { largest: self.acked.saturating_sub(1) as u32, by: None },
            Some(a) if a.largest < stuck => a,
            _ => return None,
        };
        let v6 = !self.id.tuple.remote.ip().to_canonical().is_ipv4();
        let through = match answer.by {
            Some(t) => {
                format!("connection {t} delivered segments of at most {} bytes since the stop began", answer.largest)
            }
            None if answer.largest == 0 => "the handshake got through, no data segment ever did".into(),
            None => format!("only {} bytes were ever acknowledged, in segments smaller than these", answer.largest),
        };
        let evidence = json!({
            "stuck_segment_bytes": stuck,
            "largest_through_bytes": answer.largest,
            "through_by": answer.by.map(|t| t.to_string()),
            "mss": self.mss,
            "tcp_mtu_probing": self.ev.mtu_probing,
        });
        let advice = format!(
            "segments of {stuck} bytes to {} are retransmitted and never acknowledged while smaller ones get through ({through}), and no ICMP {} reaches this host: a path MTU black hole. \
             Set net.ipv4.tcp_mtu_probing=1 (with net.ipv4.tcp_base_mss=1024) in this namespace so the kernel shrinks segments that vanish; \
             let {} through on the path; or lower the tunnel or interface MTU, or clamp the MSS below {stuck} bytes (iptables TCPMSS --clamp-mss-to-pmtu)",
            self.id.tuple.remote.ip().to_canonical(),
            if v6 { "\"packet too big\"" } else { "\"fragmentation needed\"" },
            if v6 { "ICMPv6 type 2 (packet too big)" } else { "ICMP type 3 code 4 (fragmentation needed)" },
        );
        Some((evidence, advice))
    }
}
