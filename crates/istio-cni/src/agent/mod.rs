//! `istio-cni install`, the node agent (a DaemonSet pod): Istio's install-cni (`cni/pkg/cmd/root.go`,
//! `cni/pkg/install`) for sidecar pods.
//!
//! Flow: the flags (`cli`) → the health listener (`health`: `/readyz`, `/metrics` from `metrics`) → the
//! plugin's log followed to stdout (`log_follow`) → race repair (`crate::repair`) → the install loop
//! (`install`: the binary copied and the kubeconfig written through `atomic_file`, our entry put into
//! the node's configuration by `cni_config`, each pass on a blocking thread; then the folders watched
//! with inotify (`watch`, a slow poll as the fallback) and the pass run again on a change) → the Node's
//! `cni.istio.io/not-ready` taint removed once ready (`untaint`) → on SIGTERM or SIGINT, at once, even
//! mid-copy: `Installer::cleanup` (which stops the pass in progress) and exit 0.

pub mod atomic_file;
pub mod bounded_read;
pub mod cli;
pub mod cni_config;
pub mod health;
pub mod install;
pub mod kubeconfig;
pub mod log_follow;
pub mod metrics;
pub mod untaint;
pub mod watch;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::signal::unix::{signal, SignalKind};

use cli::Settings;
use health::State;
use install::{InstallError, Installer};

/// Why the agent stopped with a failure.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The async runtime, the signal handlers or the listener cannot be set up.
    #[error("{what}: {source}")]
    Setup {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The agent's own API client cannot be made from `--kubeconfig` or the pod's service account.
    #[error("the agent's API client ({from}): {what}")]
    Client { from: String, what: String },
    /// Cleaning up on shutdown failed.
    #[error("cleanup: {0}")]
    Cleanup(#[source] InstallError),
}

fn setup(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> AgentError {
    let what = what.into();
    move |source| AgentError::Setup { what, source }
}

async fn client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client, AgentError> {
    let from = kubeconfig.map_or("in-cluster".to_string(), |p| {
        format!("--kubeconfig {}", p.display())
    });
    let fail = |what: String| AgentError::Client {
        from: from.clone(),
        what,
    };
    let mut config = match kubeconfig {
        Some(path) => {
            let bytes = bounded_read::read(path, bounded_read::Links::Follow)
                .map_err(|e| fail(e.to_string()))?;
            let kc = Kubeconfig::from_yaml(&String::from_utf8_lossy(&bytes))
                .map_err(|e| fail(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| fail(e.to_string()))?
        }
        None => kube::Config::incluster().map_err(|e| fail(e.to_string()))?,
    };
    config.connect_timeout = Some(Duration::from_secs(10));
    kube::Client::try_from(config).map_err(|e| fail(e.to_string()))
}

/// Runs the agent until SIGTERM or SIGINT, then cleans up. Builds its own runtime.
pub fn run(settings: Settings) -> Result<(), AgentError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(setup("starting the async runtime"))?;
    let result = runtime.block_on(run_async(settings));
    // An install pass still in a blocking call (the cleanup stopped it: it gives up at its next chunk
    // and renames nothing) is not waited for.
    runtime.shutdown_background();
    result
}

async fn run_async(settings: Settings) -> Result<(), AgentError> {
    let mut terminate = signal(SignalKind::terminate()).map_err(setup("SIGTERM handler"))?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(setup("SIGINT handler"))?;
    let args = settings.args.clone();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(setup(format!("--listen {}", args.listen)))?;
    let local = listener.local_addr().map_err(setup("--listen"))?;
    tracing::info!("serving /readyz, /healthz and /metrics on {local}");
    if let Some(path) = &args.port_file {
        std::fs::write(path, format!("http={local}\n"))
            .map_err(setup(format!("--port-file {}", path.display())))?;
    }
    let state = Arc::new(State {
        ready: AtomicBool::new(false),
        metrics: metrics::Metrics::default(),
    });
    let client = client(args.kubeconfig.as_ref()).await?;
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(health::serve(listener, state.clone()));
    tasks.spawn(log_follow::run(
        args.run_dir.join(crate::plugin::conf::LOG_NAME),
        settings.interval,
    ));
    if args.repair.repair_enabled {
        let counted = state.clone();
        tasks.spawn(crate::repair::run(
            client.clone(),
            args.repair.clone(),
            settings.node_name.clone(),
            Arc::new(move |kind, result| counted.metrics.repaired(kind, result)),
        ));
    } else {
        tracing::info!("race repair is disabled");
    }
    let installer = Installer::new(settings.clone());
    // The install loop only awaits (its file I/O runs on blocking threads), so a signal is taken at
    // once, whatever the loop is doing.
    tokio::select! {
        () = keep_installed(&installer, &settings, &state, &client, &mut tasks) => {}
        _ = terminate.recv() => tracing::info!("SIGTERM: cleaning up"),
        _ = interrupt.recv() => tracing::info!("SIGINT: cleaning up"),
    }
    state.ready.store(false, Ordering::SeqCst);
    state.metrics.set_ready(false);
    tasks.abort_all();
    installer.cleanup().map_err(AgentError::Cleanup)
}

/// Runs `f` on a blocking thread, so the file I/O of the install loop never holds the runtime.
async fn blocking<T: Send + 'static>(
    installer: &Installer,
    f: impl FnOnce(&Installer) -> T + Send + 'static,
) -> T {
    let installer = installer.clone();
    match tokio::task::spawn_blocking(move || f(&installer)).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Cancelled: only when the runtime shuts down, after which nothing here runs any more.
        Err(_) => std::future::pending().await,
    }
}

