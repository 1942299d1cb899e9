//! `tls_server_config` of a web-config file (the exporter-toolkit schema, every key) as a rustls
//! server config: certificate, key and client CAs from files or inline PEM, TLS versions, TLS 1.2
//! cipher suites and key-exchange curves by their Go names, each client_auth_type, and the SANs a
//! client certificate must carry. What rustls cannot do (TLS 1.0/1.1, CBC suites, P-521) is
//! accepted and noted, so a file written for node_exporter loads as it is.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::ring::{cipher_suite as cs, kx_group};
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};
use serde::Deserialize;

/// `tls_server_config` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// Inline PEM, instead of `cert_file`.
    cert: Option<String>,
    /// Inline PEM, instead of `key_file`.
    key: Option<String>,
    /// Inline PEM, instead of `client_ca_file`.
    client_ca: Option<String>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

/// PEM files are small; a larger one is not a certificate or key.
const MAX_PEM: u64 = 1 << 20;

fn pem(base: &Path, inline: &Option<String>, file: &Option<PathBuf>, what: &str) -> Result<Option<Vec<u8>>, String> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(format!("give {what} or {what}_file, not both")),
        (Some(text), None) => Ok(Some(text.as_bytes().to_vec())),
        (None, Some(f)) => {
            let p = if f.is_absolute() { f.clone() } else { base.join(f) };
            crate::files::read_capped(&p, MAX_PEM).map(Some).map_err(|e| format!("{what}_file {}: {e}", p.display()))
        }
        (None, None) => Ok(None),
    }
}

fn certs(bytes: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let v = CertificateDer::pem_slice_iter(bytes).collect::<Result<Vec<_>, _>>().map_err(|e| format!("{what}: {e}"))?;
    if v.is_empty() {
        return Err(format!("{what}: no PEM certificate in it"));
    }
    Ok(v)
}

