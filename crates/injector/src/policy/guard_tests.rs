//! The guard of `injector policy --guard` (`shared::policy::guard`): its objects, and that it rejects
//! only pods the webhook would have injected.

use serde_json::{json, Value};

use super::*;
use crate::shared::policy::guard;
use inject::config::Settings;
use inject::engine::Mode;

fn engine(config: Value) -> Engine {
    let settings = Settings::from_documents(
        None,
        None,
        (!config.is_null()).then_some(("config", &config)),
        true,
        "",
        "",
    )
    .unwrap();
    Engine::new(settings)
}

fn webhook(flags: &[&str]) -> webhook_config::Args {
    let mut wc = webhook_config::Args::for_revision("", false).unwrap();
    let mut it = flags.iter();
    while let Some(f) = it.next() {
        match *f {
            "--tag" => wc.scope.tags.push(it.next().unwrap().to_string()),
            "--revision" => wc.revision = Some(it.next().unwrap().to_string()),
            other => panic!("{other}"),
        }
    }
    wc
}

fn guarded(flags: &[&str]) -> Compiled {
    let wc = webhook(flags);
    compile(&engine(Value::Null), &wc, &[], ApiVersion::V1beta1)
        .unwrap()
        .with_guard(&wc)
        .unwrap()
}

#[test]
fn the_guard_is_a_validating_policy_with_a_binding_per_webhook_entry_selecting_what_it_selects() {
    let wc = webhook(&[]);
    let plain = compile(&engine(Value::Null), &wc, &[], ApiVersion::V1beta1).unwrap();
    assert!(plain.guard.is_empty(), "no guard without --guard");
    let c = plain.clone().with_guard(&wc).unwrap();
    // The guard comes after everything `injector policy` wrote without it.
    assert_eq!(
        c.objects().len(),
        plain.objects().len() + 1 + c.bindings.len()
    );
    let policy = &c.guard[0];
    assert_eq!(policy["apiVersion"], "admissionregistration.k8s.io/v1");
    assert_eq!(policy["kind"], "ValidatingAdmissionPolicy");
    assert_eq!(policy["metadata"]["name"], "sidecar-injector-guard");
    assert_eq!(policy["metadata"]["labels"]["istio.io/rev"], "default");
    let spec = &policy["spec"];
    // When unsure, accept.
    assert_eq!(spec["failurePolicy"], "Ignore");
    assert_eq!(spec["paramKind"], c.policy["spec"]["paramKind"]);
    assert_eq!(
        spec["matchConstraints"],
        c.policy["spec"]["matchConstraints"]
    );
    let conditions: Vec<&str> = spec["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        conditions,
        [
            "params",
            "namespace",
            "not-host-network",
            "not-injected-by-policy",
            "injects"
        ]
    );
    // The decision is the subset's own `injects` rule, on the same params.
    let injects = subset::rules()
        .into_iter()
        .find(|r| r.name == "injects")
        .unwrap();
    assert_eq!(spec["matchConditions"][4]["expression"], json!(injects.cel));
    assert_eq!(
        spec["validations"][0]["expression"],
        "'sidecar.istio.io/status' in object.metadata.?annotations.orValue({})"
    );
    assert_eq!(spec["validations"][0]["reason"], "Forbidden");

    // One binding per entry, each selecting what the entry (and the policy's binding) selects.
    let mwcs = wc.configurations(None).unwrap();
    let entries = mwcs[0].webhooks.as_ref().unwrap();
    let bindings = &c.guard[1..];
    assert_eq!(bindings.len(), entries.len());
    assert_eq!(bindings.len(), c.bindings.len());
    for ((b, w), m) in bindings.iter().zip(entries).zip(&c.bindings) {
        assert_eq!(b["apiVersion"], "admissionregistration.k8s.io/v1");
        assert_eq!(b["kind"], "ValidatingAdmissionPolicyBinding");
        assert_eq!(
            b["metadata"]["name"],
            json!(format!("{}-guard", m["metadata"]["name"].as_str().unwrap()))
        );
        let r = &b["spec"]["matchResources"];
        assert_eq!(
            r["namespaceSelector"],
            serde_json::to_value(&w.namespace_selector).unwrap()
        );
        assert_eq!(
            r["objectSelector"],
            serde_json::to_value(&w.object_selector).unwrap()
        );
        assert_eq!(r, &m["spec"]["matchResources"]);
        assert_eq!(b["spec"]["policyName"], "sidecar-injector-guard");
        assert_eq!(b["spec"]["paramRef"], m["spec"]["paramRef"]);
        assert_eq!(b["spec"]["validationActions"], json!(["Deny"]));
    }
    // kube-system is never selected, as by the webhook.
    for b in bindings {
        let excluded = b["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| {
                e["key"] == "kubernetes.io/metadata.name"
                    && e["operator"] == "NotIn"
                    && e["values"]
                        .as_array()
                        .unwrap()
                        .contains(&json!("kube-system"))
            });
        assert!(excluded, "{b}");
    }
    let yaml = c.yaml().unwrap();
    assert_eq!(
        yaml.matches("\n---\n").count(),
        c.objects().len() - 1,
        "{yaml}"
    );
    assert!(
        yaml.contains("kind: ValidatingAdmissionPolicyBinding"),
        "{yaml}"
    );
}

