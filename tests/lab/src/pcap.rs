//! A small pcap reader for the lab's captures: TCP headers (ports, seq/ack, flags, window, MSS, window scale, SACK, timestamps) over IPv4/IPv6.
use crate::error::{LabError, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// One TCP segment as captured.
#[derive(Debug, Clone, PartialEq)]
pub struct Seg {
    /// Capture time, unix seconds.
    pub t: f64,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    /// TCP flags byte (FIN 0x01, SYN 0x02, RST 0x04, ACK 0x10).
    pub flags: u8,
    /// Raw 16-bit window field (unscaled).
    pub win: u16,
    /// Payload length from the IP header (not the snap length).
    pub len: u32,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack: Vec<(u32, u32)>,
    /// The timestamps option: (TSval, TSecr).
    pub ts: Option<(u32, u32)>,
}

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;

fn u16be(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]))
}
fn u32be(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_be_bytes([*b.get(i)?, *b.get(i + 1)?, *b.get(i + 2)?, *b.get(i + 3)?]))
}

/// Parses the TCP header at `b` (IP payload of `ip_payload_len` bytes).
fn tcp(t: f64, src: IpAddr, dst: IpAddr, b: &[u8], ip_payload_len: usize) -> Option<Seg> {
    let off = usize::from(b.get(12)? >> 4) * 4;
    if off < 20 {
        return None;
    }
    let mut s = Seg {
        t,
        src: SocketAddr::new(src, u16be(b, 0)?),
        dst: SocketAddr::new(dst, u16be(b, 2)?),
        seq: u32be(b, 4)?,
        ack: u32be(b, 8)?,
        flags: *b.get(13)?,
        win: u16be(b, 14)?,
        len: ip_payload_len.saturating_sub(off) as u32,
        mss: None,
        wscale: None,
        sack: Vec::new(),
        ts: None,
    };
    let opts = b.get(20..off.min(b.len())).unwrap_or(&[]);
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let l = usize::from(*opts.get(i + 1)?);
                if l < 2 || i + l > opts.len() {
                    break;
                }
                let v = &opts[i + 2..i + l];
                match kind {
                    2 if l == 4 => s.mss = u16be(v, 0),
                    3 if l == 3 => s.wscale = Some(v[0].min(14)),
                    5 => s.sack = v.chunks_exact(8).filter_map(|c| Some((u32be(c, 0)?, u32be(c, 4)?))).collect(),
                    8 if l == 10 => s.ts = Some((u32be(v, 0)?, u32be(v, 4)?)),
                    _ => {}
                }
                i += l;
            }
        }
    }
    Some(s)
}

/// Parses one IP packet (v4 or v6) carrying TCP; None for anything else.
pub fn ip_packet(t: f64, b: &[u8]) -> Option<Seg> {
    match b.first()? >> 4 {
        4 => {
            let ihl = usize::from(b[0] & 0x0f) * 4;
            if *b.get(9)? != 6 {
                return None;
            }
            let total = usize::from(u16be(b, 2)?);
            let src = Ipv4Addr::new(b[12], b[13], b[14], b[15]);
            let dst = Ipv4Addr::new(*b.get(16)?, b[17], b[18], *b.get(19)?);
            tcp(t, src.into(), dst.into(), b.get(ihl..)?, total.saturating_sub(ihl))
        }
        6 => {
            if *b.get(6)? != 6 {
                return None; // extension headers are not used in the lab
            }
            let plen = usize::from(u16be(b, 4)?);
            let a: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            let d: [u8; 16] = b.get(24..40)?.try_into().ok()?;
            tcp(t, Ipv6Addr::from(a).into(), Ipv6Addr::from(d).into(), b.get(40..)?, plen)
        }
        _ => None,
    }
}

/// Every TCP segment of a classic pcap file's bytes (Ethernet, Linux cooked v1/v2 or raw IP links).
pub fn parse(data: &[u8]) -> Result<Vec<Seg>> {
    let bad = |m: &str| LabError::Invalid(format!("pcap: {m}"));
    let magic = data.get(0..4).ok_or_else(|| bad("shorter than its header"))?;
    let (le, nano) = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] => (true, false),
        [0xa1, 0xb2, 0xc3, 0xd4] => (false, false),
        [0x4d, 0x3c, 0xb2, 0xa1] => (true, true),
        [0xa1, 0xb2, 0x3c, 0x4d] => (false, true),
        _ => return Err(bad("not a classic pcap file (pcapng is not read)")),
    };
    let rd = |i: usize| -> Option<u32> {
        let x: [u8; 4] = data.get(i..i + 4)?.try_into().ok()?;
        Some(if le { u32::from_le_bytes(x) } else { u32::from_be_bytes(x) })
    };
    let link = rd(20).ok_or_else(|| bad("truncated header"))?;
    let l2 = |p: &[u8]| -> Option<usize> {
        match link {
            1 => {
                let mut off = 12;
                let mut et = u16be(p, off)?;
                while et == 0x8100 || et == 0x88a8 {
                    off += 4;
                    et = u16be(p, off)?;
                }
                (et == 0x0800 || et == 0x86dd).then_some(off + 2)
            }
            113 => Some(16),
            276 => Some(20),
            101 | 12 | 14 => Some(0),
            _ => None,
        }
    };
    if ![1, 113, 276, 101, 12, 14].contains(&link) {
        return Err(bad(&format!("link type {link} is not read")));
    }
    let mut out = Vec::new();
    let mut i = 24;
    while let (Some(sec), Some(frac), Some(incl)) = (rd(i), rd(i + 4), rd(i + 8)) {
        let start = i + 16;
        let end = start + incl as usize;
        let Some(p) = data.get(start..end) else { break }; // a capture cut short by its writer's end
        let t = f64::from(sec) + f64::from(frac) / if nano { 1e9 } else { 1e6 };
        if let Some(seg) = l2(p).and_then(|o| p.get(o..)).and_then(|ip| ip_packet(t, ip)) {
            out.push(seg);
        }
        i = end;
    }
    Ok(out)
}

