use super::*;
use serde_json::json;

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("list")
        .iter()
        .map(|c| {
            c.get("mountPath")
                .or_else(|| c.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

#[test]
fn template_containers_go_first() {
    let pod = json!({"spec": {"containers": [{"name": "hello", "image": "h"}]}});
    let patch = json!({"spec": {"containers": [{"name": "istio-proxy", "image": "p"}]}});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(names(&out["spec"]["containers"]), ["istio-proxy", "hello"]);
}

#[test]
fn volumes_and_mounts_template_first() {
    let pod = json!({"spec": {
        "volumes": [{"name": "data", "emptyDir": {}}],
        "containers": [{"name": "istio-proxy", "volumeMounts": [{"name": "certs", "mountPath": "/etc/certs"}]}]
    }});
    let patch = json!({"spec": {
        "volumes": [{"name": "workload-socket", "emptyDir": null}, {"name": "istio-envoy", "emptyDir": {"medium": "Memory"}}],
        "containers": [{"name": "istio-proxy", "volumeMounts": [
            {"name": "workload-socket", "mountPath": "/var/run/secrets/workload-spiffe-uds"},
            {"name": "istio-envoy", "mountPath": "/etc/istio/proxy"}]}]
    }});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(
        names(&out["spec"]["volumes"]),
        ["workload-socket", "istio-envoy", "data"]
    );
    // a new item is inserted whole, null fields included
    assert_eq!(
        out["spec"]["volumes"][0],
        json!({"name": "workload-socket", "emptyDir": null})
    );
    assert_eq!(
        names(&out["spec"]["containers"][0]["volumeMounts"]),
        [
            "/var/run/secrets/workload-spiffe-uds",
            "/etc/istio/proxy",
            "/etc/certs"
        ]
    );
}

#[test]
fn env_interleave_keeps_leading_server_item() {
    // merge-probers: JWT_POLICY preceded PILOT_CERT_PROVIDER in the original, so it stays in front;
    // ISTIO_KUBE_APP_PROBERS came after everything the template sets, so it goes last.
    let env = |names: &[&str]| -> Value {
        Value::Array(
            names
                .iter()
                .map(|n| json!({"name": n, "value": "old"}))
                .collect(),
        )
    };
    let pod = json!({"spec": {"containers": [{"name": "istio-proxy",
        "env": env(&["JWT_POLICY", "PILOT_CERT_PROVIDER", "CA_ADDR", "PROXY_CONFIG", "TRUST_DOMAIN", "ISTIO_KUBE_APP_PROBERS"])}]}});
    let patch = json!({"spec": {"containers": [{"name": "istio-proxy",
        "env": [{"name": "PILOT_CERT_PROVIDER", "value": "new"}, {"name": "CA_ADDR", "value": "new"},
                {"name": "ISTIO_CPU_LIMIT", "value": "new"}, {"name": "PROXY_CONFIG", "value": "new"},
                {"name": "TRUST_DOMAIN", "value": "new"}]}]}});
    // both ways the server-only ISTIO_CPU_LIMIT lands after CA_ADDR, its neighbour in the template
    let merged = [
        "JWT_POLICY",
        "PILOT_CERT_PROVIDER",
        "CA_ADDR",
        "ISTIO_CPU_LIMIT",
        "PROXY_CONFIG",
        "TRUST_DOMAIN",
        "ISTIO_KUBE_APP_PROBERS",
    ];
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    let got = &out["spec"]["containers"][0]["env"];
    assert_eq!(names(got), merged);
    assert_eq!(got[1]["value"], "new");
    assert_eq!(got[0]["value"], "old");

    // and back: re-applying the old container puts server-only items between its items by position
    let overlay = json!({"spec": {"containers": [{"name": "istio-proxy",
        "env": env(&["JWT_POLICY", "PILOT_CERT_PROVIDER", "CA_ADDR", "PROXY_CONFIG", "TRUST_DOMAIN", "ISTIO_KUBE_APP_PROBERS"])}]}});
    let again = strategic_merge_pod(&out, &overlay).unwrap();
    assert_eq!(names(&again["spec"]["containers"][0]["env"]), merged);
    assert_eq!(again["spec"]["containers"][0]["env"][1]["value"], "old");
}

#[test]
fn maps_merge_nulls_delete_lists_replace() {
    let pod = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
        "spec": {"containers": [{"name": "c", "args": ["x", "y"],
            "securityContext": {"runAsUser": 1, "capabilities": {"add": ["A"], "drop": ["ALL"]}},
            "ports": [{"containerPort": 80, "name": "http"}]}]}});
    let patch = json!({"metadata": {"labels": {"b": null, "c": "3", "gone": null}},
        "spec": {"containers": [{"name": "c", "args": ["z"],
            "securityContext": {"capabilities": {"add": ["B"]}, "runAsGroup": 2},
            "ports": [{"containerPort": 80.0, "protocol": "TCP"}]}]}});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"a": "1", "c": "3"}));
    let c = &out["spec"]["containers"][0];
    assert_eq!(c["args"], json!(["z"]));
    assert_eq!(
        c["securityContext"],
        json!({"runAsUser": 1, "capabilities": {"add": ["B"], "drop": ["ALL"]}, "runAsGroup": 2})
    );
    // the key matched across 80 / 80.0; the patch's scalar wins, as in Go (all numbers are float64 there)
    assert_eq!(
        c["ports"],
        json!([{"containerPort": 80.0, "name": "http", "protocol": "TCP"}])
    );
}

