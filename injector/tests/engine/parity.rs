//! Istio parity: every case of `shared/istio-testdata/inject/cases.json`, in kube-inject mode and (for
//! cases whose `modes` include `webhook`) through `admission::handle`, with the patch applied by the
//! independent `json-patch` crate. Compared by the README's semantic-equality rules.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use injector::config::{deep_merge, ConfigArgs, NativeSidecars, Settings};
use injector::engine::Engine;
use serde_json::{json, Map, Value};

use crate::compare::{first_difference, normalize};

/// `shared/` lies beside the clone (CI) or beside the worktrees' parent (developers' machines).
pub fn shared_dir() -> PathBuf {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    ["../../shared", "../../../shared"]
        .iter()
        .map(|rel| base.join(rel))
        .find(|p| p.join("istio-testdata/inject/cases.json").exists())
        .expect("shared/istio-testdata/inject/cases.json beside the repository")
}

pub fn inject_dir() -> PathBuf {
    shared_dir().join("istio-testdata/inject")
}

#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub input: String,
    pub golden: Option<String>,
    pub values: Value,
    pub mesh: Value,
    pub injector_config: Value,
    pub env: Map<String, Value>,
    pub native_sidecars: String,
    pub modes: Vec<String>,
    pub expected_error: Option<String>,
}

pub fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(inject_dir().join("cases.json")).expect("cases.json");
    let raw: Vec<Value> = serde_json::from_str(&text).expect("cases.json is JSON");
    raw.into_iter()
        .map(|c| Case {
            name: c["name"].as_str().expect("name").to_string(),
            input: c["input"].as_str().expect("input").to_string(),
            golden: c["golden"].as_str().map(str::to_string),
            values: c["values"].clone(),
            mesh: c["mesh"].clone(),
            injector_config: c["injector_config"].clone(),
            env: c["env"].as_object().cloned().unwrap_or_default(),
            native_sidecars: c["native_sidecars"].as_str().unwrap_or("true").to_string(),
            modes: c["modes"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            expected_error: c["expected_error"].as_str().map(str::to_string),
        })
        .collect()
}

fn read_yaml_or_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    injector::yaml::parse_json_or_yaml(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "inj-engine-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The three merged documents of a case, written to files, and the flags that name them.
pub fn case_args(case: &Case, dir: &Path) -> Result<ConfigArgs, String> {
    let base = inject_dir();
    let mut values = read_yaml_or_json(&base.join("base-values.json"));
    if !case.values.is_null() {
        deep_merge(&mut values, &case.values);
    }
    let mut mesh = read_yaml_or_json(&base.join("base-mesh.yaml"));
    if !case.mesh.is_null() {
        deep_merge(&mut mesh, &case.mesh);
    }
    let mut config = read_yaml_or_json(&base.join("base-injector-config.yaml"));
    if !case.injector_config.is_null() {
        deep_merge(&mut config, &case.injector_config);
    }
    let write = |name: &str, v: &Value| {
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_vec_pretty(v).expect("json")).expect("write");
        p
    };
    let mut args = ConfigArgs {
        values: Some(write("values.json", &values)),
        mesh_config: Some(write("mesh.json", &mesh)),
        injector_config: Some(write("config.json", &config)),
        native_sidecars: match case.native_sidecars.as_str() {
            "true" => NativeSidecars::True,
            "false" => NativeSidecars::False,
            _ => NativeSidecars::Auto,
        },
        ..Default::default()
    };
    for (k, v) in &case.env {
        let v = v.as_str().unwrap_or_default().to_string();
        match k.as_str() {
            "COMPLIANCE_POLICY" => args.compliance_policy = v,
            "REVISION" => args.revision = v,
            other => return Err(format!("unsupported env {other}")),
        }
    }
    Ok(args)
}

pub fn engine_for(case: &Case) -> Result<(Engine, TempDir), String> {
    let dir = TempDir::new(&case.name);
    let args = case_args(case, &dir.0)?;
    let settings = Settings::load(&args).map_err(|e| format!("settings: {e}"))?;
    Ok((Engine::new(settings), dir))
}

