//! The caBundle of our own MutatingWebhookConfigurations kept equal to the serving CA (`serve
//! --kubeconfig` / `--in-cluster` with `--ca-bundle`), as Istio's `pkg/webhooks/webhookpatch.go`
//! `WebhookCertPatcher` does: on start, whenever the CA file changes, and whenever one of the
//! configurations changes (someone wrote another caBundle), every configuration labelled with our
//! revision (`istio.io/rev`) gets the CA in each entry whose name ends with Istio's webhook name
//! (`sidecar-injector.istio.io`). Another revision's configuration is never read (the watch selects our
//! label) nor written (the label is checked again before each patch).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::ByteString;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Resource, ResourceExt};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::webhook_config::ENTRY_SUFFIX;

/// The revision label of the configurations (Istio's `label.IoIstioRev`).
const REV_LABEL: &str = "istio.io/rev";
/// The `resource` label of the watch's errors.
const RESOURCE: &str = "mutatingwebhookconfigurations";

/// Istio's `newWebhookPatcherQueue` rate limiter (`NewTypedItemFastSlowRateLimiter(100ms, 1m, 5)`): the
/// first retries come fast, to get past a conflict between replicas, then slowly, forever.
fn retry_delay(failures: u32) -> Duration {
    if failures <= 5 {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(60)
    }
}

/// The label value of `--revision` (empty means the default revision, labelled `default`).
pub fn revision_label(revision: &str) -> &str {
    if revision.is_empty() {
        "default"
    } else {
        revision
    }
}

/// What one look at a configuration found.
#[derive(Debug, PartialEq)]
enum Plan {
    /// Not ours (another revision, or no label): left alone (Istio's `errWrongRevision`).
    NotOurs,
    /// No entry with our webhook name (Istio's `errNoWebhookWithName`): nothing to patch, no retry.
    NoEntry,
    /// Every entry of ours already has the CA.
    UpToDate,
    /// The JSON patch that sets it, guarded by the resourceVersion it was computed from.
    Patch(Value),
}

/// Istio's `patchMutatingWebhookConfig` decision for one configuration.
fn plan(config: &MutatingWebhookConfiguration, revision: &str, ca: &[u8]) -> Plan {
    if config.labels().get(REV_LABEL).map(String::as_str) != Some(revision) {
        return Plan::NotOurs;
    }
    let mut found = false;
    // The resourceVersion test turns a concurrent writer's change into a failed patch, retried on the
    // newer object (Istio's Update has the same optimistic check).
    let mut ops = vec![json!({
        "op": "test",
        "path": "/metadata/resourceVersion",
        "value": config.resource_version(),
    })];
    for (i, wh) in config.webhooks.iter().flatten().enumerate() {
        if !wh.name.ends_with(ENTRY_SUFFIX) {
            continue;
        }
        found = true;
        if wh.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) == Some(ca) {
            continue;
        }
        ops.push(json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": wh.name}));
        ops.push(json!({
            "op": "add",
            "path": format!("/webhooks/{i}/clientConfig/caBundle"),
            "value": ByteString(ca.to_vec()),
        }));
    }
    match (found, ops.len()) {
        (false, _) => Plan::NoEntry,
        (true, 1) => Plan::UpToDate,
        (true, _) => Plan::Patch(Value::Array(ops)),
    }
}

/// Starts the patcher on the current tokio runtime: configurations labelled `istio.io/rev=<revision>`
/// (the label value, see [`revision_label`]) get the CA `ca` holds, now and after each change of either.
/// With `names` (`--webhook-config-names`), only those configurations are watched, each by a
/// `metadata.name` field selector, which RBAC that grants list/watch by `resourceNames` allows; without,
/// one watch selects the label across the cluster.
pub fn start(
    client: kube::Client,
    revision: String,
    names: Vec<String>,
    ca: watch::Receiver<Arc<Vec<u8>>>,
    metrics: Arc<Metrics>,
) {
    tokio::spawn(run(client, revision, names, ca, metrics));
}

/// `--webhook-config-names`, taken by `serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WebhookConfigNamesArgs {
    /// The MutatingWebhookConfigurations whose caBundle `serve --kubeconfig` / `--in-cluster` keeps
    /// (comma-separated), watched by name so that the service account needs list/watch/patch on those
    /// names only (the chart's RBAC); they must still carry our revision label. Without it, every
    /// configuration labelled with our revision.
    #[arg(
        long = "webhook-config-names",
        value_name = "NAME,...",
        value_delimiter = ','
    )]
    pub webhook_config_names: Vec<String>,
}

