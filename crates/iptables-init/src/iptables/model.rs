//! The iptables rule model: what `iptables-init` wants the kernel to hold, independent of how it is
//! printed or applied.
//!
//! Shared contract between `model` (builds a [`Plan`] from a `Config`), `render` (prints it) and
//! `apply` (installs, checks and removes it).

use crate::config::{
    Config, Family, InboundPorts, InterceptionMode, OutboundInclude, OwnerGroups, DNS_PROXY_PORT,
    OUTBOUND_MARK,
};
use crate::routes::RouteAction;
use crate::steps::Steps;

/// A netfilter table. `Ord` is lexicographic by name, the order tables are rendered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    Filter,
    Mangle,
    Nat,
    Raw,
}

impl Table {
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Mangle => "mangle",
            Table::Nat => "nat",
            Table::Raw => "raw",
        }
    }
}

/// One rule as Istio records it: its table, its chain, and the tokens of the command, starting with
/// `-A CHAIN ...` or `-I CHAIN POS ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub table: Table,
    pub chain: String,
    pub tokens: Vec<String>,
}

/// Everything one run installs: the v4 rules, the v6 rules when IPv6 is on, and the route actions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub v4: Vec<Rule>,
    /// `None` when IPv6 is off: nothing is rendered or applied for IPv6.
    pub v6: Option<Vec<Rule>>,
    pub routes: Vec<RouteAction>,
}

impl Rule {
    /// A rule from its text (`-A CHAIN ...` / `-I CHAIN POS ...`). Every value in the text has been
    /// validated (no whitespace can occur inside a token), so splitting on spaces is exact.
    pub fn new(table: Table, text: &str) -> Rule {
        let tokens: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        let chain = tokens.get(1).cloned().unwrap_or_default();
        Rule {
            table,
            chain,
            tokens,
        }
    }
}

/// `LO`: the loopback destination never captured (the configured CIDR in v4, `::1/128` in v6).
fn loopback(family: Family, cfg: &Config) -> String {
    match family {
        Family::V4 => cfg.loopback_cidr.to_string(),
        Family::V6 => "::1/128".to_string(),
    }
}

/// `SRC`: the inbound passthrough source address of Envoy.
fn passthrough_source(family: Family) -> &'static str {
    match family {
        Family::V4 => "127.0.0.6/32",
        Family::V6 => "::6/128",
    }
}

/// Accumulates the two families' rule lists in generation order.
struct Builder {
    v4: Vec<Rule>,
    v6: Option<Vec<Rule>>,
}

impl Builder {
    fn family(&mut self, family: Family) -> Option<&mut Vec<Rule>> {
        match family {
            Family::V4 => Some(&mut self.v4),
            Family::V6 => self.v6.as_mut(),
        }
    }

    /// A rule for one family (dropped for v6 when IPv6 is off).
    fn one(&mut self, family: Family, table: Table, text: &str) {
        if let Some(list) = self.family(family) {
            list.push(Rule::new(table, text));
        }
    }

    /// A rule for both families ("both" in Istio's rule list).
    fn both(&mut self, table: Table, text: &str) {
        self.one(Family::V4, table, text);
        self.one(Family::V6, table, text);
    }

    /// A "versioned" rule: the same shape in both families, with family-specific addresses.
    fn versioned(&mut self, table: Table, text: impl Fn(Family) -> String) {
        self.one(Family::V4, table, &text(Family::V4));
        self.one(Family::V6, table, &text(Family::V6));
    }
}

/// Builds the rule model for `cfg`, reproducing the rules of Istio's `capture/run.go` in its order (the
/// numbered steps below), and the route actions.
pub fn build(cfg: &Config) -> Plan {
    let mut b = Builder {
        v4: Vec::new(),
        v6: cfg.ipv6.then(Vec::new),
    };
    crate::steps::run(&mut b, cfg);
    Plan {
        v4: b.v4,
        v6: b.v6,
        routes: crate::routes::build(cfg),
    }
}

