//! The clocks: kernel records are stamped with CLOCK_MONOTONIC; people read wall time. One offset
//! between them, one way to write a date.
use std::time::{Duration, UNIX_EPOCH};

use nix::time::{clock_gettime, ClockId};

fn now_ns(clock: ClockId) -> Option<i128> {
    clock_gettime(clock).ok().map(|t| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128)
}

/// The detectors' time passes (a tick) no sooner than this after the last tick, ...
pub const TICK_MIN: Duration = Duration::from_millis(20);
/// ... and no later than this, whenever they are next due (a stop's ask or threshold, the next
/// fairness evaluation): the daemon's threads wake that often, and every wakeup takes the CPU
/// from whatever runs, a CPU-bound transfer included.
pub const TICK_MAX: Duration = Duration::from_millis(200);

/// When the tick after one at `now_ns` comes, for detectors next due at `due_ns`.
pub fn next_tick(now_ns: u64, due_ns: u64) -> u64 {
    due_ns.clamp(now_ns + TICK_MIN.as_nanos() as u64, now_ns + TICK_MAX.as_nanos() as u64)
}

/// CLOCK_MONOTONIC now, nanoseconds.
pub fn mono_now_ns() -> u64 {
    now_ns(ClockId::CLOCK_MONOTONIC).map_or(0, |t| t as u64)
}

/// Nanoseconds to add to a CLOCK_MONOTONIC time to get Unix time (CLOCK_REALTIME), now; 0 when a
/// clock cannot be read. Read it again now and then to follow steps of the wall clock.
pub fn mono_to_unix_ns() -> i64 {
    match (now_ns(ClockId::CLOCK_REALTIME), now_ns(ClockId::CLOCK_MONOTONIC)) {
        (Some(r), Some(m)) => (r - m).clamp(i64::MIN as i128, i64::MAX as i128) as i64,
        _ => 0,
    }
}

/// The offset between CLOCK_MONOTONIC and wall time as the daemon uses it: read again at every
/// `refresh`, so that after a step of the wall clock (NTP, an operator's `date -s`) the times of
/// later events follow it. The reader is injectable (tests step a fake clock).
pub struct WallOffset {
    read: Box<dyn FnMut() -> i64 + Send>,
    now: i64,
}

/// A change of the offset smaller than this is the jitter of reading two clocks one after the
/// other (or a slew in progress): it is followed once it adds up to this.
pub const STEP_NS: i64 = 1_000_000;

impl WallOffset {
    /// This host's clocks.
    pub fn system() -> Self {
        Self::with_reader(Box::new(mono_to_unix_ns))
    }

    pub fn with_reader(mut read: Box<dyn FnMut() -> i64 + Send>) -> Self {
        let now = read();
        WallOffset { read, now }
    }

    /// The offset in use.
    pub fn get(&self) -> i64 {
        self.now
    }

    /// Read the clocks again; the new offset when it moved by at least `STEP_NS`.
    pub fn refresh(&mut self) -> Option<i64> {
        let o = (self.read)();
        if o.abs_diff(self.now) < STEP_NS as u64 {
            return None;
        }
        self.now = o;
        Some(o)
    }
}

/// Unix time of a monotonic time, given the offset (before 1970 is 1970).
fn wall(mono_ns: u64, offset_ns: i64) -> std::time::SystemTime {
    let ns = (mono_ns as i128 + offset_ns as i128).clamp(0, u64::MAX as i128) as u64;
    UNIX_EPOCH + Duration::from_nanos(ns)
}

/// RFC 3339 UTC with microseconds, e.g. `2023-11-14T22:13:20.123456Z`.
pub fn rfc3339(mono_ns: u64, offset_ns: i64) -> String {
    humantime::format_rfc3339_micros(wall(mono_ns, offset_ns)).to_string()
}

/// Wall time now, RFC 3339 UTC with milliseconds (log lines).
pub fn rfc3339_now_millis() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The same to the second in the basic form, for file names: `20231114T221320Z`.
pub fn compact_utc(mono_ns: u64, offset_ns: i64) -> String {
    humantime::format_rfc3339_seconds(wall(mono_ns, offset_ns)).to_string().replace(['-', ':'], "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_monotonic_time_reads_as_the_wall_time_of_its_offset() {
        // Monotonic 0 is 2026-01-01T00:00:00Z.
        let off = 1_767_225_600_000_000_000;
        assert_eq!(rfc3339(5_000_001_000, off), "2026-01-01T00:00:05.000001Z");
        assert_eq!(compact_utc(86_399_000_000_000, off), "20260101T235959Z");
        assert_eq!(compact_utc(0, -5), "19700101T000000Z", "before 1970 is 1970");
        assert!(mono_now_ns() > 0);
        let o = mono_to_unix_ns();
        assert!((o as i128 + mono_now_ns() as i128 - 1_700_000_000_000_000_000).is_positive(), "{o}");
    }

    #[test]
    fn the_offset_follows_a_step_of_the_wall_clock_but_not_the_jitter_of_reading_it() {
        let fake = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(1_000_000_000_000));
        let f = fake.clone();
        let mut w = WallOffset::with_reader(Box::new(move || f.load(std::sync::atomic::Ordering::SeqCst)));
        assert_eq!(w.get(), 1_000_000_000_000);
        fake.fetch_add(STEP_NS / 2, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(w.refresh(), None, "jitter");
        fake.fetch_add(-3_600_000_000_000, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(w.refresh(), Some(1_000_000_000_000 + STEP_NS / 2 - 3_600_000_000_000));
        assert_eq!(w.get(), 1_000_000_000_000 + STEP_NS / 2 - 3_600_000_000_000);
        assert!(WallOffset::system().get() > 0);
    }
}
