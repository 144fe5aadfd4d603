//! Semantic equality of Kubernetes objects, as `shared/istio-testdata/inject/README.md` defines it.

use serde_json::{Map, Value};

/// A quantity in units of 10⁻⁹, exactly (no floating point): `2000m` = `2` = 2·10⁹.
pub fn quantity_nanos(s: &str) -> Option<i128> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, suffix) = body.split_at(end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return None;
    }
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if frac.len() > 18 {
        return None;
    }
    let whole: i128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut frac_s = frac.to_string();
    while frac_s.len() < 9 {
        frac_s.push('0');
    }
    // Up to 9 fractional digits are representable; more must be zeros beyond the nano.
    let (f9, rest) = frac_s.split_at(9);
    if rest.bytes().any(|b| b != b'0') {
        return None;
    }
    let base: i128 = whole.checked_mul(1_000_000_000)? + f9.parse::<i128>().ok()?;
    let pow = |b: i128, e: u32| b.checked_pow(e);
    let v = match suffix {
        "" => base,
        "Ki" => base.checked_mul(1024)?,
        "Mi" => base.checked_mul(pow(1024, 2)?)?,
        "Gi" => base.checked_mul(pow(1024, 3)?)?,
        "Ti" => base.checked_mul(pow(1024, 4)?)?,
        "Pi" => base.checked_mul(pow(1024, 5)?)?,
        "Ei" => base.checked_mul(pow(1024, 6)?)?,
        "n" => base / 1_000_000_000,
        "u" => base / 1_000_000,
        "m" => base / 1_000,
        "k" => base.checked_mul(1_000)?,
        "M" => base.checked_mul(pow(10, 6)?)?,
        "G" => base.checked_mul(pow(10, 9)?)?,
        "T" => base.checked_mul(pow(10, 12)?)?,
        "P" => base.checked_mul(pow(10, 15)?)?,
        "E" => base.checked_mul(pow(10, 18)?)?,
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().ok()?;
            if exp >= 0 {
                base.checked_mul(pow(10, exp as u32)?)?
            } else {
                base / pow(10, (-exp) as u32)?
            }
        }
        _ => return None,
    };
    Some(if neg { -v } else { v })
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Normalises a value for comparison. `parent`/`grandparent` are the keys above it; `in_json` is true
/// inside a JSON-string value (where only nulls are dropped).
fn norm(v: &Value, parent: &str, grandparent: &str, in_json: bool) -> Value {
    let quantity_ctx = (parent == "limits" || parent == "requests") && grandparent == "resources";
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for k in keys {
                let val = &m[k];
                if k == "creationTimestamp" && parent == "metadata" {
                    continue;
                }
                if k == "apiVersion" && parent == "fieldRef" {
                    continue;
                }
                if quantity_ctx {
                    let q = match val {
                        Value::String(s) => quantity_nanos(s),
                        Value::Number(n) => quantity_nanos(&n.to_string()),
                        _ => None,
                    };
                    if let Some(q) = q {
                        out.insert(k.clone(), Value::String(format!("quantity:{q}")));
                        continue;
                    }
                }
                let nv = norm(val, k, parent, in_json);
                let drop = if in_json {
                    nv.is_null()
                } else {
                    is_empty_value(&nv)
                };
                if !drop {
                    out.insert(k.clone(), nv);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| norm(x, parent, grandparent, in_json))
                .collect(),
        ),
        Value::String(s) => {
            let t = s.trim();
            if (t.starts_with('{') && t.ends_with('}')) || (t.starts_with('[') && t.ends_with(']'))
            {
                if let Ok(parsed) = serde_json::from_str::<Value>(t) {
                    let mut m = Map::new();
                    m.insert("$json".to_string(), norm(&parsed, "", "", true));
                    return Value::Object(m);
                }
            }
            v.clone()
        }
        other => other.clone(),
    }
}

/// The normal form of a document.
pub fn normalize(v: &Value) -> Value {
    norm(v, "", "", false)
}

/// The first difference between two normalised values, as `path: left != right`.
pub fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                let p = format!("{path}/{k}");
                match y.get(k) {
                    None => return Some(format!("{p}: only in got: {}", short(va))),
                    Some(vb) => {
                        if let Some(d) = first_difference(va, vb, &p) {
                            return Some(d);
                        }
                    }
                }
            }
            for (k, vb) in y {
                if !x.contains_key(k) {
                    return Some(format!("{path}/{k}: only in want: {}", short(vb)));
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (va, vb)) in x.iter().zip(y.iter()).enumerate() {
                if let Some(d) = first_difference(va, vb, &format!("{path}/{i}")) {
                    return Some(d);
                }
            }
            if x.len() != y.len() {
                let names = |l: &Vec<Value>| {
                    l.iter()
                        .map(|i| {
                            i.get("name")
                                .and_then(Value::as_str)
                                .map(str::to_string)
                                .unwrap_or_else(|| short(i))
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                };
                return Some(format!(
                    "{path}: length {} != {} (got [{}], want [{}])",
                    x.len(),
                    y.len(),
                    names(x),
                    names(y)
                ));
            }
            None
        }
        _ if a == b => None,
        _ => Some(format!("{path}: got {} want {}", short(a), short(b))),
    }
}

fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 300 {
        let mut cut = 300;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

#[test]
fn comparator_rules() {
    use serde_json::json;
    let a = json!({"metadata": {"creationTimestamp": null, "annotations": {"s": "{\"b\": 1, \"a\": {}}"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "2000m", "memory": "1024Mi"}},
        "env": [{"name": "X", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}]}],
        "volumes": [{"name": "v", "emptyDir": {}}]}, "status": {}});
    let b = json!({"metadata": {"annotations": {"s": "{\"a\":{},\"b\":1}"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": 2, "memory": "1Gi"}},
        "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}],
        "volumes": [{"name": "v"}]}});
    assert_eq!(normalize(&a), normalize(&b));
    // Empty objects inside JSON strings matter; strings are not numbers; list order matters.
    assert_ne!(
        normalize(&json!({"p": "{\"tracing\":{}}"})),
        normalize(&json!({"p": "{}"}))
    );
    assert_ne!(
        normalize(&json!({"p": "15020"})),
        normalize(&json!({"p": 15020}))
    );
    assert_ne!(
        normalize(&json!({"l": [1, 2]})),
        normalize(&json!({"l": [2, 1]}))
    );
    assert_ne!(normalize(&json!({"v": ""})), normalize(&json!({})));
    assert_eq!(quantity_nanos("100m"), Some(100_000_000));
    assert_eq!(quantity_nanos("0"), quantity_nanos("0m"));
    assert_eq!(quantity_nanos("1e3"), quantity_nanos("1k"));
}
