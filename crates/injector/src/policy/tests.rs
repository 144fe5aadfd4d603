use serde_json::{json, Value};

use super::params::{self, ParamsError};
use super::*;
use inject::config::Settings;

fn engine(values: Value, mesh: Value, config: Value, native: bool) -> Engine {
    fn doc<'a>(name: &'a str, v: &'a Value) -> Option<(&'a str, &'a Value)> {
        (!v.is_null()).then_some((name, v))
    }
    let settings = Settings::from_documents(
        doc("values", &values),
        doc("mesh", &mesh),
        doc("config", &config),
        native,
        "",
        "",
    )
    .unwrap();
    Engine::new(settings)
}

fn default_engine() -> Engine {
    engine(Value::Null, Value::Null, Value::Null, true)
}

fn spec(e: &Engine) -> Result<ParamsSpec, ParamsError> {
    params::compile(e, "/inject", &[])
}

fn compiled(flags: &[&str], api: ApiVersion) -> Compiled {
    let mut wc = webhook_config::Args::for_revision("", false).unwrap();
    let mut it = flags.iter();
    while let Some(f) = it.next() {
        match *f {
            "--tag" => wc.scope.tags.push(it.next().unwrap().to_string()),
            "--revision" => wc.revision = Some(it.next().unwrap().to_string()),
            other => panic!("{other}"),
        }
    }
    compile(&default_engine(), &wc, &[], api).unwrap()
}

