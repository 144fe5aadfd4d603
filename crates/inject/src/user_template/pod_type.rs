//! The type check of a user template's partial pod: it must decode as a Pod, as Istio decodes it.
//!
//! Istio's `inject.go` `applyOverlayYAML` strategic-merges the rendered YAML into the pod and unmarshals the
//! result into a `corev1.Pod` with Go's `encoding/json`, so a field of the wrong type (`metadata: [1, 2, 3]`,
//! `containers: ""`, a number where a string goes) fails the injection with `unmarshal patched pod: …`
//! instead of wiping the pod's fields. This module checks the rendered partial pod against the Pod types of
//! k8s-openapi before the merge (the merge itself keeps using the JSON), with Go's leniency:
//!
//! * `null` is accepted everywhere (Go leaves the zero value; in a strategic-merge patch it deletes a key);
//!   absent fields are the zero value (k8s-openapi defaults required fields the same way);
//! * unknown keys, `$patch`/`$retainKeys`/`$setElementOrder/…`/`$deleteFromPrimitiveList/…` directives
//!   among them, are ignored (Go's decoder drops unknown fields);
//! * a whole float is an integer (sigs.k8s.io/yaml turns YAML `8080.0` into JSON `8080`), and
//!   `resource.Quantity` takes numbers (`cpu: 1`) as Go's `Quantity.UnmarshalJSON` does;
//! * `apiVersion` and `kind` are plain strings (Go's `TypeMeta`; k8s-openapi's `Pod` would insist on
//!   `v1`/`Pod`).
//!
//! Go matches JSON keys to struct fields case-insensitively; this check matches them exactly, so a key
//! that differs from the field's name only in case is ignored here (never refused).

use std::fmt;

use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// Where a refused value is and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    /// The field path, e.g. `spec.containers[0].name` (empty for the whole pod).
    pub path: String,
    /// What was expected and what was found, e.g. `expected an object, got [1,2,3]`.
    pub message: String,
}

impl fmt::Display for TypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The Pod as Go's `corev1.Pod` decodes it, with `TypeMeta` as plain strings.
#[derive(Deserialize)]
#[allow(dead_code)]
struct PodShape {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<ObjectMeta>,
    spec: Option<PodSpec>,
    status: Option<PodStatus>,
}

/// Checks that `pod` (a rendered partial pod) decodes as a Pod; the first field of a wrong type is the error.
pub fn check(pod: &Value) -> Result<(), TypeError> {
    match PodShape::deserialize(De {
        v: pod,
        path: &Seg::Root,
    }) {
        Ok(_) => Ok(()),
        Err(e) => Err(TypeError {
            path: e.path.unwrap_or_default(),
            message: e.message,
        }),
    }
}

/// One step of the path to the value being decoded (a linked list on the stack: no allocation per node).
enum Seg<'p, 'v> {
    Root,
    Key(&'p Seg<'p, 'v>, &'v str),
    Index(&'p Seg<'p, 'v>, usize),
}

impl Seg<'_, '_> {
    fn render(&self) -> String {
        let mut parts = Vec::new();
        let mut s = self;
        loop {
            match s {
                Seg::Root => break,
                Seg::Key(p, k) => {
                    parts.push(if is_plain_key(k) {
                        format!(".{k}")
                    } else {
                        format!("[{}]", serde_json::Value::String((*k).to_string()))
                    });
                    s = p;
                }
                Seg::Index(p, i) => {
                    parts.push(format!("[{i}]"));
                    s = p;
                }
            }
        }
        let joined: String = parts.into_iter().rev().collect();
        joined
            .strip_prefix('.')
            .map(str::to_string)
            .unwrap_or(joined)
    }
}

fn is_plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
}

/// A decode error; `path` is set by the innermost value that saw it.
#[derive(Debug)]
struct Error {
    path: Option<String>,
    message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error {
            path: None,
            message: msg.to_string(),
        }
    }
}

impl Error {
    fn at(mut self, path: &Seg<'_, '_>) -> Self {
        if self.path.is_none() {
            self.path = Some(path.render());
        }
        self
    }
}

/// Decodes one JSON value with Go's `encoding/json` leniency, tracking the path.
struct De<'p, 'v> {
    v: &'v Value,
    path: &'p Seg<'p, 'v>,
}

impl<'p, 'v> De<'p, 'v> {
    fn wrong(&self, expected: &str) -> Error {
        Error {
            path: Some(self.path.render()),
            message: format!("expected {expected}, got {}", shown(self.v)),
        }
    }

    fn int<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        let r = match self.v {
            Value::Null => visitor.visit_i64(0),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else {
                    match n.as_f64() {
                        // sigs.k8s.io/yaml writes a whole float as a JSON integer.
                        Some(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => {
                            visitor.visit_i64(f as i64)
                        }
                        _ => return Err(self.wrong("an integer")),
                    }
                }
            }
            _ => return Err(self.wrong("an integer")),
        };
        r.map_err(|e: Error| e.at(self.path))
    }
}

