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

//! The public API is what the front ends and the tests need: the engine ([`Engine`], [`InjectRequest`],
//! [`Mode`]), its configuration ([`Settings`], [`ConfigArgs`]) and cluster state ([`ClusterState`]: ProxyConfig
//! resources and OpenShift Namespaces), the admission entry points ([`Webhook`], [`handle`], from
//! `server::admission`), the workload of a pod, and one module per subcommand (`server`, `kube_inject`,
//! `certs`, `doctor`, `explain`, `webhook_config`) plus `yaml`, the YAML stream reader and writer they share.
//! Everything else is crate-private.
//!
//! The front ends never import each other: what two of them share is below them, in a module named for
//! it (`webhook_request`, `manifest`, `webhook_entry`, `namespaces`, `output`, `webhook_config`'s
//! generation), as ARCHITECTURE.md draws it.

// Tests read what they check with serde_json's own accessors (`get`, `pointer`, which clippy.toml keeps out
// of the injector's code): a check that does not go through `fields` cannot share a bug with it, and
// `pointer` reaches into arrays. Production code is still held to `fields` by the non-test lint run.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// The subcommands' front ends and the YAML stream they read and write.
pub mod certs;
pub mod doctor;
pub mod error_report;
pub mod explain;
pub mod kube_inject;
pub mod server;
pub mod webhook_config;
pub mod yaml;

pub(crate) mod annotations;
pub(crate) mod ca_bundle_patch;
pub(crate) mod cache;
pub(crate) mod cluster_state;
pub(crate) mod cluster_watch;
pub(crate) mod config;
pub(crate) mod config_map_watch;
pub(crate) mod config_types;
pub(crate) mod cow_map;
pub(crate) mod decision;
pub(crate) mod defaults;
pub(crate) mod effective_proxy_config;
pub(crate) mod engine;
pub(crate) mod fields;
pub(crate) mod goconv;
// Public for the fuzz target (`injector/fuzz`), not part of the API.
#[doc(hidden)]
pub mod gotemplate;
pub(crate) mod gotypes;
pub(crate) mod input;
pub mod kube_client;
pub(crate) mod kube_objects;
pub mod kube_read;
pub(crate) mod manifest;
pub(crate) mod merge;
pub(crate) mod metrics;
pub(crate) mod namespaces;
pub(crate) mod native_sidecars;
pub(crate) mod openshift;
pub(crate) mod output;
pub(crate) mod overrides;
pub(crate) mod patch;
pub(crate) mod pod;
pub(crate) mod postprocess;
pub(crate) mod probes;
pub(crate) mod proxy_config_resources;
pub(crate) mod reload;
pub(crate) mod render;
pub(crate) mod status;
pub(crate) mod tls;
pub(crate) mod user_template;
pub(crate) mod validate;
pub(crate) mod webhook_entry;
pub(crate) mod webhook_request;
pub(crate) mod workload;
pub(crate) mod write_queue;

pub use cluster_state::{ClusterState, PlatformArgs, ProxyConfigArgs};
pub use config::{ConfigArgs, NativeSidecars, Settings};
pub use decision::{Decision, Step};
pub use engine::{Engine, EngineError, InjectRequest, Mode};
pub use server::admission::{handle, OutcomeKind, ReviewOutcome, Webhook};
pub use workload::{deploy_meta_from_pod, Workload};
