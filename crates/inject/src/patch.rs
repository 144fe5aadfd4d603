//! The RFC 6902 JSON Patch from the original request JSON to the result (Istio's `webhook.go`
//! `createPatch`); our own diff, so that tests can check it with an independent implementation.
//!
//! Shape (like Istio's gomodules jsonpatch): objects are diffed key by key (`remove` for keys only in the
//! original, `add` of the whole value for new keys, recursion otherwise); a type change or a different
//! scalar is a `replace`; arrays are compared positionally after skipping equal items at both ends
//! (recursion over the common positions, then `remove` of the surplus from the end down, or `add` of the
//! extra items before the equal tail). Identical documents give `[]`.
//! Paths are RFC 6901 pointers with `~` → `~0` and `/` → `~1` in keys.

use serde::Serialize;
use serde_json::Value;

use sidecar_core::fields::{same, Fields};

/// One operation, borrowing its value from the result (serialised as `op`, `path`, `value`).
#[derive(Debug, Serialize)]
struct Op<'a> {
    op: &'static str,
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a Value>,
}

/// The operations that turn `original` into `result`, in patch order.
fn operations<'a>(original: &Value, result: &'a Value) -> Vec<Op<'a>> {
    let mut ops = Vec::new();
    let mut path = String::new();
    diff(original, result, &mut path, &mut ops);
    ops
}

/// The patch (a JSON array of operations) that turns `original` into `result`, serialised (what the
/// AdmissionReview carries, before base64), with the values written from `result` by reference instead
/// of being copied into a `Value` first. The one patch path: the webhook calls it through `Engine::patch`.
pub fn create_patch_json(original: &Value, result: &Value) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(4096);
    serde_json::to_writer(&mut out, &operations(original, result))?;
    Ok(out)
}

