//! The project's own tasks, run with `cargo run -p xtask -- TASK`.
//!
//! `docs`: the reference pages under `docs/reference/` (flags, annotations, metrics, exit codes) and
//! the chart's `files/policy.json` (the MutatingAdmissionPolicy `injector policy` writes) are generated
//! from their one definition in the code ([`sources`]) by [`docs`]; a test fails when a committed page
//! differs from what the code defines.

pub mod docs;
pub mod sources;
pub mod tables;
