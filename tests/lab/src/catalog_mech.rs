//! The named scenarios of each loss and limit mechanism (path MTU black holes, policer, shallow and deep queues, a lossy lane, locked buffers), each naming its mechanism in `expected`.
use crate::apps::{App, AppSpec};
use crate::catalog::{base, big_buffers, kv, lab, shaped, PAPERS_CC};
use crate::error::Result;
use crate::path::{LossyLane, MtuDrop, PathConfig, Police};
use crate::scenario::{Event, Scenario};
use crate::traffic::{IperfFlow, Traffic};
use crate::truth::Expected;

/// The `expected` entry that names a run's mechanism: what the agent should name (`cause`, one of
/// `mtu_blackhole`, `policer`, `queue_overflow`, `lossy_member`, `application`, `sysctl`).
pub fn mechanism(name: &str, start_s: Option<f64>, note: &str) -> Expected {
    Expected::new("mechanism", name, start_s, None, note)
}

/// The MTU the router's next link drops to in these scenarios (IPv4: below IPv6's minimum, as the
/// issue measured; a `--family v6` run takes 1280).
pub const DROP_MTU: u32 = 1200;

fn iperf(streams: u32, duration_s: f64, client_port: Option<u16>) -> Traffic {
    Traffic::Iperf {
        flows: vec![IperfFlow { sender: 0, receiver: 0, streams, start_offset_ms: 0.0, rate_mbit: None, client_port }],
        duration_s,
        bytes: None,
        cc: Some(PAPERS_CC.into()),
    }
}

fn socket(duration_s: f64, rcvbuf: Option<u32>, sndbuf: Option<u32>) -> Traffic {
    Traffic::App(AppSpec {
        app: App::Socket,
        sender: 0,
        receiver: 0,
        streams: 1,
        duration_s,
        bytes: None,
        recv_pause: None,
        rcvbuf,
        port: 5303,
        sndbuf,
        client_port: None,
    })
}

/// 40 ms, 100 Mbit/s (BDP 500 kB): the path of the MTU, policer and queue scenarios, so they
/// differ in one thing.
fn path40(limit_bytes: Option<u64>) -> PathConfig {
    shaped(40.0, 100.0, limit_bytes)
}

