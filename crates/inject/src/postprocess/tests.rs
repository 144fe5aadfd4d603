use super::*;
use serde_json::json;

fn mesh() -> Value {
    json!({"defaultConfig": {"statusPort": 15020}, "enablePrometheusMerge": true})
}

fn values() -> Value {
    json!({"sidecarInjectorWebhook": {"rewriteAppHTTPProbe": true}, "global": {"proxy": {"holdApplicationUntilProxyStarts": false}}})
}

struct Env {
    values: Value,
    mesh: Value,
    proxy_config: Value,
    injected: BTreeMap<String, String>,
    url_env: BTreeMap<String, String>,
    revision: String,
}

impl Env {
    fn new() -> Env {
        Env {
            values: values(),
            mesh: mesh(),
            proxy_config: json!({}),
            injected: BTreeMap::new(),
            url_env: BTreeMap::new(),
            revision: String::new(),
        }
    }
    fn params(&self) -> PostProcessParams<'_> {
        PostProcessParams {
            values: &self.values,
            mesh: &self.mesh,
            proxy_config: &self.proxy_config,
            injected_annotations: &self.injected,
            revision: &self.revision,
            url_env: &self.url_env,
        }
    }
}

fn native_template() -> Value {
    let volumes: Vec<Value> = [
        "workload-socket",
        "credential-socket",
        "workload-certs",
        "istio-envoy",
        "istio-data",
        "istio-podinfo",
        "istio-token",
        "istiod-ca-cert",
        "istio-ca-crl",
    ]
    .iter()
    .map(|n| json!({ "name": n }))
    .collect();
    json!({"spec": {
        "initContainers": [{"name": "istio-init"}, {"name": "istio-proxy"}],
        "containers": [],
        "volumes": volumes
    }})
}

fn names(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().map(name_of).collect())
        .unwrap_or_default()
}

fn env_names(c: &Value) -> Vec<&str> {
    names(&c["env"])
}

fn env_value<'a>(c: &'a Value, name: &str) -> Option<&'a str> {
    c["env"]
        .as_array()?
        .iter()
        .find(|e| name_of(e) == name)?
        .get("value")?
        .as_str()
}

#[test]
fn sanitized_keys() {
    for k in [
        "prometheus.io/scrape",
        "prometheus.io.scrape",
        "prometheus-io/scrape",
        "prometheus_io_scrape",
    ] {
        assert!(sanitizes_to(k, PROM_SCRAPE), "{k}");
    }
    for k in [
        "prometheus.io/scrapes",
        "prometheus.io/scrap",
        "Prometheus.io/scrape",
        "prometheus.iö/scrape",
    ] {
        assert!(!sanitizes_to(k, PROM_SCRAPE), "{k}");
    }
    assert!(sanitizes_to("prometheus.io/päth", "prometheus_io_p_th"));
}

#[test]
fn status_annotation_strings() {
    assert_eq!(
        crate::status::build(&native_template(), ""),
        r#"{"initContainers":["istio-init","istio-proxy"],"containers":null,"volumes":["workload-socket","credential-socket","workload-certs","istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert","istio-ca-crl"],"imagePullSecrets":null,"revision":"default"}"#
    );
    let non_native = json!({"spec": {"initContainers": [{"name": "istio-init"}],
        "containers": [{"name": "istio-proxy"}], "imagePullSecrets": [{"name": "barSecret"}]}});
    assert_eq!(
        crate::status::build(&non_native, "canary"),
        r#"{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":null,"imagePullSecrets":["barSecret"],"revision":"canary"}"#
    );
}

