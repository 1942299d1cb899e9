//! Each phase of a connection has its deadline (short ones here): a silent client, a half
//! request head, an idle keep-alive connection and a client that never reads its replies are all
//! cut off in time, while a scrape answers; bodies close the connection; peers are counted by
//! address (loopback as one); the web config's rate limit answers 429.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::AtomicBool;

use super::limits::peer_key;
use super::*;
use crate::export::config::ExportConfig;
use crate::export::metrics::Metrics;
use crate::model::ConnTable;

const D: Deadlines = Deadlines {
    head: Duration::from_millis(400),
    handshake: Duration::from_millis(400),
    write: Duration::from_millis(800),
};

/// A server with the short deadlines on its own runtime thread; its address.
fn serve(web: Option<WebConfig>) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let (mut m, r) = Metrics::new_registered(&ExportConfig::default());
            m.refresh(&ConnTable::new(false), &crate::export::tests::health());
            let srv =
                HttpServer::bind("127.0.0.1:0".parse().unwrap(), web, Arc::new(r), Arc::new(AtomicBool::new(true)))
                    .await
                    .unwrap()
                    .with_deadlines(D);
            tx.send(srv.local_addr()).unwrap();
            srv.run(std::future::pending()).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

/// Seconds until the server closes `s` (reading and discarding whatever it sends), at most 10.
fn closed_after(mut s: TcpStream) -> f64 {
    let t = std::time::Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 4096];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    t.elapsed().as_secs_f64()
}

fn scrape(addr: SocketAddr, extra: &str) -> (u16, String, f64) {
    let t = std::time::Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n").as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text, t.elapsed().as_secs_f64())
}

#[test]
fn a_silent_client_and_a_half_request_head_are_cut_off() {
    let addr = serve(None);
    let silent = closed_after(TcpStream::connect(addr).unwrap());
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    let half = closed_after(half);
    println!("silent client closed after {silent:.2} s, half a head after {half:.2} s");
    assert!((0.3..1.5).contains(&silent), "silent: {silent:.2} s");
    // The first byte within `head`, then the rest of the head within `head` again.
    assert!((0.3..2.0).contains(&half), "half a head: {half:.2} s");
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_its_response() {
    let addr = serve(None);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let secs = closed_after(s);
    assert!((0.3..2.0).contains(&secs), "idle keep-alive connection closed after {secs:.2} s");
}

#[test]
fn a_client_that_never_reads_is_cut_off_while_scrapes_answer() {
    let addr = serve(None);
    let mut s = TcpStream::connect(addr).unwrap();
    // A small receive window: the replies fill it at once.
    nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBuf, &4096).unwrap();
    s.set_write_timeout(Some(Duration::from_millis(50))).unwrap();
    let t = std::time::Instant::now();
    let req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    // Pipeline requests until the server stops taking them (it is stuck writing) or closes.
    let mut sent = 0;
    while t.elapsed() < Duration::from_secs(10) {
        match s.write(req) {
            Ok(_) => sent += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                let (code, _, secs) = scrape(addr, "");
                assert_eq!(code, 200);
                assert!(secs < 1.0, "a scrape took {secs:.2} s beside a client that does not read");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(_) => break,
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!("a client that never reads ({sent} requests pipelined) was cut off after {secs:.2} s");
    assert!(secs < 5.0, "the client that never reads was still connected after {secs:.2} s");
}

#[test]
fn a_request_with_a_body_closes_the_connection() {
    let addr = serve(None);
    let (code, text, _) = scrape(addr, "Content-Length: 1000000\r\n");
    assert_eq!(code, 200);
    assert!(text.to_ascii_lowercase().contains("connection: close"), "{text}");
}

#[test]
fn peers_count_by_address_loopback_as_one_and_ipv6_by_64() {
    assert_eq!(peer_key("127.0.0.9".parse().unwrap()), peer_key("::1".parse().unwrap()));
    assert_eq!(peer_key("::ffff:127.0.0.1".parse().unwrap()), peer_key("127.0.0.1".parse().unwrap()));
    assert_eq!(peer_key("2001:db8:1:2::5".parse().unwrap()), peer_key("2001:db8:1:2:ffff::1".parse().unwrap()));
    assert_ne!(peer_key("2001:db8:1:2::5".parse().unwrap()), peer_key("2001:db8:1:3::5".parse().unwrap()));
    assert_ne!(peer_key("192.0.2.1".parse().unwrap()), peer_key("192.0.2.2".parse().unwrap()));
    let peers = Arc::new(Peers { held: Mutex::new(HashMap::new()), cap: 2 });
    let a: IpAddr = "192.0.2.1".parse().unwrap();
    let (s1, s2) = (peers.enter(a).unwrap(), peers.enter(a).unwrap());
    assert!(peers.enter(a).is_none(), "a third connection of one peer");
    assert!(peers.enter("192.0.2.2".parse().unwrap()).is_some(), "another peer");
    drop(s1);
    assert!(peers.enter(a).is_some(), "a slot given back");
    drop(s2);
    assert!(slots() >= 16 && slots() <= MAX_CONNS);
}

#[test]
fn the_rate_limit_answers_429_but_not_to_healthz() {
    let web = WebConfig::parse("rate_limit:\n  interval: 1h\n  burst: 2\n", Path::new("w.yml")).unwrap();
    let addr = serve(Some(web));
    let codes: Vec<u16> = (0..3).map(|_| scrape(addr, "").0).collect();
    assert_eq!(codes, [200, 200, 429]);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}