/// One scenario of this catalog, or None for another name.
pub fn by_name(name: &str) -> Result<Option<Scenario>> {
    let mtu_note = "full-size segments are retransmitted and never acknowledged while small packets (the handshake, ACKs, iperf3's control connection) pass; the router counts IpFragFails (Ip6FragFails) and the filter the ICMP it dropped; the sender's tcp_mtu_probing is 0, so nothing shrinks the segments";
    let s = match name {
        "mtu-blackhole" | "mtu-pmtud" => {
            let black = name == "mtu-blackhole";
            let mut l = lab(1, path40(Some(500_000)));
            l.cc = Some(PAPERS_CC.into());
            l.sender_sysctls.push(kv("net.ipv4.tcp_mtu_probing", "0"));
            let (summary, doc) = if black {
                ("the router's next link drops to a 1200-byte MTU at 3 s and its ICMP \"fragmentation needed\" is filtered: full-size segments vanish, the transfer stops for good",
                 "A path MTU black hole mid-transfer (a tunnel or a misconfigured link on the way, ICMP filtered by a firewall): at 3 s the router's links towards the receivers go to MTU 1200 (1280 over IPv6) and the router's ICMP frag-needed / packet-too-big are dropped in its output hook. 40 ms, tbf 100 Mbit/s, 500 kB queue, cubic, 12 s. The sender backs off forever; only MTU probing (tcp_mtu_probing, off here) or the ICMP would get it going.")
            } else {
                ("the same MTU drop at 3 s with the router's ICMP passing: path MTU discovery shrinks the segments and the transfer goes on",
                 "The control of mtu-blackhole: at 3 s the router's next link goes to MTU 1200 (1280 over IPv6) but its ICMP frag-needed / packet-too-big reaches the sender, which lowers its path MTU and resends in smaller segments within about an RTT. No black hole: naming one here is wrong. 40 ms, tbf 100 Mbit/s, cubic, 10 s.")
            };
            let mut s = base(name, summary, None, doc, l, iperf(1, if black { 12.0 } else { 10.0 }, None));
            s.events.push(Event::MtuDrop { at_s: 3.0, for_s: None, mtu: DROP_MTU, filter_icmp: black });
            if black {
                s.expected.push(Expected::new(
                    "stop",
                    "network",
                    Some(3.0),
                    None,
                    "nothing delivered from ~3 s to the end: a network stop (rto, then path_silent)",
                ));
                s.expected.push(mechanism("mtu_blackhole", Some(3.0), mtu_note));
            } else {
                s.expected.push(Expected::new(
                    "none",
                    "healthy",
                    None,
                    None,
                    "a few retransmissions at 3 s, then delivery in smaller segments: no stop, no black hole",
                ));
            }
            s
        }
        "mtu-blackhole-start" => {
            let mut p = path40(Some(500_000));
            p.next_mtu = Some(MtuDrop { mtu: DROP_MTU, filter_icmp: true });
            let mut l = lab(1, p);
            l.cc = Some(PAPERS_CC.into());
            l.sender_sysctls.push(kv("net.ipv4.tcp_mtu_probing", "0"));
            let mut s = base(name, "a path MTU black hole from the first segment: the handshake and iperf3's control connection work, the data connection never delivers a byte",
                None,
                "The tunnel's classic: the router's links towards the receivers have MTU 1200 (1280 over IPv6) from before the transfer and the router's ICMP about it is dropped. SYNs, ACKs and iperf3's small control messages pass; the data connection sends its initial window of full-size segments, backs off and retransmits them, and nothing is ever acknowledged. 40 ms, tbf 100 Mbit/s, cubic, 8 s. A connection that never becomes bulk is never judged by a stop detector that waits for bulk delivery: this one is the stop an operator is paged about.",
                l, iperf(1, 8.0, None));
            s.expected.push(Expected::new(
                "stop",
                "network",
                Some(0.0),
                None,
                "data waiting and nothing delivered from the first data segment to the end",
            ));
            s.expected.push(mechanism("mtu_blackhole", Some(0.0), mtu_note));
            s
        }
        "policer" => {
            let mut p = PathConfig::with_rtt(40.0);
            p.forward.police = Some(Police { rate_mbit: 100.0, burst_bytes: 64 * 1024 });
            let mut l = lab(1, p);
            big_buffers(&mut l, 16 << 20);
            l.cc = Some(PAPERS_CC.into());
            let mut s = base(name, "a 100 Mbit/s token-bucket policer with a 64 kB bucket at 40 ms: bursts are dropped with the RTT flat",
                None,
                "A carrier's policer (a contract rate, a small bucket), no queue in front of it: 40 ms, policer 100 Mbit/s, bucket 64 kB (truth.injections police: rate and burst), cubic, 10 s. Losses come in bursts whenever the sender's window outruns the bucket, with no queueing delay before them (the RTT at each loss episode is the path's own). Compare queue-shallow and queue-deep: the same rate, a queue instead.",
                l, iperf(1, 10.0, None));
            s.expected.push(Expected::new(
                "burst-loss",
                "policer",
                None,
                None,
                "loss episodes at a flat RTT; the policed rate ~100 Mbit/s, bucket ~64 kB",
            ));
            s.expected.push(mechanism("policer", None, "drops on arrival when the bucket is empty (truth.delay_stats policed_*); the RTT before each loss episode is the path's"));
            s
        }
        "queue-shallow" | "queue-deep" => {
            let deep = name == "queue-deep";
            // 100 Mbit/s x 40 ms = 500 kB; shallow: 1/10 BDP (4 ms of queue), deep: 4 BDP (160 ms).
            let q: u64 = if deep { 2_000_000 } else { 50_000 };
            let mut l = lab(1, path40(Some(q)));
            big_buffers(&mut l, 16 << 20);
            // Reno for the deep queue: cubic's HyStart leaves slow start at the queue's first few
            // ms of delay, and cubic then takes tens of seconds to grow 4 BDP more (a CI run: no
            // drop at all in 6 s). Reno's slow start runs until the queue overflows.
            l.cc = Some(if deep { "reno" } else { PAPERS_CC }.into());
            let (summary, doc) = if deep {
                ("a 100 Mbit/s bottleneck with a 2 MB (4 BDP) drop-tail queue at 40 ms: losses come after the RTT grew by up to 160 ms",
                 "Bufferbloat: tbf 100 Mbit/s with a 2 MB queue (160 ms at the rate) at 40 ms RTT, reno (its slow start fills the queue; cubic's HyStart stops short of it), 10 s. The queue fills before it drops, so every loss episode follows an RTT inflated by queue/rate. truth.injections shape has rate and limit.")
            } else {
                ("a 100 Mbit/s bottleneck with a 50 kB (1/10 BDP) drop-tail queue at 40 ms: frequent losses, little queueing delay",
                 "A switch-like shallow buffer: tbf 100 Mbit/s with a 50 kB queue (4 ms at the rate) at 40 ms RTT, cubic, 10 s. Losses come often with the RTT grown by at most 4 ms: close to a policer's signature, told apart by that small, steady growth and the rate being held by a queue (no line-rate bursts get through).")
            };
            let mut s = base(name, summary, None, doc, l, iperf(1, 10.0, None));
            s.expected.push(mechanism("queue_overflow", None, &format!("tbf drops (truth.qdisc_stats); queue {q} bytes at 100 Mbit/s: up to {:.0} ms of queueing before a loss", q as f64 * 8.0 / 100e6 * 1e3)));
            s
        }
        "parallel-3-lossy-lane" => {
            // 100 Mbit/s x 100 ms = 1.25 MB BDP, a 1/4 BDP queue as parallel-4.
            let mut p = shaped(100.0, 100.0, Some(312_500));
            p.lossy_lane = Some(LossyLane { port: 40002, loss_ppm: 50_000 });
            let mut l = lab(1, p);
            big_buffers(&mut l, 16 << 20);
            l.cc = Some("bbr".into());
            let mut traffic = iperf(3, 15.0, Some(40000));
            if let Traffic::Iperf { cc, .. } = &mut traffic {
                *cc = Some("bbr".into());
            }
            let mut s = base(name, "three streams of one transfer (iperf3 -P 3, bbr), one of them hashed onto a lane that loses 5 %: that stream goes on in Recovery most of the time while the others share the link",
                None,
                "The case a stop detector once lost a slow stream's progress on (a 0.4 s stall reported as a 7.5 s network stop with nothing delivered, over 28 MB acknowledged): 100 ms, tbf 100 Mbit/s with a 312 kB (1/4 BDP) queue, iperf3 -P 3 --cport 40000 (streams leave from 40000, 40001, 40002), bbr (the host default, which does not back off on random loss), 15 s; the router drops 5 % of the packets of the stream from port 40002 only (truth.injections loss-lane). That stream holds 20-30 Mbit/s against 30-35 for each other, in Recovery most of the time with short stalls where a hole waits for its retransmission; delivery goes on throughout. Under --cc cubic it crawls below 1 Mbit/s (Mathis: 0.6 Mbit/s at 100 ms and 5 %) and never becomes bulk.",
                l, traffic);
            s.expected.push(Expected::new("unfair", "loss-on-one-path", Some(3.0), None, "the stream from port 40002 is the slowest and retransmits many times more than the others; no stop unless the capture shows one"));
            s.expected.push(mechanism(
                "lossy_member",
                None,
                "losses hit the stream from port 40002 alone, uncorrelated with the others' and without RTT growth",
            ));
            s
        }
        "rcvbuf-app" | "sndbuf-app" => {
            let recv = name == "rcvbuf-app";
            let mut s = base(name,
                if recv { "the receiving application sets SO_RCVBUF to 64 KiB on a 40 ms, 200 Mbit/s path: receive-window limited, whatever tcp_rmem allows" }
                else { "the sending application sets SO_SNDBUF to 64 KiB on a 40 ms, 200 Mbit/s path: send-buffer limited, whatever tcp_wmem allows" },
                None,
                &format!("py/tcpflow.py with --{} 65536: the setsockopt locks the buffer (SOCK_{}BUF_LOCK, no autotuning; the kernel doubles the value to 128 KiB), so raising the net.ipv4.tcp_{}mem maximum changes nothing. 40 ms, tbf 200 Mbit/s (BDP 1 MB), the namespaces' default buffer sysctls, 8 s. Compare {}: the same limit from the sysctl ceiling.",
                    if recv { "rcvbuf" } else { "sndbuf" }, if recv { "RCV" } else { "SND" }, if recv { "r" } else { "w" },
                    if recv { "lfn-buffer" } else { "sndbuf-sysctl" }),
                lab(1, shaped(40.0, 200.0, None)),
                socket(8.0, recv.then_some(65536), (!recv).then_some(65536)));
            s.lab.cc = Some(PAPERS_CC.into());
            s.expected.push(Expected::new(
                "limit",
                if recv { "receive-window" } else { "send-buffer" },
                Some(0.0),
                Some(8.0),
                "held at about the buffer per RTT (~13-26 Mbit/s), far below the link",
            ));
            s.expected.push(mechanism(
                "application",
                Some(0.0),
                if recv {
                    "the receiver's SO_RCVBUF (the application's setsockopt), not tcp_rmem"
                } else {
                    "the sender's SO_SNDBUF (the application's setsockopt), not tcp_wmem"
                },
            ));
            s
        }
        "sndbuf-sysctl" => {
            // A queue of one BDP: with the default 20 ms (500 kB) slow start's 1.2 MB overshoot
            // was dropped, and cubic's cwnd after that recovery was close enough to the buffer's
            // flight that the run went cwnd- and buffer-limited by turns (CI: loss_limited alone).
            let mut l = lab(1, shaped(100.0, 200.0, Some(2_500_000)));
            l.sender_sysctls.push(kv("net.ipv4.tcp_wmem", "4096 16384 262144"));
            l.sender_sysctls.push(kv("net.core.wmem_max", "262144"));
            l.cc = Some(PAPERS_CC.into());
            let mut s = base(name, "BDP 2.5 MB (200 Mbit/s x 100 ms) against a sender tcp_wmem max of 256 kB: send-buffer limited by the sysctl ceiling",
                None,
                "lfn-buffer's mirror on the sending side: tbf 200 Mbit/s with a queue of one BDP (2.5 MB: slow start's overshoot is not dropped, so the buffer alone holds the flow), 100 ms RTT, sender net.ipv4.tcp_wmem max 256 kB (autotuning stops there), iperf3, cubic, 8 s. The fix is the sysctl (>= 2 x BDP).",
                l, iperf(1, 8.0, None));
            s.expected.push(Expected::new(
                "limit",
                "send-buffer",
                Some(0.0),
                Some(8.0),
                "held at about 256 kB per RTT, far below the link",
            ));
            s.expected.push(mechanism("sysctl", Some(0.0), "the sender's net.ipv4.tcp_wmem maximum"));
            s
        }
        _ => return Ok(None),
    };
    Ok(Some(s))
}
