//! The `nft -f` text of a ruleset: the transaction Istio's nftables backend pipes to `nft -f -`
//! (knftables' `Transaction.String()`, the format of Istio's golden files), then the route actions as
//! `#` comment lines, which `nft -f` ignores.

use std::fmt::Write as _;

use super::model::{ifname_prefix, CtState, Dir, Group, Ip, Op, Rule, Ruleset, Stmt, TableId};
use crate::config::Cidr;
use crate::routes::route_command;

/// One statement in Istio's spelling.
fn stmt(out: &mut String, s: &Stmt) {
    let ne = |neq: bool| if neq { "!= " } else { "" };
    let _ = match s {
        Stmt::Ifname { output, name } => {
            write!(
                out,
                "{} {}",
                if *output { "oifname" } else { "iifname" },
                ifname_text(name)
            )
        }
        Stmt::L4proto(p) => write!(out, "meta l4proto {}", p.as_str()),
        Stmt::Addr { dir, neq, cidr } => write!(
            out,
            "{} {} {}{}",
            if cidr.addr.is_ipv4() { "ip" } else { "ip6" },
            match dir {
                Dir::Source => "saddr",
                Dir::Destination => "daddr",
            },
            ne(*neq),
            cidr_text(cidr)
        ),
        Stmt::Port {
            proto,
            dir,
            neq,
            port,
        } => write!(
            out,
            "{} {} {}{port}",
            proto.as_str(),
            match dir {
                Dir::Source => "sport",
                Dir::Destination => "dport",
            },
            ne(*neq)
        ),
        Stmt::PortNotIn { proto, ports } => {
            let list: Vec<String> = ports.iter().map(u16::to_string).collect();
            write!(out, "{} dport != {{ {} }}", proto.as_str(), list.join(", "))
        }
        Stmt::SkUid { neq, uid, meta } => {
            write!(
                out,
                "{}skuid {}{uid}",
                if *meta { "meta " } else { "" },
                ne(*neq)
            )
        }
        Stmt::SkGid { neq, group, meta } => {
            let g = match group {
                Group::Id(id) => id.to_string(),
                Group::Name(n) => n.clone(),
            };
            write!(
                out,
                "{}skgid {}{g}",
                if *meta { "meta " } else { "" },
                ne(*neq)
            )
        }
        Stmt::Mark { neq, mark } => write!(out, "mark {}{mark}", ne(*neq)),
        Stmt::CtMark(m) => write!(out, "ct mark {m}"),
        Stmt::CtState(CtState::Invalid) => write!(out, "ct state invalid"),
        Stmt::CtState(CtState::RelatedEstablished) => write!(out, "ct state related,established"),
        Stmt::Counter => write!(out, "counter"),
        Stmt::Return => write!(out, "return"),
        Stmt::Jump(c) => write!(out, "jump {c}"),
        Stmt::Accept => write!(out, "accept"),
        Stmt::Drop => write!(out, "drop"),
        Stmt::Redirect(p) => write!(out, "redirect to :{p}"),
        Stmt::Tproxy { ip, port } => write!(
            out,
            "tproxy {} to :{port}",
            match ip {
                Ip::V4 => "ip",
                Ip::V6 => "ip6",
            }
        ),
        Stmt::SetMark(m) => write!(out, "meta mark set {m}"),
        Stmt::CtMarkSetMark => write!(out, "ct mark set mark"),
        Stmt::MarkSetCtMark => write!(out, "meta mark set ct mark"),
        Stmt::CtZoneSet(z) => write!(out, "ct zone set {z}"),
    };
}

/// An interface name as `nft -f` reads it: iptables' `eth+` as nft's wildcard `"eth*"`; a name nft
/// would read as something else (a leading digit, `@`, or all letters like the keywords `tcp` and
/// `return`) quoted; otherwise bare, as Istio's goldens write `eth0`, `not-istio-nic` and `lo`.
fn ifname_text(name: &str) -> String {
    if let Some(prefix) = ifname_prefix(name) {
        return format!("\"{prefix}*\"");
    }
    let plain = name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && (name == "lo" || !name.bytes().all(|b| b.is_ascii_alphabetic()));
    if plain {
        name.to_string()
    } else {
        format!("\"{name}\"")
    }
}

/// A CIDR as Go's `netip.Prefix.String()` prints it; an IPv4-compatible IPv6 address (`::a.b.c.d`)
/// keeps its dotted tail as Istio's goldens show it.
fn cidr_text(c: &Cidr) -> String {
    match c.addr {
        std::net::IpAddr::V6(a) => {
            let s = a.segments();
            if s[..6] == [0; 6] && s[6] != 0 {
                let o = a.octets();
                format!("::{}.{}.{}.{}/{}", o[12], o[13], o[14], o[15], c.len)
            } else {
                c.to_string()
            }
        }
        std::net::IpAddr::V4(_) => c.to_string(),
    }
}

/// The statements of a rule, space-separated.
pub fn rule_text(rule: &Rule) -> String {
    let mut out = String::new();
    for (i, s) in rule.stmts.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        stmt(&mut out, s);
    }
    out
}

