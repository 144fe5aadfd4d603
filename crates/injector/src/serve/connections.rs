//! The HTTPS connections: the accept loop with its cap (closing the oldest idle connection for a new
//! one), and one connection's TLS handshake and HTTP/1.1 or HTTP/2 under their timeouts.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio_rustls::TlsAcceptor;

use super::handler::{close_after, route};
use super::state::{Phase, State};

/// One open HTTPS connection as the accept loop sees it.
#[derive(Debug)]
pub(super) struct ConnState {
    pub(super) started: Instant,
    /// Requests in flight; 0 means idle (in the handshake or between requests).
    pub(super) busy: AtomicUsize,
    /// Notified when the connection is to close to make room at the cap.
    pub(super) close: Notify,
    /// Responses the handler has produced on this connection.
    pub(super) served: AtomicU64,
    /// Notified at each response (for [`go_elsewhere`]).
    pub(super) answered: Notify,
}

/// The open connections, for closing the oldest idle one at the cap.
#[derive(Debug, Default)]
pub(super) struct Registry {
    pub(super) next: AtomicU64,
    pub(super) conns: Mutex<HashMap<u64, Arc<ConnState>>>,
}

/// A registered connection; unregisters when dropped.
pub(super) struct Registered {
    pub(super) registry: Arc<Registry>,
    pub(super) id: u64,
    pub(super) state: Arc<ConnState>,
}

