//! Prometheus metrics: typed families for stops, fairness, limits, loss counters and the agent's
//! own health (declared in `families`), fed from events, findings and a periodic refresh, with a
//! hard series cap.
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

use prometheus_client::registry::Registry;

use super::config::ExportConfig;
use super::conns::ConnMetrics;
use super::families::{
    stop_labels_all, CauseLabels, FindingFamilies, GroupLabels, MechanismLabels, PrefixLabels, ReasonLabel,
    ReasonLabels, ScopeLabels,
};
use super::health::{Health, HealthMetrics};
use super::series::{fixed_series, PER_CONN_SERIES, PER_GROUP_SERIES};
use crate::model::{Body, Cause, ConnTable, Event, Finding, FindingKind, PathScope, StopCause, StopOwner};

/// Longest group label value; longer keys are cut (collisions then merge, which is bounded).
const MAX_GROUP_LEN: usize = 64;

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
    f: FindingFamilies,
    conns: ConnMetrics,
    health: HealthMetrics,
    /// Series that always exist (health's aside).
    fixed: usize,

    exact_lost_retrans: bool,
    series_cap: usize,
    max_groups: usize,
    /// Stops in progress: (cookie, start_ns) -> cause.
    open_stops: HashMap<(u64, u64), (CauseLabels, Option<String>)>,
    /// Remote prefixes with a network stop in progress, as last exported.
    shown_prefixes: HashSet<String>,
    /// Limits in progress: (cookie, reason).
    open_limits: HashSet<(u64, ReasonLabel)>,
    /// Unfair groups in progress.
    open_groups: HashMap<String, GroupValues>,
    /// Path events going on: (prefix, start) -> scope.
    open_paths: HashMap<(String, u64), PathScope>,
    shown_groups: HashSet<String>,
}

fn stop_labels(f: &Finding) -> CauseLabels {
    let owner = f.owner.unwrap_or(StopOwner::Network);
    match f.cause.stop() {
        Some(cause) if cause.owner() == owner => CauseLabels { owner, cause },
        _ => CauseLabels { owner: StopOwner::Network, cause: StopCause::Unknown },
    }
}