/// Reads and parses a pcap file.
pub fn read(path: &std::path::Path) -> Result<Vec<Seg>> {
    let data = std::fs::read(path).map_err(|e| LabError::io(format!("read {}", path.display()), e))?;
    parse(&data)
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// An Ethernet+IPv4+TCP frame with the given fields and options, for tests here and in `stalls`.
    pub fn frame(
        src: [u8; 4],
        dst: [u8; 4],
        ports: (u16, u16),
        seq: u32,
        ack: u32,
        flags: u8,
        win: u16,
        opts: &[u8],
        payload: usize,
    ) -> Vec<u8> {
        let mut tcp = Vec::new();
        tcp.extend(ports.0.to_be_bytes());
        tcp.extend(ports.1.to_be_bytes());
        tcp.extend(seq.to_be_bytes());
        tcp.extend(ack.to_be_bytes());
        let hl = 20 + opts.len();
        tcp.push(((hl / 4) as u8) << 4);
        tcp.push(flags);
        tcp.extend(win.to_be_bytes());
        tcp.extend([0, 0, 0, 0]);
        tcp.extend(opts);
        let total = 20 + hl + payload;
        let mut f = vec![0u8; 12];
        f.extend([0x08, 0x00]);
        f.extend([0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0, 0, 64, 6, 0, 0]);
        f.extend(src);
        f.extend(dst);
        f.extend(tcp);
        f // payload itself is not captured (snap length), as with tcpdump -s 128
    }

    pub fn pcap(frames: &[(f64, Vec<u8>)]) -> Vec<u8> {
        let mut d = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        d.extend([0u8; 8]);
        d.extend(128u32.to_le_bytes());
        d.extend(1u32.to_le_bytes());
        for (t, f) in frames {
            d.extend((t.floor() as u32).to_le_bytes());
            d.extend((((t - t.floor()) * 1e6).round() as u32).to_le_bytes());
            d.extend((f.len() as u32).to_le_bytes());
            d.extend((f.len() as u32 + 1000).to_le_bytes());
            d.extend(f);
        }
        d
    }

    #[test]
    fn a_syn_with_options_and_a_data_segment_are_read() {
        // MSS 1460, NOP, WS 7, SACK blocks on the second, timestamps on the third.
        let syn = frame([10, 0, 0, 1], [10, 0, 0, 2], (4000, 80), 100, 0, SYN, 64240, &[2, 4, 5, 180, 1, 3, 3, 7], 0);
        let sack = [1, 1, 5, 10, 0, 0, 0, 10, 0, 0, 0, 20];
        let data = frame([10, 0, 0, 2], [10, 0, 0, 1], (80, 4000), 7, 101, ACK, 500, &sack, 1448);
        let ts = [1, 1, 8, 10, 0, 0, 1, 0, 0, 0, 0, 9];
        let stamped = frame([10, 0, 0, 1], [10, 0, 0, 2], (4000, 80), 101, 1455, ACK, 500, &ts, 0);
        let segs = parse(&pcap(&[(1.5, syn), (2.25, data), (2.5, stamped)])).unwrap();
        assert_eq!(segs.len(), 3);
        assert_eq!((segs[0].ts, segs[2].ts), (None, Some((256, 9))));
        assert_eq!(segs[0].mss, Some(1460));
        assert_eq!(segs[0].wscale, Some(7));
        assert_eq!(segs[0].flags, SYN);
        assert_eq!(segs[0].src, "10.0.0.1:4000".parse().unwrap());
        assert!((segs[1].t - 2.25).abs() < 1e-6);
        assert_eq!((segs[1].seq, segs[1].ack, segs[1].win, segs[1].len), (7, 101, 500, 1448));
        assert_eq!(segs[1].sack, vec![(10, 20)]);
    }

    #[test]
    fn garbage_is_a_clear_error_and_a_cut_record_ends_the_read() {
        assert!(parse(b"not a pcap").is_err());
        let f = frame([10, 0, 0, 1], [10, 0, 0, 2], (1, 2), 0, 0, ACK, 1, &[], 0);
        let mut d = pcap(&[(1.0, f.clone()), (2.0, f)]);
        d.truncate(d.len() - 5);
        assert_eq!(parse(&d).unwrap().len(), 1);
    }

    #[test]
    fn ipv6_tcp_is_read() {
        let mut ip = vec![0x60, 0, 0, 0, 0, 20, 6, 64];
        ip.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        ip.extend([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        let t = frame([0; 4], [0; 4], (5, 6), 9, 10, ACK, 77, &[], 0);
        ip.extend(&t[34..]);
        let s = ip_packet(3.0, &ip).unwrap();
        assert_eq!(s.src, "[fd00::1]:5".parse().unwrap());
        assert_eq!((s.seq, s.win, s.len), (9, 77, 0));
    }
}
