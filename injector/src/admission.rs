//! AdmissionReview handling (`admission.k8s.io/v1` and `v1beta1`): request in, response out, same version.
//! The HTTP layer (`server`) deals with status codes, bodies and content types; everything from the decoded
//! body on is here, so the webhook and the tests share one entry point.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::engine::{self, Engine, InjectRequest, Mode};
use crate::fields::Fields;
use crate::json_writer;
use crate::memo;

/// What happened to one review, for the response, logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutcomeKind {
    /// A patch was produced.
    Injected,
    /// Allowed without a patch; `message` says why (the decision's reason).
    Skipped,
    /// Injection failed: `allowed: false` with a message.
    Failed,
    /// The body was not an AdmissionReview: `allowed: false` with a message (HTTP 200, as Istio).
    Undecodable,
}

/// The result of [`handle`].
#[derive(Debug, Clone)]
pub struct ReviewOutcome {
    /// The AdmissionReview response, serialised.
    pub response: Vec<u8>,
    pub kind: OutcomeKind,
    pub uid: String,
    pub namespace: String,
    /// The pod's name or generateName, for logs.
    pub pod: String,
    /// Why (skip reason or error text); empty when injected.
    pub message: String,
}

const API_VERSIONS: [&str; 2] = ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"];

fn undecodable(message: String) -> ReviewOutcome {
    // Istio cannot tell the version of an undecodable review: the envelope has no apiVersion/kind.
    let body = json!({"response": {"uid": "", "allowed": false, "status": {"metadata": {}, "message": message}}});
    ReviewOutcome {
        response: serde_json::to_vec(&body).unwrap_or_default(),
        kind: OutcomeKind::Undecodable,
        uid: String::new(),
        namespace: String::new(),
        pod: String::new(),
        message,
    }
}

struct Envelope<'a> {
    api_version: &'a str,
    uid: String,
    namespace: String,
    pod: String,
}

impl Envelope<'_> {
    fn respond(&self, response: Value, kind: OutcomeKind, message: String) -> ReviewOutcome {
        let body = json!({"kind": "AdmissionReview", "apiVersion": self.api_version, "response": response});
        ReviewOutcome {
            response: serde_json::to_vec(&body).unwrap_or_default(),
            kind,
            uid: self.uid.clone(),
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            message,
        }
    }

    /// The success response, written directly: the base64 patch is the bulk of it and is not worth
    /// building as a JSON value first.
    fn injected(&self, patch: &[u8]) -> ReviewOutcome {
        let quote = json_writer::write_str;
        let b64 = base64_simd::STANDARD;
        let mut out = Vec::with_capacity(b64.encoded_length(patch.len()) + 160);
        out.extend_from_slice(b"{\"kind\":\"AdmissionReview\",\"apiVersion\":");
        quote(&mut out, self.api_version);
        out.extend_from_slice(b",\"response\":{\"uid\":");
        quote(&mut out, &self.uid);
        out.extend_from_slice(b",\"allowed\":true,\"patch\":\"");
        b64.encode_append(patch, &mut out);
        out.extend_from_slice(b"\",\"patchType\":\"JSONPatch\"}}");
        ReviewOutcome {
            response: out,
            kind: OutcomeKind::Injected,
            uid: self.uid.clone(),
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            message: String::new(),
        }
    }

    fn fail(&self, message: String) -> ReviewOutcome {
        self.respond(
            json!({"uid": self.uid, "allowed": false, "status": {"metadata": {}, "message": message}}),
            OutcomeKind::Failed,
            message,
        )
    }
}

/// The parts of an AdmissionReview we read; everything else (`userInfo`, `oldObject`, …) is skipped
/// without being built.
#[derive(serde::Deserialize)]
struct Review {
    #[serde(rename = "apiVersion", default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    request: Option<Request>,
}

#[derive(serde::Deserialize)]
struct Request {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    kind: Option<Value>,
    #[serde(default)]
    object: Option<Value>,
}

