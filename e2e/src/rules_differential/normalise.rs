//! Normalisation of what the two programs produce, before comparison.
//!
//! The rules are compared as text only after these rewrites, each of which changes spelling, never
//! meaning:
//!
//! 1. **Dry-run records** (`DRY_RUN_FILE_PATH`, the commands Istio's `DependenciesStub` records): trailing
//!    whitespace of each line and empty lines are dropped; every word that is an IP address or
//!    `address/length` is rewritten in its canonical form (`::127.0.0.53` and `::7f00:35` are the same
//!    address; Istio writes what Go's `netip` prints, iptables-init what Rust's `IpAddr` prints).
//! 2. **Kernel state** (`iptables-save`, `ip6tables-save`): comments (`#` lines) and counters
//!    (`[packets:bytes]`) are dropped; chains are compared by name with their rules in order, so the
//!    order in which chains were declared does not matter (the kernel lists them in creation order).
//!    A built-in chain without rules, and a table left without chains, are dropped: they behave as
//!    absent ones (Istio's `iptables-save` / `ip6tables-save` probes make iptables-nft create the
//!    tables they list, so Istio leaves empty IPv6 tables behind even with IPv6 off).
//! 3. **nftables state** (`nft list ruleset`): `handle N` annotations are dropped, counters read
//!    `counter` (a packet the namespace happened to send is no difference), and the tables are sorted by
//!    family and name (creation order again).
//! 4. **Routes and rules** (`ip rule`, `ip route show table all`): lines sorted.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// A `DRY_RUN_FILE_PATH` record in normal form (rule 1).
pub fn record(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.split(' ')
                .map(canonical_word)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// `w` with an IP address (or `address/length`) written canonically; any other word unchanged.
fn canonical_word(w: &str) -> String {
    let (addr, len) = match w.split_once('/') {
        Some((a, l)) if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) => (a, Some(l)),
        _ => (w, None),
    };
    match addr.parse::<IpAddr>() {
        Ok(ip) => match len {
            Some(l) => format!("{ip}/{l}"),
            None => ip.to_string(),
        },
        Err(_) => w.to_string(),
    }
}

/// A save dump in normal form (rule 2): table → chain → ordered rules.
pub type Dump = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// Parses `iptables-save` output (rule 2): [`save_chains`] without the built-in chains that have no rules.
pub fn save_dump(save: &str) -> Dump {
    let mut dump = save_chains(save);
    const BUILT_IN: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];
    for chains in dump.values_mut() {
        chains.retain(|name, rules| !(rules.is_empty() && BUILT_IN.contains(&name.as_str())));
    }
    dump.retain(|_, chains| !chains.is_empty());
    dump
}

/// `iptables-save` output as table → chain → ordered rules, every declared chain included (with no
/// rules when it has none).
pub fn save_chains(save: &str) -> Dump {
    let mut dump = Dump::new();
    let mut table = String::new();
    for line in save.lines() {
        if line.starts_with('#') || line.is_empty() || line == "COMMIT" {
            continue;
        }
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
            dump.entry(table.clone()).or_default();
        } else if let Some(rest) = line.strip_prefix(':').or_else(|| line.strip_prefix("-A ")) {
            let chain = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            let rules = dump
                .entry(table.clone())
                .or_default()
                .entry(chain)
                .or_default();
            if line.starts_with("-A ") {
                rules.push(line.to_string());
            }
        }
    }
    dump
}

/// `nft list ruleset` in normal form (rule 3): the tables sorted by their `table` line, each line of a
/// table prefixed with it (so differences show line by line).
pub fn nft_ruleset(text: &str) -> Vec<String> {
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let line = match line.find(" # handle ") {
            Some(at) => &line[..at],
            None => line,
        };
        if line.trim().is_empty() {
            continue;
        }
        let uncounted;
        let line = match line.find("counter packets ") {
            Some(at) => {
                // `counter packets N bytes M` → `counter`.
                let rest = &line[at + "counter packets ".len()..];
                let after = rest
                    .split_once(" bytes ")
                    .map(|(_, b)| b.trim_start_matches(|c: char| c.is_ascii_digit()))
                    .unwrap_or(rest);
                uncounted = format!("{}counter{after}", &line[..at]);
                uncounted.as_str()
            }
            None => line,
        };
        if line.starts_with("table ") {
            tables.push((line.trim_end().to_string(), Vec::new()));
        } else if let Some((_, lines)) = tables.last_mut() {
            lines.push(line.trim().to_string());
        }
    }
    tables.sort();
    tables
        .into_iter()
        .flat_map(|(t, lines)| {
            let head = t.trim_end_matches(" {").to_string();
            std::iter::once(t).chain(lines.into_iter().map(move |l| format!("{head}: {l}")))
        })
        .collect()
}