fn limit_reason(c: Cause) -> ReasonLabel {
    match c {
        Cause::Limit(r) => ReasonLabel::Reason(r),
        _ => ReasonLabel::Other,
    }
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
        Metrics {
            f: FindingFamilies::new(),
            conns: ConnMetrics::new(cfg.top_k, cfg.bulk_min_bytes, cfg.transfer_filters()),
            health: HealthMetrics::new(),
            fixed: fixed_series(),
            exact_lost_retrans: false,
            series_cap: cfg.series_cap,
            max_groups: cfg.max_groups,
            open_stops: HashMap::new(),
            open_limits: HashSet::new(),
            open_groups: HashMap::new(),
            open_paths: HashMap::new(),
            shown_prefixes: HashSet::new(),
            shown_groups: HashSet::new(),
        }
    }

    /// A fresh registry with these metrics under the `tcpvigil_` prefix.
    pub fn new_registered(cfg: &ExportConfig) -> (Self, Registry) {
        let m = Self::new(cfg);
        let mut r = Registry::default();
        m.register(&mut r);
        (m, r)
    }

    /// Register every family (clones share their values) under `tcpvigil_` in `registry`, and
    /// the standard `process_*` metrics at its root.
    pub fn register(&self, registry: &mut Registry) {
        super::process::register(registry);
        let r = registry.sub_registry_with_prefix("tcpvigil");
        self.f.register(r);
        self.conns.register(r);
        self.health.register(r);
    }

    /// New `[export]` settings for the series from the next refresh on (a reload; `listen`,
    /// `web_config` and `events` are the daemon's).
    pub fn reconfigure(&mut self, cfg: &ExportConfig) {
        self.conns.reconfigure(cfg.top_k, cfg.bulk_min_bytes, cfg.transfer_filters());
        self.series_cap = cfg.series_cap;
        self.max_groups = cfg.max_groups;
    }

    /// Tell whether lost retransmissions come from the exact variant (then only `LostRetrans`
    /// events count, as in `ConnTable`). Set once the hook variants are chosen.
    pub fn set_exact_lost_retrans(&mut self, exact: bool) {
        self.exact_lost_retrans = exact;
    }

    /// The hook variants in build_info: `preferred` of `total` needs on their preferred program,
    /// `fallback` the needs on a fallback variant.
    pub fn set_hooks(&mut self, preferred: usize, total: usize, fallback: &[&str]) {
        self.health.set_hooks(preferred, total, fallback);
    }

    /// Count what one event says (host-wide counters) and note sample/snapshot freshness.
    pub fn on_event(&mut self, ev: &Event) {
        match &ev.body {
            Body::Retrans(r) => {
                self.f.retrans_segs.inc_by(r.segs as u64);
                if r.lost_retrans && !self.exact_lost_retrans {
                    self.f.lost_retrans.inc_by(r.segs as u64);
                }
            }
            Body::LostRetrans(r) if self.exact_lost_retrans => {
                self.f.lost_retrans.inc_by(r.segs as u64);
            }
            Body::Rto(_) => {
                self.f.rtos.inc();
            }
            _ => {}
        }
        self.conns.on_event(ev);
    }

    /// Count a finding: a stop is counted when first reported and observed in the duration
    /// histogram when it ends; limits and unfair groups are tracked while ongoing.
    pub fn on_finding(&mut self, f: &Finding) {
        match f.kind() {
            FindingKind::Stop => {
                let l = stop_labels(f);
                let key = (f.conn.map_or(0, |c| c.cookie), f.start_ns);
                if f.ongoing {
                    // In progress, with the owner and cause it has now (they sharpen as it lasts).
                    self.open_stops.insert(key, (l, f.path.remote_prefix.clone()));
                } else {
                    // Counted once, when it ends, with the owner and cause it ended with.
                    self.open_stops.remove(&key);
                    self.f.stops.get_or_create(&l).inc();
                    if let Some(mechanism) = f.mechanism {
                        self.f.stop_mechanisms.get_or_create(&MechanismLabels { mechanism }).inc();
                    }
                    if let Some(d) = f.duration_s.filter(|d| d.is_finite() && *d >= 0.0) {
                        self.f.stop_duration.get_or_create(&l).observe(d);
                    }
                }
                self.update_open_stops();
            }
            FindingKind::Limit => {
                let key = (f.conn.map_or(0, |c| c.cookie), limit_reason(f.cause));
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
                self.f.unfair_groups.set(self.open_groups.len() as i64);
            }
            FindingKind::Path => {
                let scope = match f.cause {
                    Cause::Path(scope) => scope,
                    _ => PathScope::All,
                };
                let key = (f.group.clone().unwrap_or_default(), f.start_ns);
                if f.ongoing {
                    self.open_paths.insert(key, scope);
                } else {
                    self.open_paths.remove(&key);
                    self.f.path_events.get_or_create(&ScopeLabels { scope }).inc();
                }
                for &scope in PathScope::ALL {
                    let n = self.open_paths.values().filter(|s| **s == scope).count();
                    self.f.path_events_in_progress.get_or_create(&ScopeLabels { scope }).set(n as i64);
                }
            }
        }
    }

    fn update_open_stops(&self) {
        for l in stop_labels_all() {
            let n = self.open_stops.values().filter(|(c, _)| *c == l).count();
            self.f.stops_in_progress.get_or_create(&l).set(n as i64);
        }
    }

    fn update_open_limits(&self) {
        for reason in ReasonLabel::all() {
            let n = self.open_limits.iter().filter(|(_, r)| *r == reason).count();
            self.f.limited.get_or_create(&ReasonLabels { reason }).set(n as i64);
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

        let mut budget = self.series_cap.saturating_sub(self.fixed + self.health.refresh(health));
        budget -= self.refresh_groups(budget);
        budget -= self.refresh_prefixes(budget);
        let stopped: HashSet<u64> = self.open_stops.keys().map(|(c, _)| *c).collect();
        self.conns.refresh(table, &stopped, budget / PER_CONN_SERIES);
    }

    /// Set the series of the remote prefixes with network stops in progress, the most stopped
    /// first, as many as fit (at most max_groups); returns the series used.
    fn refresh_prefixes(&mut self, budget: usize) -> usize {
        let mut n: HashMap<&str, i64> = HashMap::new();
        for p in self.open_stops.values().filter_map(|(l, p)| p.as_deref().filter(|_| l.owner == StopOwner::Network)) {
            *n.entry(p).or_default() += 1;
        }
        let mut v: Vec<(&str, i64)> = n.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        v.truncate(self.max_groups.min(budget));
        let keep: HashSet<String> = v.iter().map(|(p, _)| p.to_string()).collect();
        for gone in self.shown_prefixes.difference(&keep) {
            self.f.prefix_stops.remove(&PrefixLabels { prefix: gone.clone() });
        }
        for (p, k) in &v {
            self.f.prefix_stops.get_or_create(&PrefixLabels { prefix: p.to_string() }).set(*k);
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
            self.f.group_fairness.remove(&l);
            self.f.group_even_split.remove(&l);
            self.f.group_min_max.remove(&l);
            self.f.group_streams.remove(&l);
            self.f.group_order_stability.remove(&l);
        }
        for (g, v) in groups {
            let l = GroupLabels { group: g.clone() };
            self.f.group_fairness.get_or_create(&l).set(v.jain);
            self.f.group_even_split.get_or_create(&l).set(v.even_split);
            self.f.group_min_max.get_or_create(&l).set(v.min_max);
            self.f.group_streams.get_or_create(&l).set(v.streams);
            match v.order_stability {
                Some(x) => {
                    self.f.group_order_stability.get_or_create(&l).set(x);
                }
                None => {
                    self.f.group_order_stability.remove(&l);
                }
            }
        }
        self.shown_groups = keep;
        n * PER_GROUP_SERIES
    }
}
