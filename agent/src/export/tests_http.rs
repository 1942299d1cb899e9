//! Tests of the HTTP(S) server as a client sees it, and a synthetic agent for a real Prometheus.
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use base64::Engine;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::config::{ExportConfig, TransferRule};
use super::http::HttpServer;
use super::metrics::Metrics;
use super::tests::{conn, ev, finding, health, snap};
use super::webconfig::WebConfig;
use crate::model::{Body, Cause, ConnTable, Finding, LimitReason, Retrans, Rto, StopCause};

async fn get(addr: SocketAddr, path: &str, auth: Option<(&str, &str)>) -> (u16, String) {
    get_with(addr, path, auth, "").await
}

async fn get_with(addr: SocketAddr, path: &str, auth: Option<(&str, &str)>, extra: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = auth
        .map(|(u, p)| {
            format!("Authorization: Basic {}\r\n", base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}")))
        })
        .unwrap_or_default();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}{extra}Connection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, out)
}

async fn start(web: Option<WebConfig>, ready: bool) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    m.refresh(&ConnTable::new(false), &health());
    let ready = Arc::new(AtomicBool::new(ready));
    let srv = HttpServer::bind("127.0.0.1:0".parse().unwrap(), web, Arc::new(r), ready).await.unwrap();
    let addr = srv.local_addr();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(srv.run(async {
        let _ = rx.await;
    }));
    (addr, tx)
}

#[tokio::test]
async fn metrics_and_healthz_are_served_side_by_side() {
    let (addr, stop) = start(None, true).await;
    let accept = "Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n";
    let (code, body) = get_with(addr, "/metrics", None, accept).await;
    assert_eq!(code, 200);
    assert!(body.contains("application/openmetrics-text; version=1.0.0"), "{body}");
    assert!(body.contains("tcpvigil_build_info"));
    assert!(body.trim_end().ends_with("# EOF"));
    assert!(body.contains("# TYPE tcpvigil_stops counter\n"));
    // Without asking for OpenMetrics: the classic text format.
    let (code, body) = get(addr, "/metrics", None).await;
    assert_eq!(code, 200);
    assert!(body.contains("text/plain; version=0.0.4"), "{body}");
    assert!(body.contains("# TYPE tcpvigil_stops_total counter\n"), "{body}");
    assert!(!body.contains("# EOF"));
    assert_eq!(get(addr, "/healthz", None).await.0, 200);
    assert_eq!(get(addr, "/nope", None).await.0, 404);
    stop.send(()).unwrap();
}

