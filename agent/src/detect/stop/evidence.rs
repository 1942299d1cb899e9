//! What a stop's finding carries: the losses, timeouts and slow delivery seen since delivery was
//! last healthy, and the look at the sender its owner was decided by.
use std::collections::BTreeSet;

use serde_json::json;

use crate::detect::owner::{Hold, StopOwner};
use crate::model::event::{ca_state_name, CA_LOSS};
use crate::model::{Retrans, Rto};

/// What happened since delivery was last healthy.
#[derive(Debug, Default, Clone)]
pub(super) struct Evidence {
    pub rtos: u32,
    pub max_backoff: u32,
    pub rto_wait_us: u64,
    pub lost_retrans: u32,
    pub max_lost_delay_ns: u64,
    pub retrans_segs: u64,
    pub min_cwnd: Option<u32>,
    pub ca_states: BTreeSet<u8>,
    /// Timeouts that fired before anything was delivered in this stop.
    pub silent_rtos: u32,
    /// Timeouts in a row with nothing acknowledged between them, by the kernel's count at the last.
    pub rtos_in_row: u32,
    /// Observations that showed some (slow) progress, and the bytes they delivered.
    pub acks: u32,
    pub delivered: u64,
    /// When the last timeout or retransmission was seen (what proves data was outstanding then).
    pub last_loss_ns: u64,
    /// The smallest and largest segment retransmitted, payload bytes per segment (0: none).
    pub rtx_seg_min: u32,
    pub rtx_seg_max: u32,
    /// The namespace's net.ipv4.tcp_mtu_probing, from the last retransmission that said.
    pub mtu_probing: Option<u8>,
}

impl Evidence {
    /// Something was sent again since the clock started: a timeout or a retransmission.
    pub fn resent(&self) -> bool {
        self.rtos > 0 || self.retrans_segs > 0
    }

    pub fn saw_cwnd(&mut self, cwnd: u32, ca_state: u8) {
        self.min_cwnd = Some(self.min_cwnd.map_or(cwnd, |m| m.min(cwnd)));
        self.ca_states.insert(ca_state);
    }

    pub fn retransmitted(&mut self, ts: u64, r: &Retrans) {
        self.last_loss_ns = ts;
        self.retrans_segs += r.segs as u64;
        if !r.failed {
            // seq..end_seq also counts a FIN: one byte more at most.
            let per_seg = r.end_seq.wrapping_sub(r.seq) / u32::from(r.segs.max(1));
            if per_seg > 0 {
                self.rtx_seg_min = if self.rtx_seg_min == 0 { per_seg } else { self.rtx_seg_min.min(per_seg) };
                self.rtx_seg_max = self.rtx_seg_max.max(per_seg);
            }
        }
        self.mtu_probing = r.mtu_probing.or(self.mtu_probing);
        if r.lost_retrans {
            self.lost_again(r.since_prev_ns);
        }
        self.saw_cwnd(r.cwnd, r.ca_state);
    }

    /// A retransmission lost again, `since_prev_ns` after the one before it.
    pub fn lost_again(&mut self, since_prev_ns: u64) {
        self.lost_retrans += 1;
        self.max_lost_delay_ns = self.max_lost_delay_ns.max(since_prev_ns);
    }

    pub fn timed_out(&mut self, ts: u64, r: &Rto) {
        self.last_loss_ns = ts;
        self.rtos += 1;
        if self.delivered == 0 {
            self.silent_rtos += 1;
        }
        self.rtos_in_row = r.retransmits + 1;
        self.max_backoff = self.max_backoff.max(r.backoff);
        self.rto_wait_us += r.rto_us as u64;
        self.ca_states.insert(CA_LOSS);
    }

    /// A stop's evidence after `secs` of it: the owner, what the sender held (the look `hold`,
    /// `now`), the connection's srtt and rate before (bytes/s), and what happened since. Rates
    /// leave in bits/s, as every `_bps` field of the events does.
    pub fn json(
        &self,
        owner: StopOwner,
        hold: &Hold,
        now: u64,
        srtt_us: u32,
        rate_before: f64,
        secs: f64,
    ) -> serde_json::Value {
        json!({
            "owner": owner.as_str(),
            "receiver_limited": owner == StopOwner::Receiver,
            "sender_holds": hold.evidence(),
            "sender_holds_age_s": now.saturating_sub(hold.ts_ns) as f64 / 1e9,
            "srtt_ms": srtt_us as f64 / 1e3,
            "rate_before_bps": rate_before * 8.0,
            "rate_during_bps": if secs > 0.0 { self.delivered as f64 * 8.0 / secs } else { 0.0 },
            "bytes_delivered_during": self.delivered,
            "rtos": self.rtos,
            "max_backoff": self.max_backoff,
            "rto_wait_s": self.rto_wait_us as f64 / 1e6,
            "lost_retransmits": self.lost_retrans,
            "max_lost_retransmit_delay_s": self.max_lost_delay_ns as f64 / 1e9,
            "retransmitted_segments": self.retrans_segs,
            "retransmissions_per_rtt": if secs > 0.0 && srtt_us > 0 {
                self.retrans_segs as f64 * srtt_us as f64 / 1e6 / secs
            } else {
                0.0
            },
            "min_cwnd": self.min_cwnd,
            "ca_states": self.ca_states.iter().map(|&s| ca_state_name(s)).collect::<Vec<_>>(),
            "acks_during": self.acks,
        })
    }
}
