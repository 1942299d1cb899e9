//! An application-limited sender (iperf3 -b, its pipe empty between bursts) in an outage: every transfer's outage is a network stop.
mod support;

use std::time::Duration;

use support::daemon::Daemon;
use support::*;

/// Transfers one after the other beside one daemon, each with its own server port.
const RUNS: u16 = 6;

#[test]
fn every_outage_of_an_application_limited_sender_is_a_network_stop() {
    if !require_root("every_outage_of_an_application_limited_sender_is_a_network_stop") {
        return;
    }
    let d = Daemon::start("applim", "");
    let p = Pair::new("al");
    p.shape(100, 0);
    for i in 0..RUNS {
        let port = 6101 + i;
        let mut srv = p.iperf_server(port);
        let outage = p.outage_after(Duration::from_millis(1200), Duration::from_millis(1200));
        p.iperf_client(port, 4, &["-b", "50M"]);
        let _ = outage.join();
        let _ = srv.wait();
    }
    // The last stop ends one backed-off timeout after its outage at most.
    std::thread::sleep(Duration::from_secs(2));
    let findings = d.stop();
    let mut missed = vec![];
    for i in 0..RUNS {
        let port = 6101 + i;
        let remote = format!("{}:{port}", p.rcv_ip);
        let stops: Vec<&serde_json::Value> =
            findings.iter().filter(|f| f["kind"] == "stop" && f["conn"]["remote"] == remote.as_str()).collect();
        let first = stops.first();
        let line = match first {
            Some(f) => format!("{remote}: first report {}/{}, {} reports", f["owner"], f["cause"], stops.len()),
            None => format!("{remote}: no stop"),
        };
        println!("{line}");
        let network = first.is_some_and(|f| f["owner"] == "network")
            && stops.iter().any(|f| f["ongoing"] == false && f["duration_s"].as_f64().unwrap_or(0.0) >= 0.8);
        if !network {
            missed.push(line);
        }
    }
    assert!(missed.is_empty(), "outages not reported as a network stop of at least 0.8 s: {missed:?}");
}