impl Steps for Builder {
    /// Steps 1 and 2: interfaces left alone (nat, then mangle under TPROXY), and kube-virt interfaces
    /// never captured inbound.
    fn excluded_interfaces(&mut self, cfg: &Config) {
        let b = self;
        let tproxy = cfg.mode == InterceptionMode::Tproxy;
        // 1. Excluded interfaces: nat, then (TPROXY) mangle.
        for i in &cfg.exclude_interfaces {
            b.both(Table::Nat, &format!("-A PREROUTING -i {i} -j RETURN"));
            b.both(Table::Nat, &format!("-A OUTPUT -o {i} -j RETURN"));
        }
        if tproxy {
            for i in &cfg.exclude_interfaces {
                b.both(Table::Mangle, &format!("-A PREROUTING -i {i} -j RETURN"));
                b.both(Table::Mangle, &format!("-A OUTPUT -o {i} -j RETURN"));
            }
        }
        // 2. Kube-virt interfaces are never captured inbound.
        for i in &cfg.kube_virt_interfaces {
            b.both(Table::Nat, &format!("-I PREROUTING 1 -i {i} -j RETURN"));
        }
    }

    /// Step 3: packets in conntrack state INVALID are dropped (`--drop-invalid`).
    fn drop_invalid(&mut self, cfg: &Config) {
        let b = self;
        // 3. Drop invalid.
        if cfg.drop_invalid {
            b.both(
                Table::Mangle,
                "-A PREROUTING -m conntrack --ctstate INVALID -j ISTIO_DROP",
            );
            b.both(Table::Mangle, "-A ISTIO_DROP -j DROP");
        }
    }

    /// Steps 4 to 6: the tunnel port is never captured, and the redirect chains every capture jumps to.
    fn shared_chains(&mut self, cfg: &Config) {
        let b = self;
        let p = cfg.proxy_port;
        let z = cfg.inbound_capture_port;
        let t = cfg.inbound_tunnel_port;
        // 4.-6. The tunnel port and the shared redirect chains.
        b.both(
            Table::Nat,
            &format!("-A ISTIO_INBOUND -p tcp --dport {t} -j RETURN"),
        );
        b.both(
            Table::Nat,
            &format!("-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports {p}"),
        );
        b.both(
            Table::Nat,
            &format!("-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports {z}"),
        );
    }

    /// Step 7: inbound capture, through nat REDIRECT or mangle TPROXY.
    fn inbound_capture(&mut self, cfg: &Config) {
        let b = self;
        let tproxy = cfg.mode == InterceptionMode::Tproxy;
        let z = cfg.inbound_capture_port;
        let m = cfg.tproxy_mark;
        // 7. Inbound capture.
        if cfg.inbound_ports != InboundPorts::None {
            let table = if tproxy { Table::Mangle } else { Table::Nat };
            if tproxy {
                b.both(
                    Table::Mangle,
                    &format!("-A ISTIO_DIVERT -j MARK --set-mark {m}"),
                );
                b.both(Table::Mangle, "-A ISTIO_DIVERT -j ACCEPT");
                b.versioned(Table::Mangle, |f| {
                    format!(
                        "-A ISTIO_TPROXY ! -d {} -p tcp -j TPROXY --tproxy-mark {m}/0xffffffff --on-port {z}",
                        loopback(f, cfg)
                    )
                });
            }
            b.both(table, "-A PREROUTING -p tcp -j ISTIO_INBOUND");
            match &cfg.inbound_ports {
                InboundPorts::All => {
                    for x in &cfg.inbound_exclude_ports {
                        b.both(
                            table,
                            &format!("-A ISTIO_INBOUND -p tcp --dport {x} -j RETURN"),
                        );
                    }
                    if tproxy {
                        b.both(
                            Table::Mangle,
                            "-A ISTIO_INBOUND -p tcp -m conntrack --ctstate RELATED,ESTABLISHED -j ISTIO_DIVERT",
                        );
                        b.both(Table::Mangle, "-A ISTIO_INBOUND -p tcp -j ISTIO_TPROXY");
                    } else {
                        b.both(Table::Nat, "-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT");
                    }
                }
                InboundPorts::List(ports) => {
                    for x in ports {
                        if tproxy {
                            b.both(
                                Table::Mangle,
                                &format!(
                                    "-A ISTIO_INBOUND -p tcp --dport {x} -m conntrack --ctstate RELATED,ESTABLISHED -j ISTIO_DIVERT"
                                ),
                            );
                            b.both(
                                Table::Mangle,
                                &format!("-A ISTIO_INBOUND -p tcp --dport {x} -j ISTIO_TPROXY"),
                            );
                        } else {
                            b.both(
                                Table::Nat,
                                &format!(
                                    "-A ISTIO_INBOUND -p tcp --dport {x} -j ISTIO_IN_REDIRECT"
                                ),
                            );
                        }
                    }
                }
                InboundPorts::None => {}
            }
        }
    }

