//! The model: connection identity, decoded kernel records, findings. Plain data, no IO.
pub mod cause;
pub mod conn;
pub mod filter;
pub mod finding;
pub mod record;
pub mod table;
pub mod units;

pub use cause::{Cause, FindingKind, LimitReason, PathScope, StopCause, StopOwner};
pub use conn::{ConnId, Owner, Tuple};
pub use filter::Filter;
pub use finding::{Finding, PathTag};
pub use record::{Body, CaState, Event, Retrans, Rto, Sample, Snap, StateChange};
pub use table::{ConnEntry, ConnTable};
