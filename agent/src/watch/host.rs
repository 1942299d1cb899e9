//! The host view's state (`watch` without `--conn`): every bulk connection of the host with its
//! goodput, stop, unfair and limit state, process and container, folded from the daemon-like
//! feed (bulk samples and snapshots of every connection, the detectors' findings). Pure: no IO,
//! no clock; a few hundred bytes per connection that moves data, none for idle ones.
use std::collections::HashMap;

use serde::Serialize;

use super::state::WatchInput;
use crate::model::{Body, Cause, ConnId, Event, Finding, FindingKind, Process};

/// Connections followed at most (the busiest are shown; closed and idle ones make room first).
pub const MAX_ROWS: usize = 8192;
/// A connection is bulk (listed) once it delivered this much, as the daemon's default
/// `export.bulk_min_bytes`; one with a stop or a limit is listed whatever it delivered.
pub const BULK_BYTES: u64 = 1 << 20;
/// Goodput is measured over windows of at least this long.
const RATE_WINDOW_NS: u64 = 1_000_000_000;
/// A connection with no data for this long moves nothing now.
const QUIET_NS: u64 = 2_000_000_000;
/// A closed connection stays listed this long.
const CLOSED_KEPT_NS: u64 = 5_000_000_000;

/// One connection of the host view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostRow {
    #[serde(flatten)]
    pub id: ConnId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<Process>,
    /// Bytes acknowledged (the kernel's count, as far as seen).
    pub bytes_acked: u64,
    /// Over the last window of about a second, bits per second.
    pub goodput_bps: f64,
    pub srtt_us: u32,
    /// The ongoing stop's cause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Cause>,
    /// The ongoing limit's cause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<Cause>,
    /// The slowest stream of a group judged unfair: the group's key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unfair: Option<String>,
    pub stops: u32,
    pub closed: bool,
    #[serde(skip)]
    pub last_ns: u64,
    #[serde(skip)]
    closed_ns: u64,
    #[serde(skip)]
    window: (u64, u64),
}

impl HostRow {
    fn new(id: ConnId, ts: u64) -> Self {
        HostRow {
            id,
            process: None,
            bytes_acked: 0,
            goodput_bps: 0.0,
            srtt_us: 0,
            stop: None,
            limit: None,
            unfair: None,
            stops: 0,
            closed: false,
            last_ns: ts,
            closed_ns: 0,
            window: (ts, 0),
        }
    }

    /// Listed: bulk, or held back by something.
    pub fn listed(&self) -> bool {
        self.bytes_acked >= BULK_BYTES || self.stop.is_some() || self.limit.is_some() || self.unfair.is_some()
    }

    /// Bytes acknowledged by `ts`: closes the rate window once it is a second long.
    fn acked(&mut self, ts: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        if self.bytes_acked == 0 {
            self.window = (ts, bytes);
        }
        self.bytes_acked = self.bytes_acked.max(bytes);
        let (t0, b0) = self.window;
        if ts >= t0 + RATE_WINDOW_NS {
            self.goodput_bps = self.bytes_acked.saturating_sub(b0) as f64 * 8e9 / (ts - t0) as f64;
            self.window = (ts, self.bytes_acked);
        }
    }
}

/// Every connection of the host that moves data, and which one the cursor is on.
#[derive(Debug, Default)]
pub struct HostState {
    rows: HashMap<u64, HostRow>,
    /// Processes of connections with no row yet (the process comes when a connection opens,
    /// before it moves data), at most MAX_ROWS.
    processes: HashMap<u64, Process>,
    /// Listed connections, busiest first (as of the last `sort`).
    pub order: Vec<u64>,
    /// The cookie under the cursor: it stays on its connection while the list reorders.
    pub cursor: Option<u64>,
    cursor_at: usize,
    pub now_ns: u64,
    pub events: u64,
    pub findings: u64,
    /// Events of connections beyond MAX_ROWS.
    pub ignored: u64,
    /// Connections ever seen moving data.
    pub seen: u64,
}

impl HostState {
    pub fn apply(&mut self, input: &WatchInput) {
        match input {
            WatchInput::Event(e) => self.event(e),
            WatchInput::Finding(f) => self.finding(f),
            WatchInput::Tick(t) => self.tick(*t),
        }
    }

    fn row(&mut self, id: &ConnId, ts: u64) -> Option<&mut HostRow> {
        if !self.rows.contains_key(&id.cookie) {
            if self.rows.len() >= MAX_ROWS {
                self.make_room();
                if self.rows.len() >= MAX_ROWS {
                    return None;
                }
            }
            self.seen += 1;
            self.rows.insert(id.cookie, HostRow::new(*id, ts));
        }
        self.rows.get_mut(&id.cookie)
    }

    /// Drop closed rows, then those not listed, least recently active first, down to 3/4 full.
    fn make_room(&mut self) {
        self.rows.retain(|_, r| !r.closed);
        if self.rows.len() < MAX_ROWS * 3 / 4 {
            return;
        }
        let mut quiet: Vec<(u64, u64)> =
            self.rows.values().filter(|r| !r.listed()).map(|r| (r.last_ns, r.id.cookie)).collect();
        quiet.sort_unstable();
        let excess = self.rows.len() - MAX_ROWS * 3 / 4;
        for (_, k) in quiet.into_iter().take(excess) {
            self.rows.remove(&k);
        }
    }

