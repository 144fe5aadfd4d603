//! The connection walk: where the first packet of a new connection lands, found by walking the rule
//! model rule by rule through the hooks in the kernel's order (outbound: raw, mangle, nat, filter
//! OUTPUT; inbound: raw, mangle, nat PREROUTING). An outbound packet that leaves on `lo` undecided comes
//! back in: it then walks raw and mangle PREROUTING too, arriving on `lo` with the mark the output
//! hooks gave it and its conntrack entry still NEW (nat PREROUTING is skipped: the NAT binding was made
//! at OUTPUT), where a TPROXY sends it to the inbound listener.
//!
//! Each backend translates its rules into the same small program of [`Step`]s (`iptables::walk` the
//! iptables tokens of an `iptables::model::Plan`, `nft::walk` the typed statements of an nftables
//! ruleset), and the one evaluator here runs them, so both backends share the semantics of jumps,
//! returns, marks and verdicts. A match or target the translation does not know is an error naming the
//! rule: nothing is skipped.

use std::net::IpAddr;

use crate::config::Cidr;
use crate::connection::{Packet, Protocol};

/// Where a connection lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerdictKind {
    /// Redirected to the proxy's outbound listener (15001 unless `-p`).
    OutboundProxy,
    /// Redirected (REDIRECT or TPROXY) to the proxy's inbound listener (15006 unless `-z`).
    InboundProxy,
    /// Redirected to the agent's DNS proxy (15053).
    DnsProxy,
    /// Not intercepted: the connection reaches its real destination.
    Bypass,
}

impl VerdictKind {
    /// The verdict as JSON and the text output write it.
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::OutboundProxy => "outbound-proxy",
            VerdictKind::InboundProxy => "inbound-proxy",
            VerdictKind::DnsProxy => "dns-proxy",
            VerdictKind::Bypass => "bypass",
        }
    }
}

impl std::fmt::Display for VerdictKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of a walk: the verdict and the rule that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub kind: VerdictKind,
    /// The redirect or TPROXY port, or the real destination port for a bypass.
    pub port: u16,
    /// `None` only when the family has no rule at all.
    pub table: Option<String>,
    pub chain: Option<String>,
    /// `None` when the end of a base chain decided.
    pub rule: Option<String>,
}

/// A rule the walk cannot evaluate, by its table, chain and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuleError {
    pub table: String,
    pub chain: String,
    pub rule: String,
    pub reason: String,
}

/// An interface match: exact, or iptables' `NAME+` prefix wildcard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ifname {
    Exact(String),
    Prefix(String),
}

impl Ifname {
    fn matches(&self, name: &str) -> bool {
        match self {
            Ifname::Exact(n) => n == name,
            Ifname::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

/// A condition on the packet or its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cond {
    Proto(Protocol),
    /// Source address in the CIDR (never true for a packet of the other family).
    Src(Cidr),
    /// Destination address in the CIDR (never true for a packet of the other family).
    Dst(Cidr),
    /// Source port of this protocol (never true for the other protocol).
    Sport(Protocol, u16),
    /// Destination port of this protocol.
    Dport(Protocol, u16),
    /// Destination port among these (multiport, an nftables set).
    DportIn(Protocol, Vec<u16>),
    Iif(Ifname),
    Oif(Ifname),
    /// The socket's uid (never true without a local socket).
    Uid(u32),
    /// The socket's gid; `None` is a group name, which no gid matches because no `/etc/group` is read.
    Gid(Option<u32>),
    /// `(packet mark & mask) == value`.
    Mark {
        value: u32,
        mask: u32,
    },
    /// `(conntrack mark & mask) == value`.
    CtMark {
        value: u32,
        mask: u32,
    },
    /// A conntrack state set; `new` tells whether it contains NEW, the state of every walked packet.
    CtState {
        new: bool,
    },
}

/// One step of a rule's program, in rule order: matches first in iptables, interleaved in nftables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The rule goes on only if the condition holds (`neg`: does not hold). A condition that does not
    /// apply to the packet (a port of another protocol, an address of another family, an owner of a
    /// packet without a local socket) stops the rule either way, as in the kernel.
    Match {
        neg: bool,
        cond: Cond,
    },
    /// `mark = (mark & !mask) | value`.
    SetMark {
        value: u32,
        mask: u32,
    },
    /// Conntrack mark := packet mark.
    SaveMark,
    /// Packet mark := conntrack mark.
    RestoreMark,
    /// An action that cannot change where a new connection lands (a conntrack zone, a counter).
    Nothing,
    Return,
    Accept,
    Drop,
    Jump(String),
    Redirect(u16),
    /// `v6`: the family the statement is for (`None`: the rule's own family).
    Tproxy {
        port: u16,
        v6: Option<bool>,
    },
}

/// A translated rule with the text the backend prints for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WalkRule {
    pub text: String,
    pub steps: Vec<Step>,
}

