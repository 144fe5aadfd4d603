//! Before and after the template: stripping a previous injection and re-inserting saved overrides
//! (`stripPod` and `reinsertOverrides` in Istio's `inject.go`), and `postProcessPod` in Istio's
//! `webhook.go` (cluster env, Prometheus merge, probe rewrite, status annotation, container order).

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};

use crate::overrides;
use crate::pod::{
    annotation, annotations, annotations_mut, containers, name_of, proxy_container,
    proxy_container_mut, set_annotation, CORE_DUMP_CONTAINER, INIT_CONTAINER,
    MERGE_METRICS_ANNOTATION, NETWORK_LABEL, OVERRIDES_ANNOTATION, PROXY_CONTAINER,
    REWRITE_PROBES_ANNOTATION, SECURE_PORT_ANNOTATION, STATUS_ANNOTATION, VALIDATION_CONTAINER,
};
use crate::probes;
use sidecar_core::fields::{ensure_map, Fields};
use sidecar_core::goconv::{parse_bool, parse_bool_value};

const NETWORK_ENV: &str = "ISTIO_META_NETWORK";
const PROMETHEUS_ENV: &str = "ISTIO_PROMETHEUS_ANNOTATIONS";
const SECURE_PORT_ENV: &str = "ENVOY_SECURE_MERGED_METRICS_PORT";
/// Ports the agent and Envoy listen on; a scrape target may not use them.
const RESERVED_PORTS: [u16; 9] = [
    15000, 15001, 15004, 15006, 15008, 15020, 15021, 15053, 15090,
];
/// The MeshConfig default status port, used when the mesh document does not spell it.
const DEFAULT_STATUS_PORT: i64 = 15020;

/// What post-processing needs beyond the pods.
#[derive(Debug, Clone, Copy)]
pub struct PostProcessParams<'a> {
    pub values: &'a Value,
    /// MeshConfig (with `defaultConfig`): status port, `enablePrometheusMerge`.
    pub mesh: &'a Value,
    /// Effective ProxyConfig (`holdApplicationUntilProxyStarts` for container order).
    pub proxy_config: &'a Value,
    /// The injector config's `injectedAnnotations`.
    pub injected_annotations: &'a BTreeMap<String, String>,
    /// Webhook revision; empty for default.
    pub revision: &'a str,
    /// The final cluster/network env map (Istio's `parseInjectEnvs` in `webhook.go`): URL path parameters
    /// plus the resolved `ISTIO_META_CLUSTER_ID` / `ISTIO_META_NETWORK` when non-empty. Each key is moved
    /// to the end of the proxy env, sorted; `ISTIO_META_NETWORK` also becomes the
    /// `topology.istio.io/network` label.
    pub url_env: &'a BTreeMap<String, String>,
}

/// Why post-processing failed.
#[derive(Debug, thiserror::Error)]
pub enum PostProcessError {
    /// `prometheus.istio.io/scrape-targets` names a port that cannot be scraped.
    #[error("invalid prometheus scrape targets: {0}")]
    ScrapeTargets(String),
    /// The `prometheus.io/port` annotation names a port that cannot be scraped.
    #[error("invalid prometheus scrape configuration: {0}")]
    ScrapeConfig(String),
    /// `proxy.istio.io/overrides` is not valid JSON.
    #[error("invalid proxy.istio.io/overrides annotation: {0}")]
    Overrides(#[from] overrides::InvalidOverrides),
}

/// Whether `key` sanitises to `sanitized` (already sanitised) under Prometheus label sanitising (every
/// character outside `[a-zA-Z0-9_]` becomes `_`), without allocating: this runs for every annotation
/// several times per request.
fn sanitizes_to(key: &str, sanitized: &str) -> bool {
    key.chars().count() == sanitized.len()
        && key.chars().zip(sanitized.bytes()).all(|(c, s)| {
            let c = if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            };
            c as u32 == u32::from(s)
        })
}

