//! Path events: network stops of several connections to one remote prefix that begin together, one finding.
use std::collections::HashMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::DetectConfigError;
use crate::model::{Cause, ConnId, ConnTable, Finding, FindingKind, PathScope, PathTag, StopOwner};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PathConfig {
    /// Stops to one prefix that begin within max(window_rtts x srtt, min_window_ms) of the
    /// first one are one event: a failing path stops every connection on it within an RTT.
    pub window_rtts: f64,
    pub min_window_ms: u64,
    /// Stopped connections that make an event; fewer stay single stops.
    pub min_conns: usize,
    /// Remote prefix lengths that group connections.
    pub v4_prefix: u8,
    pub v6_prefix: u8,
    /// Connections to the prefix that moved this many bytes, are open and were heard from in the
    /// last 2 s count as "did not stop" (a partial event points at one ECMP member or one host).
    pub min_bytes: u64,
}

impl Default for PathConfig {
    fn default() -> Self {
        PathConfig {
            window_rtts: 3.0,
            min_window_ms: 300,
            min_conns: 2,
            v4_prefix: 24,
            v6_prefix: 64,
            min_bytes: 1 << 20,
        }
    }
}

impl PathConfig {
    pub fn validate(&self) -> Result<(), DetectConfigError> {
        if self.v4_prefix > 32
            || self.v6_prefix > 128
            || self.min_conns < 2
            || !(0.0..=100.0).contains(&self.window_rtts)
        {
            return Err(DetectConfigError::PathRange);
        }
        Ok(())
    }

    fn window_ns(&self, srtt_us: u32) -> u64 {
        ((self.window_rtts * srtt_us as f64 * 1e3) as u64).max(self.min_window_ms * 1_000_000)
    }
}

/// The remote prefix of a connection, e.g. `10.72.2.0/24`.
pub fn prefix_of(cfg: &PathConfig, ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => {
            let bits = cfg.v4_prefix as u32;
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
            format!("{}/{bits}", std::net::Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let bits = cfg.v6_prefix as u32;
            let mask = if bits == 0 { 0 } else { u128::MAX << (128 - bits) };
            format!("{}/{bits}", std::net::Ipv6Addr::from(u128::from(a) & mask))
        }
    }
}

/// One network stop, as the path detector keeps it.
#[derive(Debug, Clone)]
struct Stop {
    id: ConnId,
    start_ns: u64,
    srtt_ms: f64,
    cause: Cause,
    end_ns: Option<u64>,
}

#[derive(Debug)]
struct Event {
    /// The first start when the event formed: its identity in every report (a member found
    /// later may have stopped a little earlier; its offset is then negative).
    start_ns: u64,
    members: Vec<Stop>,
    not_stopped: Vec<ConnId>,
}

pub struct PathDetector {
    cfg: PathConfig,
    /// Network stops not (yet) part of an event, by prefix.
    single: HashMap<String, Vec<Stop>>,
    events: HashMap<String, Event>,
}

impl PathDetector {
    pub fn new(cfg: PathConfig) -> Self {
        PathDetector { cfg, single: HashMap::new(), events: HashMap::new() }
    }

    /// New windows and prefix lengths for stops from now on (a reload); events in progress keep
    /// the prefix they were found under.
    pub fn set_config(&mut self, cfg: PathConfig) {
        self.cfg = cfg;
    }

    /// Folds the findings made since `from`: a network stop is tagged with its remote prefix, one
    /// that belongs to an event with the event (exporters print and dump the event instead), and
    /// the event's finding is added when it forms, changes or ends. Other findings pass through.
    pub fn fold(&mut self, table: &ConnTable, out: &mut Vec<Finding>, from: usize) {
        let end = out.len();
        for i in from..end {
            let f = &out[i];
            let (Some(id), true) = (f.conn, f.kind() == FindingKind::Stop) else { continue };
            let prefix = prefix_of(&self.cfg, id.tuple.remote.ip());
            let stop = Stop {
                id,
                start_ns: f.start_ns,
                srtt_ms: f.evidence["srtt_ms"].as_f64().unwrap_or(0.0),
                cause: f.cause,
                end_ns: (!f.ongoing).then(|| f.start_ns + (f.duration_s.unwrap_or(0.0) * 1e9) as u64),
            };
            let (ts, network) = (f.ts_ns, f.owner.is_none_or(|o| o == StopOwner::Network));
            if network {
                // For the per-prefix metric: stops towards one destination across hosts.
                out[i].path.remote_prefix = Some(prefix.clone());
            }
            let joined = self.join(&prefix, stop, network, table);
            if joined == Joined::Single {
                continue;
            }
            out[i].path.event = Some(prefix.clone());
            if let Joined::Report { over } = joined {
                if let Some(ev) = self.events.get(&prefix) {
                    out.push(finding(&prefix, ev, over, ts));
                }
                if over {
                    self.events.remove(&prefix);
                }
            }
        }
    }