    /// Steps 8 to 10: everything leaving goes through ISTIO_OUTPUT, minus the excluded ports and Envoy's
    /// inbound passthrough.
    fn outbound_entry(&mut self, cfg: &Config) {
        let b = self;
        // 8. Every protocol goes through ISTIO_OUTPUT (UDP must reach the DNS rules).
        b.both(Table::Nat, "-A OUTPUT -j ISTIO_OUTPUT");
        // 9. Outbound port excludes.
        for x in &cfg.outbound_exclude_ports {
            b.both(
                Table::Nat,
                &format!("-A ISTIO_OUTPUT -p tcp --dport {x} -j RETURN"),
            );
            b.both(
                Table::Nat,
                &format!("-A ISTIO_OUTPUT -p udp --dport {x} -j RETURN"),
            );
        }
        // 10. Envoy's inbound passthrough source.
        b.versioned(Table::Nat, |f| {
            format!(
                "-A ISTIO_OUTPUT -o lo -s {} -j RETURN",
                passthrough_source(f)
            )
        });
    }

    /// Steps 11 and 12: the proxy's own traffic (by uid, then gid) is not captured, except to itself over
    /// loopback.
    fn proxy_owners(&mut self, cfg: &Config) {
        let b = self;
        let t = cfg.inbound_tunnel_port;
        let dns = cfg.dns_capture();
        // 11./12. Proxy uids, then gids.
        let include_loopback = match &cfg.outbound_include {
            OutboundInclude::All => false,
            OutboundInclude::List(list) => list.has_loopback(),
        };
        let lo_return = |owner: &str, id: u32| {
            if dns {
                format!("-A ISTIO_OUTPUT -o lo -p tcp ! --dport 53 -m owner ! --{owner}-owner {id} -j RETURN")
            } else {
                format!("-A ISTIO_OUTPUT -o lo -m owner ! --{owner}-owner {id} -j RETURN")
            }
        };
        for &u in &cfg.proxy_uids {
            b.versioned(Table::Nat, |f| {
                let lo = loopback(f, cfg);
                if dns {
                    format!("-A ISTIO_OUTPUT -o lo ! -d {lo} -p tcp -m multiport ! --dports 53,{t} -m owner --uid-owner {u} -j ISTIO_IN_REDIRECT")
                } else {
                    format!("-A ISTIO_OUTPUT -o lo ! -d {lo} -p tcp ! --dport {t} -m owner --uid-owner {u} -j ISTIO_IN_REDIRECT")
                }
            });
            if !include_loopback {
                b.both(Table::Nat, &lo_return("uid", u));
            }
            b.both(
                Table::Nat,
                &format!("-A ISTIO_OUTPUT -m owner --uid-owner {u} -j RETURN"),
            );
        }
        for &g in &cfg.proxy_gids {
            // Always the non-DNS form here, as Istio does (an asymmetry with the uid rule).
            b.versioned(Table::Nat, |f| {
                format!(
                    "-A ISTIO_OUTPUT -o lo ! -d {} -p tcp ! --dport {t} -m owner --gid-owner {g} -j ISTIO_IN_REDIRECT",
                    loopback(f, cfg)
                )
            });
            if !include_loopback {
                b.both(Table::Nat, &lo_return("gid", g));
            }
            b.both(
                Table::Nat,
                &format!("-A ISTIO_OUTPUT -m owner --gid-owner {g} -j RETURN"),
            );
        }
    }

    /// Step 13: the owner-group filter.
    fn owner_groups(&mut self, cfg: &Config) {
        let b = self;
        // 13. Owner groups.
        match &cfg.owner_groups {
            OwnerGroups::AllExcept(groups) => {
                for g in groups {
                    b.both(
                        Table::Nat,
                        &format!("-A ISTIO_OUTPUT -m owner --gid-owner {g} -j RETURN"),
                    );
                }
            }
            OwnerGroups::Only(groups) => {
                let mut text = String::from("-A ISTIO_OUTPUT");
                for g in groups {
                    text.push_str(&format!(" -m owner ! --gid-owner {g}"));
                }
                text.push_str(" -j RETURN");
                b.both(Table::Nat, &text);
            }
        }
    }

