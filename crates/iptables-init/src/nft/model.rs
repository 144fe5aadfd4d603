//! The nftables rule model: Istio's `istio-proxy-*` tables, built from the same resolved
//! [`Config`] as the iptables plan, in the order of `Run` in Istio's `tools/istio-nftables/pkg/capture/run.go`.
//!
//! Each rule is a list of typed statements, so one model feeds both the `nft -f` text
//! ([`super::render`]) and the netlink encoder ([`super::netlink`]). The model keeps each table's
//! operations as Istio issues them (appends and `insert … index N`), and [`Table::chain_rules`]
//! resolves them to the final order the kernel ends up with.

use crate::config::{
    Cidr, Config, InboundPorts, InterceptionMode, OutboundInclude, OwnerGroups, DNS_PROXY_PORT,
    OUTBOUND_MARK,
};
use crate::routes::RouteAction;
use crate::steps::Steps;

/// One of Istio's three `inet` tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TableId {
    Nat,
    Mangle,
    Raw,
}

impl TableId {
    /// Every table, in the order Istio's transaction has them.
    pub const ALL: [TableId; 3] = [TableId::Nat, TableId::Mangle, TableId::Raw];

    pub fn name(self) -> &'static str {
        match self {
            TableId::Nat => "istio-proxy-nat",
            TableId::Mangle => "istio-proxy-mangle",
            TableId::Raw => "istio-proxy-raw",
        }
    }

    /// The priority of the table's base chains (the kernel runs a hook's chains lowest first).
    pub fn priority(self) -> i32 {
        match self {
            TableId::Nat => -100,
            TableId::Mangle => -150,
            TableId::Raw => -300,
        }
    }

    /// The table's chains in Istio's spec-list order (`addIstio*TableRules` in `run.go`); only those
    /// that get a rule are created. Every table has its `prerouting` and `output` base chains at one
    /// priority, then its regular chains.
    fn chain_specs(self) -> impl Iterator<Item = Chain> {
        let priority = self.priority();
        let (prerouting, output, regular): (ChainType, ChainType, &[&'static str]) = match self {
            TableId::Nat => (
                ChainType::Nat,
                ChainType::Nat,
                &[INBOUND, REDIRECT, IN_REDIRECT, ISTIO_OUTPUT, OUTPUT_DNS],
            ),
            TableId::Mangle => (
                ChainType::Filter,
                ChainType::Route,
                &[DIVERT, TPROXY, INBOUND, DROP],
            ),
            TableId::Raw => (ChainType::Filter, ChainType::Filter, &[INBOUND, OUTPUT_DNS]),
        };
        let base = move |name, kind, hook| Chain {
            name,
            base: Some(BaseChain {
                kind,
                hook,
                priority,
            }),
        };
        [
            base(PREROUTING, prerouting, Hook::Prerouting),
            base(OUTPUT, output, Hook::Output),
        ]
        .into_iter()
        .chain(regular.iter().map(|&name| Chain { name, base: None }))
    }
}

pub const PREROUTING: &str = "prerouting";
pub const OUTPUT: &str = "output";
pub const INBOUND: &str = "istio-inbound";
pub const REDIRECT: &str = "istio-redirect";
pub const IN_REDIRECT: &str = "istio-in-redirect";
pub const ISTIO_OUTPUT: &str = "istio-output";
pub const OUTPUT_DNS: &str = "istio-output-dns";
pub const DIVERT: &str = "istio-divert";
pub const TPROXY: &str = "istio-tproxy";
pub const DROP: &str = "istio-drop";

/// A base chain's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    Nat,
    Filter,
    Route,
}

impl ChainType {
    pub fn as_str(self) -> &'static str {
        match self {
            ChainType::Nat => "nat",
            ChainType::Filter => "filter",
            ChainType::Route => "route",
        }
    }
}

/// A base chain's hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Prerouting,
    Output,
}

impl Hook {
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Output => "output",
        }
    }
}

/// Type, hook and priority of a base chain (no policy: the default `accept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseChain {
    pub kind: ChainType,
    pub hook: Hook,
    pub priority: i32,
}

/// A chain: a base chain when `base` is set, else a regular one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    pub name: &'static str,
    pub base: Option<BaseChain>,
}

/// A transport protocol of a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// An address family of a match (`ip` or `ip6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ip {
    V4,
    V6,
}

/// Which address or port of a packet a match looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Source,
    Destination,
}

/// A conntrack state set of a `ct state` match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtState {
    Invalid,
    RelatedEstablished,
}

/// A socket owner group: a gid, or a name nft would resolve through `/etc/group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Group {
    Id(u32),
    Name(String),
}

