//! AdmissionReview handling (`admission.k8s.io/v1` and `v1beta1`): request in, response out, same version.
//! The HTTP layer (`serve`) deals with status codes, bodies and content types; everything from the decoded
//! body on is here, so the webhook and the tests share one entry point.
//!
//! [`Webhook`] adds a cache of finished patches: the replicas of a workload send identical pods (same
//! `generateName`, labels, owner and spec; no name yet), and a pod's patch is a pure function of the
//! configuration, the request's namespace, the URL path and the pod as normalised here ([`PatchKey`]).
//! So from a pod's second sighting on (see `cache`) its base64 patch is stored, and a hit only writes the
//! response around it. Only injections are cached: a skip is cheap, and a failure is answered afresh.

use std::hash::{Hash, Hasher};

use serde_json::{json, Value};

use crate::shared::cache::{Bounds, Cache, CacheCounters};
use crate::shared::webhook_request;
use inject::engine::{Engine, Mode};
use sidecar_core::admission_review::{self, API_VERSIONS};
use sidecar_core::fields::Fields;

/// The patch cache's limits: 64 entries of at most 1 MiB (pod and patch text, see [`weight`]), 4 MiB
/// together, and the hashes of the last 256 misses.
pub const PATCH_CACHE_BOUNDS: Bounds = Bounds {
    max_entries: 64,
    max_entry_weight: 1024 * 1024,
    max_total_weight: 4 * 1024 * 1024,
    remembered_misses: 256,
};

/// What a webhook patch depends on: the configuration (its generation number, given by the server), the
/// request's namespace, the URL path and the request's object after normalisation (managedFields
/// dropped, namespace defaulted). Pods compare with their key order (it is part of the patch's bytes),
/// unlike `serde_json`'s `==`.
#[derive(Debug, Clone)]
pub struct PatchKey {
    pub generation: u64,
    pub namespace: String,
    pub path: String,
    pub pod: Value,
}

impl PartialEq for PatchKey {
    fn eq(&self, other: &PatchKey) -> bool {
        self.generation == other.generation
            && self.namespace == other.namespace
            && self.path == other.path
            && identical(&self.pod, &other.pod)
    }
}

impl Eq for PatchKey {}

impl Hash for PatchKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.generation.hash(h);
        self.namespace.hash(h);
        self.path.hash(h);
        hash_ordered(&self.pod, h);
    }
}

/// Equality including the order of object keys (what makes two values' JSON texts equal).
fn identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| identical(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
        }
        _ => a == b,
    }
}

/// Feeds a JSON value to a hasher, key order included, with type tags so that e.g. `"1"` and `1`, or
/// `[[]]` and `[]`, differ.
fn hash_ordered(v: &Value, h: &mut impl Hasher) {
    match v {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => {
            h.write_u8(1);
            b.hash(h);
        }
        Value::Number(n) => {
            h.write_u8(2);
            if let Some(u) = n.as_u64() {
                h.write_u64(u);
            } else if let Some(i) = n.as_i64() {
                h.write_i64(i);
            } else if let Some(f) = n.as_f64() {
                h.write_u64(f.to_bits());
            }
        }
        Value::String(s) => {
            h.write_u8(3);
            s.hash(h);
        }
        Value::Array(items) => {
            h.write_u8(4);
            h.write_usize(items.len());
            for item in items {
                hash_ordered(item, h);
            }
        }
        Value::Object(map) => {
            h.write_u8(5);
            h.write_usize(map.len());
            for (k, item) in map {
                k.hash(h);
                hash_ordered(item, h);
            }
        }
    }
}

/// What a JSON node costs in [`weight`], besides its string bytes.
const NODE_WEIGHT: usize = 32;

