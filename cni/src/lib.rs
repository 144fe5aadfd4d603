//! `istio-cni`: a drop-in for Istio's CNI plugin and its node agent.
//!
//! - [`plugin`]: the chained CNI plugin the container runtime runs at sandbox creation (`ADD`, `DEL`,
//!   `CHECK`, `VERSION`, `STATUS`, `GC`); it reads the pod from the API server, decides as Istio's
//!   plugin does and programs the pod's network namespace with iptables-init's rule model, in-process.
//!
//! `main` dispatches: with `CNI_COMMAND` set it is the plugin.

// clippy.toml steers the injector's JSON reads to its `fields` module; this crate does not depend on the
// injector, and reads only small configuration objects (the network configuration, `prevResult`).
#![allow(clippy::disallowed_methods)]

pub mod plugin;