macro_rules! ints {
    ($($m:ident)*) => {$(
        fn $m<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
            self.int(visitor)
        }
    )*};
}

impl<'p, 'v> Deserializer<'v> for De<'p, 'v> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        let path = self.path;
        let r = match self.v {
            // IntOrString and Quantity (the types decoded this way) take null as their zero value.
            Value::Null => visitor.visit_i64(0),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else {
                    let f = n.as_f64().unwrap_or(0.0);
                    if f.fract() == 0.0 && f.abs() < 9.2e18 {
                        visitor.visit_i64(f as i64)
                    } else {
                        visitor.visit_f64(f)
                    }
                }
            }
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(_) => return self.deserialize_seq(visitor),
            Value::Object(_) => return self.deserialize_map(visitor),
        };
        r.map_err(|e: Error| e.at(path))
    }

    fn deserialize_bool<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.v {
            Value::Null => visitor.visit_bool(false),
            Value::Bool(b) => visitor.visit_bool(*b),
            _ => return Err(self.wrong("a boolean")),
        }
        .map_err(|e: Error| e.at(self.path))
    }

    ints!(deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_u8 deserialize_u16
          deserialize_u32 deserialize_u64);

    fn deserialize_f32<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.v {
            Value::Null => visitor.visit_f64(0.0),
            Value::Number(n) => visitor.visit_f64(n.as_f64().unwrap_or(0.0)),
            _ => return Err(self.wrong("a number")),
        }
        .map_err(|e: Error| e.at(self.path))
    }

    fn deserialize_char<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.v {
            Value::Null => visitor.visit_borrowed_str(""),
            Value::String(s) => visitor.visit_borrowed_str(s),
            _ => return Err(self.wrong("a string")),
        }
        .map_err(|e: Error| e.at(self.path))
    }

    fn deserialize_string<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        let path = self.path;
        match self.v {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
        .map_err(|e: Error| e.at(path))
    }

    fn deserialize_unit<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit().map_err(|e: Error| e.at(self.path))
    }

    fn deserialize_unit_struct<V: Visitor<'v>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'v>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let path = self.path;
        visitor
            .visit_newtype_struct(self)
            .map_err(|e: Error| e.at(path))
    }

    fn deserialize_seq<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        let empty: &[Value] = &[];
        let items = match self.v {
            Value::Null => empty,
            Value::Array(a) => a.as_slice(),
            _ => return Err(self.wrong("a list")),
        };
        visitor
            .visit_seq(Seq {
                items: items.iter().enumerate(),
                path: self.path,
            })
            .map_err(|e: Error| e.at(self.path))
    }

    fn deserialize_tuple<V: Visitor<'v>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'v>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        let entries = match self.v {
            Value::Null => None,
            Value::Object(o) => Some(o.iter()),
            _ => return Err(self.wrong("an object")),
        };
        visitor
            .visit_map(Map {
                entries,
                value: None,
                path: self.path,
            })
            .map_err(|e: Error| e.at(self.path))
    }

    fn deserialize_struct<V: Visitor<'v>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'v>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Error> {
        // No field of the Pod types is a Rust enum (IntOrString decodes with deserialize_any).
        Err(self.wrong("a value of a known type"))
    }

    fn deserialize_identifier<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'v>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

struct Seq<'p, 'v> {
    items: std::iter::Enumerate<std::slice::Iter<'v, Value>>,
    path: &'p Seg<'p, 'v>,
}

impl<'p, 'v> SeqAccess<'v> for Seq<'p, 'v> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'v>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.items.next() {
            None => Ok(None),
            Some((i, v)) => {
                let path = Seg::Index(self.path, i);
                seed.deserialize(De { v, path: &path })
                    .map(Some)
                    .map_err(|e: Error| e.at(&path))
            }
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct Map<'p, 'v> {
    entries: Option<serde_json::map::Iter<'v>>,
    value: Option<(&'v str, &'v Value)>,
    path: &'p Seg<'p, 'v>,
}

impl<'p, 'v> MapAccess<'v> for Map<'p, 'v> {
    type Error = Error;

    fn next_key_seed<K: de::DeserializeSeed<'v>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((k, v)) = self.entries.as_mut().and_then(Iterator::next) else {
            return Ok(None);
        };
        self.value = Some((k.as_str(), v));
        let key = de::value::BorrowedStrDeserializer::<'v, Error>::new(k.as_str());
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<T: DeserializeSeed<'v>>(&mut self, seed: T) -> Result<T::Value, Error> {
        let Some((k, v)) = self.value.take() else {
            return Err(de::Error::custom("a map value without its key"));
        };
        let path = Seg::Key(self.path, k);
        seed.deserialize(De { v, path: &path })
            .map_err(|e: Error| e.at(&path))
    }
}

