//! The workload a pod belongs to (Istio's deploy meta and type meta), which the template names in the
//! proxy's `ISTIO_META_OWNER` and `ISTIO_META_WORKLOAD_NAME` and its canonical-name label.

use serde_json::Value;

use sidecar_core::fields::Fields;

/// The workload a pod belongs to (Istio's deploy meta + type meta).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workload {
    pub kind: String,
    pub api_version: String,
    pub name: String,
    pub namespace: String,
}

/// Istio's `GetDeployMetaFromPod` (`pkg/kube/util.go`): the workload a pod belongs to, from its owner
/// references and the controllers' naming conventions.
pub fn deploy_meta_from_pod(pod: &Value) -> Workload {
    let meta = pod.field("metadata");
    let get = |k: &str| {
        meta.and_then(|m| m.field(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let label = |k: &str| crate::pod::label(pod, k);
    let mut w = Workload {
        kind: "Pod".to_string(),
        api_version: "v1".to_string(),
        name: get("name"),
        namespace: get("namespace"),
    };
    if !get("generateName").is_empty() {
        let owner = meta
            .and_then(|m| m.field("ownerReferences"))
            .and_then(Value::as_array)
            .and_then(|refs| {
                refs.iter()
                    .find(|r| r.field("controller").and_then(Value::as_bool) == Some(true))
            });
        if let Some(o) = owner {
            let s = |k: &str| o.field(k).and_then(Value::as_str).unwrap_or("").to_string();
            w.kind = s("kind");
            w.api_version = s("apiVersion");
            w.name = s("name");
            let name = w.name.clone();
            if w.kind == "ReplicaSet" {
                if let Some(hash) = label("pod-template-hash") {
                    if let Some(base) = name.strip_suffix(&format!("-{hash}")) {
                        w.kind = "Deployment".to_string();
                        w.name = base.to_string();
                    }
                } else if let Some(hash) = label("rollouts-pod-template-hash") {
                    w.kind = "Rollout".to_string();
                    w.api_version = "v1alpha1".to_string();
                    if let Some(base) = name.strip_suffix(&format!("-{hash}")) {
                        w.name = base.to_string();
                    }
                }
            } else if w.kind == "ReplicationController" {
                if let Some(dc) = label("deploymentconfig") {
                    w.kind = "DeploymentConfig".to_string();
                    w.name = dc.to_string();
                }
            } else if w.kind == "Job" {
                // `(.+)-\d{8,10}$`: a CronJob's scheduled Job.
                if let Some((base, suffix)) = name.rsplit_once('-') {
                    if !base.is_empty()
                        && (8..=10).contains(&suffix.len())
                        && suffix.bytes().all(|b| b.is_ascii_digit())
                    {
                        w.kind = "CronJob".to_string();
                        w.api_version = "batch/v1".to_string();
                        w.name = base.to_string();
                    }
                }
            }
        }
    }
    if w.name.is_empty() {
        w.name = get("name");
    }
    w
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deploy_meta_heuristics() {
        let pod = json!({"metadata": {"name": "", "generateName": "hello-fake-", "namespace": "ns",
            "labels": {"pod-template-hash": "fake"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "hello-fake", "controller": true}]}});
        let w = deploy_meta_from_pod(&pod);
        assert_eq!(
            (w.kind.as_str(), w.api_version.as_str(), w.name.as_str()),
            ("Deployment", "apps/v1", "hello")
        );
        let pod = json!({"metadata": {"generateName": "x-", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "backup-28712345", "controller": true}]}});
        let w = deploy_meta_from_pod(&pod);
        assert_eq!((w.kind.as_str(), w.name.as_str()), ("CronJob", "backup"));
        let pod = json!({"metadata": {"generateName": "x-", "labels": {"deploymentconfig": "dc"}, "ownerReferences": [
            {"apiVersion": "v1", "kind": "ReplicationController", "name": "dc-1", "controller": true}]}});
        assert_eq!(deploy_meta_from_pod(&pod).kind, "DeploymentConfig");
        let pod = json!({"metadata": {"name": "p", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "controller": true}]}});
        let w = deploy_meta_from_pod(&pod);
        assert_eq!((w.kind.as_str(), w.name.as_str()), ("Pod", "p"));
    }
}
