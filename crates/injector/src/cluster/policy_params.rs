//! The MutatingAdmissionPolicy's params object kept compiled from the configuration serve injects with
//! (`serve --kubeconfig` / `--in-cluster` with `--own-policy-params`), as `ca_bundle_patch` keeps the
//! webhook configurations' caBundle. Every engine serve swaps in (a new configuration from its files or
//! ConfigMaps, a ProxyConfig, a node's kubelet version deciding native sidecars) is compiled as `injector
//! policy` compiles it (`shared::policy::params`), and the revision's `InjectionParams` object is
//! rewritten when its `spec` differs. Nothing is written when it is the same, so a burst of swaps is
//! one compile and at most one write, and every write goes through the rate-limited [`WriteQueue`].
//!
//! Only the params object is owned, not the policy or its bindings: the policy's text is the same for
//! every configuration (the CRD keeps the compiled parts in `spec`, see `policy`), and the bindings
//! follow the webhook configurations' selectors, which the chart installs (`policy.enabled`) beside the
//! CRD, the policy and an initial params object. So serve needs update rights on one object of one kind,
//! restricted by name, and a rolling update of serve never rewrites what the API server runs. The object
//! is created when it is missing (that needs `create`, which RBAC cannot restrict by name, so the chart
//! installs the object and does not grant it; without the right the create is retried with backoff).
//!
//! Another revision's object is never written: it is watched by name (the name `injector policy` gives
//! the revision's), and its `istio.io/rev` label is checked before every write, as `ca_bundle_patch` does.
//!
//! A configuration the compiler refuses (`ParamsError`: a template the CEL does not reproduce, a
//! configured sidecar text other than the compiled one, ...) must not leave the last params behind,
//! which would inject pods with the previous configuration. The object then gets a spec whose
//! `decision.policy` is neither `enabled` nor `disabled` (`shared::policy::object::refused_spec`), so the
//! policy's `injects` match condition holds for no pod and every pod goes to the webhook, and it says why
//! in `spec.refused`. The object is kept rather than deleted: the bindings' `parameterNotFoundAction:
//! Allow` would skip the policy just the same, but deleting needs `delete` and then `create` to come
//! back, and a refused spec shows why on the object itself. The metric
//! `injector_policy_params_refused` is 1 while that holds, and the refusal is logged at error level.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::ResourceExt;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cluster::write_queue::{WriteError, WriteQueue, LIMITS, WRITE_TIMEOUT};
use crate::shared::metrics::Metrics;
use crate::shared::policy::object::{
    params_name, params_object, refused_spec, PARAMS_GROUP, PARAMS_KIND, PARAMS_PLURAL,
    PARAMS_VERSION, REV_LABEL,
};
use crate::shared::policy::params;
use crate::shared::webhook_config;
use inject::engine::Engine;
use sidecar_core::fields::Fields;

/// The `resource` label of the watch's errors.
const RESOURCE: &str = "injectionparams";

/// `--own-policy-params` and what it compiles with, taken by `serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PolicyParamsArgs {
    /// Keep the revision's MutatingAdmissionPolicy params object (the `InjectionParams` that `injector
    /// policy` writes, named as it names it) compiled from the configuration, ProxyConfigs and nodes
    /// this server injects with: rewritten when they change and its spec differs, created when
    /// missing, never written when it carries another revision's `istio.io/rev`. A configuration the
    /// policy cannot reproduce gets params that inject no pod (left to the webhook). Needs
    /// `--kubeconfig` or `--in-cluster`; the policy, its bindings and the CRD are the chart's
    /// (`policy.enabled`).
    #[arg(long = "own-policy-params")]
    pub own_policy_params: bool,
    /// The URL path the policy's injection is compiled for, as `injector policy --path` (its
    /// `/inject/cluster/C/net/N` parameters become the proxy's environment).
    #[arg(long = "policy-path", value_name = "PATH", default_value = "/inject")]
    pub policy_path: String,
}

