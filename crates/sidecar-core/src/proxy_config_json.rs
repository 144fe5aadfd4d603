//! `protoToJSON` of the effective ProxyConfig for the `PROXY_CONFIG` env var (Istio's
//! `injection-template.yaml`, `protoToJSON` in `inject.go`).
//!
//! Istio prints the ProxyConfig with the fields that equal its built-in defaults cleared, using the legacy
//! jsonpb marshaller: fields in proto declaration order, proto3 zero values omitted, wrapper types
//! (`concurrency`, `holdApplicationUntilProxyStarts`) printed even when 0/false, map keys sorted, durations
//! as `"23s"`, enums by name. The input here is the ProxyConfig as JSON (camelCase), as the engine computes it.

use serde_json::{Map, Value};

use crate::fields::Fields;
use crate::goconv::as_i64;

/// How a known top-level ProxyConfig field is printed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `string`: omitted when empty.
    Str,
    /// `int32`/`uint32`: omitted when 0.
    Int,
    /// A wrapper (`Int32Value`, `BoolValue`): printed whenever set.
    Wrapper,
    /// `google.protobuf.Duration`: normalised to proto JSON (`"23s"`, `"1.500s"`).
    Duration,
    /// An enum; the zero name is omitted unless the field is part of a oneof.
    Enum(&'static [&'static str]),
    /// A oneof member enum: printed whenever set.
    OneofEnum(&'static [&'static str]),
    /// `map<string,string>`: keys sorted, omitted when empty.
    Map,
    /// `repeated`: omitted when empty.
    List,
    /// A message: printed when set (even `{}`), its members as given minus nulls.
    Message,
}

const AUTH_POLICY: &[&str] = &["NONE", "MUTUAL_TLS"];
const INTERCEPTION: &[&str] = &["REDIRECT", "TPROXY", "NONE"];
const TRACING_SERVICE_NAME: &[&str] = &[
    "APP_LABEL_AND_NAMESPACE",
    "CANONICAL_NAME_ONLY",
    "CANONICAL_NAME_AND_NAMESPACE",
];

/// ProxyConfig fields in proto declaration order (istio.mesh.v1alpha1.ProxyConfig of istio.io/api 1.31,
/// every field).
const FIELDS: &[(&str, Kind)] = &[
    ("configPath", Kind::Str),
    ("binaryPath", Kind::Str),
    ("serviceCluster", Kind::Str),
    ("tracingServiceName", Kind::OneofEnum(TRACING_SERVICE_NAME)),
    ("drainDuration", Kind::Duration),
    ("parentShutdownDuration", Kind::Duration),
    ("discoveryAddress", Kind::Str),
    ("discoveryRefreshDelay", Kind::Duration),
    ("zipkinAddress", Kind::Str),
    ("statsdUdpAddress", Kind::Str),
    ("envoyMetricsServiceAddress", Kind::Str),
    ("proxyAdminPort", Kind::Int),
    ("availabilityZone", Kind::Str),
    ("controlPlaneAuthPolicy", Kind::Enum(AUTH_POLICY)),
    ("customConfigFile", Kind::Str),
    ("statNameLength", Kind::Int),
    ("concurrency", Kind::Wrapper),
    ("proxyBootstrapTemplatePath", Kind::Str),
    ("interceptionMode", Kind::Enum(INTERCEPTION)),
    ("tracing", Kind::Message),
    ("sds", Kind::Message),
    ("envoyAccessLogService", Kind::Message),
    ("envoyMetricsService", Kind::Message),
    ("proxyMetadata", Kind::Map),
    ("runtimeValues", Kind::Map),
    ("statusPort", Kind::Int),
    ("extraStatTags", Kind::List),
    ("gatewayTopology", Kind::Message),
    ("terminationDrainDuration", Kind::Duration),
    ("meshId", Kind::Str),
    ("readinessProbe", Kind::Message),
    ("proxyStatsMatcher", Kind::Message),
    ("holdApplicationUntilProxyStarts", Kind::Wrapper),
    ("caCertificatesPem", Kind::List),
    ("image", Kind::Message),
    ("privateKeyProvider", Kind::Message),
    ("proxyHeaders", Kind::Message),
    ("fileFlushInterval", Kind::Duration),
    ("fileFlushMinSizeKb", Kind::Int),
    ("statsCompression", Kind::Wrapper),
    ("connectionSettings", Kind::Message),
];

