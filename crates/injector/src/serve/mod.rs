//! `injector serve`: the MutatingAdmissionWebhook over HTTPS.
//!
//! The webhook is fail-closed in the cluster (a down or slow webhook blocks pod creation), so this module is
//! about staying up and answering fast: HTTP/1.1 and HTTP/2 over rustls, Istio's status codes (Istio's `webhook.go`
//! `serveInject`),
//! timeouts for slow clients, injections off the I/O threads under a concurrency limit and a per-review
//! deadline, a global budget of request-body bytes, a cap on connections that closes the oldest idle one
//! for a new one, hot reload of the certificate and of the configuration
//! (a broken new file keeps the last good one), metrics on a separate plain-HTTP port, and a graceful
//! shutdown on SIGTERM that finishes the requests in flight.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::cluster::cluster_watch::ClusterWatch;
use crate::cluster::config_map_watch::{self, ConfigMapArgs, Documents};
use crate::cluster::kube_client::KubeArgs;
use crate::serve::reload::Watch;
use crate::shared::metrics::{FailureType, Metrics, ReloadResult};
use crate::shared::tls::{self, CertStore};
use crate::shared::webhook_config::{read_ca_bundle, CaBundleArgs};
use inject::cluster_state::{ClusterState, PlatformArgs, ProxyConfigArgs};
use inject::config::{ConfigArgs, Settings};
use inject::engine::Engine;

pub mod admission;
pub(crate) mod reload;

use admission::OutcomeKind;

/// Istio's `MaxRequestBodyBytes` (`pkg/kube/util.go`): larger bodies are answered 400.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024;
/// After an oversized body, read (and discard) at most this much more so the client gets the 400 instead of
/// a connection reset from unread data; beyond it the connection is simply closed.
const MAX_DRAIN_BYTES: usize = 32 * 1024 * 1024;
/// Bodies from this size on are "large": they may use only part of the injection slots and of the body
/// budget, so that a few huge pods cannot starve ordinary ones (a typical pod's review is 2–20 KiB).
pub const LARGE_BODY_BYTES: usize = 256 * 1024;
/// Reviews smaller than this get their cheap part (decode, decision, cache) on the I/O thread: about
/// 0.1 ms of parsing at most, less than a hand-off to the blocking pool costs a typical review.
pub const INLINE_BODY_BYTES: usize = 64 * 1024;

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
    /// With either, ProxyConfigs (and Namespaces with `--platform openshift`, Nodes with
    /// `--native-sidecars auto`) are watched in the cluster instead of read from `--proxy-configs` /
    /// `--namespaces` (`/readyz` fails until the first full list).
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub ca: CaBundleArgs,
    #[command(flatten)]
    pub webhook_config_names: crate::cluster::ca_bundle_patch::WebhookConfigNamesArgs,
    #[command(flatten)]
    pub config_maps: ConfigMapArgs,
    /// HTTPS address of the webhook (`127.0.0.1:0` picks a free port; see `--port-file`).
    #[arg(long, env = "INJECTOR_LISTEN", default_value = "0.0.0.0:15017", value_parser = listen_address)]
    pub listen: SocketAddr,
    /// PEM certificate chain served (reloaded when the file changes).
    #[arg(long, env = "INJECTOR_TLS_CERT")]
    pub tls_cert: PathBuf,
    /// PEM private key of the certificate (reloaded when the file changes).
    #[arg(long, env = "INJECTOR_TLS_KEY")]
    pub tls_key: PathBuf,
    /// Plain-HTTP address for `/metrics`, `/healthz` and `/readyz`.
    #[arg(
        long,
        env = "INJECTOR_METRICS_LISTEN",
        default_value = "0.0.0.0:15014",
        value_parser = listen_address
    )]
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
    /// Most HTTPS connections open at once. At the cap, a new connection is accepted and the oldest idle
    /// one (in its TLS handshake or between requests) is closed; only when every connection has a request
    /// in flight do new ones wait in the kernel's accept queue.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Seconds a client has to complete the TLS handshake.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub handshake_timeout_secs: u64,
    /// Seconds a client has to send a request's headers.
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
    /// Injections running at once (default: twice the CPUs, at least 4). Reviews wait for a slot until
    /// their deadline.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_injections: Option<u32>,
    /// Of those, injections of bodies of 256 KiB or more (at most a quarter of the slots, at least one):
    /// their working set is many times their body (a 5 MiB review's injection peaks near 100 MiB), so
    /// by default one at a time.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_large_injections: u32,
    /// Milliseconds from a review's arrival until it is answered `allowed: false` if its injection has
    /// not finished (or not started); keep it below the webhook entry's `timeoutSeconds` (10 s by
    /// default), so that the API server gets this answer rather than its own timeout.
    #[arg(long, default_value_t = 8000, value_parser = clap::value_parser!(u64).range(1..))]
    pub review_deadline_ms: u64,
    /// Bytes of request bodies held at once across all connections; a request that would pass it is
    /// answered 503 with `Retry-After: 1`. Bodies of 256 KiB or more may use only three quarters of it.
    #[arg(long, default_value_t = DEFAULT_BODY_BUDGET, value_parser = clap::value_parser!(u64).range(MAX_BODY_BYTES as u64..))]
    pub max_body_bytes_in_flight: u64,
    /// No effect: injections always run off the I/O threads now (kept so that existing command lines
    /// still parse).
    #[arg(long, hide = true)]
    pub blocking_pool: bool,
}

