//! The BPF thread: loads, attaches, polls the ring buffer, looks at the live set.
use std::collections::HashSet;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use libbpf_rs::{MapCore, MapFlags, RingBufferBuilder};
use nix::sched::{setns, CloneFlags};
use tokio::sync::mpsc;

use super::abi::tv_stat;
use super::decode::decode;
use super::load::{load, set_phase, set_selection, Settings};
use super::netns;
use super::runstats::{Raw, RunStats};
use super::variants::{prog_ref, Variants};
use super::wake::Waker;
use crate::model::filter::Rule;
use crate::model::Event;

/// Counters the BPF thread keeps for exporters.
#[derive(Debug, Default)]
pub struct Counters {
    /// Events the tokio side had no room for.
    pub channel_dropped: AtomicU64,
    pub decode_errors: AtomicU64,
    pub events: AtomicU64,
    /// Records read from the ring buffer (decoded or not): with `ringbuf_full` what the programs
    /// produced, once the programs are detached and the buffer drained (at stop).
    pub ring_records: AtomicU64,
    /// Iterator reads: one per look, one per namespace walked.
    pub snapshots: AtomicU64,
    /// Nanoseconds the last snapshot pass took (a look, or a walk of every namespace).
    pub snapshot_ns: AtomicU64,
    /// Network namespaces the last pass walked: every one at start, then none while the look
    /// runs (every one, every period, where it cannot load).
    pub netns: AtomicU64,
    /// Snapshot passes taken (the start pass included).
    pub passes: AtomicU64,
    /// Records the last pass handed over.
    pub pass_records: AtomicU64,
    /// Kernel-side counters (enum tv_stat), summed over CPUs.
    pub kernel: Mutex<Vec<u64>>,
    /// Per program: (label, run time ns, runs, recursion misses). Time and runs are estimates from
    /// sampled kernel statistics (see runstats.rs), zero without bpf_stats; misses are always counted.
    pub prog_stats: Mutex<Vec<(String, u64, u64, u64)>>,
}

pub const KERNEL_STAT_NAMES: [&str; 9] = [
    "ringbuf_full",
    "storage_fail",
    "rtx_map_full",
    "opt_read_fail",
    "seq_write_fail",
    "samples",
    "events",
    "looked",
    "missed_full",
];

/// What the BPF thread hands to the daemon, in order.
#[derive(Debug)]
pub enum Msg {
    Event(Event),
    /// The ring buffer was empty at this CLOCK_MONOTONIC time: every record up to it was sent.
    /// Detectors tick on this, not on wall time, so a busy reader cannot fake a stop.
    Drained(u64),
}

/// Extra snapshots asked for by detectors are at least this far apart. A stop seen only as
/// silence waits for its look at least a quarter of the shortest threshold plus 40 ms (77 ms)
/// after asking: the gap and the next tick (`clock::TICK_MIN` while a look is awaited) must fit
/// in that, even when another connection's look came just before (the streams of one transfer
/// stall together).
const SNAPSHOT_GAP: Duration = Duration::from_millis(30);
/// Records of a pass wait for the daemon rather than being dropped (the agent pulls them, so it
/// can wait) once this many are in the channel: the start pass alone is one record per socket.
const PACE: usize = 4096;
/// How long one pass waits in all for room in the channel before it drops what does not fit.
const PACE_WAIT: Duration = Duration::from_secs(5);

enum Ctl {
    Select {
        all: bool,
        rules: Vec<Rule>,
    },
    /// Take a snapshot now (a detector needs a fresh look at a sender), not at the next period.
    Snapshot,
    /// The connections whose rounds are reported (members of bulk groups), on paths of at least
    /// this srtt (µs).
    Phase(HashSet<u64>, u32),
    /// Take the held start pass now.
    StartPass,
}

/// A held start pass is taken after this long even if nobody asked (the caller failed on the way).
const START_HOLD_MAX: Duration = Duration::from_secs(10);

