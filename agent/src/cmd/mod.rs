//! One module per subcommand.
pub mod analyze;
pub mod check;
pub mod common;
pub mod gen_docs;
pub mod help;
pub mod notify;
pub mod plot;
pub mod record;
pub mod refusal;
pub mod reload;
pub mod run;
pub mod watch;
