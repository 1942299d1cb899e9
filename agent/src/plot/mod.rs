//! `tcpvigil plot RECORDING`: the papers' pictures (SVG and PNG, 1200x800) from any recording.
//!
//! Per connection: goodput in RTT-sized bins with stops shaded; cwnd, in_flight and the
//! scoreboard with the CA state band, RTOs and lost retransmissions; sequence progress with SACK
//! blocks. Per group of parallel streams (same local address to the same remote end, or an
//! `unfair` finding's group): per-stream goodput and delivered bytes.
pub mod figure;
pub mod screen;
pub mod series;
pub mod svg;
pub mod synth;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::model::{Event, Filter, Finding, FindingKind};
use crate::recording::{self, FindingsError, Recording};
use series::ConnSeries;

pub use figure::{HEIGHT, WIDTH};

/// Options of `tcpvigil plot`.
#[derive(Debug, Clone, clap::Args)]
pub struct PlotArgs {
    /// A recording written by `tcpvigil record` or by the flight recorder.
    pub recording: PathBuf,
    /// Where the pictures go.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
    /// Only connections matching this filter (same forms as `watch --conn`).
    #[arg(long, value_name = "FILTER")]
    pub conn: Option<Filter>,
    /// Findings (JSON lines) whose stops are shaded; default: RECORDING's `.findings.jsonl`
    /// sibling if there is one (otherwise stops are inferred from the goodput).
    #[arg(long, value_name = "FILE")]
    pub findings: Option<PathBuf>,
}

/// Why pictures could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{}: {err}", path.display())]
    Recording { path: PathBuf, err: recording::RecordingError },
    #[error(transparent)]
    Findings(#[from] FindingsError),
    #[error("creating {}: {err}", path.display())]
    Create { path: PathBuf, err: std::io::Error },
    #[error("writing {}: {err}", path.display())]
    Write { path: PathBuf, err: std::io::Error },
    #[error("rasterising {stem}: {err}")]
    Raster { stem: String, err: svg::RasterError },
}

/// `tcpvigil plot`: read the recording (and findings) and write the pictures.
pub fn run(args: &PlotArgs) -> Result<Vec<PathBuf>, PlotError> {
    let path = &args.recording;
    let rec = recording::open(path).map_err(|err| PlotError::Recording { path: path.clone(), err })?;
    let findings = findings_for(path, args.findings.as_deref(), &rec)?;
    plot_recording(&rec, args.conn.as_ref(), &findings, &args.out)
}

/// The findings a recording's pictures shade: the file given, else the recording's findings
/// sibling, else what the detectors find in it.
pub fn findings_for(path: &Path, given: Option<&Path>, rec: &Recording) -> Result<Vec<Finding>, FindingsError> {
    let sibling = recording::findings_path_for(path);
    match given {
        Some(p) => recording::read_findings(p),
        None if sibling.exists() => recording::read_findings(&sibling),
        None => Ok(crate::detect::final_findings(&crate::detect::analyze(&rec.events, &Default::default()))),
    }
}

fn write_pair(out_dir: &Path, stem: &str, svg: &str, written: &mut Vec<PathBuf>) -> Result<(), PlotError> {
    // Never through a symlink someone left where a picture goes (plot may run as root).
    let write = |path: PathBuf, bytes: &[u8]| match crate::files::write(&path, bytes, 0o644) {
        Ok(()) => Ok(path),
        Err(err) => Err(PlotError::Write { path, err }),
    };
    let svg_path = write(out_dir.join(format!("{stem}.svg")), svg.as_bytes())?;
    let png = svg::png(svg).map_err(|err| PlotError::Raster { stem: stem.to_string(), err })?;
    let png_path = write(out_dir.join(format!("{stem}.png")), &png)?;
    written.push(svg_path);
    written.push(png_path);
    Ok(())
}

/// Draw every connection of `rec` that matches `filter` (`conn-COOKIE.svg/.png`) and every group
/// of parallel streams (`group-N.svg/.png`) into `out_dir`; returns the files written.
pub fn plot_recording(
    rec: &Recording,
    filter: Option<&Filter>,
    findings: &[Finding],
    out_dir: &Path,
) -> Result<Vec<PathBuf>, PlotError> {
    std::fs::create_dir_all(out_dir).map_err(|err| PlotError::Create { path: out_dir.into(), err })?;
    let t0 = rec.events.iter().map(|e| e.ts_ns).min().unwrap_or(0);
    let mut by_conn: BTreeMap<u64, Vec<&Event>> = BTreeMap::new();
    let mut order: Vec<u64> = Vec::new();
    for e in &rec.events {
        if filter.is_some_and(|f| !f.matches(&e.conn)) {
            continue;
        }
        let v = by_conn.entry(e.conn.cookie).or_default();
        if v.is_empty() {
            order.push(e.conn.cookie);
        }
        v.push(e);
    }
    let mut written = Vec::new();
    let mut all: Vec<ConnSeries> = Vec::new();
    for cookie in &order {
        let mut evs = by_conn.remove(cookie).unwrap_or_default();
        evs.sort_by_key(|e| e.ts_ns);
        let fs: Vec<&Finding> = findings.iter().filter(|f| f.conn.is_some_and(|c| c.cookie == *cookie)).collect();
        let Some(s) = ConnSeries::build(&evs, &fs, t0, None) else { continue };
        if s.board.is_empty() && s.goodput.is_empty() {
            continue;
        }
        write_pair(out_dir, &format!("conn-{cookie}"), &figure::conn_figure(&s), &mut written)?;
        all.push(s);
    }
    // Groups: what unfair findings and path events name, else streams sharing local address and
    // remote end.
    let mut groups: Vec<(String, Vec<u64>)> = Vec::new();
    for f in findings.iter().filter(|f| matches!(f.kind(), FindingKind::Unfair | FindingKind::Path)) {
        let members = f.cookies();
        let name = f.group.clone().unwrap_or_else(|| "unfair group".into());
        let title = match f.kind() {
            FindingKind::Path => format!("path event: the connections to {name}"),
            _ => format!("parallel streams: {name}"),
        };
        if members.len() > 1 && !groups.iter().any(|g| g.1 == members) {
            groups.push((title, members));
        }
    }
    if groups.is_empty() {
        let mut by_path: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for s in &all {
            let key = format!("{} → {}", s.id.tuple.local.ip(), s.id.tuple.remote);
            by_path.entry(format!("parallel streams: {key}")).or_default().push(s.id.cookie);
        }
        groups.extend(by_path.into_iter().filter(|g| g.1.len() > 1));
    }
    for (n, (title, members)) in groups.iter().enumerate() {
        let streams: Vec<ConnSeries> = members
            .iter()
            .filter_map(|k| all.iter().find(|s| s.id.cookie == *k))
            .map(|s| {
                // Same bin width for every stream, wide enough to read 4 overlaid lines.
                let evs: Vec<&Event> = rec.events.iter().filter(|e| e.conn.cookie == s.id.cookie).collect();
                let bin = s.bin_s.max((s.end - s.start) / 300.0);
                ConnSeries::build(&evs, &[], t0, Some(bin)).unwrap_or_else(|| s.clone())
            })
            .collect();
        if streams.len() < 2 {
            continue;
        }
        write_pair(out_dir, &format!("group-{}", n + 1), &figure::group_figure(title, &streams), &mut written)?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests;
