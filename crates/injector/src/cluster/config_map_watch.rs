//! The injection configuration read through the API instead of mounted files (`serve --kubeconfig` /
//! `--in-cluster` with `--injector-configmap` and/or `--mesh-configmap`), as Istio's
//! `NewConfigMapWatcher` (`pkg/kube/inject/watcher.go`) reads the `config` and `values` keys of
//! `istio-sidecar-injector[-<revision>]`, and its mesh watcher the `mesh` key of `istio[-<revision>]`:
//! read once before serving (a missing ConfigMap stops the start, as Istio's "failed to get initial
//! configuration"), then watched; each change is handed over as the documents' text.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;

use crate::shared::metrics::Metrics;

/// `--injector-configmap`, `--mesh-configmap` and their namespace, taken by `serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigMapArgs {
    /// Read the `config` and `values` documents from this ConfigMap (Istio's
    /// `istio-sidecar-injector[-<revision>]`) and follow its changes, instead of `--injector-config` /
    /// `--values` / `--config-dir` (needs `--kubeconfig` or `--in-cluster`).
    #[arg(long = "injector-configmap", value_name = "NAME")]
    pub injector: Option<String>,
    /// Read the `mesh` document from this ConfigMap (Istio's `istio[-<revision>]`) and follow its
    /// changes, instead of `--mesh-config` / `--config-dir` (needs `--kubeconfig` or `--in-cluster`).
    #[arg(long = "mesh-configmap", value_name = "NAME")]
    pub mesh: Option<String>,
    /// The namespace of those ConfigMaps (istiod's own, `POD_NAMESPACE`).
    #[arg(
        long = "configmap-namespace",
        env = "POD_NAMESPACE",
        default_value = "istio-system"
    )]
    pub namespace: String,
}

impl ConfigMapArgs {
    /// Whether a ConfigMap is asked for.
    pub fn wanted(&self) -> bool {
        self.injector.is_some() || self.mesh.is_some()
    }
}

/// The documents' text as the ConfigMaps hold them (`None`: the key or the ConfigMap is not asked
/// for, or absent); `source` names each in errors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Documents {
    pub values: Option<Document>,
    pub config: Option<Document>,
    pub mesh: Option<Document>,
}

/// One key of a ConfigMap: where it came from and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub source: String,
    pub text: String,
}

/// Why the ConfigMaps could not be read at start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigMapError {
    /// The GET failed (not found, forbidden, unreachable).
    #[error("reading ConfigMap {namespace}/{name}: {source}")]
    Get {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Which ConfigMap a change came from.
#[derive(Debug, Clone, Copy)]
enum Which {
    Injector,
    Mesh,
}

/// The keys of `cm` that the documents of `which` come from.
fn apply(docs: &mut Documents, which: Which, namespace: &str, cm: Option<&ConfigMap>) {
    let name = cm.and_then(|c| c.metadata.name.clone()).unwrap_or_default();
    let key = |k: &str| {
        cm.and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(k))
            .map(|t| Document {
                source: format!("ConfigMap {namespace}/{name} key {k}"),
                text: t.clone(),
            })
    };
    match which {
        Which::Injector => {
            docs.values = key("values");
            docs.config = key("config");
        }
        Which::Mesh => docs.mesh = key("mesh"),
    }
}

/// Reads the ConfigMaps once.
pub async fn read(
    client: &kube::Client,
    args: &ConfigMapArgs,
) -> Result<Documents, ConfigMapError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &args.namespace);
    let mut docs = Documents::default();
    for (which, name) in [(Which::Injector, &args.injector), (Which::Mesh, &args.mesh)] {
        let Some(name) = name else { continue };
        let cm = api.get(name).await.map_err(|source| ConfigMapError::Get {
            namespace: args.namespace.clone(),
            name: name.clone(),
            source,
        })?;
        apply(&mut docs, which, &args.namespace, Some(&cm));
    }
    Ok(docs)
}

/// Watches the ConfigMaps from `initial` on; `on_change` gets the documents after each change (a
/// deleted ConfigMap leaves its documents out, which the caller refuses as Istio's watcher keeps the
/// last configuration).
pub fn start(
    client: kube::Client,
    args: &ConfigMapArgs,
    initial: Documents,
    metrics: Arc<Metrics>,
    on_change: impl Fn(Documents) + Send + 'static,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let api: Api<ConfigMap> = Api::namespaced(client, &args.namespace);
    for (which, name) in [(Which::Injector, &args.injector), (Which::Mesh, &args.mesh)] {
        let Some(name) = name.clone() else { continue };
        let (api, tx, metrics) = (api.clone(), tx.clone(), metrics.clone());
        tokio::spawn(async move {
            let selector = format!("metadata.name={name}");
            let stream = watcher::watcher(api, watcher::Config::default().fields(&selector))
                .default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let cm = match event {
                    Err(e) => {
                        metrics.cluster_watch_error("configmaps");
                        tracing::warn!(configmap = name, error = %e, "ConfigMap watch failed; keeping the configuration and retrying with backoff");
                        continue;
                    }
                    Ok(Event::Apply(cm) | Event::InitApply(cm)) => Some(cm),
                    Ok(Event::Delete(_)) => None,
                    Ok(Event::Init | Event::InitDone) => continue,
                };
                if tx.send((which, cm)).is_err() {
                    return;
                }
            }
        });
    }
    let namespace = args.namespace.clone();
    tokio::spawn(async move {
        let mut docs = initial;
        while let Some((which, cm)) = rx.recv().await {
            let before = docs.clone();
            apply(&mut docs, which, &namespace, cm.as_ref());
            if docs != before {
                on_change(docs.clone());
            }
        }
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_documents_named_by_their_configmap() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "istio-sidecar-injector", "namespace": "istio-system"},
            "data": {"values": "global: {}", "config": "policy: enabled"},
        }))
        .unwrap();
        let mut d = Documents::default();
        apply(&mut d, Which::Injector, "istio-system", Some(&cm));
        assert_eq!(
            d.values.as_ref().unwrap().source,
            "ConfigMap istio-system/istio-sidecar-injector key values"
        );
        assert_eq!(d.config.as_ref().unwrap().text, "policy: enabled");
        assert_eq!(d.mesh, None);
        apply(&mut d, Which::Injector, "istio-system", None);
        assert_eq!(d, Documents::default());
    }
}
