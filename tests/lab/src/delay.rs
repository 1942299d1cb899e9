//! The userspace delay line: one thread per direction holds NFQUEUE'd packets until their release time, then accepts them in FIFO batches;
//! it can also police on arrival (an exact token bucket: `rate` bytes/s, `burst` bytes deep, full at start).
use crate::clock::mono_ns;
use crate::error::{LabError, Result};
use crate::netns;
use crate::nfq::{NfQueue, NF_ACCEPT, NF_DROP};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// What a delay line did, for truth and for the benchmark.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DelayStats {
    /// NFQUEUE number (per router namespace).
    pub queue: u16,
    /// Configured one-way delay in microseconds.
    pub delay_us: u64,
    /// Packets delayed and accepted.
    pub packets: u64,
    /// Most packets held at once.
    pub max_held: usize,
    /// Mean release error (release time - due time; negative = early), microseconds.
    pub mean_late_us: f64,
    /// Worst lateness, microseconds.
    pub max_late_us: f64,
    /// Packets the kernel dropped because the queue was full (`queue_dropped`).
    pub kernel_queue_dropped: u64,
    /// Packets the kernel could not hand to us (`user_dropped`, socket buffer full).
    pub kernel_user_dropped: u64,
    /// IP bytes accepted.
    pub bytes: u64,
    /// Packets and IP bytes the policer dropped.
    pub policed_packets: u64,
    pub policed_bytes: u64,
}

/// A token-bucket policer applied on arrival, before the delay.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Policer {
    /// Token rate, bytes per second.
    pub rate_bytes_per_s: f64,
    /// Bucket depth, bytes (the bucket starts full).
    pub burst_bytes: f64,
}

struct Bucket {
    p: Policer,
    tokens: f64,
    last_ns: u64,
}

impl Bucket {
    fn admit(&mut self, now: u64, len: u32) -> bool {
        let dt = now.saturating_sub(self.last_ns) as f64 / 1e9;
        self.last_ns = now;
        self.tokens = (self.tokens + dt * self.p.rate_bytes_per_s).min(self.p.burst_bytes);
        if self.tokens >= f64::from(len) {
            self.tokens -= f64::from(len);
            true
        } else {
            false
        }
    }
}

/// A running delay line. Stop it with [`DelayLine::stop`]; dropping it stops it too.
pub struct DelayLine {
    stop: Arc<AtomicBool>,
    delay_ns: Arc<AtomicU64>,
    handle: Option<JoinHandle<Result<DelayStats>>>,
    /// The NFQUEUE number it serves.
    pub queue: u16,
}

/// Kernel queue length limit: far above any lab BDP in packets.
const KERNEL_QUEUE_MAX: u32 = 1 << 20;
const IDLE_WAIT_NS: u64 = 20_000_000;
/// Packets due within (measured wake-up overshoot + this) are released now: no busy waiting.
const SLACK_NS: u64 = 10_000;

impl DelayLine {
    /// Starts a delay line on NFQUEUE `queue` inside network namespace `ns`, holding each packet `delay`.
    /// Returns once the queue is bound, so an NFQUEUE rule added afterwards never finds it missing.
    pub fn start(ns: &str, queue: u16, delay: Duration, police: Option<Policer>) -> Result<DelayLine> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<Result<()>>();
        let stop2 = stop.clone();
        let delay_ns = Arc::new(AtomicU64::new(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX)));
        let delay2 = delay_ns.clone();
        let handle = netns::spawn_in(ns, &format!("delay-q{queue}"), move || {
            let q = match NfQueue::open(queue, KERNEL_QUEUE_MAX) {
                Ok(q) => {
                    let _ = tx.send(Ok(()));
                    q
                }
                Err(e) => {
                    let msg = e.to_string();
                    let _ = tx.send(Err(e));
                    return Err(LabError::Missing(msg));
                }
            };
            run(q, &delay2, police, &stop2)
        })?;
        match rx.recv() {
            Ok(Ok(())) => Ok(DelayLine { stop, delay_ns, handle: Some(handle), queue }),
            Ok(Err(e)) => Err(e),
            Err(_) => match handle.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(LabError::Missing(format!("delay line thread for queue {queue} died"))),
            },
        }
    }

    /// Changes the delay for packets arriving from now on (used to trim the lab's own overhead).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ns.store(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The delay currently applied.
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns.load(Ordering::Relaxed))
    }

    /// Stops the thread (accepting whatever it still holds) and returns its statistics.
    pub fn stop(mut self) -> Result<DelayStats> {
        self.finish()
    }

    fn finish(&mut self) -> Result<DelayStats> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take() {
            Some(h) => h.join().map_err(|_| LabError::Missing("delay line thread panicked".into()))?,
            None => Ok(DelayStats::default()),
        }
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

