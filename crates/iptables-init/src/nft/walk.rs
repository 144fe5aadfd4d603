//! The connection walk over the nftables ruleset: each table's rules in the kernel's final order
//! ([`Table::chain_rules`]), their typed statements translated into the walk's steps, and the base
//! chains of the packet's hook run by priority (raw, mangle, nat; an outbound packet leaving on `lo`
//! then the raw and mangle prerouting chains). Istio's tables are `inet`, so they see both families;
//! an `ip`/`ip6` match or a `tproxy ip`/`ip6` of the other family stops its rule.

use super::model::{ChainType, CtState, Dir, Group, Hook, Ip, Ruleset, Stmt, Table};
use super::model::{IN_REDIRECT, OUTPUT_DNS, REDIRECT, TPROXY};
use super::render::rule_text;
use crate::connection::{Packet, Protocol};
use crate::walk::{self, Cond, Model, Outcome, RuleError, Step, VerdictKind, WalkRule, WalkTable};

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
            // `eth+` is a prefix here as in iptables (the netlink encoding compares the prefix alone).
            let name = walk::parse_ifname(name);
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
    // Only the chains the transaction creates: a jump elsewhere is a ruleset the kernel refuses.
    let names: Vec<&str> = t.chains.iter().map(|c| c.name).collect();
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
/// priority (a table without one there is placed by its tables' priority, to report the end reached);
/// at the output hook also the prerouting base chains other than nat, which a packet leaving on `lo`
/// passes coming back in.
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
    // A nat chain sees only a connection's first pass through the stack: not its return over lo.
    let mut loopback: Vec<(i32, usize, String)> = rs
        .tables
        .iter()
        .enumerate()
        .flat_map(|(i, t)| t.chains.iter().map(move |c| (i, c)))
        .filter_map(|(i, c)| {
            let b = c.base?;
            (hook == Hook::Output && b.hook == Hook::Prerouting && b.kind != ChainType::Nat)
                .then(|| (b.priority, i, c.name.to_string()))
        })
        .collect();
    loopback.sort_by_key(|(priority, i, _)| (*priority, *i));
    Model {
        tables,
        hooks: hooks.into_iter().map(|(_, i, c)| (i, c)).collect(),
        loopback: loopback.into_iter().map(|(_, i, c)| (i, c)).collect(),
        kind_of,
        redirect_chain,
    }
}

