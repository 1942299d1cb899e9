//! What a stop's finding carries: the losses, timeouts and slow delivery seen since delivery was
//! last healthy, and the look at the sender its owner was decided by.
use std::collections::BTreeSet;

use serde_json::json;

use super::config::StopConfig;
use super::conn::Conn;
use crate::detect::owner::StopOwner;
use crate::model::record::{ca_state_name, CA_LOSS};
use crate::model::{Finding, PathTag, Retrans, Rto, StopCause};

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
    /// Observations that showed some (slow) progress, and the bytes they delivered.
    pub acks: u32,
    pub delivered: u64,
    /// When the last timeout or retransmission was seen (what proves data was outstanding then).
    pub last_loss_ns: u64,
}

impl Evidence {
    pub fn saw_cwnd(&mut self, cwnd: u32, ca_state: u8) {
        self.min_cwnd = Some(self.min_cwnd.map_or(cwnd, |m| m.min(cwnd)));
        self.ca_states.insert(ca_state);
    }

    pub fn retransmitted(&mut self, ts: u64, r: &Retrans) {
        self.last_loss_ns = ts;
        self.retrans_segs += r.segs as u64;
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
        self.max_backoff = self.max_backoff.max(r.backoff);
        self.rto_wait_us += r.rto_us as u64;
        self.ca_states.insert(CA_LOSS);
    }
}

impl Conn {
    /// The stop ends at `end`: reported with the owner and cause it had while it lasted.
    pub fn end(&mut self, cfg: &StopConfig, now: u64, start: u64, end: u64, out: &mut Vec<Finding>) {
        let verdict = self.verdict.take().unwrap_or_else(|| self.judge(cfg, false));
        // The evidence gathered since the last tick (a timeout, say) may name the network cause better.
        let verdict = match verdict {
            (StopOwner::Network, _) => (StopOwner::Network, self.network_cause(cfg)),
            v => v,
        };
        out.push(self.finding(now, start, Some(end), verdict));
        self.active = None;
        self.was_receivers = false;
        self.resume = None;
        self.asked = None;
        self.ev = Evidence::default();
    }

    /// The stop from `start`, ended at `end` or in progress at `now`.
    pub fn finding(&self, now: u64, start: u64, end: Option<u64>, v: (StopOwner, StopCause)) -> Finding {
        let e = &self.ev;
        let during = e.delivered;
        let secs = end.unwrap_or(now).saturating_sub(start) as f64 / 1e9;
        let (owner, cause) = v;
        Finding {
            ts_ns: now,
            conn: Some(self.id),
            group: None,
            start_ns: start,
            duration_s: end.map(|_| secs),
            ongoing: end.is_none(),
            cause: cause.into(),
            owner: Some(owner),
            path: PathTag::default(),
            evidence: json!({
                "owner": owner.as_str(),
                "receiver_limited": owner == StopOwner::Receiver,
                "sender_holds": self.hold.evidence(),
                "sender_holds_age_s": now.saturating_sub(self.hold.ts_ns) as f64 / 1e9,
                "srtt_ms": self.srtt_us as f64 / 1e3,
                "rate_before_bps": self.rate_bps,
                "rate_during_bps": if secs > 0.0 { during as f64 / secs } else { 0.0 },
                "bytes_delivered_during": during,
                "rtos": e.rtos,
                "max_backoff": e.max_backoff,
                "rto_wait_s": e.rto_wait_us as f64 / 1e6,
                "lost_retransmits": e.lost_retrans,
                "max_lost_retransmit_delay_s": e.max_lost_delay_ns as f64 / 1e9,
                "retransmitted_segments": e.retrans_segs,
                "retransmissions_per_rtt": if secs > 0.0 && self.srtt_us > 0 {
                    e.retrans_segs as f64 * self.srtt_us as f64 / 1e6 / secs
                } else {
                    0.0
                },
                "min_cwnd": e.min_cwnd,
                "ca_states": e.ca_states.iter().map(|&s| ca_state_name(s)).collect::<Vec<_>>(),
                "acks_during": e.acks,
            }),
        }
    }
}