#[test]
fn reorder_rules() {
    let env = Env::new();
    let mut pod = json!({"spec": {"containers": [{"name": "istio-proxy"}, {"name": "hello"}, {"name": "world"}],
        "initContainers": [{"name": "istio-init"}, {"name": "enable-core-dump"}, {"name": "first"}, {"name": "istio-validation"}]}});
    reorder_pod(&mut pod, &env.params());
    assert_eq!(
        names(&pod["spec"]["containers"]),
        ["hello", "world", "istio-proxy"]
    );
    assert_eq!(
        names(&pod["spec"]["initContainers"]),
        [
            "istio-validation",
            "first",
            "istio-init",
            "enable-core-dump"
        ]
    );

    // hold (from the effective ProxyConfig, e.g. the pod's proxy.istio.io/config) puts the proxy first
    let mut env = Env::new();
    env.proxy_config = json!({"holdApplicationUntilProxyStarts": true});
    reorder_pod(&mut pod, &env.params());
    assert_eq!(
        names(&pod["spec"]["containers"]),
        ["istio-proxy", "hello", "world"]
    );
    let mut env = Env::new();
    env.values = json!({"global": {"proxy": {"holdApplicationUntilProxyStarts": true}}});
    let mut pod2 = json!({"spec": {"containers": [{"name": "hello"}, {"name": "istio-proxy"}]}});
    reorder_pod(&mut pod2, &env.params());
    assert_eq!(names(&pod2["spec"]["containers"]), ["istio-proxy", "hello"]);

    // native: init, proxy, core dump first, the rest after
    let env = Env::new();
    let mut pod = json!({"spec": {"containers": [{"name": "hello"}],
        "initContainers": [{"name": "init-one"}, {"name": "enable-core-dump"}, {"name": "istio-init"}, {"name": "init-two"}, {"name": "istio-proxy"}]}});
    reorder_pod(&mut pod, &env.params());
    assert_eq!(
        names(&pod["spec"]["initContainers"]),
        [
            "istio-init",
            "istio-proxy",
            "enable-core-dump",
            "init-one",
            "init-two"
        ]
    );
}

#[test]
fn prometheus_multiport_golden() {
    let env = Env::new();
    let mut pod = json!({
        "metadata": {"annotations": {"prometheus.io/scrape": "true",
            "prometheus.istio.io/scrape-targets": "8080:/metrics,9100:/custom-metrics"}},
        "spec": {"containers": [{"name": "hello"}], "initContainers": [{"name": "istio-proxy", "env": []}]}});
    apply_prometheus_merge(&mut pod, &env.params()).unwrap();
    assert_eq!(
        env_value(
            &pod["spec"]["initContainers"][0],
            "ISTIO_PROMETHEUS_ANNOTATIONS"
        ),
        Some(
            r#"{"scrape":"true","path":"/metrics","port":"8080","targets":[{"port":"8080","path":"/metrics"},{"port":"9100","path":"/custom-metrics"}]}"#
        )
    );
    assert_eq!(
        pod["metadata"]["annotations"],
        json!({"prometheus.io/port": "15020", "prometheus.io/path": "/stats/prometheus", "prometheus.io/scrape": "true"})
    );
}

