//! The mechanisms a run contains (path MTU black hole, policer, queue overflow, lossy member, a buffer set by the application or capped by a sysctl): from what the lab injected, confirmed on the wire by the capture and the router's counters where they can tell.
use crate::topo::Family;
use crate::traffic::Traffic;
use crate::truth::{Injection, Truth};
use crate::wire::Wire;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::net::IpAddr;

/// The mechanism names a finding's `mechanism` field is judged against.
pub const NAMES: [&str; 6] = ["mtu_blackhole", "policer", "queue_overflow", "lossy_member", "application", "sysctl"];

/// One mechanism in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MechTruth {
    pub mechanism: String,
    /// The run's headline (its scenario's `expected` names it) and the wire confirms it: a finding
    /// must name it. Otherwise it is background (queue drops of ordinary congestion, random loss on
    /// the whole path, a sysctl ceiling the path may reach): naming it is right, not naming it no miss.
    pub required: bool,
    /// Not seen on the wire. Kept only when `expected` names it (the case did not happen: counted
    /// apart); background that is not there is dropped.
    pub unconfirmed: bool,
    /// Unix seconds it was in force.
    pub from: f64,
    pub to: f64,
    /// The connections it concerns, by a port of theirs (a lossy lane's stream, the connections a
    /// black hole caught); empty: every connection of the run.
    pub ports: Vec<u16>,
    /// ... or by the sender's address (a lossy sender link).
    pub hosts: Vec<IpAddr>,
    /// `receiver` or `sender` for buffers.
    pub side: Option<String>,
    /// What was injected and what the wire showed.
    pub evidence: Value,
}

fn secs(s: &crate::clock::Stamp) -> f64 {
    s.unix_ns as f64 / 1e9
}

fn mech(name: &str, from: f64, to: f64, evidence: Value) -> MechTruth {
    MechTruth {
        mechanism: name.into(),
        required: false,
        unconfirmed: false,
        from,
        to,
        ports: vec![],
        hosts: vec![],
        side: None,
        evidence,
    }
}

/// The data connections: those that moved 64 kB, or whose full-size data a black hole held (they
/// may never move any).
fn data(wires: &[Wire]) -> impl Iterator<Item = &Wire> {
    wires.iter().filter(|w| w.acked >= 64 * 1024 || w.sent >= 10)
}

/// Median over the run's connections of the queueing delay at their loss episodes, ms.
fn queueing_ms(wires: &[Wire]) -> Option<f64> {
    let mut v: Vec<f64> = data(wires).filter_map(Wire::queueing_at_loss).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).map(|x| x * 1e3)
}

fn counter(t: &Truth, name: &str) -> u64 {
    t.nft_counters.iter().filter(|c| c.0 == name).map(|c| c.1).sum()
}

fn router(t: &Truth, name: &str) -> i64 {
    t.nstat.get("router").and_then(|m| m.get(name)).copied().unwrap_or(0)
}

/// The drops of the tbf queues towards the receivers.
fn tbf_drops(t: &Truth) -> u64 {
    t.qdisc_stats
        .iter()
        .filter(|(dev, _)| dev.starts_with('r'))
        .flat_map(|(_, v)| v.as_array().cloned().unwrap_or_default())
        .filter(|q| q["kind"] == "tbf")
        .filter_map(|q| q["drops"].as_u64())
        .sum()
}

/// The third number of a `min default max` buffer sysctl.
fn sysctl_max(t: &Truth, dir: &str, key: &str) -> Option<u64> {
    t.injections_of("sysctl")
        .into_iter()
        .filter(|i| i.dir == dir && i.detail["key"] == key)
        .filter_map(|i| i.detail["value"].as_str()?.split_whitespace().nth(2)?.parse().ok())
        .next_back()
}

