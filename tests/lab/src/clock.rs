//! Timestamps in both CLOCK_MONOTONIC (what the agent uses) and unix time, so truth lines up with either;
//! the RFC 3339 times of the daemon's events read back as unix seconds.
use serde::{Deserialize, Serialize};

/// One instant, read from both clocks back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// CLOCK_MONOTONIC in nanoseconds (same clock as bpf_ktime_get_ns).
    pub mono_ns: u64,
    /// CLOCK_REALTIME in nanoseconds since the unix epoch.
    pub unix_ns: u64,
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid, writable timespec.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn mono_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

impl Stamp {
    /// Reads both clocks now.
    pub fn now() -> Self {
        Stamp { mono_ns: mono_ns(), unix_ns: read(libc::CLOCK_REALTIME) }
    }

    /// Both clocks `ahead` from now: a start every thread can wait for.
    pub fn ahead(ahead: std::time::Duration) -> Self {
        let n = Stamp::now();
        let d = ahead.as_nanos() as u64;
        Stamp { mono_ns: n.mono_ns + d, unix_ns: n.unix_ns + d }
    }

    /// Seconds from `earlier` to `self` on the monotonic clock (negative if earlier is later).
    pub fn secs_since(&self, earlier: &Stamp) -> f64 {
        (self.mono_ns as i128 - earlier.mono_ns as i128) as f64 / 1e9
    }
}

/// Unix seconds of an RFC 3339 UTC time such as `2026-11-22T11:58:02.575Z` (the daemon's events);
/// NaN when it is not one.
pub fn parse_rfc3339(s: &str) -> f64 {
    match humantime::parse_rfc3339(s) {
        Ok(t) => t.duration_since(std::time::UNIX_EPOCH).map_or(f64::NAN, |d| d.as_secs_f64()),
        Err(_) => f64::NAN,
    }
}

/// RFC 3339 UTC with milliseconds of unix seconds `t` (what the daemon writes).
pub fn rfc3339(t: f64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(t.max(0.0));
    humantime::format_rfc3339_millis(at).to_string()
}

/// `YYYYMMDD-HHMMSS` (UTC) of unix seconds: a sortable name for a run's directory.
pub fn utc_stamp(unix_s: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_s);
    let s = humantime::format_rfc3339_seconds(at).to_string(); // 2026-11-18T12:00:00Z
    s.trim_end_matches('Z').replace(['-', ':'], "").replace('T', "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_read_back_and_bad_ones_are_nan() {
        let t = 1_795_000_000.25;
        assert!((parse_rfc3339(&rfc3339(t)) - t).abs() < 1e-6);
        assert!((parse_rfc3339("2026-11-22T11:58:02.575Z") - 1_795_348_682.575).abs() < 1e-6);
        assert!(parse_rfc3339("yesterday").is_nan());
    }

    #[test]
    fn a_run_stamp_sorts_as_its_time() {
        assert_eq!(utc_stamp(0), "19700101-000000");
        assert_eq!(utc_stamp(1_700_000_000), "20231114-221320");
        assert_eq!(utc_stamp(1_795_348_682), "20261122-115802");
    }
}
