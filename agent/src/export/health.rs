//! The agent's own health as metrics: what was dropped or failed, map pressure, which hook
//! variant runs, BPF run time per program. `Health` is plain data the daemon fills.
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// At most this many (need, variant) pairs, BPF programs and maps are exported.
pub const MAX_VARIANTS: usize = 32;
pub const MAX_PROGRAMS: usize = 64;
pub const MAX_MAPS: usize = 32;
/// Fixed health series: dropped (2), decode errors, bpf errors (4), kernel records (2),
/// events write errors, build info, recorder dumps by outcome (4), recorder memory and connections.
pub const FIXED_SERIES: usize = 2 + 1 + 4 + 2 + 1 + 1 + DUMP_OUTCOMES.len() + 2 + 1;
/// Health series at their bounds.
pub const MAX_SERIES: usize = FIXED_SERIES + MAX_VARIANTS + 3 * MAX_PROGRAMS + 2 * MAX_MAPS;

/// Cumulative kernel-side counters (summed over CPUs, since the programs were loaded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelCounters {
    /// Ring buffer had no room: a record was lost (TV_ST_RB_FULL).
    pub ring_full: u64,
    /// Per-socket storage could not be created (TV_ST_STORAGE_FAIL).
    pub storage_fail: u64,
    /// Retransmission sequence map update failed (TV_ST_RTX_MAP_FULL).
    pub rtx_map_full: u64,
    /// TCP options could not be read (TV_ST_OPT_READ_FAIL).
    pub opt_read_fail: u64,
    /// Iterator record could not be written (TV_ST_SEQ_WRITE_FAIL).
    pub seq_write_fail: u64,
    /// Samples emitted (TV_ST_SAMPLES).
    pub samples: u64,
    /// Other ring-buffer records emitted (TV_ST_EVENTS).
    pub events: u64,
}

/// Run-time statistics of one BPF program (from `bpf_prog_info` with kernel.bpf_stats_enabled=1;
/// zero when stats are off).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgStats {
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
    /// Runs the kernel skipped because the program was already running on that CPU (always counted).
    pub recursion_misses: u64,
}

/// Fill level of one BPF map (entries may be an estimate for hash maps).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapUsage {
    pub name: String,
    pub entries: u64,
    pub max_entries: u64,
}

/// The flight recorder's state: cumulative dump outcomes and current memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderHealth {
    pub dumps_written: u64,
    /// Writing a dump or drawing its pictures failed.
    pub dumps_failed: u64,
    /// Dumps not written: the writer's queue was full.
    pub dumps_dropped: u64,
    /// Stops and unfair groups about connections that had no history (not bulk, or seen too late).
    pub no_history: u64,
    /// Bytes the histories hold now.
    pub memory_bytes: u64,
    /// Connections with a history now.
    pub conns: u64,
}

