//! Unfair parallel streams: group the streams of one transfer, compare their goodput, flag persistence.
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::IpAddr;

use ipnet::IpNet;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::episodes::Episodes;
use super::loss;
use super::phase::{self, StreamRounds};
use super::DetectConfigError;
use crate::model::units::jain;
use crate::model::{Body, Cause, ConnEntry, ConnId, ConnTable, Event, Finding, Mechanism, PathTag};

/// What two streams must share to belong to one transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupField {
    Pid,
    Comm,
    Cgroup,
    RemoteIp,
    RemotePort,
    LocalPort,
    Netns,
}

/// A rule that, for matching connections, replaces the default key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupRule {
    /// Remote address prefix, e.g. "10.20.0.0/16".
    pub remote_cidr: Option<String>,
    /// Inclusive remote port range, e.g. [5201, 5210].
    pub remote_ports: Option<(u16, u16)>,
    pub comm: Option<String>,
    pub key: Vec<GroupField>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FairnessConfig {
    /// Default group key: same process and same remote host.
    pub key: Vec<GroupField>,
    pub rules: Vec<GroupRule>,
    /// Goodput is compared over this window (seconds).
    pub window_s: f64,
    /// Unfair when Jain's index is below this ...
    pub jain_below: f64,
    /// ... or slowest/fastest below this,
    pub ratio_below: f64,
    /// ... for at least this long (seconds).
    pub persist_s: f64,
    /// Streams count once they have this many bytes acked.
    pub min_bytes: u64,
    /// The send phase (each stream's rounds reported by the kernel) on paths of at least this
    /// RTT; 0 turns it off. Below a few ms a round is a few ACKs and its record costs more than
    /// the phase tells.
    pub phase_min_rtt_ms: f64,
}

impl Default for FairnessConfig {
    fn default() -> Self {
        FairnessConfig {
            key: vec![GroupField::Pid, GroupField::RemoteIp],
            rules: vec![],
            window_s: 2.0,
            jain_below: 0.9,
            ratio_below: 0.5,
            persist_s: 4.0,
            phase_min_rtt_ms: 5.0,
            min_bytes: 1 << 20,
        }
    }
}

impl FairnessConfig {
    pub fn validate(&self) -> Result<(), DetectConfigError> {
        if !(0.1..=600.0).contains(&self.window_s)
            || !(0.0..=1.0).contains(&self.jain_below)
            || !(0.0..=1.0).contains(&self.ratio_below)
            || !(0.0..=10_000.0).contains(&self.phase_min_rtt_ms)
        {
            return Err(DetectConfigError::FairnessRange);
        }
        for r in &self.rules {
            if let Some(c) = &r.remote_cidr {
                parse_cidr(c).ok_or_else(|| DetectConfigError::RemoteCidr(c.clone()))?;
            }
        }
        Ok(())
    }
}

fn parse_cidr(s: &str) -> Option<IpNet> {
    s.parse().ok()
}

/// An IPv4 peer seen through an IPv6 socket (`::ffff:a.b.c.d`) matches an IPv4 prefix.
fn in_cidr(ip: IpAddr, net: IpNet) -> bool {
    net.contains(&ip.to_canonical())
}

