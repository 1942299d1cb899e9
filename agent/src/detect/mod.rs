//! detect (being built).
