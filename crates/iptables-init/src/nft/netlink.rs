//! The nf_tables batch of a ruleset and its exchange over a `NETLINK_NETFILTER` socket.
//!
//! Layout (kernel uapi `linux/netlink.h`, `linux/netfilter/nfnetlink.h`, `linux/netfilter/nf_tables.h`):
//! each message is an `nlmsghdr` (16 bytes), an `nfgenmsg` (4 bytes) and attributes (`nlattr`: length
//! and type, payload, padding to 4 bytes). Attribute integers are big endian; register data is in the
//! byte order of what it is compared with (addresses and ports network order, uids, marks and zones
//! host order). The expressions are the ones `nft` 1.0 generates for Istio's statements, implicit
//! protocol dependencies included, so the kernel holds the same bytecode as after `nft -f` of the
//! golden text. Inserts are already resolved by the model: every rule is appended in final order.

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{setsockopt, sockopt, MsgFlags, SockProtocol};

use super::model::{
    ifname_prefix, Chain, CtState, Dir, Group, Ip, Proto, Rule, Stmt, Table, TableId,
};
use super::render::rule_text;
use crate::config::Cidr;
pub(super) use crate::netlink::attr;
use crate::netlink::{
    self, error_code, Probe, NFNL_SUBSYS_NFTABLES, NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6,
    NFT_MSG_DELTABLE, NFT_MSG_GETGEN, NFT_MSG_GETTABLE, NFT_MSG_NEWCHAIN, NFT_MSG_NEWGEN,
    NFT_MSG_NEWRULE, NFT_MSG_NEWSET, NFT_MSG_NEWSETELEM, NFT_MSG_NEWTABLE, NLMSG_DONE, NLMSG_ERROR,
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REQUEST,
};

const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFTA_META_SREG: u16 = 3;
const NFTA_CT_DREG: u16 = 1;
const NFTA_CT_KEY: u16 = 2;
const NFTA_CT_SREG: u16 = 4;
const REG_VERDICT: u32 = 0;
const REG_1: u32 = 1;

const META_MARK: u32 = 3;
const META_IIFNAME: u32 = 6;
const META_OIFNAME: u32 = 7;
const META_SKUID: u32 = 10;
const META_SKGID: u32 = 11;
const META_NFPROTO: u32 = 15;
const META_L4PROTO: u32 = 16;
const CT_STATE: u32 = 0;
const CT_MARK: u32 = 3;
const CT_ZONE: u32 = 17;
const PAYLOAD_NETWORK: u32 = 1;
const PAYLOAD_TRANSPORT: u32 = 2;
const NF_DROP: i32 = 0;
const NF_ACCEPT: i32 = 1;
const NFT_JUMP: i32 = -3;
const NFT_RETURN: i32 = -5;
const IFNAMSIZ: usize = 16;

/// Why a batch could not be applied. Nothing was changed in any of these cases: the kernel applies
/// a batch whole or not at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NetlinkError {
    /// The netlink socket could not be opened or set up.
    #[error("nf_tables netlink socket: {0}")]
    Socket(Errno),
    /// Sending the batch or receiving the acknowledgements failed.
    #[error("nf_tables netlink {op}: {errno}")]
    Io { op: &'static str, errno: Errno },
    /// The kernel refused a message of the batch: what it was (the rule text for a rule) and why.
    #[error("the kernel refused `{what}`: {errno}{}", kernel_hint(.errno, .what))]
    Refused { what: String, errno: Errno },
    /// The answer could not be understood.
    #[error("unexpected nf_tables answer: {0}")]
    Unexpected(String),
}

/// The kernel feature behind a refusal of the kind a too-old or reduced kernel gives.
fn kernel_hint(errno: &Errno, what: &str) -> String {
    let missing = *errno == Errno::EOPNOTSUPP || *errno == Errno::ENOENT;
    if !missing {
        return String::new();
    }
    let feature = if what.contains("tproxy") {
        Some("nft_tproxy (Linux 4.19 or later, CONFIG_NFT_TPROXY)")
    } else if what.contains("redirect") {
        Some("nat in the inet family with nft_redir (Linux 5.2 or later, CONFIG_NFT_REDIR)")
    } else if what.contains("type nat") {
        Some("nat chains in the inet family (Linux 5.2 or later, CONFIG_NFT_NAT)")
    } else if what.contains("ct ") {
        Some("nft_ct (CONFIG_NFT_CT)")
    } else {
        None
    };
    feature.map_or_else(String::new, |f| format!(" (the kernel probably lacks {f})"))
}

/// Appends attributes to a message buffer.
pub(super) struct Buf(pub(super) Vec<u8>);

impl Buf {
    fn attr(&mut self, kind: u16, payload: &[u8]) {
        netlink::push_attr(&mut self.0, kind, payload);
    }

    fn u32(&mut self, kind: u16, v: u32) {
        self.attr(kind, &v.to_be_bytes());
    }

