//! The connection walk over the iptables plan: each rule's tokens (`-A CHAIN ...` / `-I CHAIN N ...`)
//! translated into the walk's steps and put where `iptables-restore` puts it, and the tables of the
//! packet's hook run in the kernel's order (raw, mangle, nat, filter; an outbound packet leaving on `lo`
//! then the raw and mangle PREROUTING chains). The evaluator is the shared one in `crate::walk`.

use std::net::IpAddr;

use super::model::{Plan, Rule, Table};
use crate::config::Cidr;
use crate::connection::{Packet, Protocol};
use crate::walk::{
    parse_ifname, run, Cond, Model, Outcome, RuleError, Step, VerdictKind, WalkRule, WalkTable,
};

/// iptables' redirect chains and the verdict of a redirect in them.
fn kind_of(chain: &str) -> Option<VerdictKind> {
    match chain {
        "ISTIO_REDIRECT" => Some(VerdictKind::OutboundProxy),
        "ISTIO_IN_REDIRECT" | "ISTIO_TPROXY" => Some(VerdictKind::InboundProxy),
        "ISTIO_OUTPUT_DNS" => Some(VerdictKind::DnsProxy),
        _ => None,
    }
}

fn redirect_chain(chain: &str) -> bool {
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
pub(crate) fn model(rules: &[Rule], outbound: bool) -> Result<Model, RuleError> {
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
        kind_of,
        redirect_chain,
    })
}

/// Walks `packet` through the iptables rules of its family in `plan`.
pub(crate) fn walk(plan: &Plan, packet: &Packet, outbound: bool) -> Result<Outcome, RuleError> {
    let rules: &[Rule] = if packet.dst.is_ipv6() {
        plan.v6.as_deref().unwrap_or_default()
    } else {
        &plan.v4
    };
    run(&model(rules, outbound)?, packet)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::{Connection, Direction};
    use crate::iptables::model::build;
    use crate::walk::grid;
    use std::collections::BTreeSet;

    fn family_rules(plan: &Plan) -> Vec<&[Rule]> {
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
            let plan = build(&cfg);
            for rules in family_rules(&plan) {
                let model = model(rules, true).unwrap_or_else(|e| panic!("{e:?} in {cfg:?}"));
                for r in rules {
                    rules_seen += 1;
                    seen.extend(vocabulary(&r.tokens));
                    let (_, steps) = translate(&r.tokens).expect("translated above");
                    for step in &steps {
                        match step {
                            Step::Redirect(_) | Step::Tproxy { .. } => assert!(
                                kind_of(&r.chain).is_some(),
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
            v4: vec![Rule::new(Table::Nat, "-A OUTPUT -m statistic -j RETURN")],
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
                Rule::new(Table::Nat, "-A OUTPUT -j RETURN"),
                Rule::new(Table::Nat, "-A OUTPUT -j SNAT --to-source 1.2.3.4"),
            ],
            ..Plan::default()
        };
        assert!(walk(&plan, &c.packet(), true).is_err());
        // An insert past the end, which iptables-restore refuses.
        let plan = Plan {
            v4: vec![Rule::new(Table::Nat, "-I OUTPUT 2 -j RETURN")],
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
                    Rule::new(table, text)
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
        let rule = |table: Table, text: &str| Rule::new(table, text);
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
        let inbound = model(&plan.v4, false).expect("model");
        assert!(inbound.loopback.is_empty());
        let outbound = model(&plan.v4, true).expect("model");
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
            let plan = build(cfg);
            let empty = Vec::new();
            let models: Vec<Model> = [(&plan.v4, true), (&plan.v4, false)]
                .into_iter()
                .chain([true, false].map(|out| (plan.v6.as_ref().unwrap_or(&empty), out)))
                .map(|(rules, out)| model(rules, out).expect("model"))
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
