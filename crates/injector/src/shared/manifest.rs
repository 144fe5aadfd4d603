//! A manifest stream as `kube-inject` and `explain` read it (Istio's `kubeinject.go` `IntoResourceFile`):
//! the documents split as Kubernetes' reader does, each with its workload objects (matched by kind name,
//! as Istio's unversioned scheme does; a `List`'s items included), and the pod template of each checked
//! and copied out, with errors that name the document and the field. The front ends walk the documents
//! themselves ([`documents`]): nothing here calls back into them.

use serde_json::{Map, Value};

use inject::engine::EngineError;
use inject::workload::{self, Workload};
use sidecar_core::fields::{self, Fields};
use sidecar_core::yaml::{self, YamlError};

/// The kinds whose pod template is injected.
pub const WORKLOAD_KINDS: [&str; 9] = [
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "ReplicaSet",
    "ReplicationController",
    "Pod",
    "DeploymentConfig",
];

/// What went wrong in one document.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// Not valid YAML.
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// A field is missing or has the wrong type.
    #[error("field {field}: {reason}")]
    Field { field: String, reason: String },
    /// Injection failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A failure in a manifest stream, naming the document.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A document could not be injected. `index` counts from 0 in the stream; `item` is the index inside
    /// a `List`.
    #[error("document {index}{}{}: {source}", item.map(|i| format!(" item {i}")).unwrap_or_default(), kind_and_name(kind, name))]
    Document {
        index: usize,
        item: Option<usize>,
        kind: String,
        name: String,
        #[source]
        source: Box<DocumentError>,
    },
}

/// ` (Kind "name")` for an error message, without the parts that are unknown (empty).
fn kind_and_name(kind: &str, name: &str) -> String {
    match (kind.is_empty(), name.is_empty()) {
        (true, true) => String::new(),
        (false, true) => format!(" ({kind})"),
        (true, false) => format!(" ({name:?})"),
        (false, false) => format!(" ({kind} {name:?})"),
    }
}

pub(crate) fn field(f: &str, reason: impl Into<String>) -> DocumentError {
    DocumentError::Field {
        field: f.to_string(),
        reason: reason.into(),
    }
}

pub(crate) fn str_at<'a>(v: &'a Value, keys: &[&str]) -> &'a str {
    fields::path(v, keys).and_then(Value::as_str).unwrap_or("")
}

/// One workload object of a stream: where it is, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// The document's index in the stream, from 0.
    pub index: usize,
    /// The index inside a `List`.
    pub item: Option<usize>,
}

/// One document of a manifest stream, parsed, with the workload objects it holds.
#[derive(Debug, Clone)]
pub(crate) struct Document<'a> {
    /// The document's index in the stream, from 0.
    pub index: usize,
    /// The document's text.
    pub raw: &'a str,
    /// The parsed document when it is a workload or a `List`; `None` for any other document.
    pub value: Option<Value>,
    /// The workload objects (kind in [`WORKLOAD_KINDS`]): the document itself, or the items of a
    /// `List`, in order, with their kinds.
    workloads: Vec<(Position, String)>,
}

impl Document<'_> {
    /// The workload objects, in stream order, with their kinds.
    pub fn workloads(&self) -> Vec<(Position, String)> {
        self.workloads.clone()
    }

    /// The workload object at `at` (the document itself, or an item of a `List`).
    pub fn object(&self, at: Position) -> &Value {
        let doc = self.value.as_ref().unwrap_or(&Value::Null);
        match at.item {
            None => doc,
            Some(i) => &doc["items"][i],
        }
    }

    /// The workload object at `at`, to change in place.
    pub fn object_mut(&mut self, at: Position) -> Option<&mut Value> {
        let doc = self.value.as_mut()?;
        match at.item {
            None => Some(doc),
            Some(i) => doc.field_mut("items")?.as_array_mut()?.get_mut(i),
        }
    }

    /// `source` as the failure of this document, or of its `List` item `item`, naming the object as
    /// it is now.
    pub fn error(&self, item: Option<usize>, source: DocumentError) -> ManifestError {
        let object = match item {
            Some(i) => Some(self.object(Position {
                index: self.index,
                item: Some(i),
            })),
            None => self.value.as_ref(),
        };
        error(self.index, item, object, source)
    }
}