/// One table of a model: its name and its chains in the kernel's final order.
#[derive(Debug, Clone, Default)]
pub(crate) struct WalkTable {
    pub name: String,
    pub chains: Vec<(String, Vec<WalkRule>)>,
}

impl WalkTable {
    pub(crate) fn chain(&self, name: &str) -> &[WalkRule] {
        self.chains
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&[], |(_, rules)| rules.as_slice())
    }

    pub(crate) fn chain_mut(&mut self, name: &str) -> &mut Vec<WalkRule> {
        let at = match self.chains.iter().position(|(n, _)| n == name) {
            Some(at) => at,
            None => {
                self.chains.push((name.to_string(), Vec::new()));
                self.chains.len() - 1
            }
        };
        &mut self.chains[at].1
    }
}

/// What a backend gives the evaluator.
pub(crate) struct Model {
    pub tables: Vec<WalkTable>,
    /// The base chain each table has at the packet's hook, in hook order (a table without rules there
    /// is listed too: reaching its end is where a bypass is reported when no rule decided).
    pub hooks: Vec<(usize, String)>,
    /// The PREROUTING base chains of the raw and mangle tables, in hook order, which an outbound packet
    /// leaving on `lo` passes when it comes back in (empty in an inbound model); nat PREROUTING is not
    /// among them because the kernel made the connection's NAT binding at OUTPUT.
    pub loopback: Vec<(usize, String)>,
    /// The verdict of a redirect or TPROXY in this chain (`None`: not a chain the rules redirect from).
    pub kind_of: fn(&str) -> Option<VerdictKind>,
    /// Chains that only redirect: a connection decided there is explained by the rule that jumped there.
    pub redirect_chain: fn(&str) -> bool,
}

/// How deep jumps may nest before the walk calls it a loop (the kernel's limit is similar in spirit).
const MAX_DEPTH: usize = 32;

/// A rule by position, for errors and for the decider.
#[derive(Debug, Clone)]
struct Decider {
    table: usize,
    chain: String,
    rule: String,
}

enum Flow {
    /// The chain ended or returned: the caller goes on.
    Next,
    /// ACCEPT: this table is done, the next one at the hook goes on.
    Accept,
    Decided(VerdictKind, u16, Decider),
}

struct Run<'m> {
    model: &'m Model,
    packet: &'m Packet,
    mark: u32,
    ctmark: u32,
    /// The last RETURN or ACCEPT that matched: what a bypass is explained by.
    passed: Option<Decider>,
}

/// Whether `ip` is in `cidr`; `None` for the other family.
fn contains(cidr: &Cidr, ip: IpAddr) -> Option<bool> {
    match (cidr.addr, ip) {
        (IpAddr::V4(net), IpAddr::V4(a)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(cidr.len)).unwrap_or(0);
            Some(u32::from(net) & mask == u32::from(a) & mask)
        }
        (IpAddr::V6(net), IpAddr::V6(a)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(cidr.len))
                .unwrap_or(0);
            Some(u128::from(net) & mask == u128::from(a) & mask)
        }
        _ => None,
    }
}

