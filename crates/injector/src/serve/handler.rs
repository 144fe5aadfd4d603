//! The HTTPS routes: `/inject` (the body read, the review answered on the I/O thread or as an
//! injection under its slots and deadline), `/healthz` and `/readyz`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Request, Response, StatusCode};

use crate::shared::metrics::FailureType;

use super::admission::{self, OutcomeKind};
use super::body::{read_body, BodyError};
use super::limits::{Running, INLINE_BODY_BYTES, MAX_BODY_BYTES, MAX_DRAIN_BYTES};
use super::state::{Phase, State};

pub(super) type Resp = Response<Full<Bytes>>;

pub(super) fn text(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

pub(super) async fn route(state: Arc<State>, req: Request<Incoming>) -> Resp {
    let path = req.uri().path();
    if path == "/inject" || path.starts_with("/inject/") {
        return inject(state, req).await;
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => readiness(&state),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

pub(super) fn readiness(state: &State) -> Resp {
    if *state.phase.borrow() >= Phase::Draining {
        text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else if state.cluster.as_ref().is_some_and(|c| !c.synced()) {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the first list of the cluster watches\n",
        )
    } else if state.ca_bundle.as_ref().is_some_and(|p| !p.ready()) {
        // A call the API server routed here would fail its TLS verification.
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for our CA in the webhook configurations' caBundle\n",
        )
    } else {
        text(StatusCode::OK, "ok\n")
    }
}

pub(super) async fn inject(state: Arc<State>, req: Request<Incoming>) -> Resp {
    let start = Instant::now();
    let metrics = &state.metrics;
    metrics.requests.inc();
    let resp = inject_inner(&state, req, start).await;
    metrics.time.observe(start.elapsed().as_secs_f64());
    resp
}

/// Marks an HTTP/1 answer as the connection's last (the rest of the body may still be in flight; HTTP/2
/// resets just the stream, and forbids the header).
pub(super) fn close_after(r: &mut Resp, version: hyper::Version) {
    if version < hyper::Version::HTTP_2 {
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
}

pub(super) async fn inject_inner(
    state: &Arc<State>,
    req: Request<Incoming>,
    start: Instant,
) -> Resp {
    let metrics = &state.metrics;
    let deadline = start + state.review_deadline;
    let (parts, body) = req.into_parts();
    let path = percent_decode(parts.uri.path());

    let declared_too_large = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > MAX_DRAIN_BYTES as u64);
    let body = if declared_too_large {
        Err(BodyError::TooLarge)
    } else {
        read_body(body, MAX_BODY_BYTES, state.body_timeout, &state.bodies).await
    };
    let (body, reservation) = match body {
        Ok(b) => b,
        Err(BodyError::OverBudget) => {
            metrics.failure(FailureType::Overloaded);
            tracing::warn!(path = %path, "rejected request: request bodies in flight over --max-body-bytes-in-flight");
            let mut r = text(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many request bodies in flight (--max-body-bytes-in-flight); retry\n",
            );
            r.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            close_after(&mut r, parts.version);
            return r;
        }
        Err(e) => {
            metrics.failure(FailureType::BodyRead);
            let msg = match e {
                BodyError::TooLarge => {
                    format!("Request entity too large: limit is {MAX_BODY_BYTES}")
                }
                BodyError::TimedOut => "timed out reading the request body".to_string(),
                BodyError::Broken(e) => format!("reading the request body: {e}"),
                BodyError::OverBudget => String::new(),
            };
            tracing::warn!(path = %path, error = %msg, "rejected request");
            let mut r = text(StatusCode::BAD_REQUEST, msg);
            close_after(&mut r, parts.version);
            return r;
        }
    };
    if body.is_empty() {
        metrics.failure(FailureType::EmptyBody);
        tracing::warn!(path = %path, "rejected request: no body found");
        return text(StatusCode::BAD_REQUEST, "no body found");
    }
    // Istio compares the header exactly: parameters such as `; charset=utf-8` are refused.
    if parts.headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes) != Some(b"application/json") {
        metrics.failure(FailureType::ContentType);
        tracing::warn!(path = %path, content_type = ?parts.headers.get(CONTENT_TYPE), "rejected request: wrong Content-Type");
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid Content-Type, want `application/json`",
        );
    }

    // A small review's cheap part (decoding, the decision, a cached patch) costs about its parse, so it
    // is answered here: most reviews are skips or a workload's replicas, and a hand-off to the blocking
    // pool would cost them more than the work. Only the engine's injection leaves the I/O threads.
    let (generation, engine) = state.engine();
    let cheap = if body.len() < INLINE_BODY_BYTES {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            state
                .webhook
                .answer_cheap(&engine, generation, &body, &path)
        }))
        .transpose()
    } else {
        None
    };
    let outcome = match cheap {
        Some(answered) => answered,
        None => {
            // Injections run on the blocking pool, never on the I/O threads that also answer probes and other
            // reviews, each holding its slots (and its body's bytes) until it actually ends.
            let deadline_at = tokio::time::Instant::from_std(deadline);
            let slots =
                match tokio::time::timeout_at(deadline_at, state.limiter.acquire(body.len())).await
                {
                    Ok(Some(slots)) => slots,
                    _ => {
                        return past_deadline(state, body, path, "waiting for an injection slot")
                            .await
                    }
                };
            let task = {
                let state = Arc::clone(state);
                let body = body.clone();
                let path = path.clone();
                let running = Running::new(state.metrics.clone());
                tokio::task::spawn_blocking(move || {
                    let held = (slots, reservation, running);
                    // A panic in the engine is a bug, but must cost one request, not the connection or the process.
                    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        state.webhook.handle(&engine, generation, &body, &path)
                    }));
                    drop(held);
                    r
                })
            };
            match tokio::time::timeout_at(deadline_at, task).await {
                Err(_) => return past_deadline(state, body, path, "injecting").await,
                Ok(Ok(r)) => r,
                Ok(Err(_)) => {
                    Err(Box::new("injection task cancelled") as Box<dyn std::any::Any + Send>)
                }
            }
        }
    };
    let outcome = match outcome {
        Ok(o) => o,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            metrics.failure(FailureType::Inject);
            tracing::error!(path = %path, panic = %what, "injection panicked");
            return text(StatusCode::INTERNAL_SERVER_ERROR, "internal error");
        }
    };
    let decision = match outcome.kind {
        OutcomeKind::Injected => "injected",
        OutcomeKind::Skipped => {
            metrics.skip.inc();
            "skipped"
        }
        OutcomeKind::Failed => {
            metrics.failure(FailureType::Inject);
            "failed"
        }
        OutcomeKind::Undecodable => {
            metrics.failure(FailureType::Decode);
            "undecodable"
        }
    };
    respond(state, outcome, decision, &path, start)
}