/// The failure of document `index` (item `item` of a `List`), naming `object`'s kind and name.
fn error(
    index: usize,
    item: Option<usize>,
    object: Option<&Value>,
    source: DocumentError,
) -> ManifestError {
    let object = object.unwrap_or(&Value::Null);
    ManifestError::Document {
        index,
        item,
        kind: str_at(object, &["kind"]).to_string(),
        name: str_at(object, &["metadata", "name"]).to_string(),
        source: Box::new(source),
    }
}

/// The documents of a YAML stream, split as Kubernetes' reader does and parsed one at a time, so the
/// first failure (a document's, or the caller's on a document before it) is the one reported.
pub(crate) fn documents(input: &str) -> impl Iterator<Item = Result<Document<'_>, ManifestError>> {
    yaml::documents(input)
        .into_iter()
        .enumerate()
        .map(|(index, at)| document(index, at))
}

/// Parses document `index` and finds its workloads.
fn document(index: usize, at: yaml::Document<'_>) -> Result<Document<'_>, ManifestError> {
    let raw = at.text;
    let doc = yaml::parse_at(at).map_err(|e| error(index, None, None, e.into()))?;
    let kind = match &doc {
        Value::Object(o) => o.field("kind").and_then(Value::as_str).unwrap_or(""),
        Value::Null => "",
        _ => {
            let source = field("(document)", "expected a mapping (a Kubernetes object)");
            return Err(error(index, None, None, source));
        }
    };
    let mut workloads = Vec::new();
    if kind == "List" {
        let items = match doc.field("items") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(a)) => a.as_slice(),
            Some(_) => {
                let source = field("items", "expected a list");
                return Err(error(index, None, Some(&doc), source));
            }
        };
        for (i, item) in items.iter().enumerate() {
            let item_kind = item.field("kind").and_then(Value::as_str).unwrap_or("");
            if WORKLOAD_KINDS.contains(&item_kind) {
                let at = Position {
                    index,
                    item: Some(i),
                };
                workloads.push((at, item_kind.to_string()));
            }
        }
    } else if WORKLOAD_KINDS.contains(&kind) {
        workloads.push((Position { index, item: None }, kind.to_string()));
    }
    let parsed = kind == "List" || !workloads.is_empty();
    Ok(Document {
        index,
        raw,
        value: parsed.then_some(doc),
        workloads,
    })
}

/// Where a kind keeps the pod's metadata and spec.
fn template_paths(kind: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match kind {
        "Pod" => (&["metadata"], &["spec"]),
        // The Job template's metadata, not the pod template's: Istio writes labels/annotations there.
        "CronJob" => (
            &["spec", "jobTemplate", "metadata"],
            &["spec", "jobTemplate", "spec", "template", "spec"],
        ),
        _ => (
            &["spec", "template", "metadata"],
            &["spec", "template", "spec"],
        ),
    }
}

/// A workload's pod template, checked and taken out of the object as kube-inject injects it.
#[derive(Debug, Clone)]
pub(crate) struct PodTemplate {
    /// The paths of fields to the template's metadata and spec in the object.
    pub meta_path: &'static [&'static str],
    pub spec_path: &'static [&'static str],
    /// `{"metadata": …, "spec": …}` copied from the template (empty mappings when absent).
    pub pod: Value,
    /// The object's `metadata.name` and `metadata.namespace` (empty when absent).
    pub obj_name: String,
    pub obj_namespace: String,
    /// `Kind "namespace/name"` (the template's name if it has one), for messages.
    pub what: String,
}