impl Registry {
    pub(super) fn register(self: &Arc<Self>) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState {
            started: Instant::now(),
            busy: AtomicUsize::new(0),
            close: Notify::new(),
            served: AtomicU64::new(0),
            answered: Notify::new(),
        });
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, state.clone());
        Registered {
            registry: self.clone(),
            id,
            state,
        }
    }

    /// Tells the oldest idle connection to close (and forgets it, so it is not picked twice); false when
    /// every connection is busy.
    pub(super) fn close_oldest_idle(&self) -> bool {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let victim = conns
            .iter()
            .filter(|(_, c)| c.busy.load(Ordering::Acquire) == 0)
            .min_by_key(|(_, c)| c.started)
            .map(|(id, _)| *id);
        match victim.and_then(|id| conns.remove(&id)) {
            Some(c) => {
                c.close.notify_one();
                true
            }
            None => false,
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// Counts a request in flight on its connection while alive.
pub(super) struct Busy(Arc<ConnState>);

impl Busy {
    pub(super) fn new(c: Arc<ConnState>) -> Busy {
        c.busy.fetch_add(1, Ordering::AcqRel);
        Busy(c)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Resolves once the listener is to close (the guard of `wait_for` is not `Send`, so drop it here).
pub(super) async fn stopped(rx: &mut watch::Receiver<Phase>) {
    let _ = rx.wait_for(|p| *p == Phase::Stopped).await;
}

/// Resolves when a connection should tell its client to go elsewhere. HTTP/2: once draining has begun
/// and the connection has answered at least one request (one accepted while draining serves the request
/// it was opened for first: closing it unanswered would fail that request). HTTP/1: at the stop. Both at
/// the stop in any case.
async fn go_elsewhere(h2: bool, rx: &mut watch::Receiver<Phase>, conn: &ConnState) {
    if !h2 {
        return stopped(rx).await;
    }
    let _ = rx.wait_for(|p| *p >= Phase::Draining).await;
    loop {
        let answered = conn.answered.notified();
        if conn.served.load(Ordering::Acquire) > 0 || *rx.borrow() == Phase::Stopped {
            return;
        }
        tokio::select! {
            _ = answered => {}
            _ = stopped(rx) => return,
        }
    }
}

/// How long the accept loop waits at the cap before looking again for an idle connection to close.
pub(super) const CAP_RECHECK: Duration = Duration::from_millis(50);

/// How long an idle connection told to close may take to finish (an HTTP/2 GOAWAY; an HTTP/1 connection
/// between requests closes at once).
pub(super) const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

pub(super) struct Timeouts {
    pub(super) handshake: Duration,
    pub(super) header: Duration,
}

pub(super) async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<State>,
    connections: Arc<Semaphore>,
    timeouts: Timeouts,
    mut shutdown: watch::Receiver<Phase>,
) {
    let registry = Arc::new(Registry::default());
    let timeouts = Arc::new(timeouts);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => return,
        };
        // At the cap, close the oldest idle connection for this one: otherwise clients that connect and
        // never speak would keep the API server's connections waiting in the backlog. When all are busy,
        // wait (looking again for one that became idle).
        let permit = loop {
            if let Ok(p) = connections.clone().try_acquire_owned() {
                break p;
            }
            if registry.close_oldest_idle() {
                state.metrics.connections_closed_idle.inc();
            }
            tokio::select! {
                p = connections.clone().acquire_owned() => match p {
                    Ok(p) => break p,
                    Err(_) => return,
                },
                _ = tokio::time::sleep(CAP_RECHECK) => {}
                _ = stopped(&mut shutdown) => return,
            }
        };
        let acceptor = acceptor.clone();
        let state = state.clone();
        let shutdown = shutdown.clone();
        let registered = registry.register();
        let timeouts = timeouts.clone();
        tokio::spawn(async move {
            state.metrics.connections.inc();
            serve_connection(
                tcp,
                peer,
                acceptor,
                state.clone(),
                &registered.state,
                &timeouts,
                shutdown,
            )
            .await;
            drop(registered);
            state.metrics.connections.dec();
            drop(permit);
        });
    }
}

pub(super) async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    state: Arc<State>,
    conn_state: &Arc<ConnState>,
    timeouts: &Timeouts,
    mut shutdown: watch::Receiver<Phase>,
) {
    let _ = tcp.set_nodelay(true);
    let tls = tokio::select! {
        r = tokio::time::timeout(timeouts.handshake, acceptor.accept(tcp)) => match r {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out");
                return;
            }
        },
        _ = conn_state.close.notified() => {
            tracing::debug!(%peer, "closed in the TLS handshake to make room at the connection cap");
            return;
        }
    };
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let counted = conn_state.clone();
    let phase = shutdown.clone();
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let state = state.clone();
        // Counted as soon as the headers are in, so the connection is not taken for idle.
        let busy = Busy::new(counted.clone());
        let answered = counted.clone();
        let phase = phase.clone();
        let version = req.version();
        async move {
            let mut resp = route(state, req).await;
            drop(busy);
            // HTTP/1 has no GOAWAY: once draining, each answer is its connection's last, so the client
            // retires the connection on reading it instead of reusing it after we close it.
            if *phase.borrow() >= Phase::Draining {
                close_after(&mut resp, version);
            }
            answered.served.fetch_add(1, Ordering::AcqRel);
            answered.answered.notify_waiters();
            Ok::<_, Infallible>(resp)
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    // ALPN decided the protocol; skipping auto-detection also means no unbounded wait for a preface.
    let builder = if h2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    let conn = builder.serve_connection(TokioIo::new(tls), service);
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = go_elsewhere(h2, &mut shutdown, conn_state) => {
            // HTTP/2 is told at the start of the drain, with a GOAWAY that hyper sends in two steps so
            // that no stream the client already sent is refused; the client opens its next connection
            // while our listener is still open. HTTP/1 (the API server's: k8s.io/apiserver
            // pkg/util/webhook/client.go sets NextProtos http/1.1) is closed here only at the stop, when
            // idle: closing an idle HTTP/1 connection races a request the client starts writing on it
            // ("write: broken pipe", a pod create lost in the rollout scenario), so while draining it is
            // retired by its next answer instead (`Connection: close`, above).
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        _ = conn_state.close.notified() => {
            tracing::debug!(%peer, "closing an idle connection to make room at the connection cap");
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(IDLE_CLOSE_GRACE, conn).await {
                Ok(r) => r,
                Err(_) => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_idle_connection_is_the_one_closed() {
        let registry = Arc::new(Registry::default());
        let oldest_busy = registry.register();
        std::thread::sleep(Duration::from_millis(2));
        let oldest_idle = registry.register();
        std::thread::sleep(Duration::from_millis(2));
        let newer_idle = registry.register();
        let busy = Busy::new(oldest_busy.state.clone());
        assert!(registry.close_oldest_idle());
        let gone = |r: &Registered| !registry.conns.lock().unwrap().contains_key(&r.id);
        assert!(gone(&oldest_idle) && !gone(&newer_idle) && !gone(&oldest_busy));
        assert!(registry.close_oldest_idle());
        assert!(gone(&newer_idle));
        assert!(!registry.close_oldest_idle(), "closed a busy connection");
        drop(busy);
        assert!(registry.close_oldest_idle());
        drop((oldest_busy, oldest_idle, newer_idle));
        assert!(registry.conns.lock().unwrap().is_empty());
    }
}
