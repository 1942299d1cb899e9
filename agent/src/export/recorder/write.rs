//! Writing a dump: its name, its recording and findings files and its pictures, all or nothing.
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{DumpFiles, DumpJob, ReadyDump, RecorderError};
use crate::recording::{self, Header};
use crate::{clock, plot};

/// `stop-40961-20231114T221320Z`: kind, who, when it started (UTC).
pub fn dump_name(job: &DumpJob, mono_to_unix_ns: i64) -> String {
    let kind = job.finding.kind();
    let who = job.finding.conn.map_or_else(|| format!("job{}", job.id), |c| c.cookie.to_string());
    format!("{kind}-{who}-{}", clock::compact_utc(job.finding.start_ns, mono_to_unix_ns))
}

/// Write `dir/NAME/recording.jsonl` (the recording format, so `analyze` and `plot` read it),
/// `recording.findings.jsonl` and the pictures. `header` is the daemon's recording header; its
/// filters are replaced by the dumped cookies. Blocking IO.
/// A failed dump leaves nothing behind (its temporary folder is removed).
pub fn write_dump(dump: &ReadyDump, dir: &Path, header: &Header) -> Result<DumpFiles, RecorderError> {
    let name = dump_name(&dump.job, header.mono_to_unix_ns);
    let tmp = dir.join(format!(".{name}.tmp"));
    let r = write_dump_via(dump, header, &tmp, &dir.join(&name));
    if r.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    r
}

fn write_dump_via(dump: &ReadyDump, header: &Header, tmp: &Path, fin: &Path) -> Result<DumpFiles, RecorderError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RecorderError::Io { path, source }
    };
    // 0750: not readable by other local users (the recording holds every segment's numbers).
    // Never through a symlink: everything below is written into this directory by name.
    crate::files::create_dir(tmp, 0o750).map_err(io(tmp))?;
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
    let f_path = recording::findings_path_for(&rec_path);
    let file = std::fs::File::create(&f_path).map_err(io(&f_path))?;
    recording::write_findings(BufWriter::new(file), std::slice::from_ref(&dump.job.finding)).map_err(io(&f_path))?;
    let rec = recording::Recording { header: h, events: dump.events.clone(), truncated_tail: false };
    plot::plot_recording(&rec, None, std::slice::from_ref(&dump.job.finding), tmp).map_err(RecorderError::Plot)?;
    if fin.exists() {
        std::fs::remove_dir_all(fin).map_err(io(fin))?;
    }
    std::fs::rename(tmp, fin).map_err(io(fin))?;
    let mut pictures: Vec<PathBuf> = std::fs::read_dir(fin)
        .map_err(io(fin))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "png" || x == "svg"))
        .collect();
    pictures.sort();
    Ok(DumpFiles {
        recording: fin.join("recording.jsonl"),
        findings: fin.join("recording.findings.jsonl"),
        pictures,
        dir: fin.to_path_buf(),
    })
}
