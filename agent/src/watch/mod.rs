//! watch (being built).
