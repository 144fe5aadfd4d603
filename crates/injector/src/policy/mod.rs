//! The injector compiled into a MutatingAdmissionPolicy (KEP-3962), which the API server runs in
//! process: no network call, so a pod in the policy's subset is injected while the webhook is down.
//!
//! The compiler is `shared::policy` (explain --policy uses it too): its `params` (the configuration-wide
//! parts), `cel` (the per-pod JSONPatch) and `subset` (the pods the policy injects). Here:
//! the objects (the params CRD and object, the policy, one binding per webhook entry, selecting
//!   what `webhook_config` generates for the same revision and tags) and `injector policy`.
//!
//! With `--guard`, also the guard (`shared::policy::guard`): a ValidatingAdmissionPolicy and its
//! bindings rejecting a pod the webhook would have injected that reached validation un-injected (the
//! webhook down under `failurePolicy: Ignore`, the pod outside the policy's subset).
//!
//! The params kind is a CRD of ours, `InjectionParams`, whose `spec` keeps unknown fields: a ConfigMap
//! holds only strings, and CEL has no JSON decoding, so the rendered containers and volumes could not
//! come from one. With the CRD, the policy's text is the same for every configuration and a new
//! configuration, ProxyConfig or node set changes only the params object.

use serde_json::{json, Value};

use crate::shared::policy::{cel, guard, params, subset};
use crate::shared::webhook_config::{self, Scope, WebhookConfigError};
use inject::cluster_state::{ClusterState, ProxyConfigArgs};
use inject::config::{ConfigArgs, ConfigError, Settings};
use inject::engine::Engine;
use inject::kube_objects::ObjectsError;
use sidecar_core::fields::Fields;

pub use crate::shared::policy::{covers, Facts, ParamsError, ParamsSpec, Rule, MARKER_ANNOTATION};

/// The API group of the admission policies.
const ADMISSION_GROUP: &str = "admissionregistration.k8s.io";

use crate::shared::policy::object::{self as params_object, labels};
/// The params CRD: `InjectionParams.policy.sidecar-inject.io/v1alpha1`, cluster-scoped (defined in
/// `shared::policy::object`, which `serve --own-policy-params` writes through too).
pub use crate::shared::policy::object::{PARAMS_GROUP, PARAMS_KIND, PARAMS_PLURAL, PARAMS_VERSION};

/// Which version of the MutatingAdmissionPolicy API is written: `v1` (GA and served by default from
/// Kubernetes 1.36, the release `tools/k8s` pins) or `v1beta1` (1.34 and 1.35, behind the
/// `MutatingAdmissionPolicy` feature gate and `--runtime-config=admissionregistration.k8s.io/v1beta1=true`).
/// The objects are the same in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiVersion {
    V1beta1,
    V1,
}

impl ApiVersion {
    /// `admissionregistration.k8s.io/<version>`.
    pub fn api_version(self) -> String {
        let v = match self {
            ApiVersion::V1beta1 => "v1beta1",
            ApiVersion::V1 => "v1",
        };
        format!("{ADMISSION_GROUP}/{v}")
    }
}

/// `injector policy` arguments: the injector's configuration (kube-inject's and serve's flags), its
/// ProxyConfig resources, and the revision's scope as `injector webhook-config` takes it.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub cluster: ProxyConfigArgs,
    #[command(flatten)]
    pub scope: Scope,
    /// The MutatingAdmissionPolicy API version written: `v1` from Kubernetes 1.36, `v1beta1` for 1.34
    /// and 1.35 (with the feature gate and the beta API turned on).
    #[arg(long, value_enum, default_value = "v1")]
    pub api_version: ApiVersion,
    /// Also write the guard: a ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`) and a
    /// binding per webhook entry that reject a pod the webhook would have injected but that reached
    /// validation without injection (`sidecar.istio.io/status`), as when the webhook is down under
    /// `failurePolicy: Ignore` and the pod is outside the policy's subset. Pods the webhook would not
    /// inject (opted out, host network, ignored namespaces, the configuration's selectors) pass.
    #[arg(long)]
    pub guard: bool,
}