#[test]
fn prometheus_variants_and_skips() {
    let env = Env::new();
    // sanitised spellings are the same key; all of them are replaced
    let mut pod = json!({
        "metadata": {"annotations": {"prometheus.io.path": "/m", "prometheus-io/port": "9000", "other": "x"}},
        "spec": {"containers": [{"name": "hello"}, {"name": "istio-proxy"}]}});
    apply_prometheus_merge(&mut pod, &env.params()).unwrap();
    assert_eq!(
        env_value(
            &pod["spec"]["containers"][1],
            "ISTIO_PROMETHEUS_ANNOTATIONS"
        ),
        Some(r#"{"scrape":"","path":"/m","port":"9000"}"#)
    );
    assert_eq!(
        pod["metadata"]["annotations"],
        json!({"other": "x", "prometheus.io/port": "15020", "prometheus.io/path": "/stats/prometheus", "prometheus.io/scrape": "true"})
    );

    // scrape false (any spelling) → nothing changes
    let pod0 = json!({"metadata": {"annotations": {"prometheus.io.scrape": "false"}},
        "spec": {"containers": [{"name": "istio-proxy"}]}});
    let mut pod = pod0.clone();
    apply_prometheus_merge(&mut pod, &env.params()).unwrap();
    assert_eq!(pod, pod0);
    // merge disabled by annotation, or by the mesh
    let pod0 = json!({"metadata": {"annotations": {"prometheus.istio.io/merge-metrics": "false", "prometheus.io/port": "8080"}}});
    let mut pod = pod0.clone();
    apply_prometheus_merge(&mut pod, &env.params()).unwrap();
    assert_eq!(pod, pod0);
    let mut off = Env::new();
    off.mesh = json!({"defaultConfig": {"statusPort": 15020}, "enablePrometheusMerge": false});
    let pod0 = json!({"metadata": {"annotations": {"prometheus.io/port": "8080"}}});
    let mut pod = pod0.clone();
    apply_prometheus_merge(&mut pod, &off.params()).unwrap();
    assert_eq!(pod, pod0);
    // re-injection: already pointing at the status port
    let pod0 = json!({"metadata": {"annotations": {"prometheus.io/port": "15020", "prometheus.io/path": "/stats/prometheus"}},
        "spec": {"containers": [{"name": "istio-proxy"}]}});
    let mut pod = pod0.clone();
    apply_prometheus_merge(&mut pod, &env.params()).unwrap();
    assert_eq!(pod, pod0);
    // no annotations at all: ours are set, no env, even without a proxy
    let mut pod = json!({"metadata": {}, "spec": {"containers": [{"name": "istio-proxy"}]}});
    apply_prometheus_merge(&mut pod, &env.params()).unwrap();
    assert!(pod["spec"]["containers"][0].get("env").is_none());
    assert_eq!(
        pod["metadata"]["annotations"]["prometheus.io/port"],
        "15020"
    );
}

#[test]
fn prometheus_errors() {
    let env = Env::new();
    let run = |ann: Value| {
        let mut pod = json!({"metadata": {"annotations": ann}, "spec": {"containers": [{"name": "istio-proxy"}]}});
        apply_prometheus_merge(&mut pod, &env.params()).map(|_| pod)
    };
    for (targets, needle) in [
        ("8080,15090:/stats", "15090"),
        ("15020", "status port"),
        ("abc:/m", "\"abc\""),
        ("0", "\"0\""),
        ("70000", "\"70000\""),
    ] {
        let err = run(json!({"prometheus.istio.io/scrape-targets": targets}))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid prometheus scrape targets: "),
            "{err}"
        );
        assert!(err.contains(needle), "{err}");
    }
    let err = run(json!({"prometheus.io/port": "15021"}))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("invalid prometheus scrape configuration: "),
        "{err}"
    );
    assert!(err.contains("reserved"), "{err}");
    // an entry without a port: the targets value is ignored, the legacy port is used
    let pod = run(
        json!({"prometheus.istio.io/scrape-targets": "8080,:/x", "prometheus.io/port": "9090"}),
    )
    .unwrap();
    assert_eq!(
        env_value(
            &pod["spec"]["containers"][0],
            "ISTIO_PROMETHEUS_ANNOTATIONS"
        ),
        Some(r#"{"scrape":"","path":"","port":"9090"}"#)
    );
    // targets: trimmed, empty entries skipped, empty path → /metrics
    let pod = run(json!({"prometheus.istio.io/scrape-targets": " 8080 , ,9100:"})).unwrap();
    assert_eq!(
        env_value(
            &pod["spec"]["containers"][0],
            "ISTIO_PROMETHEUS_ANNOTATIONS"
        ),
        Some(
            r#"{"scrape":"","path":"/metrics","port":"8080","targets":[{"port":"8080","path":"/metrics"},{"port":"9100","path":"/metrics"}]}"#
        )
    );
}