pub struct Agent {
    pub events: mpsc::Receiver<Msg>,
    pub counters: Arc<Counters>,
    pub variants: Variants,
    ctl: std_mpsc::Sender<Ctl>,
    /// Wakes the BPF thread: a control message waits, or a tick is due sooner than it thought.
    wake: Arc<Waker>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Agent {
    /// Load and attach everything, then return once the programs run.
    pub fn start(settings: Settings, variants: Variants, channel: usize, bpf_stats: bool) -> Result<Agent> {
        let (tx, rx) = mpsc::channel(channel);
        let (ctl_tx, ctl_rx) = std_mpsc::channel();
        let (ready_tx, ready_rx) = std_mpsc::channel::<Result<()>>();
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(Waker::new()?);
        let (c, s, v, w) = (counters.clone(), stop.clone(), variants.clone(), wake.clone());
        let thread = std::thread::Builder::new()
            .name("tcpvigil-bpf".into())
            .spawn(move || {
                if let Err(e) = bpf_thread(settings, v, bpf_stats, tx, (ctl_rx, w), c, s, &ready_tx) {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .context("spawning the BPF thread")?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => return Err(anyhow!("the BPF thread ended before it was ready")),
        }
        Ok(Agent { events: rx, counters, variants, ctl: ctl_tx, wake, stop, thread: Some(thread) })
    }

    fn send(&self, c: Ctl) {
        let _ = self.ctl.send(c);
        self.wake.wake();
    }

    /// Change which connections get per-ACK samples.
    pub fn select(&self, all: bool, rules: Vec<Rule>) {
        self.send(Ctl::Select { all, rules });
    }

    /// Look at the live set now (at most one extra look per 30 ms), rather than at the next
    /// snapshot period: every connection with data outstanding is in it.
    pub fn snapshot_soon(&self) {
        if self.wake.ask_look() {
            self.send(Ctl::Snapshot);
        }
    }

    /// Report the rounds (send phase) of these connections, and of no others, once their srtt
    /// reaches `min_srtt_us`; at most MAX_PHASE of them (the rest are left out).
    pub fn set_phase(&self, cookies: HashSet<u64>, min_srtt_us: u32) {
        self.send(Ctl::Phase(cookies, min_srtt_us));
    }

    /// Take the start pass held by `Settings::hold_start_pass` (without it, it was taken at start).
    pub fn start_pass(&self) {
        self.send(Ctl::StartPass);
    }

    /// The detectors' next tick is due at `mono_ns` (CLOCK_MONOTONIC): the ring buffer is read and
    /// time handed over (`Msg::Drained`) then, as `clock::next_tick` paces it, rather than every
    /// `TICK_MIN` (as for `watch` and `record`, which never call this); sooner when records past
    /// the ring's wakeup mark or control messages come.
    pub fn tick_at(&self, mono_ns: u64) {
        self.wake.tick_at(mono_ns);
    }

    /// Detach everything and wait for the thread.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}

fn enable_bpf_stats() -> Option<OwnedFd> {
    // SAFETY: plain syscall wrapper; a non-negative return is a new fd we now own.
    let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is a fresh descriptor returned by the kernel and owned by no one else.
    Some(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// (run time ns, runs, recursion misses) of one program.
fn prog_run_stats(fd: std::os::fd::BorrowedFd<'_>) -> Option<(u64, u64, u64)> {
    // SAFETY: bpf_prog_info is a plain C struct; zero is a valid initial value.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info and len point to live stack values of the sizes the kernel is told.
    let r = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info as *mut _ as *mut _, &mut len) };
    (r == 0).then_some((info.run_time_ns, info.run_cnt, info.recursion_misses))
}

#[allow(clippy::too_many_arguments)]
fn bpf_thread(
    settings: Settings,
    variants: Variants,
    bpf_stats: bool,
    tx: mpsc::Sender<Msg>,
    (ctl, wake): (std_mpsc::Receiver<Ctl>, Arc<Waker>),
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    ready: &std_mpsc::Sender<Result<()>>,
) -> Result<()> {
    let mut run_stats = RunStats::new(bpf_stats, Instant::now());
    crate::heap::fixed_thresholds();
    let mut storage = MaybeUninit::uninit();
    let mut loaded = load(&mut storage, &variants, &settings)?;
    let own_ns = std::fs::File::open("/proc/thread-self/ns/net").context("opening own network namespace")?;

    // Each process gets its cgroup here, once per cgroup (bpf/cgroup.rs).
    let cgroups = std::cell::RefCell::new(super::cgroup::Cgroups::host());
    let push = |mut ev: Event, c: &Counters| {
        cgroups.borrow_mut().attach(&mut ev);
        c.events.fetch_add(1, Ordering::Relaxed);
        if tx.try_send(Msg::Event(ev)).is_err() {
            c.channel_dropped.fetch_add(1, Ordering::Relaxed);
        }
    };
    // A pass's records wait for room in the channel (see PACE), PACE_WAIT at most per pass.
    let waited = std::cell::Cell::new(Duration::ZERO);
    let paced = |ev: Event, c: &Counters| {
        while tx.max_capacity() - tx.capacity() >= PACE
            && !tx.is_closed()
            && !stop.load(Ordering::Relaxed)
            && waited.get() < PACE_WAIT
        {
            std::thread::sleep(Duration::from_millis(1));
            waited.set(waited.get() + Duration::from_millis(1));
        }
        push(ev, c)
    };
    let rb = {
        let c = counters.clone();
        let push = &push;
        let mut b = RingBufferBuilder::new();
        b.add(&loaded.skel.maps.tv_events, move |data: &[u8]| {
            c.ring_records.fetch_add(1, Ordering::Relaxed);
            match decode(data) {
                Ok(ev) => push(ev, &c),
                Err(_) => {
                    c.decode_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            0
        })?;
        b.build()?
    };
    // Attached: this thread keeps only what its loop needs (caps.rs says which and why).
    crate::caps::after_attach(&|| loaded.skel.maps.tv_stats.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY).is_ok());
    let _ = ready.send(Ok(()));
    // Loading parsed the kernel's BTF (megabytes, once per trial load too) and freed it: hand the
    // pages back, or the RSS keeps them for good.
    crate::heap::give_back();

    // Sockets older than the agent: every namespace once, with the look; else every period. The
    // programs see every new connection meanwhile, so the pass may wait for its caller.
    let look = loaded.look_link.is_some();
    let mut start_due = (look && loaded.iter_link.is_some())
        .then(|| Instant::now() + if settings.hold_start_pass { START_HOLD_MAX } else { Duration::ZERO });
    let snap_every = Duration::from_millis(settings.snapshot_interval_ms.max(50));
    let mut next_snap = Instant::now();
    let mut last_snap = next_snap;
    let mut phase: HashSet<u64> = HashSet::new();
    let progs = variants.progs();
    while !stop.load(Ordering::SeqCst) {
        // A look that is due soon is not kept waiting for the rest of a poll period.
        wake.wait(&rb, next_snap.saturating_duration_since(Instant::now()));
        // Read the clock after draining: everything stamped before it has been handed over.
        let _ = rb.consume();
        let _ = tx.try_send(Msg::Drained(crate::clock::mono_now_ns()));
        run_stats.tick(Instant::now(), enable_bpf_stats, || raw_prog_stats(&loaded.skel, &progs));
        while let Ok(c) = ctl.try_recv() {
            match c {
                Ctl::Select { all, rules } => {
                    if let Err(e) = set_selection(&loaded.skel, &mut loaded.cfg, all, &rules) {
                        tracing::warn!("updating the selection: {e:#}");
                    }
                }
                // At most one extra snapshot per SNAPSHOT_GAP: many stops at once need only one.
                Ctl::Snapshot => next_snap = next_snap.min(last_snap + SNAPSHOT_GAP),
                Ctl::Phase(want, min_srtt_us) => {
                    if let Err(e) = set_phase(&loaded.skel, &mut loaded.cfg, &mut phase, want, min_srtt_us) {
                        tracing::warn!("updating the send-phase connections: {e:#}");
                    }
                }
                Ctl::StartPass => start_due = start_due.map(|_| Instant::now()),
            }
        }
        if let (Some(due), Some(iter)) = (start_due, &loaded.iter_link) {
            if Instant::now() >= due {
                start_due = None;
                waited.set(Duration::ZERO);
                pass(&counters, || walk(iter, &own_ns, &counters, &paced));
                crate::heap::give_back();
            }
        }
        if Instant::now() >= next_snap {
            wake.look_taken();
            last_snap = Instant::now();
            next_snap = last_snap + snap_every;
            waited.set(Duration::ZERO);
            match (&loaded.look_link, &loaded.iter_link) {
                (Some(l), _) => pass(&counters, || look_at(l, &counters, &paced)),
                (None, Some(i)) => pass(&counters, || walk(i, &own_ns, &counters, &paced)),
                (None, None) => {}
            }
            take_missed(&loaded.skel, &counters, &paced);
            read_kernel_stats(&loaded.skel, &counters);
            read_prog_stats(&loaded.skel, &progs, &counters, &run_stats);
        }
    }
    // Detach first, then drain: every record the programs produced is either read now or was
    // counted as refused by a full buffer, so produced = read + ringbuf_full exactly.
    loaded.links.clear();
    let _ = rb.consume();
    take_missed(&loaded.skel, &counters, &push);
    read_kernel_stats(&loaded.skel, &counters);
    read_prog_stats(&loaded.skel, &progs, &counters, &run_stats);
    drop(rb);
    drop(loaded);
    Ok(())
}

/// Raw run time, runs and recursion misses of every attached program, as the kernel counts them.
fn raw_prog_stats(skel: &super::skel::TcpvigilSkel<'_>, progs: &[super::variants::Prog]) -> Vec<(String, Raw)> {
    progs
        .iter()
        .filter_map(|p| prog_run_stats(prog_ref(skel, *p).as_fd()).map(|r| (p.label().to_string(), r)))
        .collect()
}

/// Estimated run time and runs, and recursion misses (a program skipped because it was already
/// running on that CPU, counted by the kernel whether or not statistics are on), for exporters.
fn read_prog_stats(
    skel: &super::skel::TcpvigilSkel<'_>,
    progs: &[super::variants::Prog],
    counters: &Counters,
    run_stats: &RunStats,
) {
    let v = run_stats.report(raw_prog_stats(skel, progs));
    if let Ok(mut s) = counters.prog_stats.lock() {
        *s = v;
    }
}

fn read_kernel_stats(skel: &super::skel::TcpvigilSkel<'_>, c: &Counters) {
    let n = tv_stat::TV_ST_MAX.0 as usize;
    let mut out = vec![0u64; n];
    for (i, slot) in out.iter_mut().enumerate() {
        if let Ok(Some(per_cpu)) = skel.maps.tv_stats.lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY) {
            *slot = per_cpu
                .iter()
                .map(|b| b.get(..8).and_then(|x| x.try_into().ok()).map(u64::from_ne_bytes).unwrap_or(0))
                .sum();
        }
    }
    if let Ok(mut k) = c.kernel.lock() {
        *k = out;
    }
}

/// Time one pass and count what it handed over; `run` returns (records, namespaces walked).
fn pass(c: &Counters, run: impl FnOnce() -> (u64, u64)) {
    let t = Instant::now();
    let (records, netns) = run();
    c.snapshot_ns.store(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    c.passes.fetch_add(1, Ordering::Relaxed);
    c.pass_records.store(records, Ordering::Relaxed);
    c.netns.store(netns, Ordering::Relaxed);
}

/// Read one iterator to its end, handing over each record as it comes (records are whole in the
/// kernel's output but a read may end inside one: the rest waits for the next read). The buffer
/// is bounded whatever the number of records. Returns how many were handed over.
fn read_records(link: &libbpf_rs::Link, c: &Counters, push: &dyn Fn(Event, &Counters)) -> u64 {
    const HDR: usize = std::mem::size_of::<super::abi::tv_hdr>();
    let Ok(mut it) = libbpf_rs::Iter::new(link) else { return 0 };
    c.snapshots.fetch_add(1, Ordering::Relaxed);
    let mut buf = vec![0u8; 64 << 10];
    let (mut have, mut n) = (0usize, 0u64);
    loop {
        let got = match std::io::Read::read(&mut it, &mut buf[have..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => k,
        };
        have += got;
        let mut at = 0;
        while have - at >= HDR {
            let size = u16::from_ne_bytes([buf[at + 2], buf[at + 3]]) as usize;
            if size < HDR || size > buf.len() {
                // Not a record boundary: nothing after it can be trusted.
                c.decode_errors.fetch_add(1, Ordering::Relaxed);
                return n;
            }
            if have - at < size {
                break;
            }
            match decode(&buf[at..at + size]) {
                Ok(ev) => {
                    push(ev, c);
                    n += 1;
                }
                Err(_) => {
                    c.decode_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            at += size;
        }
        buf.copy_within(at..have, 0);
        have -= at;
    }
    n
}

/// The look: one read of the iterator over the live set, whatever the number of namespaces.
fn look_at(link: &libbpf_rs::Link, c: &Counters, push: &dyn Fn(Event, &Counters)) -> (u64, u64) {
    (read_records(link, c, push), 0)
}

/// Closes the ring buffer had no room for (kept in tv_missed by the kernel), handed over now.
fn take_missed(skel: &super::skel::TcpvigilSkel<'_>, c: &Counters, push: &dyn Fn(Event, &Counters)) {
    let keys: Vec<Vec<u8>> = skel.maps.tv_missed.keys().take(4096).collect();
    for k in keys {
        if let Ok(Some(v)) = skel.maps.tv_missed.lookup(&k, MapFlags::ANY) {
            match decode(&v) {
                Ok(ev) => push(ev, c),
                Err(_) => {
                    c.decode_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let _ = skel.maps.tv_missed.delete(&k);
    }
}

/// One iterator read per network namespace: iter/tcp sees only the opener's namespace.
/// The agent's own namespace is walked where it stands; entering the others needs CAP_SYS_ADMIN,
/// and without it (a container given BPF, PERFMON and NET_ADMIN only) they are skipped quietly.
/// Returns (records, namespaces walked).
fn walk(link: &libbpf_rs::Link, own: &std::fs::File, c: &Counters, push: &dyn Fn(Event, &Counters)) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let all = netns::list();
    let own_id = own.metadata().ok().map(|m| (m.dev(), m.ino()));
    let mut moved = false;
    let (mut records, mut walked) = (0, 0);
    for path in all.values() {
        let Ok(f) = std::fs::File::open(path) else { continue };
        let here = own_id.is_some() && f.metadata().ok().map(|m| (m.dev(), m.ino())) == own_id;
        if here && moved {
            if setns(own.as_fd(), CloneFlags::CLONE_NEWNET).is_err() {
                continue;
            }
            moved = false;
        } else if !here {
            if setns(f.as_fd(), CloneFlags::CLONE_NEWNET).is_err() {
                continue;
            }
            moved = true;
        }
        records += read_records(link, c, push);
        walked += 1;
    }
    if moved {
        if let Err(e) = setns(own.as_fd(), CloneFlags::CLONE_NEWNET) {
            tracing::error!("returning to the agent's own network namespace failed: {e}");
        }
    }
    (records, walked)
}
