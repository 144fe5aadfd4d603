//! Istio's own release texts (`testdata/istio/releases/`): the configured text is what the pod gets,
//! built-in names included, compiled where the text is the compiled templates' own and evaluated
//! otherwise; the two paths agree; the bounds hold on the evaluator.

use inject::template_source::RenderPath;
use inject::{Engine, Mode, Settings};
use serde_json::{json, Value};
use test_support::corpus::{read_inject, yaml};

use crate::with_request;

/// Every release folder of `testdata/istio/releases/`.
const RELEASES: [&str; 4] = ["1.29.6", "1.30.3", "1.31.0-rc.0", "release-1.30-9739e10"];
const TEXTS: [(&str, &str); 4] = test_support::corpus::RELEASE_TEXT_FILES;

/// A release's four texts, as its chart writes them into the ConfigMap (trimmed).
fn texts(release: &str) -> Value {
    Value::Object(test_support::corpus::release_texts(release).expect("release texts"))
}

fn settings(templates: Value) -> Settings {
    let values: Value = serde_json::from_str(&read_inject("base-values.json").expect("values"))
        .expect("values JSON");
    let mesh = yaml(&read_inject("base-mesh.yaml").expect("mesh"), "mesh").expect("mesh YAML");
    let mut config = yaml(
        &read_inject("base-injector-config.yaml").expect("config"),
        "config",
    )
    .expect("config YAML");
    config["templates"] = templates;
    Settings::from_documents(
        Some(("values", &values)),
        Some(("mesh", &mesh)),
        Some(("config", &config)),
        false,
        "",
        "",
    )
    .unwrap_or_else(|e| panic!("settings: {e}"))
}

/// The pod of Istio's `hello.yaml` Deployment.
fn hello() -> Value {
    let d = yaml(&read_inject("hello.yaml").expect("hello"), "hello").expect("hello YAML");
    let t = &d["spec"]["template"];
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": t["metadata"], "spec": t["spec"]})
}

fn inject(engine: &Engine, pod: &Value) -> Result<Value, String> {
    with_request(pod, Mode::KubeInject, |req| engine.inject(req)).map_err(|e| e.to_string())
}

