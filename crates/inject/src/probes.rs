//! App probe and lifecycle-hook rewriting (`applyRewrite` in Istio's `webhook.go`, `app_probe.go`): the
//! original HTTP/TCP/gRPC probes of every application container are recorded in the proxy's
//! `ISTIO_KUBE_APP_PROBERS` env (`DumpAppProbers`) and the probes are pointed at the agent's status port
//! under `/app-health/<c>/<kind>z` or `/app-lifecycle/<c>/<hook>z` (`patchRewriteProbe`).

use serde_json::{Map, Value};
use sidecar_core::fields::Fields;

use crate::pod::{annotation, containers, name_of, PROXY_CONTAINER, STATUS_PORT_ANNOTATION};
use sidecar_core::gotypes::{go_struct, F, GRPC, HTTP_GET, TCP_SOCKET};

/// The env var carrying the original probes to the agent.
pub const APP_PROBERS_ENV: &str = "ISTIO_KUBE_APP_PROBERS";

/// Istio's `Prober` as Go prints it.
const PROBER: &[(&str, F)] = &[
    ("httpGet", F::Obj(HTTP_GET)),
    ("tcpSocket", F::Obj(TCP_SOCKET)),
    ("grpc", F::Obj(GRPC)),
    ("timeoutSeconds", F::Int),
];

const PROBES: [(&str, &str); 3] = [
    ("readinessProbe", "readyz"),
    ("livenessProbe", "livez"),
    ("startupProbe", "startupz"),
];
const HOOKS: [(&str, &str); 2] = [("preStop", "prestopz"), ("postStart", "poststartz")];

fn probe_url(container: &str, kind: &str) -> String {
    format!("/app-health/{container}/{kind}")
}

fn hook_url(container: &str, kind: &str) -> String {
    format!("/app-lifecycle/{container}/{kind}")
}

fn all_containers(pod: &Value) -> impl Iterator<Item = &Value> {
    containers(pod, "initContainers")
        .iter()
        .chain(containers(pod, "containers"))
}

/// The prober entry for one probe or hook (`with_timeout` for probes), named ports resolved against the
/// container's ports; `None` when there is nothing to record (exec/sleep, unresolvable named port, or a
/// port already equal to the status port).
fn prober_entry(
    handler: &Value,
    ports: &Map<String, Value>,
    target_port: i64,
    with_timeout: bool,
) -> Option<Value> {
    let mut entry = Map::new();
    if let Some(grpc) = handler
        .field("grpc")
        .filter(|g| !g.is_null())
        .filter(|_| with_timeout)
    {
        entry.insert("grpc".to_string(), grpc.clone());
    } else {
        let kind = ["httpGet", "tcpSocket"]
            .into_iter()
            .find(|k| handler.field(k).is_some_and(|h| !h.is_null()))?;
        let mut action = handler[kind].clone();
        match action.field("port") {
            Some(Value::String(name)) => {
                let resolved = ports.field(name)?.clone();
                action["port"] = resolved;
            }
            Some(p) if p.as_i64() == Some(target_port) => return None,
            _ => {}
        }
        entry.insert(kind.to_string(), action);
    }
    if with_timeout {
        if let Some(t) = handler.field("timeoutSeconds") {
            entry.insert("timeoutSeconds".to_string(), t.clone());
        }
    }
    Some(go_struct(&Value::Object(entry), PROBER))
}

/// `DumpAppProbers`: the `ISTIO_KUBE_APP_PROBERS` JSON (sorted keys), or `None` when there is nothing.
pub fn dump_app_probers(pod: &Value, target_port: i64) -> Option<String> {
    let mut out: std::collections::BTreeMap<String, Value> = std::collections::BTreeMap::new();
    for c in all_containers(pod) {
        let name = name_of(c);
        if name == PROXY_CONTAINER {
            continue;
        }
        let mut ports = Map::new();
        for p in c
            .field("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(n), Some(cp)) = (
                p.field("name").and_then(Value::as_str),
                p.field("containerPort"),
            ) {
                if !n.is_empty() {
                    ports.insert(n.to_string(), cp.clone());
                }
            }
        }
        for (field, kind) in PROBES {
            if let Some(probe) = c.field(field).filter(|p| p.is_object()) {
                if let Some(e) = prober_entry(probe, &ports, target_port, true) {
                    out.insert(probe_url(name, kind), e);
                }
            }
        }
        for (field, kind) in HOOKS {
            if let Some(h) = c
                .field("lifecycle")
                .and_then(|l| l.field(field))
                .filter(|p| p.is_object())
            {
                if let Some(e) = prober_entry(h, &ports, target_port, false) {
                    out.insert(hook_url(name, kind), e);
                }
            }
        }
    }
    if out.is_empty() {
        return None;
    }
    Some(Value::Object(out.into_iter().collect()).to_string())
}

