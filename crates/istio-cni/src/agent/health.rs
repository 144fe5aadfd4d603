//! `/readyz`, `/healthz` and `/metrics` over HTTP (Istio's `cni/pkg/nodeagent/healthServer.go` on
//! port 8000, and the monitoring port's metrics, served here on one listener).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::metrics::Metrics;

/// What the endpoints report.
pub struct State {
    /// Installed and the configuration in place.
    pub ready: AtomicBool,
    /// The counters.
    pub metrics: Metrics,
}

fn answer(state: &State, path: &str) -> Response<Full<Bytes>> {
    let (status, body) = match path {
        "/readyz" if state.ready.load(Ordering::SeqCst) => (StatusCode::OK, "ok\n".to_string()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the CNI configuration is not in place\n".to_string(),
        ),
        "/healthz" => (StatusCode::OK, "ok\n".to_string()),
        "/metrics" => (StatusCode::OK, state.metrics.encode()),
        _ => (StatusCode::NOT_FOUND, "not found\n".to_string()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

/// Answers every connection of `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, state: Arc<State>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("accepting a health connection: {e}");
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let response = answer(&state, req.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