    pub fn event(&mut self, e: &Event) {
        self.now_ns = self.now_ns.max(e.ts_ns);
        // A row for what moves data now (samples come for bulk connections only, losses) or
        // is bulk; what only says a connection exists (a look at every socket at start, its
        // process) makes none: a host's idle sockets cost nothing here.
        let moves = match &e.body {
            Body::Sample(_) | Body::Retrans(_) | Body::LostRetrans(_) | Body::Rto(_) => true,
            Body::Snapshot(s) | Body::Close(s) => s.bytes_acked >= BULK_BYTES,
            Body::State(_) | Body::Process(_) | Body::CaState(_) => false,
        };
        let cookie = e.conn.cookie;
        if !moves && !self.rows.contains_key(&cookie) {
            match &e.body {
                Body::Process(p) => {
                    if self.processes.len() >= MAX_ROWS {
                        self.processes.clear();
                    }
                    self.processes.insert(cookie, p.clone());
                }
                Body::State(s) if s.new == 7 => {
                    self.processes.remove(&cookie);
                }
                _ => {}
            }
            return;
        }
        if self.row(&e.conn, e.ts_ns).is_none() {
            self.ignored += 1;
            return;
        }
        self.events += 1;
        let known = self.processes.remove(&cookie);
        let Some(r) = self.rows.get_mut(&cookie) else { return };
        if r.process.is_none() {
            r.process = known;
        }
        r.last_ns = r.last_ns.max(e.ts_ns);
        match &e.body {
            Body::Sample(s) => {
                r.srtt_us = s.srtt_us;
                r.acked(e.ts_ns, s.bytes_acked);
            }
            Body::Snapshot(s) | Body::Close(s) => {
                if r.process.is_none() && s.process.pid != 0 {
                    r.process = Some(s.process.clone());
                }
                r.srtt_us = s.srtt_us;
                r.acked(e.ts_ns, s.bytes_acked);
                if matches!(e.body, Body::Close(_)) || s.state == 7 {
                    r.closed = true;
                    r.closed_ns = e.ts_ns;
                }
            }
            Body::Process(p) => r.process = Some(p.clone()),
            Body::State(s) if s.new == 7 => {
                r.closed = true;
                r.closed_ns = e.ts_ns;
            }
            _ => {}
        }
    }

    pub fn finding(&mut self, f: &Finding) {
        self.now_ns = self.now_ns.max(f.ts_ns);
        let Some(id) = f.conn else { return };
        if self.row(&id, f.start_ns).is_none() {
            return;
        }
        self.findings += 1;
        let Some(r) = self.rows.get_mut(&id.cookie) else { return };
        let now = f.ongoing.then_some(f.cause);
        match f.kind() {
            FindingKind::Stop => {
                if r.stop.is_none() && f.ongoing {
                    r.stops += 1;
                }
                r.stop = now;
            }
            FindingKind::Limit => r.limit = now,
            FindingKind::Unfair => r.unfair = f.ongoing.then(|| f.group.clone().unwrap_or_default()),
            FindingKind::Path => {}
        }
    }

    /// Time passes: quiet connections move nothing, closed ones go after a while; re-sort.
    pub fn tick(&mut self, now: u64) {
        self.now_ns = self.now_ns.max(now);
        let now = self.now_ns;
        self.rows.retain(|_, r| !r.closed || now < r.closed_ns + CLOSED_KEPT_NS);
        for r in self.rows.values_mut() {
            if now > r.last_ns + QUIET_NS {
                r.goodput_bps = 0.0;
                r.window = (now, r.bytes_acked);
            }
        }
        self.sort();
    }

    /// Listed connections by goodput (then by bytes delivered, then cookie: a stable order).
    pub fn sort(&mut self) {
        let rows = &self.rows;
        self.order.clear();
        self.order.extend(rows.values().filter(|r| r.listed()).map(|r| r.id.cookie));
        self.order.sort_by(|a, b| {
            let (x, y) = (&rows[a], &rows[b]);
            y.goodput_bps.total_cmp(&x.goodput_bps).then(y.bytes_acked.cmp(&x.bytes_acked)).then(a.cmp(b))
        });
        // A connection gone from the list leaves the cursor where it was on the screen.
        match self.cursor.and_then(|c| self.order.iter().position(|k| *k == c)) {
            Some(i) => self.cursor_at = i,
            None => self.cursor = self.order.get(self.cursor_at.min(self.order.len().saturating_sub(1))).copied(),
        }
    }

    /// The listed rows, in order.
    pub fn listed(&self) -> impl Iterator<Item = &HostRow> {
        self.order.iter().filter_map(|k| self.rows.get(k))
    }

    pub fn get(&self, cookie: u64) -> Option<&HostRow> {
        self.rows.get(&cookie)
    }

    /// The cursor's position in the list (0 when it is on nothing).
    pub fn cursor_index(&self) -> usize {
        self.cursor.and_then(|c| self.order.iter().position(|k| *k == c)).unwrap_or(0)
    }

    /// Move the cursor by `by` rows (negative: up), within the list.
    pub fn move_cursor(&mut self, by: isize) {
        if self.order.is_empty() {
            return;
        }
        let i = (self.cursor_index() as isize + by).clamp(0, self.order.len() as isize - 1) as usize;
        self.cursor = Some(self.order[i]);
        self.cursor_at = i;
    }

    /// The row under the cursor.
    pub fn selected(&self) -> Option<&HostRow> {
        self.rows.get(&self.cursor?)
    }

    /// One line of `watch --json` without `--conn`: the listed connections, busiest first.
    pub fn line(&self) -> HostLine<'_> {
        HostLine { ts_ns: self.now_ns, conns: self.listed().collect() }
    }
}

/// The host view as one JSON line.
#[derive(Debug, Serialize)]
pub struct HostLine<'a> {
    pub ts_ns: u64,
    pub conns: Vec<&'a HostRow>,
}