#[tokio::test]
async fn reload_switches_auth_on_and_keeps_the_old_config_on_a_bad_file() {
    let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
    m.refresh(&ConnTable::new(false), &health());
    let srv = HttpServer::bind("127.0.0.1:0".parse().unwrap(), None, Arc::new(r), Arc::new(AtomicBool::new(true)))
        .await
        .unwrap();
    let (addr, handle) = (srv.local_addr(), srv.handle());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(srv.run(async {
        let _ = rx.await;
    }));
    assert_eq!(get(addr, "/metrics", None).await.0, 200);
    let dir = std::env::temp_dir().join(format!("tcpvigil-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("web.yml");
    std::fs::write(&good, format!("basic_auth_users:\n  prom: '{}'\n", bcrypt::hash("pw", 4).unwrap())).unwrap();
    handle.reload(Some(&good)).unwrap();
    assert_eq!(get(addr, "/metrics", None).await.0, 401);
    let bad = dir.join("bad.yml");
    std::fs::write(&bad, "basic_auth_users:\n  prom: plaintext\n").unwrap();
    assert!(handle.reload(Some(&bad)).unwrap_err().to_string().contains("not a bcrypt hash"));
    assert_eq!(get(addr, "/metrics", None).await.0, 401);
    assert_eq!(get(addr, "/metrics", Some(("prom", "pw"))).await.0, 200);
    handle.reload(None).unwrap();
    assert_eq!(get(addr, "/metrics", None).await.0, 200);
    std::fs::remove_dir_all(&dir).unwrap();
    tx.send(()).unwrap();
}

#[tokio::test]
async fn healthz_is_503_until_ready() {
    let (addr, stop) = start(None, false).await;
    assert_eq!(get(addr, "/healthz", None).await.0, 503);
    stop.send(()).unwrap();
}

#[tokio::test]
async fn basic_auth_rejects_wrong_and_accepts_right_credentials() {
    let hash = bcrypt::hash("pw", 4).unwrap();
    let web = WebConfig::parse(&format!("basic_auth_users:\n  prom: '{hash}'\n"), Path::new("web.yml")).unwrap();
    let (addr, stop) = start(Some(web), true).await;
    let (code, body) = get(addr, "/metrics", None).await;
    assert_eq!(code, 401);
    assert!(body.contains("WWW-Authenticate") || body.contains("www-authenticate"), "{body}");
    assert_eq!(get(addr, "/metrics", Some(("prom", "bad"))).await.0, 401);
    assert_eq!(get(addr, "/metrics", Some(("mallory", "pw"))).await.0, 401);
    let (code, body) = get(addr, "/metrics", Some(("prom", "pw"))).await;
    assert_eq!(code, 200);
    assert!(body.contains("tcpvigil_build_info"));
    assert_eq!(get(addr, "/healthz", None).await.0, 200);
    stop.send(()).unwrap();
}

#[tokio::test]
async fn tls_from_web_config_serves_metrics() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/export/testdata");
    let web =
        WebConfig::parse("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n", &dir.join("web.yml"))
            .unwrap();
    let (addr, stop) = start(Some(web), true).await;

    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(dir.join("cert.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.unwrap();
    tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("tcpvigil_build_info"));
    // Plain HTTP to the TLS port gets nothing useful.
    assert_ne!(get(addr, "/metrics", None).await.0, 200);
    stop.send(()).unwrap();
}

/// With TCPVIGIL_SERVE_ADDR=127.0.0.1:PORT, serve a changing synthetic metric set there for
/// TCPVIGIL_SERVE_SECS seconds (default 60): scripts/ci-export.sh points a real Prometheus at
/// it and checks that every rule and dashboard expression returns data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_synthetic_metrics_for_prometheus() {
    let Ok(addr) = std::env::var("TCPVIGIL_SERVE_ADDR") else { return };
    let addr: SocketAddr = addr.parse().unwrap();
    assert!(addr.ip().is_loopback(), "test servers bind loopback only");
    let secs: u64 = std::env::var("TCPVIGIL_SERVE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let cfg = ExportConfig {
        transfers: vec![TransferRule { name: "t1".into(), filter: ":5201".into() }],
        ..ExportConfig::default()
    };
    let (mut m, r) = Metrics::new_registered(&cfg);
    let mut t = ConnTable::new(false);
    let srv = super::http::HttpServer::bind(addr, None, Arc::new(r), Arc::new(AtomicBool::new(true))).await.unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(srv.run(async {
        let _ = stop_rx.await;
    }));
    let mut h = health();
    h.maps.push(super::health::MapUsage { name: "tv_rtx".into(), entries: 10, max_entries: 65536 });
    for k in 0..secs {
        let ts = (k + 1) * 1_000_000_000;
        // Eight streams of one transfer at 1..8 MB/s: unfair on purpose.
        for i in 0..8u32 {
            let e = ev(ts, conn(i), Body::Snapshot(snap((2 << 20) + k * (i as u64 + 1) * 1_000_000)));
            t.apply(&e);
            m.on_event(&e);
        }
        let rtx = Retrans {
            seq: 1,
            end_seq: 2,
            segs: 2,
            sacked: 0x94,
            ca_state: 4,
            count: 2,
            since_prev_ns: 0,
            lost_retrans: true,
            failed: false,
            cwnd: 1,
            ssthresh: 2,
            packets_out: 3,
            lost_out: 0,
            sacked_out: 0,
            retrans_out: 1,
            snd_una: 1,
            mtu_probing: None,
        };
        m.on_event(&ev(ts, conn(0), Body::Retrans(rtx)));
        m.on_event(&ev(
            ts,
            conn(0),
            Body::Rto(Rto {
                retransmits: 1,
                rto_us: 200_000,
                backoff: 1,
                cwnd: 1,
                packets_out: 1,
                ..Default::default()
            }),
        ));
        if k == 1 {
            // A network stop towards a remote prefix: the per-prefix gauge the path-event rules read.
            m.on_finding(&Finding {
                owner: Some(crate::model::StopOwner::Network),
                path: crate::model::PathTag { remote_prefix: Some("10.1.0.0/24".into()), event: None },
                ..finding(0, StopCause::CwndCollapse, true, None)
            });
            m.on_finding(&finding(1, LimitReason::RwndLimited, true, None));
            m.on_finding(&Finding {
                group: Some("iperf3->10.1.0.1".into()),
                owner: None,
                evidence: json!({"jain": 0.66, "min_max_ratio": 0.125, "even_split_efficiency": 0.22, "streams": 8}),
                ..finding(0, Cause::UnfairStreams, true, None)
            });
        }
        if k % 5 == 2 {
            m.on_finding(&Finding { start_ns: ts, ..finding(2, StopCause::Rto, true, None) });
            m.on_finding(&Finding { start_ns: ts, ..finding(2, StopCause::Rto, false, Some(1.5)) });
        }
        h.kernel.ring_full += 3;
        h.kernel.rtx_map_full += 1;
        h.kernel.samples += 1000;
        h.programs[0].run_time_ns += 5_000_000;
        h.programs[0].run_cnt += 1000;
        m.refresh(&t, &h);
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    stop_tx.send(()).unwrap();
    server.await.unwrap().unwrap();
}
