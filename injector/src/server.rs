//! `injector serve`: the MutatingAdmissionWebhook over HTTPS.
//!
//! The webhook is fail-closed in the cluster (a down or slow webhook blocks pod creation), so this module is
//! about staying up and answering fast: HTTP/1.1 and HTTP/2 over rustls, Istio's status codes (Istio's `webhook.go`
//! `serveInject`),
//! timeouts for slow clients, a cap on connections, hot reload of the certificate and of the configuration
//! (a broken new file keeps the last good one), metrics on a separate plain-HTTP port, and a graceful
//! shutdown on SIGTERM that finishes the requests in flight.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::admission::{self, OutcomeKind};
use crate::cluster_state::{ClusterState, PlatformArgs, ProxyConfigArgs};
use crate::config::{ConfigArgs, Settings};
use crate::engine::Engine;
use crate::metrics::{FailureType, Metrics, ReloadResult};
use crate::reload::Watch;
use crate::tls::{self, CertStore};

/// Istio's `MaxRequestBodyBytes` (`pkg/kube/util.go`): larger bodies are answered 400.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024;
/// After an oversized body, read (and discard) at most this much more so the client gets the 400 instead of
/// a connection reset from unread data; beyond it the connection is simply closed.
const MAX_DRAIN_BYTES: usize = 32 * 1024 * 1024;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `injector serve` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub proxy_configs: ProxyConfigArgs,
    #[command(flatten)]
    pub platform: PlatformArgs,
    /// HTTPS address of the webhook (`127.0.0.1:0` picks a free port; see `--port-file`).
    #[arg(long, env = "INJECTOR_LISTEN", default_value = "0.0.0.0:15017")]
    pub listen: SocketAddr,
    /// PEM certificate chain served (reloaded when the file changes).
    #[arg(long, env = "INJECTOR_TLS_CERT")]
    pub tls_cert: PathBuf,
    /// PEM private key of the certificate (reloaded when the file changes).
    #[arg(long, env = "INJECTOR_TLS_KEY")]
    pub tls_key: PathBuf,
    /// Plain-HTTP address for `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "INJECTOR_METRICS_LISTEN", default_value = "0.0.0.0:15014")]
    pub metrics_listen: SocketAddr,
    /// Write the bound addresses here once listening (`https=ADDR` and `metrics=ADDR` lines; written
    /// atomically), for callers that asked for port 0.
    #[arg(long)]
    pub port_file: Option<PathBuf>,
    /// Log format (filter with `RUST_LOG`, default `info`).
    #[arg(long, value_enum, env = "INJECTOR_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    /// How often the certificate and configuration files are checked for changes, in milliseconds.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(10..))]
    pub reload_interval_ms: u64,
    /// Most HTTPS connections served at once; further ones wait in the kernel's accept queue.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Seconds a client has to complete the TLS handshake and send a request's headers.
    #[arg(long, default_value_t = 10)]
    pub header_timeout_secs: u64,
    /// Seconds a client has to send a request's body.
    #[arg(long, default_value_t = 10)]
    pub body_timeout_secs: u64,
    /// On SIGTERM, keep serving (readiness failing) this long so endpoints are updated before the listener
    /// closes.
    #[arg(long, default_value_t = 0)]
    pub drain_delay_secs: u64,
    /// On SIGTERM, wait at most this long for requests in flight.
    #[arg(long, default_value_t = 20)]
    pub shutdown_timeout_secs: u64,
    /// Worker threads (default: one per CPU).
    #[arg(long)]
    pub worker_threads: Option<usize>,
    /// Run injections on tokio's blocking pool instead of inline on the worker (measurably slower for the
    /// sub-millisecond injections here; kept for very large pods or templates).
    #[arg(long)]
    pub blocking_pool: bool,
}