impl Run<'_> {
    /// The value of a condition for this packet, `None` where it does not apply.
    fn cond(&self, cond: &Cond) -> Option<bool> {
        let p = self.packet;
        let port = |proto: &Protocol, port: u16| (p.protocol == *proto).then_some(port);
        match cond {
            Cond::Proto(proto) => Some(p.protocol == *proto),
            Cond::Src(c) => contains(c, p.src),
            Cond::Dst(c) => contains(c, p.dst),
            Cond::Sport(proto, n) => port(proto, p.sport).map(|s| s == *n),
            Cond::Dport(proto, n) => port(proto, p.dport).map(|d| d == *n),
            Cond::DportIn(proto, list) => port(proto, p.dport).map(|d| list.contains(&d)),
            Cond::Iif(name) => p.iif.as_deref().map(|i| name.matches(i)),
            Cond::Oif(name) => p.oif.as_deref().map(|o| name.matches(o)),
            Cond::Uid(uid) => p.owner.map(|(u, _)| u == *uid),
            Cond::Gid(gid) => p.owner.map(|(_, g)| Some(g) == *gid),
            Cond::Mark { value, mask } => Some(self.mark & mask == *value),
            Cond::CtMark { value, mask } => Some(self.ctmark & mask == *value),
            Cond::CtState { new } => Some(*new),
        }
    }

    fn error(&self, at: &Decider, reason: impl Into<String>) -> RuleError {
        RuleError {
            table: self.model.tables[at.table].name.clone(),
            chain: at.chain.clone(),
            rule: at.rule.clone(),
            reason: reason.into(),
        }
    }

    /// Walks `chain` of table `t`, entered through `entry` (`None` for a base chain).
    fn chain(
        &mut self,
        t: usize,
        chain: &str,
        entry: Option<&Decider>,
        depth: usize,
    ) -> Result<Flow, RuleError> {
        let model = self.model;
        'rules: for rule in model.tables[t].chain(chain) {
            let here = Decider {
                table: t,
                chain: chain.to_string(),
                rule: rule.text.clone(),
            };
            for step in &rule.steps {
                match step {
                    Step::Match { neg, cond } => match self.cond(cond) {
                        Some(holds) if holds != *neg => {}
                        _ => continue 'rules,
                    },
                    Step::SetMark { value, mask } => self.mark = (self.mark & !mask) | value,
                    Step::SaveMark => self.ctmark = self.mark,
                    Step::RestoreMark => self.mark = self.ctmark,
                    Step::Nothing => {}
                    Step::Return => {
                        self.passed = Some(here);
                        return Ok(Flow::Next);
                    }
                    Step::Accept => {
                        self.passed = Some(here);
                        return Ok(Flow::Accept);
                    }
                    Step::Drop => {
                        return Err(self.error(
                            &here,
                            "a new connection reaches a drop, which the walk does not model",
                        ))
                    }
                    Step::Jump(target) => {
                        if !model.tables[t].chains.iter().any(|(n, _)| n == target) {
                            return Err(self.error(
                                &here,
                                format!("a jump to chain {target}, which the ruleset does not create (the kernel would refuse it)"),
                            ));
                        }
                        if depth >= MAX_DEPTH {
                            return Err(self.error(
                                &here,
                                format!("jumps nest deeper than {MAX_DEPTH} chains (a loop?)"),
                            ));
                        }
                        match self.chain(t, target, Some(&here), depth + 1)? {
                            Flow::Next => continue 'rules,
                            flow => return Ok(flow),
                        }
                    }
                    Step::Redirect(port) | Step::Tproxy { port, .. } => {
                        if let Step::Tproxy { v6: Some(v6), .. } = step {
                            // A TPROXY statement for the other family does not apply (nftables' inet tables).
                            if *v6 != self.packet.dst.is_ipv6() {
                                continue 'rules;
                            }
                        }
                        let Some(kind) = (model.kind_of)(chain) else {
                            return Err(self.error(
                                &here,
                                format!("a redirect in chain {chain}, which the walk cannot name a verdict for"),
                            ));
                        };
                        let decider = match entry {
                            Some(e) if (model.redirect_chain)(chain) => e.clone(),
                            _ => here,
                        };
                        return Ok(Flow::Decided(kind, *port, decider));
                    }
                }
            }
        }
        Ok(Flow::Next)
    }
}

impl Run<'_> {
    /// Walks the base chains `hooks` in order, until one decides.
    fn hooks(&mut self, hooks: &[(usize, String)]) -> Result<Option<Outcome>, RuleError> {
        for (t, base) in hooks {
            match self.chain(*t, base, None, 0)? {
                Flow::Next | Flow::Accept => {}
                Flow::Decided(kind, port, d) => {
                    return Ok(Some(Outcome {
                        kind,
                        port,
                        table: Some(self.model.tables[d.table].name.clone()),
                        chain: Some(d.chain),
                        rule: Some(d.rule),
                    }))
                }
            }
        }
        Ok(None)
    }
}

