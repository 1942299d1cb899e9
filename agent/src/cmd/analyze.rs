//! `tcpvigil analyze FILE`: replay a recording through the detectors and print the diagnoses.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use tcpvigil::clock::rfc3339 as wall;
use tcpvigil::config::Config;
use tcpvigil::detect::{analyze, final_findings};
use tcpvigil::model::Sk;

use super::common::{read_recording, usage};

#[derive(clap::Args)]
pub struct Args {
    /// A recording written by `tcpvigil record` (or a flight-recorder dump).
    file: PathBuf,
    /// Configuration file whose [detect] section to use.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also print findings as they were made in time (in progress, then ended).
    #[arg(long)]
    all: bool,
}

pub fn run(a: Args) -> Result<ExitCode> {
    let cfg = match Config::load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return Ok(usage(e)),
    };
    let (rec, cut) = match read_recording(&a.file) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let all = analyze(&rec.events, &cfg.detect);
    let shown = if a.all { all.clone() } else { final_findings(&all) };
    let off = rec.header.mono_to_unix_ns;
    for f in &shown {
        let mut v = serde_json::to_value(f)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("ts".into(), wall(f.ts_ns, off).into());
            o.insert("start".into(), wall(f.start_ns, off).into());
            o.insert("schema_version".into(), tcpvigil::export::events::EVENTS_SCHEMA_VERSION.into());
            // The host the recording was made on, as the daemon's events name it.
            o.insert("host".into(), rec.header.hostname.clone().into());
        }
        println!("{v}");
    }
    eprintln!("tcpvigil: {} events, {} findings", rec.events.len(), shown.len());
    for f in final_findings(&all) {
        let who = f.conn.map(|c| format!("{} {}", Sk(c.cookie), c.tuple)).or(f.group.clone()).unwrap_or_default();
        let dur = f.duration_s.map(|d| format!("{d:.2}s")).unwrap_or_else(|| "in progress".into());
        eprintln!("  {} {} {} at {} ({})", f.kind().as_str(), f.cause, who, wall(f.start_ns, off), dur);
    }
    if let Some(c) = cut {
        return Ok(usage(format!(
            "{}: too large to hold in memory: {c}; the findings above cover what was kept",
            a.file.display()
        )));
    }
    Ok(ExitCode::SUCCESS)
}
