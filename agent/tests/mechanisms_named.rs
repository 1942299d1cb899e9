//! Root test: the lab's mechanism scenarios beside the live daemon, judged as `lab run NAME --judge --judge-mechanism` judges them: the owners as the capture shows, the scenario's mechanism named about the right connection and side, and no mechanism named that the run does not contain.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use support::mechanism::judged;
use support::require_root;

/// `rcvbuf-app`: the receiving application set SO_RCVBUF to 64 KiB on a 40 ms path (rwnd_limited,
/// `application`: raising tcp_rmem would change nothing). `sndbuf-sysctl`: the sender's buffer is
/// the namespace's tcp_wmem maximum (sndbuf_limited, `sysctl`). `queue-deep`: a drop-tail queue of
/// several BDPs fills before each loss (`queue_overflow`, the RTT grown by the queue at each loss).
#[test]
fn buffers_and_a_deep_queue_are_named_by_the_knob_or_the_queue_that_holds_them() {
    if !require_root("mechanism scenarios") {
        return;
    }
    let out = std::env::temp_dir().join(format!("tv-mech-{}", std::process::id()));
    let mut failures = Vec::new();
    for (name, mechanism) in
        [("rcvbuf-app", "application"), ("sndbuf-sysctl", "sysctl"), ("queue-deep", "queue_overflow")]
    {
        let (failed, named) = judged(name, mechanism, &out);
        failures.extend(failed.into_iter().map(|f| format!("{name}: {f}")));
        if !named {
            failures.push(format!("{name}: {mechanism} not named"));
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