    /// Adds a stop report to the prefix's singles or its event.
    fn join(&mut self, prefix: &str, s: Stop, network: bool, table: &ConnTable) -> Joined {
        let cookie = s.id.cookie;
        if let Some(ev) = self.events.get_mut(prefix) {
            if let Some(m) = ev.members.iter_mut().find(|m| m.id.cookie == cookie) {
                let changed = m.cause != s.cause || m.end_ns != s.end_ns;
                *m = Stop { start_ns: m.start_ns, ..s };
                let over = ev.members.iter().all(|m| m.end_ns.is_some());
                return if changed { Joined::Report { over } } else { Joined::Member };
            }
            let w = self.cfg.window_ns((s.srtt_ms * 1e3) as u32);
            if network && s.end_ns.is_none() && s.start_ns.abs_diff(ev.start_ns) <= w {
                ev.not_stopped.retain(|c| c.cookie != cookie);
                ev.members.push(s);
                return Joined::Report { over: false };
            }
        }
        let singles = self.single.entry(prefix.to_string()).or_default();
        singles.retain(|m| m.id.cookie != cookie);
        if !network || s.end_ns.is_some() {
            return Joined::Single;
        }
        singles.push(s.clone());
        let w = self.cfg.window_ns((s.srtt_ms * 1e3) as u32);
        let near: Vec<Stop> = singles.iter().filter(|m| m.start_ns.abs_diff(s.start_ns) <= w).cloned().collect();
        if near.len() < self.cfg.min_conns || self.events.contains_key(prefix) {
            return Joined::Single;
        }
        singles.retain(|m| m.start_ns.abs_diff(s.start_ns) > w);
        let cfg = &self.cfg;
        let bytes = |e: &crate::model::ConnEntry| {
            let snap = e.snap.as_ref().map_or(0, |x| x.bytes_acked);
            snap.max(e.last_sample.as_ref().map_or(0, |x| x.bytes_acked))
        };
        let mut not_stopped: Vec<ConnId> = table
            .iter()
            .filter(|e| !e.closed && prefix_of(cfg, e.id.tuple.remote.ip()) == prefix)
            .filter(|e| !near.iter().any(|m| m.id.cookie == e.id.cookie))
            .filter(|e| bytes(e) >= cfg.min_bytes && e.last_ns + 2_000_000_000 >= s.start_ns)
            .map(|e| e.id)
            .collect();
        // In cookie order, whatever order the table keeps: the same findings every run.
        not_stopped.sort_by_key(|c| c.cookie);
        let start_ns = near.iter().map(|m| m.start_ns).min().unwrap_or(s.start_ns);
        self.events.insert(prefix.to_string(), Event { start_ns, members: near, not_stopped });
        Joined::Report { over: false }
    }
}

/// What a stop report did to the prefix's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Joined {
    /// Not part of an event (yet).
    Single,
    /// A member whose report changed nothing the event says.
    Member,
    /// The event formed, grew, or a member's cause or end changed (`over`: every member ended).
    Report { over: bool },
}

