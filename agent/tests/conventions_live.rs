//! The conventions of issue 20 on a live daemon (root): recordings on stdout and 0640, SIGHUP
//! reloads, capabilities dropped after start-up, privileges checked first, process metrics.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use support::require_root;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tcpvigil")
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tv-live-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn record_out_dash_writes_the_recording_to_stdout_and_a_file_is_0640() {
    if !require_root("record_out_dash") {
        return;
    }
    let dir = tmp("record");
    let out = Command::new(bin()).args(["record", "--out", "-", "--duration", "1"]).current_dir(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["tcpvigil_recording"], 1, "{text}");
    assert!(!dir.join("-").exists(), "a file named - was created");
    // A file: 0640, even when an older file of that name was world-readable.
    let file = dir.join("rec.jsonl");
    std::fs::write(&file, b"old").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let st = Command::new(bin())
        .args(["record", "--duration", "1", "--out"])
        .arg(&file)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "{mode:o}");
    assert!(std::fs::read_to_string(&file).unwrap().starts_with("{\"tcpvigil_recording\""));
    std::fs::remove_dir_all(&dir).unwrap();
}
