//! The `[export]` section of the daemon's config: where metrics are served, how many series they
//! may use, where findings go. Checked up front (`validate`) so a bad value stops the daemon
//! before any BPF is loaded.
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::model::Filter;

/// Settings of everything under `export/`. Every field has a default; unknown keys are errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExportConfig {
    /// Address of the HTTP server for `/metrics` and `/healthz`. Loopback unless changed.
    pub listen: ListenAddr,
    /// A web-config YAML file (the Prometheus exporter-toolkit schema) enabling TLS and/or basic
    /// auth. None: plain HTTP, no auth.
    pub web_config: Option<PathBuf>,
    /// How many bulk connections get their own per-connection series.
    pub top_k: usize,
    /// Upper bound on the number of series one scrape returns. Per-connection and per-group
    /// series are trimmed to stay under it.
    pub series_cap: usize,
    /// How many transfer groups get per-group fairness series.
    pub max_groups: usize,
    /// A connection counts as bulk once this many bytes were acknowledged on it.
    pub bulk_min_bytes: u64,
    /// Where findings go as JSON lines: a file path, or "-" for stdout. None: nowhere.
    pub events: Option<String>,
    /// Named transfers: a connection matching a rule's filter gets its name in the `transfer`
    /// label of its per-connection series, so Prometheus can join the streams of one transfer
    /// across hosts. The first matching rule wins.
    pub transfers: Vec<TransferRule>,
}

/// A transfer name and the connections that belong to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferRule {
    /// Short label value, `[A-Za-z0-9_.-]`, at most 32 characters.
    pub name: String,
    /// A connection filter as `tcpvigil watch --conn` takes it (`:5201`, `10.0.0.2`, ...).
    pub filter: String,
}

/// Default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9977";

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            listen: ListenAddr { host: Host::Ip(Ipv4Addr::LOCALHOST.into()), port: 9977 },
            web_config: None,
            top_k: 50,
            series_cap: 2000,
            max_groups: 32,
            bulk_min_bytes: 1 << 20,
            events: None,
            transfers: Vec::new(),
        }
    }
}

/// Where the HTTP server listens, in the forms every Prometheus exporter accepts: `IP:PORT`,
/// `[V6]:PORT`, `:PORT` (every address) and `HOST:PORT` (a name resolved when binding, e.g.
/// `localhost:9977`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr {
    pub host: Host,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// `:PORT`: every address, IPv6 and IPv4 (IPv4 only where IPv6 is off).
    Any,
    Ip(IpAddr),
    /// A host name, looked up when binding.
    Name(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad listen address {}: {why}; use IP:PORT, [IPV6]:PORT, :PORT (every address) or HOST:PORT (e.g. localhost:9977)", crate::files::clip(&format!("{input:?}"), crate::files::QUOTE_BYTES))]
pub struct ListenAddrError {
    pub input: String,
    pub why: &'static str,
}

impl FromStr for ListenAddr {
    type Err = ListenAddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| ListenAddrError { input: s.to_string(), why };
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(ListenAddr { host: Host::Ip(a.ip()), port: a.port() });
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(|| err("no :PORT"))?;
        let port = port.parse::<u16>().map_err(|_| err("the port is not a number from 0 to 65535"))?;
        if host.is_empty() {
            return Ok(ListenAddr { host: Host::Any, port });
        }
        if host.contains(':') || host.starts_with('[') {
            return Err(err("an IPv6 address stands in brackets, as in [::1]:9977"));
        }
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if host.len() > 253 || !host.trim_end_matches('.').split('.').all(label_ok) {
            return Err(err("neither an IP address nor a host name"));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(ListenAddr { host: Host::Ip(ip), port });
        }
        Ok(ListenAddr { host: Host::Name(host.to_string()), port })
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Any => write!(f, ":{}", self.port),
            Host::Ip(ip) => write!(f, "{}", SocketAddr::new(*ip, self.port)),
            Host::Name(n) => write!(f, "{n}:{}", self.port),
        }
    }
}