/// The default of `--max-body-bytes-in-flight`: five bodies at Istio's 6 MiB limit (see docs/operations.md,
/// "Memory").
pub const DEFAULT_BODY_BUDGET: u64 = 32 * 1024 * 1024;

/// State shared by all connections.
struct State {
    /// The engine of the current configuration and the configuration's generation number (bumped on
    /// every reload, for the patch cache's key).
    engine: RwLock<(u64, Arc<Engine>)>,
    /// Held from reading what a new engine is built from to its swap, so that a configuration reload
    /// and a cluster change never build from each other's stale half.
    rebuild: Mutex<()>,
    /// The watches of `--kubeconfig` / `--in-cluster`, for readiness.
    cluster: Option<ClusterWatch>,
    /// The caBundle patcher of `--ca-bundle` with a cluster, for readiness and its release on shutdown.
    ca_bundle: Option<crate::cluster::ca_bundle_patch::Patcher>,
    webhook: admission::Webhook,
    metrics: Arc<Metrics>,
    certs: Arc<CertStore>,
    shutting_down: AtomicBool,
    body_timeout: Duration,
    review_deadline: Duration,
    limiter: Limiter,
    bodies: Arc<BodyBudget>,
}

impl State {
    fn engine(&self) -> (u64, Arc<Engine>) {
        self.engine
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Swaps in a new engine under a new generation (the patch cache's key).
    fn swap_engine(&self, engine: Engine) {
        let engine = Arc::new(engine);
        let mut current = self.engine.write().unwrap_or_else(|e| e.into_inner());
        *current = (current.0.wrapping_add(1), engine);
    }
}

/// The injection slots: every injection holds one of `all`; one with a large body also holds one of
/// `large` (at most a quarter of them), so that huge pods leave most slots to ordinary ones and their
/// working sets do not add up.
struct Limiter {
    all: Arc<Semaphore>,
    large: Arc<Semaphore>,
}

/// The slots an injection holds until it ends, answered or not.
struct Slots {
    _all: OwnedSemaphorePermit,
    _large: Option<OwnedSemaphorePermit>,
}

impl Limiter {
    fn new(slots: usize, large: usize) -> Limiter {
        Limiter {
            all: Arc::new(Semaphore::new(slots.max(1))),
            large: Arc::new(Semaphore::new(large.min(slots / 4).max(1))),
        }
    }

    /// Waits for the slots of a review with a `body_len`-byte body (`None` only if closed, which never
    /// happens).
    async fn acquire(&self, body_len: usize) -> Option<Slots> {
        let large = if body_len >= LARGE_BODY_BYTES {
            Some(self.large.clone().acquire_owned().await.ok()?)
        } else {
            None
        };
        let all = self.all.clone().acquire_owned().await.ok()?;
        Some(Slots {
            _all: all,
            _large: large,
        })
    }
}

/// The global budget of request-body bytes held across all connections.
#[derive(Debug)]
struct BodyBudget {
    limit: usize,
    /// What large bodies may use at most: the rest stays for ordinary reviews.
    large_limit: usize,
    used: AtomicUsize,
    metrics: Arc<Metrics>,
}

/// Bytes reserved in a [`BodyBudget`], given back when dropped.
#[derive(Debug)]
struct Reservation {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl BodyBudget {
    fn new(limit: usize, metrics: Arc<Metrics>) -> BodyBudget {
        BodyBudget {
            limit,
            large_limit: limit - limit / 4,
            used: AtomicUsize::new(0),
            metrics,
        }
    }

    /// Takes `n` more bytes if they fit under the limit for a body that will be `total` bytes (large
    /// bodies fit under the lower limit).
    fn take(&self, n: usize, total: usize) -> bool {
        let limit = if total >= LARGE_BODY_BYTES {
            self.large_limit
        } else {
            self.limit
        };
        let ok = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&u| u <= limit)
            })
            .is_ok();
        if ok {
            self.metrics.body_bytes_in_flight.inc_by(n as i64);
        }
        ok
    }

