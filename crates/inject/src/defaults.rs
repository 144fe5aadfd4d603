//! Istio's built-in defaults (the chart's `values`, the default MeshConfig and its ProxyConfig) and the
//! deep merge that lays a configured document over them.

use std::sync::OnceLock;

use serde_json::{Map, Value};
use sidecar_core::fields::Fields;

/// Istio's chart defaults for the injector `values` (`defaults/values.json`: the chart rendered with the
/// default profile; hub/tag are the release's).
pub fn builtin_values() -> &'static Value {
    static V: OnceLock<Value> = OnceLock::new();
    V.get_or_init(|| {
        serde_json::from_str(include_str!("../defaults/values.json"))
            .unwrap_or_else(|_| Value::Object(Map::new()))
    })
}

/// Istio's default MeshConfig with the chart's mesh applied (`defaults/mesh.json`).
pub fn builtin_mesh() -> &'static Value {
    static V: OnceLock<Value> = OnceLock::new();
    V.get_or_init(|| {
        serde_json::from_str(include_str!("../defaults/mesh.json"))
            .unwrap_or_else(|_| Value::Object(Map::new()))
    })
}

/// Istio's default ProxyConfig (the `defaultConfig` of the default MeshConfig).
pub fn builtin_proxy_config() -> Value {
    static DEFAULT: OnceLock<Value> = OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            builtin_mesh()
                .field("defaultConfig")
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new()))
        })
        .clone()
}

/// Merges `overlay` onto `base`: maps merge key by key, recursively; a `null` deletes the key; anything
/// else (lists included) replaces. Nulls inside newly added maps are dropped too.
pub fn deep_merge(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match v {
                    Value::Null => {
                        b.remove(k);
                    }
                    Value::Object(_) => match b.field_mut(k) {
                        Some(existing @ Value::Object(_)) => deep_merge(existing, v),
                        _ => {
                            let mut fresh = Value::Object(Map::new());
                            deep_merge(&mut fresh, v);
                            b.insert(k.clone(), fresh);
                        }
                    },
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) if !o.is_null() => *b = o.clone(),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_null_deletes_and_lists_replace() {
        let mut b = json!({"a": {"x": 1, "y": 2}, "l": [1, 2]});
        deep_merge(
            &mut b,
            &json!({"a": {"x": null, "z": {"n": null, "m": 1}}, "l": [3]}),
        );
        assert_eq!(b, json!({"a": {"y": 2, "z": {"m": 1}}, "l": [3]}));
    }

    #[test]
    fn the_builtin_proxy_config_is_the_mesh_default() {
        assert_eq!(
            Some(&builtin_proxy_config()),
            builtin_mesh().field("defaultConfig")
        );
        assert_eq!(builtin_proxy_config()["statusPort"], json!(15020));
    }
}