/// State shared by all connections.
struct State {
    /// The engine of the current configuration and the configuration's generation number (bumped on
    /// every reload, for the patch cache's key).
    engine: RwLock<(u64, Arc<Engine>)>,
    webhook: admission::Webhook,
    metrics: Arc<Metrics>,
    certs: Arc<CertStore>,
    shutting_down: AtomicBool,
    body_timeout: Duration,
    blocking_pool: bool,
}

impl State {
    fn engine(&self) -> (u64, Arc<Engine>) {
        self.engine
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Runs `injector serve` until SIGTERM/SIGINT.
pub fn run(args: Args) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = args.worker_threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.build().context("starting the async runtime")?;
    let result = rt.block_on(serve(args));
    // Connection tasks have been drained or timed out; do not wait for stragglers.
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second initialisation (tests calling run twice) is not an error worth failing for.
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// The paths whose change triggers a configuration reload.
pub fn config_paths(args: &ConfigArgs) -> Vec<PathBuf> {
    args.watched_paths()
}

/// What the engine is built from: the configuration files and the cluster state files, reloaded together.
#[derive(Debug, Clone)]
struct Sources {
    config: ConfigArgs,
    proxy_configs: ProxyConfigArgs,
    platform: PlatformArgs,
}

impl Sources {
    fn paths(&self) -> Vec<PathBuf> {
        let mut p = config_paths(&self.config);
        p.extend(ClusterState::watched_paths(
            &self.proxy_configs,
            Some(&self.platform),
        ));
        p
    }

    /// Loads every file; the first failure names its file, so a reload keeps the previous engine.
    fn load(&self) -> anyhow::Result<Engine> {
        let settings =
            Settings::load(&self.config).context("loading the injector configuration")?;
        let cluster = ClusterState::load(&self.proxy_configs, Some(&self.platform))
            .context("loading the cluster state (--proxy-configs, --namespaces)")?;
        for w in &cluster.warnings {
            tracing::warn!("{w}");
        }
        Ok(Engine::new(settings).with_cluster(cluster))
    }
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let provider = tls::crypto_provider();
    let metrics = Arc::new(Metrics::new());

    let sources = Sources {
        config: args.config.clone(),
        proxy_configs: args.proxy_configs.clone(),
        platform: args.platform.clone(),
    };
    let engine = sources.load()?;
    metrics.config_reload(ReloadResult::Success);
    let pair = tls::load_pair(&args.tls_cert, &args.tls_key, &provider)
        .context("loading the serving certificate")?;
    metrics.cert_reload(ReloadResult::Success);
    let certs = Arc::new(CertStore::new(pair));
    metrics
        .cert_expiry_seconds
        .set(certs.seconds_until_expiry());
    let tls_config = tls::server_config(certs.clone(), provider.clone())?;
    let acceptor = TlsAcceptor::from(Arc::new(tls_config));

    let state = Arc::new(State {
        engine: RwLock::new((0, Arc::new(engine))),
        webhook: admission::Webhook::new(metrics.patch_cache.clone()),
        metrics: metrics.clone(),
        certs: certs.clone(),
        shutting_down: AtomicBool::new(false),
        body_timeout: Duration::from_secs(args.body_timeout_secs),
        blocking_pool: args.blocking_pool,
    });

    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let https_addr = listener.local_addr()?;
    let metrics_listener = TcpListener::bind(args.metrics_listen)
        .await
        .with_context(|| format!("binding {}", args.metrics_listen))?;
    let metrics_addr = metrics_listener.local_addr()?;
    if let Some(path) = &args.port_file {
        write_port_file(path, https_addr, metrics_addr)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    tracing::info!(https = %https_addr, metrics = %metrics_addr, "injector webhook listening");

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(reload_loop(
        state.clone(),
        provider,
        sources,
        args.tls_cert.clone(),
        args.tls_key.clone(),
        Duration::from_millis(args.reload_interval_ms),
    ));
    tokio::spawn(metrics_server(
        metrics_listener,
        state.clone(),
        shutdown_rx.clone(),
    ));

    let connections = Arc::new(Semaphore::new(args.max_connections as usize));
    let accept = accept_loop(
        listener,
        acceptor,
        state.clone(),
        connections.clone(),
        Duration::from_secs(args.header_timeout_secs),
        shutdown_rx.clone(),
    );
    let accept = tokio::spawn(accept);

    let signal = wait_for_signal().await?;
    tracing::info!(
        signal,
        "shutting down: readiness off, finishing requests in flight"
    );
    state.shutting_down.store(true, Ordering::SeqCst);
    if args.drain_delay_secs > 0 {
        tokio::time::sleep(Duration::from_secs(args.drain_delay_secs)).await;
    }
    let _ = shutdown_tx.send(true);
    // The accept loop ends at once on the signal; its listener is dropped so new connections are refused.
    let _ = accept.await;
    let deadline = Duration::from_secs(args.shutdown_timeout_secs);
    match tokio::time::timeout(deadline, connections.acquire_many(args.max_connections)).await {
        Ok(_) => tracing::info!("all connections closed; exiting"),
        Err(_) => tracing::warn!(
            open = args.max_connections as usize - connections.available_permits(),
            "shutdown deadline reached with connections still open; exiting"
        ),
    }
    Ok(())
}

/// Resolves once shutdown has been signalled (the guard of `wait_for` is not `Send`, so drop it here).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

async fn wait_for_signal() -> anyhow::Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

fn write_port_file(path: &PathBuf, https: SocketAddr, metrics: SocketAddr) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("https={https}\nmetrics={metrics}\n"))?;
    std::fs::rename(&tmp, path)
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<State>,
    connections: Arc<Semaphore>,
    header_timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        // Take a connection slot first: at the cap, connections wait in the kernel's backlog.
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stopped(&mut shutdown) => return,
        };
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
        let acceptor = acceptor.clone();
        let state = state.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            state.metrics.connections.inc();
            serve_connection(tcp, peer, acceptor, state.clone(), header_timeout, shutdown).await;
            state.metrics.connections.dec();
            drop(permit);
        });
    }
}

