//! Writes the recorder's dumps on their own thread (blocking IO and pictures), keeps the dump
//! directory within `max_dumps` and `max_disk_mib`, and counts every dump written, failed or dropped.
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{write_dump, ReadyDump, RecorderConfig, RecorderError};
use crate::files::{self, Existing};
use crate::model::FindingKind;
use crate::recording::Header;

/// Dumps waiting for the writer thread; more are dropped (and counted).
pub const QUEUE: usize = 4;

/// Outcomes so far (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpCounts {
    pub written: u64,
    /// Writing or drawing failed (the error is logged).
    pub failed: u64,
    /// Not written: the queue was full, or the daemon stopped before the writer got to it.
    pub dropped: u64,
}

#[derive(Debug, Default)]
struct Counts {
    written: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    queued: AtomicU64,
}

/// One dump folder found on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct OnDisk {
    pub path: PathBuf,
    pub modified: SystemTime,
    pub bytes: u64,
}

/// The dumps to delete, oldest first, so that at most `max_dumps` remain and together they take
/// at most `max_bytes`; `keep` (the dump just written) is never deleted.
pub fn prune_plan(mut dumps: Vec<OnDisk>, keep: &Path, max_dumps: usize, max_bytes: u64) -> Vec<PathBuf> {
    dumps.sort_by(|a, b| a.modified.cmp(&b.modified).then_with(|| a.path.cmp(&b.path)));
    let mut count = dumps.len();
    let mut bytes: u64 = dumps.iter().map(|d| d.bytes).sum();
    let mut out = Vec::new();
    for d in dumps {
        if count <= max_dumps && bytes <= max_bytes {
            break;
        }
        if d.path == keep {
            continue;
        }
        count -= 1;
        bytes -= d.bytes;
        out.push(d.path);
    }
    out
}

/// Whether a directory entry's name is a dump (`stop-…`, `path-…`, any kind, see `dump_name`).
fn is_dump(name: &str) -> bool {
    FindingKind::ALL.iter().any(|k| name.strip_prefix(k.as_str()).is_some_and(|rest| rest.starts_with('-')))
}

/// The dump folders in `dir` with their time and size (files directly inside them).
pub fn scan(dir: &Path) -> std::io::Result<Vec<OnDisk>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let meta = e.metadata()?;
        if !meta.is_dir() || !is_dump(&e.file_name().to_string_lossy()) {
            continue;
        }
        let mut bytes = 0;
        for f in std::fs::read_dir(e.path())?.flatten() {
            bytes += f.metadata().map(|m| m.len()).unwrap_or(0);
        }
        out.push(OnDisk { path: e.path(), modified: meta.modified()?, bytes });
    }
    Ok(out)
}

/// Owns the writer thread. `submit` never blocks; `finish` waits a bounded time.
#[derive(Debug)]
pub struct DumpSink {
    tx: Option<SyncSender<ReadyDump>>,
    done: Receiver<()>,
    counts: Arc<Counts>,
    dir: PathBuf,
    /// Monotonic to wall time for dump names and headers, followed when the wall clock steps.
    offset: Arc<AtomicI64>,
    /// max_dumps and max_disk_mib in bytes, as the writer applies them (a reload changes them).
    limits: Arc<[AtomicU64; 2]>,
    /// Held while the sink lives: one daemon per dump directory.
    _lock: File,
}

/// The dump directory's lock file (it holds the pid of the daemon writing there).
pub const LOCK_FILE: &str = ".tcpvigil.lock";

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RecorderError + '_ {
    move |source| RecorderError::Io { path: path.to_path_buf(), source }
}