    /// Step 14: DNS capture to the agent, with conntrack zones.
    fn dns_capture(&mut self, cfg: &Config) {
        let b = self;
        let all_dns = cfg.capture_all_dns;
        // 14. DNS capture.
        let s4 = &cfg.dns_servers_v4;
        let s6 = &cfg.dns_servers_v6;
        b.both(Table::Raw, "-A OUTPUT -j ISTIO_OUTPUT_DNS");
        if all_dns || !s4.is_empty() {
            b.one(
                Family::V4,
                Table::Nat,
                "-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS",
            );
        }
        if all_dns || !s6.is_empty() {
            b.one(
                Family::V6,
                Table::Nat,
                "-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS",
            );
        }
        for (proto, to) in [("tcp", "--to-ports"), ("udp", "--to-port")] {
            if all_dns {
                b.both(
                    Table::Nat,
                    &format!("-A ISTIO_OUTPUT_DNS -p {proto} --dport 53 -j REDIRECT {to} {DNS_PROXY_PORT}"),
                );
            } else {
                for s in s4 {
                    b.one(
                        Family::V4,
                        Table::Nat,
                        &format!("-A ISTIO_OUTPUT_DNS -p {proto} --dport 53 -d {s}/32 -j REDIRECT {to} {DNS_PROXY_PORT}"),
                    );
                }
                for s in s6 {
                    b.one(
                        Family::V6,
                        Table::Nat,
                        &format!("-A ISTIO_OUTPUT_DNS -p {proto} --dport 53 -d {s}/128 -j REDIRECT {to} {DNS_PROXY_PORT}"),
                    );
                }
            }
        }
        // Conntrack zones keep the agent's upstream flows (zone 1) apart from app-agent flows (zone 2).
        for (owner, ids) in [("uid", &cfg.proxy_uids), ("gid", &cfg.proxy_gids)] {
            for id in ids {
                b.both(
                    Table::Raw,
                    &format!("-A ISTIO_OUTPUT_DNS -p udp --dport 53 -m owner --{owner}-owner {id} -j CT --zone 1"),
                );
                b.both(
                    Table::Raw,
                    &format!("-A ISTIO_OUTPUT_DNS -p udp --sport {DNS_PROXY_PORT} -m owner --{owner}-owner {id} -j CT --zone 2"),
                );
            }
        }
        if all_dns {
            b.both(Table::Raw, "-A PREROUTING -j ISTIO_INBOUND");
            b.both(
                Table::Raw,
                "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j CT --zone 2",
            );
            b.both(
                Table::Raw,
                "-A ISTIO_INBOUND -p udp --sport 53 -j CT --zone 1",
            );
        } else {
            let v4: Vec<String> = s4.iter().map(|s| format!("{s}/32")).collect();
            let v6: Vec<String> = s6.iter().map(|s| format!("{s}/128")).collect();
            for (family, servers) in [(Family::V4, v4), (Family::V6, v6)] {
                if servers.is_empty() {
                    continue;
                }
                b.one(family, Table::Raw, "-A PREROUTING -j ISTIO_INBOUND");
                for s in servers {
                    b.one(
                        family,
                        Table::Raw,
                        &format!("-A ISTIO_OUTPUT_DNS -p udp --dport 53 -d {s} -j CT --zone 2"),
                    );
                    b.one(
                        family,
                        Table::Raw,
                        &format!("-A ISTIO_INBOUND -p udp --sport 53 -s {s} -j CT --zone 1"),
                    );
                }
            }
        }
    }

    /// Steps 15 to 17: which destinations outbound capture leaves alone (loopback, the excluded CIDRs) and
    /// which it always sends to Envoy (the always-captured ports).
    fn outbound_destinations(&mut self, cfg: &Config) {
        let b = self;
        // 15. Localhost is never captured.
        b.versioned(Table::Nat, |f| {
            format!("-A ISTIO_OUTPUT -d {} -j RETURN", loopback(f, cfg))
        });
        // 16. Excluded CIDRs.
        for c in &cfg.outbound_exclude.v4 {
            b.one(
                Family::V4,
                Table::Nat,
                &format!("-A ISTIO_OUTPUT -d {c} -j RETURN"),
            );
        }
        for c in &cfg.outbound_exclude.v6 {
            b.one(
                Family::V6,
                Table::Nat,
                &format!("-A ISTIO_OUTPUT -d {c} -j RETURN"),
            );
        }
        // 17. Outbound ports always captured.
        for x in &cfg.outbound_ports {
            b.both(
                Table::Nat,
                &format!("-A ISTIO_OUTPUT -p tcp --dport {x} -j ISTIO_REDIRECT"),
            );
        }
    }

