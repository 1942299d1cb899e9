//! Compact storage for the recorder's samples: chunks of delta + zigzag + varint encoded samples
//! (about a quarter of a `Sample`'s size), dropped whole from the front.
use std::collections::VecDeque;
use std::mem::size_of;

use crate::model::event::SampleSrc;
use crate::model::Sample;

const N: usize = 20;
/// A chunk is closed once it holds this many bytes.
pub const CHUNK_BYTES: usize = 4096;
/// At most this many SACK blocks are kept per sample (an ACK carries at most 4).
const MAX_SACK: usize = 7; // three bits of the flags byte; bit 7 is `drained`

fn fields(s: &Sample) -> [u32; N] {
    [
        s.ack_seq,
        s.snd_una,
        s.snd_nxt,
        s.high_seq,
        s.cwnd,
        s.ssthresh,
        s.packets_out,
        s.lost_out,
        s.sacked_out,
        s.retrans_out,
        s.in_flight,
        s.srtt_us,
        s.rto_us,
        s.mss,
        s.delivered,
        s.total_retrans,
        s.snd_wnd,
        s.write_queue,
        s.rate_delivered,
        s.rate_interval_us,
    ]
}

/// What the next sample is encoded against.
#[derive(Debug, Clone, Copy, Default)]
struct Prev {
    ts: u64,
    f: [u32; N],
    acked: u64,
}

