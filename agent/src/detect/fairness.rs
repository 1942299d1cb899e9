//! Unfair parallel streams: group the streams of one transfer, compare their goodput, flag persistence.
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::phase::{self, StreamRounds};
use crate::model::{Body, ConnEntry, ConnId, ConnTable, Event, Finding, FindingKind};

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
    pub fn validate(&self) -> Result<(), String> {
        if !(0.1..=600.0).contains(&self.window_s)
            || !(0.0..=1.0).contains(&self.jain_below)
            || !(0.0..=1.0).contains(&self.ratio_below)
            || !(0.0..=10_000.0).contains(&self.phase_min_rtt_ms)
        {
            return Err("detect.fairness: window_s from 0.1 to 600, jain_below and ratio_below from 0 to 1, phase_min_rtt_ms from 0 to 10000".into());
        }
        for r in &self.rules {
            if let Some(c) = &r.remote_cidr {
                parse_cidr(c).ok_or_else(|| format!("detect.fairness.rules: bad remote_cidr {c:?}"))?;
            }
        }
        Ok(())
    }
}

fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (a, l) = s.split_once('/')?;
    let a: IpAddr = a.parse().ok()?;
    let l: u8 = l.parse().ok()?;
    (l <= if a.is_ipv4() { 32 } else { 128 }).then_some((a, l))
}

fn in_cidr(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    match (ip.to_canonical(), net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => len == 0 || (u32::from(a) ^ u32::from(n)) >> (32 - len as u32) == 0,
        (IpAddr::V6(a), IpAddr::V6(n)) => len == 0 || (u128::from(a) ^ u128::from(n)) >> (128 - len as u32) == 0,
        _ => false,
    }
}

