//! The lab's error type: every failure names the command or step that failed.
use std::io;

/// Errors raised by the lab library.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// An external command (ip, tc, nft, iptables, iperf3, ...) could not start or failed.
    #[error("command `{cmd}` failed: {detail}")]
    Command { cmd: String, detail: String },
    /// A system call or file operation failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// Bad input from a user or caller (unknown scenario, knob out of range, ...).
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The lab needs something the machine does not have (root, a tool, a kernel feature).
    #[error("missing prerequisite: {0}")]
    Missing(String),
    /// Output of a tool could not be parsed.
    #[error("cannot parse {what}: {detail}")]
    Parse { what: String, detail: String },
    /// Interrupted by Ctrl-C or a stop request.
    #[error("interrupted")]
    Interrupted,
}

impl LabError {
    /// Wraps an io::Error with what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        LabError::Io { what: what.into(), source }
    }
}

/// Result alias used across the lab.
pub type Result<T> = std::result::Result<T, LabError>;
