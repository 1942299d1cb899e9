//! `tcpvigil plot RECORDING`: the papers' pictures (SVG and PNG) from any recording.
use std::process::ExitCode;

use anyhow::Result;
use tcpvigil::plot::{findings_path_for, plot_recording, read_findings, PlotArgs};

use super::common::usage;

pub fn run(a: PlotArgs) -> Result<ExitCode> {
    let f = match tcpvigil::files::open_regular(&a.recording) {
        Ok(f) => f,
        Err(e) => return Ok(usage(format!("cannot open {}: {e}", a.recording.display()))),
    };
    // A recording too large to hold is drawn up to the cut, which is reported last (exit 2).
    let (rec, cut) = match tcpvigil::recording::read_file_prefix(f) {
        Ok(r) => r,
        Err(e) => return Ok(usage(format!("{}: {e}", a.recording.display()))),
    };
    let findings = match &a.findings {
        Some(p) => read_findings(p)?,
        None => {
            let side = findings_path_for(&a.recording);
            if side.exists() {
                read_findings(&side)?
            } else {
                let all = tcpvigil::detect::analyze(&rec.events, &Default::default());
                tcpvigil::detect::final_findings(&all)
            }
        }
    };
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