/// `ip` listings in normal form (rule 4).
pub fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| l.trim_end().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines
}

/// A record split into the restore inputs it holds (IPv4, IPv6), in the form `iptables-restore` reads
/// (`* nat` as `*nat`, `-N X` as `:X - [0:0]`); the `iptables-save` probes and the discrete commands of
/// a cleanup are left out. The IPv6 part starts where a table name comes round a second time.
pub fn restore_parts(record: &[String]) -> (String, String) {
    let mut parts = (String::new(), String::new());
    let mut seen = Vec::new();
    let mut in_v6 = false;
    let mut in_table = false;
    for line in record {
        let converted = if let Some(table) = line.strip_prefix("* ") {
            if seen.iter().any(|t| t == table) {
                in_v6 = true;
            }
            seen.push(table.to_string());
            in_table = true;
            format!("*{table}")
        } else if !in_table {
            continue;
        } else if let Some(chain) = line.strip_prefix("-N ") {
            format!(":{chain} - [0:0]")
        } else if line == "COMMIT" {
            in_table = false;
            line.clone()
        } else {
            line.clone()
        };
        let out = if in_v6 { &mut parts.1 } else { &mut parts.0 };
        out.push_str(&converted);
        out.push('\n');
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_spelled_canonically_and_nothing_else_changes() {
        assert_eq!(
            record("-A X -d ::127.0.0.53/128 -j RETURN  \n\n-A X -p tcp --dport 53\n"),
            vec!["-A X -d ::7f00:35/128 -j RETURN", "-A X -p tcp --dport 53"]
        );
        assert_eq!(canonical_word("10.0.0.1/24"), "10.0.0.1/24");
        assert_eq!(canonical_word("fd00:0::1"), "fd00::1");
        assert_eq!(canonical_word("15001"), "15001");
        assert_eq!(canonical_word("a/b"), "a/b");
    }

    #[test]
    fn save_dumps_ignore_counters_and_chain_order() {
        let a = save_dump("# c\n*nat\n:A - [0:0]\n:B ACCEPT [3:4]\n-A B -j A\nCOMMIT\n*raw\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n");
        let b = save_dump("*nat\n:B ACCEPT [0:0]\n:A - [0:0]\n-A B -j A\nCOMMIT\n# d\n");
        assert_eq!(a, b);
        let c = save_dump("*nat\n:B ACCEPT [0:0]\n:A - [0:0]\n-A B -j RETURN\nCOMMIT\n");
        assert_ne!(a, c);
    }

    #[test]
    fn nft_handles_and_table_order_are_ignored() {
        let a = nft_ruleset(
            "table inet b {\n}\ntable ip a { # handle 3\n\tchain c { # handle 1\n\t}\n}\n",
        );
        let b = nft_ruleset("table ip a {\n\tchain c {\n\t}\n}\ntable inet b {\n}\n");
        assert_eq!(a, b);
        assert_eq!(
            nft_ruleset(
                "table ip a {\n\tchain c {\n\t\tcounter packets 1 bytes 76 jump x\n\t}\n}\n"
            ),
            nft_ruleset(
                "table ip a {\n\tchain c {\n\t\tcounter packets 0 bytes 0 jump x\n\t}\n}\n"
            )
        );
    }

    #[test]
    fn records_split_into_restore_inputs() {
        let rec: Vec<String> = [
            "iptables-save",
            "* nat",
            "-N ISTIO_OUTPUT",
            "-A OUTPUT -j ISTIO_OUTPUT",
            "COMMIT",
            "* nat",
            "-N ISTIO_OUTPUT",
            "COMMIT",
            "iptables-save",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (v4, v6) = restore_parts(&rec);
        assert_eq!(
            v4,
            "*nat\n:ISTIO_OUTPUT - [0:0]\n-A OUTPUT -j ISTIO_OUTPUT\nCOMMIT\n"
        );
        assert_eq!(v6, "*nat\n:ISTIO_OUTPUT - [0:0]\nCOMMIT\n");
    }
}
