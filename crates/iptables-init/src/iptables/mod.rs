//! The iptables backend (the default): Istio's `ISTIO_*` chains built from the resolved configuration
//! as a [`model::Plan`] ([`model`]), printed as the `iptables-restore` input Istio feeds ([`render`]),
//! applied per family through `iptables-restore --noflush` with a state check and rollback, or by
//! becoming `iptables-nft-restore` ([`apply`]), and walked by `explain` ([`walk`]). Laid out as the
//! nftables backend (`nft`) is.

pub mod apply;
pub mod model;
pub mod render;
pub mod walk;
