//! Prometheus metrics: typed families for stops, fairness, limits, loss counters and the agent's
//! own health, fed from events, findings and a periodic refresh, with a hard series cap.
//!
//! Wiring (the daemon owns the loop; nothing here blocks or does IO):
//! ```ignore
//! let (mut metrics, registry) = Metrics::new_registered(&cfg.export);
//! let registry = Arc::new(registry);           // shared with export::http
//! // per event:   metrics.on_event(&ev);       (after table.apply(&ev))
//! // per finding: metrics.on_finding(&f);
//! // every second or so: metrics.refresh(&table, &health);
//! ```
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::config::ExportConfig;
use super::conns::{ConnSeries, PER_CONN_SERIES};
use super::health::{self, Health, HealthSeries};
use crate::model::{Body, ConnTable, Event, Finding, FindingKind};

/// (owner, cause) pairs the stop detector reports; anything else is counted as (network, unknown).
pub const STOP_CAUSES: [(&str, &str); 9] = [
    ("network", "no_ack"),
    ("network", "rto"),
    ("network", "path_silent"),
    ("network", "cwnd_collapse"),
    ("network", "lost_retransmit"),
    ("network", "slow_recovery"),
    ("network", "unknown"),
    ("receiver", "zero_window"),
    ("undetermined", "undetermined"),
];
/// Limit reasons the detector reports; anything else is counted as `other`.
pub const LIMIT_REASONS: [&str; 6] = ["rwnd_limited", "sndbuf_limited", "no_sack", "no_wscale", "small_mss", "other"];
/// Stop duration buckets, seconds: from a few RTTs of a 10 ms path to paper 000's 100 s runs.
pub const STOP_BUCKETS: [f64; 11] = [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];
/// Series per fairness group: index, even-split efficiency, min/max ratio, streams, send-order
/// stability.
pub const PER_GROUP_SERIES: usize = 5;
/// Longest group label value; longer keys are cut (collisions then merge, which is bounded).
const MAX_GROUP_LEN: usize = 64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    /// Whose stop: network, receiver or undetermined (an application pause is never a stop).
    pub owner: &'static str,
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// Path events: every connection to the prefix stopped (`all`), or some kept delivering (`partial`).
pub const PATH_SCOPES: [&str; 2] = ["all", "partial"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    pub scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PrefixLabels {
    pub prefix: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    pub group: String,
}

type GaugeF = Gauge<f64, AtomicU64>;
type HistFamily = Family<CauseLabels, Histogram, fn() -> Histogram>;

fn stop_histogram() -> Histogram {
    Histogram::new(STOP_BUCKETS)
}

/// Series that exist whatever happens (all label values pre-created), health's bounded ones
/// excluded: stops, stop durations, stops in progress, 3 loss counters, unfair groups, limited
/// connections, and the overflow part of the per-connection set.
pub fn fixed_series() -> usize {
    let n = STOP_CAUSES.len();
    n + n * (STOP_BUCKETS.len() + 3) + n + 3 + 1 + LIMIT_REASONS.len() + 2 * PATH_SCOPES.len() + ConnSeries::FIXED
}

/// The smallest `series_cap` that always holds: fixed series, health at its bounds, one connection.
pub fn min_series_cap() -> usize {
    fixed_series() + health::MAX_SERIES + PER_CONN_SERIES
}

/// Values of one unfair group, from the finding's evidence.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct GroupValues {
    jain: f64,
    even_split: f64,
    min_max: f64,
    streams: i64,
    /// Share of RTT cycles in which the streams sent in their usual order (None: not known yet).
    order_stability: Option<f64>,
}

/// All tcpvigil metrics. Owned by the daemon's task; the registry it fills is shared with HTTP.
#[derive(Debug)]
pub struct Metrics {
    stops: Family<CauseLabels, Counter>,
    stop_duration: HistFamily,
    stops_in_progress: Family<CauseLabels, Gauge>,
    lost_retrans: Counter,
    rtos: Counter,
    retrans_segs: Counter,
    unfair_groups: Gauge,
    path_events: Family<ScopeLabels, Counter>,
    path_events_in_progress: Family<ScopeLabels, Gauge>,
    prefix_stops: Family<PrefixLabels, Gauge>,
    group_fairness: Family<GroupLabels, GaugeF>,
    group_even_split: Family<GroupLabels, GaugeF>,
    group_min_max: Family<GroupLabels, GaugeF>,
    group_streams: Family<GroupLabels, Gauge>,
    group_order_stability: Family<GroupLabels, GaugeF>,
    limited: Family<ReasonLabels, Gauge>,
    conns: ConnSeries,
    health: HealthSeries,

