//! The names Istio gives to the parts of a pod it reads and writes (annotations, labels, containers) and
//! the accessors for them on the pod JSON, so every step spells a name and looks it up the same way. The
//! traffic annotations the CNI plugin reads too are `sidecar_core::annotations`' rows, read through
//! `traffic`'s table and not named here.

use serde_json::{Map, Value};

use sidecar_core::annotations;
use sidecar_core::fields::{ensure_map, Fields};

/// The label and annotation that opt a pod in or out (the label wins when both are set).
pub const INJECT_KEY: &str = annotations::INJECT.name;
/// The label carrying the pod's network.
pub const NETWORK_LABEL: &str = "topology.istio.io/network";

/// What a previous injection added (see `status`).
pub const STATUS_ANNOTATION: &str = annotations::STATUS.name;
/// Ours, not Istio's: set by the MutatingAdmissionPolicy (`injector policy`) on the pods it injects, its
/// value the revision, so that the webhook leaves them alone (`webhook-config --skip-policy-injected`).
pub const POLICY_MARKER_ANNOTATION: &str = "policy.sidecar-inject.io/injected";
/// The user's container customisations saved at the first injection (see `overrides`).
pub const OVERRIDES_ANNOTATION: &str = "proxy.istio.io/overrides";
pub const PROXY_CONFIG_ANNOTATION: &str = "proxy.istio.io/config";
pub const TEMPLATES_ANNOTATION: &str = "inject.istio.io/templates";
pub const NATIVE_SIDECAR_ANNOTATION: &str = "sidecar.istio.io/nativeSidecar";
pub const INTERCEPTION_MODE_ANNOTATION: &str = annotations::INTERCEPTION_MODE.name;
pub const STATUS_PORT_ANNOTATION: &str = "status.sidecar.istio.io/port";
pub const READINESS_INITIAL_DELAY_ANNOTATION: &str =
    "readiness.status.sidecar.istio.io/initialDelaySeconds";
pub const READINESS_PERIOD_ANNOTATION: &str = "readiness.status.sidecar.istio.io/periodSeconds";
pub const READINESS_FAILURE_THRESHOLD_ANNOTATION: &str =
    "readiness.status.sidecar.istio.io/failureThreshold";
pub const PROXY_CPU_ANNOTATION: &str = "sidecar.istio.io/proxyCPU";
pub const PROXY_MEMORY_ANNOTATION: &str = "sidecar.istio.io/proxyMemory";
pub const PROXY_CPU_LIMIT_ANNOTATION: &str = "sidecar.istio.io/proxyCPULimit";
pub const PROXY_MEMORY_LIMIT_ANNOTATION: &str = "sidecar.istio.io/proxyMemoryLimit";
pub const AGENT_LOG_LEVEL_ANNOTATION: &str = "sidecar.istio.io/agentLogLevel";
pub const PROXY_IMAGE_TYPE_ANNOTATION: &str = "sidecar.istio.io/proxyImageType";
pub const PROXY_IMAGE_ANNOTATION: &str = "sidecar.istio.io/proxyImage";
pub const LOG_LEVEL_ANNOTATION: &str = "sidecar.istio.io/logLevel";
pub const COMPONENT_LOG_LEVEL_ANNOTATION: &str = "sidecar.istio.io/componentLogLevel";
pub const CAP_NET_BIND_SERVICE_ANNOTATION: &str = "sidecar.istio.io/capNetBindService";
pub const BOOTSTRAP_OVERRIDE_ANNOTATION: &str = "sidecar.istio.io/bootstrapOverride";
pub const USER_VOLUME_ANNOTATION: &str = "sidecar.istio.io/userVolume";
pub const USER_VOLUME_MOUNT_ANNOTATION: &str = "sidecar.istio.io/userVolumeMount";
pub const REWRITE_PROBES_ANNOTATION: &str = "sidecar.istio.io/rewriteAppHTTPProbers";
pub const MERGE_METRICS_ANNOTATION: &str = "prometheus.istio.io/merge-metrics";
pub const SECURE_PORT_ANNOTATION: &str = "prometheus.istio.io/secure-port";

/// The proxy container's name.
pub const PROXY_CONTAINER: &str = "istio-proxy";
/// The init container that installs the traffic redirection (without CNI).
pub const INIT_CONTAINER: &str = "istio-init";
/// The init container that checks the CNI plugin's redirection (with CNI).
pub const VALIDATION_CONTAINER: &str = "istio-validation";
pub const CORE_DUMP_CONTAINER: &str = "enable-core-dump";

/// `metadata.annotations`, when it is an object.
pub fn annotations(pod: &Value) -> Option<&Map<String, Value>> {
    pod.field("metadata")?.field("annotations")?.as_object()
}

