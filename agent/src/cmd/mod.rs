//! One module per subcommand.
pub mod check;
pub mod common;
pub mod notify;
pub mod record;
pub mod run;
