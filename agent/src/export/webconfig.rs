//! The web-config file, in the Prometheus exporter-toolkit schema with every key it documents:
//! TLS (export/tls.rs), basic auth with bcrypt hashes (export/auth.rs), response headers, a rate
//! limit. Loaded and checked whole before the server starts; a bad file is an error, a key that
//! cannot be honoured (HTTP/2, TLS 1.0) is accepted and logged as such.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: /etc/tcpvigil/tls.crt      # or cert: inline PEM; relative paths: to this file
//!   key_file: /etc/tcpvigil/tls.key       # or key: inline PEM
//!   client_auth_type: NoClientCert        # RequestClientCert, RequireAnyClientCert,
//!                                         # VerifyClientCertIfGiven, RequireAndVerifyClientCert
//!   client_ca_file: /etc/tcpvigil/ca.crt  # or client_ca: inline PEM
//!   client_allowed_sans: [prometheus.example.org]
//!   min_version: TLS12                    # TLS12 or TLS13 (TLS10/11 accepted, served as TLS12)
//!   max_version: TLS13
//!   cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]   # Go names; TLS 1.2 only
//!   prefer_server_cipher_suites: true
//!   curve_preferences: [X25519, CurveP256]
//! http_server_config:
//!   http2: false                          # HTTP/1.1 is served either way
//!   headers: {X-Content-Type-Options: nosniff}
//! basic_auth_users:
//!   prometheus: $2y$10$...                # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//! rate_limit:
//!   interval: 100ms                       # one request per interval, 0 for no limit
//!   burst: 10
//! ```
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::ServerConfig;
use serde::Deserialize;

use super::auth::{parse_basic, Auth, Verdict};
use super::tls::{server_config, RawTls};
use crate::files::{clip, QUOTE_BYTES};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebConfig {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttp>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
    rate_limit: Option<RawRate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRate {
    interval: Option<RawDuration>,
    burst: Option<u32>,
}

/// A Go duration as YAML gives it: `100ms`, `1m`, or a number of nanoseconds.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Nanos(u64),
    Text(String),
}

/// Why a web-config file was rejected. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("web config {path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("web config {path}: {msg}")]
    Syntax { path: PathBuf, msg: String },
    #[error("web config {path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
    #[error("web config {path}: TLS: {msg}")]
    Tls { path: PathBuf, msg: String },
}

/// `rate_limit`: a token bucket over every request but /healthz (as Go's rate.Limiter: `burst`
/// requests at once, one more per `interval`).
#[derive(Debug)]
pub struct RateLimit {
    interval: Duration,
    burst: u32,
    state: Mutex<(f64, Instant)>,
}

impl RateLimit {
    fn new(interval: Duration, burst: u32) -> Self {
        RateLimit { interval, burst, state: Mutex::new((burst as f64, Instant::now())) }
    }

    /// Take a token; false: refuse the request (429).
    pub fn allow(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() / self.interval.as_secs_f64();
        s.0 = (s.0 + refill).min(self.burst as f64);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A checked web config: what the server needs at run time. Default: plain HTTP, no auth.
#[derive(Clone)]
pub struct WebConfig {
    pub tls: Option<Arc<ServerConfig>>,
    auth: Arc<Auth>,
    /// Extra response headers (http_server_config.headers).
    pub headers: Vec<(String, String)>,
    pub rate_limit: Option<Arc<RateLimit>>,
    /// Settings accepted but not honoured, one line each (logged by `load`).
    pub notes: Vec<String>,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            tls: None,
            auth: Arc::new(Auth::new(BTreeMap::new())),
            headers: Vec::new(),
            rate_limit: None,
            notes: Vec::new(),
        }
    }
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("auth", &self.auth.required())
            .field("headers", &self.headers)
            .field("rate_limit", &self.rate_limit)
            .field("notes", &self.notes)
            .finish()
    }
}

fn duration(d: &RawDuration) -> Result<Duration, String> {
    match d {
        RawDuration::Nanos(n) => Ok(Duration::from_nanos(*n)),
        RawDuration::Text(t) if t.trim() == "0" => Ok(Duration::ZERO),
        RawDuration::Text(t) => {
            humantime::parse_duration(t.trim()).map_err(|e| format!("{:?}: {e}", clip(t, QUOTE_BYTES)))
        }
    }
}