/// Re-injection: the old `ISTIO_KUBE_APP_PROBERS` merged into the new one (old entries win), sorted.
/// `None` when either side does not parse (then the env is left as it is).
pub fn merge_app_probers(old: &str, new: &str) -> Option<String> {
    let old: Map<String, Value> = serde_json::from_str(old).ok()?;
    let new: Map<String, Value> = serde_json::from_str(new).ok()?;
    let mut all: std::collections::BTreeMap<String, Value> = std::collections::BTreeMap::new();
    for (k, v) in new.into_iter().chain(old) {
        if !v.is_null() && !v.is_object() {
            return None;
        }
        all.insert(k, go_struct(&v, PROBER));
    }
    Some(Value::Object(all.into_iter().collect()).to_string())
}

/// `patchRewriteProbe`: every non-proxy container's HTTP/TCP/gRPC probes and HTTP/TCP lifecycle hooks
/// point at the status port (annotation `status.sidecar.istio.io/port`, else `default_port`).
pub fn patch_rewrite_probes(pod: &mut Value, default_port: i64) {
    let port = match annotation(pod, STATUS_PORT_ANNOTATION) {
        Some(v) => match v.parse::<i64>() {
            Ok(p) => p,
            // Istio logs and leaves the probes alone
            Err(_) => return,
        },
        None => default_port,
    };
    let Some(spec) = pod.field_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for list in ["containers", "initContainers"] {
        let Some(cs) = spec.field_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut() {
            let name = name_of(c).to_string();
            if name == PROXY_CONTAINER {
                continue;
            }
            let Some(cm) = c.as_object_mut() else {
                continue;
            };
            for (field, kind) in PROBES {
                if let Some(probe) = cm.field_mut(field).and_then(Value::as_object_mut) {
                    rewrite_handler(probe, &probe_url(&name, kind), port, true);
                }
            }
            if let Some(lc) = cm.field_mut("lifecycle").and_then(Value::as_object_mut) {
                for (field, kind) in HOOKS {
                    if let Some(h) = lc.field_mut(field).and_then(Value::as_object_mut) {
                        rewrite_handler(h, &hook_url(&name, kind), port, false);
                    }
                }
            }
        }
    }
}

fn present(m: &Map<String, Value>, k: &str) -> bool {
    m.field(k).is_some_and(|v| !v.is_null())
}