#[test]
fn patch_replace_directive_on_map() {
    // Istio's TestStrategicMerge
    let pod = json!({"metadata": {"labels": {"app": "x", "keep": "no"}}});
    let patch = json!({"metadata": {"labels": {"$patch": "replace", "foo": "bar"}}});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"foo": "bar"}));

    let patch = json!({"metadata": {"labels": {"$patch": "delete"}}});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({}));

    let bad = json!({"metadata": {"labels": {"$patch": "sideways"}}});
    assert!(matches!(
        strategic_merge_pod(&pod, &bad),
        Err(MergeError::BadDirective { .. })
    ));
}

#[test]
fn list_directives() {
    let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}});
    let del = json!({"spec": {"containers": [{"name": "b", "$patch": "delete"}]}});
    let out = strategic_merge_pod(&pod, &del).unwrap();
    assert_eq!(names(&out["spec"]["containers"]), ["a", "c"]);

    let rep = json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "z"}]}});
    let out = strategic_merge_pod(&pod, &rep).unwrap();
    assert_eq!(out["spec"]["containers"], json!([{"name": "z"}]));

    // an empty patch list leaves a keyed list alone
    let empty = json!({"spec": {"initContainers": [], "containers": []}});
    let out = strategic_merge_pod(&pod, &empty).unwrap();
    assert_eq!(names(&out["spec"]["containers"]), ["a", "b", "c"]);
    assert_eq!(out["spec"]["initContainers"], json!([]));

    let nokey = json!({"spec": {"containers": [{"image": "x"}]}});
    let err = strategic_merge_pod(&pod, &nokey).unwrap_err().to_string();
    assert!(err.contains("merge key: name"), "{err}");
    assert!(err.starts_with("spec.containers: "), "{err}");
}

#[test]
fn set_element_order() {
    let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}});
    // the directive orders the items it names; `c`, only in the original, keeps its place after `a`
    let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "d"}, {"name": "a"}],
        "containers": [{"name": "d", "image": "new"}]}});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(names(&out["spec"]["containers"]), ["b", "d", "a", "c"]);
    assert_eq!(out["spec"]["containers"][1]["image"], "new");
    // scalar lists by value
    let pod = json!({"metadata": {"finalizers": ["x", "y"]}});
    let patch = json!({"metadata": {"$setElementOrder/finalizers": ["y", "x"]}});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["y", "x"]));
    // patch items missing from the directive, or out of its order, are rejected
    let bad = json!({"spec": {"$setElementOrder/containers": [{"name": "a"}],
        "containers": [{"name": "z"}]}});
    assert!(matches!(
        strategic_merge_pod(&pod, &bad),
        Err(MergeError::BadElementOrder { .. })
    ));
}

#[test]
fn retain_keys_on_volumes() {
    let pod = json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}});
    let patch = json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "secret"], "secret": {"secretName": "s"}}]}});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "v", "secret": {"secretName": "s"}}])
    );
}

#[test]
fn finalizers_union_and_owner_refs() {
    let pod = json!({"metadata": {"finalizers": ["a", "b"], "ownerReferences": [{"uid": "1", "name": "x"}]}});
    let patch = json!({"metadata": {"finalizers": ["c", "a"], "ownerReferences": [{"uid": "2"}, {"uid": "1", "kind": "K"}]}});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
    assert_eq!(
        out["metadata"]["ownerReferences"],
        json!([{"uid": "2"}, {"uid": "1", "name": "x", "kind": "K"}])
    );
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["a"]));
}

