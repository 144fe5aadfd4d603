//! The lock-out analysis: a fail-closed webhook whose selectors match kube-system or its own namespace
//! blocks the very pods that would bring it back while it is down.

use serde_json::{json, Map, Value};

use crate::shared::webhook_entry::Entry;
use inject::decision::LabelSelector;
use sidecar_core::fields::Fields;

use super::report::{finding, patch_fix, Finding, Level};

/// The label every namespace carries with its own name (set by the API server).
pub(super) const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";
/// Namespaces a fail-closed webhook must never select.
pub(super) const SYSTEM_NAMESPACE: &str = "kube-system";

/// The lock-out check of one entry: a fail-closed webhook that selects kube-system or its own namespace
/// blocks the very pods that would bring it back.
pub fn check_lockout(h: &Entry) -> Finding {
    const WHY: &str = "with failurePolicy Fail, a webhook that is down rejects every pod it selects; if it \
selects kube-system or its own namespace, neither the cluster's system pods nor the injector itself can \
start again until the configuration is deleted";
    let hooks = [h];
    let policy = h
        .value
        .field("failurePolicy")
        .and_then(Value::as_str)
        .unwrap_or("Fail");
    if policy == "Ignore" {
        return finding(
            Level::Ok,
            "lock-out",
            &hooks,
            "failurePolicy Ignore: a down webhook cannot block pods (they start without sidecar)"
                .into(),
            WHY,
            None,
        );
    }
    let mut namespaces = vec![SYSTEM_NAMESPACE.to_string()];
    if let Some((_, ns, _)) = h.service() {
        if ns != SYSTEM_NAMESPACE {
            namespaces.push(ns.to_string());
        }
    }
    let selector = |field: &str| {
        LabelSelector::from_json(h.value.field(field).unwrap_or(&Value::Null))
            .map_err(|e| format!("{field} does not parse: {e}"))
    };
    let (ns_sel, obj_sel) = match (selector("namespaceSelector"), selector("objectSelector")) {
        (Ok(n), Ok(o)) => (n, o),
        (Err(e), _) | (_, Err(e)) => {
            return finding(
                Level::Error,
                "lock-out",
                &hooks,
                e,
                WHY,
                Some(format!(
                    "kubectl edit mutatingwebhookconfiguration {}",
                    h.config
                )),
            )
        }
    };
    let mut every_pod = Vec::new();
    let mut labelled_pods = Vec::new();
    for ns in &namespaces {
        let mut labels = Map::new();
        labels.insert(NAMESPACE_NAME.to_string(), Value::String(ns.clone()));
        if ns_sel.matches(Some(&labels)) {
            if obj_sel.matches(None) {
                every_pod.push(ns.clone());
            } else {
                labelled_pods.push(ns.clone());
            }
        }
    }
    if every_pod.is_empty() && labelled_pods.is_empty() {
        return finding(
            Level::Ok,
            "lock-out",
            &hooks,
            format!(
                "failurePolicy {policy}; the namespaceSelector excludes {}",
                namespaces.join(" and ")
            ),
            WHY,
            None,
        );
    }
    let requirement = json!({"key": NAMESPACE_NAME, "operator": "NotIn", "values": namespaces});
    let i = h.index;
    let op = match h.value.field("namespaceSelector") {
        Some(s) if s.field("matchExpressions").is_some_and(Value::is_array) => json!({"op": "add",
            "path": format!("/webhooks/{i}/namespaceSelector/matchExpressions/-"), "value": requirement}),
        Some(s) if s.is_object() => json!({"op": "add",
            "path": format!("/webhooks/{i}/namespaceSelector/matchExpressions"), "value": [requirement]}),
        _ => json!({"op": "add", "path": format!("/webhooks/{i}/namespaceSelector"),
            "value": {"matchExpressions": [requirement]}}),
    };
    let fix = Some(patch_fix(&h.config, &[op]));
    if !every_pod.is_empty() {
        finding(
            Level::Error,
            "lock-out",
            &hooks,
            format!(
                "failurePolicy {policy} and the selectors match every pod in {}",
                every_pod.join(" and ")
            ),
            WHY,
            fix,
        )
    } else {
        finding(
            Level::Warning,
            "lock-out",
            &hooks,
            format!(
                "failurePolicy {policy} and the namespaceSelector does not exclude {}: pods there matching \
                 the objectSelector are blocked while the webhook is down",
                labelled_pods.join(" and ")
            ),
            WHY,
            fix,
        )
    }
}
