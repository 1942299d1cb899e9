//! What holds a connection back: receive window, send buffer (chrono stats), missing options, small MSS.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::buffers::{receive_knob, send_knob, Peers, SockBuffers};
use super::episodes::Episodes;
use super::DetectConfigError;
use crate::model::{Body, Event, Finding, LimitReason, Mechanism, PathTag, Snap};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// A connection is bulk once this many bytes were acknowledged.
    pub bulk_bytes: u64,
    /// Judge buffer limits after this much busy time (seconds).
    pub min_busy_s: f64,
    /// Flag when this fraction of busy time was rwnd- or sndbuf-limited.
    pub limited_fraction: f64,
    /// An MSS below this many bytes is small ("Evaluation and discussion of TCP implementations in
    /// high-speed environments", Kondo and Atsumi: throughput fell with small segments).
    pub small_mss: u32,
    /// Suggested buffer = this factor x BDP ("Performance evaluation of TCP/IP in an emulated network
    /// environment", Nakamura et al., needed about 2.5).
    pub bdp_factor: f64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig { bulk_bytes: 4 << 20, min_busy_s: 2.0, limited_fraction: 0.3, small_mss: 1000, bdp_factor: 2.5 }
    }
}

impl LimitsConfig {
    pub fn validate(&self) -> Result<(), DetectConfigError> {
        if !(0.0..=1.0).contains(&self.limited_fraction) || self.bdp_factor <= 0.0 || self.min_busy_s < 0.0 {
            return Err(DetectConfigError::LimitsRange);
        }
        Ok(())
    }
}

#[derive(Default)]
struct Conn {
    first: Option<(u64, Snap)>,
    max_rate_bps: f64,
    min_rtt_us: u32,
    /// The largest window the peer advertised.
    max_snd_wnd: u32,
    /// Snapshots while bulk, and those that found the send buffer holding the sender back.
    looks: u32,
    buffer_bound: u32,
    /// Each reported reason with the mechanism it named: reported again once the mechanism is known.
    reported: HashMap<LimitReason, Option<Mechanism>>,
}

pub struct LimitsDetector {
    cfg: LimitsConfig,
    conns: HashMap<u64, Conn>,
    /// Every socket's buffers, to find a connection's receiver on this host.
    peers: Peers,
}

/// Peak delivery per min RTT at or above this share of the peer's window: the window is what caps delivery.
const WINDOW_BOUND: f64 = 0.8;

fn merge(into: &mut serde_json::Value, from: &serde_json::Value) {
    if let (Some(e), Some(x)) = (into.as_object_mut(), from.as_object()) {
        e.extend(x.clone());
    }
}

/// The send buffer holds the sender back: nothing waits unsent though the buffer is at least half
/// full of data in flight (the application wrote all the buffer takes and the network took it
/// all; a slow writer leaves the buffer emptier, a cwnd-limited sender keeps data unsent), and
/// the receiver's window is not what stops it.
fn send_buffer_bound(s: &Snap) -> bool {
    s.mss > 0
        && s.unsent < s.mss
        && s.packets_out > 0
        && u64::from(s.write_queue) * 2 >= u64::from(s.sndbuf)
        && s.snd_wnd > s.write_queue
}

fn round_up_mib(bytes: f64) -> u64 {
    let mib = (bytes / (1u64 << 20) as f64).ceil().max(1.0) as u64;
    mib << 20
}

impl LimitsDetector {
    pub fn new(cfg: LimitsConfig) -> Self {
        LimitsDetector { cfg, conns: HashMap::new(), peers: Peers::default() }
    }

    /// New thresholds from the next snapshot on (a reload).
    pub fn set_config(&mut self, cfg: LimitsConfig) {
        self.cfg = cfg;
    }

