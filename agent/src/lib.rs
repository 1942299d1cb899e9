//! tcpvigil: per-connection TCP loss-recovery telemetry from eBPF, diagnoses and exports.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod bpf;
pub mod caps;
pub mod clock;
pub mod config;
pub mod detect;
pub mod export;
pub mod files;
pub mod heap;
pub mod logging;
pub mod model;
pub mod plot;
pub mod recording;
pub mod textfile;
pub mod watch;