fn rewrite_handler(h: &mut Map<String, Value>, url: &str, port: i64, grpc_too: bool) {
    if let Some(Value::Object(get)) = h.field_mut("httpGet") {
        get.insert("port".to_string(), Value::from(port));
        get.insert("path".to_string(), Value::String(url.to_string()));
        if get.field("scheme").and_then(Value::as_str) == Some("HTTPS") {
            get.insert("scheme".to_string(), Value::String("HTTP".to_string()));
        }
        return;
    }
    if present(h, "tcpSocket") || (grpc_too && present(h, "grpc")) {
        h.shift_remove("tcpSocket");
        if grpc_too {
            h.shift_remove("grpc");
        }
        let mut get = Map::new();
        get.insert("path".to_string(), Value::String(url.to_string()));
        get.insert("port".to_string(), Value::from(port));
        h.insert("httpGet".to_string(), Value::Object(get));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hello_probes() -> Value {
        json!({"spec": {"containers": [
            {"name": "hello", "ports": [{"name": "http", "containerPort": 80}],
             "livenessProbe": {"httpGet": {"port": "http"}},
             "readinessProbe": {"httpGet": {"port": 3333}},
             "lifecycle": {"preStop": {"httpGet": {"port": 91}}, "postStart": {"tcpSocket": {"port": 93}}}},
            {"name": "world", "ports": [{"name": "http", "containerPort": 90}],
             "livenessProbe": {"httpGet": {"port": "http"}},
             "readinessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]}}},
            {"name": "istio-proxy", "readinessProbe": {"httpGet": {"path": "/healthz/ready", "port": 15021}}}
        ]}})
    }

    #[test]
    fn dump_hello_probes_golden() {
        assert_eq!(
            dump_app_probers(&hello_probes(), 15020).unwrap(),
            r#"{"/app-health/hello/livez":{"httpGet":{"port":80}},"/app-health/hello/readyz":{"httpGet":{"port":3333}},"/app-health/world/livez":{"httpGet":{"port":90}},"/app-lifecycle/hello/poststartz":{"tcpSocket":{"port":93}},"/app-lifecycle/hello/prestopz":{"httpGet":{"port":91}}}"#
        );
    }

    #[test]
    fn dump_readiness_with_path_timeout_grpc_and_drops() {
        let pod = json!({"spec": {"initContainers": [
            {"name": "hello", "readinessProbe": {"httpGet": {"port": 8000, "path": "/ip", "scheme": "HTTPS"}, "timeoutSeconds": 5, "periodSeconds": 9}},
            {"name": "g", "livenessProbe": {"grpc": {"port": 7000}}},
            {"name": "done", "livenessProbe": {"httpGet": {"port": 15020, "path": "/app-health/done/livez"}}},
            {"name": "unnamed", "livenessProbe": {"tcpSocket": {"port": "nope"}}},
            {"name": "s", "lifecycle": {"preStop": {"sleep": {"seconds": 3}}}}
        ]}});
        assert_eq!(
            dump_app_probers(&pod, 15020).unwrap(),
            r#"{"/app-health/g/livez":{"grpc":{"port":7000,"service":null}},"/app-health/hello/readyz":{"httpGet":{"path":"/ip","port":8000,"scheme":"HTTPS"},"timeoutSeconds":5}}"#
        );
        assert_eq!(
            dump_app_probers(&json!({"spec": {"containers": [{"name": "x"}]}}), 15020),
            None
        );
    }

    #[test]
    fn dump_hello_readiness_and_tcp_probes_goldens() {
        let pod = json!({"spec": {"containers": [{"name": "hello",
            "readinessProbe": {"httpGet": {"path": "/ip", "port": 8000}}}]}});
        assert_eq!(
            dump_app_probers(&pod, 15020).unwrap(),
            r#"{"/app-health/hello/readyz":{"httpGet":{"path":"/ip","port":8000}}}"#
        );
        let mut pod = json!({"spec": {"containers": [{"name": "hello",
            "ports": [{"name": "http", "containerPort": 80}],
            "livenessProbe": {"tcpSocket": {"port": "http"}},
            "readinessProbe": {"tcpSocket": {"port": 3333}}}]}});
        assert_eq!(
            dump_app_probers(&pod, 15020).unwrap(),
            r#"{"/app-health/hello/livez":{"tcpSocket":{"port":80}},"/app-health/hello/readyz":{"tcpSocket":{"port":3333}}}"#
        );
        patch_rewrite_probes(&mut pod, 15020);
        assert_eq!(
            pod["spec"]["containers"][0]["livenessProbe"],
            json!({"httpGet": {"path": "/app-health/hello/livez", "port": 15020}})
        );
    }

    #[test]
    fn merge_on_reinjection_old_wins() {
        let old = r#"{"/app-health/hello/livez":{"httpGet":{"port":80}},"/app-health/hello/readyz":{"httpGet":{"port":3333}},"/app-health/world/livez":{"httpGet":{"port":90}}}"#;
        let new = r#"{"/app-health/new/livez":{"httpGet":{"path":"/testLive","port":8008}},"/app-health/hello/livez":{"httpGet":{"port":1}}}"#;
        assert_eq!(
            merge_app_probers(old, new).unwrap(),
            r#"{"/app-health/hello/livez":{"httpGet":{"port":80}},"/app-health/hello/readyz":{"httpGet":{"port":3333}},"/app-health/new/livez":{"httpGet":{"path":"/testLive","port":8008}},"/app-health/world/livez":{"httpGet":{"port":90}}}"#
        );
        assert_eq!(merge_app_probers("{", new), None);
    }

    #[test]
    fn rewrite_probes_and_hooks() {
        let mut pod = hello_probes();
        pod["spec"]["containers"][0]["readinessProbe"] =
            json!({"httpGet": {"port": 3333, "scheme": "HTTPS", "host": "h"}, "periodSeconds": 4});
        pod["spec"]["containers"][1]["startupProbe"] =
            json!({"grpc": {"port": 1}, "failureThreshold": 3});
        patch_rewrite_probes(&mut pod, 15020);
        let hello = &pod["spec"]["containers"][0];
        assert_eq!(
            hello["livenessProbe"],
            json!({"httpGet": {"port": 15020, "path": "/app-health/hello/livez"}})
        );
        assert_eq!(
            hello["readinessProbe"],
            json!({"httpGet": {"port": 15020, "scheme": "HTTP", "host": "h", "path": "/app-health/hello/readyz"}, "periodSeconds": 4})
        );
        assert_eq!(
            hello["lifecycle"],
            json!({"preStop": {"httpGet": {"port": 15020, "path": "/app-lifecycle/hello/prestopz"}},
                   "postStart": {"httpGet": {"path": "/app-lifecycle/hello/poststartz", "port": 15020}}})
        );
        let world = &pod["spec"]["containers"][1];
        assert_eq!(
            world["readinessProbe"],
            json!({"exec": {"command": ["cat", "/tmp/healthy"]}})
        );
        assert_eq!(
            world["startupProbe"],
            json!({"failureThreshold": 3, "httpGet": {"path": "/app-health/world/startupz", "port": 15020}})
        );
        // the proxy's own probe is untouched
        assert_eq!(
            pod["spec"]["containers"][2]["readinessProbe"]["httpGet"]["port"],
            15021
        );
    }

    #[test]
    fn rewrite_uses_status_port_annotation() {
        let mut pod = hello_probes();
        pod["metadata"] = json!({"annotations": {STATUS_PORT_ANNOTATION: "123"}});
        patch_rewrite_probes(&mut pod, 15020);
        assert_eq!(
            pod["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"],
            123
        );
        let mut pod = hello_probes();
        pod["metadata"] = json!({"annotations": {STATUS_PORT_ANNOTATION: "x"}});
        patch_rewrite_probes(&mut pod, 15020);
        assert_eq!(
            pod["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"],
            "http"
        );
    }
}