impl Group {
    /// A group as Istio writes it: digits are a gid, anything else a name.
    pub fn parse(s: &str) -> Group {
        s.parse()
            .map_or_else(|_| Group::Name(s.to_string()), Group::Id)
    }
}

/// One statement of a rule, in the form Istio writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stmt {
    /// `iifname NAME` / `oifname NAME` (`output` false / true), `NAME` as iptables spells it: a
    /// trailing `+` is iptables' prefix match, which the text writes as nft's `"NAME*"` and netlink as
    /// a compare of the prefix alone ([`ifname_prefix`]).
    Ifname { output: bool, name: String },
    /// `meta l4proto tcp|udp`.
    L4proto(Proto),
    /// `ip|ip6 saddr|daddr [!=] CIDR`.
    Addr { dir: Dir, neq: bool, cidr: Cidr },
    /// `tcp|udp sport|dport [!=] PORT`.
    Port {
        proto: Proto,
        dir: Dir,
        neq: bool,
        port: u16,
    },
    /// `tcp dport != { P1, P2 }`: an anonymous set lookup, inverted.
    PortNotIn { proto: Proto, ports: Vec<u16> },
    /// `[meta] skuid [!=] UID` (`meta` is how Istio writes it in the raw table).
    SkUid { neq: bool, uid: u32, meta: bool },
    /// `[meta] skgid [!=] GROUP`.
    SkGid { neq: bool, group: Group, meta: bool },
    /// `mark [!=] MARK`.
    Mark { neq: bool, mark: u32 },
    /// `ct mark MARK`.
    CtMark(u32),
    /// `ct state …`.
    CtState(CtState),
    /// `counter`.
    Counter,
    /// `return`.
    Return,
    /// `jump CHAIN`.
    Jump(&'static str),
    /// `accept`.
    Accept,
    /// `drop`.
    Drop,
    /// `redirect to :PORT`.
    Redirect(u16),
    /// `tproxy ip|ip6 to :PORT`.
    Tproxy { ip: Ip, port: u16 },
    /// `meta mark set MARK`.
    SetMark(u32),
    /// `ct mark set mark`.
    CtMarkSetMark,
    /// `meta mark set ct mark`.
    MarkSetCtMark,
    /// `ct zone set ZONE`.
    CtZoneSet(u16),
}

/// A rule: its statements, the `counter` already in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub stmts: Vec<Stmt>,
}

impl Rule {
    /// A rule from its statements with `counter` put where Istio's builder puts it: before the last
    /// statement (the verdict or the action).
    fn counted(mut stmts: Vec<Stmt>) -> Rule {
        // A bare `+` (iptables: every interface) matches everything; nft has no all-wildcard name
        // ("All-wildcard strings are not supported"), so the match is left out.
        stmts.retain(|s| !matches!(s, Stmt::Ifname { name, .. } if name == "+"));
        let at = stmts.len().saturating_sub(1);
        stmts.insert(at, Stmt::Counter);
        Rule { stmts }
    }
}

/// An operation on a chain, as Istio's transaction has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `add rule`: at the end.
    Append,
    /// `insert rule … index N`: before the chain's rule N (which exists).
    Insert(usize),
}

/// One `add rule` / `insert rule` of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub chain: &'static str,
    pub op: Op,
    pub rule: Rule,
}

/// A table with the chains it needs and its rule operations in transaction order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub id: TableId,
    /// The chains that get a rule, in Istio's order.
    pub chains: Vec<Chain>,
    pub entries: Vec<Entry>,
}

impl Table {
    /// The rules of `chain` in the order the kernel holds them once the transaction is applied.
    pub fn chain_rules(&self, chain: &str) -> Vec<&Rule> {
        let mut out: Vec<&Rule> = Vec::new();
        for e in self.entries.iter().filter(|e| e.chain == chain) {
            match e.op {
                Op::Append => out.push(&e.rule),
                Op::Insert(i) => out.insert(i.min(out.len()), &e.rule),
            }
        }
        out
    }
}

/// Everything a `--native-nftables` run installs: the tables (only those with rules) and the route
/// actions done after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset {
    pub tables: Vec<Table>,
    pub routes: Vec<RouteAction>,
}