const PROM_SCRAPE: &str = "prometheus_io_scrape";
const PROM_PORT: &str = "prometheus_io_port";
const PROM_PATH: &str = "prometheus_io_path";
const PROM_TARGETS: &str = "prometheus_istio_io_scrape_targets";
const PROM_SECURE_PORT: &str = "prometheus_istio_io_secure_port";

/// The value of the first annotation whose sanitised key is `sanitized`.
fn sanitized_annotation<'a>(pod: &'a Value, sanitized: &str) -> Option<&'a str> {
    annotations(pod)?
        .iter()
        .find(|(k, _)| sanitizes_to(k, sanitized))
        .and_then(|(_, v)| v.as_str())
}

fn remove_sanitized(pod: &mut Value, keys: &[&str]) {
    if let Some(ann) = annotations_mut(pod) {
        ann.retain(|k, _| !keys.iter().any(|s| sanitizes_to(k, s)));
    }
}

fn mesh_status_port(mesh: &Value) -> i64 {
    mesh.field("defaultConfig")
        .and_then(|d| d.field("statusPort"))
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_STATUS_PORT)
}

/// `stripPod`: the pod without a previous injection (by its parseable status annotation).
pub fn strip_pod(pod: &Value, mesh: &Value) -> Value {
    let mut out = pod.clone();
    let Some(status) = annotation(pod, STATUS_ANNOTATION).and_then(crate::status::parse) else {
        return out;
    };
    if let Some(spec) = out.field_mut("spec").and_then(Value::as_object_mut) {
        for (list, names) in [
            ("containers", &status.containers),
            ("initContainers", &status.init_containers),
        ] {
            if let Some(cs) = spec.field_mut(list).and_then(Value::as_array_mut) {
                // A set: the annotation is the pod's own and may list any number of names.
                let names: HashSet<&str> = names.iter().map(String::as_str).collect();
                cs.retain(|c| !names.contains(name_of(c)));
            }
        }
    }
    let target = mesh_status_port(mesh).to_string();
    let port_is_ours = annotations(pod).is_some_and(|a| {
        a.iter()
            .any(|(k, v)| sanitizes_to(k, PROM_PORT) && v.as_str() == Some(target.as_str()))
    });
    if port_is_ours {
        remove_sanitized(&mut out, &[PROM_PATH, PROM_PORT, PROM_SCRAPE, PROM_TARGETS]);
    }
    if let Some(ann) = annotations_mut(&mut out) {
        ann.shift_remove(STATUS_ANNOTATION);
    }
    out
}

/// `reinsertOverrides`: containers saved in `proxy.istio.io/overrides` appended when absent.
pub fn reinsert_overrides(pod: &mut Value) -> Result<(), PostProcessError> {
    let Some(text) = annotation(pod, OVERRIDES_ANNOTATION) else {
        return Ok(());
    };
    let (saved_containers, saved_inits) = overrides::parse(text)?;
    for (list, saved) in [
        ("containers", saved_containers),
        ("initContainers", saved_inits),
    ] {
        // The names present, kept up to date as containers are appended (a scan per saved container
        // would be quadratic in the annotation's size).
        let mut present: HashSet<String> = containers(pod, list)
            .iter()
            .map(|x| name_of(x).to_string())
            .collect();
        for c in saved {
            if !present.insert(name_of(&c).to_string()) {
                continue;
            }
            if let Some(spec) = ensure_map(pod, &["spec"]) {
                let entry = spec
                    .entry(list.to_string())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if !entry.is_array() {
                    *entry = Value::Array(Vec::new());
                }
                if let Value::Array(a) = entry {
                    a.push(c);
                }
            }
        }
    }
    Ok(())
}

