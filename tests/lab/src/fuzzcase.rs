//! `lab fuzz`'s extra draws, each from a stream of its own: the congestion control, a long RTT, and a loss or limit mechanism case (path MTU black hole, policer, shallow or deep queue, lossy lane, locked or capped buffer) with the scenario changes it makes.
use crate::apps::App;
use crate::catalog_mech::mechanism;
use crate::fuzzplan::{first_retry_after, http_bytes, run_seed, Client, Plan, Rng};
use crate::path::{LossyLane, MtuDrop, Police};
use crate::scenario::{Event, Scenario};
use crate::topo::Family;
use crate::traffic::Traffic;
use serde::{Deserialize, Serialize};

/// The congestion controls drawn (all built into the lab's kernel: `tcp_available_congestion_control`).
pub const CCS: [&str; 3] = ["cubic", "bbr", "reno"];

/// The first client port of a run with a lossy lane: stream k leaves from this + k.
pub const LANE_BASE_PORT: u16 = 40000;

/// A loss or limit mechanism injected into a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Case {
    /// The router's next link drops to `mtu` at `at` s for `len` s; its ICMP about it is dropped
    /// unless `icmp` (then path MTU discovery works: no black hole).
    MtuDrop { at: f64, len: f64, mtu: u32, icmp: bool },
    /// The next link is at `mtu` (ICMP dropped) from before the transfer until `len` s into it:
    /// handshakes pass, full-size data does not.
    MtuFromStart { len: f64, mtu: u32 },
    /// A token-bucket policer at the drawn rate with a `burst`-byte bucket instead of the shaper.
    Policer { burst: u64 },
    /// The shaper's queue at `bytes`: shallow (under 0.15 BDP) or deep (3-8 BDP).
    Queue { bytes: u64, deep: bool },
    /// Stream `stream` (from port 40000 + stream) on a lane with `loss_pct` % random loss.
    LossyLane { stream: u32, loss_pct: f64 },
    /// A buffer holding the transfer below the path, of the receiver or the sender, set by the
    /// application (SO_RCVBUF / SO_SNDBUF: the socket pair only) or the sysctl ceiling
    /// (tcp_rmem / tcp_wmem max).
    Buffer { receiver: bool, application: bool, bytes: u64 },
}

fn round(x: f64, step: f64) -> f64 {
    (x / step).round() * step
}

fn stream(seed: u64, run: u32, salt: u64) -> Rng {
    Rng::new(Rng::new(run_seed(seed, run) ^ salt).next_u64())
}

/// The run's congestion control, even odds.
pub fn draw_cc(seed: u64, run: u32) -> &'static str {
    CCS[stream(seed, run, 0x6363_6375_6269_6321).below(3) as usize]
}

/// One run in five gets a long RTT, 200-300 ms log-uniform (the drawn RTT goes to 200 ms).
pub fn draw_long_rtt(seed: u64, run: u32) -> Option<u32> {
    let mut r = stream(seed, run, 0x6c6f_6e67_7274_7421);
    r.chance(0.2).then(|| r.log_uniform(200.0, 300.0).round() as u32)
}