/// A configuration waiting for a patch: failures so far and when to try next.
struct Pending {
    failures: u32,
    at: Instant,
}

/// One watch's events, tagged with the watch's index.
type Tagged = futures::stream::BoxStream<
    'static,
    (
        usize,
        Result<Event<MutatingWebhookConfiguration>, watcher::Error>,
    ),
>;

/// The watches of [`start`]: one per name, or one for the label; each event tagged with its watch's
/// index in `names` (0 for the label's).
fn watches(
    client: &kube::Client,
    selector: &str,
    names: &[String],
) -> futures::stream::SelectAll<Tagged> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let configs: Vec<watcher::Config> = if names.is_empty() {
        vec![watcher::Config::default().labels(selector)]
    } else {
        names
            .iter()
            .map(|n| {
                watcher::Config::default()
                    .labels(selector)
                    .fields(&format!("metadata.name={n}"))
            })
            .collect()
    };
    futures::stream::select_all(configs.into_iter().enumerate().map(|(i, config)| {
        watcher::watcher(api.clone(), config)
            .default_backoff()
            .map(move |e| (i, e))
            .boxed()
    }))
}

async fn run(
    client: kube::Client,
    revision: String,
    names: Vec<String>,
    mut ca: watch::Receiver<Arc<Vec<u8>>>,
    metrics: Arc<Metrics>,
) {
    let selector = format!("{REV_LABEL}={revision}");
    let mut stream = watches(&client, &selector, &names);
    // Whether watch `i` lists `name`: a relist replaces just what its own watch can see.
    let owns = |i: usize, name: &str| names.get(i).is_none_or(|n| n == name);
    let mut configs: BTreeMap<String, MutatingWebhookConfiguration> = BTreeMap::new();
    let mut relisting: BTreeMap<usize, BTreeMap<String, MutatingWebhookConfiguration>> =
        BTreeMap::new();
    let mut pending: BTreeMap<String, Pending> = BTreeMap::new();
    let now_pending = || Pending {
        failures: 0,
        at: Instant::now(),
    };
    loop {
        let next = pending.values().map(|p| p.at).min();
        tokio::select! {
            event = stream.next() => match event {
                None => return,
                Some((_, Err(e))) => {
                    metrics.cluster_watch_error(RESOURCE);
                    tracing::warn!(resource = RESOURCE, error = %e, "webhook configuration watch failed; retrying with backoff");
                }
                Some((i, Ok(Event::Init))) => {
                    relisting.insert(i, BTreeMap::new());
                }
                Some((i, Ok(Event::InitApply(c)))) => {
                    if let Some(set) = relisting.get_mut(&i) {
                        set.insert(c.name_any(), c);
                    }
                }
                Some((i, Ok(Event::InitDone))) => {
                    configs.retain(|name, _| !owns(i, name));
                    configs.extend(relisting.remove(&i).unwrap_or_default());
                    pending.retain(|name, _| configs.contains_key(name));
                    for name in configs.keys() {
                        pending.entry(name.clone()).or_insert_with(now_pending);
                    }
                }
                Some((_, Ok(Event::Apply(c)))) => {
                    // A change is looked at now, whatever backoff an earlier failure set.
                    pending.insert(c.name_any(), now_pending());
                    configs.insert(c.name_any(), c);
                }
                Some((_, Ok(Event::Delete(c)))) => {
                    configs.remove(&c.name_any());
                    pending.remove(&c.name_any());
                }
            },
            changed = ca.changed() => {
                if changed.is_err() {
                    return;
                }
                tracing::info!("serving CA changed; patching the webhook configurations");
                for name in configs.keys() {
                    pending.insert(name.clone(), now_pending());
                }
            }
            _ = sleep_until(next) => {}
        }
        let now = Instant::now();
        let due: Vec<String> = pending
            .iter()
            .filter(|(_, p)| p.at <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            let Some(config) = configs.get(&name) else {
                pending.remove(&name);
                continue;
            };
            let bundle = ca.borrow().clone();
            match patch(&client, config, &revision, &bundle, &metrics).await {
                Ok(()) => {
                    pending.remove(&name);
                }
                Err(e) => {
                    metrics.webhook_patch_failures.inc();
                    let p = pending.entry(name.clone()).or_insert_with(now_pending);
                    p.failures += 1;
                    p.at = Instant::now() + retry_delay(p.failures);
                    tracing::warn!(webhook_config = name, failures = p.failures, error = %e, "patching the caBundle failed; retrying");
                }
            }
        }
    }
}

