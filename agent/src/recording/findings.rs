//! The findings that go with a recording (`X.jsonl` -> `X.findings.jsonl`): one finding per line,
//! written beside a flight-recorder dump and read back by `plot` and `watch --replay`.
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use crate::model::Finding;

#[derive(Debug, thiserror::Error)]
pub enum FindingsError {
    #[error("cannot open the findings {}: {err}", path.display())]
    Open { path: PathBuf, err: std::io::Error },
    #[error("reading {}: {err}", path.display())]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{} line {line}: not a tcpvigil finding: {err}", path.display())]
    Line { path: PathBuf, line: usize, err: serde_json::Error },
}

/// Where the findings that go with a recording are kept: `X.jsonl` -> `X.findings.jsonl`.
pub fn findings_path_for(recording: &Path) -> PathBuf {
    recording.with_extension("findings.jsonl")
}

/// Read findings, one JSON object per line; a bad line is an error naming it.
pub fn read_findings(path: &Path) -> Result<Vec<Finding>, FindingsError> {
    let f = File::open(path).map_err(|err| FindingsError::Open { path: path.into(), err })?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|err| FindingsError::Read { path: path.into(), err })?;
        if line.trim().is_empty() {
            continue;
        }
        let finding =
            serde_json::from_str(&line).map_err(|err| FindingsError::Line { path: path.into(), line: i + 1, err })?;
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
