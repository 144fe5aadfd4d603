//! Semantic equality of Kubernetes objects, the comparison rule of `testdata/istio/inject/README.md`
//! ("How results are compared"): both sides are normalised, then compared exactly.
//!
//! The rule is read strictly: resource quantities are compared as exact integers of nano-units (not
//! floating point), numbers are not loosened (`1.0` is not `1`), and inside a JSON string only null members
//! are dropped (nothing else is ignored there, and nested strings stay text).

use serde_json::{Map, Value};

/// The normal form of a document: null, `{}` and `[]` map entries dropped, `creationTimestamp` in
/// `metadata` and `apiVersion` in `fieldRef` dropped, strings holding JSON replaced by their parsed value,
/// quantities under `resources.limits`/`resources.requests` replaced by their exact value.
pub fn normalize(v: &Value) -> Value {
    norm(v, &[], false)
}

/// True when `a` and `b` are equal after [`normalize`].
pub fn equal(a: &Value, b: &Value) -> bool {
    normalize(a) == normalize(b)
}

/// The first differences between `a` (got) and `b` (want) after [`normalize`], at most `limit` lines, as
/// `path: …`; empty when equal.
pub fn diff(a: &Value, b: &Value, limit: usize) -> String {
    let mut out = Vec::new();
    walk_diff(&normalize(a), &normalize(b), "", &mut out, limit);
    out.join("\n")
}

/// Compares two lists of documents (two parsed streams) by [`equal`], document i with document i.
pub fn compare_documents(got: &[Value], want: &[Value]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} documents, want {}", got.len(), want.len()));
    }
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let d = diff(a, b, 1);
        if !d.is_empty() {
            return Err(format!("doc {i}: {d}"));
        }
    }
    Ok(())
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
                    None if out.len() < limit => {
                        out.push(format!("{path}/{k}: only in got: {}", short(va)));
                    }
                    None => {}
                }
            }
            for (k, vb) in y {
                if !x.contains_key(k) && out.len() < limit {
                    out.push(format!("{path}/{k}: only in want: {}", short(vb)));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                walk_diff(va, vb, &format!("{path}/{i}"), out, limit);
            }
            if x.len() != y.len() && out.len() < limit {
                out.push(format!(
                    "{path}: length {} != {} (got [{}], want [{}])",
                    x.len(),
                    y.len(),
                    item_names(x),
                    item_names(y)
                ));
            }
        }
        _ => out.push(format!("{path}: got {} want {}", short(a), short(b))),
    }
}

