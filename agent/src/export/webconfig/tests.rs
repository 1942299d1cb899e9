//! The web config: every key of the exporter-toolkit schema is accepted and honoured (checked by
//! its effect, most of them in an in-memory TLS handshake) or noted as not honoured; bad values
//! are errors that name the file and quote little of the input.
use std::sync::Arc;

use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, ClientConnection, ServerConnection};

use super::*;

fn parse(s: &str) -> Result<WebConfig, WebConfigError> {
    WebConfig::parse(s, Path::new("/etc/tcpvigil/web.yml"))
}

fn basic(user: &str, pass: &str) -> Vec<u8> {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))).into_bytes()
}

/// The self-signed localhost certificate kept for tests (see testdata/README).
pub(crate) fn tls_fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/export/testdata")
}

/// A TLS config with the test certificate and `extra` lines under tls_server_config.
fn tls(extra: &str) -> Result<WebConfig, WebConfigError> {
    let d = tls_fixture_dir();
    WebConfig::parse(
        &format!("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n{extra}"),
        &d.join("web.yml"),
    )
}

fn pem_block(file: &str) -> String {
    let text = std::fs::read_to_string(tls_fixture_dir().join(file)).unwrap();
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// A client: TLS versions, only these TLS 1.2 suites (None: all), and a certificate of its own:
/// the server's (`cert`), one no CA of the tests signed (`client-cert`), or none.
fn client(
    versions: &[&'static rustls::SupportedProtocolVersion],
    suite: Option<&str>,
    own: Option<&str>,
) -> ClientConfig {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(name) = suite {
        provider.cipher_suites.retain(|s| s.tls13().is_some() || format!("{:?}", s.suite()) == name);
    }
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(tls_fixture_dir().join("cert.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let b = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    match own {
        Some(name) => {
            let d = tls_fixture_dir();
            let certs: Vec<_> =
                CertificateDer::pem_file_iter(d.join(format!("{name}.pem"))).unwrap().map(|c| c.unwrap()).collect();
            let key = PrivateKeyDer::from_pem_file(d.join(format!("{}.pem", name.replace("cert", "key")))).unwrap();
            b.with_client_auth_cert(certs, key).unwrap()
        }
        None => b.with_no_client_auth(),
    }
}

const BOTH: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];
const V12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
const V13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// A whole handshake between the two configs in memory; Err says which side refused and why.
fn handshake(server: &WebConfig, client: ClientConfig) -> Result<(), String> {
    let sc = server.tls.clone().expect("a TLS config");
    let mut c = ClientConnection::new(Arc::new(client), "localhost".try_into().unwrap()).unwrap();
    let mut s = ServerConnection::new(sc).unwrap();
    for _ in 0..20 {
        let mut buf = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut buf).unwrap();
        }
        let mut r = &buf[..];
        while !r.is_empty() {
            s.read_tls(&mut r).unwrap();
        }
        s.process_new_packets().map_err(|e| format!("server: {e}"))?;
        let mut buf = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut buf).unwrap();
        }
        let mut r = &buf[..];
        while !r.is_empty() {
            c.read_tls(&mut r).unwrap();
        }
        c.process_new_packets().map_err(|e| format!("client: {e}"))?;
        if !c.is_handshaking() && !s.is_handshaking() && !c.wants_write() {
            return Ok(());
        }
    }
    Err("the handshake did not finish".into())
}

#[test]
fn empty_file_means_no_tls_no_auth() {
    let c = parse("").unwrap();
    assert!(c.tls.is_none() && c.rate_limit.is_none() && c.notes.is_empty());
    assert!(!c.auth_required());
    assert!(c.authorized(None));
}

#[test]
fn a_file_with_every_documented_key_loads() {
    let hash = bcrypt::hash("pw", 4).unwrap();
    let text = format!(
        "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: cert.pem\n  client_allowed_sans: [localhost]\n  min_version: TLS12\n  max_version: TLS13\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n  prefer_server_cipher_suites: true\n  curve_preferences: [X25519, CurveP256]\nhttp_server_config:\n  http2: false\n  headers:\n    X-Content-Type-Options: nosniff\nbasic_auth_users:\n  prom: '{hash}'\nrate_limit:\n  interval: 100ms\n  burst: 10\n"
    );
    let c = WebConfig::parse(&text, &tls_fixture_dir().join("web.yml")).unwrap();
    assert!(c.tls.is_some() && c.auth_required() && c.rate_limit.is_some(), "{c:?}");
    assert!(c.notes.is_empty(), "{:?}", c.notes);
    let inline = format!(
        "tls_server_config:\n  cert: |\n{}  key: |\n{}  client_ca: |\n{}  client_auth_type: RequireAnyClientCert\n",
        pem_block("cert.pem"),
        pem_block("key.pem"),
        pem_block("cert.pem")
    );
    // Inline PEM: no file needed at all.
    let c = WebConfig::parse(&inline, Path::new("/nonexistent/web.yml")).unwrap();
    assert!(handshake(&c, client(BOTH, None, Some("cert"))).is_ok());
}

