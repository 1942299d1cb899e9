//! What loss episodes say in a finding: the mechanism a connection's losses show (a policer, or a
//! queue too short or too long for its path) as a `loss_limited` limit, and what a group's slowest
//! stream's losses show (its own lossy path member, or the queue the streams share), each with its
//! evidence and the advice that follows from it.
use serde_json::{json, Value};

use super::episodes::{Episode, Episodes, Shape, Verdict, TOGETHER_RTT};
use crate::model::Mechanism;

/// A queue below half the path's BDP starves the sender (the rule of thumb is one BDP); reported
/// below 0.4, since the queueing at a loss is read from one packet's RTT and a queue of exactly
/// half a BDP measures a few percent either side of it...
const SHORT_QUEUE_BDP: f64 = 0.4;
/// ... and one above this many BDPs adds more delay than it buys throughput (bufferbloat). Between
/// them losses at a full queue are congestion control doing its job: nothing to report.
const LONG_QUEUE_BDP: f64 = 2.0;

fn ms(us: u32) -> f64 {
    f64::from(us) / 1e3
}

fn mbit(bytes_per_s: f64) -> f64 {
    (bytes_per_s * 8.0 / 1e5).round() / 10.0
}

/// The verdict's numbers, in the units a reader uses.
fn evidence(v: &Verdict) -> Value {
    json!({
        "loss_episodes": v.episodes,
        "queueing_at_loss_ms": ms(v.queueing_us),
        "path_rtt_ms": ms(v.base_us),
        "rate_bps": v.rate_bps * 8.0,
        "flight_at_loss_bytes": v.flight_bytes,
        "flight_cv": v.flight_cv,
    })
}

/// The mechanism, evidence and advice of a connection held back by its losses; None when the
/// episodes name nothing, or name a queue sized within the rule of thumb (healthy congestion).
///
/// `bottleneck_bps`: the highest delivery rate seen (bytes/s), the rate a full queue drains at
/// (the rate just before a loss reads lower when the sender does not fill the link).
pub fn limit(v: &Verdict, bottleneck_bps: f64) -> Option<(Mechanism, Value)> {
    let mut e = evidence(v);
    let rate = mbit(v.rate_bps);
    let drain = v.rate_bps.max(bottleneck_bps);
    let bdp = (drain * f64::from(v.base_us) / 1e6) as u64;
    let advice = match v.mechanism {
        Mechanism::Policer => {
            // What passed before each drop bounds the bucket; the rate the connection got bounds
            // the policer's rate from below (a window sent at line rate is cut at the bucket
            // whatever the contract's rate).
            e["bucket_at_most_bytes"] = v.flight_bytes.into();
            format!(
                "losses at the path's own RTT ({:.1} ms, no queue before them), each time with about {} bytes in flight: a token-bucket policer drops the bursts that exceed its bucket (at most that size), and the connection gets {rate} Mbit/s. Ask for the policer's rate (the contract, the rate limit on the path) and pace the sender just below it, so that no burst outruns the bucket: tc qdisc replace dev IFACE root fq maxrate RATE, or setsockopt SO_MAX_PACING_RATE; or use BBR (net.ipv4.tcp_congestion_control=bbr), which paces at the rate it measures",
                ms(v.base_us),
                v.flight_bytes,
            )
        }
        Mechanism::QueueOverflow => {
            let (q, share) = ((f64::from(v.queueing_us) / 1e6 * drain) as u64, v.queue_bdp());
            let rate = mbit(drain);
            e["queue_bytes"] = q.into();
            e["queue_bdp"] = share.into();
            e["bdp_bytes"] = bdp.into();
            if share < SHORT_QUEUE_BDP {
                format!(
                    "losses after the RTT grew by {:.1} ms: a drop-tail queue of about {q} bytes ({share:.2} of the path's bandwidth-delay product) at about {rate} Mbit/s overflows before the sender fills the link. Give the bottleneck a buffer of about one BDP ({bdp} bytes), or pace the sender below the bottleneck's rate (fq maxrate, or BBR)",
                    ms(v.queueing_us)
                )
            } else if share > LONG_QUEUE_BDP {
                format!(
                    "losses only after the RTT grew by {:.0} ms: a drop-tail queue of about {q} bytes ({share:.1} times the path's bandwidth-delay product) at about {rate} Mbit/s fills before it drops (bufferbloat): every flow through it waits that long. Shorten the bottleneck's queue to about one BDP ({bdp} bytes) or run an AQM there (tc qdisc fq_codel or cake); a sender may use BBR, which keeps the queue short",
                    ms(v.queueing_us)
                )
            } else {
                return None;
            }
        }
        _ => return None,
    };
    e["advice"] = advice.into();
    Some((v.mechanism, e))
}