fn parse_docs(text: &str) -> Result<Vec<Value>, String> {
    injector::yaml::split_documents(text)
        .into_iter()
        .map(injector::yaml::parse)
        .filter(|r| !matches!(r, Ok(Value::Null)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())
}

/// Compares two YAML streams semantically.
pub fn compare_streams(got: &str, want: &str) -> Result<(), String> {
    let g = parse_docs(got).map_err(|e| format!("output does not parse: {e}"))?;
    let w = parse_docs(want).map_err(|e| format!("golden does not parse: {e}"))?;
    if g.len() != w.len() {
        return Err(format!("{} documents, want {}", g.len(), w.len()));
    }
    for (i, (a, b)) in g.iter().zip(w.iter()).enumerate() {
        let (na, nb) = (normalize(a), normalize(b));
        if na != nb {
            let d = first_difference(&na, &nb, "").unwrap_or_default();
            return Err(format!("doc {i}: {d}"));
        }
    }
    Ok(())
}

/// Runs one case in kube-inject mode through the library.
pub fn run_kube_inject(case: &Case) -> Result<(), String> {
    let (engine, _dir) = engine_for(case)?;
    let input =
        std::fs::read_to_string(inject_dir().join(&case.input)).map_err(|e| e.to_string())?;
    let out = injector::kube_inject::inject_stream(&engine, &input);
    match (&case.expected_error, out) {
        (Some(want), Err(e)) => {
            let text = e.to_string();
            if text.to_lowercase().contains(&want.to_lowercase()) {
                Ok(())
            } else {
                Err(format!("error {text:?} does not contain {want:?}"))
            }
        }
        (Some(want), Ok(_)) => Err(format!("succeeded, want an error containing {want:?}")),
        (None, Err(e)) => Err(format!("failed: {e}")),
        (None, Ok(out)) => {
            let golden = case.golden.as_ref().ok_or("no golden")?;
            let want =
                std::fs::read_to_string(inject_dir().join(golden)).map_err(|e| e.to_string())?;
            compare_streams(&out.text, &want)
        }
    }
}

const INJECTABLE: [&str; 9] = [
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

fn injectable_docs(v: Value, out: &mut Vec<Value>) {
    match v.get("kind").and_then(Value::as_str) {
        Some("List") => {
            if let Some(items) = v.get("items").and_then(Value::as_array) {
                for i in items.clone() {
                    injectable_docs(i, out);
                }
            }
        }
        Some(k) if INJECTABLE.contains(&k) => out.push(v),
        _ => {}
    }
}

/// Istio's `objectToPod` as the README describes it.
pub fn object_to_pod(doc: &Value) -> Value {
    let kind = doc["kind"].as_str().unwrap_or("");
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut pod = match kind {
        "Pod" => doc.clone(),
        "CronJob" => doc
            .pointer("/spec/jobTemplate/spec/template")
            .cloned()
            .unwrap_or(json!({})),
        _ => doc.pointer("/spec/template").cloned().unwrap_or(json!({})),
    };
    let obj = pod.as_object_mut().expect("pod template object");
    obj.insert("apiVersion".into(), json!("v1"));
    obj.insert("kind".into(), json!("Pod"));
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    let m = meta.as_object_mut().expect("metadata object");
    match kind {
        "Pod" => {}
        "Deployment" => {
            m.insert("generateName".into(), json!(format!("{name}-fake-")));
            let labels = m.entry("labels").or_insert_with(|| json!({}));
            labels["pod-template-hash"] = json!("fake");
            m.insert(
                "ownerReferences".into(),
                json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-fake"), "uid": "", "controller": true}]),
            );
        }
        _ => {
            m.insert("generateName".into(), json!(name));
            m.insert(
                "ownerReferences".into(),
                json!([{"apiVersion": doc["apiVersion"], "kind": kind, "name": name, "uid": "", "controller": true}]),
            );
        }
    }
    pod
}

fn typed_pod_shape(pod: &mut Value) {
    // What a typed Pod carries when serialised: `resources: {}` on every container and `status: {}`.
    for list in ["containers", "initContainers"] {
        if let Some(cs) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        {
            for c in cs {
                if let Some(o) = c.as_object_mut() {
                    o.entry("resources").or_insert_with(|| json!({}));
                }
            }
        }
    }
    if let Some(o) = pod.as_object_mut() {
        o.entry("status").or_insert_with(|| json!({}));
    }
}

fn drop_status_annotation(pod: &mut Value) {
    if let Some(a) = pod
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove("sidecar.istio.io/status");
    }
}

/// Runs one case in webhook mode through `admission::handle`.
pub fn run_webhook(case: &Case) -> Result<(), String> {
    let (engine, _dir) = engine_for(case)?;
    let input =
        std::fs::read_to_string(inject_dir().join(&case.input)).map_err(|e| e.to_string())?;
    let golden = case.golden.as_ref().ok_or("no golden")?;
    let want = std::fs::read_to_string(inject_dir().join(golden)).map_err(|e| e.to_string())?;
    let mut ins = Vec::new();
    for d in parse_docs(&input)? {
        injectable_docs(d, &mut ins);
    }
    let mut outs = Vec::new();
    for d in parse_docs(&want)? {
        injectable_docs(d, &mut outs);
    }
    if ins.len() != outs.len() {
        return Err(format!(
            "{} injectable input documents, {} golden",
            ins.len(),
            outs.len()
        ));
    }
    for (i, (doc_in, doc_want)) in ins.iter().zip(outs.iter()).enumerate() {
        let mut pod = object_to_pod(doc_in);
        typed_pod_shape(&mut pod);
        let namespace = doc_in
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let uid = format!("uid-{}-{i}", case.name);
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": namespace,
                "operation": "CREATE",
                "object": pod,
            }
        });
        let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
        let webhook = injector::admission::Webhook::new(Default::default());
        let outcome = webhook.handle(&engine, 0, &body, "/inject");
        // The same pod twice more, as replicas arrive: the second fills the webhook's patch cache and the
        // third is answered from it; all three answers must be the same bytes.
        for round in 2..=3 {
            let again = webhook.handle(&engine, 0, &body, "/inject");
            if again.response != outcome.response {
                return Err(format!(
                    "doc {i}: answer {round} to the same pod differs from the first"
                ));
            }
        }
        if outcome.kind == injector::admission::OutcomeKind::Injected && webhook.cached() == 0 {
            return Err(format!(
                "doc {i}: the patch cache did not store the repeated pod"
            ));
        }
        let resp: Value =
            serde_json::from_slice(&outcome.response).map_err(|e| format!("response: {e}"))?;
        let r = &resp["response"];
        if r["uid"] != json!(uid) {
            return Err(format!("doc {i}: response uid {} != {uid}", r["uid"]));
        }
        if resp["apiVersion"] != json!("admission.k8s.io/v1")
            || resp["kind"] != json!("AdmissionReview")
        {
            return Err(format!(
                "doc {i}: response envelope {}/{}",
                resp["apiVersion"], resp["kind"]
            ));
        }
        if r["allowed"] != json!(true) {
            return Err(format!("doc {i}: not allowed: {}", r["status"]["message"]));
        }
        let mut got = pod.clone();
        if let Some(p) = r.get("patch").and_then(Value::as_str) {
            if r["patchType"] != json!("JSONPatch") {
                return Err(format!("doc {i}: patchType {}", r["patchType"]));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| format!("doc {i}: patch is not base64: {e}"))?;
            let patch: json_patch::Patch = serde_json::from_slice(&bytes)
                .map_err(|e| format!("doc {i}: patch is not a JSON patch: {e}"))?;
            json_patch::patch(&mut got, &patch)
                .map_err(|e| format!("doc {i}: patch does not apply: {e}"))?;
        }
        let mut want_pod = object_to_pod(doc_want);
        drop_status_annotation(&mut got);
        drop_status_annotation(&mut want_pod);
        let (ng, nw) = (normalize(&got), normalize(&want_pod));
        if ng != nw {
            let d = first_difference(&ng, &nw, "").unwrap_or_default();
            return Err(format!("doc {i}: {d}"));
        }
    }
    Ok(())
}

