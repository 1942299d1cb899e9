//! Detector fixtures: lab runs recorded as the daemon sees them, replayed by `tcpvigil analyze`, judged by their truth.
//!
//! The recordings in tests/fixtures come from `bash scripts/make-fixtures.sh` (bulk samples every 50 ms,
//! events and snapshots of the lab's flows, gzip). The same judgements as the live scenario tests apply.
mod support;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use support::judge;
use tcpvigil_lab::Truth;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// Every report `tcpvigil analyze --all` makes for the fixture of `scenario`, with the run's truth.
fn analyze(scenario: &str) -> (Truth, Vec<Value>) {
    let dir = fixtures();
    let truth = Truth::load(&dir.join(format!("{scenario}.truth.json"))).expect("the fixture's truth");
    let cfg = std::env::temp_dir().join(format!("tv-fixture-{scenario}-{}.toml", std::process::id()));
    std::fs::write(&cfg, judge::LAB_CONFIG).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvigil"))
        .args(["analyze", "--all", "--config"])
        .arg(&cfg)
        .arg(dir.join(format!("{scenario}.jsonl.gz")))
        .output()
        .expect("run tcpvigil analyze");
    let _ = std::fs::remove_file(&cfg);
    assert!(out.status.success(), "analyze {scenario}: {}", String::from_utf8_lossy(&out.stderr));
    let all = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("analyze printed a non-JSON line {l:?}: {e}")))
        .collect();
    (truth, all)
}

fn judged(scenario: &str) {
    let (truth, all) = analyze(scenario);
    let f = judge::sender_findings(&all, &truth);
    eprintln!("{}", judge::check(scenario, &truth, &f));
}

#[test]
fn every_fixture_has_a_test_and_a_truth() {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .expect("tests/fixtures")
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".jsonl.gz").map(str::to_string))
        .collect();
    names.sort();
    let tested = [
        "clean",
        "lfn-buffer",
        "lost-retransmit",
        "no-sack",
        "outage",
        "parallel-4-lossy",
        "tail-loss-rto",
        "zero-window",
    ];
    assert_eq!(names, tested, "a fixture without a test below, or a test without its fixture");
    for n in &names {
        assert!(fixtures().join(format!("{n}.truth.json")).exists(), "{n}: truth missing");
    }
}

#[test]
fn clean() {
    judged("clean");
}

#[test]
fn outage() {
    judged("outage");
}

#[test]
fn tail_loss_rto() {
    judged("tail-loss-rto");
}

#[test]
fn zero_window() {
    judged("zero-window");
}

#[test]
fn lfn_buffer() {
    judged("lfn-buffer");
}

#[test]
fn no_sack() {
    judged("no-sack");
}

#[test]
fn parallel_4_lossy() {
    judged("parallel-4-lossy");
}

#[test]
fn lost_retransmit() {
    judged("lost-retransmit");
}
