//! `injector serve`: the MutatingAdmissionWebhook over HTTPS.
//!
//! The webhook is fail-closed in the cluster (a down or slow webhook blocks pod creation), so this module is
//! about staying up and answering fast: HTTP/1.1 and HTTP/2 over rustls, Istio's status codes (Istio's `webhook.go`
//! `serveInject`),
//! timeouts for slow clients, injections off the I/O threads under a concurrency limit and a per-review
//! deadline, a global budget of request-body bytes, a cap on connections that closes the oldest idle one
//! for a new one, hot reload of the certificate and of the configuration
//! (a broken new file keeps the last good one), metrics on a separate plain-HTTP port, and a graceful
//! shutdown on SIGTERM that finishes the requests in flight.

pub mod admission;
mod args;
mod body;
mod connections;
mod handler;
mod hot_reload;
mod limits;
mod metrics_server;
pub(crate) mod reload;
mod server;
mod sources;
mod state;

pub use args::{Args, LogFormat};
pub use handler::percent_decode;
pub use limits::{DEFAULT_BODY_BUDGET, INLINE_BODY_BYTES, LARGE_BODY_BYTES, MAX_BODY_BYTES};
pub use server::run;
pub use sources::config_paths;
