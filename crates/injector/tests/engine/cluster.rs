//! ProxyConfig resources and OpenShift through the engine: the precedence table of Istio's
//! `proxy_config_test.go` (as worked examples), what reaches the pod, the `hello-openshift` case of
//! `cases-templates.json` in webhook mode, and the OpenShift fallbacks.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use inject::{ClusterState, PlatformArgs, ProxyConfigArgs};
use inject::{ConfigArgs, NativeSidecars, Settings};
use inject::{Engine, Mode};
use serde_json::{json, Value};
use test_support::corpus::{inject_dir, Case, Config};
use test_support::pods;

use crate::parity::{run_webhook, template_cases, TempDir};

/// An engine on the test environment's documents with `mesh` merged into the mesh, and `cluster`.
fn engine(mesh: Value, cluster: ClusterState, dir: &Path) -> Engine {
    let files = Config::with(&Value::Null, &mesh, &Value::Null)
        .and_then(|c| c.write(dir))
        .expect("config files");
    let args = ConfigArgs {
        values: Some(files.values),
        mesh_config: Some(files.mesh),
        injector_config: Some(files.injector_config),
        native_sidecars: NativeSidecars::True,
        ..Default::default()
    };
    Engine::new(Settings::load(&args).expect("settings")).with_cluster(cluster)
}

/// The cluster state of `serve --proxy-configs` with a file holding `yaml`.
fn resources(yaml: &str) -> ClusterState {
    let dir = TempDir::new("proxy-configs-file");
    let file = dir.path().join("proxyconfigs.yaml");
    std::fs::write(&file, yaml).expect("resources file");
    load(file).expect("valid resources")
}

/// The cluster state of `serve --proxy-configs FILE`, or the load error as text.
fn load(file: PathBuf) -> Result<ClusterState, String> {
    let args = ProxyConfigArgs {
        proxy_configs: Some(file),
    };
    ClusterState::load(&args, None).map_err(|e| e.to_string())
}

/// A ProxyConfig resource document.
fn cr(name: &str, ns: &str, created: &str, spec: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\nmetadata:\n  name: {name}\n  namespace: {ns}\n  creationTimestamp: \"{created}\"\nspec: {spec}\n---\n"
    )
}

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T01:00:00Z";

fn pod(ns: &str, labels: Value, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns, "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}})
}

fn inject(engine: &Engine, pod: &Value, mode: Mode) -> Value {
    crate::with_request(pod, mode, |req| engine.inject(req).expect("injects"))
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pods::container(pod, name).unwrap_or_else(|| panic!("no container {name}"))
}

fn env(pod: &Value, name: &str) -> BTreeMap<String, String> {
    pods::env_values(container(pod, name))
}

fn proxy_config(pod: &Value) -> Value {
    serde_json::from_str(&env(pod, "istio-proxy")["PROXY_CONFIG"]).expect("PROXY_CONFIG is JSON")
}

/// The webhook's `PROXY_CONFIG` for a pod.
fn webhook_pc(mesh: Value, crs: &str, pod: &Value) -> Value {
    let dir = TempDir::new("proxy-configs");
    proxy_config(&inject(
        &engine(mesh, resources(crs), dir.path()),
        pod,
        Mode::Webhook,
    ))
}

#[test]
fn a_namespace_resource_sets_concurrency_and_the_proxy_image_type() {
    let dir = TempDir::new("proxy-configs");
    let e = engine(
        Value::Null,
        resources(&cr(
            "ns",
            "test-ns",
            T0,
            "{concurrency: 3, image: {imageType: debug}}",
        )),
        dir.path(),
    );
    let out = inject(&e, &pod("test-ns", json!({}), json!({})), Mode::Webhook);
    assert_eq!(
        proxy_config(&out),
        json!({"concurrency": 3, "image": {"imageType": "debug"}})
    );
    assert_eq!(
        container(&out, "istio-proxy")["image"],
        json!("registry.istio.io/testing/proxyv2:latest-debug")
    );
    assert_eq!(
        container(&out, "istio-init")["image"],
        json!("registry.istio.io/testing/proxyv2:latest")
    );
}

