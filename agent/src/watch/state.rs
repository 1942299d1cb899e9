//! What the watch view shows, folded from Events and Findings: pure (no IO, no clock, no terminal).
//!
//! Times are the events' CLOCK_MONOTONIC nanoseconds; `now` advances with events and ticks.
//! Ring buffers are bounded and reach their capacity once, so folding an event or a tick does not
//! allocate in the steady state (log lines and snapshots, which are rare, do).
use std::collections::VecDeque;

use serde::Serialize;

use crate::model::record::{ca_state_name, CA_LOSS, CA_RECOVERY};
use crate::model::{Body, ConnId, Event, Filter, Finding, FindingKind, Owner, Sample, Snap};

/// What `run` consumes: events and findings of the matching connections, and the time.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchInput {
    Event(Event),
    Finding(Finding),
    /// CLOCK_MONOTONIC now, in nanoseconds; lets charts move while a stopped connection is silent.
    Tick(u64),
}

/// Chart points are kept at this resolution (the last value in each slot wins).
pub const POINT_RES_NS: u64 = 10_000_000;
/// Longest time window the charts can show, seconds.
pub const MAX_WINDOW_S: u32 = 120;
const POINT_CAP: usize = (MAX_WINDOW_S as u64 * 1_000_000_000 / POINT_RES_NS) as usize;
/// Goodput bins are one smoothed RTT wide, clamped to this range.
pub const MIN_BIN_NS: u64 = 5_000_000;
pub const MAX_BIN_NS: u64 = 2_000_000_000;
const BIN_CAP: usize = (MAX_WINDOW_S as u64 * 1_000_000_000 / MIN_BIN_NS) as usize;
const LOG_CAP: usize = 200;
/// Connections beyond this many are counted, not shown.
pub const MAX_CONNS: usize = 32;
/// Window steps for the +/- keys, seconds.
pub const WINDOW_STEPS: [u32; 8] = [1, 2, 5, 10, 20, 30, 60, 120];

/// A bounded FIFO: pushing onto a full ring drops the oldest item.
#[derive(Debug, Clone)]
pub struct Ring<T> {
    buf: VecDeque<T>,
    cap: usize,
}

impl<T> Ring<T> {
    pub fn new(cap: usize) -> Self {
        Ring { buf: VecDeque::with_capacity(cap.min(1024)), cap }
    }
    pub fn push(&mut self, v: T) {
        if self.buf.len() == self.cap {
            self.buf.pop_front();
        }
        self.buf.push_back(v);
    }
    pub fn last(&self) -> Option<&T> {
        self.buf.back()
    }
    pub fn last_mut(&mut self) -> Option<&mut T> {
        self.buf.back_mut()
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.buf.iter()
    }
}

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
    pub cause: String,
    pub evidence: String,
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
    pub owner: Option<Owner>,
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
    pub stop_causes: Vec<String>,
    pub limit: Option<(String, String)>,
    pub chrono: Option<Chrono>,
    base_una: Option<u32>,
    una_abs: u64,
    last_una: u32,
    last_bytes_acked: u64,
    bin_start_ns: u64,
    bin_width_ns: u64,
    bin_bytes: u64,
}

fn clamp_bin(srtt_us: u32) -> u64 {
    if srtt_us == 0 {
        return 100_000_000;
    }
    (srtt_us as u64 * 1000).clamp(MIN_BIN_NS, MAX_BIN_NS)
}

