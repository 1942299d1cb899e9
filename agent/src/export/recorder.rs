//! The flight recorder: a bounded recent history per bulk connection, dumped (recording file,
//! findings, SVG and PNG pictures) around each stop or unfair group the detectors report.
//!
//! Use: `on_event` for every event; `on_finding` for every finding (a new stop or unfair group
//! opens a `DumpJob` whose window runs from `seconds_before` the finding's start to `seconds_after`
//! its latest report, so it completes later); `take_ready(now)` on each tick hands over the jobs
//! whose window has passed, with their events copied out; `write_dump` (blocking IO: call it
//! from `spawn_blocking`) writes them. Memory: each connection's history is capped at
//! `max_bytes_per_conn` (oldest dropped first) and at most `max_conns` are kept.
use std::collections::{HashMap, VecDeque};
use std::mem::size_of;
use std::path::PathBuf;

use crate::model::event::StateChange;
use crate::model::{Body, CaState, ConnId, Event, Finding, FindingKind, Retrans, Rto};
use crate::plot;

mod codec;
mod config;
pub mod sink;
mod write;
use codec::SampleLog;
pub use codec::CHUNK_BYTES;
pub use config::{RecorderConfig, RecorderConfigError};
pub use write::{dump_name, write_dump};

#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    #[error(transparent)]
    Config(#[from] RecorderConfigError),
    #[error("recorder: writing the dump in {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("recorder: the dump directory {path} is {why}; give each daemon its own")]
    Busy { path: PathBuf, why: String },
    #[error("recorder: drawing the dump's pictures: {0}")]
    Plot(#[from] plot::PlotError),
}

/// How long a dump waits for an ongoing finding to end before it is written anyway, seconds.
pub const FOLLOW_S: f64 = 60.0;

/// A connection with this many bytes acknowledged in a snapshot is bulk even without samples.
pub const BULK_BYTES: u64 = 1 << 20;

/// One stored event other than a sample: loss events inline, snapshots and processes boxed so that
/// they do not make every slot as large as a snapshot. Samples go to the compact `SampleLog`.
#[derive(Debug, Clone)]
enum Item {
    Retrans(Retrans),
    LostRetrans(Retrans),
    CaState(CaState),
    Rto(Rto),
    State(StateChange),
    Other(Box<Body>),
}

impl Item {
    fn of(b: &Body) -> Item {
        match b {
            Body::Retrans(x) => Item::Retrans(x.clone()),
            Body::LostRetrans(x) => Item::LostRetrans(x.clone()),
            Body::CaState(x) => Item::CaState(x.clone()),
            Body::Rto(x) => Item::Rto(x.clone()),
            Body::State(x) => Item::State(x.clone()),
            other => Item::Other(Box::new(other.clone())),
        }
    }

    fn body(&self) -> Body {
        match self {
            Item::Retrans(x) => Body::Retrans(x.clone()),
            Item::LostRetrans(x) => Body::LostRetrans(x.clone()),
            Item::CaState(x) => Body::CaState(x.clone()),
            Item::Rto(x) => Body::Rto(x.clone()),
            Item::State(x) => Body::State(x.clone()),
            Item::Other(b) => b.as_ref().clone(),
        }
    }
}

#[derive(Debug, Clone)]
struct Stored {
    ts_ns: u64,
    item: Item,
}

/// Bytes one stored event takes: its slot plus what it owns on the heap.
fn stored_bytes(s: &Stored) -> usize {
    size_of::<Stored>()
        + match &s.item {
            Item::Retrans(_) | Item::LostRetrans(_) | Item::CaState(_) | Item::Rto(_) | Item::State(_) => 0,
            Item::Other(b) => {
                size_of::<Body>()
                    + match b.as_ref() {
                        Body::Snapshot(s) | Body::Close(s) => s.cc.capacity() + s.process.comm.capacity(),
                        Body::Process(o) => o.comm.capacity(),
                        _ => 0,
                    }
            }
        }
}

#[derive(Debug)]
struct History {
    id: ConnId,
    samples: SampleLog,
    items: VecDeque<Stored>,
    /// Bytes of `items` (the sample log counts its own).
    bytes: usize,
    last_ns: u64,
    closed: bool,
    /// The latest snapshot, kept aside so a dump always has options, cc and process.
    snap: Option<Box<Body>>,
}

/// A dump in progress: which connections, which window.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpJob {
    pub id: u64,
    /// The latest report of the finding.
    pub finding: Finding,
    pub cookies: Vec<u64>,
    pub from_ns: u64,
    pub until_ns: u64,
}

