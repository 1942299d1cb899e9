//! One watched connection: live numbers, goodput bins, chart points, stop and limits, and what
//! holds it back. Pure: folded from events by `WatchState`.

use super::ring::Ring;
use crate::model::{ConnId, Process, Sample, Snap};

/// Chart points are kept at this resolution (the last value in each slot wins).
pub const POINT_RES_NS: u64 = 10_000_000;
/// Longest time window the charts can show, seconds.
pub const MAX_WINDOW_S: u32 = 120;
const POINT_CAP: usize = (MAX_WINDOW_S as u64 * 1_000_000_000 / POINT_RES_NS) as usize;
/// Goodput bins are one smoothed RTT wide, clamped to this range.
pub const MIN_BIN_NS: u64 = 5_000_000;
pub const MAX_BIN_NS: u64 = 2_000_000_000;
const BIN_CAP: usize = (MAX_WINDOW_S as u64 * 1_000_000_000 / MIN_BIN_NS) as usize;

/// One goodput bin: bytes newly acknowledged in `[t_end - width, t_end)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bin {
    pub t_end_ns: u64,
    pub width_ns: u32,
    pub bytes: u32,
}

impl Bin {
    pub fn bps(&self) -> f64 {
        if self.width_ns == 0 {
            return 0.0;
        }
        self.bytes as f64 * 8e9 / self.width_ns as f64
    }
}

/// One chart slot: the scoreboard (segments) and sequence progress (MSS from the first seen snd_una).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Point {
    pub t_ns: u64,
    pub cwnd: f32,
    pub ssthresh: f32,
    pub in_flight: f32,
    pub lost: f32,
    pub sacked: f32,
    pub retrans: f32,
    pub una: f32,
    pub nxt: f32,
    /// First SACK block of the last ACK in the slot, NaN when it had none.
    pub sack_lo: f32,
    pub sack_hi: f32,
}

/// The latest numbers of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Live {
    pub ts_ns: u64,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub packets_out: u32,
    pub in_flight: u32,
    pub lost_out: u32,
    pub sacked_out: u32,
    pub retrans_out: u32,
    pub ca_state: u8,
    pub srtt_us: u32,
    pub rto_us: u32,
    pub mss: u32,
    pub snd_wnd: u32,
    pub write_queue: u32,
    /// The kernel's delivery-rate estimate, bits per second.
    pub delivery_rate_bps: f64,
}

/// A stop, as the detector reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct StopView {
    pub start_ns: u64,
    pub last_ns: u64,
    pub duration_s: Option<f64>,
    pub ongoing: bool,
    pub cause: crate::model::Cause,
    /// Whose stop: the network's, the receiver's, or not decided yet.
    pub owner: Option<crate::model::StopOwner>,
    pub evidence: String,
    /// What on the path holds it, where the detector could tell: the name, its evidence in one
    /// line, and the advice.
    pub mechanism: Option<(crate::model::Mechanism, String, String)>,
}

/// Shares of busy time over the last snapshot interval, from the kernel's chrono stats.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Chrono {
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// Over the last interval, 0..=1.
    pub rwnd_share: f64,
    pub sndbuf_share: f64,
}

/// Everything shown about one connection.
#[derive(Debug, Clone)]
pub struct ConnView {
    pub id: ConnId,
    pub process: Option<Process>,
    pub snap: Option<Snap>,
    pub live: Live,
    pub has_live: bool,
    pub first_ns: u64,
    pub last_ns: u64,
    pub closed_ns: Option<u64>,
    pub goodput: Ring<Bin>,
    pub points: Ring<Point>,
    /// Best delivery rate seen, bits per second.
    pub max_rate_bps: f64,
    pub retrans_segs: u64,
    pub lost_retrans: u64,
    pub rtos: u64,
    pub total_bytes: u64,
    pub first_delivery_ns: Option<u64>,
    pub last_delivery_ns: u64,
    pub stop: Option<StopView>,
    pub stops: u32,
    pub stop_causes: Vec<crate::model::Cause>,
    pub limit: Option<(crate::model::Cause, String)>,
    pub chrono: Option<Chrono>,
    /// Round starts (ns), the last ROUNDS_KEPT: the send phase of a group's streams.
    pub rounds: Vec<u64>,
    base_una: Option<u32>,
    una_abs: u64,
    last_una: u32,
    last_bytes_acked: u64,
    bin_start_ns: u64,
    bin_width_ns: u64,
    bin_bytes: u64,
}

/// Round starts kept per connection (at 10 ms RTT, the last 10-20 s).
const ROUNDS_KEPT: usize = 2048;

fn clamp_bin(srtt_us: u32) -> u64 {
    if srtt_us == 0 {
        return 100_000_000;
    }
    (srtt_us as u64 * 1000).clamp(MIN_BIN_NS, MAX_BIN_NS)
}