    exact_lost_retrans: bool,
    series_cap: usize,
    max_groups: usize,
    /// Stops in progress: (cookie, start_ns) -> cause.
    open_stops: HashMap<(u64, u64), (CauseLabels, Option<String>)>,
    /// Remote prefixes with a network stop in progress, as last exported.
    shown_prefixes: HashSet<String>,
    /// Limits in progress: (cookie, reason).
    open_limits: HashSet<(u64, &'static str)>,
    /// Unfair groups in progress.
    open_groups: HashMap<String, GroupValues>,
    /// Path events going on: (prefix, start) -> scope.
    open_paths: HashMap<(String, u64), &'static str>,
    shown_groups: HashSet<String>,
}

fn stop_labels(f: &Finding) -> CauseLabels {
    let owner = f.owner.map_or("network", |o| o.as_str());
    let (owner, cause) =
        STOP_CAUSES.iter().find(|(o, c)| *o == owner && *c == f.cause).copied().unwrap_or(("network", "unknown"));
    CauseLabels { owner, cause }
}

fn limit_reason(c: &str) -> &'static str {
    LIMIT_REASONS.iter().find(|k| **k == c).copied().unwrap_or("other")
}

fn ev_f64(ev: &serde_json::Value, keys: &[&str]) -> f64 {
    keys.iter().find_map(|k| ev.get(*k).and_then(|v| v.as_f64())).unwrap_or(f64::NAN)
}