    /// Step 18: the included destinations go to Envoy, from the pod and from kube-virt interfaces.
    fn outbound_include(&mut self, cfg: &Config) {
        let b = self;
        // 18. Outbound include, v4 then v6.
        for family in [Family::V4, Family::V6] {
            match &cfg.outbound_include {
                OutboundInclude::All => {
                    b.one(family, Table::Nat, "-A ISTIO_OUTPUT -j ISTIO_REDIRECT");
                    for i in &cfg.kube_virt_interfaces {
                        b.one(
                            family,
                            Table::Nat,
                            &format!("-I PREROUTING 1 -i {i} -j ISTIO_REDIRECT"),
                        );
                    }
                }
                OutboundInclude::List(list) => {
                    let cidrs = match family {
                        Family::V4 => &list.v4,
                        Family::V6 => &list.v6,
                    };
                    for c in cidrs {
                        for i in &cfg.kube_virt_interfaces {
                            b.one(
                                family,
                                Table::Nat,
                                &format!("-I PREROUTING 1 -i {i} -d {c} -j ISTIO_REDIRECT"),
                            );
                        }
                        b.one(
                            family,
                            Table::Nat,
                            &format!("-A ISTIO_OUTPUT -d {c} -j ISTIO_REDIRECT"),
                        );
                    }
                }
            }
        }
    }

