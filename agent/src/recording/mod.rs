//! Recording files: a JSON header line, then one model `Event` per line (written by `record` and
//! the flight recorder), and the findings file that may go with one.
mod findings;

pub use findings::{findings_path_for, read_findings, write_findings, FindingsError};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::Event;

pub const FORMAT_VERSION: u32 = 1;

/// First line of every recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always `FORMAT_VERSION`; its presence identifies the file.
    pub tcpvigil_recording: u32,
    pub agent_version: String,
    pub kernel: String,
    pub hostname: String,
    /// Add to an event's CLOCK_MONOTONIC `ts_ns` to get Unix time in nanoseconds.
    pub mono_to_unix_ns: i64,
    /// Which variant each hook need used.
    pub variants: Vec<(String, String)>,
    /// The connection filters, as typed.
    pub filters: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("the recording is empty")]
    Empty,
    #[error("line 1 is not a tcpvigil recording header ({0}); was this file written by `tcpvigil record`?")]
    NotARecording(String),
    #[error("recording format {0} is not supported (this tcpvigil reads format {FORMAT_VERSION})")]
    Version(u32),
    #[error("line {line}: {msg}")]
    Line { line: usize, msg: String },
    #[error("too large to hold: {0}")]
    TooLarge(Cut),
    #[error("reading the recording: {0}")]
    Io(#[from] std::io::Error),
}

pub fn write_header(mut w: impl Write, h: &Header) -> std::io::Result<()> {
    serde_json::to_writer(&mut w, h)?;
    w.write_all(b"\n")
}

pub fn write_event(mut w: impl Write, e: &Event) -> std::io::Result<()> {
    serde_json::to_writer(&mut w, e)?;
    w.write_all(b"\n")
}

/// A whole recording in memory. A truncated last line (a recorder killed mid-write)
/// is dropped and counted; any other bad line is an error naming the line.
#[derive(Debug)]
pub struct Recording {
    pub header: Header,
    pub events: Vec<Event>,
    pub truncated_tail: bool,
}

/// Where a recording too large to hold in memory was cut: what was kept and what was dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// Events kept (all of them before `line`).
    pub kept: usize,
    /// The first line not read.
    pub line: usize,
    /// Time of the last event kept.
    pub until_ns: u64,
    pub why: String,
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}; the first {} events were kept (lines 2-{}) and line {} and everything after it dropped",
            self.why,
            self.kept,
            self.line.saturating_sub(1).max(2),
            self.line
        )
    }
}

/// At most this many events are held in memory (about 360 bytes each, more with SACK blocks).
pub const MAX_EVENTS: usize = 1_000_000;
/// At most this many events of one connection.
pub const MAX_CONN_EVENTS: usize = 500_000;
/// The last timestamp any kernel clock can give (`ktime_t` is signed 64-bit): beyond it is damage.
pub const MAX_TS_NS: u64 = i64::MAX as u64;
/// A recording spans at most this long from its first event (longer: damaged or spliced).
pub const MAX_SPAN_NS: u64 = 31 * 86_400 * 1_000_000_000;

/// Reads a recording from an open file, gzip-compressed (told by its magic bytes) or plain.
pub fn read_file(f: File) -> Result<Recording, RecordingError> {
    read_file_prefix(f).and_then(whole)
}

/// Like `read_file`, but a recording beyond `MAX_EVENTS` or `MAX_CONN_EVENTS` is read up to that
/// bound and returned with where and why it was cut (the callers say so, and exit 2).
pub fn read_file_prefix(mut f: File) -> Result<(Recording, Option<Cut>), RecordingError> {
    let mut magic = [0u8; 2];
    let n = f.read(&mut magic)?;
    f.seek(SeekFrom::Start(0))?;
    if n == 2 && magic == [0x1f, 0x8b] {
        read_prefix(BufReader::new(flate2::read::GzDecoder::new(f)))
    } else {
        read_prefix(BufReader::new(f))
    }
}

/// Opens and reads the recording at `path` (see `read_file`): a regular file only, so that a
/// FIFO cannot hang the reader.
pub fn open(path: &Path) -> Result<Recording, RecordingError> {
    open_prefix(path).and_then(whole)
}

/// Opens and reads the recording at `path` (see `read_file_prefix`).
pub fn open_prefix(path: &Path) -> Result<(Recording, Option<Cut>), RecordingError> {
    read_file_prefix(crate::files::open_regular(path)?)
}

