//! Istio parity: every case of `testdata/istio/inject/cases.json` and `cases-templates.json`, in
//! kube-inject mode and (for cases whose `modes` include `webhook`) through `admission::handle`, with the patch applied by the
//! independent `json-patch` crate. Compared by the semantic-equality rule of that folder's README.

use std::path::Path;

use base64::Engine as _;
use inject::Engine;
use inject::{ClusterState, PlatformArgs, ProxyConfigArgs};
use inject::{ConfigArgs, NativeSidecars, Settings};
use serde_json::{json, Value};
use sidecar_core::admission_review;
pub use test_support::corpus::{inject_dir, Case};
use test_support::corpus::{load_cases, load_template_cases, read_inject};
use test_support::pods::{self, as_typed_pod, injectable_documents, strip_status, to_pod};
use test_support::semantic::{compare_documents, diff};
pub use test_support::TempDir;

pub fn cases() -> Vec<Case> {
    load_cases().expect("cases.json")
}

pub fn template_cases() -> Vec<Case> {
    load_template_cases().expect("cases-templates.json")
}

/// The three merged documents of a case, written to files, and the flags that name them.
pub fn case_args(case: &Case, dir: &Path) -> Result<ConfigArgs, String> {
    let files = case
        .config()
        .and_then(|c| c.write(dir))
        .map_err(|e| e.to_string())?;
    let mut args = ConfigArgs {
        values: Some(files.values),
        mesh_config: Some(files.mesh),
        injector_config: Some(files.injector_config),
        native_sidecars: match case.native_sidecars.as_str() {
            "true" => NativeSidecars::True,
            "false" => NativeSidecars::False,
            _ => NativeSidecars::Auto,
        },
        ..Default::default()
    };
    for (k, v) in &case.env {
        let v = v.clone();
        match k.as_str() {
            "COMPLIANCE_POLICY" => args.compliance_policy = v,
            "REVISION" => args.revision = v,
            // The platform is cluster state, not configuration: see `engine_for`.
            "PLATFORM" => {}
            other => return Err(format!("unsupported env {other}")),
        }
    }
    Ok(args)
}

pub fn engine_for(case: &Case) -> Result<(Engine, TempDir), String> {
    let dir = TempDir::new(&case.name);
    let args = case_args(case, dir.path())?;
    let settings = Settings::load(&args).map_err(|e| format!("settings: {e}"))?;
    let platform = PlatformArgs {
        platform: case.env.get("PLATFORM").cloned().unwrap_or_default(),
        namespaces: case
            .write_namespaces(dir.path())
            .map_err(|e| e.to_string())?,
    };
    let cluster = ClusterState::load(&ProxyConfigArgs::default(), Some(&platform))
        .map_err(|e| format!("cluster state: {e}"))?;
    Ok((Engine::new(settings).with_cluster(cluster), dir))
}

/// Compares two YAML streams semantically; both are parsed by `test_support`, independently of the
/// injector's YAML code.
pub fn compare_streams(got: &str, want: &str) -> Result<(), String> {
    let g = pods::documents(got).map_err(|e| format!("output does not parse: {e}"))?;
    let w = pods::documents(want).map_err(|e| format!("golden does not parse: {e}"))?;
    compare_documents(&g, &w)
}

/// Runs one case in kube-inject mode through the library.
pub fn run_kube_inject(case: &Case) -> Result<(), String> {
    let (engine, _dir) = engine_for(case)?;
    let input = case.input_text().map_err(|e| e.to_string())?;
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
            let want = read_inject(golden).map_err(|e| e.to_string())?;
            compare_streams(&out.text, &want)
        }
    }
}

/// Runs one case in webhook mode through `admission::handle`.
pub fn run_webhook(case: &Case) -> Result<(), String> {
    let (engine, _dir) = engine_for(case)?;
    let input = case.input_text().map_err(|e| e.to_string())?;
    let want = case
        .golden_text()
        .map_err(|e| e.to_string())?
        .ok_or("no golden")?;
    let ins = injectable_documents(&input).map_err(|e| e.to_string())?;
    let outs = injectable_documents(&want).map_err(|e| e.to_string())?;
    if ins.len() != outs.len() {
        return Err(format!(
            "{} injectable input documents, {} golden",
            ins.len(),
            outs.len()
        ));
    }
    for (i, (doc_in, doc_want)) in ins.iter().zip(outs.iter()).enumerate() {
        let pod = as_typed_pod(to_pod(doc_in).map_err(|e| e.to_string())?);
        let namespace = doc_in
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let uid = format!("uid-{}-{i}", case.name);
        let review = pods::review("v1", &uid, namespace, &pod);
        let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
        let webhook = injector::Webhook::new(Default::default());
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
        if outcome.kind == injector::OutcomeKind::Injected && webhook.cached() == 0 {
            return Err(format!(
                "doc {i}: the patch cache did not store the repeated pod"
            ));
        }
        let resp: Value =
            serde_json::from_slice(&outcome.response).map_err(|e| format!("response: {e}"))?;
        let r = admission_review::response_to(&resp, admission_review::API_VERSIONS[0], &uid)
            .map_err(|e| format!("doc {i}: {e}"))?;
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
        let mut want_pod = to_pod(doc_want).map_err(|e| e.to_string())?;
        strip_status(&mut got);
        strip_status(&mut want_pod);
        let d = diff(&got, &want_pod, 1);
        if !d.is_empty() {
            return Err(format!("doc {i}: {d}"));
        }
    }
    Ok(())
}

/// Runs every case of `table` that runs in `mode` through `run`, prints a summary, and fails unless all
/// `expected` cases pass.
fn run_mode(
    table: &str,
    cases: &[Case],
    mode: &str,
    expected: usize,
    run: fn(&Case) -> Result<(), String>,
) {
    let results: Vec<_> = cases
        .iter()
        .filter(|c| c.runs_in(mode))
        .map(|c| (c.name.clone(), run(c)))
        .collect();
    assert_eq!(
        results.len(),
        expected,
        "{table} has {expected} {mode} cases"
    );
    let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
    println!(
        "== parity {table} {mode}: {}/{} passed",
        results.len() - failed.len(),
        results.len()
    );
    for (name, r) in &results {
        match r {
            Ok(()) => println!("  PASS {name}"),
            Err(e) => println!("  FAIL {name}: {e}"),
        }
    }
    assert!(
        failed.is_empty(),
        "{} {table} {mode} parity cases failed (see the summary above)",
        failed.len()
    );
}

#[test]
fn parity_kube_inject() {
    run_mode("cases.json", &cases(), "kube-inject", 74, run_kube_inject);
}

#[test]
fn parity_webhook() {
    run_mode("cases.json", &cases(), "webhook", 69, run_webhook);
}

#[test]
fn parity_templates_kube_inject() {
    let cases = template_cases();
    run_mode(
        "cases-templates.json",
        &cases,
        "kube-inject",
        4,
        run_kube_inject,
    );
}

#[test]
fn parity_templates_webhook() {
    let cases = template_cases();
    run_mode("cases-templates.json", &cases, "webhook", 5, run_webhook);
}
