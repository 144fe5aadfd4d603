//! The public Istio injection cases (`../shared/istio-testdata/inject/cases.json`) prepared for webhook
//! mode as the corpus README describes ("Running a case", webhook): merged configuration files, input and
//! golden documents turned into Pods, AdmissionReviews around them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Map, Value};

/// The corpus directory.
/// `shared/` sits beside the repository (CI) or, for a worktree under `wt/`, one level higher.
pub fn corpus_dir() -> PathBuf {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    ["../../shared", "../../../shared"]
        .iter()
        .map(|p| base.join(p).join("istio-testdata/inject"))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| base.join("../../shared/istio-testdata/inject"))
}

/// One entry of `cases.json`.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub input: String,
    pub golden: Option<String>,
    pub values: Value,
    pub mesh: Value,
    pub injector_config: Value,
    pub env: BTreeMap<String, String>,
    pub native_sidecars: String,
    pub modes: Vec<String>,
    pub expected_error: Option<String>,
}

impl Case {
    /// Key of the server configuration this case needs (cases with equal keys share a server).
    pub fn config_key(&self) -> String {
        json!([
            self.values,
            self.mesh,
            self.injector_config,
            self.env,
            self.native_sidecars
        ])
        .to_string()
    }
}

/// Loads every case.
pub fn load_cases() -> anyhow::Result<Vec<Case>> {
    let path = corpus_dir().join("cases.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let raw: Vec<Value> = serde_json::from_str(&text)?;
    raw.into_iter()
        .map(|c| {
            let s = |k: &str| c.get(k).and_then(Value::as_str).map(str::to_string);
            Ok(Case {
                name: s("name").ok_or_else(|| anyhow!("case without name"))?,
                input: s("input").ok_or_else(|| anyhow!("case without input"))?,
                golden: s("golden"),
                values: c.get("values").cloned().unwrap_or(Value::Null),
                mesh: c.get("mesh").cloned().unwrap_or(Value::Null),
                injector_config: c.get("injector_config").cloned().unwrap_or(Value::Null),
                env: c
                    .get("env")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                            .collect()
                    })
                    .unwrap_or_default(),
                native_sidecars: s("native_sidecars").unwrap_or_else(|| "true".to_string()),
                modes: c
                    .get("modes")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
                expected_error: s("expected_error"),
            })
        })
        .collect()
}

/// Merges `over` into `base`: maps key by key, recursively; `null` deletes; anything else replaces.
pub fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() {
                    b.remove(k);
                } else if let Some(existing) = b.get_mut(k) {
                    if existing.is_object() && v.is_object() {
                        merge(existing, v);
                    } else {
                        *existing = v.clone();
                    }
                } else {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
        (b, o) if !o.is_null() => *b = o.clone(),
        _ => {}
    }
}

/// Parses a YAML document into JSON.
pub fn yaml(text: &str) -> anyhow::Result<Value> {
    serde_saphyr::from_str::<Value>(text).map_err(|e| anyhow!("YAML: {e}"))
}

/// The merged configuration files of a case, written to `dir`: (values, mesh, injector config).
pub fn write_config(case: &Case, dir: &Path) -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    write_config_with(dir, &case.values, &case.mesh, &case.injector_config)
}

/// The base configuration files with `values`, `mesh` and `config` overrides merged in, written to `dir`:
/// (values, mesh, injector config).
pub fn write_config_with(
    dir: &Path,
    values_over: &Value,
    mesh_over: &Value,
    config_over: &Value,
) -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    let corpus = corpus_dir();
    let mut values: Value =
        serde_json::from_str(&std::fs::read_to_string(corpus.join("base-values.json"))?)?;
    merge(&mut values, values_over);
    let mut mesh = yaml(&std::fs::read_to_string(corpus.join("base-mesh.yaml"))?)?;
    merge(&mut mesh, mesh_over);
    let mut config = yaml(&std::fs::read_to_string(
        corpus.join("base-injector-config.yaml"),
    )?)?;
    merge(&mut config, config_over);
    std::fs::create_dir_all(dir)?;
    let v = dir.join("values.json");
    let m = dir.join("mesh.yaml");
    let c = dir.join("config.yaml");
    // JSON is YAML: the mesh and config files are written as JSON so no YAML emitter is involved.
    std::fs::write(&v, serde_json::to_vec_pretty(&values)?)?;
    std::fs::write(&m, serde_json::to_vec_pretty(&mesh)?)?;
    std::fs::write(&c, serde_json::to_vec_pretty(&config)?)?;
    Ok((v, m, c))
}

