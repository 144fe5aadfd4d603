//! The connection walk: where the first packet of a new connection lands, found by walking the rule
//! model rule by rule through the hooks in the kernel's order (outbound: raw, mangle, nat, filter
//! OUTPUT; inbound: raw, mangle, nat PREROUTING). An outbound packet that leaves on `lo` undecided comes
//! back in: it then walks raw and mangle PREROUTING too, arriving on `lo` with the mark the output
//! hooks gave it and its conntrack entry still NEW (nat PREROUTING is skipped: the NAT binding was made
//! at OUTPUT), where a TPROXY sends it to the inbound listener.
//!
//! Each backend translates its rules into the same small program of [`Step`]s (this module the
//! iptables tokens of a [`rules::Plan`], `nft::walk` the typed statements of an nftables ruleset), and
//! one evaluator runs them, so both backends share the semantics of jumps, returns, marks and verdicts.
//! A match or target the translation does not know is an error naming the rule: nothing is skipped.

use std::net::IpAddr;

use crate::config::Cidr;
use crate::connection::{Packet, Protocol};
use crate::rules::{self, Plan, Table};

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
    fn chain(&self, name: &str) -> &[WalkRule] {
        self.chains
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&[], |(_, rules)| rules.as_slice())
    }

    fn chain_mut(&mut self, name: &str) -> &mut Vec<WalkRule> {
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

// ---- iptables ----

/// iptables' redirect chains and the verdict of a redirect in them.
fn iptables_kind(chain: &str) -> Option<VerdictKind> {
    match chain {
        "ISTIO_REDIRECT" => Some(VerdictKind::OutboundProxy),
        "ISTIO_IN_REDIRECT" | "ISTIO_TPROXY" => Some(VerdictKind::InboundProxy),
        "ISTIO_OUTPUT_DNS" => Some(VerdictKind::DnsProxy),
        _ => None,
    }
}

fn iptables_redirect_chain(chain: &str) -> bool {
    matches!(
        chain,
        "ISTIO_REDIRECT" | "ISTIO_IN_REDIRECT" | "ISTIO_TPROXY"
    )
}

/// Target extensions of iptables that the rule model never writes: a `-j` to one of them is an error,
/// not a jump to an (empty) user chain of that name.
const OTHER_TARGETS: &[&str] = &[
    "AUDIT",
    "CHECKSUM",
    "CLASSIFY",
    "CLUSTERIP",
    "CONNSECMARK",
    "DNAT",
    "DNPT",
    "DSCP",
    "ECN",
    "HL",
    "HMARK",
    "IDLETIMER",
    "LED",
    "LOG",
    "MASQUERADE",
    "NETMAP",
    "NFLOG",
    "NFQUEUE",
    "NOTRACK",
    "RATEEST",
    "REJECT",
    "SECMARK",
    "SET",
    "SNAT",
    "SNPT",
    "SYNPROXY",
    "TCPMSS",
    "TCPOPTSTRIP",
    "TEE",
    "TOS",
    "TRACE",
    "TTL",
    "ULOG",
    "QUEUE",
];

/// A mark as iptables writes it: `VALUE[/MASK]`, decimal or `0x` hex.
fn parse_mark(s: &str) -> Result<(u32, u32), String> {
    let num = |t: &str| {
        let parsed = match t.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => t.parse(),
        };
        parsed.map_err(|_| format!("{s:?} is not a mark (VALUE[/MASK])"))
    };
    match s.split_once('/') {
        Some((v, m)) => Ok((num(v)?, num(m)?)),
        None => Ok((num(s)?, u32::MAX)),
    }
}

fn parse_port(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("{s:?} is not a port")),
    }
}

/// An address match: a CIDR, or a bare address (a host).
fn parse_cidr(s: &str) -> Result<Cidr, String> {
    if let Ok(addr) = s.parse::<IpAddr>() {
        let len = if addr.is_ipv4() { 32 } else { 128 };
        return Ok(Cidr { addr, len });
    }
    Cidr::parse(s).map_err(|e| format!("{s:?}: {e}"))
}