/// A job whose window has passed, with its events copied out (time order).
#[derive(Debug, Clone)]
pub struct ReadyDump {
    pub job: DumpJob,
    pub events: Vec<Event>,
    /// The history no longer reached back to `from_ns` (memory cap): it starts here.
    pub starts_ns: u64,
}

/// Files one dump wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpFiles {
    pub dir: PathBuf,
    pub recording: PathBuf,
    pub findings: PathBuf,
    pub pictures: Vec<PathBuf>,
}

/// Counts for metrics and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    pub conns: usize,
    pub events: usize,
    pub bytes: usize,
    pub largest_conn_bytes: usize,
    pub open_jobs: usize,
    /// Events dropped by the per-connection cap while still inside the time window.
    pub evicted_events: u64,
    /// Histories dropped because `max_conns` were held.
    pub evicted_conns: u64,
    /// Findings about connections with no history (not bulk, or seen too late).
    pub no_history: u64,
}

#[derive(Debug)]
pub struct Recorder {
    cfg: RecorderConfig,
    conns: HashMap<u64, History>,
    jobs: Vec<DumpJob>,
    done: VecDeque<(FindingKind, String, u64)>,
    next_id: u64,
    now_ns: u64,
    evicted_events: u64,
    evicted_conns: u64,
    no_history: u64,
}

fn ns(s: f64) -> u64 {
    (s * 1e9) as u64
}

fn finding_key(f: &Finding) -> (FindingKind, String, u64) {
    let who = match (&f.group, &f.conn) {
        (Some(g), _) => g.clone(),
        (None, Some(c)) => c.cookie.to_string(),
        (None, None) => String::new(),
    };
    (f.kind(), who, f.start_ns)
}

impl Recorder {
    pub fn new(cfg: RecorderConfig) -> Result<Self, RecorderError> {
        cfg.validate()?;
        Ok(Recorder {
            cfg,
            conns: HashMap::new(),
            jobs: Vec::new(),
            done: VecDeque::new(),
            next_id: 1,
            now_ns: 0,
            evicted_events: 0,
            evicted_conns: 0,
            no_history: 0,
        })
    }

    pub fn config(&self) -> &RecorderConfig {
        &self.cfg
    }

    /// Earliest time an open job still needs for `cookie`.
    fn pinned_from(&self, cookie: u64) -> Option<u64> {
        self.jobs.iter().filter(|j| j.cookies.contains(&cookie)).map(|j| j.from_ns).min()
    }

    /// New limits (a reload; `dir` and `enabled` are the caller's): fewer connections are evicted
    /// at once, a smaller per-connection cap and the window apply from the next event on.
    pub fn set_config(&mut self, cfg: RecorderConfig) -> Result<(), RecorderError> {
        cfg.validate()?;
        self.cfg = cfg;
        self.evict_to(self.cfg.max_conns);
        Ok(())
    }

    fn make_room(&mut self) {
        self.evict_to(self.cfg.max_conns.saturating_sub(1));
    }

    /// Drop histories until at most `n` remain.
    fn evict_to(&mut self, n: usize) {
        while self.conns.len() > n {
            // Closed first, then the least recently active.
            let victim = self.conns.values().min_by_key(|h| (!h.closed, h.last_ns)).map(|h| h.id.cookie);
            match victim {
                Some(k) => {
                    self.conns.remove(&k);
                    self.evicted_conns += 1;
                }
                None => break,
            }
        }
    }