/// Why the owner did not start.
#[derive(Debug, thiserror::Error)]
pub enum PolicyParamsError {
    /// The revision cannot name the params object (as `injector policy` refuses it).
    #[error(transparent)]
    Revision(#[from] webhook_config::WebhookConfigError),
    /// The revision's webhook flags could not be built.
    #[error("the revision's webhook configuration: {0}")]
    Flags(String),
}

/// What the object should be: its name, revision (label value) and the spec compiled last.
#[derive(Debug)]
struct Want {
    name: String,
    revision: String,
    path: String,
    /// `None` until the first compile.
    spec: Option<Value>,
}

/// What one look at the object decided.
#[derive(Debug, PartialEq)]
enum Plan {
    /// Another revision's (or unlabelled): left alone.
    NotOurs,
    /// Nothing to write (the same spec, or none compiled yet).
    Settled,
    /// The object is missing: create it.
    Create(Value),
    /// The JSON patch that writes the spec, guarded by the resourceVersion it was computed from.
    Patch(Value),
}

/// Decides what the object `current` (`None`: missing) needs for `spec` of `revision`.
fn look(current: Option<&DynamicObject>, name: &str, revision: &str, spec: &Value) -> Plan {
    let Some(current) = current else {
        return Plan::Create(params_object(name, revision, spec.clone()));
    };
    if current.labels().get(REV_LABEL).map(String::as_str) != Some(revision) {
        return Plan::NotOurs;
    }
    if current.data.field("spec") == Some(spec) {
        return Plan::Settled;
    }
    // `add` replaces a member that exists: the resourceVersion makes a concurrent writer's change a 409
    // Conflict, retried on the newer object.
    Plan::Patch(json!([
        {"op": "add", "path": "/metadata/resourceVersion", "value": current.resource_version()},
        {"op": "add", "path": "/spec", "value": spec},
    ]))
}

/// Compiles `engine` into the params `spec`; a configuration the compiler refuses gives the refused
/// spec and the reason.
fn compile(engine: &Engine, revision: &str, path: &str) -> (Value, Option<String>) {
    let excluded = engine.proxy_config_namespaces();
    let compiled = params::compile(engine, path, &excluded).and_then(|spec| {
        serde_json::to_value(&spec).map_err(|e| params::ParamsError::Unsupported {
            what: format!("cannot be written as JSON ({e})"),
        })
    });
    match compiled {
        Ok(spec) => (spec, None),
        Err(e) => {
            let reason = e.to_string();
            (refused_spec(revision, &reason), Some(reason))
        }
    }
}

/// The params kind as the dynamic API knows it.
fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(PARAMS_GROUP, PARAMS_VERSION, PARAMS_KIND),
        PARAMS_PLURAL,
    )
}

/// Starts the owner on the current tokio runtime: the params object of `revision` (as `--revision`
/// gives it, empty for the default revision) compiled for `args.policy_path` from each engine `engines`
/// hands over (the current one first).
pub fn start(
    client: kube::Client,
    revision: &str,
    args: &PolicyParamsArgs,
    engines: watch::Receiver<Arc<Engine>>,
    metrics: Arc<Metrics>,
) -> Result<(), PolicyParamsError> {
    let mut webhook = webhook_config::Args::for_revision(revision, false)
        .map_err(|e| PolicyParamsError::Flags(e.to_string()))?;
    webhook.scope.path = args.policy_path.clone();
    let name = params_name(&webhook)?;
    let revision = crate::cluster::ca_bundle_patch::revision_label(revision).to_string();
    tracing::info!(
        params = name,
        revision,
        "keeping the MutatingAdmissionPolicy's params object compiled"
    );
    let task = Task {
        api: Api::all_with(client.clone(), &api_resource()),
        client,
        want: Want {
            name,
            revision,
            path: args.policy_path.clone(),
            spec: None,
        },
        current: None,
        listed: false,
        changed_at: None,
        queue: WriteQueue::new(LIMITS, Instant::now()),
        metrics,
    };
    tokio::spawn(task.run(engines));
    Ok(())
}

/// The owner's state, owned by its task.
struct Task {
    client: kube::Client,
    api: Api<DynamicObject>,
    want: Want,
    /// The object as last listed or watched (`None`: missing).
    current: Option<DynamicObject>,
    /// The watch has listed once (until then a missing object is not known to be missing).
    listed: bool,
    /// When the engine last changed without the params written since (the log's latency).
    changed_at: Option<Instant>,
    /// One key, the object's name: the queue's deduplication, backoff and rate.
    queue: WriteQueue<()>,
    metrics: Arc<Metrics>,
}

