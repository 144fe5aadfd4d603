//! The request shaping the webhook does before the engine, in one place so that `explain` runs the
//! webhook's own code: the pod normalised as Istio's `webhook.go` `inject` does (managedFields dropped,
//! the namespace defaulted from the request), OpenShift's proxy uid cleared (`openshift`), the workload
//! from the pod, the proxy's environment from the URL path (`parseInjectEnvs`), and the engine's
//! injection in webhook mode.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use inject::engine::{Engine, EngineError, InjectRequest, Mode};
use inject::workload::{deploy_meta_from_pod, Workload};
use sidecar_core::fields::Fields;

/// On OpenShift, the pod with a proxy uid equal to the app's cleared (Istio's `webhook.go` `inject`),
/// when that changes it; `None` off OpenShift or when nothing changes.
pub fn openshift_cleared(engine: &Engine, pod: &Value) -> Option<Value> {
    if !engine.openshift() {
        return None;
    }
    let mut pod = pod.clone();
    inject::openshift::clear_proxy_user_equal_to_app(&mut pod).then_some(pod)
}

/// The webhook's injection of `pod` sent to `path`: the workload is `workload`, else the one the pod
/// names (Istio's `GetDeployMetaFromPod`), and the URL path gives the proxy's environment.
pub fn inject(
    engine: &Engine,
    pod: &Value,
    workload: Option<&Workload>,
    path: &str,
) -> Result<Value, EngineError> {
    let from_pod;
    let workload = match workload {
        Some(w) => w,
        None => {
            from_pod = deploy_meta_from_pod(pod);
            &from_pod
        }
    };
    engine.inject(&InjectRequest {
        pod,
        workload,
        url_env: parse_inject_envs(path),
        mode: Mode::Webhook,
    })
}

/// Drops `metadata.managedFields` and, given one, sets the namespace (the pod had none).
pub fn normalise(pod: &mut Value, namespace: Option<&str>) {
    let Some(obj) = pod.as_object_mut() else {
        return;
    };
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.remove("managedFields");
        if let Some(ns) = namespace {
            meta.insert("namespace".to_string(), Value::String(ns.to_string()));
        }
    }
}

/// Undoes [`normalise`] on the result of a pod that had no metadata: the request carried neither a
/// namespace nor managedFields, and neither is ours to add. An empty metadata object is left: harmless,
/// and the patch then adds only what injection added.
pub fn restore_request_fields(result: &mut Value) {
    if let Some(meta) = result.field_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        meta.remove("namespace");
    }
}

/// Istio's `webhook.go` `parseInjectEnvs`: environment for the proxy from the webhook URL path, e.g.
/// `/inject/cluster/c1/net/n1` → `ISTIO_META_CLUSTER_ID=c1`, `ISTIO_META_NETWORK=n1`.
pub fn parse_inject_envs(path: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let p = path.strip_suffix('/').unwrap_or(path);
    let mut parts = p.splitn(3, '/');
    let (_, _, rest) = (parts.next(), parts.next(), parts.next());
    let Some(rest) = rest else {
        return env;
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    if rest.starts_with(":ENV:") {
        for piece in rest.split(":ENV:").skip(1) {
            if let Some((k, v)) = piece.split_once('=') {
                if !k.is_empty() {
                    pairs.push((k.to_string(), v.to_string()));
                }
            }
        }
    } else {
        let items: Vec<&str> = rest.split('/').collect();
        for chunk in items.chunks(2) {
            if let [k, v] = chunk {
                pairs.push((k.to_string(), v.replace("--slash--", "/")));
            }
            // A trailing key without a value is ignored (Istio logs a warning).
        }
    }
    for (k, v) in pairs {
        let key = match k.as_str() {
            "cluster" => "ISTIO_META_CLUSTER_ID".to_string(),
            "net" => "ISTIO_META_NETWORK".to_string(),
            other => other.to_uppercase(),
        };
        env.insert(key, v);
    }
    env
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use test_support::string_map;

    /// Istio's `TestParseInjectEnvs`.
    #[test]
    fn inject_envs() {
        let cases: [(&str, &[(&str, &str)]); 9] = [
            ("/inject", &[]),
            ("/inject/", &[]),
            (
                "/inject/cluster/cluster1/net/network1/",
                &[
                    ("ISTIO_META_CLUSTER_ID", "cluster1"),
                    ("ISTIO_META_NETWORK", "network1"),
                ],
            ),
            (
                "/inject/cluster/cluster--slash--1",
                &[("ISTIO_META_CLUSTER_ID", "cluster/1")],
            ),
            (
                "/inject/cluster/cluster1/network",
                &[("ISTIO_META_CLUSTER_ID", "cluster1")],
            ),
            (
                "/inject/:ENV:cluster=cluster2:ENV:rootpage=/foo/bar",
                &[
                    ("ISTIO_META_CLUSTER_ID", "cluster2"),
                    ("ROOTPAGE", "/foo/bar"),
                ],
            ),
            (
                "/inject/rootpage1/value1/rootpage2/:ENV:abcd=efgh",
                &[("ROOTPAGE1", "value1"), ("ROOTPAGE2", ":ENV:abcd=efgh")],
            ),
            (
                "/inject/:ENV:rootpage1=efgh:ENV:=abb:ENV:=",
                &[("ROOTPAGE1", "efgh")],
            ),
            ("/inject/custom_env/v", &[("CUSTOM_ENV", "v")]),
        ];
        for (path, want) in cases {
            assert_eq!(parse_inject_envs(path), string_map(want), "{path}");
        }
    }
}
