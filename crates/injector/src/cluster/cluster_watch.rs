//! The cluster state of `serve --kubeconfig` / `--in-cluster`, watched instead of read from files:
//! ProxyConfig resources (`networking.istio.io/v1beta1`), Namespaces (on OpenShift only, as Istio's
//! `NewWebhook` watches them) and Nodes (with native sidecars `auto` only).
//!
//! - Each object is cut down to what injection reads while it is parsed, as Istio's informers strip
//!   Nodes (`pkg/kube/util.go` `StripNodeUnusedFields`): a ProxyConfig to its checked resource, a
//!   Namespace to OpenShift's two annotations, a Node to whether its kubelet runs native sidecars.
//!   managedFields, other annotations, labels and a Node's status are skipped unparsed.
//! - An event changes one object of its kind's set (O(log n)); a relist replaces the set once it is
//!   complete (Istio's informers).
//! - The sets are handed over as one [`ClusterState`] at most every [`SETTLE`]: a burst of events is one
//!   engine rebuild, and a change waits at most that long. The first is handed over once every watch
//!   has listed (Istio's `HasSynced`). A state shares everything that did not change with the ones
//!   before it (`cow_map`), so a rebuild costs what changed, not what is held.
//! - A failing watch keeps its last set and reconnects with kube-rs' default backoff; each failure is
//!   counted in `injector_cluster_watch_errors_total{resource}`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::shared::metrics::Metrics;
use inject::cluster_state::ClusterState;
use inject::namespaces::{Namespace, Namespaces};
use inject::native_sidecars::Nodes;
use inject::proxy_config_resources::{ProxyConfigResource, ProxyConfigResources};

/// The shortest time between two cluster states handed over: while changes keep coming, one rebuild per
/// window; a change after a quiet spell is handed over at once.
pub const SETTLE: Duration = Duration::from_millis(200);

/// One watched kind (the `resource` label of the metrics).
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
}

/// A running set of watches; dropping it does not stop them (they live as long as the runtime).
#[derive(Debug, Clone)]
pub struct ClusterWatch {
    synced: Arc<AtomicBool>,
}

impl ClusterWatch {
    /// Starts the watches on the current tokio runtime. `on_change` is called with every new state
    /// (never twice with equal ones, at most once per [`SETTLE`]), first once all watches have listed;
    /// `openshift` is `--platform openshift` (Namespaces are watched and carried into each state),
    /// `nodes` is native sidecars `auto` (Nodes are watched; without, the state has none and the global
    /// decision holds).
    pub fn start(
        client: kube::Client,
        openshift: bool,
        nodes: bool,
        metrics: Arc<Metrics>,
        on_change: impl Fn(ClusterState) + Send + 'static,
    ) -> ClusterWatch {
        let synced = Arc::new(AtomicBool::new(false));
        let changes = Arc::new(Notify::new());
        let sets = Sets::new(openshift, nodes);
        tokio::spawn(watch(
            client.clone(),
            sets.proxy_configs.clone(),
            changes.clone(),
            metrics.clone(),
        ));
        if openshift {
            tokio::spawn(watch(
                client.clone(),
                sets.namespaces.clone(),
                changes.clone(),
                metrics.clone(),
            ));
        }
        if nodes {
            tokio::spawn(watch(
                client,
                sets.nodes.clone(),
                changes.clone(),
                metrics.clone(),
            ));
        }
        tokio::spawn(hand_over(sets, changes, synced.clone(), metrics, on_change));
        ClusterWatch { synced }
    }

    /// Whether every watch has listed once and the first state was handed over; it stays true through
    /// later watch failures (the last state is kept).
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }
}

/// An object's namespace ("" for cluster-scoped kinds) and name.
type Key = (String, String);

