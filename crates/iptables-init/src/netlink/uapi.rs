//! The kernel's netlink numbers (uapi `linux/netlink.h`) and the nf_tables ones the framing's users
//! share, in a module of their own so that the framing (`netlink`) and its probe both take them from
//! here.

/// The length of `nlmsghdr`.
pub(crate) const HEADER_LEN: usize = 16;
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 1;
pub(crate) const NLM_F_ACK: u16 = 4;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
pub(crate) const NLM_F_CREATE: u16 = 0x400;
/// nf_tables numbers (kernel uapi `linux/netfilter/nfnetlink.h`, `linux/netfilter/nf_tables.h`,
/// `linux/netfilter.h`) that the batch, its read-back and the exec path's probe all use; a message type
/// on the wire is `(NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_*`.
pub(crate) const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub(crate) const NFT_MSG_NEWTABLE: u16 = 0;
pub(crate) const NFT_MSG_GETTABLE: u16 = 1;
pub(crate) const NFT_MSG_DELTABLE: u16 = 2;
pub(crate) const NFT_MSG_NEWCHAIN: u16 = 3;
pub(crate) const NFT_MSG_GETCHAIN: u16 = 4;
pub(crate) const NFT_MSG_NEWRULE: u16 = 6;
pub(crate) const NFT_MSG_GETRULE: u16 = 7;
pub(crate) const NFT_MSG_NEWSET: u16 = 9;
pub(crate) const NFT_MSG_GETSET: u16 = 10;
pub(crate) const NFT_MSG_NEWSETELEM: u16 = 12;
pub(crate) const NFT_MSG_GETSETELEM: u16 = 13;
pub(crate) const NFT_MSG_NEWGEN: u16 = 15;
pub(crate) const NFT_MSG_GETGEN: u16 = 16;
pub(crate) const NFTA_TABLE_NAME: u16 = 1;
pub(crate) const NFTA_CHAIN_TABLE: u16 = 1;
pub(crate) const NFTA_CHAIN_NAME: u16 = 3;
pub(crate) const NFPROTO_INET: u8 = 1;
pub(crate) const NFPROTO_IPV4: u8 = 2;
pub(crate) const NFPROTO_IPV6: u8 = 10;
