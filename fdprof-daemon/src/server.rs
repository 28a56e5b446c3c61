//! The daemon's accept loop: HTTP/1 over hyper, each connection bounded so that no client, and
//! no number of clients, can take the daemon's descriptors, memory or attention from the
//! profiler. At most `max` connections at once; when a new one comes at the bound, the oldest
//! connection waiting for its first request goes (then the oldest idle between requests), so a
//! client that sends its request is served during a flood of idle ones; one that is serving a
//! request is never cut. A connection that has not sent a whole request 10 s after it opened
//! (or 30 s after its last answer) is closed. Every connection refused or closed this way is
//! counted, and logged at most once a minute.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use http_body::Frame;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::log;

/// Time from a connection's start to its first whole request header (TLS handshake included).
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a kept-alive connection may wait for its next request: longer than Prometheus' default
/// 15 s scrape interval, so a scraper keeps its connection.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head read (hyper's smallest allowed buffer is 8 KiB).
const HEAD_MAX: usize = 16 * 1024;
/// Open-descriptor room kept for the profiler (its /proc reads, programs, maps) beyond the
/// connections.
pub(crate) const FD_RESERVE: u64 = 1024;
/// The default and largest `--max-connections`.
pub const MAX_CONNECTIONS: usize = 256;
pub const MAX_CONNECTIONS_LIMIT: usize = 4096;
const WARN_EVERY: Duration = Duration::from_secs(60);
/// Time a stopping daemon gives its connections to finish the answers they are sending.
const DRAIN: Duration = Duration::from_secs(2);

/// Why a connection was refused or closed by the server, not by its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// At `--max-connections`: the new one, or an idle one to make room for it.
    Limit,
    /// No whole request within [`HEADER_TIMEOUT`].
    Timeout,
}

/// What `/metrics` shows of the server.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub open: AtomicUsize,
    pub refused_limit: AtomicU64,
    pub refused_timeout: AtomicU64,
    /// Long-lived requests answered 503 at their own bound ([`super::long_lived`]).
    pub refused_long_lived: AtomicU64,
    /// When the last WARN line was written, and the two counts it covered.
    warned: Mutex<Option<(Instant, u64, u64)>>,
}

