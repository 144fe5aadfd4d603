//! `injector kube-inject`: offline injection of Kubernetes manifests (like `istioctl kube-inject`:
//! Istio's `kubeinject.go` and `inject.go` `IntoResourceFile`), through the same engine as the webhook.
//!
//! Every document of the stream is handled on its own: workload kinds (matched by kind name, as Istio's
//! unversioned scheme does) get their pod template injected and are re-serialised; other kinds, and
//! documents without a kind, are echoed byte for byte. Each document is followed by `---`. The whole output
//! is produced before anything is written, so a failing document leaves no half-written output.

use std::io::{Read, Write};
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::cluster_state::{ClusterState, ProxyConfigArgs};
use crate::config::{ConfigArgs, Settings};
use crate::engine::{Engine, EngineError, InjectRequest, Mode};
use crate::workload::{self, Workload};
use crate::yaml::{self, YamlError};

/// `injector kube-inject` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input manifest file, `-` for stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filename: String,
    /// Output file (default: stdout).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub cluster: ProxyConfigArgs,
}

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

/// A kube-inject failure, naming the document.
#[derive(Debug, thiserror::Error)]
pub enum KubeInjectError {
    /// A document could not be injected. `index` counts from 0 in the stream; `item` is the index inside
    /// a `List`.
    #[error("document {index}{} ({kind} {name:?}): {source}", item.map(|i| format!(" item {i}")).unwrap_or_default())]
    Document {
        index: usize,
        item: Option<usize>,
        kind: String,
        name: String,
        #[source]
        source: Box<DocumentError>,
    },
}

/// The injected stream and the warnings (skipped workloads).
#[derive(Debug, Clone, Default)]
pub struct Output {
    pub text: String,
    pub warnings: Vec<String>,
}

pub(crate) fn field(f: &str, reason: impl Into<String>) -> DocumentError {
    DocumentError::Field {
        field: f.to_string(),
        reason: reason.into(),
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// One workload object of a stream: where it is, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// The document's index in the stream, from 0.
    pub index: usize,
    /// The index inside a `List`.
    pub item: Option<usize>,
}

/// What a front end does with the documents of a manifest stream ([`visit_stream`]).
pub(crate) trait StreamVisitor {
    /// A workload object (kind in [`WORKLOAD_KINDS`]), alone or an item of a `List`, in stream order.
    fn workload(&mut self, obj: &mut Value, kind: &str, at: Position) -> Result<(), DocumentError>;
    /// The end of a document, after its workloads: `doc` is the parsed document when it is a workload or
    /// a `List`, `None` for any other document (its bytes are `raw`).
    fn document(&mut self, raw: &str, doc: Option<&mut Value>) -> Result<(), DocumentError>;
}

/// Splits a YAML stream into documents as Kubernetes' reader does, parses each, and hands every workload
/// (a `List`'s items included) and then the document itself to `visitor`; the first failure stops the
/// walk and is returned naming the document (and item).
pub(crate) fn visit_stream(
    input: &str,
    visitor: &mut impl StreamVisitor,
) -> Result<(), KubeInjectError> {
    for (index, raw) in yaml::split_documents(input).into_iter().enumerate() {
        let doc_err = |doc: Option<&Value>, item: Option<usize>, source: DocumentError| {
            let doc = doc.unwrap_or(&Value::Null);
            KubeInjectError::Document {
                index,
                item,
                kind: str_at(doc, "/kind").to_string(),
                name: str_at(doc, "/metadata/name").to_string(),
                source: Box::new(source),
            }
        };
        let mut doc = yaml::parse(raw).map_err(|e| doc_err(None, None, e.into()))?;
        let kind = match &doc {
            Value::Object(o) => o
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            Value::Null => String::new(),
            _ => {
                return Err(doc_err(
                    None,
                    None,
                    field("(document)", "expected a mapping (a Kubernetes object)"),
                ));
            }
        };
        if kind == "List" {
            let items_len = match doc.get("items") {
                None | Some(Value::Null) => 0,
                Some(Value::Array(a)) => a.len(),
                Some(_) => {
                    return Err(doc_err(Some(&doc), None, field("items", "expected a list")))
                }
            };
            for i in 0..items_len {
                let item = &mut doc["items"][i];
                let item_kind = item
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                if WORKLOAD_KINDS.contains(&item_kind.as_str()) {
                    let at = Position {
                        index,
                        item: Some(i),
                    };
                    if let Err(e) = visitor.workload(item, &item_kind, at) {
                        let snapshot = doc["items"][i].clone();
                        return Err(doc_err(Some(&snapshot), Some(i), e));
                    }
                }
            }
            if let Err(e) = visitor.document(raw, Some(&mut doc)) {
                return Err(doc_err(Some(&doc), None, e));
            }
        } else if WORKLOAD_KINDS.contains(&kind.as_str()) {
            let at = Position { index, item: None };
            if let Err(e) = visitor.workload(&mut doc, &kind, at) {
                return Err(doc_err(Some(&doc), None, e));
            }
            if let Err(e) = visitor.document(raw, Some(&mut doc)) {
                return Err(doc_err(Some(&doc), None, e));
            }
        } else if let Err(e) = visitor.document(raw, None) {
            return Err(doc_err(None, None, e));
        }
    }
    Ok(())
}

/// kube-inject's visitor: injects each workload and writes every document to the output.
struct Injector<'a> {
    engine: &'a Engine,
    out: Output,
}

