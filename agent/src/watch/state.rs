//! What the watch view shows, folded from Events and Findings: pure (no IO, no clock, no terminal).
//!
//! Times are the events' CLOCK_MONOTONIC nanoseconds; `now` advances with events and ticks.
//! Ring buffers are bounded and reach their capacity once, so folding an event or a tick does not
//! allocate in the steady state (log lines and snapshots, which are rare, do).
use serde::Serialize;

use crate::model::event::{ca_state_name, CA_LOSS};
use crate::model::{Body, Cause, ConnId, Event, Filter, Finding, FindingKind};

pub use super::conn::{Bin, Chrono, ConnView, Live, Point, StopView, MAX_WINDOW_S, MIN_BIN_NS, POINT_RES_NS};
pub use super::reasons::Reason;
use super::ring::Ring;
use super::text::{evidence_text, stop_mechanism, tcp_state_name};
use crate::model::units::{human_bytes, jain};

/// What `run` consumes: events and findings of the matching connections, and the time.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchInput {
    Event(Event),
    Finding(Finding),
    /// CLOCK_MONOTONIC now, in nanoseconds; lets charts move while a stopped connection is silent.
    Tick(u64),
}

const LOG_CAP: usize = 200;
/// Connections beyond this many are counted, not shown.
pub const MAX_CONNS: usize = 32;
/// Window steps for the +/- keys, seconds.
pub const WINDOW_STEPS: [u32; 8] = [1, 2, 5, 10, 20, 30, 60, 120];

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

/// Fairness over a group of streams (the parallel-streams study).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fairness {
    pub streams: usize,
    /// Jain's index, 1/n..=1.
    pub jain: f64,
    pub slowest_over_fastest: f64,
    pub total_bps: f64,
}

/// A connection must have delivered this much more than the shown one to take the view over
/// (so that parallel streams of one transfer do not make the view flicker between them).
pub const SWITCH_MARGIN_BYTES: u64 = 256 * 1024;

/// Which connection a filter matching several should show: the one that delivered the most
/// bytes (the bulk data connection; idle and control connections deliver a few hundred bytes,
/// so they come last). The `current` one stays unless an open connection delivered 1.5 times
/// its bytes plus `SWITCH_MARGIN_BYTES`; a closed connection never takes the view over.
pub fn busiest(conns: &[ConnView], current: usize) -> usize {
    let Some(cur) = conns.get(current) else { return 0 };
    let bar = cur.total_bytes.saturating_add(cur.total_bytes / 2).saturating_add(SWITCH_MARGIN_BYTES);
    conns
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.closed() && c.total_bytes > bar)
        .max_by_key(|(_, c)| c.total_bytes)
        .map_or(current, |(i, _)| i)
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
    pub unfair: Option<(String, Cause, String)>,
    pub events: u64,
    pub findings: u64,
    /// Events of connections beyond `MAX_CONNS` or not matching the filter.
    pub ignored: u64,
    /// The input ended (replay over or daemon gone).
    pub source_ended: bool,
    /// The user picked a connection (arrow keys): stop choosing the busiest one for them.
    pub pinned: bool,
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
            pinned: false,
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
            Body::Process(p) => c.process = Some(p.clone()),
        }
        if !self.pinned {
            self.selected = busiest(&self.conns, self.selected);
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
        let kind = f.kind();
        let key = (kind, cookie.unwrap_or(0), f.start_ns);
        let new = !self.seen.iter().any(|k| *k == key);
        if new {
            self.seen.push(key);
        }
        let mut json = f.evidence_json();
        let mechanism = stop_mechanism(f, &mut json);
        let ev = evidence_text(&json, 160);
        // A stop's owner and cause sharpen while it lasts (no_ack, then rto, then path_silent),
        // and its mechanism may be named late (another connection's delivery tells it).
        let sharpened = kind == FindingKind::Stop
            && !new
            && idx.and_then(|i| self.conns[i].stop.as_ref()).is_some_and(|s| {
                s.start_ns == f.start_ns && (s.cause != f.cause || s.mechanism.as_ref().map(|m| m.0) != f.mechanism)
            });
        match (kind, idx) {
            (FindingKind::Stop, Some(i)) => {
                let c = &mut self.conns[i];
                if sharpened {
                    if let Some(old) = c.stop.as_ref().map(|s| s.cause) {
                        c.stop_causes.retain(|x| *x != old);
                    }
                }
                if (new || sharpened) && !c.stop_causes.contains(&f.cause) {
                    c.stop_causes.push(f.cause);
                }
                if new {
                    c.stops += 1;
                }
                c.stop = Some(StopView {
                    start_ns: f.start_ns,
                    last_ns: f.ts_ns,
                    duration_s: f.duration_s,
                    ongoing: f.ongoing,
                    cause: f.cause,
                    owner: f.owner,
                    evidence: ev.clone(),
                    mechanism: mechanism.clone(),
                });
            }
            (FindingKind::Limit, Some(i)) => self.conns[i].limit = Some((f.cause, ev.clone())),
            (FindingKind::Unfair, _) => {
                self.unfair = Some((f.group.clone().unwrap_or_default(), f.cause, ev.clone()));
            }
            _ => {}
        }
        let ended = !f.ongoing;
        if new || ended || sharpened {
            let dur = match f.duration_s {
                Some(d) => format!(" for {d:.1} s"),
                None => String::new(),
            };
            let state = if f.ongoing { "" } else { " (ended)" };
            let owner = f.owner.map(|o| format!(" ({})", o.as_str())).unwrap_or_default();
            let mech = mechanism.map(|(m, e, _)| format!(" [{m}: {e}]")).unwrap_or_default();
            let text = format!("{} {}{owner}{mech}{dur}{state}: {ev}", kind.as_str().to_uppercase(), f.cause);
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
        self.pinned = true;
    }

    /// Cookie of the connection the single view shows (its event pane shows only its lines).
    pub fn selected_cookie(&self) -> Option<u64> {
        self.selected().map(|c| c.id.cookie)
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

    /// The watched streams' send phase up to the view's end (their round starts, reported for
    /// the connections watch follows): the report (cookies are indexes into `conns`) and each
    /// cycle's phases.
    #[allow(clippy::type_complexity)]
    pub fn send_phase(&self) -> Option<(crate::detect::phase::PhaseReport, Vec<(u64, Vec<Option<f64>>)>)> {
        use crate::detect::phase::{per_cycle, StreamRounds};
        let end = self.view_end_ns();
        let cut: Vec<&[u64]> =
            self.conns.iter().map(|c| &c.rounds[..c.rounds.partition_point(|&t| t <= end)]).collect();
        let input: Vec<StreamRounds> =
            cut.iter().enumerate().map(|(i, r)| StreamRounds { cookie: i as u64, starts: r }).collect();
        per_cycle(&input, 8, 100_000)
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
    pub stop_causes: Vec<Cause>,
    pub closed: bool,
}

impl ConnSummary {
    fn of(c: &ConnView) -> Self {
        let g = c.mean_goodput_bps();
        ConnSummary {
            cookie: c.id.cookie,
            tuple: c.id.tuple.to_string(),
            comm: c.process.as_ref().map(|p| p.comm.clone()),
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
