//! The HTTP(S) server: `/metrics` (OpenMetrics text) beside `/healthz`, on tokio with hyper 1,
//! optional TLS, basic auth and a rate limit from a web-config file. Loopback by default.
//!
//! No local client can blind the monitoring: every connection has a deadline for each phase
//! (the first byte and the request head, the TLS handshake, writing a response, the idle time
//! between keep-alive requests); a connection that has sent nothing costs a task and a socket,
//! no buffer, so slots are many (as the open-file limit allows); one peer may hold only a share
//! of them; /metrics is encoded at most once per `FRESH` however many ask; bcrypt is bounded
//! (export/auth.rs).
//!
//! ```ignore
//! let web = cfg.web_config.as_deref().map(WebConfig::load).transpose()?;   // exit 2 on error
//! let server = HttpServer::bind(cfg.listen, web, registry.clone(), ready.clone()).await?;
//! let handle = server.handle();                 // handle.reload(path) on SIGHUP
//! tokio::spawn(server.run(shutdown_signal));
//! ```
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{
    HeaderName, HeaderValue, AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER, TRANSFER_ENCODING,
    WWW_AUTHENTICATE,
};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

mod limits;
pub use limits::{slots, Deadlines};
use limits::{Peers, WriteDeadline};

use super::auth::Verdict;
use super::config::ListenAddr;
use super::webconfig::{WebConfig, WebConfigError};

/// The content type of `/metrics` for clients that ask for OpenMetrics (Prometheus does).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of `/metrics` for everyone else (curl, `promtool check metrics`).
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Connections served at once, at most (fewer when the open-file limit is lower, see `slots`);
/// more wait in the kernel's accept queue. The daemon raises its open-file limit to fit
/// (cmd/run.rs). 3,000 silent local connections held open beside a scraper: robust_web_flood.rs.
pub const MAX_CONNS: usize = 16_384;
/// Open files left for everything else the daemon does (BPF objects, events, dumps, /proc).
pub(crate) const RESERVED_FDS: u64 = 256;
/// One peer (an address; all of loopback is one peer, an IPv6 /64 is one) holds at most this
/// share of the slots, so that a flood from one place leaves room for Prometheus elsewhere.
const PEER_SHARE: usize = 4;
/// Request head size limit: larger heads get 431 (a scrape request is a few hundred bytes).
const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Time in-flight requests get to finish at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// One encoding of /metrics serves every request within this time (the daemon refreshes its
/// metrics every second; many clients at once cost one encoding).
const FRESH: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    // `err`, not `source`: the message already says it; as a source it was printed twice.
    #[error("cannot listen on {addr}: {err}")]
    Bind { addr: SocketAddr, err: std::io::Error },
    #[error("cannot listen on {listen}: looking it up: {err}")]
    Resolve { listen: String, err: std::io::Error },
    #[error("accepting connections on {addr}: {err}")]
    Accept { addr: SocketAddr, err: std::io::Error },
}

/// What a connection needs; swapped whole on reload.
struct Web {
    tls: Option<TlsAcceptor>,
    config: WebConfig,
}

struct Shared {
    registry: Arc<Registry>,
    ready: Arc<AtomicBool>,
    web: RwLock<Arc<Web>>,
    /// The last /metrics encoding: (when, OpenMetrics text, Prometheus text).
    encoded: tokio::sync::Mutex<Option<(Instant, Bytes, Bytes)>>,
}

impl Shared {
    /// /metrics in either format, encoded again only when the last encoding is older than `FRESH`.
    async fn metrics(&self, openmetrics: bool) -> Result<Bytes, std::fmt::Error> {
        let mut cached = self.encoded.lock().await;
        let fresh = cached.as_ref().filter(|(at, _, _)| at.elapsed() < FRESH);
        let (om, text) = match fresh {
            Some((_, om, text)) => (om.clone(), text.clone()),
            None => {
                let mut body = String::with_capacity(64 * 1024);
                prometheus_client::encoding::text::encode(&mut body, &self.registry)?;
                let text = Bytes::from(to_prometheus_text(&body));
                let om = Bytes::from(body);
                *cached = Some((Instant::now(), om.clone(), text.clone()));
                (om, text)
            }
        };
        Ok(if openmetrics { om } else { text })
    }
}

fn web_state(config: Option<WebConfig>) -> Web {
    let config = config.unwrap_or_default();
    Web { tls: config.tls.clone().map(TlsAcceptor::from), config }
}

/// A bound, not yet running server.
pub struct HttpServer {
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
    deadlines: Deadlines,
}

/// Changes a running server's web config (new certificates, users; TLS on or off).
#[derive(Clone)]
pub struct HttpHandle {
    shared: Arc<Shared>,
}