/// Sleeps until `at`, forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Patches one configuration if it needs it.
async fn patch(
    client: &kube::Client,
    config: &MutatingWebhookConfiguration,
    revision: &str,
    ca: &[u8],
    metrics: &Metrics,
) -> Result<(), PatchError> {
    let ops = match plan(config, revision, ca) {
        Plan::Patch(ops) => ops,
        Plan::NotOurs | Plan::NoEntry | Plan::UpToDate => return Ok(()),
    };
    let name = config.name_any();
    let url = format!(
        "{}/{name}",
        MutatingWebhookConfiguration::url_path(&(), None)
    );
    let request = hyper::Request::patch(url)
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(&ops).map_err(PatchError::Encode)?)
        .map_err(PatchError::Request)?;
    metrics.webhook_patch_attempts.inc();
    client
        .request::<MutatingWebhookConfiguration>(request)
        .await
        .map_err(PatchError::Api)?;
    tracing::info!(webhook_config = name, "caBundle patched");
    Ok(())
}

/// Why a patch was not applied (retried).
#[derive(Debug, thiserror::Error)]
enum PatchError {
    /// The patch could not be encoded (cannot happen for the values written).
    #[error("encoding the patch: {0}")]
    Encode(#[source] serde_json::Error),
    /// The HTTP request could not be built (cannot happen for a valid object name).
    #[error("building the request: {0}")]
    Request(#[source] hyper::http::Error),
    /// The API server refused it or could not be reached (a concurrent change fails the
    /// resourceVersion test and is retried on the newer object).
    #[error("{0}")]
    Api(#[source] kube::Error),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn config(
        rev: Option<&str>,
        entries: &[(&str, Option<&[u8]>)],
    ) -> MutatingWebhookConfiguration {
        let labels = rev.map(|r| json!({REV_LABEL: r})).unwrap_or(json!({}));
        let webhooks: Vec<Value> = entries
            .iter()
            .map(|(name, ca)| {
                let mut cc = json!({"url": "https://x/inject"});
                if let Some(ca) = ca {
                    cc["caBundle"] = serde_json::to_value(ByteString(ca.to_vec())).unwrap();
                }
                json!({"name": name, "clientConfig": cc, "sideEffects": "None",
                       "admissionReviewVersions": ["v1"]})
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "c", "resourceVersion": "7", "labels": labels},
            "webhooks": webhooks,
        }))
        .unwrap()
    }

    #[test]
    fn only_our_revisions_entries_with_our_webhook_name_are_patched() {
        let ca = b"CA".as_slice();
        assert_eq!(
            plan(
                &config(
                    Some("canary"),
                    &[("rev.namespace.sidecar-injector.istio.io", None)]
                ),
                "default",
                ca
            ),
            Plan::NotOurs
        );
        assert_eq!(
            plan(
                &config(None, &[("namespace.sidecar-injector.istio.io", None)]),
                "default",
                ca
            ),
            Plan::NotOurs
        );
        assert_eq!(
            plan(
                &config(Some("default"), &[("other.example.com", None)]),
                "default",
                ca
            ),
            Plan::NoEntry
        );
        assert_eq!(
            plan(
                &config(
                    Some("default"),
                    &[("namespace.sidecar-injector.istio.io", Some(ca))]
                ),
                "default",
                ca
            ),
            Plan::UpToDate
        );
        let Plan::Patch(ops) = plan(
            &config(
                Some("default"),
                &[
                    ("namespace.sidecar-injector.istio.io", Some(b"old")),
                    ("other.example.com", Some(b"old")),
                    ("object.sidecar-injector.istio.io", Some(ca)),
                    ("rev.object.sidecar-injector.istio.io", None),
                ],
            ),
            "default",
            ca,
        ) else {
            panic!("no patch")
        };
        let paths: Vec<&str> = ops
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                "/metadata/resourceVersion",
                "/webhooks/0/name",
                "/webhooks/0/clientConfig/caBundle",
                "/webhooks/3/name",
                "/webhooks/3/clientConfig/caBundle",
            ]
        );
        assert_eq!(ops[0]["value"], "7");
        assert_eq!(ops[2]["value"], "Q0E=");
    }

    #[test]
    fn retries_come_fast_five_times_then_slowly() {
        assert_eq!(retry_delay(1), Duration::from_millis(100));
        assert_eq!(retry_delay(5), Duration::from_millis(100));
        assert_eq!(retry_delay(6), Duration::from_secs(60));
        assert_eq!(revision_label(""), "default");
        assert_eq!(revision_label("canary"), "canary");
    }
}