/// Checks the pod template of a workload object of `kind` and copies it out; errors name the field.
pub(crate) fn pod_template(obj: &Value, kind: &str) -> Result<PodTemplate, DocumentError> {
    let (meta_path, spec_path) = template_paths(kind);
    let spec_field = spec_path.join(".");
    let meta_field = meta_path.join(".");
    if kind != "Pod" {
        let tmpl_path = &spec_path[..spec_path.len() - 1];
        match fields::path(obj, tmpl_path) {
            Some(Value::Object(_)) => {}
            None | Some(Value::Null) => return Err(field(&tmpl_path.join("."), "is required")),
            Some(_) => return Err(field(&tmpl_path.join("."), "expected a mapping")),
        }
    }
    let spec = match fields::path(obj, spec_path) {
        Some(s @ Value::Object(_)) => s.clone(),
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(_) => return Err(field(&spec_field, "expected a mapping")),
    };
    let meta = match fields::path(obj, meta_path) {
        Some(m @ Value::Object(_)) => m.clone(),
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(_) => return Err(field(&meta_field, "expected a mapping")),
    };
    check_pod_spec(&spec, &spec_field)?;
    check_metadata(&meta, &meta_field)?;

    let obj_name = str_at(obj, &["metadata", "name"]).to_string();
    let obj_namespace = str_at(obj, &["metadata", "namespace"]).to_string();
    let name = Some(str_at(&meta, &["name"]))
        .filter(|n| !n.is_empty())
        .unwrap_or(&obj_name)
        .to_string();
    let full_name = if obj_namespace.is_empty() {
        name.clone()
    } else {
        format!("{obj_namespace}/{name}")
    };
    let what = if kind.is_empty() {
        format!("{full_name:?}")
    } else {
        format!("{kind} {full_name:?}")
    };
    let mut pod = Map::new();
    pod.insert("metadata".to_string(), meta);
    pod.insert("spec".to_string(), spec);
    Ok(PodTemplate {
        meta_path,
        spec_path,
        pod: Value::Object(pod),
        obj_name,
        obj_namespace,
        what,
    })
}

pub(crate) fn check_metadata(meta: &Value, at: &str) -> Result<(), DocumentError> {
    for key in ["labels", "annotations"] {
        match meta.field(key) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                if let Some((k, v)) = m.iter().find(|(_, v)| !v.is_string()) {
                    return Err(field(
                        &format!("{at}.{key}.{k}"),
                        format!("value {v} must be a string"),
                    ));
                }
            }
            Some(_) => {
                return Err(field(
                    &format!("{at}.{key}"),
                    "expected a mapping of strings",
                ))
            }
        }
    }
    Ok(())
}

fn check_pod_spec(spec: &Value, at: &str) -> Result<(), DocumentError> {
    for list in [
        "containers",
        "initContainers",
        "volumes",
        "imagePullSecrets",
    ] {
        match spec.field(list) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, c) in items.iter().enumerate() {
                    if !c.is_object() {
                        return Err(field(&format!("{at}.{list}[{i}]"), "expected a mapping"));
                    }
                    if list != "imagePullSecrets" && !c.field("name").is_some_and(Value::is_string)
                    {
                        return Err(field(
                            &format!("{at}.{list}[{i}].name"),
                            "is required (a string)",
                        ));
                    }
                }
            }
            Some(_) => return Err(field(&format!("{at}.{list}"), "expected a list")),
        }
    }
    if let Some(h) = spec.field("hostNetwork") {
        if !(h.is_boolean() || h.is_null()) {
            return Err(field(
                &format!("{at}.hostNetwork"),
                format!("value {h} must be a boolean"),
            ));
        }
    }
    Ok(())
}

/// The workload a pod template belongs to, as the engine names it: a Pod's from its own metadata
/// (Istio's `GetDeployMetaFromPod`), any other kind's the object itself, in `namespace`.
pub(crate) fn workload(obj: &Value, kind: &str, pod: &Value, namespace: &str) -> Workload {
    if kind == "Pod" {
        workload::deploy_meta_from_pod(pod)
    } else {
        Workload {
            kind: kind.to_string(),
            api_version: str_at(obj, &["apiVersion"]).to_string(),
            name: str_at(obj, &["metadata", "name"]).to_string(),
            namespace: namespace.to_string(),
        }
    }
}