fn whole((rec, cut): (Recording, Option<Cut>)) -> Result<Recording, RecordingError> {
    match cut {
        None => Ok(rec),
        Some(c) => Err(RecordingError::TooLarge(c)),
    }
}

fn clipped(e: impl std::fmt::Display) -> String {
    crate::files::clip(&e.to_string(), crate::files::QUOTE_BYTES)
}

/// The longest line a recording may have: events are a few hundred bytes, snapshots a few KiB.
pub const MAX_LINE: usize = 1 << 20;
/// How far back in time an event may be from the latest before it. Records from different CPUs
/// reach the ring buffer slightly out of order, and the tcp_probe fallback holds each socket's last
/// ACK until the next ACK, a state change or the next snapshot flushes it: after a quiet spell (an
/// outage, a closed window) that sample arrives up to one snapshot interval late (at most 60 s,
/// `bpf.snapshot_interval_ms`; a 1 s interval gave 1.006 s in a lab run with a 1.2 s outage).
/// More than that interval and a few seconds of slack is a damaged or spliced file.
pub const MAX_BACKSTEP_NS: u64 = 65_000_000_000;

/// The next line without its newline, at most MAX_LINE bytes (None at the end).
fn next_line(r: &mut impl BufRead, buf: &mut Vec<u8>, line: usize) -> Result<Option<String>, RecordingError> {
    buf.clear();
    let n = r.by_ref().take(MAX_LINE as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if buf.len() > MAX_LINE {
        return Err(RecordingError::Line {
            line,
            msg: format!("longer than {} MiB: not a recording line", MAX_LINE >> 20),
        });
    }
    match std::str::from_utf8(buf) {
        Ok(s) => Ok(Some(s.to_string())),
        Err(e) => Err(RecordingError::Line { line, msg: format!("not UTF-8 text ({e})") }),
    }
}

/// Reads a whole recording; one beyond the bounds of what is held in memory is an error.
pub fn read(r: impl BufRead) -> Result<Recording, RecordingError> {
    read_prefix(r).and_then(whole)
}

/// Reads a recording up to `MAX_EVENTS` events in all and `MAX_CONN_EVENTS` of one connection.
pub fn read_prefix(r: impl BufRead) -> Result<(Recording, Option<Cut>), RecordingError> {
    read_bounded(r, MAX_EVENTS, MAX_CONN_EVENTS)
}

/// Reads a recording, keeping at most `max_events` events and `max_conn` of one connection:
/// at the first event past either bound reading stops (so that every connection's history ends
/// at the same moment) and the cut is returned beside what was kept.
pub fn read_bounded(
    mut r: impl BufRead,
    max_events: usize,
    max_conn: usize,
) -> Result<(Recording, Option<Cut>), RecordingError> {
    let mut buf = Vec::new();
    let first = match next_line(&mut r, &mut buf, 1) {
        Ok(None) => return Err(RecordingError::Empty),
        Ok(Some(l)) => l,
        Err(RecordingError::Line { msg, .. }) => return Err(RecordingError::NotARecording(msg)),
        Err(e) => return Err(e),
    };
    if first.trim().is_empty() {
        return Err(RecordingError::Empty);
    }
    let header: Header = serde_json::from_str(&first).map_err(|e| RecordingError::NotARecording(clipped(e)))?;
    if header.tcpvigil_recording != FORMAT_VERSION {
        return Err(RecordingError::Version(header.tcpvigil_recording));
    }
    let mut events: Vec<Event> = Vec::new();
    let mut truncated_tail = false;
    // A line that fails to parse is an error unless it is the last one and merely cut short.
    let mut pending: Option<(usize, serde_json::Error)> = None;
    let (mut latest, mut latest_line) = (0u64, 0usize);
    let mut first_ts: Option<u64> = None;
    let mut per_conn: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut line = 1;
    while let Some(l) = next_line(&mut r, &mut buf, line + 1)? {
        line += 1;
        if let Some((at, e)) = pending.take() {
            return Err(RecordingError::Line { line: at, msg: clipped(e) });
        }
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Event>(&l) {
            Ok(e) => {
                check_time(&e, line, first_ts, latest, latest_line)?;
                let n = per_conn.entry(e.conn.cookie).or_default();
                let why = if events.len() >= max_events {
                    Some(format!("more than {max_events} events"))
                } else if *n >= max_conn {
                    Some(format!("more than {max_conn} events of connection {}", crate::model::Sk(e.conn.cookie)))
                } else {
                    None
                };
                if let Some(why) = why {
                    let cut = Cut { kept: events.len(), line, until_ns: latest, why };
                    return Ok((Recording { header, events, truncated_tail: false }, Some(cut)));
                }
                *n += 1;
                first_ts.get_or_insert(e.ts_ns);
                if e.ts_ns >= latest {
                    (latest, latest_line) = (e.ts_ns, line);
                }
                events.push(e)
            }
            Err(e) if e.is_eof() => pending = Some((line, e)),
            Err(e) => return Err(RecordingError::Line { line, msg: clipped(e) }),
        }
    }
    if pending.is_some() {
        truncated_tail = true;
    }
    Ok((Recording { header, events, truncated_tail }, None))
}

/// An event's time must be one a kernel clock can give, within the recording's span, and not
/// further back than the ring buffer and the tcp_probe fallback can deliver late.
fn check_time(
    e: &Event,
    line: usize,
    first: Option<u64>,
    latest: u64,
    latest_line: usize,
) -> Result<(), RecordingError> {
    let bad = |msg: String| Err(RecordingError::Line { line, msg });
    if e.ts_ns > MAX_TS_NS {
        return bad(format!("timestamp {} ns is beyond any kernel clock (at most 2^63-1 ns)", e.ts_ns));
    }
    if let Some(first) = first {
        if e.ts_ns.saturating_sub(first) > MAX_SPAN_NS {
            return bad(format!(
                "{:.1} days after the first event: a recording spans at most {} days (a damaged or spliced file?)",
                (e.ts_ns - first) as f64 / 86_400e9,
                MAX_SPAN_NS / 86_400_000_000_000
            ));
        }
    }
    if e.ts_ns.saturating_add(MAX_BACKSTEP_NS) < latest {
        return bad(format!(
            "timestamps out of order: {:.3} s before line {latest_line} (at most {} s back is allowed)",
            (latest - e.ts_ns) as f64 / 1e9,
            MAX_BACKSTEP_NS / 1_000_000_000
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            tcpvigil_recording: FORMAT_VERSION,
            agent_version: "t".into(),
            kernel: "k".into(),
            hostname: "h".into(),
            mono_to_unix_ns: 5,
            variants: vec![("sack".into(), "tp_btf/tcp_probe".into())],
            filters: vec![":5201".into()],
        }
    }

    #[test]
    fn rejects_empty_foreign_and_future_files() {
        assert!(matches!(read(&b""[..]), Err(RecordingError::Empty)));
        assert!(matches!(read(&b"{\"a\":1}\n"[..]), Err(RecordingError::NotARecording(_))));
        assert!(matches!(read(&b"\x00\x01binary"[..]), Err(RecordingError::NotARecording(_))));
        let mut h = header();
        h.tcpvigil_recording = 99;
        let mut buf = Vec::new();
        write_header(&mut buf, &h).unwrap();
        assert!(matches!(read(&buf[..]), Err(RecordingError::Version(99))));
    }

    #[test]
    fn drops_only_a_truncated_last_line() {
        let mut buf = Vec::new();
        write_header(&mut buf, &header()).unwrap();
        buf.extend_from_slice(b"{\"ts_ns\":1,\"conn\":{\"cook");
        let r = read(&buf[..]).unwrap();
        assert!(r.truncated_tail);
        assert!(r.events.is_empty());
        let mut buf2 = Vec::new();
        write_header(&mut buf2, &header()).unwrap();
        buf2.extend_from_slice(b"{\"ts_ns\":1}\n{}\n");
        assert!(matches!(read(&buf2[..]), Err(RecordingError::Line { line: 2, .. })));
    }

    fn with_events(ts: &[u64]) -> Vec<u8> {
        let mut buf = Vec::new();
        write_header(&mut buf, &header()).unwrap();
        let fixture = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/clean.jsonl.gz")).unwrap();
        let rec = read_file_bytes(&fixture);
        for (i, t) in ts.iter().enumerate() {
            let mut e = rec.events[i].clone();
            e.ts_ns = *t;
            write_event(&mut buf, &e).unwrap();
        }
        buf
    }

    fn read_file_bytes(b: &[u8]) -> Recording {
        read(BufReader::new(flate2::read::GzDecoder::new(b))).unwrap()
    }

    #[test]
    fn a_sample_flushed_a_snapshot_late_is_read_and_a_step_back_past_the_bound_is_an_error() {
        // A pending ACK flushed 1.5 s late, after a 1 s snapshot interval, is a real recording.
        let ok = with_events(&[5_000_000_000, 6_500_000_000, 5_000_000_000, 6_600_000_000]);
        assert_eq!(read(&ok[..]).unwrap().events.len(), 4);
        let bad = with_events(&[5_000_000_000, 80_000_000_000, 80_000_000_000 - MAX_BACKSTEP_NS - 1]);
        match read(&bad[..]) {
            Err(RecordingError::Line { line: 4, msg }) => assert!(msg.contains("out of order"), "{msg}"),
            other => panic!("expected an out-of-order error, got {other:?}"),
        }
    }

    #[test]
    fn an_endless_or_binary_line_is_an_error_not_a_hang() {
        let zeros = std::io::repeat(0).take(10 << 20);
        assert!(matches!(read(BufReader::new(zeros)), Err(RecordingError::NotARecording(_))));
        let mut long = Vec::new();
        write_header(&mut long, &header()).unwrap();
        long.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        assert!(matches!(read(&long[..]), Err(RecordingError::Line { line: 2, .. })));
        let mut bin = Vec::new();
        write_header(&mut bin, &header()).unwrap();
        bin.extend_from_slice(b"\xff\xfe\n");
        assert!(matches!(read(&bin[..]), Err(RecordingError::Line { line: 2, .. })));
    }

    #[test]
    fn timestamps_near_the_end_of_the_clock_do_not_overflow() {
        // The last nanoseconds a kernel clock can give, a little out of order: read as they are.
        let top = MAX_TS_NS - 1_000;
        let ok = with_events(&[top - 2_000_000_000, top, top - 1_000_000_000]);
        assert_eq!(read(&ok[..]).unwrap().events.len(), 3);
        // Past it (near u64::MAX): an error saying so, not a false "out of order" or an overflow.
        let bad = with_events(&[u64::MAX - 5, u64::MAX - 100]);
        match read(&bad[..]) {
            Err(RecordingError::Line { line: 2, msg }) => assert!(msg.contains("beyond any kernel clock"), "{msg}"),
            other => panic!("expected a clock error, got {other:?}"),
        }
        let far = with_events(&[1_000, 1_000 + MAX_SPAN_NS + 1]);
        match read(&far[..]) {
            Err(RecordingError::Line { line: 3, msg }) => assert!(msg.contains("days after the first event"), "{msg}"),
            other => panic!("expected a span error, got {other:?}"),
        }
    }

    #[test]
    fn a_recording_past_the_bounds_is_cut_and_the_cut_says_what_was_dropped() {
        let buf = with_events(&[1, 2, 3, 4, 5, 6]);
        let rec = read(&buf[..]).unwrap();
        // In all: the 5th event is one too many.
        let (r, cut) = read_bounded(&buf[..], 4, 100).unwrap();
        let cut = cut.unwrap();
        assert_eq!((r.events.len(), cut.kept, cut.line, cut.until_ns), (4, 4, 6, 4));
        assert!(
            cut.to_string().contains("more than 4 events; the first 4 events were kept (lines 2-5) and line 6"),
            "{cut}"
        );
        // Per connection: reading stops at the first connection's second event.
        let mut seen = std::collections::HashSet::new();
        let first_repeat = rec.events.iter().position(|e| !seen.insert(e.conn.cookie)).unwrap();
        let (r, cut) = read_bounded(&buf[..], 100, 1).unwrap();
        assert_eq!(r.events.len(), first_repeat);
        let why = cut.unwrap().why;
        assert!(
            why.contains(&format!(
                "more than 1 events of connection {}",
                crate::model::Sk(rec.events[first_repeat].conn.cookie)
            )),
            "{why}"
        );
        assert!(matches!(read_bounded(&buf[..], 6, 6), Ok((_, None))));
    }

    #[test]
    fn a_huge_bad_value_is_quoted_briefly() {
        let mut buf = Vec::new();
        write_header(&mut buf, &header()).unwrap();
        let kind = "x".repeat(1 << 19);
        buf.extend_from_slice(format!("{{\"ts_ns\":1,\"conn\":{{\"cookie\":1,\"netns\":1,\"local\":\"1.1.1.1:1\",\"remote\":\"1.1.1.1:2\"}},\"type\":\"{kind}\"}}\n").as_bytes());
        let e = read(&buf[..]).unwrap_err().to_string();
        assert!(e.len() < 600, "{} bytes of error", e.len());
    }
}