/// A JSON value shown in an error: compact, cut after 200 bytes.
pub(super) fn shown(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 200 {
        let cut = (0..=200)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s.truncate(cut);
        s.push('…');
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(pod: Value) -> String {
        check(&pod).expect_err("should be refused").to_string()
    }

    #[test]
    fn wrong_types_are_refused_with_the_path_and_the_value() {
        assert_eq!(
            refused(json!({"metadata": [1, 2, 3]})),
            "metadata: expected an object, got [1,2,3]"
        );
        assert_eq!(
            refused(json!({"spec": {"containers": ""}})),
            "spec.containers: expected a list, got \"\""
        );
        assert_eq!(
            refused(json!({"spec": {"containers": [{"name": "a"}, {"name": 7}]}})),
            "spec.containers[1].name: expected a string, got 7"
        );
        assert_eq!(
            refused(json!({"metadata": {"labels": {"app.kubernetes.io/name": true}}})),
            "metadata.labels[\"app.kubernetes.io/name\"]: expected a string, got true"
        );
        assert_eq!(
            refused(
                json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": "80"}]}]}})
            ),
            "spec.containers[0].ports[0].containerPort: expected an integer, got \"80\""
        );
        assert_eq!(
            refused(
                json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80.5}]}]}})
            ),
            "spec.containers[0].ports[0].containerPort: expected an integer, got 80.5"
        );
        assert_eq!(
            refused(json!({"spec": {"hostNetwork": "yes"}})),
            "spec.hostNetwork: expected a boolean, got \"yes\""
        );
        assert_eq!(
            refused(
                json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": 8080}]}]}})
            ),
            "spec.containers[0].env[0].value: expected a string, got 8080"
        );
        assert_eq!(
            refused(json!({"kind": 1})),
            "kind: expected a string, got 1"
        );
        assert_eq!(
            refused(json!({"metadata": {"creationTimestamp": "yesterday"}}))
                .split(':')
                .next(),
            Some("metadata.creationTimestamp")
        );
        assert!(refused(json!({"spec": {"containers": [{"name": "a",
            "livenessProbe": {"httpGet": {"port": [1]}}}]}}))
        .starts_with("spec.containers[0].livenessProbe.httpGet.port: "));
    }

    #[test]
    fn what_go_decodes_is_accepted() {
        for pod in [
            json!({}),
            json!({"apiVersion": "v2", "kind": "NotAPod"}),
            // Nulls everywhere: strategic-merge deletions and Go zero values.
            json!({"metadata": {"labels": {"a": null}, "annotations": null, "creationTimestamp": null},
                   "spec": {"containers": [{"name": null, "args": [null], "ports": [{"containerPort": null}]}, null],
                            "securityContext": null}}),
            // Absent required fields (the merge fills them from the pod).
            json!({"spec": {"containers": [{"name": "a", "volumeMounts": [{"mountPath": "/x", "readOnly": true}]}]}}),
            // Strategic-merge directives.
            json!({"metadata": {"labels": {"$patch": "replace", "a": "b"}},
                   "spec": {"$setElementOrder/containers": [{"name": "a"}],
                            "containers": [{"name": "a", "$patch": "delete"},
                                           {"name": "b", "$deleteFromPrimitiveList/args": ["x"]}],
                            "volumes": [{"name": "v", "$retainKeys": ["emptyDir"], "emptyDir": {"sizeLimit": 1}}]}}),
            // Quantities as numbers, whole floats as integers, IntOrString either way.
            json!({"spec": {"containers": [{"name": "a",
                "resources": {"limits": {"cpu": 1, "memory": 1.5}, "requests": {"cpu": "100m"}},
                "ports": [{"containerPort": 8080.0}],
                "readinessProbe": {"httpGet": {"port": 8080, "path": "/"}, "tcpSocket": {"port": "http"}}}],
                "overhead": {"cpu": 2}}}),
            // Unknown fields are dropped, as Go's decoder drops them.
            json!({"spec": {"whatever": [1, {"x": true}], "containers": [{"name": "a", "Name": 3}]}}),
            json!({"metadata": {"creationTimestamp": "2024-01-01T00:00:00Z"}}),
        ] {
            assert_eq!(check(&pod), Ok(()), "{pod}");
        }
    }

    #[test]
    fn an_error_deep_in_a_long_list_names_its_index() {
        // Thousands of containers decode without a per-element path string (only the error renders one).
        let containers: Vec<Value> = (0..5000)
            .map(|i| json!({"name": format!("c{i}"), "image": "x", "ports": [{"containerPort": 80}]}))
            .collect();
        let mut pod = json!({"spec": {"containers": containers}});
        assert_eq!(check(&pod), Ok(()));
        pod["spec"]["containers"][4999]["image"] = json!(1);
        assert_eq!(
            check(&pod).unwrap_err().to_string(),
            "spec.containers[4999].image: expected a string, got 1"
        );
    }
}
