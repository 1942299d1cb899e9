//! Per-connection series for a bounded top-K of bulk connections, everything else summed into
//! one overflow series (`conn="other"`); closed connections' series go away at the next refresh.
//! Labels: the connection, its process's command, transfer, container and systemd unit (bounded
//! as the series are, by top-K).
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use prometheus_client::registry::Registry;

use super::families::{ConnFamilies, ConnLabels};
use crate::model::{Body, ConnEntry, ConnTable, Event, Filter};

/// How much of its score a connection keeps per refresh when it goes quiet: a stopped transfer
/// stays in the top-K for a while instead of vanishing exactly when it is interesting.
const SCORE_DECAY: f64 = 0.9;
/// A shown connection is only displaced by one this much better (no flapping at the edge).
const SHOWN_BONUS: f64 = 1.1;

/// Rate state per connection, kept between refreshes.
#[derive(Debug, Default, Clone)]
struct Rate {
    sample_ns: u64,
    snap_ns: u64,
    last_ns: u64,
    last_bytes: u64,
    goodput: f64,
    score: f64,
    max_delivery: f64,
    generation: u64,
}

/// What one connection contributes to its series.
#[derive(Debug, Default, Clone, Copy)]
struct View {
    cwnd: i64,
    in_flight: i64,
    srtt_s: f64,
    delivery: f64,
    goodput: f64,
    efficiency: f64,
}

#[derive(Debug)]
pub struct ConnMetrics {
    f: ConnFamilies,
    top_k: usize,
    bulk_min_bytes: u64,
    transfers: Vec<(String, Filter)>,
    rates: HashMap<u64, Rate>,
    generation: u64,
    shown: HashMap<u64, ConnLabels>,
}

/// `a.b.c.d:p`, `[v6]:p`; IPv4-mapped IPv6 shown as IPv4.
fn addr(a: SocketAddr) -> String {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => format!("{v4}:{}", v6.port()),
            None => a.to_string(),
        },
        SocketAddr::V4(_) => a.to_string(),
    }
}

/// A name as a short printable label value.
fn printable(s: &str, max: usize) -> String {
    s.chars().take(max).map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect()
}

/// A command name as a label value.
fn comm(s: &str) -> String {
    printable(s, 16)
}

impl ConnMetrics {
    /// `top_k` connections of at least `bulk_min_bytes` get their own series, labelled with the
    /// first transfer whose filter they match.
    pub fn new(top_k: usize, bulk_min_bytes: u64, transfers: Vec<(String, Filter)>) -> Self {
        ConnMetrics {
            f: ConnFamilies::new(),
            top_k,
            bulk_min_bytes,
            transfers,
            rates: HashMap::new(),
            generation: 0,
            shown: HashMap::new(),
        }
    }

    pub fn register(&self, r: &mut Registry) {
        self.f.register(r);
    }

    /// New top-K, bulk threshold and transfer rules from the next refresh on (a reload).
    pub fn reconfigure(&mut self, top_k: usize, bulk_min_bytes: u64, transfers: Vec<(String, Filter)>) {
        (self.top_k, self.bulk_min_bytes, self.transfers) = (top_k, bulk_min_bytes, transfers);
    }

    /// Note when a connection's latest sample and snapshot were taken (the fresher one is used).
    pub fn on_event(&mut self, ev: &Event) {
        let slot = match &ev.body {
            Body::Sample(_) => 0,
            Body::Snapshot(_) | Body::Close(_) => 1,
            _ => return,
        };
        let r = self.rates.entry(ev.conn.cookie).or_default();
        if slot == 0 {
            r.sample_ns = r.sample_ns.max(ev.ts_ns);
        } else {
            r.snap_ns = r.snap_ns.max(ev.ts_ns);
        }
    }

    fn labels(&self, e: &ConnEntry) -> ConnLabels {
        let t = e.id.tuple;
        let transfer =
            self.transfers.iter().find(|(_, f)| f.matches(&e.id)).map(|(n, _)| n.clone()).unwrap_or_default();
        let process = e.process.as_ref().or(e.snap.as_ref().map(|s| &s.process));
        let cgroup = process.and_then(|p| p.cgroup.as_ref());
        ConnLabels {
            conn: format!("{}>{}", addr(t.local), addr(t.remote)),
            comm: process.map(|p| comm(&p.comm)).unwrap_or_default(),
            transfer,
            container: cgroup.and_then(|c| c.container_label()).map(|c| printable(c, 64)).unwrap_or_default(),
            unit: cgroup.and_then(|c| c.unit.as_deref()).map(|u| printable(u, 128)).unwrap_or_default(),
        }
    }

