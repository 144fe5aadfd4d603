//! The native nftables backend (`--native-nftables`): Istio's `istio-proxy-*` tables built from the
//! resolved configuration ([`model`]), printed as the `nft -f` text Istio pipes ([`render`]), and
//! applied in-process as one nf_tables netlink batch ([`netlink`], [`apply`]) unless the kernel already
//! holds exactly them ([`state`]), with no `nft`, `iptables` or `ip` binary; walked by `explain`
//! ([`walk`]). Laid out as the iptables backend (`iptables`) is.

pub mod apply;
pub mod model;
pub mod netlink;
pub mod render;
pub mod state;
pub mod walk;