/// Walks `packet` through `model`: the hooks of its direction and, for an outbound packet that leaves
/// on `lo` undecided, the raw and mangle PREROUTING it meets coming back in, with the mark and the
/// conntrack mark it carries (a TPROXY there lands it on the inbound listener).
pub(crate) fn run(model: &Model, packet: &Packet) -> Result<Outcome, RuleError> {
    let back = packet.looped_back();
    let mut run = Run {
        model,
        packet,
        mark: 0,
        ctmark: 0,
        passed: None,
    };
    if let Some(outcome) = run.hooks(&model.hooks)? {
        return Ok(outcome);
    }
    if let Some(back) = &back {
        // A bypass stays explained by the outbound rule that let the connection leave un-redirected.
        let passed = run.passed.take();
        run.packet = back;
        if let Some(outcome) = run.hooks(&model.loopback)? {
            return Ok(outcome);
        }
        run.passed = passed;
    }
    let name = |t: usize| Some(model.tables[t].name.clone());
    Ok(match (run.passed, model.hooks.last()) {
        (Some(d), _) => Outcome {
            kind: VerdictKind::Bypass,
            port: packet.dport,
            table: name(d.table),
            chain: Some(d.chain),
            rule: Some(d.rule),
        },
        (None, Some((t, base))) => Outcome {
            kind: VerdictKind::Bypass,
            port: packet.dport,
            table: name(*t),
            chain: Some(base.clone()),
            rule: None,
        },
        (None, None) => Outcome {
            kind: VerdictKind::Bypass,
            port: packet.dport,
            table: None,
            chain: None,
            rule: None,
        },
    })
}

/// An interface match as iptables reads it (and both backends write it): a trailing `+` is a prefix match.
pub(crate) fn parse_ifname(s: &str) -> Ifname {
    match s.strip_suffix('+') {
        Some(prefix) => Ifname::Prefix(prefix.to_string()),
        None => Ifname::Exact(s.to_string()),
    }
}

/// Configurations and connections for the tests of both walks.
#[cfg(test)]
pub(crate) mod grid {
    use crate::config::{Cidr, CidrList, Config, InboundPorts, InterceptionMode};
    use crate::config::{OutboundInclude, OwnerGroups};
    use crate::connection::Connection;

    fn cidr(s: &str) -> Cidr {
        Cidr::parse(s).expect("cidr")
    }

    /// Every combination of the rule model's switches: interception mode, DNS capture (off, IPv4,
    /// IPv6 or both servers, capture-all), outbound include (all, CIDRs, with loopback, none), inbound
    /// ports (none, all with exclusions, a list), owner groups (all, all but named and numeric groups,
    /// only one, none), IPv6, excluded and kube-virt interfaces, and the rest together (drop-invalid,
    /// excluded CIDRs and ports, always-captured ports, two uids and gids, another mark and loopback).
    pub(crate) fn configs() -> Vec<Config> {
        let mut out = Vec::new();
        for i in 0..2 * 5 * 4 * 3 * 4 * 2 * 2 * 2 {
            let mut n = i;
            let mut digit = |radix: usize| {
                let d = n % radix;
                n /= radix;
                d
            };
            let mut c = Config {
                mode: [InterceptionMode::Redirect, InterceptionMode::Tproxy][digit(2)],
                ..Config::default()
            };
            match digit(5) {
                0 => {}
                1 => c.dns_servers_v4 = vec!["10.96.0.10".parse().expect("ip")],
                2 => c.dns_servers_v6 = vec!["fd00::53".parse().expect("ip")],
                3 => {
                    c.dns_servers_v4 = vec!["10.96.0.10".parse().expect("ip")];
                    c.dns_servers_v6 = vec!["fd00::53".parse().expect("ip")];
                }
                _ => c.capture_all_dns = true,
            }
            c.redirect_dns =
                c.capture_all_dns || !c.dns_servers_v4.is_empty() || !c.dns_servers_v6.is_empty();
            c.outbound_include = match digit(4) {
                0 => OutboundInclude::All,
                1 => OutboundInclude::List(CidrList {
                    v4: vec![cidr("10.96.0.0/12")],
                    v6: vec![cidr("fd00:5::/64")],
                }),
                2 => OutboundInclude::List(CidrList {
                    v4: vec![cidr("127.0.0.1/32"), cidr("10.96.0.0/12")],
                    v6: vec![],
                }),
                _ => OutboundInclude::List(CidrList::default()),
            };
            c.inbound_ports = match digit(3) {
                0 => InboundPorts::None,
                1 => {
                    c.inbound_exclude_ports = vec![15090, 15021, 9090];
                    InboundPorts::All
                }
                _ => InboundPorts::List(vec![8080, 9090]),
            };
            c.owner_groups = match digit(4) {
                0 => OwnerGroups::AllExcept(vec![]),
                1 => OwnerGroups::AllExcept(vec!["java".into(), "202".into()]),
                2 => OwnerGroups::Only(vec!["1000".into()]),
                _ => OwnerGroups::Only(vec![]),
            };
            c.ipv6 = digit(2) == 1;
            if digit(2) == 1 {
                c.exclude_interfaces = vec!["ex0".into()];
                c.kube_virt_interfaces = vec!["kv0".into()];
            }
            if digit(2) == 1 {
                c.drop_invalid = true;
                c.outbound_exclude = CidrList {
                    v4: vec![cidr("10.0.0.0/8")],
                    v6: vec![cidr("fd00:e::/64")],
                };
                c.outbound_ports = vec![8443];
                c.outbound_exclude_ports = vec![5432];
                c.proxy_uids = vec![1337, 1500];
                c.proxy_gids = vec![1337, 2000];
                c.tproxy_mark = 7;
                c.loopback_cidr = cidr("127.0.0.0/8");
            }
            out.push(c);
        }
        out
    }

