//! Workload documents turned into the pods Istio's webhook test sends (`objectToPod` and `runWebhook` in
//! Istio's `pkg/kube/inject/webhook_test.go` / `inject_test.go`), and the AdmissionReviews around them.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::corpus::yaml;
use crate::Error;

/// The kinds Istio's test injects; every other document of a stream is left out.
pub const INJECTABLE: &[&str] = &[
    "Deployment",
    "DeploymentConfig",
    "DaemonSet",
    "StatefulSet",
    "Job",
    "ReplicaSet",
    "ReplicationController",
    "CronJob",
    "Pod",
];

/// The documents of a YAML stream split on `"\n---"`, as Istio's test splits them; empty ones are left out.
pub fn documents(text: &str) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for (i, part) in text.split("\n---").enumerate() {
        // The separator line may carry text after `---` (rare); drop the rest of that line.
        let part = match part.split_once('\n') {
            Some((first, rest)) if first.trim().is_empty() || first.starts_with(' ') => rest,
            _ => part,
        };
        if part.trim().is_empty() {
            continue;
        }
        let doc = yaml(part, &format!("document {i}"))?;
        if !doc.is_null() {
            out.push(doc);
        }
    }
    Ok(out)
}

/// The injectable documents of `docs`, a `List` replaced by its items (recursively).
pub fn injectable(docs: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    for d in docs {
        collect(d, &mut out);
    }
    out
}

/// The injectable documents of a YAML stream ([`documents`], then [`injectable`]).
pub fn injectable_documents(text: &str) -> Result<Vec<Value>, Error> {
    Ok(injectable(&documents(text)?))
}

fn collect(doc: &Value, out: &mut Vec<Value>) {
    match doc.get("kind").and_then(Value::as_str) {
        Some("List") => {
            if let Some(items) = doc.get("items").and_then(Value::as_array) {
                for i in items {
                    collect(i, out);
                }
            }
        }
        Some(k) if INJECTABLE.contains(&k) => out.push(doc.clone()),
        _ => {}
    }
}

/// The pod a controller would create for a workload document, as Istio's `objectToPod` builds it.
pub fn to_pod(doc: &Value) -> Result<Value, Error> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    if kind == "Pod" {
        return Ok(doc.clone());
    }
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let template = match kind {
        "CronJob" => doc.pointer("/spec/jobTemplate/spec/template"),
        _ => doc.pointer("/spec/template"),
    }
    .ok_or_else(|| Error::NoTemplate {
        kind: kind.to_string(),
        name: name.clone(),
    })?;
    let mut metadata = match template.get("metadata") {
        None | Some(Value::Null) => json!({}),
        Some(m) => m.clone(),
    };
    let Some(meta) = metadata.as_object_mut() else {
        return Err(Error::Metadata {
            kind: kind.to_string(),
            name,
        });
    };
    if kind == "Deployment" {
        meta.insert("generateName".into(), json!(format!("{name}-fake-")));
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("pod-template-hash".into(), json!("fake"));
        }
        meta.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-fake"),
                    "uid": "", "controller": true}]),
        );
    } else {
        meta.insert("generateName".into(), json!(name));
        meta.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": doc.get("apiVersion").cloned().unwrap_or(Value::Null),
                    "kind": kind, "name": name, "uid": "", "controller": true}]),
        );
    }
    let mut pod = Map::new();
    pod.insert("apiVersion".into(), json!("v1"));
    pod.insert("kind".into(), json!("Pod"));
    pod.insert("metadata".into(), metadata);
    pod.insert(
        "spec".into(),
        template.get("spec").cloned().unwrap_or_else(|| json!({})),
    );
    Ok(Value::Object(pod))
}

/// The pod as a typed Pod serialises it: `resources: {}` on every container and `status: {}`.
pub fn as_typed_pod(mut pod: Value) -> Value {
    for list in ["containers", "initContainers"] {
        if let Some(cs) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        {
            for c in cs {
                if let Some(m) = c.as_object_mut() {
                    m.entry("resources").or_insert_with(|| json!({}));
                }
            }
        }
    }
    if let Some(m) = pod.as_object_mut() {
        m.entry("status").or_insert_with(|| json!({}));
    }
    pod
}

/// Removes the `sidecar.istio.io/status` annotation, which Istio's webhook test ignores on both sides.
pub fn strip_status(pod: &mut Value) {
    if let Some(a) = pod
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove("sidecar.istio.io/status");
    }
}

/// Every container of `pod`: the init containers (native sidecars among them), then the others.
pub fn all_containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["/spec/initContainers", "/spec/containers"]
        .into_iter()
        .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
        .flatten()
}

/// The container of `pod` named `name`, init containers first.
pub fn container<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    all_containers(pod).find(|c| c["name"] == name)
}

/// A container's env entries with a literal value, by name (`valueFrom` entries left out).
pub fn env_values(container: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The `name`s of a list's entries (containers, volumes, env), in order; none when it is no list.
pub fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|a| a.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default()
}

/// The entry of a list (containers, volumes, env) named `name`.
pub fn named<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|v| v["name"] == name)
}

/// An AdmissionReview (`version` is `v1` or `v1beta1`) asking to create `pod` in `namespace`, sent for
/// the ReplicaSet controller, not a dry run.
pub fn review(version: &str, uid: &str, namespace: &str, pod: &Value) -> Value {
    let user = "system:serviceaccount:kube-system:replicaset-controller";
    sidecar_core::admission_review::pod_create(version, uid, namespace, user, false, pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_becomes_the_pod_of_its_fake_replica_set() {
        let doc = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hello"},
            "spec": {"template": {"metadata": {"labels": {"app": "hello"}}, "spec": {"containers": [{"name": "c"}]}}}});
        let pod = as_typed_pod(to_pod(&doc).expect("pod"));
        assert_eq!(pod["kind"], "Pod");
        assert_eq!(pod["metadata"]["generateName"], "hello-fake-");
        assert_eq!(pod["metadata"]["labels"]["pod-template-hash"], "fake");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        assert_eq!(pod["spec"]["containers"][0]["resources"], json!({}));
        assert_eq!(pod["status"], json!({}));
    }

    #[test]
    fn a_cron_job_gives_its_job_template_and_owns_the_pod() {
        let doc = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}});
        let pod = to_pod(&doc).expect("pod");
        assert_eq!(pod["metadata"]["generateName"], "cj");
        assert_eq!(
            pod["metadata"]["ownerReferences"][0],
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "name": "cj", "uid": "", "controller": true})
        );
        assert!(to_pod(&json!({"kind": "Job", "metadata": {"name": "j"}})).is_err());
    }

    #[test]
    fn lists_are_expanded_and_other_kinds_left_out() {
        let text = "kind: Service\n---\nkind: List\nitems:\n- kind: Pod\n- kind: List\n  items:\n  - kind: Job\n---\n";
        let docs = injectable_documents(text).expect("parses");
        let kinds: Vec<_> = docs.iter().map(|d| d["kind"].clone()).collect();
        assert_eq!(kinds, [json!("Pod"), json!("Job")]);
    }
}
