//! Asking nf_tables whether a table or chain exists, over a `NETLINK_NETFILTER` socket: the answer
//! `iptables-nft-save` or `nft list` would give, without starting a process. The one probe of both
//! backends' checks for the other's rules and of the iptables exec path.
//!
//! The exec path (`iptables::apply::exec_restore`) needs to know, before it hands the process over to
//! `iptables-nft-restore`, that no rules of ours are in the namespace: after the exec nothing of ours is left
//! to fall back to the checked path. Every plan declares nat `ISTIO_INBOUND`, so a run of ours always leaves
//! that chain; the exec path asks for every chain the plan declares. First one `NFT_MSG_GETTABLE` request
//! for the table (in a fresh namespace it does not exist, and then neither does any chain of it), answered
//! with the table (`NFT_MSG_NEWTABLE`) or an error (`ENOENT`); when it exists, one `NFT_MSG_GETCHAIN`
//! request per chain, answered with the chain (`NFT_MSG_NEWCHAIN`) or an error (`ENOENT`). Everything else
//! is reported as an error, and the caller takes the usual path. `nft::apply` asks the same questions
//! over the socket its batch then uses ([`Probe::over`]).
//!
//! Message layout (kernel uapi `linux/netlink.h`, `linux/netfilter/nfnetlink.h`,
//! `linux/netfilter/nf_tables.h`): `nlmsghdr` (16 bytes), `nfgenmsg` (4 bytes), then attributes
//! (`nlattr`: length and type, 4 bytes, the payload, padding to 4 bytes). Integers are in host byte order
//! except `nfgenmsg.res_id` (big endian, and 0 here).

use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, SockProtocol};

use super::uapi::{
    NFNL_SUBSYS_NFTABLES, NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6, NFTA_CHAIN_NAME,
    NFTA_CHAIN_TABLE, NFTA_TABLE_NAME, NFT_MSG_GETCHAIN, NFT_MSG_GETTABLE, NFT_MSG_NEWCHAIN,
    NFT_MSG_NEWTABLE, NLMSG_ERROR, NLM_F_ACK, NLM_F_REQUEST,
};
use crate::config::Family;
use crate::netlink;

/// The wire types of the messages the probe sends and expects.
const GETTABLE: u16 = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE;
const NEWTABLE: u16 = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE;
const GETCHAIN: u16 = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETCHAIN;
const NEWCHAIN: u16 = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWCHAIN;
/// `NFT_NAME_MAXLEN`: the longest table or chain name nf_tables takes, terminating NUL included.
const NAME_MAXLEN: usize = 256;

/// Why the probe gave no answer. Any of these sends the run down the usual (checked) path.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProbeError {
    /// The netlink socket could not be opened or set up (no nfnetlink in the kernel, seccomp, ...).
    #[error("netlink socket: {0}")]
    Socket(Errno),
    /// Sending the request or receiving the answer failed (including the receive timeout).
    #[error("netlink {op}: {errno}")]
    Io { op: &'static str, errno: Errno },
    /// The kernel refused the request with something else than "no such chain" (e.g. `EPERM` without
    /// `CAP_NET_ADMIN`).
    #[error("nf_tables refused the chain request: {0}")]
    Refused(Errno),
    /// A table or chain name nf_tables cannot hold (a NUL byte, or too long).
    #[error("invalid table or chain name {0:?}")]
    Name(String),
    /// The answer was not a chain, an error or an acknowledgement of our request.
    #[error("unexpected netlink answer: {0}")]
    Unexpected(String),
}

/// A `NETLINK_NETFILTER` socket in the calling thread's network namespace, its own ([`Probe::open`]) or
/// borrowed ([`Probe::over`]), asked one question at a time.
pub struct Probe<F: AsFd = OwnedFd> {
    fd: F,
    seq: u32,
}

impl Probe {
    /// Opens the socket. A receive timeout bounds every answer: the probe only saves processes, it must
    /// never be what makes a run hang.
    pub fn open() -> Result<Probe, ProbeError> {
        let fd = netlink::open(SockProtocol::NetlinkNetFilter, 1).map_err(ProbeError::Socket)?;
        Ok(Probe { fd, seq: 0 })
    }
}