/// The transaction text: per table `add table`, `flush table`, its chains and its rule operations.
pub fn transaction(rs: &Ruleset) -> String {
    let mut out = String::new();
    for t in &rs.tables {
        let name = t.id.name();
        let _ = writeln!(out, "add table inet {name}");
        let _ = writeln!(out, "flush table inet {name}");
        for c in &t.chains {
            match c.base {
                Some(b) => {
                    let _ = writeln!(
                        out,
                        "add chain inet {name} {} {{ type {} hook {} priority {} ; }}",
                        c.name,
                        b.kind.as_str(),
                        b.hook.as_str(),
                        b.priority
                    );
                }
                None => {
                    let _ = writeln!(out, "add chain inet {name} {}", c.name);
                }
            }
        }
        for e in &t.entries {
            let _ = match e.op {
                Op::Append => writeln!(
                    out,
                    "add rule inet {name} {} {}",
                    e.chain,
                    rule_text(&e.rule)
                ),
                Op::Insert(i) => writeln!(
                    out,
                    "insert rule inet {name} {} index {i} {}",
                    e.chain,
                    rule_text(&e.rule)
                ),
            };
        }
    }
    out
}

/// `--cleanup-only`'s transaction: `add table` + `delete table` for each of Istio's tables (the add
/// makes the delete succeed when the table is absent), then the policy routing it removes as
/// `# ip ... del` lines (`::6` on `lo` stays).
pub fn cleanup_transaction(rs: &Ruleset) -> String {
    let mut out = String::new();
    for t in TableId::ALL {
        let _ = writeln!(out, "add table inet {}", t.name());
        let _ = writeln!(out, "delete table inet {}", t.name());
    }
    for action in &rs.routes {
        if !matches!(action, crate::routes::RouteAction::AddLoopbackV6Source) {
            let _ = writeln!(out, "# ip {}", action.ip_args("del").join(" "));
        }
    }
    out
}

/// The `--native-nftables --dry-run` output: the transaction, then each route action as a
/// `# ip ...` comment line.
pub fn dry_run(rs: &Ruleset) -> String {
    let mut out = transaction(rs);
    for action in &rs.routes {
        let _ = writeln!(out, "# {}", route_command(action));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::nft::model::build;

    #[test]
    fn ipv4_compatible_addresses_keep_the_dotted_tail() {
        let c = |s: &str| cidr_text(&Cidr::parse(s).expect("cidr"));
        assert_eq!(c("::127.0.0.53/128"), "::127.0.0.53/128");
        assert_eq!(c("::1/128"), "::1/128");
        assert_eq!(c("::6/128"), "::6/128");
        assert_eq!(c("2001:db8::/32"), "2001:db8::/32");
        assert_eq!(c("10.0.0.0/8"), "10.0.0.0/8");
    }

    #[test]
    fn counter_goes_before_the_final_statement() {
        let rs = build(&Config::default());
        let text = transaction(&rs);
        assert!(text.contains(
            "add rule inet istio-proxy-nat istio-redirect meta l4proto tcp counter redirect to :15001\n"
        ));
        assert!(text.contains("add rule inet istio-proxy-nat output counter jump istio-output\n"));
        assert!(
            text.starts_with("add table inet istio-proxy-nat\nflush table inet istio-proxy-nat\n")
        );
    }

    #[test]
    fn interface_names_are_written_as_nft_reads_them() {
        // iptables' `eth+` is nft's wildcard; Istio's verbatim `iifname eth+` is a syntax error to nft.
        assert_eq!(ifname_text("eth+"), "\"eth*\"");
        assert_eq!(ifname_text("kube.v-1+"), "\"kube.v-1*\"");
        // Istio's goldens keep plain names bare.
        for bare in ["eth0", "not-istio-nic", "lo", "a_b", "veth-a.1"] {
            assert_eq!(ifname_text(bare), bare);
        }
        // A leading digit, `@` and keyword-like names are quoted, or nft would refuse them.
        for quoted in ["0eth", "veth@x", "tcp", "return", "eth"] {
            assert_eq!(ifname_text(quoted), format!("\"{quoted}\""));
        }
        let cfg = Config {
            exclude_interfaces: vec!["eth+".into(), "+".into()],
            kube_virt_interfaces: vec!["kv+".into()],
            ..Config::injected()
        };
        let text = transaction(&build(&cfg));
        assert!(
            text.contains(
                "add rule inet istio-proxy-nat prerouting iifname \"eth*\" counter return\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("add rule inet istio-proxy-nat output oifname \"eth*\" counter return\n"),
            "{text}"
        );
        assert!(text.contains("insert rule inet istio-proxy-nat prerouting index 0 iifname \"kv*\" counter jump istio-redirect\n"), "{text}");
        // A bare `+` (every interface in iptables) is a rule without an interface match.
        assert!(
            text.contains("add rule inet istio-proxy-nat prerouting counter return\n"),
            "{text}"
        );
        assert!(!text.contains('+'), "{text}");
    }

    #[test]
    fn cleanup_removes_all_three_tables() {
        let t = cleanup_transaction(&build(&Config::default()));
        assert_eq!(t.lines().count(), 6);
        let tproxy = Config {
            mode: crate::config::InterceptionMode::Tproxy,
            inbound_ports: crate::config::InboundPorts::All,
            ipv6: true,
            ..Config::default()
        };
        let t = cleanup_transaction(&build(&tproxy));
        assert!(
            t.contains("# ip -4 rule del fwmark 1337 lookup 133\n"),
            "{t}"
        );
        assert!(
            t.contains("# ip -6 route del local ::/0 dev lo table 133\n"),
            "{t}"
        );
        assert!(!t.contains("addr"), "{t}");
        assert!(t.contains("delete table inet istio-proxy-raw\n"));
    }
}
