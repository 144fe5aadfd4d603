//! The params object of a revision's MutatingAdmissionPolicy, as `injector policy` writes it and `serve
//! --own-policy-params` keeps it: its kind (`InjectionParams`, a CRD of ours), its name and labels, and
//! the spec written when the configuration cannot be compiled.

use serde_json::{json, Map, Value};

use crate::shared::webhook_config;

/// The params CRD: `InjectionParams.policy.sidecar-inject.io/v1alpha1`, cluster-scoped.
pub const PARAMS_GROUP: &str = "policy.sidecar-inject.io";
pub const PARAMS_VERSION: &str = "v1alpha1";
pub const PARAMS_KIND: &str = "InjectionParams";
pub const PARAMS_PLURAL: &str = "injectionparams";

/// The revision label (Istio's `label.IoIstioRev`).
pub const REV_LABEL: &str = "istio.io/rev";

/// The value of [`crate::shared::policy::params::DecisionParams::policy`] in a refused spec: neither
/// `enabled` nor `disabled`, so the policy's `injects` match condition holds for no pod.
pub const REFUSED_POLICY: &str = "refused";

/// The objects' labels: the chart's name and the revision (and the tag of a tag's bindings).
pub fn labels(revision: &str, tag: Option<&str>) -> Value {
    let mut l = Map::new();
    l.insert("app.kubernetes.io/name".into(), json!("sidecar-injector"));
    l.insert(REV_LABEL.into(), json!(revision));
    if let Some(t) = tag {
        l.insert("istio.io/tag".into(), json!(t));
    }
    Value::Object(l)
}

/// The params object `name` of `revision` (the label value) with `spec`.
pub fn params_object(name: &str, revision: &str, spec: Value) -> Value {
    json!({
        "apiVersion": format!("{PARAMS_GROUP}/{PARAMS_VERSION}"),
        "kind": PARAMS_KIND,
        "metadata": {"name": name, "labels": labels(revision, None)},
        "spec": spec,
    })
}

/// The params object's name for the revision's webhook configurations (`webhook`): the first
/// configuration's, which is the policy's too.
pub fn params_name(
    webhook: &webhook_config::Args,
) -> Result<String, webhook_config::WebhookConfigError> {
    let configurations = webhook.configurations(None)?;
    Ok(configurations
        .first()
        .and_then(|c| c.metadata.name.clone())
        .unwrap_or_else(|| webhook.scope.webhook_name.clone()))
}

/// The spec that makes the policy inject no pod, with `reason` (why the configuration is not compiled)
/// for whoever reads the object. The match conditions before `injects` read only the pod,
/// `excludedNamespaces` and this policy; `injects` is false for every pod, and the API server skips the
/// policy for a pod as soon as one match condition is false, so the rest are never read.
pub fn refused_spec(revision: &str, reason: &str) -> Value {
    json!({
        "revision": revision,
        "refused": reason,
        "decision": {"policy": REFUSED_POLICY, "never": [], "always": []},
        "excludedNamespaces": [],
    })
}