impl<F: AsFd> Probe<F> {
    /// The probe over an open `NETLINK_NETFILTER` socket (with its own receive timeout) that no other
    /// request is pending on: the one of `nft::apply`, so that asking opens no socket. Its requests are
    /// numbered from `u32::MAX` on (then 0), never a batch message's number (1 up), so an answer left
    /// unread by a failed question cannot pass for the acknowledgement of a batch message.
    pub fn over(fd: F) -> Probe<F> {
        Probe {
            fd,
            seq: u32::MAX - 1,
        }
    }

    /// Whether table `table` exists in `family`'s nf_tables. A chain cannot exist without its table, so
    /// in a namespace where iptables-nft never ran one request answers for all the chains of a table.
    pub fn table_exists(&mut self, family: Family, table: &str) -> Result<bool, ProbeError> {
        self.seq = self.seq.wrapping_add(1);
        let request = gettable_request(family, table, self.seq)?;
        self.exists(&request, NEWTABLE, "table")
    }

    /// Whether the `inet` table `table` exists: the tables of `--native-nftables`.
    pub fn inet_table_exists(&mut self, table: &str) -> Result<bool, ProbeError> {
        self.seq = self.seq.wrapping_add(1);
        let request = request(
            GETTABLE,
            NFPROTO_INET,
            &[(NFTA_TABLE_NAME, table)],
            self.seq,
        )?;
        self.exists(&request, NEWTABLE, "table")
    }

