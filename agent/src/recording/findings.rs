//! The findings that go with a recording (`X.jsonl` -> `X.findings.jsonl`): one finding per line,
//! written beside a flight-recorder dump and read back by `plot` and `watch --replay`.
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::model::Finding;

#[derive(Debug, thiserror::Error)]
pub enum FindingsError {
    #[error("cannot open the findings {}: {err}", path.display())]
    Open { path: PathBuf, err: std::io::Error },
    #[error("reading {}: {err}", path.display())]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{} line {line}: not a tcpvigil finding: {}", path.display(), crate::files::clip(&err.to_string(), crate::files::QUOTE_BYTES))]
    Line { path: PathBuf, line: usize, err: serde_json::Error },
    #[error("{} line {line}: longer than 1 MiB: not a tcpvigil finding", path.display())]
    LongLine { path: PathBuf, line: usize },
    #[error("{}: more than {MAX_FINDINGS} findings", path.display())]
    TooMany { path: PathBuf },
}

/// At most this many findings are read from a findings file.
pub const MAX_FINDINGS: usize = 100_000;

/// Where the findings that go with a recording are kept: `X.jsonl` -> `X.findings.jsonl`.
pub fn findings_path_for(recording: &Path) -> PathBuf {
    recording.with_extension("findings.jsonl")
}

/// Read findings, one JSON object per line; a bad line is an error naming it (quoting little of
/// it). Regular files only (a FIFO would hang the reader), lines of at most 1 MiB, at most
/// `MAX_FINDINGS`.
pub fn read_findings(path: &Path) -> Result<Vec<Finding>, FindingsError> {
    let f = crate::files::open_regular(path).map_err(|err| FindingsError::Open { path: path.into(), err })?;
    let mut r = BufReader::new(f);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for line in 1.. {
        buf.clear();
        let n = r
            .by_ref()
            .take(super::MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|err| FindingsError::Read { path: path.into(), err })?;
        if n == 0 {
            break;
        }
        if buf.len() > super::MAX_LINE {
            return Err(FindingsError::LongLine { path: path.into(), line });
        }
        let text = String::from_utf8_lossy(&buf);
        if text.trim().is_empty() {
            continue;
        }
        if out.len() >= MAX_FINDINGS {
            return Err(FindingsError::TooMany { path: path.into() });
        }
        let finding =
            serde_json::from_str(&text).map_err(|err| FindingsError::Line { path: path.into(), line, err })?;
        out.push(finding);
    }
    Ok(out)
}

/// Write findings, one per line.
pub fn write_findings(mut w: impl Write, findings: &[Finding]) -> std::io::Result<()> {
    for f in findings {
        serde_json::to_writer(&mut w, f)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}
