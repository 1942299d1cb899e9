//! Kernel events: what one ring-buffer or iterator record says about a connection, decoded, as
//! plain serde data (a recording file holds one per line).
use serde::{Deserialize, Serialize};

use super::conn::{ConnId, Process};

/// One kernel event about one connection at one time (CLOCK_MONOTONIC nanoseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub ts_ns: u64,
    pub conn: ConnId,
    #[serde(flatten)]
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Body {
    /// Scoreboard after an ACK was processed.
    Sample(Sample),
    /// One retransmitted skb.
    Retrans(Retrans),
    /// A retransmission marked lost again (exact variant only).
    LostRetrans(Retrans),
    CaState(CaState),
    Rto(Rto),
    State(StateChange),
    /// Iterator snapshot of a live connection.
    Snapshot(Snap),
    /// Final counters when the socket is destroyed.
    Close(Snap),
    /// The process the socket belongs to (named `owner` in recording files).
    #[serde(rename = "owner")]
    Process(Process),
}

/// Where a sample was taken in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleSrc {
    /// Exit of tcp_sacktag_write_queue (preferred, exact).
    Sacktag,
    /// tcp_probe joined with the next ACK: state after the ACK was fully processed.
    Probe,
    /// A pending ACK flushed because no further ACK came: the connection went quiet (a snapshot) or
    /// left ESTABLISHED.
    Flush,
}

/// The paper-000 figure-6 state. Segment counts are in segments, sequence numbers raw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub src: SampleSrc,
    /// Per-ACK sample of a user-selected connection (else a periodic bulk sample).
    pub selected: bool,
    pub ack_seq: u32,
    pub snd_una: u32,
    pub snd_nxt: u32,
    pub high_seq: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub packets_out: u32,
    pub lost_out: u32,
    pub sacked_out: u32,
    pub retrans_out: u32,
    pub in_flight: u32,
    pub ca_state: u8,
    pub srtt_us: u32,
    pub rto_us: u32,
    pub mss: u32,
    pub delivered: u32,
    pub total_retrans: u32,
    pub snd_wnd: u32,
    /// write_seq - snd_una: bytes queued or in flight.
    pub write_queue: u32,
    pub rate_delivered: u32,
    pub rate_interval_us: u32,
    pub bytes_acked: u64,
    /// The ACK's SACK blocks (start, end), in the order the ACK carried them.
    pub sack: Vec<(u32, u32)>,
    pub dsack: bool,
    /// The ACK acknowledged everything sent: the state it leaves, reported before the kernel
    /// processed it (`snd_wnd` is the window this ACK advertises).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drained: bool,
    /// The ACK started a new round (it acknowledged what was sent when the last one began):
    /// reported at once for members of a bulk group, its time is the stream's send phase.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub round: bool,
}

impl Sample {
    /// The kernel's delivery-rate estimate in bytes per second (0 when unknown).
    pub fn delivery_rate_bps(&self) -> f64 {
        delivery_rate(self.rate_delivered, self.rate_interval_us, self.mss)
    }
}