#[test]
fn the_default_configuration_compiles_to_a_crd_params_a_policy_and_a_binding_per_entry() {
    let c = compiled(&[], ApiVersion::V1);
    assert_eq!(
        c.crd["metadata"]["name"],
        "injectionparams.policy.sidecar-inject.io"
    );
    assert_eq!(c.params["kind"], "InjectionParams");
    assert_eq!(c.params["metadata"]["name"], "sidecar-injector");
    assert_eq!(c.policy["apiVersion"], "admissionregistration.k8s.io/v1");
    assert_eq!(c.policy["spec"]["failurePolicy"], "Ignore");
    let conditions: Vec<&str> = c.policy["spec"]["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    let rules: Vec<&str> = subset::rules().iter().map(|r| r.name).collect();
    assert_eq!(conditions, rules);
    let names: Vec<&str> = c
        .bindings
        .iter()
        .map(|b| b["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "sidecar-injector-rev-namespace",
            "sidecar-injector-rev-object",
            "sidecar-injector-namespace",
            "sidecar-injector-object"
        ]
    );
    // Each binding selects what the webhook entry of the same name selects.
    let mwcs = webhook_config::Args::for_revision("", false)
        .unwrap()
        .configurations(None)
        .unwrap();
    let entries = mwcs[0].webhooks.as_ref().unwrap();
    for (b, w) in c.bindings.iter().zip(entries) {
        let r = &b["spec"]["matchResources"];
        assert_eq!(
            r["namespaceSelector"],
            serde_json::to_value(&w.namespace_selector).unwrap()
        );
        assert_eq!(
            r["objectSelector"],
            serde_json::to_value(&w.object_selector).unwrap()
        );
        assert_eq!(b["spec"]["policyName"], "sidecar-injector");
        assert_eq!(
            b["spec"]["paramRef"],
            json!({"name": "sidecar-injector", "parameterNotFoundAction": "Allow"})
        );
    }
    // The YAML stream holds the objects in order.
    let yaml = c.yaml().unwrap();
    assert_eq!(yaml.matches("\n---\n").count(), 6, "{yaml}");
}

/// `injector policy`'s flags alone, as the command line parses them.
#[derive(Debug, clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

#[test]
fn the_api_version_is_v1_unless_v1beta1_is_asked_for() {
    use clap::Parser as _;
    // v1: GA and served by default from Kubernetes 1.36, the pinned release.
    let default = Cli::try_parse_from(["policy"]).unwrap();
    assert_eq!(default.args.api_version, ApiVersion::V1);
    // v1beta1 stays selectable for 1.34 and 1.35 clusters.
    let beta = Cli::try_parse_from(["policy", "--api-version", "v1beta1"]).unwrap();
    assert_eq!(beta.args.api_version, ApiVersion::V1beta1);
    let err = Cli::try_parse_from(["policy", "--api-version", "v1alpha1"]).unwrap_err();
    assert!(err.to_string().contains("v1alpha1"), "{err}");
}

#[test]
fn v1beta1_is_one_flag_away_and_a_tag_adds_its_bindings() {
    let c = compiled(
        &["--revision", "canary", "--tag", "prod"],
        ApiVersion::V1beta1,
    );
    for o in std::iter::once(&c.policy).chain(&c.bindings) {
        assert_eq!(o["apiVersion"], "admissionregistration.k8s.io/v1beta1");
    }
    assert_eq!(c.policy["metadata"]["name"], "sidecar-injector-canary");
    let tagged: Vec<(&str, &str)> = c
        .bindings
        .iter()
        .map(|b| {
            (
                b["metadata"]["name"].as_str().unwrap(),
                b["metadata"]["labels"]["istio.io/tag"]
                    .as_str()
                    .unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        tagged,
        [
            ("sidecar-injector-canary-rev-namespace", ""),
            ("sidecar-injector-canary-rev-object", ""),
            ("sidecar-injector-tag-prod-rev-namespace", "prod"),
            ("sidecar-injector-tag-prod-rev-object", "prod"),
        ]
    );
    let prod = &c.bindings[2]["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0];
    assert_eq!(prod["values"], json!(["prod"]));
}

#[test]
fn the_policys_text_does_not_depend_on_the_configuration() {
    let a = compile(
        &default_engine(),
        &webhook_config::Args::for_revision("", false).unwrap(),
        &[],
        ApiVersion::V1beta1,
    )
    .unwrap();
    let b = compile(
        &engine(
            json!({"global": {"proxy": {"logLevel": "debug"}}, "pilot": {"cni": {"enabled": true}}}),
            json!({"enablePrometheusMerge": false}),
            Value::Null,
            false,
        ),
        &webhook_config::Args::for_revision("", false).unwrap(),
        &[],
        ApiVersion::V1beta1,
    )
    .unwrap();
    assert_eq!(a.policy, b.policy);
    assert_ne!(a.params, b.params);
}

/// The variant of `mode` a pod without `sidecar.istio.io/nativeSidecar` gets.
fn chosen<'a>(s: &'a ParamsSpec, mode: &str) -> &'a params::Variant {
    let v = &s.variants[mode];
    if s.native {
        &v.native
    } else {
        &v.classic
    }
}

#[test]
fn the_settings_of_the_per_pod_paths_are_read_off_the_engine() {
    let s = spec(&default_engine()).unwrap();
    assert!(s.native && !s.proxy_first);
    assert_eq!(s.status_port, 15020);
    assert!(s.rewrite_probes && s.prometheus_merge && !s.tunnel_label);
    assert_eq!(s.default_mode, "REDIRECT");
    assert_eq!(s.revision, "default");
    assert_eq!(s.decision.policy, "enabled");
    assert!(s.excluded_namespaces.contains(&"kube-system".to_string()));
    assert_eq!(s.variants.len(), 3);
    let redirect = chosen(&s, "REDIRECT");
    assert_eq!(redirect.init.as_ref().unwrap()["name"], "istio-init");
    assert_eq!(redirect.proxy["name"], "istio-proxy");
    assert!(redirect.proxy.get("env").is_none());
    let names = |l: &[Value]| -> Vec<String> {
        l.iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(&redirect.proxy_env.head).last().unwrap(),
        "PROXY_CONFIG"
    );
    assert_eq!(names(&redirect.proxy_env.middle)[0], "GOMEMLIMIT");
    assert_eq!(
        names(&redirect.proxy_env.tail).last().unwrap(),
        "TRUST_DOMAIN"
    );
    assert!(chosen(&s, "NONE").init.is_none());
    let tproxy = chosen(&s, "TPROXY");
    assert_eq!(
        tproxy.proxy["securityContext"]["capabilities"]["add"],
        json!(["NET_ADMIN"])
    );
    for (mode, v) in s.variants.keys().map(|m| (m, chosen(&s, m))) {
        let status = v.annotations["sidecar.istio.io/status"].as_str().unwrap();
        assert_eq!(status.contains("istio-init"), mode != "NONE", "{mode}");
    }
    assert_eq!(
        names(&s.volumes),
        [
            "workload-socket",
            "credential-socket",
            "workload-certs",
            "istio-envoy",
            "istio-data",
            "istio-podinfo",
            "istio-token",
            "istiod-ca-cert",
            "istio-ca-crl"
        ]
    );

    // Without native sidecars, holding the application; CNI; no probe rewrite, no metrics merge.
    let s = spec(&engine(
        json!({"global": {"proxy": {"holdApplicationUntilProxyStarts": true}},
               "pilot": {"cni": {"enabled": true}},
               "sidecarInjectorWebhook": {"rewriteAppHTTPProbe": false}}),
        json!({"enablePrometheusMerge": false}),
        Value::Null,
        false,
    ))
    .unwrap();
    assert!(!s.native && s.proxy_first);
    assert!(!s.rewrite_probes && !s.prometheus_merge);
    let redirect = chosen(&s, "REDIRECT");
    assert_eq!(redirect.init.as_ref().unwrap()["name"], "istio-validation");
    for (mode, v) in s.variants.keys().map(|m| (m, chosen(&s, m))) {
        assert_eq!(
            v.annotations["sidecar.istio.io/interceptionMode"], *mode,
            "CNI writes the mode"
        );
    }
}

#[test]
fn configurations_the_policy_cannot_reproduce_are_refused_naming_why() {
    let err = spec(&engine(
        Value::Null,
        Value::Null,
        json!({"defaultTemplates": ["sidecar", "grpc-agent"]}),
        true,
    ))
    .unwrap_err();
    assert!(matches!(err, ParamsError::Templates { .. }), "{err}");
    assert!(err.to_string().contains("grpc-agent"), "{err}");
    let err = spec(&engine(
        json!({"global": {"mountMtlsCerts": true}}),
        Value::Null,
        Value::Null,
        true,
    ))
    .unwrap_err();
    assert!(err.to_string().contains("spec.serviceAccountName"), "{err}");
    let err = spec(&engine(
        Value::Null,
        json!({"extensionProviders": [{"name": "otel", "opentelemetry": {"service": "c", "port": 4317,
               "serviceAttributeEnrichment": "OTEL_SEMANTIC_CONVENTIONS"}}]}),
        Value::Null,
        true,
    ))
    .unwrap_err();
    assert!(
        err.to_string().contains("OTEL_RESOURCE_ATTRIBUTES"),
        "{err}"
    );
}

#[test]
fn a_configured_sidecar_text_compiles_only_when_it_is_the_compiled_templates_own() {
    let text = inject::template_source::COMPILED_FROM
        .iter()
        .find(|(name, _, _)| *name == "sidecar")
        .map(|(_, _, text)| *text)
        .unwrap();
    let config = |templates: Value| json!({"policy": "enabled", "templates": templates});
    let with_text = |t: &str| {
        engine(
            Value::Null,
            Value::Null,
            config(json!({"sidecar": t})),
            true,
        )
    };
    // The text the compiled template was built from renders compiled: the same params as no text.
    let without = spec(&engine(Value::Null, Value::Null, config(json!({})), true)).unwrap();
    assert!(spec(&with_text(text)).unwrap() == without);
    // Any other text (here one more environment entry) renders through the evaluator: refused.
    let other = text.replacen(
        "- name: GOMAXPROCS",
        "- name: EXTRA\n      value: x\n    - name: GOMAXPROCS",
        1,
    );
    assert_ne!(other, text);
    let err = spec(&with_text(&other)).unwrap_err();
    assert!(matches!(err, ParamsError::EvaluatedText { .. }), "{err}");
    assert!(err.to_string().contains("templates.sidecar"), "{err}");
}

fn pod(meta: Value, spec: Value) -> Value {
    let mut m = meta;
    if m.get("namespace").is_none() {
        m["namespace"] = json!("apps");
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": spec})
}

fn app() -> Value {
    json!({"containers": [{"name": "app", "image": "app",
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}]})
}

#[test]
fn the_subset_rules_decide_in_their_order() {
    let e = default_engine();
    let s = spec(&e).unwrap();
    let unmet = |p: &Value| covers(&e, &s, p).err().map(|r| r.name);
    assert_eq!(unmet(&pod(json!({"name": "p"}), app())), None);
    let cases = [
        (
            pod(json!({"name": "p", "namespace": "kube-system"}), app()),
            "namespace",
        ),
        (
            pod(
                json!({"annotations": {"sidecar.istio.io/status": "{}"}}),
                app(),
            ),
            "not-injected",
        ),
        (
            pod(
                json!({"annotations": {"policy.sidecar-inject.io/injected": "default"}}),
                app(),
            ),
            "not-injected",
        ),
        (
            pod(
                json!({}),
                json!({"hostNetwork": true, "containers": [{"name": "a"}]}),
            ),
            "not-host-network",
        ),
        (
            pod(
                json!({"labels": {"sidecar.istio.io/inject": "false"}}),
                app(),
            ),
            "injects",
        ),
        (
            pod(json!({"labels": {"topology.istio.io/network": "n"}}), app()),
            "labels",
        ),
        (
            pod(
                json!({"annotations": {"sidecar.istio.io/proxyImageType": "debug"}}),
                app(),
            ),
            "annotations",
        ),
        (
            pod(
                json!({"annotations": {"prometheus_io_port": "9090"}}),
                app(),
            ),
            "annotations",
        ),
        (
            pod(
                json!({"annotations": {"apm.datadoghq.com/env": "{}"}}),
                app(),
            ),
            "annotations",
        ),
        (
            pod(
                json!({"annotations": {"prometheus.io/port": "15090"}}),
                app(),
            ),
            "prometheus",
        ),
        (
            pod(
                json!({"annotations": {"prometheus.io/path": "/a\"b"}}),
                app(),
            ),
            "prometheus",
        ),
        (
            pod(
                json!({}),
                json!({"containers": [{"name": "istio-proxy", "image": "x"}]}),
            ),
            "names",
        ),
        (
            pod(
                json!({}),
                json!({"containers": [{"name": "a"}], "volumes": [{"name": "istio-envoy"}]}),
            ),
            "names",
        ),
        (
            pod(
                json!({}),
                json!({"containers": [{"name": "a", "readinessProbe": {"httpGet": {"path": "/\n", "port": 1}}}]}),
            ),
            "strings",
        ),
        (
            pod(
                json!({"ownerReferences": [{"kind": "Répl", "name": "x", "controller": true}]}),
                app(),
            ),
            "workload",
        ),
    ];
    for (p, want) in cases {
        assert_eq!(unmet(&p), Some(want), "{p}");
    }
    // What the engine does not read passes: other annotations and labels, Prometheus keys it ignores,
    // the inject annotation, exec probes, a metrics port equal to the status port.
    for p in [
        pod(
            json!({"labels": {"app": "a", "x": "y"}, "annotations": {"prometheus.io/scheme": "https",
                "sidecar.istio.io/inject": "true", "example.com/a": "\"quoted\"",
                "sidecar.istio.io/proxyImage": "example/proxy:1"}}),
            app(),
        ),
        pod(
            json!({"annotations": {"prometheus.io/port": "15020", "prometheus.io/scrape": "true"}}),
            json!({"containers": [{"name": "a", "livenessProbe": {"exec": {"command": ["\"x\""]}}}]}),
        ),
    ] {
        assert_eq!(unmet(&p), None, "{p}");
    }
}

#[test]
fn a_policy_disabled_or_selected_out_configuration_injects_only_what_opts_in() {
    let e = engine(
        Value::Null,
        Value::Null,
        json!({"policy": "disabled", "alwaysInjectSelector": [{"matchLabels": {"mesh": "yes"}}]}),
        true,
    );
    let s = spec(&e).unwrap();
    assert_eq!(s.decision.policy, "disabled");
    assert_eq!(s.decision.always.len(), 1);
    let unmet = |labels: Value| {
        covers(&e, &s, &pod(json!({"labels": labels}), app()))
            .err()
            .map(|r| r.name)
    };
    assert_eq!(unmet(json!({})), Some("injects"));
    assert_eq!(unmet(json!({"mesh": "yes"})), None);
    assert_eq!(unmet(json!({"sidecar.istio.io/inject": "true"})), None);
}

#[test]
fn proxy_config_resources_leave_their_namespaces_to_the_webhook() {
    let resources = inject::proxy_config_resources::ProxyConfigResources::from_objects(
        vec![
            json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "ProxyConfig",
                   "metadata": {"name": "mesh", "namespace": "istio-system"}, "spec": {"concurrency": 2}}),
            json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "ProxyConfig",
                   "metadata": {"name": "ns", "namespace": "apps"}, "spec": {"concurrency": 3}}),
        ],
        "test",
    )
    .unwrap();
    assert_eq!(
        resources.namespaces_with_own_config("istio-system"),
        ["apps"]
    );
    let with_workload = inject::proxy_config_resources::ProxyConfigResources::from_objects(
        vec![
            json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "ProxyConfig",
                   "metadata": {"name": "w", "namespace": "istio-system"},
                   "spec": {"selector": {"matchLabels": {"a": "b"}}, "concurrency": 2}}),
        ],
        "test",
    )
    .unwrap();
    assert_eq!(
        with_workload.namespaces_with_own_config("istio-system"),
        ["istio-system"]
    );
    let e = default_engine();
    let s = params::compile(&e, "/inject", &["apps".to_string()]).unwrap();
    let r = covers(&e, &s, &pod(json!({}), app())).unwrap_err();
    assert_eq!(r.name, "namespace");
}

