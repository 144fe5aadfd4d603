//! The Namespace objects of `--namespaces` (`kubectl get ns -o yaml`), read once for every user: their
//! labels route the webhook in `explain` (the API server matches a `namespaceSelector` against them),
//! and on OpenShift their annotations give the proxy's uid and gid (`openshift`). `serve --kubeconfig`
//! watches them instead (`cluster_watch`), keeping only OpenShift's two annotations.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::cow_map::CowMap;
use crate::kube_objects::{self, ObjectsError};
use sidecar_core::fields;

/// One Namespace's labels and annotations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Namespace {
    labels: Map<String, Value>,
    annotations: Map<String, Value>,
}

impl Namespace {
    /// A watched Namespace as the webhook reads it: no labels (they only route `explain`), and of its
    /// `annotations` only those `openshift::proxy_ids` reads, so a Namespace costs its name and at most
    /// two short strings.
    pub fn watched(annotations: impl IntoIterator<Item = (String, String)>) -> Namespace {
        Namespace {
            labels: Map::new(),
            annotations: annotations
                .into_iter()
                .filter(|(k, _)| crate::openshift::ID_ANNOTATIONS.contains(&k.as_str()))
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        }
    }
}

/// Namespace labels and annotations by namespace name; cheap to clone (a watch changes one Namespace
/// at a time and shares the rest with the engines of earlier states).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Namespaces {
    by_name: CowMap<String, Arc<Namespace>>,
}

impl Namespaces {
    /// Reads the Namespace objects of a file.
    pub fn load(path: &Path) -> Result<Namespaces, ObjectsError> {
        Self::from_objects(
            kube_objects::read("--namespaces", path)?,
            &path.display().to_string(),
        )
    }

    /// Indexes parsed Namespace objects; `source` names them in errors. Every object must be a
    /// Namespace with a name, and its labels and annotations mappings of strings.
    pub fn from_objects(objects: Vec<Value>, source: &str) -> Result<Namespaces, ObjectsError> {
        let mut by_name = CowMap::default();
        for (i, obj) in objects.iter().enumerate() {
            let err = |field: &str, reason: String| ObjectsError::Invalid {
                path: source.to_string(),
                object: kube_objects::describe(obj, i),
                field: field.to_string(),
                reason,
            };
            if fields::path(obj, ["kind"]).and_then(Value::as_str) != Some("Namespace") {
                let kind = fields::path(obj, ["kind"]).unwrap_or(&Value::Null);
                return Err(err("kind", format!("{kind} is not Namespace")));
            }
            let name = fields::path(obj, ["metadata", "name"])
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| err("metadata.name", "is required".to_string()))?;
            let strings = |key: &str| match fields::path(obj, ["metadata", key]) {
                None | Some(Value::Null) => Ok(Map::new()),
                Some(Value::Object(m)) => match m.iter().find(|(_, v)| !v.is_string()) {
                    Some((k, v)) => Err(err(
                        &format!("metadata.{key}.{k}"),
                        format!("value {v} must be a string"),
                    )),
                    None => Ok(m.clone()),
                },
                Some(other) => Err(err(
                    &format!("metadata.{key}"),
                    format!("must be a mapping of strings, got {other}"),
                )),
            };
            let namespace = Namespace {
                labels: strings("labels")?,
                annotations: strings("annotations")?,
            };
            by_name.insert(name.to_string(), Arc::new(namespace));
        }
        Ok(Namespaces { by_name })
    }

    /// Sets (`Some`) or removes (`None`) Namespace `name`; whether that changed anything.
    pub fn set(&mut self, name: &str, namespace: Option<Namespace>) -> bool {
        match namespace {
            Some(ns) if self.by_name.get(name).is_some_and(|old| **old == ns) => false,
            Some(ns) => {
                self.by_name.insert(name.to_string(), Arc::new(ns));
                true
            }
            None => self.by_name.remove(name).is_some(),
        }
    }

    /// The names of every Namespace held.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.iter().map(|(k, _)| k.as_str())
    }

    /// How many Namespaces there are.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether no Namespaces are held.
    pub fn is_empty(&self) -> bool {
        self.by_name.len() == 0
    }

    /// The labels of namespace `name`, when it is known.
    pub fn labels(&self, name: &str) -> Option<&Map<String, Value>> {
        self.by_name.get(name).map(|n| &n.labels)
    }

    /// The annotations of namespace `name`, when it is known.
    pub fn annotations(&self, name: &str) -> Option<&Map<String, Value>> {
        self.by_name.get(name).map(|n| &n.annotations)
    }

    /// The proxy (uid, gid) on OpenShift for a pod in `namespace`: from its annotations
    /// (`openshift::proxy_ids`), 1337/1337 when the namespace is unknown.
    pub fn proxy_ids(&self, namespace: &str) -> (i64, i64) {
        match self.annotations(namespace) {
            Some(a) => crate::openshift::proxy_ids(a),
            None => (
                crate::openshift::DEFAULT_PROXY_ID,
                crate::openshift::DEFAULT_PROXY_ID,
            ),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_and_annotations_are_read_and_checked() {
        let ns = |meta: Value| json!({"kind": "Namespace", "metadata": meta});
        let n = Namespaces::from_objects(
            vec![ns(
                json!({"name": "apps", "labels": {"a": "1"}, "annotations": {"b": "2"}}),
            )],
            "ns.yaml",
        )
        .unwrap();
        assert_eq!(n.labels("apps"), json!({"a": "1"}).as_object());
        assert_eq!(n.annotations("apps"), json!({"b": "2"}).as_object());
        assert_eq!(n.labels("other"), None);
        for (meta, field) in [
            (
                json!({"name": "x", "labels": {"a": 1}}),
                "metadata.labels.a",
            ),
            (
                json!({"name": "x", "annotations": "s"}),
                "metadata.annotations",
            ),
            (json!({"labels": {}}), "metadata.name"),
        ] {
            let e = Namespaces::from_objects(vec![ns(meta)], "ns.yaml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("field {field}")), "{e}");
        }
        let e = Namespaces::from_objects(vec![json!({"kind": "Pod"})], "ns.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"Pod\" is not Namespace"), "{e}");
    }
}