#[test]
fn secure_port_annotation() {
    let mut pod = json!({"spec": {"containers": [{"name": "istio-proxy",
        "env": [{"name": "ENVOY_SECURE_MERGED_METRICS_PORT", "value": "15091"}]}]}});
    apply_secure_prometheus_annotation(&mut pod);
    assert_eq!(
        pod["metadata"]["annotations"]["prometheus.istio.io/secure-port"],
        "15091"
    );
    let mut pod = json!({"metadata": {"annotations": {"prometheus.istio.io.secure-port": "1"}},
        "spec": {"containers": [{"name": "istio-proxy",
        "env": [{"name": "ENVOY_SECURE_MERGED_METRICS_PORT", "value": "15091"}]}]}});
    apply_secure_prometheus_annotation(&mut pod);
    assert!(pod["metadata"]["annotations"]
        .get("prometheus.istio.io/secure-port")
        .is_none());
    let mut pod = json!({"spec": {"containers": [{"name": "istio-proxy",
        "env": [{"name": "ENVOY_SECURE_MERGED_METRICS_PORT", "value": "0"}]}]}});
    apply_secure_prometheus_annotation(&mut pod);
    assert!(pod.get("metadata").is_none());
}

#[test]
fn cluster_env_moves_last_sorted_and_network_label() {
    let mut env = Env::new();
    env.url_env
        .insert("ISTIO_META_NETWORK".into(), "network1".into());
    env.url_env
        .insert("ISTIO_META_CLUSTER_ID".into(), "c1".into());
    env.url_env.insert("CUSTOM_ENV".into(), "x".into());
    let mut pod = json!({"metadata": {}, "spec": {"containers": [{"name": "hello"}, {"name": "istio-proxy", "env": [
        {"name": "A", "value": "1"}, {"name": "ISTIO_META_CLUSTER_ID", "value": "Kubernetes"}, {"name": "TRUST_DOMAIN", "value": "cluster.local"}]}]}});
    post_process(&mut pod, &json!({}), &json!({}), &env.params()).unwrap();
    let proxy = &pod["spec"]["containers"][1];
    assert_eq!(
        env_names(proxy),
        [
            "A",
            "TRUST_DOMAIN",
            "CUSTOM_ENV",
            "ISTIO_META_CLUSTER_ID",
            "ISTIO_META_NETWORK"
        ]
    );
    assert_eq!(env_value(proxy, "ISTIO_META_CLUSTER_ID"), Some("c1"));
    assert_eq!(
        pod["metadata"]["labels"]["topology.istio.io/network"],
        "network1"
    );
}

#[test]
fn post_process_probes_status_and_injected_annotations() {
    let mut env = Env::new();
    env.injected.insert("foo/bar".into(), "baz".into());
    env.injected
        .insert("prometheus.io/path".into(), "/mine".into());
    let template = native_template();
    let mut pod = json!({"metadata": {"annotations": {}},
        "spec": {"containers": [
            {"name": "hello", "ports": [{"name": "http", "containerPort": 80}],
             "livenessProbe": {"httpGet": {"port": "http"}}, "readinessProbe": {"httpGet": {"port": 3333}}}],
        "initContainers": [{"name": "istio-init"}, {"name": "istio-proxy", "env": [{"name": "TRUST_DOMAIN", "value": "cluster.local"}]}]}});
    post_process(&mut pod, &json!({}), &template, &env.params()).unwrap();
    let proxy = &pod["spec"]["initContainers"][1];
    assert_eq!(env_names(proxy), ["TRUST_DOMAIN", "ISTIO_KUBE_APP_PROBERS"]);
    assert_eq!(
        env_value(proxy, "ISTIO_KUBE_APP_PROBERS"),
        Some(
            r#"{"/app-health/hello/livez":{"httpGet":{"port":80}},"/app-health/hello/readyz":{"httpGet":{"port":3333}}}"#
        )
    );
    let hello = &pod["spec"]["containers"][0];
    assert_eq!(
        hello["livenessProbe"],
        json!({"httpGet": {"port": 15020, "path": "/app-health/hello/livez"}})
    );
    let ann = &pod["metadata"]["annotations"];
    assert_eq!(ann["foo/bar"], "baz");
    assert_eq!(ann["prometheus.io/path"], "/mine");
    assert_eq!(ann[STATUS_ANNOTATION], crate::status::build(&template, ""));
    assert!(pod["metadata"]["labels"].is_object());

    // rewrite disabled by annotation: probes untouched, no env
    let mut pod = json!({"metadata": {"annotations": {"sidecar.istio.io/rewriteAppHTTPProbers": "false"}},
        "spec": {"containers": [{"name": "hello", "readinessProbe": {"httpGet": {"port": 3333}}}, {"name": "istio-proxy"}]}});
    post_process(&mut pod, &json!({}), &template, &env.params()).unwrap();
    assert_eq!(
        pod["spec"]["containers"][0]["readinessProbe"],
        json!({"httpGet": {"port": 3333}})
    );
    assert!(pod["spec"]["containers"][1].get("env").is_none());
}

