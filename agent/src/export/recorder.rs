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
use std::io::{BufWriter, Write};
use std::mem::size_of;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::model::record::StateChange;
use crate::model::{Body, CaState, ConnId, Event, Finding, FindingKind, Retrans, Rto, Sample};
use crate::plot;
use crate::recording::{self, Header};

/// `[recorder]` in the config file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecorderConfig {
    /// Where dumps go, one folder per dump.
    pub dir: PathBuf,
    /// History kept before a finding's start, seconds.
    pub seconds_before: f64,
    /// History recorded after a finding's latest report before the dump is written, seconds.
    pub seconds_after: f64,
    /// Memory cap of one connection's history, bytes (measured: ~150 bytes per per-ACK sample).
    pub max_bytes_per_conn: usize,
    /// Connections with a history at once; the least recently active is dropped first.
    pub max_conns: usize,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            dir: PathBuf::from("/var/lib/tcpvigil/dumps"),
            seconds_before: 30.0,
            seconds_after: 10.0,
            max_bytes_per_conn: 8 << 20,
            max_conns: 64,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    #[error("recorder: {0}")]
    Config(String),
    #[error("recorder: writing the dump in {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("recorder: drawing the dump's pictures: {0:#}")]
    Plot(anyhow::Error),
}

impl RecorderConfig {
    /// Reject settings that cannot work, with the key that is wrong.
    pub fn validate(&self) -> Result<(), RecorderError> {
        let secs = |k: &str, v: f64| {
            if v.is_finite() && (0.0..=3600.0).contains(&v) {
                Ok(())
            } else {
                Err(RecorderError::Config(format!("{k} = {v}: must be 0 to 3600 seconds")))
            }
        };
        secs("seconds_before", self.seconds_before)?;
        secs("seconds_after", self.seconds_after)?;
        if self.max_bytes_per_conn < 64 << 10 {
            return Err(RecorderError::Config(format!(
                "max_bytes_per_conn = {}: at least 65536 (about 400 samples)",
                self.max_bytes_per_conn
            )));
        }
        if self.max_conns == 0 {
            return Err(RecorderError::Config("max_conns = 0: at least 1".into()));
        }
        Ok(())
    }
}

/// How long a dump waits for an ongoing finding to end before it is written anyway, seconds.
pub const FOLLOW_S: f64 = 60.0;

/// A connection with this many bytes acknowledged in a snapshot is bulk even without samples.
pub const BULK_BYTES: u64 = 1 << 20;

/// One stored event: samples and loss events inline (most of the history), snapshots and owners
/// boxed so that they do not make every slot as large as a snapshot.
#[derive(Debug, Clone)]
enum Item {
    Sample(Sample),
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
            Body::Sample(x) => Item::Sample(x.clone()),
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
            Item::Sample(x) => Body::Sample(x.clone()),
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
            Item::Sample(x) => x.sack.capacity() * size_of::<(u32, u32)>(),
            Item::Retrans(_) | Item::LostRetrans(_) | Item::CaState(_) | Item::Rto(_) | Item::State(_) => 0,
            Item::Other(b) => {
                size_of::<Body>()
                    + match b.as_ref() {
                        Body::Snapshot(s) | Body::Close(s) => s.cc.capacity() + s.owner.comm.capacity(),
                        Body::Owner(o) => o.comm.capacity(),
                        _ => 0,
                    }
            }
        }
}

#[derive(Debug)]
struct History {
    id: ConnId,
    items: VecDeque<Stored>,
    bytes: usize,
    last_ns: u64,
    closed: bool,
    /// The latest snapshot, kept aside so a dump always has options, cc and owner.
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
    (f.kind, who, f.start_ns)
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