fn group_key(s: &str) -> String {
    let mut end = s.len().min(MAX_GROUP_LEN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl Metrics {
    /// Metrics with every fixed label value created, not yet registered.
    pub fn new(cfg: &ExportConfig) -> Self {
        let m = Metrics {
            stops: Family::default(),
            stop_duration: HistFamily::new_with_constructor(stop_histogram),
            stops_in_progress: Family::default(),
            lost_retrans: Counter::default(),
            rtos: Counter::default(),
            retrans_segs: Counter::default(),
            unfair_groups: Gauge::default(),
            path_events: Family::default(),
            path_events_in_progress: Family::default(),
            prefix_stops: Family::default(),
            group_fairness: Family::default(),
            group_even_split: Family::default(),
            group_min_max: Family::default(),
            group_order_stability: Family::default(),
            group_streams: Family::default(),
            limited: Family::default(),
            conns: ConnSeries::new(cfg),
            health: HealthSeries::new(),
            exact_lost_retrans: false,
            series_cap: cfg.series_cap,
            max_groups: cfg.max_groups,
            open_stops: HashMap::new(),
            open_limits: HashSet::new(),
            open_groups: HashMap::new(),
            open_paths: HashMap::new(),
            shown_prefixes: HashSet::new(),
            shown_groups: HashSet::new(),
        };
        for (owner, cause) in STOP_CAUSES {
            let l = CauseLabels { owner, cause };
            let _ = m.stops.get_or_create(&l);
            let _ = m.stop_duration.get_or_create(&l);
            let _ = m.stops_in_progress.get_or_create(&l);
        }
        for reason in LIMIT_REASONS {
            let _ = m.limited.get_or_create(&ReasonLabels { reason });
        }
        for scope in PATH_SCOPES {
            let _ = m.path_events.get_or_create(&ScopeLabels { scope });
            let _ = m.path_events_in_progress.get_or_create(&ScopeLabels { scope });
        }
        m
    }

    /// A fresh registry with these metrics under the `tcpvigil_` prefix.
    pub fn new_registered(cfg: &ExportConfig) -> (Self, Registry) {
        let m = Self::new(cfg);
        let mut r = Registry::default();
        m.register(&mut r);
        (m, r)
    }

    /// Register every family (clones share their values) under `tcpvigil_` in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("tcpvigil");
        r.register(
            "stops",
            "Communication stops that ended, by owner (network, receiver, undetermined) and cause",
            self.stops.clone(),
        );
        r.register_with_unit(
            "stop_duration",
            "Duration of communication stops that ended, by owner and cause",
            Unit::Seconds,
            self.stop_duration.clone(),
        );
        r.register(
            "stops_in_progress",
            "Communication stops going on now, by owner and the cause they have so far",
            self.stops_in_progress.clone(),
        );
        r.register(
            "lost_retransmissions",
            "Retransmitted segments that were lost again (host-wide)",
            self.lost_retrans.clone(),
        );
        r.register("retransmission_timeouts", "Retransmission timeouts that fired (host-wide)", self.rtos.clone());
        r.register("retransmitted_segments", "Segments retransmitted (host-wide)", self.retrans_segs.clone());
        r.register(
            "path_events",
            "Path events that ended: network stops of several connections to one remote prefix that began together, by scope (all connections to it stopped, or only some)",
            self.path_events.clone(),
        );
        r.register(
            "path_events_in_progress",
            "Path events going on now, by scope",
            self.path_events_in_progress.clone(),
        );
        r.register(
            "prefix_stops_in_progress",
            "Network stops going on now towards one remote prefix (detect.path lengths); only prefixes with one, the most stopped first",
            self.prefix_stops.clone(),
        );
        r.register(
            "unfair_groups",
            "Transfer groups whose streams share the path unfairly now",
            self.unfair_groups.clone(),
        );
        r.register(
            "group_fairness_index",
            "Jain's fairness index of the streams of an unfair group (1 = even)",
            self.group_fairness.clone(),
        );
        r.register_with_unit(
            "group_even_split_efficiency",
            "Efficiency an even split of the data would get: n * slowest / total goodput",
            Unit::Other("ratio".into()),
            self.group_even_split.clone(),
        );
        r.register_with_unit(
            "group_min_max",
            "Slowest over fastest stream goodput in an unfair group",
            Unit::Other("ratio".into()),
            self.group_min_max.clone(),
        );
        r.register("group_streams", "Streams in an unfair group", self.group_streams.clone());
        r.register(
            "group_send_order_stability",
            "Share of the RTT cycles in which an unfair group's streams sent in their usual order (paper 001: the last to send loses first); absent until every stream reported 8 rounds",
            self.group_order_stability.clone(),
        );
        r.register(
            "limited_connections",
            "Connections held back by buffers or options, by reason",
            self.limited.clone(),
        );
        self.conns.register(r);
        self.health.register(r);
    }

    /// Tell whether lost retransmissions come from the exact variant (then only `LostRetrans`
    /// events count, as in `ConnTable`). Set once the hook variants are chosen.
    pub fn set_exact_lost_retrans(&mut self, exact: bool) {
        self.exact_lost_retrans = exact;
    }

    /// Count what one event says (host-wide counters) and note sample/snapshot freshness.
    pub fn on_event(&mut self, ev: &Event) {
        match &ev.body {
            Body::Retrans(r) => {
                self.retrans_segs.inc_by(r.segs as u64);
                if r.lost_retrans && !self.exact_lost_retrans {
                    self.lost_retrans.inc_by(r.segs as u64);
                }
            }
            Body::LostRetrans(r) if self.exact_lost_retrans => {
                self.lost_retrans.inc_by(r.segs as u64);
            }
            Body::Rto(_) => {
                self.rtos.inc();
            }
            _ => {}
        }
        self.conns.on_event(ev);
    }

    /// Count a finding: a stop is counted when first reported and observed in the duration
    /// histogram when it ends; limits and unfair groups are tracked while ongoing.
    pub fn on_finding(&mut self, f: &Finding) {
        match f.kind {
            FindingKind::Stop => {
                let l = stop_labels(f);
                let key = (f.conn.map_or(0, |c| c.cookie), f.start_ns);
                if f.ongoing {
                    // In progress, with the owner and cause it has now (they sharpen as it lasts).
                    let prefix = f.evidence.get("remote_prefix").and_then(|p| p.as_str()).map(str::to_string);
                    self.open_stops.insert(key, (l, prefix));
                } else {
                    // Counted once, when it ends, with the owner and cause it ended with.
                    self.open_stops.remove(&key);
                    self.stops.get_or_create(&l).inc();
                    if let Some(d) = f.duration_s.filter(|d| d.is_finite() && *d >= 0.0) {
                        self.stop_duration.get_or_create(&l).observe(d);
                    }
                }
                self.update_open_stops();
            }
            FindingKind::Limit => {
                let key = (f.conn.map_or(0, |c| c.cookie), limit_reason(&f.cause));
                if f.ongoing {
                    self.open_limits.insert(key);
                } else {
                    self.open_limits.remove(&key);
                }
                self.update_open_limits();
            }
            FindingKind::Unfair => {
                let name = match (&f.group, &f.conn) {
                    (Some(g), _) => group_key(g),
                    (None, Some(c)) => group_key(&c.tuple.to_string()),
                    (None, None) => "unknown".to_string(),
                };
                if f.ongoing {
                    let e = &f.evidence;
                    let streams =
                        e.get("streams").and_then(|s| s.as_i64().or_else(|| s.as_array().map(|a| a.len() as i64)));
                    let v = GroupValues {
                        jain: ev_f64(e, &["jain", "jain_index", "fairness_index"]),
                        even_split: ev_f64(e, &["even_split_efficiency"]),
                        min_max: ev_f64(e, &["min_max_ratio"]),
                        streams: streams.unwrap_or(0),
                        order_stability: e.pointer("/send_phase/order_stability").and_then(|v| v.as_f64()),
                    };
                    self.open_groups.insert(name, v);
                } else {
                    self.open_groups.remove(&name);
                }
                self.unfair_groups.set(self.open_groups.len() as i64);
            }
            FindingKind::Path => {
                let scope = if f.cause.ends_with("partial") { "partial" } else { "all" };
                let key = (f.group.clone().unwrap_or_default(), f.start_ns);
                if f.ongoing {
                    self.open_paths.insert(key, scope);
                } else {
                    self.open_paths.remove(&key);
                    self.path_events.get_or_create(&ScopeLabels { scope }).inc();
                }
                for scope in PATH_SCOPES {
                    let n = self.open_paths.values().filter(|s| **s == scope).count();
                    self.path_events_in_progress.get_or_create(&ScopeLabels { scope }).set(n as i64);
                }
            }
        }
    }

    fn update_open_stops(&self) {
        for (owner, cause) in STOP_CAUSES {
            let l = CauseLabels { owner, cause };
            let n = self.open_stops.values().filter(|(c, _)| *c == l).count();
            self.stops_in_progress.get_or_create(&l).set(n as i64);
        }
    }

    fn update_open_limits(&self) {
        for reason in LIMIT_REASONS {
            let n = self.open_limits.iter().filter(|(_, r)| *r == reason).count();
            self.limited.get_or_create(&ReasonLabels { reason }).set(n as i64);
        }
    }

    /// Recompute per-connection, per-group and health series. Call periodically (about once a
    /// second) with the table after applying events and the latest agent health.
    pub fn refresh(&mut self, table: &ConnTable, health: &Health) {
        // Findings of connections that closed (or were reaped) without an end report.
        let live = |cookie: &u64| table.is_open(*cookie);
        let (ns, nl) = (self.open_stops.len(), self.open_limits.len());
        self.open_stops.retain(|(c, _), _| live(c));
        self.open_limits.retain(|(c, _)| live(c));
        if ns != self.open_stops.len() {
            self.update_open_stops();
        }
        if nl != self.open_limits.len() {
            self.update_open_limits();
        }

        let mut budget = self.series_cap.saturating_sub(fixed_series() + self.health.refresh(health));
        budget -= self.refresh_groups(budget);
        budget -= self.refresh_prefixes(budget);
        let stopped: HashSet<u64> = self.open_stops.keys().map(|(c, _)| *c).collect();
        self.conns.refresh(table, &stopped, budget / PER_CONN_SERIES);
    }

    /// Set the series of the remote prefixes with network stops in progress, the most stopped
    /// first, as many as fit (at most max_groups); returns the series used.
    fn refresh_prefixes(&mut self, budget: usize) -> usize {
        let mut n: HashMap<&str, i64> = HashMap::new();
        for p in self.open_stops.values().filter_map(|(l, p)| p.as_deref().filter(|_| l.owner == "network")) {
            *n.entry(p).or_default() += 1;
        }
        let mut v: Vec<(&str, i64)> = n.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        v.truncate(self.max_groups.min(budget));
        let keep: HashSet<String> = v.iter().map(|(p, _)| p.to_string()).collect();
        for gone in self.shown_prefixes.difference(&keep) {
            self.prefix_stops.remove(&PrefixLabels { prefix: gone.clone() });
        }
        for (p, k) in &v {
            self.prefix_stops.get_or_create(&PrefixLabels { prefix: p.to_string() }).set(*k);
        }
        self.shown_prefixes = keep;
        v.len()
    }

    /// Set the series of the most unfair groups that fit; returns the series used.
    fn refresh_groups(&mut self, budget: usize) -> usize {
        let n = self.open_groups.len().min(self.max_groups).min(budget / PER_GROUP_SERIES);
        let mut groups: Vec<(&String, &GroupValues)> = self.open_groups.iter().collect();
        groups.sort_by(|a, b| a.1.jain.total_cmp(&b.1.jain).then_with(|| a.0.cmp(b.0)));
        groups.truncate(n);
        let keep: HashSet<String> = groups.iter().map(|(g, _)| (*g).clone()).collect();
        for gone in self.shown_groups.difference(&keep) {
            let l = GroupLabels { group: gone.clone() };
            self.group_fairness.remove(&l);
            self.group_even_split.remove(&l);
            self.group_min_max.remove(&l);
            self.group_streams.remove(&l);
            self.group_order_stability.remove(&l);
        }
        for (g, v) in groups {
            let l = GroupLabels { group: g.clone() };
            self.group_fairness.get_or_create(&l).set(v.jain);
            self.group_even_split.get_or_create(&l).set(v.even_split);
            self.group_min_max.get_or_create(&l).set(v.min_max);
            self.group_streams.get_or_create(&l).set(v.streams);
            match v.order_stability {
                Some(x) => {
                    self.group_order_stability.get_or_create(&l).set(x);
                }
                None => {
                    self.group_order_stability.remove(&l);
                }
            }
        }
        self.shown_groups = keep;
        n * PER_GROUP_SERIES
    }
}