/// Writes a review's answer, logs it and counts it (Istio counts every written review as a success,
/// `allowed: false` included).
pub(super) fn respond(
    state: &State,
    outcome: admission::ReviewOutcome,
    decision: &str,
    path: &str,
    start: Instant,
) -> Resp {
    state.metrics.success.inc();
    state.metrics.rendered(&outcome.render_paths);
    let latency_us = start.elapsed().as_micros() as u64;
    if matches!(outcome.kind, OutcomeKind::Failed | OutcomeKind::Undecodable) {
        tracing::warn!(uid = %outcome.uid, namespace = %outcome.namespace, pod = %outcome.pod,
            decision, latency_us, path = %path, message = %outcome.message, "admission review");
    } else {
        tracing::info!(uid = %outcome.uid, namespace = %outcome.namespace, pod = %outcome.pod,
            decision, latency_us, path = %path, message = %outcome.message, "admission review");
    }
    let mut r = Response::new(Full::new(Bytes::from(outcome.response)));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// The answer to a review not injected by its deadline: `allowed: false` saying so, counted as a
/// `deadline` failure. Its uid is read off the I/O threads (the body may be megabytes).
pub(super) async fn past_deadline(
    state: &Arc<State>,
    body: Bytes,
    path: String,
    doing: &str,
) -> Resp {
    let start = Instant::now();
    let limit = state.review_deadline;
    let message = format!(
        "sidecar injection did not finish within the webhook's deadline of {} ms \
         (--review-deadline-ms; the injector was busy {doing}); the pod was not injected",
        limit.as_millis()
    );
    state.metrics.failure(FailureType::Deadline);
    let outcome = match tokio::task::spawn_blocking(move || admission::refuse(&body, message)).await
    {
        Ok(o) => o,
        Err(_) => return text(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    };
    respond(state, outcome, "deadline", &path, start)
}

/// Decodes `%XX` escapes, as Go's `r.URL.Path` is decoded (Istio's `webhook.go` `parseInjectEnvs` parses the decoded path).
/// Invalid escapes are kept literally.
pub fn percent_decode(path: &str) -> String {
    if !path.contains('%') {
        return path.to_string();
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("/inject/a%2Fb"), "/inject/a/b");
        assert_eq!(percent_decode("/inject/%zz%4"), "/inject/%zz%4");
        assert_eq!(percent_decode("/inject/x%41"), "/inject/xA");
        assert_eq!(percent_decode("%"), "%");
    }
}
