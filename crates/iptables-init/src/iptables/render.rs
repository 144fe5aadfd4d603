//! Rendering the rule model as `iptables-restore` input, exactly as Istio's
//! `builder` package does.

use std::fmt::Write as _;

use super::model::{Plan, Rule, Table};
use crate::routes::route_command;

/// Chains that iptables provides (or targets that are not chains); never declared with `-N`.
const BUILT_IN: &[&str] = &[
    "INPUT",
    "OUTPUT",
    "FORWARD",
    "PREROUTING",
    "POSTROUTING",
    "ACCEPT",
    "RETURN",
    "DROP",
];

fn is_built_in(chain: &str) -> bool {
    BUILT_IN.contains(&chain)
}

/// The tables in the order they are rendered (lexicographic, as Istio's builder).
const TABLES: [Table; 4] = [Table::Filter, Table::Mangle, Table::Nat, Table::Raw];

fn table_index(table: Table) -> usize {
    TABLES.iter().position(|t| *t == table).unwrap_or(0)
}

/// Renders one family's rules as `iptables-restore --noflush` input: tables in lexicographic order, each
/// `* <table>`, its `-N` declarations (in first-use order, then jump targets), its rules, `COMMIT`.
pub fn restore_input(rules: &[Rule]) -> String {
    // Per table, the declarations then the rules, written straight into text. A plan has a few dozen
    // rules and chains, so a linear `seen` list is cheaper than a hash set (whose first use also asks the
    // kernel for random keys): this runs on the exec path of every init container.
    let mut texts: [String; 4] = Default::default();
    let mut seen: Vec<(Table, &str)> = Vec::with_capacity(16);
    fn declare<'a>(
        seen: &mut Vec<(Table, &'a str)>,
        texts: &mut [String; 4],
        table: Table,
        chain: &'a str,
    ) {
        if seen.contains(&(table, chain)) {
            return;
        }
        seen.push((table, chain));
        if !is_built_in(chain) {
            let text = &mut texts[table_index(table)];
            text.push_str("-N ");
            text.push_str(chain);
            text.push('\n');
        }
    }

    // Declarations: first the chains rules are written to, then chains only jumped to.
    for rule in rules {
        declare(&mut seen, &mut texts, rule.table, rule.chain.as_str());
    }
    for rule in rules {
        let n = rule.tokens.len();
        if n >= 2 && rule.tokens[n - 2] == "-j" {
            declare(
                &mut seen,
                &mut texts,
                rule.table,
                rule.tokens[n - 1].as_str(),
            );
        }
    }
    for rule in rules {
        let text = &mut texts[table_index(rule.table)];
        for (i, token) in rule.tokens.iter().enumerate() {
            if i > 0 {
                text.push(' ');
            }
            text.push_str(token);
        }
        text.push('\n');
    }

    let len = texts.iter().map(|t| t.len() + 16).sum();
    let mut out = String::with_capacity(len);
    for (table, text) in TABLES.iter().zip(&texts) {
        if text.is_empty() {
            continue;
        }
        let _ = writeln!(out, "* {}", table.as_str());
        out.push_str(text);
        out.push_str("COMMIT\n");
    }
    out
}

/// The line that separates the IPv4 and IPv6 parts of `--dry-run` output.
pub const IP6TABLES_MARKER: &str = "# ip6tables-restore";

/// The `--dry-run` output: the IPv4 restore input, then (IPv6 on) the [`IP6TABLES_MARKER`] line and the
/// IPv6 restore input, then each route action as a `# ip ...` comment line. Both restore tools ignore
/// `#` lines, so each part can be fed to them as printed.
pub fn dry_run(plan: &Plan) -> String {
    let mut out = restore_input(&plan.v4);
    if let Some(v6) = &plan.v6 {
        out.push_str(IP6TABLES_MARKER);
        out.push('\n');
        out.push_str(&restore_input(v6));
    }
    for action in &plan.routes {
        let _ = writeln!(out, "# {}", route_command(action));
    }
    out
}