#[test]
fn unknown_fields_and_odd_keys_pass_through() {
    let pod = json!({"spec": {"x-unknown": {"a/b": 1, "~": [1, 2]}, "containers": [{"name": "c", "future": true}]}});
    let patch = json!({"spec": {"containers": [{"name": "istio-proxy"}]}});
    let out = strategic_merge_pod(&pod, &patch).unwrap();
    assert_eq!(out["spec"]["x-unknown"], pod["spec"]["x-unknown"]);
    assert_eq!(
        out["spec"]["containers"][1],
        json!({"name": "c", "future": true})
    );
}

fn proxy_override_pod() -> Value {
    json!({
        "metadata": {"labels": {"app": "hello"}},
        "spec": {
            "initContainers": [{"name": "istio-init", "args": ["my", "custom", "args"], "image": "fake/custom-image"}],
            "containers": [
                {"name": "hello", "image": "fake.docker.io/google-samples/hello-go-gke:1.0"},
                {"name": "istio-proxy", "image": "auto",
                 "resources": {"requests": {"cpu": "123m"}, "limits": {"cpu": "3000m"}},
                 "livenessProbe": {"failureThreshold": 30, "httpGet": {"path": "/healthz/ready", "port": 15021},
                                   "initialDelaySeconds": 10, "periodSeconds": 2, "timeoutSeconds": 3},
                 "tty": true, "terminationMessagePath": "/foo/bar",
                 "volumeMounts": [{"mountPath": "/etc/certs", "name": "certs"}],
                 "lifecycle": {"preStop": {"exec": {"command": ["sleep", "10"]}}},
                 "securityContext": {"allowPrivilegeEscalation": true, "readOnlyRootFilesystem": false,
                                     "runAsUser": 1234, "runAsGroup": 1234}}
            ],
            "volumes": [{"name": "certs", "secret": {"secretName": "istio-certs"}}]
        }
    })
}

fn native_template() -> Value {
    json!({"spec": {
        "initContainers": [
            {"name": "istio-init", "image": "proxyv2", "args": ["istio-iptables", "-p", "15001", "-u", "1337"],
             "securityContext": {"runAsUser": 0}},
            {"name": "istio-proxy", "image": "proxyv2", "restartPolicy": "Always", "args": ["proxy", "sidecar"],
             "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "100m"}},
             "volumeMounts": [{"name": "istio-envoy", "mountPath": "/etc/istio/proxy"}],
             "securityContext": {"runAsUser": 1337, "runAsGroup": 1337, "readOnlyRootFilesystem": true}}
        ],
        "containers": []
    }})
}

