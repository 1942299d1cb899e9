//! What the pictures draw, extracted from one connection's events: goodput bins, scoreboard,
//! CA states, RTOs, (lost) retransmissions, sequence progress and stop intervals.
use crate::model::{Body, ConnId, Event, Finding, FindingKind, Mechanism, Process, Snap};

/// Scoreboard after one event, in segments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Board {
    pub t: f64,
    pub cwnd: f64,
    pub ssthresh: f64,
    pub in_flight: f64,
    pub lost: f64,
    pub sacked: f64,
    pub retrans: f64,
    pub outstanding: bool,
}

/// A stop interval, seconds on the recording's time axis.
#[derive(Debug, Clone, PartialEq)]
pub struct StopSpan {
    pub from: f64,
    pub to: f64,
    pub cause: String,
    /// Found by this module from the goodput, not reported by the detector.
    pub inferred: bool,
}

/// One connection, ready to draw. Times are seconds since `t0_ns`; sequence numbers are MSS
/// units since the first snd_una seen.
#[derive(Debug, Clone)]
pub struct ConnSeries {
    pub id: ConnId,
    pub owner: Option<Process>,
    pub snap: Option<Snap>,
    pub t0_ns: u64,
    pub start: f64,
    pub end: f64,
    pub mss: u32,
    pub bin_s: f64,
    /// (bin start, Mbit/s).
    pub goodput: Vec<(f64, f64)>,
    pub board: Vec<Board>,
    /// (time, new CA state).
    pub ca: Vec<(f64, u8)>,
    pub rtos: Vec<f64>,
    /// (time, sequence).
    pub retrans: Vec<(f64, f64)>,
    pub lost_retrans: Vec<(f64, f64)>,
    /// (time, snd_una, snd_nxt).
    pub seq: Vec<(f64, f64, f64)>,
    /// (time, block start, block end).
    pub sacks: Vec<(f64, f64, f64)>,
    pub stops: Vec<StopSpan>,
    pub bytes: u64,
    pub max_rate_bps: f64,
    pub retrans_segs: u64,
    /// Round starts (ns, the recording's clock): reported for members of a bulk group.
    pub rounds: Vec<u64>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

/// Unwraps 32-bit sequence numbers relative to the first snd_una.
struct Seq {
    base: Option<u32>,
    abs: i64,
    last: u32,
    mss: f64,
}

impl Seq {
    fn una(&mut self, una: u32) -> f64 {
        match self.base {
            None => {
                self.base = Some(una);
                self.last = una;
            }
            Some(_) => {
                let d = una.wrapping_sub(self.last) as i32;
                if d > 0 {
                    self.abs += d as i64;
                    self.last = una;
                }
            }
        }
        self.abs as f64 / self.mss
    }
    fn rel(&self, seq: u32) -> f64 {
        (self.abs + seq.wrapping_sub(self.last) as i32 as i64) as f64 / self.mss
    }
}

/// At most this many goodput bins per connection: a long recording gets wider bins.
pub const MAX_BINS: u64 = 20_000;
/// At most this many points in each drawn series of one connection (the picture is 1200 pixels
/// wide): longer series are thinned evenly, the first and last points kept.
pub const MAX_POINTS: usize = 20_000;

/// Keep at most `max` of `v`, evenly spaced, the first and the last among them.
fn thin<T>(v: &mut Vec<T>, max: usize) {
    if v.len() <= max || max < 2 {
        return;
    }
    let n = v.len();
    let step = (n - 1) as f64 / (max - 1) as f64;
    let mut keep = (0..max).map(|k| (k as f64 * step).round() as usize).peekable();
    let mut i = 0;
    v.retain(|_| {
        let kept = keep.peek() == Some(&i);
        if kept {
            while keep.peek() == Some(&i) {
                keep.next();
            }
        }
        i += 1;
        kept
    });
}

/// Add `bytes` delivered over `[a, b]` (ns since the first bin's start) to the bins of width
/// `bin_ns` in proportion to how much of the interval each covers (all to one bin if `a == b`).
fn spread(bins: &mut Vec<u64>, bin_ns: u64, a: u64, b: u64, bytes: u64) {
    let (i0, i1) = ((a / bin_ns) as usize, (b / bin_ns) as usize);
    if bins.len() <= i1 {
        bins.resize(i1 + 1, 0);
    }
    let len = b.saturating_sub(a).max(1);
    let mut left = bytes;
    for (i, bin) in bins.iter_mut().enumerate().take(i1 + 1).skip(i0) {
        let share = if i == i1 {
            left
        } else {
            let (lo, hi) = ((i as u64 * bin_ns).max(a), ((i as u64 + 1) * bin_ns).min(b));
            (bytes as u128 * (hi - lo) as u128 / len as u128) as u64
        };
        *bin = bin.saturating_add(share);
        left -= share;
    }
}

impl ConnSeries {
    /// Build from the connection's events and the findings about it. Any events the recording
    /// reader accepts are fine: they are put in time order here (the reader allows steps back),
    /// and every series is bounded (`MAX_BINS`, `MAX_POINTS`) however long the recording.
    pub fn build(events: &[&Event], findings: &[&Finding], t0_ns: u64, bin_override_s: Option<f64>) -> Option<Self> {
        let mut sorted = events.to_vec();
        sorted.sort_by_key(|e| e.ts_ns);
        let events = &sorted[..];
        let first = events.first()?;
        let t = |ns: u64| ns.saturating_sub(t0_ns) as f64 / 1e9;
        let mut mss = 0u32;
        let mut srtts = Vec::new();
        let mut gaps = Vec::new();
        let mut prev_sample: Option<u64> = None;
        for e in events {
            match &e.body {
                Body::Sample(s) => {
                    mss = mss.max(s.mss);
                    if s.srtt_us > 0 {
                        srtts.push(s.srtt_us as f64 / 1e6);
                    }
                    if let Some(p) = prev_sample {
                        gaps.push(e.ts_ns.saturating_sub(p) as f64 / 1e9);
                    }
                    prev_sample = Some(e.ts_ns);
                }
                Body::Snapshot(s) | Body::Close(s) => {
                    mss = mss.max(s.mss);
                    if srtts.is_empty() && s.srtt_us > 0 {
                        srtts.push(s.srtt_us as f64 / 1e6);
                    }
                }
                _ => {}
            }
        }
        let mss = if mss == 0 { 1448 } else { mss };
        let rtt = median(srtts).unwrap_or(0.1);
        let gap = median(gaps).unwrap_or(0.0);
        let bin_s = bin_override_s.unwrap_or(rtt.max(gap)).clamp(0.001, 1.0);
        let mut s = ConnSeries {
            id: first.conn,
            owner: None,
            snap: None,
            t0_ns,
            start: t(first.ts_ns),
            end: t(events.last().map_or(first.ts_ns, |e| e.ts_ns)),
            mss,
            bin_s,
            goodput: Vec::new(),
            board: Vec::new(),
            ca: Vec::new(),
            rtos: Vec::new(),
            retrans: Vec::new(),
            lost_retrans: Vec::new(),
            seq: Vec::new(),
            sacks: Vec::new(),
            stops: Vec::new(),
            bytes: 0,
            max_rate_bps: 0.0,
            retrans_segs: 0,
            rounds: Vec::new(),
        };
        let mut seq = Seq { base: None, abs: 0, last: 0, mss: mss as f64 };
        let mut acked: Option<u64> = None;
        let mut bins: Vec<u64> = Vec::new();
        // Integer nanoseconds, so that a bin holds exactly the samples of its interval; wide
        // enough that the recording's span needs at most MAX_BINS.
        let span_ns = events.last().map_or(0, |e| e.ts_ns - first.ts_ns);
        let bin_ns = ((bin_s * 1e9) as u64).max(1).max(span_ns / MAX_BINS + 1);
        let bin_s = bin_ns as f64 / 1e9;
        s.bin_s = bin_s;
        let first_ns = first.ts_ns;
        let add = |bins: &mut Vec<u64>, at_ns: u64, bytes: u64| {
            let at = at_ns.saturating_sub(first_ns);
            spread(bins, bin_ns, at, at, bytes);
        };
        // Bytes acknowledged between two periodic samples (the daemon's one per 50 ms) are shared
        // by the bins that interval covers: counted at the sample alone, bins about as wide as
        // the interval alternate between none and two samples. Not across a silence (a stop).
        let spread_ns = (2.5 * gap * 1e9) as u64;
        let mut prev_ns: Option<u64> = None;
        let mut sampled = false;
        for e in events {
            let now = t(e.ts_ns);
            match &e.body {
                Body::Sample(x) => {
                    sampled = true;
                    if x.round {
                        s.rounds.push(e.ts_ns);
                    }
                    let before = seq.abs;
                    let una = seq.una(x.snd_una);
                    let bytes = match acked {
                        Some(a) if x.bytes_acked > 0 => x.bytes_acked.saturating_sub(a),
                        None if x.bytes_acked > 0 => 0,
                        _ => (seq.abs - before).max(0) as u64,
                    };
                    if x.bytes_acked > 0 {
                        acked = Some(acked.unwrap_or(0).max(x.bytes_acked));
                    }
                    s.bytes = s.bytes.saturating_add(bytes);
                    match prev_ns {
                        Some(p) if e.ts_ns > p && e.ts_ns - p <= spread_ns => spread(
                            &mut bins,
                            bin_ns,
                            p.saturating_sub(first_ns),
                            e.ts_ns.saturating_sub(first_ns),
                            bytes,
                        ),
                        _ => add(&mut bins, e.ts_ns, bytes),
                    }
                    prev_ns = Some(e.ts_ns);
                    s.max_rate_bps = s.max_rate_bps.max(x.delivery_rate_bps() * 8.0);
                    s.seq.push((now, una, seq.rel(x.snd_nxt)));
                    for &(a, b) in &x.sack {
                        s.sacks.push((now, seq.rel(a), seq.rel(b)));
                    }
                    s.board.push(Board {
                        t: now,
                        cwnd: x.cwnd as f64,
                        ssthresh: x.ssthresh as f64,
                        in_flight: x.in_flight as f64,
                        lost: x.lost_out as f64,
                        sacked: x.sacked_out as f64,
                        retrans: x.retrans_out as f64,
                        outstanding: x.packets_out > 0,
                    });
                    if s.ca.last().map(|c| c.1) != Some(x.ca_state) {
                        s.ca.push((now, x.ca_state));
                    }
                }
                Body::Retrans(r) | Body::LostRetrans(r) => {
                    let una = seq.una(r.snd_una);
                    let at = seq.rel(r.seq);
                    if matches!(e.body, Body::LostRetrans(_)) {
                        s.lost_retrans.push((now, at));
                    } else {
                        s.retrans_segs = s.retrans_segs.saturating_add(r.segs as u64);
                        s.retrans.push((now, at));
                    }
                    let in_flight = (r.packets_out.saturating_add(r.retrans_out))
                        .saturating_sub(r.lost_out.saturating_add(r.sacked_out));
                    s.board.push(Board {
                        t: now,
                        cwnd: r.cwnd as f64,
                        ssthresh: r.ssthresh as f64,
                        in_flight: in_flight as f64,
                        lost: r.lost_out as f64,
                        sacked: r.sacked_out as f64,
                        retrans: r.retrans_out as f64,
                        outstanding: r.packets_out > 0,
                    });
                    let _ = una;
                }
                Body::CaState(c) => s.ca.push((now, c.new)),
                Body::Rto(_) => s.rtos.push(now),
                Body::Process(o) => s.owner = Some(o.clone()),
                Body::Snapshot(x) | Body::Close(x) => {
                    if s.owner.is_none() && x.process.pid != 0 {
                        s.owner = Some(x.process.clone());
                    }
                    s.max_rate_bps = s.max_rate_bps.max(x.delivery_rate_bps() * 8.0);
                    if !sampled {
                        // No per-ACK samples: snapshots are the only source.
                        let bytes = match acked {
                            Some(a) => x.bytes_acked.saturating_sub(a),
                            None => 0,
                        };
                        acked = Some(acked.unwrap_or(0).max(x.bytes_acked));
                        s.bytes = s.bytes.saturating_add(bytes);
                        add(&mut bins, e.ts_ns, bytes);
                        let una = seq.una(x.snd_una);
                        s.seq.push((now, una, seq.rel(x.snd_nxt)));
                        s.board.push(Board {
                            t: now,
                            cwnd: x.cwnd as f64,
                            ssthresh: x.ssthresh as f64,
                            in_flight: (x.packets_out.saturating_add(x.retrans_out))
                                .saturating_sub(x.lost_out.saturating_add(x.sacked_out))
                                as f64,
                            lost: x.lost_out as f64,
                            sacked: x.sacked_out as f64,
                            retrans: x.retrans_out as f64,
                            outstanding: x.packets_out > 0,
                        });
                    }
                    s.snap = Some(x.clone());
                }
                Body::State(_) => {}
            }
        }
        s.goodput = bins
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let from = s.start + i as f64 * bin_s;
                // The last bin may be cut short by the end of the recording.
                let width = (s.end - from).clamp(bin_s * 0.05, bin_s);
                (from, *b as f64 * 8.0 / width / 1e6)
            })
            .collect();
        for f in findings.iter().filter(|f| f.kind() == FindingKind::Stop) {
            let from = t(f.start_ns);
            let to = match f.duration_s {
                Some(d) => from + d,
                None => t(f.ts_ns).max(from),
            };
            match s.stops.iter_mut().find(|x| (x.from - from).abs() < 1e-9) {
                Some(x) => {
                    x.to = x.to.max(to);
                    // A mechanism is often named late in a stop (another connection tells it).
                    if f.mechanism.is_some() {
                        x.cause = stop_label(f);
                    }
                }
                None => s.stops.push(StopSpan { from, to, cause: stop_label(f), inferred: false }),
            }
        }
        if s.stops.is_empty() {
            s.stops = s.infer_stops();
        }
        thin(&mut s.board, MAX_POINTS);
        thin(&mut s.ca, MAX_POINTS);
        thin(&mut s.rtos, MAX_POINTS);
        thin(&mut s.retrans, MAX_POINTS);
        thin(&mut s.lost_retrans, MAX_POINTS);
        thin(&mut s.seq, MAX_POINTS);
        thin(&mut s.sacks, MAX_POINTS);
        thin(&mut s.rounds, MAX_POINTS);
        thin(&mut s.stops, MAX_POINTS);
        Some(s)
    }

    /// Runs of near-empty goodput bins, while data was outstanding, lasting >= 10 bins and 200 ms.
    fn infer_stops(&self) -> Vec<StopSpan> {
        let mut sorted: Vec<f64> = self.goodput.iter().map(|g| g.1).collect();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let Some(p95) = sorted.get(sorted.len() * 95 / 100).copied() else { return Vec::new() };
        let per_bin_floor = 2.0 * self.mss as f64 * 8.0 / self.bin_s / 1e6;
        let low = per_bin_floor.max(0.02 * p95);
        let outstanding = |t: f64| {
            let i = self.board.partition_point(|b| b.t <= t);
            i > 0 && self.board[i - 1].outstanding
        };
        let min_len = (10.0 * self.bin_s).max(0.2);
        let mut out = Vec::new();
        let mut run: Option<f64> = None;
        for &(t, g) in &self.goodput {
            let quiet = g <= low && outstanding(t + self.bin_s);
            match (quiet, run) {
                (true, None) => run = Some(t),
                (false, Some(from)) => {
                    if t - from >= min_len {
                        out.push(StopSpan { from, to: t, cause: "no delivery".into(), inferred: true });
                    }
                    run = None;
                }
                _ => {}
            }
        }
        if let Some(from) = run {
            let to = self.goodput.last().map_or(from, |g| g.0 + self.bin_s);
            if to - from >= min_len {
                out.push(StopSpan { from, to, cause: "no delivery".into(), inferred: true });
            }
        }
        out
    }

    /// Mean goodput over the connection's life, bits per second.
    pub fn mean_bps(&self) -> f64 {
        let d = self.end - self.start;
        if d <= 0.0 {
            0.0
        } else {
            self.bytes as f64 * 8.0 / d
        }
    }
}

/// A stop's label in a picture: its cause, and the mechanism with the numbers that decide the fix.
fn stop_label(f: &Finding) -> String {
    match f.mechanism {
        Some(m @ Mechanism::MtuBlackhole) => {
            let e = &f.evidence[m.as_str()];
            format!(
                "{}, {m}: {}-byte segments never through, {} bytes did",
                f.cause,
                e["stuck_segment_bytes"].as_u64().unwrap_or(0),
                e["largest_through_bytes"].as_u64().unwrap_or(0)
            )
        }
        Some(m) => format!("{}, {m}", f.cause),
        None => f.cause.to_string(),
    }
}
