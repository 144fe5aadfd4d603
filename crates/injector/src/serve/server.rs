//! The server's life: start (configuration, certificate, caBundle patcher, watches, listeners), serve
//! until SIGTERM or SIGINT, then drain.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::cluster::ca_bundle_patch::Patcher;
use crate::cluster::cluster_watch::ClusterWatch;
use crate::cluster::config_map_watch;
use crate::shared::metrics::{Metrics, ReloadResult};
use crate::shared::tls::{self, CertStore};
use crate::shared::webhook_config::read_ca_bundle;
use inject::cluster_state::ClusterState;
use inject::engine::Engine;

use super::admission;
use super::args::{Args, LogFormat};
use super::connections::{accept_loop, Timeouts};
use super::hot_reload::{cluster_changed, config_maps_changed, reload_loop};
use super::limits::{BodyBudget, Limiter};
use super::metrics_server::metrics_server;
use super::sources::Sources;
use super::state::{Phase, State};

/// Raises the soft limit of open files to the hard one, as Go's runtime does for Istio's injector at start
/// (`os/rlimit.go`): the default soft limit of 1024 is below `--max-connections` plus the process' own files.
pub(super) fn raise_open_files_limit() {
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

pub(super) fn init_logging(format: LogFormat) {
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

/// Starts the server from `args`, serves until a signal, then drains.
pub(super) async fn serve(args: Args) -> anyhow::Result<()> {
    // Installed before anything is announced (the log line, --port-file): a SIGTERM right after the
    // announcement must find the handler, not the default action that kills without draining.
    let signals = Signals::install()?;
    let provider = tls::crypto_provider();
    let metrics = Arc::new(Metrics::new());

    let client = args.kube.client().await?;
    let sources = sources(&args, client.as_ref()).await?;
    let engine = sources.load()?;
    metrics.config_reload(ReloadResult::Success);
    let pair = tls::load_pair(&args.tls_cert, &args.tls_key, &provider)
        .context("loading the serving certificate")?;
    metrics.cert_reload(ReloadResult::Success);
    let certs = Arc::new(CertStore::new(pair));
    metrics
        .cert_expiry_seconds
        .set(certs.seconds_until_expiry());
    let (ca, ca_bundle) = start_ca_bundle(&args, client.as_ref(), &metrics)?;
    let tls_config = tls::server_config(certs.clone(), provider.clone())?;
    let acceptor = TlsAcceptor::from(Arc::new(tls_config));
    let state = new_state(
        &args,
        engine,
        client.as_ref(),
        &sources,
        ca_bundle,
        &metrics,
        certs,
    );
    if let Some(client) = &client {
        watch_config_maps(client, &sources, &state);
    }
    start_policy_params(&args, client.as_ref(), &state)?;
    if args.blocking_pool {
        tracing::warn!("--blocking-pool has no effect: injections always run off the I/O threads");
    }

    let (listener, metrics_listener) = bind(&args).await?;
    let shutdown_rx = state.phase.subscribe();
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
    let accept = tokio::spawn(accept_loop(
        listener,
        acceptor,
        state.clone(),
        connections.clone(),
        Timeouts {
            handshake: Duration::from_secs(args.handshake_timeout_secs),
            header: Duration::from_secs(args.header_timeout_secs),
        },
        shutdown_rx,
    ));

    let signal = signals.recv().await;
    tracing::info!(
        signal,
        "shutting down: readiness off, finishing requests in flight"
    );
    state.phase.send_replace(Phase::Draining);
    if args.drain_delay_secs > 0 {
        tokio::time::sleep(Duration::from_secs(args.drain_delay_secs)).await;
    }
    state.phase.send_replace(Phase::Stopped);
    // The accept loop ends at once on the signal; its listener is dropped so new connections are refused.
    let _ = accept.await;
    drain(&args, &state, &connections).await;
    Ok(())
}

/// What the engine is built from: the files of `args`, or with a cluster `client` the ConfigMaps
/// (`--injector-configmap`, `--mesh-configmap`) and the watches' state in place of the files they
/// replace, each refused beside the file it replaces.
async fn sources(args: &Args, client: Option<&kube::Client>) -> anyhow::Result<Sources> {
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
    let config_maps = match client {
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
    Ok(Sources {
        config_maps,
        config: args.config.clone(),
        proxy_configs: args.proxy_configs.clone(),
        platform: args.platform.clone(),
        // Until the first sync: no resources, and readiness fails.
        watched: client.map(|_| {
            Arc::new(Mutex::new(ClusterState {
                proxy_configs: Some(Default::default()),
                openshift: args.platform.is_openshift(),
                ..ClusterState::default()
            }))
        }),
    })
}

/// The CA our webhook configurations must carry (`--ca-bundle`, with its sender for reloads), and its
/// patcher (`ca_bundle_patch`) when there is a cluster to patch.
fn start_ca_bundle(
    args: &Args,
    client: Option<&kube::Client>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<(CaSender, Option<Patcher>)> {
    match (client, &args.ca.ca_bundle) {
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
            Ok((Some((path.clone(), tx)), Some(patcher)))
        }
        (None, Some(path)) => {
            tracing::warn!(path = %path.display(), "--ca-bundle has no effect on serve without --kubeconfig or --in-cluster");
            Ok((None, None))
        }
        _ => Ok((None, None)),
    }
}

/// The `--ca-bundle` file and the sender of its reloads to the patcher.
type CaSender = Option<(PathBuf, watch::Sender<Arc<Vec<u8>>>)>;

/// The state every connection shares, with the cluster's watches started (each change rebuilds its
/// engine) when there is a cluster.
fn new_state(
    args: &Args,
    engine: Engine,
    client: Option<&kube::Client>,
    sources: &Sources,
    ca_bundle: Option<Patcher>,
    metrics: &Arc<Metrics>,
    certs: Arc<CertStore>,
) -> Arc<State> {
    let engine = Arc::new(engine);
    Arc::new_cyclic(|weak: &std::sync::Weak<State>| State {
        engines: watch::Sender::new(engine.clone()),
        engine: RwLock::new((0, engine)),
        rebuild: Mutex::new(()),
        cluster: match (client, &sources.watched) {
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
        ca_bundle,
        webhook: admission::Webhook::new(metrics.patch_cache.clone()),
        metrics: metrics.clone(),
        certs,
        phase: watch::Sender::new(Phase::Serving),
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
    })
}

/// With `--own-policy-params` and a cluster: the params object kept compiled from each engine swapped in.
fn start_policy_params(
    args: &Args,
    client: Option<&kube::Client>,
    state: &State,
) -> anyhow::Result<()> {
    if !args.policy_params.own_policy_params {
        return Ok(());
    }
    let Some(client) = client else {
        anyhow::bail!(
            "--own-policy-params writes to the cluster: give --kubeconfig or --in-cluster"
        );
    };
    crate::cluster::policy_params::start(
        client.clone(),
        &args.config.revision,
        &args.policy_params,
        state.engines.subscribe(),
        state.metrics.clone(),
    )
    .context("--own-policy-params")?;
    Ok(())
}

/// With `--injector-configmap` / `--mesh-configmap`: their watch, each change rebuilding the engine.
fn watch_config_maps(client: &kube::Client, sources: &Sources, state: &Arc<State>) {
    let Some((cm_args, docs)) = &sources.config_maps else {
        return;
    };
    let initial = docs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let (weak, sources, docs) = (Arc::downgrade(state), sources.clone(), docs.clone());
    config_map_watch::start(
        client.clone(),
        cm_args,
        initial,
        state.metrics.clone(),
        move |d| {
            if let Some(st) = weak.upgrade() {
                config_maps_changed(&st, &sources, &docs, d);
            }
        },
    );
}

/// The HTTPS and the metrics listeners, bound and announced (the log line, `--port-file`).
async fn bind(args: &Args) -> anyhow::Result<(TcpListener, TcpListener)> {
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
    Ok((listener, metrics_listener))
}

/// After the listener closed: the requests in flight finish (within `--shutdown-timeout-secs`) while the
/// caBundle patcher removes our record.
async fn drain(args: &Args, state: &State, connections: &Semaphore) {
    let deadline = Duration::from_secs(args.shutdown_timeout_secs);
    // No new connection reaches us now, and those open were verified already: our CA may leave the
    // caBundle while requests in flight finish.
    let release = async {
        if let Some(patcher) = &state.ca_bundle {
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
}

/// How long a shutdown waits for the caBundle patcher to remove our record (and CA): within the 5 s
/// the chart's grace period leaves beyond the drain delay and the shutdown timeout.
pub(super) const CA_RELEASE_DEADLINE: Duration = Duration::from_secs(5);

/// The signals that stop the server, handled from [`Signals::install`] on.
pub(super) struct Signals {
    pub(super) term: tokio::signal::unix::Signal,
    pub(super) int: tokio::signal::unix::Signal,
}

impl Signals {
    pub(super) fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// The name of the first signal received.
    pub(super) async fn recv(mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

pub(super) fn write_port_file(
    path: &PathBuf,
    https: SocketAddr,
    metrics: SocketAddr,
) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("https={https}\nmetrics={metrics}\n"))?;
    std::fs::rename(&tmp, path)
}