/// The mechanisms of `truth`'s run, judged on its capture's connections `wires`.
pub fn mechanisms(t: &Truth, wires: &[Wire]) -> Vec<MechTruth> {
    let (start, end) = (secs(&t.lab_up), secs(&t.traffic_end));
    let window = |i: &Injection| (secs(&i.start), i.end.as_ref().map(secs).unwrap_or(end));
    let rtt = t.config.path.rtt_ms() / 1e3;
    let f = &t.config.path.forward;
    let bottleneck = match (f.police.map(|p| p.rate_mbit), f.shape.map(|s| s.rate_mbit)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let bdp = bottleneck.map(|b| b * 1e6 / 8.0 * rtt);
    let mut out = Vec::new();
    for i in t.injections_of("mtu").into_iter().filter(|i| i.detail["filter_icmp"] == true) {
        let (from, mut to) = window(i);
        // A drop in force from the start ends where the lab lifted it.
        let lifted = t.injections_of("mtu-restore").into_iter().map(|r| secs(&r.start)).filter(|r| *r > from);
        to = lifted.fold(to, f64::min);
        let mtu = i.detail["mtu"].as_u64().unwrap_or(0) as u32;
        let hdr = if t.config.family == Family::V6 { 60 } else { 40 };
        let held: Vec<(&Wire, (u64, u64, bool))> =
            data(wires).map(|w| (w, w.oversize(from, to, mtu.saturating_sub(hdr)))).filter(|(_, o)| o.0 > 0).collect();
        let caught: Vec<&(&Wire, (u64, u64, bool))> = held.iter().filter(|(_, o)| o.1 > 0 && !o.2).collect();
        let mut m = mech(
            "mtu_blackhole",
            from,
            to,
            json!({
                "mtu": mtu, "link_mtu": i.detail["link_mtu"], "router_frag_fails": router(t, "IpFragFails") + router(t, "Ip6FragFails"),
                "icmp_dropped": counter(t, "icmp-frag-needed") + counter(t, "icmp6-too-big"),
                "connections": held.iter().map(|(w, o)| json!({"local": w.local, "oversize_sent": o.0,
                    "oversize_retransmitted": o.1, "acknowledged": o.2, "largest_payload": w.largest(from, to)})).collect::<Vec<_>>(),
            }),
        );
        m.ports = caught.iter().filter_map(|(w, _)| w.local.map(|a| a.port())).collect();
        m.unconfirmed = caught.is_empty();
        out.push(m);
    }
    let policed: u64 = t.delay_stats.iter().filter(|d| d.queue == 1).map(|d| d.policed_packets).sum();
    for i in t.injections_of("police").into_iter().filter(|i| i.dir == "forward") {
        let mut m = mech(
            "policer",
            start,
            end,
            json!({"rate_mbit": i.detail["rate_mbit"], "burst_bytes": i.detail["burst_bytes"],
            "policed_packets": policed, "queueing_at_loss_ms": queueing_ms(wires), "rtt_ms": rtt * 1e3}),
        );
        m.unconfirmed = policed == 0;
        out.push(m);
    }
    let drops = tbf_drops(t);
    for i in t.injections_of("shape").into_iter().filter(|i| i.dir == "forward") {
        let rate = i.detail["rate_mbit"].as_f64().unwrap_or(1.0);
        let limit = i.detail["limit_bytes"].as_f64().unwrap_or(0.0);
        let mut m = mech(
            "queue_overflow",
            start,
            end,
            json!({"rate_mbit": rate, "limit_bytes": limit,
            "queue_delay_ms": limit * 8.0 / (rate * 1e6) * 1e3, "tbf_drops": drops,
            "queueing_at_loss_ms": queueing_ms(wires), "rtt_ms": rtt * 1e3}),
        );
        m.unconfirmed = drops == 0;
        out.push(m);
    }
    out.extend(lossy(t, wires, start, end));
    out.extend(buffers(t, wires, start, end, bdp));
    let expected: Vec<&str> = t.expected.iter().filter(|e| e.kind == "mechanism").map(|e| e.cause.as_str()).collect();
    // Background the wire does not show is not there: naming it is wrong.
    out.retain(|m| expected.contains(&m.mechanism.as_str()) || !m.unconfirmed);
    for m in out.iter_mut() {
        m.required = !m.unconfirmed && expected.contains(&m.mechanism.as_str());
    }
    out
}

/// A lossy lane (one connection), a lossy sender link (one host's connections), random loss on
/// the whole forward path (every connection: background).
fn lossy(t: &Truth, wires: &[Wire], start: f64, end: f64) -> Vec<MechTruth> {
    let ratio = |w: &Wire| w.retransmitted as f64 / w.sent.max(1) as f64;
    let mut out = Vec::new();
    for i in t.injections_of("loss-lane") {
        let port = i.detail["port"].as_u64().unwrap_or(0) as u16;
        let on = |w: &&Wire| [w.local, w.remote].iter().flatten().any(|a| a.port() == port);
        let lane: Vec<f64> = data(wires).filter(on).map(ratio).collect();
        let others = data(wires).filter(|w| !on(w) && w.sent >= 100).map(ratio).fold(0.0, f64::max);
        let dropped = counter(t, "loss-lane");
        let mut m = mech(
            "lossy_member",
            start,
            end,
            json!({"port": port, "loss_fraction": i.detail["fraction"],
            "dropped": dropped, "retransmitted_fraction": lane.first(), "others_retransmitted_fraction_max": others}),
        );
        m.ports = vec![port];
        // The lane dropped and its stream repaired it (half its loss rate retransmitted at least);
        // the others' share is evidence, not a condition: bbr on a shallow queue loses as much
        // there (parallel-3-lossy-lane: 8 % on the shared queue against 11 % on the lane).
        let fraction = i.detail["fraction"].as_f64().unwrap_or(0.0);
        m.unconfirmed = dropped == 0 || lane.first().is_none_or(|&r| r < fraction / 2.0);
        out.push(m);
    }
    for i in t.injections_of("loss-sender") {
        let k = i.detail["sender"].as_u64().unwrap_or(0) as usize;
        let dropped = counter(t, &format!("loss-sender{k}"));
        let mut m = mech(
            "lossy_member",
            start,
            end,
            json!({"sender": k, "loss_fraction": i.detail["fraction"], "dropped": dropped}),
        );
        m.hosts = t.senders.get(k).map(|h| vec![h.ip(Family::V4), h.ip(Family::V6)]).unwrap_or_default();
        m.unconfirmed = dropped == 0;
        out.push(m);
    }
    for i in t.injections_of("loss").into_iter().filter(|i| i.dir == "forward") {
        let dropped = counter(t, "loss-forward");
        let mut m = mech(
            "lossy_member",
            start,
            end,
            json!({"loss_fraction": i.detail["fraction"], "path": "all", "dropped": dropped}),
        );
        m.unconfirmed = dropped == 0;
        out.push(m);
    }
    out
}

/// Buffers that hold the transfer below the path: set by the application (SO_RCVBUF/SO_SNDBUF)
/// or capped by the sysctl maximum. Confirmed on the receiver's side when the largest window the
/// capture saw stayed within the buffer and below the path's BDP; on the sender's when the median
/// flight stayed within 4 buffers and below 0.8 BDP with the receiver's window open 1.5 times as
/// far (the send buffer is no hard cap on the flight: under SACK recovery the kernel queued 4.3
/// times a 128 KiB SO_SNDBUF, and sndbuf-app's median flight was 264 kB).
fn buffers(t: &Truth, wires: &[Wire], start: f64, end: f64, bdp: Option<f64>) -> Vec<MechTruth> {
    let main = data(wires).max_by_key(|w| w.acked);
    let (rwnd, flight) = main.map(|w| (w.max_rwnd, w.median_flight())).unwrap_or((0, 0));
    let below = |seen: u64, share: f64| bdp.is_none_or(|b| (seen as f64) < share * b);
    let limits = |side: &str, seen: u64, cap: u64| match side {
        "receiver" => seen > 0 && seen <= cap + 65_536 && below(seen, 1.0 / 1.2),
        _ => seen > 0 && seen <= 4 * cap && below(seen, 0.8) && 2 * rwnd >= 3 * seen,
    };
    let (rcv_app, snd_app) = match &t.traffic_spec {
        Traffic::App(a) => (a.rcvbuf.map(u64::from), a.sndbuf.map(u64::from)),
        Traffic::Plain(p) => (p.rcvbuf.map(u64::from), None),
        Traffic::Iperf { .. } => (None, None),
    };
    let rmem = sysctl_max(t, "receivers", "net.ipv4.tcp_rmem");
    let wmem = sysctl_max(t, "senders", "net.ipv4.tcp_wmem");
    let mut out = Vec::new();
    // The kernel doubles a setsockopt's value; a sysctl maximum is the buffer itself.
    for (name, side, bytes, cap, seen) in [
        ("application", "receiver", rcv_app, rcv_app.map(|b| 2 * b), rwnd),
        ("application", "sender", snd_app, snd_app.map(|b| 2 * b), flight),
        ("sysctl", "receiver", rmem.filter(|_| rcv_app.is_none()), rmem, rwnd),
        ("sysctl", "sender", wmem.filter(|_| snd_app.is_none()), wmem, flight),
    ] {
        let (Some(b), Some(cap)) = (bytes, cap) else { continue };
        // A ceiling far above what the path needs holds nothing back: no mechanism.
        if name == "sysctl" && bdp.is_some_and(|d| b as f64 > 2.0 * d) {
            continue;
        }
        let seen_as = if side == "receiver" { "largest_window" } else { "median_flight" };
        let mut m = mech(name, start, end, json!({"side": side, "bytes": b, seen_as: seen, "bdp": bdp}));
        m.side = Some(side.into());
        m.unconfirmed = !limits(side, seen, cap);
        out.push(m);
    }
    out
}
