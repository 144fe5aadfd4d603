//! `injector kube-inject`: offline injection of Kubernetes manifests (like `istioctl kube-inject`:
//! Istio's `kubeinject.go` and `inject.go` `IntoResourceFile`), through the same engine as the webhook.
//!
//! Every document of the stream is handled on its own: workload kinds (matched by kind name, as Istio's
//! unversioned scheme does) get their pod template injected and are re-serialised; other kinds, and
//! documents without a kind, are echoed byte for byte. Each document is followed by `---`. The whole output
//! is produced before anything is written, so a failing document leaves no half-written output.

use std::io::Write;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::shared::manifest::{self, pod_template, Document, PodTemplate};
use inject::cluster_state::{ClusterState, ProxyConfigArgs};
use inject::config::{ConfigArgs, Settings};
use inject::engine::{Engine, InjectRequest, Mode};
use sidecar_core::fields::{self, Fields};
use sidecar_core::yaml;

pub use crate::shared::manifest::{
    DocumentError, ManifestError as KubeInjectError, WORKLOAD_KINDS,
};

/// `injector kube-inject` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input manifest file, `-` for stdin (at most 16 MiB).
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

/// The injected stream and the warnings (skipped workloads).
#[derive(Debug, Clone, Default)]
pub struct Output {
    pub text: String,
    pub warnings: Vec<String>,
}

/// Injects every workload of a YAML stream.
pub fn inject_stream(engine: &Engine, input: &str) -> Result<Output, KubeInjectError> {
    let mut out = Output::default();
    for doc in manifest::documents(input) {
        let mut doc = doc?;
        for (at, kind) in doc.workloads() {
            let injected = match doc.object_mut(at) {
                Some(obj) => inject_object(engine, obj, &kind, &mut out.warnings),
                None => Ok(()),
            };
            if let Err(e) = injected {
                return Err(doc.error(at.item, e));
            }
        }
        if let Err(e) = write_document(&mut out.text, &mut doc) {
            return Err(doc.error(None, e));
        }
    }
    Ok(out)
}

/// Writes a document to the output: a workload or a `List` as re-serialised, any other document byte for
/// byte; each followed by `---`.
fn write_document(text: &mut String, doc: &mut Document<'_>) -> Result<(), DocumentError> {
    match &mut doc.value {
        Some(value) => {
            if value.field("kind").and_then(Value::as_str) == Some("List") {
                if let Some(o) = value.as_object_mut() {
                    o.entry("metadata")
                        .or_insert_with(|| Value::Object(Map::new()));
                }
            }
            text.push_str(&yaml::to_string(value)?);
        }
        None => {
            text.push_str(doc.raw);
            if !doc.raw.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    text.push_str("---\n");
    Ok(())
}

fn inject_object(
    engine: &Engine,
    obj: &mut Value,
    kind: &str,
    warnings: &mut Vec<String>,
) -> Result<(), DocumentError> {
    let PodTemplate {
        meta_path,
        spec_path,
        pod,
        obj_name: _,
        obj_namespace: obj_ns,
        what,
    } = pod_template(obj, kind)?;

    if fields::path(&pod, ["spec", "hostNetwork"]).and_then(Value::as_bool) == Some(true) {
        warnings.push(format!(
            "===> Skipping injection because {what} has host networking enabled"
        ));
        add_typed_defaults(obj, kind);
        return Ok(());
    }

    // istioctl's `IntoObject` (inject.go) applies `proxy.istio.io/config` (`mesh.ApplyProxyConfig`)
    // before it asks `injectRequired`: a workload that opts out is still refused when it does not parse.
    engine
        .proxy_config(fields::path(&pod, ["metadata", "annotations"]).and_then(Value::as_object))?;
    let decision = engine.decide(&pod, Mode::KubeInject);
    if !decision.inject {
        warnings.push(format!(
            "===> Skipping injection because {what} has sidecar injection disabled ({})",
            decision.reason
        ));
        add_typed_defaults(obj, kind);
        return Ok(());
    }

    let workload = manifest::workload(obj, kind, &pod, &obj_ns);
    let req = InjectRequest {
        pod: &pod,
        workload: &workload,
        url_env: Default::default(),
        mode: Mode::KubeInject,
    };
    let mut result = engine.inject(&req)?;
    let new_meta = result
        .field_mut("metadata")
        .map(Value::take)
        .unwrap_or(Value::Object(Map::new()));
    let new_spec = result
        .field_mut("spec")
        .map(Value::take)
        .unwrap_or(Value::Object(Map::new()));
    set_path(obj, meta_path, new_meta);
    set_path(obj, spec_path, new_spec);
    add_typed_defaults(obj, kind);
    Ok(())
}

fn set_path(obj: &mut Value, parts: &[&str], value: Value) {
    let mut cur = obj;
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
    if let Some(spec) = o.field_mut("spec").and_then(Value::as_object_mut) {
        if kind == "DeploymentConfig" {
            spec.entry("test").or_insert(Value::Bool(false));
        }
        // `omitempty` workload fields: a typed round trip drops their zero values.
        if spec.field("minReadySeconds").and_then(Value::as_i64) == Some(0) {
            spec.remove("minReadySeconds");
        }
        if spec.field("paused").and_then(Value::as_bool) == Some(false) {
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
    let input = inject::input::read_text_or_stdin(&args.filename)
        .map_err(|e| anyhow::anyhow!("-f {}: {e}", args.filename))?;
    let out =
        inject_stream(&engine, &input).map_err(|e| anyhow::anyhow!("{}: {e}", args.filename))?;
    match &args.output {
        Some(path) => std::fs::write(path, &out.text)
            .map_err(|e| anyhow::anyhow!("-o {}: {e}", path.display()))?,
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