impl DumpSink {
    /// Create `cfg.dir` (and prove it writable), remove half-written dumps a previous run left,
    /// and start the writer. An error here is a configuration problem: report it before loading.
    pub fn start(cfg: &RecorderConfig, header: Header) -> Result<DumpSink, RecorderError> {
        let dir = cfg.dir.clone();
        let lock = Self::prepare_dir(&dir)?;
        let (tx, rx) = mpsc::sync_channel::<ReadyDump>(QUEUE);
        let (done_tx, done) = mpsc::channel();
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let limits = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        set_limits(&limits, cfg);
        let l = limits.clone();
        let d = dir.clone();
        let offset = Arc::new(AtomicI64::new(header.mono_to_unix_ns));
        let o = offset.clone();
        std::thread::Builder::new()
            .name("tcpvigil-dumps".into())
            .spawn(move || {
                let mut header = header;
                for dump in rx {
                    c.queued.fetch_sub(1, Ordering::SeqCst);
                    header.mono_to_unix_ns = o.load(Ordering::Relaxed);
                    let (max_dumps, max_bytes) = (l[0].load(Ordering::Relaxed), l[1].load(Ordering::Relaxed));
                    write_one(&dump, &d, &header, &c, max_dumps as usize, max_bytes);
                }
                let _ = done_tx.send(());
            })
            .map_err(io_err(&dir))?;
        Ok(DumpSink { tx: Some(tx), done, counts, dir, offset, limits, _lock: lock })
    }