/// Walks `packet` through the ruleset (outbound at the output hook and, leaving on lo, back in at
/// prerouting; inbound at prerouting).
pub(crate) fn walk(rs: &Ruleset, packet: &Packet, outbound: bool) -> Result<Outcome, RuleError> {
    let hook = if outbound {
        Hook::Output
    } else {
        Hook::Prerouting
    };
    walk::run(&model(rs, hook), packet)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::connection::{Connection, Direction};
    use crate::nft::model::build;
    use crate::walk::grid;

    #[test]
    fn a_jump_to_a_chain_the_ruleset_does_not_create_is_an_error() {
        let cfg = Config {
            redirect_dns: true,
            dns_servers_v4: vec!["10.96.0.10".parse().expect("ip")],
            ..Config::default()
        };
        let mut rs = build(&cfg);
        // The chain the jump targets goes missing, as it would from a model that forgot to create it.
        let nat = rs
            .tables
            .iter_mut()
            .find(|t| t.id == crate::nft::model::TableId::Nat)
            .expect("nat");
        nat.chains
            .retain(|c| c.name != crate::nft::model::OUTPUT_DNS);
        nat.entries
            .retain(|e| e.chain != crate::nft::model::OUTPUT_DNS);
        let c: Connection = "outbound:udp:10.96.0.10:53".parse().expect("spec");
        let e = walk(&rs, &c.packet(), true).expect_err("dangling jump");
        assert_eq!(
            (e.table.as_str(), e.chain.as_str(), e.rule.as_str()),
            (
                "istio-proxy-nat",
                "istio-output",
                "counter jump istio-output-dns"
            )
        );
        assert!(e.reason.contains("does not create"), "{e:?}");
    }

    /// DNS capture with only IPv6 servers and IPv6 off: Istio's ruleset jumps to a nat chain it never
    /// creates (the kernel refuses it); ours leaves that jump out, and both walks let the DNS query pass.
    #[test]
    fn dns_capture_with_only_ipv6_servers_and_ipv6_off_creates_no_dangling_jump() {
        let cfg = Config {
            redirect_dns: true,
            dns_servers_v6: vec!["fd00::53".parse().expect("ip")],
            ..Config::default()
        };
        let c: Connection = "outbound:udp:10.0.0.5:53".parse().expect("spec");
        let o = walk(&build(&cfg), &c.packet(), true).expect("walks");
        assert_eq!(o.kind, VerdictKind::Bypass);
        let plan = crate::iptables::model::build(&cfg);
        let o = crate::iptables::walk::walk(&plan, &c.packet(), true).expect("walks");
        assert_eq!(o.kind, VerdictKind::Bypass);
    }

    /// Both walks, with each model built once per configuration.
    struct Both {
        iptables: Vec<Model>,
        nft: [Model; 2],
    }

    impl Both {
        fn new(cfg: &Config) -> Both {
            let plan = crate::iptables::model::build(cfg);
            let empty = Vec::new();
            let v6 = plan.v6.as_ref().unwrap_or(&empty);
            let ipt =
                |rules, out| crate::iptables::walk::model(rules, out).expect("iptables model");
            let rs = build(cfg);
            Both {
                iptables: vec![
                    ipt(&plan.v4, true),
                    ipt(&plan.v4, false),
                    ipt(v6, true),
                    ipt(v6, false),
                ],
                nft: [model(&rs, Hook::Output), model(&rs, Hook::Prerouting)],
            }
        }

        fn walk(&self, c: &Connection) -> (Outcome, Outcome) {
            let out = c.direction == Direction::Outbound;
            let i = usize::from(c.is_ipv6()) * 2 + usize::from(!out);
            let p = c.packet();
            let ipt = walk::run(&self.iptables[i], &p).unwrap_or_else(|e| panic!("{c}: {e:?}"));
            let nft = walk::run(&self.nft[usize::from(!out)], &p)
                .unwrap_or_else(|e| panic!("{c}: {e:?}"));
            (ipt, nft)
        }
    }

    /// The two backends model the same Istio behaviour: across the grid of configurations and
    /// connections they agree on the verdict and the port. The one difference is IPv6 with IPv6 off:
    /// iptables then installs no ip6tables rule, while Istio's inet tables still see IPv6 packets.
    #[test]
    fn both_walks_agree_across_the_grid() {
        let conns = grid::connections();
        let mut compared = 0;
        let mut kinds = std::collections::BTreeMap::new();
        for cfg in grid::configs().iter().step_by(2) {
            let both = Both::new(cfg);
            for c in &conns {
                if c.is_ipv6() && !cfg.ipv6 {
                    continue;
                }
                let (ipt, nft) = both.walk(c);
                assert_eq!(
                    (ipt.kind, ipt.port),
                    (nft.kind, nft.port),
                    "{c}\niptables: {ipt:?}\nnftables: {nft:?}\n{cfg:?}"
                );
                *kinds.entry(ipt.kind.as_str()).or_insert(0) += 1;
                compared += 1;
            }
        }
        assert!(compared > 100_000, "{compared}");
        assert_eq!(kinds.len(), 4, "every verdict is reached: {kinds:?}");
    }

    #[test]
    fn ipv6_with_ipv6_off_differs_as_the_kernel_does() {
        let cfg = Config {
            outbound_include: crate::config::OutboundInclude::All,
            ..Config::default()
        };
        let c: Connection = "outbound:tcp:[fd00::5]:443".parse().expect("spec");
        let (ipt, nft) = Both::new(&cfg).walk(&c);
        assert_eq!((ipt.kind, ipt.table), (VerdictKind::Bypass, None));
        assert_eq!((nft.kind, nft.port), (VerdictKind::OutboundProxy, 15001));
        assert_eq!(nft.rule.as_deref(), Some("counter jump istio-redirect"));
    }

    /// Every statement of every grid ruleset: redirects are in chains with a verdict, jumps go to
    /// chains of the table, and the base chains run raw, mangle, nat.
    #[test]
    fn every_ruleset_of_the_grid_is_understood() {
        for cfg in grid::configs() {
            let rs = build(&cfg);
            for t in &rs.tables {
                let wt = walk_table(t);
                for (chain, rules) in &wt.chains {
                    for r in rules {
                        for s in &r.steps {
                            match s {
                                Step::Redirect(_) | Step::Tproxy { .. } => {
                                    assert!(kind_of(chain).is_some(), "{chain}: {}", r.text)
                                }
                                Step::Jump(target) => {
                                    let created = wt
                                        .chains
                                        .iter()
                                        .any(|(n, rs)| n == target && !rs.is_empty());
                                    assert!(created, "{chain}: {} in {cfg:?}", r.text);
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
            for hook in [Hook::Output, Hook::Prerouting] {
                let m = model(&rs, hook);
                let names: Vec<&str> = m
                    .hooks
                    .iter()
                    .map(|(t, _)| m.tables[*t].name.as_str())
                    .collect();
                let order = ["istio-proxy-raw", "istio-proxy-mangle", "istio-proxy-nat"];
                let mut expected: Vec<&str> =
                    order.into_iter().filter(|n| names.contains(n)).collect();
                expected.dedup();
                assert_eq!(names, expected);
                // Coming back in over lo: raw and mangle prerouting, never nat.
                let back: Vec<&str> = m
                    .loopback
                    .iter()
                    .map(|(t, c)| {
                        assert_eq!(c, "prerouting");
                        m.tables[*t].name.as_str()
                    })
                    .collect();
                let expected: Vec<&str> = match hook {
                    Hook::Output => order[..2]
                        .iter()
                        .copied()
                        .filter(|n| {
                            rs.tables.iter().any(|t| {
                                t.id.name() == *n
                                    && t.chains
                                        .iter()
                                        .any(|c| c.base.is_some_and(|b| b.hook == Hook::Prerouting))
                            })
                        })
                        .collect(),
                    Hook::Prerouting => vec![],
                };
                assert_eq!(back, expected);
            }
        }
    }
}