    fn reserve(self: &Arc<Self>, n: usize) -> Option<Reservation> {
        self.take(n, n).then(|| Reservation {
            budget: self.clone(),
            bytes: n,
        })
    }
}

impl Reservation {
    /// Grows the reservation to `total` bytes; false (and unchanged) when over budget.
    fn grow_to(&mut self, total: usize) -> bool {
        if total <= self.bytes {
            return true;
        }
        if !self.budget.take(total - self.bytes, total) {
            return false;
        }
        self.bytes = total;
        true
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        self.budget
            .metrics
            .body_bytes_in_flight
            .dec_by(self.bytes as i64);
    }
}

/// One open HTTPS connection as the accept loop sees it.
#[derive(Debug)]
struct ConnState {
    started: Instant,
    /// Requests in flight; 0 means idle (in the handshake or between requests).
    busy: AtomicUsize,
    /// Notified when the connection is to close to make room at the cap.
    close: Notify,
}

/// The open connections, for closing the oldest idle one at the cap.
#[derive(Debug, Default)]
struct Registry {
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
}

/// A registered connection; unregisters when dropped.
struct Registered {
    registry: Arc<Registry>,
    id: u64,
    state: Arc<ConnState>,
}

impl Registry {
    fn register(self: &Arc<Self>) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState {
            started: Instant::now(),
            busy: AtomicUsize::new(0),
            close: Notify::new(),
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
    fn close_oldest_idle(&self) -> bool {
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
struct Busy(Arc<ConnState>);

impl Busy {
    fn new(c: Arc<ConnState>) -> Busy {
        c.busy.fetch_add(1, Ordering::AcqRel);
        Busy(c)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts an injection in `injector_injections_in_flight` while alive.
struct Running(Arc<Metrics>);

impl Running {
    fn new(m: Arc<Metrics>) -> Running {
        m.injections_in_flight.inc();
        Running(m)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.injections_in_flight.dec();
    }
}

/// Raises the soft limit of open files to the hard one, as Go's runtime does for Istio's injector at start
/// (`os/rlimit.go`): the default soft limit of 1024 is below `--max-connections` plus the process' own files.
fn raise_open_files_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(soft, hard, error = %e, "could not raise the open-files limit");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not read the open-files limit"),
    }
}

/// Runs `injector serve` until SIGTERM/SIGINT.
pub fn run(args: Args) -> anyhow::Result<()> {
    init_logging(args.log_format);
    raise_open_files_limit();
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

/// A listen address, `IP:PORT`: std's parser says only "invalid socket address syntax", so a port out
/// of range or a missing port is named here.
fn listen_address(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let expected = "expected IP:PORT, e.g. 0.0.0.0:15017 or [::]:15017";
    // A bare IPv6 address (`::1`) has colons but no port.
    let split = s
        .rsplit_once(':')
        .filter(|_| s.parse::<std::net::Ipv6Addr>().is_err());
    match split {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !port.is_empty() => {
            let host_ok = host.parse::<std::net::Ipv4Addr>().is_ok()
                || host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok());
            if host_ok {
                Err(format!("port {port} is out of range (0-65535)"))
            } else {
                Err(format!("{host:?} is not an IP address ({expected})"))
            }
        }
        _ => Err(format!("{expected}, with a port 0-65535")),
    }
}

fn init_logging(format: LogFormat) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: a log written to a file or a pipe (kubectl logs, a CI log) would
    // otherwise carry ANSI escape codes.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
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

/// What the engine is built from: the configuration files and the cluster state files, reloaded together;
/// or, with a cluster client, the configuration files and the last state the watches handed over.
#[derive(Debug, Clone)]
struct Sources {
    config: ConfigArgs,
    proxy_configs: ProxyConfigArgs,
    platform: PlatformArgs,
    watched: Option<Arc<Mutex<ClusterState>>>,
    /// `--injector-configmap` / `--mesh-configmap`: the documents last read through the API.
    config_maps: Option<(ConfigMapArgs, Arc<Mutex<Documents>>)>,
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
        let settings = match &self.config_maps {
            Some((args, docs)) => {
                let d = docs.lock().unwrap_or_else(|e| e.into_inner()).clone();
                fn text(d: &Option<config_map_watch::Document>) -> Option<(&str, &str)> {
                    d.as_ref().map(|d| (d.source.as_str(), d.text.as_str()))
                }
                // A deleted ConfigMap is not a configuration: the last one stays (Istio's watcher
                // only ever hands over a ConfigMap it read).
                if args.injector.is_some() && d.values.is_none() && d.config.is_none() {
                    anyhow::bail!(
                        "ConfigMap {}/{} has neither a config nor a values key (deleted?)",
                        args.namespace,
                        args.injector.as_deref().unwrap_or_default()
                    );
                }
                Settings::from_texts(
                    text(&d.values),
                    text(&d.mesh),
                    text(&d.config),
                    &self.config,
                )
                .context("loading the injector configuration from its ConfigMaps")?
            }
            None => Settings::load(&self.config).context("loading the injector configuration")?,
        };
        let cluster = match &self.watched {
            Some(w) => w.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            None => ClusterState::load(&self.proxy_configs, Some(&self.platform))
                .context("loading the cluster state (--proxy-configs, --namespaces)")?,
        };
        for w in &cluster.warnings {
            tracing::warn!("{w}");
        }
        Ok(Engine::new(settings).with_cluster(cluster))
    }
}

async fn serve(args: Args) -> anyhow::Result<()> {
    // Installed before anything is announced (the log line, --port-file): a SIGTERM right after the
    // announcement must find the handler, not the default action that kills without draining.
    let signals = Signals::install()?;
    let provider = tls::crypto_provider();
    let metrics = Arc::new(Metrics::new());

    let client = args.kube.client().await?;
    if client.is_some() {
        if let Some(flag) = [
            args.proxy_configs
                .proxy_configs
                .as_ref()
                .map(|_| "--proxy-configs"),
            args.platform.namespaces.as_ref().map(|_| "--namespaces"),
        ]
        .into_iter()
        .flatten()
        .next()
        {
            anyhow::bail!("{flag} is read from files; with --kubeconfig or --in-cluster the cluster is watched instead, so give one or the other");
        }
    }
    let config_maps = match &client {
        _ if !args.config_maps.wanted() => None,
        None => anyhow::bail!(
            "--injector-configmap and --mesh-configmap read the cluster: give --kubeconfig or --in-cluster"
        ),
        Some(_) if !args.config.watched_paths().is_empty() => anyhow::bail!(
            "--injector-configmap / --mesh-configmap replace --values, --injector-config, --mesh-config and --config-dir; give one or the other"
        ),
        Some(client) => {
            let docs = config_map_watch::read(client, &args.config_maps).await?;
            Some((args.config_maps.clone(), Arc::new(Mutex::new(docs))))
        }
    };
    let sources = Sources {
        config_maps,
        config: args.config.clone(),
        proxy_configs: args.proxy_configs.clone(),
        platform: args.platform.clone(),
        // Until the first sync: no resources, and readiness fails.
        watched: client.as_ref().map(|_| {
            Arc::new(Mutex::new(ClusterState {
                proxy_configs: Some(Default::default()),
                openshift: args.platform.is_openshift(),
                ..ClusterState::default()
            }))
        }),
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
    // The CA our webhook configurations must carry, patched in by `ca_bundle_patch`.
    let (ca, ca_bundle) = match (&client, &args.ca.ca_bundle) {
        (Some(client), Some(path)) => {
            let (tx, rx) = watch::channel(Arc::new(read_ca_bundle(path)?));
            let revision = crate::cluster::ca_bundle_patch::revision_label(&args.config.revision);
            let patcher = crate::cluster::ca_bundle_patch::start(
                client.clone(),
                revision.to_string(),
                args.webhook_config_names.webhook_config_names.clone(),
                rx,
                metrics.clone(),
            )
            .with_context(|| format!("--ca-bundle {}", path.display()))?;
            (Some((path.clone(), tx)), Some(patcher))
        }
        (None, Some(path)) => {
            tracing::warn!(path = %path.display(), "--ca-bundle has no effect on serve without --kubeconfig or --in-cluster");
            (None, None)
        }
        _ => (None, None),
    };
    let tls_config = tls::server_config(certs.clone(), provider.clone())?;
    let acceptor = TlsAcceptor::from(Arc::new(tls_config));

    let state = Arc::new_cyclic(|weak: &std::sync::Weak<State>| State {
        engine: RwLock::new((0, Arc::new(engine))),
        rebuild: Mutex::new(()),
        cluster: match (&client, &sources.watched) {
            (Some(client), Some(watched)) => {
                let (weak, watched) = (weak.clone(), watched.clone());
                Some(ClusterWatch::start(
                    client.clone(),
                    args.platform.is_openshift(),
                    args.config.native_sidecars == inject::config::NativeSidecars::Auto,
                    metrics.clone(),
                    move |cluster| {
                        if let Some(st) = weak.upgrade() {
                            cluster_changed(&st, &watched, cluster);
                        }
                    },
                ))
            }
            _ => None,
        },
        ca_bundle: ca_bundle.clone(),
        webhook: admission::Webhook::new(metrics.patch_cache.clone()),
        metrics: metrics.clone(),
        certs: certs.clone(),
        shutting_down: AtomicBool::new(false),
        body_timeout: Duration::from_secs(args.body_timeout_secs),
        review_deadline: Duration::from_millis(args.review_deadline_ms),
        limiter: Limiter::new(
            args.max_concurrent_injections.map_or_else(
                || {
                    std::thread::available_parallelism()
                        .map_or(2, |n| n.get())
                        .saturating_mul(2)
                        .max(4)
                },
                |n| n as usize,
            ),
            args.max_large_injections as usize,
        ),
        bodies: Arc::new(BodyBudget::new(
            usize::try_from(args.max_body_bytes_in_flight).unwrap_or(usize::MAX),
            metrics.clone(),
        )),
    });
    if let (Some(client), Some((cm_args, docs))) = (&client, &sources.config_maps) {
        let initial = docs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let (weak, sources, docs) = (Arc::downgrade(&state), sources.clone(), docs.clone());
        config_map_watch::start(
            client.clone(),
            cm_args,
            initial,
            metrics.clone(),
            move |d| {
                if let Some(st) = weak.upgrade() {
                    config_maps_changed(&st, &sources, &docs, d);
                }
            },
        );
    }
    if args.blocking_pool {
        tracing::warn!("--blocking-pool has no effect: injections always run off the I/O threads");
    }

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
        ca,
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
        Timeouts {
            handshake: Duration::from_secs(args.handshake_timeout_secs),
            header: Duration::from_secs(args.header_timeout_secs),
        },
        shutdown_rx.clone(),
    );
    let accept = tokio::spawn(accept);

    let signal = signals.recv().await;
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
    // No new connection reaches us now, and those open were verified already: our CA may leave the
    // caBundle while requests in flight finish.
    let release = async {
        if let Some(patcher) = &ca_bundle {
            if !patcher.release(CA_RELEASE_DEADLINE).await {
                tracing::warn!(
                    "our caBundle record was not removed in time; it expires on its own"
                );
            }
        }
    };
    let drain = tokio::time::timeout(deadline, connections.acquire_many(args.max_connections));
    match tokio::join!(drain, release).0 {
        Ok(_) => tracing::info!("all connections closed; exiting"),
        Err(_) => tracing::warn!(
            open = args.max_connections as usize - connections.available_permits(),
            "shutdown deadline reached with connections still open; exiting"
        ),
    }
    Ok(())
}

/// How long a shutdown waits for the caBundle patcher to remove our record (and CA): within the 5 s
/// the chart's grace period leaves beyond the drain delay and the shutdown timeout.
const CA_RELEASE_DEADLINE: Duration = Duration::from_secs(5);

/// Resolves once shutdown has been signalled (the guard of `wait_for` is not `Send`, so drop it here).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// The signals that stop the server, handled from [`Signals::install`] on.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// The name of the first signal received.
    async fn recv(mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

fn write_port_file(path: &PathBuf, https: SocketAddr, metrics: SocketAddr) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("https={https}\nmetrics={metrics}\n"))?;
    std::fs::rename(&tmp, path)
}

/// How long the accept loop waits at the cap before looking again for an idle connection to close.
const CAP_RECHECK: Duration = Duration::from_millis(50);

/// How long an idle connection told to close may take to finish (an HTTP/2 GOAWAY; an HTTP/1 connection
/// between requests closes at once).
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

struct Timeouts {
    handshake: Duration,
    header: Duration,
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<State>,
    connections: Arc<Semaphore>,
    timeouts: Timeouts,
    mut shutdown: watch::Receiver<bool>,
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

async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    state: Arc<State>,
    conn_state: &Arc<ConnState>,
    timeouts: &Timeouts,
    mut shutdown: watch::Receiver<bool>,
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
    let service = service_fn(move |req| {
        let state = state.clone();
        // Counted as soon as the headers are in, so the connection is not taken for idle.
        let busy = Busy::new(counted.clone());
        async move {
            let resp = route(state, req).await;
            drop(busy);
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
        _ = stopped(&mut shutdown) => {
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
    } else if state.cluster.as_ref().is_some_and(|c| !c.synced()) {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the first list of the cluster watches\n",
        )
    } else if state.ca_bundle.as_ref().is_some_and(|p| !p.ready()) {
        // A call the API server routed here would fail its TLS verification.
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for our CA in the webhook configurations' caBundle\n",
        )
    } else {
        text(StatusCode::OK, "ok\n")
    }
}

/// Why a body could not be read.
enum BodyError {
    TooLarge,
    TimedOut,
    /// The global budget of body bytes in flight (`--max-body-bytes-in-flight`) would be passed.
    OverBudget,
    Broken(String),
}

/// Reads the body up to `limit` bytes within `timeout`, holding its bytes in `budget`: a declared length
/// is reserved (and allocated) up front, a body of unknown length (chunked, or HTTP/2 without the header)
/// as its buffer grows. An oversized body is drained (bounded, not kept) so that the client, still
/// writing, reads the 400 rather than a reset.
async fn read_body(
    mut body: Incoming,
    limit: usize,
    timeout: Duration,
    budget: &Arc<BodyBudget>,
) -> Result<(Bytes, Reservation), BodyError> {
    let declared = body.size_hint().exact();
    let deadline = tokio::time::Instant::now() + timeout;
    let oversized = declared.is_some_and(|n| n > limit as u64);
    let initial = match declared {
        Some(n) if !oversized => n as usize,
        _ => 0,
    };
    let mut reservation = budget.reserve(initial).ok_or(BodyError::OverBudget)?;
    let mut buf = BytesMut::with_capacity(initial);
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
            if seen > limit || oversized {
                if seen > MAX_DRAIN_BYTES {
                    return Err(BodyError::TooLarge);
                }
                buf = BytesMut::new();
                continue;
            }
            if seen > buf.capacity() {
                // Unknown length: grow by doubling (at most to the limit), reserving before allocating.
                let want = seen.max(buf.capacity().saturating_mul(2)).min(limit);
                if !reservation.grow_to(want) {
                    return Err(BodyError::OverBudget);
                }
                buf.reserve(want - buf.len());
            }
            buf.extend_from_slice(&data);
        }
    }
    if seen > limit || oversized {
        return Err(BodyError::TooLarge);
    }
    Ok((buf.freeze(), reservation))
}