fn put(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn get(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

fn zz32(d: u32) -> u64 {
    let d = d as i32;
    ((d << 1) ^ (d >> 31)) as u32 as u64
}

fn unzz32(v: u64) -> u32 {
    let v = v as u32;
    ((v >> 1) as i32 ^ -((v & 1) as i32)) as u32
}

fn zz64(d: u64) -> u64 {
    let d = d as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzz64(v: u64) -> u64 {
    ((v >> 1) as i64 ^ -((v & 1) as i64)) as u64
}

fn src_code(s: SampleSrc) -> u8 {
    match s {
        SampleSrc::Sacktag => 0,
        SampleSrc::Probe => 1,
        SampleSrc::Flush => 2,
    }
}

fn src_of(c: u8) -> SampleSrc {
    match c {
        0 => SampleSrc::Sacktag,
        1 => SampleSrc::Probe,
        _ => SampleSrc::Flush,
    }
}

#[derive(Debug)]
struct Chunk {
    first_ts: u64,
    last_ts: u64,
    count: u32,
    last: Prev,
    buf: Vec<u8>,
}

impl Chunk {
    fn push(&mut self, ts: u64, s: &Sample) {
        let p = self.last;
        let buf = &mut self.buf;
        put(buf, zz64(ts.wrapping_sub(p.ts)));
        let nsack = s.sack.len().min(MAX_SACK);
        buf.push(
            src_code(s.src)
                | (s.selected as u8) << 2
                | (s.dsack as u8) << 3
                | (nsack as u8) << 4
                | (s.drained as u8) << 7,
        );
        // CA states are 0-4: the top bit of their byte says the sample starts a round.
        buf.push(s.ca_state & 0x7f | (s.round as u8) << 7);
        let f = fields(s);
        for (now, prev) in f.iter().zip(p.f) {
            put(buf, zz32(now.wrapping_sub(prev)));
        }
        put(buf, zz64(s.bytes_acked.wrapping_sub(p.acked)));
        for &(a, b) in s.sack.iter().take(nsack) {
            put(buf, zz32(a.wrapping_sub(s.snd_una)));
            put(buf, b.wrapping_sub(a) as u64);
        }
        self.last = Prev { ts, f, acked: s.bytes_acked };
        self.last_ts = ts;
        self.count += 1;
    }

    /// Decode every sample; a corrupt tail (impossible unless memory is) ends the chunk.
    fn decode(&self, out: &mut Vec<(u64, Sample)>) {
        let (buf, mut pos, mut p) = (&self.buf[..], 0usize, Prev::default());
        while pos < buf.len() {
            let Some(s) = Self::one(buf, &mut pos, &mut p) else { return };
            out.push((p.ts, s));
        }
    }

    fn one(buf: &[u8], pos: &mut usize, p: &mut Prev) -> Option<Sample> {
        let ts = p.ts.wrapping_add(unzz64(get(buf, pos)?));
        let flags = *buf.get(*pos)?;
        let ca_byte = *buf.get(*pos + 1)?;
        let (ca_state, round) = (ca_byte & 0x7f, ca_byte & 0x80 != 0);
        *pos += 2;
        let mut f = [0u32; N];
        for (v, prev) in f.iter_mut().zip(p.f) {
            *v = prev.wrapping_add(unzz32(get(buf, pos)?));
        }
        let acked = p.acked.wrapping_add(unzz64(get(buf, pos)?));
        let mut sack = Vec::with_capacity(((flags >> 4) & 7) as usize);
        for _ in 0..(flags >> 4) & 7 {
            let a = f[1].wrapping_add(unzz32(get(buf, pos)?));
            let b = a.wrapping_add(get(buf, pos)? as u32);
            sack.push((a, b));
        }
        *p = Prev { ts, f, acked };
        Some(Sample {
            src: src_of(flags & 3),
            selected: flags & 4 != 0,
            ack_seq: f[0],
            snd_una: f[1],
            snd_nxt: f[2],
            high_seq: f[3],
            cwnd: f[4],
            ssthresh: f[5],
            packets_out: f[6],
            lost_out: f[7],
            sacked_out: f[8],
            retrans_out: f[9],
            in_flight: f[10],
            ca_state,
            srtt_us: f[11],
            rto_us: f[12],
            mss: f[13],
            delivered: f[14],
            total_retrans: f[15],
            snd_wnd: f[16],
            write_queue: f[17],
            rate_delivered: f[18],
            rate_interval_us: f[19],
            bytes_acked: acked,
            sack,
            dsack: flags & 8 != 0,
            drained: flags & 0x80 != 0,
            round,
        })
    }

    fn bytes(&self) -> usize {
        size_of::<Chunk>() + self.buf.capacity()
    }
}

/// One connection's samples, oldest first.
#[derive(Debug, Default)]
pub struct SampleLog {
    chunks: VecDeque<Chunk>,
    bytes: usize,
}

impl SampleLog {
    pub fn push(&mut self, ts: u64, s: &Sample) {
        let full = self.chunks.back().is_none_or(|c| c.buf.len() >= CHUNK_BYTES);
        if full {
            let c = Chunk {
                first_ts: ts,
                last_ts: ts,
                count: 0,
                last: Prev::default(),
                buf: Vec::with_capacity(CHUNK_BYTES + 512),
            };
            self.bytes += c.bytes();
            self.chunks.push_back(c);
        }
        if let Some(c) = self.chunks.back_mut() {
            let before = c.bytes();
            c.push(ts, s);
            self.bytes = self.bytes + c.bytes() - before;
        }
    }

    /// Bytes held, chunk headers and whole buffer capacities included.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.count as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Time of the oldest sample.
    pub fn first_ts(&self) -> Option<u64> {
        self.chunks.front().map(|c| c.first_ts)
    }

    /// Newest sample time of the oldest chunk: dropping it loses nothing newer.
    pub fn oldest_chunk_end(&self) -> Option<u64> {
        self.chunks.front().map(|c| c.last_ts)
    }

    /// Drop the oldest chunk; returns how many samples went.
    pub fn pop_front(&mut self) -> usize {
        match self.chunks.pop_front() {
            Some(c) => {
                self.bytes -= c.bytes();
                c.count as usize
            }
            None => 0,
        }
    }

    /// Samples with `from <= ts <= until`, in order.
    pub fn window(&self, from: u64, until: u64, out: &mut Vec<(u64, Sample)>) {
        let mut all = Vec::new();
        for c in self.chunks.iter().filter(|c| c.last_ts >= from && c.first_ts <= until) {
            c.decode(&mut all);
            out.extend(all.drain(..).filter(|(t, _)| *t >= from && *t <= until));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Body;
    use crate::plot::synth;

    #[test]
    fn varints_and_zigzag_round_trip_at_the_edges() {
        for v in [0u32, 1, 0x7f, 0x80, u32::MAX, 1 << 31] {
            assert_eq!(unzz32(zz32(v)), v);
        }
        for v in [0u64, 1, u64::MAX, 1 << 63, 12345678901234] {
            assert_eq!(unzz64(zz64(v)), v);
            let mut b = Vec::new();
            put(&mut b, v);
            assert_eq!(get(&b, &mut 0), Some(v));
        }
    }

    #[test]
    fn every_sample_of_the_outage_decodes_to_itself() {
        let (rec, _) = synth::outage();
        let mut log = SampleLog::default();
        let want: Vec<(u64, Sample)> = rec
            .events
            .iter()
            .filter_map(|e| match &e.body {
                Body::Sample(s) => Some((e.ts_ns, s.clone())),
                _ => None,
            })
            .enumerate()
            .map(|(i, (t, mut s))| {
                // Round starts and drained ACKs among them, in every CA state.
                s.round = i % 7 == 0;
                s.drained |= i % 11 == 0;
                (t, s)
            })
            .collect();
        assert!(want.iter().any(|(_, s)| s.round && s.ca_state > 0), "a round start in Recovery");
        for (t, s) in &want {
            log.push(*t, s);
        }
        let mut got = Vec::new();
        log.window(0, u64::MAX, &mut got);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "decoded samples differ");
        let mid = want[want.len() / 2].0;
        got.clear();
        log.window(mid, mid + 100_000_000, &mut got);
        assert!(!got.is_empty() && got.iter().all(|(t, _)| *t >= mid && *t <= mid + 100_000_000));
    }
}