    fn str(&mut self, kind: u16, s: &str) {
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        self.attr(kind, &b);
    }

    /// A nested attribute whose content `f` writes.
    fn nest(&mut self, kind: u16, f: impl FnOnce(&mut Buf)) {
        let start = self.0.len();
        self.0.extend_from_slice(&[0, 0]);
        self.0
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        f(self);
        let len = (self.0.len() - start) as u16;
        self.0[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    }

    fn data(&mut self, kind: u16, value: &[u8]) {
        self.nest(kind, |b| b.attr(NFTA_DATA_VALUE, value));
    }
}

/// One expression of a rule: its name and attributes.
fn expr(b: &mut Buf, name: &str, f: impl FnOnce(&mut Buf)) {
    b.nest(NFTA_LIST_ELEM, |b| {
        b.str(NFTA_EXPR_NAME, name);
        b.nest(NFTA_EXPR_DATA, f);
    });
}

/// A `meta` or `ct` expression: a key and a register, two u32 attributes written in the given order.
fn key_and_register(b: &mut Buf, name: &str, attrs: [(u16, u32); 2]) {
    expr(b, name, |b| {
        for (kind, v) in attrs {
            b.u32(kind, v);
        }
    });
}

fn meta_load(b: &mut Buf, key: u32) {
    key_and_register(b, "meta", [(NFTA_META_KEY, key), (NFTA_META_DREG, REG_1)]);
}

fn meta_set(b: &mut Buf, key: u32) {
    key_and_register(b, "meta", [(NFTA_META_KEY, key), (NFTA_META_SREG, REG_1)]);
}

fn ct_load(b: &mut Buf, key: u32) {
    key_and_register(b, "ct", [(NFTA_CT_DREG, REG_1), (NFTA_CT_KEY, key)]);
}

fn ct_set(b: &mut Buf, key: u32) {
    key_and_register(b, "ct", [(NFTA_CT_KEY, key), (NFTA_CT_SREG, REG_1)]);
}

fn cmp(b: &mut Buf, neq: bool, value: &[u8]) {
    expr(b, "cmp", |b| {
        b.u32(1, REG_1); // NFTA_CMP_SREG
        b.u32(2, u32::from(neq)); // NFTA_CMP_OP: NFT_CMP_EQ 0, NFT_CMP_NEQ 1
        b.data(3, value); // NFTA_CMP_DATA
    });
}

fn payload(b: &mut Buf, base: u32, offset: u32, len: u32) {
    expr(b, "payload", |b| {
        b.u32(1, REG_1); // NFTA_PAYLOAD_DREG
        b.u32(2, base);
        b.u32(3, offset);
        b.u32(4, len);
    });
}

fn bitwise(b: &mut Buf, mask: &[u8]) {
    expr(b, "bitwise", |b| {
        b.u32(1, REG_1); // NFTA_BITWISE_SREG
        b.u32(2, REG_1); // NFTA_BITWISE_DREG
        b.u32(3, mask.len() as u32); // NFTA_BITWISE_LEN
        b.data(4, mask); // NFTA_BITWISE_MASK
        b.data(5, &vec![0; mask.len()]); // NFTA_BITWISE_XOR
    });
}

fn immediate(b: &mut Buf, value: &[u8]) {
    expr(b, "immediate", |b| {
        b.u32(1, REG_1); // NFTA_IMMEDIATE_DREG
        b.data(2, value); // NFTA_IMMEDIATE_DATA
    });
}

fn verdict(b: &mut Buf, code: i32, chain: Option<&str>) {
    expr(b, "immediate", |b| {
        b.u32(1, REG_VERDICT);
        b.nest(2, |b| {
            b.nest(NFTA_DATA_VERDICT, |b| {
                b.attr(1, &code.to_be_bytes()); // NFTA_VERDICT_CODE
                if let Some(c) = chain {
                    b.str(2, c); // NFTA_VERDICT_CHAIN
                }
            });
        });
    });
}

/// `NF_CT_STATE_*` bits.
fn ct_state_bits(s: CtState) -> u32 {
    match s {
        CtState::Invalid => 1,
        // 1 << (IP_CT_ESTABLISHED + 1) | 1 << (IP_CT_RELATED + 1).
        CtState::RelatedEstablished => 2 | 4,
    }
}

/// A CIDR match as nft compiles it: a byte-aligned prefix loads and compares just its bytes; any
/// other (and `/0`) loads the whole address and masks it first. Host bits are cleared.
fn addr_match(b: &mut Buf, dir: Dir, neq: bool, c: &Cidr) {
    let (bytes, base_off): (Vec<u8>, u32) = match c.addr {
        std::net::IpAddr::V4(a) => (
            a.octets().to_vec(),
            if dir == Dir::Source { 12 } else { 16 },
        ),
        std::net::IpAddr::V6(a) => (a.octets().to_vec(), if dir == Dir::Source { 8 } else { 24 }),
    };
    let len = usize::from(c.len).min(bytes.len() * 8);
    let mask: Vec<u8> = (0..bytes.len())
        .map(|i| {
            let bits = len.saturating_sub(i * 8).min(8);
            if bits == 0 {
                0
            } else {
                0xffu8 << (8 - bits)
            }
        })
        .collect();
    let value: Vec<u8> = bytes.iter().zip(&mask).map(|(a, m)| a & m).collect();
    if len % 8 == 0 && len > 0 {
        let n = len / 8;
        payload(b, PAYLOAD_NETWORK, base_off, n as u32);
        cmp(b, neq, &value[..n]);
    } else {
        payload(b, PAYLOAD_NETWORK, base_off, bytes.len() as u32);
        bitwise(b, &mask);
        cmp(b, neq, &value);
    }
}

/// Resolves an owner group as nft does at parse time: a number is a gid, a name is looked up in
/// `/etc/group`.
pub trait Groups {
    fn gid(&self, name: &str) -> Option<u32>;
}

/// Group names from an `/etc/group`-format text.
pub struct GroupFile(pub String);

/// `/etc/group`, read the first time a name is looked up (most configurations name none); a missing
/// file resolves no name.
#[derive(Default)]
pub struct SystemGroups(std::cell::OnceCell<GroupFile>);

impl Groups for SystemGroups {
    fn gid(&self, name: &str) -> Option<u32> {
        self.0
            .get_or_init(|| GroupFile(std::fs::read_to_string("/etc/group").unwrap_or_default()))
            .gid(name)
    }
}

impl Groups for GroupFile {
    fn gid(&self, name: &str) -> Option<u32> {
        self.0.lines().find_map(|l| {
            let mut f = l.split(':');
            (f.next()? == name).then_some(())?;
            f.next()?;
            f.next()?.trim().parse().ok()
        })
    }
}

/// What one acknowledged message of a batch does, rendered only when the kernel refuses it.
#[derive(Debug, Clone, Copy)]
pub enum What<'a> {
    AddTable(TableId),
    DeleteTable(TableId),
    AddChain(TableId, &'a Chain),
    /// The anonymous set of a rule (`NEWSET` and `NEWSETELEM`).
    SetOf(TableId, &'static str, &'a Rule),
    AddRule(TableId, &'static str, &'a Rule),
}

impl std::fmt::Display for What<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            What::AddTable(t) => write!(f, "add table inet {}", t.name()),
            What::DeleteTable(t) => write!(f, "delete table inet {}", t.name()),
            What::AddChain(t, c) => match c.base {
                Some(b) => write!(
                    f,
                    "add chain inet {} {} {{ type {} hook {} priority {} ; }}",
                    t.name(),
                    c.name,
                    b.kind.as_str(),
                    b.hook.as_str(),
                    b.priority
                ),
                None => write!(f, "add chain inet {} {}", t.name(), c.name),
            },
            What::SetOf(t, c, r) => write!(
                f,
                "the anonymous set of `add rule inet {} {c} {}`",
                t.name(),
                rule_text(r)
            ),
            What::AddRule(t, c, r) => write!(f, "add rule inet {} {c} {}", t.name(), rule_text(r)),
        }
    }
}