async fn inject(state: Arc<State>, req: Request<Incoming>) -> Resp {
    let start = Instant::now();
    let metrics = &state.metrics;
    metrics.requests.inc();
    let resp = inject_inner(&state, req, start).await;
    metrics.time.observe(start.elapsed().as_secs_f64());
    resp
}

/// Marks an HTTP/1 answer as the connection's last (the rest of the body may still be in flight; HTTP/2
/// resets just the stream, and forbids the header).
fn close_after(r: &mut Resp, version: hyper::Version) {
    if version < hyper::Version::HTTP_2 {
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
}

async fn inject_inner(state: &Arc<State>, req: Request<Incoming>, start: Instant) -> Resp {
    let metrics = &state.metrics;
    let deadline = start + state.review_deadline;
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
        read_body(body, MAX_BODY_BYTES, state.body_timeout, &state.bodies).await
    };
    let (body, reservation) = match body {
        Ok(b) => b,
        Err(BodyError::OverBudget) => {
            metrics.failure(FailureType::Overloaded);
            tracing::warn!(path = %path, "rejected request: request bodies in flight over --max-body-bytes-in-flight");
            let mut r = text(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many request bodies in flight (--max-body-bytes-in-flight); retry\n",
            );
            r.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            close_after(&mut r, parts.version);
            return r;
        }
        Err(e) => {
            metrics.failure(FailureType::BodyRead);
            let msg = match e {
                BodyError::TooLarge => {
                    format!("Request entity too large: limit is {MAX_BODY_BYTES}")
                }
                BodyError::TimedOut => "timed out reading the request body".to_string(),
                BodyError::Broken(e) => format!("reading the request body: {e}"),
                BodyError::OverBudget => String::new(),
            };
            tracing::warn!(path = %path, error = %msg, "rejected request");
            let mut r = text(StatusCode::BAD_REQUEST, msg);
            close_after(&mut r, parts.version);
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

    // A small review's cheap part (decoding, the decision, a cached patch) costs about its parse, so it
    // is answered here: most reviews are skips or a workload's replicas, and a hand-off to the blocking
    // pool would cost them more than the work. Only the engine's injection leaves the I/O threads.
    let (generation, engine) = state.engine();
    let cheap = if body.len() < INLINE_BODY_BYTES {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            state
                .webhook
                .answer_cheap(&engine, generation, &body, &path)
        }))
        .transpose()
    } else {
        None
    };
    let outcome = match cheap {
        Some(answered) => answered,
        None => {
            // Injections run on the blocking pool, never on the I/O threads that also answer probes and other
            // reviews, each holding its slots (and its body's bytes) until it actually ends.
            let deadline_at = tokio::time::Instant::from_std(deadline);
            let slots =
                match tokio::time::timeout_at(deadline_at, state.limiter.acquire(body.len())).await
                {
                    Ok(Some(slots)) => slots,
                    _ => {
                        return past_deadline(state, body, path, "waiting for an injection slot")
                            .await
                    }
                };
            let task = {
                let state = Arc::clone(state);
                let body = body.clone();
                let path = path.clone();
                let running = Running::new(state.metrics.clone());
                tokio::task::spawn_blocking(move || {
                    let held = (slots, reservation, running);
                    // A panic in the engine is a bug, but must cost one request, not the connection or the process.
                    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        state.webhook.handle(&engine, generation, &body, &path)
                    }));
                    drop(held);
                    r
                })
            };
            match tokio::time::timeout_at(deadline_at, task).await {
                Err(_) => return past_deadline(state, body, path, "injecting").await,
                Ok(Ok(r)) => r,
                Ok(Err(_)) => {
                    Err(Box::new("injection task cancelled") as Box<dyn std::any::Any + Send>)
                }
            }
        }
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
    respond(state, outcome, decision, &path, start)
}