/// The event's finding: one per change, `ongoing` until every member's stop ended.
fn finding(prefix: &str, ev: &Event, over: bool, now: u64) -> Finding {
    let first = ev.start_ns;
    let last = ev.members.iter().map(|m| m.start_ns).max().unwrap_or(first).max(first);
    let end = ev.members.iter().filter_map(|m| m.end_ns).max().unwrap_or(now);
    let mut causes: std::collections::BTreeMap<&str, u32> = Default::default();
    for m in &ev.members {
        *causes.entry(m.cause.as_str()).or_default() += 1;
    }
    // Some connections to the prefix kept delivering: one ECMP member, one host, not the whole path.
    let scope = if ev.not_stopped.is_empty() { PathScope::All } else { PathScope::Partial };
    Finding {
        ts_ns: now,
        conn: None,
        group: Some(prefix.to_string()),
        start_ns: first,
        duration_s: over.then(|| end.saturating_sub(first) as f64 / 1e9),
        ongoing: !over,
        cause: scope.into(),
        owner: Some(StopOwner::Network),
        mechanism: None,
        path: PathTag::default(),
        evidence: json!({
            "prefix": prefix,
            "stopped": ev.members.len(),
            "not_stopped": ev.not_stopped.len(),
            "starts_spread_s": last.saturating_sub(first) as f64 / 1e9,
            "causes": causes,
            "conns": ev.members.iter().map(|m| json!({
                "cookie": m.id.cookie,
                "netns": m.id.netns,
                "local": m.id.tuple.local.to_string(),
                "remote": m.id.tuple.remote.to_string(),
                "cause": m.cause,
                "start_offset_s": (m.start_ns as i64 - first as i64) as f64 / 1e9,
                "ended": m.end_ns.is_some(),
            })).collect::<Vec<_>>(),
            "not_stopped_conns": ev.not_stopped.iter().map(|c| json!({
                "netns": c.netns,
                "local": c.tuple.local.to_string(),
                "remote": c.tuple.remote.to_string(),
            })).collect::<Vec<_>>(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::tests_support::sample;
    use crate::model::{Body, Event, StopCause, Tuple};

    const MS: u64 = 1_000_000;

    fn id(cookie: u64, remote: &str) -> ConnId {
        ConnId {
            cookie,
            netns: 1,
            tuple: Tuple {
                local: format!("10.71.1.2:{}", 40000 + cookie).parse().unwrap(),
                remote: remote.parse().unwrap(),
            },
        }
    }

    fn stop(c: ConnId, start_ms: u64, ts_ms: u64, owner: StopOwner, ended: Option<f64>) -> Finding {
        Finding {
            ts_ns: ts_ms * MS,
            conn: Some(c),
            group: None,
            start_ns: start_ms * MS,
            duration_s: ended,
            ongoing: ended.is_none(),
            cause: StopCause::NoAck.into(),
            owner: Some(owner),
            mechanism: None,
            evidence: json!({"srtt_ms": 20.0}),
            path: PathTag::default(),
        }
    }

    /// A table where these connections moved bulk data just now.
    fn table(conns: &[ConnId], at_ms: u64) -> ConnTable {
        let mut t = ConnTable::new(false);
        for c in conns {
            t.apply(&Event { ts_ns: at_ms * MS, conn: *c, body: Body::Sample(sample(8 << 20)) });
        }
        t
    }

    fn fold(d: &mut PathDetector, t: &ConnTable, f: Finding) -> Vec<Finding> {
        let mut out = vec![f];
        d.fold(t, &mut out, 0);
        out
    }

    #[test]
    fn stops_to_one_prefix_that_begin_together_are_one_path_event_naming_every_connection() {
        let (a, b, c) = (id(1, "10.72.1.2:5201"), id(2, "10.72.1.9:5201"), id(3, "10.72.2.2:5201"));
        let quiet = id(4, "10.72.1.7:5201");
        let t = table(&[a, b, c, quiet], 1000);
        let mut d = PathDetector::new(PathConfig::default());
        // The first stop is reported alone: nothing says yet that it is more.
        let out = fold(&mut d, &t, stop(a, 1000, 1180, StopOwner::Network, None));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].path.event, None);
        // Another prefix: not part of it.
        let out = fold(&mut d, &t, stop(c, 1010, 1190, StopOwner::Network, None));
        assert_eq!(out.len(), 1, "{out:?}");
        // A second connection to 10.72.1.0/24 stopped 20 ms later: one path event.
        let out = fold(&mut d, &t, stop(b, 1020, 1200, StopOwner::Network, None));
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].path.event.as_deref(), Some("10.72.1.0/24"));
        let ev = &out[1];
        assert_eq!((ev.kind(), ev.group.as_deref(), ev.ongoing), (FindingKind::Path, Some("10.72.1.0/24"), true));
        assert_eq!(ev.start_ns, 1000 * MS);
        assert_eq!(ev.evidence["stopped"], 2);
        assert_eq!(ev.evidence["not_stopped"], 1, "connection 4 kept delivering: {}", ev.evidence);
        assert_eq!(ev.cause, Cause::Path(PathScope::Partial));
        let cookies = ev.cookies();
        assert_eq!(cookies, vec![1, 2], "the dump holds both members and only them");
        // The members' later reports are the event's; it ends when the last member's stop ends.
        let out = fold(&mut d, &t, stop(a, 1000, 3000, StopOwner::Network, Some(2.0)));
        assert!(out.iter().all(|f| f.kind() != FindingKind::Path || f.ongoing), "{out:?}");
        let out = fold(&mut d, &t, stop(b, 1020, 3100, StopOwner::Network, Some(2.05)));
        let end = out.iter().find(|f| f.kind() == FindingKind::Path).expect("the event ends");
        assert!(!end.ongoing);
        assert!((end.duration_s.unwrap() - 2.07).abs() < 1e-6, "{end:?}");
    }

    #[test]
    fn a_member_found_later_that_stopped_earlier_keeps_the_event_one_event() {
        let (a, b, c) = (id(1, "10.72.1.2:5201"), id(2, "10.72.1.3:5201"), id(3, "10.72.1.4:5201"));
        let t = table(&[a, b, c], 1000);
        let mut d = PathDetector::new(PathConfig::default());
        fold(&mut d, &t, stop(a, 1010, 1200, StopOwner::Network, None));
        let formed = fold(&mut d, &t, stop(b, 1020, 1210, StopOwner::Network, None));
        let grown = fold(&mut d, &t, stop(c, 1000, 1230, StopOwner::Network, None));
        let (formed, grown) = (&formed[1], &grown[1]);
        assert_eq!((formed.start_ns, grown.start_ns), (1010 * MS, 1010 * MS), "one identity across reports");
        assert_eq!(grown.evidence["stopped"], 3);
        let offsets: Vec<f64> =
            grown.evidence["conns"].as_array().unwrap().iter().map(|m| m["start_offset_s"].as_f64().unwrap()).collect();
        assert_eq!(offsets, vec![0.0, 0.01, -0.01]);
    }

    #[test]
    fn a_single_stop_receivers_and_stops_far_apart_make_no_event() {
        let (a, b) = (id(1, "10.72.1.2:5201"), id(2, "10.72.1.3:5201"));
        let t = table(&[a, b], 1000);
        let mut d = PathDetector::new(PathConfig::default());
        let mut all = fold(&mut d, &t, stop(a, 1000, 1200, StopOwner::Network, None));
        all.extend(fold(&mut d, &t, stop(b, 1010, 1210, StopOwner::Receiver, None)));
        all.extend(fold(&mut d, &t, stop(a, 1000, 2000, StopOwner::Network, Some(1.0))));
        // 5 s later: another stop on its own.
        all.extend(fold(&mut d, &t, stop(b, 6000, 6200, StopOwner::Network, None)));
        assert!(all.iter().all(|f| f.kind() == FindingKind::Stop && f.path.event.is_none()), "{all:?}");
    }

    #[test]
    fn prefixes_follow_the_configured_lengths() {
        let cfg = PathConfig::default();
        assert_eq!(prefix_of(&cfg, "10.72.1.200".parse().unwrap()), "10.72.1.0/24");
        assert_eq!(prefix_of(&cfg, "fd00:72:1::2".parse().unwrap()), "fd00:72:1::/64");
        let wide = PathConfig { v4_prefix: 16, ..cfg };
        assert_eq!(prefix_of(&wide, "10.72.1.200".parse().unwrap()), "10.72.0.0/16");
        assert!(PathConfig { min_conns: 1, ..Default::default() }.validate().is_err());
    }
}
