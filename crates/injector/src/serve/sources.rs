//! What the engine is built from, and how it is built again on a reload.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;

use crate::cluster::config_map_watch::{self, ConfigMapArgs, Documents};
use inject::cluster_state::{ClusterState, PlatformArgs, ProxyConfigArgs};
use inject::config::{ConfigArgs, Settings};
use inject::engine::Engine;

/// The paths whose change triggers a configuration reload.
pub fn config_paths(args: &ConfigArgs) -> Vec<PathBuf> {
    args.watched_paths()
}

/// What the engine is built from: the configuration files and the cluster state files, reloaded together;
/// or, with a cluster client, the configuration files and the last state the watches handed over.
#[derive(Debug, Clone)]
pub(super) struct Sources {
    pub(super) config: ConfigArgs,
    pub(super) proxy_configs: ProxyConfigArgs,
    pub(super) platform: PlatformArgs,
    pub(super) watched: Option<Arc<Mutex<ClusterState>>>,
    /// `--injector-configmap` / `--mesh-configmap`: the documents last read through the API.
    pub(super) config_maps: Option<(ConfigMapArgs, Arc<Mutex<Documents>>)>,
}

impl Sources {
    pub(super) fn paths(&self) -> Vec<PathBuf> {
        let mut p = config_paths(&self.config);
        p.extend(ClusterState::watched_paths(
            &self.proxy_configs,
            Some(&self.platform),
        ));
        p
    }

    /// Loads every file; the first failure names its file, so a reload keeps the previous engine.
    pub(super) fn load(&self) -> anyhow::Result<Engine> {
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