/// `postProcessPod`, in Istio's order. `original` is the request pod; `template_pod` the template output.
pub fn post_process(
    pod: &mut Value,
    original: &Value,
    template_pod: &Value,
    params: &PostProcessParams<'_>,
) -> Result<(), PostProcessError> {
    // `original` is not needed: reorderPod's ProxyConfig (with the original pod's `proxy.istio.io/config`
    // applied) is `params.proxy_config`.
    let _ = original;
    ensure_map(pod, &["metadata", "annotations"]);
    ensure_map(pod, &["metadata", "labels"]);
    overwrite_cluster_info(pod, params.url_env);
    apply_prometheus_merge(pod, params)?;
    apply_secure_prometheus_annotation(pod);
    apply_rewrite(pod, params);
    apply_metadata(pod, template_pod, params);
    reorder_pod(pod, params);
    Ok(())
}

/// The proxy container's fields.
fn proxy_mut(pod: &mut Value) -> Option<&mut Map<String, Value>> {
    proxy_container_mut(pod)?.as_object_mut()
}

fn env_mut(container: &mut Map<String, Value>) -> Option<&mut Vec<Value>> {
    if !container.field("env").is_some_and(Value::is_array) {
        container.insert("env".to_string(), Value::Array(Vec::new()));
    }
    container.field_mut("env")?.as_array_mut()
}

fn env_var(name: &str, value: String) -> Value {
    let mut m = Map::with_capacity(2);
    m.insert("name".to_string(), Value::String(name.to_string()));
    m.insert("value".to_string(), Value::String(value));
    Value::Object(m)
}

/// `overwriteClusterInfo`: every key of the env map moved to the end of the proxy env, sorted.
fn overwrite_cluster_info(pod: &mut Value, url_env: &BTreeMap<String, String>) {
    if url_env.is_empty() {
        return;
    }
    let Some(env) = proxy_mut(pod).and_then(env_mut) else {
        return;
    };
    env.retain(|e| !url_env.contains_key(name_of(e)));
    for (k, v) in url_env {
        env.push(env_var(k, v.clone()));
    }
}

struct ScrapeTarget {
    port: String,
    path: String,
}

/// `prometheus.istio.io/scrape-targets`: `port[:path]` entries; `None` when absent or ignored (an entry
/// with an empty port makes Istio ignore the whole value).
fn scrape_targets(value: &str) -> Option<Vec<ScrapeTarget>> {
    let mut out = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (port, path) = entry.split_once(':').unwrap_or((entry, ""));
        let (port, path) = (port.trim(), path.trim());
        if port.is_empty() {
            tracing::warn!(
                value,
                "ignoring prometheus.istio.io/scrape-targets: entry without a port"
            );
            return None;
        }
        let path = if path.is_empty() { "/metrics" } else { path };
        out.push(ScrapeTarget {
            port: port.to_string(),
            path: path.to_string(),
        });
    }
    (!out.is_empty()).then_some(out)
}

/// Why `port` cannot be scraped through the merged endpoint, if it cannot.
fn port_problem(port: &str, status_port: &str) -> Option<String> {
    match port.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => {
            if port == status_port || p.to_string() == status_port {
                Some(format!(
                    "port {port} conflicts with the status port {status_port}"
                ))
            } else if RESERVED_PORTS.contains(&(p as u16)) {
                Some(format!("port {port} is reserved for Istio"))
            } else {
                None
            }
        }
        _ => Some(format!(
            "port {port:?} is not a valid port number (1-65535)"
        )),
    }
}