    /// One event; `loss`: the loss episodes, when the connection's are judged alone (not in a group).
    pub fn observe(&mut self, ev: &Event, loss: Option<&Episodes>, out: &mut Vec<Finding>) {
        self.judge(ev, loss, out);
        if let Body::Close(_) = ev.body {
            self.conns.remove(&ev.conn.cookie);
            self.peers.remove(ev.conn.cookie);
        }
    }

    fn judge(&mut self, ev: &Event, loss: Option<&Episodes>, out: &mut Vec<Finding>) {
        let (s, closing) = match &ev.body {
            Body::Snapshot(s) => (s, false),
            // The last look: the losses since the last snapshot are judged with it (the buffers
            // and options of a closing socket say nothing new).
            Body::Close(s) => (s, true),
            _ => return,
        };
        if !closing {
            self.peers.update(ev.conn.cookie, &ev.conn.tuple, s);
        }
        let cfg = &self.cfg;
        let c = self.conns.entry(ev.conn.cookie).or_default();
        c.max_rate_bps = c.max_rate_bps.max(s.delivery_rate_bps());
        c.max_snd_wnd = c.max_snd_wnd.max(s.snd_wnd);
        if s.min_rtt_us > 0 {
            c.min_rtt_us = if c.min_rtt_us == 0 { s.min_rtt_us } else { c.min_rtt_us.min(s.min_rtt_us) };
        }
        let (t0, s0) = match &c.first {
            Some(f) => f.clone(),
            None => {
                c.first = Some((ev.ts_ns, s.clone()));
                return;
            }
        };
        // Bulk: this much delivered, or sent and queued, or busy sending for min_busy_s (a transfer
        // stuck in recovery delivers little).
        let busy_total = s.busy_us as f64 / 1e6;
        if s.bytes_acked < cfg.bulk_bytes
            && s.bytes_sent + u64::from(s.unsent) < cfg.bulk_bytes
            && busy_total < cfg.min_busy_s
        {
            return;
        }
        let secs = (ev.ts_ns - t0) as f64 / 1e9;
        let goodput = if secs > 0.0 { (s.bytes_acked - s0.bytes_acked.min(s.bytes_acked)) as f64 / secs } else { 0.0 };
        let bdp = c.max_rate_bps * c.min_rtt_us as f64 / 1e6;
        let busy = s.busy_us.saturating_sub(s0.busy_us) as f64 / 1e6;
        let rwnd = s.rwnd_limited_us.saturating_sub(s0.rwnd_limited_us) as f64 / 1e6;
        let sndbuf = s.sndbuf_limited_us.saturating_sub(s0.sndbuf_limited_us) as f64 / 1e6;
        if !closing {
            c.looks += 1;
            c.buffer_bound += u32::from(send_buffer_bound(s));
        }
        let bound_share = f64::from(c.buffer_bound) / f64::from(c.looks.max(1));
        let efficiency = if c.max_rate_bps > 0.0 { goodput / c.max_rate_bps } else { 0.0 };
        let suggest = round_up_mib(cfg.bdp_factor * bdp);
        let base = json!({
            "goodput_bps": goodput * 8.0,
            "bottleneck_estimate_bps": c.max_rate_bps * 8.0,
            "efficiency": efficiency,
            "bdp_bytes": bdp as u64,
            "min_rtt_ms": c.min_rtt_us as f64 / 1e3,
            "cwnd": s.cwnd,
            "mss": s.mss,
            "sndbuf": s.sndbuf,
            "rcvbuf": s.rcvbuf,
            "busy_s": busy,
        });
        let mut found: Vec<(LimitReason, Option<Mechanism>, serde_json::Value)> = Vec::new();
        // A closed window is a receiver that stopped reading (a zero-window stop), not a buffer to size.
        // A pacing sender (BBR) spends only part of its busy time rwnd-limited even when the window caps it:
        // then the peak delivery per RTT equals the window, which is the same diagnosis.
        let window_use = if s.snd_wnd > 0 { bdp / s.snd_wnd as f64 } else { 0.0 };
        let window_bound = window_use >= WINDOW_BOUND && rwnd / busy.max(1e-9) >= cfg.limited_fraction / 3.0;
        if !closing && s.snd_wnd > 0 && busy >= cfg.min_busy_s && (rwnd / busy >= cfg.limited_fraction || window_bound)
        {
            let peer = self.peers.peer(&ev.conn.tuple);
            let k = receive_knob(peer, c.max_snd_wnd, suggest, cfg.bdp_factor, bdp, window_use >= WINDOW_BOUND);
            let mut e = json!({"limited_fraction": rwnd / busy, "window_use": window_use, "snd_wnd": s.snd_wnd});
            merge(&mut e, &k.evidence);
            e["advice"] = k.advice.into();
            found.push((LimitReason::RwndLimited, k.mechanism, e));
        }
        // The kernel's sndbuf-limited time stays 0 for a sender blocked on a full buffer whose
        // data all went out (nothing unsent): then the snapshots tell, when they name the knob.
        let sndbuf_knob = send_knob(&SockBuffers::of(ev.conn.cookie, s), suggest, cfg.bdp_factor, bdp, true);
        let bound = sndbuf_knob.mechanism.is_some() && c.looks >= 3 && bound_share >= cfg.limited_fraction;
        if !closing && busy >= cfg.min_busy_s && (sndbuf / busy >= cfg.limited_fraction || bound) {
            let k = sndbuf_knob;
            let mut e = json!({"limited_fraction": sndbuf / busy, "buffer_bound_share": bound_share});
            merge(&mut e, &k.evidence);
            e["advice"] = k.advice.into();
            found.push((LimitReason::SndbufLimited, k.mechanism, e));
        }
        // Judged once the fairness detector had time to group the connection with its siblings
        // (a group's losses are judged together).
        let judged = loss.filter(|_| busy >= 2.0 * cfg.min_busy_s);
        if let Some((m, e)) = judged.and_then(|l| super::loss::connection(l, ev.conn.cookie, c.max_rate_bps)) {
            found.push((LimitReason::LossLimited, Some(m), e));
        }
        if !closing {
            if !s.options.sack {
                found.push((LimitReason::NoSack, None, json!({"advice": "SACK was not negotiated: several losses in one window are repaired one per RTT or by timeout; enable net.ipv4.tcp_sack on both ends"})));
            }
            if !s.options.wscale {
                found.push((LimitReason::NoWscale, None, json!({"advice": "window scaling was not negotiated: the window cannot exceed 64 KiB; enable net.ipv4.tcp_window_scaling on both ends"})));
            }
            if s.mss > 0 && s.mss < cfg.small_mss {
                found.push((LimitReason::SmallMss, None, json!({"advice": format!("MSS {} bytes: per-packet costs dominate on a fast path; check the path MTU and MSS clamping", s.mss)})));
            }
        }
        for (cause, mechanism, extra) in found {
            // Once per reason; again when the knob becomes known (the receiver's socket was seen
            // after the first report) or changes.
            match c.reported.get(&cause) {
                Some(m) if *m == mechanism || mechanism.is_none() => continue,
                _ => {
                    c.reported.insert(cause, mechanism);
                }
            }
            let mut evidence = base.clone();
            merge(&mut evidence, &extra);
            out.push(Finding {
                ts_ns: ev.ts_ns,
                conn: Some(ev.conn),
                group: None,
                start_ns: t0,
                duration_s: None,
                ongoing: true,
                cause: cause.into(),
                owner: None,
                mechanism,
                evidence,
                path: PathTag::default(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::Options;
    use crate::model::{ConnId, Tuple};

    fn snap(acked: u64, busy: u64, rwnd: u64, sack: bool) -> Snap {
        Snap {
            bytes_acked: acked,
            busy_us: busy,
            rwnd_limited_us: rwnd,
            options: Options { sack, wscale: true, timestamps: true, ..Default::default() },
            mss: 1448,
            min_rtt_us: 100_000,
            rate_delivered: 1727,
            rate_interval_us: 100_000,
            cwnd: 200,
            snd_wnd: 1 << 20,
            ..Default::default()
        }
    }

    fn run(snaps: Vec<Snap>) -> Vec<Finding> {
        let id = ConnId {
            cookie: 3,
            netns: 1,
            tuple: Tuple { local: "10.0.0.1:1".parse().unwrap(), remote: "10.0.0.2:2".parse().unwrap() },
        };
        let mut d = LimitsDetector::new(LimitsConfig::default());
        let mut out = vec![];
        for (i, s) in snaps.into_iter().enumerate() {
            d.observe(
                &Event { ts_ns: (i as u64 + 1) * 1_000_000_000, conn: id, body: Body::Snapshot(s) },
                None,
                &mut out,
            );
        }
        out
    }

    /// A pacing sender whose peak delivery is one receive window per RTT, rwnd-limited 15 % of its busy time.
    fn paced(window: u32, rate_segs: u32) -> Vec<Snap> {
        (0..6)
            .map(|i| Snap {
                snd_wnd: window,
                rate_delivered: rate_segs,
                ..snap(i * 10_000_000, i * 1_000_000, i * 150_000, true)
            })
            .collect()
    }

    #[test]
    fn a_paced_sender_capped_at_one_window_per_rtt_is_rwnd_limited() {
        // 113 segs x 1448 B per 100 ms x 100 ms = 163.6 kB, the peer's 164 kB window: the window caps it.
        let out = run(paced(164_480, 113));
        assert_eq!(out.iter().map(|f| f.cause.as_str()).collect::<Vec<_>>(), vec!["rwnd_limited"]);
        assert!(out[0].evidence["window_use"].as_f64().unwrap() > 0.99, "{}", out[0].evidence);
    }

    #[test]
    fn a_transfer_without_sack_stuck_early_with_much_queued_is_flagged() {
        // 1 MB delivered, but 8 MB sent or waiting: a bulk transfer, whatever recovery made of it.
        let stuck =
            |i: u64| Snap { bytes_sent: 2_000_000, unsent: 6_000_000, ..snap(1_000_000 + i, i * 1_000_000, 0, false) };
        let out = run((0..6).map(stuck).collect());
        assert_eq!(out.iter().map(|f| f.cause.as_str()).collect::<Vec<_>>(), vec!["no_sack"]);
        // A small exchange without SACK is nobody's concern.
        let small = |i: u64| Snap { bytes_sent: 200_000, ..snap(100_000 + i, i * 100_000, 0, false) };
        assert!(run((0..6).map(small).collect()).is_empty());
    }

    #[test]
    fn a_window_far_above_what_is_delivered_is_not_the_limit() {
        // Same 15 % rwnd-limited time, but delivery per RTT is a third of the window: the network limits it.
        assert!(run(paced(3 * 164_480, 113)).is_empty());
    }

    #[test]
    fn rwnd_limited_time_is_flagged_with_the_receiver_sysctl_and_a_value() {
        let out = run((0..6).map(|i| snap(i * 10_000_000, i * 1_000_000, i * 800_000, true)).collect());
        assert_eq!(out.len(), 1, "{out:?}");
        let f = &out[0];
        assert_eq!(f.cause.as_str(), "rwnd_limited");
        assert_eq!(f.evidence["sysctl"], "net.ipv4.tcp_rmem");
        // 1727 x 1448 B per 100 ms = 25.0 MB/s; x 100 ms = 2.50 MB BDP; x 2.5 = 6.25 MB = 5.96 MiB -> 6 MiB.
        assert_eq!(f.evidence["value"], 6u64 << 20);
    }

    fn receiver(locked: bool, rcvbuf: u32, rmem_max: u32) -> Event {
        let id = ConnId {
            cookie: 4,
            netns: 2,
            tuple: Tuple { local: "10.0.0.2:2".parse().unwrap(), remote: "10.0.0.1:1".parse().unwrap() },
        };
        let s = Snap { rcvbuf, rcvbuf_locked: locked, rmem_max, ..Default::default() };
        Event { ts_ns: 500_000_000, conn: id, body: Body::Snapshot(s) }
    }

    fn run_with(first: Vec<Event>, snaps: Vec<Snap>) -> Vec<Finding> {
        let id = ConnId {
            cookie: 3,
            netns: 1,
            tuple: Tuple { local: "10.0.0.1:1".parse().unwrap(), remote: "10.0.0.2:2".parse().unwrap() },
        };
        let mut d = LimitsDetector::new(LimitsConfig::default());
        let mut out = vec![];
        for e in &first {
            d.observe(e, None, &mut out);
        }
        for (i, s) in snaps.into_iter().enumerate() {
            let ts = (i as u64 + 1) * 1_000_000_000;
            d.observe(&Event { ts_ns: ts, conn: id, body: Body::Snapshot(s) }, None, &mut out);
            if i == 4 {
                // The receiver's socket, seen late: the knob becomes known.
                d.observe(&Event { ts_ns: ts + 1, ..receiver(true, 131_072, 6 << 20) }, None, &mut out);
            }
        }
        out
    }

    fn rwnd_limited() -> Vec<Snap> {
        (0..8).map(|i| snap(i * 10_000_000, i * 1_000_000, i * 800_000, true)).collect()
    }

    #[test]
    fn a_receiver_on_this_host_that_set_so_rcvbuf_is_named_the_application() {
        let out = run_with(vec![receiver(true, 131_072, 6 << 20)], rwnd_limited());
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].mechanism, Some(Mechanism::Application));
        assert_eq!(out[0].evidence["knob"], "SO_RCVBUF");
        assert!(
            out[0].evidence["advice"].as_str().unwrap().contains("setsockopt(SO_RCVBUF, 6291456)"),
            "{}",
            out[0].evidence
        );
        // The same receiver at its namespace's tcp_rmem ceiling: the sysctl.
        let out = run_with(vec![receiver(false, 262_144, 262_144)], rwnd_limited());
        assert_eq!(out[0].mechanism, Some(Mechanism::Sysctl));
        assert_eq!(out[0].evidence["receiver"]["rmem_max"], 262_144);
    }

    #[test]
    fn a_receiver_seen_after_the_first_report_gives_a_second_report_with_its_knob() {
        let out = run_with(vec![], rwnd_limited());
        let m: Vec<Option<Mechanism>> = out.iter().map(|f| f.mechanism).collect();
        assert_eq!(m, vec![None, Some(Mechanism::Application)], "{out:?}");
        assert_eq!(out[0].start_ns, out[1].start_ns, "an update of the same finding");
        assert_eq!(out[0].evidence["receiver"]["on_this_host"], false);
    }

    #[test]
    fn a_sender_that_set_so_sndbuf_is_named_the_application_and_one_at_tcp_wmem_max_the_sysctl() {
        let limited = |locked: bool, sndbuf: u32, wmem_max: u32| -> Vec<Snap> {
            (0..6)
                .map(|i| Snap {
                    sndbuf_limited_us: i * 800_000,
                    sndbuf,
                    sndbuf_locked: locked,
                    wmem_max,
                    ..snap(i * 10_000_000, i * 1_000_000, 0, true)
                })
                .collect()
        };
        let out = run(limited(true, 131_072, 4 << 20));
        assert_eq!(
            out.iter().map(|f| (f.cause.as_str(), f.mechanism)).collect::<Vec<_>>(),
            vec![("sndbuf_limited", Some(Mechanism::Application))]
        );
        assert!(out[0].evidence["advice"].as_str().unwrap().contains("SO_SNDBUF"));
        let out = run(limited(false, 262_144, 262_144));
        assert_eq!(out[0].mechanism, Some(Mechanism::Sysctl));
        assert_eq!(out[0].evidence["sysctl"], "net.ipv4.tcp_wmem");
        // Below the ceiling, not locked: no knob is named.
        assert_eq!(run(limited(false, 262_144, 4 << 20))[0].mechanism, None);
    }

    #[test]
    fn a_bulk_connection_without_sack_is_flagged_once_and_a_healthy_one_not_at_all() {
        let out = run((0..6).map(|i| snap(i * 10_000_000, i * 1_000_000, 0, false)).collect());
        assert_eq!(out.iter().map(|f| f.cause.as_str()).collect::<Vec<_>>(), vec!["no_sack"]);
        assert!(run((0..6).map(|i| snap(i * 10_000_000, i * 1_000_000, 0, true)).collect()).is_empty());
    }

    #[test]
    fn losses_judged_after_the_last_snapshot_are_reported_when_the_connection_closes() {
        let id = ConnId {
            cookie: 3,
            netns: 1,
            tuple: Tuple { local: "10.0.0.1:1".parse().unwrap(), remote: "10.0.0.2:2".parse().unwrap() },
        };
        let mut eps = Episodes::default();
        let mut d = LimitsDetector::new(LimitsConfig::default());
        let mut out = vec![];
        let at = |t: u64, body| Event { ts_ns: t, conn: id, body };
        for i in 0..6 {
            let ev = at((i + 1) * 1_000_000_000, Body::Snapshot(snap(i * 10_000_000, i * 1_000_000, 0, true)));
            eps.observe(&ev);
            d.observe(&ev, Some(&eps), &mut out);
        }
        // A policer's episodes (flat RTT, ~45 segments out, one every 0.5 s), after the last snapshot.
        for k in 0..6 {
            let x = crate::model::CaState {
                old: 0,
                new: 3,
                packets_out: 45,
                rack_rtt_us: 100_500,
                min_rtt_us: 100_000,
                ..Default::default()
            };
            eps.observe(&at(6_100_000_000 + k * 500_000_000, Body::CaState(x)));
        }
        assert!(out.is_empty(), "{out:?}");
        let close = at(9_500_000_000, Body::Close(snap(60_000_000, 6_000_000, 0, true)));
        d.observe(&close, Some(&eps), &mut out);
        assert_eq!(
            out.iter().map(|f| (f.cause.as_str(), f.mechanism)).collect::<Vec<_>>(),
            vec![("loss_limited", Some(Mechanism::Policer))]
        );
        // A closed connection is forgotten.
        assert!(d.conns.is_empty());
    }

    #[test]
    fn a_sender_whose_locked_buffer_is_all_in_flight_below_cwnd_is_sndbuf_limited() {
        // lab `sndbuf-app`: SO_SNDBUF 64 KiB (131072), cwnd 291, 166 out, 239 kB in the write
        // queue, nothing unsent; the kernel's sndbuf-limited time stays 0.
        let bound = |i: u64, locked: bool| Snap {
            cwnd: 291,
            packets_out: 166,
            write_queue: 239_144,
            unsent: 0,
            sndbuf: 131_072,
            sndbuf_locked: locked,
            wmem_max: 4 << 20,
            ..snap(i * 10_000_000, i * 1_000_000, 0, true)
        };
        let out = run((0..6).map(|i| bound(i, true)).collect());
        assert_eq!(
            out.iter().map(|f| (f.cause.as_str(), f.mechanism)).collect::<Vec<_>>(),
            vec![("sndbuf_limited", Some(Mechanism::Application))]
        );
        // Not locked and below the ceiling: no knob to name, nothing said from the snapshots.
        assert!(run((0..6).map(|i| bound(i, false)).collect()).is_empty());
        // Data waiting unsent: the network's limit (cwnd), not the buffer's.
        let waiting = |i: u64| Snap { unsent: 20_000, ..bound(i, true) };
        assert!(run((0..6).map(waiting).collect()).is_empty());
    }
}