/// About the heap `v` uses: string bytes plus [`NODE_WEIGHT`] per node; the walk stops once `budget`
/// is passed (returning more than it), so a huge pod is not walked whole.
fn weight(v: &Value, budget: usize) -> usize {
    let mut used = NODE_WEIGHT;
    match v {
        Value::String(s) => used += s.len(),
        Value::Array(items) => {
            for item in items {
                if used > budget {
                    break;
                }
                used += weight(item, budget - used);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                if used > budget {
                    break;
                }
                used += k.len() + weight(item, budget.saturating_sub(used + k.len()));
            }
        }
        _ => {}
    }
    used
}

/// The weight of a cache entry: its key (the pod) and its value (the base64 patch).
fn entry_weight(key: &PatchKey, patch: &str) -> usize {
    let rest = key.namespace.len() + key.path.len() + patch.len();
    let budget = PATCH_CACHE_BOUNDS.max_entry_weight.saturating_sub(rest);
    rest + weight(&key.pod, budget)
}

/// The webhook's front end: [`handle`] with the cache of finished patches (see the module
/// documentation). One lives as long as the server; the configuration generation in the key keeps a
/// reloaded configuration from being answered with a previous one's patches, and those age out.
#[derive(Debug)]
pub struct Webhook {
    patches: Cache<PatchKey, String>,
}

impl Webhook {
    /// A webhook front end with an empty cache counting into `counters`.
    pub fn new(counters: CacheCounters) -> Webhook {
        Webhook {
            patches: Cache::new(PATCH_CACHE_BOUNDS, counters),
        }
    }

    /// [`handle`] for the engine of configuration `generation`, answered from the cache when the same
    /// pod was injected recently.
    pub fn handle(
        &self,
        engine: &Engine,
        generation: u64,
        body: &[u8],
        path: &str,
    ) -> ReviewOutcome {
        match answer(
            engine,
            body,
            path,
            Some((&self.patches, generation)),
            Stage::Whole,
        ) {
            Answer::Done(o) => o,
            // `Stage::Whole` never defers; answered rather than unwrapped all the same.
            Answer::NeedsInjection => undecodable("internal error: injection deferred".to_string()),
        }
    }

    /// The cheap part of [`Webhook::handle`]: decoding, the decision and the cache, without running the
    /// engine's injection. `None` means the review needs the injection: call [`Webhook::handle`] for it
    /// (off the I/O threads). A cache miss is counted by that call, not by this one.
    pub fn answer_cheap(
        &self,
        engine: &Engine,
        generation: u64,
        body: &[u8],
        path: &str,
    ) -> Option<ReviewOutcome> {
        match answer(
            engine,
            body,
            path,
            Some((&self.patches, generation)),
            Stage::Cheap,
        ) {
            Answer::Done(o) => Some(o),
            Answer::NeedsInjection => None,
        }
    }

    /// How many patches the cache holds.
    pub fn cached(&self) -> usize {
        self.patches.len()
    }
}

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
    /// When injected, each template applied and how it rendered (`compiled` or `evaluated`), for the
    /// `injector_template_renders_total` metric.
    pub render_paths: Vec<(String, &'static str)>,
}