/// Collects rules per table in call order, as Istio's `NftablesRuleBuilder` does.
struct Builder {
    ipv6: bool,
    rules: [Vec<(&'static str, Option<usize>, Rule)>; 3],
}

impl Builder {
    fn list(&mut self, table: TableId) -> &mut Vec<(&'static str, Option<usize>, Rule)> {
        match table {
            TableId::Nat => &mut self.rules[0],
            TableId::Mangle => &mut self.rules[1],
            TableId::Raw => &mut self.rules[2],
        }
    }

    fn append(&mut self, table: TableId, chain: &'static str, stmts: Vec<Stmt>) {
        self.list(table).push((chain, None, Rule::counted(stmts)));
    }

    fn append_v6(&mut self, table: TableId, chain: &'static str, stmts: Vec<Stmt>) {
        if self.ipv6 {
            self.append(table, chain, stmts);
        }
    }

    /// The builder for an IPv6 rule (`v6`) or an IPv4 one; `None` for IPv6 when it is off.
    fn family(&mut self, v6: bool) -> Option<&mut Builder> {
        (!v6 || self.ipv6).then_some(self)
    }

    fn insert(&mut self, table: TableId, chain: &'static str, index: usize, stmts: Vec<Stmt>) {
        self.list(table)
            .push((chain, Some(index), Rule::counted(stmts)));
    }

    fn insert_v6(&mut self, table: TableId, chain: &'static str, index: usize, stmts: Vec<Stmt>) {
        if self.ipv6 {
            self.insert(table, chain, index, stmts);
        }
    }

    /// The tables with rules, each with its used chains, inserts past a chain's end turned into
    /// appends (Istio's `addIstioTableRules`).
    fn finish(self) -> Vec<Table> {
        let mut tables = Vec::new();
        for (id, rules) in TableId::ALL.into_iter().zip(self.rules) {
            if rules.is_empty() {
                continue;
            }
            let chains = id
                .chain_specs()
                .filter(|c| rules.iter().any(|(name, _, _)| *name == c.name))
                .collect();
            let mut counts: std::collections::HashMap<&str, usize> = Default::default();
            let mut entries = Vec::with_capacity(rules.len());
            for (chain, index, rule) in rules {
                let count = counts.entry(chain).or_default();
                let op = match index {
                    Some(i) if i < *count => Op::Insert(i),
                    _ => Op::Append,
                };
                *count += 1;
                entries.push(Entry { chain, op, rule });
            }
            tables.push(Table {
                id,
                chains,
                entries,
            });
        }
        tables
    }
}

fn v4_host(a: std::net::Ipv4Addr) -> Cidr {
    Cidr {
        addr: a.into(),
        len: 32,
    }
}

fn v6_host(a: std::net::Ipv6Addr) -> Cidr {
    Cidr {
        addr: a.into(),
        len: 128,
    }
}

fn v6_loopback() -> Cidr {
    v6_host(std::net::Ipv6Addr::LOCALHOST)
}

fn daddr(neq: bool, cidr: Cidr) -> Stmt {
    Stmt::Addr {
        dir: Dir::Destination,
        neq,
        cidr,
    }
}

fn saddr(cidr: Cidr) -> Stmt {
    Stmt::Addr {
        dir: Dir::Source,
        neq: false,
        cidr,
    }
}

fn dport(proto: Proto, neq: bool, port: u16) -> Stmt {
    Stmt::Port {
        proto,
        dir: Dir::Destination,
        neq,
        port,
    }
}

fn sport(proto: Proto, port: u16) -> Stmt {
    Stmt::Port {
        proto,
        dir: Dir::Source,
        neq: false,
        port,
    }
}

/// The prefix of an interface name with iptables' trailing `+` (`eth+` → `eth`), `None` for an exact
/// name. Istio's istio-nftables writes the name verbatim, so nft refuses `iifname eth+`; here `+`
/// keeps iptables' meaning on both backends.
pub fn ifname_prefix(name: &str) -> Option<&str> {
    name.strip_suffix('+')
}

fn iif(name: &str) -> Stmt {
    Stmt::Ifname {
        output: false,
        name: name.to_string(),
    }
}

fn mark(neq: bool, mark: u32) -> Stmt {
    Stmt::Mark { neq, mark }
}

fn oif(name: &str) -> Stmt {
    Stmt::Ifname {
        output: true,
        name: name.to_string(),
    }
}

const TCP: Stmt = Stmt::L4proto(Proto::Tcp);

/// The ruleset Istio's nftables backend builds for `cfg` (`Run` in its `run.go`, in its order), with
/// the route actions the same `tproxy.ConfigureRoutes` does after either backend.
pub fn build(cfg: &Config) -> Ruleset {
    let mut b = Builder {
        ipv6: cfg.ipv6,
        rules: Default::default(),
    };
    crate::steps::run(&mut b, cfg);
    Ruleset {
        tables: b.finish(),
        routes: crate::routes::build(cfg),
    }
}

fn tproxy(cfg: &Config) -> bool {
    cfg.mode == InterceptionMode::Tproxy
}

/// `SRC`: Envoy's inbound passthrough source address in IPv4, 127.0.0.6.
fn passthrough_v4() -> Cidr {
    v4_host(std::net::Ipv4Addr::new(127, 0, 0, 6))
}

/// `SRC` in IPv6, `::6`.
fn passthrough_v6() -> Cidr {
    v6_host(std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6))
}

/// The loopback destinations never captured: the configured IPv4 CIDR, and `::1` with IPv6 on.
fn loopbacks(cfg: &Config) -> impl Iterator<Item = Cidr> {
    [Some(cfg.loopback_cidr), cfg.ipv6.then_some(v6_loopback())]
        .into_iter()
        .flatten()
}

impl Steps for Builder {
    /// Interfaces left alone, nat then (TPROXY) mangle (`shortCircuitExcludeInterfaces`), and kube-virt
    /// interfaces never captured inbound (`shortCircuitKubeInternalInterface`).
    fn excluded_interfaces(&mut self, cfg: &Config) {
        let b = self;
        use TableId::{Mangle, Nat};
        for c in &cfg.exclude_interfaces {
            b.append(Nat, PREROUTING, vec![iif(c), Stmt::Return]);
            b.append(Nat, OUTPUT, vec![oif(c), Stmt::Return]);
        }
        if tproxy(cfg) {
            for c in &cfg.exclude_interfaces {
                b.append(Mangle, PREROUTING, vec![iif(c), Stmt::Return]);
                b.append(Mangle, OUTPUT, vec![oif(c), Stmt::Return]);
            }
        }
        for k in &cfg.kube_virt_interfaces {
            b.insert(Nat, PREROUTING, 0, vec![iif(k), Stmt::Return]);
        }
    }