pub fn delivery_rate(delivered: u32, interval_us: u32, mss: u32) -> f64 {
    if interval_us == 0 {
        return 0.0;
    }
    delivered as f64 * mss as f64 * 1e6 / interval_us as f64
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Retrans {
    pub seq: u32,
    pub end_seq: u32,
    /// Segments in the skb (what TcpRetransSegs counts).
    pub segs: u16,
    /// TCP_SKB_CB()->sacked bits at the hook.
    pub sacked: u8,
    pub ca_state: u8,
    /// Times this sequence was retransmitted, this one included.
    pub count: u32,
    /// Since this sequence was last retransmitted, 0 on the first.
    pub since_prev_ns: u64,
    /// An earlier retransmission of this segment was lost.
    pub lost_retrans: bool,
    /// The attempt failed in this host (counted by TcpRetransSegs, never sent; no skb bits).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub packets_out: u32,
    pub lost_out: u32,
    pub sacked_out: u32,
    pub retrans_out: u32,
    pub snd_una: u32,
    /// The namespace's net.ipv4.tcp_mtu_probing at the hook (absent in older recordings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu_probing: Option<u8>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaState {
    pub old: u8,
    pub new: u8,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub high_seq: u32,
    pub snd_una: u32,
    pub snd_nxt: u32,
    pub packets_out: u32,
    pub lost_out: u32,
    pub sacked_out: u32,
    pub retrans_out: u32,
    /// The RTT where the change happened (µs; 0 in older recordings): srtt, the RTT of the last
    /// packet (s)acknowledged (RACK's; entering Recovery, a packet sent just after the loss) and
    /// the windowed minimum.
    #[serde(default)]
    pub srtt_us: u32,
    #[serde(default)]
    pub rack_rtt_us: u32,
    #[serde(default)]
    pub min_rtt_us: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rto {
    /// Consecutive timeouts before this one (icsk_retransmits).
    pub retransmits: u32,
    /// The timeout that expired, microseconds.
    pub rto_us: u32,
    pub backoff: u32,
    pub cwnd: u32,
    pub snd_una: u32,
    pub snd_nxt: u32,
    pub packets_out: u32,
    /// Retransmissions in flight when the timer fired: the timeout marks them lost (counted by the
    /// kernel as lost retransmissions) and the cumulative ACK after it may cover them before any resend.
    #[serde(default)]
    pub retrans_out: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateChange {
    pub old: u8,
    pub new: u8,
}

/// Negotiated options of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Options {
    pub sack: bool,
    pub wscale: bool,
    pub timestamps: bool,
    pub ecn: bool,
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
}

/// What only a snapshot gives: queues, chrono stats, options, totals.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Snap {
    pub state: u8,
    pub ca_state: u8,
    pub options: Options,
    pub app_limited: bool,
    pub chrono_type: u8,
    /// The armed timer (icsk_pending): 1 retransmit, 2 delayed ACK, 3 zero-window probe, 5 loss probe.
    #[serde(default)]
    pub timer: u8,
    /// Zero-window (or keepalive) probes sent and not answered.
    #[serde(default)]
    pub probes_out: u32,
    pub cc: String,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_us: u32,
    pub min_rtt_us: u32,
    pub rto_us: u32,
    pub mss: u32,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    pub packets_out: u32,
    pub lost_out: u32,
    pub sacked_out: u32,
    pub retrans_out: u32,
    pub write_queue: u32,
    pub unsent: u32,
    pub recv_queue: u32,
    pub sndbuf: u32,
    pub rcvbuf: u32,
    /// The application fixed the buffer with setsockopt (SO_RCVBUF / SO_SNDBUF): no autotuning.
    #[serde(default)]
    pub rcvbuf_locked: bool,
    #[serde(default)]
    pub sndbuf_locked: bool,
    /// The ceilings autotuning stops at in the socket's network namespace (net.ipv4.tcp_rmem and
    /// tcp_wmem maximum; 0 unknown).
    #[serde(default)]
    pub rmem_max: u32,
    #[serde(default)]
    pub wmem_max: u32,
    pub delivered: u32,
    pub total_retrans: u32,
    pub rate_delivered: u32,
    pub rate_interval_us: u32,
    pub retransmits: u32,
    pub backoff: u32,
    pub total_rto: u32,
    pub total_rto_time_ms: u32,
    pub snd_una: u32,
    pub snd_nxt: u32,
    /// The agent's own per-socket counts.
    pub lost_rtx: u32,
    pub rtos: u32,
    pub retrans_segs: u32,
    /// Microseconds since the last ACK arrived (kernel jiffies granularity).
    #[serde(default)]
    pub last_ack_age_us: u32,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    #[serde(rename = "owner")]
    pub process: Process,
}

impl Snap {
    pub fn delivery_rate_bps(&self) -> f64 {
        delivery_rate(self.rate_delivered, self.rate_interval_us, self.mss)
    }
}

/// CA state names as the kernel's enum tcp_ca_state has them.
pub fn ca_state_name(s: u8) -> &'static str {
    match s {
        0 => "Open",
        1 => "Disorder",
        2 => "CWR",
        3 => "Recovery",
        4 => "Loss",
        _ => "?",
    }
}

pub const CA_RECOVERY: u8 = 3;
pub const CA_LOSS: u8 = 4;