#[test]
fn reinjection_merges_probers_in_place() {
    // merge-probers: old entries win, the new container's entry is added, the env keeps its place
    let env = Env::new();
    let old = r#"{"/app-health/hello/livez":{"httpGet":{"port":80}},"/app-health/hello/readyz":{"httpGet":{"port":3333}},"/app-health/world/livez":{"httpGet":{"port":90}}}"#;
    let mut pod = json!({"metadata": {"annotations": {STATUS_ANNOTATION: "{}"}},
        "spec": {"containers": [
            {"name": "hello", "readinessProbe": {"httpGet": {"path": "/app-health/hello/readyz", "port": 15020}}},
            {"name": "new", "ports": [{"name": "http", "containerPort": 8008}],
             "livenessProbe": {"httpGet": {"path": "/testLive", "port": 8008}}}],
        "initContainers": [{"name": "istio-proxy", "env": [
            {"name": "ISTIO_KUBE_APP_PROBERS", "value": old}, {"name": "LAST", "value": "x"}]}]}});
    post_process(&mut pod, &json!({}), &native_template(), &env.params()).unwrap();
    let proxy = &pod["spec"]["initContainers"][0];
    assert_eq!(env_names(proxy), ["ISTIO_KUBE_APP_PROBERS", "LAST"]);
    assert_eq!(
        env_value(proxy, "ISTIO_KUBE_APP_PROBERS"),
        Some(
            r#"{"/app-health/hello/livez":{"httpGet":{"port":80}},"/app-health/hello/readyz":{"httpGet":{"port":3333}},"/app-health/new/livez":{"httpGet":{"path":"/testLive","port":8008}},"/app-health/world/livez":{"httpGet":{"port":90}}}"#
        )
    );
    assert_eq!(
        pod["spec"]["containers"][1]["livenessProbe"],
        json!({"httpGet": {"path": "/app-health/new/livez", "port": 15020}})
    );
}