fn parse_ifname(s: &str) -> Ifname {
    match s.strip_suffix('+') {
        Some(prefix) => Ifname::Prefix(prefix.to_string()),
        None => Ifname::Exact(s.to_string()),
    }
}

/// Where a rule goes in its chain: `-A` appends, `-I CHAIN N` inserts before the N-th rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Position {
    Append,
    Insert(usize),
}

/// Translates one iptables rule's tokens (`-A CHAIN ...` / `-I CHAIN N ...`) into its position and
/// program; an unknown token, match, option or target is an error.
pub(crate) fn translate(tokens: &[String]) -> Result<(Position, Vec<Step>), String> {
    let mut it = tokens.iter().map(String::as_str).peekable();
    let position = match (it.next(), it.next()) {
        (Some("-A"), Some(_)) => Position::Append,
        (Some("-I"), Some(_)) => {
            let n = it.next().unwrap_or_default();
            match n.parse::<usize>() {
                Ok(n) if n > 0 => Position::Insert(n),
                _ => return Err(format!("-I needs a rule number, not {n:?}")),
            }
        }
        _ => return Err("a rule starts with -A CHAIN or -I CHAIN N".to_string()),
    };
    let mut steps = Vec::new();
    let mut proto: Option<Protocol> = None;
    let mut module: Option<&str> = None;
    let mut neg = false;
    let mut target: Option<Step> = None;
    while let Some(token) = it.next() {
        if target.is_some() {
            return Err(format!("{token:?} after the target"));
        }
        let mut value = |what: &str| {
            it.next()
                .ok_or_else(|| format!("{what} without a value"))
                .map(str::to_string)
        };
        let mut push = |cond: Cond| {
            steps.push(Step::Match { neg, cond });
        };
        match token {
            "!" => {
                if neg {
                    return Err("`! !`".to_string());
                }
                neg = true;
                continue;
            }
            "-p" => {
                let v = value(token)?;
                let p = match v.as_str() {
                    "tcp" => Protocol::Tcp,
                    "udp" => Protocol::Udp,
                    _ => return Err(format!("protocol {v:?} is not modelled")),
                };
                if !neg {
                    proto = Some(p);
                }
                push(Cond::Proto(p));
            }
            "-d" => push(Cond::Dst(parse_cidr(&value(token)?)?)),
            "-s" => push(Cond::Src(parse_cidr(&value(token)?)?)),
            "-i" => push(Cond::Iif(parse_ifname(&value(token)?))),
            "-o" => push(Cond::Oif(parse_ifname(&value(token)?))),
            "--dport" | "--sport" => {
                let p = proto.ok_or_else(|| format!("{token} without -p tcp|udp"))?;
                let port = parse_port(&value(token)?)?;
                push(if token == "--dport" {
                    Cond::Dport(p, port)
                } else {
                    Cond::Sport(p, port)
                });
            }
            "-m" => {
                if neg {
                    return Err("`!` before -m".to_string());
                }
                let m = it.next().ok_or("-m without a module")?;
                match m {
                    "multiport" | "owner" | "conntrack" | "mark" | "connmark" => module = Some(m),
                    "tcp" | "udp" if proto.is_some_and(|p| p.as_str() == m) => module = Some(m),
                    _ => return Err(format!("match module {m:?} is not modelled")),
                }
                continue;
            }
            "--dports" if module == Some("multiport") => {
                let p = proto.ok_or("--dports without -p tcp|udp")?;
                let list = value(token)?
                    .split(',')
                    .map(parse_port)
                    .collect::<Result<Vec<_>, _>>()?;
                push(Cond::DportIn(p, list));
            }
            "--uid-owner" if module == Some("owner") => {
                let v = value(token)?;
                let uid = v
                    .parse()
                    .map_err(|_| format!("uid {v:?} is not a number"))?;
                push(Cond::Uid(uid));
            }
            "--gid-owner" if module == Some("owner") => {
                let v = value(token)?;
                push(Cond::Gid(v.parse().ok()));
            }
            "--ctstate" if module == Some("conntrack") => {
                let v = value(token)?;
                let mut new = false;
                for state in v.split(',') {
                    match state {
                        "NEW" => new = true,
                        "INVALID" | "ESTABLISHED" | "RELATED" | "UNTRACKED" | "SNAT" | "DNAT" => {}
                        _ => return Err(format!("conntrack state {state:?} is not known")),
                    }
                }
                push(Cond::CtState { new });
            }
            "--mark" if matches!(module, Some("mark" | "connmark")) => {
                let (value, mask) = parse_mark(&value(token)?)?;
                push(if module == Some("mark") {
                    Cond::Mark { value, mask }
                } else {
                    Cond::CtMark { value, mask }
                });
            }
            "-j" => {
                if neg {
                    return Err("`!` before -j".to_string());
                }
                let name = it.next().ok_or("-j without a target")?;
                let options: Vec<&str> = it.by_ref().collect();
                target = Some(translate_target(name, &options)?);
                continue;
            }
            _ => return Err(format!("{token:?} is not a match the walk knows")),
        }
        neg = false;
    }
    if neg {
        return Err("a trailing `!`".to_string());
    }
    steps.push(target.ok_or("a rule without -j")?);
    Ok((position, steps))
}

