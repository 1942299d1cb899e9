//! Root test: each mechanism scenario (path MTU black holes, policer, shallow and deep queues, a lossy lane, locked and capped buffers) puts its mechanism on the wire, as the capture at the sender and the router's counters show; every client runs the congestion control asked for.
mod common;

use std::net::IpAddr;
use tcpvigil_lab::mechanism::{mechanisms, MechTruth};
use tcpvigil_lab::stalls::Owner;
use tcpvigil_lab::truth::Truth;
use tcpvigil_lab::wire::{wires, Wire};
use tcpvigil_lab::{Family, Knobs, RunOptions, Scenario};

struct Run {
    truth: Truth,
    wires: Vec<Wire>,
    mechs: Vec<MechTruth>,
    flows: Vec<tcpvigil_lab::stalls::FlowTruth>,
}

fn run(name: &str, k: Knobs, out: &std::path::Path) -> Result<Run, String> {
    let mut sc = Scenario::by_name(name).map_err(|e| e.to_string())?;
    sc.apply_knobs(&k).map_err(|e| e.to_string())?;
    let opts = RunOptions { out_dir: out.to_path_buf(), capture: true, ..RunOptions::default() };
    let truth = sc.run(&opts).map_err(|e| format!("run: {e}"))?;
    let senders: Vec<IpAddr> = truth.senders.iter().flat_map(|h| [h.ip(Family::V4), h.ip(Family::V6)]).collect();
    let segs = tcpvigil_lab::pcap::read(truth.capture.as_deref().ok_or("no capture")?).map_err(|e| e.to_string())?;
    let wires = wires(&segs, |ip| senders.contains(ip));
    let flows = tcpvigil_lab::stalls::flows(&segs, |ip| senders.contains(ip), 64 * 1024);
    let mechs = mechanisms(&truth, &wires);
    Ok(Run { truth, wires, mechs, flows })
}

fn need(ok: bool, what: String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what)
    }
}