impl Task {
    async fn run(mut self, mut engines: watch::Receiver<Arc<Engine>>) {
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", self.want.name));
        let mut stream = watcher::watcher(self.api.clone(), config)
            .default_backoff()
            .boxed();
        // The current engine is compiled first, as a change.
        engines.mark_changed();
        let mut relisted: Option<Option<DynamicObject>> = None;
        loop {
            let next = self.queue.next_due();
            tokio::select! {
                event = stream.next() => match event {
                    None => return,
                    Some(Err(e)) => {
                        self.metrics.cluster_watch_error(RESOURCE);
                        tracing::warn!(resource = RESOURCE, error = %e, "params object watch failed; retrying with backoff");
                    }
                    Some(Ok(Event::Init)) => relisted = Some(None),
                    Some(Ok(Event::InitApply(o))) => relisted = Some(Some(o)),
                    Some(Ok(Event::InitDone)) => {
                        self.current = relisted.take().flatten();
                        self.listed = true;
                        self.queue.schedule((), Instant::now());
                    }
                    Some(Ok(Event::Apply(o))) => {
                        self.current = Some(o);
                        self.queue.schedule((), Instant::now());
                    }
                    Some(Ok(Event::Delete(_))) => {
                        self.current = None;
                        self.queue.schedule((), Instant::now());
                    }
                },
                changed = engines.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // Compiled when the look is due: a burst of swaps is one compile of the last.
                    self.want.spec = None;
                    self.changed_at.get_or_insert_with(Instant::now);
                    self.queue.schedule((), Instant::now());
                }
                _ = sleep_until(next) => {}
            }
            if self.queue.take_due(Instant::now()).is_empty() {
                continue;
            }
            if self.want.spec.is_none() || engines.has_changed().unwrap_or(false) {
                let engine = engines.borrow_and_update().clone();
                self.compile(engine).await;
            }
            self.look_now().await;
        }
    }

    /// Compiles `engine` off the async workers (seven injections of the canonical pod).
    async fn compile(&mut self, engine: Arc<Engine>) {
        let (revision, path) = (self.want.revision.clone(), self.want.path.clone());
        let compiled =
            tokio::task::spawn_blocking(move || compile(&engine, &revision, &path)).await;
        let (spec, refused) = match compiled {
            Ok(c) => c,
            Err(e) => {
                // Only a panic in the compiler gets here: inject nothing rather than stale params.
                let reason = format!("the compiler failed: {e}");
                (refused_spec(&self.want.revision, &reason), Some(reason))
            }
        };
        match &refused {
            Some(reason) => tracing::error!(
                params = self.want.name,
                reason,
                "the configuration cannot be compiled into the MutatingAdmissionPolicy; its params now inject no pod (all go to the webhook)"
            ),
            None => tracing::debug!(params = self.want.name, "configuration compiled into params"),
        }
        self.metrics
            .policy_params_refused
            .set(i64::from(refused.is_some()));
        self.metrics.policy_params_compiles.inc();
        self.want.spec = Some(spec);
    }

    /// Looks at the object and writes what it needs, as far as the queue allows.
    async fn look_now(&mut self) {
        let Some(spec) = &self.want.spec else {
            return;
        };
        if !self.listed {
            return;
        }
        let now = Instant::now();
        let plan = look(
            self.current.as_ref(),
            &self.want.name,
            &self.want.revision,
            spec,
        );
        let write = match plan {
            Plan::NotOurs => {
                self.queue.settled(&());
                tracing::warn!(
                    params = self.want.name,
                    revision = self.want.revision,
                    "the params object carries another revision's label; not writing it"
                );
                return;
            }
            Plan::Settled => {
                self.queue.settled(&());
                self.changed_at = None;
                return;
            }
            Plan::Create(object) => Write::Create(object),
            Plan::Patch(ops) => Write::Patch(ops),
        };
        if self.queue.permit(&(), now).is_err() {
            // Queued again for when its backoff or the overall rate allows.
            return;
        }
        let created = matches!(write, Write::Create(_));
        let result = write.send(&self.client, &self.want.name).await;
        let backoff = self.queue.wrote(&(), result.is_ok(), Instant::now());
        self.metrics.policy_params_write(match &result {
            Ok(_) => "success",
            Err(e) if e.is_conflict() => "conflict",
            Err(_) => "failure",
        });
        match result {
            Ok(written) => {
                // The next look starts from what was written, not from the watch's older copy (which
                // would fail the resourceVersion check until the watch catches up).
                self.current = Some(written);
                let since_change_ms = self
                    .changed_at
                    .take()
                    .map(|at| at.elapsed().as_millis() as u64);
                tracing::info!(
                    params = self.want.name,
                    created,
                    since_change_ms,
                    "policy params written"
                );
            }
            Err(e) => tracing::warn!(
                params = self.want.name,
                created,
                retry_in_ms = backoff.as_millis() as u64,
                error = %e,
                "writing the policy params failed; retrying with backoff"
            ),
        }
    }
}