/// One watched kind: the resource listed, the parts of `spec` and `status` parsed (the rest is skipped
/// unparsed), what is kept of an object and the set that holds them.
trait Kind: Debug + Clone + Send + Sync + 'static {
    const WATCHED: Watched;
    const GROUP: &'static str;
    const VERSION: &'static str;
    const KIND: &'static str;
    /// Objects per page of a list: the page is read whole before its objects are cut down, so kinds
    /// with large objects (a Node's status, a ProxyConfig's unknown fields the CRD keeps) get small pages.
    const PAGE: u32;
    type Spec: DeserializeOwned + Default + Debug + Clone + Send + Sync + 'static;
    type Status: DeserializeOwned + Default + Debug + Clone + Send + Sync + 'static;
    /// What is kept of one object.
    type Item: Send + 'static;
    type Set: Default + Send + 'static;

    /// What is kept of `o`; `None` leaves it out (an object the webhook cannot use, logged).
    fn reduce(o: Object<Self>) -> Option<Self::Item>;
    /// Sets (`Some`) or removes (`None`) one object; whether anything changed.
    fn set(set: &mut Self::Set, key: &Key, item: Option<Self::Item>) -> bool;
    /// The keys held.
    fn keys(set: &Self::Set) -> Vec<Key>;
    fn len(set: &Self::Set) -> usize;
}

/// A watched object as it is parsed off the wire: the trimmed `metadata` ([`trimmed_meta`]) and the
/// parts of `spec` and `status` its kind reads; every other field is skipped without being stored.
#[derive(Debug, Clone, Deserialize)]
#[serde(bound = "")]
struct Object<K: Kind> {
    #[serde(default, deserialize_with = "trimmed_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: K::Spec,
    #[serde(default)]
    status: K::Status,
    #[serde(skip)]
    kind: PhantomData<K>,
}

impl<K: Kind> kube::Resource for Object<K> {
    type DynamicType = ();
    type Scope = kube::core::DynamicResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        K::KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        K::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        K::VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        K::WATCHED.label().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<K: Kind> Object<K> {
    fn key(&self) -> Key {
        (
            self.metadata.namespace.clone().unwrap_or_default(),
            self.metadata.name.clone().unwrap_or_default(),
        )
    }
}

/// `metadata` with what the watches read: the name and namespace (the key), the resourceVersion (where
/// kube-rs' watcher resumes), the creation time (ProxyConfig precedence) and OpenShift's annotations.
fn trimmed_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Wire {
        name: Option<String>,
        namespace: Option<String>,
        resource_version: Option<String>,
        creation_timestamp: Option<Time>,
        #[serde(default, deserialize_with = "openshift_annotations")]
        annotations: Option<BTreeMap<String, String>>,
    }
    let w = Option::<Wire>::deserialize(d)?;
    Ok(w.map(|w| ObjectMeta {
        name: w.name,
        namespace: w.namespace,
        resource_version: w.resource_version,
        creation_timestamp: w.creation_timestamp,
        annotations: w.annotations,
        ..ObjectMeta::default()
    })
    .unwrap_or_default())
}

/// The annotations `openshift::proxy_ids` reads; the others (`kubectl.kubernetes.io/last-applied-
/// configuration` holds a copy of the object) are skipped without being stored.
fn openshift_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Kept;
    impl<'de> Visitor<'de> for Kept {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a mapping of strings")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(wanted) = map.next_key_seed(Wanted)? {
                match wanted {
                    Some(k) => {
                        kept.insert(k.to_string(), map.next_value::<String>()?);
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Some(kept))
        }
    }
    /// An annotation's key: the OpenShift annotation it is, if any (read without being stored).
    struct Wanted;
    impl<'de> DeserializeSeed<'de> for Wanted {
        type Value = Option<&'static str>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
    }
    impl<'de> Visitor<'de> for Wanted {
        type Value = Option<&'static str>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an annotation key")
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(inject::openshift::ID_ANNOTATIONS
                .iter()
                .find(|a| **a == v)
                .copied())
        }
    }
    d.deserialize_any(Kept)
}

/// The ProxyConfig kind: istio/api serves `v1beta1` only.
#[derive(Debug, Clone)]
enum ProxyConfigKind {}