    /// `--drop-invalid`: TCP in conntrack state INVALID is dropped.
    fn drop_invalid(&mut self, cfg: &Config) {
        let b = self;
        use TableId::Mangle;
        if cfg.drop_invalid {
            b.append(
                Mangle,
                PREROUTING,
                vec![TCP, Stmt::CtState(CtState::Invalid), Stmt::Jump(DROP)],
            );
            b.append(Mangle, DROP, vec![Stmt::Drop]);
        }
    }

    /// The tunnel port is never captured inbound, and the redirect chains every capture jumps to.
    fn shared_chains(&mut self, cfg: &Config) {
        let b = self;
        use TableId::Nat;
        b.append(
            Nat,
            INBOUND,
            vec![
                TCP,
                dport(Proto::Tcp, false, cfg.inbound_tunnel_port),
                Stmt::Return,
            ],
        );
        b.append(Nat, REDIRECT, vec![TCP, Stmt::Redirect(cfg.proxy_port)]);
        b.append(
            Nat,
            IN_REDIRECT,
            vec![TCP, Stmt::Redirect(cfg.inbound_capture_port)],
        );
    }

    /// Inbound capture, through nat redirect or mangle TPROXY (`handleInboundPortsInclude`).
    fn inbound_capture(&mut self, cfg: &Config) {
        let b = self;
        use TableId::{Mangle, Nat};
        if cfg.inbound_ports == InboundPorts::None {
            return;
        }
        let tproxy = tproxy(cfg);
        let z = cfg.inbound_capture_port;
        let m = cfg.tproxy_mark;
        let table = if tproxy {
            b.append(Mangle, DIVERT, vec![Stmt::SetMark(m)]);
            b.append(Mangle, DIVERT, vec![Stmt::Accept]);
            b.append(
                Mangle,
                TPROXY,
                vec![
                    TCP,
                    daddr(true, cfg.loopback_cidr),
                    Stmt::Tproxy {
                        ip: Ip::V4,
                        port: z,
                    },
                    Stmt::SetMark(m),
                    Stmt::Accept,
                ],
            );
            b.append_v6(
                Mangle,
                TPROXY,
                vec![
                    TCP,
                    daddr(true, v6_loopback()),
                    Stmt::Tproxy {
                        ip: Ip::V6,
                        port: z,
                    },
                    Stmt::SetMark(m),
                    Stmt::Accept,
                ],
            );
            Mangle
        } else {
            Nat
        };
        b.append(table, PREROUTING, vec![TCP, Stmt::Jump(INBOUND)]);
        match &cfg.inbound_ports {
            InboundPorts::All => {
                for &p in &cfg.inbound_exclude_ports {
                    b.append(
                        table,
                        INBOUND,
                        vec![TCP, dport(Proto::Tcp, false, p), Stmt::Return],
                    );
                }
                capture_inbound(b, tproxy, None);
            }
            InboundPorts::List(ports) => {
                for &p in ports {
                    capture_inbound(b, tproxy, Some(p));
                }
            }
            InboundPorts::None => {}
        }
    }