async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    state: Arc<State>,
    header_timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let tls = match tokio::time::timeout(header_timeout, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let service = service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(route(state, req).await) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
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
        _ = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

type Resp = Response<Full<Bytes>>;

fn text(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn route(state: Arc<State>, req: Request<Incoming>) -> Resp {
    let path = req.uri().path();
    if path == "/inject" || path.starts_with("/inject/") {
        return inject(state, req).await;
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => readiness(&state),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn readiness(state: &State) -> Resp {
    if state.shutting_down.load(Ordering::SeqCst) {
        text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        text(StatusCode::OK, "ok\n")
    }
}

/// Why a body could not be read.
enum BodyError {
    TooLarge,
    TimedOut,
    Broken(String),
}

/// Reads the body up to `limit` bytes within `timeout`. An oversized body is drained (bounded) so that the
/// client, still writing, reads the 400 rather than a reset.
async fn read_body(
    mut body: Incoming,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, BodyError> {
    let declared = body.size_hint().exact();
    let mut buf =
        BytesMut::with_capacity(declared.map_or(16 * 1024, |n| n.min(limit as u64) as usize));
    let deadline = tokio::time::Instant::now() + timeout;
    let mut seen = 0usize;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(BodyError::TimedOut),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(BodyError::Broken(e.to_string())),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            seen = seen.saturating_add(data.len());
            if seen > limit {
                if seen > MAX_DRAIN_BYTES || declared.is_some_and(|n| n > MAX_DRAIN_BYTES as u64) {
                    return Err(BodyError::TooLarge);
                }
                buf.clear();
                continue;
            }
            buf.extend_from_slice(&data);
        }
    }
    if seen > limit {
        return Err(BodyError::TooLarge);
    }
    Ok(buf.freeze())
}

async fn inject(state: Arc<State>, req: Request<Incoming>) -> Resp {
    let start = Instant::now();
    let metrics = &state.metrics;
    metrics.requests.inc();
    let resp = inject_inner(&state, req).await;
    metrics.time.observe(start.elapsed().as_secs_f64());
    resp
}

async fn inject_inner(state: &Arc<State>, req: Request<Incoming>) -> Resp {
    let start = Instant::now();
    let metrics = &state.metrics;
    let (parts, body) = req.into_parts();
    let path = percent_decode(parts.uri.path());

    let declared_too_large = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > MAX_DRAIN_BYTES as u64);
    let body = if declared_too_large {
        Err(BodyError::TooLarge)
    } else {
        read_body(body, MAX_BODY_BYTES, state.body_timeout).await
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => {
            metrics.failure(FailureType::BodyRead);
            let msg = match e {
                BodyError::TooLarge => {
                    format!("Request entity too large: limit is {MAX_BODY_BYTES}")
                }
                BodyError::TimedOut => "timed out reading the request body".to_string(),
                BodyError::Broken(e) => format!("reading the request body: {e}"),
            };
            tracing::warn!(path = %path, error = %msg, "rejected request");
            let mut r = text(StatusCode::BAD_REQUEST, msg);
            // The rest of the body may still be in flight: do not reuse this HTTP/1 connection (HTTP/2
            // resets just the stream, and forbids the header).
            if parts.version < hyper::Version::HTTP_2 {
                r.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            return r;
        }
    };
    if body.is_empty() {
        metrics.failure(FailureType::EmptyBody);
        tracing::warn!(path = %path, "rejected request: no body found");
        return text(StatusCode::BAD_REQUEST, "no body found");
    }
    // Istio compares the header exactly: parameters such as `; charset=utf-8` are refused.
    if parts.headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes) != Some(b"application/json") {
        metrics.failure(FailureType::ContentType);
        tracing::warn!(path = %path, content_type = ?parts.headers.get(CONTENT_TYPE), "rejected request: wrong Content-Type");
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid Content-Type, want `application/json`",
        );
    }

    let (generation, engine) = state.engine();
    let outcome = if state.blocking_pool {
        let path = path.clone();
        let state = Arc::clone(state);
        match tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                state.webhook.handle(&engine, generation, &body, &path)
            }))
        })
        .await
        {
            Ok(r) => r,
            Err(_) => Err(Box::new("injection task cancelled") as Box<dyn std::any::Any + Send>),
        }
    } else {
        // A panic in the engine is a bug, but must cost one request, not the connection or the process.
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            state.webhook.handle(&engine, generation, &body, &path)
        }))
    };
    let outcome = match outcome {
        Ok(o) => o,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            metrics.failure(FailureType::Inject);
            tracing::error!(path = %path, panic = %what, "injection panicked");
            return text(StatusCode::INTERNAL_SERVER_ERROR, "internal error");
        }
    };
    let decision = match outcome.kind {
        OutcomeKind::Injected => "injected",
        OutcomeKind::Skipped => {
            metrics.skip.inc();
            "skipped"
        }
        OutcomeKind::Failed => {
            metrics.failure(FailureType::Inject);
            "failed"
        }
        OutcomeKind::Undecodable => {
            metrics.failure(FailureType::Decode);
            "undecodable"
        }
    };
    // Istio counts every written review as a success, `allowed: false` included.
    metrics.success.inc();
    let latency_us = start.elapsed().as_micros() as u64;
    if matches!(outcome.kind, OutcomeKind::Failed | OutcomeKind::Undecodable) {
        tracing::warn!(uid = %outcome.uid, namespace = %outcome.namespace, pod = %outcome.pod,
            decision, latency_us, path = %path, message = %outcome.message, "admission review");
    } else {
        tracing::info!(uid = %outcome.uid, namespace = %outcome.namespace, pod = %outcome.pod,
            decision, latency_us, path = %path, message = %outcome.message, "admission review");
    }
    let mut r = Response::new(Full::new(Bytes::from(outcome.response)));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Decodes `%XX` escapes, as Go's `r.URL.Path` is decoded (Istio's `webhook.go` `parseInjectEnvs` parses the decoded path).
