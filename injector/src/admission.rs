//! AdmissionReview handling (`admission.k8s.io/v1` and `v1beta1`): request in, response out, same version.
//! The HTTP layer (`server`) deals with status codes, bodies and content types; everything from the decoded
//! body on is here, so the webhook and the tests share one entry point. (Contract only; the engine
//! engineer fills it in.)

use crate::engine::Engine;

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

/// Handles one AdmissionReview body sent to `path` (`/inject` or `/inject/<params>`).
pub fn handle(_engine: &Engine, _body: &[u8], _path: &str) -> ReviewOutcome {
    ReviewOutcome {
        response: b"{}".to_vec(),
        kind: OutcomeKind::Undecodable,
        uid: String::new(),
        namespace: String::new(),
        pod: String::new(),
        message: "not implemented yet".to_string(),
    }
}