    /// Whether chain `chain` of table `table` exists in `family`'s nf_tables.
    pub fn chain_exists(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<bool, ProbeError> {
        self.seq = self.seq.wrapping_add(1);
        let request = getchain_request(family, table, chain, self.seq)?;
        self.exists(&request, NEWCHAIN, "chain")
    }

    /// Sends one `GET*` request (sequence number `self.seq`) and reads its answer: the object
    /// (`found`) then an acknowledgement, or an error (`ENOENT`: no such object).
    fn exists(&mut self, request: &[u8], found_kind: u16, what: &str) -> Result<bool, ProbeError> {
        let seq = self.seq;
        netlink::send(&self.fd, request).map_err(|errno| ProbeError::Io { op: "send", errno })?;
        // The kernel answers a found object with NEW* then an acknowledgement (error 0), a missing one
        // with an error message alone; read until the message that ends our request.
        let mut found = false;
        let mut buf = vec![0u8; 8192];
        loop {
            let answer =
                netlink::receive(&self.fd, &mut buf, MsgFlags::empty()).map_err(|errno| {
                    ProbeError::Io {
                        op: "receive",
                        errno,
                    }
                })?;
            for msg in answer {
                let msg = msg.map_err(|e| ProbeError::Unexpected(e.to_string()))?;
                if msg.seq != seq {
                    // A late answer to an earlier request (cannot happen with one request at a time,
                    // but harmless to skip).
                    continue;
                }
                match msg.kind {
                    kind if kind == found_kind => found = true,
                    NLMSG_ERROR => {
                        let code = netlink::error_code(msg.payload).ok_or_else(|| {
                            ProbeError::Unexpected("truncated error message".to_string())
                        })?;
                        return match code {
                            0 if found => Ok(true),
                            0 => Err(ProbeError::Unexpected(format!(
                                "acknowledgement without a {what}"
                            ))),
                            c if c == -(Errno::ENOENT as i32) => Ok(false),
                            c => Err(ProbeError::Refused(Errno::from_raw(-c))),
                        };
                    }
                    other => {
                        return Err(ProbeError::Unexpected(format!("message type {other:#06x}")))
                    }
                }
            }
        }
    }
}

fn nfproto(family: Family) -> u8 {
    match family {
        Family::V4 => NFPROTO_IPV4,
        Family::V6 => NFPROTO_IPV6,
    }
}

/// Appends an attribute holding `value` as a NUL-terminated string, padded to 4 bytes.
fn push_str_attr(out: &mut Vec<u8>, kind: u16, value: &str) -> Result<(), ProbeError> {
    if value.is_empty() || value.contains('\0') || value.len() + 1 > NAME_MAXLEN {
        return Err(ProbeError::Name(value.to_string()));
    }
    let mut nul_terminated = Vec::with_capacity(value.len() + 1);
    nul_terminated.extend_from_slice(value.as_bytes());
    nul_terminated.push(0);
    netlink::push_attr(out, kind, &nul_terminated);
    Ok(())
}

/// The `NFT_MSG_GETTABLE` request for `family` `table`.
fn gettable_request(family: Family, table: &str, seq: u32) -> Result<Vec<u8>, ProbeError> {
    request(GETTABLE, nfproto(family), &[(NFTA_TABLE_NAME, table)], seq)
}

/// The `NFT_MSG_GETCHAIN` request for `family` `table` `chain`.
fn getchain_request(
    family: Family,
    table: &str,
    chain: &str,
    seq: u32,
) -> Result<Vec<u8>, ProbeError> {
    request(
        GETCHAIN,
        nfproto(family),
        &[(NFTA_CHAIN_TABLE, table), (NFTA_CHAIN_NAME, chain)],
        seq,
    )
}

/// A request of type `kind` for the nf_tables family `nfproto` with string attributes `attrs` (kind,
/// value).
fn request(kind: u16, nfproto: u8, attrs: &[(u16, &str)], seq: u32) -> Result<Vec<u8>, ProbeError> {
    let mut out = Vec::with_capacity(64);
    let start = netlink::begin(&mut out, kind, NLM_F_REQUEST | NLM_F_ACK, seq);
    out.extend_from_slice(&[nfproto, 0, 0, 0]); // nfgenmsg: family, version 0, res_id 0
    for (attr, value) in attrs {
        push_str_attr(&mut out, *attr, value)?;
    }
    netlink::end(&mut out, start);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::apply::netns_tests::{in_fresh_netns, injected_plan, sh};
    use crate::netlink::Messages;

    #[test]
    fn request_layout() {
        let r = getchain_request(Family::V4, "nat", "ISTIO_INBOUND", 7).expect("request");
        // 16 header + 4 nfgenmsg + (4 + "nat\0") + (4 + "ISTIO_INBOUND\0" padded to 16).
        assert_eq!(r.len(), 16 + 4 + 8 + 20);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().expect("4")), 48);
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), 0x0a04);
        assert_eq!(u16::from_ne_bytes([r[6], r[7]]), 1 | 4);
        assert_eq!(u32::from_ne_bytes(r[8..12].try_into().expect("4")), 7);
        assert_eq!(&r[16..20], &[2, 0, 0, 0]);
        assert_eq!(&r[20..28], &[8, 0, 1, 0, b'n', b'a', b't', 0]);
        assert_eq!(u16::from_ne_bytes([r[28], r[29]]), 18);
        assert_eq!(u16::from_ne_bytes([r[30], r[31]]), 3);
        assert_eq!(&r[32..46], b"ISTIO_INBOUND\0");
        assert_eq!(&r[46..48], &[0, 0]);
        assert_eq!(
            getchain_request(Family::V6, "nat", "A\0B", 1),
            Err(ProbeError::Name("A\0B".to_string()))
        );
        assert!(getchain_request(Family::V6, "nat", &"X".repeat(256), 1).is_err());
        let t = gettable_request(Family::V4, "nat", 3).expect("request");
        // 16 header + 4 nfgenmsg + (4 + "nat\0").
        assert_eq!(t.len(), 28);
        assert_eq!(u32::from_ne_bytes(t[0..4].try_into().expect("4")), 28);
        assert_eq!(u16::from_ne_bytes([t[4], t[5]]), 0x0a01);
        assert_eq!(u16::from_ne_bytes([t[6], t[7]]), 1 | 4);
        assert_eq!(u32::from_ne_bytes(t[8..12].try_into().expect("4")), 3);
        assert_eq!(&t[16..28], &[2, 0, 0, 0, 8, 0, 1, 0, b'n', b'a', b't', 0]);
    }

    #[test]
    fn parses_answers_and_rejects_garbage() {
        let mut two = Vec::new();
        for (kind, seq) in [(NEWCHAIN, 5u32), (NLMSG_ERROR, 5)] {
            two.extend_from_slice(&20u32.to_ne_bytes());
            two.extend_from_slice(&kind.to_ne_bytes());
            two.extend_from_slice(&0u16.to_ne_bytes());
            two.extend_from_slice(&seq.to_ne_bytes());
            two.extend_from_slice(&0u32.to_ne_bytes());
            two.extend_from_slice(&0i32.to_ne_bytes());
        }
        let msgs: Vec<(u16, u32, usize)> = Messages(&two)
            .map(|m| m.map(|m| (m.kind, m.seq, m.payload.len())))
            .collect::<Result<_, _>>()
            .expect("two messages");
        assert_eq!(msgs, [(NEWCHAIN, 5, 4), (NLMSG_ERROR, 5, 4)]);
        let mut long = two.clone();
        long[0] = 200;
        assert!(Messages(&long).next().is_some_and(|m| m.is_err()));
        assert!(Messages(&two[..10]).next().is_some_and(|m| m.is_err()));
    }

    fn exists(table: &str, chain: &str) -> bool {
        let mut p = Probe::open().expect("netlink socket");
        p.chain_exists(Family::V4, table, chain)
            .expect("probe answers")
    }

    #[test]
    fn absent_in_a_fresh_namespace() {
        in_fresh_netns(|| {
            assert!(!exists("nat", "ISTIO_INBOUND"));
            let mut p = Probe::open().expect("netlink socket");
            assert_eq!(p.table_exists(Family::V4, "nat"), Ok(false));
            assert_eq!(p.table_exists(Family::V6, "filter"), Ok(false));
            // The same socket answers several requests, of both kinds.
            for _ in 0..3 {
                assert_eq!(
                    p.chain_exists(Family::V4, "nat", "ISTIO_INBOUND"),
                    Ok(false)
                );
                assert_eq!(p.chain_exists(Family::V6, "nat", "ISTIO_OUTPUT"), Ok(false));
            }
        });
    }

    #[test]
    fn present_after_our_rules_are_applied() {
        in_fresh_netns(|| {
            crate::iptables::apply::apply(
                &injected_plan(),
                &crate::iptables::apply::ApplyOptions::default(),
            )
            .expect("apply");
            let mut p = Probe::open().expect("netlink socket");
            for chain in ["ISTIO_INBOUND", "ISTIO_OUTPUT", "ISTIO_REDIRECT", "OUTPUT"] {
                assert_eq!(
                    p.chain_exists(Family::V4, "nat", chain),
                    Ok(true),
                    "{chain}"
                );
            }
            assert_eq!(p.table_exists(Family::V4, "nat"), Ok(true));
            // Other families and tables are separate.
            assert_eq!(p.table_exists(Family::V6, "nat"), Ok(false));
            assert_eq!(p.table_exists(Family::V4, "mangle"), Ok(false));
            for (family, table, chain) in [
                (Family::V6, "nat", "ISTIO_INBOUND"),
                (Family::V4, "mangle", "ISTIO_INBOUND"),
                (Family::V4, "nat", "ISTIO_NOPE"),
            ] {
                assert_eq!(
                    p.chain_exists(family, table, chain),
                    Ok(false),
                    "{family:?} {table} {chain}"
                );
            }
        });
    }

    #[test]
    fn answers_over_a_borrowed_socket_across_the_sequence_wrap() {
        use std::os::fd::AsFd as _;
        in_fresh_netns(|| {
            let fd = netlink::open(SockProtocol::NetlinkNetFilter, 1).expect("netlink socket");
            let mut p = Probe::over(fd.as_fd());
            // Numbered u32::MAX, 0, 1: each answer is still matched to its own request.
            for _ in 0..3 {
                assert_eq!(
                    p.chain_exists(Family::V4, "nat", "ISTIO_INBOUND"),
                    Ok(false)
                );
            }
            sh("printf '*nat\\n-N ISTIO_INBOUND\\nCOMMIT\\n' | iptables-nft-restore --noflush");
            assert_eq!(p.chain_exists(Family::V4, "nat", "ISTIO_INBOUND"), Ok(true));
            assert_eq!(
                p.chain_exists(Family::V6, "nat", "ISTIO_INBOUND"),
                Ok(false)
            );
        });
    }

    #[test]
    fn absent_when_only_an_unrelated_nat_chain_exists() {
        in_fresh_netns(|| {
            sh("printf '*nat\\n-N FOREIGN\\n-A OUTPUT -p tcp --dport 123 -j FOREIGN\\nCOMMIT\\n' | iptables-nft-restore --noflush");
            assert!(exists("nat", "FOREIGN"));
            let mut p = Probe::open().expect("netlink socket");
            assert_eq!(p.table_exists(Family::V4, "nat"), Ok(true));
            assert!(exists("nat", "OUTPUT"));
            assert!(!exists("nat", "ISTIO_INBOUND"));
        });
    }
}
