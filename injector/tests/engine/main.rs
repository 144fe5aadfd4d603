//! The injector's integration tests: Istio parity (kube-inject and webhook modes), the kube-inject
//! binary, and property tests of the engine.

mod cli;
mod cluster;
mod kube;
mod parity;
mod props;
mod user_templates;
