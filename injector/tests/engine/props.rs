//! Property tests of the engine on generated pods: the patch `admission::handle` returns, applied by the
//! independent `json-patch` crate, gives exactly the engine's result; re-injecting is stable; unknown
//! fields and odd keys (`a/b`, `~`) survive.

use base64::Engine as _;
use injector::config::Settings;
use injector::engine::{deploy_meta_from_pod, Engine, InjectRequest, Mode};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::compare::{first_difference, normalize};

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

fn inject(pod: &Value) -> Value {
    let w = deploy_meta_from_pod(pod);
    let req = InjectRequest {
        pod,
        workload: &w,
        url_env: Default::default(),
        mode: Mode::Webhook,
    };
    engine().inject(&req).expect("inject")
}

fn review(pod: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "namespace": pod["metadata"]["namespace"], "operation": "CREATE", "object": pod}}))
    .expect("json")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn patch_applied_to_original_is_the_engine_result(p in pod()) {
        let out = injector::admission::handle(engine(), &review(&p), "/inject");
        let resp: Value = serde_json::from_slice(&out.response).expect("response json");
        prop_assert_eq!(&resp["response"]["allowed"], &json!(true), "{}", resp);
        let b64 = resp["response"]["patch"].as_str().expect("a patch");
        let patch: json_patch::Patch =
            serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(b64).expect("base64")).expect("patch");
        let mut got = p.clone();
        json_patch::patch(&mut got, &patch).expect("patch applies");
        let want = inject(&p);
        prop_assert!(got == want, "{:?}", first_difference(&got, &want, ""));
    }

    #[test]
    fn reinjection_is_stable_and_unknown_fields_survive(p in pod()) {
        let once = inject(&p);
        let twice = inject(&once);
        let (a, b) = (normalize(&once), normalize(&twice));
        prop_assert!(a == b, "{:?}", first_difference(&b, &a, ""));
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