/// The group a connection belongs to.
pub fn group_key(cfg: &FairnessConfig, e: &ConnEntry) -> String {
    let t = e.id.tuple;
    let process = e.process.clone().unwrap_or_default();
    let key = cfg
        .rules
        .iter()
        .find(|r| {
            r.remote_cidr.as_deref().and_then(parse_cidr).is_none_or(|c| in_cidr(t.remote.ip(), c))
                && r.remote_ports.is_none_or(|(a, b)| (a..=b).contains(&t.remote.port()))
                && r.comm.as_ref().is_none_or(|c| *c == process.comm)
        })
        .map(|r| &r.key)
        .unwrap_or(&cfg.key);
    key.iter()
        .map(|f| match f {
            GroupField::Pid => format!("pid={}", process.pid),
            GroupField::Comm => format!("comm={}", process.comm),
            GroupField::Cgroup => format!("cgroup={}", process.cgroup_id),
            GroupField::RemoteIp => format!("remote={}", t.remote.ip().to_canonical()),
            GroupField::RemotePort => format!("rport={}", t.remote.port()),
            GroupField::LocalPort => format!("lport={}", t.local.port()),
            GroupField::Netns => format!("netns={}", e.id.netns),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Retransmitted bytes per byte sent over the connection's life (from its last snapshot).
fn retrans_ratio(e: &ConnEntry) -> f64 {
    e.snap.as_ref().filter(|s| s.bytes_sent > 0).map_or(0.0, |s| s.bytes_retrans as f64 / s.bytes_sent as f64)
}

#[derive(Default)]
struct GroupState {
    unfair_since: Option<u64>,
    fair_since: Option<u64>,
    reported: Option<u64>,
    /// First time each stream fell below half the group mean.
    behind_since: HashMap<u64, u64>,
    /// The slowest stream at the last evaluation (named when the group ends with its streams).
    slowest: Option<ConnId>,
    /// While the group is reported, the evidence of its last evaluation (streams, shares, index),
    /// carried by the finding that ends it when its streams close, with its mechanism.
    last_evidence: Option<(serde_json::Value, Option<Mechanism>)>,
}

/// Groups are evaluated this often.
const EVAL_EVERY_NS: u64 = 500_000_000;
/// Round starts kept per stream: the last 64 cycles of the send phase and some slack.
const ROUNDS_KEPT: usize = 96;
/// Recovery/Loss entries kept per stream, for who loses first.
const LOSSES_KEPT: usize = 32;

pub struct FairnessDetector {
    cfg: FairnessConfig,
    hist: HashMap<u64, VecDeque<(u64, u64)>>,
    groups: HashMap<String, GroupState>,
    last_eval: u64,
    /// Round starts (the kernel reports them for members of a bulk group only).
    rounds: HashMap<u64, VecDeque<u64>>,
    /// When each stream entered Recovery or Loss.
    losses: HashMap<u64, VecDeque<u64>>,
    /// Streams in a group of two or more at the last evaluation, and whether that changed.
    members: HashSet<u64>,
    members_changed: bool,
    /// Streams that were members once: their losses are judged with their group's.
    grouped: HashSet<u64>,
}

impl FairnessDetector {
    pub fn new(cfg: FairnessConfig) -> Self {
        FairnessDetector {
            cfg,
            hist: HashMap::new(),
            groups: HashMap::new(),
            last_eval: 0,
            rounds: HashMap::new(),
            losses: HashMap::new(),
            members: HashSet::new(),
            members_changed: false,
            grouped: HashSet::new(),
        }
    }

    /// New settings from the next evaluation on (a reload); groups whose key changes end there.
    pub fn set_config(&mut self, cfg: FairnessConfig) {
        self.members_changed |= cfg.phase_min_rtt_ms != self.cfg.phase_min_rtt_ms;
        self.cfg = cfg;
    }

    /// The streams whose rounds the kernel should report (members of groups of two or more), when
    /// they changed since the last call; none when the send phase is off.
    pub fn phase_members(&mut self) -> Option<HashSet<u64>> {
        let on = self.cfg.phase_min_rtt_ms > 0.0;
        std::mem::take(&mut self.members_changed).then(|| if on { self.members.clone() } else { HashSet::new() })
    }

    /// Whether the stream was ever in a group of two or more (until it closes).
    pub fn in_group(&self, cookie: u64) -> bool {
        self.grouped.contains(&cookie)
    }

    /// The shortest srtt (µs) whose rounds are reported.
    pub fn phase_min_srtt_us(&self) -> u32 {
        (self.cfg.phase_min_rtt_ms * 1000.0) as u32
    }

    fn keep(q: &mut VecDeque<u64>, t: u64, cap: usize) {
        if q.back().is_none_or(|&b| b < t) {
            q.push_back(t);
        }
        while q.len() > cap {
            q.pop_front();
        }
    }

    pub fn observe(&mut self, ev: &Event, _table: &ConnTable) {
        let acked = match &ev.body {
            Body::Sample(s) => {
                if s.round {
                    Self::keep(self.rounds.entry(ev.conn.cookie).or_default(), ev.ts_ns, ROUNDS_KEPT);
                }
                s.bytes_acked
            }
            Body::Snapshot(s) => s.bytes_acked,
            Body::CaState(c) => {
                // Entering Recovery (3) or Loss (4) from an open state.
                if c.new >= 3 && c.old < 3 {
                    Self::keep(self.losses.entry(ev.conn.cookie).or_default(), ev.ts_ns, LOSSES_KEPT);
                }
                return;
            }
            Body::Close(_) => {
                self.hist.remove(&ev.conn.cookie);
                self.rounds.remove(&ev.conn.cookie);
                self.losses.remove(&ev.conn.cookie);
                self.grouped.remove(&ev.conn.cookie);
                return;
            }
            _ => return,
        };
        let h = self.hist.entry(ev.conn.cookie).or_default();
        if h.back().is_some_and(|&(t, _)| t >= ev.ts_ns) {
            return;
        }
        h.push_back((ev.ts_ns, acked));
        let keep = (self.cfg.window_s * 2e9) as u64 + 1_000_000_000;
        while h.front().is_some_and(|&(t, _)| t + keep < ev.ts_ns) {
            h.pop_front();
        }
    }

    /// Goodput over the window ending at `now` (bytes/s), if the stream spans it.
    fn goodput(&self, cookie: u64, now: u64) -> Option<f64> {
        let h = self.hist.get(&cookie)?;
        let w = (self.cfg.window_s * 1e9) as u64;
        let &(t1, a1) = h.back()?;
        if now.saturating_sub(t1) > w {
            return Some(0.0);
        }
        let &(t0, a0) = h.iter().rev().find(|&&(t, _)| t + w <= now)?;
        (now > t0).then(|| (a1 - a0.min(a1)) as f64 / ((now - t0) as f64 / 1e9))
    }

    /// When the next evaluation is due.
    pub fn next_due(&self) -> u64 {
        self.last_eval + EVAL_EVERY_NS
    }

    pub fn tick(&mut self, now: u64, table: &ConnTable, episodes: &Episodes, out: &mut Vec<Finding>) {
        if now < self.last_eval + EVAL_EVERY_NS {
            return;
        }
        self.last_eval = now;
        let mut groups: BTreeMap<String, Vec<(ConnId, f64, f64)>> = BTreeMap::new();
        for e in table.iter().filter(|e| !e.closed) {
            let acked =
                e.last_sample.as_ref().map(|s| s.bytes_acked).or(e.snap.as_ref().map(|s| s.bytes_acked)).unwrap_or(0);
            if acked < self.cfg.min_bytes {
                continue;
            }
            if let Some(g) = self.goodput(e.id.cookie, now) {
                groups.entry(group_key(&self.cfg, e)).or_default().push((e.id, g, retrans_ratio(e)));
            }
        }
        let persist = (self.cfg.persist_s * 1e9) as u64;
        let live: HashMap<String, usize> = groups.iter().map(|(k, s)| (k.clone(), s.len())).collect();
        let members: HashSet<u64> =
            groups.values().filter(|s| s.len() >= 2).flat_map(|s| s.iter().map(|x| x.0.cookie)).collect();
        if members != self.members {
            self.grouped.extend(members.iter().copied());
            self.members = members;
            self.members_changed = true;
        }
        let mut present = HashSet::new();
        for (key, mut streams) in groups.into_iter().filter(|(_, s)| s.len() >= 2) {
            // In cookie order, whatever order the table keeps: the same findings every run.
            streams.sort_by_key(|s| s.0.cookie);
            present.insert(key.clone());
            let rates: Vec<f64> = streams.iter().map(|s| s.1).collect();
            let (min, max, sum) = (
                rates.iter().cloned().fold(f64::MAX, f64::min),
                rates.iter().cloned().fold(0.0, f64::max),
                rates.iter().sum::<f64>(),
            );
            if sum <= 0.0 {
                continue;
            }
            // Defined: the sum is positive.
            let j = jain(&rates).unwrap_or(1.0);
            let ratio = if max > 0.0 { min / max } else { 1.0 };
            let eff = streams.len() as f64 * min / sum;
            let mean = sum / rates.len() as f64;
            let st = self.groups.entry(key.clone()).or_default();
            for (id, g, _) in &streams {
                if *g < 0.5 * mean {
                    st.behind_since.entry(id.cookie).or_insert(now);
                } else {
                    st.behind_since.remove(&id.cookie);
                }
            }
            let unfair = j < self.cfg.jain_below || ratio < self.cfg.ratio_below;
            let slowest = streams.iter().min_by(|a, b| a.1.total_cmp(&b.1)).map(|s| s.0);
            let others: Vec<u64> =
                streams.iter().map(|s| s.0.cookie).filter(|c| Some(*c) != slowest.map(|s| s.cookie)).collect();
            let losses = slowest.and_then(|s| loss::group(episodes, s.cookie, &others));
            let mechanism = losses.as_ref().map(|l| l.0);
            let remedy = remedy(mechanism, streams.len());
            let evidence = |st: &GroupState| {
                let first = st.behind_since.iter().min_by_key(|(_, t)| **t).map(|(c, t)| (*c, *t));
                json!({
                    "jain_index": j,
                    "min_max_ratio": ratio,
                    "even_split_efficiency": eff,
                    "window_s": self.cfg.window_s,
                    "streams": streams.iter().map(|(id, g, rr)| json!({
                        "conn": id.tuple.to_string(), "cookie": id.cookie,
                        "goodput_bps": g * 8.0, "share": g / sum, "retrans_ratio": rr,
                    })).collect::<Vec<_>>(),
                    "fell_behind_first": first.map(|(c, t)| json!({"cookie": c, "since_ns": t})),
                    "send_phase": send_phase(&self.rounds, &self.losses, &streams, now),
                    "losses": losses.as_ref().map(|l| &l.1),
                    "remedy": remedy,
                })
            };
            st.slowest = slowest;
            if unfair {
                st.fair_since = None;
                let since = *st.unfair_since.get_or_insert(now);
                if st.reported.is_none() && now - since >= persist {
                    st.reported = Some(since);
                    out.push(Finding {
                        ts_ns: now,
                        conn: slowest,
                        group: Some(key.clone()),
                        start_ns: since,
                        duration_s: None,
                        ongoing: true,
                        cause: Cause::UnfairStreams,
                        owner: None,
                        mechanism,
                        evidence: evidence(st),
                        path: PathTag::default(),
                    });
                }
            } else {
                st.unfair_since = None;
                let since = *st.fair_since.get_or_insert(now);
                if let Some(start) = st.reported {
                    if now - since >= persist {
                        st.reported = None;
                        out.push(Finding {
                            ts_ns: now,
                            conn: slowest,
                            group: Some(key.clone()),
                            start_ns: start,
                            duration_s: Some((since - start) as f64 / 1e9),
                            ongoing: false,
                            cause: Cause::UnfairStreams,
                            owner: None,
                            mechanism,
                            evidence: evidence(st),
                            path: PathTag::default(),
                        });
                    }
                }
            }
            // Kept only while reported: the end report of a group whose streams close carries it.
            st.last_evidence = st.reported.map(|_| (evidence(st), mechanism));
        }
        // A group with fewer than two streams left (the transfer finished or was stopped) is
        // over: an unfair report ends with it, and its state goes.
        self.groups.retain(|key, st| {
            if present.contains(key) {
                return true;
            }
            if let Some(start) = st.reported {
                out.push(Finding {
                    ts_ns: now,
                    conn: st.slowest,
                    group: Some(key.clone()),
                    start_ns: start,
                    duration_s: Some(now.saturating_sub(start) as f64 / 1e9),
                    ongoing: false,
                    cause: Cause::UnfairStreams,
                    owner: None,
                    mechanism: st.last_evidence.as_ref().and_then(|l| l.1),
                    path: PathTag::default(),
                    evidence: {
                        let mut e = st.last_evidence.take().map_or_else(|| json!({}), |l| l.0);
                        e["ended"] = json!("streams_closed");
                        e["streams_left"] = json!(live.get(key).copied().unwrap_or(0));
                        e
                    },
                });
            }
            false
        });
    }
}

/// What to do about an unfair group: it follows from what its slowest stream's losses show.
fn remedy(mechanism: Option<Mechanism>, n: usize) -> String {
    let shared = format!("start the {n} streams RTT/{n} apart (staggered starts keep one stream from always sending last into the full queue; every stream then held an equal share in \"Fairness analysis of parallel TCP streams on long fat networks\"), or pace each stream to 1/{n} of the path (tc qdisc fq maxrate)");
    match mechanism {
        Some(Mechanism::LossyMember) => "the slowest stream loses alone, its losses uncorrelated with the other streams' and with no queueing delay before them: its path member (an ECMP or LAG link, a lane) drops packets. Check that link's error counters (ip -s link, ethtool -S, the switch's interface counters) and take it out of the bundle; meanwhile a new source port rehashes the stream onto another member. Staggering or pacing the streams would not help".into(),
        Some(Mechanism::QueueOverflow) => format!("the streams lose together after the RTT grew: they share one full queue and the one that sends last in each round loses first; {shared}"),
        _ => format!("{shared}; a stream that retransmits far more than the others may take a lossy path (another link or ECMP member)"),
    }
}

/// The group's send phase (the mechanism of "Fairness analysis of parallel TCP streams on long fat
/// networks"): each stream's phase within the RTT in send
/// order, how stable the order is, which stream sends last and whether it loses first. Null
/// until every stream has reported 8 rounds.
fn send_phase(
    rounds: &HashMap<u64, VecDeque<u64>>,
    losses: &HashMap<u64, VecDeque<u64>>,
    streams: &[(ConnId, f64, f64)],
    now: u64,
) -> serde_json::Value {
    let empty = VecDeque::new();
    let starts: Vec<(u64, Vec<u64>)> = streams
        .iter()
        .map(|(id, _, _)| (id.cookie, rounds.get(&id.cookie).unwrap_or(&empty).iter().copied().collect()))
        .collect();
    let input: Vec<StreamRounds> = starts.iter().map(|(c, v)| StreamRounds { cookie: *c, starts: v }).collect();
    let Some(r) = phase::analyze(&input, 8, 64) else { return serde_json::Value::Null };
    // Loss episodes over the last minute of the group's streams.
    let since = now.saturating_sub(60_000_000_000);
    let losses: Vec<(u64, Vec<u64>)> = streams
        .iter()
        .map(|(id, _, _)| {
            let v = losses.get(&id.cookie).map(|q| q.iter().copied().filter(|&t| t >= since).collect());
            (id.cookie, v.unwrap_or_default())
        })
        .collect();
    let lv: Vec<(u64, &[u64])> = losses.iter().map(|(c, v)| (*c, v.as_slice())).collect();
    let lose = phase::first_to_lose(&lv, (r.rtt_ms * 1e6) as u64);
    let conn = |c: u64| streams.iter().find(|s| s.0.cookie == c).map(|s| s.0.tuple.to_string());
    json!({
        "rtt_ms": r.rtt_ms,
        "cycles": r.cycles,
        "order_stability": r.stability,
        "streams": r.streams.iter().map(|s| json!({
            "cookie": s.cookie, "conn": conn(s.cookie), "phase": s.phase, "spread": s.spread,
        })).collect::<Vec<_>>(),
        "last_in_round": r.last(),
        "loses_first": lose.map(|(c, n, of)| json!({"cookie": c, "episodes_first": n, "episodes": of})),
        "last_loses_first": lose.map(|(c, _, _)| Some(c) == r.last()),
    })
}

#[cfg(test)]
mod tests;
