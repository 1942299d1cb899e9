//! Recording files: a JSON header line, then one model `Event` per line (written by `record`).
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

/// Reads a recording from an open file, gzip-compressed (told by its magic bytes) or plain.
pub fn read_file(mut f: File) -> Result<Recording, RecordingError> {
    let mut magic = [0u8; 2];
    let n = f.read(&mut magic)?;
    f.seek(SeekFrom::Start(0))?;
    if n == 2 && magic == [0x1f, 0x8b] {
        read(BufReader::new(flate2::read::GzDecoder::new(f)))
    } else {
        read(BufReader::new(f))
    }
}

/// Opens and reads the recording at `path` (see `read_file`).
pub fn open(path: &Path) -> Result<Recording, RecordingError> {
    read_file(File::open(path)?)
}

pub fn read(r: impl BufRead) -> Result<Recording, RecordingError> {
    let mut lines = r.lines();
    let first = match lines.next() {
        None => return Err(RecordingError::Empty),
        Some(l) => l?,
    };
    if first.trim().is_empty() {
        return Err(RecordingError::Empty);
    }
    let header: Header = serde_json::from_str(&first).map_err(|e| RecordingError::NotARecording(e.to_string()))?;
    if header.tcpvigil_recording != FORMAT_VERSION {
        return Err(RecordingError::Version(header.tcpvigil_recording));
    }
    let all: Vec<String> = lines.collect::<Result<_, _>>()?;
    let mut events = Vec::with_capacity(all.len());
    let mut truncated_tail = false;
    let n = all.len();
    for (i, l) in all.iter().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Event>(l) {
            Ok(e) => events.push(e),
            Err(e) if i + 1 == n && e.is_eof() => truncated_tail = true,
            Err(e) => return Err(RecordingError::Line { line: i + 2, msg: e.to_string() }),
        }
    }
    Ok(Recording { header, events, truncated_tail })
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
}
