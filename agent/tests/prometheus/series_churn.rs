//! Thousands of short connections against the live daemon: the series count of /metrics stays under
//! the configured cap while they come and go, and returns to its baseline once they are closed.
use std::time::{Duration, Instant};

use tcpvigil::config::Config;

use crate::support::churn::{self, Churn};
use crate::support::daemon::{self, Daemon};
use crate::support::{require_root, Pair};

/// The cap the daemon runs with: low enough that the churn reaches it (the default is 2000).
const SERIES_CAP: usize = 600;
/// Closed connections' series must be gone within this long after the last one closed.
const RETURN_WITHIN: Duration = Duration::from_secs(15);
const CHURN: Churn =
    Churn { port: 7411, total: 3000, over: Duration::from_secs(15), hold: Duration::from_secs(2), bytes: 64 * 1024 };

/// Series of one scrape: all of them, those of the churn's connections, those of other connections
/// on the host (other tests, other users), and the rest (the agent's own, which must come back).
#[derive(Debug, Clone, Copy, Default)]
struct Count {
    total: usize,
    churn: usize,
    foreign: usize,
}

impl Count {
    fn own(&self) -> usize {
        self.total - self.churn - self.foreign
    }
}

fn count(text: &str, pair: &Pair) -> Count {
    let mut c = Count::default();
    let mine = [format!("conn=\"{}:", pair.snd_ip), format!("conn=\"{}:", pair.rcv_ip)];
    for l in daemon::series(text) {
        c.total += 1;
        if mine.iter().any(|m| l.contains(m.as_str())) {
            c.churn += 1;
        } else if l.contains("conn=\"") && !l.contains("conn=\"other\"") {
            c.foreign += 1;
        }
    }
    c
}

#[test]
fn churn_of_3000_short_connections_stays_under_the_series_cap_and_returns_to_baseline() {
    if !require_root("series churn") {
        return;
    }
    let mut cfg = Config::default();
    cfg.export.series_cap = SERIES_CAP;
    cfg.export.top_k = 1000;
    // Each churn connection sends 64 KiB: make that bulk, so every one competes for series.
    cfg.export.bulk_min_bytes = 32 * 1024;
    let d = Daemon::start("churn", &toml::to_string(&cfg).expect("config TOML"));
    let pair = Pair::new("ch");
    std::thread::sleep(Duration::from_secs(3));
    let scrape = || d.scrape().unwrap_or_else(|e| panic!("scrape: {e}"));
    let before = count(&scrape(), &pair);

    let t0 = Instant::now();
    let worker = std::thread::scope(|s| {
        let h = s.spawn(|| churn::run(&pair, CHURN));
        let (mut peak, mut over_cap, mut overflow_seen) = (before, Vec::new(), 0.0f64);
        while !h.is_finished() {
            let text = scrape();
            let c = count(&text, &pair);
            if c.total > SERIES_CAP {
                over_cap.push(c.total);
            }
            if c.total > peak.total {
                peak = c;
            }
            overflow_seen = overflow_seen.max(daemon::value(&text, "tcpvigil_overflow_connections ").unwrap_or(0.0));
            std::thread::sleep(Duration::from_millis(200));
        }
        (h.join().expect("churn thread"), peak, over_cap, overflow_seen)
    });
    let (stats, peak, over_cap, overflow) = worker;
    let stats = stats.expect("churn ran");
    let churned = t0.elapsed();

    let t1 = Instant::now();
    let after = loop {
        let c = count(&scrape(), &pair);
        if (c.churn == 0 && c.own() == before.own()) || t1.elapsed() > RETURN_WITHIN {
            break c;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let back_in = t1.elapsed();
    let _ = d.stop();

    eprintln!(
        "== churn: {} connections ({} failed, at most {} open at once) in {:.1} s; series cap {SERIES_CAP}",
        stats.opened,
        stats.failed,
        stats.max_open,
        churned.as_secs_f64()
    );
    eprintln!("   series before: {} (agent {}, other connections {})", before.total, before.own(), before.foreign);
    eprintln!(
        "   series at peak: {} (churn {}, agent {}, other connections {}); most connections in conn=\"other\": {overflow}",
        peak.total,
        peak.churn,
        peak.own(),
        peak.foreign
    );
    eprintln!(
        "   series after: {} (churn {}, agent {}, other connections {}) {:.1} s after the last close",
        after.total,
        after.churn,
        after.own(),
        after.foreign,
        back_in.as_secs_f64()
    );
    assert!(stats.failed * 100 <= CHURN.total, "{} of {} connections failed", stats.failed, CHURN.total);
    assert!(over_cap.is_empty(), "scrapes above the cap of {SERIES_CAP}: {over_cap:?}");
    assert!(peak.churn > 0, "the churn's connections never got series: the test would prove nothing");
    assert!(overflow > 0.0, "the cap never pushed a connection into conn=\"other\": the test would prove nothing");
    assert_eq!(after.churn, 0, "series of closed churn connections left after {RETURN_WITHIN:?}");
    assert_eq!(after.own(), before.own(), "the agent's own series did not return to the baseline");
}
