//! The web-config file (the schema Prometheus exporters use): TLS via rustls and basic auth with
//! bcrypt hashes. Loaded and checked whole before the server starts; a bad file is an error.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: /etc/tcpvigil/tls.crt      # relative paths are relative to this file
//!   key_file: /etc/tcpvigil/tls.key
//!   client_auth_type: NoClientCert        # or RequireAndVerifyClientCert, VerifyClientCertIfGiven
//!   client_ca_file: /etc/tcpvigil/ca.crt  # needed when client certificates are verified
//!   min_version: TLS12                    # TLS12 or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...                # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebConfig {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttp>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: PathBuf,
    key_file: PathBuf,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
    max_version: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    /// Accepted for compatibility; tcpvigil serves HTTP/1.1 only.
    #[allow(dead_code)]
    http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
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

/// A checked web config: what the server needs at run time. Default: plain HTTP, no auth.
#[derive(Clone, Default)]
pub struct WebConfig {
    pub tls: Option<Arc<ServerConfig>>,
    /// user -> bcrypt hash. Empty: no authentication.
    users: BTreeMap<String, String>,
    /// Extra response headers (http_server_config.headers).
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .field("headers", &self.headers)
            .finish()
    }
}

/// A bcrypt hash of an unguessable string, checked when the user is unknown so that a wrong
/// user name costs as much time as a wrong password.
const DUMMY_HASH: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DSmV9UUNY6iETwcuHAjN6";