impl Kind for ProxyConfigKind {
    const WATCHED: Watched = Watched::ProxyConfigs;
    const GROUP: &'static str = "networking.istio.io";
    const VERSION: &'static str = "v1beta1";
    const KIND: &'static str = "ProxyConfig";
    const PAGE: u32 = 100;
    type Spec = Option<Value>;
    type Status = IgnoredAny;
    type Item = Arc<ProxyConfigResource>;
    type Set = ProxyConfigSet;

    fn reduce(o: Object<Self>) -> Option<Arc<ProxyConfigResource>> {
        // The fields the resource reader checks, as a file holds them (a watched object carries no
        // apiVersion and kind: the resource watched is the one version served).
        let m = o.metadata;
        let obj = json!({
            "apiVersion": format!("{}/{}", Self::GROUP, Self::VERSION),
            "kind": Self::KIND,
            "metadata": {
                "name": m.name,
                "namespace": m.namespace,
                "creationTimestamp": m.creation_timestamp,
            },
            "spec": o.spec,
        });
        match ProxyConfigResource::from_watched(&obj, "the cluster") {
            Ok(r) => Some(Arc::new(r)),
            Err(e) => {
                tracing::warn!(error = %e, "ProxyConfig left out");
                None
            }
        }
    }

    fn set(set: &mut ProxyConfigSet, key: &Key, item: Option<Arc<ProxyConfigResource>>) -> bool {
        set.set(key, item)
    }

    fn keys(set: &ProxyConfigSet) -> Vec<Key> {
        set.objects.keys().cloned().collect()
    }

    fn len(set: &ProxyConfigSet) -> usize {
        set.objects.len()
    }
}

/// The watched ProxyConfigs: every resource by key, and the index handed to the engine, whose changed
/// namespaces are regrouped when a state is handed over (a burst in one namespace regroups it once).
#[derive(Debug, Default)]
struct ProxyConfigSet {
    objects: BTreeMap<Key, Arc<ProxyConfigResource>>,
    /// Namespaces changed since the last state.
    dirty: BTreeSet<String>,
    index: ProxyConfigResources,
}

impl ProxyConfigSet {
    fn set(&mut self, key: &Key, item: Option<Arc<ProxyConfigResource>>) -> bool {
        let changed = match item {
            Some(r) if self.objects.get(key).is_some_and(|old| *old == r) => false,
            Some(r) => {
                self.objects.insert(key.clone(), r);
                true
            }
            None => self.objects.remove(key).is_some(),
        };
        if changed {
            self.dirty.insert(key.0.clone());
        }
        changed
    }

    /// The index with every change so far.
    fn index(&mut self) -> ProxyConfigResources {
        for namespace in std::mem::take(&mut self.dirty) {
            let group = self
                .objects
                .range((namespace.clone(), String::new())..)
                .take_while(|((ns, _), _)| *ns == namespace)
                .map(|(_, r)| r.clone())
                .collect();
            self.index.set_namespace(namespace, group);
        }
        self.index.clone()
    }
}

/// The Namespace kind (OpenShift): only OpenShift's annotations are kept.
#[derive(Debug, Clone)]
enum NamespaceKind {}

impl Kind for NamespaceKind {
    const WATCHED: Watched = Watched::Namespaces;
    const GROUP: &'static str = "";
    const VERSION: &'static str = "v1";
    const KIND: &'static str = "Namespace";
    const PAGE: u32 = 500;
    type Spec = IgnoredAny;
    type Status = IgnoredAny;
    type Item = Namespace;
    type Set = Namespaces;

    fn reduce(o: Object<Self>) -> Option<Namespace> {
        Some(Namespace::watched(
            o.metadata.annotations.unwrap_or_default(),
        ))
    }

    fn set(set: &mut Namespaces, key: &Key, item: Option<Namespace>) -> bool {
        set.set(&key.1, item)
    }

