//! The cluster state of `serve --kubeconfig` / `--in-cluster`, watched instead of read from files:
//! ProxyConfig resources (`networking.istio.io/v1beta1`), Namespaces (on OpenShift only, as Istio's
//! `NewWebhook` watches them) and Nodes (with native sidecars `auto` only), each kept as the set its
//! watch last listed plus the events since (Istio's informers), turned into one [`ClusterState`]
//! whenever a set changes, and handed to the caller once every watch has listed (Istio's `HasSynced`).
//! A failing watch keeps its last set and reconnects with kube-rs' default backoff; each failure is
//! counted in `injector_cluster_watch_errors_total{resource}`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::ResourceExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::cluster_state::ClusterState;
use crate::metrics::Metrics;
use crate::namespaces::Namespaces;
use crate::native_sidecars::Nodes;
use crate::proxy_config_resources::ProxyConfigResources;

/// One watched kind (the `resource` label of the error counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    ProxyConfigs,
    Namespaces,
    Nodes,
}

impl Watched {
    /// The plural resource name, as RBAC and the metric name it.
    pub fn label(self) -> &'static str {
        match self {
            Watched::ProxyConfigs => "proxyconfigs",
            Watched::Namespaces => "namespaces",
            Watched::Nodes => "nodes",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A running set of watches; dropping it does not stop them (they live as long as the runtime).
#[derive(Debug, Clone)]
pub struct ClusterWatch {
    synced: Arc<AtomicBool>,
}

/// The ProxyConfig resource: istio/api serves `v1beta1` only.
fn proxy_config_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "networking.istio.io",
        "v1beta1",
        "ProxyConfig",
    ))
}

impl ClusterWatch {
    /// Starts the watches on the current tokio runtime. `on_change` is called with every new state
    /// (never twice with equal ones), first once all watches have listed; `openshift` is
    /// `--platform openshift` (Namespaces are watched and carried into each state), `nodes` is native
    /// sidecars `auto` (Nodes are watched; without, the state has none and the global decision holds).
    pub fn start(
        client: kube::Client,
        openshift: bool,
        nodes: bool,
        metrics: Arc<Metrics>,
        on_change: impl Fn(ClusterState) + Send + 'static,
    ) -> ClusterWatch {
        let (tx, rx) = mpsc::unbounded_channel();
        let synced = Arc::new(AtomicBool::new(false));
        tokio::spawn(assemble(rx, openshift, nodes, synced.clone(), on_change));
        let ar = proxy_config_resource();
        let proxy_configs: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        tokio::spawn(watch(
            proxy_configs,
            Watched::ProxyConfigs,
            tx.clone(),
            metrics.clone(),
            move |o: DynamicObject| {
                // A listed item carries no apiVersion and kind; the resource reader checks them.
                let mut v = serde_json::to_value(o).ok()?;
                let obj = v.as_object_mut()?;
                obj.insert("apiVersion".into(), json!(ar.api_version));
                obj.insert("kind".into(), json!(ar.kind));
                Some(v)
            },
        ));
        if openshift {
            tokio::spawn(watch(
                Api::<Namespace>::all(client.clone()),
                Watched::Namespaces,
                tx.clone(),
                metrics.clone(),
                |ns: Namespace| {
                    // Only what the webhook reads: labels and annotations.
                    Some(json!({
                        "kind": "Namespace",
                        "metadata": {
                            "name": ns.name_any(),
                            "labels": ns.metadata.labels,
                            "annotations": ns.metadata.annotations,
                        },
                    }))
                },
            ));
        }
        if nodes {
            tokio::spawn(watch(
                Api::<Node>::all(client),
                Watched::Nodes,
                tx,
                metrics,
                |n: Node| {
                    // Only the kubelet version: a Node's status (images, conditions) is most of its size.
                    let version = n
                        .status
                        .as_ref()
                        .and_then(|s| s.node_info.as_ref())
                        .map(|i| i.kubelet_version.clone());
                    Some(json!({"name": n.name_any(), "kubeletVersion": version}))
                },
            ));
        }
        ClusterWatch { synced }
    }

    /// Whether every watch has listed once and the first state was handed over; it stays true through
    /// later watch failures (the last state is kept).
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }
}

/// One kind's objects as the assembler reads them.
type Snapshot = (Watched, Vec<Value>);