/// `applyPrometheusMerge`: the app's scrape settings go to the agent, the pod is scraped at the agent.
fn apply_prometheus_merge(
    pod: &mut Value,
    params: &PostProcessParams<'_>,
) -> Result<(), PostProcessError> {
    let scrape_enabled = annotations(pod)
        .and_then(|a| {
            a.iter()
                .filter(|(k, _)| sanitizes_to(k, PROM_SCRAPE))
                .find_map(|(_, v)| v.as_str().and_then(parse_bool))
        })
        .unwrap_or(true);
    let merge_enabled = match annotation(pod, MERGE_METRICS_ANNOTATION).and_then(parse_bool) {
        Some(b) => b,
        None => match params.mesh.field("enablePrometheusMerge") {
            Some(Value::Bool(b)) => *b,
            _ => true,
        },
    };
    if !scrape_enabled || !merge_enabled {
        return Ok(());
    }
    let target = mesh_status_port(params.mesh).to_string();
    let already = annotations(pod).is_some_and(|a| {
        a.iter()
            .any(|(k, v)| sanitizes_to(k, PROM_PORT) && v.as_str() == Some(target.as_str()))
    });
    if already {
        return Ok(());
    }
    let get = |k: &str| sanitized_annotation(pod, k).unwrap_or("").to_string();
    let scrape = get(PROM_SCRAPE);
    let mut path = get(PROM_PATH);
    let mut port = get(PROM_PORT);
    let targets = sanitized_annotation(pod, PROM_TARGETS).and_then(scrape_targets);
    if let Some(ts) = &targets {
        if let Some(first) = ts.first() {
            port = first.port.clone();
            path = first.path.clone();
        }
        for t in ts {
            if let Some(problem) = port_problem(&t.port, &target) {
                return Err(PostProcessError::ScrapeTargets(problem));
            }
        }
    } else if !port.is_empty() {
        if let Some(problem) = port_problem(&port, &target) {
            return Err(PostProcessError::ScrapeConfig(problem));
        }
    }
    let non_empty = !scrape.is_empty() || !path.is_empty() || !port.is_empty() || targets.is_some();
    if non_empty {
        if let Some(env) = proxy_mut(pod).and_then(env_mut) {
            let mut cfg = Map::new();
            cfg.insert("scrape".to_string(), Value::String(scrape));
            cfg.insert("path".to_string(), Value::String(path));
            cfg.insert("port".to_string(), Value::String(port));
            if let Some(ts) = targets {
                let list = ts
                    .into_iter()
                    .map(|t| {
                        let mut m = Map::new();
                        m.insert("port".to_string(), Value::String(t.port));
                        m.insert("path".to_string(), Value::String(t.path));
                        Value::Object(m)
                    })
                    .collect();
                cfg.insert("targets".to_string(), Value::Array(list));
            }
            env.push(env_var(PROMETHEUS_ENV, Value::Object(cfg).to_string()));
        }
    }
    remove_sanitized(pod, &[PROM_PATH, PROM_PORT, PROM_SCRAPE, PROM_TARGETS]);
    set_annotation(pod, "prometheus.io/port", target);
    set_annotation(pod, "prometheus.io/path", "/stats/prometheus".to_string());
    set_annotation(pod, "prometheus.io/scrape", "true".to_string());
    Ok(())
}

/// `applySecurePrometheusAnnotation`: the proxy's secure merged-metrics port, unless the user set one.
fn apply_secure_prometheus_annotation(pod: &mut Value) {
    if sanitized_annotation(pod, PROM_SECURE_PORT).is_some() {
        return;
    }
    let port = proxy_container(pod)
        .and_then(|p| p.field("env"))
        .and_then(Value::as_array)
        .and_then(|env| env.iter().find(|e| name_of(e) == SECURE_PORT_ENV))
        .and_then(|e| e.field("value"))
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty() && *v != "0")
        .map(str::to_string);
    if let Some(port) = port {
        set_annotation(pod, SECURE_PORT_ANNOTATION, port);
    }
}

