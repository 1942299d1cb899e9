//! Findings as JSON lines (`{"schema_version","host","ts","kind","conn":{...},"start","duration_s",
//! "cause","evidence","ongoing"}`, docs/schema/events-v1.schema.json) to a file or stdout. Write failures
//! are counted, never fatal.
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::clock::rfc3339;
use crate::files::{self, Existing};
use crate::model::{CgroupInfo, Finding, Process};

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
#[error("cannot open events file {path}: {err}")]
pub struct EventsError {
    pub path: PathBuf,
    // `err`, not `source`: the message already says it; as a source it was printed twice.
    pub err: io::Error,
}

/// `schema_version` of every line: docs/schema/events-v1.schema.json. Lines without the field
/// (written before it existed) are version 1 too.
pub const EVENTS_SCHEMA_VERSION: u32 = 1;

/// This host's name (what `hostname` prints), for events and recordings merged from many hosts.
pub fn host_name() -> String {
    nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default()
}

/// One finding as the JSON object written on its line, from `host`.
pub fn finding_json(f: &Finding, process: Option<&Process>, offset_ns: i64, host: &str) -> Value {
    let conn = f.conn.map(|c| {
        let mut v = json!({
            "cookie": c.cookie,
            "netns": c.netns,
            "local": c.tuple.local.to_string(),
            "remote": c.tuple.remote.to_string(),
            "pid": process.map(|p| p.pid),
            "comm": process.map(|p| p.comm.as_str()),
        });
        if let (Some(cg), Some(o)) = (process.and_then(|p| p.cgroup.as_ref()), v.as_object_mut()) {
            cgroup_fields(o, cg);
        }
        v
    });
    let mut v = json!({
        "schema_version": EVENTS_SCHEMA_VERSION,
        "host": host,
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
    if let (Some(m), Some(o)) = (f.mechanism, v.as_object_mut()) {
        o.insert("mechanism".into(), Value::String(m.as_str().into()));
    }
    v
}

/// The process's cgroup under `conn`: its path, and the unit, container and pod where known.
fn cgroup_fields(o: &mut serde_json::Map<String, Value>, cg: &CgroupInfo) {
    o.insert("cgroup".into(), cg.path.clone().into());
    let known = [
        ("unit", &cg.unit),
        ("container", &cg.container),
        ("container_name", &cg.container_name),
        ("pod", &cg.pod),
        ("pod_name", &cg.pod_name),
        ("pod_namespace", &cg.pod_namespace),
    ];
    for (k, v) in known {
        if let Some(v) = v {
            o.insert(k.into(), v.clone().into());
        }
    }
}

/// Where lines go: a file (cut back to its last whole line after a failed write) or a stream
/// (stdout, a test's buffer) that cannot be cut back.
enum Out {
    File(File),
    Stream(Box<dyn Write + Send>),
}

/// Writes one JSON line per finding. A failed write is counted; nothing here panics or returns
/// an IO error after `open`. Every line in the output is whole: after a failed or short write a
/// file is truncated back to the end of its last whole line; where that is impossible the next
/// line starts on a fresh line and the damaged one is counted (`torn`).
pub struct EventsWriter {
    target: Option<EventsTarget>,
    out: Option<Out>,
    offset_ns: i64,
    /// This host's name, read when the output is opened (and reopened).
    host: String,
    written: u64,
    errors: u64,
    /// The output ends in part of a line: the next line starts with a newline.
    broken: bool,
    torn: u64,
}

impl std::fmt::Debug for EventsWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventsWriter")
            .field("target", &self.target)
            .field("written", &self.written)
            .field("errors", &self.errors)
            .field("torn", &self.torn)
            .finish()
    }
}

/// Open (create, 0640: findings name hosts, ports and processes) and lock an events file, never
/// through a symlink (files::create): a second daemon on the same file is told who holds it.
fn open_file(p: &Path) -> Result<File, EventsError> {
    let f = files::create(p, Existing::Append, 0o640).map_err(|err| EventsError { path: p.into(), err })?;
    files::lock(&f).map_err(|err| EventsError { path: p.into(), err })?;
    Ok(f)
}

