//! `inject`: the injection engine, Istio's sidecar injection as a pure function of a pod and a
//! configuration. No I/O of its own beyond reading the files a configuration names: no async runtime, no
//! HTTP, no cluster client, no TLS (the `injector` binary brings those around it).
//!
//! The pod is handled as JSON (`serde_json::Value`) end to end, so fields this crate's types do not know
//! pass through untouched; k8s-openapi types are used to build and check what is added.
//!
//! Pipeline (see `engine`): `decision` → `annotations` (validate) → `effective_proxy_config` → `render`
//! (askama templates from `templates/`, user templates through `user_template` and the `gotemplate`
//! crate) → `merge` (strategic merge, user overrides) → `postprocess` (Prometheus, `probes`, status
//! annotation, ordering) → `patch` (RFC 6902 diff of the original request JSON). The steps share a
//! vocabulary that depends on none of them: `pod` (names and accessors), `traffic` (the traffic
//! annotations, one row each), `status`, `overrides`,
//! `workload`, `defaults`, and `sidecar-core`'s `fields`, `goconv`, `gotypes` and `validate`.
//!
//! The configuration is `config` (Istio's ConfigMap documents into [`Settings`], their types in
//! `config_types`, read through `input`); what Istio's webhook reads from the API server is
//! `cluster_state` ([`ClusterState`]: ProxyConfig resources, Namespaces for OpenShift's uid, native
//! sidecars from the Nodes), given as files (`kube_objects`) or watched by the injector.

// Tests read what they check with serde_json's own accessors (`get`, `pointer`, which clippy.toml keeps out
// of production code): a check that does not go through `fields` cannot share a bug with it, and
// `pointer` reaches into arrays. Production code is still held to `fields` by the non-test lint run.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// What the injector's front ends and shared layer use.
pub mod cluster_state;
pub mod config;
pub mod decision;
pub mod engine;
pub mod input;
pub mod kube_objects;
pub mod namespaces;
pub mod native_sidecars;
pub mod openshift;
pub mod pod;
pub mod proxy_config_resources;
pub mod template_source;
pub mod workload;

// The stages and their own vocabulary.
pub(crate) mod annotations;
pub(crate) mod config_types;
pub(crate) mod cow_map;
pub(crate) mod defaults;
pub(crate) mod effective_proxy_config;
pub(crate) mod merge;
pub(crate) mod overrides;
pub(crate) mod patch;
pub(crate) mod postprocess;
pub(crate) mod probes;
pub(crate) mod render;
pub(crate) mod status;
pub(crate) mod traffic;
pub(crate) mod user_template;

pub use cluster_state::{ClusterState, PlatformArgs, ProxyConfigArgs};
pub use config::{ConfigArgs, NativeSidecars, Settings};
pub use decision::{Decision, Step};
pub use engine::{Engine, EngineError, InjectRequest, Mode};
pub use workload::{deploy_meta_from_pod, Workload};
// `injector policy` reads the webhook's answer apart: the diff it reports, the probers' variable it
// computes in CEL.
pub use patch::create_patch_json;
pub use probes::APP_PROBERS_ENV;
// Go's fmt.Sprint of a values field, as the templates print it (the policy's init status port).
pub use render::sprint as go_sprint;
// docs/reference/annotations.md is generated from it (xtask).
pub use annotations::validated as validated_annotations;
