//! Shared helpers for the lab's root tests: loud skip (a failure under CI=true), serialization, small lab builders.
#![allow(dead_code)]
use std::sync::{Mutex, MutexGuard};
use tcpvigil_lab::lab;

static SERIAL: Mutex<()> = Mutex::new(());

/// Tests share two cores: run them one at a time so measurements are not disturbed.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// True when the lab can run. Otherwise prints a loud SKIP — or panics when CI=true.
pub fn can_run(test: &str) -> bool {
    match lab::check_prerequisites() {
        Ok(()) => true,
        Err(e) => skip(test, &format!("lab prerequisites missing: {e}")),
    }
}

/// Prints a loud SKIP and returns false — or panics when CI=true (a skip is a failure there).
pub fn skip(test: &str, why: &str) -> bool {
    if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
        panic!("{test}: {why} (under CI=true a skip is a failure)");
    }
    // Straight to the stderr handle: libtest's capture only swallows the print macros.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "\n*** SKIPPED {test}: {why} ***\n");
    false
}

/// A scratch directory for a test's artefacts.
pub fn scratch(test: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tvl-test-{}-{test}", std::process::id()));
    let _ = std::fs::create_dir_all(&d);
    d
}

/// The mechanism scenarios (`mechanisms.rs` runs them with a capture; `scenarios.rs` leaves them).
pub const MECHANISM_SCENARIOS: &[&str] = &[
    "mtu-blackhole",
    "mtu-blackhole-start",
    "mtu-pmtud",
    "policer",
    "queue-shallow",
    "queue-deep",
    "parallel-3-lossy-lane",
    "rcvbuf-app",
    "sndbuf-app",
    "sndbuf-sysctl",
];