/// A target and its options.
fn translate_target(name: &str, options: &[&str]) -> Result<Step, String> {
    let bad = || format!("target {name} with options {options:?} is not modelled");
    let port_of = |flag: &str| -> Result<u16, String> {
        let at = options.iter().position(|o| *o == flag).ok_or_else(bad)?;
        parse_port(options.get(at + 1).ok_or_else(bad)?)
    };
    match (name, options) {
        ("RETURN", []) => Ok(Step::Return),
        ("ACCEPT", []) => Ok(Step::Accept),
        ("DROP", []) => Ok(Step::Drop),
        ("REDIRECT", ["--to-ports" | "--to-port", port]) => Ok(Step::Redirect(parse_port(port)?)),
        ("TPROXY", [_, _, _, _]) => {
            let mark = options
                .iter()
                .position(|o| *o == "--tproxy-mark")
                .ok_or_else(bad)?;
            parse_mark(options.get(mark + 1).ok_or_else(bad)?)?;
            Ok(Step::Tproxy {
                port: port_of("--on-port")?,
                v6: None,
            })
        }
        ("MARK", ["--set-mark", mark]) => {
            let (value, mask) = parse_mark(mark)?;
            Ok(Step::SetMark { value, mask })
        }
        ("CONNMARK", ["--save-mark"]) => Ok(Step::SaveMark),
        ("CONNMARK", ["--restore-mark"]) => Ok(Step::RestoreMark),
        ("CT", ["--zone", zone]) => {
            zone.parse::<u16>()
                .map_err(|_| format!("CT zone {zone:?} is not a number"))?;
            Ok(Step::Nothing)
        }
        (chain, [])
            if !OTHER_TARGETS.contains(&chain)
                && !matches!(chain, "REDIRECT" | "TPROXY" | "MARK" | "CONNMARK" | "CT") =>
        {
            Ok(Step::Jump(chain.to_string()))
        }
        _ => Err(bad()),
    }
}

/// The tables in the order a hook runs them (raw, mangle, nat, filter).
const HOOK_ORDER: [Table; 4] = [Table::Raw, Table::Mangle, Table::Nat, Table::Filter];

