//! Findings as JSON lines (`{"schema_version","ts","kind","conn":{...},"start","duration_s","cause",
//! "evidence","ongoing"}`, docs/schema/events-v1.schema.json) to a file or stdout. Write failures
//! are counted, never fatal.
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::clock::rfc3339;
use crate::model::{Finding, Process};

/// Where findings go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventsTarget {
    Stdout,
    File(PathBuf),
}

impl EventsTarget {
    /// `-` is stdout, anything else a file path (as `export.events` and `--events` take it).
    pub fn parse(s: &str) -> Self {
        if s == "-" {
            EventsTarget::Stdout
        } else {
            EventsTarget::File(PathBuf::from(s))
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot open events file {path}: {source}")]
pub struct EventsError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// `schema_version` of every line: docs/schema/events-v1.schema.json. Lines without the field
/// (written before it existed) are version 1 too.
pub const EVENTS_SCHEMA_VERSION: u32 = 1;

/// One finding as the JSON object written on its line.
pub fn finding_json(f: &Finding, process: Option<&Process>, offset_ns: i64) -> Value {
    let conn = f.conn.map(|c| {
        json!({
            "cookie": c.cookie,
            "netns": c.netns,
            "local": c.tuple.local.to_string(),
            "remote": c.tuple.remote.to_string(),
            "pid": process.map(|p| p.pid),
            "comm": process.map(|p| p.comm.as_str()),
        })
    });
    let mut v = json!({
        "schema_version": EVENTS_SCHEMA_VERSION,
        "ts": rfc3339(f.ts_ns, offset_ns),
        "kind": f.kind(),
        "conn": conn,
        "start": rfc3339(f.start_ns, offset_ns),
        "duration_s": f.duration_s,
        "cause": f.cause,
        "evidence": f.evidence_json(),
        "ongoing": f.ongoing,
    });
    if let (Some(g), Some(o)) = (&f.group, v.as_object_mut()) {
        o.insert("group".into(), Value::String(g.clone()));
    }
    if let (Some(w), Some(o)) = (f.owner, v.as_object_mut()) {
        o.insert("owner".into(), Value::String(w.as_str().into()));
    }
    v
}

/// Writes one JSON line per finding. A failed write is counted and the file reopened on the
/// next write; nothing here panics or returns an IO error after `open`.
pub struct EventsWriter {
    target: Option<EventsTarget>,
    out: Option<Box<dyn Write + Send>>,
    offset_ns: i64,
    written: u64,
    errors: u64,
}

impl std::fmt::Debug for EventsWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventsWriter")
            .field("target", &self.target)
            .field("written", &self.written)
            .field("errors", &self.errors)
            .finish()
    }
}

/// Take away what "other" may do with a file that existed before (created with a looser mode).
fn tighten(f: &File) {
    if let Ok(m) = f.metadata() {
        let mode = m.permissions().mode();
        if mode & 0o007 != 0 {
            let _ = f.set_permissions(std::fs::Permissions::from_mode(mode & !0o007));
        }
    }
}

fn open_target(t: &EventsTarget) -> Result<Box<dyn Write + Send>, EventsError> {
    match t {
        EventsTarget::Stdout => Ok(Box::new(io::stdout())),
        EventsTarget::File(p) => {
            // 0640: findings name hosts, ports and processes; not for every local user.
            let f: File = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o640)
                .open(p)
                .map_err(|source| EventsError { path: p.clone(), source })?;
            tighten(&f);
            Ok(Box::new(BufWriter::new(f)))
        }
    }
}

impl EventsWriter {
    /// Open the target (a file is created or appended to). Fails only here, at startup.
    pub fn open(target: EventsTarget, offset_ns: i64) -> Result<Self, EventsError> {
        let out = open_target(&target)?;
        Ok(EventsWriter { target: Some(target), out: Some(out), offset_ns, written: 0, errors: 0 })
    }

    /// A writer into anything (tests, or a pipe the daemon set up).
    pub fn with_writer(out: Box<dyn Write + Send>, offset_ns: i64) -> Self {
        EventsWriter { target: None, out: Some(out), offset_ns, written: 0, errors: 0 }
    }

    /// Follow a wall-clock step (see `clock::mono_to_unix_ns`).
    pub fn set_offset(&mut self, offset_ns: i64) {
        self.offset_ns = offset_ns;
    }

