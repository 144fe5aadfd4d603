//! Field lookups and equality on JSON objects that scan small objects instead of hashing.
//!
//! With `preserve_order`, serde_json's map is an `IndexMap` with std's SipHash, and every `get`,
//! `get_mut` or `contains_key` on an object of two or more entries hashes the key first (SipHash,
//! costly for a short key; see bench/README.md). An injection looks up a few hundred keys, almost all in small objects
//! (a container has ten-odd fields, an env entry two), and `==` on objects hashes every key of one side.
//! Comparing the key with each entry's (the length first, so most comparisons end there) is cheaper up
//! to [`SCAN`] entries; larger objects still use the hash index.
//!
//! This is the injector's one way to read a JSON object: [`Fields`] for one field (`field`, `field_mut`,
//! `has_field`), [`path`] and [`path_mut`] for a path of fields. The workspace's `clippy.toml` disallows
//! serde_json's `get`, `get_mut`, `contains_key`, `pointer` and `pointer_mut` on `Value` and `Map`, so a new
//! lookup cannot bypass it.

use serde_json::{Map, Value};

/// Objects with at most this many entries are scanned.
const SCAN: usize = 16;

/// Field access that avoids hashing on small objects. Same results as `get`, `get_mut` and
/// `contains_key`; a non-object [`Value`] has no fields.
pub trait Fields {
    fn field(&self, key: &str) -> Option<&Value>;
    fn field_mut(&mut self, key: &str) -> Option<&mut Value>;
    fn has_field(&self, key: &str) -> bool {
        self.field(key).is_some()
    }
}

// The one place that calls serde_json's own lookups, which clippy.toml disallows everywhere else.
#[allow(clippy::disallowed_methods)]
impl Fields for Map<String, Value> {
    fn field(&self, key: &str) -> Option<&Value> {
        if self.len() <= SCAN {
            self.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
        } else {
            self.get(key)
        }
    }

    fn field_mut(&mut self, key: &str) -> Option<&mut Value> {
        if self.len() <= SCAN {
            self.iter_mut()
                .find(|(k, _)| k.as_str() == key)
                .map(|(_, v)| v)
        } else {
            self.get_mut(key)
        }
    }
}

impl Fields for Value {
    fn field(&self, key: &str) -> Option<&Value> {
        self.as_object()?.field(key)
    }

    fn field_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.as_object_mut()?.field_mut(key)
    }
}

/// The value at `keys` below `v` (object fields only): `path(pod, ["metadata", "name"])` is
/// `pod.pointer("/metadata/name")` without the pointer's parsing and its two string copies per token, and
/// a key is written as it is (`"istio.io/rev"`, not `"istio.io~1rev"`). Any sequence of keys will do: a
/// slice, an array, or `"global.proxy".split('.')`.
pub fn path<K: AsRef<str>>(v: &Value, keys: impl IntoIterator<Item = K>) -> Option<&Value> {
    keys.into_iter().try_fold(v, |v, k| v.field(k.as_ref()))
}

/// [`path`], mutable.
pub fn path_mut<K: AsRef<str>>(
    v: &mut Value,
    keys: impl IntoIterator<Item = K>,
) -> Option<&mut Value> {
    keys.into_iter().try_fold(v, |v, k| v.field_mut(k.as_ref()))
}

/// The object at `path` under `v`, created (replacing non-objects) as needed; `None` only if `v` is not an
/// object.
pub fn ensure_map<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    let mut cur = v;
    for p in path {
        let m = cur.as_object_mut()?;
        // Looked up before inserting: the key is copied and hashed only when the object is missing (an
        // insert over a non-object keeps the key's place, as the entry would).
        if !m.field(p).is_some_and(Value::is_object) {
            m.insert(p.to_string(), Value::Object(Map::new()));
        }
        cur = m.field_mut(p)?;
    }
    cur.as_object_mut()
}

