//! Every lab scenario against the live daemon: the expected diagnosis, found in time, and nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use support::daemon::Daemon;
use support::judge::{self, Row};

use std::time::Duration;

use serde_json::Value;
use support::require_root;
use tcpvigil_lab::{Lab, RunOptions, Scenario, Truth};

fn stop_daemon(d: Daemon) -> Vec<Value> {
    // Let the last ticks and snapshots through before stopping; the dumps are not looked at here.
    std::thread::sleep(Duration::from_millis(1500));
    let dumps = d.dumps.clone();
    let all = d.stop();
    let _ = std::fs::remove_dir_all(dumps);
    all
}

fn run(name: &str) -> Option<(Truth, Vec<Value>)> {
    if !require_root(&format!("scenario {name}")) {
        return None;
    }
    let sc = Scenario::by_name(name).expect("scenario");
    let out = std::env::temp_dir().join(format!("tvs-runs-{}", std::process::id()));
    let opts = RunOptions { out_dir: out, progress: false, ..Default::default() };
    let (truth, all) = sc
        .run_with(&opts, |_lab: &Lab| Ok(Daemon::start(name, judge::LAB_CONFIG)), |d, _lab, _truth| Ok(stop_daemon(d)))
        .expect("scenario ran");
    let f = judge::sender_findings(&all, &truth);
    eprintln!("== {name}: {} findings about the senders ({} reports in all)", f.len(), all.len());
    let senders: Vec<String> = truth.senders.iter().map(|h| format!("{} netns {}", h.addr, h.netns_ino)).collect();
    if f.is_empty() && !all.is_empty() {
        eprintln!("   senders: {senders:?}; every report:");
        for x in &all {
            eprintln!("   {} {} {} netns {}", x["kind"], x["cause"], x["conn"]["local"], x["conn"]["netns"]);
        }
    }
    for x in &f {
        eprintln!(
            "   {} {} start {:+.2}s duration {} found {:+.2}s",
            x["kind"],
            x["cause"],
            judge::secs_from_start(&x["start"], &truth),
            x["duration_s"],
            judge::secs_from_start(&x["ts"], &truth)
        );
    }
    Some((truth, f))
}

/// Runs `name` beside the daemon and judges what it reported; prints the table row and appends it to
/// `target/tmp/diagnoses.md`, which scripts/test.sh prints at the end of a run.
fn judged(name: &str) {
    let Some((truth, f)) = run(name) else { return };
    let row: Row = judge::check(name, &truth, &f);
    eprintln!("{row}");
    let table = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("diagnoses.md");
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&table)
        .and_then(|mut t| std::io::Write::write_all(&mut t, format!("{row}\n").as_bytes()));
    if let Err(e) = appended {
        eprintln!("could not append to {}: {e}", table.display());
    }
}

#[test]
fn clean_raises_nothing() {
    judged("clean");
}

#[test]
fn outage_is_a_path_silent_stop_found_in_progress_with_its_start_and_end() {
    judged("outage");
}

#[test]
fn tail_loss_ending_in_a_timeout_is_an_rto_stop() {
    judged("tail-loss-rto");
}

#[test]
fn a_python_receiver_sleeping_14_s_is_the_receivers_stall_never_the_networks() {
    judged("receiver-stall");
}

#[test]
fn a_python_receiver_sleeping_3_s_is_the_receivers_stall_never_the_networks() {
    judged("receiver-stall-3s");
}

#[test]
fn an_http_download_has_no_stop_its_end_included() {
    judged("http-download");
}

#[test]
fn a_receiver_that_stops_reading_is_a_zero_window_stop() {
    judged("zero-window");
}

#[test]
fn a_path_beyond_the_receive_buffer_is_receive_window_limited() {
    judged("lfn-buffer");
}

#[test]
fn a_bulk_transfer_without_sack_is_flagged() {
    judged("no-sack");
}

#[test]
fn staggered_streams_are_judged_against_iperf3() {
    judged("parallel-4-staggered");
}

#[test]
fn streams_started_together_are_judged_against_iperf3() {
    judged("parallel-4");
}

#[test]
fn a_stream_on_a_lossy_link_is_flagged_and_named() {
    judged("parallel-4-lossy");
}

#[test]
fn a_policed_burst_is_no_stop_unless_a_timeout_fired() {
    judged("policer-burst");
}

#[test]
fn lost_retransmissions_are_no_stop_unless_a_timeout_fired() {
    judged("lost-retransmit");
}
