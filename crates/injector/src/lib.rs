//! `injector`: Istio-compatible sidecar injection, as a MutatingAdmissionWebhook (`injector serve`) and
//! offline (`injector kube-inject`), with `explain`, `doctor`, `certs` and `webhook-config` beside them.
//! Every front end calls the same engine, the `inject` crate; this crate is what surrounds it: the HTTPS
//! server, the cluster client and its watches, TLS, and the subcommands.
//!
//! The modules, grouped by subsystem:
//!
//! - front ends, one per subcommand: [`serve`] (`injector serve`, with the webhook's review handling in
//!   `serve::admission`), [`kube_inject`], [`explain`], [`doctor`], [`certs`] (and
//!   `shared::webhook_config`'s own `run`); they never import each other;
//! - [`cluster`]: the API server connection (`--kubeconfig`, `--in-cluster`) and what is read, watched
//!   and written through it;
//! - [`shared`]: what two front ends share and nothing of the cluster (the webhook's shaping of a pod,
//!   a manifest's documents, webhook entries and configurations, TLS, metrics, output);
//! - [`error_report`]: how `main` prints an error.

// Tests read what they check with serde_json's own accessors (`get`, `pointer`, which clippy.toml keeps out
// of production code): a check that does not go through `fields` cannot share a bug with it, and
// `pointer` reaches into arrays. Production code is still held to `fields` by the non-test lint run.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod certs;
pub mod cluster;
pub mod doctor;
pub mod error_report;
pub mod explain;
pub mod kube_inject;
pub mod policy;
pub mod serve;
pub mod shared;

pub use serve::admission::{handle, OutcomeKind, ReviewOutcome, Webhook};
