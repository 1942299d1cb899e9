//! What each connection of the HTTP server is held to: a deadline per phase, a write deadline
//! on the stream itself, and its peer's share of the connection slots.
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{MAX_CONNS, RESERVED_FDS};

/// The deadline of each phase of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// Time a client gets to send the first byte, and then again to finish its request head
    /// (and, hyper restarting it for each request, the time a keep-alive connection may idle).
    pub head: Duration,
    /// Time a client gets to finish the TLS handshake.
    pub handshake: Duration,
    /// Time a response may take to be written once the socket stops taking it (a client that
    /// does not read its replies).
    pub write: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines { head: Duration::from_secs(5), handshake: Duration::from_secs(5), write: Duration::from_secs(10) }
    }
}
/// How many connections the open-file limit leaves room for, at most `MAX_CONNS`.
pub fn slots() -> usize {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit with a pointer to a live, writable rlimit.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } == 0 { l.rlim_cur } else { 1024 };
    (soft.saturating_sub(RESERVED_FDS) as usize).clamp(16, MAX_CONNS)
}

/// The peer a connection counts against: loopback is one (any local user may pick any
/// 127.x address), an IPv6 address counts by its /64, an IPv4 one by itself.
pub(super) fn peer_key(ip: IpAddr) -> IpAddr {
    let ip = ip.to_canonical();
    if ip.is_loopback() {
        return IpAddr::V4(Ipv4Addr::LOCALHOST);
    }
    match ip {
        IpAddr::V6(a) => {
            let s = a.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// Connections held per peer.
pub(super) struct Peers {
    pub(super) held: Mutex<HashMap<IpAddr, usize>>,
    pub(super) cap: usize,
}

/// A connection's place in its peer's count, given back when it ends.
pub(super) struct PeerSlot {
    peers: Arc<Peers>,
    key: IpAddr,
}

impl Peers {
    pub(super) fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let key = peer_key(ip);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(key).or_default();
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(PeerSlot { peers: self.clone(), key })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self.peers.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// A stream whose writes must make it out within `limit` once they have to wait: the
/// clock starts when a write finds the socket full and stops when a flush completes (the whole
/// response handed to the kernel). A client that does not read its replies is cut off.
pub(super) struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub(super) fn new(inner: S, limit: Duration) -> Self {
        WriteDeadline { inner, limit, timer: None }
    }

    /// A write is waiting: start the clock if it is not running; Err once it has run out.
    fn waiting(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        let limit = self.limit;
        let t = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match t.as_mut().poll(cx) {
            Poll::Ready(()) => {
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client did not read its response"))
            }
            Poll::Pending => Ok(()),
        }
    }

    fn after<T>(&mut self, cx: &mut Context<'_>, r: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        match r {
            Poll::Pending => match self.waiting(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            ready => ready,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.after(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.after(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = r {
            self.timer = None;
        }
        self.after(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.after(cx, r)
    }
}
