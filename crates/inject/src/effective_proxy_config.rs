//! The effective ProxyConfig (Istio's `GetProxyConfigOrDefault`, `proxy_config.go`, as `inject` in
//! `webhook.go` calls it, without ProxyConfig resources, which `proxy_config_resources` adds): Istio's
//! built-in default, overlaid by the mesh's `defaultConfig`, overlaid by the pod's `proxy.istio.io/config`
//! annotation (YAML or JSON). The result is JSON with proto camelCase names, as render expects. Overlays merge like Istio's YAML merge onto the
//! proto: scalars and lists replace, maps (`proxyMetadata`, nested messages) merge key by key.

use serde_json::{Map, Value};

use crate::defaults::{builtin_proxy_config, deep_merge};
use sidecar_core::fields::Fields;
use sidecar_core::proto_duration::{format_duration_nanos, parse_duration_nanos};

/// Parses a `proxy.istio.io/config` value (YAML or JSON) into an overlay object.
pub fn parse_overlay(text: &str) -> Result<Value, String> {
    let v = sidecar_core::yaml::parse_json_or_yaml(text)
        .map_err(|e| format!("could not parse proxy config: {e}"))?;
    match v {
        Value::Object(_) => Ok(v),
        Value::Null => Ok(Value::Object(Map::new())),
        other => Err(format!("proxy config must be a mapping, got {other}")),
    }
}

/// Applies an overlay onto a ProxyConfig: maps merge recursively, everything else replaces; `null` unsets.
pub fn apply_overlay(base: &mut Value, overlay: &Value) {
    deep_merge(base, overlay);
    normalize(base);
}

/// Rewrites durations to protobuf JSON spelling (`23s`, `1.500s`), as Istio prints them.
fn normalize(pc: &mut Value) {
    for key in [
        "drainDuration",
        "terminationDrainDuration",
        "parentShutdownDuration",
    ] {
        if let Some(Value::String(s)) = pc.field(key) {
            if let Some(n) = normalize_duration(s) {
                pc[key] = Value::String(n);
            }
        }
    }
}

fn normalize_duration(s: &str) -> Option<String> {
    parse_duration_nanos(s).map(format_duration_nanos)
}

fn check_port(pc: &Value, key: &str) -> Result<(), String> {
    match pc.field(key) {
        None | Some(Value::Null) => Ok(()),
        Some(v) => match v.as_i64() {
            Some(p) if (1..=65535).contains(&p) => Ok(()),
            _ => Err(format!(
                "{key}: port number {v} must be in the range 1..65535"
            )),
        },
    }
}

fn check_duration(pc: &Value, key: &str) -> Result<(), String> {
    match pc.field(key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) => match parse_duration_nanos(s) {
            Some(n) if n >= 1_000_000 && n % 1_000_000 == 0 => Ok(()),
            Some(_) => Err(format!(
                "{key}: duration {s:?} must be at least 1ms and a whole number of ms"
            )),
            None => Err(format!("{key}: invalid duration {s:?} (want e.g. \"5s\")")),
        },
        Some(v) => Err(format!("{key}: invalid duration {v}")),
    }
}

fn check_host_port(pc: &Value, key: &str) -> Result<(), String> {
    match pc.field(key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) => {
            let (host, port) = s
                .rsplit_once(':')
                .ok_or_else(|| format!("{key}: {s:?} is not host:port"))?;
            if host.is_empty() {
                return Err(format!("{key}: {s:?} has an empty host"));
            }
            match port.parse::<u32>() {
                Ok(p) if (1..=65535).contains(&p) => Ok(()),
                _ => Err(format!("{key}: {s:?} has an invalid port")),
            }
        }
        Some(v) => Err(format!("{key}: {v} is not a string")),
    }
}

fn check_non_empty(pc: &Value, key: &str) -> Result<(), String> {
    match pc.field(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(()),
        _ => Err(format!("{key} must be set")),
    }
}