impl HttpHandle {
    /// Load `path` and use it for new connections. On error the old config stays.
    pub fn reload(&self, path: Option<&Path>) -> Result<(), WebConfigError> {
        self.set(path.map(WebConfig::load).transpose()?);
        Ok(())
    }

    /// Use `config` (already loaded) for new connections.
    pub fn set(&self, config: Option<WebConfig>) {
        let web = Arc::new(web_state(config));
        *self.shared.web.write().unwrap_or_else(|p| p.into_inner()) = web;
    }
}

/// Connections the kernel may hold for the server before it accepts them. tokio's default (1,024)
/// overflows under a flood of local clients: a scrape's SYN is then dropped and retried a second
/// later. The kernel caps it at net.core.somaxconn (4,096 by default).
const BACKLOG: u32 = 16_384;

/// A listening socket on `addr`, as `TcpListener::bind` makes it (SO_REUSEADDR), with `BACKLOG`.
fn listen_on(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let s = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    s.listen(BACKLOG)
}

impl HttpServer {
    /// Bind `addr`. `ready` answers `/healthz` (503 until the daemon sets it).
    pub async fn bind(
        addr: SocketAddr,
        web: Option<WebConfig>,
        registry: Arc<Registry>,
        ready: Arc<AtomicBool>,
    ) -> Result<Self, HttpError> {
        let listener = listen_on(addr).map_err(|err| HttpError::Bind { addr, err })?;
        Self::on(listener, addr, web, registry, ready)
    }

    /// Bind the first address of `listen` that can be bound (`:PORT` is IPv6's any address, which
    /// takes IPv4 too, then IPv4's where IPv6 is off; a host name is looked up).
    pub async fn bind_listen(
        listen: &ListenAddr,
        web: Option<WebConfig>,
        registry: Arc<Registry>,
        ready: Arc<AtomicBool>,
    ) -> Result<Self, HttpError> {
        let addrs = listen.candidates().await.map_err(|err| HttpError::Resolve { listen: listen.to_string(), err })?;
        let mut failed = None;
        for addr in addrs {
            match listen_on(addr) {
                Ok(l) => return Self::on(l, addr, web, registry, ready),
                Err(err) => failed = Some(HttpError::Bind { addr, err }),
            }
        }
        Err(failed.unwrap_or_else(|| HttpError::Resolve {
            listen: listen.to_string(),
            err: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
        }))
    }

    fn on(
        listener: TcpListener,
        addr: SocketAddr,
        web: Option<WebConfig>,
        registry: Arc<Registry>,
        ready: Arc<AtomicBool>,
    ) -> Result<Self, HttpError> {
        let addr = listener.local_addr().map_err(|err| HttpError::Bind { addr, err })?;
        let shared = Arc::new(Shared {
            registry,
            ready,
            web: RwLock::new(Arc::new(web_state(web))),
            encoded: tokio::sync::Mutex::new(None),
        });
        Ok(HttpServer { listener, addr, shared, deadlines: Deadlines::default() })
    }

    /// The address actually bound (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Other deadlines than the defaults (tests).
    pub fn with_deadlines(mut self, d: Deadlines) -> Self {
        self.deadlines = d;
        self
    }

    pub fn handle(&self) -> HttpHandle {
        HttpHandle { shared: self.shared.clone() }
    }

    /// Serve until `shutdown` completes, then let in-flight requests finish (5 s at most).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), HttpError> {
        let graceful = GracefulShutdown::new();
        let slots = slots();
        let limit = Arc::new(Semaphore::new(slots));
        let peers = Arc::new(Peers { held: Mutex::new(HashMap::new()), cap: (slots / PEER_SHARE).max(1) });
        let mut refused_logged: Option<Instant> = None;
        let d = self.deadlines;
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                _ = &mut shutdown => break,
                p = limit.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            };
            let (stream, peer) = tokio::select! {
                _ = &mut shutdown => break,
                r = self.listener.accept() => match r {
                    Ok(s) => s,
                    // Out of file descriptors and the like: wait a little, keep serving.
                    Err(e) if is_transient(&e) => {
                        tracing::warn!(error = %e, "http accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Err(err) => return Err(HttpError::Accept { addr: self.addr, err }),
                },
            };
            let Some(peer_slot) = peers.enter(peer.ip()) else {
                // Closed at once: this peer holds its share of the slots already.
                if refused_logged.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    tracing::warn!(peer = %peer.ip(), share = peers.cap, "http: a peer holds its share of the connection slots; refusing more from it");
                    refused_logged = Some(Instant::now());
                }
                continue;
            };
            let web = self.shared.web.read().unwrap_or_else(|p| p.into_inner()).clone();
            let shared = self.shared.clone();
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let (_permit, _peer_slot) = (permit, peer_slot);
                // Nothing is allocated for a connection until its first byte arrives.
                if !matches!(tokio::time::timeout(d.head, stream.readable()).await, Ok(Ok(()))) {
                    return;
                }
                let stream = WriteDeadline::new(stream, d.write);
                let svc = {
                    let web = web.clone();
                    service_fn(move |req| handle(req, shared.clone(), web.clone(), peer.ip()))
                };
                let mut http = hyper::server::conn::http1::Builder::new();
                http.timer(TokioTimer::new()).header_read_timeout(d.head).max_buf_size(MAX_HEADER_BYTES);
                let result = match &web.tls {
                    Some(acceptor) => match tokio::time::timeout(d.handshake, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => watcher.watch(http.serve_connection(TokioIo::new(tls), svc)).await,
                        Ok(Err(e)) => return tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => return tracing::debug!("TLS handshake timed out"),
                    },
                    None => watcher.watch(http.serve_connection(TokioIo::new(stream), svc)).await,
                };
                if let Err(e) = result {
                    tracing::debug!(error = %e, "http connection ended with an error");
                }
            });
        }
        drop(self.listener);
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await;
        Ok(())
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted | WouldBlock)
        || matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

