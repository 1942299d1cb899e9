//! The model: connection identity, decoded kernel records, findings. Plain data, no IO.
pub mod conn;
pub mod filter;
pub mod finding;
pub mod record;
pub mod table;

pub use conn::{ConnId, Owner, Tuple};
pub use filter::Filter;
pub use finding::{Finding, FindingKind, StopOwner};
pub use record::{Body, CaState, Event, Retrans, Rto, Sample, Snap, StateChange};
pub use table::{ConnEntry, ConnTable};