    /// Update rates and the view of one live connection.
    fn view(rate: &mut Rate, e: &ConnEntry) -> (View, u64) {
        let use_sample = match (&e.last_sample, &e.snap) {
            (Some(_), Some(_)) => rate.sample_ns >= rate.snap_ns,
            (Some(_), None) => true,
            _ => false,
        };
        let mut v = View::default();
        let mut bytes = 0;
        if let Some(s) = &e.last_sample {
            bytes = s.bytes_acked;
            if use_sample {
                v.cwnd = s.cwnd as i64;
                v.in_flight = s.in_flight as i64;
                v.srtt_s = s.srtt_us as f64 / 1e6;
                v.delivery = s.delivery_rate_bps();
            }
        }
        if let Some(s) = &e.snap {
            bytes = bytes.max(s.bytes_acked);
            if !use_sample {
                v.cwnd = s.cwnd as i64;
                let left = s.lost_out.saturating_add(s.sacked_out);
                v.in_flight = s.packets_out.saturating_sub(left).saturating_add(s.retrans_out) as i64;
                v.srtt_s = s.srtt_us as f64 / 1e6;
                v.delivery = s.delivery_rate_bps();
            }
        }
        if rate.last_ns != 0 && e.last_ns > rate.last_ns {
            let dt = (e.last_ns - rate.last_ns) as f64 / 1e9;
            rate.goodput = bytes.saturating_sub(rate.last_bytes) as f64 / dt;
        }
        if rate.last_ns == 0 || e.last_ns > rate.last_ns {
            rate.last_ns = e.last_ns;
            rate.last_bytes = bytes;
        }
        rate.score = rate.goodput.max(rate.score * SCORE_DECAY);
        rate.max_delivery = rate.max_delivery.max(v.delivery);
        v.goodput = rate.goodput;
        v.efficiency = if rate.max_delivery > 0.0 { (rate.goodput / rate.max_delivery).min(1.0) } else { 0.0 };
        (v, bytes)
    }

    /// Recompute: show at most `min(top_k, max_shown)` connections, sum the rest into `other`.
    /// Connections in `stopped` rank first. Returns how many connections are shown.
    pub fn refresh(&mut self, table: &ConnTable, stopped: &HashSet<u64>, max_shown: usize) -> usize {
        self.generation += 1;
        let generation = self.generation;
        let mut views: Vec<(u64, bool, f64, View)> = Vec::with_capacity(table.len());
        let (mut tracked, mut bulk) = (0, 0);
        for e in table.iter().filter(|e| !e.closed) {
            tracked += 1;
            let rate = self.rates.entry(e.id.cookie).or_default();
            rate.generation = generation;
            let (v, bytes) = Self::view(rate, e);
            let is_stopped = stopped.contains(&e.id.cookie);
            let is_bulk = bytes >= self.bulk_min_bytes;
            bulk += is_bulk as i64;
            let mut score = if is_bulk || is_stopped { rate.score } else { -1.0 };
            if self.shown.contains_key(&e.id.cookie) {
                score *= SHOWN_BONUS;
            }
            views.push((e.id.cookie, is_stopped, score, v));
        }
        self.rates.retain(|_, r| r.generation == generation);

        let k = self.top_k.min(max_shown).min(views.iter().filter(|v| v.1 || v.2 >= 0.0).count());
        let better = |a: &(u64, bool, f64, View), b: &(u64, bool, f64, View)| {
            b.1.cmp(&a.1).then(b.2.total_cmp(&a.2)).then(a.0.cmp(&b.0))
        };
        if k > 0 && k < views.len() {
            views.select_nth_unstable_by(k - 1, better);
        }
        let (top, rest) = views.split_at(k);

        let mut now: HashMap<u64, ConnLabels> = HashMap::with_capacity(k);
        let mut used: HashSet<String> = HashSet::with_capacity(k);
        for (cookie, _, _, _) in top {
            let Some(mut l) = table.get(*cookie).map(|e| self.labels(e)) else { continue };
            // The same 4-tuple in two network namespaces: keep the series apart.
            if used.contains(&l.conn) {
                l.conn = format!("{}#{}", l.conn, crate::model::Sk(*cookie));
            }
            used.insert(l.conn.clone());
            now.insert(*cookie, l);
        }
        for (cookie, l) in &self.shown {
            if now.get(cookie) != Some(l) {
                self.remove(l);
            }
        }
        for (cookie, stopped, _, v) in top {
            if let Some(l) = now.get(cookie) {
                self.f.cwnd.get_or_create(l).set(v.cwnd);
                self.f.in_flight.get_or_create(l).set(v.in_flight);
                self.f.srtt.get_or_create(l).set(v.srtt_s);
                self.f.delivery.get_or_create(l).set(v.delivery);
                self.f.goodput.get_or_create(l).set(v.goodput);
                self.f.efficiency.get_or_create(l).set(v.efficiency);
                self.f.stopped.get_or_create(l).set(*stopped as i64);
            }
        }
        let mut sum = View::default();
        for (_, _, _, v) in rest {
            sum.cwnd += v.cwnd;
            sum.in_flight += v.in_flight;
            sum.delivery += v.delivery;
            sum.goodput += v.goodput;
        }
        let o = ConnLabels::other();
        self.f.cwnd.get_or_create(&o).set(sum.cwnd);
        self.f.in_flight.get_or_create(&o).set(sum.in_flight);
        self.f.delivery.get_or_create(&o).set(sum.delivery);
        self.f.goodput.get_or_create(&o).set(sum.goodput);
        self.f.tracked.set(tracked + table.known() as i64);
        self.f.bulk.set(bulk);
        self.f.overflow.set(rest.len() as i64);
        self.shown = now;
        self.shown.len()
    }

