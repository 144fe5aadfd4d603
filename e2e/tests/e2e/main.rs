//! One integration-test binary for the whole end-to-end suite (short link times).

// The end-to-end checks read the binaries' JSON with serde_json's own accessors, not the injector's
// `fields`, which clippy.toml prescribes for the injector's code: the checker shares no code with what it checks.
#![allow(clippy::disallowed_methods)]

mod build_locks;
mod ca_bundle_patch;
mod cluster_script;
mod cluster_watch;
mod cni_agent;
mod cni_plugin;
mod cni_repair;
mod doctor;
mod explain;
mod explain_kernel;
mod first_hour;
mod helm_chart;
mod helm_chart_cni;
mod helm_chart_policy;
mod hostile;
mod images;
mod inject_differential;
mod iptables;
mod iptables_parity;
mod kube_apiserver;
mod kube_apiserver_tables;
mod kube_cli;
mod modules;
mod nftables;
mod node;
mod policy;
mod policy_drill;
mod policy_params;
mod readme;
mod rules_differential;
mod test_command;
mod testproxy;
mod webhook;
mod webhook_config;
mod webhook_deploy;
