//! The guard (`injector policy --guard`): a ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`,
//! GA since Kubernetes 1.30) and one binding per webhook entry, that rejects a pod CREATE the webhook
//! would have injected but which reaches validation without injection. Under the webhook's
//! `failurePolicy: Ignore` a pod the webhook could not answer for (down, unreachable, timed out) and
//! that the MutatingAdmissionPolicy does not cover (outside its subset, or its params missing) would
//! otherwise start silently outside the mesh; the guard turns that into an error that names the cause
//! and the fix.
//!
//! What it checks, all evaluated by the API server after every mutation (webhooks and policies):
//!
//! - **which pods**: its bindings select exactly what the revision's webhook entries select (the
//!   namespace and object selectors `webhook_config` generates, tags included), and its
//!   `matchConditions` keep only the pods the webhook would inject ([`conditions`]): not in one of
//!   Istio's ignored namespaces, not on the host network, not marked as injected by the policy, and
//!   injected by the configuration's decision (the `sidecar.istio.io/inject` label over the annotation,
//!   the never- and always-selectors, the injection policy: the subset's own `injects` rule, read from
//!   the same params object). So it accepts every pod the webhook declines, as Istio's `injectRequired`
//!   (`pkg/kube/inject/inject.go`) declines it.
//! - **injected**: the pod carries `sidecar.istio.io/status`, Istio's own mark of an injected pod (the
//!   webhook and the policy both write it; `kube-inject`'s `IntoObject` takes it to mean "already
//!   injected"). Not the `istio-proxy` container: a template may inject none (`grpc-agent`, user
//!   templates), and a pod may name one of its own.
//!
//! Trade-offs, on purpose:
//!
//! - When unsure, it accepts: `failurePolicy: Ignore` (a CEL error or a cost overrun accepts the pod),
//!   and a missing params object accepts every pod (`parameterNotFoundAction: Allow` and the `params`
//!   condition). It never blocks a pod the webhook would not inject; it may miss one it would.
//! - It trusts the pod's annotations: a pod created with a `sidecar.istio.io/status` of its own passes
//!   un-injected. It guards against outages, not against users.
//! - Its decision is the params object's: when the injector's configuration changes (policy,
//!   selectors) the params must follow (as `injector policy` re-run, or `serve` owning them), or the
//!   guard decides with the old configuration.
//! - Under `failurePolicy: Fail` it changes nothing (the API server already rejects the pod with the
//!   webhook's error); it exists for `Ignore`, where it trades availability back for a clear error, but
//!   only for the pods the policy cannot inject: the subset still starts while the webhook is down.
//! - kube-system and the injector's namespace are never selected (the webhook entries' exclusions),
//!   whatever labels they carry.

use serde_json::{json, Value};

use super::cel::MARKER_ANNOTATION;
use super::subset::{self, Facts};
use inject::decision::IGNORED_NAMESPACES;
use inject::pod::{self, STATUS_ANNOTATION};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use sidecar_core::fields::{self, Fields};

/// The ValidatingAdmissionPolicy API: GA (`v1`) since Kubernetes 1.30, the oldest release Istio 1.31
/// supports being 1.32.
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1";

/// The suffix of the guard's objects' names (the policy's is the MutatingAdmissionPolicy's with it).
pub const SUFFIX: &str = "-guard";

