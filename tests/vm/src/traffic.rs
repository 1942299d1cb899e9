//! A bulk TCP transfer between two namespaces: a receiver that drains, a sender that writes
//! until told to stop. No iperf3: two threads, each setns'd into its namespace.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::sys::enter_netns;

pub struct Receiver {
    handle: JoinHandle<Result<u64>>,
}

/// Listen on `addr` inside `ns`; returns once the socket is bound.
pub fn receiver(ns: &str, addr: SocketAddr) -> Result<Receiver> {
    let ns = ns.to_string();
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || -> Result<u64> {
        let bound = enter_netns(&ns).and_then(|()| TcpListener::bind(addr).context("bind"));
        let l = match bound {
            Ok(l) => {
                let _ = tx.send(Ok(()));
                l
            }
            Err(e) => {
                let _ = tx.send(Err(format!("{e:#}")));
                return Err(e);
            }
        };
        let (mut s, _) = l.accept().context("accept")?;
        s.set_read_timeout(Some(Duration::from_secs(90)))?;
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            match s.read(&mut buf).context("receive")? {
                0 => break,
                n => total += n as u64,
            }
        }
        Ok(total) // dropping `s` closes: the sender's read sees EOF
    });
    rx.recv_timeout(Duration::from_secs(10)).map_err(|_| anyhow!("receiver did not bind"))?.map_err(|e| anyhow!(e))?;
    Ok(Receiver { handle })
}

impl Receiver {
    pub fn join(self) -> Result<u64> {
        self.handle.join().map_err(|_| anyhow!("receiver panicked"))?
    }
}

pub struct Sender {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<u64>>,
}

/// Connect from inside `ns`; returns once connected. Writes until `finish`.
pub fn sender(ns: &str, to: SocketAddr) -> Result<Sender> {
    let ns = ns.to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || -> Result<u64> {
        let conn =
            enter_netns(&ns).and_then(|()| TcpStream::connect_timeout(&to, Duration::from_secs(10)).context("connect"));
        let mut s = match conn {
            Ok(s) => {
                let _ = tx.send(Ok(()));
                s
            }
            Err(e) => {
                let _ = tx.send(Err(format!("{e:#}")));
                return Err(e);
            }
        };
        s.set_write_timeout(Some(Duration::from_millis(200)))?;
        let buf = vec![0x5au8; 1 << 16];
        let mut total = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            match s.write(&buf) {
                Ok(n) => total += n as u64,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(e) => return Err(e).context("send"),
            }
        }
        // Drain before the half-close: the socket leaves ESTABLISHED at shutdown, and the
        // tcp_probe fallback sees no ACK after that (FIN_WAIT1 ACKs skip tcp_rcv_established).
        drain(&s, Duration::from_secs(60))?;
        // Half-close, then wait for the receiver's close: everything sent was delivered.
        s.shutdown(std::net::Shutdown::Write)?;
        s.set_read_timeout(Some(Duration::from_secs(90)))?;
        let mut b = [0u8; 64];
        while s.read(&mut b).context("waiting for the receiver's close")? > 0 {}
        Ok(total)
    });
    rx.recv_timeout(Duration::from_secs(15)).map_err(|_| anyhow!("sender did not connect"))?.map_err(|e| anyhow!(e))?;
    Ok(Sender { stop, handle })
}

/// Wait until every byte written was acknowledged (TIOCOUTQ: unacked + unsent bytes).
fn drain(s: &TcpStream, limit: Duration) -> Result<()> {
    use std::os::fd::AsRawFd;
    let t0 = std::time::Instant::now();
    loop {
        let mut n: libc::c_int = 0;
        // SAFETY: TIOCOUTQ writes one int through the pointer, which outlives the call.
        if unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n) } < 0 {
            return Err(std::io::Error::last_os_error()).context("TIOCOUTQ");
        }
        if n == 0 {
            return Ok(());
        }
        if t0.elapsed() > limit {
            anyhow::bail!("{n} bytes still unacknowledged after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Sender {
    /// Stop writing; returns the thread so the caller can wait for delivery.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn join(self) -> Result<u64> {
        self.stop();
        self.handle.join().map_err(|_| anyhow!("sender panicked"))?
    }
}
