//! `tcpvigil analyze FILE`: replay a recording through the detectors and print the diagnoses.
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use tcpvigil::config::Config;
use tcpvigil::detect::{analyze, final_findings};

use super::common::usage;

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
    let f = match File::open(&a.file) {
        Ok(f) => f,
        Err(e) => return Ok(usage(format!("cannot open {}: {e}", a.file.display()))),
    };
    let rec = match tcpvigil::recording::read(BufReader::new(f)) {
        Ok(r) => r,
        Err(e) => return Ok(usage(format!("{}: {e}", a.file.display()))),
    };
    if rec.truncated_tail {
        eprintln!("tcpvigil: the last line of {} was cut off (recorder stopped mid-write); ignored", a.file.display());
    }
    let all = analyze(&rec.events, &cfg.detect);
    let shown = if a.all { all.clone() } else { final_findings(&all) };
    let off = rec.header.mono_to_unix_ns;
    for f in &shown {
        let mut v = serde_json::to_value(f)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("ts".into(), wall(f.ts_ns, off).into());
            o.insert("start".into(), wall(f.start_ns, off).into());
        }
        println!("{v}");
    }
    eprintln!("tcpvigil: {} events, {} findings", rec.events.len(), shown.len());
    for f in final_findings(&all) {
        let who = f.conn.map(|c| c.tuple.to_string()).or(f.group.clone()).unwrap_or_default();
        let dur = f.duration_s.map(|d| format!("{d:.2}s")).unwrap_or_else(|| "in progress".into());
        eprintln!("  {:?} {} {} at {} ({})", f.kind, f.cause, who, wall(f.start_ns, off), dur);
    }
    Ok(ExitCode::SUCCESS)
}

/// RFC 3339 UTC time from a CLOCK_MONOTONIC timestamp and the recording's offset.
pub fn wall(mono_ns: u64, offset: i64) -> String {
    let unix = mono_ns as i64 + offset;
    let secs = unix.div_euclid(1_000_000_000);
    let ms = unix.rem_euclid(1_000_000_000) / 1_000_000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn wall_time_is_rfc3339_utc() {
        assert_eq!(super::wall(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::wall(1_500_000_000, 1_795_347_167_000_000_000 - 1_500_000_000), "2026-11-22T10:52:47.000Z");
    }
}