/// Go's names of the cipher suites exporter-toolkit accepts (`tls.CipherSuites()`), with the
/// rustls suite for those rustls has. TLS 1.3 suites are not configurable in Go either.
fn suites() -> [(&'static str, Option<rustls::SupportedCipherSuite>); 17] {
    [
        ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", Some(cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)),
        ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", Some(cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)),
        ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", Some(cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)),
        ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", Some(cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)),
        ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", Some(cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)),
        ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", Some(cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384)),
        ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", Some(cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256)),
        ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", Some(cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256)),
        ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", None),
        ("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", None),
        ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", None),
        ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", None),
        ("TLS_RSA_WITH_AES_128_GCM_SHA256", None),
        ("TLS_RSA_WITH_AES_256_GCM_SHA384", None),
        ("TLS_AES_128_GCM_SHA256", None),
        ("TLS_AES_256_GCM_SHA384", None),
        ("TLS_CHACHA20_POLY1305_SHA256", None),
    ]
}

/// Go's curve names as exporter-toolkit spells them, with the rustls group where there is one.
fn curves() -> [(&'static str, Option<&'static dyn SupportedKxGroup>); 4] {
    [
        ("X25519", Some(kx_group::X25519)),
        ("CurveP256", Some(kx_group::SECP256R1)),
        ("CurveP384", Some(kx_group::SECP384R1)),
        ("CurveP521", None),
    ]
}

fn version(v: &str) -> Result<u8, String> {
    match v {
        "TLS10" => Ok(10),
        "TLS11" => Ok(11),
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        other => Err(format!("unknown TLS version {other:?}: use TLS10, TLS11, TLS12 or TLS13")),
    }
}

/// Build the server config; `notes` gets one line per setting accepted but not honoured.
pub fn server_config(t: &RawTls, base: &Path, notes: &mut Vec<String>) -> Result<ServerConfig, String> {
    let cert = pem(base, &t.cert, &t.cert_file, "cert")?.ok_or("missing one of cert or cert_file")?;
    let key = pem(base, &t.key, &t.key_file, "key")?.ok_or("missing one of key or key_file")?;
    let chain = certs(&cert, "cert")?;
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("key: {e}"))?;

    let (min, max) = (t.min_version.as_deref().unwrap_or("TLS12"), t.max_version.as_deref().unwrap_or("TLS13"));
    let (lo, hi) = (version(min)?, version(max)?);
    if hi < 12 {
        return Err(format!("max_version {max}: tcpvigil offers TLS 1.2 and 1.3 only"));
    }
    if lo > hi {
        return Err(format!("min_version {min} is above max_version {max}"));
    }
    if lo < 12 {
        notes.push(format!("min_version {min}: TLS 1.0 and 1.1 are not offered; the minimum is TLS 1.2"));
    }
    let (mut tls12, tls13) = (lo <= 12, hi >= 13);

    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(names) = &t.cipher_suites {
        let mut chosen = Vec::new();
        for n in names {
            match suites().iter().find(|(go, _)| go == n) {
                None => return Err(format!("cipher_suites: unknown cipher suite {n:?}")),
                Some((_, Some(s))) => chosen.push(*s),
                Some((_, None)) if n.starts_with("TLS_AES") || n.starts_with("TLS_CHACHA") => {
                    notes.push(format!("cipher_suites: {n} is a TLS 1.3 suite; those are not configurable (as in Go)"))
                }
                Some((_, None)) => notes.push(format!("cipher_suites: {n} is not offered by tcpvigil's TLS library")),
            }
        }
        if tls12 && chosen.is_empty() {
            if !tls13 {
                return Err("cipher_suites: none of the listed TLS 1.2 suites is available".into());
            }
            notes.push("cipher_suites: none of the listed TLS 1.2 suites is available: TLS 1.2 is off".into());
            tls12 = false;
        }
        let mut all: Vec<_> = provider.cipher_suites.iter().filter(|s| s.tls13().is_some()).copied().collect();
        all.extend(chosen);
        provider.cipher_suites = all;
    }
    if let Some(names) = &t.curve_preferences {
        let mut groups: Vec<&'static dyn SupportedKxGroup> = Vec::new();
        for n in names {
            match curves().iter().find(|(go, _)| go == n) {
                None => return Err(format!("curve_preferences: unknown curve {n:?}")),
                Some((_, Some(g))) => groups.push(*g),
                Some((_, None)) => {
                    notes.push(format!("curve_preferences: {n} is not offered by tcpvigil's TLS library"))
                }
            }
        }
        if groups.is_empty() {
            return Err(
                "curve_preferences: none of the listed curves is available (X25519, CurveP256, CurveP384)".into()
            );
        }
        provider.kx_groups = groups;
    }
    let provider = Arc::new(provider);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [(tls12, &rustls::version::TLS12), (tls13, &rustls::version::TLS13)]
            .into_iter()
            .filter_map(|(on, v)| on.then_some(v))
            .collect();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| e.to_string())?;

    let ca = pem(base, &t.client_ca, &t.client_ca_file, "client_ca")?;
    let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let sans = t.client_allowed_sans.clone().unwrap_or_default();
    let (verify, mandatory) = match auth {
        "" | "NoClientCert" => (false, false),
        "RequestClientCert" => (false, false),
        "RequireAnyClientCert" | "RequireClientCert" => (false, true),
        "VerifyClientCertIfGiven" => (true, false),
        "RequireAndVerifyClientCert" => (true, true),
        other => return Err(format!(
            "client_auth_type {other:?}: use NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
        )),
    };
    if matches!(auth, "" | "NoClientCert") && ca.is_some() {
        return Err("client CAs are configured but client_auth_type is NoClientCert".into());
    }
    if t.client_allowed_sans.is_some() && !mandatory {
        return Err(
            "client_allowed_sans needs client_auth_type RequireAnyClientCert or RequireAndVerifyClientCert".into()
        );
    }
    let builder = if matches!(auth, "" | "NoClientCert") {
        builder.with_no_client_auth()
    } else {
        let inner: Option<Arc<dyn ClientCertVerifier>> = if verify {
            let ca = ca.ok_or_else(|| format!("client_auth_type {auth} needs client_ca_file or client_ca"))?;
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(certs(&ca, "client_ca")?);
            if added == 0 {
                return Err("client_ca: no usable CA certificate".into());
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let v = if mandatory { v } else { v.allow_unauthenticated() };
            Some(v.build().map_err(|e| e.to_string())?)
        } else {
            None
        };
        builder.with_client_cert_verifier(Arc::new(ClientCerts { inner, mandatory, sans, provider }))
    };
    let mut cfg = builder.with_single_cert(chain, key).map_err(|e| format!("cert/key: {e}"))?;
    cfg.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Client certificates as exporter-toolkit takes them: verified against the CAs or not (Go's
/// RequestClientCert and RequireAnyClientCert only ask for one), required or optional, and
/// carrying one of the allowed SANs when a list is given.
#[derive(Debug)]
struct ClientCerts {
    inner: Option<Arc<dyn ClientCertVerifier>>,
    mandatory: bool,
    sans: Vec<String>,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for ClientCerts {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.as_ref().map_or(&[], |v| v.root_hint_subjects())
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if let Some(v) = &self.inner {
            v.verify_client_cert(end_entity, intermediates, now)?;
        }
        if !self.sans.is_empty() {
            let found = subject_alt_names(end_entity.as_ref())
                .ok_or(rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))?;
            if !found.iter().any(|n| self.sans.contains(n)) {
                return Err(rustls::Error::General(format!(
                    "the client certificate has none of client_allowed_sans (it has {found:?})"
                )));
            }
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// One DER element: (tag, contents, what follows it). Single-byte tags, definite lengths.
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |a, b| a << 8 | *b as usize), &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The elements of a DER sequence's contents.
fn elements(mut b: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (tag, body, rest) = der(b)?;
        b = rest;
        Some((tag, body))
    })
}

/// The subject alternative names of a DER certificate as Go prints them (DNS names, e-mail
/// addresses, IP addresses, URIs); None if it cannot be read.
pub fn subject_alt_names(cert: &[u8]) -> Option<Vec<String>> {
    const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];
    let (0x30, c, _) = der(cert)? else { return None };
    let (0x30, tbs, _) = der(c)? else { return None };
    let mut out = Vec::new();
    let Some((_, exts)) = elements(tbs).find(|(t, _)| *t == 0xa3) else { return Some(out) };
    let (0x30, exts, _) = der(exts)? else { return None };
    for (_, ext) in elements(exts) {
        let mut parts = elements(ext);
        let Some((0x06, oid)) = parts.next() else { return None };
        if oid != SAN_OID {
            continue;
        }
        let (_, value) = parts.find(|(t, _)| *t == 0x04)?;
        let (0x30, names, _) = der(value)? else { return None };
        for (tag, v) in elements(names) {
            match tag {
                0x81 | 0x82 | 0x86 => out.push(String::from_utf8_lossy(v).into_owned()),
                0x87 => match v.len() {
                    4 => out.push(std::net::Ipv4Addr::new(v[0], v[1], v[2], v[3]).to_string()),
                    16 => {
                        let mut a = [0u8; 16];
                        a.copy_from_slice(v);
                        out.push(std::net::Ipv6Addr::from(a).to_string());
                    }
                    _ => return None,
                },
                _ => {}
            }
        }
    }
    Some(out)
}
