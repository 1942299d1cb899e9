//! `tcpvigil plot RECORDING`: pictures (SVG and PNG) from any recording.
use std::process::ExitCode;

use anyhow::Result;
use tcpvigil::plot::{findings_for, plot_recording, PlotArgs};

use super::common::{read_recording, usage};

pub fn run(a: PlotArgs) -> Result<ExitCode> {
    let (rec, cut) = match read_recording(&a.recording) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let findings = findings_for(&a.recording, a.findings.as_deref(), &rec)?;
    let files = plot_recording(&rec, a.conn.as_ref(), &findings, &a.out)?;
    for p in &files {
        println!("{}", p.display());
    }
    eprintln!("tcpvigil: {} pictures in {}", files.len(), a.out.display());
    if let Some(c) = cut {
        return Ok(usage(format!(
            "{}: too large to hold in memory: {c}; the pictures show what was kept",
            a.recording.display()
        )));
    }
    Ok(ExitCode::SUCCESS)
}