/// The group a connection belongs to.
pub fn group_key(cfg: &FairnessConfig, e: &ConnEntry) -> String {
    let t = e.id.tuple;
    let owner = e.owner.clone().unwrap_or_default();
    let key = cfg
        .rules
        .iter()
        .find(|r| {
            r.remote_cidr.as_deref().and_then(parse_cidr).is_none_or(|c| in_cidr(t.remote.ip(), c))
                && r.remote_ports.is_none_or(|(a, b)| (a..=b).contains(&t.remote.port()))
                && r.comm.as_ref().is_none_or(|c| *c == owner.comm)
        })
        .map(|r| &r.key)
        .unwrap_or(&cfg.key);
    key.iter()
        .map(|f| match f {
            GroupField::Pid => format!("pid={}", owner.pid),
            GroupField::Comm => format!("comm={}", owner.comm),
            GroupField::Cgroup => format!("cgroup={}", owner.cgroup_id),
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

/// Jain's fairness index of non-negative rates.
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q == 0.0 {
        1.0
    } else {
        s * s / (x.len() as f64 * q)
    }
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
    /// carried by the finding that ends it when its streams close.
    last_evidence: Option<serde_json::Value>,
}

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
        }
    }

    /// The streams whose rounds the kernel should report (members of groups of two or more), when
    /// they changed since the last call; none when the send phase is off.
    pub fn phase_members(&mut self) -> Option<HashSet<u64>> {
        let on = self.cfg.phase_min_rtt_ms > 0.0;
        std::mem::take(&mut self.members_changed).then(|| if on { self.members.clone() } else { HashSet::new() })
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

    pub fn tick(&mut self, now: u64, table: &ConnTable, out: &mut Vec<Finding>) {
        if now < self.last_eval + 500_000_000 {
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
            self.members = members;
            self.members_changed = true;
        }
        let mut present = HashSet::new();
        for (key, streams) in groups.into_iter().filter(|(_, s)| s.len() >= 2) {
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
            let j = jain(&rates);
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
            let remedy = format!("start the {n} streams RTT/{n} apart (paper 001 held every stream at an equal share that way), or pace each stream to 1/{n} of the path (fq maxrate); a stream that retransmits far more than the others may take a lossy path (another link or ECMP member)", n = streams.len());
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
                    "remedy": remedy,
                })
            };
            let slowest = streams.iter().min_by(|a, b| a.1.total_cmp(&b.1)).map(|s| s.0);
            st.slowest = slowest;
            if unfair {
                st.fair_since = None;
                let since = *st.unfair_since.get_or_insert(now);
                if st.reported.is_none() && now - since >= persist {
                    st.reported = Some(since);
                    out.push(Finding {
                        ts_ns: now,
                        kind: FindingKind::Unfair,
                        conn: slowest,
                        group: Some(key.clone()),
                        start_ns: since,
                        duration_s: None,
                        ongoing: true,
                        cause: "unfair_streams".into(),
                        owner: None,
                        evidence: evidence(st),
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
                            kind: FindingKind::Unfair,
                            conn: slowest,
                            group: Some(key.clone()),
                            start_ns: start,
                            duration_s: Some((since - start) as f64 / 1e9),
                            ongoing: false,
                            cause: "unfair_streams".into(),
                            owner: None,
                            evidence: evidence(st),
                        });
                    }
                }
            }
            // Kept only while reported: the end report of a group whose streams close carries it.
            st.last_evidence = st.reported.map(|_| evidence(st));
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
                    kind: FindingKind::Unfair,
                    conn: st.slowest,
                    group: Some(key.clone()),
                    start_ns: start,
                    duration_s: Some(now.saturating_sub(start) as f64 / 1e9),
                    ongoing: false,
                    cause: "unfair_streams".into(),
                    owner: None,
                    evidence: {
                        let mut e = st.last_evidence.take().unwrap_or_else(|| json!({}));
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

/// The group's send phase (paper 001's mechanism): each stream's phase within the RTT in send
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
mod tests {
    use super::*;
    use crate::model::{Owner, Tuple};

    fn conn(i: u64) -> ConnId {
        ConnId {
            cookie: i,
            netns: 1,
            tuple: Tuple {
                local: format!("10.0.0.1:{}", 4000 + i).parse().unwrap(),
                remote: "10.0.0.2:5201".parse().unwrap(),
            },
        }
    }

    fn run(rates: &[u64], secs: u64) -> Vec<Finding> {
        run_lossy(rates, &vec![0.0; rates.len()], secs)
    }

    /// Streams at `rates` (bytes/s) whose snapshots show `retrans` retransmitted bytes per byte sent.
    fn run_lossy(rates: &[u64], retrans: &[f64], secs: u64) -> Vec<Finding> {
        run_with(rates, retrans, secs, &|_, _| vec![]).0
    }

    /// As run_lossy, with `extra(from, to)` events of each 50 ms step; also returns what
    /// phase_members said after each tick.
    #[allow(clippy::type_complexity)]
    fn run_with(
        rates: &[u64],
        retrans: &[f64],
        secs: u64,
        extra: &dyn Fn(u64, u64) -> Vec<Event>,
    ) -> (Vec<Finding>, Vec<HashSet<u64>>) {
        let mut table = ConnTable::new(false);
        for (i, r) in retrans.iter().enumerate() {
            let snap = crate::model::Snap {
                bytes_sent: 100_000_000,
                bytes_retrans: (r * 100_000_000.0) as u64,
                ..Default::default()
            };
            table.apply(&Event { ts_ns: 1, conn: conn(i as u64), body: Body::Snapshot(snap) });
        }
        let mut d = FairnessDetector::new(FairnessConfig::default());
        let mut out = vec![];
        for (i, _) in rates.iter().enumerate() {
            table.apply(&Event {
                ts_ns: 1,
                conn: conn(i as u64),
                body: Body::Owner(Owner { pid: 42, uid: 0, cgroup_id: 1, comm: "iperf3".into() }),
            });
        }
        let mut t = 0;
        let mut said = vec![];
        while t < secs * 1_000_000_000 {
            t += 50_000_000;
            let mut evs = extra(t - 50_000_000, t);
            evs.sort_by_key(|e| e.ts_ns);
            for ev in evs {
                table.apply(&ev);
                d.observe(&ev, &table);
            }
            for (i, r) in rates.iter().enumerate() {
                let mut s = crate::detect::stop::tests_support::sample(2_000_000 + r * t / 1_000_000_000);
                s.srtt_us = 20_000;
                let ev = Event { ts_ns: t, conn: conn(i as u64), body: Body::Sample(s) };
                table.apply(&ev);
                d.observe(&ev, &table);
            }
            d.tick(t, &table, &mut out);
            said.extend(d.phase_members());
        }
        (out, said)
    }

    #[test]
    fn the_stream_that_sends_last_in_the_round_and_loses_first_is_named() {
        // Rounds every 100 ms; stream 2 sends last (at 0.7 of the RTT) and enters Recovery first
        // in every loss episode (every 2 s, the others 5-15 ms later).
        const MS: u64 = 1_000_000;
        let phases = [0.1, 0.3, 0.7, 0.5];
        let extra = |from: u64, to: u64| {
            let mut v = vec![];
            for (i, p) in phases.iter().enumerate() {
                let mut k = from / (100 * MS);
                loop {
                    let t = k * 100 * MS + (p * 100.0 * MS as f64) as u64;
                    k += 1;
                    if t < from {
                        continue;
                    }
                    if t >= to {
                        break;
                    }
                    let mut s = crate::detect::stop::tests_support::sample(1 << 20);
                    s.round = true;
                    v.push(Event { ts_ns: t, conn: conn(i as u64), body: Body::Sample(s) });
                }
                let lag = [10, 5, 0, 15][i] * MS;
                let ep = (from / (2000 * MS)) * 2000 * MS + lag;
                if ep >= 2000 * MS && ep >= from && ep < to {
                    let c = crate::model::CaState { old: 0, new: 3, ..Default::default() };
                    v.push(Event { ts_ns: ep, conn: conn(i as u64), body: Body::CaState(c) });
                }
            }
            v
        };
        let (out, said) = run_with(&[10_000_000, 10_000_000, 1_000_000, 10_000_000], &[0.0; 4], 10, &extra);
        assert_eq!(said, vec![(0..4).collect::<HashSet<u64>>()], "the members once, when the group formed");
        let p = &out.first().expect("flagged").evidence["send_phase"];
        assert_eq!(p["last_in_round"], 2, "{p}");
        let order: Vec<u64> = p["streams"].as_array().unwrap().iter().map(|s| s["cookie"].as_u64().unwrap()).collect();
        assert_eq!(order, vec![0, 1, 3, 2], "{p}");
        assert!(p["order_stability"].as_f64().unwrap() > 0.9, "{p}");
        assert_eq!(p["loses_first"]["cookie"], 2, "{p}");
        assert_eq!(p["last_loses_first"], true, "{p}");
        assert!((p["rtt_ms"].as_f64().unwrap() - 100.0).abs() < 1.0, "{p}");
    }

    #[test]
    fn without_rounds_the_send_phase_is_null() {
        let out = run(&[10_000_000, 10_000_000, 1_000_000, 10_000_000], 10);
        assert!(out[0].evidence["send_phase"].is_null());
    }

    #[test]
    fn one_stream_at_a_tenth_is_flagged_and_named() {
        let out = run(&[10_000_000, 10_000_000, 1_000_000, 10_000_000], 10);
        let f = out.first().expect("flagged");
        assert_eq!(f.cause, "unfair_streams");
        assert_eq!(f.conn.map(|c| c.cookie), Some(2));
        assert_eq!(f.evidence["fell_behind_first"]["cookie"], 2);
        let eff = f.evidence["even_split_efficiency"].as_f64().unwrap();
        assert!((eff - 4.0 / 31.0).abs() < 0.02, "{eff}");
    }

    #[test]
    fn each_stream_carries_its_retransmission_ratio() {
        let out = run_lossy(&[10_000_000, 10_000_000, 10_000_000, 1_000_000], &[0.002, 0.001, 0.003, 0.02], 10);
        let streams = out[0].evidence["streams"].as_array().unwrap();
        let slow = streams.iter().find(|s| s["cookie"] == 3).unwrap();
        assert!((slow["retrans_ratio"].as_f64().unwrap() - 0.02).abs() < 1e-9, "{slow}");
        assert!(out[0].evidence["remedy"].as_str().unwrap().contains("RTT/4 apart"));
    }

    #[test]
    fn an_unfair_group_ends_when_its_streams_close() {
        let rates = [10_000_000u64, 10_000_000, 1_000_000, 10_000_000];
        let mut table = ConnTable::new(false);
        let mut d = FairnessDetector::new(FairnessConfig::default());
        let mut out = vec![];
        let mut t = 0;
        while t < 10_000_000_000 {
            t += 50_000_000;
            for (i, r) in rates.iter().enumerate() {
                let s = crate::detect::stop::tests_support::sample(2_000_000 + r * t / 1_000_000_000);
                let ev = Event { ts_ns: t, conn: conn(i as u64), body: Body::Sample(s) };
                table.apply(&ev);
                d.observe(&ev, &table);
            }
            d.tick(t, &table, &mut out);
        }
        assert_eq!(out.len(), 1, "{out:?}");
        for i in 0..rates.len() {
            let ev = Event { ts_ns: t + 1, conn: conn(i as u64), body: Body::Close(Default::default()) };
            table.apply(&ev);
            d.observe(&ev, &table);
        }
        d.tick(t + 1_000_000_000, &table, &mut out);
        let end = out.last().expect("an end report");
        assert!(!end.ongoing && end.group == out[0].group && end.start_ns == out[0].start_ns, "{end:?}");
        assert_eq!(end.conn.map(|c| c.cookie), Some(2));
        assert!(end.duration_s.is_some_and(|d| d > 5.0), "{end:?}");
        // It still names every stream with its share (a dump draws the group from them).
        assert_eq!(end.evidence["ended"], "streams_closed");
        let streams = end.evidence["streams"].as_array().expect("streams in the end report");
        assert_eq!(streams.len(), 4, "{end:?}");
        assert!(streams.iter().any(|s| s["cookie"] == 2 && s["share"].as_f64().unwrap() < 0.05));
        // Nothing is kept for it, and nothing more is reported.
        assert!(d.groups.is_empty());
        d.tick(t + 2_000_000_000, &table, &mut out);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn equal_streams_are_not_flagged() {
        assert!(run(&[10_000_000; 4], 10).is_empty());
    }

    #[test]
    fn jain_index_is_one_for_equal_and_one_over_n_for_a_single_stream() {
        assert!((jain(&[1.0, 1.0, 1.0]) - 1.0).abs() < 1e-9);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn rules_choose_the_group_key() {
        let mut cfg = FairnessConfig::default();
        cfg.rules.push(GroupRule {
            remote_cidr: Some("10.0.0.0/24".into()),
            remote_ports: Some((5200, 5210)),
            comm: None,
            key: vec![GroupField::RemoteIp],
        });
        let mut t = ConnTable::new(false);
        t.apply(&Event { ts_ns: 1, conn: conn(1), body: Body::Owner(Owner { pid: 7, ..Default::default() }) });
        t.apply(&Event { ts_ns: 2, conn: conn(1), body: Body::Snapshot(Default::default()) });
        let e = t.get(1).unwrap();
        assert_eq!(group_key(&cfg, e), "remote=10.0.0.2");
        assert_eq!(group_key(&FairnessConfig::default(), e), "pid=7,remote=10.0.0.2");
    }
}