fn wait_readable(fd: i32, timeout_ns: u64) {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: pfd and ts are valid for the duration of the call; a null sigmask means "unchanged".
    unsafe {
        libc::ppoll(&mut pfd, 1, &ts, std::ptr::null());
    }
}

fn run(mut q: NfQueue, delay: &AtomicU64, police: Option<Policer>, stop: &AtomicBool) -> Result<DelayStats> {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    // Real-time priority so the line wakes on time while iperf3 keeps both cores busy.
    // Failure (no CAP_SYS_NICE) only costs accuracy.
    let param = libc::sched_param { sched_priority: 20 };
    // SAFETY: pid 0 means the calling thread; param is a valid sched_param.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param);
    }
    let mut held: VecDeque<(u32, u64)> = VecDeque::with_capacity(1 << 16);
    let mut st = DelayStats { queue: q.queue(), delay_us: delay.load(Ordering::Relaxed) / 1000, ..Default::default() };
    let mut late_sum_ns: f64 = 0.0;
    let mut max_late_ns: u64 = 0;
    let mut overshoot_ns: f64 = 50_000.0;
    let mut bucket = police.map(|p| Bucket { p, tokens: p.burst_bytes, last_ns: mono_ns() });
    let mut drops: Vec<u32> = Vec::new();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let now = mono_ns();
        let horizon = now + SLACK_NS + overshoot_ns as u64;
        let mut last = None;
        while let Some(&(id, due)) = held.front() {
            if due > horizon && !stopping {
                break;
            }
            // Signed error: negative when released a little early.
            let err = now as i64 - due as i64;
            late_sum_ns += err as f64;
            max_late_ns = max_late_ns.max(err.max(0) as u64);
            st.packets += 1;
            last = Some(id);
            held.pop_front();
        }
        if let Some(id) = last {
            q.verdict_batch(id, NF_ACCEPT)?;
        }
        if stopping {
            break;
        }
        // Sleep until the next due time minus the usual wake-up overshoot (a packet arrival wakes us early).
        let now = mono_ns();
        let early = SLACK_NS + overshoot_ns as u64;
        let wait = held.front().map_or(IDLE_WAIT_NS, |&(_, due)| due.saturating_sub(now + early).min(IDLE_WAIT_NS));
        if wait > 0 {
            let target = now + wait;
            wait_readable(q.raw_fd(), wait);
            let woke = mono_ns();
            if woke >= target && !held.is_empty() {
                // Only timer wake-ups measure overshoot; EWMA with weight 1/16.
                overshoot_ns += ((woke - target) as f64 - overshoot_ns) / 16.0;
                overshoot_ns = overshoot_ns.min(2_000_000.0);
            }
        }
        let now = mono_ns();
        let due = now.saturating_add(delay.load(Ordering::Relaxed));
        q.drain(|id, len| {
            if let Some(b) = bucket.as_mut() {
                if !b.admit(now, len) {
                    st.policed_packets += 1;
                    st.policed_bytes += u64::from(len);
                    drops.push(id);
                    return;
                }
            }
            st.bytes += u64::from(len);
            held.push_back((id, due));
        })?;
        for id in drops.drain(..) {
            q.verdict(id, NF_DROP)?;
        }
        st.max_held = st.max_held.max(held.len());
    }
    if st.packets > 0 {
        st.mean_late_us = late_sum_ns / st.packets as f64 / 1000.0;
    }
    st.max_late_us = max_late_ns as f64 / 1000.0;
    if let Some((qd, ud)) = kernel_drops(q.queue()) {
        st.kernel_queue_dropped = qd;
        st.kernel_user_dropped = ud;
    }
    Ok(st)
}

/// Reads `queue_dropped` and `user_dropped` for `queue` from this thread's namespace.
fn kernel_drops(queue: u16) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/thread-self/net/netfilter/nfnetlink_queue").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        (f.len() >= 7 && f[0] == u64::from(queue)).then(|| (f[5], f[6]))
    })
}