#[test]
fn a_revision_and_its_tags_get_their_own_guard_bindings() {
    let c = guarded(&["--revision", "canary", "--tag", "prod"]);
    assert_eq!(
        c.guard[0]["metadata"]["name"],
        "sidecar-injector-canary-guard"
    );
    let names: Vec<(&str, &str)> = c.guard[1..]
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
        names,
        [
            ("sidecar-injector-canary-rev-namespace-guard", ""),
            ("sidecar-injector-canary-rev-object-guard", ""),
            ("sidecar-injector-tag-prod-rev-namespace-guard", "prod"),
            ("sidecar-injector-tag-prod-rev-object-guard", "prod"),
        ]
    );
    for b in &c.guard[1..] {
        assert_eq!(b["spec"]["paramRef"]["name"], "sidecar-injector-canary");
        // The revision of the configuration compiled, as on the policy's own objects.
        assert_eq!(
            b["metadata"]["labels"]["istio.io/rev"],
            c.policy["metadata"]["labels"]["istio.io/rev"]
        );
    }
    let prod = &c.guard[3]["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0];
    assert_eq!(prod["values"], json!(["prod"]));
}

#[test]
fn the_message_names_the_pod_the_cause_and_the_fix() {
    let c = guarded(&["--tag", "prod"]);
    let v = &c.guard[0]["spec"]["validations"][0];
    let expression = v["messageExpression"].as_str().unwrap();
    let message = v["message"].as_str().unwrap();
    assert!(
        expression.starts_with("'pod ' + request.namespace + '/' + "),
        "{expression}"
    );
    for text in [expression, message] {
        for part in [
            "was not injected",
            "MutatingWebhookConfiguration sidecar-injector, MutatingWebhookConfiguration sidecar-injector-tag-prod",
            "failurePolicy Ignore",
            "MutatingAdmissionPolicy sidecar-injector ",
            "outside its subset",
            "retry when the injector is up",
            "sidecar.istio.io/inject=false",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }
    // One CEL string literal after the name: no quote of the text ends it early.
    assert_eq!(expression.matches('\'').count(), 14, "{expression}");
}

fn pod(namespace: &str, meta: Value, spec: Value) -> Value {
    let mut m = meta;
    m["name"] = json!("p");
    m["namespace"] = json!(namespace);
    let mut s = json!({"containers": [{"name": "app", "image": "app"}]});
    if let (Some(s), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": s})
}

/// Whether the guard rejects `pod` (as it reaches validation) under the configuration of `e`.
fn rejects(e: &Engine, pod: &Value) -> bool {
    let spec = params::compile(e, "/inject", &[]).unwrap();
    let decision = e.decide(pod, Mode::Webhook);
    guard::rejects(&subset::Facts {
        pod,
        params: &spec,
        decision: &decision,
    })
}

#[test]
fn the_guard_rejects_an_uninjected_pod_the_webhook_would_inject_and_nothing_it_would_not() {
    let default = engine(Value::Null);
    let disabled = engine(json!({"policy": "disabled",
        "alwaysInjectSelector": [{"matchLabels": {"mesh": "yes"}}]}));
    let never = engine(
        json!({"policy": "enabled", "neverInjectSelector": [{"matchLabels": {"batch": "true"}}]}),
    );
    let status = json!({"annotations": {"sidecar.istio.io/status": "{}"}});
    let cases: Vec<(&str, &Engine, Value, bool)> = vec![
        ("plain", &default, pod("apps", json!({}), json!({})), true),
        (
            "injected",
            &default,
            pod("apps", status.clone(), json!({})),
            false,
        ),
        (
            "label inject=false",
            &default,
            pod(
                "apps",
                json!({"labels": {"sidecar.istio.io/inject": "false"}}),
                json!({}),
            ),
            false,
        ),
        (
            "annotation inject=false",
            &default,
            pod(
                "apps",
                json!({"annotations": {"sidecar.istio.io/inject": "false"}}),
                json!({}),
            ),
            false,
        ),
        (
            "label true over annotation false",
            &default,
            pod(
                "apps",
                json!({"labels": {"sidecar.istio.io/inject": "true"},
                       "annotations": {"sidecar.istio.io/inject": "false"}}),
                json!({}),
            ),
            true,
        ),
        (
            "label neither true nor false over annotation false",
            &default,
            pod(
                "apps",
                json!({"labels": {"sidecar.istio.io/inject": "yes"},
                       "annotations": {"sidecar.istio.io/inject": "false"}}),
                json!({}),
            ),
            true,
        ),
        (
            "host network",
            &default,
            pod("apps", json!({}), json!({"hostNetwork": true})),
            false,
        ),
        (
            "kube-system",
            &default,
            pod("kube-system", json!({}), json!({})),
            false,
        ),
        (
            "kube-public",
            &default,
            pod("kube-public", json!({}), json!({})),
            false,
        ),
        (
            "local-path-storage",
            &default,
            pod("local-path-storage", json!({}), json!({})),
            false,
        ),
        (
            "marked by the policy",
            &default,
            pod(
                "apps",
                json!({"annotations": {MARKER_ANNOTATION: "default"}}),
                json!({}),
            ),
            false,
        ),
        (
            "policy disabled",
            &disabled,
            pod("apps", json!({}), json!({})),
            false,
        ),
        (
            "policy disabled, always selector",
            &disabled,
            pod("apps", json!({"labels": {"mesh": "yes"}}), json!({})),
            true,
        ),
        (
            "policy disabled, opted in",
            &disabled,
            pod(
                "apps",
                json!({"annotations": {"sidecar.istio.io/inject": "true"}}),
                json!({}),
            ),
            true,
        ),
        (
            "never selector",
            &never,
            pod("apps", json!({"labels": {"batch": "true"}}), json!({})),
            false,
        ),
        (
            "never selector, opted in",
            &never,
            pod(
                "apps",
                json!({"labels": {"batch": "true", "sidecar.istio.io/inject": "true"}}),
                json!({}),
            ),
            true,
        ),
    ];
    for (what, e, p, want) in &cases {
        assert_eq!(rejects(e, p), *want, "{what}: {p}");
        // Never a pod the webhook would not inject.
        if rejects(e, p) {
            assert!(e.decide(p, Mode::Webhook).inject, "{what}: {p}");
        }
        // Once injected, every pod passes.
        let mut injected = p.clone();
        injected["metadata"]["annotations"]["sidecar.istio.io/status"] = json!("{}");
        assert!(!rejects(e, &injected), "{what}: {injected}");
    }
}
