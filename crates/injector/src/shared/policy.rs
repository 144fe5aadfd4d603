//! The injection compiled for a MutatingAdmissionPolicy (KEP-3962), shared by `injector policy` (which
//! writes the objects) and `explain --policy` (which says whether the policy injects a pod):
//!
//! - `params`: the configuration-wide parts, read off the engine's own injection of a canonical pod per
//!   interception mode, as the params object's `spec`;
//! - `cel`: the variables and the JSONPatch mutation that splice a pod's own parts (its containers,
//!   ports, probes, workload, labels and Prometheus annotations) into them;
//! - `object`: the params object's kind, name, labels, and the spec of a refused configuration;
//! - `subset`: the pods the policy injects, one table of rules written in CEL (`matchConditions`) and in
//!   Rust ([`covers`]: explain and the differential);
//! - `guard`: the optional ValidatingAdmissionPolicy that rejects a pod the webhook would have injected
//!   but that reached validation without injection.

pub mod cel;
pub mod guard;
pub mod object;
pub mod params;
pub mod subset;

use serde_json::Value;

use inject::engine::{Engine, Mode};

pub use cel::MARKER_ANNOTATION;
pub use params::{ParamsError, ParamsSpec};
pub use subset::{Facts, Rule};

/// Whether the policy of `spec` injects `pod` (normalised as the webhook normalises it: its namespace
/// set): `Ok` when it does, else the first rule of the subset the pod does not meet.
pub fn covers(engine: &Engine, spec: &ParamsSpec, pod: &Value) -> Result<(), Rule> {
    let decision = engine.decide(pod, Mode::Webhook);
    let facts = Facts {
        pod,
        params: spec,
        decision: &decision,
    };
    match subset::first_unmet(&facts) {
        None => Ok(()),
        Some(rule) => Err(rule),
    }
}