impl ListenAddr {
    /// The addresses to try, best first: `:PORT` is IPv6's any address (which takes IPv4 too)
    /// then IPv4's; a name is looked up (its IPv4 addresses first, as `localhost` means
    /// 127.0.0.1 to a scraper configured with it).
    pub async fn candidates(&self) -> std::io::Result<Vec<SocketAddr>> {
        Ok(match &self.host {
            Host::Any => vec![
                SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), self.port),
                SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), self.port),
            ],
            Host::Ip(ip) => vec![SocketAddr::new(*ip, self.port)],
            Host::Name(n) => {
                let mut v: Vec<SocketAddr> = tokio::net::lookup_host((n.as_str(), self.port)).await?.collect();
                v.sort_by_key(|a| a.is_ipv6());
                v.dedup();
                if v.is_empty() {
                    return Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("{n} has no address")));
                }
                v
            }
        })
    }
}

impl Serialize for ListenAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What is wrong with an `[export]` section.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExportConfigError {
    #[error("export.top_k = {0}: must be from 1 to {MAX_TOP_K}")]
    TopK(usize),
    #[error("export.series_cap = {got}: must be at least {min} (the series the agent always exports plus one per-connection set)")]
    SeriesCap { got: usize, min: usize },
    #[error("export.max_groups = {0}: must be from 0 to {MAX_GROUPS}")]
    MaxGroups(usize),
    #[error("export.events = \"\": give a file path, \"-\" for stdout, or leave the key out")]
    EmptyEvents,
    #[error("export.transfers: name {0:?} must be 1-32 characters of A-Z a-z 0-9 _ . -")]
    TransferName(String),
    #[error("export.transfers: {0}")]
    TransferFilter(String),
}

pub const MAX_TOP_K: usize = 1000;
pub const MAX_GROUPS: usize = 1000;

impl ExportConfig {
    /// Check values that serde cannot: ranges, filters, the series budget.
    pub fn validate(&self) -> Result<(), ExportConfigError> {
        if self.top_k == 0 || self.top_k > MAX_TOP_K {
            return Err(ExportConfigError::TopK(self.top_k));
        }
        if self.max_groups > MAX_GROUPS {
            return Err(ExportConfigError::MaxGroups(self.max_groups));
        }
        let min = super::series::min_series_cap();
        if self.series_cap < min {
            return Err(ExportConfigError::SeriesCap { got: self.series_cap, min });
        }
        if self.events.as_deref() == Some("") {
            return Err(ExportConfigError::EmptyEvents);
        }
        for t in &self.transfers {
            let ok = !t.name.is_empty()
                && t.name.len() <= 32
                && t.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
            if !ok {
                return Err(ExportConfigError::TransferName(t.name.clone()));
            }
            t.filter.parse::<Filter>().map_err(|e| ExportConfigError::TransferFilter(e.to_string()))?;
        }
        Ok(())
    }