/// Handles one AdmissionReview body sent to `path` (`/inject` or `/inject/<params>`). Never panics:
/// every malformed input becomes an `allowed: false` response with a message.
pub fn handle(engine: &Engine, body: &[u8], path: &str) -> ReviewOutcome {
    // serde_json's recursion limit (128) bounds the depth of what we accept.
    let review: Review = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return undecodable(format!("could not decode the AdmissionReview: {e}")),
    };
    let api_version = review.api_version.as_deref().unwrap_or("");
    let kind = review.kind.as_deref().unwrap_or("");
    let Some(api_version) = API_VERSIONS.iter().copied().find(|v| *v == api_version) else {
        return undecodable(format!(
            "unsupported review {api_version:?}/{kind:?}: want kind AdmissionReview, apiVersion admission.k8s.io/v1 or v1beta1"
        ));
    };
    if kind != "AdmissionReview" {
        return undecodable(format!("unsupported kind {kind:?}: want AdmissionReview"));
    }
    let Some(mut request) = review.request else {
        return undecodable("the AdmissionReview has no request".to_string());
    };
    let mut env = Envelope {
        api_version,
        uid: request.uid.unwrap_or_default(),
        namespace: request.namespace.unwrap_or_default(),
        pod: String::new(),
    };

    let original = match &mut request.object {
        Some(o @ Value::Object(_)) => o,
        Some(other) => {
            return env.fail(format!(
                "request.object is not a Pod object: {}",
                type_name(other)
            ))
        }
        None => return env.fail("request.object is missing".to_string()),
    };
    let req_kind = request
        .kind
        .as_ref()
        .and_then(|k| k.field("kind"))
        .and_then(Value::as_str);
    let obj_kind = original.field("kind").and_then(Value::as_str);
    if let Some(k) = obj_kind.or(req_kind).filter(|k| *k != "Pod") {
        return env.fail(format!("only Pods can be injected, got kind {k:?}"));
    }
    if let Some(m) = original.field("metadata") {
        if !m.is_object() {
            return env.fail("request.object.metadata is not an object".to_string());
        }
    }
    if let Some(s) = original.field("spec") {
        if !s.is_object() {
            return env.fail("request.object.spec is not an object".to_string());
        }
    }

    // The working pod: managedFields dropped, namespace defaulted from the request (spec §2.4). The
    // request's object is ours, so a pod with metadata is normalised in place, and the patch is the diff
    // of that normalised pod and the result: neither side then differs in namespace or managedFields,
    // so the patch has no operation on them and leaves them as the API server holds them. A pod without
    // metadata is copied instead, and the result's metadata restored before the diff (its patch must
    // add `metadata` whole, without the defaulted namespace).
    let orig_meta = original.field("metadata");
    let pod_ns = orig_meta
        .and_then(|m| m.field("namespace"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let default_ns = pod_ns.is_empty() && !env.namespace.is_empty();
    let has_managed = orig_meta.is_some_and(|m| m.has_field("managedFields"));
    let restore = default_ns && orig_meta.is_none();
    if !pod_ns.is_empty() {
        env.namespace = pod_ns.to_string();
    }
    let mut copy = restore.then(|| original.clone());
    if default_ns || has_managed {
        let target = copy.as_mut().unwrap_or(&mut *original);
        normalise(target, default_ns.then_some(env.namespace.as_str()));
    }
    let original: &Value = original;
    let pod: &Value = copy.as_ref().unwrap_or(original);
    let meta = pod.field("metadata");
    env.pod = meta
        .and_then(|m| m.field("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| {
            meta.and_then(|m| m.field("generateName"))
                .and_then(Value::as_str)
        })
        .unwrap_or("")
        .to_string();

    let decision = engine.decide(pod, Mode::Webhook);
    if !decision.inject {
        return env.respond(
            json!({"uid": env.uid, "allowed": true}),
            OutcomeKind::Skipped,
            decision.reason,
        );
    }

    let workload = engine::deploy_meta_from_pod(pod);
    let req = InjectRequest {
        pod,
        workload: &workload,
        url_env: parse_inject_envs(path),
        mode: Mode::Webhook,
    };
    let (mut result, texts) = match engine.inject_with_texts(&req) {
        Ok(r) => r,
        Err(e) => return env.fail(e.to_string()),
    };
    if restore {
        // The patch is against the object the API server holds: take out what we normalised.
        restore_request_fields(&mut result);
    }
    let (patch_bytes, reused) = engine.patch_json(original, &result, &texts);
    // The result's unchanged containers and volumes become the memo's spares for the next hit.
    memo::recycle(result, &texts, &reused);
    env.injected(&patch_bytes)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Drops `metadata.managedFields` and, given one, sets the namespace (the pod had none).
fn normalise(pod: &mut Value, namespace: Option<&str>) {
    let Some(obj) = pod.as_object_mut() else {
        return;
    };
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.remove("managedFields");
        if let Some(ns) = namespace {
            meta.insert("namespace".to_string(), Value::String(ns.to_string()));
        }
    }
}

/// Undoes [`normalise`] on the result of a pod that had no metadata: the request carried neither a
/// namespace nor managedFields, and neither is ours to add. An empty metadata object is left: harmless,
/// and the patch then adds only what injection added.
fn restore_request_fields(result: &mut Value) {
    if let Some(meta) = result.field_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        meta.remove("namespace");
    }
}

