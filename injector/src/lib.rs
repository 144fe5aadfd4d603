//! `injector`: Istio-compatible sidecar injection, as a MutatingAdmissionWebhook (`injector serve`) and offline
//! (`injector kube-inject`). Both front ends call the same engine.
//!
//! The pod is handled as JSON (`serde_json::Value`) end to end, so fields this crate's types do not know pass
//! through untouched; k8s-openapi types are used to build and check what is added.
//!
//! Pipeline (see `engine`): `decision` → `annotations` (validate) → `proxyconfig` → `render` (askama
//! templates from `templates/`) → `merge` (strategic merge, user overrides) → `postprocess` (Prometheus,
//! `probes`, status annotation, ordering) → `patch` (RFC 6902 diff of the original request JSON).

pub mod admission;
pub mod annotations;
pub mod certs;
pub mod config;
pub mod decision;
pub mod engine;
pub mod fields;
pub mod gotemplate;
pub mod json_writer;
pub mod kube_inject;
pub mod memo;
pub mod merge;
pub mod metrics;
pub mod patch;
pub mod postprocess;
pub mod probes;
pub mod proxyconfig;
pub mod reload;
pub mod render;
pub mod server;
pub mod tls;
pub mod webhook_config;
pub mod yaml;