    fn keys(set: &Namespaces) -> Vec<Key> {
        set.names()
            .map(|n| (String::new(), n.to_string()))
            .collect()
    }

    fn len(set: &Namespaces) -> usize {
        set.len()
    }
}

/// The Node kind (native sidecars `auto`): only the kubelet version is read.
#[derive(Debug, Clone)]
enum NodeKind {}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeStatus {
    #[serde(default)]
    node_info: Option<NodeInfo>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeInfo {
    #[serde(default)]
    kubelet_version: Option<String>,
}

impl Kind for NodeKind {
    const WATCHED: Watched = Watched::Nodes;
    const GROUP: &'static str = "";
    const VERSION: &'static str = "v1";
    const KIND: &'static str = "Node";
    const PAGE: u32 = 100;
    type Spec = IgnoredAny;
    type Status = Option<NodeStatus>;
    /// The kubelet version, empty when the Node reports none.
    type Item = String;
    type Set = Nodes;

    fn reduce(o: Object<Self>) -> Option<String> {
        Some(
            o.status
                .and_then(|s| s.node_info)
                .and_then(|i| i.kubelet_version)
                .unwrap_or_default(),
        )
    }

    fn set(set: &mut Nodes, key: &Key, item: Option<String>) -> bool {
        set.set(&key.1, item.as_deref())
    }

    fn keys(set: &Nodes) -> Vec<Key> {
        set.names()
            .map(|n| (String::new(), n.to_string()))
            .collect()
    }

    fn len(set: &Nodes) -> usize {
        set.len()
    }
}

/// One kind's set as its watch keeps it.
#[derive(Debug)]
struct Held<K: Kind> {
    set: K::Set,
    /// A relist in progress: what it listed so far, applied to `set` once complete.
    relisting: Option<HashMap<Key, K::Item>>,
    /// Listed once (or not served, or not watched at all).
    listed: bool,
    /// Changed since the last state handed over.
    changed: bool,
}

impl<K: Kind> Held<K> {
    fn new(listed: bool) -> Held<K> {
        Held {
            set: K::Set::default(),
            relisting: None,
            listed,
            changed: false,
        }
    }

