//! What a capture at the sender shows of each connection beyond its stalls: the RTT at loss episodes against the path's own, retransmissions, the largest window and flight, full-size segments left unacknowledged (the wire's evidence of loss and limit mechanisms).
use crate::pcap::{Seg, ACK, RST, SYN};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// One connection as the capture at its sender shows it.
#[derive(Debug, Clone, Default)]
pub struct Wire {
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    /// Data segments sent, and how many of them were retransmissions.
    pub sent: u64,
    pub retransmitted: u64,
    /// The smallest RTT sample (Karn's rule), seconds; 0 without one.
    pub min_rtt: f64,
    /// Loss episodes: (time of the first retransmission, the last RTT sample before it). A
    /// retransmission more than an RTT after the previous one starts a new episode.
    pub episodes: Vec<(f64, f64)>,
    /// Largest window the receiver advertised (scaled) and largest flight, bytes.
    pub max_rwnd: u64,
    pub max_flight: u64,
    /// The flight at each new data segment sent, bytes.
    flights: Vec<u64>,
    /// Bytes acknowledged.
    pub acked: u64,
    /// Every data segment: (time, payload, relative end sequence, a retransmission).
    segs: Vec<(f64, u32, u64, bool)>,
    /// Every advance of the cumulative ACK: (time, relative sequence acknowledged).
    acks: Vec<(f64, u64)>,
    isn: Option<u32>,
    ws: (Option<u8>, Option<u8>),
    max: u64,
    una: u64,
    last_rtt: f64,
    last_retx: f64,
    pending: Vec<(u64, f64)>,
}

fn rel(x: u32, isn: u32, near: u64) -> u64 {
    let off = u64::from(x.wrapping_sub(isn));
    let base = near & !0xffff_ffff;
    [base.wrapping_sub(1 << 32), base, base + (1 << 32)]
        .into_iter()
        .map(|b| b | off)
        .filter(|v| *v < (1 << 62))
        .min_by_key(|v| v.abs_diff(near))
        .unwrap_or(off)
}

impl Wire {
    fn local_seg(&mut self, s: &Seg) {
        if s.flags & SYN != 0 {
            (self.isn, self.ws.0, self.max, self.una) = (Some(s.seq), s.wscale, 1, 1);
            return;
        }
        let isn = *self.isn.get_or_insert(s.seq.wrapping_sub(1));
        if s.len == 0 {
            return;
        }
        let end = rel(s.seq, isn, self.max) + u64::from(s.len);
        let retx = end <= self.max;
        self.sent += 1;
        if retx {
            self.retransmitted += 1;
            self.pending.clear();
            let rtt = self.last_rtt.max(self.min_rtt);
            if self.episodes.is_empty() || s.t - self.last_retx > rtt.max(0.01) {
                self.episodes.push((s.t, self.last_rtt));
            }
            self.last_retx = s.t;
        } else {
            self.max = end;
            self.pending.push((end, s.t));
            self.flights.push(self.max.saturating_sub(self.una));
        }
        self.max_flight = self.max_flight.max(self.max.saturating_sub(self.una));
        self.segs.push((s.t, s.len, end, retx));
    }

    fn remote_seg(&mut self, s: &Seg) {
        if s.flags & SYN != 0 {
            self.ws.1 = s.wscale;
            return;
        }
        let Some(isn) = self.isn else { return };
        if s.flags & ACK == 0 {
            return;
        }
        let scale = match self.ws {
            (Some(_), Some(r)) => r,
            _ => 0,
        };
        self.max_rwnd = self.max_rwnd.max(u64::from(s.win) << scale);
        let a = rel(s.ack, isn, self.una).min(self.max.max(1));
        if a <= self.una {
            return;
        }
        if let Some(&(_, sent)) = self.pending.iter().rev().find(|(e, _)| *e <= a) {
            let r = (s.t - sent).max(0.0);
            self.last_rtt = r;
            self.min_rtt = if self.min_rtt == 0.0 { r } else { self.min_rtt.min(r) };
        }
        self.pending.retain(|(e, _)| *e > a);
        self.una = a;
        self.acked = a.saturating_sub(1);
        self.acks.push((s.t, a));
    }

    /// The median flight when new data left, bytes (0 without data).
    pub fn median_flight(&self) -> u64 {
        let mut f = self.flights.clone();
        f.sort_unstable();
        f.get(f.len() / 2).copied().unwrap_or(0)
    }

    /// The queueing delay at the losses: the median over loss episodes of the RTT sample before
    /// each above the path's own (the smallest sample), seconds. None without an episode.
    pub fn queueing_at_loss(&self) -> Option<f64> {
        let mut d: Vec<f64> =
            self.episodes.iter().filter(|e| e.1 > 0.0).map(|e| (e.1 - self.min_rtt).max(0.0)).collect();
        d.sort_by(f64::total_cmp);
        d.get(d.len() / 2).copied()
    }