#[test]
fn precedence_levels() {
    let plain = pod("test-ns", json!({}), json!({}));
    let labelled = pod("test-ns", json!({"test": "selector"}), json!({}));
    let workload = |name: &str, ns: &str, t: &str, c: u32| {
        cr(
            name,
            ns,
            t,
            &format!("{{selector: {{matchLabels: {{test: selector}}}}, concurrency: {c}}}"),
        )
    };
    // A root-namespace resource beats the mesh's defaultConfig.
    let root = cr("root", "istio-system", T0, "{concurrency: 3}");
    assert_eq!(
        webhook_pc(
            json!({"defaultConfig": {"concurrency": 2}}),
            &root,
            &pod("bar", json!({}), json!({}))
        )["concurrency"],
        json!(3)
    );
    // A workload resource beats the namespace resource, only for the pods it selects.
    let both =
        workload("workload", "test-ns", T0, 3) + &cr("ns", "test-ns", T0, "{concurrency: 2}");
    assert_eq!(
        webhook_pc(Value::Null, &both, &labelled)["concurrency"],
        json!(3)
    );
    assert_eq!(
        webhook_pc(Value::Null, &both, &plain)["concurrency"],
        json!(2)
    );
    // A workload resource beats the pod's annotation; fields it does not set survive.
    let annotated = pod(
        "test-ns",
        json!({"test": "selector"}),
        json!({"proxy.istio.io/config": "{ \"concurrency\": 5, \"drainDuration\": \"10s\" }"}),
    );
    let wl = cr(
        "w",
        "test-ns",
        T0,
        "{selector: {matchLabels: {test: selector}}, concurrency: 3, image: {imageType: debug}}",
    );
    assert_eq!(
        webhook_pc(Value::Null, &wl, &annotated),
        json!({"drainDuration": "10s", "concurrency": 3, "image": {"imageType": "debug"}})
    );
    // Resources in other namespaces are ignored.
    let others = cr("ns", "wrong-ns", T0, "{concurrency: 1}")
        + &workload("w", "wrong-ns", T0, 2)
        + &cr("root", "istio-system", T0, "{concurrency: 3}");
    assert_eq!(
        webhook_pc(Value::Null, &others, &labelled)["concurrency"],
        json!(3)
    );
    // A pod-namespace resource beats the root one; in the root namespace only the root level applies.
    let two = cr("root", "istio-system", T0, "{concurrency: 3}")
        + &cr("ns", "test-ns", T0, "{concurrency: 4}");
    assert_eq!(
        webhook_pc(Value::Null, &two, &plain)["concurrency"],
        json!(4)
    );
    assert_eq!(
        webhook_pc(
            Value::Null,
            &two,
            &pod("istio-system", json!({}), json!({}))
        )["concurrency"],
        json!(3)
    );
    // An empty selector is neither namespace-wide nor a workload selector.
    let empty_sel = cr("e", "test-ns", T0, "{selector: {}, concurrency: 7}");
    assert_eq!(webhook_pc(Value::Null, &empty_sel, &labelled), json!({}));
}

#[test]
fn the_oldest_resource_of_a_level_wins_alone() {
    let sel = "selector: {matchLabels: {test: selector}}, ";
    for selector in ["", sel] {
        let crs = cr(
            "workload-c",
            "test-ns",
            T1,
            &format!("{{{selector}environmentVariables: {{C: \"3\"}}}}"),
        ) + &cr(
            "workload-b",
            "test-ns",
            T1,
            &format!("{{{selector}environmentVariables: {{B: \"2\"}}}}"),
        ) + &cr(
            "workload-a",
            "test-ns",
            T0,
            &format!("{{{selector}environmentVariables: {{A: \"1\"}}}}"),
        );
        let dir = TempDir::new("proxy-configs");
        let e = engine(Value::Null, resources(&crs), dir.path());
        let out = inject(
            &e,
            &pod("test-ns", json!({"test": "selector"}), json!({})),
            Mode::Webhook,
        );
        assert_eq!(
            proxy_config(&out),
            json!({"proxyMetadata": {"A": "1"}}),
            "{selector:?}"
        );
        for c in ["istio-init", "istio-proxy"] {
            let env = env(&out, c);
            assert_eq!(env.get("A").map(String::as_str), Some("1"), "{c}");
            assert!(!env.contains_key("B") && !env.contains_key("C"), "{c}");
        }
    }
    // Same timestamp: the name decides.
    let tie =
        cr("b", "test-ns", T0, "{concurrency: 2}") + &cr("a", "test-ns", T0, "{concurrency: 1}");
    assert_eq!(
        webhook_pc(Value::Null, &tie, &pod("test-ns", json!({}), json!({})))["concurrency"],
        json!(1)
    );
}