/// Builds the batch: the messages and, per message, what it does (for error messages).
pub struct Batch<'a> {
    buf: Vec<u8>,
    what: Vec<What<'a>>,
    next_set: u32,
}

/// A group name nft would not resolve.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("owner group {0:?} (ISTIO_OUTBOUND_OWNER_GROUPS) is not in /etc/group")]
pub struct UnknownGroup(pub String);

/// Checks that every group name of `rs` resolves, before anything is changed.
pub fn check_groups(rs: &super::model::Ruleset, groups: &dyn Groups) -> Result<(), UnknownGroup> {
    for t in &rs.tables {
        for e in &t.entries {
            for s in &e.rule.stmts {
                if let Stmt::SkGid {
                    group: Group::Name(n),
                    ..
                } = s
                {
                    groups.gid(n).ok_or_else(|| UnknownGroup(n.clone()))?;
                }
            }
        }
    }
    Ok(())
}

const ACKED: u16 = NLM_F_REQUEST | NLM_F_ACK;

impl<'a> Batch<'a> {
    /// A batch that the kernel applies only while the ruleset generation is still `genid` (it answers
    /// `ERESTART` otherwise), so what was read before building it still holds.
    pub fn new(genid: Option<u32>) -> Batch<'a> {
        let mut b = Batch {
            buf: Vec::with_capacity(16 * 1024),
            what: Vec::with_capacity(64),
            next_set: 1,
        };
        b.msg(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, None, |b| {
            if let Some(g) = genid {
                b.u32(1, g); // NFNL_BATCH_GENID
            }
        });
        b
    }

    /// Appends a message, written in place. `what` is `None` for the batch framing, which is not
    /// acknowledged; the others are nf_tables messages of the `inet` family.
    fn msg(&mut self, kind: u16, flags: u16, what: Option<What<'a>>, f: impl FnOnce(&mut Buf)) {
        let (kind, family, res_id, seq) = match what {
            Some(w) => {
                self.what.push(w);
                (
                    (NFNL_SUBSYS_NFTABLES << 8) | kind,
                    NFPROTO_INET,
                    0u16,
                    self.what.len() as u32,
                )
            }
            None => (kind, 0, NFNL_SUBSYS_NFTABLES, 0),
        };
        let mut b = Buf(std::mem::take(&mut self.buf));
        let start = netlink::begin(&mut b.0, kind, flags, seq);
        b.0.extend_from_slice(&[family, 0]);
        b.0.extend_from_slice(&res_id.to_be_bytes());
        f(&mut b);
        netlink::end(&mut b.0, start);
        self.buf = b.0;
    }

    /// `add table` + `delete table`: removes the table whether or not it exists.
    pub fn remove_table(&mut self, t: TableId) {
        self.msg(
            NFT_MSG_NEWTABLE,
            ACKED | NLM_F_CREATE,
            Some(What::AddTable(t)),
            |b| {
                b.str(1, t.name());
            },
        );
        self.msg(NFT_MSG_DELTABLE, ACKED, Some(What::DeleteTable(t)), |b| {
            b.str(1, t.name());
        });
    }

    /// Creates `t` from scratch with its chains and its rules in final order.
    pub fn table(&mut self, t: &'a Table, groups: &dyn Groups) -> Result<(), UnknownGroup> {
        let name = t.id.name();
        self.msg(
            NFT_MSG_NEWTABLE,
            ACKED | NLM_F_CREATE,
            Some(What::AddTable(t.id)),
            |b| {
                b.str(1, name);
            },
        );
        for c in &t.chains {
            self.msg(
                NFT_MSG_NEWCHAIN,
                ACKED | NLM_F_CREATE,
                Some(What::AddChain(t.id, c)),
                |b| {
                    b.str(1, name); // NFTA_CHAIN_TABLE
                    b.str(3, c.name); // NFTA_CHAIN_NAME
                    if let Some(base) = c.base {
                        b.nest(4, |b| {
                            // NFTA_HOOK_HOOKNUM: NF_INET_PRE_ROUTING 0, NF_INET_LOCAL_OUT 3.
                            b.u32(
                                1,
                                match base.hook {
                                    super::model::Hook::Prerouting => 0,
                                    super::model::Hook::Output => 3,
                                },
                            );
                            b.attr(2, &base.priority.to_be_bytes()); // NFTA_HOOK_PRIORITY
                        });
                        b.str(7, base.kind.as_str()); // NFTA_CHAIN_TYPE
                    }
                },
            );
        }
        for c in &t.chains {
            for rule in t.chain_rules(c.name) {
                self.rule(t.id, c.name, rule, groups)?;
            }
        }
        Ok(())
    }

    fn rule(
        &mut self,
        table: TableId,
        chain: &'static str,
        rule: &'a Rule,
        groups: &dyn Groups,
    ) -> Result<(), UnknownGroup> {
        let name = table.name();
        // Anonymous sets go before the rule that looks them up (Istio's rules have at most one).
        let mut set_ids = [0u32; 4];
        let mut sets = 0;
        for s in &rule.stmts {
            if let Stmt::PortNotIn { ports, .. } = s {
                let id = self.next_set;
                self.next_set += 1;
                if let Some(slot) = set_ids.get_mut(sets) {
                    *slot = id;
                    sets += 1;
                }
                let what = Some(What::SetOf(table, chain, rule));
                self.msg(NFT_MSG_NEWSET, ACKED | NLM_F_CREATE, what, |b| {
                    b.str(1, name); // NFTA_SET_TABLE
                    b.str(2, "__set%d"); // NFTA_SET_NAME
                    b.u32(3, 0x1 | 0x2); // NFTA_SET_FLAGS: ANONYMOUS | CONSTANT
                    b.u32(4, 13); // NFTA_SET_KEY_TYPE: inet_service
                    b.u32(5, 2); // NFTA_SET_KEY_LEN
                    b.u32(10, id); // NFTA_SET_ID
                    b.nest(9, |b| b.u32(1, ports.len() as u32)); // NFTA_SET_DESC { SIZE }
                });
                self.msg(NFT_MSG_NEWSETELEM, ACKED | NLM_F_CREATE, what, |b| {
                    b.str(1, name); // NFTA_SET_ELEM_LIST_TABLE
                    b.str(2, "__set%d"); // NFTA_SET_ELEM_LIST_SET
                    b.u32(4, id); // NFTA_SET_ELEM_LIST_SET_ID
                    b.nest(3, |b| {
                        for p in ports {
                            b.nest(NFTA_LIST_ELEM, |b| b.data(1, &p.to_be_bytes()));
                        }
                    });
                });
            }
        }
        let mut result = Ok(());
        let what = Some(What::AddRule(table, chain, rule));
        self.msg(
            NFT_MSG_NEWRULE,
            ACKED | NLM_F_CREATE | NLM_F_APPEND,
            what,
            |b| {
                b.str(1, name); // NFTA_RULE_TABLE
                b.str(2, chain); // NFTA_RULE_CHAIN
                b.nest(4, |b| {
                    result = encode_rule(b, rule, groups, &set_ids[..sets])
                }); // NFTA_RULE_EXPRESSIONS
            },
        );
        result
    }

    /// The finished batch and what each acknowledged message does (sequence number `i + 1`).
    pub fn finish(mut self) -> (Vec<u8>, Vec<What<'a>>) {
        self.msg(NFNL_MSG_BATCH_END, NLM_F_REQUEST, None, |_| {});
        (self.buf, self.what)
    }
}