/// The walk model of one family's iptables rules: every rule translated and put where `-A` / `-I`
/// puts it, as `iptables-restore` does.
pub(crate) fn iptables_model(rules: &[rules::Rule], outbound: bool) -> Result<Model, RuleError> {
    let mut tables: Vec<WalkTable> = HOOK_ORDER
        .iter()
        .map(|t| WalkTable {
            name: t.as_str().to_string(),
            chains: Vec::new(),
        })
        .collect();
    let mut used = [false; 4];
    for rule in rules {
        let text = rule.tokens.join(" ");
        let error = |reason: String| RuleError {
            table: rule.table.as_str().to_string(),
            chain: rule.chain.clone(),
            rule: text.clone(),
            reason,
        };
        let (position, steps) = translate(&rule.tokens).map_err(error)?;
        let t = HOOK_ORDER
            .iter()
            .position(|x| *x == rule.table)
            .unwrap_or(0);
        used[t] = true;
        // Every jump target is declared, as `render` declares it with `-N`, so it exists even empty.
        if let Some(Step::Jump(target)) = steps.last() {
            tables[t].chain_mut(target);
        }
        let chain = tables[t].chain_mut(&rule.chain);
        let walk_rule = WalkRule {
            text: text.clone(),
            steps,
        };
        match position {
            Position::Append => chain.push(walk_rule),
            Position::Insert(n) if n <= chain.len() + 1 => chain.insert(n - 1, walk_rule),
            Position::Insert(n) => {
                return Err(error(format!(
                    "inserts at {n} into a chain of {} rules",
                    chain.len()
                )))
            }
        }
    }
    let base = if outbound { "OUTPUT" } else { "PREROUTING" };
    let hooks = HOOK_ORDER
        .iter()
        .enumerate()
        .filter(|(i, t)| used[*i] && (outbound || **t != Table::Filter))
        .map(|(i, _)| (i, base.to_string()))
        .collect();
    let loopback = HOOK_ORDER
        .iter()
        .enumerate()
        .filter(|(i, t)| outbound && used[*i] && matches!(t, Table::Raw | Table::Mangle))
        .map(|(i, _)| (i, "PREROUTING".to_string()))
        .collect();
    Ok(Model {
        tables,
        hooks,
        loopback,
        kind_of: iptables_kind,
        redirect_chain: iptables_redirect_chain,
    })
}