impl Run {
    /// The run's own mechanism, required (named by the scenario and confirmed on the wire).
    fn headline(&self, name: &str) -> Result<&MechTruth, String> {
        self.mechs
            .iter()
            .find(|m| m.mechanism == name && m.required)
            .ok_or_else(|| format!("no confirmed {name}: {:?}", self.mechs))
    }
    fn ev(&self, name: &str, key: &str) -> f64 {
        self.headline(name).ok().and_then(|m| m.evidence[key].as_f64()).unwrap_or(f64::NAN)
    }
    /// The congestion control of every sampled data connection.
    fn ccs(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .truth
            .ss_samples
            .iter()
            .flat_map(|s| s.conns.iter())
            .filter(|c| c.bytes_acked.unwrap_or(0) > 100_000)
            .filter_map(|c| c.cc.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

fn check(name: &str, r: &Run) -> Result<(), String> {
    match name {
        "mtu-blackhole" => {
            let m = r.headline("mtu_blackhole")?;
            let c = &m.evidence["connections"][0];
            need(c["oversize_retransmitted"].as_u64() >= Some(3) && c["acknowledged"] == false, format!("{c}"))?;
            need(
                m.evidence["router_frag_fails"].as_i64() > Some(0) && m.evidence["icmp_dropped"].as_u64() > Some(0),
                format!("{}", m.evidence),
            )?;
            // The capture: a network stall from the drop (3 s) to the end, the cumulative ACK stuck.
            let at = m.from;
            need(
                r.flows
                    .iter()
                    .flat_map(|f| f.stalls.iter())
                    .any(|s| s.owner == Owner::Network && (s.start - at).abs() < 0.3 && s.cut),
                format!("no network stall from the drop at {at:.3} to the end: {:?}", r.flows),
            )
        }
        "mtu-blackhole-start" => {
            let m = r.headline("mtu_blackhole")?;
            // The data connection's window never delivered, yet the truth holds it as stopped;
            // the handshake and iperf3's control messages went through.
            let held = r
                .flows
                .iter()
                .find(|f| f.bytes_acked < 64 * 1024)
                .ok_or(format!("no held connection: {:?}", r.flows))?;
            need(held.stalls.iter().any(|s| s.owner == Owner::Network && s.retransmissions >= 3), format!("{held:?}"))?;
            need(
                r.wires.iter().any(|w| w.acked > 0 && w.sent > 0 && w.retransmitted == 0),
                "no small exchange went through".into(),
            )?;
            need(m.evidence["icmp_dropped"].as_u64() > Some(0), format!("{}", m.evidence))
        }
        "mtu-pmtud" => {
            need(!r.mechs.iter().any(|m| m.mechanism == "mtu_blackhole"), format!("{:?}", r.mechs))?;
            // Path MTU discovery: smaller segments a moment after the drop, and delivery goes on.
            let at =
                r.truth.injections_of("mtu").first().map(|i| i.start.unix_ns as f64 / 1e9).ok_or("no mtu injection")?;
            let w = r.wires.iter().max_by_key(|w| w.acked).ok_or("no connection")?;
            let after = w.largest(at + 1.0, at + 5.0);
            need(after > 0 && after <= 1200 - 40, format!("largest segment after the drop {after}"))?;
            need(w.oversize(at + 1.0, at + 5.0, 1160).0 == 0, "full-size segments went on".into())
        }
        "policer" => {
            let q = r.ev("policer", "queueing_at_loss_ms");
            need(r.ev("policer", "policed_packets") > 0.0 && q < 5.0, format!("policed, queueing at loss {q:.1} ms"))
        }
        "queue-shallow" => {
            let q = r.ev("queue_overflow", "queueing_at_loss_ms");
            need(
                r.ev("queue_overflow", "tbf_drops") > 0.0 && q < 15.0,
                format!("queueing at loss {q:.1} ms (queue 4 ms)"),
            )
        }
        "queue-deep" => {
            let q = r.ev("queue_overflow", "queueing_at_loss_ms");
            need(
                r.ev("queue_overflow", "tbf_drops") > 0.0 && q > 100.0,
                format!("queueing at loss {q:.1} ms (queue 160 ms)"),
            )
        }
        "parallel-3-lossy-lane" => {
            let m = r.headline("lossy_member")?;
            need(m.ports == vec![40002], format!("{:?}", m.ports))?;
            let lane = m.evidence["retransmitted_fraction"].as_f64().unwrap_or(0.0);
            need(lane >= 0.025 && m.evidence["dropped"].as_u64() > Some(100), format!("{}", m.evidence))?;
            let streams: Vec<u16> =
                r.wires.iter().filter(|w| w.acked > 1 << 20).filter_map(|w| w.local.map(|a| a.port())).collect();
            need(
                streams.len() == 3 && [40000, 40001, 40002].iter().all(|p| streams.contains(p)),
                format!("{streams:?}"),
            )?;
            need(r.ccs() == vec!["bbr".to_string()], format!("{:?}", r.ccs()))
        }
        "rcvbuf-app" | "sndbuf-app" | "sndbuf-sysctl" => {
            let mech = if name == "sndbuf-sysctl" { "sysctl" } else { "application" };
            let m = r.headline(mech)?;
            let side = if name == "rcvbuf-app" { "receiver" } else { "sender" };
            need(m.side.as_deref() == Some(side), format!("{m:?}"))?;
            let eff = r.truth.summary.efficiency.unwrap_or(1.0);
            need(eff < 0.6, format!("efficiency {eff:.2}: the buffer did not hold the transfer"))?;
            // The socket pair runs the lab's CC, not the host default (bbr).
            need(r.ccs() == vec!["cubic".to_string()], format!("{:?}", r.ccs()))
        }
        "http-download" => {
            need(r.ccs() == vec!["reno".to_string()], format!("curl from http.server ran {:?}", r.ccs()))
        }
        other => Err(format!("no check for {other}")),
    }
}

#[test]
fn each_mechanism_scenario_puts_its_mechanism_on_the_wire() {
    let _g = common::serial();
    if !common::can_run("mechanisms") {
        return;
    }
    let out = common::scratch("mechanisms");
    let short = |d: u32| Knobs { duration: Some(d), ..Knobs::default() };
    let mut cases: Vec<(&str, Knobs)> = common::MECHANISM_SCENARIOS
        .iter()
        .map(|&n| (n, short(if n == "mtu-blackhole" || n == "parallel-3-lossy-lane" { 8 } else { 6 })))
        .collect();
    // The HTTP client under a CC the host does not default to.
    cases.push(("http-download", Knobs { bytes: Some(30_000_000), cc: Some("reno".into()), ..Knobs::default() }));
    let mut failures = Vec::new();
    for (name, k) in cases {
        let t = std::time::Instant::now();
        match run(name, k, &out) {
            Ok(r) => {
                eprintln!(
                    "{name:<22} {:>6.1} Mbit/s ({:.0} s) {:?}",
                    r.truth.summary.goodput_mbit,
                    t.elapsed().as_secs_f64(),
                    r.mechs.iter().map(|m| (&m.mechanism, m.required, m.evidence.to_string())).collect::<Vec<_>>()
                );
                if let Err(e) = check(name, &r) {
                    failures.push(format!("{name}: {e}"));
                }
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(failures.is_empty(), "mechanism scenarios:\n{}", failures.join("\n"));
}
