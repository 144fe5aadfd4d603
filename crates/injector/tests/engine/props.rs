//! Property tests of the engine on generated pods: the patch `admission::handle` returns, applied by the
//! independent `json-patch` crate, gives exactly the engine's result; re-injecting is stable; unknown
//! fields and odd keys (`a/b`, `~`) survive.

use base64::Engine as _;
use inject::Settings;
use inject::{Engine, Mode};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use test_support::semantic::{diff, normalize};

fn odd_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a/b".to_string()),
        Just("~".to_string()),
        Just("x~1y/z".to_string()),
        Just("example.com/~tilde".to_string()),
        Just("weird key".to_string()),
        "[a-z]{1,6}(/[a-z]{1,4})?",
    ]
}

fn string_map() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(odd_key(), "[a-z0-9]{0,5}", 0..4)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

fn container(i: usize) -> impl Strategy<Value = Value> {
    (
        prop::collection::btree_set(1u16..9000, 0..3),
        any::<bool>(),
        any::<bool>(),
        prop::option::of("[A-Z]{1,4}"),
    )
        .prop_map(move |(ports, probe, unknown, env)| {
            let mut c = json!({"name": format!("c{i}"), "image": format!("example.com/app{i}:1")});
            let ports: Vec<u16> = ports.into_iter().collect();
            if !ports.is_empty() {
                c["ports"] = Value::Array(
                    ports
                        .iter()
                        .enumerate()
                        .map(|(j, p)| json!({"name": format!("p{j}"), "containerPort": p}))
                        .collect(),
                );
                if probe {
                    c["readinessProbe"] = json!({"httpGet": {"path": "/ready", "port": ports[0]}, "periodSeconds": 5});
                    c["livenessProbe"] = json!({"tcpSocket": {"port": "p0"}});
                }
            }
            if unknown {
                c["x-unknown-field"] = json!({"k": [1, 2, {"~": "/"}]});
            }
            if let Some(e) = env {
                c["env"] = json!([{"name": e, "value": "v"}]);
            }
            c
        })
}

fn pod() -> impl Strategy<Value = Value> {
    (
        string_map(),
        string_map(),
        (1usize..4).prop_flat_map(|n| (0..n).map(container).collect::<Vec<_>>()),
        any::<bool>(),
        prop_oneof![Just("default"), Just("ns1")],
    )
        .prop_map(|(labels, annotations, containers, unknown, ns)| {
            let mut p = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "gen", "namespace": ns, "labels": labels, "annotations": annotations},
                "spec": {"containers": containers, "volumes": [{"name": "data", "emptyDir": {}}]}
            });
            if unknown {
                p["spec"]["futureField"] = json!({"a/b": "~"});
                p["metadata"]["x-meta-unknown"] = json!(true);
            }
            p
        })
}

fn engine() -> &'static Engine {
    static E: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    E.get_or_init(|| Engine::new(Settings::default()))
}

/// An engine whose configuration carries Istio 1.31.0-rc.0's texts, rendered through the evaluator
/// (`--evaluate-texts`): the hostile-input properties hold on both render paths.
fn evaluating_engine() -> &'static Engine {
    static E: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    E.get_or_init(|| {
        let templates = test_support::corpus::release_texts("1.31.0-rc.0").expect("texts");
        let config = json!({"policy": "enabled", "templates": templates}).to_string();
        let args = inject::ConfigArgs {
            evaluate_texts: true,
            ..Default::default()
        };
        Engine::new(
            Settings::from_texts(None, None, Some(("config", &config)), &args).expect("settings"),
        )
    })
}

fn inject(pod: &Value) -> Value {
    crate::with_request(pod, Mode::Webhook, |req| {
        engine().inject(req).expect("inject")
    })
}