impl StreamVisitor for Injector<'_> {
    fn workload(
        &mut self,
        obj: &mut Value,
        kind: &str,
        _at: Position,
    ) -> Result<(), DocumentError> {
        inject_object(self.engine, obj, kind, &mut self.out.warnings)
    }

    fn document(&mut self, raw: &str, doc: Option<&mut Value>) -> Result<(), DocumentError> {
        let text = &mut self.out.text;
        match doc {
            Some(doc) => {
                if doc.get("kind").and_then(Value::as_str) == Some("List") {
                    if let Some(o) = doc.as_object_mut() {
                        o.entry("metadata")
                            .or_insert_with(|| Value::Object(Map::new()));
                    }
                }
                text.push_str(&yaml::to_string(doc)?);
            }
            None => {
                text.push_str(raw);
                if !raw.ends_with('\n') {
                    text.push('\n');
                }
            }
        }
        text.push_str("---\n");
        Ok(())
    }
}

/// Injects every workload of a YAML stream.
pub fn inject_stream(engine: &Engine, input: &str) -> Result<Output, KubeInjectError> {
    let mut injector = Injector {
        engine,
        out: Output::default(),
    };
    visit_stream(input, &mut injector)?;
    Ok(injector.out)
}

/// Where a kind keeps the pod's metadata and spec.
fn template_pointers(kind: &str) -> (&'static str, &'static str) {
    match kind {
        "Pod" => ("/metadata", "/spec"),
        // The Job template's metadata, not the pod template's: Istio writes labels/annotations there.
        "CronJob" => (
            "/spec/jobTemplate/metadata",
            "/spec/jobTemplate/spec/template/spec",
        ),
        _ => ("/spec/template/metadata", "/spec/template/spec"),
    }
}

/// A workload's pod template, checked and taken out of the object as kube-inject injects it.
#[derive(Debug, Clone)]
pub(crate) struct PodTemplate {
    /// JSON pointers of the template's metadata and spec in the object.
    pub meta_ptr: &'static str,
    pub spec_ptr: &'static str,
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
    let (meta_ptr, spec_ptr) = template_pointers(kind);
    let spec_field = spec_ptr.trim_start_matches('/').replace('/', ".");
    let meta_field = meta_ptr.trim_start_matches('/').replace('/', ".");
    if kind != "Pod" {
        let tmpl_ptr = spec_ptr.trim_end_matches("/spec");
        match obj.pointer(tmpl_ptr) {
            Some(Value::Object(_)) => {}
            None | Some(Value::Null) => {
                return Err(field(
                    &tmpl_ptr.trim_start_matches('/').replace('/', "."),
                    "is required",
                ))
            }
            Some(_) => {
                return Err(field(
                    &tmpl_ptr.trim_start_matches('/').replace('/', "."),
                    "expected a mapping",
                ))
            }
        }
    }
    let spec = match obj.pointer(spec_ptr) {
        Some(s @ Value::Object(_)) => s.clone(),
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(_) => return Err(field(&spec_field, "expected a mapping")),
    };
    let meta = match obj.pointer(meta_ptr) {
        Some(m @ Value::Object(_)) => m.clone(),
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(_) => return Err(field(&meta_field, "expected a mapping")),
    };
    check_pod_spec(&spec, &spec_field)?;
    check_metadata(&meta, &meta_field)?;

    let obj_name = str_at(obj, "/metadata/name").to_string();
    let obj_namespace = str_at(obj, "/metadata/namespace").to_string();
    let name = Some(str_at(&meta, "/name"))
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
        meta_ptr,
        spec_ptr,
        pod: Value::Object(pod),
        obj_name,
        obj_namespace,
        what,
    })
}

