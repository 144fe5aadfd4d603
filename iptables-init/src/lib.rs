//! `iptables-init`: the init-container half of transparent sidecar interception.
//!
//! The pipeline is deliberately split so that `--dry-run` prints exactly what would be applied:
//!
//! 1. [`config`] parses istio-iptables' flags and environment into a validated [`config::Config`];
//! 2. [`rules`] turns the configuration into a rule model ([`rules::Plan`]) in Istio's order;
//! 3. [`render`] renders the model as `iptables-restore` input (and route actions as comments);
//! 4. [`apply`] detects the backend, checks the current state and applies the rendered text atomically
//!    per family, rolling back on failure; it also implements `--reconcile` and `--cleanup-only`;
//! 5. [`validation`] proves interception with a real connection (`--run-validation`).

pub mod apply;
pub mod config;
pub mod render;
pub mod rules;
pub mod validation;