    fn remove(&self, l: &ConnLabels) {
        self.f.cwnd.remove(l);
        self.f.in_flight.remove(l);
        self.f.srtt.remove(l);
        self.f.delivery.remove(l);
        self.f.goodput.remove(l);
        self.f.efficiency.remove(l);
        self.f.stopped.remove(l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::tests::{conn, ev, snap};
    use crate::model::{cgroup, Cgroup};

    #[test]
    fn a_top_k_series_is_labelled_with_its_container_and_unit() {
        let id = "7d186119302244ddad365b484cbd0c9e59d2718a87cea0497650871236bba78c";
        let mut boxed = cgroup::parse(&format!("/machine.slice/libpod-{id}.scope"));
        let unnamed = Cgroup::new(boxed.clone());
        boxed.container_name = Some("tv-box".into());
        let cgroups = [
            Some(Cgroup::new(boxed)),
            Some(unnamed),
            Some(Cgroup::new(cgroup::parse("/system.slice/sync.service"))),
            None,
        ];
        let mut m = ConnMetrics::new(10, 1, Vec::new());
        let mut reg = Registry::default();
        m.register(&mut reg);
        let mut t = ConnTable::new(false);
        for round in 0..2u64 {
            for (i, cg) in cgroups.iter().enumerate() {
                let mut s = snap((2 << 20) + round * 1_000_000);
                s.process.cgroup = cg.clone();
                let e = ev(1_000_000_000 * (round + 1), conn(i as u32), Body::Snapshot(s));
                t.apply(&e);
                m.on_event(&e);
            }
            m.refresh(&t, &HashSet::new(), 10);
        }
        let text = crate::export::tests::scrape(&reg);
        let unit = format!("libpod-{id}.scope");
        for (c, want) in [
            (0, format!("container=\"tv-box\",unit=\"{unit}\"")),
            (1, format!("container=\"{}\",unit=\"{unit}\"", &id[..12])),
            (2, "container=\"\",unit=\"sync.service\"".to_string()),
            (3, "container=\"\",unit=\"\"".to_string()),
        ] {
            let t = conn(c).tuple;
            let line = text.lines().find(|l| l.contains(&format!("conn=\"{}>{}\"", t.local, t.remote)));
            let line = line.unwrap_or_else(|| panic!("no series of conn {c}:\n{text}"));
            assert!(line.contains(&want), "{want} not in {line}");
        }
    }
}