/// Fields cleared when equal to Istio's built-in default ProxyConfig (`mesh.DefaultProxyConfig`), so that
/// `PROXY_CONFIG` carries only what differs.
const DEFAULT_STR: &[(&str, &str)] = &[
    ("configPath", "./etc/istio/proxy"),
    ("binaryPath", "/usr/local/bin/envoy"),
    ("serviceCluster", "istio-proxy"),
    ("discoveryAddress", "istiod.istio-system.svc:15012"),
    ("controlPlaneAuthPolicy", "MUTUAL_TLS"),
];
const DEFAULT_INT: &[(&str, i64)] = &[
    ("proxyAdminPort", 15000),
    ("statNameLength", 189),
    ("statusPort", 15020),
];
const DEFAULT_DURATION: &[(&str, (i64, u32))] = &[
    ("drainDuration", (45, 0)),
    ("terminationDrainDuration", (5, 0)),
];

/// Why the ProxyConfig could not be printed.
#[derive(Debug, thiserror::Error)]
pub enum ProxyConfigError {
    /// A field has a JSON type its proto type cannot take.
    #[error("ProxyConfig field {field}: unexpected value {value}")]
    BadField { field: String, value: String },
    /// The ProxyConfig is not a JSON object.
    #[error("ProxyConfig is not an object")]
    NotAnObject,
}

fn bad(field: &str, value: &Value) -> ProxyConfigError {
    ProxyConfigError::BadField {
        field: field.to_string(),
        value: value.to_string(),
    }
}

/// The `PROXY_CONFIG` text: compact JSON of the ProxyConfig with defaults cleared (no trailing newline).
pub fn proto_to_json(pc: &Value) -> Result<String, ProxyConfigError> {
    let obj = match pc {
        Value::Object(o) => o,
        Value::Null => return Ok("{}".to_string()),
        _ => return Err(ProxyConfigError::NotAnObject),
    };
    let mut out = Map::new();
    for &(name, kind) in FIELDS {
        let Some(v) = obj.field(name) else { continue };
        if let Some(pv) = print_field(name, kind, v)? {
            out.insert(name.to_string(), pv);
        }
    }
    // A field the proto does not have is not written: Istio unmarshals into the proto, dropping unknown
    // fields (`mesh.MergeProxyConfig`: `protomarshal.ApplyYAML` retries with unknown fields allowed).
    Ok(Value::Object(out).to_string())
}

fn print_field(name: &str, kind: Kind, v: &Value) -> Result<Option<Value>, ProxyConfigError> {
    if v.is_null() {
        return Ok(None);
    }
    Ok(match kind {
        Kind::Str => {
            let s = v.as_str().ok_or_else(|| bad(name, v))?;
            let default = DEFAULT_STR.iter().find(|(n, _)| *n == name);
            if s.is_empty() || default.is_some_and(|(_, d)| *d == s) {
                None
            } else {
                Some(Value::from(s))
            }
        }
        Kind::Int => {
            let n = as_i64(v).ok_or_else(|| bad(name, v))?;
            let default = DEFAULT_INT.iter().find(|(n, _)| *n == name);
            if n == 0 || default.is_some_and(|(_, d)| *d == n) {
                None
            } else {
                Some(Value::from(n))
            }
        }
        Kind::Wrapper => match v {
            Value::Bool(_) => Some(v.clone()),
            _ => Some(Value::from(as_i64(v).ok_or_else(|| bad(name, v))?)),
        },
        Kind::Duration => {
            let s = v.as_str().ok_or_else(|| bad(name, v))?;
            let d = parse_duration(s).ok_or_else(|| bad(name, v))?;
            let default = DEFAULT_DURATION.iter().find(|(n, _)| *n == name);
            if default.is_some_and(|(_, dd)| *dd == d) {
                None
            } else {
                Some(Value::from(format_duration(d)))
            }
        }
        Kind::Enum(names) | Kind::OneofEnum(names) => {
            let label = enum_name(names, v).ok_or_else(|| bad(name, v))?;
            let default = DEFAULT_STR.iter().find(|(n, _)| *n == name);
            let is_zero = label == names[0] && !matches!(kind, Kind::OneofEnum(_));
            if is_zero || default.is_some_and(|(_, d)| *d == label) {
                None
            } else {
                Some(Value::from(label))
            }
        }
        Kind::Map => {
            let m = v.as_object().ok_or_else(|| bad(name, v))?;
            if m.is_empty() {
                None
            } else {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let mut sorted = Map::new();
                for k in keys {
                    sorted.insert(k.clone(), m[k.as_str()].clone());
                }
                Some(Value::Object(sorted))
            }
        }
        Kind::List => {
            let l = v.as_array().ok_or_else(|| bad(name, v))?;
            if l.is_empty() {
                None
            } else {
                Some(v.clone())
            }
        }
        Kind::Message => {
            if !v.is_object() {
                return Err(bad(name, v));
            }
            Some(drop_nulls(v))
        }
    })
}