/// What Istio's recording stub (`dependencies/stub.go`) records for a `--dry-run` apply, which is also
/// the format of Istio's golden files: the state checks `iptables-save` and `ip6tables-save`, the IPv4 restore input,
/// the IPv6 restore input when IPv6 is on, then the final-state dumps (`ip6tables-save` only with IPv6).
/// Written to `DRY_RUN_FILE_PATH`, so a run can be diffed against Istio's goldens or against a
/// `pilot-agent istio-iptables --dry-run` of the same configuration. Route actions are not commands the
/// stub records on a dry run, so they are not in it.
pub fn dry_run_record(plan: &Plan) -> String {
    let mut out = String::from("iptables-save\nip6tables-save\n");
    out.push_str(&restore_input(&plan.v4));
    if let Some(v6) = &plan.v6 {
        out.push_str(&restore_input(v6));
    }
    out.push_str("iptables-save\n");
    if plan.v6.is_some() {
        out.push_str("ip6tables-save\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, InboundPorts, InterceptionMode};
    use crate::iptables::model;

    #[test]
    fn dry_run_record_is_istios_stub_format() {
        let v4_only = model::build(&Config::default());
        let text = dry_run_record(&v4_only);
        assert!(
            text.starts_with("iptables-save\nip6tables-save\n* nat\n"),
            "{text}"
        );
        assert!(text.ends_with("COMMIT\niptables-save\n"), "{text}");
        assert_eq!(text.matches("ip6tables-save").count(), 1);
        let dual = model::build(&Config {
            ipv6: true,
            mode: InterceptionMode::Tproxy,
            ..Config::default()
        });
        let text = dry_run_record(&dual);
        let v4 = restore_input(&dual.v4);
        let v6 = restore_input(dual.v6.as_deref().expect("v6"));
        assert_eq!(
            text,
            format!("iptables-save\nip6tables-save\n{v4}{v6}iptables-save\nip6tables-save\n")
        );
        // Routes are not recorded; the dry run prints them as comments only.
        assert!(!dual.routes.is_empty());
        assert!(!text.contains("ip -"));
    }

    #[test]
    fn dry_run_prints_v4_then_marker_v6_and_route_comments() {
        let cfg = Config {
            mode: InterceptionMode::Tproxy,
            inbound_ports: InboundPorts::List(vec![80]),
            ipv6: true,
            ..Config::default()
        };
        let plan = model::build(&cfg);
        let out = dry_run(&plan);
        let v4 = restore_input(&plan.v4);
        let v6 = restore_input(plan.v6.as_deref().expect("v6"));
        let expected = format!(
            "{v4}# ip6tables-restore\n{v6}\
             # ip -6 addr add ::6/128 dev lo\n\
             # ip -4 rule add fwmark 1337 lookup 133\n\
             # ip -6 rule add fwmark 1337 lookup 133\n\
             # ip -4 route add local 0.0.0.0/0 dev lo table 133\n\
             # ip -6 route add local ::/0 dev lo table 133\n"
        );
        assert_eq!(out, expected);
        assert!(v6.contains("-s ::6/128"));
    }

    #[test]
    fn dry_run_without_ipv6_has_no_marker() {
        let out = dry_run(&model::build(&Config::default()));
        assert!(!out.contains('#'), "{out}");
        assert!(out.starts_with("* nat\n") && out.ends_with("COMMIT\n"));
    }

    /// The example dry run of docs/iptables-init.md is the real output (guards the docs against drift).
    #[test]
    fn documented_example_is_the_real_output() {
        let doc = include_str!("../../../../docs/iptables-init.md");
        let cfg = Config::injected();
        let block = format!("```text\n{}```", dry_run(&model::build(&cfg)));
        assert!(
            doc.contains(&block),
            "docs/iptables-init.md lacks:\n{block}"
        );
    }

    #[test]
    fn jump_only_chains_are_declared() {
        let rules = vec![Rule::new(Table::Nat, "-A OUTPUT -j SOMEWHERE")];
        assert_eq!(
            restore_input(&rules),
            "* nat\n-N SOMEWHERE\n-A OUTPUT -j SOMEWHERE\nCOMMIT\n"
        );
    }
}
