use super::*;

const SPIRE: &str = "spec:\n  containers:\n  - name: istio-proxy\n    volumeMounts:\n    - name: workload-socket\n      mountPath: /var/run/secrets/workload-spiffe-uds\n      readOnly: true\n  volumes:\n  - name: workload-socket\n    csi:\n      driver: \"csi.spiffe.io\"\n      readOnly: true\n";

use crate::config::Settings;
use crate::engine::{Engine, InjectRequest, Mode};
use crate::workload::Workload;

fn settings(config: Value, values: Value) -> Result<Settings, crate::config::ConfigError> {
    settings_native(config, values, true)
}

/// The settings of a values and a config document, with native sidecars on or off.
fn settings_native(
    config: Value,
    values: Value,
    native: bool,
) -> Result<Settings, crate::config::ConfigError> {
    Settings::from_documents(
        Some(("values.yaml", &values)),
        None,
        Some(("config.yaml", &config)),
        native,
        "",
        "",
    )
}

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ns", "annotations": {"inject.istio.io/templates": "t"}},
           "spec": {"containers": [{"name": "app", "image": "a"}, {"name": "b", "image": "b"}]}})
}

fn workload() -> Workload {
    Workload {
        kind: "Deployment".into(),
        api_version: "apps/v1".into(),
        name: "hello".into(),
        namespace: "ns".into(),
    }
}

fn inject(engine: &Engine, pod: &Value, mode: Mode) -> Result<Value, crate::engine::EngineError> {
    let w = workload();
    engine.inject(&InjectRequest {
        pod,
        workload: &w,
        url_env: Default::default(),
        mode,
    })
}

#[test]
fn a_configured_pod_template_text_renders_whatever_its_name() {
    let config = json!({"policy": "enabled", "templates": {
        "sidecar": "{{ .Values.whatever | protoToJSON }}", "gateway": "x: {{ nosuch }}", "spire": SPIRE,
        "waypoint": "{{ whatever Istio's gateway controller runs }}"}});
    // Istio's own built-in names are evaluated too, so a text outside the subset is refused at load with
    // the file, the key, the line and the function.
    let err = settings(config.clone(), json!({})).unwrap_err().to_string();
    assert!(
        err.contains("config.yaml")
            && err.contains("templates.gateway")
            && err.contains("line 1")
            && err.contains("\"nosuch\""),
        "{err}"
    );
    let mut config = config;
    config["templates"]["gateway"] = json!("metadata:\n  labels:\n    g: \"{{ .Revision }}\"\n");
    let s = settings(config, json!({})).unwrap();
    let names: Vec<&str> = s.user_templates.names().collect();
    assert_eq!(names, ["gateway", "sidecar", "spire"]);
    assert_eq!(
        s.user_templates.path("gateway"),
        crate::template_source::RenderPath::Evaluated
    );
    assert_eq!(
        s.user_templates.path("grpc-agent"),
        crate::template_source::RenderPath::Compiled
    );
    // The gateway controller's texts never render into pods: left alone, with a warning.
    let w = s.warnings.join("\n");
    assert!(
        w.contains("templates.waypoint") && w.contains("gateway controller"),
        "{w}"
    );
}

#[test]
fn values_templates_are_used_without_a_config_document_entry() {
    let values = json!({"sidecarInjectorWebhook": {"templates": {"spire": SPIRE}}});
    let s = settings(json!({"policy": "enabled"}), values.clone()).unwrap();
    assert!(s
        .user_templates
        .get("spire")
        .is_some_and(UserTemplate::is_static));
    let s = Settings::from_documents(Some(("v", &values)), None, None, true, "", "").unwrap();
    assert_eq!(s.user_templates.names().collect::<Vec<_>>(), ["spire"]);
    // A refusal names the values file and key.
    let values = json!({"sidecarInjectorWebhook": {"templates": {"t": "a: {{ if . }}{{ define \"x\" }}{{ end }}{{ end }}"}}});
    let err = Settings::from_documents(Some(("vals.json", &values)), None, None, true, "", "")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("vals.json")
            && err.contains("sidecarInjectorWebhook.templates.t")
            && err.contains("unsupported action \"define\""),
        "{err}"
    );
}

