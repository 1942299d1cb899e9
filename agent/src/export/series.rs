//! How many series a scrape holds: what the families always have (counted from their
//! declaration), and the bounded parts that come and go (connections, groups, health's lists).
use prometheus_client::registry::Registry;

use super::families::{ConnFamilies, FindingFamilies, HealthFamilies};

/// Series one shown connection adds: cwnd, in_flight, srtt, delivery rate, goodput, efficiency,
/// stop in progress.
pub const PER_CONN_SERIES: usize = 7;
/// Series per fairness group: index, even-split efficiency, min/max ratio, streams, send-order
/// stability.
pub const PER_GROUP_SERIES: usize = 5;
/// At most this many (need, variant) pairs, BPF programs and maps are exported.
pub const MAX_VARIANTS: usize = 32;
pub const MAX_PROGRAMS: usize = 64;
pub const MAX_MAPS: usize = 32;

/// The series what `register` registers holds, counted from its scrape.
fn count(register: impl FnOnce(&mut Registry)) -> usize {
    let mut r = Registry::default();
    register(&mut r);
    let mut text = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut text, &r);
    text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count()
}

/// Series that exist whatever happens (every fixed label value), health's excluded: stops,
/// losses, path events, unfair groups, limited connections, the overflow connection series, the
/// process metrics.
pub fn fixed_series() -> usize {
    count(|r| {
        super::process::register(r);
        FindingFamilies::new().register(r);
        ConnFamilies::new().register(r);
    })
}

/// Health's series that always exist.
pub fn health_fixed_series() -> usize {
    count(|r| HealthFamilies::new().register(r))
}

/// Health's series at their bounds: one per hook variant, three per program, two per map.
pub fn health_max_series() -> usize {
    health_fixed_series() + MAX_VARIANTS + 3 * MAX_PROGRAMS + 2 * MAX_MAPS
}

/// The smallest `series_cap` that always holds: fixed series, health at its bounds, one connection.
pub fn min_series_cap() -> usize {
    fixed_series() + health_max_series() + PER_CONN_SERIES
}