/// Walks `packet` through the iptables rules of its family in `plan`.
pub(crate) fn walk(plan: &Plan, packet: &Packet, outbound: bool) -> Result<Outcome, RuleError> {
    let rules: &[rules::Rule] = if packet.dst.is_ipv6() {
        plan.v6.as_deref().unwrap_or_default()
    } else {
        &plan.v4
    };
    run(&iptables_model(rules, outbound)?, packet)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::{Connection, Direction};
    use std::collections::BTreeSet;

    fn family_rules(plan: &Plan) -> Vec<&[rules::Rule]> {
        let mut out = vec![&plan.v4[..]];
        out.extend(plan.v6.as_deref());
        out
    }

    /// The tokens a rule is made of, for the coverage check: flags, `-m` modules, `!`, targets.
    fn vocabulary(tokens: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for (i, t) in tokens.iter().enumerate().skip(2) {
            if t.starts_with('-') || t == "!" {
                out.push(t.clone());
            }
            if i > 0 && matches!(tokens[i - 1].as_str(), "-m" | "-j") {
                let name = if tokens[i - 1] == "-j" && t.starts_with("ISTIO_") {
                    "CHAIN"
                } else {
                    t
                };
                out.push(format!("{} {name}", tokens[i - 1]));
            }
        }
        out
    }

    /// Every rule of every grid configuration translates, every redirect is in a chain with a verdict,
    /// and every jump goes to a chain of the same table; and the grid reaches every match and target
    /// the rule model writes, so a new one shows up here.
    #[test]
    fn every_rule_of_every_configuration_is_understood() {
        let mut seen = BTreeSet::new();
        let mut rules_seen = 0;
        for cfg in grid::configs() {
            let plan = rules::build(&cfg);
            for rules in family_rules(&plan) {
                let model =
                    iptables_model(rules, true).unwrap_or_else(|e| panic!("{e:?} in {cfg:?}"));
                for r in rules {
                    rules_seen += 1;
                    seen.extend(vocabulary(&r.tokens));
                    let (_, steps) = translate(&r.tokens).expect("translated above");
                    for step in &steps {
                        match step {
                            Step::Redirect(_) | Step::Tproxy { .. } => assert!(
                                iptables_kind(&r.chain).is_some(),
                                "{:?}: a redirect without a verdict",
                                r.tokens
                            ),
                            Step::Jump(target) => {
                                let t = model
                                    .tables
                                    .iter()
                                    .find(|t| t.name == r.table.as_str())
                                    .expect("table");
                                assert!(
                                    !t.chain(target).is_empty(),
                                    "{:?}: a jump to a chain without rules",
                                    r.tokens
                                );
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        assert!(rules_seen > 100_000, "{rules_seen}");
        let expected = [
            "!",
            "-p",
            "-d",
            "-s",
            "-i",
            "-o",
            "--dport",
            "--sport",
            "-m multiport",
            "--dports",
            "-m",
            "-m owner",
            "--uid-owner",
            "--gid-owner",
            "-m conntrack",
            "--ctstate",
            "-m mark",
            "-m connmark",
            "--mark",
            "-j",
            "-j CHAIN",
            "-j RETURN",
            "-j ACCEPT",
            "-j DROP",
            "-j REDIRECT",
            "--to-ports",
            "--to-port",
            "-j TPROXY",
            "--tproxy-mark",
            "--on-port",
            "-j MARK",
            "--set-mark",
            "-j CONNMARK",
            "--save-mark",
            "--restore-mark",
            "-j CT",
            "--zone",
        ];
        let expected: BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            seen, expected,
            "the grid reaches exactly the model's vocabulary"
        );
    }

    #[test]
    fn unknown_matches_and_targets_are_errors_naming_the_rule() {
        let tokens = |s: &str| -> Vec<String> { s.split(' ').map(str::to_string).collect() };
        for (text, needle) in [
            (
                "-A OUTPUT -m statistic --mode random -j RETURN",
                "statistic",
            ),
            ("-A OUTPUT -p icmp -j RETURN", "icmp"),
            ("-A OUTPUT --dport 80 -j RETURN", "--dport without -p"),
            ("-A OUTPUT -p tcp -j LOG", "target LOG"),
            ("-A OUTPUT -p tcp -j REDIRECT --to-ports 1-2", "not a port"),
            ("-A OUTPUT -j DNAT --to-destination 1.2.3.4", "target DNAT"),
            ("-A OUTPUT -p tcp --syn -j RETURN", "--syn"),
            ("-A OUTPUT -m owner --pid-owner 1 -j RETURN", "--pid-owner"),
            ("-A OUTPUT -p tcp", "without -j"),
            ("-I OUTPUT x -j RETURN", "rule number"),
        ] {
            let e = translate(&tokens(text)).expect_err(text);
            assert!(e.contains(needle), "{text}: {e}");
        }
        let plan = Plan {
            v4: vec![rules::Rule::new(
                Table::Nat,
                "-A OUTPUT -m statistic -j RETURN",
            )],
            ..Plan::default()
        };
        let c: Connection = "outbound:tcp:80".parse().expect("spec");
        let e = walk(&plan, &c.packet(), true).expect_err("unknown module");
        assert_eq!(
            (e.table.as_str(), e.chain.as_str(), e.rule.as_str()),
            ("nat", "OUTPUT", "-A OUTPUT -m statistic -j RETURN")
        );
        // A rule that cannot be reached is checked all the same.
        let plan = Plan {
            v4: vec![
                rules::Rule::new(Table::Nat, "-A OUTPUT -j RETURN"),
                rules::Rule::new(Table::Nat, "-A OUTPUT -j SNAT --to-source 1.2.3.4"),
            ],
            ..Plan::default()
        };
        assert!(walk(&plan, &c.packet(), true).is_err());
        // An insert past the end, which iptables-restore refuses.
        let plan = Plan {
            v4: vec![rules::Rule::new(Table::Nat, "-I OUTPUT 2 -j RETURN")],
            ..Plan::default()
        };
        assert!(walk(&plan, &c.packet(), true)
            .expect_err("past the end")
            .reason
            .contains("inserts at 2"));
    }

    #[test]
    fn marks_conntrack_and_interface_wildcards() {
        let plan = |rules: &[&str]| Plan {
            v4: rules
                .iter()
                .map(|r| {
                    let (table, text) = r.split_once(' ').expect("table");
                    let table = match table {
                        "mangle" => Table::Mangle,
                        _ => Table::Nat,
                    };
                    rules::Rule::new(table, text)
                })
                .collect(),
            ..Plan::default()
        };
        let c: Connection = "outbound:tcp:10.0.0.5:80,iface=eth7".parse().expect("spec");
        let go = |p: &Plan| walk(p, &c.packet(), true).expect("walks");
        // A mark set in mangle is seen by a later mangle rule, and restored from conntrack (0: NEW).
        let p = plan(&[
            "mangle -A OUTPUT -j MARK --set-mark 5",
            "mangle -A OUTPUT -m mark --mark 5 -j CONNMARK --save-mark",
            "mangle -A OUTPUT -m connmark --mark 5 -j RETURN",
            "nat -A OUTPUT -j ISTIO_REDIRECT",
            "nat -A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
        ]);
        let o = go(&p);
        assert_eq!((o.kind, o.port), (VerdictKind::OutboundProxy, 15001));
        assert_eq!(o.rule.as_deref(), Some("-A OUTPUT -j ISTIO_REDIRECT"));
        let p = plan(&[
            "mangle -A OUTPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            "mangle -A OUTPUT -m connmark ! --mark 0 -j DROP",
            "nat -A OUTPUT -o eth+ -j RETURN",
            "nat -A OUTPUT -j ISTIO_REDIRECT",
        ]);
        let o = go(&p);
        assert_eq!(o.kind, VerdictKind::Bypass);
        assert_eq!(o.rule.as_deref(), Some("-A OUTPUT -o eth+ -j RETURN"));
        // NEW is in the set: the rule matches.
        let p = plan(&[
            "nat -A OUTPUT -m conntrack --ctstate NEW -j ISTIO_REDIRECT",
            "nat -A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 1",
        ]);
        assert_eq!(go(&p).port, 1);
        // A drop reached by a new connection is an error, not a silent verdict.
        let p = plan(&["mangle -A OUTPUT -p tcp -j DROP"]);
        assert!(walk(&p, &c.packet(), true).is_err());
        // A jump loop is an error.
        let p = plan(&["nat -A OUTPUT -j ISTIO_A", "nat -A ISTIO_A -j ISTIO_A"]);
        assert!(walk(&p, &c.packet(), true)
            .expect_err("loop")
            .reason
            .contains("deeper"));
    }

    /// An outbound packet leaving on lo undecided comes back in through raw and mangle PREROUTING
    /// on lo, from its own source, with its mark and conntrack mark; nat PREROUTING never sees it.
    #[test]
    fn a_connection_over_lo_comes_back_in_through_mangle_prerouting() {
        let rule = |table: Table, text: &str| rules::Rule::new(table, text);
        let plan = Plan {
            v4: vec![
                rule(Table::Mangle, "-A OUTPUT -o lo -j MARK --set-mark 9"),
                rule(Table::Mangle, "-A OUTPUT -j CONNMARK --save-mark"),
                rule(Table::Mangle, "-A OUTPUT -o lo -j MARK --set-mark 3"),
                rule(Table::Raw, "-A PREROUTING -i lo -j CT --zone 1"),
                rule(
                    Table::Mangle,
                    "-A PREROUTING -i lo -s 10.10.0.1 -m mark --mark 3 -m connmark --mark 9 -m conntrack --ctstate NEW -j ISTIO_TPROXY",
                ),
                rule(
                    Table::Mangle,
                    "-A ISTIO_TPROXY -p tcp -j TPROXY --tproxy-mark 1337/0xffffffff --on-port 15006",
                ),
                rule(Table::Nat, "-A PREROUTING -p tcp -j ISTIO_IN_REDIRECT"),
                rule(
                    Table::Nat,
                    "-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15007",
                ),
                rule(Table::Nat, "-A OUTPUT -p udp -j RETURN"),
            ],
            ..Plan::default()
        };
        let go = |spec: &str| {
            let c: Connection = spec.parse().expect("spec");
            walk(&plan, &c.packet(), true).expect("walks")
        };
        let o = go("outbound:tcp:10.10.0.1:80,iface=lo");
        assert_eq!((o.kind, o.port), (VerdictKind::InboundProxy, 15006));
        assert_eq!(
            (o.table.as_deref(), o.chain.as_deref()),
            (Some("mangle"), Some("PREROUTING"))
        );
        assert!(
            o.rule
                .as_deref()
                .is_some_and(|r| r.ends_with("-j ISTIO_TPROXY")),
            "{o:?}"
        );
        // From another source (or not over lo) nothing in mangle matches, and nat PREROUTING's
        // redirect is not consulted: the end of nat OUTPUT decided.
        for spec in [
            "outbound:tcp:10.10.0.2:80,iface=lo",
            "outbound:tcp:10.10.0.1:80",
            "outbound:tcp:127.0.0.1:80",
        ] {
            let o = go(spec);
            assert_eq!(
                (o.kind, o.table.as_deref(), o.chain.as_deref(), o.rule),
                (VerdictKind::Bypass, Some("nat"), Some("OUTPUT"), None),
                "{spec}"
            );
        }
        // A bypass keeps the outbound rule that let it through as its explanation.
        let o = go("outbound:udp:10.10.0.1:80,iface=lo");
        assert_eq!(o.rule.as_deref(), Some("-A OUTPUT -p udp -j RETURN"));
        // An inbound walk has no loopback pass, and an inbound model no loopback chains.
        let inbound = iptables_model(&plan.v4, false).expect("model");
        assert!(inbound.loopback.is_empty());
        let outbound = iptables_model(&plan.v4, true).expect("model");
        let names: Vec<(&str, &str)> = outbound
            .loopback
            .iter()
            .map(|(t, c)| (outbound.tables[*t].name.as_str(), c.as_str()))
            .collect();
        assert_eq!(names, [("raw", "PREROUTING"), ("mangle", "PREROUTING")]);
    }

    #[test]
    fn every_grid_connection_walks_in_every_configuration() {
        let conns = grid::connections();
        for cfg in grid::configs().iter().step_by(5) {
            let plan = rules::build(cfg);
            let empty = Vec::new();
            let models: Vec<Model> = [(&plan.v4, true), (&plan.v4, false)]
                .into_iter()
                .chain([true, false].map(|out| (plan.v6.as_ref().unwrap_or(&empty), out)))
                .map(|(rules, out)| iptables_model(rules, out).expect("model"))
                .collect();
            for c in &conns {
                let out = c.direction == Direction::Outbound;
                let model = &models[usize::from(c.is_ipv6()) * 2 + usize::from(!out)];
                let o = run(model, &c.packet()).unwrap_or_else(|e| panic!("{c}: {e:?} in {cfg:?}"));
                if o.kind == VerdictKind::Bypass {
                    assert_eq!(o.port, c.port, "{c}");
                }
                assert_eq!(o.table.is_none(), c.is_ipv6() && !cfg.ipv6, "{c}: {o:?}");
            }
        }
    }
}