#[test]
fn static_texts_must_be_partial_pods() {
    for (text, want) in [
        ("spec: [", "is not YAML"),
        ("- a\n- b\n", "not a partial pod"),
        ("just text", "not a partial pod"),
    ] {
        let config = json!({"policy": "enabled", "templates": {"t": text}});
        let err = settings(config, json!({})).unwrap_err().to_string();
        assert!(
            err.contains(want) && err.contains("templates.t") && err.contains("config.yaml"),
            "{text:?}: {err}"
        );
    }
    let config = json!({"policy": "enabled", "templates": {"t": 3}});
    let err = settings(config, json!({})).unwrap_err().to_string();
    assert!(
        err.contains("templates.t") && err.contains("string"),
        "{err}"
    );
    // Comments only: an empty overlay, the pod unchanged apart from post-processing.
    let config = json!({"policy": "enabled", "templates": {"t": "{{/* nothing */}}\n"}});
    let s = settings(config, json!({})).unwrap();
    let t = s.user_templates.get("t").unwrap();
    assert!(t.is_static());
}

#[test]
fn a_template_is_parsed_once_per_configuration_not_per_pod() {
    PARSES.with(|p| p.set(0));
    let config = json!({"policy": "enabled", "templates": {
        "t": "metadata:\n  labels:\n    deploy: {{ .DeploymentMeta.Name }}\n", "s": SPIRE}});
    let engine = Engine::new(settings(config, json!({})).unwrap());
    assert_eq!(PARSES.with(|p| p.get()), 2);
    for _ in 0..5 {
        let out = inject(&engine, &pod(), Mode::Webhook).unwrap();
        assert_eq!(out["metadata"]["labels"]["deploy"], json!("hello"));
    }
    assert_eq!(PARSES.with(|p| p.get()), 2);
}

#[test]
fn the_data_root_has_istios_go_field_names() {
    let text = "metadata:\n  annotations:\n    kind: {{ .TypeMeta.Kind }}/{{ .TypeMeta.APIVersion }}\n    \
        rev: {{ .Revision | quote }}\n    native: {{ .NativeSidecars | quote }}\n    \
        image: {{ .ProxyImage }}\n    init: {{ .ProxyInitImage }}\n    uid: {{ .ProxyUID | quote }}\n    \
        inbound: {{ .InboundTrafficPolicyMode }}\n    ns: {{ .ObjectMeta.Namespace }}\n    \
        names: {{ range $i, $c := .Spec.Containers }}{{ if $i }},{{ end }}{{ $c.Name }}{{ end }}\n    \
        td: {{ .MeshConfig.TrustDomain }}\n    hub: {{ .Values.global.hub }}\n    \
        disc: {{ .ProxyConfig.DiscoveryAddress }}\n";
    let config = json!({"policy": "enabled", "templates": {"t": text}});
    let values = json!({"global": {"hub": "h.io", "tag": "1.2", "variant": "distroless"}});
    let engine = Engine::new(settings(config.clone(), values.clone()).unwrap());
    let out = inject(&engine, &pod(), Mode::Webhook).unwrap();
    let a = &out["metadata"]["annotations"];
    for (key, want) in [
        ("kind", "Deployment/apps/v1"),
        ("rev", "default"),
        ("native", "true"),
        ("image", "h.io/proxyv2:1.2-distroless"),
        ("init", "h.io/proxyv2:1.2-distroless"),
        ("uid", "1337"),
        ("inbound", "passthrough"),
        ("ns", "ns"),
        ("names", "app,b"),
        ("td", "cluster.local"),
        ("hub", "h.io"),
        ("disc", "istiod.istio-system.svc:15012"),
    ] {
        assert_eq!(a[key], json!(want), "{key}");
    }
    // kube-inject prints the revision as given (empty for the default).
    let out = inject(&engine, &pod(), Mode::KubeInject).unwrap();
    assert_eq!(out["metadata"]["annotations"]["rev"], json!(""));
    // `.NativeSidecars` is the global decision, as Istio's `inject.go` `RunTemplate` fills
    // `SidecarTemplateData`: the pod's annotation only moves a user `istio-proxy`, so it changes nothing
    // here (found by the template differential, seed 102 case 4110).
    let mut p = pod();
    p["metadata"]["annotations"]["sidecar.istio.io/nativeSidecar"] = json!("false");
    let out = inject(&engine, &p, Mode::Webhook).unwrap();
    assert_eq!(out["metadata"]["annotations"]["native"], json!("true"));
    let engine = Engine::new(settings_native(config, values, false).unwrap());
    p["metadata"]["annotations"]["sidecar.istio.io/nativeSidecar"] = json!("true");
    let out = inject(&engine, &p, Mode::Webhook).unwrap();
    assert_eq!(out["metadata"]["annotations"]["native"], json!("false"));
}

