//! `istio-cni`: a drop-in for Istio's CNI plugin and its node agent.
//!
//! - [`plugin`]: the chained CNI plugin the container runtime runs at sandbox creation (`ADD`, `DEL`,
//!   `CHECK`, `VERSION`, `STATUS`, `GC`); it reads the pod from the API server, decides as Istio's
//!   plugin does and programs the pod's network namespace with iptables-init's rule model, in-process.
//! - [`agent`]: `istio-cni install`, the node agent that installs the plugin (binary, kubeconfig, our
//!   entry in the node's CNI configuration), keeps it installed, serves `/readyz` and `/metrics`, and
//!   removes the node's `cni.istio.io/not-ready` taint.
//! - [`repair`]: the agent's race repair of pods that started before the plugin was installed.
//!
//! `main` dispatches: `istio-cni install ...` is the agent; otherwise (`CNI_COMMAND` set) the plugin.

// clippy.toml steers the injector's JSON reads to its `fields` module; this crate does not depend on the
// injector, and reads only small configuration objects (the network configuration, `prevResult`).
#![allow(clippy::disallowed_methods)]

pub mod agent;
pub mod plugin;
pub mod repair;