fn inject_object(
    engine: &Engine,
    obj: &mut Value,
    kind: &str,
    warnings: &mut Vec<String>,
) -> Result<(), DocumentError> {
    let PodTemplate {
        meta_ptr,
        spec_ptr,
        pod,
        obj_name,
        obj_namespace: obj_ns,
        what,
    } = pod_template(obj, kind)?;

    if pod.pointer("/spec/hostNetwork").and_then(Value::as_bool) == Some(true) {
        warnings.push(format!(
            "===> Skipping injection because {what} has host networking enabled"
        ));
        add_typed_defaults(obj, kind);
        return Ok(());
    }

    let decision = engine.decide(&pod, Mode::KubeInject);
    if !decision.inject {
        warnings.push(format!(
            "===> Skipping injection because {what} has sidecar injection disabled ({})",
            decision.reason
        ));
        add_typed_defaults(obj, kind);
        return Ok(());
    }

    let workload = if kind == "Pod" {
        workload::deploy_meta_from_pod(&pod)
    } else {
        Workload {
            kind: kind.to_string(),
            api_version: str_at(obj, "/apiVersion").to_string(),
            name: obj_name.clone(),
            namespace: obj_ns.clone(),
        }
    };
    let req = InjectRequest {
        pod: &pod,
        workload: &workload,
        url_env: Default::default(),
        mode: Mode::KubeInject,
    };
    let mut result = engine.inject(&req)?;
    let new_meta = result
        .get_mut("metadata")
        .map(Value::take)
        .unwrap_or(Value::Object(Map::new()));
    let new_spec = result
        .get_mut("spec")
        .map(Value::take)
        .unwrap_or(Value::Object(Map::new()));
    set_pointer(obj, meta_ptr, new_meta);
    set_pointer(obj, spec_ptr, new_spec);
    add_typed_defaults(obj, kind);
    Ok(())
}

pub(crate) fn check_metadata(meta: &Value, at: &str) -> Result<(), DocumentError> {
    for key in ["labels", "annotations"] {
        match meta.get(key) {
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
        match spec.get(list) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, c) in items.iter().enumerate() {
                    if !c.is_object() {
                        return Err(field(&format!("{at}.{list}[{i}]"), "expected a mapping"));
                    }
                    if list != "imagePullSecrets" && !c.get("name").is_some_and(Value::is_string) {
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
    if let Some(h) = spec.get("hostNetwork") {
        if !(h.is_boolean() || h.is_null()) {
            return Err(field(
                &format!("{at}.hostNetwork"),
                format!("value {h} must be a boolean"),
            ));
        }
    }
    Ok(())
}

fn set_pointer(obj: &mut Value, ptr: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = ptr.trim_start_matches('/').split('/').collect();
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == parts.len() {
            map.insert(p.to_string(), value);
            return;
        }
        cur = map
            .entry(p.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Fields Kubernetes' typed objects always serialise (non-`omitempty` zero values), which Istio's output
/// therefore carries and `kubectl` reads back as the same defaults.
fn add_typed_defaults(obj: &mut Value, kind: &str) {
    let status_zeros: &[&str] = match kind {
        "ReplicaSet" | "ReplicationController" => &["replicas"],
        "StatefulSet" => &["availableReplicas", "replicas"],
        "DaemonSet" => &[
            "currentNumberScheduled",
            "desiredNumberScheduled",
            "numberMisscheduled",
            "numberReady",
        ],
        "DeploymentConfig" => &[
            "availableReplicas",
            "latestVersion",
            "observedGeneration",
            "replicas",
            "unavailableReplicas",
            "updatedReplicas",
        ],
        _ => &[],
    };
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    if !status_zeros.is_empty() {
        let status = o
            .entry("status")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(s) = status.as_object_mut() {
            for k in status_zeros {
                s.entry(k.to_string()).or_insert(Value::from(0));
            }
        }
    }
    if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
        if kind == "DeploymentConfig" {
            spec.entry("test").or_insert(Value::Bool(false));
        }
        // `omitempty` workload fields: a typed round trip drops their zero values.
        if spec.get("minReadySeconds").and_then(Value::as_i64) == Some(0) {
            spec.remove("minReadySeconds");
        }
        if spec.get("paused").and_then(Value::as_bool) == Some(false) {
            spec.remove("paused");
        }
    }
}

/// Runs `injector kube-inject`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let settings = Settings::load(&args.config)?;
    for w in &settings.warnings {
        eprintln!("warning: {w}");
    }
    let cluster = ClusterState::load(&args.cluster, None)?;
    let engine = Engine::new(settings).with_cluster(cluster);
    let input = if args.filename == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(&args.filename)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.filename))?
    };
    let out =
        inject_stream(&engine, &input).map_err(|e| anyhow::anyhow!("{}: {e}", args.filename))?;
    match &args.output {
        Some(path) => std::fs::write(path, &out.text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        None => {
            let stdout = std::io::stdout();
            let mut lock = stdout.lock();
            lock.write_all(out.text.as_bytes())?;
            lock.flush()?;
        }
    }
    if !out.warnings.is_empty() {
        eprintln!();
        for w in &out.warnings {
            eprintln!("{w}");
        }
    }
    Ok(())
}
