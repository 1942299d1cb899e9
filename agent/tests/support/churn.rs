//! Many short TCP connections between the two namespaces of a `Pair`, driven by threads that
//! setns() into them (no process per connection): each one connects, sends, stays open a little, closes.
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Pair;

/// Move the calling thread into network namespace `ns` (an `ip netns` name).
fn enter_netns(ns: &str) -> std::io::Result<()> {
    tcpvigil_lab::netns::enter(ns).map_err(std::io::Error::other)
}

#[derive(Debug, Clone, Copy, Default)]
pub struct ChurnStats {
    pub opened: usize,
    pub failed: usize,
    /// Most connections open at once on the client side.
    pub max_open: usize,
}

/// What the churn does.
#[derive(Debug, Clone, Copy)]
pub struct Churn {
    pub port: u16,
    /// Connections in all.
    pub total: usize,
    /// Spread evenly over this long.
    pub over: Duration,
    /// Each stays open this long after its data was written.
    pub hold: Duration,
    /// Bytes each one sends.
    pub bytes: usize,
}

/// A server in `pair.rcv` that reads every connection to its end; stopped when the flag is set.
fn serve(rcv: String, addr: SocketAddr, stop: Arc<AtomicBool>) -> std::io::Result<std::thread::JoinHandle<()>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let l = match enter_netns(&rcv).and_then(|()| TcpListener::bind(addr)) {
            Ok(l) => l,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let _ = l.set_nonblocking(true);
        let _ = tx.send(Ok(()));
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut s, _)) => {
                    let _ = s.set_nonblocking(false);
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    });
    rx.recv().map_err(std::io::Error::other)??;
    Ok(h)
}

/// Run the churn from `pair.snd` to a server in `pair.rcv`; returns when every connection is closed.
pub fn run(pair: &Pair, c: Churn) -> std::io::Result<ChurnStats> {
    let addr: SocketAddr = format!("{}:{}", pair.rcv_ip, c.port).parse().map_err(std::io::Error::other)?;
    let stop = Arc::new(AtomicBool::new(false));
    let server = serve(pair.rcv.clone(), addr, stop.clone())?;
    let (next, failed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let (now_open, max_open) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let workers = 2;
    let start = Instant::now();
    let gap = c.over.div_f64(c.total.max(1) as f64);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let (snd, next, failed, now_open, max_open) = (pair.snd.clone(), &next, &failed, &now_open, &max_open);
            scope.spawn(move || {
                if enter_netns(&snd).is_err() {
                    failed.fetch_add(c.total, Ordering::Relaxed);
                    return;
                }
                let data = vec![0x5au8; c.bytes];
                let mut open: VecDeque<(Instant, TcpStream)> = VecDeque::new();
                loop {
                    while open.front().is_some_and(|(t, _)| *t <= Instant::now()) {
                        open.pop_front();
                        now_open.fetch_sub(1, Ordering::Relaxed);
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= c.total {
                        break;
                    }
                    let due = start + gap.mul_f64(i as f64);
                    if let Some(d) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(d);
                    }
                    match TcpStream::connect_timeout(&addr, Duration::from_secs(3)).and_then(|mut s| {
                        s.write_all(&data)?;
                        Ok(s)
                    }) {
                        Ok(s) => {
                            open.push_back((Instant::now() + c.hold, s));
                            let n = now_open.fetch_add(1, Ordering::Relaxed) + 1;
                            max_open.fetch_max(n, Ordering::Relaxed);
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                while let Some((t, s)) = open.pop_front() {
                    if let Some(d) = t.checked_duration_since(Instant::now()) {
                        std::thread::sleep(d);
                    }
                    drop(s);
                    now_open.fetch_sub(1, Ordering::Relaxed);
                }
            });
        }
    });
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    let failed = failed.load(Ordering::Relaxed).min(c.total);
    Ok(ChurnStats { opened: c.total - failed, failed, max_open: max_open.load(Ordering::Relaxed) })
}