/// Appends the RFC 6901 escaped form of `key` to `path` (with its leading `/`).
fn push_key(path: &mut String, key: &str) {
    path.push('/');
    // Most keys need no escaping: copied whole rather than character by character.
    if !key.bytes().any(|b| b == b'~' || b == b'/') {
        path.push_str(key);
        return;
    }
    for c in key.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

fn op<'a>(kind: &'static str, path: &str, value: Option<&'a Value>) -> Op<'a> {
    Op {
        op: kind,
        path: path.to_string(),
        value,
    }
}

/// Diffs `a` → `b` at `path`, pushing operations. `path` is restored before returning.
fn diff<'a>(a: &Value, b: &'a Value, path: &mut String, ops: &mut Vec<Op<'a>>) {
    match (a, b) {
        (Value::Object(ma), Value::Object(mb)) => {
            let base = path.len();
            for k in ma.keys() {
                if !mb.has_field(k) {
                    push_key(path, k);
                    ops.push(op("remove", path, None));
                    path.truncate(base);
                }
            }
            for (k, vb) in mb {
                push_key(path, k);
                match ma.field(k) {
                    None => ops.push(op("add", path, Some(vb))),
                    Some(va) => diff(va, vb, path, ops),
                }
                path.truncate(base);
            }
        }
        (Value::Array(xa), Value::Array(xb)) => {
            // Equal items at both ends are left alone, so an insertion in front of existing items (the
            // injected init containers before the app's) is an `add`, not a rewrite of every item.
            let prefix = xa
                .iter()
                .zip(xb.iter())
                .take_while(|(a, b)| same(a, b))
                .count();
            let suffix = xa[prefix..]
                .iter()
                .rev()
                .zip(xb[prefix..].iter().rev())
                .take_while(|(a, b)| same(a, b))
                .count();
            let (ma, mb) = (
                &xa[prefix..xa.len() - suffix],
                &xb[prefix..xb.len() - suffix],
            );
            let base = path.len();
            let common = ma.len().min(mb.len());
            for i in 0..common {
                path.push('/');
                path.push_str(&(prefix + i).to_string());
                diff(&ma[i], &mb[i], path, ops);
                path.truncate(base);
            }
            // Surplus original items, removed from the end so earlier indices stay valid.
            for i in (common..ma.len()).rev() {
                path.push('/');
                path.push_str(&(prefix + i).to_string());
                ops.push(op("remove", path, None));
                path.truncate(base);
            }
            // Extra items, inserted in order before the common suffix.
            for (i, vb) in mb.iter().enumerate().skip(common) {
                path.push('/');
                path.push_str(&(prefix + i).to_string());
                ops.push(op("add", path, Some(vb)));
                path.truncate(base);
            }
        }
        _ => {
            if !same(a, b) {
                ops.push(op("replace", path, Some(b)));
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The patch from `a` to `b` makes `b`, and the one back makes `a`.
    fn both_ways(a: &Value, b: &Value) -> Result<(), TestCaseError> {
        prop_assert_eq!(&apply(a, &create_patch(a, b)), b);
        prop_assert_eq!(&apply(b, &create_patch(b, a)), a);
        Ok(())
    }

    fn apply(a: &Value, p: &Value) -> Value {
        let patch: json_patch::Patch = serde_json::from_value(p.clone()).expect("valid patch");
        let mut doc = a.clone();
        json_patch::patch(&mut doc, &patch).expect("patch applies");
        doc
    }

    #[test]
    fn identical_is_empty() {
        let a = json!({"a": [1, {"b": null}], "c": "x"});
        assert_eq!(create_patch(&a, &a.clone()), json!([]));
    }

    #[test]
    fn escapes_keys() {
        let a = json!({"metadata": {"annotations": {}}});
        let b = json!({"metadata": {"annotations": {"sidecar.istio.io/status": "x", "a~b": "y"}}});
        let p = create_patch(&a, &b);
        assert_eq!(
            p,
            json!([
                {"op": "add", "path": "/metadata/annotations/sidecar.istio.io~1status", "value": "x"},
                {"op": "add", "path": "/metadata/annotations/a~0b", "value": "y"}
            ])
        );
        assert_eq!(apply(&a, &p), b);
    }

    /// The patch as a JSON value, read back from the bytes the webhook sends.
    fn create_patch(a: &Value, b: &Value) -> Value {
        serde_json::from_slice(&create_patch_json(a, b).unwrap()).unwrap()
    }

    #[test]
    fn json_bytes() {
        let a = json!({"a": 1});
        assert_eq!(create_patch_json(&a, &a).unwrap(), b"[]");
        let b = json!({"a": 1, "x/y": {"s": "\"q\""}, "n": null});
        assert_eq!(
            String::from_utf8(create_patch_json(&a, &b).unwrap()).unwrap(),
            r#"[{"op":"add","path":"/x~1y","value":{"s":"\"q\""}},{"op":"add","path":"/n","value":null}]"#
        );
        assert_eq!(
            String::from_utf8(create_patch_json(&b, &a).unwrap()).unwrap(),
            r#"[{"op":"remove","path":"/x~1y"},{"op":"remove","path":"/n"}]"#
        );
    }

    #[test]
    fn arrays_positional() {
        let a = json!({"c": [{"name": "hello"}, 1, 2, 3]});
        let b = json!({"c": [{"name": "istio-proxy"}, {"name": "hello"}]});
        let p = create_patch(&a, &b);
        assert_eq!(apply(&a, &p), b);
        let p = create_patch(&b, &a);
        assert_eq!(apply(&b, &p), a);
    }

    #[test]
    fn insertion_in_front_is_adds() {
        let a = json!({"i": [{"name": "init-one"}, {"name": "init-two"}]});
        let b = json!({"i": [{"name": "istio-init"}, {"name": "istio-proxy"}, {"name": "init-one"}, {"name": "init-two"}]});
        let p = create_patch(&a, &b);
        assert_eq!(
            p,
            json!([
                {"op": "add", "path": "/i/0", "value": {"name": "istio-init"}},
                {"op": "add", "path": "/i/1", "value": {"name": "istio-proxy"}}
            ])
        );
        assert_eq!(apply(&a, &p), b);
        let back = create_patch(&b, &a);
        assert_eq!(
            back,
            json!([{"op": "remove", "path": "/i/1"}, {"op": "remove", "path": "/i/0"}])
        );
        assert_eq!(apply(&b, &back), a);
    }

    #[test]
    fn root_type_change_and_nulls() {
        let a = json!([1, 2]);
        let b = json!({"x": null});
        assert_eq!(apply(&a, &create_patch(&a, &b)), b);
        let a = json!({"x": 1});
        let b = json!({"x": null});
        let p = create_patch(&a, &b);
        assert_eq!(p, json!([{"op": "replace", "path": "/x", "value": null}]));
        assert_eq!(apply(&a, &p), b);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("a".to_string()),
            Just("b".to_string()),
            Just("a/b".to_string()),
            Just("~".to_string()),
            Just("~1".to_string()),
            Just("".to_string()),
            Just("0".to_string()),
            "[a-z/~]{0,4}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-5i64..5).prop_map(Value::from),
            prop_oneof![Just(1.5f64), Just(-0.25f64)].prop_map(Value::from),
            "[a-z~/]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Pairs that share structure, so the diff recurses instead of replacing whole values.
    fn arb_pair() -> impl Strategy<Value = (Value, Value)> {
        (arb_json(), arb_json(), arb_json()).prop_map(|(a, b, c)| {
            let a2 = json!({"spec": a.clone(), "k/~": [a.clone(), c.clone()], "same": c});
            let b2 = json!({"spec": b, "k/~": [a], "new~/": 1});
            (a2, b2)
        })
    }

    /// Arrays edited in place: items inserted, removed and changed anywhere, so prefixes/suffixes match.
    fn arb_edited_array() -> impl Strategy<Value = (Value, Value)> {
        (
            prop::collection::vec(arb_json(), 0..8),
            prop::collection::vec((0usize..10, 0u8..3, arb_json()), 0..5),
        )
            .prop_map(|(items, edits)| {
                let mut b = items.clone();
                for (at, kind, v) in edits {
                    let i = if b.is_empty() { 0 } else { at % (b.len() + 1) };
                    match kind {
                        0 => b.insert(i, v),
                        1 if i < b.len() => {
                            b.remove(i);
                        }
                        _ if i < b.len() => b[i] = json!({"changed": [b[i].clone(), v]}),
                        _ => b.push(v),
                    }
                }
                (json!({"list": items}), json!({"list": b}))
            })
    }

    proptest! {
        #[test]
        fn patch_applies_edited_arrays((a, b) in arb_edited_array()) {
            both_ways(&a, &b)?;
        }

        #[test]
        fn patch_applies_arbitrary(a in arb_json(), b in arb_json()) {
            let p = create_patch(&a, &b);
            prop_assert_eq!(apply(&a, &p), b);
        }

        #[test]
        fn patch_applies_related((a, b) in arb_pair()) {
            both_ways(&a, &b)?;
        }
    }
}