/// Invalid escapes are kept literally.
pub fn percent_decode(path: &str) -> String {
    if !path.contains('%') {
        return path.to_string();
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Polls the certificate and configuration files; swaps in what loads, keeps the old on failure.
async fn reload_loop(
    state: Arc<State>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    config: Sources,
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
) {
    let mut config_watch = Watch::new(config.paths());
    let mut cert_watch = Watch::new(vec![cert.clone(), key.clone()]);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let st = state.clone();
        let provider = provider.clone();
        let config = config.clone();
        let (cert, key) = (cert.clone(), key.clone());
        // File reads and config parsing block; keep them off the request workers.
        let moved = tokio::task::spawn_blocking(move || {
            if config_watch.changed() {
                match config.load() {
                    Ok(engine) => {
                        let engine = Arc::new(engine);
                        let mut current = st.engine.write().unwrap_or_else(|e| e.into_inner());
                        *current = (current.0.wrapping_add(1), engine);
                        drop(current);
                        st.metrics.config_reload(ReloadResult::Success);
                        tracing::info!(paths = ?config_watch.paths(), "configuration reloaded");
                    }
                    Err(e) => {
                        st.metrics.config_reload(ReloadResult::Failure);
                        tracing::error!(error = %format!("{e:#}"), "configuration reload failed; keeping the previous configuration");
                    }
                }
            }
            if cert_watch.changed() {
                match tls::load_pair(&cert, &key, &provider) {
                    Ok(pair) => {
                        let not_after = pair.not_after_unix;
                        st.certs.replace(pair);
                        st.metrics.cert_reload(ReloadResult::Success);
                        tracing::info!(not_after, "serving certificate reloaded");
                    }
                    Err(e) => {
                        st.metrics.cert_reload(ReloadResult::Failure);
                        tracing::error!(error = %e, "certificate reload failed; keeping the previous certificate");
                    }
                }
            }
            st.metrics
                .cert_expiry_seconds
                .set(st.certs.seconds_until_expiry());
            (config_watch, cert_watch)
        })
        .await;
        match moved {
            Ok((c, k)) => {
                config_watch = c;
                cert_watch = k;
            }
            Err(e) => {
                // Only a panic in a loader gets here; reloading stops but serving goes on.
                tracing::error!(error = %e, "reload task failed; hot reload disabled");
                return;
            }
        }
    }
}

/// Plain HTTP/1.1 for Prometheus and probes.
async fn metrics_server(
    listener: TcpListener,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => return,
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let state = state.clone();
                async move {
                    let resp = match req.uri().path() {
                        "/metrics" => {
                            state
                                .metrics
                                .cert_expiry_seconds
                                .set(state.certs.seconds_until_expiry());
                            let mut r = text(StatusCode::OK, state.metrics.encode());
                            r.headers_mut().insert(
                                CONTENT_TYPE,
                                HeaderValue::from_static(
                                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                ),
                            );
                            r
                        }
                        "/healthz" => text(StatusCode::OK, "ok\n"),
                        "/readyz" => readiness(&state),
                        _ => text(StatusCode::NOT_FOUND, "not found\n"),
                    };
                    Ok::<_, Infallible>(resp)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(tcp), service);
            let _ = tokio::time::timeout(Duration::from_secs(60), conn).await;
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("/inject/a%2Fb"), "/inject/a/b");
        assert_eq!(percent_decode("/inject/%zz%4"), "/inject/%zz%4");
        assert_eq!(percent_decode("/inject/x%41"), "/inject/xA");
        assert_eq!(percent_decode("%"), "%");
    }
}
