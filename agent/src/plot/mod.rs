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
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::model::{Event, Filter, Finding, FindingKind};
use crate::recording::{self, Recording};
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

/// Where the findings that go with a recording are kept: `X.jsonl` -> `X.findings.jsonl`.
pub fn findings_path_for(recording: &Path) -> PathBuf {
    recording.with_extension("findings.jsonl")
}

/// At most this many findings are read from a findings file.
pub const MAX_FINDINGS: usize = 100_000;

/// Read findings, one JSON object per line; a bad line is an error naming it (quoting little of
/// it). Regular files only, lines of at most 1 MiB, at most `MAX_FINDINGS`.
pub fn read_findings(path: &Path) -> anyhow::Result<Vec<Finding>> {
    use std::io::Read;
    let f = crate::files::open_regular(path).with_context(|| format!("cannot open the findings {}", path.display()))?;
    let mut r = BufReader::new(f);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for i in 1.. {
        buf.clear();
        let n = r.by_ref().take(recording::MAX_LINE as u64 + 1).read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        if buf.len() > recording::MAX_LINE {
            anyhow::bail!("{} line {i}: longer than 1 MiB: not a tcpvigil finding", path.display());
        }
        let line = String::from_utf8_lossy(&buf);
        if line.trim().is_empty() {
            continue;
        }
        if out.len() >= MAX_FINDINGS {
            anyhow::bail!("{}: more than {MAX_FINDINGS} findings", path.display());
        }
        let finding = serde_json::from_str(&line).map_err(|e| {
            anyhow::anyhow!(
                "{} line {i}: not a tcpvigil finding: {}",
                path.display(),
                crate::files::clip(&e.to_string(), crate::files::QUOTE_BYTES)
            )
        })?;
        out.push(finding);
    }
    Ok(out)
}

/// `tcpvigil plot`: read the recording (and findings) and write the pictures.
pub fn run(args: &PlotArgs) -> anyhow::Result<Vec<PathBuf>> {
    let rec = recording::open(&args.recording).with_context(|| args.recording.display().to_string())?;
    let sibling = findings_path_for(&args.recording);
    let findings = match &args.findings {
        Some(p) => read_findings(p)?,
        None if sibling.exists() => read_findings(&sibling)?,
        None => Vec::new(),
    };
    plot_recording(&rec, args.conn.as_ref(), &findings, &args.out)
}

/// Cookies an `unfair` finding names: its connection and any `cookie`/`cookies` in its evidence.
pub fn finding_cookies(f: &Finding) -> Vec<u64> {
    fn walk(v: &serde_json::Value, key: Option<&str>, out: &mut Vec<u64>) {
        match v {
            serde_json::Value::Object(m) => m.iter().for_each(|(k, v)| walk(v, Some(k), out)),
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, key, out)),
            serde_json::Value::Number(n) if matches!(key, Some("cookie") | Some("cookies")) => {
                out.extend(n.as_u64());
            }
            _ => {}
        }
    }
    let mut out: Vec<u64> = f.conn.iter().map(|c| c.cookie).collect();
    walk(&f.evidence, None, &mut out);
    out.sort_unstable();
    out.dedup();
    out
}

fn write_pair(out_dir: &Path, stem: &str, svg: &str, written: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    // Never through a symlink someone left where a picture goes (plot may run as root).
    let svg_path = out_dir.join(format!("{stem}.svg"));
    crate::files::write(&svg_path, svg.as_bytes(), 0o644).with_context(|| format!("writing {}", svg_path.display()))?;
    let png = svg::png(svg).with_context(|| format!("rasterising {stem}"))?;
    let png_path = out_dir.join(format!("{stem}.png"));
    crate::files::write(&png_path, &png, 0o644).with_context(|| format!("writing {}", png_path.display()))?;
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
) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
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
    for f in findings.iter().filter(|f| matches!(f.kind, FindingKind::Unfair | FindingKind::Path)) {
        let members = finding_cookies(f);
        let name = f.group.clone().unwrap_or_else(|| "unfair group".into());
        let title = match f.kind {
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