#[test]
fn strip_and_reinsert() {
    let pod = json!({"metadata": {"annotations": {
            STATUS_ANNOTATION: r#"{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["istio-envoy"],"imagePullSecrets":null,"revision":"default"}"#,
            "prometheus.io/port": "15020", "prometheus.io.path": "/stats/prometheus", "prometheus.istio.io/scrape-targets": "1",
            "keep": "x",
            OVERRIDES_ANNOTATION: r#"{"containers":[{"name":"istio-proxy","args":["saved"],"resources":{}}],"initContainers":[{"name":"istio-init","resources":{}}]}"#}},
        "spec": {"containers": [{"name": "istio-proxy"}, {"name": "hello"}],
                 "initContainers": [{"name": "istio-init"}, {"name": "istio-proxy"}],
                 "volumes": [{"name": "istio-envoy"}]}});
    let mut stripped = strip_pod(&pod, &mesh());
    assert_eq!(names(&stripped["spec"]["containers"]), ["hello"]);
    // each list only against its own status list
    assert_eq!(names(&stripped["spec"]["initContainers"]), ["istio-proxy"]);
    assert_eq!(names(&stripped["spec"]["volumes"]), ["istio-envoy"]);
    let ann = stripped["metadata"]["annotations"].as_object().unwrap();
    assert_eq!(
        ann.keys().collect::<Vec<_>>(),
        ["keep", OVERRIDES_ANNOTATION]
    );
    reinsert_overrides(&mut stripped).unwrap();
    assert_eq!(
        names(&stripped["spec"]["containers"]),
        ["hello", "istio-proxy"]
    );
    assert_eq!(stripped["spec"]["containers"][1]["args"], json!(["saved"]));
    assert_eq!(
        names(&stripped["spec"]["initContainers"]),
        ["istio-proxy", "istio-init"]
    );

    // unparseable status: the pod as is
    let odd = json!({"metadata": {"annotations": {STATUS_ANNOTATION: "nope"}}, "spec": {"containers": [{"name": "istio-proxy"}]}});
    assert_eq!(strip_pod(&odd, &mesh()), odd);
    // Prometheus annotations that are not ours stay
    let mine = json!({"metadata": {"annotations": {STATUS_ANNOTATION: "{}", "prometheus.io/port": "8080"}}});
    assert_eq!(
        strip_pod(&mine, &mesh())["metadata"]["annotations"],
        json!({"prometheus.io/port": "8080"})
    );
    // bad overrides JSON is an error
    let mut bad = json!({"metadata": {"annotations": {OVERRIDES_ANNOTATION: "["}}});
    assert!(reinsert_overrides(&mut bad).is_err());
}

mod hostile {
    //! Whatever the pod looks like, the pipeline answers with a value or an error, never a panic.
    use super::*;
    use proptest::prelude::*;

    fn arb_json() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("metadata".to_string()),
            Just("annotations".to_string()),
            Just("labels".to_string()),
            Just("spec".to_string()),
            Just("containers".to_string()),
            Just("initContainers".to_string()),
            Just("name".to_string()),
            Just("istio-proxy".to_string()),
            Just("env".to_string()),
            Just("ports".to_string()),
            Just("containerPort".to_string()),
            Just("readinessProbe".to_string()),
            Just("httpGet".to_string()),
            Just("tcpSocket".to_string()),
            Just("grpc".to_string()),
            Just("port".to_string()),
            Just("lifecycle".to_string()),
            Just("preStop".to_string()),
            Just("securityContext".to_string()),
            Just("runAsUser".to_string()),
            Just("args".to_string()),
            Just("volumes".to_string()),
            Just("$patch".to_string()),
            Just("$retainKeys".to_string()),
            Just("$setElementOrder/containers".to_string()),
            Just("$setElementOrder/env".to_string()),
            Just("$deleteFromPrimitiveList/args".to_string()),
            Just(STATUS_ANNOTATION.to_string()),
            Just(OVERRIDES_ANNOTATION.to_string()),
            Just("prometheus.io/port".to_string()),
            Just("prometheus.istio.io/scrape-targets".to_string()),
            "[a-z/~.]{0,4}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..70000).prop_map(Value::from),
            Just(Value::from(1.5)),
            prop_oneof![
                Just("istio-proxy".to_string()),
                Just("istio-init".to_string()),
                Just("replace".to_string()),
                Just("delete".to_string()),
                Just("15020".to_string()),
                Just("8080:/m,15090".to_string()),
                Just(r#"{"containers":[{"name":"istio-proxy"}]}"#.to_string()),
                Just(r#"{"initContainers":["istio-proxy"],"containers":null}"#.to_string()),
                "[a-z0-9:,/{}\\[\\]\"]{0,8}",
            ]
            .prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn pipeline_never_panics(pod in arb_json(), template in arb_json(), pc in arb_json()) {
            let env = Env::new();
            let _ = crate::merge::strategic_merge_pod(&pod, &template);
            let mut merged = pod.clone();
            if crate::merge::strategic_merge_pod_into(&mut merged, &template).is_err() {
                merged = pod.clone();
            }
            let _ = crate::merge::reapply_overwritten_containers(&mut merged, &pod, &template, &pc);
            let mut view = strip_pod(&pod, &env.mesh);
            let _ = reinsert_overrides(&mut view);
            let _ = post_process(&mut merged, &pod, &template, &env.params());
            let _ = crate::probes::dump_app_probers(&pod, 15020);
            let patch = crate::patch::create_patch_json(&pod, &merged).unwrap();
            let p: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
            let mut applied = pod.clone();
            json_patch::patch(&mut applied, &p).unwrap();
            prop_assert_eq!(applied, merged);
        }
    }
}
