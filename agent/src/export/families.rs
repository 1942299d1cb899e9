//! Every metric family the agent exports, declared once: its name under `tcpvigil_`, unit, help
//! and label set, and the label values that always exist. `metrics`, `conns` and `health` fill
//! them; `series` counts what they hold.
use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::model::{LimitReason, Mechanism, PathScope, StopCause, StopOwner};

/// A struct of families, each declared in one row: field and type (and how it is made, if not by
/// `Default`), then its name, unit, help, and the label values it always has. `new` makes them
/// with those label values, `register` registers them in the order of the rows.
macro_rules! families {
    ($(#[$m:meta])* pub struct $name:ident {
        $($field:ident: $ty:ty $(= $init:expr)? => $metric:literal $([$unit:expr])?, $help:expr $(, fixed $labels:expr)?;)+
    }) => {
        $(#[$m])*
        #[derive(Debug, Clone)]
        pub struct $name { $(pub $field: $ty,)+ }

        impl $name {
            /// (name under `tcpvigil_`, help) of every family, as /metrics describes them.
            pub const HELP: &'static [(&'static str, &'static str)] = &[$(($metric, $help)),+];

            pub fn new() -> Self {
                let f = $name { $($field: families!(@make $($init)?),)+ };
                $($(for l in $labels {
                    let _ = f.$field.get_or_create(&l);
                })?)+
                f
            }

            pub fn register(&self, r: &mut Registry) {
                $(families!(@register r, $metric, $help, self.$field.clone() $(, $unit)?);)+
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }
    };
    (@make) => { Default::default() };
    (@make $init:expr) => { $init };
    (@register $r:ident, $metric:literal, $help:expr, $family:expr) => { $r.register($metric, $help, $family) };
    (@register $r:ident, $metric:literal, $help:expr, $family:expr, $unit:expr) => {
        $r.register_with_unit($metric, $help, $unit, $family)
    };
}

pub type GaugeF = Gauge<f64, AtomicU64>;
pub type HistFamily = Family<CauseLabels, Histogram, fn() -> Histogram>;

/// Stop duration buckets, seconds: from a few RTTs of a 10 ms path to 100 s outages.
pub const STOP_BUCKETS: [f64; 11] = [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

fn stop_histogram() -> Histogram {
    Histogram::new(STOP_BUCKETS)
}

/// (owner, cause) label pairs of the stop families: one per stop cause, with its owner.
pub fn stop_labels_all() -> impl Iterator<Item = CauseLabels> {
    StopCause::ALL.iter().map(|&cause| CauseLabels { owner: cause.owner(), cause })
}

fn reasons_all() -> impl Iterator<Item = ReasonLabels> {
    ReasonLabel::all().map(|reason| ReasonLabels { reason })
}

fn mechanisms_all() -> impl Iterator<Item = MechanismLabels> {
    Mechanism::ALL.iter().map(|&mechanism| MechanismLabels { mechanism })
}

fn scopes_all() -> impl Iterator<Item = ScopeLabels> {
    PathScope::ALL.iter().map(|&scope| ScopeLabels { scope })
}

macro_rules! top_k {
    () => {
        "(top-K bulk connections by goodput; conn=\"other\" sums the rest)"
    };
}

families! {
    /// Stops, losses, path events, unfair groups and limits.
    pub struct FindingFamilies {
        stops: Family<CauseLabels, Counter> => "stops",
            "Communication stops that ended, by owner (network, receiver, undetermined) and cause",
            fixed stop_labels_all();
        stop_duration: HistFamily = HistFamily::new_with_constructor(stop_histogram) => "stop_duration" [Unit::Seconds],
            "Duration of communication stops that ended, by owner and cause", fixed stop_labels_all();
        stops_in_progress: Family<CauseLabels, Gauge> => "stops_in_progress",
            "Communication stops going on now, by owner and the cause they have so far", fixed stop_labels_all();
        stop_mechanisms: Family<MechanismLabels, Counter> => "stop_mechanisms",
            "Communication stops that ended with a mechanism named (what on the path holds them, e.g. mtu_blackhole), by mechanism; also counted in stops by owner and cause",
            fixed mechanisms_all();
        lost_retrans: Counter => "lost_retransmissions", "Retransmitted segments that were lost again (host-wide)";
        rtos: Counter => "retransmission_timeouts", "Retransmission timeouts that fired (host-wide)";
        retrans_segs: Counter => "retransmitted_segments", "Segments retransmitted (host-wide)";
        path_events: Family<ScopeLabels, Counter> => "path_events",
            "Path events that ended: network stops of several connections to one remote prefix that began together, by scope (all connections to it stopped, or only some)",
            fixed scopes_all();
        path_events_in_progress: Family<ScopeLabels, Gauge> => "path_events_in_progress",
            "Path events going on now, by scope", fixed scopes_all();
        prefix_stops: Family<PrefixLabels, Gauge> => "prefix_stops_in_progress",
            "Network stops going on now towards one remote prefix (detect.path lengths); only prefixes with one, the most stopped first";
        unfair_groups: Gauge => "unfair_groups", "Transfer groups whose streams share the path unfairly now";
        group_fairness: Family<GroupLabels, GaugeF> => "group_fairness_index",
            "Jain's fairness index of the streams of an unfair group (1 = even)";
        group_even_split: Family<GroupLabels, GaugeF> => "group_even_split_efficiency" [Unit::Other("ratio".into())],
            "Efficiency an even split of the data would get: n * slowest / total goodput";
        group_min_max: Family<GroupLabels, GaugeF> => "group_min_max" [Unit::Other("ratio".into())],
            "Slowest over fastest stream goodput in an unfair group";
        group_streams: Family<GroupLabels, Gauge> => "group_streams", "Streams in an unfair group";
        group_order_stability: Family<GroupLabels, GaugeF> => "group_send_order_stability",
            "Share of the RTT cycles in which an unfair group's streams sent in their usual order (the stream that sends last in the cycle meets the fullest queue and loses first); absent until every stream reported 8 rounds";
        limited: Family<ReasonLabels, Gauge> => "limited_connections",
            "Connections held back by buffers or options, by reason", fixed reasons_all();
    }
}

families! {
    /// The top-K bulk connections, one series each; the rest summed into `conn="other"`.
    pub struct ConnFamilies {
        cwnd: Family<ConnLabels, Gauge> => "conn_cwnd" [Unit::Other("segments".into())],
            concat!("Congestion window ", top_k!()), fixed [ConnLabels::other()];
        in_flight: Family<ConnLabels, Gauge> => "conn_in_flight" [Unit::Other("segments".into())],
            concat!("Segments in flight ", top_k!()), fixed [ConnLabels::other()];
        srtt: Family<ConnLabels, GaugeF> => "conn_srtt" [Unit::Seconds], "Smoothed RTT (top-K bulk connections only)";
        delivery: Family<ConnLabels, GaugeF> => "conn_delivery_rate" [Unit::Other("bytes_per_second".into())],
            concat!("Kernel delivery-rate (ACK-rate) estimate ", top_k!()), fixed [ConnLabels::other()];
        goodput: Family<ConnLabels, GaugeF> => "conn_goodput" [Unit::Other("bytes_per_second".into())],
            concat!("Bytes acknowledged per second ", top_k!()), fixed [ConnLabels::other()];
        efficiency: Family<ConnLabels, GaugeF> => "conn_efficiency" [Unit::Other("ratio".into())],
            "Goodput over the best delivery rate seen on the connection (top-K bulk connections only)";
        stopped: Family<ConnLabels, Gauge> => "conn_stop_in_progress",
            "1 while a stop is going on (top-K bulk connections only)";
        tracked: Gauge => "tracked_connections", "Open connections in the agent's table";
        bulk: Gauge => "bulk_connections", "Open connections that moved at least export.bulk_min_bytes";
        overflow: Gauge => "overflow_connections", "Open connections summed into conn=\"other\"";
    }
}

/// `stage` values of `tcpvigil_dropped_records_total`.
pub const DROP_STAGES: [&str; 2] = ["ring_buffer", "channel"];
/// `kind` values of `tcpvigil_bpf_errors_total`.
pub const BPF_ERRORS: [&str; 4] = ["storage_fail", "rtx_map_full", "opt_read_fail", "seq_write_fail"];
/// `kind` values of `tcpvigil_kernel_records_total`.
pub const RECORD_KINDS: [&str; 2] = ["sample", "event"];
/// `outcome` values of `tcpvigil_recorder_dumps_total`.
pub const DUMP_OUTCOMES: [&str; 4] = ["written", "failed", "dropped", "no_history"];

families! {
    /// The agent's own health: what was dropped or failed, the recorder, hook variants, BPF programs and maps.
    pub struct HealthFamilies {
        dropped: Family<StageLabels, Counter> => "dropped_records",
            "Kernel records lost: ring buffer full (stage=ring_buffer) or reader channel full (stage=channel)",
            fixed DROP_STAGES.map(|stage| StageLabels { stage });
        decode_errors: Counter => "decode_errors", "Ring-buffer records that failed to decode";
        bpf_errors: Family<KindLabels, Counter> => "bpf_errors",
            "Failures counted by the BPF programs (map pressure), by kind", fixed BPF_ERRORS.map(|kind| KindLabels { kind });
        kernel_records: Family<KindLabels, Counter> => "kernel_records", "Records the BPF programs emitted, by kind",
            fixed RECORD_KINDS.map(|kind| KindLabels { kind });
        events_write_errors: Counter => "events_write_errors", "Findings the JSON events writer failed to write";
        recorder_dumps: Family<OutcomeLabels, Counter> => "recorder_dumps",
            "Flight-recorder dumps by outcome: written, failed (IO or drawing), dropped (writer busy), no_history (finding about a connection without history)",
            fixed DUMP_OUTCOMES.map(|outcome| OutcomeLabels { outcome });
        recorder_memory: Gauge => "recorder_memory" [Unit::Bytes], "Memory the flight recorder's per-connection histories hold";
        recorder_conns: Gauge => "recorder_connections", "Connections with a flight-recorder history";
        snapshot_duration: GaugeF => "snapshot_duration" [Unit::Seconds],
            "Time the last snapshot pass (a look at the connections that moved lately) took";
        build_info: Family<BuildLabels, Gauge> => "build_info",
            "Agent version, source revision and the hook variants this kernel gave it: needs served by their preferred program (of all) and those on a fallback (always 1)",
            fixed [BuildLabels::this_build()];
        variants: Family<VariantLabels, Gauge> => "hook_variant_info", "Hook variant in use for each need (always 1)";
        prog_run_time: Family<ProgLabels, Counter<f64, AtomicU64>> => "bpf_prog_run_time" [Unit::Seconds],
            "Time spent in each BPF program, estimated from kernel run-time statistics sampled 2 s in every 20 s (bpf.bpf_stats)";
        prog_runs: Family<ProgLabels, Counter> => "bpf_prog_runs",
            "Runs of each BPF program, estimated from kernel run-time statistics sampled 2 s in every 20 s (bpf.bpf_stats)";
        prog_recursion_misses: Family<ProgLabels, Counter> => "bpf_prog_recursion_misses",
            "Runs of each BPF program the kernel skipped because it was already running on that CPU (events missed)";
        map_entries: Family<MapLabels, Gauge> => "bpf_map_entries", "Entries in a BPF map";
        map_max_entries: Family<MapLabels, Gauge> => "bpf_map_max_entries", "Capacity of a BPF map";
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    /// Whose stop: network, receiver or undetermined (an application pause is never a stop).
    pub owner: StopOwner,
    pub cause: StopCause,
}

/// The `reason` of `limited_connections`: a limit reason, or `other` (kept for dashboards that
/// expect the series; no reason maps to it).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ReasonLabel {
    Reason(LimitReason),
    Other,
}

impl ReasonLabel {
    pub fn all() -> impl Iterator<Item = ReasonLabel> {
        LimitReason::ALL.iter().map(|r| ReasonLabel::Reason(*r)).chain([ReasonLabel::Other])
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReasonLabel::Reason(r) => r.as_str(),
            ReasonLabel::Other => "other",
        }
    }
}

/// Label values of the model's enums are their names.
macro_rules! label_value {
    ($($t:ty),*) => {$(
        impl EncodeLabelValue for $t {
            fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                e.write_str(self.as_str())
            }
        }
    )*};
}
label_value!(StopOwner, StopCause, Mechanism, PathScope, ReasonLabel);

/// Label sets of one label, named as their field.
macro_rules! one_label {
    ($($(#[$m:meta])* $name:ident { $field:ident: $ty:ty })*) => {$(
        $(#[$m])*
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub struct $name {
            pub $field: $ty,
        }
    )*};
}

one_label! {
    ReasonLabels { reason: ReasonLabel }
    /// Path events: every connection to the prefix stopped (`all`), or some kept delivering (`partial`).
    ScopeLabels { scope: PathScope }
    MechanismLabels { mechanism: Mechanism }
    PrefixLabels { prefix: String }
    GroupLabels { group: String }
    KindLabels { kind: &'static str }
    StageLabels { stage: &'static str }
    OutcomeLabels { outcome: &'static str }
    ProgLabels { prog: String }
    MapLabels { map: String }
}

/// Labels of a per-connection series: short, and bounded by top-K.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnLabels {
    /// `laddr:lport>raddr:rport`, or `other` for the overflow series.
    pub conn: String,
    /// The owning process's command name (at most 16 characters).
    pub comm: String,
    /// The transfer this connection belongs to (`export.transfers`), or empty.
    pub transfer: String,
    /// The process's container: its name, else its id's first 12 digits; or empty.
    pub container: String,
    /// The process's systemd unit, or empty.
    pub unit: String,
}

impl ConnLabels {
    pub fn other() -> Self {
        ConnLabels {
            conn: "other".into(),
            comm: String::new(),
            transfer: String::new(),
            container: String::new(),
            unit: String::new(),
        }
    }
}

/// `tcpvigil_build_info`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    /// `git rev-parse --short HEAD` at build time, or "unknown".
    pub revision: &'static str,
    /// Hook needs served by their preferred program, of all needs ("10/10"); empty until the
    /// variants are chosen.
    pub hooks_preferred: String,
    /// Needs served by a fallback variant, comma-separated ("" when none).
    pub hooks_fallback: String,
}

/// The source revision the binary was built from (build.rs).
pub const REVISION: &str = env!("TCPVIGIL_REVISION");

impl BuildLabels {
    pub fn this_build() -> Self {
        BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
            revision: REVISION,
            hooks_preferred: String::new(),
            hooks_fallback: String::new(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VariantLabels {
    pub need: String,
    pub variant: String,
}
