//! The plain-HTTP port: `/metrics` for Prometheus, `/healthz` and `/readyz` for probes.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::connections::stopped;
use super::handler::{readiness, text};
use super::state::{Phase, State};

/// Plain HTTP/1.1 for Prometheus and probes.
pub(super) async fn metrics_server(
    listener: TcpListener,
    state: Arc<State>,
    mut shutdown: watch::Receiver<Phase>,
) {
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => return,
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let state = state.clone();
                async move {
                    let resp = match req.uri().path() {
                        "/metrics" => {
                            state
                                .metrics
                                .cert_expiry_seconds
                                .set(state.certs.seconds_until_expiry());
                            let mut r = text(StatusCode::OK, state.metrics.encode());
                            r.headers_mut().insert(
                                CONTENT_TYPE,
                                HeaderValue::from_static(
                                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                ),
                            );
                            r
                        }
                        "/healthz" => text(StatusCode::OK, "ok\n"),
                        "/readyz" => readiness(&state),
                        _ => text(StatusCode::NOT_FOUND, "not found\n"),
                    };
                    Ok::<_, Infallible>(resp)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(tcp), service);
            let _ = tokio::time::timeout(Duration::from_secs(60), conn).await;
        });
    }
}
