//! The connection walk over the nftables ruleset: each table's rules in the kernel's final order
//! ([`Table::chain_rules`]), their typed statements translated into the walk's steps, and the base
//! chains of the packet's hook run by priority (raw, mangle, nat). Istio's tables are `inet`, so they
//! see both families; an `ip`/`ip6` match or a `tproxy ip`/`ip6` of the other family stops its rule.

use super::model::{CtState, Dir, Group, Hook, Ip, Ruleset, Stmt, Table};
use super::model::{IN_REDIRECT, OUTPUT_DNS, REDIRECT, TPROXY};
use super::render::rule_text;
use crate::connection::{Packet, Protocol};
use crate::walk::{
    self, Cond, Ifname, Model, Outcome, RuleError, Step, VerdictKind, WalkRule, WalkTable,
};

fn protocol(p: super::model::Proto) -> Protocol {
    match p {
        super::model::Proto::Tcp => Protocol::Tcp,
        super::model::Proto::Udp => Protocol::Udp,
    }
}

/// The walk's step of one statement. The match is exhaustive, so a new statement cannot go unhandled.
pub(crate) fn step(stmt: &Stmt) -> Step {
    let m = |neg: bool, cond: Cond| Step::Match { neg, cond };
    match stmt {
        Stmt::Ifname { output, name } => {
            let name = Ifname::Exact(name.clone());
            m(
                false,
                if *output {
                    Cond::Oif(name)
                } else {
                    Cond::Iif(name)
                },
            )
        }
        Stmt::L4proto(p) => m(false, Cond::Proto(protocol(*p))),
        Stmt::Addr { dir, neq, cidr } => m(
            *neq,
            match dir {
                Dir::Source => Cond::Src(*cidr),
                Dir::Destination => Cond::Dst(*cidr),
            },
        ),
        Stmt::Port {
            proto,
            dir,
            neq,
            port,
        } => m(
            *neq,
            match dir {
                Dir::Source => Cond::Sport(protocol(*proto), *port),
                Dir::Destination => Cond::Dport(protocol(*proto), *port),
            },
        ),
        Stmt::PortNotIn { proto, ports } => m(true, Cond::DportIn(protocol(*proto), ports.clone())),
        Stmt::SkUid { neq, uid, .. } => m(*neq, Cond::Uid(*uid)),
        Stmt::SkGid { neq, group, .. } => m(
            *neq,
            Cond::Gid(match group {
                Group::Id(id) => Some(*id),
                Group::Name(_) => None,
            }),
        ),
        Stmt::Mark { neq, mark } => m(
            *neq,
            Cond::Mark {
                value: *mark,
                mask: u32::MAX,
            },
        ),
        Stmt::CtMark(mark) => m(
            false,
            Cond::CtMark {
                value: *mark,
                mask: u32::MAX,
            },
        ),
        Stmt::CtState(CtState::Invalid | CtState::RelatedEstablished) => {
            m(false, Cond::CtState { new: false })
        }
        Stmt::Counter | Stmt::CtZoneSet(_) => Step::Nothing,
        Stmt::Return => Step::Return,
        Stmt::Jump(chain) => Step::Jump(chain.to_string()),
        Stmt::Accept => Step::Accept,
        Stmt::Drop => Step::Drop,
        Stmt::Redirect(port) => Step::Redirect(*port),
        Stmt::Tproxy { ip, port } => Step::Tproxy {
            port: *port,
            v6: Some(*ip == Ip::V6),
        },
        Stmt::SetMark(mark) => Step::SetMark {
            value: *mark,
            mask: u32::MAX,
        },
        Stmt::CtMarkSetMark => Step::SaveMark,
        Stmt::MarkSetCtMark => Step::RestoreMark,
    }
}

/// The redirect chains of Istio's nftables tables and the verdict of a redirect in them.
fn kind_of(chain: &str) -> Option<VerdictKind> {
    match chain {
        REDIRECT => Some(VerdictKind::OutboundProxy),
        IN_REDIRECT | TPROXY => Some(VerdictKind::InboundProxy),
        OUTPUT_DNS => Some(VerdictKind::DnsProxy),
        _ => None,
    }
}

fn redirect_chain(chain: &str) -> bool {
    matches!(chain, REDIRECT | IN_REDIRECT | TPROXY)
}

fn walk_table(t: &Table) -> WalkTable {
    let mut names: Vec<&str> = t.chains.iter().map(|c| c.name).collect();
    for e in &t.entries {
        if !names.contains(&e.chain) {
            names.push(e.chain);
        }
    }
    WalkTable {
        name: t.id.name().to_string(),
        chains: names
            .into_iter()
            .map(|name| {
                let rules = t
                    .chain_rules(name)
                    .into_iter()
                    .map(|r| WalkRule {
                        text: rule_text(r),
                        steps: r.stmts.iter().map(step).collect(),
                    })
                    .collect();
                (name.to_string(), rules)
            })
            .collect(),
    }
}

/// The walk model of a ruleset at `hook`: every table, and the base chain each has at the hook, by
/// priority (a table without one there is placed by its tables' priority, to report the end reached).
pub(crate) fn model(rs: &Ruleset, hook: Hook) -> Model {
    let tables: Vec<WalkTable> = rs.tables.iter().map(walk_table).collect();
    let mut hooks: Vec<(i32, usize, String)> = rs
        .tables
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let base = t
                .chains
                .iter()
                .find(|c| c.base.is_some_and(|b| b.hook == hook));
            match base {
                Some(c) => (
                    c.base.map_or(t.id.priority(), |b| b.priority),
                    i,
                    c.name.to_string(),
                ),
                None => (t.id.priority(), i, hook.as_str().to_string()),
            }
        })
        .collect();
    hooks.sort_by_key(|(priority, i, _)| (*priority, *i));
    Model {
        tables,
        hooks: hooks.into_iter().map(|(_, i, c)| (i, c)).collect(),
        kind_of,
        redirect_chain,
    }
}

/// Walks `packet` through the ruleset (outbound at the output hook, inbound at prerouting).
pub(crate) fn walk(rs: &Ruleset, packet: &Packet, outbound: bool) -> Result<Outcome, RuleError> {
    let hook = if outbound {
        Hook::Output
    } else {
        Hook::Prerouting
    };
    walk::run(&model(rs, hook), packet)
}
