//! `istio-cni`: a drop-in for Istio's CNI plugin and its node agent.
//!
//! - [`plugin`]: the chained CNI plugin the container runtime runs at sandbox creation (`ADD`, `DEL`,
//!   `CHECK`, `VERSION`, `STATUS`, `GC`); it reads the pod from the API server, decides as Istio's
//!   plugin does and programs the pod's network namespace with iptables-init's rule model, in-process.
//!
//! `main` dispatches: with `CNI_COMMAND` set it is the plugin.

pub mod plugin;