/// A write the queue allowed.
enum Write {
    Create(Value),
    Patch(Value),
}

impl Write {
    /// Sends it, bounded by [`WRITE_TIMEOUT`].
    async fn send(self, client: &kube::Client, name: &str) -> Result<DynamicObject, WriteError> {
        let collection = format!("/apis/{PARAMS_GROUP}/{PARAMS_VERSION}/{PARAMS_PLURAL}");
        let request = match self {
            Write::Create(object) => hyper::Request::post(collection)
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&object).map_err(WriteError::Encode)?),
            Write::Patch(ops) => hyper::Request::patch(format!("{collection}/{name}"))
                .header("content-type", "application/json-patch+json")
                .body(serde_json::to_vec(&ops).map_err(WriteError::Encode)?),
        }
        .map_err(WriteError::Request)?;
        tokio::time::timeout(WRITE_TIMEOUT, client.request::<DynamicObject>(request))
            .await
            .map_err(|_| WriteError::Timeout)?
            .map_err(WriteError::Api)
    }
}

/// Sleeps until `at`, forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use inject::config::Settings;

    fn object(revision: Option<&str>, spec: Value) -> DynamicObject {
        let mut o = params_object("sidecar-injector", revision.unwrap_or("x"), spec);
        if revision.is_none() {
            o["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove(REV_LABEL);
        }
        o["metadata"]["resourceVersion"] = json!("42");
        serde_json::from_value(o).unwrap()
    }

    #[test]
    fn a_spec_is_written_only_when_it_differs_and_only_to_our_revision() {
        let spec = json!({"revision": "default", "native": true});
        let ours = object(Some("default"), spec.clone());
        assert_eq!(
            look(Some(&ours), "sidecar-injector", "default", &spec),
            Plan::Settled
        );
        let new = json!({"revision": "default", "native": false});
        assert_eq!(
            look(Some(&ours), "sidecar-injector", "default", &new),
            Plan::Patch(json!([
                {"op": "add", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/spec", "value": new},
            ]))
        );
        for other in [
            object(Some("canary"), spec.clone()),
            object(None, spec.clone()),
        ] {
            assert_eq!(
                look(Some(&other), "sidecar-injector", "default", &new),
                Plan::NotOurs
            );
        }
        assert_eq!(
            look(None, "sidecar-injector", "default", &new),
            Plan::Create(params_object("sidecar-injector", "default", new.clone()))
        );
    }

    fn engine(config: Value) -> Engine {
        let config = (!config.is_null()).then_some(("config", &config));
        Engine::new(Settings::from_documents(None, None, config, true, "", "").unwrap())
    }

    #[test]
    fn a_refused_configuration_gets_params_that_inject_no_pod() {
        use crate::shared::policy::subset;
        // Compiled: the spec `injector policy` writes.
        let good = engine(Value::Null);
        let (spec, refused) = compile(&good, "default", "/inject");
        assert_eq!(refused, None);
        let expected = params::compile(&good, "/inject", &[]).unwrap();
        assert_eq!(spec, serde_json::to_value(&expected).unwrap());
        // Refused: a template the policy does not reproduce.
        let bad = engine(json!({"defaultTemplates": ["sidecar", "grpc-agent"]}));
        let (spec, refused) = compile(&bad, "default", "/inject");
        let reason = refused.expect("refused");
        assert!(reason.contains("default templates"), "{reason}");
        assert_eq!(spec["refused"], json!(reason));
        assert_eq!(spec["decision"]["policy"], json!("refused"));
        // The match condition that decides reads a policy the refused spec never has.
        let injects = subset::rules()
            .into_iter()
            .find(|r| r.name == "injects")
            .unwrap();
        assert!(
            injects
                .cel
                .starts_with("params.spec.decision.policy in ['enabled', 'disabled'] &&"),
            "{}",
            injects.cel
        );
    }
}