    /// Reopen the file (after log rotation, on reload). Stdout and custom writers stay as they are.
    pub fn reopen(&mut self) -> Result<(), EventsError> {
        if let Some(t @ EventsTarget::File(_)) = &self.target {
            if let Some(mut old) = self.out.take() {
                if old.flush().is_err() {
                    self.errors += 1;
                }
            }
            self.out = Some(open_target(t)?);
        }
        Ok(())
    }

    /// Write one finding as a line and flush. `process` gives pid and comm (from `ConnTable`).
    pub fn write(&mut self, f: &Finding, process: Option<&Process>) {
        if self.out.is_none() {
            if let Some(t) = &self.target {
                self.out = open_target(t).ok();
            }
        }
        let Some(out) = self.out.as_mut() else {
            self.errors += 1;
            return;
        };
        let mut line = finding_json(f, process, self.offset_ns).to_string();
        line.push('\n');
        match out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => self.written += 1,
            Err(_) => {
                self.errors += 1;
                // A file is reopened on the next write; stdout is kept.
                if matches!(self.target, Some(EventsTarget::File(_))) {
                    self.out = None;
                }
            }
        }
    }

    /// Lines written.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Findings that could not be written (put into `Health::events_write_errors`).
    pub fn errors(&self) -> u64 {
        self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConnId, StopCause, Tuple};
    use std::sync::{Arc, Mutex};

    fn stop(ongoing: bool) -> Finding {
        Finding {
            ts_ns: 5_000_000_000,
            conn: Some(ConnId {
                cookie: 7,
                netns: 4026531840,
                tuple: Tuple { local: "10.0.0.1:40000".parse().unwrap(), remote: "10.0.0.2:5201".parse().unwrap() },
            }),
            group: None,
            start_ns: 3_500_000_000,
            duration_s: if ongoing { None } else { Some(1.5) },
            ongoing,
            cause: StopCause::Rto.into(),
            owner: None,
            evidence: json!({"rtos": 2}),
            path: Default::default(),
        }
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_finding_becomes_one_line_with_wall_times() {
        let buf = Shared::default();
        // Monotonic 0 is 2026-01-01T00:00:00Z.
        let mut w = EventsWriter::with_writer(Box::new(buf.clone()), 1_767_225_600_000_000_000);
        let process = Process { pid: 42, uid: 0, cgroup_id: 1, comm: "iperf3".into() };
        w.write(&stop(false), Some(&process));
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1);
        let v: Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(v["ts"], "2026-01-01T00:00:05.000000Z");
        assert_eq!(v["start"], "2026-01-01T00:00:03.500000Z");
        assert_eq!(v["kind"], "stop");
        assert_eq!(v["cause"], "rto");
        assert_eq!(v["duration_s"], 1.5);
        assert_eq!(v["ongoing"], false);
        assert_eq!(v["conn"]["local"], "10.0.0.1:40000");
        assert_eq!(v["conn"]["pid"], 42);
        assert_eq!(v["conn"]["comm"], "iperf3");
        assert_eq!(v["evidence"]["rtos"], 2);
        assert_eq!(w.written(), 1);
    }

    #[test]
    fn an_ongoing_stop_has_null_duration() {
        let v = finding_json(&stop(true), None, 0);
        assert!(v["duration_s"].is_null());
        assert!(v["conn"]["pid"].is_null());
        assert_eq!(v["ongoing"], true);
        assert_eq!(v["schema_version"], EVENTS_SCHEMA_VERSION);
    }

    #[test]
    fn write_errors_are_counted_not_fatal() {
        let mut w = EventsWriter::with_writer(Box::new(Broken), 0);
        w.write(&stop(true), None);
        w.write(&stop(false), None);
        assert_eq!(w.errors(), 2);
        assert_eq!(w.written(), 0);
    }

    #[test]
    fn a_file_target_appends_and_reopens() {
        let dir = std::env::temp_dir().join(format!("tcpvigil-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("events.jsonl");
        let _ = std::fs::remove_file(&p);
        let mut w = EventsWriter::open(EventsTarget::parse(p.to_str().unwrap()), 0).unwrap();
        w.write(&stop(true), None);
        std::fs::rename(&p, dir.join("rotated")).unwrap();
        w.reopen().unwrap();
        w.write(&stop(false), None);
        assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 1);
        assert_eq!(std::fs::read_to_string(dir.join("rotated")).unwrap().lines().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unopenable_file_is_a_clear_startup_error() {
        let e = EventsWriter::open(EventsTarget::parse("/nonexistent-dir/x.jsonl"), 0).unwrap_err();
        assert!(e.to_string().contains("cannot open events file /nonexistent-dir/x.jsonl"), "{e}");
    }
}