/// The expressions of one rule, with nft's implicit dependencies.
pub(super) fn encode_rule(
    b: &mut Buf,
    rule: &Rule,
    groups: &dyn Groups,
    set_ids: &[u32],
) -> Result<(), UnknownGroup> {
    let mut l4: Option<Proto> = None;
    let mut sets = set_ids.iter();
    let l4_dep = |b: &mut Buf, l4: &mut Option<Proto>, p: Proto| {
        if *l4 != Some(p) {
            meta_load(b, META_L4PROTO);
            cmp(b, false, &[l4proto(p)]);
            *l4 = Some(p);
        }
    };
    for s in &rule.stmts {
        match s {
            Stmt::Ifname { output, name } => {
                meta_load(b, if *output { META_OIFNAME } else { META_IIFNAME });
                match ifname_prefix(name) {
                    // As nft encodes `iifname "eth*"`: the prefix alone, no NUL, so the kernel's
                    // compare covers only its bytes.
                    Some(prefix) => cmp(b, false, prefix.as_bytes()),
                    None => {
                        let mut v = name.as_bytes().to_vec();
                        v.resize(IFNAMSIZ, 0);
                        cmp(b, false, &v);
                    }
                }
            }
            Stmt::L4proto(p) => {
                meta_load(b, META_L4PROTO);
                cmp(b, false, &[l4proto(*p)]);
                l4 = Some(*p);
            }
            Stmt::Addr { dir, neq, cidr } => {
                meta_load(b, META_NFPROTO);
                cmp(
                    b,
                    false,
                    &[if cidr.addr.is_ipv4() {
                        NFPROTO_IPV4
                    } else {
                        NFPROTO_IPV6
                    }],
                );
                addr_match(b, *dir, *neq, cidr);
            }
            Stmt::Port {
                proto,
                dir,
                neq,
                port,
            } => {
                l4_dep(b, &mut l4, *proto);
                payload(
                    b,
                    PAYLOAD_TRANSPORT,
                    if *dir == Dir::Source { 0 } else { 2 },
                    2,
                );
                cmp(b, *neq, &port.to_be_bytes());
            }
            Stmt::PortNotIn { proto, .. } => {
                l4_dep(b, &mut l4, *proto);
                payload(b, PAYLOAD_TRANSPORT, 2, 2);
                let id = sets.next().copied().unwrap_or_default();
                expr(b, "lookup", |b| {
                    b.str(1, "__set%d"); // NFTA_LOOKUP_SET
                    b.u32(2, REG_1); // NFTA_LOOKUP_SREG
                    b.u32(4, id); // NFTA_LOOKUP_SET_ID
                    b.u32(5, 1); // NFTA_LOOKUP_FLAGS: NFT_LOOKUP_F_INV
                });
            }
            Stmt::SkUid { neq, uid, .. } => {
                meta_load(b, META_SKUID);
                cmp(b, *neq, &uid.to_ne_bytes());
            }
            Stmt::SkGid { neq, group, .. } => {
                let gid = match group {
                    Group::Id(g) => *g,
                    Group::Name(n) => groups.gid(n).ok_or_else(|| UnknownGroup(n.clone()))?,
                };
                meta_load(b, META_SKGID);
                cmp(b, *neq, &gid.to_ne_bytes());
            }
            Stmt::Mark { neq, mark } => {
                meta_load(b, META_MARK);
                cmp(b, *neq, &mark.to_ne_bytes());
            }
            Stmt::CtMark(m) => {
                ct_load(b, CT_MARK);
                cmp(b, false, &m.to_ne_bytes());
            }
            Stmt::CtState(st) => {
                ct_load(b, CT_STATE);
                bitwise(b, &ct_state_bits(*st).to_ne_bytes());
                cmp(b, true, &0u32.to_ne_bytes());
            }
            Stmt::Counter => expr(b, "counter", |b| {
                b.attr(1, &0u64.to_be_bytes()); // NFTA_COUNTER_BYTES
                b.attr(2, &0u64.to_be_bytes()); // NFTA_COUNTER_PACKETS
            }),
            Stmt::Return => verdict(b, NFT_RETURN, None),
            Stmt::Jump(c) => verdict(b, NFT_JUMP, Some(c)),
            Stmt::Accept => verdict(b, NF_ACCEPT, None),
            Stmt::Drop => verdict(b, NF_DROP, None),
            Stmt::Redirect(p) => {
                immediate(b, &p.to_be_bytes());
                expr(b, "redir", |b| {
                    b.u32(1, REG_1); // NFTA_REDIR_REG_PROTO_MIN
                    b.u32(2, REG_1); // NFTA_REDIR_REG_PROTO_MAX
                    b.u32(3, 2); // NFTA_REDIR_FLAGS: NF_NAT_RANGE_PROTO_SPECIFIED
                });
            }
            Stmt::Tproxy { ip, port } => {
                immediate(b, &port.to_be_bytes());
                expr(b, "tproxy", |b| {
                    // NFTA_TPROXY_FAMILY: NFPROTO_IPV4 / NFPROTO_IPV6.
                    b.u32(
                        1,
                        u32::from(match ip {
                            Ip::V4 => NFPROTO_IPV4,
                            Ip::V6 => NFPROTO_IPV6,
                        }),
                    );
                    b.u32(3, REG_1); // NFTA_TPROXY_REG_PORT
                });
            }
            Stmt::SetMark(m) => {
                immediate(b, &m.to_ne_bytes());
                meta_set(b, META_MARK);
            }
            Stmt::CtMarkSetMark => {
                meta_load(b, META_MARK);
                ct_set(b, CT_MARK);
            }
            Stmt::MarkSetCtMark => {
                ct_load(b, CT_MARK);
                meta_set(b, META_MARK);
            }
            Stmt::CtZoneSet(z) => {
                immediate(b, &z.to_ne_bytes());
                ct_set(b, CT_ZONE);
            }
        }
    }
    Ok(())
}