    /// Outbound through nat `istio-output`: the excluded ports, then the inbound passthrough.
    fn outbound_entry(&mut self, cfg: &Config) {
        let b = self;
        use TableId::Nat;
        b.append(Nat, OUTPUT, vec![Stmt::Jump(ISTIO_OUTPUT)]);
        for &p in &cfg.outbound_exclude_ports {
            b.append(
                Nat,
                ISTIO_OUTPUT,
                vec![dport(Proto::Tcp, false, p), Stmt::Return],
            );
            b.append(
                Nat,
                ISTIO_OUTPUT,
                vec![dport(Proto::Udp, false, p), Stmt::Return],
            );
        }
        b.append(
            Nat,
            ISTIO_OUTPUT,
            vec![oif("lo"), saddr(passthrough_v4()), Stmt::Return],
        );
        b.append_v6(
            Nat,
            ISTIO_OUTPUT,
            vec![oif("lo"), saddr(passthrough_v6()), Stmt::Return],
        );
    }

    /// The proxy's own traffic, uids then gids: over `lo` to a non-loopback address it goes to the inbound
    /// listener, otherwise it leaves uncaptured (unless loopback is an included destination).
    fn proxy_owners(&mut self, cfg: &Config) {
        let b = self;
        use TableId::Nat;
        let dns = cfg.dns_capture();
        let include_loopback = match &cfg.outbound_include {
            OutboundInclude::All => false,
            OutboundInclude::List(list) => list.has_loopback(),
        };
        let t = cfg.inbound_tunnel_port;
        let tunnel_ports = |dns: bool| {
            if dns {
                Stmt::PortNotIn {
                    proto: Proto::Tcp,
                    ports: vec![53, t],
                }
            } else {
                dport(Proto::Tcp, true, t)
            }
        };
        // The rules of one proxy uid or gid, which `owner(neq)` matches; `tunnel_dns` picks the tunnel match.
        let proxy_owner = |b: &mut Builder, owner: &dyn Fn(bool) -> Stmt, tunnel_dns: bool| {
            for lo in loopbacks(cfg) {
                b.append(
                    Nat,
                    ISTIO_OUTPUT,
                    vec![
                        oif("lo"),
                        TCP,
                        daddr(true, lo),
                        tunnel_ports(tunnel_dns),
                        owner(false),
                        Stmt::Jump(IN_REDIRECT),
                    ],
                );
            }
            if !include_loopback {
                let mut stmts = vec![oif("lo")];
                if dns {
                    stmts.extend([TCP, dport(Proto::Tcp, true, 53)]);
                }
                stmts.extend([owner(true), Stmt::Return]);
                b.append(Nat, ISTIO_OUTPUT, stmts);
            }
            b.append(Nat, ISTIO_OUTPUT, vec![owner(false), Stmt::Return]);
        };
        for &u in &cfg.proxy_uids {
            let uid = |neq| Stmt::SkUid {
                neq,
                uid: u,
                meta: false,
            };
            proxy_owner(b, &uid, dns);
        }
        for &g in &cfg.proxy_gids {
            let gid = |neq| Stmt::SkGid {
                neq,
                group: Group::Id(g),
                meta: false,
            };
            // Always the non-DNS tunnel match here, as Istio does (an asymmetry with the uid rule).
            proxy_owner(b, &gid, false);
        }
    }

    /// The owner-group filter (`handleCaptureByOwnerGroup`).
    fn owner_groups(&mut self, cfg: &Config) {
        let b = self;
        use TableId::Nat;
        match &cfg.owner_groups {
            OwnerGroups::AllExcept(groups) => {
                for g in groups {
                    b.append(
                        Nat,
                        ISTIO_OUTPUT,
                        vec![
                            Stmt::SkGid {
                                neq: false,
                                group: Group::parse(g),
                                meta: false,
                            },
                            Stmt::Return,
                        ],
                    );
                }
            }
            OwnerGroups::Only(groups) => {
                let mut stmts: Vec<Stmt> = groups
                    .iter()
                    .map(|g| Stmt::SkGid {
                        neq: true,
                        group: Group::parse(g),
                        meta: false,
                    })
                    .collect();
                stmts.push(Stmt::Return);
                b.append(Nat, ISTIO_OUTPUT, stmts);
            }
        }
    }

