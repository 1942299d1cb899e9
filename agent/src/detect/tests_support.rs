//! A healthy bulk sample, for the tests of every detector.
use crate::model::event::{Sample, SampleSrc};

/// A bulk sample with `acked` bytes acknowledged and otherwise healthy numbers.
pub fn sample(acked: u64) -> Sample {
    Sample {
        src: SampleSrc::Probe,
        selected: false,
        ack_seq: 0,
        snd_una: 0,
        snd_nxt: 0,
        high_seq: 0,
        cwnd: 80,
        ssthresh: 100,
        packets_out: 50,
        lost_out: 0,
        sacked_out: 0,
        retrans_out: 0,
        in_flight: 50,
        ca_state: 0,
        srtt_us: 20_000,
        rto_us: 220_000,
        mss: 1448,
        delivered: 0,
        total_retrans: 0,
        snd_wnd: 1 << 20,
        write_queue: 1 << 20,
        rate_delivered: 100,
        rate_interval_us: 10_000,
        bytes_acked: acked,
        sack: vec![],
        dsack: false,
        drained: false,
        round: false,
    }
}