fn reply(status: StatusCode, ctype: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_str(ctype).unwrap_or(HeaderValue::from_static("text/plain")));
    r
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    web: Arc<Web>,
    peer: IpAddr,
) -> Result<Response<Full<Bytes>>, Infallible> {
    // A request with a body (no scrape has one) is answered and the connection closed, so that
    // nobody can keep it open sending a body slowly.
    let has_body = req.headers().contains_key(TRANSFER_ENCODING)
        || req.headers().get(CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0");
    let mut resp = route(req, &shared, &web, peer).await;
    for (k, v) in &web.config.headers {
        if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
            resp.headers_mut().insert(k, v);
        }
    }
    if has_body {
        resp.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(resp)
}

async fn route(req: Request<Incoming>, shared: &Shared, web: &Arc<Web>, peer: IpAddr) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET and HEAD\n");
    }
    let path = req.uri().path();
    // Not rate-limited and not behind auth: a liveness probe should not need the scrape password.
    if path != "/healthz" && web.config.rate_limit.as_ref().is_some_and(|r| !r.allow()) {
        return too_many("rate limit (web config rate_limit)\n", Duration::from_secs(1));
    }
    match path {
        "/healthz" => {
            if shared.ready.load(Ordering::Relaxed) {
                reply(StatusCode::OK, TEXT, "ok\n")
            } else {
                reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, "starting\n")
            }
        }
        "/metrics" => {
            match web.config.check(req.headers().get(AUTHORIZATION).map(|h| h.as_bytes()), peer).await {
                Verdict::Allowed => {}
                Verdict::Denied => {
                    let mut r = reply(StatusCode::UNAUTHORIZED, TEXT, "unauthorized\n");
                    r.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"tcpvigil\""));
                    return r;
                }
                Verdict::Busy(wait) => return too_many("too many authentication attempts\n", wait),
            }
            let openmetrics = req
                .headers()
                .get_all(hyper::header::ACCEPT)
                .iter()
                .any(|v| v.to_str().is_ok_and(|v| v.contains("application/openmetrics-text")));
            match shared.metrics(openmetrics).await {
                Ok(body) if openmetrics => reply(StatusCode::OK, OPENMETRICS, body),
                Ok(body) => reply(StatusCode::OK, PROMETHEUS_TEXT, body),
                Err(_) => reply(StatusCode::INTERNAL_SERVER_ERROR, TEXT, "encoding failed\n"),
            }
        }
        "/" => reply(StatusCode::OK, TEXT, "tcpvigil: /metrics /healthz\n"),
        _ => reply(StatusCode::NOT_FOUND, TEXT, "not found\n"),
    }
}

fn too_many(why: &'static str, wait: Duration) -> Response<Full<Bytes>> {
    let mut r = reply(StatusCode::TOO_MANY_REQUESTS, "text/plain; charset=utf-8", why);
    let secs = wait.as_secs().max(1).to_string();
    if let Ok(v) = HeaderValue::from_str(&secs) {
        r.headers_mut().insert(RETRY_AFTER, v);
    }
    r
}

/// OpenMetrics text as the Prometheus 0.0.4 text format: counter families are named with their
/// `_total` samples, `# UNIT` and `# EOF` go. Samples are the same in both formats.
pub fn to_prometheus_text(om: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        om.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|r| r.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(om.len());
    for l in om.lines() {
        if l.starts_with("# UNIT ") || l == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "].into_iter().find_map(|p| l.strip_prefix(p).map(|r| (p, r)));
        match meta.and_then(|(p, r)| r.split_once(' ').map(|(n, rest)| (p, n, rest))) {
            Some((p, name, rest)) if counters.contains(name) => {
                out.push_str(p);
                out.push_str(name);
                out.push_str("_total ");
                out.push_str(rest);
            }
            _ => out.push_str(l),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