/// `a == b` (objects compare regardless of key order), comparing objects entry by entry while their
/// keys come in the same order (the usual case: a value and its copy) and by lookup from the first
/// difference in order on.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return false;
            }
            for (i, ((ka, va), (kb, vb))) in x.iter().zip(y).enumerate() {
                if ka != kb {
                    // The first `i` keys are the same on both sides, so the rest of `x`'s keys can only
                    // be among the rest of `y`'s; with equal lengths, finding each one there with an
                    // equal value means the same key sets.
                    return x
                        .iter()
                        .skip(i)
                        .all(|(k, v)| y.field(k).is_some_and(|w| same(v, w)));
                }
                if !same(va, vb) {
                    return false;
                }
            }
            true
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn lookups_match_the_map_small_and_large() {
        for n in [0, 1, 2, SCAN, SCAN + 1, 40] {
            let mut m = Map::new();
            for i in 0..n {
                m.insert(format!("k{i}"), json!(i));
            }
            let mut v = Value::Object(m.clone());
            for i in 0..n + 2 {
                let k = format!("k{i}");
                assert_eq!(m.field(&k), m.get(&k), "{n} {k}");
                assert_eq!(v.field(&k), m.get(&k), "{n} {k}");
                assert_eq!(m.has_field(&k), m.contains_key(&k));
                if let Some(slot) = v.field_mut(&k) {
                    *slot = json!("changed");
                }
                assert_eq!(v.get(&k).is_some(), i < n);
                if i < n {
                    assert_eq!(v[&k], json!("changed"));
                }
            }
            // Keys that share a prefix or a length are told apart.
            assert_eq!(m.field("k"), None);
            assert_eq!(m.field("k1x"), None);
        }
        assert_eq!(json!([1]).field("0"), None);
        assert_eq!(json!("s").field("s"), None);
    }

    #[test]
    fn path_walks_objects_only() {
        let v = json!({"metadata": {"name": "p", "a/b": {"~": 1}}, "list": [{"x": 1}]});
        assert_eq!(path(&v, ["metadata", "name"]), Some(&json!("p")));
        assert_eq!(path(&v, ["metadata", "a/b", "~"]), Some(&json!(1)));
        assert_eq!(path(&v, ["metadata", "missing"]), None);
        assert_eq!(path(&v, ["list", "0"]), None);
        assert_eq!(path::<&str>(&v, []), Some(&v));
        assert_eq!(path(&v, "metadata.name".split('.')), Some(&json!("p")));
        let mut w = v.clone();
        *path_mut(&mut w, ["metadata", "name"]).unwrap() = json!("q");
        assert_eq!(w["metadata"]["name"], json!("q"));
        assert_eq!(path_mut(&mut w, ["list", "0"]), None);
    }

    #[test]
    fn ensure_map_creates_and_replaces_non_objects() {
        let mut v = json!({"metadata": {"labels": "x", "name": "p"}});
        ensure_map(&mut v, &["metadata", "labels"])
            .unwrap()
            .insert("a".into(), json!("b"));
        assert_eq!(v, json!({"metadata": {"labels": {"a": "b"}, "name": "p"}}));
        ensure_map(&mut v, &["spec", "securityContext"]).unwrap();
        assert_eq!(v["spec"], json!({"securityContext": {}}));
        assert!(ensure_map(&mut json!([1]), &["a"]).is_none());
    }

    #[test]
    fn same_ignores_key_order() {
        let a = json!({"a": 1, "b": {"x": [1, {"p": 1, "q": 2}], "y": null}, "c": "s"});
        let b = json!({"a": 1, "c": "s", "b": {"y": null, "x": [1, {"q": 2, "p": 1}]}});
        assert!(same(&a, &b));
        let c = json!({"a": 1, "c": "s", "b": {"y": null, "x": [1, {"q": 2, "p": 2}]}});
        assert!(!same(&a, &c));
        // Same length, a key swapped for another after the order changed.
        assert!(!same(
            &json!({"a": 1, "b": 2, "c": 3}),
            &json!({"a": 1, "c": 3, "d": 2})
        ));
        assert!(!same(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(!same(&json!([1, 2]), &json!([2, 1])));
        assert!(same(&json!(1.5), &json!(1.5)));
        assert!(!same(&json!(1), &json!(1.0)));
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..4).prop_map(Value::from),
            "[ab]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec(("[a-e]", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// The same object with its keys in reverse order.
    fn reversed(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .rev()
                    .map(|(k, v)| (k.clone(), reversed(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(reversed).collect()),
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn same_is_eq(a in arb_value(), b in arb_value()) {
            prop_assert_eq!(same(&a, &b), a == b);
            prop_assert_eq!(same(&a, &reversed(&b)), a == b);
            prop_assert!(same(&a, &reversed(&a)));
        }
    }
}