fn open_target(t: &EventsTarget) -> Result<Out, EventsError> {
    match t {
        EventsTarget::Stdout => Ok(Out::Stream(Box::new(io::stdout()))),
        EventsTarget::File(p) => open_file(p).map(Out::File),
    }
}

/// Write all of `buf`; returns how many bytes made it and the error that stopped it.
fn write_counted(w: &mut impl Write, buf: &[u8]) -> (usize, io::Result<()>) {
    let mut done = 0;
    while done < buf.len() {
        match w.write(&buf[done..]) {
            Ok(0) => return (done, Err(io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (done, Err(e)),
        }
    }
    (done, w.flush())
}

impl EventsWriter {
    /// Open the target (a file is created or appended to, and locked). Fails only here, at startup.
    pub fn open(target: EventsTarget, offset_ns: i64) -> Result<Self, EventsError> {
        let out = open_target(&target)?;
        Ok(EventsWriter {
            target: Some(target),
            out: Some(out),
            offset_ns,
            host: host_name(),
            written: 0,
            errors: 0,
            broken: false,
            torn: 0,
        })
    }

    /// Whether `open` would succeed, creating nothing (`run --check-config`). A lock another
    /// daemon holds is not checked: the check may run beside the daemon it is about.
    pub fn check(target: &EventsTarget) -> Result<(), EventsError> {
        match target {
            EventsTarget::Stdout => Ok(()),
            EventsTarget::File(p) => files::check_create(p).map_err(|err| EventsError { path: p.clone(), err }),
        }
    }

    /// A writer into anything (tests, or a pipe the daemon set up).
    pub fn with_writer(out: Box<dyn Write + Send>, offset_ns: i64) -> Self {
        EventsWriter {
            target: None,
            out: Some(Out::Stream(out)),
            offset_ns,
            host: host_name(),
            written: 0,
            errors: 0,
            broken: false,
            torn: 0,
        }
    }

    /// Follow a wall-clock step (see `clock::mono_to_unix_ns`).
    pub fn set_offset(&mut self, offset_ns: i64) {
        self.offset_ns = offset_ns;
    }

    /// Reopen the file (after log rotation, on reload). Stdout and custom writers stay as they are.
    pub fn reopen(&mut self) -> Result<(), EventsError> {
        if let Some(t @ EventsTarget::File(_)) = &self.target {
            // Closing the old file first releases its lock.
            self.out = None;
            self.out = Some(open_target(t)?);
            self.broken = false;
        }
        self.host = host_name();
        Ok(())
    }

    /// Write one finding as a line. `process` gives pid and comm (from `ConnTable`).
    pub fn write(&mut self, f: &Finding, process: Option<&Process>) {
        if self.out.is_none() {
            if let Some(t) = &self.target {
                self.out = open_target(t).ok();
            }
        }
        let mut line = Vec::with_capacity(512);
        if self.broken {
            line.push(b'\n');
        }
        line.extend_from_slice(finding_json(f, process, self.offset_ns, &self.host).to_string().as_bytes());
        line.push(b'\n');
        let result = match self.out.as_mut() {
            None => Err(io::Error::other("not open")),
            Some(Out::File(file)) => {
                // With O_APPEND and the lock, the end of the file is where this line starts.
                let start = file.metadata().map(|m| m.len());
                let (n, r) = write_counted(file, &line);
                if r.is_err() && n > 0 {
                    match start.and_then(|s| file.set_len(s)) {
                        Ok(()) => {}
                        Err(_) => self.mark_torn(),
                    }
                }
                r
            }
            Some(Out::Stream(w)) => {
                let (n, r) = write_counted(w, &line);
                if r.is_err() && n > 0 && n < line.len() {
                    self.mark_torn();
                }
                r
            }
        };
        match result {
            Ok(()) => {
                self.written += 1;
                self.broken = false;
            }
            Err(_) => self.errors += 1,
        }
    }

    fn mark_torn(&mut self) {
        if !self.broken {
            self.broken = true;
            self.torn += 1;
        }
    }

    /// Lines that could not be cut back after a failed write: each is followed by a newline and
    /// left in the output, unparseable (0 for a file on a filesystem that can truncate).
    pub fn torn(&self) -> u64 {
        self.torn
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
            mechanism: None,
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
        let process = Process { pid: 42, uid: 0, cgroup_id: 1, comm: "iperf3".into(), cgroup: None };
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
        assert_eq!(v["host"], host_name());
        assert!(!host_name().is_empty());
        assert_eq!(v["evidence"]["rtos"], 2);
        assert_eq!(w.written(), 1);
    }

    #[test]
    fn a_process_in_a_container_names_it_under_conn() {
        let id = "7d186119302244ddad365b484cbd0c9e59d2718a87cea0497650871236bba78c";
        let mut info = crate::model::cgroup::parse(&format!("/machine.slice/libpod-{id}.scope"));
        info.container_name = Some("box".into());
        let cgroup = Some(crate::model::Cgroup::new(info));
        let process = Process { pid: 42, uid: 0, cgroup_id: 9, comm: "iperf3".into(), cgroup };
        let v = finding_json(&stop(false), Some(&process), 0, "h1");
        let c = &v["conn"];
        assert_eq!(c["cgroup"], format!("/machine.slice/libpod-{id}.scope"));
        assert_eq!((c["container"].as_str(), c["container_name"].as_str()), (Some(id), Some("box")));
        assert_eq!(c["unit"], format!("libpod-{id}.scope"));
        assert!(c.get("pod").is_none(), "only what is known: {c}");
        let bare = finding_json(&stop(false), Some(&Process { cgroup: None, ..process }), 0, "h1");
        assert!(bare["conn"].get("cgroup").is_none() && bare["conn"]["pid"] == 42);
    }

    #[test]
    fn an_ongoing_stop_has_null_duration() {
        let v = finding_json(&stop(true), None, 0, "h1");
        assert_eq!(v["host"], "h1");
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

    /// Takes `room` bytes, then fails like a full disk until room is made.
    #[derive(Clone, Default)]
    struct Full {
        buf: Shared,
        room: Arc<Mutex<usize>>,
    }
    impl Write for Full {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let mut room = self.room.lock().unwrap();
            if *room == 0 {
                return Err(io::Error::other("No space left on device"));
            }
            let n = b.len().min(*room);
            *room -= n;
            self.buf.write(&b[..n])
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stream_cut_mid_line_gets_the_next_line_on_a_line_of_its_own_and_counts_it() {
        let out = Full::default();
        // Room for one line and part of the next.
        let line = finding_json(&stop(false), None, 0, &host_name()).to_string().len() + 1;
        *out.room.lock().unwrap() = line + line / 2;
        let mut w = EventsWriter::with_writer(Box::new(out.clone()), 0);
        w.write(&stop(false), None);
        w.write(&stop(false), None);
        w.write(&stop(false), None);
        assert_eq!((w.written(), w.errors(), w.torn()), (1, 2, 1));
        *out.room.lock().unwrap() = 1 << 20;
        w.write(&stop(true), None);
        let text = String::from_utf8(out.buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(serde_json::from_str::<Value>(lines[0]).is_ok());
        assert!(serde_json::from_str::<Value>(lines[1]).is_err(), "the torn line");
        assert_eq!(serde_json::from_str::<Value>(lines[2]).unwrap()["ongoing"], true);
    }

    #[test]
    fn a_second_writer_on_the_same_file_is_refused_naming_the_holder() {
        let dir = std::env::temp_dir().join(format!("tcpvigil-events-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("events.jsonl");
        let _a = EventsWriter::open(EventsTarget::File(p.clone()), 0).unwrap();
        let e = EventsWriter::open(EventsTarget::File(p.clone()), 0).unwrap_err().to_string();
        assert!(e.contains("in use by") && e.contains(&format!("pid {}", std::process::id())), "{e}");
        EventsWriter::check(&EventsTarget::File(p)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
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