#[test]
fn proxy_metadata_merges_across_levels_and_zero_values_do_not_override() {
    let mesh = json!({"defaultConfig": {"proxyMetadata": {"ISTIO_META_TLS_CLIENT_KEY": "/etc/identity/client/keys/client-key.pem"}}});
    let annotated = pod(
        "test-ns",
        json!({}),
        json!({"proxy.istio.io/config":
        "discoveryAddress: foo:123\nconcurrency: 0\nproxyMetadata:\n  FOO: bar\n  ISTIO_META_TLS_CLIENT_KEY: /etc/identity2/client/keys/client-key.pem"}),
    );
    let root = cr(
        "root",
        "istio-system",
        T0,
        "{concurrency: 4, environmentVariables: {X: \"1\"}}",
    );
    assert_eq!(
        webhook_pc(mesh, &root, &annotated),
        json!({"discoveryAddress": "foo:123", "concurrency": 0, "proxyMetadata": {
            "FOO": "bar", "ISTIO_META_TLS_CLIENT_KEY": "/etc/identity2/client/keys/client-key.pem", "X": "1"}})
    );

    // interceptionMode REDIRECT is the enum's zero: it cannot override a mesh-wide TPROXY with the
    // resources' rules (the webhook's, in kube-inject too), while kube-inject without them applies it.
    let tproxy = json!({"defaultConfig": {"interceptionMode": "TPROXY"}});
    let redirect = pod(
        "test-ns",
        json!({}),
        json!({"proxy.istio.io/config": "interceptionMode: REDIRECT"}),
    );
    let dir = TempDir::new("proxy-configs");
    for mode in [Mode::Webhook, Mode::KubeInject] {
        let e = engine(tproxy.clone(), resources(""), dir.path());
        let out = inject(&e, &redirect, mode);
        assert_eq!(
            proxy_config(&out),
            json!({"interceptionMode": "TPROXY"}),
            "{mode:?}"
        );
    }
    let plain_kube = engine(tproxy, ClusterState::default(), dir.path());
    assert_eq!(
        proxy_config(&inject(&plain_kube, &redirect, Mode::KubeInject)),
        json!({})
    );
    // A wrapper's false does override.
    let hold = pod(
        "test-ns",
        json!({}),
        json!({"proxy.istio.io/config": "holdApplicationUntilProxyStarts: false"}),
    );
    assert_eq!(
        webhook_pc(
            json!({"defaultConfig": {"holdApplicationUntilProxyStarts": true}}),
            "",
            &hold
        ),
        json!({"holdApplicationUntilProxyStarts": false})
    );
}

#[test]
fn kube_inject_reads_the_resources_of_the_manifests_namespace() {
    let dir = TempDir::new("proxy-configs");
    // As `kubectl get proxyconfigs -A -o yaml` prints them: a List.
    let cluster = resources(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: networking.istio.io/v1beta1\n  kind: ProxyConfig\n  metadata: {name: shop, namespace: shop}\n  spec: {concurrency: 2}\n- apiVersion: networking.istio.io/v1beta1\n  kind: ProxyConfig\n  metadata: {name: d, namespace: default}\n  spec: {concurrency: 5}\n",
    );
    let e = engine(Value::Null, cluster, &dir.path().join("cfg"));
    let deploy = |ns: &str| {
        format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n{ns}spec:\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: web\n        image: nginx\n")
    };
    for (ns, want) in [("  namespace: shop\n", 2), ("", 5)] {
        let out = injector::kube_inject::inject_stream(&e, &deploy(ns)).unwrap();
        let doc =
            sidecar_core::yaml::parse(sidecar_core::yaml::split_documents(&out.text)[0]).unwrap();
        let pod = json!({"spec": doc["spec"]["template"]["spec"]});
        assert_eq!(proxy_config(&pod)["concurrency"], json!(want), "{ns:?}");
    }
}

#[test]
fn a_bad_resource_file_is_refused_at_load_naming_the_object_and_field() {
    let dir = TempDir::new("proxy-configs");
    let file = dir.path().join("pc.yaml");
    std::fs::write(
        &file,
        cr("ok", "a", T0, "{concurrency: 1}") + &cr("bad", "a", T0, "{concurrency: lots}"),
    )
    .unwrap();
    let e = load(file).unwrap_err();
    assert!(
        e.contains("pc.yaml: ProxyConfig a/bad: field spec.concurrency"),
        "{e}"
    );
    let missing = dir.path().join("missing");
    let e = load(missing.clone()).unwrap_err();
    assert!(
        e.starts_with(&format!("--proxy-configs {}: ", missing.display())),
        "the flag and the path: {e}"
    );
}

fn openshift(namespaces: &str, dir: &Path) -> ClusterState {
    let file = dir.join("ns.yaml");
    std::fs::write(&file, namespaces).unwrap();
    ClusterState::load(
        &ProxyConfigArgs::default(),
        Some(&PlatformArgs {
            platform: "openshift".into(),
            namespaces: Some(file),
        }),
    )
    .unwrap()
}