#[test]
fn cert_key_and_their_files_are_honoured_and_exclusive() {
    assert!(handshake(&tls("").unwrap(), client(BOTH, None, None)).is_ok());
    let both = format!("  cert: |\n{}", pem_block("cert.pem"));
    let e = tls(&both).unwrap_err().to_string();
    assert!(e.contains("give cert or cert_file, not both"), "{e}");
    for (text, want) in [
        ("tls_server_config:\n  key_file: key.pem\n", "missing one of cert or cert_file"),
        ("tls_server_config:\n  cert_file: cert.pem\n", "missing one of key or key_file"),
        ("tls_server_config:\n  cert_file: nope.crt\n  key_file: key.pem\n", "cert_file"),
    ] {
        let e = WebConfig::parse(text, &tls_fixture_dir().join("web.yml")).unwrap_err().to_string();
        assert!(e.contains(want), "{text}: {e}");
    }
}

#[test]
fn every_client_auth_type_is_honoured() {
    let ca = "  client_ca_file: cert.pem\n";
    // (type, needs a CA, who gets in: no certificate, one the CA signed, one it did not)
    let cases = [
        ("NoClientCert", false, [true, true, true]),
        ("RequestClientCert", false, [true, true, true]),
        ("RequireAnyClientCert", false, [false, true, true]),
        ("RequireClientCert", false, [false, true, true]),
        ("VerifyClientCertIfGiven", true, [true, true, false]),
        ("RequireAndVerifyClientCert", true, [false, true, false]),
    ];
    for (kind, needs_ca, want) in cases {
        let extra = format!("  client_auth_type: {kind}\n{}", if needs_ca { ca } else { "" });
        let c = tls(&extra).unwrap_or_else(|e| panic!("{kind}: {e}"));
        for (own, want) in [None, Some("cert"), Some("client-cert")].into_iter().zip(want) {
            let got = handshake(&c, client(BOTH, None, own));
            assert_eq!(got.is_ok(), want, "{kind} with certificate {own:?}: {got:?}");
        }
        if needs_ca {
            let e = tls(&format!("  client_auth_type: {kind}\n")).unwrap_err().to_string();
            assert!(e.contains("needs client_ca_file"), "{e}");
        }
    }
    let e = tls(&format!("  client_auth_type: NoClientCert\n{ca}")).unwrap_err().to_string();
    assert!(e.contains("client_auth_type is NoClientCert"), "{e}");
    let e = tls("  client_auth_type: Whatever\n").unwrap_err().to_string();
    assert!(e.contains("client_auth_type \"Whatever\""), "{e}");
}

#[test]
fn client_allowed_sans_let_in_only_a_certificate_carrying_one() {
    let ok =
        tls("  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: [other.example, localhost]\n").unwrap();
    assert!(handshake(&ok, client(BOTH, None, Some("cert"))).is_ok());
    let ip = tls("  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: ['127.0.0.1']\n").unwrap();
    assert!(handshake(&ip, client(BOTH, None, Some("cert"))).is_ok());
    let no = tls("  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: [other.example]\n").unwrap();
    let e = handshake(&no, client(BOTH, None, Some("cert"))).unwrap_err();
    assert!(e.contains("client_allowed_sans"), "{e}");
    assert!(handshake(&no, client(BOTH, None, Some("client-cert"))).is_err());
    let other = tls("  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: [client.example]\n").unwrap();
    assert!(handshake(&other, client(BOTH, None, Some("client-cert"))).is_ok());
    assert!(handshake(&other, client(BOTH, None, Some("cert"))).is_err());
    let e =
        tls("  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: cert.pem\n  client_allowed_sans: [x]\n")
            .unwrap_err()
            .to_string();
    assert!(e.contains("client_allowed_sans needs"), "{e}");
    let der: Vec<_> =
        CertificateDer::pem_file_iter(tls_fixture_dir().join("cert.pem")).unwrap().map(|c| c.unwrap()).collect();
    assert_eq!(
        super::super::tls::subject_alt_names(der[0].as_ref()),
        Some(vec!["localhost".into(), "127.0.0.1".into()])
    );
    assert_eq!(super::super::tls::subject_alt_names(&der[0].as_ref()[..100]), None);
}

#[test]
fn min_and_max_version_are_honoured_and_tls10_is_noted() {
    let c = tls("  min_version: TLS13\n").unwrap();
    assert!(handshake(&c, client(V12, None, None)).is_err());
    assert!(handshake(&c, client(V13, None, None)).is_ok());
    let c = tls("  max_version: TLS12\n").unwrap();
    assert!(handshake(&c, client(V13, None, None)).is_err());
    assert!(handshake(&c, client(V12, None, None)).is_ok());
    let c = tls("  min_version: TLS10\n").unwrap();
    assert!(c.notes.iter().any(|n| n.contains("TLS 1.0 and 1.1 are not offered")), "{:?}", c.notes);
    assert!(handshake(&c, client(V12, None, None)).is_ok());
    for (extra, want) in [
        ("  max_version: TLS11\n", "TLS 1.2 and 1.3 only"),
        ("  min_version: TLS13\n  max_version: TLS12\n", "above max_version"),
        ("  min_version: SSL3\n", "unknown TLS version"),
    ] {
        let e = tls(extra).unwrap_err().to_string();
        assert!(e.contains(want), "{extra}: {e}");
    }
}