/// The run's mechanism case (none in about four runs of ten).
pub fn draw_case(p: &Plan, max_s: f64) -> Option<Case> {
    let mut r = stream(p.seed, p.run, 0x6d65_6368_616e_6973);
    let at = round(r.uniform(2.0, 4.0), 0.01);
    let room = (max_s - 5.0).max(0.5);
    let lo = if p.family == Family::V6 { 1280.0 } else { 1200.0 };
    let mtu = (r.uniform(lo, 1420.0) / 10.0).round() as u32 * 10;
    let bdp = f64::from(p.rate_mbit) * 1e6 / 8.0 * f64::from(p.rtt_ms) / 1e3;
    // Parallel streams get a lane often: it is their case (a quarter of runs have 2-4 streams).
    if p.streams >= 2 && r.chance(0.35) {
        let s = r.below(u64::from(p.streams)) as u32;
        return Some(Case::LossyLane { stream: s, loss_pct: round(r.log_uniform(0.5, 5.0), 0.01) });
    }
    let k = r.unit();
    if k < 0.4 {
        None
    } else if k < 0.54 {
        let len = round(r.log_uniform(1.0, 8.0).min(room / 2.0), 0.01);
        Some(Case::MtuDrop { at, len, mtu, icmp: r.chance(0.25) })
    } else if k < 0.62 {
        Some(Case::MtuFromStart { len: round(r.uniform(1.5, 4.0), 0.01), mtu })
    } else if k < 0.73 {
        Some(Case::Policer { burst: r.log_uniform(16e3, 4e6).round() as u64 })
    } else if k < 0.86 {
        let deep = r.chance(0.5);
        let f = if deep { r.uniform(3.0, 8.0) } else { r.uniform(0.03, 0.15) };
        Some(Case::Queue { bytes: (bdp * f).clamp(15_000.0, 30e6).round() as u64, deep })
    } else {
        let receiver = r.chance(0.5);
        let application = p.client == Client::Socket && r.chance(0.75);
        // Well below what the path needs, or it would not hold the transfer back; a send buffer
        // further below: the kernel queues up to 3-4 times it under SACK recovery (the median
        // flight of a 33 kB tcp_wmem maximum was 108 kB).
        let bytes = r.log_uniform(32e3, (bdp / 4.0).max(33e3)).round() as u64;
        let share = if receiver { 3.0 } else { 6.0 };
        ((bytes as f64) < bdp / share).then_some(Case::Buffer { receiver, application, bytes })
    }
}

/// Adds the extra draws to a base plan and fits its length (and a download's size) to them.
pub fn extend(p: &mut Plan, max_s: f64) {
    p.cc = Some(draw_cc(p.seed, p.run).to_string());
    if let Some(long) = draw_long_rtt(p.seed, p.run) {
        p.queue_bytes = (p.queue_bytes as f64 * f64::from(long) / f64::from(p.rtt_ms)).clamp(30_000.0, 20e6) as u64;
        p.drawn_rtt_ms = Some(p.rtt_ms);
        p.rtt_ms = long;
    }
    p.case = draw_case(p, max_s);
    let changes = |c: &Case| matches!(c, Case::MtuDrop { .. } | Case::MtuFromStart { .. }) || c.cap_bps(p).is_some();
    if p.drawn_rtt_ms.is_none() && !p.case.as_ref().is_some_and(changes) {
        return; // the length and the download's size stay as drawn
    }
    p.duration_s = p.length(max_s);
    if p.client == Client::Http {
        let cap = p.case.as_ref().and_then(|c| c.cap_bps(p)).unwrap_or(f64::MAX);
        p.bytes = Some(http_bytes(p.rtt_ms, p.rate_mbit, p.loss_pct, p.streams, cap));
    }
}

impl Case {
    /// One phrase for a run's line.
    pub fn describe(&self) -> String {
        match self {
            Case::MtuDrop { at, len, mtu, icmp } => {
                format!("mtu {mtu} {len:.2} s at {at:.2} ({})", if *icmp { "icmp passes" } else { "icmp filtered" })
            }
            Case::MtuFromStart { len, mtu } => format!("mtu {mtu} from the start for {len:.2} s (icmp filtered)"),
            Case::Policer { burst } => format!("policer, {} kB bucket", burst / 1000),
            Case::Queue { bytes, deep } => {
                format!("{} queue {} kB", if *deep { "deep" } else { "shallow" }, bytes / 1000)
            }
            Case::LossyLane { stream, loss_pct } => format!("lane of stream {stream} at {loss_pct:.2} % loss"),
            Case::Buffer { receiver, application, bytes } => format!(
                "{} {} {} kB",
                if *receiver { "receiver" } else { "sender" },
                match (receiver, application) {
                    (true, true) => "SO_RCVBUF",
                    (false, true) => "SO_SNDBUF",
                    (true, false) => "tcp_rmem max",
                    (false, false) => "tcp_wmem max",
                },
                bytes / 1000
            ),
        }
    }

    /// Until when (s after the start) the run must last for the case to end and be seen ending:
    /// an MTU black hole, like an outage, until the first backed-off retransmission after it.
    pub fn tail(&self, rto0: f64) -> Option<f64> {
        match *self {
            Case::MtuDrop { at, len, .. } => Some(at + len + first_retry_after(len, rto0)),
            Case::MtuFromStart { len, .. } => Some(len + first_retry_after(len, rto0)),
            _ => None,
        }
    }

