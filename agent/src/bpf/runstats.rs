//! Per-program run time, sampled: the kernel's run-time statistics on for a window of every period.
//!
//! With statistics on, every BPF program on the host reads the clock twice per run. Kept on, that
//! cost a CPU-bound transfer over veth 3.9 % of its throughput here (median of 6 runs, against
//! +0.4 % with them off; `scripts/bench-datapath.sh` and the comparison in README "Cost"), twice
//! the agent's whole budget. So they are on for `WINDOW` of every `PERIOD`, and each window's
//! counts are scaled by `PERIOD / WINDOW` into monotonic estimates.
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

pub const WINDOW: Duration = Duration::from_secs(2);
pub const PERIOD: Duration = Duration::from_secs(20);

/// Raw kernel counters of one program: run time ns, runs, recursion misses.
pub type Raw = (u64, u64, u64);

/// Turns raw counters read at any time into estimated totals. The clock and the switch are passed
/// in, so the arithmetic is tested without a kernel.
#[derive(Debug)]
pub struct RunStats {
    enabled: bool,
    on: Option<(OwnedFd, Instant)>,
    next_on: Instant,
    /// Raw counters at the start of the open window.
    start: HashMap<String, Raw>,
    /// Estimated run time ns and runs since the agent started.
    est: HashMap<String, (u64, u64)>,
}

impl RunStats {
    pub fn new(enabled: bool, now: Instant) -> RunStats {
        RunStats { enabled, on: None, next_on: now, start: HashMap::new(), est: HashMap::new() }
    }

    /// Open or close the window as time requires. `enable` turns statistics on (the fd keeps them on
    /// until dropped); `read` returns the raw counters of every program.
    pub fn tick(
        &mut self,
        now: Instant,
        enable: impl FnOnce() -> Option<OwnedFd>,
        read: impl FnOnce() -> Vec<(String, Raw)>,
    ) {
        if !self.enabled {
            return;
        }
        match &self.on {
            None if now >= self.next_on => {
                self.start = read().into_iter().collect();
                if let Some(fd) = enable() {
                    self.on = Some((fd, now));
                }
                self.next_on = now + PERIOD;
            }
            Some((_, since)) if now.duration_since(*since) >= WINDOW => {
                let open = now.duration_since(*since).as_secs_f64();
                let scale = PERIOD.as_secs_f64() / open.max(WINDOW.as_secs_f64());
                for (name, (t, n, _)) in read() {
                    let (t0, n0, _) = self.start.get(&name).copied().unwrap_or((t, n, 0));
                    let e = self.est.entry(name).or_default();
                    e.0 += (t.saturating_sub(t0) as f64 * scale) as u64;
                    e.1 += (n.saturating_sub(n0) as f64 * scale) as u64;
                }
                self.on = None;
            }
            _ => {}
        }
    }

    /// (label, estimated run time ns, estimated runs, recursion misses): misses are counted by the
    /// kernel whether or not statistics are on, so they are passed through as read.
    pub fn report(&self, raw: Vec<(String, Raw)>) -> Vec<(String, u64, u64, u64)> {
        raw.into_iter()
            .map(|(name, (_, _, m))| {
                let (t, n) = self.est.get(&name).copied().unwrap_or((0, 0));
                (name, t, n, m)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> Option<OwnedFd> {
        std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
    }

    #[test]
    fn a_window_is_scaled_to_the_period_and_time_outside_windows_is_not_counted() {
        let t0 = Instant::now();
        let mut s = RunStats::new(true, t0);
        let raw = |t: u64, n: u64, m: u64| vec![("p".to_string(), (t, n, m))];
        s.tick(t0, fd, || raw(1_000, 10, 0)); // window opens
        s.tick(t0 + Duration::from_secs(1), fd, || panic!("no read inside the window"));
        s.tick(t0 + WINDOW, fd, || raw(3_000, 30, 1)); // closes: 2000 ns, 20 runs
        let k = (PERIOD.as_secs() / WINDOW.as_secs()) as u64;
        assert_eq!(s.report(raw(0, 0, 5)), vec![("p".to_string(), 2_000 * k, 20 * k, 5)]);
        // Counts between windows (another tool had statistics on) are left out.
        s.tick(t0 + PERIOD, fd, || raw(9_000, 90, 1)); // next window opens
        s.tick(t0 + PERIOD + WINDOW, fd, || raw(9_100, 91, 1));
        assert_eq!(s.report(raw(0, 0, 1)), vec![("p".to_string(), 2_100 * k, 21 * k, 1)]);
    }

    #[test]
    fn a_late_close_scales_by_the_time_really_open() {
        let t0 = Instant::now();
        let mut s = RunStats::new(true, t0);
        s.tick(t0, fd, || vec![("p".into(), (0, 0, 0))]);
        s.tick(t0 + WINDOW * 2, fd, || vec![("p".into(), (4_000, 40, 0))]);
        let k = PERIOD.as_secs_f64() / (WINDOW * 2).as_secs_f64();
        assert_eq!(
            s.report(vec![("p".into(), (0, 0, 0))]),
            vec![("p".into(), (4_000.0 * k) as u64, (40.0 * k) as u64, 0)]
        );
    }

    #[test]
    fn disabled_reports_only_misses_and_never_enables() {
        let t0 = Instant::now();
        let mut s = RunStats::new(false, t0);
        s.tick(t0, || panic!("enabled while off"), Vec::new);
        assert_eq!(s.report(vec![("p".into(), (5, 5, 3))]), vec![("p".into(), 0, 0, 3)]);
    }

    #[test]
    fn a_refused_enable_leaves_the_window_closed() {
        let t0 = Instant::now();
        let mut s = RunStats::new(true, t0);
        s.tick(t0, || None, || vec![("p".into(), (0, 0, 0))]);
        s.tick(t0 + WINDOW, fd, || panic!("no window to close"));
        assert_eq!(s.report(vec![("p".into(), (7, 7, 0))]), vec![("p".into(), 0, 0, 0)]);
    }
}
