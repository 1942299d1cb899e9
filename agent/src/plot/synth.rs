//! Synthetic recordings in the shape of the papers' transfers, for tests, demos and docs/img.
//!
//! `outage`: one 10 ms RTT stream through a 500 Mbit/s bottleneck (the communication-stops study): slow start past the
//! BDP, half the window lost, retransmissions lost again so cwnd sits at 1 for 3 s (a stop), an RTO,
//! then recovery at full speed. `parallel`: 4 streams of one transfer settling at unequal shares
//! (the parallel-streams study). Deterministic: no clock, no randomness.
use std::net::SocketAddr;

use serde_json::json;

use crate::model::event::{Options, SampleSrc, StateChange};
use crate::model::{
    Body, CaState, Cause, ConnId, Event, Finding, PathTag, Process, Retrans, Rto, Sample, Snap, StopCause, StopOwner,
    Tuple,
};
use crate::recording::{Header, Recording, FORMAT_VERSION};

pub const MSS: u32 = 1448;
/// First event of every synthetic recording (CLOCK_MONOTONIC ns).
pub const T0: u64 = 5_000_000_000_000;
const MS: u64 = 1_000_000;

pub fn conn(cookie: u64, local: &str, remote: &str) -> ConnId {
    let p = |s: &str| s.parse::<SocketAddr>().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    ConnId { cookie, netns: 4026531840, tuple: Tuple { local: p(local), remote: p(remote) } }
}

pub fn header(filters: &[&str]) -> Header {
    Header {
        tcpvigil_recording: FORMAT_VERSION,
        agent_version: "synthetic".into(),
        kernel: "synthetic".into(),
        hostname: "lab".into(),
        mono_to_unix_ns: 1_700_000_000_000_000_000 - T0 as i64,
        variants: vec![("sack".into(), "synthetic".into())],
        filters: filters.iter().map(|s| s.to_string()).collect(),
    }
}

/// The sender's scoreboard as the simulation moves it.
#[derive(Debug, Clone, Default)]
struct Sim {
    una: u32,
    nxt: u32,
    cwnd: u32,
    ssthresh: u32,
    lost: u32,
    sacked: u32,
    retrans: u32,
    ca: u8,
    acked: u64,
    delivered: u32,
    total_retrans: u32,
    busy_us: u64,
    rtos: u32,
    lost_rtx: u32,
}