fn undecodable(message: String) -> ReviewOutcome {
    // Istio cannot tell the version of an undecodable review: the envelope has no apiVersion/kind.
    let body = json!({"response": admission_review::refusal("", &message)});
    ReviewOutcome {
        response: serde_json::to_vec(&body).unwrap_or_default(),
        kind: OutcomeKind::Undecodable,
        uid: String::new(),
        namespace: String::new(),
        pod: String::new(),
        message,
        render_paths: Vec::new(),
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
        let body = admission_review::answer(self.api_version, response);
        ReviewOutcome {
            response: serde_json::to_vec(&body).unwrap_or_default(),
            kind,
            uid: self.uid.clone(),
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            message,
            render_paths: Vec::new(),
        }
    }

    /// The success response around `patch` (base64), written directly: the patch is the bulk of it
    /// and is not worth building as a JSON value first.
    fn injected(&self, patch: &str, render_paths: &[(String, &'static str)]) -> ReviewOutcome {
        let mut out = Vec::with_capacity(patch.len() + 160);
        out.extend_from_slice(b"{\"kind\":\"AdmissionReview\",\"apiVersion\":");
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, self.api_version);
        out.extend_from_slice(b",\"response\":{\"uid\":");
        let _ = serde_json::to_writer(&mut out, &self.uid);
        // Base64 needs no escaping.
        out.extend_from_slice(b",\"allowed\":true,\"patch\":\"");
        out.extend_from_slice(patch.as_bytes());
        out.extend_from_slice(b"\",\"patchType\":\"JSONPatch\"}}");
        ReviewOutcome {
            response: out,
            kind: OutcomeKind::Injected,
            uid: self.uid.clone(),
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            message: String::new(),
            render_paths: render_paths.to_vec(),
        }
    }

    fn fail(&self, message: String) -> ReviewOutcome {
        self.respond(
            admission_review::refusal(&self.uid, &message),
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

/// The envelope fields of a review, the rest (`object` included) skipped without being built.
#[derive(serde::Deserialize)]
struct ReviewHead {
    #[serde(rename = "apiVersion", default)]
    api_version: Option<String>,
    #[serde(default)]
    request: Option<RequestHead>,
}

#[derive(serde::Deserialize)]
struct RequestHead {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

/// `allowed: false` with `message` for the review in `body`, without injecting: what the server answers
/// when a review could not be handled in time (Istio's `webhook.go` `inject` answers its failures with
/// `toAdmissionResponse(err)`, `allowed: false` and the error as the status message). The uid and the
/// apiVersion are read from the body when it has them, so the API server matches the answer; otherwise
/// the envelope is the undecodable one.
pub fn refuse(body: &[u8], message: String) -> ReviewOutcome {
    let head: ReviewHead = match serde_json::from_slice(body) {
        Ok(h) => h,
        Err(_) => return undecodable(message),
    };
    let version = head.api_version.as_deref().unwrap_or("");
    let Some(api_version) = API_VERSIONS.iter().copied().find(|v| *v == version) else {
        return undecodable(message);
    };
    let request = head.request.unwrap_or(RequestHead {
        uid: None,
        namespace: None,
    });
    Envelope {
        api_version,
        uid: request.uid.unwrap_or_default(),
        namespace: request.namespace.unwrap_or_default(),
        pod: String::new(),
    }
    .fail(message)
}

/// Handles one AdmissionReview body sent to `path` (`/inject` or `/inject/<params>`), without a cache
/// (see [`Webhook::handle`]). Never panics: every malformed input becomes an `allowed: false` response
/// with a message.
pub fn handle(engine: &Engine, body: &[u8], path: &str) -> ReviewOutcome {
    match answer(engine, body, path, None, Stage::Whole) {
        Answer::Done(o) => o,
        Answer::NeedsInjection => undecodable("internal error: injection deferred".to_string()),
    }
}

/// How much of a review [`answer`] may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Everything, the engine's injection included.
    Whole,
    /// Only what costs about the body's parse: stop before the engine injects.
    Cheap,
}

/// What [`answer`] came to.
enum Answer {
    Done(ReviewOutcome),
    /// `Stage::Cheap` stopped where the engine's injection would run.
    NeedsInjection,
}

fn answer(
    engine: &Engine,
    body: &[u8],
    path: &str,
    cache: Option<(&Cache<PatchKey, String>, u64)>,
    stage: Stage,
) -> Answer {
    answer_review(engine, body, path, cache, stage).unwrap_or_else(|o| Answer::Done(*o))
}

/// [`answer`], with every early outcome as `Err` so that `?` can carry it.
fn answer_review(
    engine: &Engine,
    body: &[u8],
    path: &str,
    cache: Option<(&Cache<PatchKey, String>, u64)>,
    stage: Stage,
) -> Result<Answer, Box<ReviewOutcome>> {
    let (mut env, request) = decode(body)?;
    let request_namespace = env.namespace.clone();
    let mut original = pod_object(&env, request)?;
    let copy = normalise(&mut env, &mut original);
    let pod: &Value = copy.as_ref().unwrap_or(&original);

    // The revision's MutatingAdmissionPolicy injected it already (with `webhook-config
    // --skip-policy-injected` the API server does not even call): injecting again would strip and
    // re-render what the policy wrote.
    if inject::pod::annotation(pod, inject::pod::POLICY_MARKER_ANNOTATION).is_some() {
        return Err(Box::new(env.respond(
            json!({"uid": env.uid, "allowed": true}),
            OutcomeKind::Skipped,
            format!(
                "injected by the MutatingAdmissionPolicy ({})",
                inject::pod::POLICY_MARKER_ANNOTATION
            ),
        )));
    }
    let decision = engine.decide(pod, Mode::Webhook);
    if !decision.inject {
        return Err(Box::new(env.respond(
            json!({"uid": env.uid, "allowed": true}),
            OutcomeKind::Skipped,
            decision.reason,
        )));
    }
    // The templates the pod gets and their render paths: a handful of names from the configuration.
    let paths: Vec<(String, &'static str)> = engine
        .templates(inject::pod::annotations(pod), Mode::Webhook)
        .into_iter()
        .map(|t| {
            let p = engine.settings.user_templates.path(&t).as_str();
            (t, p)
        })
        .collect();

    let Some((cache, generation)) = cache else {
        if stage == Stage::Cheap {
            return Ok(Answer::NeedsInjection);
        }
        return Err(Box::new(
            match patch(engine, &original, copy.as_ref(), path) {
                Ok(p) => env.injected(&p, &paths),
                Err(message) => env.fail(message),
            },
        ));
    };
    let key = cache.hashed(PatchKey {
        generation,
        namespace: request_namespace,
        path: path.to_string(),
        pod: original,
    });
    if stage == Stage::Cheap {
        // A miss is counted by the whole answer that follows, so each review counts once.
        return Ok(match cache.get_hit(&key) {
            Some(p) => Answer::Done(env.injected(&p, &paths)),
            None => Answer::NeedsInjection,
        });
    }
    if let Some(p) = cache.get(&key) {
        return Err(Box::new(env.injected(&p, &paths)));
    }
    Ok(Answer::Done(
        match patch(engine, &key.key().pod, copy.as_ref(), path) {
            Ok(p) => {
                let out = env.injected(&p, &paths);
                cache.insert(key, p, |k, p| entry_weight(k, p));
                out
            }
            Err(message) => env.fail(message),
        },
    ))
}

/// The envelope of the review in `body` and its request, or the undecodable answer: a body that is not
/// an AdmissionReview of a version we speak, or has no request.
fn decode(body: &[u8]) -> Result<(Envelope<'static>, Request), Box<ReviewOutcome>> {
    // serde_json's recursion limit (128) bounds the depth of what we accept.
    let review: Review = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Err(Box::new(undecodable(format!(
                "could not decode the AdmissionReview: {e}"
            ))))
        }
    };
    let api_version = review.api_version.as_deref().unwrap_or("");
    let kind = review.kind.as_deref().unwrap_or("");
    let Some(api_version) = API_VERSIONS.iter().copied().find(|v| *v == api_version) else {
        return Err(Box::new(undecodable(format!(
            "unsupported review {api_version:?}/{kind:?}: want kind AdmissionReview, apiVersion admission.k8s.io/v1 or v1beta1"
        ))));
    };
    if kind != admission_review::KIND {
        return Err(Box::new(undecodable(format!(
            "unsupported kind {kind:?}: want AdmissionReview"
        ))));
    }
    let Some(mut request) = review.request else {
        return Err(Box::new(undecodable(
            "the AdmissionReview has no request".to_string(),
        )));
    };
    let env = Envelope {
        api_version,
        uid: request.uid.take().unwrap_or_default(),
        namespace: request.namespace.take().unwrap_or_default(),
        pod: String::new(),
    };
    Ok((env, request))
}

/// The request's object, or the failure answer when it is not a Pod object with object metadata and
/// spec.
fn pod_object(env: &Envelope, request: Request) -> Result<Value, Box<ReviewOutcome>> {
    let original = match request.object {
        Some(o @ Value::Object(_)) => o,
        Some(other) => {
            return Err(Box::new(env.fail(format!(
                "request.object is not a Pod object: {}",
                type_name(&other)
            ))))
        }
        None => return Err(Box::new(env.fail("request.object is missing".to_string()))),
    };
    let req_kind = request
        .kind
        .as_ref()
        .and_then(|k| k.field("kind"))
        .and_then(Value::as_str);
    let obj_kind = original.field("kind").and_then(Value::as_str);
    if let Some(k) = obj_kind.or(req_kind).filter(|k| *k != "Pod") {
        return Err(Box::new(
            env.fail(format!("only Pods can be injected, got kind {k:?}")),
        ));
    }
    if let Some(m) = original.field("metadata") {
        if !m.is_object() {
            return Err(Box::new(
                env.fail("request.object.metadata is not an object".to_string()),
            ));
        }
    }
    if let Some(s) = original.field("spec") {
        if !s.is_object() {
            return Err(Box::new(
                env.fail("request.object.spec is not an object".to_string()),
            ));
        }
    }
    Ok(original)
}

/// Normalises the request's pod `original` for the engine, and names it in `env` (its namespace and
/// name); the normalised copy when the pod has no metadata, which `original` then keeps.
fn normalise(env: &mut Envelope, original: &mut Value) -> Option<Value> {
    // The working pod: managedFields dropped, namespace defaulted from the request (Istio's
    // `webhook.go` `inject`). The request's object is ours, so a pod with metadata is normalised in
    // place, and the patch is the diff of that normalised pod and the result: neither side then differs
    // in namespace or managedFields, so the patch has no operation on them and leaves them as the API
    // server holds them. A pod without metadata is copied instead, and the result's metadata restored
    // before the diff (its patch must add `metadata` whole, without the defaulted namespace).
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
        let target = copy.as_mut().unwrap_or(original);
        webhook_request::normalise(target, default_ns.then_some(env.namespace.as_str()));
    }
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
    copy
}

/// Injects `copy` (the normalised copy of a pod without metadata) or else `original` and returns the
/// base64 patch from `original`, or the error message.
fn patch(
    engine: &Engine,
    original: &Value,
    copy: Option<&Value>,
    path: &str,
) -> Result<String, String> {
    // OpenShift clears a proxy uid equal to the app's on the pod itself, so the patch is taken against
    // the cleared pod, as in Istio's `webhook.go` `inject` (the copy differs in metadata only).
    let cleared_original = webhook_request::openshift_cleared(engine, original);
    let cleared_copy = cleared_original
        .as_ref()
        .and(copy)
        .and_then(|c| webhook_request::openshift_cleared(engine, c));
    let original = cleared_original.as_ref().unwrap_or(original);
    let copy = cleared_copy.as_ref().or(copy);
    let pod = copy.unwrap_or(original);
    let mut result = webhook_request::inject(engine, pod, None, path).map_err(|e| e.to_string())?;
    if copy.is_some() {
        // The patch is against the object the API server holds: take out what we normalised.
        webhook_request::restore_request_fields(&mut result);
    }
    let bytes = engine
        .patch(original, &result)
        .map_err(|e| format!("failed to create patch: {e}"))?;
    Ok(base64_simd::STANDARD.encode_to_string(bytes))
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use test_support::pods;

    /// The body of a v1 review of `object` in `namespace`.
    fn review_body(uid: &str, namespace: &str, object: Value) -> Vec<u8> {
        serde_json::to_vec(&pods::review("v1", uid, namespace, &object)).unwrap()
    }

    /// The body of a review the engine skips: a pod of kube-system.
    fn skipped_body() -> Vec<u8> {
        review_body("u", "kube-system", json!({"spec": {}}))
    }

    #[test]
    fn refusals_keep_the_review_envelope() {
        let body = serde_json::to_vec(&pods::review(
            "v1beta1",
            "u-1",
            "ns",
            &json!({"spec": {"containers": []}}),
        ))
        .unwrap();
        let out = refuse(&body, "too slow".to_string());
        assert_eq!(out.kind, OutcomeKind::Failed);
        assert_eq!(out.uid, "u-1");
        let v: Value = serde_json::from_slice(&out.response).unwrap();
        assert_eq!(v["apiVersion"], json!("admission.k8s.io/v1beta1"));
        assert_eq!(v["response"]["uid"], json!("u-1"));
        assert_eq!(v["response"]["allowed"], json!(false));
        assert_eq!(v["response"]["status"]["message"], json!("too slow"));
        let garbage = refuse(b"{", "too slow".to_string());
        assert_eq!(garbage.kind, OutcomeKind::Undecodable);
        let v: Value = serde_json::from_slice(&garbage.response).unwrap();
        assert_eq!(v["response"]["allowed"], json!(false));
    }

    #[test]
    fn garbage_and_wrong_kinds_are_answered_not_panicked() {
        let e = Engine::new(inject::config::Settings::default());
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
        let e = Engine::new(inject::config::Settings::default());
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
        let e = Engine::new(inject::config::Settings::default());
        let spec = json!({"containers": [{"name": "app", "image": "a"}]});
        for object in [
            json!({"metadata": {"generateName": "p-", "managedFields": [{"manager": "m"}],
                   "labels": {"app": "p"}}, "spec": spec}),
            json!({"metadata": {"namespace": "", "labels": {"app": "p"}}, "spec": spec}),
            json!({"metadata": {"namespace": "other", "managedFields": []}, "spec": spec}),
            json!({"spec": spec}),
        ] {
            let review = pods::review("v1", "u", "ns", &object);
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
                    pod["metadata"].field(key),
                    object.field("metadata").and_then(|m| m.field(key)),
                    "{object}: {key}"
                );
            }
            assert!(pod["spec"]["initContainers"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["name"] == json!("istio-proxy"))));
        }
    }

    /// The cache stores a pod's patch on its second sighting and answers from the third on: every
    /// answer must be the uncached one, and only the injected pods are stored.
    #[test]
    fn replicas_get_the_same_response_with_and_without_the_cache() {
        let e = Engine::new(inject::config::Settings::default());
        let webhook = Webhook::new(CacheCounters::default());
        let probes = json!({"httpGet": {"path": "/ready", "port": 8080}});
        for pod in [
            json!({"metadata": {"generateName": "a-", "labels": {"app": "a"}},
                   "spec": {"containers": [{"name": "a", "image": "a"}]}}),
            // Post-processing changes the proxy (app probers).
            json!({"metadata": {"generateName": "b-"},
                   "spec": {"containers": [{"name": "b", "image": "b", "readinessProbe": probes}],
                            "initContainers": [{"name": "setup", "image": "s"}]}}),
            // Without metadata: the patch is against the pod as sent, not the normalised copy.
            json!({"spec": {"containers": [{"name": "c", "image": "c"}]}}),
        ] {
            let review = review_body("u", "ns", pod.clone());
            let uncached = handle(&e, &review, "/inject");
            assert_eq!(uncached.kind, OutcomeKind::Injected, "{}", uncached.message);
            for i in 0..6 {
                let a = webhook.handle(&e, 1, &review, "/inject");
                assert_eq!(a.response, uncached.response, "answer {i}");
            }
        }
        assert_eq!(webhook.cached(), 3);
        // Skipped pods are not stored.
        let skipped = skipped_body();
        for _ in 0..3 {
            assert_eq!(
                webhook.handle(&e, 1, &skipped, "/inject").kind,
                OutcomeKind::Skipped
            );
        }
        assert_eq!(webhook.cached(), 3);
    }

    /// The cheap stage the server runs on its I/O threads never injects: it answers skips, undecodable
    /// reviews and cached patches exactly as the whole answer does, defers everything else, and counts a
    /// deferred miss only once (in the whole answer that follows).
    #[test]
    fn the_cheap_stage_answers_what_needs_no_injection_and_defers_the_rest() {
        let e = Engine::new(inject::config::Settings::default());
        let counters = CacheCounters::default();
        let webhook = Webhook::new(counters.clone());
        let review = review_body(
            "u",
            "ns",
            json!({"metadata": {"labels": {"app": "a"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        );
        let skipped = skipped_body();
        for body in [&skipped[..], b"not json"] {
            let cheap = webhook
                .answer_cheap(&e, 1, body, "/inject")
                .expect("answered");
            assert_eq!(
                cheap.response,
                webhook.handle(&e, 1, body, "/inject").response
            );
        }
        // Not cached yet (first and second sightings): deferred, one miss counted per review.
        for sighting in 1..=2u64 {
            assert!(webhook.answer_cheap(&e, 1, &review, "/inject").is_none());
            assert_eq!(counters.misses.get(), sighting - 1);
            webhook.handle(&e, 1, &review, "/inject");
            assert_eq!(counters.misses.get(), sighting);
        }
        let cached = webhook
            .answer_cheap(&e, 1, &review, "/inject")
            .expect("a cached patch is a cheap answer");
        assert_eq!(cached.kind, OutcomeKind::Injected);
        assert_eq!(cached.response, handle(&e, &review, "/inject").response);
        assert_eq!(counters.hits.get(), 1);
    }

    /// A patch is answered only for its own key: the request's uid is not part of it (each answer
    /// carries its own), but another configuration generation, namespace, URL path or pod misses.
    #[test]
    fn a_cached_patch_answers_only_its_own_key() {
        let e = Engine::new(inject::config::Settings::default());
        let counters = CacheCounters::default();
        let webhook = Webhook::new(counters.clone());
        let review = |uid: &str, ns: &str, app: &str| {
            review_body(
                uid,
                ns,
                json!({"metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            )
        };
        for uid in ["u1", "u2"] {
            webhook.handle(&e, 1, &review(uid, "ns", "a"), "/inject");
        }
        assert_eq!(webhook.cached(), 1);
        let hit = webhook.handle(&e, 1, &review("u3", "ns", "a"), "/inject");
        assert_eq!(
            hit.response,
            handle(&e, &review("u3", "ns", "a"), "/inject").response
        );
        let hits = counters.hits.get();
        for (generation, body, path) in [
            (2, review("u", "ns", "a"), "/inject"),
            (1, review("u", "other", "a"), "/inject"),
            (1, review("u", "ns", "a"), "/inject/cluster/c2"),
            (1, review("u", "ns", "b"), "/inject"),
        ] {
            let out = webhook.handle(&e, generation, &body, path);
            assert_eq!(out.response, handle(&e, &body, path).response);
        }
        assert_eq!(counters.hits.get(), hits);
    }

    /// Keys whose hashes collide (a hasher that hashes everything alike) still miss unless the
    /// generation, namespace, path and pod (key order included) are all the same.
    #[test]
    fn colliding_keys_miss_unless_every_part_matches() {
        #[derive(Default)]
        struct Collide;
        impl Hasher for Collide {
            fn write(&mut self, _: &[u8]) {}
            fn finish(&self) -> u64 {
                0
            }
        }
        let stored = PatchKey {
            generation: 1,
            namespace: "ns".into(),
            path: "/inject".into(),
            pod: json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {}}),
        };
        let others = [
            PatchKey {
                generation: 2,
                ..stored.clone()
            },
            PatchKey {
                namespace: "other".into(),
                ..stored.clone()
            },
            PatchKey {
                path: "/inject/net/n1".into(),
                ..stored.clone()
            },
            PatchKey {
                pod: json!({"metadata": {"name": "q", "labels": {"a": "1"}}, "spec": {}}),
                ..stored.clone()
            },
            PatchKey {
                pod: json!({"spec": {}, "metadata": {"name": "p", "labels": {"a": "1"}}}),
                ..stored.clone()
            },
        ];
        let cache: Cache<PatchKey, String, std::hash::BuildHasherDefault<Collide>> =
            Cache::with_hasher(
                PATCH_CACHE_BOUNDS,
                CacheCounters::default(),
                Default::default(),
            );
        for _ in 0..2 {
            let k = cache.hashed(stored.clone());
            if cache.get(&k).is_none() {
                cache.insert(k, "patch".into(), |k, p| entry_weight(k, p));
            }
        }
        assert_eq!(
            cache.get(&cache.hashed(stored.clone())).as_deref(),
            Some(&"patch".to_string())
        );
        for k in others {
            assert!(cache.get(&cache.hashed(k.clone())).is_none(), "{k:?}");
        }
    }

    #[test]
    fn identical_counts_key_order_and_hash_follows_it() {
        let h = |v: &Value| {
            let mut s = std::collections::hash_map::DefaultHasher::new();
            hash_ordered(v, &mut s);
            s.finish()
        };
        let a = json!({"x": 1, "y": {"p": [1, 2], "q": null}});
        assert!(identical(&a, &a.clone()));
        assert_eq!(h(&a), h(&a.clone()));
        for b in [
            json!({"y": {"p": [1, 2], "q": null}, "x": 1}),
            json!({"x": 1, "y": {"p": [2, 1], "q": null}}),
            json!({"x": 1.0, "y": {"p": [1, 2], "q": null}}),
            json!({"x": "1", "y": {"p": [1, 2], "q": null}}),
        ] {
            assert!(!identical(&a, &b), "{b}");
            assert_ne!(h(&a), h(&b), "{b}");
        }
        assert_ne!(h(&json!([[]])), h(&json!([])));
        assert_ne!(h(&json!(["ab", "c"])), h(&json!(["a", "bc"])));
    }

    #[test]
    fn weight_is_string_bytes_and_nodes_and_stops_past_the_budget() {
        assert_eq!(
            weight(&json!({"ab": ["c", 1]}), 1000),
            32 + 2 + 32 + 32 + 1 + 32
        );
        let long = Value::Array(vec![json!("x"); 1000]);
        let w = weight(&long, 200);
        assert!(w > 200 && w < 400, "{w}");
    }

    #[test]
    fn skipped_pods_are_allowed_without_patch() {
        let e = Engine::new(inject::config::Settings::default());
        let review = pods::review(
            "v1",
            "abc",
            "kube-system",
            &json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        );
        let out = handle(&e, &serde_json::to_vec(&review).unwrap(), "/inject");
        assert_eq!(out.kind, OutcomeKind::Skipped);
        assert!(out.message.contains("kube-system"));
        let v: Value = serde_json::from_slice(&out.response).unwrap();
        assert_eq!(
            v,
            admission_review::answer(API_VERSIONS[0], json!({"uid": "abc", "allowed": true}))
        );
    }

    #[test]
    fn pods_the_policy_injected_are_allowed_without_patch() {
        let e = Engine::new(inject::config::Settings::default());
        let pod = |annotations: Value| {
            pods::review(
                "v1",
                "abc",
                "apps",
                &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "annotations": annotations},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            )
        };
        let marked = pod(json!({inject::pod::POLICY_MARKER_ANNOTATION: "default"}));
        let out = handle(&e, &serde_json::to_vec(&marked).unwrap(), "/inject");
        assert_eq!(out.kind, OutcomeKind::Skipped);
        assert!(
            out.message.contains("MutatingAdmissionPolicy"),
            "{}",
            out.message
        );
        let v: Value = serde_json::from_slice(&out.response).unwrap();
        assert_eq!(v["response"], json!({"uid": "abc", "allowed": true}));
        // The same pod without the marker is injected.
        let plain = pod(json!({}));
        let out = handle(&e, &serde_json::to_vec(&plain).unwrap(), "/inject");
        assert_eq!(out.kind, OutcomeKind::Injected);
    }
}