fn resolve(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// The supported versions, oldest first.
const TLS_VERSIONS: [(&str, &rustls::SupportedProtocolVersion); 2] =
    [("TLS12", &rustls::version::TLS12), ("TLS13", &rustls::version::TLS13)];

fn tls_version(v: &str) -> Option<usize> {
    TLS_VERSIONS.iter().position(|(name, _)| *name == v)
}

impl WebConfig {
    /// Read and check a web-config file: YAML syntax, unknown keys, bcrypt hashes, certificate
    /// and key files, TLS versions and client-auth settings.
    pub fn load(path: &Path) -> Result<Self, WebConfigError> {
        let text = crate::textfile::read_capped(path, crate::textfile::MAX_CONFIG_BYTES)
            .map_err(|source| WebConfigError::Read { path: path.into(), source })?;
        Self::parse(&text, path)
    }

    /// Check the text of a web-config file; `path` names it in errors and anchors relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<Self, WebConfigError> {
        let invalid = |msg: String| WebConfigError::Invalid { path: path.into(), msg };
        let raw: Option<RawWebConfig> = serde_norway::from_str(text)
            .map_err(|e| WebConfigError::Syntax { path: path.into(), msg: e.to_string() })?;
        let raw = raw.unwrap_or(RawWebConfig {
            tls_server_config: None,
            http_server_config: None,
            basic_auth_users: BTreeMap::new(),
        });
        for (user, hash) in &raw.basic_auth_users {
            if user.is_empty() || user.contains(':') {
                return Err(invalid(format!("basic_auth_users: user name {user:?} must be non-empty and have no ':'")));
            }
            if hash.parse::<bcrypt::HashParts>().is_err() {
                return Err(invalid(format!(
                    "basic_auth_users.{user}: not a bcrypt hash ($2a$/$2b$/$2y$); make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`"
                )));
            }
        }
        let mut headers = Vec::new();
        if let Some(h) = &raw.http_server_config {
            for (k, v) in &h.headers {
                let ok = hyper::header::HeaderName::from_bytes(k.as_bytes()).is_ok()
                    && hyper::header::HeaderValue::from_str(v).is_ok();
                if !ok {
                    return Err(invalid(format!("http_server_config.headers: bad header {k:?}: {v:?}")));
                }
                headers.push((k.clone(), v.clone()));
            }
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let tls = match raw.tls_server_config {
            None => None,
            Some(t) => {
                Some(Arc::new(server_config(&t, base).map_err(|msg| WebConfigError::Tls { path: path.into(), msg })?))
            }
        };
        Ok(WebConfig { tls, users: raw.basic_auth_users, headers })
    }

    /// Whether requests must carry basic-auth credentials.
    pub fn auth_required(&self) -> bool {
        !self.users.is_empty()
    }

    /// Check an `Authorization` header value. Slow on purpose (bcrypt): call it off the reactor.
    pub fn authorized(&self, header: Option<&[u8]>) -> bool {
        if self.users.is_empty() {
            return true;
        }
        let Some((user, pass)) = header.and_then(parse_basic) else { return false };
        match self.users.get(&user) {
            Some(hash) => bcrypt::verify(pass.as_bytes(), hash).unwrap_or(false),
            None => {
                let _ = bcrypt::verify(pass.as_bytes(), DUMMY_HASH);
                false
            }
        }
    }
}

/// `Basic base64(user:pass)` -> (user, pass).
fn parse_basic(h: &[u8]) -> Option<(String, String)> {
    let h = std::str::from_utf8(h).ok()?.trim();
    let (scheme, rest) = h.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(rest.trim()).ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (u, p) = s.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

fn server_config(t: &RawTls, base: &Path) -> Result<ServerConfig, String> {
    let cert_path = resolve(base, &t.cert_file);
    let key_path = resolve(base, &t.key_file);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cert_file {}: {e}", cert_path.display()))?;
    if certs.is_empty() {
        return Err(format!("cert_file {}: no PEM certificate in it", cert_path.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| format!("key_file {}: {e}", key_path.display()))?;

    let min = t.min_version.as_deref().unwrap_or("TLS12");
    let max = t.max_version.as_deref().unwrap_or("TLS13");
    let bad_version = |v: &str| format!("TLS version {v:?} is not supported: use TLS12 or TLS13");
    let (lo, hi) =
        (tls_version(min).ok_or_else(|| bad_version(min))?, tls_version(max).ok_or_else(|| bad_version(max))?);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        TLS_VERSIONS.iter().enumerate().filter(|(i, _)| *i >= lo && *i <= hi).map(|(_, (_, v))| *v).collect();
    if versions.is_empty() {
        return Err(format!("min_version {min} is above max_version {max}"));
    }

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| e.to_string())?;
    let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let builder = match auth {
        "NoClientCert" => builder.with_no_client_auth(),
        "RequireAndVerifyClientCert" | "VerifyClientCertIfGiven" => {
            let ca = t.client_ca_file.as_ref().ok_or_else(|| format!("client_auth_type {auth} needs client_ca_file"))?;
            let ca = resolve(base, ca);
            let mut roots = RootCertStore::empty();
            let cas = CertificateDer::pem_file_iter(&ca)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?;
            let (added, _) = roots.add_parsable_certificates(cas);
            if added == 0 {
                return Err(format!("client_ca_file {}: no usable CA certificate", ca.display()));
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if auth == "VerifyClientCertIfGiven" { v.allow_unauthenticated() } else { v };
            builder.with_client_cert_verifier(v.build().map_err(|e| e.to_string())?)
        }
        other => {
            return Err(format!(
                "client_auth_type {other:?} is not supported: use NoClientCert, RequireAndVerifyClientCert or VerifyClientCertIfGiven"
            ))
        }
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("cert_file/key_file {} / {}: {e}", cert_path.display(), key_path.display()))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<WebConfig, WebConfigError> {
        WebConfig::parse(s, Path::new("/etc/tcpvigil/web.yml"))
    }

    fn basic(user: &str, pass: &str) -> Vec<u8> {
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))).into_bytes()
    }

    #[test]
    fn empty_file_means_no_tls_no_auth() {
        let c = parse("").unwrap();
        assert!(c.tls.is_none());
        assert!(!c.auth_required());
        assert!(c.authorized(None));
    }

    #[test]
    fn basic_auth_accepts_the_right_password_only() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let c = parse(&format!("basic_auth_users:\n  prom: '{hash}'\n")).unwrap();
        assert!(c.auth_required());
        assert!(c.authorized(Some(&basic("prom", "s3cret"))));
        assert!(!c.authorized(Some(&basic("prom", "wrong"))));
        assert!(!c.authorized(Some(&basic("other", "s3cret"))));
        assert!(!c.authorized(None));
        assert!(!c.authorized(Some(b"Bearer abc")));
        assert!(!c.authorized(Some(b"Basic !!!notbase64")));
    }

    #[test]
    fn bad_web_configs_are_rejected_with_a_clear_message() {
        let cases = [
            ("tls_server_config: [", "web.yml"),
            ("basic_auth_user:\n  a: b\n", "unknown field `basic_auth_user`"),
            ("basic_auth_users:\n  prom: plaintext\n", "basic_auth_users.prom: not a bcrypt hash"),
            ("tls_server_config:\n  cert_file: x.crt\n", "missing field `key_file`"),
            ("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n", "cert_file /etc/tcpvigil/nope.crt"),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n",
                "unknown field `cipher_suites`",
            ),
            ("http_server_config:\n  headers:\n    'Bad Header': x\n", "bad header"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains("/etc/tcpvigil/web.yml"), "{e}");
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_dummy_hash_is_a_real_cost_10_bcrypt_hash() {
        let parts: bcrypt::HashParts = DUMMY_HASH.parse().unwrap();
        assert_eq!(parts.get_cost(), 10);
        assert!(!bcrypt::verify("", DUMMY_HASH).unwrap());
    }

    #[test]
    fn tls_settings_are_checked() {
        let dir = tls_fixture_dir();
        let ok = format!("tls_server_config:\n  cert_file: {d}/cert.pem\n  key_file: {d}/key.pem\n", d = dir.display());
        let c = WebConfig::parse(&ok, Path::new("/x/web.yml")).unwrap();
        assert!(c.tls.is_some());
        for (extra, want) in [
            ("  min_version: TLS11\n", "TLS version \"TLS11\" is not supported"),
            ("  min_version: TLS13\n  max_version: TLS12\n", "above max_version"),
            ("  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
            ("  client_auth_type: RequireAnyClientCert\n", "not supported"),
        ] {
            let e = WebConfig::parse(&format!("{ok}{extra}"), Path::new("/x/web.yml")).unwrap_err().to_string();
            assert!(e.contains(want), "{extra}: {e}");
        }
        let verify = format!("{ok}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: cert.pem\n");
        WebConfig::parse(&verify, &dir.join("web.yml")).unwrap();
    }

    /// The self-signed localhost certificate kept for tests (see testdata/README).
    pub(crate) fn tls_fixture_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/export/testdata")
    }
}