#[test]
fn cipher_suites_and_prefer_server_cipher_suites_are_honoured() {
    let c = tls("  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n").unwrap();
    assert!(handshake(&c, client(V12, Some("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"), None)).is_ok());
    assert!(handshake(&c, client(V12, Some("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"), None)).is_err());
    assert!(handshake(&c, client(V13, None, None)).is_ok(), "TLS 1.3 suites are not configurable");
    assert!(c.tls.as_ref().unwrap().ignore_client_order, "prefer_server_cipher_suites defaults to true");
    let c = tls("  prefer_server_cipher_suites: false\n").unwrap();
    assert!(!c.tls.as_ref().unwrap().ignore_client_order);
    // Go names rustls has no suite for: accepted and noted; TLS 1.2 off when none is left.
    let c = tls("  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, TLS_AES_128_GCM_SHA256]\n").unwrap();
    assert_eq!(c.notes.len(), 3, "{:?}", c.notes);
    assert!(handshake(&c, client(V12, None, None)).is_err());
    assert!(handshake(&c, client(V13, None, None)).is_ok());
    let e = tls("  cipher_suites: [TLS_MADE_UP]\n").unwrap_err().to_string();
    assert!(e.contains("unknown cipher suite \"TLS_MADE_UP\""), "{e}");
}

#[test]
fn curve_preferences_are_honoured_in_order_and_p521_is_noted() {
    let c = tls("  curve_preferences: [CurveP384, X25519, CurveP521]\n").unwrap();
    let groups: Vec<String> =
        c.tls.as_ref().unwrap().crypto_provider().kx_groups.iter().map(|g| format!("{:?}", g.name())).collect();
    assert_eq!(groups, ["secp384r1", "X25519"]);
    assert!(c.notes.iter().any(|n| n.contains("CurveP521")), "{:?}", c.notes);
    assert!(handshake(&c, client(BOTH, None, None)).is_ok());
    let e = tls("  curve_preferences: [CurveP521]\n").unwrap_err().to_string();
    assert!(e.contains("none of the listed curves"), "{e}");
    let e = tls("  curve_preferences: [P256]\n").unwrap_err().to_string();
    assert!(e.contains("unknown curve"), "{e}");
}

#[test]
fn http2_is_noted_and_headers_are_kept() {
    let c = parse("http_server_config:\n  http2: true\n").unwrap();
    assert!(c.notes.iter().any(|n| n.contains("HTTP/2 is not offered")), "{:?}", c.notes);
    assert!(parse("http_server_config:\n  http2: false\n").unwrap().notes.is_empty());
    let c = parse(
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    Content-Security-Policy: default-src 'self'\n",
    )
    .unwrap();
    assert_eq!(c.headers.len(), 2);
    let e = parse("http_server_config:\n  headers:\n    'Bad Header': x\n").unwrap_err().to_string();
    assert!(e.contains("bad header"), "{e}");
}

#[test]
fn rate_limit_is_a_token_bucket() {
    let c = parse("rate_limit:\n  interval: 1h\n  burst: 2\n").unwrap();
    let r = c.rate_limit.unwrap();
    assert!(r.allow() && r.allow() && !r.allow());
    let fast = parse("rate_limit:\n  interval: 20000000\n  burst: 1\n").unwrap().rate_limit.unwrap();
    assert!(fast.allow() && !fast.allow());
    std::thread::sleep(Duration::from_millis(30));
    assert!(fast.allow(), "a token comes back after the interval");
    assert!(parse("rate_limit:\n  interval: 0\n  burst: 5\n").unwrap().rate_limit.is_none());
    assert!(parse("rate_limit:\n  interval: 0s\n").unwrap().rate_limit.is_none());
    let c = parse("rate_limit:\n  interval: 1s\n").unwrap();
    assert!(c.notes.iter().any(|n| n.contains("burst 0")), "{:?}", c.notes);
    let e = parse("rate_limit:\n  interval: soon\n").unwrap_err().to_string();
    assert!(e.contains("rate_limit.interval"), "{e}");
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
        ("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n", "cert_file /etc/tcpvigil/nope.crt"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suite: [x]\n", "unknown field `cipher_suite`"),
        ("http_server_config:\n  headers:\n    'Bad Header': x\n", "bad header"),
    ];
    for (text, want) in cases {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains("/etc/tcpvigil/web.yml"), "{e}");
        assert!(e.contains(want), "{text:?}: {e}");
    }
    // A megabyte of a bad value or key comes back as a few hundred bytes.
    let long = "a".repeat(1 << 20);
    for text in [format!("basic_auth_users:\n  {long}: x\n"), format!("tls_server_config:\n  min_version: [{long}]\n")]
    {
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.len() < 1000, "{} bytes of error", e.len());
    }
}
