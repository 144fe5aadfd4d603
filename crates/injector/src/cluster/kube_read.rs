//! What `doctor` and `explain` read from the API server (behind `--kubeconfig` / `--in-cluster`) in place
//! of the files `kubectl get … -o yaml` would write: this injector's MutatingWebhookConfigurations and the
//! Namespaces, as JSON objects of the same shape, so that the file path and the cluster path feed the same
//! checks. Every error names the object that could not be read.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::cluster::kube_client::{KubeArgs, KubeClientError};
use crate::shared::webhook_config::ENTRY_SUFFIX;
use crate::shared::webhook_entry::{self, Entry};
use sidecar_core::fields::{self, Fields};

/// Which MutatingWebhookConfigurations are this injector's, defined once for doctor and explain.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SelectArgs {
    /// With --kubeconfig/--in-cluster: read this MutatingWebhookConfiguration (repeatable); default: every
    /// configuration with an entry named `*sidecar-injector.istio.io`, as istiod's certificate patcher
    /// finds its own.
    #[arg(long = "webhook-config-name", value_name = "NAME")]
    pub names: Vec<String>,
    /// With --kubeconfig/--in-cluster: the configurations matching this label selector (e.g.
    /// `istio.io/rev=canary`), whatever their entries are named.
    #[arg(long = "webhook-config-selector", value_name = "SELECTOR")]
    pub selector: Option<String>,
}

/// Why `--kubeconfig` / `--in-cluster` gave doctor or explain nothing to work on.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The flags give no client.
    #[error(transparent)]
    Client(#[from] KubeClientError),
    /// An object could not be read from the cluster (named in the message).
    #[error(transparent)]
    Read(#[from] KubeReadError),
    /// The cluster holds no entry of the configurations selected.
    #[error("{from}: no MutatingWebhookConfiguration with an entry named *sidecar-injector.istio.io (or as --webhook-config-name/--webhook-config-selector select)")]
    NoEntries { from: String },
    /// The async runtime for the cluster reads could not start.
    #[error("starting the runtime: {0}")]
    Runtime(std::io::Error),
}

/// A runtime and the client of `kube` (`--kubeconfig` or `--in-cluster` given).
pub fn connect(kube: &KubeArgs) -> Result<(tokio::runtime::Runtime, kube::Client), ClusterError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ClusterError::Runtime)?;
    let client = rt
        .block_on(kube.client())?
        .ok_or_else(|| ClusterError::NoEntries { from: source(kube) })?;
    Ok((rt, client))
}

/// The entries of `configs`, at least one (`kube` names the cluster otherwise).
pub fn entries(configs: &[Value], kube: &KubeArgs) -> Result<Vec<Entry>, ClusterError> {
    let entries = webhook_entry::entries_of(configs);
    if entries.is_empty() {
        return Err(ClusterError::NoEntries { from: source(kube) });
    }
    Ok(entries)
}

/// An object (or list) the API server did not give.
#[derive(Debug, thiserror::Error)]
#[error("reading {what} from the cluster: {source}")]
pub struct KubeReadError {
    /// The object, as `Kind namespace/name` or `Kinds` for a list.
    pub what: String,
    #[source]
    pub source: kube::Error,
}

impl KubeReadError {
    /// Names `what` as the object whose read failed with `source`.
    pub fn new(what: impl Into<String>, source: kube::Error) -> KubeReadError {
        KubeReadError {
            what: what.into(),
            source,
        }
    }
}

/// `object` as the JSON `kubectl get -o json` prints (kind and apiVersion included).
pub fn to_json<K: Serialize>(object: &K, what: &str) -> Result<Value, KubeReadError> {
    serde_json::to_value(object).map_err(|e| KubeReadError::new(what, kube::Error::SerdeError(e)))
}

/// Lists every object of kind `K` (cluster-scoped, or in all namespaces), as JSON objects.
pub async fn list<K>(
    client: &kube::Client,
    params: &ListParams,
    what: &str,
) -> Result<Vec<Value>, KubeReadError>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    let api: Api<K> = Api::all(client.clone());
    let items = api
        .list(params)
        .await
        .map_err(|e| KubeReadError::new(what, e))?;
    items.items.iter().map(|o| to_json(o, what)).collect()
}

/// This injector's MutatingWebhookConfigurations (see [`SelectArgs`]), in name order as the API server
/// calls them.
pub async fn webhook_configurations(
    client: &kube::Client,
    select: &SelectArgs,
) -> Result<Vec<Value>, KubeReadError> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut out = Vec::new();
    if select.names.is_empty() {
        let mut params = ListParams::default();
        if let Some(s) = &select.selector {
            params = params.labels(s);
        }
        for c in
            list::<MutatingWebhookConfiguration>(client, &params, "MutatingWebhookConfigurations")
                .await?
        {
            let ours = c
                .field("webhooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|w| fields::path(w, ["name"]).and_then(Value::as_str))
                .any(|n| n.ends_with(ENTRY_SUFFIX));
            if ours || select.selector.is_some() {
                out.push(c);
            }
        }
    } else {
        for name in &select.names {
            let what = format!("MutatingWebhookConfiguration {name}");
            let c = api
                .get(name)
                .await
                .map_err(|e| KubeReadError::new(&what, e))?;
            out.push(to_json(&c, &what)?);
        }
    }
    out.sort_by(|a, b| {
        let name = |v: &Value| {
            fields::path(v, ["metadata", "name"])
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        name(a).cmp(&name(b))
    });
    Ok(out)
}

/// Every Namespace, as `kubectl get ns -o json` lists them.
pub async fn namespaces(client: &kube::Client) -> Result<Vec<Value>, KubeReadError> {
    list::<Namespace>(client, &ListParams::default(), "Namespaces").await
}

/// Where the objects came from, for messages: `the cluster of --kubeconfig FILE` (or `--in-cluster`).
pub fn source(kube: &KubeArgs) -> String {
    match &kube.kubeconfig {
        Some(p) => format!("the cluster of --kubeconfig {}", p.display()),
        None => "the cluster (--in-cluster)".to_string(),
    }
}