    /// DNS capture to the agent, with conntrack zones (`SetupDNSRedir` and `addDNSConntrackZones` in
    /// Istio's `run.go`).
    fn dns_capture(&mut self, cfg: &Config) {
        let b = self;
        use TableId::{Nat, Raw};
        let all = cfg.capture_all_dns;
        let (s4, s6) = (&cfg.dns_servers_v4, &cfg.dns_servers_v6);
        // Istio's `run.go` jumps to nat's `istio-output-dns` and raw's `istio-inbound` even when they get no
        // rule (only IPv6 servers with IPv6 off); such a chain is not created and the kernel then refuses the
        // whole transaction. A jump to an empty chain does nothing, so those jumps are left out exactly then,
        // as istio-iptables' per-family jumps are.
        let servers = all || !s4.is_empty() || (cfg.ipv6 && !s6.is_empty());
        let owners = owner_matches(cfg, true).next().is_some();
        if servers || owners {
            b.append(Raw, OUTPUT, vec![Stmt::Jump(OUTPUT_DNS)]);
        }
        if servers {
            b.append(Nat, ISTIO_OUTPUT, vec![Stmt::Jump(OUTPUT_DNS)]);
        }
        for proto in [Proto::Tcp, Proto::Udp] {
            if all {
                let mut stmts = Vec::new();
                if proto == Proto::Tcp {
                    stmts.push(TCP);
                }
                stmts.extend([dport(proto, false, 53), Stmt::Redirect(DNS_PROXY_PORT)]);
                b.append(Nat, OUTPUT_DNS, stmts);
            } else {
                let v4 = s4.iter().map(|&s| (v4_host(s), false));
                for (server, v6) in v4.chain(s6.iter().map(|&s| (v6_host(s), true))) {
                    let Some(b) = b.family(v6) else { continue };
                    b.append(
                        Nat,
                        OUTPUT_DNS,
                        vec![
                            daddr(false, server),
                            dport(proto, false, 53),
                            Stmt::Redirect(DNS_PROXY_PORT),
                        ],
                    );
                }
            }
        }
        for owner in owner_matches(cfg, true) {
            b.append(
                Raw,
                OUTPUT_DNS,
                vec![
                    dport(Proto::Udp, false, 53),
                    owner.clone(),
                    Stmt::CtZoneSet(1),
                ],
            );
            b.append(
                Raw,
                OUTPUT_DNS,
                vec![sport(Proto::Udp, DNS_PROXY_PORT), owner, Stmt::CtZoneSet(2)],
            );
        }
        if servers {
            b.append(Raw, PREROUTING, vec![Stmt::Jump(INBOUND)]);
        }
        if all {
            b.append(
                Raw,
                OUTPUT_DNS,
                vec![dport(Proto::Udp, false, 53), Stmt::CtZoneSet(2)],
            );
            b.append(
                Raw,
                INBOUND,
                vec![sport(Proto::Udp, 53), Stmt::CtZoneSet(1)],
            );
        } else {
            let v4 = s4.iter().map(|&s| (v4_host(s), true));
            let v6 = s6.iter().map(|&s| (v6_host(s), false));
            for (s, v4) in v4.chain(v6) {
                let add = |b: &mut Builder, chain, stmts| {
                    if v4 {
                        b.append(Raw, chain, stmts);
                    } else {
                        b.append_v6(Raw, chain, stmts);
                    }
                };
                add(
                    b,
                    OUTPUT_DNS,
                    vec![
                        dport(Proto::Udp, false, 53),
                        daddr(false, s),
                        Stmt::CtZoneSet(2),
                    ],
                );
                add(
                    b,
                    INBOUND,
                    vec![sport(Proto::Udp, 53), saddr(s), Stmt::CtZoneSet(1)],
                );
            }
        }
    }

    /// Which destinations outbound capture leaves alone (loopback, the excluded CIDRs) and which it always
    /// sends to the proxy (the always-captured ports).
    fn outbound_destinations(&mut self, cfg: &Config) {
        let b = self;
        use TableId::Nat;
        b.append(
            Nat,
            ISTIO_OUTPUT,
            vec![daddr(false, cfg.loopback_cidr), Stmt::Return],
        );
        b.append_v6(
            Nat,
            ISTIO_OUTPUT,
            vec![daddr(false, v6_loopback()), Stmt::Return],
        );
        for &c in &cfg.outbound_exclude.v4 {
            b.append(Nat, ISTIO_OUTPUT, vec![daddr(false, c), Stmt::Return]);
        }
        for &c in &cfg.outbound_exclude.v6 {
            b.append_v6(Nat, ISTIO_OUTPUT, vec![daddr(false, c), Stmt::Return]);
        }
        for &p in &cfg.outbound_ports {
            b.append(
                Nat,
                ISTIO_OUTPUT,
                vec![dport(Proto::Tcp, false, p), Stmt::Jump(REDIRECT)],
            );
        }
    }