#[test]
fn overrides_annotation_matches_golden() {
    let original = proxy_override_pod();
    let template = native_template();
    // what RunTemplate produced: the template merged onto the pod, user proxy moved to init containers
    let mut merged = original.clone();
    let proxy = merged["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .remove(1);
    merged["spec"]["initContainers"]
        .as_array_mut()
        .unwrap()
        .push(proxy);
    strategic_merge_pod_into(&mut merged, &template).unwrap();
    reapply_overwritten_containers(&mut merged, &original, &template, &json!({})).unwrap();

    let golden = r#"{"initContainers":[{"name":"istio-init","image":"fake/custom-image","args":["my","custom","args"],"resources":{}},{"name":"istio-proxy","resources":{"limits":{"cpu":"3"},"requests":{"cpu":"123m"}},"volumeMounts":[{"name":"certs","mountPath":"/etc/certs"}],"livenessProbe":{"httpGet":{"path":"/healthz/ready","port":15021},"initialDelaySeconds":10,"timeoutSeconds":3,"periodSeconds":2,"failureThreshold":30},"lifecycle":{"preStop":{"exec":{"command":["sleep","10"]}}},"terminationMessagePath":"/foo/bar","securityContext":{"runAsUser":1234,"runAsGroup":1234,"readOnlyRootFilesystem":false,"allowPrivilegeEscalation":true},"tty":true}]}"#;
    assert_eq!(
        merged["metadata"]["annotations"][OVERRIDES_ANNOTATION],
        golden
    );
    let inits = &merged["spec"]["initContainers"];
    assert_eq!(names(inits), ["istio-init", "istio-proxy"]);
    // user scalars win, lists replace, template image kept for `auto`
    assert_eq!(inits[0]["image"], "fake/custom-image");
    assert_eq!(inits[0]["args"], json!(["my", "custom", "args"]));
    let proxy = &inits[1];
    assert_eq!(proxy["image"], "proxyv2");
    assert_eq!(proxy["securityContext"]["runAsUser"], 1234);
    assert_eq!(proxy["securityContext"]["readOnlyRootFilesystem"], false);
    assert_eq!(proxy["tty"], true);
    assert_eq!(
        names(&proxy["volumeMounts"]),
        ["/etc/istio/proxy", "/etc/certs"]
    );
    // adjustInitContainerUser: -u follows the user's runAsUser
    assert_eq!(inits[0]["args"], json!(["my", "custom", "args"]));
}

#[test]
fn adjust_init_user_rewrites_u_and_validation_identity() {
    let original = json!({"spec": {"containers": [
        {"name": "hello"},
        {"name": "istio-proxy", "securityContext": {"runAsUser": 1234, "runAsGroup": 4321}}]}});
    // istio-init: -u replaced
    let template = json!({"spec": {"initContainers": [
        {"name": "istio-init", "args": ["istio-iptables", "-p", "15001", "-u", "1337", "-m", "REDIRECT"]}],
        "containers": [{"name": "istio-proxy", "securityContext": {"runAsUser": 1337}}]}});
    let mut merged = strategic_merge_pod(&original, &template).unwrap();
    reapply_overwritten_containers(&mut merged, &original, &template, &json!({})).unwrap();
    assert_eq!(
        merged["spec"]["initContainers"][0]["args"],
        json!([
            "istio-iptables",
            "-p",
            "15001",
            "-u",
            "1234",
            "-m",
            "REDIRECT"
        ])
    );
    // TPROXY: proxy runs as root, -u still follows the user
    let mut merged = strategic_merge_pod(&original, &template).unwrap();
    reapply_overwritten_containers(
        &mut merged,
        &original,
        &template,
        &json!({"interceptionMode": "TPROXY"}),
    )
    .unwrap();
    // the original order wins for items both sides know: hello stays before istio-proxy
    assert_eq!(
        names(&merged["spec"]["containers"]),
        ["hello", "istio-proxy"]
    );
    let proxy = &merged["spec"]["containers"][1];
    assert_eq!(proxy["securityContext"]["runAsUser"], 0);
    assert_eq!(proxy["securityContext"]["runAsGroup"], 4321);
    assert_eq!(merged["spec"]["initContainers"][0]["args"][4], "1234");
    // CNI: the validation container takes the user's identity
    let template = json!({"spec": {"initContainers": [
        {"name": "istio-validation", "args": ["istio-iptables", "-u", "1337"],
         "securityContext": {"runAsUser": 1337, "runAsGroup": 1337}}],
        "containers": [{"name": "istio-proxy"}]}});
    let mut merged = strategic_merge_pod(&original, &template).unwrap();
    reapply_overwritten_containers(&mut merged, &original, &template, &json!({})).unwrap();
    let v = &merged["spec"]["initContainers"][0];
    assert_eq!(
        v["securityContext"],
        json!({"runAsUser": 1234, "runAsGroup": 4321})
    );
    assert_eq!(v["args"], json!(["istio-iptables", "-u", "1234"]));
}

#[test]
fn already_injected_skips_status_names_and_writes_no_annotation() {
    let original = json!({
        "metadata": {"annotations": {STATUS_ANNOTATION: r#"{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":null,"imagePullSecrets":null,"revision":"default"}"#}},
        "spec": {"containers": [{"name": "hello"}, {"name": "istio-proxy", "args": ["--concurrency", "2"]}],
                 "initContainers": [{"name": "istio-init", "args": ["old"]}]}});
    // non-native re-injection: the proxy is in the old status, so it is not re-applied
    let template = json!({"spec": {"initContainers": [{"name": "istio-init", "args": ["new"]}],
        "containers": [{"name": "istio-proxy", "args": ["new"]}]}});
    let mut merged = strategic_merge_pod(&original, &template).unwrap();
    reapply_overwritten_containers(&mut merged, &original, &template, &json!({})).unwrap();
    assert_eq!(
        names(&merged["spec"]["containers"]),
        ["hello", "istio-proxy"]
    );
    assert_eq!(merged["spec"]["containers"][1]["args"], json!(["new"]));
    assert_eq!(merged["spec"]["initContainers"][0]["args"], json!(["new"]));
    // native re-injection: the old proxy is not in the old status' initContainers → re-applied
    let template = json!({"spec": {"initContainers": [{"name": "istio-init", "args": ["new"]},
        {"name": "istio-proxy", "args": ["new"]}], "containers": []}});
    let mut merged = strategic_merge_pod(&original, &template).unwrap();
    reapply_overwritten_containers(&mut merged, &original, &template, &json!({})).unwrap();
    let proxy =
        test_support::pods::named(&merged["spec"]["initContainers"], "istio-proxy").unwrap();
    assert_eq!(proxy["args"], json!(["--concurrency", "2"]));
    assert!(merged["metadata"]["annotations"]
        .get(OVERRIDES_ANNOTATION)
        .is_none());
}

#[test]
fn saved_overrides_win_and_bad_json_fails() {
    let original = json!({
        "metadata": {"annotations": {OVERRIDES_ANNOTATION: r#"{"containers":[{"name":"istio-proxy","args":["saved"],"resources":{}}]}"#}},
        "spec": {"containers": [{"name": "hello"}]}});
    let template = json!({"spec": {"containers": [{"name": "istio-proxy", "args": ["new"]}]}});
    let mut merged = strategic_merge_pod(&original, &template).unwrap();
    reapply_overwritten_containers(&mut merged, &original, &template, &json!({})).unwrap();
    assert_eq!(merged["spec"]["containers"][0]["args"], json!(["saved"]));

    let bad = json!({"metadata": {"annotations": {OVERRIDES_ANNOTATION: "{nope"}}});
    let err = reapply_overwritten_containers(&mut merged, &bad, &template, &json!({})).unwrap_err();
    assert!(matches!(err, MergeError::InvalidOverrides(_)), "{err}");
}

mod props {
    use super::*;
    use proptest::prelude::*;

    use sidecar_core::proxy_config_json::drop_nulls;

    fn arb_env() -> impl Strategy<Value = Vec<Value>> {
        prop::collection::btree_map("[A-E]", prop::option::of("[a-c]{0,2}"), 0..5).prop_map(|m| {
            m.into_iter()
                .map(|(name, value)| match value {
                    Some(v) => json!({"name": name, "value": v}),
                    None => json!({"name": name, "value": null}),
                })
                .collect()
        })
    }

    fn arb_container() -> impl Strategy<Value = (String, Value)> {
        (
            "[a-e]",
            arb_env(),
            prop::collection::vec("[a-z]{1,3}", 0..3),
            prop::collection::btree_set(1u16..5, 0..3),
            prop::option::of(any::<bool>()),
        )
            .prop_map(|(name, env, args, ports, ro)| {
                let ports: Vec<Value> = ports
                    .into_iter()
                    .map(|p| json!({"containerPort": p}))
                    .collect();
                let mut c = json!({"name": name, "env": env, "args": args, "ports": ports,
                    "x-unknown/~": {"k": name}});
                if let Some(ro) = ro {
                    c["securityContext"] = json!({"readOnlyRootFilesystem": ro, "runAsUser": null});
                }
                (name, c)
            })
    }

    fn arb_pod() -> impl Strategy<Value = Value> {
        (
            // one container per key, named by it (names are unique, as the API requires), in any order
            prop::collection::btree_map("[a-e]", arb_container(), 0..4)
                .prop_map(|cs| {
                    cs.into_iter()
                        .map(|(k, (_, mut c))| {
                            c["name"] = json!(k);
                            c
                        })
                        .collect::<Vec<Value>>()
                })
                .prop_shuffle(),
            prop::collection::btree_map("[a-c]", prop::option::of("[xy]"), 0..3),
            prop::collection::vec("[a-c]", 0..3),
            prop::collection::btree_set("[p-t]", 0..4),
        )
            .prop_map(|(containers, labels, finalizers, volumes)| {
                let labels: Map<String, Value> = labels
                    .into_iter()
                    .map(|(k, v)| (k, v.map_or(Value::Null, Value::String)))
                    .collect();
                let volumes: Vec<Value> = volumes
                    .into_iter()
                    .map(|v| json!({"name": v, "emptyDir": null}))
                    .collect();
                json!({"metadata": {"labels": labels, "finalizers": finalizers},
                       "spec": {"containers": containers, "volumes": volumes}})
            })
    }

    fn names_of(v: &Value) -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().map(|c| name_of(c).to_string()).collect())
            .unwrap_or_default()
    }

    /// `sub` appears in `all` in the same relative order.
    fn is_subsequence(sub: &[String], all: &[String]) -> bool {
        let mut it = all.iter();
        sub.iter().all(|s| it.any(|a| a == s))
    }

    /// Patches with what the shortcuts must notice: directives, nulls, items without a merge key or
    /// with a key twice, non-object items, scalar lists.
    fn arb_patch() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            "[a-c]{0,2}".prop_map(Value::String),
            (0i64..3).prop_map(Value::from),
            Just(json!("replace")),
            Just(json!("delete")),
        ];
        let keys = prop_oneof![
            Just("name"),
            Just("image"),
            Just("env"),
            Just("value"),
            Just("volumes"),
            Just("initContainers"),
            Just("containers"),
            Just("finalizers"),
            Just("mountPath"),
            Just("volumeMounts"),
            Just("$patch"),
            Just("$retainKeys"),
            Just("$setElementOrder/env"),
            Just("$deleteFromPrimitiveList/finalizers"),
        ];
        let value = leaf.prop_recursive(3, 32, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((keys.clone(), inner), 0..4).prop_map(|kv| {
                    Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        });
        let meta = prop_oneof![
            value.clone(),
            prop::collection::vec("[ab]", 0..4).prop_map(|f| json!({"finalizers": f})),
        ];
        // Keyed-list items: with or without a name (sometimes repeated), a directive, other fields.
        let item = (
            prop::option::of("[ab]"),
            prop::option::of(prop_oneof![Just("delete"), Just("replace"), Just("x")]),
            value.clone(),
        )
            .prop_map(|(name, directive, extra)| {
                let mut m = match extra {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                if let Some(n) = name {
                    m.insert("name".to_string(), json!(n));
                }
                if let Some(d) = directive {
                    m.insert("$patch".to_string(), json!(d));
                }
                Value::Object(m)
            });
        let containers = prop_oneof![
            value.clone(),
            prop::collection::vec(item, 0..4).prop_map(Value::Array),
        ];
        (meta, value, containers).prop_map(|(meta, spec, containers)| {
            let mut spec = match spec {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            spec.insert("containers".to_string(), containers);
            json!({"metadata": meta, "spec": spec})
        })
    }

    fn without_shortcuts<T>(f: impl FnOnce() -> T) -> T {
        NO_SHORTCUTS.with(|c| c.set(true));
        let out = f();
        NO_SHORTCUTS.with(|c| c.set(false));
        out
    }

    proptest! {
        #[test]
        fn shortcuts_change_no_result(pod in arb_pod(), patch in arb_patch()) {
            let show = |r: Result<Value, MergeError>| r.map_err(|e| e.to_string());
            for base in [json!({}), json!({"metadata": {}, "spec": {}}), pod] {
                let fast = show(strategic_merge_pod(&base, &patch));
                let full = show(without_shortcuts(|| strategic_merge_pod(&base, &patch)));
                prop_assert_eq!(fast, full);
            }
        }

        #[test]
        fn empty_patch_changes_nothing(pod in arb_pod()) {
            prop_assert_eq!(strategic_merge_pod(&pod, &json!({})).unwrap(), pod);
        }

        #[test]
        fn merge_is_idempotent_modulo_nulls(pod in arb_pod(), patch in arb_pod()) {
            let once = strategic_merge_pod(&pod, &patch).unwrap();
            let twice = strategic_merge_pod(&once, &patch).unwrap();
            prop_assert_eq!(drop_nulls(&twice), drop_nulls(&once));
        }

        #[test]
        fn keyed_lists_keep_both_orders_and_patch_values_win(pod in arb_pod(), patch in arb_pod()) {
            let out = strategic_merge_pod(&pod, &patch).unwrap();
            let got = names_of(&out["spec"]["containers"]);
            let orig = names_of(&pod["spec"]["containers"]);
            let pat = names_of(&patch["spec"]["containers"]);
            // union of names, each once
            let mut want: Vec<String> = orig.iter().chain(pat.iter()).cloned().collect();
            want.sort();
            want.dedup();
            let mut sorted = got.clone();
            sorted.sort();
            prop_assert_eq!(sorted, want);
            // patch items keep the patch order; items only the original has keep the original order
            prop_assert!(is_subsequence(&pat, &got));
            let server_only: Vec<String> = orig.iter().filter(|n| !pat.contains(n)).cloned().collect();
            prop_assert!(is_subsequence(&server_only, &got));
            for c in patch["spec"]["containers"].as_array().unwrap() {
                let merged = out["spec"]["containers"].as_array().unwrap().iter()
                    .find(|m| name_of(m) == name_of(c)).unwrap();
                // lists without a merge key are replaced, scalars win
                prop_assert_eq!(&merged["args"], &c["args"]);
                for e in c["env"].as_array().unwrap() {
                    let found = merged["env"].as_array().unwrap().iter()
                        .find(|m| m["name"] == e["name"]);
                    if e["value"].is_null() {
                        // a null in a patch item that merged into an existing item deletes the field
                        if let Some(f) = found {
                            let existed = pod["spec"]["containers"].as_array().unwrap().iter()
                                .any(|o| name_of(o) == name_of(c));
                            if existed {
                                prop_assert!(f.get("value").is_none_or(Value::is_null));
                            }
                        }
                    } else {
                        prop_assert_eq!(&found.unwrap()["value"], &e["value"]);
                    }
                }
            }
            // finalizers: set union
            let fin = out["metadata"]["finalizers"].as_array().unwrap();
            for f in pod["metadata"]["finalizers"].as_array().unwrap().iter()
                .chain(patch["metadata"]["finalizers"].as_array().unwrap()) {
                prop_assert_eq!(fin.iter().filter(|x| *x == f).count(), 1);
            }
            // labels: null deletes, values win, others stay
            for (k, v) in patch["metadata"]["labels"].as_object().unwrap() {
                prop_assert_eq!(out["metadata"]["labels"].get(k).unwrap_or(&Value::Null), v);
            }
        }
    }
}

/// A pod of `n` app containers and the grpc-agent-like template merged into it: `istio-proxy` plus
/// every app container given env and mounts, as `templates/grpc-agent.json` renders them.
fn many_containers(n: usize) -> (Value, Value) {
    let containers: Vec<Value> = (0..n)
        .map(|i| {
            json!({"name": format!("app{i}"), "image": format!("app:{i}"),
                   "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                   "ports": [{"containerPort": 8000 + i}],
                   "volumeMounts": [{"name": "data", "mountPath": format!("/d/{i}")}]})
        })
        .collect();
    let mut patched: Vec<Value> = vec![json!({"name": "istio-proxy", "image": "proxy",
        "env": [{"name": "X", "value": "y"}]})];
    patched.extend((0..n).map(|i| {
        json!({"name": format!("app{i}"),
               "env": [{"name": "GRPC_XDS_BOOTSTRAP", "value": "/etc/istio/proxy/grpc-bootstrap.json"}],
               "volumeMounts": [{"name": "istio-xds", "mountPath": "/etc/istio/proxy"}]})
    }));
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": containers}});
    let template = json!({"spec": {"containers": patched}});
    (pod, template)
}

/// The merge steps (key comparisons and index lookups) of injecting `many_containers(n)`: the merge of
/// the template, then Istio's re-application of every app container.
fn injection_steps(n: usize) -> u64 {
    let (pod, template) = many_containers(n);
    let (merged, steps) = work::steps(|| {
        let mut merged = pod.clone();
        strategic_merge_pod_into(&mut merged, &template).unwrap();
        reapply_overwritten_containers(&mut merged, &pod, &template, &json!({})).unwrap();
        merged
    });
    let got = merged["spec"]["containers"].as_array().unwrap();
    assert_eq!(got.len(), n + 1);
    // every app container kept its own fields and got the template's
    for c in got.iter().filter(|c| name_of(c) != "istio-proxy") {
        assert_eq!(c["env"].as_array().unwrap().len(), 3, "{c}");
        assert_eq!(c["volumeMounts"].as_array().unwrap().len(), 2, "{c}");
    }
    steps
}

#[test]
fn merging_and_reapplying_many_containers_is_linear_in_their_number() {
    // Istio's `reapplyOverwrittenContainers` merges the whole pod once per container: with a scan per
    // item in each merge that was cubic (the steps grew 64-fold for 4 times the containers).
    let (small, large) = (injection_steps(50), injection_steps(200));
    // Counted, not timed: linear is 4 times the steps, so the bound can be tight.
    assert!(
        large < small * 6,
        "4x the containers took {large} steps against {small}: not linear"
    );
}

/// The merge steps of a sidecar-like template (one container) into a pod of `n` containers.
fn one_container_template_steps(n: usize) -> u64 {
    let pod = many_containers(n).0;
    let template = json!({"spec": {"containers": [{"name": "istio-proxy", "image": "proxy"}],
                                   "initContainers": [{"name": "istio-init"}]}});
    let (merged, steps) = work::steps(|| {
        let mut merged = pod.clone();
        strategic_merge_pod_into(&mut merged, &template).unwrap();
        reapply_overwritten_containers(&mut merged, &pod, &template, &json!({})).unwrap();
        merged
    });
    let names: Vec<&str> = merged["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(name_of)
        .collect();
    assert_eq!(names.len(), n + 1);
    assert_eq!(
        (names[0], names[1], names[n]),
        ("istio-proxy", "app0", &*format!("app{}", n - 1))
    );
    steps
}

#[test]
fn merging_one_container_into_many_is_linear_in_their_number() {
    // Ordering the merged list looked each item's original position up by a scan: quadratic.
    let (small, large) = (
        one_container_template_steps(100),
        one_container_template_steps(400),
    );
    assert!(
        large < small * 6,
        "4x the containers took {large} steps against {small}: not linear"
    );
}

#[test]
fn reapplying_into_repeated_names_gathers_them_as_the_merge_does() {
    // `normalizeElementOrder` after one merge puts every item right behind the first of its name.
    let pod = json!({"spec": {"containers": [
        {"name": "b", "n": 1}, {"name": "a", "n": 2}, {"name": "b", "n": 3}, {"name": 7, "n": 4},
        {"name": "a", "n": 5}, {"name": 7.0, "n": 6}]}});
    let overlays = [json!({"name": "a", "image": "x"})];
    let mut fast = pod.clone();
    reapply_list(&mut fast, "containers", &overlays).unwrap();
    let mut slow = pod.clone();
    reapply_one_by_one(&mut slow, "containers", &overlays).unwrap();
    assert_eq!(fast, slow);
    let order: Vec<i64> = fast["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["n"].as_i64().unwrap())
        .collect();
    assert_eq!(order, [1, 3, 2, 5, 4, 6]);
    assert_eq!(fast["spec"]["containers"][2]["image"], json!("x"));
}

mod scale_props {
    use super::*;
    use proptest::prelude::*;

    /// Keys of every JSON kind, few enough distinct ones that lists repeat them.
    fn arb_key() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => "[a-f]".prop_map(Value::String),
            2 => (0i64..4).prop_map(Value::from),
            1 => prop_oneof![Just(json!(1.0)), Just(json!(-0.0)), Just(json!(0.0))],
            1 => prop_oneof![Just(Value::Null), Just(json!(true)), Just(json!({"k": 1})), Just(json!([1]))],
        ]
    }

    /// Lists on both sides of the scan threshold.
    fn arb_keys() -> impl Strategy<Value = Vec<Value>> {
        prop::collection::vec(arb_key(), 0..40)
    }

    proptest! {
        #[test]
        fn the_key_index_finds_what_a_scan_finds(keys in arb_keys(), probes in arb_keys()) {
            let index = KeyIndex::of(&keys, keys.len());
            for k in probes.iter().chain(&keys) {
                let scan = keys.iter().position(|x| key_eq(x, k));
                prop_assert_eq!(index.position(k), scan, "{}", k);
            }
        }

        #[test]
        fn reapplying_in_one_pass_is_the_merge_per_container(
            names in prop::collection::vec(prop::option::of(arb_key()), 0..30),
            picked in prop::collection::vec((0usize..40, "[a-z]{0,2}"), 0..6),
            unnamed_overlay in any::<bool>(),
        ) {
            let containers: Vec<Value> = names.iter().enumerate().map(|(i, n)| {
                let mut c = json!({"i": i, "env": [{"name": "E", "value": i.to_string()}]});
                if let Some(n) = n {
                    c["name"] = n.clone();
                }
                c
            }).collect();
            let pod = json!({"spec": {"containers": containers}});
            let mut overlays: Vec<Value> = picked.iter().map(|(at, image)| {
                let name = names.get(*at).cloned().flatten().unwrap_or_else(|| json!("missing"));
                json!({"name": name, "image": image, "env": [{"name": "F", "value": image}]})
            }).collect();
            if unnamed_overlay {
                overlays.push(json!({"image": "i"}));
            }
            let show = |r: Result<(), MergeError>, v: Value| r.map(|()| v).map_err(|e| e.to_string());
            let mut fast = pod.clone();
            let fast = show(reapply_list(&mut fast, "containers", &overlays), fast);
            let mut slow = pod.clone();
            let slow = show(reapply_one_by_one(&mut slow, "containers", &overlays), slow);
            prop_assert_eq!(fast, slow);
        }
    }
}