/// One `matchCondition` of the guard: a pod failing it is not the guard's to check.
pub struct Condition {
    pub name: &'static str,
    /// The condition in CEL (variables `object`, `request`, `params`).
    pub cel: String,
    /// The same condition in Rust (the unit tests' side).
    pub holds: fn(&Facts<'_>) -> bool,
}

fn ignored_namespaces_cel() -> String {
    let names: Vec<String> = IGNORED_NAMESPACES
        .iter()
        .map(|n| format!("'{n}'"))
        .collect();
    format!("[{}]", names.join(", "))
}

fn has_annotation(pod: &Value, key: &str) -> bool {
    pod::annotations(pod).is_some_and(|a| a.has_field(key))
}

/// The pods the guard checks: those the webhook would have injected.
pub fn conditions() -> Vec<Condition> {
    vec![
        Condition {
            name: "params",
            cel: "params != null".to_string(),
            holds: |_| true,
        },
        Condition {
            name: "namespace",
            cel: format!("!(request.namespace in {})", ignored_namespaces_cel()),
            holds: |f| {
                let ns = fields::path(f.pod, ["metadata", "namespace"])
                    .and_then(Value::as_str)
                    .unwrap_or("");
                !IGNORED_NAMESPACES.contains(&ns)
            },
        },
        Condition {
            name: "not-host-network",
            cel: "!object.spec.?hostNetwork.orValue(false)".to_string(),
            holds: |f| {
                fields::path(f.pod, ["spec", "hostNetwork"]).and_then(Value::as_bool) != Some(true)
            },
        },
        Condition {
            name: "not-injected-by-policy",
            cel: format!("!('{MARKER_ANNOTATION}' in object.metadata.?annotations.orValue({{}}))"),
            holds: |f| !has_annotation(f.pod, MARKER_ANNOTATION),
        },
        Condition {
            name: "injects",
            cel: subset::decision_cel(),
            holds: |f| f.decision.inject,
        },
    ]
}

/// The validation: the pod is injected.
pub fn injected_cel() -> String {
    format!("'{STATUS_ANNOTATION}' in object.metadata.?annotations.orValue({{}})")
}

/// Whether `pod` is injected, as [`injected_cel`] says it.
pub fn is_injected(pod: &Value) -> bool {
    has_annotation(pod, STATUS_ANNOTATION)
}

/// Whether the guard rejects the pod of `facts` (as it reaches validation): the Rust side of the CEL.
pub fn rejects(facts: &Facts<'_>) -> bool {
    conditions().iter().all(|c| (c.holds)(facts)) && !is_injected(facts.pod)
}

/// The rejection's fixed text after "pod <ns>/<name> was not injected: ".
fn cause_and_fix(webhooks: &str, policy: &str) -> String {
    format!(
        "the sidecar injector webhook ({webhooks}) did not inject it (unreachable or failing, under failurePolicy Ignore) \
         and the MutatingAdmissionPolicy {policy} does not cover it (the pod is outside its subset, or the policy or its params are not installed); \
         retry when the injector is up, or set the label sidecar.istio.io/inject=false to run it outside the mesh"
    )
}

/// The guard of the MutatingAdmissionPolicy `policy` (also the params object's name, of kind
/// `param_kind`), with one binding per entry of the webhook `configurations` selecting what the entry
/// selects. `labels(tag)` are the objects' labels (a tag's bindings carry it).
pub fn objects(
    policy: &str,
    param_kind: Value,
    configurations: &[MutatingWebhookConfiguration],
    labels: impl Fn(Option<&str>) -> Value,
) -> Vec<Value> {
    let name = format!("{policy}{SUFFIX}");
    let webhooks = configurations
        .iter()
        .map(|c| {
            format!(
                "MutatingWebhookConfiguration {}",
                c.metadata.name.as_deref().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let fixed = cause_and_fix(&webhooks, policy);
    // CEL string literal: the names are DNS names, so only the quote needs care (there is none).
    let message_expression = format!(
        "'pod ' + request.namespace + '/' + (object.metadata.?name.orValue('') != '' ? object.metadata.name : object.metadata.?generateName.orValue('') + '<generated>') + ' was not injected: {}'",
        fixed.replace('\\', "\\\\").replace('\'', "\\'")
    );
    let mut out = vec![json!({
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels(None)},
        "spec": {
            "paramKind": param_kind,
            "matchConstraints": {
                "matchPolicy": "Equivalent",
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                   "operations": ["CREATE"], "resources": ["pods"]}],
            },
            "matchConditions": conditions().iter()
                .map(|c| json!({"name": c.name, "expression": c.cel}))
                .collect::<Vec<_>>(),
            "validations": [{
                "expression": injected_cel(),
                "message": format!("the pod was not injected: {fixed}"),
                "messageExpression": message_expression,
                "reason": "Forbidden",
            }],
            // When unsure, accept: an error in the guard never blocks a pod.
            "failurePolicy": "Ignore",
        },
    })];
    for c in configurations {
        let (config_name, tag) = crate::shared::webhook_config::name_and_tag(c);
        for w in c.webhooks.iter().flatten() {
            out.push(json!({
                "apiVersion": API_VERSION,
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": format!("{config_name}-{}{SUFFIX}", entry_kind(&w.name)), "labels": labels(tag)},
                "spec": {
                    "policyName": name,
                    "paramRef": {"name": policy, "parameterNotFoundAction": "Allow"},
                    "validationActions": ["Deny"],
                    "matchResources": {
                        "matchPolicy": "Equivalent",
                        "namespaceSelector": serde_json::to_value(&w.namespace_selector).unwrap_or(Value::Null),
                        "objectSelector": serde_json::to_value(&w.object_selector).unwrap_or(Value::Null),
                    },
                },
            }));
        }
    }
    out
}

/// `rev.namespace.sidecar-injector.istio.io` → `rev-namespace`: the entry's part of a binding's name.
pub fn entry_kind(entry: &str) -> String {
    entry
        .strip_suffix(crate::shared::webhook_config::ENTRY_SUFFIX)
        .unwrap_or(entry)
        .trim_end_matches('.')
        .replace('.', "-")
}