    /// Inside [from, to]: data segments with more than `max_payload` bytes sent, how many of them
    /// were retransmissions, and whether the cumulative ACK passed the end of the first of them
    /// before `to` (a black hole never does).
    pub fn oversize(&self, from: f64, to: f64, max_payload: u32) -> (u64, u64, bool) {
        let big: Vec<&(f64, u32, u64, bool)> =
            self.segs.iter().filter(|x| x.0 >= from && x.0 < to && x.1 > max_payload).collect();
        let acked = big.first().is_some_and(|f| self.acks.iter().any(|a| a.0 < to && a.0 >= f.0 && a.1 >= f.2));
        (big.len() as u64, big.iter().filter(|x| x.3).count() as u64, acked)
    }

    /// The largest payload sent inside [from, to].
    pub fn largest(&self, from: f64, to: f64) -> u32 {
        self.segs.iter().filter(|x| x.0 >= from && x.0 < to).map(|x| x.1).max().unwrap_or(0)
    }
}

/// Every connection of `segs` whose one end `is_sender` says is a lab sender.
pub fn wires(segs: &[Seg], is_sender: impl Fn(&IpAddr) -> bool) -> Vec<Wire> {
    let mut map: BTreeMap<(SocketAddr, SocketAddr), Wire> = BTreeMap::new();
    let mut order: Vec<&Seg> = segs.iter().collect();
    order.sort_by(|a, b| a.t.total_cmp(&b.t));
    for s in order {
        let local = is_sender(&s.src.ip());
        if !local && !is_sender(&s.dst.ip()) {
            continue;
        }
        let key = if local { (s.src, s.dst) } else { (s.dst, s.src) };
        let w = map.entry(key).or_default();
        (w.local, w.remote) = (Some(key.0), Some(key.1));
        if s.flags & RST != 0 {
            continue;
        }
        if local {
            w.local_seg(s);
        } else {
            w.remote_seg(s);
        }
    }
    map.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(t: f64, out: bool, seq: u32, ack: u32, win: u16, len: u32) -> Seg {
        let (l, r): (SocketAddr, SocketAddr) = ("10.71.1.2:40000".parse().unwrap(), "10.72.1.2:5201".parse().unwrap());
        let (src, dst) = if out { (l, r) } else { (r, l) };
        Seg { t, src, dst, seq, ack, flags: ACK, win, len, mss: None, wscale: None, sack: vec![], ts: None }
    }

    fn sender(ip: &IpAddr) -> bool {
        ip.to_string().starts_with("10.71.")
    }

    #[test]
    fn rtt_at_losses_windows_and_oversize_segments_are_read_from_the_capture() {
        let mut v = vec![];
        let mut syn = seg(0.0, true, 99, 0, 1000, 0);
        (syn.flags, syn.wscale) = (SYN, Some(7));
        let mut sa = seg(0.01, false, 500, 100, 1000, 0);
        (sa.flags, sa.wscale) = (SYN | ACK, Some(7));
        v.extend([syn, sa]);
        // Ten 1448-byte segments per 10 ms round; the RTT grows from 10 ms by 2 ms a round.
        let mut seq = 100u32;
        for k in 0..10 {
            let t = 0.02 + k as f64 * 0.05;
            for _ in 0..10 {
                v.push(seg(t, true, seq, 501, 1000, 1448));
                seq += 1448;
            }
            v.push(seg(t + 0.01 + 0.002 * k as f64, false, 501, seq, 2000, 0));
        }
        // A loss episode after the RTT reached 28 ms: the first segment of the last round resent.
        v.push(seg(0.6, true, seq - 14480, 501, 1000, 1448));
        // 1400-byte segments at 0.7 s never acknowledged (a black hole below 1400).
        v.push(seg(0.7, true, seq, 501, 1000, 1448));
        v.push(seg(0.9, true, seq, 501, 1000, 1448));
        let w = wires(&v, sender);
        assert_eq!(w.len(), 1);
        let w = &w[0];
        assert!((w.min_rtt - 0.01).abs() < 1e-9, "{}", w.min_rtt);
        assert_eq!(w.episodes.len(), 2, "{:?}", w.episodes);
        assert!((w.queueing_at_loss().unwrap_or(0.0) - 0.018).abs() < 1e-6, "{:?}", w.episodes);
        assert_eq!(w.max_rwnd, 2000 << 7);
        assert_eq!((w.sent, w.retransmitted), (103, 2));
        assert_eq!(w.oversize(0.65, 1.0, 1400), (2, 1, false));
        assert!(w.oversize(0.0, 0.1, 1400).2, "the first round was acknowledged");
        assert_eq!(w.largest(0.65, 1.0), 1448);
        assert_eq!(w.median_flight(), 5 * 1448, "a round of ten leaves one to ten segments out");
    }
}
