//! TVTEST lines on stdout (the serial console in a VM): what the host-side runner parses.
//!
//! `TVTEST PASS name detail`, `TVTEST FAIL name reason`, `TVTEST INFO key value...`,
//! `TVTEST DONE n_pass n_fail`. Names have no spaces; the rest of a line is free text.
use std::io::Write;

#[derive(Default)]
pub struct Report {
    pub pass: u32,
    pub fail: u32,
}

fn line(s: &str) {
    // One write per line so kernel messages on the same console interleave between lines.
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("{}\n", s.replace('\n', " ")).as_bytes());
    let _ = out.flush();
}

impl Report {
    pub fn pass(&mut self, name: &str, detail: &str) {
        self.pass += 1;
        line(&format!("TVTEST PASS {name} {detail}"));
    }

    pub fn fail(&mut self, name: &str, reason: &str) {
        self.fail += 1;
        line(&format!("TVTEST FAIL {name} {reason}"));
    }

    /// PASS or FAIL with the same detail either way.
    pub fn check(&mut self, name: &str, ok: bool, detail: &str) {
        if ok {
            self.pass(name, detail)
        } else {
            self.fail(name, detail)
        }
    }

    pub fn info(&self, what: &str) {
        line(&format!("TVTEST INFO {what}"));
    }

    pub fn done(&self) {
        line(&format!("TVTEST DONE {} {}", self.pass, self.fail));
    }
}

/// Progress for humans (stderr; in a VM it lands in the serial log too).
pub fn note(s: &str) {
    eprintln!("tvguest: {s}");
}
