//! `tcpvigil plot RECORDING`: the papers' pictures (SVG and PNG) from any recording.
use std::process::ExitCode;

use anyhow::Result;
use tcpvigil::plot::{findings_for, plot_recording, PlotArgs};

use super::common::read_recording;

pub fn run(a: PlotArgs) -> Result<ExitCode> {
    let rec = match read_recording(&a.recording) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let findings = findings_for(&a.recording, a.findings.as_deref(), &rec)?;
    let files = plot_recording(&rec, a.conn.as_ref(), &findings, &a.out)?;
    for p in &files {
        println!("{}", p.display());
    }
    eprintln!("tcpvigil: {} pictures in {}", files.len(), a.out.display());
    Ok(ExitCode::SUCCESS)
}