    /// What the case holds a connection to, bits/s, where it holds it below the path (a download
    /// is sized for it): a buffer per RTT, a lossy lane by Mathis' bound.
    fn cap_bps(&self, p: &Plan) -> Option<f64> {
        let rtt = f64::from(p.rtt_ms) / 1e3;
        match *self {
            Case::Buffer { bytes, .. } => Some(bytes as f64 * 8.0 / rtt * f64::from(p.streams)),
            Case::LossyLane { loss_pct, .. } => {
                Some(1.22 * 1448.0 * 8.0 / (rtt * (loss_pct / 100.0).sqrt()) * f64::from(p.streams))
            }
            _ => None,
        }
    }

    /// Makes `sc` (the plan's scenario) carry the case, and names the mechanism it contains in
    /// `sc.expected` (nothing for an MTU drop whose ICMP passes: no black hole).
    pub fn apply(&self, p: &Plan, sc: &mut Scenario) {
        let kv = |k: &str, v: String| (k.to_string(), v);
        let path = &mut sc.lab.path;
        match *self {
            Case::MtuDrop { at, len, mtu, icmp } => {
                sc.lab.sender_sysctls.push(kv("net.ipv4.tcp_mtu_probing", "0".into()));
                sc.events.push(Event::MtuDrop { at_s: at, for_s: Some(len), mtu, filter_icmp: !icmp });
                if !icmp {
                    sc.expected.push(mechanism("mtu_blackhole", Some(at), "full-size segments dropped, ICMP filtered"));
                }
            }
            Case::MtuFromStart { len, mtu } => {
                sc.lab.sender_sysctls.push(kv("net.ipv4.tcp_mtu_probing", "0".into()));
                path.next_mtu = Some(MtuDrop { mtu, filter_icmp: true });
                sc.events.push(Event::MtuRestore { at_s: len });
                sc.expected.push(mechanism(
                    "mtu_blackhole",
                    Some(0.0),
                    "no full-size segment gets through until the MTU is lifted",
                ));
            }
            Case::Policer { burst } => {
                path.forward.shape = None;
                path.forward.police = Some(Police { rate_mbit: f64::from(p.rate_mbit), burst_bytes: burst });
                sc.expected.push(mechanism(
                    "policer",
                    None,
                    "drops on arrival when the bucket is empty, at a flat RTT",
                ));
            }
            Case::Queue { bytes, .. } => {
                if let Some(s) = path.forward.shape.as_mut() {
                    s.limit_bytes = Some(bytes);
                }
                sc.expected.push(mechanism("queue_overflow", None, "drops at a full drop-tail queue"));
            }
            Case::LossyLane { stream, loss_pct } => {
                let port = LANE_BASE_PORT + stream as u16;
                path.lossy_lane = Some(LossyLane { port, loss_ppm: (loss_pct * 10_000.0).round() as u32 });
                match &mut sc.traffic {
                    Traffic::Iperf { flows, .. } => flows.iter_mut().for_each(|f| f.client_port = Some(LANE_BASE_PORT)),
                    Traffic::App(a) => a.client_port = Some(LANE_BASE_PORT),
                    Traffic::Plain(_) => {}
                }
                sc.expected.push(mechanism("lossy_member", None, "losses on one stream alone"));
            }
            Case::Buffer { receiver, application, bytes } => {
                let b = bytes.to_string();
                match (&mut sc.traffic, application) {
                    (Traffic::App(a), true) if a.app == App::Socket => {
                        let v = u32::try_from(bytes).unwrap_or(u32::MAX);
                        if receiver {
                            a.rcvbuf = Some(v);
                        } else {
                            a.sndbuf = Some(v);
                        }
                    }
                    _ => {
                        let (list, mem, core) = if receiver {
                            (&mut sc.lab.receiver_sysctls, "net.ipv4.tcp_rmem", "net.core.rmem_max")
                        } else {
                            (&mut sc.lab.sender_sysctls, "net.ipv4.tcp_wmem", "net.core.wmem_max")
                        };
                        list.retain(|(k, _)| k != mem && k != core);
                        let default = (bytes / 2).min(if receiver { 131_072 } else { 16_384 });
                        list.push(kv(mem, format!("4096 {default} {b}")));
                        list.push(kv(core, b.clone()));
                    }
                }
                let what = if application { "application" } else { "sysctl" };
                sc.expected.push(mechanism(
                    what,
                    Some(0.0),
                    if receiver { "the receive buffer" } else { "the send buffer" },
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzzplan::{draw, draw_base};
    use crate::traffic::Traffic;

    #[test]
    fn cc_and_long_rtts_are_drawn_for_every_client_and_leave_the_rest_of_a_plan_as_it_was() {
        let plans: Vec<(Plan, Plan)> = (0..600).map(|k| (draw(11, k, 40.0), draw_base(11, k, 40.0))).collect();
        for cc in CCS {
            let n = plans.iter().filter(|(p, _)| p.cc.as_deref() == Some(cc)).count();
            assert!((150..=250).contains(&n), "{n} of 600 runs {cc}");
            for c in [Client::Iperf3, Client::Socket, Client::Http] {
                assert!(plans.iter().any(|(p, _)| p.client == c && p.cc.as_deref() == Some(cc)), "{c:?} never {cc}");
            }
        }
        let long = plans.iter().filter(|(p, _)| p.drawn_rtt_ms.is_some()).count();
        assert!((80..=160).contains(&long), "{long} of 600 runs with a long RTT");
        for (p, b) in &plans {
            let sc = p.scenario();
            assert_eq!(sc.lab.cc, p.cc);
            if let Traffic::Iperf { cc, .. } = &sc.traffic {
                assert_eq!(cc, &p.cc, "iperf3 -C");
            }
            assert!(sc.validate().is_ok(), "{}", p.describe());
            // Apart from the new fields, and the RTT, queue, length and download size a long RTT or
            // a case moves, every plan is the one the lab drew before.
            let mut q = p.clone();
            (q.cc, q.case, q.drawn_rtt_ms) = (None, None, None);
            if let Some(r) = p.drawn_rtt_ms {
                assert!(p.rtt_ms >= 200 && p.rtt_ms <= 300 && r == b.rtt_ms, "{}", p.describe());
            }
            (q.rtt_ms, q.queue_bytes, q.duration_s, q.bytes) = (b.rtt_ms, b.queue_bytes, b.duration_s, b.bytes);
            assert_eq!(&q, b);
            let moved = p.drawn_rtt_ms.is_some()
                || matches!(
                    p.case,
                    Some(
                        Case::MtuDrop { .. } | Case::MtuFromStart { .. } | Case::Buffer { .. } | Case::LossyLane { .. }
                    )
                );
            if !moved {
                assert_eq!(
                    (p.rtt_ms, p.queue_bytes, p.duration_s, p.bytes),
                    (b.rtt_ms, b.queue_bytes, b.duration_s, b.bytes)
                );
            }
        }
    }

    #[test]
    fn every_mechanism_case_is_drawn_and_becomes_its_scenario() {
        let plans: Vec<Plan> = (0..800).map(|k| draw(11, k, 40.0)).collect();
        let cased: Vec<(&Plan, &Case)> = plans.iter().filter_map(|p| Some((p, p.case.as_ref()?))).collect();
        assert!((400..=560).contains(&cased.len()), "{} of 800 runs with a case", cased.len());
        let kinds = |f: fn(&Case) -> bool| cased.iter().filter(|(_, c)| f(c)).count();
        for (name, n) in [
            ("mtu drop", kinds(|c| matches!(c, Case::MtuDrop { icmp: false, .. }))),
            ("mtu drop with icmp", kinds(|c| matches!(c, Case::MtuDrop { icmp: true, .. }))),
            ("mtu from the start", kinds(|c| matches!(c, Case::MtuFromStart { .. }))),
            ("policer", kinds(|c| matches!(c, Case::Policer { .. }))),
            ("shallow queue", kinds(|c| matches!(c, Case::Queue { deep: false, .. }))),
            ("deep queue", kinds(|c| matches!(c, Case::Queue { deep: true, .. }))),
            ("lane", kinds(|c| matches!(c, Case::LossyLane { .. }))),
            ("SO_RCVBUF", kinds(|c| matches!(c, Case::Buffer { receiver: true, application: true, .. }))),
            ("tcp_wmem", kinds(|c| matches!(c, Case::Buffer { receiver: false, application: false, .. }))),
        ] {
            assert!(n >= 5, "{n} runs with a {name}");
        }
        for (p, c) in cased {
            let sc = p.scenario();
            assert!(sc.validate().is_ok(), "{}", p.describe());
            assert!(p.describe().contains(&c.describe()));
            let named: Vec<&str> =
                sc.expected.iter().filter(|e| e.kind == "mechanism").map(|e| e.cause.as_str()).collect();
            let path = &sc.lab.path;
            match *c {
                Case::MtuDrop { at, len, mtu, icmp } => {
                    assert!(mtu < 1500 && (p.family == Family::V4 || mtu >= 1280), "{}", p.describe());
                    assert_eq!(
                        sc.events.last(),
                        Some(&Event::MtuDrop { at_s: at, for_s: Some(len), mtu, filter_icmp: !icmp })
                    );
                    assert_eq!(named, if icmp { vec![] } else { vec!["mtu_blackhole"] });
                    let tail = c.tail(0.2 + f64::from(p.rtt_ms) / 1e3).unwrap_or(0.0);
                    assert!(p.duration_s >= (tail + 3.0).min(40.0) - 0.05, "{}", p.describe());
                }
                Case::MtuFromStart { len, mtu } => {
                    assert_eq!(path.next_mtu, Some(MtuDrop { mtu, filter_icmp: true }));
                    assert!(sc.events.contains(&Event::MtuRestore { at_s: len }));
                    assert_eq!(named, vec!["mtu_blackhole"]);
                }
                Case::Policer { burst } => {
                    assert!(path.forward.shape.is_none());
                    assert_eq!(
                        path.forward.police,
                        Some(Police { rate_mbit: f64::from(p.rate_mbit), burst_bytes: burst })
                    );
                    assert_eq!(named, vec!["policer"]);
                }
                Case::Queue { bytes, deep } => {
                    assert_eq!(path.forward.shape.and_then(|s| s.limit_bytes), Some(bytes));
                    let bdp = f64::from(p.rate_mbit) * 1e6 / 8.0 * f64::from(p.rtt_ms) / 1e3;
                    assert!(if deep {
                        bytes as f64 >= (3.0 * bdp).min(30e6) - 1.0
                    } else {
                        bytes as f64 <= (0.15 * bdp).max(15e3) + 1.0
                    });
                    assert_eq!(named, vec!["queue_overflow"]);
                }
                Case::LossyLane { stream, loss_pct } => {
                    assert!(p.streams >= 2 && stream < p.streams && (0.5..=5.0).contains(&loss_pct));
                    assert_eq!(path.lossy_lane.map(|l| l.port), Some(LANE_BASE_PORT + stream as u16));
                    let port = match &sc.traffic {
                        Traffic::Iperf { flows, .. } => flows[0].client_port,
                        Traffic::App(a) => a.client_port,
                        Traffic::Plain(_) => None,
                    };
                    assert_eq!(port, Some(LANE_BASE_PORT));
                    assert_eq!(named, vec!["lossy_member"]);
                }
                Case::Buffer { receiver, application, bytes } => {
                    let bdp = f64::from(p.rate_mbit) * 1e6 / 8.0 * f64::from(p.rtt_ms) / 1e3;
                    assert!((bytes as f64) < bdp / 3.0);
                    if application {
                        let Traffic::App(a) = &sc.traffic else { panic!("{}", p.describe()) };
                        assert_eq!(if receiver { a.rcvbuf } else { a.sndbuf }, Some(bytes as u32));
                        assert_eq!(named, vec!["application"]);
                    } else {
                        let (list, key) = if receiver {
                            (&sc.lab.receiver_sysctls, "net.ipv4.tcp_rmem")
                        } else {
                            (&sc.lab.sender_sysctls, "net.ipv4.tcp_wmem")
                        };
                        let v = list.iter().filter(|(k, _)| k == key).map(|(_, v)| v.clone()).collect::<Vec<_>>();
                        assert_eq!(v.len(), 1);
                        assert!(v[0].ends_with(&format!(" {bytes}")), "{v:?}");
                        assert_eq!(named, vec!["sysctl"]);
                    }
                }
            }
        }
        // An IPv6 replay of a plan drawn over IPv4 keeps its black hole above IPv6's minimum.
        for mut p in plans.into_iter().filter(|p| matches!(p.case, Some(Case::MtuDrop { mtu, .. }) if mtu < 1280)) {
            p.set_family(Family::V6);
            assert!(p.scenario().validate().is_ok(), "{}", p.describe());
        }
    }
}
