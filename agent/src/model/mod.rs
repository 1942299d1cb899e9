//! The model: connection identity, kernel events, findings. Plain data, no IO.
//!
//! Words: a kernel *event* (`Event`) is what the kernel reports about a connection; a *recording*
//! is a file of them (`crate::recording`). A socket's *process* (`Process`) is the one it belongs
//! to; a stop's *owner* (`StopOwner`) is whose stop it is (the network, the receiver).
//!
//! Per connection, `ConnEntry` in `table` is the source of truth: the latest state of every
//! connection, folded from its events by the pipeline. Every other per-connection aggregate is
//! a view kept for one purpose and rebuilt from events or from it: the stop detector's working
//! state (`detect::stop`), the terminal's `watch::ConnView`, a picture's `plot::series::ConnSeries`,
//! and the rates behind the per-connection metrics (`export::conns`).
pub mod cause;
pub mod cgroup;
pub mod conn;
pub mod event;
pub mod filter;
pub mod finding;
pub mod table;
pub mod units;

pub use cause::{Cause, FindingKind, LimitReason, Mechanism, PathScope, StopCause, StopOwner};
pub use cgroup::{Cgroup, CgroupInfo};
pub use conn::{ConnId, Process, Sk, Tuple};
pub use event::{Body, CaState, Event, Retrans, Rto, Sample, Snap, StateChange};
pub use filter::Filter;
pub use finding::{Finding, PathTag};
pub use table::{ConnEntry, ConnTable};