/// Istio's `parseInjectEnvs` (spec §2.5): environment for the proxy from the webhook URL path, e.g.
/// `/inject/cluster/c1/net/n1` → `ISTIO_META_CLUSTER_ID=c1`, `ISTIO_META_NETWORK=n1`.
pub fn parse_inject_envs(path: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let p = path.strip_suffix('/').unwrap_or(path);
    let mut parts = p.splitn(3, '/');
    let (_, _, rest) = (parts.next(), parts.next(), parts.next());
    let Some(rest) = rest else {
        return env;
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    if rest.starts_with(":ENV:") {
        for piece in rest.split(":ENV:").skip(1) {
            if let Some((k, v)) = piece.split_once('=') {
                if !k.is_empty() {
                    pairs.push((k.to_string(), v.to_string()));
                }
            }
        }
    } else {
        let items: Vec<&str> = rest.split('/').collect();
        for chunk in items.chunks(2) {
            if let [k, v] = chunk {
                pairs.push((k.to_string(), v.replace("--slash--", "/")));
            }
            // A trailing key without a value is ignored (Istio logs a warning).
        }
    }
    for (k, v) in pairs {
        let key = match k.as_str() {
            "cluster" => "ISTIO_META_CLUSTER_ID".to_string(),
            "net" => "ISTIO_META_NETWORK".to_string(),
            other => other.to_uppercase(),
        };
        env.insert(key, v);
    }
    env
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Istio's `TestParseInjectEnvs`.
    #[test]
    fn inject_envs() {
        assert_eq!(parse_inject_envs("/inject"), m(&[]));
        assert_eq!(parse_inject_envs("/inject/"), m(&[]));
        assert_eq!(
            parse_inject_envs("/inject/cluster/cluster1/net/network1/"),
            m(&[
                ("ISTIO_META_CLUSTER_ID", "cluster1"),
                ("ISTIO_META_NETWORK", "network1")
            ])
        );
        assert_eq!(
            parse_inject_envs("/inject/cluster/cluster--slash--1"),
            m(&[("ISTIO_META_CLUSTER_ID", "cluster/1")])
        );
        assert_eq!(
            parse_inject_envs("/inject/cluster/cluster1/network"),
            m(&[("ISTIO_META_CLUSTER_ID", "cluster1")])
        );
        assert_eq!(
            parse_inject_envs("/inject/:ENV:cluster=cluster2:ENV:rootpage=/foo/bar"),
            m(&[
                ("ISTIO_META_CLUSTER_ID", "cluster2"),
                ("ROOTPAGE", "/foo/bar")
            ])
        );
        assert_eq!(
            parse_inject_envs("/inject/rootpage1/value1/rootpage2/:ENV:abcd=efgh"),
            m(&[("ROOTPAGE1", "value1"), ("ROOTPAGE2", ":ENV:abcd=efgh")])
        );
        assert_eq!(
            parse_inject_envs("/inject/:ENV:rootpage1=efgh:ENV:=abb:ENV:="),
            m(&[("ROOTPAGE1", "efgh")])
        );
        assert_eq!(
            parse_inject_envs("/inject/custom_env/v"),
            m(&[("CUSTOM_ENV", "v")])
        );
    }

    #[test]
    fn garbage_and_wrong_kinds_are_answered_not_panicked() {
        let e = Engine::new(crate::config::Settings::default());
        for body in [
            &b"[0,1,2,3,4,5]"[..],
            b"",
            b"{",
            b"{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\"}",
            b"{\"kind\":\"Pod\",\"apiVersion\":\"v1\"}",
        ] {
            let out = handle(&e, body, "/inject");
            assert_eq!(
                out.kind,
                OutcomeKind::Undecodable,
                "{}",
                String::from_utf8_lossy(body)
            );
            let v: Value = serde_json::from_slice(&out.response).unwrap();
            assert_eq!(v["response"]["allowed"], json!(false));
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            handle(&e, deep.as_bytes(), "/inject").kind,
            OutcomeKind::Undecodable
        );

        let svc = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1",
            "request": {"uid": "u1", "kind": {"kind": "Service"}, "object": {"kind": "Service", "apiVersion": "v1"}}});
        let out = handle(&e, &serde_json::to_vec(&svc).unwrap(), "/inject");
        assert_eq!(out.kind, OutcomeKind::Failed);
        let v: Value = serde_json::from_slice(&out.response).unwrap();
        assert_eq!(v["apiVersion"], json!("admission.k8s.io/v1beta1"));
        assert_eq!(v["response"]["uid"], json!("u1"));
        assert!(v["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("Service"));
    }

    #[test]
    fn injected_response_keeps_the_version_and_escapes_the_uid() {
        let e = Engine::new(crate::config::Settings::default());
        let review = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1",
            "request": {"uid": "a\"b\\c", "namespace": "ns", "userInfo": {"username": "x"}, "oldObject": null,
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "managedFields": [{"manager": "m"}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let out = handle(
            &e,
            &serde_json::to_vec(&review).unwrap(),
            "/inject/cluster/c1",
        );
        assert_eq!(out.kind, OutcomeKind::Injected, "{}", out.message);
        assert_eq!(out.namespace, "ns");
        let v: Value = serde_json::from_slice(&out.response).unwrap();
        assert_eq!(v["apiVersion"], json!("admission.k8s.io/v1beta1"));
        assert_eq!(v["response"]["uid"], json!("a\"b\\c"));
        assert_eq!(v["response"]["patchType"], json!("JSONPatch"));
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v["response"]["patch"].as_str().unwrap())
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        let mut pod = review["request"]["object"].clone();
        json_patch::patch(&mut pod, &patch).unwrap();
        // managedFields and the (absent) namespace are left as the API server holds them.
        assert_eq!(pod["metadata"]["managedFields"], json!([{"manager": "m"}]));
        assert!(pod["metadata"].field("namespace").is_none());
        let proxy = pod["spec"]["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == json!("istio-proxy"))
            .unwrap();
        let env = proxy["env"].as_array().unwrap();
        assert!(env
            .iter()
            .any(|e| e["name"] == json!("ISTIO_META_CLUSTER_ID") && e["value"] == json!("c1")));
    }

    /// The namespace the request defaults and the managedFields dropped for the engine are not the
    /// patch's business: for a pod with metadata (normalised in place, diffed against the normalised
    /// pod) and without (copied, result restored), the patch applied to the request's object leaves
    /// both as they were, never names them, and injects.
    #[test]
    fn normalised_fields_stay_as_the_api_server_holds_them() {
        let e = Engine::new(crate::config::Settings::default());
        let spec = json!({"containers": [{"name": "app", "image": "a"}]});
        for object in [
            json!({"metadata": {"generateName": "p-", "managedFields": [{"manager": "m"}],
                   "labels": {"app": "p"}}, "spec": spec}),
            json!({"metadata": {"namespace": "", "labels": {"app": "p"}}, "spec": spec}),
            json!({"metadata": {"namespace": "other", "managedFields": []}, "spec": spec}),
            json!({"spec": spec}),
        ] {
            let review = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                "request": {"uid": "u", "namespace": "ns", "object": object}});
            let out = handle(&e, &serde_json::to_vec(&review).unwrap(), "/inject");
            assert_eq!(out.kind, OutcomeKind::Injected, "{object}");
            let v: Value = serde_json::from_slice(&out.response).unwrap();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v["response"]["patch"].as_str().unwrap())
                .unwrap();
            let ops: Value = serde_json::from_slice(&bytes).unwrap();
            for op in ops.as_array().unwrap() {
                let path = op["path"].as_str().unwrap();
                assert!(
                    !path.starts_with("/metadata/namespace")
                        && !path.starts_with("/metadata/managedFields"),
                    "{object}: {op}"
                );
            }
            let patch: json_patch::Patch = serde_json::from_value(ops).unwrap();
            let mut pod = object.clone();
            json_patch::patch(&mut pod, &patch).unwrap();
            for key in ["namespace", "managedFields"] {
                assert_eq!(
                    pod["metadata"].get(key),
                    object.get("metadata").and_then(|m| m.get(key)),
                    "{object}: {key}"
                );
            }
            assert!(pod["spec"]["initContainers"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["name"] == json!("istio-proxy"))));
        }
    }

    /// The render memo stores a pod's render on its second sighting and answers from the third on, the
    /// patch then reuses the stored text of the rendered containers, and from the fourth on the hit moves
    /// in the spare items the previous answer handed back: every answer must be the same.
    #[test]
    fn replicas_get_the_same_response_with_and_without_the_memo() {
        let e = Engine::new(crate::config::Settings::default());
        let probes = json!({"httpGet": {"path": "/ready", "port": 8080}});
        for pod in [
            json!({"metadata": {"generateName": "a-", "labels": {"app": "a"}},
                   "spec": {"containers": [{"name": "a", "image": "a"}]}}),
            // Post-processing changes the proxy (app probers): its stored text must not be used.
            json!({"metadata": {"generateName": "b-"},
                   "spec": {"containers": [{"name": "b", "image": "b", "readinessProbe": probes}],
                            "initContainers": [{"name": "setup", "image": "s"}]}}),
        ] {
            let review = serde_json::to_vec(&json!({"kind": "AdmissionReview",
                "apiVersion": "admission.k8s.io/v1",
                "request": {"uid": "u", "namespace": "ns", "object": pod}}))
            .unwrap();
            let spares_before = e.memo().spares_held();
            let answers: Vec<Vec<u8>> = (0..6)
                .map(|_| handle(&e, &review, "/inject").response)
                .collect();
            for (i, a) in answers.iter().enumerate() {
                assert_eq!(a, &answers[0], "answer {i}");
            }
            // The hits handed items back (one set: each hit takes the spares the previous one returned).
            assert!(e.memo().spares_held() > spares_before);
        }
        assert_eq!(e.memoized(), 2);
    }

    #[test]
    fn skipped_pods_are_allowed_without_patch() {
        let e = Engine::new(crate::config::Settings::default());
        let review = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
            "request": {"uid": "abc", "namespace": "kube-system", "object": {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let out = handle(&e, &serde_json::to_vec(&review).unwrap(), "/inject");
        assert_eq!(out.kind, OutcomeKind::Skipped);
        assert!(out.message.contains("kube-system"));
        let v: Value = serde_json::from_slice(&out.response).unwrap();
        assert_eq!(
            v,
            json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                             "response": {"uid": "abc", "allowed": true}})
        );
    }
}
