//! The tcpvigil command line.
fn main() {}
