//! What every connection of the server shares: the current engine and what guards the work.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::cluster::cluster_watch::ClusterWatch;
use crate::shared::metrics::Metrics;
use crate::shared::tls::CertStore;
use inject::engine::Engine;

use tokio::sync::watch;

use super::admission;
use super::limits::{BodyBudget, Limiter};

/// State shared by all connections.
pub(super) struct State {
    /// The engine of the current configuration and the configuration's generation number (bumped on
    /// every reload, for the patch cache's key).
    pub(super) engine: RwLock<(u64, Arc<Engine>)>,
    /// Each engine swapped in, for whoever follows the configuration (`--own-policy-params`).
    pub(super) engines: watch::Sender<Arc<Engine>>,
    /// Held from reading what a new engine is built from to its swap, so that a configuration reload
    /// and a cluster change never build from each other's stale half.
    pub(super) rebuild: Mutex<()>,
    /// The watches of `--kubeconfig` / `--in-cluster`, for readiness.
    pub(super) cluster: Option<ClusterWatch>,
    /// The caBundle patcher of `--ca-bundle` with a cluster, for readiness and its release on shutdown.
    pub(super) ca_bundle: Option<crate::cluster::ca_bundle_patch::Patcher>,
    pub(super) webhook: admission::Webhook,
    pub(super) metrics: Arc<Metrics>,
    pub(super) certs: Arc<CertStore>,
    /// The shutdown's phase; readiness fails from `Draining` on, and the connections subscribe to it.
    pub(super) phase: watch::Sender<Phase>,
    pub(super) body_timeout: Duration,
    pub(super) review_deadline: Duration,
    pub(super) limiter: Limiter,
    pub(super) bodies: Arc<BodyBudget>,
}

impl State {
    pub(super) fn engine(&self) -> (u64, Arc<Engine>) {
        self.engine
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Swaps in a new engine under a new generation (the patch cache's key).
    pub(super) fn swap_engine(&self, engine: Engine) {
        let engine = Arc::new(engine);
        let mut current = self.engine.write().unwrap_or_else(|e| e.into_inner());
        *current = (current.0.wrapping_add(1), engine.clone());
        drop(current);
        self.engines.send_replace(engine);
    }
}

/// Where the server is in its shutdown, told to the accept loop and every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    Serving,
    /// SIGTERM seen: readiness is off and the listener stays open for `--drain-delay-secs`.
    Draining,
    /// The listener is closed; requests in flight finish.
    Stopped,
}