fn enum_name(names: &'static [&'static str], v: &Value) -> Option<&'static str> {
    match v {
        Value::String(s) => names.iter().copied().find(|n| n == s).or(
            // INHERIT (1000) is the one non-dense value of AuthenticationPolicy.
            (s == "INHERIT").then_some("INHERIT"),
        ),
        Value::Number(_) => {
            let n = as_i64(v)?;
            if n == 1000 && names == AUTH_POLICY {
                return Some("INHERIT");
            }
            names.get(usize::try_from(n).ok()?).copied()
        }
        _ => None,
    }
}

/// `v` without its null object members, at every depth.
pub fn drop_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), drop_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(drop_nulls).collect()),
        _ => v.clone(),
    }
}

/// Parses a proto JSON duration (`"23s"`, `"1.5s"`) or a Go duration (`"1m30s"`, `"500ms"`) into
/// (seconds, nanoseconds).
pub(crate) fn parse_duration(s: &str) -> Option<(i64, u32)> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if body.is_empty() {
        return None;
    }
    let mut total_nanos: i128 = 0;
    let mut rest = body;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_end);
        if num.is_empty() {
            return None;
        }
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let scale: i128 = match unit {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" | "µs" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        let (int_part, frac_part) = match num.split_once('.') {
            Some((i, f)) => (i, f),
            None => (num, ""),
        };
        let int: i128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().ok()?
        };
        let mut frac_nanos: i128 = 0;
        let mut div: i128 = 1;
        for c in frac_part.chars().take(18) {
            frac_nanos = frac_nanos * 10 + i128::from(c.to_digit(10)?);
            div *= 10;
        }
        total_nanos =
            total_nanos.checked_add(int.checked_mul(scale)? + frac_nanos * scale / div)?;
        rest = tail;
    }
    if neg {
        total_nanos = -total_nanos;
    }
    let secs = i64::try_from(total_nanos.div_euclid(1_000_000_000)).ok()?;
    let nanos = u32::try_from(total_nanos.rem_euclid(1_000_000_000)).ok()?;
    Some((secs, nanos))
}

/// Proto JSON duration text: whole seconds as `"23s"`, else 3, 6 or 9 fraction digits.
pub(crate) fn format_duration((secs, nanos): (i64, u32)) -> String {
    crate::proto_duration::format_duration_nanos(
        i128::from(secs) * 1_000_000_000 + i128::from(nanos),
    )
}