impl Sim {
    fn packets_out(&self) -> u32 {
        self.nxt.wrapping_sub(self.una) / MSS
    }
    fn in_flight(&self) -> u32 {
        (self.packets_out() + self.retrans).saturating_sub(self.lost + self.sacked)
    }
    fn sample(&self, rate_segs: u32, sack: Vec<(u32, u32)>) -> Sample {
        Sample {
            src: SampleSrc::Probe,
            selected: true,
            ack_seq: self.una,
            snd_una: self.una,
            snd_nxt: self.nxt,
            high_seq: self.nxt,
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            packets_out: self.packets_out(),
            lost_out: self.lost,
            sacked_out: self.sacked,
            retrans_out: self.retrans,
            in_flight: self.in_flight(),
            ca_state: self.ca,
            srtt_us: 10_000,
            rto_us: 210_000,
            mss: MSS,
            delivered: self.delivered,
            total_retrans: self.total_retrans,
            snd_wnd: 6 << 20,
            write_queue: 4 << 20,
            rate_delivered: rate_segs,
            rate_interval_us: 10_000,
            bytes_acked: self.acked,
            sack,
            dsack: false,
            drained: false,
            round: false,
        }
    }
    fn snap(&self, cc: &str, process: &Process) -> Snap {
        Snap {
            state: 1,
            ca_state: self.ca,
            options: Options { sack: true, wscale: true, timestamps: true, ecn: false, snd_wscale: 7, rcv_wscale: 7 },
            cc: cc.into(),
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            srtt_us: 10_000,
            min_rtt_us: 10_000,
            rto_us: 210_000,
            mss: MSS,
            snd_wnd: 6 << 20,
            rcv_wnd: 65535,
            packets_out: self.packets_out(),
            lost_out: self.lost,
            sacked_out: self.sacked,
            retrans_out: self.retrans,
            write_queue: 4 << 20,
            sndbuf: 4 << 20,
            rcvbuf: 6 << 20,
            delivered: self.delivered,
            total_retrans: self.total_retrans,
            rate_delivered: 400,
            rate_interval_us: 10_000,
            snd_una: self.una,
            snd_nxt: self.nxt,
            lost_rtx: self.lost_rtx,
            rtos: self.rtos,
            bytes_acked: self.acked,
            bytes_sent: self.acked + self.packets_out() as u64 * MSS as u64,
            busy_us: self.busy_us,
            process: process.clone(),
            ..Snap::default()
        }
    }
    fn ack(&mut self, segs: u32) {
        self.una = self.una.wrapping_add(segs * MSS);
        self.acked += segs as u64 * MSS as u64;
        self.delivered += segs;
    }
    fn retrans_ev(&self, seq: u32, count: u32, lost: bool) -> Retrans {
        Retrans {
            seq,
            end_seq: seq.wrapping_add(MSS),
            segs: 1,
            sacked: if lost { 0x14 } else { 0x02 },
            ca_state: self.ca,
            count,
            since_prev_ns: if count > 1 { 20 * MS } else { 0 },
            lost_retrans: lost,
            failed: false,
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            packets_out: self.packets_out(),
            lost_out: self.lost,
            sacked_out: self.sacked,
            retrans_out: self.retrans,
            snd_una: self.una,
            mtu_probing: None,
        }
    }
    fn ca_ev(&self, old: u8) -> CaState {
        CaState {
            old,
            new: self.ca,
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            high_seq: self.nxt,
            snd_una: self.una,
            snd_nxt: self.nxt,
            packets_out: self.packets_out(),
            lost_out: self.lost,
            sacked_out: self.sacked,
            retrans_out: self.retrans,
            ..Default::default()
        }
    }
}