    /// Step 19: TPROXY marks, even with no inbound ports.
    fn tproxy_marks(&mut self, cfg: &Config) {
        let b = self;
        let m = cfg.tproxy_mark;
        // 19. TPROXY marks, even with no inbound ports.
        b.both(
            Table::Mangle,
            &format!("-A PREROUTING -p tcp -m mark --mark {m} -j CONNMARK --save-mark"),
        );
        b.both(
            Table::Mangle,
            &format!("-A OUTPUT -p tcp -o lo -m mark --mark {m} -j RETURN"),
        );
        for (owner, ids) in [("uid", &cfg.proxy_uids), ("gid", &cfg.proxy_gids)] {
            for id in ids {
                b.versioned(Table::Mangle, |f| {
                    format!(
                        "-A OUTPUT ! -d {} -p tcp -o lo -m owner --{owner}-owner {id} -j MARK --set-mark {OUTBOUND_MARK}",
                        loopback(f, cfg)
                    )
                });
            }
        }
        b.both(
            Table::Mangle,
            &format!("-A OUTPUT -p tcp -m connmark --mark {m} -j CONNMARK --restore-mark"),
        );
        b.both(
            Table::Mangle,
            &format!("-I ISTIO_INBOUND 1 -p tcp -m mark --mark {m} -j RETURN"),
        );
        b.versioned(Table::Mangle, |f| {
            format!(
                "-I ISTIO_INBOUND 2 -p tcp -s {} -i lo -j RETURN",
                passthrough_source(f)
            )
        });
        b.both(
            Table::Mangle,
            &format!("-I ISTIO_INBOUND 3 -p tcp -i lo -m mark ! --mark {OUTBOUND_MARK} -j RETURN"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Cidr, CidrList};
    use crate::iptables::render;

    /// Rule texts of one table, in generation order.
    fn table(rules: &[Rule], t: Table) -> Vec<String> {
        rules
            .iter()
            .filter(|r| r.table == t)
            .map(|r| r.tokens.join(" "))
            .collect()
    }

    /// Asserts that `next` come right after the rule `anchor`, in order.
    fn assert_follows(rules: &[String], anchor: &str, next: &[&str]) {
        let at = rules
            .iter()
            .position(|r| r == anchor)
            .unwrap_or_else(|| panic!("no {anchor:?} in {rules:#?}"));
        let after: Vec<&str> = rules[at + 1..]
            .iter()
            .take(next.len())
            .map(String::as_str)
            .collect();
        assert_eq!(after, next, "after {anchor:?}");
    }

    fn v6(plan: &Plan) -> &[Rule] {
        plan.v6.as_deref().expect("IPv6 rules")
    }

    fn cidr(s: &str) -> Cidr {
        Cidr::parse(s).expect("cidr")
    }

    /// The configuration Istio's injection template gives `istio-init`, compared as text with the
    /// restore input Istio's rules make of it.
    #[test]
    fn injected_default_matches_the_worked_example() {
        let cfg = Config::injected();
        let plan = build(&cfg);
        assert_eq!(plan.v6, None);
        assert!(plan.routes.is_empty());
        let expected = "\
* nat
-N ISTIO_INBOUND
-N ISTIO_REDIRECT
-N ISTIO_IN_REDIRECT
-N ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A ISTIO_INBOUND -p tcp --dport 15090 -j RETURN
-A ISTIO_INBOUND -p tcp --dport 15021 -j RETURN
-A ISTIO_INBOUND -p tcp --dport 15020 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A OUTPUT -j ISTIO_OUTPUT
-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN
-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
COMMIT
";
        assert_eq!(render::restore_input(&plan.v4), expected);
    }

    #[test]
    fn outbound_port_excludes_come_right_after_the_output_jump() {
        let cfg = Config {
            outbound_exclude_ports: vec![7777, 8888],
            ..Config::default()
        };
        let nat = table(&build(&cfg).v4, Table::Nat);
        assert_follows(
            &nat,
            "-A OUTPUT -j ISTIO_OUTPUT",
            &[
                "-A ISTIO_OUTPUT -p tcp --dport 7777 -j RETURN",
                "-A ISTIO_OUTPUT -p udp --dport 7777 -j RETURN",
                "-A ISTIO_OUTPUT -p tcp --dport 8888 -j RETURN",
                "-A ISTIO_OUTPUT -p udp --dport 8888 -j RETURN",
                "-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN",
            ],
        );
    }

    #[test]
    fn inbound_excludes_apply_only_with_wildcard_inbound() {
        let listed = Config {
            inbound_ports: InboundPorts::List(vec![80]),
            inbound_exclude_ports: vec![9090],
            ..Config::default()
        };
        assert!(!table(&build(&listed).v4, Table::Nat)
            .iter()
            .any(|r| r.contains("9090")));
        let tproxy_all = Config {
            mode: InterceptionMode::Tproxy,
            inbound_ports: InboundPorts::All,
            inbound_exclude_ports: vec![9090],
            ..Config::default()
        };
        let mangle = table(&build(&tproxy_all).v4, Table::Mangle);
        assert_follows(
            &mangle,
            "-A PREROUTING -p tcp -j ISTIO_INBOUND",
            &[
                "-A ISTIO_INBOUND -p tcp --dport 9090 -j RETURN",
                "-A ISTIO_INBOUND -p tcp -m conntrack --ctstate RELATED,ESTABLISHED -j ISTIO_DIVERT",
            ],
        );
    }

    #[test]
    fn capture_all_dns_in_both_families() {
        let cfg = Config {
            redirect_dns: true,
            capture_all_dns: true,
            ipv6: true,
            ..Config::default()
        };
        let plan = build(&cfg);
        for rules in [&plan.v4[..], v6(&plan)] {
            let nat = table(rules, Table::Nat);
            assert!(nat.contains(&"-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS".to_string()));
            assert!(nat.contains(
                &"-A ISTIO_OUTPUT_DNS -p tcp --dport 53 -j REDIRECT --to-ports 15053".to_string()
            ));
            assert!(nat.contains(
                &"-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j REDIRECT --to-port 15053".to_string()
            ));
            assert!(nat
                .iter()
                .any(|r| r.contains("-m multiport ! --dports 53,15008 -m owner --uid-owner 1337")));
            assert_eq!(
                table(rules, Table::Raw),
                [
                    "-A OUTPUT -j ISTIO_OUTPUT_DNS",
                    "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -m owner --uid-owner 1337 -j CT --zone 1",
                    "-A ISTIO_OUTPUT_DNS -p udp --sport 15053 -m owner --uid-owner 1337 -j CT --zone 2",
                    "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -m owner --gid-owner 1337 -j CT --zone 1",
                    "-A ISTIO_OUTPUT_DNS -p udp --sport 15053 -m owner --gid-owner 1337 -j CT --zone 2",
                    "-A PREROUTING -j ISTIO_INBOUND",
                    "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j CT --zone 2",
                    "-A ISTIO_INBOUND -p udp --sport 53 -j CT --zone 1",
                ]
            );
        }
    }

    #[test]
    fn ipv6_only_dns_server() {
        let cfg = Config {
            redirect_dns: true,
            dns_servers_v6: vec!["fd00::53".parse().expect("ip")],
            ipv6: true,
            ..Config::default()
        };
        let plan = build(&cfg);
        let nat4 = table(&plan.v4, Table::Nat);
        // DNS is on (multiport form), but v4 has no server: no nat jump to the DNS chain in v4 ...
        assert!(nat4.iter().any(|r| r.contains("! --dports 53,15008")));
        assert!(!nat4.iter().any(|r| r.contains("ISTIO_OUTPUT_DNS")));
        // ... while raw OUTPUT still jumps to it (both families) with the owner CT zones.
        let raw4 = table(&plan.v4, Table::Raw);
        assert_eq!(raw4.len(), 5);
        assert_eq!(raw4[0], "-A OUTPUT -j ISTIO_OUTPUT_DNS");
        let nat6 = table(v6(&plan), Table::Nat);
        assert!(nat6.contains(&"-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS".to_string()));
        assert!(nat6.contains(
            &"-A ISTIO_OUTPUT_DNS -p tcp --dport 53 -d fd00::53/128 -j REDIRECT --to-ports 15053"
                .to_string()
        ));
        assert!(nat6.contains(
            &"-A ISTIO_OUTPUT_DNS -p udp --dport 53 -d fd00::53/128 -j REDIRECT --to-port 15053"
                .to_string()
        ));
        assert_eq!(
            table(v6(&plan), Table::Raw)[5..],
            [
                "-A PREROUTING -j ISTIO_INBOUND",
                "-A ISTIO_OUTPUT_DNS -p udp --dport 53 -d fd00::53/128 -j CT --zone 2",
                "-A ISTIO_INBOUND -p udp --sport 53 -s fd00::53/128 -j CT --zone 1",
            ]
        );
        // With IPv6 off, the v6 server still turns DNS capture on, and v4 stays as above.
        let off = build(&Config { ipv6: false, ..cfg });
        assert_eq!(off.v4, plan.v4);
        assert_eq!(off.v6, None);
    }

    #[test]
    fn exclude_interfaces_with_kube_virt_interfaces() {
        let cfg = Config {
            exclude_interfaces: vec!["ex0".into()],
            kube_virt_interfaces: vec!["kv1".into(), "kv2".into()],
            outbound_include: OutboundInclude::List(CidrList {
                v4: vec![cidr("10.0.0.0/8")],
                v6: vec![],
            }),
            ..Config::default()
        };
        let nat = table(&build(&cfg).v4, Table::Nat);
        let pre: Vec<&String> = nat.iter().filter(|r| r.contains(" PREROUTING ")).collect();
        assert_eq!(
            pre,
            [
                "-A PREROUTING -i ex0 -j RETURN",
                "-I PREROUTING 1 -i kv1 -j RETURN",
                "-I PREROUTING 1 -i kv2 -j RETURN",
                "-I PREROUTING 1 -i kv1 -d 10.0.0.0/8 -j ISTIO_REDIRECT",
                "-I PREROUTING 1 -i kv2 -d 10.0.0.0/8 -j ISTIO_REDIRECT",
            ]
        );
        assert_eq!(nat[1], "-A OUTPUT -o ex0 -j RETURN");
    }

    #[test]
    fn drop_invalid_with_tproxy() {
        let cfg = Config {
            drop_invalid: true,
            mode: InterceptionMode::Tproxy,
            inbound_ports: InboundPorts::List(vec![8080]),
            exclude_interfaces: vec!["ex0".into()],
            ..Config::default()
        };
        let plan = build(&cfg);
        let mangle = table(&plan.v4, Table::Mangle);
        assert_eq!(
            mangle[..8],
            [
                "-A PREROUTING -i ex0 -j RETURN",
                "-A OUTPUT -o ex0 -j RETURN",
                "-A PREROUTING -m conntrack --ctstate INVALID -j ISTIO_DROP",
                "-A ISTIO_DROP -j DROP",
                "-A ISTIO_DIVERT -j MARK --set-mark 1337",
                "-A ISTIO_DIVERT -j ACCEPT",
                "-A ISTIO_TPROXY ! -d 127.0.0.1/32 -p tcp -j TPROXY --tproxy-mark 1337/0xffffffff --on-port 15006",
                "-A PREROUTING -p tcp -j ISTIO_INBOUND",
            ]
        );
        assert_eq!(
            mangle[8..10],
            [
                "-A ISTIO_INBOUND -p tcp --dport 8080 -m conntrack --ctstate RELATED,ESTABLISHED -j ISTIO_DIVERT",
                "-A ISTIO_INBOUND -p tcp --dport 8080 -j ISTIO_TPROXY",
            ]
        );
        let text = render::restore_input(&plan.v4);
        assert!(
            text.starts_with(
                "* mangle\n-N ISTIO_DROP\n-N ISTIO_DIVERT\n-N ISTIO_TPROXY\n-N ISTIO_INBOUND\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn tproxy_routes_and_ipv6_loopback_source() {
        let tproxy = Config {
            mode: InterceptionMode::Tproxy,
            inbound_ports: InboundPorts::All,
            tproxy_mark: 7,
            tproxy_route_table: 100,
            ipv6: true,
            ..Config::default()
        };
        assert_eq!(
            build(&tproxy).routes,
            [
                RouteAction::AddLoopbackV6Source,
                RouteAction::AddFwmarkRule {
                    family: Family::V4,
                    mark: 7,
                    table: 100
                },
                RouteAction::AddFwmarkRule {
                    family: Family::V6,
                    mark: 7,
                    table: 100
                },
                RouteAction::AddLocalRoute {
                    family: Family::V4,
                    table: 100
                },
                RouteAction::AddLocalRoute {
                    family: Family::V6,
                    table: 100
                },
            ]
        );
        // TPROXY without inbound ports: no routes, but the mark rules are still there.
        let no_inbound = Config {
            inbound_ports: InboundPorts::None,
            ipv6: false,
            ..tproxy.clone()
        };
        let plan = build(&no_inbound);
        assert!(plan.routes.is_empty());
        let mangle = table(&plan.v4, Table::Mangle);
        assert_eq!(
            mangle[0],
            "-A PREROUTING -p tcp -m mark --mark 7 -j CONNMARK --save-mark"
        );
        assert!(
            mangle.contains(&"-I ISTIO_INBOUND 1 -p tcp -m mark --mark 7 -j RETURN".to_string())
        );
        // REDIRECT with IPv6: only the ::6 address.
        let redirect6 = Config {
            ipv6: true,
            ..Config::default()
        };
        assert_eq!(build(&redirect6).routes, [RouteAction::AddLoopbackV6Source]);
    }

    #[test]
    fn loopback_include_cidr_drops_the_non_proxy_loopback_return_in_both_families() {
        let cfg = Config {
            outbound_include: OutboundInclude::List(CidrList {
                v4: vec![],
                v6: vec![cidr("::1/128")],
            }),
            ipv6: true,
            ..Config::default()
        };
        let plan = build(&cfg);
        for rules in [&plan.v4[..], v6(&plan)] {
            assert!(!table(rules, Table::Nat)
                .iter()
                .any(|r| r.contains("-o lo -m owner !")));
        }
        assert!(table(v6(&plan), Table::Nat)
            .contains(&"-A ISTIO_OUTPUT -d ::1/128 -j ISTIO_REDIRECT".to_string()));
    }

    #[test]
    fn owner_group_filters() {
        let only_none = Config {
            owner_groups: OwnerGroups::Only(vec![]),
            ..Config::default()
        };
        let nat = table(&build(&only_none).v4, Table::Nat);
        assert!(nat.contains(&"-A ISTIO_OUTPUT -j RETURN".to_string()));
        let except = Config {
            owner_groups: OwnerGroups::AllExcept(vec!["java".into(), "202".into()]),
            ..Config::default()
        };
        let nat = table(&build(&except).v4, Table::Nat);
        assert_follows(
            &nat,
            "-A ISTIO_OUTPUT -m owner --gid-owner java -j RETURN",
            &[
                "-A ISTIO_OUTPUT -m owner --gid-owner 202 -j RETURN",
                "-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN",
            ],
        );
    }

    #[test]
    fn custom_loopback_cidr_and_ports() {
        let cfg = Config {
            loopback_cidr: cidr("127.0.0.0/8"),
            proxy_port: 1,
            inbound_capture_port: 2,
            inbound_tunnel_port: 3,
            outbound_ports: vec![4],
            outbound_exclude: CidrList {
                v4: vec![cidr("10.1.0.0/16")],
                v6: vec![cidr("fd00::/8")],
            },
            ipv6: true,
            ..Config::default()
        };
        let plan = build(&cfg);
        let nat4 = table(&plan.v4, Table::Nat);
        assert!(nat4.contains(&"-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 1".to_string()));
        assert!(nat4.contains(&"-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 2".to_string()));
        assert!(nat4.contains(&"-A ISTIO_INBOUND -p tcp --dport 3 -j RETURN".to_string()));
        let n = nat4.len();
        assert_eq!(
            nat4[n - 3..],
            [
                "-A ISTIO_OUTPUT -d 127.0.0.0/8 -j RETURN",
                "-A ISTIO_OUTPUT -d 10.1.0.0/16 -j RETURN",
                "-A ISTIO_OUTPUT -p tcp --dport 4 -j ISTIO_REDIRECT",
            ]
        );
        let nat6 = table(v6(&plan), Table::Nat);
        let n = nat6.len();
        assert_eq!(
            nat6[n - 3..],
            [
                "-A ISTIO_OUTPUT -d ::1/128 -j RETURN",
                "-A ISTIO_OUTPUT -d fd00::/8 -j RETURN",
                "-A ISTIO_OUTPUT -p tcp --dport 4 -j ISTIO_REDIRECT",
            ]
        );
    }
}