fn summarise(mode: &str, results: &[(String, Result<(), String>)]) -> usize {
    let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
    println!(
        "== parity {mode}: {}/{} passed",
        results.len() - failed.len(),
        results.len()
    );
    for (name, r) in results {
        match r {
            Ok(()) => println!("  PASS {name}"),
            Err(e) => println!("  FAIL {name}: {e}"),
        }
    }
    failed.len()
}

#[test]
fn parity_kube_inject() {
    let results: Vec<_> = cases()
        .iter()
        .filter(|c| c.modes.iter().any(|m| m == "kube-inject"))
        .map(|c| (c.name.clone(), run_kube_inject(c)))
        .collect();
    assert_eq!(results.len(), 74, "cases.json has 74 kube-inject cases");
    let failed = summarise("kube-inject", &results);
    assert_eq!(
        failed, 0,
        "{failed} kube-inject parity cases failed (see the summary above)"
    );
}

#[test]
fn parity_webhook() {
    let results: Vec<_> = cases()
        .iter()
        .filter(|c| c.modes.iter().any(|m| m == "webhook"))
        .map(|c| (c.name.clone(), run_webhook(c)))
        .collect();
    assert_eq!(results.len(), 69, "cases.json has 69 webhook cases");
    let failed = summarise("webhook", &results);
    assert_eq!(
        failed, 0,
        "{failed} webhook parity cases failed (see the summary above)"
    );
}