/// Everything the daemon knows about its own health. Counters are cumulative totals; when one
/// goes down (programs reloaded) the exported counter continues from where it was.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    /// (need, variant) for every hook need, e.g. ("sack_state", "tp_btf/tcp_probe").
    pub variants: Vec<(String, String)>,
    pub programs: Vec<ProgStats>,
    pub kernel: KernelCounters,
    pub maps: Vec<MapUsage>,
    /// Records the reader thread could not hand over (bounded channel full).
    pub channel_dropped: u64,
    /// Records that failed to decode.
    pub decode_errors: u64,
    /// Findings the events writer could not write (see `EventsWriter::errors`).
    pub events_write_errors: u64,
    pub recorder: RecorderHealth,
    /// How long the last snapshot pass (a look at the live set) took, seconds.
    pub snapshot_seconds: f64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VariantLabels {
    pub need: String,
    pub variant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProgLabels {
    pub prog: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MapLabels {
    pub map: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabels {
    pub version: &'static str,
}

const BPF_ERRORS: [&str; 4] = ["storage_fail", "rtx_map_full", "opt_read_fail", "seq_write_fail"];
/// `outcome` values of `tcpvigil_recorder_dumps_total`.
pub const DUMP_OUTCOMES: [&str; 4] = ["written", "failed", "dropped", "no_history"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

/// The health families plus the last cumulative values seen, to turn totals into increments.
#[derive(Debug, Default)]
pub struct HealthSeries {
    dropped: Family<StageLabels, Counter>,
    decode_errors: Counter,
    bpf_errors: Family<KindLabels, Counter>,
    kernel_records: Family<KindLabels, Counter>,
    events_write_errors: Counter,
    recorder_dumps: Family<OutcomeLabels, Counter>,
    recorder_memory: Gauge,
    recorder_conns: Gauge,
    snapshot_duration: Gauge<f64, AtomicU64>,
    build_info: Family<VersionLabels, Gauge>,
    variants: Family<VariantLabels, Gauge>,
    prog_run_time: Family<ProgLabels, Counter<f64, AtomicU64>>,
    prog_runs: Family<ProgLabels, Counter>,
    prog_recursion_misses: Family<ProgLabels, Counter>,
    map_entries: Family<MapLabels, Gauge>,
    map_max_entries: Family<MapLabels, Gauge>,
    last: HashMap<String, u64>,
    shown_variants: HashSet<VariantLabels>,
    shown_progs: HashSet<String>,
    shown_maps: HashSet<String>,
}

/// Cut a label value coming from the kernel or the daemon to a sane length.
fn short(s: &str) -> String {
    s.chars().take(64).collect()
}

impl HealthSeries {
    /// Families with their fixed label values created.
    pub fn new() -> Self {
        let s = HealthSeries::default();
        for stage in ["ring_buffer", "channel"] {
            let _ = s.dropped.get_or_create(&StageLabels { stage });
        }
        for kind in BPF_ERRORS {
            let _ = s.bpf_errors.get_or_create(&KindLabels { kind });
        }
        for kind in ["sample", "event"] {
            let _ = s.kernel_records.get_or_create(&KindLabels { kind });
        }
        for outcome in DUMP_OUTCOMES {
            let _ = s.recorder_dumps.get_or_create(&OutcomeLabels { outcome });
        }
        s.build_info.get_or_create(&VersionLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
        s
    }

    pub fn register(&self, r: &mut Registry) {
        r.register(
            "dropped_records",
            "Kernel records lost: ring buffer full (stage=ring_buffer) or reader channel full (stage=channel)",
            self.dropped.clone(),
        );
        r.register("decode_errors", "Ring-buffer records that failed to decode", self.decode_errors.clone());
        r.register(
            "bpf_errors",
            "Failures counted by the BPF programs (map pressure), by kind",
            self.bpf_errors.clone(),
        );
        r.register("kernel_records", "Records the BPF programs emitted, by kind", self.kernel_records.clone());
        r.register(
            "events_write_errors",
            "Findings the JSON events writer failed to write",
            self.events_write_errors.clone(),
        );
        r.register(
            "recorder_dumps",
            "Flight-recorder dumps by outcome: written, failed (IO or drawing), dropped (writer busy), no_history (finding about a connection without history)",
            self.recorder_dumps.clone(),
        );
        r.register_with_unit(
            "recorder_memory",
            "Memory the flight recorder's per-connection histories hold",
            Unit::Bytes,
            self.recorder_memory.clone(),
        );
        r.register("recorder_connections", "Connections with a flight-recorder history", self.recorder_conns.clone());
        r.register_with_unit(
            "snapshot_duration",
            "Time the last snapshot pass (a look at the connections that moved lately) took",
            Unit::Seconds,
            self.snapshot_duration.clone(),
        );
        r.register("build_info", "Agent version (always 1)", self.build_info.clone());
        r.register("hook_variant_info", "Hook variant in use for each need (always 1)", self.variants.clone());
        r.register_with_unit(
            "bpf_prog_run_time",
            "Time spent in each BPF program, estimated from kernel run-time statistics sampled 2 s in every 20 s (bpf.bpf_stats)",
            Unit::Seconds,
            self.prog_run_time.clone(),
        );
        r.register(
            "bpf_prog_runs",
            "Runs of each BPF program, estimated from kernel run-time statistics sampled 2 s in every 20 s (bpf.bpf_stats)",
            self.prog_runs.clone(),
        );
        r.register(
            "bpf_prog_recursion_misses",
            "Runs of each BPF program the kernel skipped because it was already running on that CPU (events missed)",
            self.prog_recursion_misses.clone(),
        );
        r.register("bpf_map_entries", "Entries in a BPF map", self.map_entries.clone());
        r.register("bpf_map_max_entries", "Capacity of a BPF map", self.map_max_entries.clone());
    }

    /// Increment since the last cumulative value under `key` (a drop restarts from zero).
    fn delta(&mut self, key: &str, now: u64) -> u64 {
        let prev = self.last.insert(key.to_string(), now).unwrap_or(0);
        if now >= prev {
            now - prev
        } else {
            now
        }
    }

    /// Apply `h`; returns how many health series the scrape now has.
    pub fn refresh(&mut self, h: &Health) -> usize {
        let k = h.kernel;
        let d = self.delta("ring_full", k.ring_full);
        self.dropped.get_or_create(&StageLabels { stage: "ring_buffer" }).inc_by(d);
        let d = self.delta("channel", h.channel_dropped);
        self.dropped.get_or_create(&StageLabels { stage: "channel" }).inc_by(d);
        let d = self.delta("decode", h.decode_errors);
        self.decode_errors.inc_by(d);
        let d = self.delta("events_write", h.events_write_errors);
        self.events_write_errors.inc_by(d);
        for (kind, v) in BPF_ERRORS.into_iter().zip([k.storage_fail, k.rtx_map_full, k.opt_read_fail, k.seq_write_fail])
        {
            let d = self.delta(kind, v);
            self.bpf_errors.get_or_create(&KindLabels { kind }).inc_by(d);
        }
        for (kind, v) in [("sample", k.samples), ("event", k.events)] {
            let d = self.delta(kind, v);
            self.kernel_records.get_or_create(&KindLabels { kind }).inc_by(d);
        }
        let r = h.recorder;
        for (outcome, v) in
            DUMP_OUTCOMES.into_iter().zip([r.dumps_written, r.dumps_failed, r.dumps_dropped, r.no_history])
        {
            let d = self.delta(&format!("dumps/{outcome}"), v);
            self.recorder_dumps.get_or_create(&OutcomeLabels { outcome }).inc_by(d);
        }
        self.recorder_memory.set(r.memory_bytes.min(i64::MAX as u64) as i64);
        self.recorder_conns.set(r.conns.min(i64::MAX as u64) as i64);
        self.snapshot_duration.set(h.snapshot_seconds);

        let variants: HashSet<VariantLabels> = h
            .variants
            .iter()
            .take(MAX_VARIANTS)
            .map(|(n, v)| VariantLabels { need: short(n), variant: short(v) })
            .collect();
        for gone in self.shown_variants.difference(&variants) {
            self.variants.remove(gone);
        }
        for l in &variants {
            self.variants.get_or_create(l).set(1);
        }
        self.shown_variants = variants;

        let mut progs = HashSet::new();
        for p in h.programs.iter().take(MAX_PROGRAMS) {
            let name = short(&p.name);
            let l = ProgLabels { prog: name.clone() };
            let t = self.delta(&format!("prog_ns/{name}"), p.run_time_ns);
            let n = self.delta(&format!("prog_cnt/{name}"), p.run_cnt);
            self.prog_run_time.get_or_create(&l).inc_by(t as f64 / 1e9);
            self.prog_runs.get_or_create(&l).inc_by(n);
            let m = self.delta(&format!("prog_miss/{name}"), p.recursion_misses);
            self.prog_recursion_misses.get_or_create(&l).inc_by(m);
            progs.insert(name);
        }
        for gone in self.shown_progs.difference(&progs) {
            let l = ProgLabels { prog: gone.clone() };
            self.prog_run_time.remove(&l);
            self.prog_runs.remove(&l);
            self.prog_recursion_misses.remove(&l);
            self.last.remove(&format!("prog_miss/{gone}"));
            self.last.remove(&format!("prog_ns/{gone}"));
            self.last.remove(&format!("prog_cnt/{gone}"));
        }
        self.shown_progs = progs;

        let mut maps = HashSet::new();
        for m in h.maps.iter().take(MAX_MAPS) {
            let l = MapLabels { map: short(&m.name) };
            self.map_entries.get_or_create(&l).set(m.entries.min(i64::MAX as u64) as i64);
            self.map_max_entries.get_or_create(&l).set(m.max_entries.min(i64::MAX as u64) as i64);
            maps.insert(l.map);
        }
        for gone in self.shown_maps.difference(&maps) {
            let l = MapLabels { map: gone.clone() };
            self.map_entries.remove(&l);
            self.map_max_entries.remove(&l);
        }
        self.shown_maps = maps;

        FIXED_SERIES + self.shown_variants.len() + 3 * self.shown_progs.len() + 2 * self.shown_maps.len()
    }
}