/// `applyRewrite`: record the app probes for the agent and point them at it.
fn apply_rewrite(pod: &mut Value, params: &PostProcessParams<'_>) {
    if proxy_container(pod).is_none() {
        return;
    }
    let rewrite = annotation(pod, REWRITE_PROBES_ANNOTATION)
        .and_then(parse_bool)
        .unwrap_or_else(|| {
            params
                .values
                .field("sidecarInjectorWebhook")
                .and_then(|s| s.field("rewriteAppHTTPProbe"))
                .map(|v| parse_bool_value(Some(v)))
                .unwrap_or(true)
        });
    if !rewrite {
        return;
    }
    let status_port = mesh_status_port(params.mesh);
    if let Some(probers) = probes::dump_app_probers(pod, status_port) {
        let reinjected = annotation(pod, STATUS_ANNOTATION).is_some();
        if let Some(env) = proxy_mut(pod).and_then(env_mut) {
            let existing = env
                .iter_mut()
                .find(|e| name_of(e) == probes::APP_PROBERS_ENV);
            match existing {
                Some(e) if reinjected => {
                    let old = e.field("value").and_then(Value::as_str).unwrap_or("");
                    if let Some(merged) = probes::merge_app_probers(old, &probers) {
                        if let Some(m) = e.as_object_mut() {
                            m.insert("value".to_string(), Value::String(merged));
                        }
                    }
                }
                _ => env.push(env_var(probes::APP_PROBERS_ENV, probers)),
            }
        }
    }
    probes::patch_rewrite_probes(pod, status_port);
}

/// `applyMetadata`: network label, status annotation, `injectedAnnotations`.
fn apply_metadata(pod: &mut Value, template_pod: &Value, params: &PostProcessParams<'_>) {
    if let Some(network) = params.url_env.get(NETWORK_ENV) {
        if let Some(labels) = ensure_map(pod, &["metadata", "labels"]) {
            labels.insert(NETWORK_LABEL.to_string(), Value::String(network.clone()));
        }
    }
    set_annotation(
        pod,
        STATUS_ANNOTATION,
        crate::status::build(template_pod, params.revision),
    );
    for (k, v) in params.injected_annotations {
        set_annotation(pod, k, v.clone());
    }
}

#[derive(Clone, Copy)]
enum Move {
    First,
    Last,
}

/// Istio's `modifyContainers`: the (last) container called `name` moved first or last, others kept in
/// order (duplicates of the name dropped, as Istio does).
fn move_container(list: &mut Vec<Value>, name: &str, to: Move) {
    let Some(last) = list.iter().rposition(|c| name_of(c) == name) else {
        return;
    };
    let found = list.remove(last);
    list.retain(|c| name_of(c) != name);
    match to {
        Move::First => list.insert(0, found),
        Move::Last => list.push(found),
    }
}

/// `reorderPod`: proxy last (first when holding the application); native: `istio-init|istio-validation,
/// istio-proxy, enable-core-dump` first; else `istio-validation` first, `istio-init` then
/// `enable-core-dump` last.
fn reorder_pod(pod: &mut Value, params: &PostProcessParams<'_>) {
    let hold = parse_bool_value(params.proxy_config.field("holdApplicationUntilProxyStarts"))
        || parse_bool_value(
            params
                .values
                .field("global")
                .and_then(|g| g.field("proxy"))
                .and_then(|p| p.field("holdApplicationUntilProxyStarts")),
        );
    let Some(spec) = pod.field_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(cs) = spec.field_mut("containers").and_then(Value::as_array_mut) {
        move_container(
            cs,
            PROXY_CONTAINER,
            if hold { Move::First } else { Move::Last },
        );
    }
    if let Some(inits) = spec
        .field_mut("initContainers")
        .and_then(Value::as_array_mut)
    {
        if inits.iter().any(|c| name_of(c) == PROXY_CONTAINER) {
            for name in [
                CORE_DUMP_CONTAINER,
                PROXY_CONTAINER,
                VALIDATION_CONTAINER,
                INIT_CONTAINER,
            ] {
                move_container(inits, name, Move::First);
            }
        } else {
            move_container(inits, VALIDATION_CONTAINER, Move::First);
            move_container(inits, INIT_CONTAINER, Move::Last);
            move_container(inits, CORE_DUMP_CONTAINER, Move::Last);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
