//! The lab's own TCP sender/receiver pair; the receiver can stop reading for a window so the sender meets a zero window.
use crate::clock::Stamp;
use crate::error::{LabError, Result};
use crate::lab::Lab;
use crate::netns;
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A window during which the receiver does not read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pause {
    /// Seconds after the connection is accepted.
    pub at_s: f64,
    /// How long reading stops.
    pub for_s: f64,
}

/// The plain pair's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlainSpec {
    pub sender: usize,
    pub receiver: usize,
    /// How long the sender writes.
    pub duration_s: f64,
    pub pause: Option<Pause>,
    /// SO_RCVBUF for the receiver (also fixes its window; None = autotuning).
    pub rcvbuf: Option<u32>,
    pub port: u16,
}

/// What the pair did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PlainResult {
    pub started: Option<Stamp>,
    pub ended: Option<Stamp>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// When the receiver really stopped and resumed reading.
    pub pause_start: Option<Stamp>,
    pub pause_end: Option<Stamp>,
    pub goodput_mbit: f64,
}

fn set_rcvbuf(l: &TcpListener, bytes: u32) -> Result<()> {
    let v = bytes as libc::c_int;
    // SAFETY: v outlives the call; the length matches its type.
    let rc = unsafe {
        libc::setsockopt(
            l.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &v as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    if rc < 0 {
        return Err(LabError::io("setsockopt SO_RCVBUF", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn receive(
    listener: TcpListener,
    spec: PlainSpec,
    stop: Arc<AtomicBool>,
) -> Result<(u64, Option<Stamp>, Option<Stamp>)> {
    listener.set_nonblocking(true).map_err(|e| LabError::io("listener nonblocking", e))?;
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut conn = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) || Instant::now() > give_up {
                    return Err(LabError::Interrupted);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(LabError::io("accept", e)),
        }
    };
    conn.set_nonblocking(false).map_err(|e| LabError::io("conn blocking", e))?;
    conn.set_read_timeout(Some(Duration::from_millis(200))).map_err(|e| LabError::io("read timeout", e))?;
    let accepted = Instant::now();
    let hard_end = accepted + Duration::from_secs_f64(spec.duration_s + 30.0);
    let mut buf = vec![0u8; 1 << 16];
    let (mut total, mut p_start, mut p_end) = (0u64, None, None);
    loop {
        if let Some(p) = spec.pause {
            let at = accepted + Duration::from_secs_f64(p.at_s);
            if p_start.is_none() && Instant::now() >= at {
                p_start = Some(Stamp::now());
                let until = at + Duration::from_secs_f64(p.for_s);
                while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
                }
                p_end = Some(Stamp::now());
            }
        }
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => return Err(LabError::io("receiver read", e)),
        }
        if stop.load(Ordering::Relaxed) || Instant::now() > hard_end {
            break;
        }
    }
    Ok((total, p_start, p_end))
}

fn send(addr: SocketAddr, duration_s: f64, stop: Arc<AtomicBool>) -> Result<(u64, Stamp, Stamp)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| LabError::io(format!("connect {addr}"), e))?;
    s.set_write_timeout(Some(Duration::from_millis(200))).map_err(|e| LabError::io("write timeout", e))?;
    let started = Stamp::now();
    let end = Instant::now() + Duration::from_secs_f64(duration_s);
    let buf = vec![0x5au8; 1 << 16];
    let mut sent = 0u64;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        match s.write(&buf) {
            Ok(n) => sent += n as u64,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => return Err(LabError::io("sender write", e)),
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    // Wait for the receiver to drain and close (read returns 0), bounded.
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut sink = [0u8; 16];
    let _ = s.read(&mut sink);
    Ok((sent, started, Stamp::now()))
}

/// Runs the pair in the lab (receiver listens on `spec.port`), blocking until both ends finish.
pub fn run_plain(lab: &Lab, spec: &PlainSpec, stop: Arc<AtomicBool>) -> Result<PlainResult> {
    let (s, r) = lab.pair(spec.sender, spec.receiver)?;
    let addr = SocketAddr::from((lab.addr(r), spec.port));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
    let (spec_r, stop_r) = (spec.clone(), stop.clone());
    let rx = netns::spawn_in(&r.netns, "plain-rx", move || {
        let l = match TcpListener::bind(addr).map_err(|e| LabError::io(format!("bind {addr}"), e)).and_then(|l| {
            if let Some(b) = spec_r.rcvbuf {
                set_rcvbuf(&l, b)?;
            }
            Ok(l)
        }) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready_tx.send(Err(LabError::Invalid(e.to_string())));
                return Err(e);
            }
        };
        let _ = ready_tx.send(Ok(()));
        receive(l, spec_r, stop_r)
    })?;
    ready_rx.recv().map_err(|_| LabError::Missing("plain receiver thread died".into()))??;
    let d = spec.duration_s;
    let tx = netns::spawn_in(&s.netns, "plain-tx", move || send(addr, d, stop))?;
    let sent = tx.join().map_err(|_| LabError::Missing("plain sender panicked".into()))??;
    let got = rx.join().map_err(|_| LabError::Missing("plain receiver panicked".into()))??;
    let secs = sent.2.secs_since(&sent.1).max(1e-9);
    Ok(PlainResult {
        started: Some(sent.1),
        ended: Some(sent.2),
        bytes_sent: sent.0,
        bytes_received: got.0,
        pause_start: got.1,
        pause_end: got.2,
        goodput_mbit: got.0 as f64 * 8.0 / secs / 1e6,
    })
}
