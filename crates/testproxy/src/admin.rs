//! The proxy's HTTP endpoints, on the ports Envoy and pilot-agent use in an injected pod:
//! - 15000 (Envoy's admin, loopback only): `GET /stats` (the counters as JSON), `GET /ready`,
//!   `POST /drain`, `POST /quitquitquit`;
//! - 15020 (pilot-agent's status port): `GET /healthz/ready`, the rewritten application probes
//!   `GET /app-health/<container>/<probe>`, `POST /drain`, `POST /quitquitquit`;
//! - 15021 (Envoy's readiness listener, which the injected readiness and startup probes ask):
//!   `GET /healthz/ready`.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use crate::http::{json, text, Body};
use crate::proxy::State;

/// Which port a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Admin,
    Status,
    Ready,
}

/// `/healthz/ready`: 200 while serving, 503 once draining.
fn readiness(state: &State) -> Response<Body> {
    if state.draining.load(Ordering::Relaxed) {
        text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    } else {
        text(StatusCode::OK, "ready\n")
    }
}

/// pilot-agent takes `/drain` and `/quitquitquit` from the pod itself only (`IsRequestFromLocalhost`).
fn local_only(peer: SocketAddr, then: impl FnOnce() -> Response<Body>) -> Response<Body> {
    if peer.ip().is_loopback() {
        then()
    } else {
        text(
            StatusCode::FORBIDDEN,
            "Only requests from localhost are allowed\n",
        )
    }
}

/// Answers one request on `endpoint`.
pub async fn handle(
    endpoint: Endpoint,
    state: Arc<State>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let path = req.uri().path();
    let method = req.method();
    match (endpoint, method, path) {
        (_, &Method::GET, "/healthz/ready") if endpoint != Endpoint::Admin => readiness(&state),
        (Endpoint::Admin, &Method::GET, "/stats") => json(&state.stats.to_json()),
        (Endpoint::Admin, &Method::GET, "/ready") => {
            if state.draining.load(Ordering::Relaxed) {
                text(StatusCode::SERVICE_UNAVAILABLE, "DRAINING\n")
            } else {
                text(StatusCode::OK, "LIVE\n")
            }
        }
        (Endpoint::Admin | Endpoint::Status, &Method::POST, "/drain" | "/drain_listeners") => {
            local_only(peer, || {
                state.draining.store(true, Ordering::Relaxed);
                text(StatusCode::OK, "OK")
            })
        }
        (Endpoint::Admin | Endpoint::Status, &Method::POST, "/quitquitquit") => {
            local_only(peer, || {
                state.quit.notify_one();
                text(StatusCode::OK, "OK")
            })
        }
        (Endpoint::Status, &Method::GET, p) if p.starts_with("/app-health/") => {
            match state.probers.get(p) {
                Some(prober) => {
                    let (status, body) = prober.run(state.app_address).await;
                    let mut r = text(status, body);
                    *r.status_mut() = status;
                    r
                }
                None => text(StatusCode::NOT_FOUND, format!("no app prober for {p}\n")),
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            format!("{method} {path}: not served\n"),
        ),
    }
}
