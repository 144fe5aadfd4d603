//! What the plugin reads of a pod (Istio's `cni/pkg/plugin/kubernetes.go` `PodInfo` and
//! `ExtractPodInfo`): container names, labels, annotations, and the `istio-proxy` container's proxy type,
//! environment and user.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;

/// The init container of the privileged mode; a pod with it programs itself.
pub const ISTIO_INIT: &str = "istio-init";
/// The proxy container.
pub const ISTIO_PROXY: &str = "istio-proxy";

/// The pod as the plugin's decision sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    /// Names of the init containers and containers.
    pub containers: BTreeSet<String>,
    /// The pod's labels.
    pub labels: BTreeMap<String, String>,
    /// The pod's annotations.
    pub annotations: BTreeMap<String, String>,
    /// `istio-proxy`'s second argument after `proxy` (`sidecar`, `router`), or empty.
    pub proxy_type: String,
    /// `istio-proxy`'s environment (`value` only; a `valueFrom` reads as empty, as in Istio).
    pub proxy_env: BTreeMap<String, String>,
    /// `istio-proxy`'s `securityContext.runAsUser`.
    pub proxy_uid: Option<i64>,
    /// `istio-proxy`'s `securityContext.runAsGroup`.
    pub proxy_gid: Option<i64>,
}

impl PodInfo {
    /// Extracts the information from a pod, init containers first as Istio's `containers` lists them (so a
    /// native-sidecar `istio-proxy` among the init containers counts).
    pub fn from_pod(pod: &Pod) -> PodInfo {
        let mut pi = PodInfo {
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            annotations: pod.metadata.annotations.clone().unwrap_or_default(),
            ..PodInfo::default()
        };
        let Some(spec) = &pod.spec else { return pi };
        let init = spec.init_containers.iter().flatten();
        for c in init.chain(spec.containers.iter()) {
            pi.containers.insert(c.name.clone());
            if c.name != ISTIO_PROXY {
                continue;
            }
            for e in c.env.iter().flatten() {
                pi.proxy_env
                    .insert(e.name.clone(), e.value.clone().unwrap_or_default());
            }
            if let Some(args) = &c.args {
                if args.len() >= 2 && args[0] == "proxy" {
                    pi.proxy_type = args[1].clone();
                }
            }
            if let Some(sc) = &c.security_context {
                pi.proxy_uid = sc.run_as_user;
                pi.proxy_gid = sc.run_as_group;
            }
        }
        pi
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_is_found_among_init_containers_too() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "annotations": {"a": "b"}},
            "spec": {
                "initContainers": [{"name": "istio-validation"}, {"name": "istio-proxy",
                    "args": ["proxy", "sidecar"], "env": [{"name": "ISTIO_META_DNS_CAPTURE", "value": "true"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "securityContext": {"runAsUser": 1337, "runAsGroup": 1338}}],
                "containers": [{"name": "app"}]
            }
        }))
        .unwrap();
        let pi = PodInfo::from_pod(&pod);
        assert_eq!(
            pi.containers.iter().map(String::as_str).collect::<Vec<_>>(),
            ["app", "istio-proxy", "istio-validation"]
        );
        assert_eq!(pi.proxy_type, "sidecar");
        assert_eq!(pi.proxy_env["ISTIO_META_DNS_CAPTURE"], "true");
        assert_eq!(pi.proxy_env["POD_NAME"], "");
        assert_eq!((pi.proxy_uid, pi.proxy_gid), (Some(1337), Some(1338)));
        assert_eq!(pi.annotations["a"], "b");
    }
}