/// Istio's `installationThrottle`: passes that come back to back (another writer reverting our entry,
/// a file rewritten in a loop) start at most once a second, however fast the events come.
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
}

impl Throttle {
    const SPACING: Duration = Duration::from_secs(1);

    async fn wait(&mut self) {
        if let Some(last) = self.last {
            tokio::time::sleep_until((last + Self::SPACING).into()).await;
        }
        self.last = Some(Instant::now());
    }
}

/// Istio's `Installer.Run`: install, report ready, wait for a change to the node's files (inotify,
/// with the slow poll of `--watch-interval-ms` as the fallback), install again. A failed pass is logged
/// and retried on the next change (Istio's agent exits and is restarted by the kubelet instead).
async fn keep_installed(
    installer: &Installer,
    settings: &Settings,
    state: &Arc<State>,
    client: &kube::Client,
    tasks: &mut tokio::task::JoinSet<()>,
) {
    let mut untainting = false;
    let mut waiting_logged = false;
    let mut inotify_warned = false;
    let mut throttle = Throttle::default();
    loop {
        throttle.wait().await;
        let counted = state.clone();
        let pass = blocking(installer, move |i| i.install_all(&counted.metrics)).await;
        // Watched from the end of the pass, so its own writes do not count (Istio's sleepWatchInstall
        // creates its watcher after installAll); what changed before the watch began is caught by the
        // checks below.
        let mut watch = watch::try_new(&installer.watched(), &mut inotify_warned);
        match pass {
            Ok(()) => waiting_logged = false,
            Err(e @ InstallError::NoConfig(_)) => {
                if !waiting_logged {
                    tracing::info!("{e}: waiting for the primary CNI to write one");
                    waiting_logged = true;
                }
                watch::changed_or(watch.as_mut(), settings.interval).await;
                continue;
            }
            Err(e) => {
                tracing::error!("install: {e}");
                watch::changed_or(watch.as_mut(), settings.interval).await;
                continue;
            }
        }
        let verdict = |i: &Installer| (i.snapshot(), i.check().and_then(|()| i.files_in_place()));
        let (installed, ok) = blocking(installer, verdict).await;
        if let Err(why) = ok {
            tracing::warn!("after install: {why}");
            continue;
        }
        // Counted before it shows as ready, so whoever sees ready sees the install counted.
        state.metrics.install(metrics::install_result::SUCCESS);
        state.ready.store(true, Ordering::SeqCst);
        state.metrics.set_ready(true);
        tracing::info!(
            config = %installer.conf_path().map(|p| p.display().to_string()).unwrap_or_default(),
            "istio-cni installed; watching the node's CNI setup"
        );
        if !untainting {
            untainting = true;
            tasks.spawn(untaint::run(
                client.clone(),
                settings.node_name.clone(),
                state.clone(),
            ));
        }
        loop {
            watch::changed_or(watch.as_mut(), settings.interval).await;
            let (now, ok) = blocking(installer, verdict).await;
            if now != installed {
                break;
            }
            if let Err(why) = ok {
                tracing::info!("{why}");
                break;
            }
        }
        state.ready.store(false, Ordering::SeqCst);
        state.metrics.set_ready(false);
        tracing::info!("the node's CNI setup changed: checking and reinstalling");
    }
}

/// The agent's own log on standard error (standard output carries the plugin's lines); `RUST_LOG`
/// overrides the `info` default. Colour only on a terminal: a DaemonSet's log is a file.
pub fn init_logging() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