fn env_names(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == "istio-proxy")
        .flat_map(|c| c["env"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| e["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn every_release_text_loads_and_renders() {
    for release in RELEASES {
        let s = settings(texts(release));
        // The compiled templates are 1.31.0-rc.0's texts: a text equal to that release's renders
        // compiled (grpc-agent and grpc-simple have not changed since 1.29), any other through the
        // evaluator.
        let (mine, compiled) = (texts(release), texts(inject::template_source::RELEASE));
        for (name, _) in TEXTS {
            let want = if mine[name] == compiled[name] {
                RenderPath::Compiled
            } else {
                RenderPath::Evaluated
            };
            assert_eq!(s.user_templates.path(name), want, "{release} {name}");
        }
        assert_eq!(
            s.user_templates.path("sidecar") == RenderPath::Compiled,
            release == "1.31.0-rc.0"
        );
        let pod = inject(&Engine::new(s), &hello()).unwrap_or_else(|e| panic!("{release}: {e}"));
        // Every release text of 1.29-1.31 sets GOMAXPROCS from the CPU limit (Istio's master of late
        // August 2026 no longer does), and so does the compiled default.
        assert!(
            env_names(&pod).contains(&"GOMAXPROCS".to_string()),
            "{release}"
        );
    }
    let compiled = inject(&Engine::new(settings(json!({}))), &hello()).expect("compiled");
    assert!(env_names(&compiled).contains(&"GOMAXPROCS".to_string()));
}

#[test]
fn one_changed_line_of_the_sidecar_text_is_in_the_pod() {
    let mut t = texts("1.31.0-rc.0");
    let text = t["sidecar"].as_str().expect("text").to_string();
    assert!(text.contains("- name: GOMAXPROCS"));
    t["sidecar"] = json!(text.replace("- name: GOMAXPROCS", "- name: ONE_CHANGED_LINE"));
    let pod = inject(&Engine::new(settings(t)), &hello()).expect("inject");
    let names = env_names(&pod);
    assert!(names.contains(&"ONE_CHANGED_LINE".to_string()), "{names:?}");
    assert!(!names.contains(&"GOMAXPROCS".to_string()), "{names:?}");
}

#[test]
fn a_hostile_annotation_value_is_written_as_each_text_writes_it() {
    // The release-1.30 branch's text quotes `sidecar.istio.io/*` values (`| quote`), as 1.31.1 does
    // (istio#61215); 1.30.3's writes them between plain double quotes, so a value with a quote breaks
    // out of its YAML string there, as in Istio.
    // The texts use the annotation only when it contains a slash.
    let hostile = "evil.io/x\"\n    evil: \"true";
    let mut pod = hello();
    pod["metadata"]["annotations"] = json!({"sidecar.istio.io/proxyImage": hostile});
    let escaped = inject(&Engine::new(settings(texts("release-1.30-9739e10"))), &pod)
        .expect("the quoting text renders");
    let images: Vec<&str> = escaped["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(
            escaped["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten(),
        )
        .filter(|c| c["name"] == "istio-proxy" || c["name"] == "istio-init")
        .filter_map(|c| c["image"].as_str())
        .collect();
    assert_eq!(images, [hostile, hostile], "{escaped:#}");
    let plain = inject(&Engine::new(settings(texts("1.30.3"))), &pod).expect("renders");
    for c in ["initContainers", "containers"] {
        let proxy = plain["spec"][c]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == "istio-proxy" || c["name"] == "istio-init")
            .expect("injected container");
        // Broken out of its string: the image ends at the quote, and the key it smuggled in is no
        // Container field, so Go's decode (and ours) drops it.
        assert_eq!(proxy["image"], "evil.io/x");
        assert!(proxy.get("evil").is_none(), "{proxy:#}");
    }
}

#[test]
fn the_evaluator_bounds_hold_on_istios_own_text() {
    // A pod of 5,000 containers with 20 ports each: the text ranges over them several times
    // (ISTIO_META_POD_PORTS, excludeInboundPort, the app container list). It renders or stops at a
    // bound, never panics or runs away.
    let ports: Vec<Value> = (1..=20)
        .map(|p| json!({"containerPort": 1000 + p}))
        .collect();
    let containers: Vec<Value> = (0..5_000)
        .map(|i| json!({"name": format!("c{i}"), "image": "i", "ports": ports}))
        .collect();
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "big", "namespace": "ns"}, "spec": {"containers": containers}});
    match inject(&Engine::new(settings(texts("1.31.0-rc.0"))), &pod) {
        Ok(out) => assert!(out["spec"]["containers"].as_array().map_or(0, Vec::len) > 5_000),
        Err(e) => assert!(
            e.contains("limit") || e.contains("bound") || e.contains("exceed"),
            "{e}"
        ),
    }
}

/// Each text of [`inject::template_source::COMPILED_FROM`] renders through the evaluator exactly what its
/// compiled template renders, on every case of `cases.json` and `cases-templates.json` that injects: the
/// claim that lets the compiled template stand in for the text.
#[test]
fn the_compiled_templates_render_their_release_text_exactly() {
    use inject::template_source::COMPILED_FROM;
    assert!(!COMPILED_FROM.is_empty());
    let mut texts = serde_json::Map::new();
    for (name, _, text) in COMPILED_FROM {
        texts.insert(name.to_string(), json!(text));
    }
    let mut compared = 0;
    let mut cases = crate::parity::cases();
    cases.extend(crate::parity::template_cases());
    for case in cases {
        if case.expected_error.is_some() || !case.runs_in("kube-inject") {
            continue;
        }
        let input = case.input_text().expect("input");
        let (compiled, _dir) = crate::parity::engine_for(&case).expect("engine");
        let compiled = injector::kube_inject::inject_stream(&compiled, &input)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        // The case's own templates (user templates) stay; the built-in names get the release's texts,
        // which then render through the evaluator.
        let mut evaluated = case.clone();
        let mut templates = Value::Object(texts.clone());
        if let Some(own) = case
            .injector_config
            .get("templates")
            .and_then(Value::as_object)
        {
            for (k, v) in own {
                templates[k] = v.clone();
            }
        }
        if !evaluated.injector_config.is_object() {
            evaluated.injector_config = json!({});
        }
        evaluated.injector_config["templates"] = templates;
        let (engine, _dir2) = crate::parity::engine_for(&evaluated).expect("engine");
        let out = injector::kube_inject::inject_stream(&engine, &input)
            .unwrap_or_else(|e| panic!("{} (evaluated): {e}", case.name));
        crate::parity::compare_streams(&out.text, &compiled.text)
            .unwrap_or_else(|e| panic!("{}: evaluated against compiled: {e}", case.name));
        compared += 1;
    }
    assert!(compared >= 70, "{compared} cases compared");
}