/// Why no policy was generated.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The injector configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `--proxy-configs` holds an unusable object.
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    /// The revision, tags or names are refused (as `injector webhook-config` refuses them).
    #[error(transparent)]
    Scope(#[from] WebhookConfigError),
    /// The flags could not be combined into the webhook configuration's.
    #[error("the webhook configuration's flags: {0}")]
    Flags(String),
    /// The configuration cannot be compiled.
    #[error(transparent)]
    Params(#[from] ParamsError),
    /// An object could not be written as YAML.
    #[error("writing {what}: {reason}")]
    Yaml { what: String, reason: String },
}

/// The objects of a compiled policy.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub crd: Value,
    pub params: Value,
    pub policy: Value,
    pub bindings: Vec<Value>,
    /// The guard's ValidatingAdmissionPolicy and its bindings (empty without `--guard`).
    pub guard: Vec<Value>,
}

impl Compiled {
    /// Every object, in the order they can be applied: the CRD, the params, the policy, its bindings,
    /// then the guard's policy and bindings (if any).
    pub fn objects(&self) -> Vec<&Value> {
        [&self.crd, &self.params, &self.policy]
            .into_iter()
            .chain(&self.bindings)
            .chain(&self.guard)
            .collect()
    }

    /// Adds the guard ([`guard::objects`]) for the same revision, tags and selectors as the policy's
    /// bindings (`webhook`, as given to [`compile`]).
    pub fn with_guard(mut self, webhook: &webhook_config::Args) -> Result<Compiled, PolicyError> {
        let configurations = webhook.configurations(None)?;
        let name = self
            .policy
            .field("metadata")
            .and_then(|m| m.field("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let revision =
            sidecar_core::fields::path(&self.params, ["metadata", "labels", "istio.io/rev"])
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string();
        self.guard = guard::objects(
            &name,
            json!({"apiVersion": format!("{PARAMS_GROUP}/{PARAMS_VERSION}"), "kind": PARAMS_KIND}),
            &configurations,
            |tag| labels(&revision, tag),
        );
        Ok(self)
    }

    /// [`Compiled::objects`] as a YAML stream.
    pub fn yaml(&self) -> Result<String, PolicyError> {
        let mut out = String::new();
        for (i, o) in self.objects().into_iter().enumerate() {
            if i > 0 {
                out.push_str("---\n");
            }
            let text = sidecar_core::yaml::to_string(o).map_err(|e| PolicyError::Yaml {
                what: describe(o),
                reason: e.to_string(),
            })?;
            out.push_str(&text);
        }
        Ok(out)
    }
}

fn describe(o: &Value) -> String {
    format!(
        "{} {}",
        o.field("kind").and_then(Value::as_str).unwrap_or(""),
        sidecar_core::fields::path(o, ["metadata", "name"])
            .and_then(Value::as_str)
            .unwrap_or("")
    )
}

/// The params CRD.
pub fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{PARAMS_PLURAL}.{PARAMS_GROUP}"),
            "labels": {"app.kubernetes.io/name": "sidecar-injector"},
        },
        "spec": {
            "group": PARAMS_GROUP,
            "scope": "Cluster",
            "names": {"kind": PARAMS_KIND, "listKind": format!("{PARAMS_KIND}List"),
                      "plural": PARAMS_PLURAL, "singular": PARAMS_PLURAL},
            "versions": [{
                "name": PARAMS_VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "description": "The configuration-wide parts of sidecar injection, compiled by `injector policy` for the MutatingAdmissionPolicy of a revision.",
                    "type": "object",
                    "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                }},
            }],
        },
    })
}

