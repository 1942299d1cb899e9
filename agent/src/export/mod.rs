//! Outputs: Prometheus metrics and their HTTP(S) server, JSON-lines events, the flight recorder.
//!
//! Data flows in only: the daemon hands events, findings and the connection table to
//! [`metrics::Metrics`] and findings to [`events::EventsWriter`]; [`http::HttpServer`] serves
//! the registry. Nothing here feeds back upstream.
pub mod auth;
pub mod config;
mod conns;
pub mod events;
pub mod health;
pub mod http;
pub mod metrics;
pub mod recorder;
pub mod tls;
pub mod webconfig;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_http;

pub use config::ExportConfig;
pub use events::{EventsTarget, EventsWriter};
pub use health::Health;
pub use http::HttpServer;
pub use metrics::Metrics;
pub use webconfig::WebConfig;