/// Paper-000 outage: a 10 s transfer with a stop from 1.0 s to 4.0 s, and the detector's findings.
pub fn outage() -> (Recording, Vec<Finding>) {
    let id = conn(40961, "10.77.0.1:40000", "10.77.1.2:5201");
    let process = Process { pid: 4242, uid: 0, cgroup_id: 1, comm: "iperf3".into(), cgroup: None };
    let mut ev = Vec::new();
    let mut push = |t: u64, body: Body| ev.push(Event { ts_ns: T0 + t, conn: id, body });
    let mut s = Sim { una: 1_000_000, nxt: 1_000_000, cwnd: 10, ssthresh: u32::MAX >> 1, ..Sim::default() };
    push(0, Body::State(StateChange { old: 2, new: 1 }));
    push(MS / 2, Body::Process(process.clone()));
    let step = 2 * MS;
    let bdp = 432; // 500 Mbit/s x 10 ms in 1448-byte segments
    let mut t = 0;
    let mut hole = 0u32;
    while t <= 10_000 * MS {
        let ms = t / MS;
        // One snapshot a second.
        if t % (1000 * MS) < step {
            s.busy_us = ms * 1000;
            push(t, Body::Snapshot(s.snap("cubic", &process)));
        }
        if ms < 500 {
            // Slow start: cwnd doubles per RTT; the path delivers at most the bottleneck rate.
            let deliver = (s.in_flight().min(bdp) / 5).max(1).min(s.packets_out());
            s.ack(deliver);
            s.cwnd = (s.cwnd + deliver).min(900);
            while s.in_flight() < s.cwnd {
                s.nxt = s.nxt.wrapping_add(MSS);
            }
            push(t, Body::Sample(s.sample(deliver * 5, vec![])));
        } else if ms == 500 {
            // Half the window is dropped at once.
            let old = s.ca;
            s.ca = 3;
            s.lost = s.packets_out() / 2;
            s.sacked = s.packets_out() / 3;
            s.ssthresh = s.cwnd / 2;
            s.cwnd = s.ssthresh;
            hole = s.una;
            push(t, Body::CaState(s.ca_ev(old)));
            let sack = vec![(s.una.wrapping_add(s.lost * MSS), s.nxt)];
            push(t, Body::Sample(s.sample(0, sack)));
        } else if ms < 1000 {
            // Recovery: retransmit the holes; each round fills a few of them.
            s.retrans = (s.retrans + 4).min(s.lost);
            s.total_retrans += 4;
            let seq = hole.wrapping_add(((ms - 500) / 2) as u32 * MSS);
            push(t, Body::Retrans(s.retrans_ev(seq, 1, false)));
            if ms % 10 == 0 {
                s.ack(2);
                s.lost = s.lost.saturating_sub(2);
                s.cwnd = s.cwnd.saturating_sub(8).max(1);
                let sack = vec![(s.una.wrapping_add(s.lost * MSS), s.nxt)];
                push(t, Body::Sample(s.sample(2, sack)));
            }
        } else if ms < 4000 {
            // The stop: retransmissions lost again, cwnd 1, in_flight 0; one segment per RTT at best.
            if ms == 1000 {
                // Every segment is now marked S or L: nothing counts as in flight.
                s.cwnd = 1;
                s.retrans = 0;
                s.sacked = s.packets_out() - s.lost;
                for k in 0..12u32 {
                    s.lost_rtx += 1;
                    push(t + k as u64 * MS / 4, Body::LostRetrans(s.retrans_ev(hole.wrapping_add(k * MSS), 2, true)));
                }
            }
            if ms % 40 == 0 {
                s.ack(1);
                s.lost = s.lost.saturating_sub(1);
                let sack = vec![(s.una.wrapping_add(s.lost * MSS), s.nxt)];
                push(t, Body::Sample(s.sample(0, sack)));
            }
        } else if ms == 4000 {
            s.rtos += 1;
            push(
                t,
                Body::Rto(Rto {
                    retransmits: 0,
                    rto_us: 210_000,
                    backoff: 0,
                    cwnd: 1,
                    snd_una: s.una,
                    snd_nxt: s.nxt,
                    packets_out: s.packets_out(),
                    retrans_out: s.retrans,
                }),
            );
            let old = s.ca;
            s.ca = 4;
            s.cwnd = 1;
            s.ssthresh = 200;
            push(t, Body::CaState(s.ca_ev(old)));
        } else {
            // After the RTO: everything outstanding is resent, slow start to ssthresh, then steady.
            let delivered = if s.lost > 0 || s.sacked > 0 {
                let n = s.lost.min(20);
                s.lost -= n;
                s.sacked = s.sacked.saturating_sub(15);
                let d = (n + 10).min(s.packets_out());
                s.ack(d);
                d
            } else {
                let deliver = (s.in_flight().min(bdp) / 5).max(1).min(s.packets_out());
                s.ack(deliver);
                deliver
            };
            if s.ca == 4 && s.lost == 0 && s.sacked == 0 {
                let old = s.ca;
                s.ca = 0;
                push(t, Body::CaState(s.ca_ev(old)));
            }
            s.cwnd = if s.cwnd < s.ssthresh { (s.cwnd * 2).min(s.ssthresh) } else { (s.cwnd + 1).min(bdp + 40) };
            while s.in_flight() < s.cwnd {
                s.nxt = s.nxt.wrapping_add(MSS);
            }
            push(t, Body::Sample(s.sample(delivered * 5, vec![])));
        }
        t += step;
    }
    push(10_000 * MS + MS, Body::State(StateChange { old: 1, new: 4 }));
    push(10_000 * MS + 2 * MS, Body::Close(s.snap("cubic", &process)));
    let finding = |ts_ms: u64, ongoing: bool| Finding {
        ts_ns: T0 + ts_ms * MS,
        conn: Some(id),
        group: None,
        start_ns: T0 + 1000 * MS,
        duration_s: if ongoing { None } else { Some(3.0) },
        ongoing,
        cause: StopCause::LostRetransmit.into(),
        owner: Some(StopOwner::Network),
        mechanism: None,
        evidence: json!({"cwnd": 1, "in_flight": 0, "lost_retrans": 12, "ca_state": "Recovery", "rtts": 300}),
        path: PathTag::default(),
    };
    ev.sort_by_key(|e| e.ts_ns);
    let rec = Recording { header: header(&[":5201"]), events: ev, truncated_tail: false };
    (rec, vec![finding(1500, true), finding(4000, false)])
}