    /// Applies one event of the watch; whether a state may have to be handed over.
    fn handle(&mut self, event: Event<Object<K>>) -> bool {
        match event {
            Event::Init => {
                self.relisting = Some(HashMap::new());
                false
            }
            Event::InitApply(o) => {
                if let Some(listing) = self.relisting.as_mut() {
                    let key = o.key();
                    if let Some(item) = K::reduce(o) {
                        listing.insert(key, item);
                    }
                }
                false
            }
            Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                for key in K::keys(&self.set) {
                    if !listed.contains_key(&key) {
                        self.changed |= K::set(&mut self.set, &key, None);
                    }
                }
                for (key, item) in listed {
                    self.changed |= K::set(&mut self.set, &key, Some(item));
                }
                self.listed = true;
                true
            }
            Event::Apply(o) => {
                let key = o.key();
                let item = K::reduce(o);
                self.changed |= K::set(&mut self.set, &key, item);
                self.changed && self.listed
            }
            Event::Delete(o) => {
                self.changed |= K::set(&mut self.set, &o.key(), None);
                self.changed && self.listed
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The three kinds' sets, shared by their watches and the hand-over.
#[derive(Debug, Clone)]
struct Sets {
    proxy_configs: Arc<Mutex<Held<ProxyConfigKind>>>,
    namespaces: Arc<Mutex<Held<NamespaceKind>>>,
    nodes: Arc<Mutex<Held<NodeKind>>>,
    openshift: bool,
    watch_nodes: bool,
}

impl Sets {
    /// A kind not watched is listed and empty from the start.
    fn new(openshift: bool, watch_nodes: bool) -> Sets {
        Sets {
            proxy_configs: Arc::new(Mutex::new(Held::new(false))),
            namespaces: Arc::new(Mutex::new(Held::new(!openshift))),
            nodes: Arc::new(Mutex::new(Held::new(!watch_nodes))),
            openshift,
            watch_nodes,
        }
    }

    /// The state with every change so far, once every kind has listed and when something changed
    /// since the last (`first`: the first state, handed over even when every set is empty).
    fn state(&self, first: bool, metrics: &Metrics) -> Option<ClusterState> {
        let mut pcs = lock(&self.proxy_configs);
        let mut nss = lock(&self.namespaces);
        let mut nodes = lock(&self.nodes);
        if !(pcs.listed && nss.listed && nodes.listed) {
            return None;
        }
        if !(first || pcs.changed || nss.changed || nodes.changed) {
            return None;
        }
        (pcs.changed, nss.changed, nodes.changed) = (false, false, false);
        metrics.cluster_watch_objects(
            Watched::ProxyConfigs.label(),
            ProxyConfigKind::len(&pcs.set),
        );
        if self.openshift {
            metrics
                .cluster_watch_objects(Watched::Namespaces.label(), NamespaceKind::len(&nss.set));
        }
        if self.watch_nodes {
            metrics.cluster_watch_objects(Watched::Nodes.label(), NodeKind::len(&nodes.set));
        }
        Some(ClusterState {
            proxy_configs: Some(pcs.set.index()),
            openshift: self.openshift,
            namespaces: nss.set.clone(),
            nodes: self.watch_nodes.then(|| nodes.set.clone()),
            warnings: Vec::new(),
        })
    }
}

/// Keeps one kind's set from its watch; `changes` is told of every change.
async fn watch<K: Kind>(
    client: kube::Client,
    held: Arc<Mutex<Held<K>>>,
    changes: Arc<Notify>,
    metrics: Arc<Metrics>,
) {
    let what = K::WATCHED;
    let api: Api<Object<K>> = Api::all(client);
    let config = watcher::Config::default().page_size(K::PAGE);
    let stream = watcher::watcher(api, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let changed = match event {
            // A resource the API server does not serve (Istio's CRD not installed; a plain-text 404,
            // so only the code tells) is an empty set until it appears, as Istio's delayed informer
            // counts it synced; the list is retried.
            Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                if status.code == 404 && !lock(&held).listed =>
            {
                metrics.cluster_watch_error(what.label());
                tracing::warn!(
                    resource = what.label(),
                    "not served (CRD not installed?); none until it is, retrying with backoff"
                );
                lock(&held).listed = true;
                true
            }
            Err(e) => {
                metrics.cluster_watch_error(what.label());
                tracing::warn!(resource = what.label(), error = %e, "cluster watch failed; keeping the last state and retrying with backoff");
                false
            }
            Ok(event) => lock(&held).handle(event),
        };
        if changed {
            changes.notify_one();
        }
    }
}

/// Hands the state over on every change, at most once per [`SETTLE`]: the first change after a quiet
/// spell at once, the changes during a window together at its end.
async fn hand_over(
    sets: Sets,
    changes: Arc<Notify>,
    synced: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    on_change: impl Fn(ClusterState),
) {
    let mut last: Option<Instant> = None;
    loop {
        changes.notified().await;
        if let Some(t) = last {
            tokio::time::sleep_until(t + SETTLE).await;
        }
        let first = !synced.load(Ordering::SeqCst);
        let Some(state) = sets.state(first, &metrics) else {
            continue;
        };
        last = Some(Instant::now());
        on_change(state);
        metrics.cluster_state_rebuilds.inc();
        if first {
            synced.store(true, Ordering::SeqCst);
            tracing::info!("cluster state synced");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Namespace as CoreNamespace, Node};
    use kube::Resource as _;

    #[test]
    fn labels_are_the_plural_resource_names() {
        assert_eq!(Watched::Namespaces.label(), CoreNamespace::plural(&()));
        assert_eq!(Watched::Nodes.label(), Node::plural(&()));
        assert_eq!(
            Object::<NamespaceKind>::url_path(&(), None),
            CoreNamespace::url_path(&(), None)
        );
        assert_eq!(
            Object::<NodeKind>::url_path(&(), None),
            Node::url_path(&(), None)
        );
        assert_eq!(
            Object::<ProxyConfigKind>::url_path(&(), None),
            "/apis/networking.istio.io/v1beta1/proxyconfigs"
        );
    }

    fn object<K: Kind>(v: Value) -> Object<K> {
        serde_json::from_value(v).unwrap()
    }

    /// A ProxyConfig as the API server sends it, with the fields a watch skips.
    fn proxy_config(namespace: &str, name: &str, spec: Value) -> Value {
        json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "ProxyConfig",
               "metadata": {"name": name, "namespace": namespace, "resourceVersion": "7",
                            "uid": "u", "creationTimestamp": "2026-01-02T03:04:05Z",
                            "labels": {"a": "b"},
                            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{…}"},
                            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
               "spec": spec})
    }

    #[test]
    fn objects_are_cut_down_while_parsed() {
        let pc: Object<ProxyConfigKind> = object(proxy_config("a", "x", json!({"concurrency": 2})));
        let m = &pc.metadata;
        assert_eq!(
            (
                m.name.as_deref(),
                m.namespace.as_deref(),
                m.resource_version.as_deref()
            ),
            (Some("x"), Some("a"), Some("7"))
        );
        assert_eq!(m.annotations, Some(BTreeMap::new()));
        assert!(m.managed_fields.is_none() && m.labels.is_none() && m.uid.is_none());
        let r = ProxyConfigKind::reduce(pc).unwrap();
        assert_eq!(
            (r.name.as_str(), r.namespace.as_str(), r.created),
            ("x", "a", 1_767_323_045)
        );
        assert_eq!(Value::Object(r.overlay.clone()), json!({"concurrency": 2}));

        let ns: Object<NamespaceKind> = object(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "apps", "resourceVersion": "1", "labels": {"team": "x"},
                         "annotations": {"openshift.io/sa.scc.uid-range": "1000620000/10000",
                                         "openshift.io/description": "long text",
                                         "openshift.io/sa.scc.supplemental-groups": "5/1"}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}));
        assert_eq!(
            ns.metadata.annotations.as_ref().map(|a| a.len()),
            Some(2),
            "{ns:?}"
        );
        let mut set = Namespaces::default();
        assert!(NamespaceKind::set(
            &mut set,
            &ns.key(),
            NamespaceKind::reduce(ns.clone())
        ));
        assert_eq!(set.proxy_ids("apps"), (1_000_629_999, 5));
        assert_eq!(set.labels("apps").map(|l| l.len()), Some(0));

        let node: Object<NodeKind> = object(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "resourceVersion": "3", "annotations": null},
            "status": {"nodeInfo": {"kubeletVersion": "v1.33.2", "osImage": "x"},
                       "images": [{"names": ["a"], "sizeBytes": 1}], "conditions": []}}));
        assert_eq!(NodeKind::reduce(node).as_deref(), Some("v1.33.2"));
        let bare: Object<NodeKind> = object(json!({"metadata": {"name": "n2"}}));
        assert_eq!(NodeKind::reduce(bare).as_deref(), Some(""));
    }

    #[test]
    fn an_unusable_proxy_config_is_left_out_and_the_others_apply() {
        let mut held = Held::<ProxyConfigKind>::new(false);
        held.handle(Event::Init);
        for (name, spec) in [
            ("good", json!({"concurrency": 3})),
            ("bad", json!({"unknownField": 1})),
        ] {
            held.handle(Event::InitApply(object(proxy_config("a", name, spec))));
        }
        assert!(held.handle(Event::InitDone));
        assert_eq!(ProxyConfigKind::len(&held.set), 1);
        let pc = held
            .set
            .index()
            .effective(&json!({}), "istio-system", "a", None, None);
        assert_eq!(pc, json!({"concurrency": 3}));
        // The good one turned bad: left out, as if deleted.
        assert!(held.handle(Event::Apply(object(proxy_config(
            "a",
            "good",
            json!({"concurrency": -1})
        )))));
        assert_eq!(ProxyConfigKind::len(&held.set), 0);
    }

    #[test]
    fn a_relist_replaces_the_set_once_complete() {
        let mut held = Held::<NodeKind>::new(false);
        let node = |name: &str, v: &str| {
            object::<NodeKind>(json!({"metadata": {"name": name, "resourceVersion": "1"},
                                      "status": {"nodeInfo": {"kubeletVersion": v}}}))
        };
        held.handle(Event::Init);
        held.handle(Event::InitApply(node("a", "v1.33.0")));
        held.handle(Event::InitApply(node("b", "v1.32.0")));
        assert!(held.handle(Event::InitDone));
        assert!(!held.set.detect(""));
        held.changed = false;
        // Nothing changes until the relist is complete; then the Node it no longer lists is gone.
        held.handle(Event::Init);
        held.handle(Event::InitApply(node("a", "v1.33.0")));
        assert!(!held.changed && NodeKind::len(&held.set) == 2);
        held.handle(Event::InitDone);
        assert!(held.changed);
        assert!(held.set.detect(""));
        assert_eq!(NodeKind::keys(&held.set), vec![(String::new(), "a".into())]);
        // An event that changes nothing the webhook reads is no change.
        held.changed = false;
        assert!(!held.handle(Event::Apply(node("a", "v1.34.0"))));
        assert!(held.handle(Event::Delete(node("a", ""))));
    }

    /// The hand-over of a flood: ProxyConfigs created one every millisecond for five seconds (virtual
    /// time) become about one state per [`SETTLE`], each change in a state within [`SETTLE`] of its
    /// event, and the last state holds them all. Handing over per event would be 5,000 states.
    #[tokio::test(start_paused = true)]
    async fn a_burst_is_one_state_per_window() {
        let sets = Sets::new(false, false);
        let changes = Arc::new(Notify::new());
        let synced = Arc::new(AtomicBool::new(false));
        let states: Arc<Mutex<Vec<(Instant, ClusterState)>>> = Arc::default();
        let seen = states.clone();
        tokio::spawn(hand_over(
            sets.clone(),
            changes.clone(),
            synced.clone(),
            Arc::new(Metrics::new()),
            move |s| lock(&seen).push((Instant::now(), s)),
        ));
        let send = |event| {
            if lock(&sets.proxy_configs).handle(event) {
                changes.notify_one();
            }
        };
        send(Event::Init);
        send(Event::InitDone);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(synced.load(Ordering::SeqCst));
        assert_eq!(lock(&states).len(), 1, "the first state at once");

        const N: usize = 5000;
        let start = Instant::now();
        let mut sent = Vec::new();
        for i in 0..N {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let spec = json!({"environmentVariables": {"N": i.to_string()}});
            send(Event::Apply(object(proxy_config(
                "flood",
                &format!("pc{i}"),
                spec,
            ))));
            sent.push(Instant::now());
        }
        tokio::time::sleep(SETTLE * 2).await;
        let states = lock(&states);
        let window = SETTLE.as_millis() as usize;
        let took = (Instant::now() - start).as_millis() as usize;
        assert!(
            states.len() <= 1 + took / window + 2,
            "{} states for {N} events in {took} ms",
            states.len()
        );
        // Each event is in a state handed over within one window of it.
        let count = |s: &ClusterState| s.proxy_configs.as_ref().unwrap().count("flood");
        for (i, at) in sent.iter().enumerate() {
            let (when, _) = states
                .iter()
                .find(|(when, s)| when >= at && count(s) > i)
                .unwrap_or_else(|| panic!("event {i} in no state"));
            assert!(*when - *at <= SETTLE, "event {i} waited {:?}", *when - *at);
        }
        let last = &states.last().unwrap().1;
        assert_eq!(count(last), N);
    }
}
