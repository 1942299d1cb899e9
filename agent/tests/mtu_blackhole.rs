//! Root test: the path MTU black hole scenarios beside the live daemon, judged as `lab run NAME --judge --judge-mechanism` judges them: the stop and its owner as the capture shows, `mtu_blackhole` named where the run contains one and nowhere else.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use support::require_root;
use tcpvigil_lab::daemon::Daemon;
use tcpvigil_lab::fuzz::{judge_run, judged_text, run_beside};
use tcpvigil_lab::mechjudge::Outcome;
use tcpvigil_lab::Scenario;

/// Runs `name` beside a fresh daemon; the judgement's failures (owners and mechanisms) and whether
/// `mtu_blackhole` was named right.
fn judged(name: &str, out: &std::path::Path) -> (Vec<String>, bool) {
    let sc = Scenario::by_name(name).expect("scenario");
    let dir = out.join(name);
    let daemon = Daemon::start(std::path::Path::new(env!("CARGO_BIN_EXE_tcpvigil")), &dir.join("daemon"))
        .expect("tcpvigil run started");
    let (truth, all) = run_beside(&sc, &daemon, &dir, false).expect("scenario ran");
    drop(daemon);
    let mut j = judge_run(&truth, all, truth.config.path.rtt_ms() / 1e3).expect("judged");
    j.judge_mechanism();
    eprintln!("== {name}\n{}", judged_text(&j));
    let named = j.mech.outcomes.iter().any(|(m, o)| m == "mtu_blackhole" && *o == Outcome::Named);
    (j.verdict.failures, named)
}

/// `mtu-blackhole`: the next link's MTU drops mid-transfer with its ICMP filtered; named once
/// iperf3's control connection to the same host delivers its smaller segments. `mtu-blackhole-start`:
/// the same from before the transfer; the data connection never becomes bulk and stops anyway.
/// `mtu-pmtud` (the ICMP passes: the kernel lowers its MSS) and `outage` (everything dropped, the
/// path answers nothing) name none.
#[test]
fn path_mtu_black_holes_are_named_and_neither_a_working_pmtud_nor_an_outage_is() {
    if !require_root("mtu_blackhole scenarios") {
        return;
    }
    let out = std::env::temp_dir().join(format!("tv-mtu-{}", std::process::id()));
    let mut failures = Vec::new();
    for (name, want_named) in
        [("mtu-blackhole", true), ("mtu-blackhole-start", true), ("mtu-pmtud", false), ("outage", false)]
    {
        let (failed, named) = judged(name, &out);
        failures.extend(failed.into_iter().map(|f| format!("{name}: {f}")));
        if named != want_named {
            failures.push(format!("{name}: mtu_blackhole named {named}, want {want_named}"));
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