impl Counters {
    fn count(&self, why: Refusal) {
        match why {
            Refusal::Limit => &self.refused_limit,
            Refusal::Timeout => &self.refused_timeout,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn figures(&self) -> fdprof_profiler::render::metrics::HttpFigures {
        fdprof_profiler::render::metrics::HttpFigures {
            open: self.open.load(Ordering::Relaxed) as u64,
            refused_limit: self.refused_limit.load(Ordering::Relaxed),
            refused_timeout: self.refused_timeout.load(Ordering::Relaxed),
            refused_long_lived: self.refused_long_lived.load(Ordering::Relaxed),
        }
    }

    /// One WARN line for the refusals since the last one, at most once a [`WARN_EVERY`].
    fn warn(&self, max: usize) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        let (limit, timeout) = (
            self.refused_limit.load(Ordering::Relaxed),
            self.refused_timeout.load(Ordering::Relaxed),
        );
        let (at, limit_then, timeout_then) = warned.unwrap_or((Instant::now(), 0, 0));
        let due = warned.is_none() || at.elapsed() >= WARN_EVERY;
        if !due || (limit, timeout) == (limit_then, timeout_then) {
            return;
        }
        log::warn(&format!(
            "HTTP: {} connections refused at --max-connections {max} and {} closed without a \
             request within {}s (fdprof_http_connections_refused_total); the next such line \
             comes a minute later at the earliest",
            limit - limit_then,
            timeout - timeout_then,
            HEADER_TIMEOUT.as_secs()
        ));
        *warned = Some((Instant::now(), limit, timeout));
    }
}

/// One open connection, as the accept loop and its own task see it.
struct Slot {
    /// Requests being answered now.
    busy: AtomicUsize,
    /// Answers given so far.
    served: AtomicU64,
    /// When it last became idle (opened, or finished an answer).
    idle_since: Mutex<Instant>,
    /// Told to close (to make room at the bound).
    close: Notify,
}

impl Slot {
    fn idle_for(&self) -> Option<Duration> {
        (self.busy.load(Ordering::Acquire) == 0).then(|| {
            self.idle_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed()
        })
    }
}

/// Marks its slot busy while an answer is being sent: dropped with the answer's body.
struct Busy(Arc<Slot>);

impl Busy {
    fn new(slot: &Arc<Slot>) -> Busy {
        slot.busy.fetch_add(1, Ordering::AcqRel);
        Busy(slot.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.served.fetch_add(1, Ordering::Relaxed);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its connection busy until it is sent (or dropped).
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = <Body as http_body::Body>::Data;
    type Error = <Body as http_body::Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The open connections, by the order they were accepted.
#[derive(Default)]
struct Slots {
    next: u64,
    open: BTreeMap<u64, Arc<Slot>>,
}

impl Slots {
    /// The connection to close to make room: the oldest that never sent a request, else the
    /// oldest idle between requests; none when every one is answering.
    fn victim(&self) -> Option<u64> {
        let idle = |never: bool| {
            self.open.iter().find_map(|(&id, s)| {
                let fresh = s.served.load(Ordering::Relaxed) == 0;
                (s.idle_for().is_some() && fresh == never).then_some(id)
            })
        };
        idle(true).or_else(|| idle(false))
    }
}

/// Where a connection's TLS comes from: `--tls-cert`'s, fixed for the daemon's life, or the
/// web config's as it stands when the connection comes.
#[derive(Clone)]
pub(crate) enum Tls {
    Fixed(TlsAcceptor),
    Live(Arc<crate::web_config::Live>),
}

impl Tls {
    fn acceptor(&self) -> Option<TlsAcceptor> {
        match self {
            Tls::Fixed(acceptor) => Some(acceptor.clone()),
            Tls::Live(live) => live.current().tls.clone(),
        }
    }
}

/// What the connection's handshake proved of its client, in each request's extensions.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Peer {
    /// A client certificate was given and verified against the web config's
    /// `client_ca_file` (and its `client_allowed_sans`): the handshake refuses any other.
    pub verified_certificate: bool,
}

pub(crate) struct Server {
    pub listener: TcpListener,
    pub router: Router,
    pub tls: Option<Tls>,
    pub max: usize,
    pub counters: Arc<Counters>,
}

impl Server {
    /// Serves until `stop` turns true, then gives the answers being sent [`DRAIN`] to finish.
    pub(crate) async fn run(self, mut stop: watch::Receiver<bool>) {
        let slots: Arc<Mutex<Slots>> = Default::default();
        let mut tasks = tokio::task::JoinSet::new();
        let mut report = tokio::time::interval(WARN_EVERY);
        loop {
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                _ = stop.wait_for(|&s| s) => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
                _ = report.tick() => {
                    self.counters.warn(self.max);
                    continue;
                }
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE, ENFILE, ENOBUFS: the connection stays queued; try again shortly.
                    log::debug(&format!("accept: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Some((id, slot)) = self.admit(&slots) else {
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (router, tls, slots, counters, stop) = (
                self.router.clone(),
                self.tls.clone(),
                slots.clone(),
                self.counters.clone(),
                stop.clone(),
            );
            let max = self.max;
            tasks.spawn(async move {
                let why = match tls.as_ref().and_then(Tls::acceptor) {
                    None => serve(stream, router, &slot, stop, Peer::default()).await,
                    Some(acceptor) => {
                        match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(tls)) => {
                                // A verifier that accepts a certificate only once verified.
                                let peer = Peer {
                                    verified_certificate: tls
                                        .get_ref()
                                        .1
                                        .peer_certificates()
                                        .is_some_and(|c| !c.is_empty()),
                                };
                                serve(tls, router, &slot, stop, peer).await
                            }
                            Ok(Err(e)) => {
                                log::debug(&format!("TLS handshake with {peer}: {e}"));
                                None
                            }
                            Err(_) => Some(Refusal::Timeout),
                        }
                    }
                };
                if let Some(why) = why {
                    counters.count(why);
                    counters.warn(max);
                }
                let mut s = slots.lock().unwrap_or_else(|e| e.into_inner());
                s.open.remove(&id);
                counters.open.store(s.open.len(), Ordering::Relaxed);
            });
        }
        drop(self.listener);
        // Connections see `stop` and finish the answer they send; the rest are cut.
        let drained = async { while tasks.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(DRAIN, drained).await;
        tasks.abort_all();
    }

    /// A slot for a new connection, making room at the bound by closing an idle one; `None`
    /// (refused) when every open connection is answering a request.
    fn admit(&self, slots: &Mutex<Slots>) -> Option<(u64, Arc<Slot>)> {
        let mut s = slots.lock().unwrap_or_else(|e| e.into_inner());
        if s.open.len() >= self.max {
            self.counters.count(Refusal::Limit);
            self.counters.warn(self.max);
            let victim = s.victim()?;
            if let Some(v) = s.open.remove(&victim) {
                v.close.notify_one();
            }
        }
        let slot = Arc::new(Slot {
            busy: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            idle_since: Mutex::new(Instant::now()),
            close: Notify::new(),
        });
        s.next += 1;
        let id = s.next;
        s.open.insert(id, slot.clone());
        self.counters.open.store(s.open.len(), Ordering::Relaxed);
        Some((id, slot))
    }
}

/// Serves one connection until its client closes it, it times out, or it is told to close;
/// the reason when the server closed it.
async fn serve<S>(
    stream: S,
    router: Router,
    slot: &Arc<Slot>,
    mut stop: watch::Receiver<bool>,
    peer: Peer,
) -> Option<Refusal>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = {
        let slot = slot.clone();
        hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            let busy = Busy::new(&slot);
            let router = router.clone();
            request.extensions_mut().insert(peer);
            async move {
                let response = router
                    .oneshot(request.map(Body::new))
                    .await
                    .unwrap_or_else(|never: Infallible| match never {});
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _busy: busy }))
            }
        })
    };
    // No hyper timer: the loop below times the connection, so that a kept-alive scraper is
    // not taken for a client that never asks.
    let mut http = hyper::server::conn::http1::Builder::new();
    http.max_buf_size(HEAD_MAX).keep_alive(true);
    let connection = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let mut stopping = false;
    loop {
        let timeout = match slot.idle_for() {
            None => HEADER_TIMEOUT, // answering: look again later
            Some(idle) => {
                let limit = match slot.served.load(Ordering::Relaxed) {
                    0 => HEADER_TIMEOUT,
                    _ => IDLE_TIMEOUT,
                };
                if idle >= limit {
                    // A kept-alive connection that goes quiet is ordinary; one that never asked
                    // anything is what a flood looks like.
                    let fresh = slot.served.load(Ordering::Relaxed) == 0;
                    return fresh.then_some(Refusal::Timeout);
                }
                limit - idle
            }
        };
        tokio::select! {
            done = connection.as_mut() => {
                if let Err(e) = done {
                    log::debug(&format!("connection: {e}"));
                }
                return None;
            }
            _ = slot.close.notified() => return None, // counted by the accept loop
            _ = tokio::time::sleep(timeout) => {}
            _ = stop.wait_for(|&s| s), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard one and checks that `max` connections leave the
/// profiler [`FD_RESERVE`] descriptors; the error says what to lower.
pub(crate) fn reserve_descriptors(max: usize) -> Result<(), String> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit on a struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Ok(());
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    let need = max as u64 + FD_RESERVE;
    if limit.rlim_cur < need {
        return Err(format!(
            "--max-connections {max} leaves fewer than {FD_RESERVE} of the {} descriptors \
             RLIMIT_NOFILE allows for profiling: lower --max-connections",
            limit.rlim_cur
        ));
    }
    Ok(())
}