/// Compiles `engine`'s configuration for the revision's scope (`webhook`, as `injector webhook-config`
/// takes it): `excluded_namespaces` are left to the webhook besides Istio's never-injected ones.
pub fn compile(
    engine: &Engine,
    webhook: &webhook_config::Args,
    excluded_namespaces: &[String],
    api: ApiVersion,
) -> Result<Compiled, PolicyError> {
    let configurations = webhook.configurations(None)?;
    let spec = params::compile(engine, &webhook.scope.path, excluded_namespaces)?;
    let revision = spec.revision.clone();
    let name = params_object::params_name(webhook)?;
    let params = params_object::params_object(
        &name,
        &revision,
        serde_json::to_value(&spec).map_err(|e| PolicyError::Yaml {
            what: format!("{PARAMS_KIND} {name}"),
            reason: e.to_string(),
        })?,
    );
    let policy = json!({
        "apiVersion": api.api_version(),
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels(&revision, None)},
        "spec": {
            "paramKind": {"apiVersion": format!("{PARAMS_GROUP}/{PARAMS_VERSION}"), "kind": PARAMS_KIND},
            "matchConstraints": {
                "matchPolicy": "Equivalent",
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                   "operations": ["CREATE"], "resources": ["pods"]}],
            },
            "matchConditions": subset::rules().iter()
                .map(|r| json!({"name": r.name, "expression": r.cel}))
                .collect::<Vec<_>>(),
            "variables": cel::variables().iter()
                .map(|v| json!({"name": v.name, "expression": v.expression}))
                .collect::<Vec<_>>(),
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": cel::mutation()}}],
            // A failing expression (a bug, or a pod over the cost budget) leaves the pod to the webhook.
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
        },
    });
    let mut bindings = Vec::new();
    for c in &configurations {
        let (config_name, tag) = crate::shared::webhook_config::name_and_tag(c);
        for w in c.webhooks.iter().flatten() {
            let kind = guard::entry_kind(&w.name);
            bindings.push(json!({
                "apiVersion": api.api_version(),
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": format!("{config_name}-{kind}"), "labels": labels(&revision, tag)},
                "spec": {
                    "policyName": name,
                    "paramRef": {"name": name, "parameterNotFoundAction": "Allow"},
                    "matchResources": {
                        "matchPolicy": "Equivalent",
                        "namespaceSelector": serde_json::to_value(&w.namespace_selector).unwrap_or(Value::Null),
                        "objectSelector": serde_json::to_value(&w.object_selector).unwrap_or(Value::Null),
                    },
                },
            }));
        }
    }
    Ok(Compiled {
        crd: crd(),
        params,
        policy,
        bindings,
        guard: Vec::new(),
    })
}

/// The webhook configuration's flags for `revision` with `scope`.
fn webhook_args(revision: &str, scope: &Scope) -> Result<webhook_config::Args, PolicyError> {
    let mut args = webhook_config::Args::for_revision(revision, scope.enable_namespaces_by_default)
        .map_err(|e| PolicyError::Flags(e.to_string()))?;
    args.scope = scope.clone();
    Ok(args)
}

/// The engine and the namespaces excluded for the flags' configuration.
pub fn load(args: &Args) -> Result<(Engine, webhook_config::Args, Vec<String>), PolicyError> {
    let settings = Settings::load(&args.config)?;
    let cluster = ClusterState::load(&args.cluster, None)?;
    let webhook = webhook_args(&settings.revision, &args.scope)?;
    let engine = Engine::new(settings).with_cluster(cluster);
    let excluded = engine.proxy_config_namespaces();
    Ok((engine, webhook, excluded))
}

/// Runs `injector policy`: the YAML stream on stdout.
pub fn run(args: Args) -> anyhow::Result<()> {
    use std::io::Write as _;
    let (engine, webhook, excluded) = load(&args)?;
    let mut compiled = compile(&engine, &webhook, &excluded, args.api_version)?;
    if args.guard {
        compiled = compiled.with_guard(&webhook)?;
    }
    std::io::stdout()
        .lock()
        .write_all(compiled.yaml()?.as_bytes())?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod guard_tests;
