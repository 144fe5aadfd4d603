//! The cluster: the API server connection of `--kubeconfig` / `--in-cluster` (`kube_client`) and what goes
//! through it. `kube_read` reads what doctor and explain check; `cluster_watch` and `config_map_watch`
//! follow what `serve` injects with; `ca_bundle_patch` keeps our webhook configurations on the serving CA;
//! `policy_params` keeps the MutatingAdmissionPolicy's params compiled from serve's configuration;
//! every write goes through `write_queue`. Without a cluster client nothing here runs.

pub mod ca_bundle_patch;
pub mod cluster_watch;
pub mod config_map_watch;
pub mod kube_client;
pub mod kube_read;
pub mod policy_params;
pub mod write_queue;