    /// Create `dir` if missing (0750; never through a symlink, never one other users can write
    /// to: files::create_dir), lock it for this daemon (`.tcpvigil.lock`: a second daemon on the
    /// same directory is told which process holds it), and remove half-written dumps
    /// (`.NAME.tmp`) a previous run left. Called by `start`, which keeps the lock; callable
    /// earlier to refuse a bad or busy directory up front.
    pub fn prepare_dir(dir: &Path) -> Result<File, RecorderError> {
        // 0750: dumps hold every segment of the connections they cover.
        files::create_dir(dir, 0o750).map_err(io_err(dir))?;
        let lock_path = dir.join(LOCK_FILE);
        let mut lock = files::create(&lock_path, Existing::Append, 0o640).map_err(io_err(dir))?;
        if let Err(e) = files::lock(&lock) {
            return Err(RecorderError::Busy { path: dir.to_path_buf(), why: e.to_string() });
        }
        // Who holds it, for people reading the directory (the lock itself is what counts).
        let _ = lock.set_len(0).and_then(|()| writeln!(lock, "{}", std::process::id()));
        for e in std::fs::read_dir(dir).map_err(io_err(dir))?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".tmp") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        Ok(lock)
    }

    /// Whether `prepare_dir` would succeed, creating nothing (`run --check-config`): the
    /// directory, or the nearest existing parent it would be made in, is safe and writable.
    pub fn check_dir(dir: &Path) -> Result<(), RecorderError> {
        let mut at = dir;
        while !at.exists() {
            match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => break,
            }
        }
        if at == dir {
            files::check_create(&dir.join(LOCK_FILE)).map_err(io_err(dir))
        } else {
            files::check_create(&at.join(".tcpvigil-dir-check")).map_err(io_err(dir))
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// New disk bounds (`max_dumps`, `max_disk_mib`), applied after the next dump (a reload).
    pub fn set_limits(&self, cfg: &RecorderConfig) {
        set_limits(&self.limits, cfg);
    }

    /// Follow a step of the wall clock: dumps written from now on are named and stamped with it.
    pub fn set_offset(&self, offset_ns: i64) {
        self.offset.store(offset_ns, Ordering::Relaxed);
    }

    /// Queue a dump for writing; when the queue is full it is dropped, counted and logged.
    pub fn submit(&self, dump: ReadyDump) {
        let Some(tx) = &self.tx else { return };
        self.counts.queued.fetch_add(1, Ordering::SeqCst);
        if let Err(TrySendError::Full(d) | TrySendError::Disconnected(d)) = tx.try_send(dump) {
            self.counts.queued.fetch_sub(1, Ordering::SeqCst);
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                finding = %d.job.finding.cause,
                "flight recorder: {QUEUE} dumps are already waiting to be written; this one is dropped"
            );
        }
    }

    pub fn counts(&self) -> DumpCounts {
        DumpCounts {
            written: self.counts.written.load(Ordering::Relaxed),
            failed: self.counts.failed.load(Ordering::Relaxed),
            dropped: self.counts.dropped.load(Ordering::Relaxed),
        }
    }

    /// Hand over `last` (the recorder's open jobs) and let the writer finish everything queued,
    /// for at most `wait` in all; what it could not write is counted as dropped. Returns the
    /// final counts.
    pub fn finish(mut self, last: Vec<ReadyDump>, wait: Duration) -> DumpCounts {
        let deadline = Instant::now() + wait;
        if let Some(tx) = self.tx.take() {
            for mut d in last {
                self.counts.queued.fetch_add(1, Ordering::SeqCst);
                loop {
                    match tx.try_send(d) {
                        Ok(()) => break,
                        Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                            d = back;
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(_) => {
                            self.counts.queued.fetch_sub(1, Ordering::SeqCst);
                            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                }
            }
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        if self.done.recv_timeout(wait).is_err() {
            let left = self.counts.queued.load(Ordering::SeqCst) + 1;
            self.counts.dropped.fetch_add(left, Ordering::Relaxed);
            tracing::warn!("flight recorder: stopped after {wait:?} with {left} dump(s) not yet written");
        }
        self.counts()
    }
}

fn set_limits(l: &[AtomicU64; 2], cfg: &RecorderConfig) {
    l[0].store(cfg.max_dumps as u64, Ordering::Relaxed);
    l[1].store(cfg.max_disk_mib.saturating_mul(1 << 20), Ordering::Relaxed);
}

fn write_one(dump: &ReadyDump, dir: &Path, header: &Header, c: &Counts, max_dumps: usize, max_bytes: u64) {
    let t = Instant::now();
    match write_dump(dump, dir, header) {
        Ok(files) => {
            c.written.fetch_add(1, Ordering::Relaxed);
            let before_s = dump.job.finding.start_ns.saturating_sub(dump.starts_ns) as f64 / 1e9;
            tracing::info!(
                dir = %files.dir.display(),
                events = dump.events.len(),
                pictures = files.pictures.len(),
                took_ms = t.elapsed().as_millis() as u64,
                history_before_start_s = before_s,
                "flight recorder: dump written"
            );
            match scan(dir) {
                Ok(all) => {
                    for p in prune_plan(all, &files.dir, max_dumps, max_bytes) {
                        if let Err(e) = std::fs::remove_dir_all(&p) {
                            tracing::warn!("flight recorder: deleting the old dump {}: {e}", p.display());
                        }
                    }
                }
                Err(e) => tracing::warn!("flight recorder: listing {} to delete old dumps: {e}", dir.display()),
            }
        }
        Err(e) => {
            c.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("flight recorder: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::recorder::{dump_name, Recorder};
    use crate::plot::synth;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tcpvigil-sink-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn cfg(dir: &Path) -> RecorderConfig {
        RecorderConfig { dir: dir.to_path_buf(), seconds_before: 2.0, seconds_after: 1.0, ..RecorderConfig::default() }
    }

    /// The synthetic outage's stop, flushed from a recorder; `shift_s` moves its start (and name).
    fn outage_dump(shift_s: u64) -> ReadyDump {
        let (rec, findings) = synth::outage();
        let mut r = Recorder::new(cfg(Path::new("/x"))).unwrap();
        let mut opened = false;
        for e in &rec.events {
            if !opened && e.ts_ns >= findings[0].ts_ns {
                opened = r.on_finding(&findings[0]).is_some();
            }
            r.on_event(e);
        }
        let mut d = r.flush().pop().unwrap();
        d.job.finding.start_ns += shift_s * 1_000_000_000;
        d
    }

    fn at(path: &str, secs: u64, bytes: u64) -> OnDisk {
        OnDisk { path: PathBuf::from(path), modified: SystemTime::UNIX_EPOCH + Duration::from_secs(secs), bytes }
    }

    #[test]
    fn every_kind_of_dump_is_a_dump_and_nothing_else_is() {
        for name in ["stop-40961-20231114T221320Z", "unfair-job3-20231114T221320Z", "path-job9-20231114T221320Z"] {
            assert!(is_dump(name), "{name}");
        }
        for name in [".stop-1-x.tmp", "stopper", "notes", "path"] {
            assert!(!is_dump(name), "{name}");
        }
    }

    #[test]
    fn prune_plan_deletes_the_oldest_until_count_and_bytes_fit_and_never_the_newest() {
        let dumps = vec![at("c", 3, 100), at("a", 1, 100), at("b", 2, 100)];
        assert_eq!(prune_plan(dumps.clone(), Path::new("c"), 5, 1000), Vec::<PathBuf>::new());
        assert_eq!(prune_plan(dumps.clone(), Path::new("c"), 2, 1000), vec![PathBuf::from("a")]);
        assert_eq!(prune_plan(dumps.clone(), Path::new("c"), 5, 150), vec![PathBuf::from("a"), PathBuf::from("b")]);
        // The one just written stays even when it alone is over the byte bound.
        assert_eq!(
            prune_plan(vec![at("old", 1, 10), at("new", 2, 500)], Path::new("new"), 5, 100),
            vec![PathBuf::from("old")]
        );
        // Its clock may be behind an older dump's (clock steps): still kept.
        assert_eq!(prune_plan(dumps, Path::new("a"), 1, 1000), vec![PathBuf::from("b"), PathBuf::from("c")]);
    }

    #[test]
    fn sink_writes_dumps_keeps_max_dumps_and_counts_a_failure() {
        let dir = tmp("write");
        let mut c = cfg(&dir);
        c.max_dumps = 2;
        let header = synth::header(&[]);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(dir.join(".stop-1-20000101T000000Z.tmp")).unwrap();
        let sink = DumpSink::start(&c, header.clone()).unwrap();
        assert!(!dir.join(".stop-1-20000101T000000Z.tmp").exists(), "a half-written dump was left");
        // A file where the dump's temporary folder goes makes that dump fail.
        let failing = outage_dump(100);
        std::fs::write(dir.join(format!(".{}.tmp", dump_name(&failing.job, header.mono_to_unix_ns))), b"x").unwrap();
        let mut names = Vec::new();
        for k in 0..3 {
            let d = outage_dump(k);
            names.push(dump_name(&d.job, header.mono_to_unix_ns));
            sink.submit(d);
            // One at a time, so that the queue never overflows and the times order them.
            while sink.counts().written < k + 1 {
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let counts = sink.finish(vec![failing], Duration::from_secs(60));
        assert_eq!(counts, DumpCounts { written: 3, failed: 1, dropped: 0 });
        let mut left: Vec<String> =
            scan(&dir).unwrap().iter().map(|d| d.path.file_name().unwrap().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, names[1..].to_vec(), "the two newest remain");
        for n in &names[1..] {
            for f in ["recording.jsonl", "recording.findings.jsonl", "conn-40961.png", "conn-40961.svg"] {
                assert!(dir.join(n).join(f).is_file(), "{n}/{f}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dump_dir_that_cannot_be_created_is_an_error_naming_it() {
        let e = DumpSink::prepare_dir(Path::new("/proc/tcpvigil-no/dumps")).unwrap_err().to_string();
        assert!(e.contains("/proc/tcpvigil-no/dumps"), "{e}");
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let dir = tmp("full");
        let sink = DumpSink::start(&cfg(&dir), synth::header(&[])).unwrap();
        let t = Instant::now();
        for k in 0..(QUEUE as u64 + 4) {
            sink.submit(outage_dump(k));
        }
        assert!(t.elapsed() < Duration::from_secs(5), "submit blocked");
        assert!(sink.counts().dropped >= 2, "{:?}", sink.counts());
        let c = sink.finish(Vec::new(), Duration::from_secs(120));
        assert_eq!(c.written + c.dropped + c.failed, QUEUE as u64 + 4, "{c:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
