//! The hostile-input suite: what a pod, a request, a configuration or a command line can send
//! to hurt the webhook or the init binary, each reproduced against the built binaries (real TLS, real
//! network namespaces) so that none of these outages comes back. One module per surface.

mod config;
mod doctor;
mod iptables;
mod render;
mod server;
mod templates;
