//! Outputs: Prometheus metrics and their HTTP(S) server, JSON-lines events, the flight recorder.
//!
//! Data flows in only: [`outputs::Outputs`] hands what the pipeline yields (records, findings, the
//! connection table) to [`metrics::Metrics`], [`events::EventsWriter`] and the flight recorder;
//! [`http::HttpServer`] serves the registry. Nothing here feeds back upstream.
pub mod auth;
pub mod config;
mod conns;
pub mod events;
pub mod families;
pub mod health;
pub mod http;
pub mod metrics;
pub mod outputs;
pub mod process;
pub mod recorder;
pub mod series;
pub mod tls;
pub mod webconfig;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_contract;
#[cfg(test)]
mod tests_http;

pub use config::ExportConfig;
pub use events::{EventsTarget, EventsWriter};
pub use health::Health;
pub use http::HttpServer;
pub use metrics::Metrics;
pub use webconfig::WebConfig;
