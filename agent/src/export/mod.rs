//! export (being built).
pub mod recorder;