// The per-pod parts the CEL computes (`shared::policy::cel`), each checked against the engine: the
// params' fixed pieces with the pod's annotations put where the CEL puts them give what the webhook
// renders. The differential through the API server checks the CEL text itself.

/// The webhook's injection of a Deployment pod of `app()` with `annotations`.
fn webhook_pod(e: &Engine, annotations: Value) -> Value {
    let mut p = pod(
        json!({"generateName": "web-5d4b7c9f8-", "labels": {"app": "web", "pod-template-hash": "5d4b7c9f8"},
               "annotations": annotations,
               "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4b7c9f8",
                                    "uid": "u", "controller": true}]}),
        app(),
    );
    if p["metadata"]["annotations"] == json!({}) {
        p["metadata"].as_object_mut().unwrap().remove("annotations");
    }
    crate::shared::webhook_request::inject(e, &p, None, "/inject").unwrap()
}

/// The container `name` of an injected pod, and whether it is an init container.
fn injected_container<'a>(p: &'a Value, name: &str) -> (&'a Value, bool) {
    for (list, init) in [("initContainers", true), ("containers", false)] {
        if let Some(c) = p["spec"][list]
            .as_array()
            .and_then(|l| l.iter().find(|c| c["name"] == name))
        {
            return (c, init);
        }
    }
    panic!("no {name} in {p}")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn per_pod_init_args_put_the_traffic_annotations_in_the_params_slots() {
    let e = default_engine();
    let s = spec(&e).unwrap();
    let a = chosen(&s, "REDIRECT").init_args.clone().unwrap();
    // No annotation: the params' arguments as they are.
    let plain = webhook_pod(&e, json!({}));
    assert_eq!(
        strings(&injected_container(&plain, "istio-init").0["args"]),
        a.assemble()
    );
    // Every traffic annotation and the agent's log level, in the CEL's `initArgs` order: `-i -x -b`
    // replaced, `-d` Envoy's ports, the annotation's and the status port, `-q -o` replaced, `-k` from the
    // reroute annotation over kubevirt's, `-c`, then the log level.
    let annotated = webhook_pod(
        &e,
        json!({
            "traffic.sidecar.istio.io/includeOutboundIPRanges": "10.0.0.0/8",
            "traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.1.0.0/16,10.2.0.0/16",
            "traffic.sidecar.istio.io/includeInboundPorts": "80,81",
            "traffic.sidecar.istio.io/excludeInboundPorts": "9000",
            "traffic.sidecar.istio.io/includeOutboundPorts": "443",
            "traffic.sidecar.istio.io/excludeOutboundPorts": "5432",
            "traffic.sidecar.istio.io/kubevirtInterfaces": "net0",
            "istio.io/reroute-virtual-interfaces": "net1,net2",
            "traffic.sidecar.istio.io/excludeInterfaces": "eth1",
            "sidecar.istio.io/agentLogLevel": "debug",
        }),
    );
    let mut want = a.head.clone();
    want.extend(
        [
            "-i",
            "10.0.0.0/8",
            "-x",
            "10.1.0.0/16,10.2.0.0/16",
            "-b",
            "80,81",
            "-d",
            &format!("15090,15021,9000,{}", s.init_status_port),
            "-q",
            "443",
            "-o",
            "5432",
            "-k",
            "net1,net2",
            "-c",
            "eth1",
            "--log_output_level=debug",
        ]
        .map(String::from),
    );
    want.extend(a.tail.iter().cloned());
    assert_eq!(
        strings(&injected_container(&annotated, "istio-init").0["args"]),
        want
    );
    // An excluded-ports annotation that already names the status port, or is empty.
    for (ann, d) in [
        (
            s.init_status_port.clone(),
            format!("15090,15021,{}", s.init_status_port),
        ),
        (String::new(), format!("15090,15021,{}", s.init_status_port)),
    ] {
        let p = webhook_pod(
            &e,
            json!({"traffic.sidecar.istio.io/excludeInboundPorts": ann}),
        );
        let args = strings(&injected_container(&p, "istio-init").0["args"]);
        let at = args.iter().position(|x| x == "-d").unwrap();
        assert_eq!(args[at + 1], d, "{ann:?}");
    }
}

#[test]
fn per_pod_proxy_args_replace_the_three_log_levels_in_place() {
    let e = default_engine();
    let s = spec(&e).unwrap();
    let fixed = strings(&chosen(&s, "REDIRECT").proxy["args"]);
    let p = webhook_pod(
        &e,
        json!({"sidecar.istio.io/logLevel": "debug",
               "sidecar.istio.io/componentLogLevel": "misc:error,rbac:debug",
               "sidecar.istio.io/agentLogLevel": "default:debug"}),
    );
    let want: Vec<String> = fixed
        .iter()
        .map(|a| {
            if a.starts_with("--proxyLogLevel=") {
                "--proxyLogLevel=debug".to_string()
            } else if a.starts_with("--proxyComponentLogLevel=") {
                "--proxyComponentLogLevel=misc:error,rbac:debug".to_string()
            } else if a.starts_with("--log_output_level=") {
                "--log_output_level=default:debug".to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    assert_ne!(want, fixed, "the CEL's three slots are in the params' args");
    assert_eq!(
        strings(&injected_container(&p, "istio-proxy").0["args"]),
        want
    );
    // Without the annotations, the params' args as they are.
    let plain = webhook_pod(&e, json!({}));
    assert_eq!(
        strings(&injected_container(&plain, "istio-proxy").0["args"]),
        fixed
    );
}

#[test]
fn per_pod_resources_replace_both_containers_resources_with_the_annotations_alone() {
    let e = default_engine();
    let s = spec(&e).unwrap();
    let v = chosen(&s, "REDIRECT");
    // The configuration's resources are in the params (what a pod without annotations gets).
    assert!(v.proxy["resources"]["requests"].is_object(), "{}", v.proxy);
    for (annotations, want) in [
        (
            json!({"sidecar.istio.io/proxyCPU": "250m"}),
            json!({"requests": {"cpu": "250m"}}),
        ),
        (
            json!({"sidecar.istio.io/proxyMemoryLimit": "1Gi"}),
            json!({"limits": {"memory": "1Gi"}}),
        ),
        (
            json!({"sidecar.istio.io/proxyCPU": "1", "sidecar.istio.io/proxyMemory": "64Mi",
                   "sidecar.istio.io/proxyCPULimit": "2", "sidecar.istio.io/proxyMemoryLimit": "128Mi"}),
            json!({"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "2", "memory": "128Mi"}}),
        ),
    ] {
        let p = webhook_pod(&e, annotations.clone());
        for name in ["istio-init", "istio-proxy"] {
            assert_eq!(
                injected_container(&p, name).0["resources"],
                want,
                "{name} {annotations}"
            );
        }
    }
}

#[test]
fn the_native_sidecar_choice_is_the_annotation_when_set_else_the_configuration() {
    for native in [true, false] {
        let e = engine(Value::Null, Value::Null, Value::Null, native);
        let s = spec(&e).unwrap();
        assert_eq!(s.native, native);
        // The CEL's `native`: a non-empty annotation decides (anything but "false" is native).
        for (ann, want) in [
            (None, native),
            (Some(""), native),
            (Some("true"), true),
            (Some("false"), false),
            (Some("x"), true),
        ] {
            let annotations = match ann {
                Some(a) => json!({"sidecar.istio.io/nativeSidecar": a}),
                None => json!({}),
            };
            let p = webhook_pod(&e, annotations);
            let (proxy, in_init) = injected_container(&p, "istio-proxy");
            assert_eq!(in_init, want, "configuration {native}, annotation {ann:?}");
            // And the variant the CEL picks is the one the webhook rendered.
            let variant = &s.variants["REDIRECT"];
            let v = if want {
                &variant.native
            } else {
                &variant.classic
            };
            assert_eq!(proxy["image"], v.proxy["image"]);
            assert_eq!(
                p["metadata"]["annotations"]["sidecar.istio.io/status"],
                v.annotations["sidecar.istio.io/status"],
                "configuration {native}, annotation {ann:?}"
            );
        }
    }
}