/// Paper-001: 4 parallel streams, 20 s at 300 ms RTT, settling at 40 %, 25 %, 20 % and 15 % of 1 Gbit/s.
pub fn parallel() -> (Recording, Vec<Finding>) {
    let shares = [0.40, 0.25, 0.20, 0.15];
    let mut ev = Vec::new();
    let process = Process { pid: 777, uid: 0, cgroup_id: 1, comm: "gridftp".into(), cgroup: None };
    let ids: Vec<ConnId> =
        (0..4).map(|i| conn(50000 + i as u64, &format!("10.77.0.1:{}", 41000 + i), "10.77.1.2:2811")).collect();
    for (i, id) in ids.iter().enumerate() {
        let mut s = Sim { una: 7_000_000 * (i as u32 + 1), cwnd: 10, ssthresh: 1 << 20, ..Sim::default() };
        s.nxt = s.una;
        ev.push(Event { ts_ns: T0 + i as u64 * MS, conn: *id, body: Body::Process(process.clone()) });
        let step = 20 * MS;
        let mut t = 5 * MS + i as u64 * 3 * MS;
        while t < 20_000 * MS {
            let secs = t as f64 / 1e9;
            // Equal until 5 s, then the shares drift apart (the parallel-streams study, its figure 3).
            let w = if secs < 5.0 { 0.25 } else { shares[i] + (0.25 - shares[i]) * (-(secs - 5.0)).exp() };
            let wobble = 1.0 + 0.15 * ((secs * 3.0 + i as f64).sin());
            let segs = (1e9 * w * wobble * 0.02 / 8.0 / MSS as f64) as u32;
            s.ack(segs);
            s.cwnd = (segs * 15).max(10);
            while s.in_flight() < s.cwnd {
                s.nxt = s.nxt.wrapping_add(MSS);
            }
            if t % (1000 * MS) < step {
                ev.push(Event { ts_ns: T0 + t, conn: *id, body: Body::Snapshot(s.snap("bic", &process)) });
            }
            let mut sm = s.sample(segs, vec![]);
            sm.srtt_us = 300_000;
            sm.rate_interval_us = 20_000;
            ev.push(Event { ts_ns: T0 + t, conn: *id, body: Body::Sample(sm) });
            t += step;
        }
        ev.push(Event { ts_ns: T0 + 20_000 * MS + i as u64, conn: *id, body: Body::Close(s.snap("bic", &process)) });
    }
    ev.sort_by_key(|e| e.ts_ns);
    let f = Finding {
        ts_ns: T0 + 12_000 * MS,
        conn: Some(ids[3]),
        group: Some("10.77.0.1->10.77.1.2:2811 (gridftp)".into()),
        start_ns: T0 + 5_000 * MS,
        duration_s: None,
        ongoing: true,
        cause: Cause::UnfairStreams,
        owner: None,
        mechanism: None,
        evidence: json!({"jain": 0.86, "slowest_over_fastest": 0.38, "cookies": [50000, 50001, 50002, 50003]}),
        path: PathTag::default(),
    };
    (Recording { header: header(&[":2811"]), events: ev, truncated_tail: false }, vec![f])
}