    /// The included destinations go to the proxy, from the pod and from kube-virt interfaces
    /// (`handleOutboundIncludeRules`).
    fn outbound_include(&mut self, cfg: &Config) {
        let b = self;
        use TableId::Nat;
        match &cfg.outbound_include {
            OutboundInclude::All => {
                b.append(Nat, ISTIO_OUTPUT, vec![Stmt::Jump(REDIRECT)]);
                for k in &cfg.kube_virt_interfaces {
                    b.insert(Nat, PREROUTING, 0, vec![iif(k), Stmt::Jump(REDIRECT)]);
                }
            }
            OutboundInclude::List(list) => {
                let v4 = list.v4.iter().map(|&c| (c, false));
                for (c, v6) in v4.chain(list.v6.iter().map(|&c| (c, true))) {
                    let Some(b) = b.family(v6) else { continue };
                    for k in &cfg.kube_virt_interfaces {
                        b.insert(
                            Nat,
                            PREROUTING,
                            0,
                            vec![iif(k), daddr(false, c), Stmt::Jump(REDIRECT)],
                        );
                    }
                    b.append(
                        Nat,
                        ISTIO_OUTPUT,
                        vec![daddr(false, c), Stmt::Jump(REDIRECT)],
                    );
                }
            }
        }
    }