/// Istio's ProxyConfig validation (the parts that matter for injection), plus the type of every field and
/// the `proxyMetadata` names.
pub fn validate(pc: &Value) -> Result<(), String> {
    if !pc.is_object() {
        return Err("proxy config must be a mapping".to_string());
    }
    check_non_empty(pc, "configPath")?;
    check_non_empty(pc, "binaryPath")?;
    check_non_empty(pc, "serviceCluster")?;
    check_duration(pc, "drainDuration")?;
    check_duration(pc, "terminationDrainDuration")?;
    check_host_port(pc, "discoveryAddress")?;
    check_host_port(pc, "envoyMetricsService")?;
    check_port(pc, "proxyAdminPort")?;
    check_port(pc, "statusPort")?;
    match pc.field("interceptionMode") {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if matches!(m.as_str(), "REDIRECT" | "TPROXY" | "NONE") => {}
        Some(v) => {
            return Err(format!(
                "interceptionMode: {v} is not one of REDIRECT, TPROXY, NONE"
            ))
        }
    }
    match pc.field("concurrency") {
        None | Some(Value::Null) => {}
        Some(v)
            if v.as_i64()
                .is_some_and(|c| (0..=i64::from(i32::MAX)).contains(&c)) => {}
        Some(v) => return Err(format!("concurrency: {v} is not a non-negative integer")),
    }
    match pc.field("holdApplicationUntilProxyStarts") {
        None | Some(Value::Null) | Some(Value::Bool(_)) => {}
        Some(v) => {
            return Err(format!(
                "holdApplicationUntilProxyStarts: {v} is not a boolean"
            ))
        }
    }
    match pc.field("proxyMetadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            if let Some((k, v)) = m.iter().find(|(_, v)| !v.is_string()) {
                return Err(format!("proxyMetadata.{k}: {v} is not a string"));
            }
        }
        Some(v) => return Err(format!("proxyMetadata: {v} is not a mapping")),
    }
    // Every other field's type as jsonpb decodes a ProxyConfig (Istio's `mesh.ApplyProxyConfig`), and the
    // `proxyMetadata` names, which become the proxy's env entries.
    crate::config_types::check(&crate::config_types::PROXY_CONFIG, pc, "")
        .map_err(|e| format!("{}: {}: {}", e.field, e.value, e.reason))
}

/// The effective ProxyConfig for a pod: default ⊕ mesh `defaultConfig` ⊕ `proxy.istio.io/config`.
/// `mesh_default` is the (already merged) mesh `defaultConfig`.
pub fn effective(
    mesh_default: Option<&Value>,
    annotations: Option<&Map<String, Value>>,
) -> Result<Value, String> {
    let mut pc = builtin_proxy_config();
    if let Some(d) = mesh_default {
        apply_overlay(&mut pc, d);
    }
    if let Some(Value::String(text)) =
        annotations.and_then(|a| a.field(crate::pod::PROXY_CONFIG_ANNOTATION))
    {
        let overlay = parse_overlay(text)?;
        apply_overlay(&mut pc, &overlay);
        validate(&pc)?;
    }
    Ok(pc)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn annotation_overrides_mesh_and_merges_metadata() {
        let mesh = json!({"drainDuration": "23s", "proxyMetadata": {"A": "1", "B": "2"}});
        let ann =
            json!({"proxy.istio.io/config": "proxyMetadata:\n  B: x\n  C: z\nconcurrency: 2\n"});
        let pc = effective(Some(&mesh), ann.as_object()).unwrap();
        assert_eq!(pc["drainDuration"], json!("23s"));
        assert_eq!(pc["proxyMetadata"], json!({"A": "1", "B": "x", "C": "z"}));
        assert_eq!(pc["concurrency"], json!(2));
        assert_eq!(pc["statusPort"], json!(15020));
        assert_eq!(
            pc["discoveryAddress"],
            json!("istiod.istio-system.svc:15012")
        );
    }

    #[test]
    fn json_annotation_and_durations() {
        let ann = json!({"proxy.istio.io/config": "{\"terminationDrainDuration\": \"1.5s\", \"holdApplicationUntilProxyStarts\": true}"});
        let pc = effective(None, ann.as_object()).unwrap();
        assert_eq!(pc["terminationDrainDuration"], json!("1.500s"));
        assert_eq!(pc["holdApplicationUntilProxyStarts"], json!(true));
        assert!(effective(
            None,
            json!({"proxy.istio.io/config": "drainDuration: 1m"}).as_object()
        )
        .is_err());
    }
}