/// Keeps one kind's set: a relist replaces it whole once complete (`InitDone`), events change it after.
/// Each change sends the whole set (cheap: objects are reduced to what the webhook reads).
async fn watch<K>(
    api: Api<K>,
    what: Watched,
    tx: mpsc::UnboundedSender<Snapshot>,
    metrics: Arc<Metrics>,
    reduce: impl Fn(K) -> Option<Value> + Send + 'static,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Debug + Send + 'static,
{
    let key = |o: &K| {
        format!(
            "{}/{}",
            o.meta().namespace.as_deref().unwrap_or_default(),
            o.meta().name.as_deref().unwrap_or_default()
        )
    };
    let mut current: BTreeMap<String, Value> = BTreeMap::new();
    let mut relisting: Option<BTreeMap<String, Value>> = None;
    let mut listed = false;
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let changed = match event {
            // A resource the API server does not serve (Istio's CRD not installed; a plain-text 404,
            // so only the code tells) is an empty set until it appears, as Istio's delayed informer
            // counts it synced; the list is retried.
            Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                if status.code == 404 && !listed =>
            {
                metrics.cluster_watch_error(what.label());
                tracing::warn!(
                    resource = what.label(),
                    "not served (CRD not installed?); none until it is, retrying with backoff"
                );
                listed = true;
                true
            }
            Err(e) => {
                metrics.cluster_watch_error(what.label());
                tracing::warn!(resource = what.label(), error = %e, "cluster watch failed; keeping the last state and retrying with backoff");
                false
            }
            Ok(Event::Init) => {
                relisting = Some(BTreeMap::new());
                false
            }
            Ok(Event::InitApply(o)) => {
                let k = key(&o);
                if let (Some(set), Some(v)) = (relisting.as_mut(), reduce(o)) {
                    set.insert(k, v);
                }
                false
            }
            Ok(Event::InitDone) => {
                current = relisting.take().unwrap_or_default();
                listed = true;
                true
            }
            Ok(Event::Apply(o)) => {
                let k = key(&o);
                match reduce(o) {
                    Some(v) => current.insert(k, v),
                    None => current.remove(&k),
                };
                listed
            }
            Ok(Event::Delete(o)) => current.remove(&key(&o)).is_some() && listed,
        };
        if changed
            && tx
                .send((what, current.values().cloned().collect()))
                .is_err()
        {
            return;
        }
    }
}

/// Builds the state from the latest set of each kind once all have listed; a burst of changes is one
/// rebuild.
async fn assemble(
    mut rx: mpsc::UnboundedReceiver<Snapshot>,
    openshift: bool,
    nodes: bool,
    synced: Arc<AtomicBool>,
    on_change: impl Fn(ClusterState),
) {
    // A kind not watched is an empty set from the start.
    let mut latest: [Option<Vec<Value>>; 3] = Default::default();
    latest[Watched::Namespaces.index()] = (!openshift).then(Vec::new);
    latest[Watched::Nodes.index()] = (!nodes).then(Vec::new);
    let mut last: Option<ClusterState> = None;
    while let Some((what, objects)) = rx.recv().await {
        latest[what.index()] = Some(objects);
        while let Ok((what, objects)) = rx.try_recv() {
            latest[what.index()] = Some(objects);
        }
        let [Some(pcs), Some(nss), Some(node_list)] = &latest else {
            continue;
        };
        let state = state(pcs, nss, nodes.then_some(node_list.as_slice()), openshift);
        if last.as_ref() != Some(&state) {
            on_change(state.clone());
            last = Some(state);
        }
        if !synced.swap(true, Ordering::SeqCst) {
            tracing::info!("cluster state synced");
        }
    }
}

/// The state of the watched sets; objects the webhook cannot use are logged and left out.
fn state(
    proxy_configs: &[Value],
    namespaces: &[Value],
    nodes: Option<&[Value]>,
    openshift: bool,
) -> ClusterState {
    const SOURCE: &str = "the cluster";
    let (proxy_configs, errors) = ProxyConfigResources::from_cluster(proxy_configs, SOURCE);
    for e in errors {
        tracing::warn!(error = %e, "ProxyConfig left out");
    }
    let namespaces = Namespaces::from_objects(namespaces.to_vec(), SOURCE).unwrap_or_else(|e| {
        // Cannot happen for what the API server serves (names required, labels and annotations strings).
        tracing::warn!(error = %e, "Namespaces left out");
        Namespaces::default()
    });
    ClusterState {
        proxy_configs: Some(proxy_configs),
        openshift,
        namespaces,
        nodes: nodes.map(Nodes::from_reduced),
        warnings: Vec::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::Resource as _;

    #[test]
    fn labels_are_the_plural_resource_names() {
        assert_eq!(Watched::Namespaces.label(), Namespace::plural(&()));
        assert_eq!(Watched::Nodes.label(), Node::plural(&()));
        assert_eq!(
            Watched::ProxyConfigs.label(),
            proxy_config_resource().plural
        );
        for (i, w) in [Watched::ProxyConfigs, Watched::Namespaces, Watched::Nodes]
            .iter()
            .enumerate()
        {
            assert_eq!(w.index(), i);
        }
    }

    #[test]
    fn an_unusable_proxy_config_is_left_out_and_the_others_apply() {
        let pc = |name: &str, spec: Value| {
            json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "ProxyConfig",
                   "metadata": {"name": name, "namespace": "a"}, "spec": spec})
        };
        let s = state(
            &[
                pc("good", json!({"concurrency": 3})),
                pc("bad", json!({"unknownField": 1})),
            ],
            &[json!({"kind": "Namespace", "metadata": {"name": "a", "labels": null}})],
            Some(&[json!({"name": "n1", "kubeletVersion": "v1.33.0"})]),
            false,
        );
        let base = json!({});
        let pc =
            s.proxy_configs
                .as_ref()
                .unwrap()
                .effective(&base, "istio-system", "a", None, None);
        assert_eq!(pc, json!({"concurrency": 3}));
        assert!(s.namespaces.labels("a").is_some());
    }
}