impl WebConfig {
    /// Read and check a web-config file (see `parse`); what it cannot honour is logged.
    pub fn load(path: &Path) -> Result<Self, WebConfigError> {
        let text = crate::textfile::read_capped(path, crate::textfile::MAX_CONFIG_BYTES)
            .map_err(|source| WebConfigError::Read { path: path.into(), source })?;
        let c = Self::parse(&text, path)?;
        for n in &c.notes {
            tracing::warn!(web_config = %path.display(), "accepted, not honoured: {n}");
        }
        Ok(c)
    }

    /// Check the text of a web-config file: YAML syntax, unknown keys, bcrypt hashes, certificate
    /// and key, TLS settings, headers, rate limit. `path` names it in errors and anchors
    /// relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<Self, WebConfigError> {
        let invalid = |msg: String| WebConfigError::Invalid { path: path.into(), msg };
        let raw: Option<RawWebConfig> = serde_norway::from_str(text)
            .map_err(|e| WebConfigError::Syntax { path: path.into(), msg: clip(&e.to_string(), QUOTE_BYTES) })?;
        let raw = raw.unwrap_or_default();
        let mut notes = Vec::new();
        for (user, hash) in &raw.basic_auth_users {
            if user.is_empty() || user.contains(':') {
                return Err(invalid(format!(
                    "basic_auth_users: user name {:?} must be non-empty and have no ':'",
                    clip(user, QUOTE_BYTES)
                )));
            }
            if hash.parse::<bcrypt::HashParts>().is_err() {
                return Err(invalid(format!(
                    "basic_auth_users.{}: not a bcrypt hash ($2a$/$2b$/$2y$); make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`",
                    clip(user, QUOTE_BYTES)
                )));
            }
        }
        let mut headers = Vec::new();
        if let Some(h) = &raw.http_server_config {
            if h.http2 == Some(true) {
                notes.push("http_server_config.http2: HTTP/1.1 is served (HTTP/2 is not offered)".into());
            }
            for (k, v) in &h.headers {
                let ok = hyper::header::HeaderName::from_bytes(k.as_bytes()).is_ok()
                    && hyper::header::HeaderValue::from_str(v).is_ok();
                if !ok {
                    return Err(invalid(format!(
                        "http_server_config.headers: bad header {:?}: {:?}",
                        clip(k, QUOTE_BYTES),
                        clip(v, QUOTE_BYTES)
                    )));
                }
                headers.push((k.clone(), v.clone()));
            }
        }
        let rate_limit = match &raw.rate_limit {
            None => None,
            Some(r) => {
                let interval = r
                    .interval
                    .as_ref()
                    .map(duration)
                    .transpose()
                    .map_err(|e| invalid(format!("rate_limit.interval: {e}")))?;
                match interval {
                    None | Some(Duration::ZERO) => None,
                    Some(i) => {
                        let burst = r.burst.unwrap_or(0);
                        if burst == 0 {
                            notes.push(
                                "rate_limit.burst 0: every request but /healthz is refused (as exporter-toolkit does)"
                                    .into(),
                            );
                        }
                        Some(Arc::new(RateLimit::new(i, burst)))
                    }
                }
            }
        };
        let base = path.parent().unwrap_or(Path::new("."));
        let tls = match &raw.tls_server_config {
            None => None,
            Some(t) => Some(Arc::new(
                server_config(t, base, &mut notes).map_err(|msg| WebConfigError::Tls { path: path.into(), msg })?,
            )),
        };
        Ok(WebConfig { tls, auth: Arc::new(Auth::new(raw.basic_auth_users)), headers, rate_limit, notes })
    }

    /// Whether requests must carry basic-auth credentials.
    pub fn auth_required(&self) -> bool {
        self.auth.required()
    }

    /// Check an `Authorization` header now, on this thread (bcrypt unless remembered).
    pub fn authorized(&self, header: Option<&[u8]>) -> bool {
        if !self.auth.required() {
            return true;
        }
        header.and_then(parse_basic).is_some_and(|(u, p)| self.auth.verify_now(&u, &p))
    }

    /// Check an `Authorization` header from `peer` without letting bcrypt pile up (export/auth.rs).
    pub async fn check(&self, header: Option<&[u8]>, peer: IpAddr) -> Verdict {
        self.auth.check(header, peer).await
    }
}

#[cfg(test)]
mod tests;