/// Writes a review's answer, logs it and counts it (Istio counts every written review as a success,
/// `allowed: false` included).
fn respond(
    state: &State,
    outcome: admission::ReviewOutcome,
    decision: &str,
    path: &str,
    start: Instant,
) -> Resp {
    state.metrics.success.inc();
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

/// The answer to a review not injected by its deadline: `allowed: false` saying so, counted as a
/// `deadline` failure. Its uid is read off the I/O threads (the body may be megabytes).
async fn past_deadline(state: &Arc<State>, body: Bytes, path: String, doing: &str) -> Resp {
    let start = Instant::now();
    let limit = state.review_deadline;
    let message = format!(
        "sidecar injection did not finish within the webhook's deadline of {} ms \
         (--review-deadline-ms; the injector was busy {doing}); the pod was not injected",
        limit.as_millis()
    );
    state.metrics.failure(FailureType::Deadline);
    let outcome = match tokio::task::spawn_blocking(move || admission::refuse(&body, message)).await
    {
        Ok(o) => o,
        Err(_) => return text(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    };
    respond(state, outcome, "deadline", &path, start)
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
    ca: Option<(PathBuf, watch::Sender<Arc<Vec<u8>>>)>,
    interval: Duration,
) {
    let mut config_watch = Watch::new(config.paths());
    let mut cert_watch = Watch::new(vec![cert.clone(), key.clone()]);
    let mut ca_watch = Watch::new(ca.iter().map(|(p, _)| p.clone()).collect());
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let st = state.clone();
        let provider = provider.clone();
        let config = config.clone();
        let (cert, key) = (cert.clone(), key.clone());
        let ca = ca.clone();
        // File reads and config parsing block; keep them off the request workers.
        let moved = tokio::task::spawn_blocking(move || {
            if config_watch.changed() {
                let rebuild = st.rebuild.lock().unwrap_or_else(|e| e.into_inner());
                match config.load() {
                    Ok(engine) => {
                        st.swap_engine(engine);
                        drop(rebuild);
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
            if let Some((path, tx)) = ca.filter(|_| ca_watch.changed()) {
                match read_ca_bundle(&path) {
                    Ok(pem) => {
                        tracing::info!(path = %path.display(), "serving CA reloaded");
                        tx.send_replace(Arc::new(pem));
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "CA bundle reload failed; keeping the previous CA");
                    }
                }
            }
            st.metrics
                .cert_expiry_seconds
                .set(st.certs.seconds_until_expiry());
            (config_watch, cert_watch, ca_watch)
        })
        .await;
        match moved {
            Ok((c, k, a)) => {
                config_watch = c;
                cert_watch = k;
                ca_watch = a;
            }
            Err(e) => {
                // Only a panic in a loader gets here; reloading stops but serving goes on.
                tracing::error!(error = %e, "reload task failed; hot reload disabled");
                return;
            }
        }
    }
}

/// A new cluster state from the watches: the current engine with it (the configuration shared, nothing
/// parsed again), swapped in for the next admission. The state shares what did not change with the
/// last, so this costs the same with 10 objects as with 20,000.
fn cluster_changed(state: &State, watched: &Mutex<ClusterState>, cluster: ClusterState) {
    let _rebuild = state.rebuild.lock().unwrap_or_else(|e| e.into_inner());
    *watched.lock().unwrap_or_else(|e| e.into_inner()) = cluster.clone();
    let engine = state.engine().1.with_cluster_state(cluster);
    state.swap_engine(engine);
    tracing::info!("cluster state changed; engine rebuilt");
}

/// New ConfigMap documents: the engine rebuilt from them with the current cluster state, or the last
/// configuration kept when they do not load.
fn config_maps_changed(state: &State, sources: &Sources, docs: &Mutex<Documents>, new: Documents) {
    let _rebuild = state.rebuild.lock().unwrap_or_else(|e| e.into_inner());
    let old = std::mem::replace(&mut *docs.lock().unwrap_or_else(|e| e.into_inner()), new);
    match sources.load() {
        Ok(engine) => {
            state.swap_engine(engine);
            state.metrics.config_reload(ReloadResult::Success);
            tracing::info!("configuration reloaded from its ConfigMaps");
        }
        Err(e) => {
            // The documents that built the running engine stay the ones the next cluster change uses.
            *docs.lock().unwrap_or_else(|e| e.into_inner()) = old;
            state.metrics.config_reload(ReloadResult::Failure);
            tracing::error!(error = %format!("{e:#}"), "configuration from the ConfigMaps failed to load; keeping the previous configuration");
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
    fn a_listen_address_out_of_range_names_the_port_range() {
        assert_eq!(
            listen_address("127.0.0.1:15017"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 15017)))
        );
        assert_eq!(
            listen_address("[::1]:0"),
            Ok("[::1]:0".parse().expect("address"))
        );
        for (value, want) in [
            ("127.0.0.1:99999", "port 99999 is out of range (0-65535)"),
            ("[::]:65536", "port 65536 is out of range (0-65535)"),
            (
                "localhost:15017",
                "\"localhost\" is not an IP address (expected IP:PORT, e.g. 0.0.0.0:15017 or [::]:15017)",
            ),
            (
                "::1",
                "expected IP:PORT, e.g. 0.0.0.0:15017 or [::]:15017, with a port 0-65535",
            ),
            (
                "127.0.0.1",
                "expected IP:PORT, e.g. 0.0.0.0:15017 or [::]:15017, with a port 0-65535",
            ),
        ] {
            assert_eq!(listen_address(value), Err(want.to_string()), "{value}");
        }
    }

    #[test]
    fn body_budget_reserves_releases_and_keeps_room_for_small_bodies() {
        let metrics = Arc::new(Metrics::new());
        let budget = Arc::new(BodyBudget::new(8 << 20, metrics.clone()));
        // Large bodies may use three quarters (6 MiB) of the 8 MiB.
        let big = budget.reserve(5 << 20).unwrap();
        assert!(
            budget.reserve(2 << 20).is_none(),
            "over the large bodies' share"
        );
        let small = budget.reserve(100 << 10).unwrap();
        assert_eq!(metrics.body_bytes_in_flight.get(), (5 << 20) + (100 << 10));
        // A growing (chunked) body is held to the same limits.
        let mut chunked = budget.reserve(0).unwrap();
        assert!(chunked.grow_to(200 << 10));
        assert!(!chunked.grow_to(4 << 20), "grew past the budget");
        assert_eq!(chunked.bytes, 200 << 10);
        drop((big, small, chunked));
        assert_eq!(budget.used.load(Ordering::Acquire), 0);
        assert_eq!(metrics.body_bytes_in_flight.get(), 0);
        assert!(budget.reserve(6 << 20).is_some());
    }

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

    #[tokio::test]
    async fn large_bodies_hold_at_most_a_quarter_of_the_slots() {
        assert_eq!(Limiter::new(8, 1).large.available_permits(), 1);
        assert_eq!(Limiter::new(4, 3).large.available_permits(), 1);
        let limiter = Limiter::new(8, 4);
        let a = limiter.acquire(LARGE_BODY_BYTES).await.unwrap();
        let b = limiter.acquire(LARGE_BODY_BYTES).await.unwrap();
        let third =
            tokio::time::timeout(Duration::from_millis(50), limiter.acquire(LARGE_BODY_BYTES))
                .await;
        assert!(third.is_err(), "a third large body got a slot of 8");
        let small: Vec<Slots> = futures_small(&limiter, 6).await;
        assert_eq!(limiter.all.available_permits(), 0);
        drop((a, b, small));
        assert_eq!(limiter.all.available_permits(), 8);
    }

    async fn futures_small(limiter: &Limiter, n: usize) -> Vec<Slots> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(limiter.acquire(100).await.unwrap());
        }
        v
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("/inject/a%2Fb"), "/inject/a/b");
        assert_eq!(percent_decode("/inject/%zz%4"), "/inject/%zz%4");
        assert_eq!(percent_decode("/inject/x%41"), "/inject/xA");
        assert_eq!(percent_decode("%"), "%");
    }
}