/// The `name`s of a list's items (or the items themselves), to show which one is missing.
fn item_names(l: &[Value]) -> String {
    l.iter()
        .map(|i| {
            i.get("name")
                .and_then(Value::as_str)
                .map_or_else(|| short(i), str::to_string)
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s,
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

/// Sorted keys, so that diffs list differences in a stable order.
fn sorted(m: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<_> = m.iter().collect();
    entries.sort_by(|x, y| x.0.cmp(y.0));
    entries
}

/// `path` holds the map keys leading here (list indices are not recorded); `in_json` is true inside a
/// JSON string, where only null members are dropped (empty objects and lists carry meaning there) and
/// nothing else is ignored or parsed.
fn norm(v: &Value, path: &[&str], in_json: bool) -> Value {
    match v {
        Value::Object(m) => {
            let parent = path.last().copied();
            let mut out = Map::new();
            for (k, val) in sorted(m) {
                let ignored = (parent == Some("metadata") && k == "creationTimestamp")
                    || (parent == Some("fieldRef") && k == "apiVersion");
                if ignored && !in_json {
                    continue;
                }
                let n = match quantity_of(path, val) {
                    Some(q) => q,
                    None => {
                        let mut p = path.to_vec();
                        p.push(k);
                        norm(val, &p, in_json)
                    }
                };
                let dropped = if in_json { n.is_null() } else { is_empty(&n) };
                if !dropped {
                    out.insert(k.clone(), n);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| norm(x, path, in_json)).collect()),
        Value::String(s) if !in_json => match json_in(s) {
            Some(parsed) => json_marker(norm(&parsed, &[], true)),
            None => v.clone(),
        },
        _ => v.clone(),
    }
}

/// The parsed value of a string whose trimmed text is a JSON object or array.
fn json_in(s: &str) -> Option<Value> {
    let t = s.trim();
    let bracketed =
        (t.starts_with('{') && t.ends_with('}')) || (t.starts_with('[') && t.ends_with(']'));
    bracketed.then(|| serde_json::from_str(t).ok()).flatten()
}

fn json_marker(v: Value) -> Value {
    let mut m = Map::new();
    m.insert("$json".to_string(), v);
    Value::Object(m)
}

/// A map value under `resources.limits` or `resources.requests` as `{"$quantity": nano-units}`; `None`
/// elsewhere or when it is no quantity.
fn quantity_of(path: &[&str], v: &Value) -> Option<Value> {
    let n = path.len();
    let under = n >= 2
        && path[n - 2] == "resources"
        && (path[n - 1] == "limits" || path[n - 1] == "requests");
    if !under {
        return None;
    }
    let nanos = match v {
        Value::String(s) => quantity_nanos(s),
        Value::Number(n) => quantity_nanos(&n.to_string()),
        _ => None,
    }?;
    let mut m = Map::new();
    m.insert("$quantity".to_string(), Value::String(nanos.to_string()));
    Some(Value::Object(m))
}

/// A Kubernetes quantity in units of 10⁻⁹, exactly (no floating point): `2000m` = `2` = 2·10⁹.
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
    let frac = format!("{frac:0<9}");
    // Up to 9 fractional digits are representable; more must be zeros beyond the nano.
    let (f9, rest) = frac.split_at(9);
    if rest.bytes().any(|b| b != b'0') {
        return None;
    }
    let base: i128 = whole.checked_mul(1_000_000_000)? + f9.parse::<i128>().ok()?;
    let pow = |b: i128, e: u32| b.checked_pow(e);
    // The n-th binary suffix multiplies by 1024^n, the n-th decimal one by 1000^n.
    let binary = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let decimal = ["k", "M", "G", "T", "P", "E"];
    let nth = |suffixes: &[&str]| {
        suffixes
            .iter()
            .zip(1u32..)
            .find(|(s, _)| **s == suffix)
            .map(|(_, n)| n)
    };
    let v = if let Some(n) = nth(&binary) {
        base.checked_mul(pow(1024, n)?)?
    } else if let Some(n) = nth(&decimal) {
        base.checked_mul(pow(1000, n)?)?
    } else {
        match suffix {
            "" => base,
            "n" => base / 1_000_000_000,
            "u" => base / 1_000_000,
            "m" => base / 1_000,
            e if e.starts_with(['e', 'E']) => {
                let exp: i32 = e[1..].parse().ok()?;
                if exp >= 0 {
                    base.checked_mul(pow(10, exp.unsigned_abs())?)?
                } else {
                    base / pow(10, exp.unsigned_abs())?
                }
            }
            _ => return None,
        }
    };
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_does_not_count() {
        let a = json!({"metadata": {"creationTimestamp": null, "annotations": {"s": "{\"b\": 1, \"a\": {}}"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "2000m", "memory": "1024Mi"}},
            "env": [{"name": "X", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}]}],
            "volumes": [{"name": "v", "emptyDir": {}}]}, "status": {}});
        let b = json!({"metadata": {"annotations": {"s": "{\"a\":{},\"b\":1}"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": 2, "memory": "1Gi"}},
            "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}],
            "volumes": [{"name": "v"}]}});
        assert!(equal(&a, &b), "{}", diff(&a, &b, 5));
        assert!(equal(
            &json!({"a": "{\"x\": 1, \"y\": null}"}),
            &json!({"a": "{ \"x\":1 }"})
        ));
        assert!(equal(
            &json!({"resources": {"requests": {"cpu": "0"}}}),
            &json!({"resources": {"requests": {"cpu": 0}}})
        ));
    }

    #[test]
    fn what_counts() {
        // Empty objects inside JSON strings matter; strings are not numbers; list order matters.
        assert!(!equal(
            &json!({"p": "{\"tracing\":{}}"}),
            &json!({"p": "{}"})
        ));
        assert!(!equal(&json!({"p": "15020"}), &json!({"p": 15020})));
        assert!(!equal(&json!({"l": [1, 2]}), &json!({"l": [2, 1]})));
        assert!(!equal(&json!({"v": ""}), &json!({})));
        assert!(!equal(&json!({"n": 1.0}), &json!({"n": 1})));
        // Inside JSON strings nothing but nulls is dropped.
        assert!(!equal(
            &json!({"s": "{\"metadata\": {\"creationTimestamp\": \"x\"}}"}),
            &json!({"s": "{\"metadata\": {}}"})
        ));
        // Quantities are exact: a nano-unit apart is a difference.
        assert!(!equal(
            &json!({"resources": {"limits": {"cpu": "1.000000001"}}}),
            &json!({"resources": {"limits": {"cpu": "1"}}})
        ));
    }

    #[test]
    fn quantities_by_exact_value() {
        assert_eq!(quantity_nanos("100m"), Some(100_000_000));
        assert_eq!(quantity_nanos("0"), quantity_nanos("0m"));
        assert_eq!(quantity_nanos("1e3"), quantity_nanos("1k"));
        assert_eq!(quantity_nanos("1Gi"), quantity_nanos("1024Mi"));
        assert_eq!(quantity_nanos("1.5"), Some(1_500_000_000));
        assert_eq!(quantity_nanos("x"), None);
    }

    #[test]
    fn diffs_name_the_path_and_the_missing_items() {
        let got = json!({"spec": {"containers": [{"name": "a"}]}});
        let want = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(
            diff(&got, &want, 5),
            "/spec/containers: length 1 != 2 (got [a], want [a,b])"
        );
        assert_eq!(diff(&got, &got, 5), "");
        let one = std::slice::from_ref(&got);
        assert!(compare_documents(one, &[want]).is_err());
        assert!(compare_documents(one, &[]).is_err());
        assert!(compare_documents(one, one).is_ok());
    }
}