fn l4proto(p: Proto) -> u8 {
    match p {
        Proto::Tcp => 6,
        Proto::Udp => 17,
    }
}

/// An open `NETLINK_NETFILTER` socket in the calling thread's network namespace.
pub struct Socket {
    fd: OwnedFd,
}

impl Socket {
    pub fn open() -> Result<Socket, NetlinkError> {
        let fd = netlink::open(SockProtocol::NetlinkNetFilter, 5).map_err(NetlinkError::Socket)?;
        Ok(Socket { fd })
    }

    /// Sends one request and collects the payloads (after `nfgenmsg`) of the answers of type `want`,
    /// until the acknowledgement or the end of the dump.
    fn query(
        &self,
        kind: u16,
        flags: u16,
        want: u16,
        attrs: &[(u16, &str)],
    ) -> Result<Vec<Vec<u8>>, NetlinkError> {
        self.query_family(NFPROTO_INET, kind, flags, want, attrs)
    }

    /// The nf_tables existence probe over this socket (no other socket is opened for asking).
    pub fn probe(&self) -> Probe<BorrowedFd<'_>> {
        Probe::over(self.fd.as_fd())
    }

    /// [`Socket::query`] for the nf_tables family `family`.
    fn query_family(
        &self,
        family: u8,
        kind: u16,
        flags: u16,
        want: u16,
        attrs: &[(u16, &str)],
    ) -> Result<Vec<Vec<u8>>, NetlinkError> {
        let mut req = Buf(Vec::with_capacity(64));
        let start = netlink::begin(
            &mut req.0,
            (NFNL_SUBSYS_NFTABLES << 8) | kind,
            NLM_F_REQUEST | flags,
            u32::MAX,
        );
        req.0.extend_from_slice(&[family, 0, 0, 0]);
        for (t, v) in attrs {
            req.str(*t, v);
        }
        netlink::end(&mut req.0, start);
        netlink::send(&self.fd, &req.0).map_err(|errno| NetlinkError::Io { op: "send", errno })?;
        let want = (NFNL_SUBSYS_NFTABLES << 8) | want;
        let mut out = Vec::new();
        // A dump datagram is at most 32 KiB (the kernel sizes it to what the reader takes).
        let mut buf = [0u8; 32 * 1024];
        loop {
            let answer =
                netlink::receive(&self.fd, &mut buf, MsgFlags::empty()).map_err(|errno| {
                    NetlinkError::Io {
                        op: "receive",
                        errno,
                    }
                })?;
            for msg in answer {
                let msg = msg.map_err(|e| NetlinkError::Unexpected(e.to_string()))?;
                match msg.kind {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let code = error_code(msg.payload).unwrap_or(0);
                        return if code == 0 {
                            Ok(out)
                        } else {
                            Err(NetlinkError::Refused {
                                what: "the nf_tables query".into(),
                                errno: Errno::from_raw(-code),
                            })
                        };
                    }
                    // The payload after `nfgenmsg`.
                    k if k == want => out.push(msg.payload.get(4..).unwrap_or(&[]).to_vec()),
                    _ => {}
                }
            }
        }
    }

    /// A dump of `inet` objects (`NFT_MSG_GET*` `get`, answered with `NFT_MSG_NEW*` `new`), filtered by
    /// the string attributes `attrs`: the attributes of each object.
    pub fn dump(
        &self,
        get: u16,
        new: u16,
        attrs: &[(u16, &str)],
    ) -> Result<Vec<Vec<u8>>, NetlinkError> {
        self.query(get, NLM_F_DUMP, new, attrs)
    }

    /// The ruleset's generation id (`NFT_MSG_GETGEN`).
    pub fn generation(&self) -> Result<u32, NetlinkError> {
        let answers = self.query(NFT_MSG_GETGEN, NLM_F_ACK, NFT_MSG_NEWGEN, &[])?;
        answers
            .iter()
            .find_map(|a| {
                attr(a, 1)
                    .and_then(|v| v.get(..4))
                    .map(|v| u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
            })
            .ok_or_else(|| NetlinkError::Unexpected("no generation id".into()))
    }

    /// The names of the `inet` tables that exist (`NFT_MSG_GETTABLE` dump).
    pub fn inet_tables(&self) -> Result<Vec<String>, NetlinkError> {
        let answers = self.query(NFT_MSG_GETTABLE, NLM_F_DUMP, NFT_MSG_NEWTABLE, &[])?;
        Ok(answers
            .iter()
            .filter_map(|a| attr(a, 1))
            .map(|v| {
                String::from_utf8_lossy(v.split(|&b| b == 0).next().unwrap_or_default())
                    .into_owned()
            })
            .collect())
    }

    /// Sends `batch` and waits for one acknowledgement per described message; the first refusal is
    /// returned with the description of the message it refers to.
    pub fn send_batch(&self, batch: &[u8], what: &[What<'_>]) -> Result<(), NetlinkError> {
        // The kernel takes a batch only as one datagram within the send buffer, and queues every
        // acknowledgement (about 1 KiB of buffer each) before we read one: size both buffers for this
        // batch, past the sysctl limits where CAP_NET_ADMIN allows, as nft does.
        let send_size = batch.len() + 4096;
        let recv_size = (what.len() + 16) * 1024;
        if setsockopt(&self.fd, sockopt::SndBufForce, &send_size).is_err() {
            let _ = setsockopt(&self.fd, sockopt::SndBuf, &send_size);
        }
        if setsockopt(&self.fd, sockopt::RcvBufForce, &recv_size).is_err() {
            let _ = setsockopt(&self.fd, sockopt::RcvBuf, &recv_size);
        }
        netlink::send(&self.fd, batch).map_err(|errno| NetlinkError::Io { op: "send", errno })?;
        let mut acked = vec![false; what.len()];
        let mut pending = what.len();
        let mut first_error: Option<(usize, Errno)> = None;
        // A dump datagram is at most 32 KiB (the kernel sizes it to what the reader takes).
        let mut buf = [0u8; 32 * 1024];
        while pending > 0 {
            // Once a message failed the kernel has queued every answer: read what is there, then stop.
            let flags = if first_error.is_some() {
                MsgFlags::MSG_DONTWAIT
            } else {
                MsgFlags::empty()
            };
            let answer = match netlink::receive(&self.fd, &mut buf, flags) {
                Ok(answer) => answer,
                Err(Errno::EAGAIN) if first_error.is_some() => break,
                Err(errno) => {
                    return Err(NetlinkError::Io {
                        op: "receive",
                        errno,
                    })
                }
            };
            for msg in answer {
                let msg = msg.map_err(|e| NetlinkError::Unexpected(e.to_string()))?;
                let seq = msg.seq as usize;
                if msg.kind == NLMSG_ERROR {
                    let code = error_code(msg.payload)
                        .ok_or_else(|| NetlinkError::Unexpected("truncated error".into()))?;
                    if let Some(slot) = seq.checked_sub(1).and_then(|i| acked.get_mut(i)) {
                        if !*slot {
                            *slot = true;
                            pending -= 1;
                        }
                        if code != 0 && first_error.is_none() {
                            first_error = Some((seq - 1, Errno::from_raw(-code)));
                        }
                    } else if code != 0 {
                        // An error for the batch framing itself (e.g. EPERM): nothing else follows.
                        return Err(NetlinkError::Refused {
                            what: "the nf_tables batch".into(),
                            errno: Errno::from_raw(-code),
                        });
                    }
                }
            }
        }
        match first_error {
            Some((i, errno)) => Err(NetlinkError::Refused {
                what: what.get(i).map(ToString::to_string).unwrap_or_default(),
                errno,
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_for_missing_features_name_the_feature() {
        let e = NetlinkError::Refused {
            what:
                "add rule inet istio-proxy-mangle istio-tproxy meta l4proto tcp tproxy ip to :15006"
                    .into(),
            errno: Errno::EOPNOTSUPP,
        };
        assert!(
            e.to_string().contains("nft_tproxy (Linux 4.19 or later"),
            "{e}"
        );
        let e = NetlinkError::Refused {
            what: "add chain inet istio-proxy-nat output { type nat hook output priority -100 ; }"
                .into(),
            errno: Errno::ENOENT,
        };
        assert!(e.to_string().contains("Linux 5.2"), "{e}");
        let e = NetlinkError::Refused {
            what: "add table inet istio-proxy-raw".into(),
            errno: Errno::EPERM,
        };
        assert!(!e.to_string().contains("lacks"), "{e}");
    }

    #[test]
    fn group_file_resolves_names() {
        let g = GroupFile("root:x:0:\njava:x:1001:a,b\nftp:x:1002:\n".into());
        assert_eq!(g.gid("java"), Some(1001));
        assert_eq!(g.gid("ftp"), Some(1002));
        assert_eq!(g.gid("nope"), None);
        assert_eq!(g.gid("jav"), None);
    }

    #[test]
    fn batch_is_framed_and_numbered() {
        let mut b = Batch::new(None);
        b.remove_table(TableId::Raw);
        let (bytes, what) = b.finish();
        let what: Vec<String> = what.iter().map(ToString::to_string).collect();
        assert_eq!(
            what,
            [
                "add table inet istio-proxy-raw",
                "delete table inet istio-proxy-raw"
            ]
        );
        // BATCH_BEGIN: type 0x10, res_id NFNL_SUBSYS_NFTABLES big endian.
        assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), 0x10);
        assert_eq!(&bytes[16..20], &[0, 0, 0, 10]);
        // The first acknowledged message is NEWTABLE with sequence 1.
        let m = &bytes[20..];
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 0x0a00);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().expect("4")), 1);
        assert_eq!(m[16], NFPROTO_INET);
    }

    #[test]
    fn prefixes_load_whole_bytes_and_mask_partial_ones() {
        let encode = |cidr: &str| {
            let mut b = Buf(Vec::new());
            addr_match(
                &mut b,
                Dir::Destination,
                false,
                &Cidr::parse(cidr).expect("cidr"),
            );
            b.0
        };
        let (b, c) = (encode("9.9.0.0/16"), encode("10.16.0.0/12"));
        assert!(c.len() > b.len(), "a /12 needs a bitwise mask");
        assert!(!b.windows(7).any(|w| w == b"bitwise"));
        assert!(c.windows(7).any(|w| w == b"bitwise"));
    }

    #[test]
    fn interface_prefixes_compare_the_prefix_alone_as_nft_encodes_a_wildcard() {
        let encode = |name: &str| {
            let mut b = Buf(Vec::new());
            let rule = Rule {
                stmts: vec![
                    Stmt::Ifname {
                        output: false,
                        name: name.into(),
                    },
                    Stmt::Return,
                ],
            };
            encode_rule(&mut b, &rule, &GroupFile(String::new()), &[]).expect("encodes");
            b.0
        };
        let value = |data: &[u8]| {
            let len = u16::try_from(4 + data.len()).expect("short");
            let mut v = len.to_ne_bytes().to_vec();
            v.extend(NFTA_DATA_VALUE.to_ne_bytes());
            v.extend(data);
            v
        };
        let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
        // `nft --debug=netlink` for `iifname "eth*"`: `cmp eq reg 1 0x00687465`, the 3 bytes of "eth".
        let prefix = encode("eth+");
        assert!(has(&prefix, &value(b"eth")), "{prefix:?}");
        assert!(!prefix.contains(&b'+'), "{prefix:?}");
        // An exact name is the whole IFNAMSIZ buffer, NUL-padded.
        let mut exact = b"eth0".to_vec();
        exact.resize(IFNAMSIZ, 0);
        assert!(has(&encode("eth0"), &value(&exact)));
    }

    #[test]
    fn unknown_group_names_are_errors() {
        let mut b = Batch::new(None);
        let rule = Rule {
            stmts: vec![
                Stmt::SkGid {
                    neq: true,
                    group: Group::Name("nosuch".into()),
                    meta: false,
                },
                Stmt::Counter,
                Stmt::Return,
            ],
        };
        assert_eq!(
            b.rule(TableId::Nat, "c", &rule, &GroupFile(String::new())),
            Err(UnknownGroup("nosuch".into()))
        );
    }
}