    /// Connections that reach every kind of rule of [`configs`].
    pub(crate) fn connections() -> Vec<Connection> {
        let mut specs: Vec<String> = Vec::new();
        for addr in [
            "10.0.0.5",
            "10.96.0.20",
            "127.0.0.1",
            "127.0.0.5",
            "192.0.2.2",
            "8.8.8.8",
        ] {
            for port in [80, 5432, 8443, 15008, 15001, 53] {
                specs.push(format!("outbound:tcp:{addr}:{port}"));
            }
        }
        for (addr, port) in [
            ("10.96.0.10", 53),
            ("8.8.8.8", 53),
            ("10.0.0.5", 5432),
            ("10.0.0.5", 80),
        ] {
            for owner in [
                "",
                ",uid=1337",
                ",gid=1337",
                ",uid=1500,gid=2000",
                ",uid=0,gid=202",
            ] {
                specs.push(format!("outbound:udp:{addr}:{port}{owner}"));
                specs.push(format!("outbound:tcp:{addr}:{port}{owner}"));
            }
        }
        for tail in [
            ",uid=1337,iface=lo",
            ",gid=1337,iface=lo",
            ",uid=1500,iface=lo",
            ",iface=lo",
            ",iface=ex0",
            ",uid=1337,iface=ex0",
        ] {
            for target in [
                "192.0.2.2:8080",
                "192.0.2.2:15008",
                "127.0.0.1:8080",
                "10.0.0.5:53",
            ] {
                specs.push(format!("outbound:tcp:{target}{tail}"));
            }
        }
        for v6 in [
            "fd00::5",
            "fd00:5::1",
            "fd00:e::1",
            "::1",
            "fd00::2",
            "fd00::53",
        ] {
            for (proto, port, tail) in [
                ("tcp", 80, ""),
                ("tcp", 53, ""),
                ("udp", 53, ""),
                ("tcp", 8080, ",uid=1337,iface=lo"),
                ("tcp", 8080, ",uid=1337"),
                ("udp", 53, ",uid=1337"),
            ] {
                specs.push(format!("outbound:{proto}:[{v6}]:{port}{tail}"));
            }
        }
        for port in [8080, 9090, 7070, 15021, 15090, 15008, 15006, 53] {
            for tail in ["", ",iface=lo", ",iface=kv0", ",iface=ex0"] {
                specs.push(format!("inbound:tcp:{port}{tail}"));
                specs.push(format!("inbound:tcp:[fd00::2]:{port}{tail}"));
            }
            specs.push(format!("inbound:udp:{port}"));
            specs.push(format!("inbound:tcp:10.96.0.20:{port},iface=kv0"));
        }
        specs
            .iter()
            .map(|s| s.parse().unwrap_or_else(|e| panic!("{s}: {e}")))
            .collect()
    }
}
