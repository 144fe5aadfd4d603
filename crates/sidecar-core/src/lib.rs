//! `sidecar-core`: what every binary of the workspace shares and nothing else, the floor the other crates
//! stand on (it depends on none of them).
//!
//! - Istio's contract, each name written once: [`annotations`], the pod annotations both the injector and
//!   the CNI plugin read; [`flags`], istio-iptables' flags (the one table
//!   iptables-init parses, documents and resolves with).
//! - The JSON vocabulary: [`fields`] (the one way to read a JSON object's field), [`goconv`] (Go's
//!   readings of a value), [`gotypes`] (how Go prints a typed Kubernetes container), [`validate`]
//!   (Istio's `validate.go` checks of ports, CIDRs, modes, quantities), `yaml` (the YAML stream reader
//!   and writer, with the `yaml` feature).
//! - Kubernetes' side of the webhook: [`admission_review`], the envelope the injector's server answers,
//!   its doctor's probe sends, and the tests send as the API server would (test-support builds on it).

// Tests read what they check with serde_json's own accessors (`get`, `pointer`), which clippy.toml keeps
// out of production code: a check that does not go through `fields` cannot share a bug with it.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod admission_review;
pub mod annotations;
pub mod fields;
pub mod flags;
pub mod goconv;
pub mod gotypes;
pub mod otel;
pub mod proto_duration;
pub mod proxy_config_json;
pub mod validate;
#[cfg(feature = "yaml")]
pub mod yaml;
#[cfg(feature = "yaml")]
pub mod yaml_block;
