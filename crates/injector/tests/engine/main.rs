//! The injector's integration tests: Istio parity (kube-inject and webhook modes), the kube-inject
//! binary, and property tests of the engine.
// The checks read the engine's output with serde_json's own accessors, not sidecar-core's `fields`, which
// clippy.toml prescribes for the injector's code: a check that does not share that code cannot share its bugs.
#![allow(clippy::disallowed_methods)]

mod cli;
mod cluster;
mod kube;
mod parity;
mod props;
mod releases;
mod scale;
mod user_templates;

use inject::{deploy_meta_from_pod, InjectRequest, Mode};
use serde_json::Value;

/// Runs `f` with the engine's request for `pod` in `mode`: its workload named from the pod, as the
/// webhook names it, and no URL environment.
fn with_request<T>(pod: &Value, mode: Mode, f: impl FnOnce(&InjectRequest<'_>) -> T) -> T {
    let workload = deploy_meta_from_pod(pod);
    f(&InjectRequest {
        pod,
        workload: &workload,
        url_env: Default::default(),
        mode,
    })
}