/// The JSON patch of an AdmissionReview response, decoded.
fn decoded_patch(response: &[u8]) -> Value {
    let resp: Value = serde_json::from_slice(response).expect("response json");
    let b64 = resp["response"]["patch"].as_str().expect("a patch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    serde_json::from_slice(&bytes).expect("patch json")
}

fn review(pod: &Value) -> Vec<u8> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    serde_json::to_vec(&test_support::pods::review("v1", "u", namespace, pod)).expect("json")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn patch_applied_to_original_is_the_engine_result(p in pod()) {
        // The evaluated path gives the same patch as the compiled one for the same text (the same
        // operations; the keys of an added object may come in another order).
        let evaluated = injector::handle(evaluating_engine(), &review(&p), "/inject");
        let out = injector::handle(engine(), &review(&p), "/inject");
        prop_assert_eq!(decoded_patch(&evaluated.response), decoded_patch(&out.response));
        let resp: Value = serde_json::from_slice(&out.response).expect("response json");
        prop_assert_eq!(&resp["response"]["allowed"], &json!(true), "{}", resp);
        let b64 = resp["response"]["patch"].as_str().expect("a patch");
        let patch: json_patch::Patch =
            serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(b64).expect("base64")).expect("patch");
        let mut got = p.clone();
        json_patch::patch(&mut got, &patch).expect("patch applies");
        let want = inject(&p);
        prop_assert!(got == want, "{}", diff(&got, &want, 1));
    }

    #[test]
    fn reinjection_is_stable_and_unknown_fields_survive(p in pod()) {
        let once = inject(&p);
        let twice = inject(&once);
        let (a, b) = (normalize(&once), normalize(&twice));
        prop_assert!(a == b, "{}", diff(&twice, &once, 1));
        // Unknown fields and odd keys survive untouched.
        if let Some(f) = p["spec"].get("futureField") {
            prop_assert_eq!(&once["spec"]["futureField"], f);
            prop_assert_eq!(&once["metadata"]["x-meta-unknown"], &json!(true));
        }
        for (k, v) in p["metadata"]["labels"].as_object().expect("labels") {
            prop_assert_eq!(&once["metadata"]["labels"][k], v);
        }
        for (k, v) in p["metadata"]["annotations"].as_object().expect("annotations") {
            prop_assert_eq!(&once["metadata"]["annotations"][k], v);
        }
        for c in p["spec"]["containers"].as_array().expect("containers") {
            if let Some(u) = c.get("x-unknown-field") {
                let name = &c["name"];
                let injected = once["spec"]["containers"].as_array().expect("containers")
                    .iter().find(|x| &x["name"] == name).expect("container kept");
                prop_assert_eq!(&injected["x-unknown-field"], u);
            }
        }
    }
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just("istio-proxy".to_string()),
            Just("true".to_string()),
            Just("{\"containers\":[{\"name\":\"x\"}]}".to_string()),
            Just("80".to_string()),
            Just("*".to_string()),
            "[ -~]{0,8}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("name".to_string()),
                    Just("ports".to_string()),
                    Just("containerPort".to_string()),
                    Just("httpGet".to_string()),
                    Just("port".to_string()),
                    Just("readinessProbe".to_string()),
                    Just("env".to_string()),
                    Just("securityContext".to_string()),
                    "[a-z/~.]{1,6}",
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A pod whose known fields hold either plausible or arbitrary values.
fn hostile_pod() -> impl Strategy<Value = Value> {
    let annotation_keys = prop_oneof![
        Just("sidecar.istio.io/status"),
        Just("proxy.istio.io/overrides"),
        Just("proxy.istio.io/config"),
        Just("inject.istio.io/templates"),
        Just("sidecar.istio.io/userVolume"),
        Just("sidecar.istio.io/userVolumeMount"),
        Just("prometheus.io/port"),
        Just("prometheus.istio.io/scrape-targets"),
        Just("status.sidecar.istio.io/port"),
        Just("sidecar.istio.io/proxyCPU"),
        Just("sidecar.istio.io/nativeSidecar"),
        Just("sidecar.istio.io/rewriteAppHTTPProbers"),
        Just("apm.datadoghq.com/env"),
        Just("k8s.v1.cni.cncf.io/networks"),
    ];
    (
        prop::collection::btree_map(annotation_keys, prop_oneof![any_json(), "[ -~]{0,12}".prop_map(Value::String)], 0..4),
        any_json(),
        prop_oneof![any_json(), prop::collection::vec(any_json(), 0..3).prop_map(Value::Array)],
        any_json(),
    )
        .prop_map(|(ann, labels, containers, init)| {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "h", "namespace": "default",
                             "annotations": Value::Object(ann.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
                             "labels": labels},
                "spec": {"containers": containers, "initContainers": init}
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever the request, `admission::handle` answers (never panics), echoes the uid, and any patch
    /// it returns applies to the request's object.
    #[test]
    fn admission_never_panics_and_patches_apply(p in hostile_pod()) {
        for engine in [engine(), evaluating_engine()] {
        let out = injector::handle(engine, &review(&p), "/inject");
        let resp: Value = serde_json::from_slice(&out.response).expect("response json");
        prop_assert_eq!(&resp["response"]["uid"], &json!("u"));
        prop_assert!(resp["response"]["allowed"].is_boolean());
        if let Some(b64) = resp["response"]["patch"].as_str() {
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64).expect("base64");
            let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("patch");
            let mut got = p.clone();
            json_patch::patch(&mut got, &patch).expect("patch applies");
        } else {
            prop_assert!(resp["response"]["allowed"] == json!(false) || out.kind == injector::OutcomeKind::Skipped);
        }
        }
    }

    #[test]
    fn admission_survives_arbitrary_bytes(body in prop::collection::vec(any::<u8>(), 0..256), path in "[ -~]{0,40}") {
        let out = injector::handle(engine(), &body, &path);
        let resp: Value = serde_json::from_slice(&out.response).expect("response json");
        prop_assert_eq!(&resp["response"]["allowed"], &json!(false));
    }
}