impl ConnView {
    fn new(id: ConnId, ts: u64) -> Self {
        ConnView {
            id,
            owner: None,
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
    fn advance_bins(&mut self, now: u64) {
        if self.bin_width_ns == 0 {
            self.bin_start_ns = now;
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

    fn delivered(&mut self, ts: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.bin_bytes += bytes;
        self.total_bytes += bytes;
        self.last_delivery_ns = ts;
        if self.first_delivery_ns.is_none() {
            self.first_delivery_ns = Some(ts);
        }
    }

    /// Sequence number as MSS units since the first snd_una seen (unwrapped across 4 GiB).
    fn rel(&self, seq: u32) -> f32 {
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

    fn on_sample(&mut self, ts: u64, s: &Sample) {
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
    fn on_board(&mut self, ts: u64, cwnd: u32, ssthresh: u32, packets: u32, lost: u32, sacked: u32, retrans: u32, una: u32) {
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

    fn on_snapshot(&mut self, ts: u64, s: &Snap) {
        if self.owner.is_none() && s.owner.pid != 0 {
            self.owner = Some(s.owner.clone());
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

    /// Goodput over the bins that ended in `(end - span, end]`, bits per second.
    pub fn goodput_bps(&self, end_ns: u64, span_ns: u64) -> f64 {
        let (mut bytes, mut width) = (0u64, 0u64);
        for b in self.goodput.iter().rev() {
            if b.t_end_ns > end_ns {
                continue;
            }
            if b.t_end_ns + span_ns <= end_ns {
                break;
            }
            bytes += b.bytes as u64;
            width += b.width_ns as u64;
        }
        if width == 0 {
            0.0
        } else {
            bytes as f64 * 8e9 / width as f64
        }
    }

    /// Mean goodput from the first delivery to the last event, bits per second.
    pub fn mean_goodput_bps(&self) -> f64 {
        let start = self.first_delivery_ns.unwrap_or(self.first_ns);
        let end = self.closed_ns.unwrap_or(self.last_ns).max(self.last_delivery_ns);
        if end <= start {
            return 0.0;
        }
        self.total_bytes as f64 * 8e9 / (end - start) as f64
    }

    /// Goodput relative to the best delivery rate the kernel measured (0 when unknown).
    pub fn efficiency(&self, goodput_bps: f64) -> f64 {
        let max = self.max_rate_bps;
        if max <= 0.0 {
            0.0
        } else {
            (goodput_bps / max).min(1.0)
        }
    }

    /// Data outstanding yet nothing delivered for more than 4 RTTs and 200 ms: how long, in ns.
    pub fn stalled_ns(&self, now: u64) -> Option<u64> {
        if self.closed() || (self.live.packets_out == 0 && self.live.write_queue == 0) {
            return None;
        }
        let quiet = now.saturating_sub(self.last_delivery_ns);
        let rtt = self.live.srtt_us as u64 * 1000;
        (quiet > 200_000_000 && quiet > 4 * rtt).then_some(quiet)
    }

    /// What holds the connection back now, most telling first, written into `out`.
    pub fn holds_back(&self, now: u64, out: &mut Vec<Reason>) {
        out.clear();
        if let Some(s) = self.stop.as_ref().filter(|s| s.ongoing) {
            out.push(Reason::Stop { secs: now.saturating_sub(s.start_ns) as f64 / 1e9 });
        } else if let Some(q) = self.stalled_ns(now) {
            let rtt = (self.live.srtt_us as u64).max(1) * 1000;
            out.push(Reason::Stalled { secs: q as f64 / 1e9, rtts: q / rtt });
        }
        if self.live.ca_state == CA_LOSS || self.live.ca_state == CA_RECOVERY {
            out.push(Reason::LossRecovery { state: ca_state_name(self.live.ca_state), cwnd: self.live.cwnd });
        }
        if let Some(c) = &self.chrono {
            if c.rwnd_share >= 0.1 {
                out.push(Reason::ReceiveWindow { share: c.rwnd_share });
            }
            if c.sndbuf_share >= 0.1 {
                out.push(Reason::SendBuffer { share: c.sndbuf_share });
            }
        }
        if let Some(s) = &self.snap {
            if s.app_limited {
                out.push(Reason::Application);
            }
            if !s.options.sack {
                out.push(Reason::NoSack);
            }
            if !s.options.wscale {
                out.push(Reason::NoWindowScaling);
            }
        }
        if self.limit.is_some() {
            out.push(Reason::LimitFinding);
        }
        let l = &self.live;
        if out.is_empty() && self.has_live && l.cwnd > 0 && l.in_flight + 1 >= l.cwnd {
            out.push(Reason::CongestionWindow);
        }
    }
}

/// One answer to "what holds it back"; the text is the renderer's job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reason {
    Stop { secs: f64 },
    Stalled { secs: f64, rtts: u64 },
    LossRecovery { state: &'static str, cwnd: u32 },
    ReceiveWindow { share: f64 },
    SendBuffer { share: f64 },
    Application,
    NoSack,
    NoWindowScaling,
    LimitFinding,
    CongestionWindow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    State,
    Ca,
    Rto,
    LostRetrans,
    Finding,
    Close,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub ts_ns: u64,
    pub cookie: u64,
    pub kind: LogKind,
    pub text: String,
    /// How many like events within a second were folded into this line.
    pub repeat: u32,
}

/// Fairness over a group of streams (paper 001).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fairness {
    pub streams: usize,
    /// Jain's index, 1/n..=1.
    pub jain: f64,
    pub slowest_over_fastest: f64,
    pub total_bps: f64,
}

/// Jain's fairness index of `rates`, None for an empty or all-zero set.
pub fn jain(rates: &[f64]) -> Option<f64> {
    let (s, s2) = rates.iter().fold((0.0, 0.0), |(a, b), x| (a + x, b + x * x));
    (s2 > 0.0).then(|| s * s / (rates.len() as f64 * s2))
}

pub fn tcp_state_name(s: u8) -> &'static str {
    match s {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        12 => "NEW_SYN_RECV",
        _ => "?",
    }
}

/// Evidence as `k=v k=v`, at most `max` characters.
pub fn evidence_text(v: &serde_json::Value, max: usize) -> String {
    let mut s = String::new();
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                if !s.is_empty() {
                    s.push(' ');
                }
                match v {
                    serde_json::Value::String(x) => s.push_str(&format!("{k}={x}")),
                    serde_json::Value::Number(n) => match n.as_f64() {
                        Some(f) if f.fract() != 0.0 => s.push_str(&format!("{k}={f:.3}")),
                        _ => s.push_str(&format!("{k}={n}")),
                    },
                    other => s.push_str(&format!("{k}={other}")),
                }
            }
        }
        serde_json::Value::Null => {}
        other => s = other.to_string(),
    }
    if s.chars().count() > max {
        s = s.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
    }
    s
}

/// Everything the view shows; fold inputs in with `apply`.
#[derive(Debug)]
pub struct WatchState {
    pub filter: Filter,
    pub all: bool,
    pub conns: Vec<ConnView>,
    pub selected: usize,
    pub window_s: u32,
    pub paused_at: Option<u64>,
    pub now_ns: u64,
    pub t0_ns: Option<u64>,
    pub log: Ring<LogLine>,
    /// Latest unfair-group finding touching a shown connection: (group, cause, evidence).
    pub unfair: Option<(String, String, String)>,
    pub events: u64,
    pub findings: u64,
    /// Events of connections beyond `MAX_CONNS` or not matching the filter.
    pub ignored: u64,
    /// The input ended (replay over or daemon gone).
    pub source_ended: bool,
    seen: Ring<(FindingKind, u64, u64)>,
}

impl WatchState {
    pub fn new(filter: Filter, all: bool, window_s: u32) -> Self {
        WatchState {
            filter,
            all,
            conns: Vec::new(),
            selected: 0,
            window_s: window_s.clamp(1, MAX_WINDOW_S),
            paused_at: None,
            now_ns: 0,
            t0_ns: None,
            log: Ring::new(LOG_CAP),
            unfair: None,
            events: 0,
            findings: 0,
            ignored: 0,
            source_ended: false,
            seen: Ring::new(256),
        }
    }

    pub fn apply(&mut self, input: &WatchInput) {
        match input {
            WatchInput::Event(e) => self.apply_event(e),
            WatchInput::Finding(f) => self.apply_finding(f),
            WatchInput::Tick(t) => self.tick(*t),
        }
    }

    /// Advance time: closes goodput bins of silent connections.
    pub fn tick(&mut self, now: u64) {
        self.now_ns = self.now_ns.max(now);
        for c in self.conns.iter_mut().filter(|c| !c.closed()) {
            c.advance_bins(now);
        }
    }

    fn conn_index(&mut self, id: &ConnId, ts: u64) -> Option<usize> {
        if let Some(i) = self.conns.iter().position(|c| c.id.cookie == id.cookie) {
            return Some(i);
        }
        if !self.filter.matches(id) || self.conns.len() >= MAX_CONNS {
            return None;
        }
        self.conns.push(ConnView::new(*id, ts));
        Some(self.conns.len() - 1)
    }

    fn log(&mut self, ts: u64, cookie: u64, kind: LogKind, text: String) {
        if let Some(last) = self.log.last_mut() {
            // A burst of lost retransmissions is one line; so are flapping CA states.
            let foldable = kind == LogKind::LostRetrans || (kind == LogKind::Ca && last.text == text);
            if foldable && last.kind == kind && last.cookie == cookie && ts < last.ts_ns + 1_000_000_000 {
                last.repeat += 1;
                return;
            }
        }
        self.log.push(LogLine { ts_ns: ts, cookie, kind, text, repeat: 1 });
    }

    pub fn apply_event(&mut self, e: &Event) {
        let Some(i) = self.conn_index(&e.conn, e.ts_ns) else {
            self.ignored += 1;
            return;
        };
        self.events += 1;
        self.t0_ns = Some(self.t0_ns.map_or(e.ts_ns, |t| t.min(e.ts_ns)));
        self.now_ns = self.now_ns.max(e.ts_ns);
        let ts = e.ts_ns;
        let cookie = e.conn.cookie;
        let c = &mut self.conns[i];
        if c.closed() {
            return;
        }
        c.last_ns = c.last_ns.max(ts);
        match &e.body {
            Body::Sample(s) => c.on_sample(ts, s),
            Body::Retrans(r) => {
                c.retrans_segs += r.segs as u64;
                c.on_board(ts, r.cwnd, r.ssthresh, r.packets_out, r.lost_out, r.sacked_out, r.retrans_out, r.snd_una);
            }
            Body::LostRetrans(r) => {
                c.lost_retrans += r.segs.max(1) as u64;
                c.on_board(ts, r.cwnd, r.ssthresh, r.packets_out, r.lost_out, r.sacked_out, r.retrans_out, r.snd_una);
                let off = c.rel(r.seq);
                let text = format!("lost retransmission at +{off:.0} MSS (sent {}x), cwnd {}", r.count, r.cwnd);
                self.log(ts, cookie, LogKind::LostRetrans, text);
            }
            Body::CaState(s) => {
                c.live.ca_state = s.new;
                c.on_board(ts, s.cwnd, s.ssthresh, s.packets_out, s.lost_out, s.sacked_out, s.retrans_out, s.snd_una);
                let text = format!(
                    "CA {} -> {}, cwnd {} lost {} sacked {} retrans {}",
                    ca_state_name(s.old),
                    ca_state_name(s.new),
                    s.cwnd,
                    s.lost_out,
                    s.sacked_out,
                    s.retrans_out
                );
                self.log(ts, cookie, LogKind::Ca, text);
            }
            Body::Rto(r) => {
                c.rtos += 1;
                c.live.ca_state = CA_LOSS;
                c.live.cwnd = r.cwnd;
                let text = format!(
                    "RTO after {:.0} ms (timeout #{}, backoff {}), {} packets out",
                    r.rto_us as f64 / 1e3,
                    r.retransmits + 1,
                    r.backoff,
                    r.packets_out
                );
                self.log(ts, cookie, LogKind::Rto, text);
            }
            Body::State(s) => {
                let text = format!("TCP {} -> {}", tcp_state_name(s.old), tcp_state_name(s.new));
                if s.new == 7 {
                    c.closed_ns = Some(ts);
                }
                self.log(ts, cookie, LogKind::State, text);
            }
            Body::Snapshot(s) => c.on_snapshot(ts, s),
            Body::Close(s) => {
                c.on_snapshot(ts, s);
                c.advance_bins(ts);
                c.closed_ns = Some(ts);
                let secs = (ts - c.first_ns) as f64 / 1e9;
                let text = format!("closed after {secs:.1} s, {} delivered", human_bytes(c.total_bytes));
                self.log(ts, cookie, LogKind::Close, text);
            }
            Body::Owner(o) => c.owner = Some(o.clone()),
        }
    }

    pub fn apply_finding(&mut self, f: &Finding) {
        let cookie = f.conn.map(|c| c.cookie);
        let idx = cookie.and_then(|k| self.conns.iter().position(|c| c.id.cookie == k));
        let idx = match (idx, &f.conn) {
            (Some(i), _) => Some(i),
            (None, Some(id)) => self.conn_index(id, f.start_ns),
            (None, None) => None,
        };
        if idx.is_none() && f.group.is_none() {
            self.ignored += 1;
            return;
        }
        self.findings += 1;
        self.now_ns = self.now_ns.max(f.ts_ns);
        let key = (f.kind, cookie.unwrap_or(0), f.start_ns);
        let new = !self.seen.iter().any(|k| *k == key);
        if new {
            self.seen.push(key);
        }
        let ev = evidence_text(&f.evidence, 160);
        let kind = match f.kind {
            FindingKind::Stop => "STOP",
            FindingKind::Unfair => "UNFAIR",
            FindingKind::Limit => "LIMIT",
        };
        match (f.kind, idx) {
            (FindingKind::Stop, Some(i)) => {
                let c = &mut self.conns[i];
                if new {
                    c.stops += 1;
                    if !c.stop_causes.contains(&f.cause) {
                        c.stop_causes.push(f.cause.clone());
                    }
                }
                c.stop = Some(StopView {
                    start_ns: f.start_ns,
                    last_ns: f.ts_ns,
                    duration_s: f.duration_s,
                    ongoing: f.ongoing,
                    cause: f.cause.clone(),
                    evidence: ev.clone(),
                });
            }
            (FindingKind::Limit, Some(i)) => self.conns[i].limit = Some((f.cause.clone(), ev.clone())),
            (FindingKind::Unfair, _) => {
                self.unfair = Some((f.group.clone().unwrap_or_default(), f.cause.clone(), ev.clone()));
            }
            _ => {}
        }
        let ended = !f.ongoing;
        if new || ended {
            let dur = match f.duration_s {
                Some(d) => format!(" for {d:.1} s"),
                None => String::new(),
            };
            let state = if f.ongoing { "" } else { " (ended)" };
            let text = format!("{kind} {}{dur}{state}: {ev}", f.cause);
            self.log(f.ts_ns, cookie.unwrap_or(0), LogKind::Finding, text);
        }
    }

    /// The connection the single view shows.
    pub fn selected(&self) -> Option<&ConnView> {
        self.conns.get(self.selected.min(self.conns.len().saturating_sub(1)))
    }

    /// The right edge of the charts: now, or when the user paused.
    pub fn view_end_ns(&self) -> u64 {
        self.paused_at.unwrap_or(self.now_ns)
    }

    pub fn window_ns(&self) -> u64 {
        self.window_s as u64 * 1_000_000_000
    }

    /// Seconds since the first event, for axes and the log.
    pub fn rel_s(&self, ts: u64) -> f64 {
        ts.saturating_sub(self.t0_ns.unwrap_or(ts)) as f64 / 1e9
    }

    pub fn toggle_pause(&mut self) {
        self.paused_at = match self.paused_at {
            Some(_) => None,
            None => Some(self.now_ns),
        };
    }

    /// `wider`: next larger window step, else the next smaller one.
    pub fn zoom(&mut self, wider: bool) {
        let cur = self.window_s;
        self.window_s = if wider {
            WINDOW_STEPS.iter().copied().find(|&w| w > cur).unwrap_or(MAX_WINDOW_S)
        } else {
            WINDOW_STEPS.iter().rev().copied().find(|&w| w < cur).unwrap_or(1)
        };
    }

    pub fn pick(&mut self, next: bool) {
        let n = self.conns.len();
        if n == 0 {
            return;
        }
        self.selected = if next { (self.selected + 1) % n } else { (self.selected + n - 1) % n };
    }

    /// Done: the watched connection (with `all`: every one seen) closed.
    pub fn finished(&self) -> bool {
        if self.all {
            !self.conns.is_empty() && self.conns.iter().all(|c| c.closed())
        } else {
            self.selected().is_some_and(|c| c.closed())
        }
    }

    /// Fairness of the shown connections' goodput over the time window.
    pub fn fairness(&self, rates: &mut Vec<f64>) -> Option<Fairness> {
        let end = self.view_end_ns();
        rates.clear();
        rates.extend(self.conns.iter().map(|c| c.goodput_bps(end, self.window_ns())));
        let j = jain(rates)?;
        let max = rates.iter().copied().fold(0.0, f64::max);
        let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
        Some(Fairness { streams: rates.len(), jain: j, slowest_over_fastest: min / max, total_bps: rates.iter().sum() })
    }

    pub fn summary(&self) -> Vec<ConnSummary> {
        self.conns.iter().map(ConnSummary::of).collect()
    }
}

/// What happened to one connection while it was watched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConnSummary {
    pub cookie: u64,
    pub tuple: String,
    pub comm: Option<String>,
    pub watched_s: f64,
    pub bytes_acked: u64,
    pub mean_goodput_bps: f64,
    pub max_delivery_rate_bps: f64,
    pub efficiency: f64,
    pub retrans_segs: u64,
    pub lost_retrans: u64,
    pub rtos: u64,
    pub stops: u32,
    pub stop_causes: Vec<String>,
    pub closed: bool,
}

impl ConnSummary {
    fn of(c: &ConnView) -> Self {
        let g = c.mean_goodput_bps();
        ConnSummary {
            cookie: c.id.cookie,
            tuple: c.id.tuple.to_string(),
            comm: c.owner.as_ref().map(|o| o.comm.clone()),
            watched_s: (c.closed_ns.unwrap_or(c.last_ns) - c.first_ns) as f64 / 1e9,
            bytes_acked: c.total_bytes,
            mean_goodput_bps: g,
            max_delivery_rate_bps: c.max_rate_bps,
            efficiency: c.efficiency(g),
            retrans_segs: c.retrans_segs,
            lost_retrans: c.lost_retrans,
            rtos: c.rtos,
            stops: c.stops,
            stop_causes: c.stop_causes.clone(),
            closed: c.closed(),
        }
    }
}

/// 1536 -> "1.5 KiB".
pub fn human_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// 480e6 -> "480.0 Mbit/s".
pub fn human_bps(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1} Mbit/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1} kbit/s", bps / 1e3)
    } else {
        format!("{bps:.0} bit/s")
    }
}
