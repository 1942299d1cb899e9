//! Root test: the lab's mechanism scenarios beside the live daemon, judged as `lab run NAME --judge --judge-mechanism` judges them: the owners as the capture shows, the scenario's mechanism named about the right connection and side, and no mechanism named that the run does not contain.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use support::require_root;
use tcpvigil_lab::daemon::Daemon;
use tcpvigil_lab::fuzz::{judge_run, judged_text, run_beside};
use tcpvigil_lab::mechjudge::Outcome;
use tcpvigil_lab::Scenario;

/// Runs `name` beside a fresh daemon: the judgement's failures (owners and mechanisms), and whether
/// `mechanism` was named about what the run contains.
fn judged(name: &str, mechanism: &str, out: &std::path::Path) -> (Vec<String>, bool) {
    let sc = Scenario::by_name(name).expect("scenario");
    let dir = out.join(name);
    let daemon = Daemon::start(std::path::Path::new(env!("CARGO_BIN_EXE_tcpvigil")), &dir.join("daemon"))
        .expect("tcpvigil run started");
    let (truth, all) = run_beside(&sc, &daemon, &dir, false).expect("scenario ran");
    drop(daemon);
    let mut j = judge_run(&truth, all, truth.config.path.rtt_ms() / 1e3).expect("judged");
    j.judge_mechanism();
    eprintln!("== {name}\n{}", judged_text(&j));
    let named = j.mech.outcomes.iter().any(|(m, o)| m == mechanism && *o == Outcome::Named);
    (j.verdict.failures, named)
}

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
