//! What the running server swaps in: the certificate, the configuration files and the CA polled, and
//! the engine rebuilt on a change of the cluster's state or of the ConfigMaps.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::cluster::config_map_watch::Documents;
use crate::shared::metrics::ReloadResult;
use crate::shared::tls;
use crate::shared::webhook_config::read_ca_bundle;
use inject::cluster_state::ClusterState;

use super::reload::Watch;
use super::sources::Sources;
use super::state::State;

/// Polls the certificate and configuration files; swaps in what loads, keeps the old on failure.
pub(super) async fn reload_loop(
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
pub(super) fn cluster_changed(state: &State, watched: &Mutex<ClusterState>, cluster: ClusterState) {
    let _rebuild = state.rebuild.lock().unwrap_or_else(|e| e.into_inner());
    *watched.lock().unwrap_or_else(|e| e.into_inner()) = cluster.clone();
    let engine = state.engine().1.with_cluster_state(cluster);
    state.swap_engine(engine);
    tracing::info!("cluster state changed; engine rebuilt");
}

/// New ConfigMap documents: the engine rebuilt from them with the current cluster state, or the last
/// configuration kept when they do not load.
pub(super) fn config_maps_changed(
    state: &State,
    sources: &Sources,
    docs: &Mutex<Documents>,
    new: Documents,
) {
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