/// A connection's own losses: at least this many fell alone, ...
const LONE_MIN: usize = 4;
/// ... at least this share of those that could be told apart.
const LONE_SHARE: f64 = 0.66;

/// What a connection's losses show, with evidence and advice: a policer or a badly sized queue
/// (`limit`), or random losses of its own path (a lossy member: most of them fell when no other
/// connection to its remote lost, though some were sending, and not behind a queue). None when
/// unclear or healthy: a connection alone on its path has nothing to be told apart from.
pub fn connection(eps: &Episodes, cookie: u64, bottleneck_bps: f64) -> Option<(Mechanism, Value)> {
    if let Some(v) = eps.verdict(cookie) {
        return limit(&v, bottleneck_bps);
    }
    let (judged, alone) = eps.alone(cookie);
    let queued = alone.iter().filter(|e| e.shape() == Shape::Queued).count();
    let since = judged.first().map_or(u64::MAX, |e| e.at_ns);
    let own = alone.len() >= LONE_MIN
        && eps.peers(cookie, since) > 0
        && alone.len() as f64 >= LONE_SHARE * judged.len() as f64
        && queued as f64 <= QUEUED_AT_MOST * alone.len() as f64;
    if !own {
        return None;
    }
    let flights: Vec<u64> = alone.iter().map(|e| e.flight_bytes).collect();
    let (lo, hi) = (flights.iter().min().copied().unwrap_or(0), flights.iter().max().copied().unwrap_or(0));
    let base = alone.iter().map(|e| e.base_us).max().unwrap_or(0);
    let e = json!({
        "loss_episodes": judged.len(),
        "alone": alone.len(),
        "alone_queued_share": queued as f64 / alone.len() as f64,
        "path_rtt_ms": ms(base),
        "flight_at_loss_bytes": [lo, hi],
        "advice": format!("{} of its {} loss episodes fell when no other connection to the same host lost, at the path's own RTT (no queue before them), with {lo} to {hi} bytes in flight: random loss on this connection's path, not congestion. Check the error counters of the links on its path (ip -s link, ethtool -S, the switches' interface counters); behind an ECMP or LAG bundle one member may be bad: a new source port rehashes the connection onto another. A congestion control that does not back off on random loss (BBR) keeps more of the rate meanwhile", alone.len(), judged.len()),
    });
    Some((Mechanism::LossyMember, e))
}

/// The slow stream's episodes a group verdict needs.
const GROUP_MIN: usize = 4;
/// At most this share of the slow stream's episodes may coincide with another stream's for its
/// losses to be its own; at least `SHARED` for a shared queue.
const ALONE: f64 = 0.34;
const SHARED: f64 = 0.75;
/// Its own losses: most of them not behind a queue (at most this share of those it has alone).
const QUEUED_AT_MOST: f64 = 0.25;

/// What the slowest stream's losses show against the others' (`others`: the group's other
/// streams): a lossy member when they fall alone and without RTT growth, the shared queue when
/// they fall together with the others' after the RTT grew. None when unclear.
pub fn group(eps: &Episodes, slowest: u64, others: &[u64]) -> Option<(Mechanism, Value)> {
    let mine: Vec<&Episode> = eps.of(slowest).filter(|e| !e.first).collect();
    if mine.len() < GROUP_MIN {
        return None;
    }
    let theirs: Vec<&Episode> = others.iter().flat_map(|c| eps.of(*c)).filter(|e| !e.first).collect();
    let rtt_ns = |e: &Episode| u64::from(if e.base_us > 0 { e.base_us } else { e.rtt_us }) * 1000;
    let together = |e: &&Episode| {
        let w = (TOGETHER_RTT * rtt_ns(e) as f64) as u64;
        theirs.iter().any(|o| o.at_ns.abs_diff(e.at_ns) <= w)
    };
    let n = mine.len() as f64;
    let alone: Vec<&&Episode> = mine.iter().filter(|e| !together(e)).collect();
    let shared = 1.0 - alone.len() as f64 / n;
    // Its own losses are judged apart from the ones it shares (a shared queue's, slow start's).
    let queued = alone.iter().filter(|e| e.shape() == Shape::Queued).count() as f64 / alone.len().max(1) as f64;
    let mut e = json!({
        "loss_episodes": mine.len(),
        "others_loss_episodes": theirs.len(),
        "with_others_share": shared,
        "alone_queued_share": queued,
    });
    if shared <= ALONE && queued <= QUEUED_AT_MOST {
        return Some((Mechanism::LossyMember, e));
    }
    let v = super::episodes::verdict(&mine)?;
    e["queueing_at_loss_ms"] = ms(v.queueing_us).into();
    (shared >= SHARED && v.mechanism == Mechanism::QueueOverflow).then_some((Mechanism::QueueOverflow, e))
}

#[cfg(test)]
mod tests;
