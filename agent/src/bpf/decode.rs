//! Decode raw ring-buffer and iterator records into model events, checking kinds and sizes.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::abi::*;
use crate::model::event::{Options, SampleSrc};
use crate::model::{Body, CaState, ConnId, Event, Process, Retrans, Rto, Sample, Snap, StateChange, Tuple};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("record kind {kind} says {said} bytes, expected {expected} (ABI mismatch?)")]
    Size { kind: u16, said: u16, expected: usize },
    #[error("record of {got} bytes but header says {said}")]
    Truncated { got: usize, said: u16 },
    #[error("unknown record kind {0}")]
    Kind(u16),
    #[error("unknown address family {0}")]
    Family(u16),
}

fn read<T: plain::Plain + Default>(b: &[u8]) -> T {
    let mut v = T::default();
    // Sizes were checked against the header before; a short copy leaves zeros.
    let _ = plain::copy_from_bytes(&mut v, b);
    v
}

fn ip(family: u16, a: &[u8; 16]) -> Result<IpAddr, DecodeError> {
    match family {
        2 => Ok(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
        10 => Ok(IpAddr::V6(Ipv6Addr::from(*a))),
        f => Err(DecodeError::Family(f)),
    }
}

pub fn conn_of(h: &tv_hdr) -> Result<ConnId, DecodeError> {
    let t = &h.t;
    Ok(ConnId {
        cookie: h.cookie,
        netns: h.netns,
        tuple: Tuple {
            local: SocketAddr::new(ip(t.family, &t.laddr)?, t.lport),
            remote: SocketAddr::new(ip(t.family, &t.raddr)?, t.rport),
        },
    })
}

fn comm(c: &[i8; 16]) -> String {
    let bytes: Vec<u8> = c.iter().take_while(|&&b| b != 0).map(|&b| b as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn expected_size(kind: u16) -> Option<usize> {
    use std::mem::size_of;
    Some(match tv_kind(kind as u32) {
        tv_kind::TV_K_SAMPLE => size_of::<tv_sample>(),
        tv_kind::TV_K_RETRANS | tv_kind::TV_K_LOST_RTX => size_of::<tv_retrans>(),
        tv_kind::TV_K_CA_STATE => size_of::<tv_ca_state>(),
        tv_kind::TV_K_RTO => size_of::<tv_rto>(),
        tv_kind::TV_K_STATE => size_of::<tv_state>(),
        tv_kind::TV_K_CLOSE | tv_kind::TV_K_SNAPSHOT => size_of::<tv_snap>(),
        tv_kind::TV_K_OWNER => size_of::<tv_owner>(),
        _ => return None,
    })
}

/// Decode one record (ring buffer or iterator).
pub fn decode(b: &[u8]) -> Result<Event, DecodeError> {
    if b.len() < std::mem::size_of::<tv_hdr>() {
        return Err(DecodeError::Short(b.len()));
    }
    let h: tv_hdr = read(b);
    let expected = expected_size(h.kind).ok_or(DecodeError::Kind(h.kind))?;
    if h.size as usize != expected {
        return Err(DecodeError::Size { kind: h.kind, said: h.size, expected });
    }
    if b.len() < expected {
        return Err(DecodeError::Truncated { got: b.len(), said: h.size });
    }
    let conn = conn_of(&h)?;
    let body = match tv_kind(h.kind as u32) {
        tv_kind::TV_K_SAMPLE => Body::Sample(sample(&read::<tv_sample>(b))),
        tv_kind::TV_K_RETRANS => Body::Retrans(retrans(&read::<tv_retrans>(b))),
        tv_kind::TV_K_LOST_RTX => Body::LostRetrans(retrans(&read::<tv_retrans>(b))),
        tv_kind::TV_K_CA_STATE => {
            let e: tv_ca_state = read(b);
            Body::CaState(CaState {
                old: e.old_state,
                new: e.new_state,
                cwnd: e.cwnd,
                ssthresh: e.ssthresh,
                high_seq: e.high_seq,
                snd_una: e.snd_una,
                snd_nxt: e.snd_nxt,
                packets_out: e.packets_out,
                lost_out: e.lost_out,
                sacked_out: e.sacked_out,
                retrans_out: e.retrans_out,
                srtt_us: e.srtt_us,
                rack_rtt_us: e.rack_rtt_us,
                min_rtt_us: e.min_rtt_us,
            })
        }
        tv_kind::TV_K_RTO => {
            let e: tv_rto = read(b);
            Body::Rto(Rto {
                retransmits: e.retransmits,
                rto_us: e.rto_us,
                backoff: e.backoff,
                cwnd: e.cwnd,
                snd_una: e.snd_una,
                snd_nxt: e.snd_nxt,
                packets_out: e.packets_out,
                retrans_out: e.retrans_out,
            })
        }
        tv_kind::TV_K_STATE => {
            let e: tv_state = read(b);
            Body::State(StateChange { old: e.old_state, new: e.new_state })
        }
        tv_kind::TV_K_OWNER => {
            let e: tv_owner = read(b);
            Body::Process(Process {
                pid: e.tgid,
                uid: e.uid,
                cgroup_id: e.cgroup_id,
                comm: comm(&e.comm),
                cgroup: None,
            })
        }
        tv_kind::TV_K_SNAPSHOT => Body::Snapshot(snap(&read::<tv_snap>(b))),
        tv_kind::TV_K_CLOSE => Body::Close(snap(&read::<tv_snap>(b))),
        _ => return Err(DecodeError::Kind(h.kind)),
    };
    Ok(Event { ts_ns: h.ts_ns, conn, body })
}

fn sample(s: &tv_sample) -> Sample {
    let n = (s.nsack as usize).min(4);
    Sample {
        src: match tv_sample_src(s.src as u32) {
            tv_sample_src::TV_SRC_SACKTAG => SampleSrc::Sacktag,
            tv_sample_src::TV_SRC_FLUSH => SampleSrc::Flush,
            _ => SampleSrc::Probe,
        },
        selected: s.flags as u32 & tv_sample_flags::TV_SF_SELECTED.0 != 0,
        dsack: s.flags as u32 & tv_sample_flags::TV_SF_DSACK.0 != 0,
        drained: s.flags as u32 & tv_sample_flags::TV_SF_DRAINED.0 != 0,
        round: s.flags as u32 & tv_sample_flags::TV_SF_ROUND.0 != 0,
        ack_seq: s.ack_seq,
        snd_una: s.snd_una,
        snd_nxt: s.snd_nxt,
        high_seq: s.high_seq,
        cwnd: s.cwnd,
        ssthresh: s.ssthresh,
        packets_out: s.packets_out,
        lost_out: s.lost_out,
        sacked_out: s.sacked_out,
        retrans_out: s.retrans_out,
        in_flight: s.in_flight,
        ca_state: s.ca_state,
        srtt_us: s.srtt_us,
        rto_us: s.rto_us,
        mss: s.mss,
        delivered: s.delivered,
        total_retrans: s.total_retrans,
        snd_wnd: s.snd_wnd,
        write_queue: s.write_queue,
        rate_delivered: s.rate_delivered,
        rate_interval_us: s.rate_interval_us,
        bytes_acked: s.bytes_acked,
        sack: (0..n).map(|i| (s.sack[2 * i], s.sack[2 * i + 1])).collect(),
    }
}

fn retrans(e: &tv_retrans) -> Retrans {
    Retrans {
        seq: e.seq,
        end_seq: e.end_seq,
        segs: e.segs,
        sacked: e.sacked,
        ca_state: e.ca_state,
        count: e.count,
        since_prev_ns: e.since_prev_ns,
        lost_retrans: e.lost_retrans != 0,
        failed: e.failed != 0,
        cwnd: e.cwnd,
        ssthresh: e.ssthresh,
        packets_out: e.packets_out,
        lost_out: e.lost_out,
        sacked_out: e.sacked_out,
        retrans_out: e.retrans_out,
        snd_una: e.snd_una,
        mtu_probing: Some(e.mtu_probing),
    }
}

fn snap(s: &tv_snap) -> Snap {
    let o = s.opts as u32;
    let cc: Vec<u8> = s.cc.iter().take_while(|&&b| b != 0).map(|&b| b as u8).collect();
    Snap {
        state: s.state,
        ca_state: s.ca_state,
        options: Options {
            sack: o & tv_opt_bits::TV_OPT_SACK.0 != 0,
            wscale: o & tv_opt_bits::TV_OPT_WSCALE.0 != 0,
            timestamps: o & tv_opt_bits::TV_OPT_TS.0 != 0,
            ecn: o & tv_opt_bits::TV_OPT_ECN.0 != 0,
            snd_wscale: s.snd_wscale,
            rcv_wscale: s.rcv_wscale,
        },
        app_limited: s.app_limited != 0,
        chrono_type: s.chrono_type,
        timer: s.timer,
        probes_out: s.probes_out,
        cc: String::from_utf8_lossy(&cc).into_owned(),
        cwnd: s.cwnd,
        ssthresh: s.ssthresh,
        srtt_us: s.srtt_us,
        min_rtt_us: s.min_rtt_us,
        rto_us: s.rto_us,
        mss: s.mss,
        snd_wnd: s.snd_wnd,
        rcv_wnd: s.rcv_wnd,
        packets_out: s.packets_out,
        lost_out: s.lost_out,
        sacked_out: s.sacked_out,
        retrans_out: s.retrans_out,
        write_queue: s.write_queue,
        unsent: s.unsent,
        recv_queue: s.recv_queue,
        sndbuf: s.sndbuf,
        rcvbuf: s.rcvbuf,
        rcvbuf_locked: u32::from(s.userlocks) & tv_lock_bits::TV_LOCK_RCVBUF.0 != 0,
        sndbuf_locked: u32::from(s.userlocks) & tv_lock_bits::TV_LOCK_SNDBUF.0 != 0,
        rmem_max: s.rmem_max,
        wmem_max: s.wmem_max,
        delivered: s.delivered,
        total_retrans: s.total_retrans,
        rate_delivered: s.rate_delivered,
        rate_interval_us: s.rate_interval_us,
        retransmits: s.retransmits,
        backoff: s.backoff,
        total_rto: s.total_rto,
        total_rto_time_ms: s.total_rto_time_ms,
        snd_una: s.snd_una,
        snd_nxt: s.snd_nxt,
        lost_rtx: s.lost_rtx,
        rtos: s.rtos,
        retrans_segs: s.retrans_segs,
        last_ack_age_us: s.last_ack_age_us,
        bytes_acked: s.bytes_acked,
        bytes_received: s.bytes_received,
        bytes_sent: s.bytes_sent,
        bytes_retrans: s.bytes_retrans,
        busy_us: s.busy_us,
        rwnd_limited_us: s.rwnd_limited_us,
        sndbuf_limited_us: s.sndbuf_limited_us,
        process: Process { pid: s.tgid, uid: s.uid, cgroup_id: s.tgid_cgroup, comm: comm(&s.comm), cgroup: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(kind: tv_kind, size: usize) -> tv_hdr {
        let mut h = tv_hdr {
            kind: kind.0 as u16,
            size: size as u16,
            netns: 4026531840,
            ts_ns: 42,
            cookie: 7,
            ..Default::default()
        };
        h.t.family = 2;
        h.t.lport = 40000;
        h.t.rport = 5201;
        h.t.laddr[..4].copy_from_slice(&[10, 0, 0, 1]);
        h.t.raddr[..4].copy_from_slice(&[10, 0, 0, 2]);
        h
    }

    #[test]
    fn decodes_a_sample_with_its_sack_blocks() {
        let mut s = tv_sample { h: hdr(tv_kind::TV_K_SAMPLE, std::mem::size_of::<tv_sample>()), ..Default::default() };
        s.cwnd = 10;
        s.nsack = 2;
        s.sack[..4].copy_from_slice(&[100, 200, 300, 400]);
        s.src = tv_sample_src::TV_SRC_PROBE.0 as u8;
        s.flags = tv_sample_flags::TV_SF_SELECTED.0 as u8;
        let ev = decode(as_bytes(&s)).unwrap();
        assert_eq!(ev.ts_ns, 42);
        assert_eq!(ev.conn.tuple.to_string(), "10.0.0.1:40000-10.0.0.2:5201");
        match ev.body {
            Body::Sample(x) => {
                assert_eq!(x.cwnd, 10);
                assert_eq!(x.sack, vec![(100, 200), (300, 400)]);
                assert!(x.selected);
                assert_eq!(x.src, SampleSrc::Probe);
            }
            other => panic!("not a sample: {other:?}"),
        }
    }

    /// The segment size the black-hole test divides out of seq..end_seq, and the namespace's
    /// tcp_mtu_probing, which the hook writes where the struct had padding.
    #[test]
    fn decodes_a_retransmission_with_its_range_and_the_namespaces_mtu_probing() {
        let mut r =
            tv_retrans { h: hdr(tv_kind::TV_K_RETRANS, std::mem::size_of::<tv_retrans>()), ..Default::default() };
        (r.seq, r.end_seq, r.segs, r.mtu_probing, r.failed) = (1000, 1000 + 2 * 1448, 2, 1, 0);
        match decode(as_bytes(&r)).unwrap().body {
            Body::Retrans(x) => {
                assert_eq!((x.seq, x.end_seq, x.segs), (1000, 3896, 2));
                assert_eq!(x.mtu_probing, Some(1));
                assert!(!x.failed);
            }
            other => panic!("not a retransmission: {other:?}"),
        }
        r.h.kind = tv_kind::TV_K_LOST_RTX.0 as u16;
        r.mtu_probing = 0;
        match decode(as_bytes(&r)).unwrap().body {
            Body::LostRetrans(x) => assert_eq!(x.mtu_probing, Some(0)),
            other => panic!("not a lost retransmission: {other:?}"),
        }
    }

    #[test]
    fn a_snapshot_says_which_buffers_the_application_locked_and_the_namespace_ceilings() {
        let mut s = tv_snap { h: hdr(tv_kind::TV_K_SNAPSHOT, std::mem::size_of::<tv_snap>()), ..Default::default() };
        s.rcvbuf = 131_072;
        s.userlocks = tv_lock_bits::TV_LOCK_RCVBUF.0 as u8;
        s.rmem_max = 6_291_456;
        s.wmem_max = 4_194_304;
        let Body::Snapshot(x) = decode(as_bytes(&s)).unwrap().body else { panic!("not a snapshot") };
        assert!(x.rcvbuf_locked && !x.sndbuf_locked);
        assert_eq!((x.rcvbuf, x.rmem_max, x.wmem_max), (131_072, 6_291_456, 4_194_304));
        s.userlocks = tv_lock_bits::TV_LOCK_SNDBUF.0 as u8;
        let Body::Snapshot(x) = decode(as_bytes(&s)).unwrap().body else { panic!("not a snapshot") };
        assert!(!x.rcvbuf_locked && x.sndbuf_locked);
    }

    #[test]
    fn rejects_wrong_size_short_and_unknown_kind() {
        let s = tv_sample { h: hdr(tv_kind::TV_K_SAMPLE, 100), ..Default::default() };
        assert!(matches!(decode(as_bytes(&s)), Err(DecodeError::Size { .. })));
        let ok = tv_sample { h: hdr(tv_kind::TV_K_SAMPLE, std::mem::size_of::<tv_sample>()), ..Default::default() };
        assert!(matches!(decode(&as_bytes(&ok)[..150]), Err(DecodeError::Truncated { .. })));
        assert!(matches!(decode(&[0u8; 10]), Err(DecodeError::Short(10))));
        let mut h = hdr(tv_kind(99), 64);
        h.kind = 99;
        assert!(matches!(decode(as_bytes(&h)), Err(DecodeError::Kind(99))));
    }
}