    fn make_room(&mut self) {
        while self.conns.len() >= self.cfg.max_conns {
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
                History { id: ev.conn, items: VecDeque::new(), bytes: 0, last_ns: ev.ts_ns, closed: false, snap: None },
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
        let s = Stored { ts_ns: ev.ts_ns, item: Item::of(&ev.body) };
        h.bytes += stored_bytes(&s);
        h.items.push_back(s);
        while let Some(front) = h.items.front() {
            let old = front.ts_ns < keep_from;
            if !old && h.bytes <= cap {
                break;
            }
            if !old {
                self.evicted_events += 1;
            }
            h.bytes -= stored_bytes(front);
            h.items.pop_front();
        }
    }

    /// A new stop or unfair group opens a dump job (returned); a later report of the same finding
    /// extends the open job's window. Limits and findings without history return None.
    pub fn on_finding(&mut self, f: &Finding) -> Option<DumpJob> {
        if f.kind == FindingKind::Limit {
            return None;
        }
        self.now_ns = self.now_ns.max(f.ts_ns);
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
            return None;
        }
        if self.done.contains(&key) {
            return None;
        }
        let cookies: Vec<u64> = plot::finding_cookies(f).into_iter().filter(|k| self.conns.contains_key(k)).collect();
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

    fn collect(&self, job: DumpJob) -> ReadyDump {
        let mut events = Vec::new();
        let mut starts_ns = u64::MAX;
        for k in &job.cookies {
            let Some(h) = self.conns.get(k) else { continue };
            let first = events.len();
            for s in h.items.iter().filter(|s| s.ts_ns >= job.from_ns && s.ts_ns <= job.until_ns) {
                events.push(Event { ts_ns: s.ts_ns, conn: h.id, body: s.item.body() });
            }
            let start = events.get(first).map_or(job.from_ns, |e| e.ts_ns);
            starts_ns = starts_ns.min(start);
            let has_snap = events[first..].iter().any(|e| matches!(e.body, Body::Snapshot(_) | Body::Close(_)));
            if let (false, Some(snap)) = (has_snap, &h.snap) {
                // Options, cc and owner for the picture's title, stamped at the window's start.
                events.push(Event { ts_ns: start, conn: h.id, body: snap.as_ref().clone() });
            }
        }
        events.sort_by_key(|e| e.ts_ns);
        ReadyDump { starts_ns: if starts_ns == u64::MAX { job.from_ns } else { starts_ns }, job, events }
    }

    pub fn stats(&self) -> RecorderStats {
        RecorderStats {
            conns: self.conns.len(),
            events: self.conns.values().map(|h| h.items.len()).sum(),
            bytes: self.conns.values().map(|h| h.bytes).sum(),
            largest_conn_bytes: self.conns.values().map(|h| h.bytes).max().unwrap_or(0),
            open_jobs: self.jobs.len(),
            evicted_events: self.evicted_events,
            evicted_conns: self.evicted_conns,
            no_history: self.no_history,
        }
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `stop-40961-20231114T221320Z`: kind, who, when it started (UTC).
pub fn dump_name(job: &DumpJob, mono_to_unix_ns: i64) -> String {
    let unix = (job.finding.start_ns as i64 + mono_to_unix_ns).div_euclid(1_000_000_000);
    let (y, mo, d) = civil(unix.div_euclid(86_400));
    let s = unix.rem_euclid(86_400);
    let kind = match job.finding.kind {
        FindingKind::Stop => "stop",
        FindingKind::Unfair => "unfair",
        FindingKind::Limit => "limit",
    };
    let who = job.finding.conn.map_or_else(|| format!("job{}", job.id), |c| c.cookie.to_string());
    format!("{kind}-{who}-{y:04}{mo:02}{d:02}T{:02}{:02}{:02}Z", s / 3600, s / 60 % 60, s % 60)
}

/// Write `dir/NAME/recording.jsonl` (the recording format, so `analyze` and `plot` read it),
/// `recording.findings.jsonl` and the pictures. `header` is the daemon's recording header; its
/// filters are replaced by the dumped cookies. Blocking IO.
pub fn write_dump(dump: &ReadyDump, dir: &Path, header: &Header) -> Result<DumpFiles, RecorderError> {
    let name = dump_name(&dump.job, header.mono_to_unix_ns);
    let tmp = dir.join(format!(".{name}.tmp"));
    let fin = dir.join(&name);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RecorderError::Io { path, source }
    };
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    let rec_path = tmp.join("recording.jsonl");
    let mut h = header.clone();
    h.filters = dump.job.cookies.iter().map(|k| k.to_string()).collect();
    let mut w = BufWriter::new(std::fs::File::create(&rec_path).map_err(io(&rec_path))?);
    recording::write_header(&mut w, &h).map_err(io(&rec_path))?;
    for e in &dump.events {
        recording::write_event(&mut w, e).map_err(io(&rec_path))?;
    }
    w.flush().map_err(io(&rec_path))?;
    drop(w);
    let f_path = plot::findings_path_for(&rec_path);
    let mut line = serde_json::to_vec(&dump.job.finding).map_err(|e| io(&f_path)(e.into()))?;
    line.push(b'\n');
    std::fs::write(&f_path, line).map_err(io(&f_path))?;
    let rec = recording::Recording { header: h, events: dump.events.clone(), truncated_tail: false };
    plot::plot_recording(&rec, None, std::slice::from_ref(&dump.job.finding), &tmp).map_err(RecorderError::Plot)?;
    if fin.exists() {
        std::fs::remove_dir_all(&fin).map_err(io(&fin))?;
    }
    std::fs::rename(&tmp, &fin).map_err(io(&fin))?;
    let mut pictures: Vec<PathBuf> = std::fs::read_dir(&fin)
        .map_err(io(&fin))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "png" || x == "svg"))
        .collect();
    pictures.sort();
    Ok(DumpFiles {
        recording: fin.join("recording.jsonl"),
        findings: fin.join("recording.findings.jsonl"),
        pictures,
        dir: fin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::synth;

    fn cfg(dir: &Path) -> RecorderConfig {
        RecorderConfig { dir: dir.to_path_buf(), seconds_before: 2.0, seconds_after: 1.0, ..RecorderConfig::default() }
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tcpvigil-recorder-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn config_denies_unknown_keys_and_checks_ranges() {
        let ok: RecorderConfig = serde_json::from_str(r#"{"dir": "/tmp/x", "seconds_after": 5}"#).unwrap();
        assert_eq!(ok.seconds_after, 5.0);
        assert_eq!(ok.seconds_before, RecorderConfig::default().seconds_before);
        let e = serde_json::from_str::<RecorderConfig>(r#"{"second_before": 5}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let bad = RecorderConfig { seconds_before: -1.0, ..RecorderConfig::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("seconds_before"));
        let bad = RecorderConfig { max_bytes_per_conn: 10, ..RecorderConfig::default() };
        assert!(Recorder::new(bad).is_err());
    }

    /// The number the docs quote: `cargo test -p tcpvigil --lib recorder::tests::memory -- --nocapture`.
    #[test]
    fn memory_per_stored_sample_is_measured_and_the_cap_holds() {
        let (rec, _) = synth::outage();
        let cap = 256 << 10;
        let mut r = Recorder::new(RecorderConfig { seconds_before: 3600.0, max_bytes_per_conn: cap, ..cfg(Path::new("/nonexistent")) }).unwrap();
        let samples = rec.events.iter().filter(|e| matches!(e.body, Body::Sample(_))).count();
        let mut only = Recorder::new(r.config().clone()).unwrap();
        for e in rec.events.iter().filter(|e| matches!(e.body, Body::Sample(_))).take(2000) {
            only.on_event(e);
        }
        let s = only.stats();
        let per_sample = s.bytes as f64 / s.events as f64;
        for e in rec.events.iter().take(2000) {
            r.on_event(e);
        }
        let s = r.stats();
        let per_event = s.bytes as f64 / s.events as f64;
        eprintln!(
            "recorder: {per_sample:.0} bytes per stored sample, {per_event:.0} per event of the outage mix \
             ({} bytes per slot; a model Event is {} bytes); {} samples per MiB",
            size_of::<Stored>(),
            size_of::<Event>(),
            (1u64 << 20) / per_sample as u64
        );
        assert!(per_sample < 160.0, "{per_sample} bytes per stored sample");
        assert!(per_event < 200.0, "{per_event} bytes per stored event");
        for e in &rec.events {
            r.on_event(e);
        }
        let s = r.stats();
        assert!(s.largest_conn_bytes <= cap, "{} > {cap}", s.largest_conn_bytes);
        assert!(s.evicted_events > 0 && s.events < samples);
    }

    #[test]
    fn only_bulk_connections_get_a_history_and_max_conns_evicts_the_idlest() {
        let mut r = Recorder::new(RecorderConfig { max_conns: 2, ..cfg(Path::new("/x")) }).unwrap();
        let (rec, _) = synth::parallel();
        let owner_only = rec.events.iter().find(|e| matches!(e.body, Body::Owner(_))).unwrap();
        r.on_event(owner_only);
        assert_eq!(r.stats().conns, 0, "an Owner event alone does not make a connection bulk");
        for e in &rec.events {
            r.on_event(e);
        }
        let s = r.stats();
        assert_eq!(s.conns, 2);
        assert!(s.evicted_conns >= 2);
    }

    #[test]
    fn stop_dump_completes_after_seconds_after_and_writes_recording_findings_and_pictures() {
        let dir = tmp("stop");
        let (rec, findings) = synth::outage();
        let mut r = Recorder::new(cfg(&dir)).unwrap();
        let (first, last) = (&findings[0], &findings[1]);
        let mut job = None;
        let mut ready = Vec::new();
        for e in &rec.events {
            if job.is_none() && e.ts_ns >= first.ts_ns {
                job = r.on_finding(first);
                assert!(job.is_some());
                assert_eq!(r.on_finding(first), None, "the same finding opens one job");
            }
            if e.ts_ns >= last.ts_ns && r.stats().open_jobs == 1 && ready.is_empty() {
                assert_eq!(r.on_finding(last), None, "a later report extends the job");
            }
            r.on_event(e);
            ready.extend(r.take_ready(e.ts_ns));
            if !ready.is_empty() {
                break;
            }
        }
        let job = job.unwrap();
        assert_eq!(ready.len(), 1);
        let d = &ready[0];
        assert_eq!(d.job.id, job.id);
        // From 2 s before the stop's start (1.0 s) to 1 s after its end (4.0 s).
        let t = |ns: u64| (ns - synth::T0) as f64 / 1e9;
        assert!((t(d.job.until_ns) - 5.0).abs() < 1e-6, "{}", t(d.job.until_ns));
        let (a, b) = (t(d.events[0].ts_ns), t(d.events.last().unwrap().ts_ns));
        assert!(a <= 0.01 && b >= 4.99 && b <= 5.0, "{a}..{b}");
        assert!(d.events.iter().any(|e| matches!(e.body, Body::Rto(_))));
        let header = synth::header(&[]);
        let files = write_dump(d, &dir, &header).unwrap();
        assert!(files.dir.file_name().unwrap().to_string_lossy().starts_with("stop-40961-2023"), "{files:?}");
        let back = recording::read(std::io::BufReader::new(std::fs::File::open(&files.recording).unwrap())).unwrap();
        assert_eq!(back.events, d.events);
        assert_eq!(back.header.filters, vec!["40961".to_string()]);
        assert_eq!(plot::read_findings(&files.findings).unwrap()[0].duration_s, Some(3.0));
        let names: Vec<String> = files.pictures.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, vec!["conn-40961.png", "conn-40961.svg"]);
        assert!(std::fs::metadata(&files.pictures[0]).unwrap().len() > 20_000);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unfair_dump_holds_every_stream_of_the_group() {
        let dir = tmp("unfair");
        let (rec, findings) = synth::parallel();
        let mut r = Recorder::new(cfg(&dir)).unwrap();
        let mut opened = false;
        let mut ready = Vec::new();
        for e in &rec.events {
            if !opened && e.ts_ns >= findings[0].ts_ns {
                opened = r.on_finding(&findings[0]).is_some();
            }
            r.on_event(e);
            ready.extend(r.take_ready(e.ts_ns));
        }
        assert!(opened);
        assert_eq!(ready.len(), 1);
        let mut cookies: Vec<u64> = ready[0].events.iter().map(|e| e.conn.cookie).collect();
        cookies.dedup();
        cookies.sort_unstable();
        cookies.dedup();
        assert_eq!(cookies, vec![50000, 50001, 50002, 50003]);
        let files = write_dump(&ready[0], &dir, &synth::header(&[])).unwrap();
        assert!(files.pictures.iter().any(|p| p.ends_with("group-1.png")), "{files:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn dump_names_use_utc_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_675), (2023, 11, 14));
        assert_eq!(civil(11_016), (2000, 2, 29));
    }
}
