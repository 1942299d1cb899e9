//! One module per subcommand.
pub mod check;
pub mod common;
pub mod record;
