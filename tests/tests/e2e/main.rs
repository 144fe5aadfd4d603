//! One integration-test binary for the whole end-to-end suite (short link times).

mod doctor;
mod explain;
mod explain_kernel;
mod iptables;
mod iptables_parity;
mod modules;
mod nftables;
mod readme;
mod webhook;
mod webhook_config;