impl ConnView {
    pub(super) fn new(id: ConnId, ts: u64) -> Self {
        ConnView {
            id,
            process: None,
            snap: None,
            live: Live::default(),
            has_live: false,
            first_ns: ts,
            last_ns: ts,
            closed_ns: None,
            goodput: Ring::new(BIN_CAP),
            points: Ring::new(POINT_CAP),
            max_rate_bps: 0.0,
            retrans_segs: 0,
            lost_retrans: 0,
            rtos: 0,
            total_bytes: 0,
            first_delivery_ns: None,
            last_delivery_ns: ts,
            stop: None,
            stops: 0,
            stop_causes: Vec::new(),
            limit: None,
            chrono: None,
            rounds: Vec::new(),
            base_una: None,
            una_abs: 0,
            last_una: 0,
            last_bytes_acked: 0,
            bin_start_ns: ts,
            bin_width_ns: 0,
            bin_bytes: 0,
        }
    }

    pub fn closed(&self) -> bool {
        self.closed_ns.is_some()
    }

    pub fn mss(&self) -> u32 {
        match (self.live.mss, &self.snap) {
            (m, _) if m > 0 => m,
            (_, Some(s)) if s.mss > 0 => s.mss,
            _ => 1448,
        }
    }

    /// Close every goodput bin that ended before `now`.
    pub(super) fn advance_bins(&mut self, now: u64) {
        if self.bin_width_ns == 0 {
            // The first bin starts with the connection's first event, even when a tick comes first.
            self.bin_start_ns = self.bin_start_ns.min(now);
            self.bin_width_ns = clamp_bin(self.live.srtt_us);
            return;
        }
        let mut pushed = 0;
        while now >= self.bin_start_ns + self.bin_width_ns {
            if pushed >= BIN_CAP {
                // A silence longer than the whole ring: skip ahead, the ring is all zeros already.
                let w = self.bin_width_ns;
                self.bin_start_ns = now - (now - self.bin_start_ns) % w;
                self.bin_bytes = 0;
                break;
            }
            let end = self.bin_start_ns + self.bin_width_ns;
            self.goodput.push(Bin {
                t_end_ns: end,
                width_ns: self.bin_width_ns as u32,
                bytes: self.bin_bytes.min(u32::MAX as u64) as u32,
            });
            pushed += 1;
            self.bin_start_ns = end;
            self.bin_bytes = 0;
            self.bin_width_ns = clamp_bin(self.live.srtt_us);
        }
    }

    /// Count `bytes` acknowledged at `ts` in the bin of that time: an event that arrives after
    /// its bin was closed (the reader was busy) still lands where it belongs, not in a later bin.
    fn delivered(&mut self, ts: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let closed = (ts < self.bin_start_ns)
            .then(|| self.goodput.iter_mut().rev().take_while(|b| b.t_end_ns > ts).last())
            .flatten()
            .filter(|b| b.t_end_ns - b.width_ns as u64 <= ts);
        match closed {
            Some(b) => b.bytes = (b.bytes as u64 + bytes).min(u32::MAX as u64) as u32,
            None => self.bin_bytes += bytes,
        }
        self.total_bytes += bytes;
        self.last_delivery_ns = ts;
        if self.first_delivery_ns.is_none() {
            self.first_delivery_ns = Some(ts);
        }
    }

    /// Sequence number as MSS units since the first snd_una seen (unwrapped across 4 GiB).
    pub(super) fn rel(&self, seq: u32) -> f32 {
        let off = seq.wrapping_sub(self.last_una) as i32 as i64;
        ((self.una_abs as i64 + off) as f64 / self.mss() as f64) as f32
    }

    fn track_una(&mut self, una: u32) {
        match self.base_una {
            None => {
                self.base_una = Some(una);
                self.last_una = una;
            }
            Some(_) => {
                let d = una.wrapping_sub(self.last_una);
                if d < 1 << 31 {
                    self.una_abs += d as u64;
                    self.last_una = una;
                }
            }
        }
    }

    fn point(&mut self, ts: u64, una: u32, nxt: u32, sack: Option<(u32, u32)>) {
        self.track_una(una);
        let l = self.live;
        let (slo, shi) = match sack {
            Some((a, b)) => (self.rel(a), self.rel(b)),
            None => (f32::NAN, f32::NAN),
        };
        let p = Point {
            t_ns: ts,
            cwnd: l.cwnd as f32,
            ssthresh: l.ssthresh.min(1 << 24) as f32,
            in_flight: l.in_flight as f32,
            lost: l.lost_out as f32,
            sacked: l.sacked_out as f32,
            retrans: l.retrans_out as f32,
            una: self.rel(una),
            nxt: self.rel(nxt),
            sack_lo: slo,
            sack_hi: shi,
        };
        match self.points.last_mut() {
            Some(last) if ts / POINT_RES_NS == last.t_ns / POINT_RES_NS => {
                let keep_sack = p.sack_lo.is_nan() && !last.sack_lo.is_nan();
                let (lo, hi) = (last.sack_lo, last.sack_hi);
                *last = p;
                if keep_sack {
                    last.sack_lo = lo;
                    last.sack_hi = hi;
                }
            }
            _ => self.points.push(p),
        }
    }

