//! Helpers shared by the injector's tests and the end-to-end tests: Istio's test data in `testdata/istio`
//! and its case tables ([`corpus`]), the workload-to-pod shaping of Istio's webhook test ([`pods`]), the
//! comparison rule of `testdata/istio/inject/README.md` ([`semantic`]), the `istio-init` arguments Istio
//! injects ([`istio_init`]), the API server's label selectors ([`label_selector`]), the guards and
//! scratch directories tests need ([`root`], [`tempdir`]), and running the programs a test needs to
//! succeed ([`process`]).
//!
//! Written without the project's crates, so that a bug in them cannot hide itself here.
// Independent of the injector (above), so it reads JSON with serde_json's own accessors rather than the
// injector's `fields`, which clippy.toml prescribes for the injector's code.
#![allow(clippy::disallowed_methods)]

/// The AdmissionReview envelope, the injector's own (sidecar-core's), for the tests that play the API
/// server or its webhook.
pub use sidecar_core::admission_review;
pub mod corpus;
pub mod error;
pub mod groups;
pub mod istio_init;
pub mod label_selector;
pub mod pods;
pub mod process;
pub mod root;
pub mod semantic;
pub mod tempdir;

pub use error::Error;
pub use istio_init::ISTIO_INJECTED_ARGS;
pub use root::require_root;
pub use tempdir::TempDir;

/// A map of strings from literal pairs (labels, annotations, environment).
pub fn string_map(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
