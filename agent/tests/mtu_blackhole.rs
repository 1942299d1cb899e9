//! Root test: the path MTU black hole scenarios beside the live daemon, judged as `lab run NAME --judge --judge-mechanism` judges them: the stop and its owner as the capture shows, `mtu_blackhole` named where the run contains one and nowhere else.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use support::mechanism::judged;
use support::require_root;

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
        let (failed, named) = judged(name, "mtu_blackhole", &out);
        failures.extend(failed.into_iter().map(|f| format!("{name}: {f}")));
        if named != want_named {
            failures.push(format!("{name}: mtu_blackhole named {named}, want {want_named}"));
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