    pub(super) fn on_sample(&mut self, ts: u64, s: &Sample) {
        if s.round && self.rounds.last().is_none_or(|&t| t < ts) {
            if self.rounds.len() >= ROUNDS_KEPT {
                self.rounds.drain(..ROUNDS_KEPT / 2);
            }
            self.rounds.push(ts);
        }
        self.live = Live {
            ts_ns: ts,
            cwnd: s.cwnd,
            ssthresh: s.ssthresh,
            packets_out: s.packets_out,
            in_flight: s.in_flight,
            lost_out: s.lost_out,
            sacked_out: s.sacked_out,
            retrans_out: s.retrans_out,
            ca_state: s.ca_state,
            srtt_us: s.srtt_us,
            rto_us: s.rto_us,
            mss: s.mss,
            snd_wnd: s.snd_wnd,
            write_queue: s.write_queue,
            delivery_rate_bps: s.delivery_rate_bps() * 8.0,
        };
        self.has_live = true;
        self.max_rate_bps = self.max_rate_bps.max(self.live.delivery_rate_bps);
        self.advance_bins(ts);
        let bytes = if s.bytes_acked > 0 {
            let d = s.bytes_acked.saturating_sub(self.last_bytes_acked);
            let first = self.last_bytes_acked == 0;
            self.last_bytes_acked = self.last_bytes_acked.max(s.bytes_acked);
            if first {
                0
            } else {
                d
            }
        } else if self.base_una.is_some() {
            let d = s.snd_una.wrapping_sub(self.last_una);
            if d < 1 << 31 {
                d as u64
            } else {
                0
            }
        } else {
            0
        };
        self.delivered(ts, bytes);
        self.point(ts, s.snd_una, s.snd_nxt, s.sack.first().copied());
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_board(
        &mut self,
        ts: u64,
        cwnd: u32,
        ssthresh: u32,
        packets: u32,
        lost: u32,
        sacked: u32,
        retrans: u32,
        una: u32,
    ) {
        let l = &mut self.live;
        l.ts_ns = ts;
        l.cwnd = cwnd;
        l.ssthresh = ssthresh;
        l.packets_out = packets;
        l.lost_out = lost;
        l.sacked_out = sacked;
        l.retrans_out = retrans;
        l.in_flight = (packets + retrans).saturating_sub(lost + sacked);
        self.has_live = true;
        self.advance_bins(ts);
        let nxt = una.wrapping_add(packets.saturating_mul(self.mss()));
        let nxt = match self.points.last() {
            Some(_) if self.base_una.is_some() => nxt,
            _ => una,
        };
        self.point(ts, una, nxt, None);
    }

    pub(super) fn on_snapshot(&mut self, ts: u64, s: &Snap) {
        if self.process.is_none() && s.process.pid != 0 {
            self.process = Some(s.process.clone());
        }
        if let Some(prev) = &self.chrono {
            let busy = s.busy_us.saturating_sub(prev.busy_us);
            let share = |now: u64, before: u64| {
                if busy == 0 {
                    0.0
                } else {
                    (now.saturating_sub(before) as f64 / busy as f64).min(1.0)
                }
            };
            self.chrono = Some(Chrono {
                busy_us: s.busy_us,
                rwnd_limited_us: s.rwnd_limited_us,
                sndbuf_limited_us: s.sndbuf_limited_us,
                rwnd_share: share(s.rwnd_limited_us, prev.rwnd_limited_us),
                sndbuf_share: share(s.sndbuf_limited_us, prev.sndbuf_limited_us),
            });
        } else {
            self.chrono = Some(Chrono {
                busy_us: s.busy_us,
                rwnd_limited_us: s.rwnd_limited_us,
                sndbuf_limited_us: s.sndbuf_limited_us,
                ..Chrono::default()
            });
        }
        let rate = s.delivery_rate_bps() * 8.0;
        self.max_rate_bps = self.max_rate_bps.max(rate);
        let sampled = self.has_live && self.live.ts_ns + 2_000_000_000 > ts && self.base_una.is_some();
        if !sampled {
            // No per-ACK samples for this connection: the snapshot is all there is.
            self.live.srtt_us = s.srtt_us;
            self.live.rto_us = s.rto_us;
            self.live.mss = s.mss;
            self.live.ca_state = s.ca_state;
            self.live.snd_wnd = s.snd_wnd;
            self.live.write_queue = s.write_queue;
            self.live.delivery_rate_bps = rate;
            if s.bytes_acked > self.last_bytes_acked {
                let d = if self.last_bytes_acked == 0 { 0 } else { s.bytes_acked - self.last_bytes_acked };
                self.last_bytes_acked = s.bytes_acked;
                self.advance_bins(ts);
                self.delivered(ts, d);
            }
            self.on_board(ts, s.cwnd, s.ssthresh, s.packets_out, s.lost_out, s.sacked_out, s.retrans_out, s.snd_una);
        }
        self.snap = Some(s.clone());
    }
}
