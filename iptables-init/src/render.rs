//! Rendering the rule model as `iptables-restore` input, exactly as Istio's builder does (spec §6).

use std::collections::HashSet;
use std::fmt::Write as _;

use crate::rules::{Rule, Table};

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

/// Renders one family's rules as `iptables-restore --noflush` input: tables in lexicographic order, each
/// `* <table>`, its `-N` declarations (in first-use order, then jump targets), its rules, `COMMIT`.
pub fn restore_input(rules: &[Rule]) -> String {
    let tables = [Table::Filter, Table::Mangle, Table::Nat, Table::Raw];
    let mut per_table: Vec<Vec<String>> = vec![Vec::new(); tables.len()];
    let index = |t: Table| tables.iter().position(|x| *x == t).unwrap_or(0);

    // Declarations: first the chains rules are written to, then chains only jumped to.
    let mut seen: HashSet<(Table, &str)> = HashSet::new();
    for rule in rules {
        if seen.insert((rule.table, rule.chain.as_str())) && !is_built_in(&rule.chain) {
            per_table[index(rule.table)].push(format!("-N {}", rule.chain));
        }
    }
    for rule in rules {
        let n = rule.tokens.len();
        if n >= 2 && rule.tokens[n - 2] == "-j" {
            let target = rule.tokens[n - 1].as_str();
            if seen.insert((rule.table, target)) && !is_built_in(target) {
                per_table[index(rule.table)].push(format!("-N {target}"));
            }
        }
    }
    for rule in rules {
        per_table[index(rule.table)].push(rule.tokens.join(" "));
    }

    let mut out = String::new();
    for (table, lines) in tables.iter().zip(per_table) {
        if lines.is_empty() {
            continue;
        }
        let _ = writeln!(out, "* {}", table.as_str());
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str("COMMIT\n");
    }
    out
}