    /// The transfer rules with their filters parsed (call after `validate`; bad ones are skipped).
    pub fn transfer_filters(&self) -> Vec<(String, Filter)> {
        self.transfers.iter().filter_map(|t| t.filter.parse().ok().map(|f| (t.name.clone(), f))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bind_loopback() {
        let c = ExportConfig::default();
        c.validate().unwrap();
        assert_eq!(c.listen.host, Host::Ip(Ipv4Addr::LOCALHOST.into()));
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
    }

    #[test]
    fn listen_takes_every_form_the_exporters_take() {
        let p = |s: &str| s.parse::<ListenAddr>();
        assert_eq!(p(":9977"), Ok(ListenAddr { host: Host::Any, port: 9977 }));
        assert_eq!(p("localhost:9977"), Ok(ListenAddr { host: Host::Name("localhost".into()), port: 9977 }));
        assert_eq!(p("[::]:9977"), Ok(ListenAddr { host: Host::Ip(Ipv6Addr::UNSPECIFIED.into()), port: 9977 }));
        assert_eq!(p("0.0.0.0:1"), Ok(ListenAddr { host: Host::Ip(Ipv4Addr::UNSPECIFIED.into()), port: 1 }));
        assert_eq!(p("[fd00::1]:80").unwrap().to_string(), "[fd00::1]:80");
        assert_eq!(p("metrics.example.org:9977").unwrap().to_string(), "metrics.example.org:9977");
        for (bad, why) in [
            ("9977", "no :PORT"),
            (":99999", "port"),
            ("fd00::1:80", "brackets"),
            ("a b:1", "host name"),
            ("-x:1", "host name"),
            ("localhost:", "port"),
        ] {
            let e = p(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("HOST:PORT"), "{bad}: {e}");
        }
        let c: ExportConfig = toml::from_str("listen = \":9977\"").unwrap();
        assert_eq!(c.listen.to_string(), ":9977");
        let e = toml::from_str::<ExportConfig>("listen = \"nope\"").unwrap_err().to_string();
        assert!(e.contains("bad listen address"), "{e}");
    }

    #[tokio::test]
    async fn every_address_is_v6_then_v4_and_localhost_is_loopback_v4_first() {
        let any: ListenAddr = ":9977".parse().unwrap();
        let c = any.candidates().await.unwrap();
        assert_eq!(c, vec!["[::]:9977".parse().unwrap(), "0.0.0.0:9977".parse().unwrap()]);
        let lo: ListenAddr = "localhost:9977".parse().unwrap();
        let c = lo.candidates().await.unwrap();
        assert!(c.iter().all(|a| a.ip().is_loopback()) && c[0].is_ipv4(), "{c:?}");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e = serde_json::from_str::<ExportConfig>(r#"{"listn": "0.0.0.0:1"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `listn`"), "{e}");
    }

    #[test]
    fn the_shipped_default_config_is_exactly_the_defaults() {
        #[derive(Deserialize)]
        struct File {
            export: ExportConfig,
        }
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/tcpvigil.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let f: File = toml::from_str(&text).unwrap();
        f.export.validate().unwrap();
        assert_eq!(f.export, ExportConfig::default());
        assert!(text.contains(&format!("series_cap = {}", ExportConfig::default().series_cap)));
        assert!(text.contains(&format!("At least {}.", super::super::series::min_series_cap())));
        // The commented examples are valid too.
        let uncommented: String = text
            .lines()
            .skip_while(|l| !l.starts_with("[export]"))
            .take_while(|l| !l.starts_with("[detect]"))
            .map(|l| {
                l.strip_prefix("# ")
                    .filter(|r| {
                        r.starts_with("web_config")
                            || r.starts_with("events")
                            || r.starts_with("[[export")
                            || r.starts_with("name =")
                            || r.starts_with("filter =")
                    })
                    .unwrap_or(l)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let f: File = toml::from_str(&uncommented).unwrap();
        f.export.validate().unwrap();
        assert_eq!(f.export.transfers.len(), 1);
        assert!(f.export.web_config.is_some() && f.export.events.is_some());
    }

    #[test]
    fn bad_values_are_rejected_with_the_key_named() {
        let bad = |f: &dyn Fn(&mut ExportConfig)| {
            let mut c = ExportConfig::default();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert!(bad(&|c| c.top_k = 0).contains("export.top_k"));
        assert!(bad(&|c| c.series_cap = 10).contains("export.series_cap"));
        assert!(bad(&|c| c.events = Some(String::new())).contains("export.events"));
        assert!(bad(&|c| c.transfers = vec![TransferRule { name: "a b".into(), filter: ":1".into() }])
            .contains("export.transfers"));
        assert!(bad(&|c| c.transfers = vec![TransferRule { name: "ab".into(), filter: "x:y".into() }])
            .contains("bad connection filter"));
    }
}
