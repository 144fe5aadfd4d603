//! `injector`: Istio-compatible sidecar injection, as a MutatingAdmissionWebhook (`injector serve`) and offline
//! (`injector kube-inject`). Both front ends call the same engine.
//!
//! The pod is handled as JSON (`serde_json::Value`) end to end, so fields this crate's types do not know pass
//! through untouched; k8s-openapi types are used to build and check what is added.
//!
//! Pipeline (see `engine`): `decision` → `annotations` (validate) → `effective_proxy_config` → `render`
//! (askama templates from `templates/`) → `merge` (strategic merge, user overrides) → `postprocess`
//! (Prometheus, `probes`, status annotation, ordering) → `patch` (RFC 6902 diff of the original request
//! JSON). The steps share a vocabulary that depends on none of them: `pod` (names and accessors), `status`,
//! `overrides`, `workload`, `defaults`, `validate`, `goconv`, `gotypes` and `fields`.

pub mod admission;
pub mod annotations;
pub mod cache;
pub mod certs;
pub mod config;
pub mod decision;
pub mod defaults;
pub mod effective_proxy_config;
pub mod engine;
pub mod fields;
pub mod goconv;
pub mod gotemplate;
pub mod gotypes;
pub mod kube_inject;
pub mod merge;
pub mod metrics;
pub mod overrides;
pub mod patch;
pub mod pod;
pub mod postprocess;
pub mod probes;
pub mod reload;
pub mod render;
pub mod server;
pub mod status;
pub mod tls;
pub mod user_template;
pub mod validate;
pub mod webhook_config;
pub mod workload;
pub mod yaml;