/// `hello-openshift` of `cases-templates.json`, webhook mode, with its `namespaces` as `--namespaces`.
#[test]
fn hello_openshift_case() {
    let case = template_cases()
        .into_iter()
        .find(|c| c.name == "hello-openshift")
        .expect("case hello-openshift");
    assert_eq!(
        case.env,
        BTreeMap::from([("PLATFORM".to_string(), "openshift".to_string())])
    );
    assert_eq!(case.modes, ["webhook"]);
    assert!(case.namespaces.is_some());
    run_webhook(&case).unwrap();
    // Without the platform, or without the namespaces, the proxy runs as 1337 and differs from the golden.
    let off = Case {
        env: BTreeMap::new(),
        ..case.clone()
    };
    assert!(run_webhook(&off).is_err());
    let unknown = Case {
        namespaces: None,
        ..case
    };
    assert!(run_webhook(&unknown).is_err());
    assert!(inject_dir().join("hello-openshift.yaml.injected").exists());
}

#[test]
fn missing_or_invalid_openshift_annotations_fall_back_to_1337() {
    let dir = TempDir::new("openshift");
    let ns = |name: &str, ann: Value| {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": ann}}).to_string() + "\n---\n"
    };
    let text = ns(
        "good",
        json!({"openshift.io/sa.scc.uid-range": "1000620000/10000",
                                "openshift.io/sa.scc.supplemental-groups": "2000/10"}),
    ) + &ns(
        "bad",
        json!({"openshift.io/sa.scc.uid-range": "5 / 10",
                           "openshift.io/sa.scc.supplemental-groups": "1/1,x"}),
    ) + &ns("none", json!({}));
    let e = engine(
        Value::Null,
        openshift(&text, dir.path()),
        &dir.path().join("cfg"),
    );
    let ids = |ns: &str, mode: Mode| {
        let out = inject(&e, &pod(ns, json!({}), json!({})), mode);
        let sc = &container(&out, "istio-proxy")["securityContext"];
        let args = container(&out, "istio-init")["args"].clone();
        let u = args
            .as_array()
            .unwrap()
            .iter()
            .position(|a| a == "-u")
            .unwrap();
        (
            sc["runAsUser"].clone(),
            sc["runAsGroup"].clone(),
            args[u + 1].clone(),
        )
    };
    assert_eq!(
        ids("good", Mode::Webhook),
        (json!(1000629999), json!(2009), json!("1000629999"))
    );
    for ns in ["bad", "none", "unknown"] {
        assert_eq!(
            ids(ns, Mode::Webhook),
            (json!(1337), json!(1337), json!("1337")),
            "{ns}"
        );
    }
    // kube-inject never looks the Namespace up.
    assert_eq!(
        ids("good", Mode::KubeInject),
        (json!(1337), json!(1337), json!("1337"))
    );
}

/// On OpenShift a user `istio-proxy` running as the app's uid loses it before injection (the patch is
/// taken against the cleared pod), so the Namespace's uid applies; the rest of its securityContext stays.
#[test]
fn openshift_clears_a_proxy_uid_equal_to_the_apps() {
    use base64::Engine as _;
    let dir = TempDir::new("openshift-clear");
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "test-ns", "annotations": {
        "openshift.io/sa.scc.uid-range": "1000620000/10000",
        "openshift.io/sa.scc.supplemental-groups": "1000620000/10000"}}});
    let e = engine(
        Value::Null,
        openshift(&ns.to_string(), dir.path()),
        &dir.path().join("cfg"),
    );
    let sc = json!({"runAsUser": 1000620000, "readOnlyRootFilesystem": false});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello", "namespace": "test-ns"},
        "spec": {"containers": [{"name": "hello", "image": "hello", "securityContext": {"runAsUser": 1000620000}},
                                {"name": "istio-proxy", "image": "auto", "securityContext": sc}]}});
    let review = pods::review("v1", "u", "test-ns", &pod);
    let body = serde_json::to_vec(&review).unwrap();
    // The webhook's answer for `pod` and the pod its patch makes.
    let admit = |e: &Engine| {
        let outcome = injector::Webhook::new(Default::default()).handle(e, 0, &body, "/inject");
        let resp: Value = serde_json::from_slice(&outcome.response).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(resp["response"]["patch"].as_str().unwrap())
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        let mut got = pod.clone();
        json_patch::patch(&mut got, &patch).unwrap();
        (resp, got)
    };
    let (resp, got) = admit(&e);
    assert_eq!(resp["response"]["allowed"], json!(true), "{resp}");
    let proxy = container(&got, "istio-proxy");
    assert_eq!(
        proxy["securityContext"]["runAsUser"],
        json!(1000629999),
        "{proxy}"
    );
    assert_eq!(proxy["securityContext"]["runAsGroup"], json!(1000629999));
    assert_eq!(
        proxy["securityContext"]["readOnlyRootFilesystem"],
        json!(false)
    );
    // Off OpenShift the user's uid is kept as an override.
    let plain = engine(
        Value::Null,
        ClusterState::default(),
        &dir.path().join("cfg"),
    );
    let (_, got) = admit(&plain);
    assert_eq!(
        container(&got, "istio-proxy")["securityContext"]["runAsUser"],
        json!(1000620000)
    );
}
