//! Semantic equality of Kubernetes objects, by the rules of `../shared/istio-testdata/inject/README.md`
//! ("How to compare"): both sides are normalised, then compared exactly. Written independently of the
//! injector's code, so a bug there cannot hide itself here.

use serde_json::{Map, Value};

/// Normalises a parsed object: drops null / empty-map / empty-list map entries, `creationTimestamp` in
/// `metadata`, `apiVersion` in `fieldRef`; parses strings holding JSON objects or arrays; turns resource
/// quantities into comparable numbers; makes integral floats integers.
pub fn normalize(v: &Value) -> Value {
    norm(v, &[])
}

/// True when `a` and `b` are equal after [`normalize`].
pub fn equal(a: &Value, b: &Value) -> bool {
    normalize(a) == normalize(b)
}

/// A readable description of the first differences between `a` and `b` after normalisation (at most
/// `limit` lines), or an empty string when equal.
pub fn diff(a: &Value, b: &Value, limit: usize) -> String {
    let mut out = Vec::new();
    walk_diff(&normalize(a), &normalize(b), "", &mut out, limit);
    out.join("\n")
}

fn walk_diff(a: &Value, b: &Value, path: &str, out: &mut Vec<String>, limit: usize) {
    if out.len() >= limit || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                match y.get(k) {
                    Some(vb) => walk_diff(va, vb, &format!("{path}/{k}"), out, limit),
                    None => out.push(format!("{path}/{k}: only in got: {}", short(va))),
                }
            }
            for (k, vb) in y {
                if !x.contains_key(k) && out.len() < limit {
                    out.push(format!("{path}/{k}: only in want: {}", short(vb)));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                walk_diff(va, vb, &format!("{path}/{i}"), out, limit);
            }
        }
        _ => out.push(format!("{path}: got {} want {}", short(a), short(b))),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 300 {
        format!(
            "{}…",
            &s[..s.char_indices().nth(300).map_or(s.len(), |(i, _)| i)]
        )
    } else {
        s
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// `path` holds the map keys leading here (list indices are not recorded).
fn norm(v: &Value, path: &[&str]) -> Value {
    match v {
        Value::Object(m) => {
            let parent = path.last().copied();
            let mut out = Map::new();
            for (k, val) in m {
                if parent == Some("metadata") && k == "creationTimestamp" {
                    continue;
                }
                if parent == Some("fieldRef") && k == "apiVersion" {
                    continue;
                }
                let mut p = path.to_vec();
                p.push(k);
                let n = if is_quantity_map(path) {
                    quantity_value(val)
                } else {
                    norm(val, &p)
                };
                if !is_empty(&n) {
                    out.insert(k.clone(), n);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| norm(x, path)).collect()),
        Value::String(s) => {
            let t = s.trim();
            if t.starts_with('{') || t.starts_with('[') {
                if let Ok(parsed) = serde_json::from_str::<Value>(t) {
                    let mut m = Map::new();
                    m.insert("$json".to_string(), norm_json(&parsed, &[]));
                    return Value::Object(m);
                }
            }
            v.clone()
        }
        Value::Number(_) => number(v),
        _ => v.clone(),
    }
}

/// Inside a JSON string only null members are dropped (empty objects and lists carry meaning).
fn norm_json(v: &Value, path: &[&str]) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, val) in m {
                if val.is_null() {
                    continue;
                }
                let mut p = path.to_vec();
                p.push(k);
                let n = if is_quantity_map(path) {
                    quantity_value(val)
                } else {
                    norm_json(val, &p)
                };
                out.insert(k.clone(), n);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| norm_json(x, path)).collect()),
        Value::Number(_) => number(v),
        _ => v.clone(),
    }
}

/// True for the map under `resources.limits` or `resources.requests`, whose values are quantities.
fn is_quantity_map(path: &[&str]) -> bool {
    let n = path.len();
    n >= 2 && path[n - 2] == "resources" && (path[n - 1] == "limits" || path[n - 1] == "requests")
}

fn number(v: &Value) -> Value {
    if let Some(f) = v.as_f64() {
        if v.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 {
            return Value::from(f as i64);
        }
        if let Some(u) = v.as_u64() {
            if let Ok(i) = i64::try_from(u) {
                return Value::from(i);
            }
        }
    }
    v.clone()
}

/// A quantity as `{"$qty": <value in base units, as a decimal string>}`; unparsable values stay as they are.
fn quantity_value(v: &Value) -> Value {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return v.clone(),
    };
    match parse_quantity(&text) {
        Some(q) => {
            let mut m = Map::new();
            m.insert("$qty".to_string(), Value::String(format!("{q:e}")));
            Value::Object(m)
        }
        None => v.clone(),
    }
}

/// Parses a Kubernetes quantity (`2`, `2000m`, `1Gi`, `1.5`, `1e3`) into its value.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0f64.powi(2),
        "Gi" => 1024.0f64.powi(3),
        "Ti" => 1024.0f64.powi(4),
        "Pi" => 1024.0f64.powi(5),
        "Ei" => 1024.0f64.powi(6),
        e if e.starts_with('e') || e.starts_with('E') => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    // Round away binary noise (0.1 * 1e3) so equal quantities print alike.
    let v = n * mult;
    let rounded = (v * 1e9).round() / 1e9;
    Some(rounded)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules() {
        assert!(equal(
            &json!({"metadata": {"creationTimestamp": null, "name": "a"}, "status": {}}),
            &json!({"metadata": {"name": "a"}})
        ));
        assert!(equal(
            &json!({"resources": {"limits": {"cpu": "2000m", "memory": "1024Mi"}}}),
            &json!({"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}})
        ));
        assert!(equal(
            &json!({"a": "{\"x\": 1, \"y\": null}"}),
            &json!({"a": "{ \"x\":1 }"})
        ));
        assert!(!equal(&json!({"a": "{\"t\": {}}"}), &json!({"a": "{}"})));
        assert!(!equal(&json!({"a": "15020"}), &json!({"a": 15020})));
        assert!(!equal(&json!({"a": [1, 2]}), &json!({"a": [2, 1]})));
        assert!(!equal(&json!({"a": ""}), &json!({})));
        assert!(equal(
            &json!({"env": [{"valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "x"}}}]}),
            &json!({"env": [{"valueFrom": {"fieldRef": {"fieldPath": "x"}}}]})
        ));
        assert_eq!(parse_quantity("100m"), Some(0.1));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
    }
}
