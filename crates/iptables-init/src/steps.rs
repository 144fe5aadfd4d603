//! Istio's capture steps, in the order both of its backends take them (`Run` in
//! `tools/istio-iptables/pkg/capture/run.go` and in `tools/istio-nftables/pkg/capture/run.go`): the one
//! list of what is installed in which order, and when a step is taken at all. Each backend's model says
//! how it writes a step (`iptables/model.rs`, `nft/model.rs`); the steps are numbered as in the
//! iptables model's comments.

use crate::config::{Config, InterceptionMode};

/// How one backend writes each of Istio's capture steps.
pub(crate) trait Steps {
    /// Steps 1 and 2: the interfaces left alone, and the kube-virt interfaces never captured inbound.
    fn excluded_interfaces(&mut self, cfg: &Config);
    /// Step 3: packets in conntrack state INVALID dropped (`--drop-invalid`).
    fn drop_invalid(&mut self, cfg: &Config);
    /// Steps 4 to 6: the tunnel port never captured, and the redirect chains every capture jumps to.
    fn shared_chains(&mut self, cfg: &Config);
    /// Step 7: inbound capture.
    fn inbound_capture(&mut self, cfg: &Config);
    /// Steps 8 to 10: everything leaving goes through the output chain, minus the excluded ports.
    fn outbound_entry(&mut self, cfg: &Config);
    /// Steps 11 and 12: the proxy's own traffic is not captured, except to itself over loopback.
    fn proxy_owners(&mut self, cfg: &Config);
    /// Step 13: the owner-group filter.
    fn owner_groups(&mut self, cfg: &Config);
    /// Step 14: DNS capture to the agent, with conntrack zones.
    fn dns_capture(&mut self, cfg: &Config);
    /// Steps 15 to 17: the destinations outbound capture leaves alone, and the ports it always takes.
    fn outbound_destinations(&mut self, cfg: &Config);
    /// Step 18: the included destinations.
    fn outbound_include(&mut self, cfg: &Config);
    /// Step 19: the TPROXY marks, even with no inbound ports.
    fn tproxy_marks(&mut self, cfg: &Config);
}

/// Takes Istio's steps for `cfg` in its order: DNS capture only when DNS is captured, the TPROXY marks
/// only under TPROXY.
pub(crate) fn run(steps: &mut impl Steps, cfg: &Config) {
    steps.excluded_interfaces(cfg);
    steps.drop_invalid(cfg);
    steps.shared_chains(cfg);
    steps.inbound_capture(cfg);
    steps.outbound_entry(cfg);
    steps.proxy_owners(cfg);
    steps.owner_groups(cfg);
    if cfg.dns_capture() {
        steps.dns_capture(cfg);
    }
    steps.outbound_destinations(cfg);
    steps.outbound_include(cfg);
    if cfg.mode == InterceptionMode::Tproxy {
        steps.tproxy_marks(cfg);
    }
}