#[test]
fn a_user_text_under_a_built_in_name_replaces_the_built_in() {
    let overlay = "metadata:\n  labels:\n    mine: \"yes\"\n";
    let config = json!({"policy": "enabled", "templates": {"sidecar": overlay}});
    let values = json!({"sidecarInjectorWebhook": {"templates": {"sidecar": overlay}}});
    let engine = Engine::new(settings(config, values).unwrap());
    let mut p = pod();
    p["metadata"]["annotations"] = json!({});
    let out = inject(&engine, &p, Mode::Webhook).unwrap();
    assert_eq!(out["metadata"]["labels"]["mine"], json!("yes"));
    let all = serde_json::to_string(&out).unwrap();
    assert!(!all.contains("istio-proxy"), "{all}");
}

#[test]
fn execution_errors_and_bad_output_fail_the_pod_with_istios_prefix() {
    let config = json!({"policy": "enabled", "templates": {
        "t": "{{ .Nope }}", "y": "spec: {{ \"[\" }}", "l": "{{ range $i := 100000000 }}x{{ end }}"}});
    let engine = Engine::new(settings(config, json!({})).unwrap());
    let run = |name: &str| {
        let mut p = pod();
        p["metadata"]["annotations"]["inject.istio.io/templates"] = json!(name);
        inject(&engine, &p, Mode::Webhook).unwrap_err().to_string()
    };
    let e = run("t");
    assert!(
        e.starts_with("failed to run injection template: ") && e.contains("Nope"),
        "{e}"
    );
    let e = run("y");
    assert!(
        e.contains("failed applying injection overlay: strategic merge: Invalid JSON document"),
        "{e}"
    );
    let e = run("l");
    assert!(e.contains("limit") && e.contains("exceeded"), "{e}");
    // The not-found message lists the user templates too.
    let e = run("zzz");
    assert!(
        e.contains("have gateway, grpc-agent, grpc-simple, l, sidecar, t, y"),
        "{e}"
    );
}