    /// Keep one event of a bulk connection (samples, loss events, snapshots, state).
    pub fn on_event(&mut self, ev: &Event) {
        self.now_ns = self.now_ns.max(ev.ts_ns);
        let cookie = ev.conn.cookie;
        if !self.conns.contains_key(&cookie) {
            let bulk = match &ev.body {
                Body::Sample(_) => true,
                Body::Snapshot(s) => s.bytes_acked >= BULK_BYTES,
                _ => false,
            };
            if !bulk {
                return;
            }
            self.make_room();
            self.conns.insert(
                cookie,
                History {
                    id: ev.conn,
                    samples: SampleLog::default(),
                    items: VecDeque::new(),
                    bytes: 0,
                    last_ns: ev.ts_ns,
                    closed: false,
                    snap: None,
                },
            );
        }
        let keep_from = self.now_ns.saturating_sub(ns(self.cfg.seconds_before));
        let keep_from = self.pinned_from(cookie).map_or(keep_from, |p| p.min(keep_from));
        let cap = self.cfg.max_bytes_per_conn;
        let Some(h) = self.conns.get_mut(&cookie) else { return };
        h.last_ns = h.last_ns.max(ev.ts_ns);
        if let Body::Snapshot(_) | Body::Close(_) = &ev.body {
            h.snap = Some(Box::new(ev.body.clone()));
        }
        if let Body::Close(_) = &ev.body {
            h.closed = true;
        }
        if let Body::Sample(x) = &ev.body {
            h.samples.push(ev.ts_ns, x);
        } else {
            let s = Stored { ts_ns: ev.ts_ns, item: Item::of(&ev.body) };
            h.bytes += stored_bytes(&s);
            h.items.push_back(s);
        }
        // Drop what is older than needed, then the oldest until under the cap.
        loop {
            let item_ts = h.items.front().map(|s| s.ts_ns);
            let chunk_end = h.samples.oldest_chunk_end();
            let old_item = item_ts.is_some_and(|t| t < keep_from);
            let old_chunk = chunk_end.is_some_and(|t| t < keep_from) && !h.samples.is_empty();
            let over = h.bytes + h.samples.bytes() > cap;
            if !(old_item || old_chunk || over) {
                break;
            }
            // Which goes: an expired one, else the older of the two fronts.
            let chunk_first = h.samples.first_ts().unwrap_or(u64::MAX);
            let take_item = old_item || (!old_chunk && item_ts.is_some_and(|t| t <= chunk_first));
            if take_item {
                if let Some(front) = h.items.pop_front() {
                    h.bytes -= stored_bytes(&front);
                    self.evicted_events += u64::from(!old_item);
                }
            } else {
                // The chunk being filled goes too if it alone is over the cap.
                let n = h.samples.pop_front();
                if !old_chunk {
                    self.evicted_events += n as u64;
                }
                if n == 0 {
                    break;
                }
            }
        }
    }

    /// A new stop or unfair group opens a dump job (returned); a later report of the same finding
    /// extends the open job's window. Limits and findings without history return None.
    pub fn on_finding(&mut self, f: &Finding) -> Option<DumpJob> {
        if f.kind() == FindingKind::Limit || f.path.event.is_some() {
            // A stop that is part of a path event is dumped with the event.
            return None;
        }
        self.now_ns = self.now_ns.max(f.ts_ns);
        if f.kind() == FindingKind::Path {
            // One event, one dump: its members' own stop dumps (the first stop is reported alone
            // before the second shows it is a path event) give way to it.
            let members = f.cookies();
            self.jobs.retain(|j| {
                !(j.finding.kind() == FindingKind::Stop && j.finding.conn.is_some_and(|c| members.contains(&c.cookie)))
            });
        }
        let key = finding_key(f);
        let after = ns(self.cfg.seconds_after);
        let latest = match f.duration_s {
            Some(d) if !f.ongoing => f.ts_ns.max(f.start_ns + ns(d)),
            _ => f.ts_ns,
        };
        if let Some(j) = self.jobs.iter_mut().find(|j| finding_key(&j.finding) == key) {
            // Follow the finding while it lasts, up to ten minutes past the first window.
            let limit = j.from_ns + ns(self.cfg.seconds_before + self.cfg.seconds_after) + ns(600.0);
            j.until_ns = j.until_ns.max(latest + after).min(limit);
            j.finding = f.clone();
            // A path event grows: connections that stopped after its first report join its dump.
            for k in f.cookies() {
                if self.conns.contains_key(&k) && !j.cookies.contains(&k) {
                    j.cookies.push(k);
                }
            }
            return None;
        }
        if self.done.contains(&key) {
            return None;
        }
        let cookies: Vec<u64> = f.cookies().into_iter().filter(|k| self.conns.contains_key(k)).collect();
        if cookies.is_empty() {
            self.no_history += 1;
            return None;
        }
        let job = DumpJob {
            id: self.next_id,
            finding: f.clone(),
            cookies,
            from_ns: f.start_ns.saturating_sub(ns(self.cfg.seconds_before)),
            until_ns: latest + after,
        };
        self.next_id += 1;
        self.jobs.push(job.clone());
        Some(job)
    }