const INJECTABLE: &[&str] = &[
    "Deployment",
    "DeploymentConfig",
    "DaemonSet",
    "StatefulSet",
    "Job",
    "ReplicaSet",
    "ReplicationController",
    "CronJob",
    "Pod",
];

/// Splits a stream on `"\n---"`, parses each part, keeps injectable kinds, expands `List`s.
pub fn injectable_documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for part in text.split("\n---") {
        // The separator line may carry text after `---` (rare); drop the rest of that line.
        let part = match part.split_once('\n') {
            Some((first, rest)) if first.trim().is_empty() || first.starts_with(' ') => rest,
            _ => part,
        };
        if part.trim().is_empty() {
            continue;
        }
        let doc = yaml(part)?;
        collect(&doc, &mut out);
    }
    Ok(out)
}

fn collect(doc: &Value, out: &mut Vec<Value>) {
    match doc.get("kind").and_then(Value::as_str) {
        Some("List") => {
            if let Some(items) = doc.get("items").and_then(Value::as_array) {
                for i in items {
                    collect(i, out);
                }
            }
        }
        Some(k) if INJECTABLE.contains(&k) => out.push(doc.clone()),
        _ => {}
    }
}

/// The pod a controller would create for a workload document (README step 2).
pub fn to_pod(doc: &Value) -> anyhow::Result<Value> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    if kind == "Pod" {
        return Ok(doc.clone());
    }
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let template = match kind {
        "CronJob" => doc.pointer("/spec/jobTemplate/spec/template"),
        _ => doc.pointer("/spec/template"),
    }
    .ok_or_else(|| anyhow!("{kind} {name} has no pod template"))?;
    let mut metadata = template
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let Some(meta) = metadata.as_object_mut() else {
        bail!("{kind} {name}: template metadata is not a map");
    };
    if kind == "Deployment" {
        meta.insert("generateName".into(), json!(format!("{name}-fake-")));
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("pod-template-hash".into(), json!("fake"));
        }
        meta.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-fake"),
                    "uid": "", "controller": true}]),
        );
    } else {
        meta.insert("generateName".into(), json!(name));
        meta.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": doc.get("apiVersion").cloned().unwrap_or(Value::Null),
                    "kind": kind, "name": name, "uid": "", "controller": true}]),
        );
    }
    let mut pod = Map::new();
    pod.insert("apiVersion".into(), json!("v1"));
    pod.insert("kind".into(), json!("Pod"));
    pod.insert("metadata".into(), metadata);
    pod.insert(
        "spec".into(),
        template.get("spec").cloned().unwrap_or_else(|| json!({})),
    );
    Ok(Value::Object(pod))
}

/// The request object as a typed Pod serialises it: `resources: {}` on every container, `status: {}`.
pub fn as_typed_pod(mut pod: Value) -> Value {
    for list in ["containers", "initContainers"] {
        if let Some(cs) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        {
            for c in cs {
                if let Some(m) = c.as_object_mut() {
                    m.entry("resources").or_insert_with(|| json!({}));
                }
            }
        }
    }
    if let Some(m) = pod.as_object_mut() {
        m.entry("status").or_insert_with(|| json!({}));
    }
    pod
}

/// An AdmissionReview (`version` is `v1` or `v1beta1`) for creating `pod` in `namespace`.
pub fn review(version: &str, uid: &str, namespace: &str, pod: &Value) -> Value {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    json!({
        "apiVersion": format!("admission.k8s.io/{version}"),
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": name,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// Removes the `sidecar.istio.io/status` annotation (ignored on both sides, as Istio's webhook test does).
pub fn strip_status(pod: &mut Value) {
    if let Some(a) = pod
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove("sidecar.istio.io/status");
    }
}