    /// TPROXY marks, even with no inbound ports: the mark kept on the connection, the proxy's loopback
    /// traffic marked, and the marked or passthrough traffic never captured inbound.
    fn tproxy_marks(&mut self, cfg: &Config) {
        let b = self;
        use TableId::Mangle;
        let m = cfg.tproxy_mark;
        b.append(
            Mangle,
            PREROUTING,
            vec![TCP, mark(false, m), Stmt::CtMarkSetMark],
        );
        b.append(
            Mangle,
            OUTPUT,
            vec![oif("lo"), TCP, mark(false, m), Stmt::Return],
        );
        for owner in owner_matches(cfg, false) {
            for lo in loopbacks(cfg) {
                b.append(
                    Mangle,
                    OUTPUT,
                    vec![
                        oif("lo"),
                        TCP,
                        daddr(true, lo),
                        owner.clone(),
                        Stmt::SetMark(OUTBOUND_MARK),
                    ],
                );
            }
        }
        b.append(
            Mangle,
            OUTPUT,
            vec![TCP, Stmt::CtMark(m), Stmt::MarkSetCtMark],
        );
        b.insert(Mangle, INBOUND, 0, vec![TCP, mark(false, m), Stmt::Return]);
        b.insert(
            Mangle,
            INBOUND,
            1,
            vec![iif("lo"), TCP, saddr(passthrough_v4()), Stmt::Return],
        );
        b.insert_v6(
            Mangle,
            INBOUND,
            1,
            vec![iif("lo"), TCP, saddr(passthrough_v6()), Stmt::Return],
        );
        b.insert(
            Mangle,
            INBOUND,
            2,
            vec![iif("lo"), TCP, mark(true, OUTBOUND_MARK), Stmt::Return],
        );
    }
}

/// The rules that capture inbound TCP to `port` (to every port when `None`): with TPROXY, established
/// connections diverted and the rest sent to the TPROXY chain; else the redirect.
fn capture_inbound(b: &mut Builder, tproxy: bool, port: Option<u16>) {
    use TableId::{Mangle, Nat};
    let rule = |head: &[Stmt], jump| {
        let mut stmts = head.to_vec();
        stmts.extend(port.map(|p| dport(Proto::Tcp, false, p)));
        stmts.push(Stmt::Jump(jump));
        stmts
    };
    if tproxy {
        let established = [TCP, Stmt::CtState(CtState::RelatedEstablished)];
        b.append(Mangle, INBOUND, rule(&established, DIVERT));
        b.append(Mangle, INBOUND, rule(&[TCP], TPROXY));
    } else {
        b.append(Nat, INBOUND, rule(&[TCP], IN_REDIRECT));
    }
}

/// A match of each proxy uid (`-u`), then of each proxy gid (`-g`); `meta` picks the `meta skuid`
/// spelling.
fn owner_matches(cfg: &Config, meta: bool) -> impl Iterator<Item = Stmt> + '_ {
    let uids = cfg.proxy_uids.iter().map(move |&uid| Stmt::SkUid {
        neq: false,
        uid,
        meta,
    });
    let gids = cfg.proxy_gids.iter().map(move |&g| Stmt::SkGid {
        neq: false,
        group: Group::Id(g),
        meta,
    });
    uids.chain(gids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::render::transaction;

    /// Istio's injected arguments (`-i '*' -b '*' -d 15090,15021,15020`), for which Istio has no golden:
    /// the transaction `run.go` builds, derived by hand from `Run` (inbound-ports-wildcard plus the
    /// three exclusions and the wildcard redirect).
    #[test]
    fn the_injected_configuration_gives_istios_transaction() {
        let cfg = Config::injected();
        let expected = "\
add table inet istio-proxy-nat
flush table inet istio-proxy-nat
add chain inet istio-proxy-nat prerouting { type nat hook prerouting priority -100 ; }
add chain inet istio-proxy-nat output { type nat hook output priority -100 ; }
add chain inet istio-proxy-nat istio-inbound
add chain inet istio-proxy-nat istio-redirect
add chain inet istio-proxy-nat istio-in-redirect
add chain inet istio-proxy-nat istio-output
add rule inet istio-proxy-nat istio-inbound meta l4proto tcp tcp dport 15008 counter return
add rule inet istio-proxy-nat istio-redirect meta l4proto tcp counter redirect to :15001
add rule inet istio-proxy-nat istio-in-redirect meta l4proto tcp counter redirect to :15006
add rule inet istio-proxy-nat prerouting meta l4proto tcp counter jump istio-inbound
add rule inet istio-proxy-nat istio-inbound meta l4proto tcp tcp dport 15090 counter return
add rule inet istio-proxy-nat istio-inbound meta l4proto tcp tcp dport 15021 counter return
add rule inet istio-proxy-nat istio-inbound meta l4proto tcp tcp dport 15020 counter return
add rule inet istio-proxy-nat istio-inbound meta l4proto tcp counter jump istio-in-redirect
add rule inet istio-proxy-nat output counter jump istio-output
add rule inet istio-proxy-nat istio-output oifname lo ip saddr 127.0.0.6/32 counter return
add rule inet istio-proxy-nat istio-output oifname lo meta l4proto tcp ip daddr != 127.0.0.1/32 tcp dport != 15008 skuid 1337 counter jump istio-in-redirect
add rule inet istio-proxy-nat istio-output oifname lo skuid != 1337 counter return
add rule inet istio-proxy-nat istio-output skuid 1337 counter return
add rule inet istio-proxy-nat istio-output oifname lo meta l4proto tcp ip daddr != 127.0.0.1/32 tcp dport != 15008 skgid 1337 counter jump istio-in-redirect
add rule inet istio-proxy-nat istio-output oifname lo skgid != 1337 counter return
add rule inet istio-proxy-nat istio-output skgid 1337 counter return
add rule inet istio-proxy-nat istio-output ip daddr 127.0.0.1/32 counter return
add rule inet istio-proxy-nat istio-output counter jump istio-redirect
";
        let rs = build(&cfg);
        assert_eq!(transaction(&rs), expected);
        assert!(rs.routes.is_empty());
    }

    #[test]
    fn inserts_past_the_end_become_appends_and_resolve_in_order() {
        let cfg = Config {
            kube_virt_interfaces: vec!["eth1".into(), "eth2".into()],
            outbound_include: OutboundInclude::All,
            ..Config::default()
        };
        let rs = build(&cfg);
        let nat = &rs.tables[0];
        let ops: Vec<Op> = nat
            .entries
            .iter()
            .filter(|e| e.chain == PREROUTING)
            .map(|e| e.op)
            .collect();
        assert_eq!(
            ops,
            [Op::Append, Op::Insert(0), Op::Insert(0), Op::Insert(0)]
        );
        let order: Vec<String> = nat
            .chain_rules(PREROUTING)
            .iter()
            .map(|r| crate::nft::render::rule_text(r))
            .collect();
        assert_eq!(
            order,
            [
                "iifname eth2 counter jump istio-redirect",
                "iifname eth1 counter jump istio-redirect",
                "iifname eth2 counter return",
                "iifname eth1 counter return",
            ]
        );
    }

    #[test]
    fn tproxy_adds_mangle_and_routes_and_ipv6_twins() {
        let cfg = Config {
            mode: InterceptionMode::Tproxy,
            inbound_ports: InboundPorts::List(vec![8080]),
            ipv6: true,
            ..Config::default()
        };
        let rs = build(&cfg);
        let ids: Vec<TableId> = rs.tables.iter().map(|t| t.id).collect();
        assert_eq!(ids, [TableId::Nat, TableId::Mangle]);
        let mangle = &rs.tables[1];
        let inbound: Vec<String> = mangle
            .chain_rules(INBOUND)
            .iter()
            .map(|r| crate::nft::render::rule_text(r))
            .collect();
        assert_eq!(inbound[0], "meta l4proto tcp mark 1337 counter return");
        assert_eq!(
            inbound[1],
            "iifname lo meta l4proto tcp ip6 saddr ::6/128 counter return"
        );
        assert_eq!(
            inbound[2],
            "iifname lo meta l4proto tcp mark != 1338 counter return"
        );
        assert_eq!(rs.routes.len(), 5);
    }
}
