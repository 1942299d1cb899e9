//! The web endpoint under abuse: 500 idle half-open connections (slowloris) while a normal scrape
//! answers within 1 s, a 1 MB request head gets 431, basic auth refuses a wrong or missing password
//! with 401, and /healthz says nothing but "ok".
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use base64::Engine;
use support::daemon::Daemon;
use support::*;

/// One request on a fresh connection: (status, body, seconds taken).
fn request(addr: SocketAddr, path: &str, auth: Option<(&str, &str)>, extra: &str) -> (u16, String, f64) {
    let t = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let auth = auth
        .map(|(u, p)| {
            format!("Authorization: Basic {}\r\n", base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}")))
        })
        .unwrap_or_default();
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}{extra}\r\n");
    // A peer that answers early may reset the rest of a large head: the answer is what counts.
    let _ = s.write_all(head.as_bytes());
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body, t.elapsed().as_secs_f64())
}

#[test]
fn slowloris_big_headers_and_bad_passwords_are_refused_while_scrapes_answer() {
    if !require_root("slowloris_big_headers_and_bad_passwords_are_refused_while_scrapes_answer") {
        return;
    }
    let web = std::env::temp_dir().join(format!("tv-web-{}.yml", std::process::id()));
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    std::fs::write(&web, format!("basic_auth_users:\n  prom: '{hash}'\n")).expect("write web config");
    let d = Daemon::start("web", &format!("[export]\nweb_config = \"{}\"\n", web.display()));
    let addr = d.addr;
    let good = Some(("prom", "s3cret"));

    // Basic auth: missing and wrong passwords get 401, the right one 200.
    assert_eq!(request(addr, "/metrics", None, "").0, 401, "no password");
    assert_eq!(request(addr, "/metrics", Some(("prom", "wrong")), "").0, 401, "wrong password");
    assert_eq!(request(addr, "/metrics", Some(("mallory", "s3cret")), "").0, 401, "unknown user");
    let (code, body, _) = request(addr, "/metrics", good, "");
    assert!(code == 200 && body.contains("tcpvigil_build_info"), "right password: {code}");
    // /healthz is open to probes and leaks nothing: no version, kernel, hosts or metric names.
    let (code, body, _) = request(addr, "/healthz", None, "");
    assert_eq!((code, body.as_str()), (200, "ok\n"), "/healthz");

    // 500 connections that send half a request head and then nothing.
    let mut idle = Vec::new();
    for _ in 0..500 {
        let mut s = TcpStream::connect(addr).expect("slowloris connect");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ").expect("half a head");
        idle.push(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut worst: f64 = 0.0;
    for _ in 0..5 {
        let (code, _, secs) = request(addr, "/metrics", good, "");
        assert_eq!(code, 200, "scrape while 500 connections idle");
        worst = worst.max(secs);
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("scrape with 500 idle half-open connections: slowest of 5 {:.0} ms", worst * 1000.0);
    assert!(worst < 1.0, "a scrape took {worst:.2} s with 500 idle connections (limit 1 s)");

    // A 1 MB request head: 431, and the daemon serves on.
    let big = format!("X-Big: {}\r\n", "a".repeat(1 << 20));
    let (code, _, _) = request(addr, "/metrics", good, &big);
    println!("1 MB header: HTTP {code}");
    assert_eq!(code, 431, "1 MB request head");
    drop(idle);
    assert_eq!(request(addr, "/metrics", good, "").0, 200, "serving after the abuse");
    d.stop();
    let _ = std::fs::remove_file(&web);
}
