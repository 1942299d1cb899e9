//! Timestamps in both CLOCK_MONOTONIC (what the agent uses) and unix time, so truth lines up with either.
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