/// `metadata.annotations`, when it is an object, for changing it.
pub fn annotations_mut(pod: &mut Value) -> Option<&mut Map<String, Value>> {
    pod.field_mut("metadata")?
        .field_mut("annotations")?
        .as_object_mut()
}

/// `metadata.labels`, when it is an object.
pub fn labels(pod: &Value) -> Option<&Map<String, Value>> {
    pod.field("metadata")?.field("labels")?.as_object()
}

/// An annotation's value (a non-string value is no annotation: `None`).
pub fn annotation<'a>(pod: &'a Value, name: &str) -> Option<&'a str> {
    annotations(pod)?.field(name)?.as_str()
}

/// A label's value (a non-string value is no label: `None`).
pub fn label<'a>(pod: &'a Value, name: &str) -> Option<&'a str> {
    labels(pod)?.field(name)?.as_str()
}

/// Sets `metadata.annotations[name]`, creating the maps as needed.
pub fn set_annotation(pod: &mut Value, name: &str, value: String) {
    if let Some(ann) = ensure_map(pod, &["metadata", "annotations"]) {
        ann.insert(name.to_string(), Value::String(value));
    }
}

/// The items of `spec.<list>` (`containers`, `initContainers`, `volumes`, …); empty when absent.
pub fn containers<'a>(pod: &'a Value, list: &str) -> &'a [Value] {
    pod.field("spec")
        .and_then(|s| s.field(list))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// A container's (or volume's) `name`; `""` when it has none.
pub fn name_of(c: &Value) -> &str {
    c.field("name").and_then(Value::as_str).unwrap_or("")
}

/// The first item of `list` called `name`.
pub fn find_named<'a>(list: &'a [Value], name: &str) -> Option<&'a Value> {
    list.iter().find(|c| name_of(c) == name)
}

/// The first item of `spec.<list>` called `name`, for changing it.
pub fn find_named_mut<'a>(pod: &'a mut Value, list: &str, name: &str) -> Option<&'a mut Value> {
    pod.field_mut("spec")?
        .field_mut(list)?
        .as_array_mut()?
        .iter_mut()
        .find(|c| name_of(c) == name)
}

/// The proxy container: in `containers`, else (native sidecar) in `initContainers`.
pub fn proxy_container(pod: &Value) -> Option<&Value> {
    find_named(containers(pod, "containers"), PROXY_CONTAINER)
        .or_else(|| find_named(containers(pod, "initContainers"), PROXY_CONTAINER))
}

/// [`proxy_container`], for changing it.
pub fn proxy_container_mut(pod: &mut Value) -> Option<&mut Value> {
    let list = if find_named(containers(pod, "containers"), PROXY_CONTAINER).is_some() {
        "containers"
    } else {
        "initContainers"
    };
    find_named_mut(pod, list, PROXY_CONTAINER)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_proxy_is_found_in_containers_first() {
        let mut pod = json!({"spec": {"initContainers": [{"name": "istio-proxy", "n": 1}],
                                      "containers": [{"name": "istio-proxy", "n": 2}]}});
        assert_eq!(proxy_container(&pod).unwrap()["n"], json!(2));
        proxy_container_mut(&mut pod).unwrap()["n"] = json!(3);
        assert_eq!(pod["spec"]["containers"][0]["n"], json!(3));
        pod["spec"]["containers"] = json!([]);
        assert_eq!(proxy_container(&pod).unwrap()["n"], json!(1));
        assert_eq!(proxy_container_mut(&mut pod).unwrap()["n"], json!(1));
        assert!(proxy_container(&json!({})).is_none());
    }

    #[test]
    fn accessors_read_strings_only_and_default_to_empty() {
        let mut pod = json!({"metadata": {"annotations": {"a": "1", "n": 2}, "labels": {"l": "x"}},
                             "spec": {"containers": [{"name": "app"}, {"image": "i"}]}});
        assert_eq!(annotation(&pod, "a"), Some("1"));
        assert_eq!(annotation(&pod, "n"), None);
        assert_eq!(label(&pod, "l"), Some("x"));
        assert_eq!(containers(&pod, "containers").len(), 2);
        assert!(containers(&pod, "initContainers").is_empty());
        assert_eq!(name_of(&containers(&pod, "containers")[1]), "");
        assert!(find_named(containers(&pod, "containers"), "app").is_some());
        assert!(find_named_mut(&mut pod, "containers", "nope").is_none());
        set_annotation(&mut pod, "b", "2".to_string());
        assert_eq!(annotation(&pod, "b"), Some("2"));
        annotations_mut(&mut pod).unwrap().remove("b");
        assert_eq!(annotation(&pod, "b"), None);
        let mut bare = json!({});
        set_annotation(&mut bare, STATUS_ANNOTATION, "{}".to_string());
        assert_eq!(annotation(&bare, STATUS_ANNOTATION), Some("{}"));
    }
}
