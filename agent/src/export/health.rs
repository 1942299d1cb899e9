//! The agent's own health as metrics: what was dropped or failed, map pressure, which hook
//! variant runs, BPF run time per program. `Health` is plain data the daemon fills.
use std::collections::{HashMap, HashSet};

use prometheus_client::registry::Registry;

use super::families::{
    BuildLabels, HealthFamilies, KindLabels, MapLabels, OutcomeLabels, ProgLabels, StageLabels, VariantLabels,
    BPF_ERRORS, DROP_STAGES, DUMP_OUTCOMES, RECORD_KINDS,
};
use super::series::{health_fixed_series, MAX_MAPS, MAX_PROGRAMS, MAX_VARIANTS};

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

/// The health families plus the last cumulative values seen, to turn totals into increments.
#[derive(Debug)]
pub struct HealthMetrics {
    f: HealthFamilies,
    /// Series that always exist.
    fixed: usize,
    last: HashMap<String, u64>,
    shown_variants: HashSet<VariantLabels>,
    shown_progs: HashSet<String>,
    shown_maps: HashSet<String>,
}

/// Cut a label value coming from the kernel or the daemon to a sane length.
fn short(s: &str) -> String {
    s.chars().take(64).collect()
}

impl HealthMetrics {
    pub fn new() -> Self {
        let f = HealthFamilies::new();
        f.build_info.get_or_create(&BuildLabels::this_build()).set(1);
        HealthMetrics {
            f,
            fixed: health_fixed_series(),
            last: HashMap::new(),
            shown_variants: HashSet::new(),
            shown_progs: HashSet::new(),
            shown_maps: HashSet::new(),
        }
    }

    pub fn register(&self, r: &mut Registry) {
        self.f.register(r);
    }

    /// Put the hook summary into build_info: `preferred` of `total` needs on their preferred
    /// program, `fallback` the needs on a fallback. The series stays one.
    pub fn set_hooks(&mut self, preferred: usize, total: usize, fallback: &[&str]) {
        self.f.build_info.clear();
        let l = BuildLabels {
            hooks_preferred: format!("{preferred}/{total}"),
            hooks_fallback: fallback.join(","),
            ..BuildLabels::this_build()
        };
        self.f.build_info.get_or_create(&l).set(1);
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
        for (stage, (key, v)) in
            DROP_STAGES.into_iter().zip([("ring_full", k.ring_full), ("channel", h.channel_dropped)])
        {
            let d = self.delta(key, v);
            self.f.dropped.get_or_create(&StageLabels { stage }).inc_by(d);
        }
        let d = self.delta("decode", h.decode_errors);
        self.f.decode_errors.inc_by(d);
        let d = self.delta("events_write", h.events_write_errors);
        self.f.events_write_errors.inc_by(d);
        for (kind, v) in BPF_ERRORS.into_iter().zip([k.storage_fail, k.rtx_map_full, k.opt_read_fail, k.seq_write_fail])
        {
            let d = self.delta(kind, v);
            self.f.bpf_errors.get_or_create(&KindLabels { kind }).inc_by(d);
        }
        for (kind, v) in RECORD_KINDS.into_iter().zip([k.samples, k.events]) {
            let d = self.delta(kind, v);
            self.f.kernel_records.get_or_create(&KindLabels { kind }).inc_by(d);
        }
        let r = h.recorder;
        for (outcome, v) in
            DUMP_OUTCOMES.into_iter().zip([r.dumps_written, r.dumps_failed, r.dumps_dropped, r.no_history])
        {
            let d = self.delta(&format!("dumps/{outcome}"), v);
            self.f.recorder_dumps.get_or_create(&OutcomeLabels { outcome }).inc_by(d);
        }
        self.f.recorder_memory.set(r.memory_bytes.min(i64::MAX as u64) as i64);
        self.f.recorder_conns.set(r.conns.min(i64::MAX as u64) as i64);
        self.f.snapshot_duration.set(h.snapshot_seconds);

        let variants: HashSet<VariantLabels> = h
            .variants
            .iter()
            .take(MAX_VARIANTS)
            .map(|(n, v)| VariantLabels { need: short(n), variant: short(v) })
            .collect();
        for gone in self.shown_variants.difference(&variants) {
            self.f.variants.remove(gone);
        }
        for l in &variants {
            self.f.variants.get_or_create(l).set(1);
        }
        self.shown_variants = variants;

        let mut progs = HashSet::new();
        for p in h.programs.iter().take(MAX_PROGRAMS) {
            let name = short(&p.name);
            let l = ProgLabels { prog: name.clone() };
            let t = self.delta(&format!("prog_ns/{name}"), p.run_time_ns);
            let n = self.delta(&format!("prog_cnt/{name}"), p.run_cnt);
            self.f.prog_run_time.get_or_create(&l).inc_by(t as f64 / 1e9);
            self.f.prog_runs.get_or_create(&l).inc_by(n);
            let m = self.delta(&format!("prog_miss/{name}"), p.recursion_misses);
            self.f.prog_recursion_misses.get_or_create(&l).inc_by(m);
            progs.insert(name);
        }
        for gone in self.shown_progs.difference(&progs) {
            let l = ProgLabels { prog: gone.clone() };
            self.f.prog_run_time.remove(&l);
            self.f.prog_runs.remove(&l);
            self.f.prog_recursion_misses.remove(&l);
            self.last.remove(&format!("prog_miss/{gone}"));
            self.last.remove(&format!("prog_ns/{gone}"));
            self.last.remove(&format!("prog_cnt/{gone}"));
        }
        self.shown_progs = progs;

        let mut maps = HashSet::new();
        for m in h.maps.iter().take(MAX_MAPS) {
            let l = MapLabels { map: short(&m.name) };
            self.f.map_entries.get_or_create(&l).set(m.entries.min(i64::MAX as u64) as i64);
            self.f.map_max_entries.get_or_create(&l).set(m.max_entries.min(i64::MAX as u64) as i64);
            maps.insert(l.map);
        }
        for gone in self.shown_maps.difference(&maps) {
            let l = MapLabels { map: gone.clone() };
            self.f.map_entries.remove(&l);
            self.f.map_max_entries.remove(&l);
        }
        self.shown_maps = maps;

        self.fixed + self.shown_variants.len() + 3 * self.shown_progs.len() + 2 * self.shown_maps.len()
    }
}