#[test]
fn the_spire_overlay_merges_into_the_proxy_only_without_native_sidecars() {
    let proxies = |native: bool| {
        let config = json!({"policy": "enabled", "templates": {"spire": SPIRE}});
        let values = json!({"sidecarInjectorWebhook": {"templates": {"spire": SPIRE}}});
        let s = settings_native(config, values, native).unwrap();
        let mut p = pod();
        p["metadata"]["annotations"]["inject.istio.io/templates"] = json!("sidecar,spire");
        let out = inject(&Engine::new(s), &p, Mode::Webhook).unwrap();
        let csi = test_support::pods::named(&out["spec"]["volumes"], "workload-socket").unwrap()
            ["csi"]["driver"]
            .clone();
        assert_eq!(csi, json!("csi.spiffe.io"));
        let named = |list: &str| -> Vec<Value> {
            out["spec"][list]
                .as_array()
                .map(|l| {
                    l.iter()
                        .filter(|c| c["name"] == json!("istio-proxy"))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default()
        };
        (named("initContainers"), named("containers"))
    };
    // Native: the sidecar's proxy is an init container; the overlay adds an image-less stub to
    // `containers`, as Istio's golden has it.
    let (init, containers) = proxies(true);
    assert_eq!((init.len(), containers.len()), (1, 1));
    assert!(containers[0].get("image").is_none(), "{}", containers[0]);
    // Not native: one proxy, its workload-socket mount made read-only.
    let (init, containers) = proxies(false);
    assert_eq!((init.len(), containers.len()), (0, 1));
    assert!(containers[0]["image"].is_string());
    let mount = containers[0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == json!("/var/run/secrets/workload-spiffe-uds"))
        .unwrap()
        .clone();
    assert_eq!(mount["readOnly"], json!(true));
}

/// Istio's `applyOverlayYAML` decodes the merged pod into a `corev1.Pod`: a rendered field of the wrong type
/// fails the pod instead of wiping the pod's metadata or its app container.
#[test]
fn a_rendered_pod_of_the_wrong_type_fails_the_pod_naming_the_field_and_the_value() {
    let config = json!({"policy": "enabled", "templates": {
        "meta": "{{ if true }}metadata: [1, 2, 3]{{ end }}\n",
        "containers": "spec: {containers: {{ quote \"\" }}}\n",
        "env": "spec:\n  containers:\n  - name: {{ .ObjectMeta.Name }}\n    env:\n    - name: A\n      value: 8080\n",
        "ok": "spec:\n  containers:\n  - name: app\n    resources: {limits: {cpu: {{ 1 }}}}\n    ports: [{containerPort: 8080.0}]\n  volumes: [{name: v, emptyDir: {sizeLimit: 1}}]\n",
    }});
    let engine = Engine::new(settings(config, json!({})).unwrap());
    let run = |name: &str| {
        let mut p = pod();
        p["metadata"]["annotations"]["inject.istio.io/templates"] = json!(name);
        inject(&engine, &p, Mode::Webhook)
    };
    for (name, want) in [
        (
            "meta",
            "failed to run injection template: failed applying injection overlay: unmarshal patched pod: \
             template \"meta\": metadata: expected an object, got [1,2,3]",
        ),
        (
            "containers",
            "failed to run injection template: failed applying injection overlay: unmarshal patched pod: \
             template \"containers\": spec.containers: expected a list, got \"\"",
        ),
        (
            "env",
            "failed to run injection template: failed applying injection overlay: unmarshal patched pod: \
             template \"env\": spec.containers[0].env[0].value: expected a string, got 8080",
        ),
    ] {
        assert_eq!(run(name).unwrap_err().to_string(), want);
    }
    // What Go's decoder takes (a Quantity as a number, a whole float as an integer) still merges.
    let injected = run("ok").expect("accepted");
    let app = &injected["spec"]["containers"][0];
    assert_eq!(app["name"], "app");
    assert_eq!(app["resources"]["limits"]["cpu"], json!(1));
}

#[test]
fn a_static_pod_of_the_wrong_type_is_refused_at_load() {
    let config = json!({"policy": "enabled", "templates": {"t": "metadata: [1, 2, 3]\n"}});
    let err = settings(config, json!({})).unwrap_err().to_string();
    assert!(
        err.contains("config.yaml")
            && err.contains("templates.t")
            && err.contains("static template \"t\" does not decode as a Pod: metadata: expected an object, got [1,2,3]"),
        "{err}"
    );
}

/// Istio's own texts print YAML that the block reader (`sidecar_core::yaml_block`) reads, and reads as
/// the full parser does: the fast path is the one their pods take.
#[test]
fn istios_texts_print_yaml_the_block_reader_reads() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/istio/releases");
    let pods = [
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "x"}},
               "spec": {"containers": [{"name": "app", "image": "a:1", "ports": [{"containerPort": 80}]}]}}),
        json!({"metadata": {"name": "p", "namespace": "ns", "annotations": {
                   "sidecar.istio.io/userVolume": "[{\"name\":\"v\",\"emptyDir\":{}}]",
                   "sidecar.istio.io/userVolumeMount": "[{\"name\":\"v\",\"mountPath\":\"/v\"}]",
                   "sidecar.istio.io/proxyCPU": "200m",
                   "traffic.sidecar.istio.io/excludeInboundPorts": "9000"}},
               "spec": {"containers": [
                   {"name": "a", "image": "a", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 9000}],
                    "readinessProbe": {"httpGet": {"path": "/r", "port": 80}}},
                   {"name": "b", "image": "b"}]}}),
    ];
    let mut read = 0;
    for release in ["1.29.6", "1.30.3", "1.31.0-rc.0", "release-1.30-9739e10"] {
        for file in [
            "injection-template.yaml",
            "gateway-injection-template.yaml",
            "grpc-agent.yaml",
            "grpc-simple.yaml",
        ] {
            let text = std::fs::read_to_string(format!("{dir}/{release}/{file}")).unwrap();
            let t = Template::parse("t", text.trim()).unwrap();
            for pod in &pods {
                for native in [true, false] {
                    let root = json!({"TypeMeta": {"kind": "Pod", "apiVersion": "v1"},
                        "DeploymentMeta": {"name": "p", "namespace": "ns"},
                        "ObjectMeta": pod["metadata"], "Spec": pod["spec"],
                        "ProxyConfig": crate::defaults::builtin_proxy_config(),
                        "MeshConfig": crate::defaults::builtin_mesh(), "Values": crate::defaults::builtin_values(),
                        "Revision": "default", "NativeSidecars": native, "ProxyImage": "h/proxyv2:1",
                        "ProxyInitImage": "h/proxyv2:1", "ProxyUID": 1337, "ProxyGID": 1337,
                        "InboundTrafficPolicyMode": "passthrough", "CompliancePolicy": ""});
                    let out = t.execute(&root, &Limits::default()).unwrap();
                    let fast = sidecar_core::yaml_block::parse(&out).unwrap_or_else(|| {
                        panic!("{release}/{file}: outside the block reader's subset:\n{out}")
                    });
                    let full = sidecar_core::yaml::parse_last_key_wins_full(&out).unwrap();
                    assert_eq!(fast, full, "{release}/{file}:\n{out}");
                    read += 1;
                }
            }
        }
    }
    assert_eq!(read, 64);
}