/// The `PROXY_CONFIG` env value of the proxy container for a ProxyConfig: its compact JSON with defaults
/// cleared, and a trailing newline as Istio prints it. Depends on the ProxyConfig only, so the engine
/// computes it once per configuration instead of once per pod.
pub fn proxy_config_env(proxy_config: &Value) -> Result<String, ProxyConfigError> {
    let mut text = proto_to_json(proxy_config)?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mesh_default() -> Value {
        json!({
            "binaryPath": "/usr/local/bin/envoy",
            "configPath": "./etc/istio/proxy",
            "controlPlaneAuthPolicy": "MUTUAL_TLS",
            "discoveryAddress": "istiod.istio-system.svc:15012",
            "drainDuration": "45s",
            "proxyAdminPort": 15000,
            "serviceCluster": "istio-proxy",
            "statNameLength": 189,
            "statusPort": 15020,
            "terminationDrainDuration": "5s",
        })
    }

    #[test]
    fn defaults_clear_to_empty_object() {
        assert_eq!(proto_to_json(&mesh_default()).unwrap(), "{}");
        assert_eq!(proto_to_json(&Value::Null).unwrap(), "{}");
    }

    #[test]
    fn golden_examples() {
        let mut pc = mesh_default();
        pc["interceptionMode"] = json!("TPROXY");
        assert_eq!(
            proto_to_json(&pc).unwrap(),
            r#"{"interceptionMode":"TPROXY"}"#
        );
        let mut pc = mesh_default();
        pc["drainDuration"] = json!("23s");
        assert_eq!(proto_to_json(&pc).unwrap(), r#"{"drainDuration":"23s"}"#);
        let mut pc = mesh_default();
        pc["tracing"] = json!({});
        assert_eq!(proto_to_json(&pc).unwrap(), r#"{"tracing":{}}"#);
        let mut pc = mesh_default();
        pc["holdApplicationUntilProxyStarts"] = json!(false);
        assert_eq!(
            proto_to_json(&pc).unwrap(),
            r#"{"holdApplicationUntilProxyStarts":false}"#
        );
        // Field order is the proto's, not the input's; map keys sorted; wrapper 0 printed.
        let mut pc = mesh_default();
        pc["proxyMetadata"] = json!({"ISTIO_META_TLS_CLIENT_KEY": "/k.pem", "FOO": "bar"});
        pc["concurrency"] = json!(0);
        pc["discoveryAddress"] = json!("foo:123");
        assert_eq!(
            proto_to_json(&pc).unwrap(),
            r#"{"discoveryAddress":"foo:123","concurrency":0,"proxyMetadata":{"FOO":"bar","ISTIO_META_TLS_CLIENT_KEY":"/k.pem"}}"#
        );
    }

    #[test]
    fn enums_and_zero_values() {
        let pc = json!({"interceptionMode": "REDIRECT", "statusPort": 0, "proxyMetadata": {},
            "controlPlaneAuthPolicy": "NONE", "tracingServiceName": "APP_LABEL_AND_NAMESPACE"});
        assert_eq!(
            proto_to_json(&pc).unwrap(),
            r#"{"tracingServiceName":"APP_LABEL_AND_NAMESPACE"}"#
        );
        let pc = json!({"interceptionMode": 2, "statusPort": 15021});
        assert_eq!(
            proto_to_json(&pc).unwrap(),
            r#"{"interceptionMode":"NONE","statusPort":15021}"#
        );
        assert!(proto_to_json(&json!({"interceptionMode": "BOGUS"})).is_err());
        assert!(proto_to_json(&json!({"statusPort": "x"})).is_err());
    }

    /// Istio unmarshals the ProxyConfig into its proto (`mesh.MergeProxyConfig`, `protomarshal.ApplyYAML`
    /// retrying with unknown fields allowed) and marshals the proto back, so a field the proto does not
    /// have never reaches `PROXY_CONFIG`; the fields after `proxyHeaders` (istio.io/api 1.31) do.
    #[test]
    fn unknown_fields_are_dropped_and_the_newest_fields_kept() {
        let mut pc = mesh_default();
        pc["unknownField"] = json!(1);
        pc["connectionSettings"] = json!({});
        pc["statsCompression"] = json!(false);
        pc["fileFlushMinSizeKb"] = json!(64);
        pc["fileFlushInterval"] = json!("1.5s");
        pc["proxyHeaders"] = json!({});
        assert_eq!(
            proto_to_json(&pc).unwrap(),
            r#"{"proxyHeaders":{},"fileFlushInterval":"1.500s","fileFlushMinSizeKb":64,"statsCompression":false,"connectionSettings":{}}"#
        );
        assert_eq!(
            proto_to_json(&json!({"unknownField": {"a": 1}})).unwrap(),
            "{}"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("45s"), Some((45, 0)));
        assert_eq!(parse_duration("1m30s"), Some((90, 0)));
        assert_eq!(parse_duration("1.5s"), Some((1, 500_000_000)));
        assert_eq!(parse_duration("250ms"), Some((0, 250_000_000)));
        assert_eq!(parse_duration("x"), None);
        assert_eq!(parse_duration("5"), None);
        assert_eq!(format_duration((1, 500_000_000)), "1.500s");
        assert_eq!(format_duration((0, 1_000)), "0.000001s");
        assert_eq!(format_duration((23, 0)), "23s");
        let pc = json!({"drainDuration": "45.000s", "terminationDrainDuration": "1m"});
        assert_eq!(
            proto_to_json(&pc).unwrap(),
            r#"{"terminationDrainDuration":"60s"}"#
        );
    }
}
