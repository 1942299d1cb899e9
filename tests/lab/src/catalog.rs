//! The named scenarios, each scaled to run in 5-30 s on a 2-core machine, with the diagnosis the agent should make.
use crate::apps::{App, AppSpec};
use crate::bpf::RetxDrop;
use crate::catalog_mech::mechanism;
use crate::error::{LabError, Result};
use crate::lab::LabConfig;
use crate::path::{Dir, LossySender, PathConfig, Police, Shape};
use crate::plain::{Pause, PlainSpec};
use crate::scenario::{Event, Scenario};
use crate::topo::TopoConfig;
use crate::traffic::{IperfFlow, Traffic};
use crate::truth::Expected;

/// Every scenario name, in `lab list` order.
pub const NAMES: &[&str] = &[
    "clean",
    "policer-burst",
    "parallel-4",
    "parallel-4-staggered",
    "parallel-4-lossy",
    "lfn-buffer",
    "tail-loss-rto",
    "no-sack",
    "outage",
    "lost-retransmit",
    "zero-window",
    "receiver-stall",
    "receiver-stall-3s",
    "http-download",
    "path-outage",
    // The mechanisms (catalog_mech.rs).
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

pub(crate) fn kv(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

pub(crate) fn shaped(rtt_ms: f64, rate_mbit: f64, limit_bytes: Option<u64>) -> PathConfig {
    let mut p = PathConfig::with_rtt(rtt_ms);
    p.forward.shape = Some(Shape { rate_mbit, burst_bytes: None, limit_bytes });
    p
}

pub(crate) fn lab(senders: usize, path: PathConfig) -> LabConfig {
    LabConfig { topo: TopoConfig { senders, ..TopoConfig::default() }, path, trim_delay: true, ..LabConfig::default() }
}

/// iperf3 runs CUBIC (`-C`), the loss-based CC the papers measured, whatever the host default (often bbr,
/// which a namespace may not even be allowed to set); `--cc` overrides it.
pub(crate) const PAPERS_CC: &str = "cubic";

fn one_flow(duration_s: f64) -> Traffic {
    Traffic::Iperf {
        flows: vec![IperfFlow {
            sender: 0,
            receiver: 0,
            streams: 1,
            start_offset_ms: 0.0,
            rate_mbit: None,
            client_port: None,
        }],
        duration_s,
        bytes: None,
        cc: Some(PAPERS_CC.into()),
    }
}

pub(crate) fn base(
    name: &str,
    summary: &str,
    paper: Option<&str>,
    doc: &str,
    lab: LabConfig,
    traffic: Traffic,
) -> Scenario {
    Scenario {
        name: name.into(),
        summary: summary.into(),
        paper: paper.map(str::to_string),
        doc: doc.into(),
        lab,
        traffic,
        events: Vec::new(),
        expected: Vec::new(),
    }
}

/// Big socket buffers on both ends, so windows are limited by the path, not the hosts.
pub(crate) fn big_buffers(l: &mut LabConfig, max: u64) {
    l.sender_sysctls.push(kv("net.ipv4.tcp_wmem", &format!("4096 16384 {max}")));
    l.sender_sysctls.push(kv("net.core.wmem_max", &max.to_string()));
    l.receiver_sysctls.push(kv("net.ipv4.tcp_rmem", &format!("4096 131072 {max}")));
    l.receiver_sysctls.push(kv("net.core.rmem_max", &max.to_string()));
}

fn parallel(staggered: bool) -> Scenario {
    let rtt = 100.0;
    // 100 Mbit/s x 100 ms = 1.25 MB BDP; a switch-like buffer of 1/4 BDP.
    let mut l = lab(4, shaped(rtt, 100.0, Some(312_500)));
    big_buffers(&mut l, 16 << 20);
    let flows = (0..4)
        .map(|i| IperfFlow {
            sender: i,
            receiver: 0,
            streams: 1,
            start_offset_ms: if staggered { i as f64 * rtt / 4.0 } else { 0.0 },
            rate_mbit: None,
            client_port: None,
        })
        .collect();
    let (name, summary, exp) = if staggered {
        ("parallel-4-staggered", "four streams started RTT/4 apart share a drop-tail bottleneck evenly",
         Expected::new("none", "fair-share", None, None, "The parallel-streams study's remedy: streams started RTT/n apart hold similar shares; no persistent imbalance should be flagged"))
    } else {
        ("parallel-4", "four streams started together through one drop-tail bottleneck; one falls behind and stays behind",
         Expected::new("unfair", "send-order", Some(5.0), None, "The parallel-streams study: an imbalance that persists; the stream that sends last in the RTT loses first. Measured here (6.18, cubic and reno, 100 and 200 ms RTT, 1/8 and 1/4 BDP queue) the Jain index over the run was 0.93-1.00: the persistent send-order imbalance of the parallel-streams study does not reproduce in this lab, whose senders have no access-link serialization. Agent tests judge against truth.summary.stream_goodput_mbit / jain_index; parallel-4-lossy is the reliably unfair case"))
    };
    let mut s = base(name, summary, Some("the parallel-streams study"),
        "Paper: 4 x 1 stream, 1 GbE, 300 ms RTT, BIC, 100 s. Here: 4 sender namespaces -> one receiver, tbf 100 Mbit/s with a 312 kB (1/4 BDP) drop-tail queue, 100 ms RTT, cubic, 15 s. Offsets are RTT/4 = 25 ms in the staggered variant.",
        l, Traffic::Iperf { flows, duration_s: 15.0, bytes: None, cc: Some(PAPERS_CC.into()) });
    s.expected.push(exp);
    s
}

/// Builds scenario `name` with its defaults.
pub fn by_name(name: &str) -> Result<Scenario> {
    let s = match name {
        "clean" => {
            let mut s = base("clean", "a healthy 6 s transfer through a 200 Mbit/s, 20 ms path with a BDP-sized queue", None,
                "Nothing is wrong: tbf 200 Mbit/s with a 500 kB queue (one BDP), 20 ms RTT, cubic. Occasional congestion losses at the shaper are normal.",
                lab(1, shaped(20.0, 200.0, Some(500_000))), one_flow(6.0));
            s.expected.push(Expected::new(
                "none",
                "healthy",
                None,
                None,
                "nothing must be flagged: no stop, no limit, no missing option",
            ));
            s
        }
        "policer-burst" => {
            let mut p = PathConfig::with_rtt(10.0);
            p.forward.police = Some(Police { rate_mbit: 500.0, burst_bytes: 16 * 1024 * 1024 });
            let mut l = lab(1, p);
            big_buffers(&mut l, 64 << 20);
            let mut s = base("policer-burst", "one stream through a 500 Mbit/s policer with a 16 MB bucket at 10 ms RTT: a burst loss of half the window",
                Some("the communication-stops study"),
                "Paper: 1 GB, one stream, 10 ms RTT, policer 500 Mbps with 16 MB burst. Here the same rate, bucket and RTT, but 300 MB by default (--bytes 1000000000 for the paper's 1 GB) and a 30 s cap. With the big bucket cwnd grows far past the 625 kB BDP before the bucket runs dry and a large part of the window is dropped at once. summary.efficiency = goodput / 500 Mbit/s.",
                l, Traffic::Iperf { flows: vec![IperfFlow { sender: 0, receiver: 0, streams: 1, start_offset_ms: 0.0, rate_mbit: None, client_port: None }], duration_s: 30.0, bytes: Some(300_000_000), cc: Some(PAPERS_CC.into()) });
            s.expected.push(Expected::new("burst-loss", "policer", Some(0.3), None,
                "The communication-stops study: once the bucket runs dry (~0.3-1 s in) many segments of one window are dropped at once and retransmissions are policed again (TcpExtTCPLostRetransmit in the thousands); efficiency is reported against the policed rate. On 6.x kernels recovery measured here ends without a multi-second stop or RTO: flag a stop only if the truth shows one (RTOs, bytes_acked flat for many RTTs in ss_samples)"));
            s.expected.push(mechanism(
                "policer",
                Some(0.3),
                "500 Mbit/s, 16 MiB bucket: the loss episode comes at the path's RTT, without queueing delay",
            ));
            s
        }
        "parallel-4" => parallel(false),
        "parallel-4-staggered" => parallel(true),
        "parallel-4-lossy" => {
            let mut s = parallel(false);
            s.name = "parallel-4-lossy".into();
            s.summary = "four streams of one transfer, one of them over a link that drops 0.2 %: that stream falls far behind and bounds the transfer".into();
            s.doc = "Not from a paper's figure but the case the parallel-streams study analyses is for: the streams of one transfer settle at very different rates. Here the cause is a flaky path member (a LAG or ECMP link with errors) under sender 3 only: 0.2 % random loss on its link into the router; otherwise as parallel-4 (tbf 100 Mbit/s, 1/4 BDP drop-tail, 100 ms RTT, cubic, 15 s). By the Mathis model that stream holds ~3-6 Mbit/s while the others share the rest.".into();
            s.lab.path.lossy_sender = Some(LossySender { sender: 3, loss_ppm: 2000 });
            s.expected = vec![Expected::new("unfair", "loss-on-one-path", Some(3.0), None,
                "the group is unfair from the first seconds on; the slowest stream is sender 3's, and it retransmits many times more than the others: its path loses packets (check that link, NIC, or ECMP member), staggering starts would not help"),
                mechanism("lossy_member", None, "losses hit sender 3's stream alone, without RTT growth")];
            s
        }
        "lfn-buffer" => {
            let mut l = lab(1, shaped(100.0, 200.0, None));
            l.receiver_sysctls.push(kv("net.ipv4.tcp_rmem", "4096 65536 262144"));
            l.receiver_sysctls.push(kv("net.core.rmem_max", "262144"));
            let mut s = base("lfn-buffer", "BDP 2.5 MB (200 Mbit/s x 100 ms) against a receiver tcp_rmem max of 256 kB: receive-window limited",
                Some("the emulated-network study"),
                "Paper: 10 GbE at 400 ms needs socket buffers >= 2.5x BDP. Here: tbf 200 Mbit/s, 100 ms RTT (BDP 2.5 MB), receiver tcp_rmem max 256 kB, 8 s. Goodput stays near rwnd/RTT (~10-20 Mbit/s), far below the link.",
                l, one_flow(8.0));
            s.expected.push(Expected::new("limit", "receive-window", Some(0.0), Some(8.0),
                "The emulated-network study: limited by the receiver's window, not the network; advice: raise net.ipv4.tcp_rmem max (and core.rmem_max) on the receiver to >= 2.5 x BDP (~6 MB)"));
            s.expected.push(mechanism(
                "sysctl",
                Some(0.0),
                "the receiver's net.ipv4.tcp_rmem maximum, not the application",
            ));
            s
        }
        "tail-loss-rto" => {
            let mut s = base("tail-loss-rto", "a 300 ms forward blackhole mid-transfer drops a whole window and its probes: recovery cannot repair it, an RTO fires",
                Some("the retransmission-timeout study"),
                "Paper: a window far larger than the path allows loses a burst of consecutive segments, fast recovery runs out of duplicate ACKs, the sender idles until the RTO. Here the burst loss is made deterministic: at 3 s every data packet is dropped for 300 ms (ACKs still flow), 40 ms RTT, tbf 100 Mbit/s, 8 s. The whole flight and the tail-loss probe are lost, so only the RTO (min 200 ms + RTT) recovers.",
                lab(1, shaped(40.0, 100.0, None)), one_flow(8.0));
            s.events.push(Event::Outage { at_s: 3.0, for_s: 0.3, dir: Some(Dir::Forward), receiver: None });
            s.expected.push(Expected::new("stop", "rto", Some(3.0), Some(0.5),
                "The retransmission-timeout study: delivery stops at ~3 s until the retransmission timer fires (TcpExtTCPTimeouts >= 1); cause: recovery ran out, RTO"));
            s
        }
        "no-sack" => {
            let mut p = shaped(20.0, 200.0, Some(500_000));
            p.forward.loss_ppm = 500;
            let mut l = lab(1, p);
            l.sender_sysctls.push(kv("net.ipv4.tcp_sack", "0"));
            let mut s = base("no-sack", "SACK off on the sender, 0.05 % random loss: multiple losses per window are repaired one per RTT",
                Some("the SACK-over-ATM study"),
                "Paper: 155 Mbps ATM, SACK gave +30 % at 1e-5 and +100 % at 1e-4 cell loss. Here: net.ipv4.tcp_sack=0 on the sender (so SACK is not negotiated), 0.05 % random forward loss, tbf 200 Mbit/s, 20 ms RTT, 8 s.",
                l, one_flow(8.0));
            s.expected.push(Expected::new("missing-option", "no-sack", Some(0.0), None,
                "The SACK-over-ATM study: a bulk connection without SACK must be flagged (options show no sack); throughput below a SACK run of the same knobs"));
            s
        }
        "outage" => {
            let mut s = base("outage", "a 2.5 s blackhole (both directions) from 3 s: the connection stops, backs off, resumes", None,
                "Every forwarded packet is dropped from 3.0 s to 5.5 s after traffic start (nft rule inserted/deleted on a timer; the injection records the exact CLOCK_MONOTONIC times). 20 ms RTT, tbf 200 Mbit/s, 10 s.",
                lab(1, shaped(20.0, 200.0, Some(500_000))), one_flow(10.0));
            s.events.push(Event::Outage { at_s: 3.0, for_s: 2.5, dir: None, receiver: None });
            s.expected.push(Expected::new("stop", "outage", Some(3.0), Some(2.5),
                "nothing delivered from ~3 s; RTOs with exponential backoff; the stop can outlast the outage by up to one backed-off RTO"));
            s
        }
        "lost-retransmit" => {
            let mut p = shaped(10.0, 200.0, Some(500_000));
            p.forward.loss_ppm = 2000;
            p.retx_drop = Some(RetxDrop { segments: 20, drops_per_segment: 1 });
            let mut s = base("lost-retransmit", "0.2 % random loss plus a tc-bpf program that drops the first retransmission of the first 20 retransmitted segments",
                Some("the communication-stops study"),
                "The communication-stops study's mechanism: a retransmission lost again is only found late. Random forward loss (nft, 0.2 %) makes originals go missing; bpf/retx_drop.bpf.c on the router's receiver-facing egress drops the first retransmission of each of the first 20 segments it sees retransmitted. truth.retx_drop has the program's own counters. 10 ms RTT (the study's), tbf 200 Mbit/s, 8 s. Loss caps the rate (about 1/(RTT sqrt(p))), so the number of lost originals grows only with sqrt(p)/RTT: 0.1 % at 20 ms lost about 20 in 8 s and sometimes fewer than the 20 targets; 0.2 % at 10 ms loses about three times as many.",
                lab(1, p), one_flow(8.0));
            s.expected.push(Expected::new("lost-retransmit", "retransmission-lost", None, None,
                "retransmissions lost again (TcpExtTCPLostRetransmit > 0, truth.retx_drop.dropped of them); late detection may show as a stop or an RTO"));
            s
        }
        "zero-window" => {
            let mut s = base("zero-window", "the receiver stops reading for 3 s from 2 s: its window closes to zero and the sender probes", None,
                "The lab's plain TCP pair: receiver SO_RCVBUF 256 kB, stops reading at 2 s for 3 s (truth.plain.pause_* are the real times); 20 ms RTT, tbf 100 Mbit/s, 8 s.",
                lab(1, shaped(20.0, 100.0, None)),
                Traffic::Plain(PlainSpec { sender: 0, receiver: 0, duration_s: 8.0, pause: Some(Pause { at_s: 2.0, for_s: 3.0 }), rcvbuf: Some(256 * 1024), port: 5301 }));
            s.expected.push(Expected::new("stop", "zero-window", Some(2.0), Some(3.0),
                "the receiver advertises a zero window (TcpExtTCPToZeroWindowAdv on the receiver), the sender sends window probes; the cause is the receiving application, not the network"));
            s
        }
        "receiver-stall" | "receiver-stall-3s" => {
            let long = name == "receiver-stall";
            let (pause, dur) = if long { (14.0, 19.0) } else { (3.0, 8.0) };
            let mut s = base(name, &format!("a python sender writes 1 MiB buffers as fast as it can; the receiving application sleeps {pause:.0} s from 2 s, then reads to the end"), None,
                "Reported case (issue 11): py/tcpflow.py, 10 ms RTT, tbf 200 Mbit/s, default buffers. The receive buffer fills, the window closes, nothing is in flight and the sender holds unsent data: the receiver's stall, never the network's (no timeout, no retransmission, nothing outstanding). truth.injections zero-window has the real pause.",
                lab(1, shaped(10.0, 200.0, None)),
                Traffic::App(AppSpec { app: App::Socket, sender: 0, receiver: 0, streams: 1, duration_s: dur, bytes: None,
                    recv_pause: Some(Pause { at_s: 2.0, for_s: pause }), rcvbuf: None, port: 5302, sndbuf: None, client_port: None }));
            s.expected.push(Expected::new(
                "stop",
                "zero-window",
                Some(2.0),
                Some(pause),
                "owner receiver (zero_window) in every report, never network",
            ));
            s
        }
        "http-download" => {
            let mut s = base("http-download", "curl downloads a 300 MB file from python's http.server over 20 ms, tbf 400 Mbit/s: no stop, its end included", None,
                "Reported case (issue 11), scaled from 1.5 GB to 300 MB (--bytes): python3 -m http.server in the sender namespace serves a sparse file, curl in the receiver namespace downloads it. The end of the transfer (last window draining, FIN, close) is no stop.",
                lab(1, shaped(20.0, 400.0, None)),
                Traffic::App(AppSpec { app: App::Http, sender: 0, receiver: 0, streams: 1, duration_s: 40.0, bytes: Some(300_000_000),
                    recv_pause: None, rcvbuf: None, port: 8080, sndbuf: None, client_port: None }));
            s.expected.push(Expected::new(
                "none",
                "healthy",
                None,
                None,
                "no stop at all, the end of the download included",
            ));
            s
        }
        "path-outage" => {
            // Three sender hosts; r0 (10.72.1.0/24) gets three connections, r1 (10.72.2.0/24) two.
            let mut l = lab(3, shaped(20.0, 100.0, Some(250_000)));
            l.topo.receivers = 2;
            let flows = [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1)]
                .into_iter()
                .map(|(sender, receiver)| IperfFlow {
                    sender,
                    receiver,
                    streams: 1,
                    start_offset_ms: 0.0,
                    rate_mbit: None,
                    client_port: None,
                })
                .collect();
            let mut s = base("path-outage", "three hosts send to two destination prefixes; the path to one prefix fails for 3 s from 4 s: one path event, the other prefix untouched", None,
                "Five iperf3 clients from three sender namespaces (standing for hosts): s0, s1, s2 to r0 (10.72.1.2) and s0, s1 to r1 (10.72.2.2); tbf 100 Mbit/s per receiver link, 20 ms RTT, 10 s. From 4 s to 7 s the router drops every packet to and from r0 only (two nft rules matching its address). The three connections to 10.72.1.0/24 stop within an RTT of each other; the two to 10.72.2.0/24 keep delivering.",
                l, Traffic::Iperf { flows, duration_s: 10.0, bytes: None, cc: Some(PAPERS_CC.into()) });
            s.events.push(Event::Outage { at_s: 4.0, for_s: 3.0, dir: None, receiver: Some(0) });
            s.expected.push(Expected::new("path", "outage", Some(4.0), Some(3.0),
                "one path event naming 10.72.1.0/24 with all three of its connections (scope all) and none to 10.72.2.0/24; each member's stop is a network stop marked with the event"));
            s
        }
        other => match crate::catalog_mech::by_name(other)? {
            Some(s) => s,
            None => return Err(LabError::Invalid(format!("unknown scenario `{other}`; known: {}", NAMES.join(", ")))),
        },
    };
    Ok(s)
}

/// Every scenario with its defaults.
pub fn all() -> Vec<Scenario> {
    NAMES.iter().filter_map(|n| by_name(n).ok()).collect()
}