    /// Jobs whose window has passed at `now_ns` (or whose connections all closed), with their
    /// events; also forgets closed connections nothing needs any more.
    pub fn take_ready(&mut self, now_ns: u64) -> Vec<ReadyDump> {
        self.now_ns = self.now_ns.max(now_ns);
        let now = self.now_ns;
        let mut ready = Vec::new();
        let mut i = 0;
        while i < self.jobs.len() {
            let j = &self.jobs[i];
            let all_closed = j.cookies.iter().all(|k| self.conns.get(k).is_none_or(|h| h.closed));
            // An ongoing finding is followed until it ends (or for FOLLOW_S at most).
            let due = if j.finding.ongoing { now >= j.until_ns + ns(FOLLOW_S) } else { now >= j.until_ns };
            if due || all_closed {
                let job = self.jobs.swap_remove(i);
                ready.push(self.collect(job));
            } else {
                i += 1;
            }
        }
        for r in &ready {
            self.done.push_back(finding_key(&r.job.finding));
            if self.done.len() > 1024 {
                self.done.pop_front();
            }
        }
        let linger = ns(self.cfg.seconds_before + self.cfg.seconds_after);
        let jobs = &self.jobs;
        self.conns.retain(|k, h| !h.closed || h.last_ns + linger > now || jobs.iter().any(|j| j.cookies.contains(k)));
        ready
    }

    /// Every open job, due or not (the daemon is stopping), so that nothing recorded is left unwritten.
    pub fn flush(&mut self) -> Vec<ReadyDump> {
        let jobs = std::mem::take(&mut self.jobs);
        jobs.into_iter().map(|j| self.collect(j)).collect()
    }

    fn collect(&self, job: DumpJob) -> ReadyDump {
        let mut events = Vec::new();
        let mut starts_ns = u64::MAX;
        for k in &job.cookies {
            let Some(h) = self.conns.get(k) else { continue };
            let first = events.len();
            let mut samples = Vec::new();
            h.samples.window(job.from_ns, job.until_ns, &mut samples);
            events.extend(samples.into_iter().map(|(ts_ns, s)| Event { ts_ns, conn: h.id, body: Body::Sample(s) }));
            for s in h.items.iter().filter(|s| s.ts_ns >= job.from_ns && s.ts_ns <= job.until_ns) {
                events.push(Event { ts_ns: s.ts_ns, conn: h.id, body: s.item.body() });
            }
            events[first..].sort_by_key(|e| e.ts_ns);
            let start = events.get(first).map_or(job.from_ns, |e| e.ts_ns);
            starts_ns = starts_ns.min(start);
            let has_snap = events[first..].iter().any(|e| matches!(e.body, Body::Snapshot(_) | Body::Close(_)));
            if let (false, Some(snap)) = (has_snap, &h.snap) {
                // Options, cc and process for the picture's title, stamped at the window's start.
                events.push(Event { ts_ns: start, conn: h.id, body: snap.as_ref().clone() });
            }
        }
        events.sort_by_key(|e| e.ts_ns);
        ReadyDump { starts_ns: if starts_ns == u64::MAX { job.from_ns } else { starts_ns }, job, events }
    }

    pub fn stats(&self) -> RecorderStats {
        RecorderStats {
            conns: self.conns.len(),
            events: self.conns.values().map(|h| h.items.len() + h.samples.len()).sum(),
            bytes: self.conns.values().map(|h| h.bytes + h.samples.bytes()).sum(),
            largest_conn_bytes: self.conns.values().map(|h| h.bytes + h.samples.bytes()).max().unwrap_or(0),
            open_jobs: self.jobs.len(),
            evicted_events: self.evicted_events,
            evicted_conns: self.evicted_conns,
            no_history: self.no_history,
        }
    }
}

#[cfg(test)]
mod tests;
