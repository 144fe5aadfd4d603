//! Reading `iptables-save` output and finding what in it is ours.
//!
//! "Ours" is every chain named `ISTIO_*` (and our scratch chains, see [`SCRATCH_PREFIX`]), every rule in
//! any other chain that jumps (`-j`/`-g`) to one of those, and — when the caller knows them — the rules of
//! the current plan that live in built-in chains without jumping (e.g. `-A PREROUTING -i eth1 -j RETURN`,
//! the TPROXY `MARK`/`CONNMARK` rules). Everything else is foreign and is never touched.

use std::collections::{BTreeMap, BTreeSet};

/// Prefix of the throw-away chains used to let the kernel normalise the plan (see `apply::normalise`).
/// Not `ISTIO_`, so such a chain is never mistaken for a real one, and short enough that
/// `IPTINIT-ISTIO_OUTPUT_DNS` fits the 28-character chain-name limit.
pub const SCRATCH_PREFIX: &str = "IPTINIT-";

/// Whether a chain name is one of ours.
pub fn is_our_chain(name: &str) -> bool {
    name.starts_with("ISTIO_") || name.starts_with(SCRATCH_PREFIX)
}

/// Chain name → its rule lines, in order.
pub type ChainRules = BTreeMap<String, Vec<String>>;

/// One table of an `iptables-save` dump: declared chains (in order) and rules (in order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableDump {
    pub chains: Vec<String>,
    /// `(chain, full line)`, the line starting with `-A CHAIN`.
    pub rules: Vec<(String, String)>,
}

/// A parsed `iptables-save` dump: table name → contents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dump {
    pub tables: BTreeMap<String, TableDump>,
}

impl Dump {
    /// Parses `iptables-save` output. Comments, blank lines and `COMMIT` are skipped.
    pub fn parse(text: &str) -> Dump {
        let mut dump = Dump::default();
        let mut current: Option<String> = None;
        for line in text.lines() {
            let line = line.trim_end();
            if let Some(name) = line.strip_prefix('*') {
                let name = name.trim().to_string();
                dump.tables.entry(name.clone()).or_default();
                current = Some(name);
                continue;
            }
            let Some(table) = current.as_ref().and_then(|t| dump.tables.get_mut(t)) else {
                continue;
            };
            if let Some(decl) = line.strip_prefix(':') {
                if let Some(name) = decl.split_whitespace().next() {
                    table.chains.push(name.to_string());
                }
            } else if let Some(rest) = line.strip_prefix("-A ") {
                if let Some(chain) = rest.split_whitespace().next() {
                    table.rules.push((chain.to_string(), line.to_string()));
                }
            }
        }
        dump
    }

    /// Whether any table holds at least one rule (Istio's "has existing rules", without counting the empty
    /// tables that merely loading a legacy table module leaves behind).
    pub fn has_rules(&self) -> bool {
        self.tables.values().any(|t| !t.rules.is_empty())
    }
}

/// The jump target of a save-format rule line (`-j X` or `-g X`), if any.
pub fn jump_target(line: &str) -> Option<&str> {
    let mut it = line.split_whitespace();
    while let Some(tok) = it.next() {
        if tok == "-j" || tok == "-g" || tok == "--jump" || tok == "--goto" {
            return it.next();
        }
    }
    None
}

/// Whether a save-format rule in a built-in chain is one of the TPROXY rules Istio's generator writes
/// there without jumping to a chain of ours (step 19 of `model::build`), whatever mark and uid it was made with:
/// `CONNMARK --save-mark`/`--restore-mark` guarded by a mark match, the `-o lo` mark `RETURN`, and the
/// `MARK` to the fixed outbound mark 1338 (0x53a) for proxy-owned loopback traffic. Recognising them by
/// shape lets `--reconcile` and `--cleanup-only` remove them even when the configuration that wrote them
/// (another mark, another uid, TPROXY → REDIRECT) is no longer the current one.
pub fn is_tproxy_signature(table: &str, chain: &str, line: &str) -> bool {
    if table != "mangle" || !(chain == "PREROUTING" || chain == "OUTPUT") {
        return false;
    }
    let has = |s: &str| line.contains(s);
    (has(" -p tcp -m mark --mark ") && has(" -j CONNMARK --save-mark"))
        || (has(" -p tcp -m connmark --mark ") && has(" -j CONNMARK --restore-mark"))
        || (chain == "OUTPUT"
            && has(" -o lo ")
            && has(" -m owner ")
            && line.ends_with("-j MARK --set-xmark 0x53a/0xffffffff"))
        || (chain == "OUTPUT"
            && line.starts_with("-A OUTPUT -o lo -p tcp -m mark --mark ")
            && line.ends_with(" -j RETURN")
            && line.split_whitespace().count() == 12)
}

/// A rule of ours in a chain that is not ours (a built-in or a foreign chain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRule {
    pub chain: String,
    /// 1-based position in its chain at the time of the dump (used to put it back on rollback).
    pub position: usize,
    /// The save-format line, `-A CHAIN ...`.
    pub line: String,
}

/// Everything of ours in one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OursTable {
    /// Our chains and their rules (save-format lines), in dump order.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Our rules in other chains, in dump order.
    pub hooks: Vec<HookRule>,
}

/// Everything of ours in one family: table name → contents. Tables without anything of ours are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ours {
    pub tables: BTreeMap<String, OursTable>,
}

impl Ours {
    /// Extracts what is ours from `dump`. `known_hooks` (table → set of save-format lines) names rules in
    /// other chains that are ours even though they jump nowhere of ours (the plan's own built-in rules).
    pub fn extract(dump: &Dump, known_hooks: &BTreeMap<String, BTreeSet<String>>) -> Ours {
        let mut ours = Ours::default();
        for (name, table) in &dump.tables {
            let mut t = OursTable::default();
            for chain in &table.chains {
                if is_our_chain(chain) {
                    t.chains.insert(chain.clone(), Vec::new());
                }
            }
            let known = known_hooks.get(name);
            let mut position: BTreeMap<&str, usize> = BTreeMap::new();
            for (chain, line) in &table.rules {
                let pos = position.entry(chain.as_str()).or_insert(0);
                *pos += 1;
                if is_our_chain(chain) {
                    t.chains
                        .entry(chain.clone())
                        .or_default()
                        .push(line.clone());
                } else if jump_target(line).is_some_and(is_our_chain)
                    || known.is_some_and(|k| k.contains(line))
                    || is_tproxy_signature(name, chain, line)
                {
                    t.hooks.push(HookRule {
                        chain: chain.clone(),
                        position: *pos,
                        line: line.clone(),
                    });
                }
            }
            if !t.chains.is_empty() || !t.hooks.is_empty() {
                ours.tables.insert(name.clone(), t);
            }
        }
        ours
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The same content with positions forgotten: what is compared to decide "nothing to do".
    /// Hook rules are compared per chain, in order, since rules of others may sit between them.
    pub fn shape(&self) -> BTreeMap<String, (ChainRules, ChainRules)> {
        self.tables
            .iter()
            .map(|(name, t)| {
                let mut hooks: BTreeMap<String, Vec<String>> = BTreeMap::new();
                for h in &t.hooks {
                    hooks
                        .entry(h.chain.clone())
                        .or_default()
                        .push(h.line.clone());
                }
                (name.clone(), (t.chains.clone(), hooks))
            })
            .collect()
    }

    /// Restore lines (per table) that remove all of this: hook rules deleted by specification, then every
    /// chain of ours flushed, then deleted (flush first, so jumps between our chains are gone before `-X`).
    pub fn removal_lines(&self) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        for (name, t) in &self.tables {
            let mut lines = Vec::new();
            for h in &t.hooks {
                lines.push(format!("-D{}", &h.line[2..]));
            }
            for chain in t.chains.keys() {
                lines.push(format!("-F {chain}"));
            }
            for chain in t.chains.keys() {
                lines.push(format!("-X {chain}"));
            }
            out.insert(name.clone(), lines);
        }
        out
    }

    /// Restore lines (per table) that put this back after [`Ours::removal_lines`] of whatever replaced it:
    /// chains declared and filled, hook rules inserted at their old positions in increasing order (which
    /// reproduces the old order when the other rules of those chains are unchanged).
    pub fn restore_lines(&self) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        for (name, t) in &self.tables {
            let mut lines = Vec::new();
            for chain in t.chains.keys() {
                lines.push(format!("-N {chain}"));
            }
            for rules in t.chains.values() {
                lines.extend(rules.iter().cloned());
            }
            let mut hooks: Vec<&HookRule> = t.hooks.iter().collect();
            hooks.sort_by_key(|h| h.position);
            for h in hooks {
                let rest = h.line[2..].trim_start();
                let spec = rest.strip_prefix(h.chain.as_str()).unwrap_or(rest);
                lines.push(format!("-I {} {}{}", h.chain, h.position, spec));
            }
            out.insert(name.clone(), lines);
        }
        out
    }
}

/// Assembles per-table line lists into restore input: tables in lexicographic order, empty ones skipped.
pub fn assemble(parts: &[BTreeMap<String, Vec<String>>]) -> String {
    let mut tables: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for part in parts {
        for (name, lines) in part {
            tables
                .entry(name.as_str())
                .or_default()
                .extend(lines.iter().map(String::as_str));
        }
    }
    let mut out = String::new();
    for (name, lines) in tables {
        if lines.is_empty() {
            continue;
        }
        out.push_str("* ");
        out.push_str(name);
        out.push('\n');
        for l in lines {
            out.push_str(l);
            out.push('\n');
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// Splits restore input (as `render::restore_input` writes it) into per-table line lists.
pub fn split_restore_input(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('*') {
            let name = name.trim().to_string();
            out.entry(name.clone()).or_default();
            current = Some(name);
        } else if line == "COMMIT" || line.starts_with('#') || line.trim().is_empty() {
            continue;
        } else if let Some(t) = &current {
            out.entry(t.clone()).or_default().push(line.to_string());
        }
    }
    out
}

/// Whether the plan's text declares nat `ISTIO_INBOUND`, which Istio's rules always do (step 4 of
/// `model::build`) and which therefore exists wherever a run of ours left rules: the optimistic restore of
/// such a text cannot succeed on top of rules of ours.
pub(super) fn declares_nat_inbound(text: &str) -> bool {
    let mut in_nat = false;
    for line in text.lines() {
        if let Some(t) = line.strip_prefix('*') {
            in_nat = t.trim() == "nat";
        } else if in_nat && line == "-N ISTIO_INBOUND" {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVE: &str = "# Generated by iptables-nft-save v1.8.9 (nf_tables)
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:ISTIO_INBOUND - [0:0]
:ISTIO_OUTPUT - [0:0]
:FOO - [0:0]
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A OUTPUT -p tcp -m tcp --dport 123 -j ACCEPT
-A OUTPUT -j ISTIO_OUTPUT
-A OUTPUT -i eth9 -j RETURN
-A FOO -j ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN
COMMIT
*filter
:INPUT ACCEPT [0:0]
-A INPUT -j ACCEPT
COMMIT
";

    #[test]
    fn extracts_ours_and_keeps_foreign() {
        let dump = Dump::parse(SAVE);
        assert!(dump.has_rules());
        let mut known = BTreeMap::new();
        known.insert(
            "nat".to_string(),
            BTreeSet::from(["-A OUTPUT -i eth9 -j RETURN".to_string()]),
        );
        let ours = Ours::extract(&dump, &known);
        assert_eq!(ours.tables.len(), 1);
        let nat = &ours.tables["nat"];
        assert_eq!(nat.chains.len(), 2);
        assert_eq!(nat.chains["ISTIO_OUTPUT"], Vec::<String>::new());
        let hooks: Vec<(&str, usize)> = nat
            .hooks
            .iter()
            .map(|h| (h.chain.as_str(), h.position))
            .collect();
        assert_eq!(
            hooks,
            vec![("PREROUTING", 1), ("OUTPUT", 2), ("OUTPUT", 3), ("FOO", 1)]
        );
        let removal = ours.removal_lines();
        assert_eq!(
            removal["nat"],
            vec![
                "-D PREROUTING -p tcp -j ISTIO_INBOUND",
                "-D OUTPUT -j ISTIO_OUTPUT",
                "-D OUTPUT -i eth9 -j RETURN",
                "-D FOO -j ISTIO_OUTPUT",
                "-F ISTIO_INBOUND",
                "-F ISTIO_OUTPUT",
                "-X ISTIO_INBOUND",
                "-X ISTIO_OUTPUT",
            ]
        );
        let back = ours.restore_lines();
        assert!(back["nat"].contains(&"-I OUTPUT 2 -j ISTIO_OUTPUT".to_string()));
        assert!(back["nat"].contains(&"-N ISTIO_INBOUND".to_string()));
    }

    #[test]
    fn tproxy_rules_are_recognised_by_shape_only_in_mangle_builtins() {
        for (chain, line) in [
            ("PREROUTING", "-A PREROUTING -p tcp -m mark --mark 0x53b -j CONNMARK --save-mark --nfmask 0xffffffff --ctmask 0xffffffff"),
            ("OUTPUT", "-A OUTPUT -o lo -p tcp -m mark --mark 0x539 -j RETURN"),
            ("OUTPUT", "-A OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m owner --gid-owner 7 -j MARK --set-xmark 0x53a/0xffffffff"),
            ("OUTPUT", "-A OUTPUT -p tcp -m connmark --mark 0x539 -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff"),
        ] {
            assert!(is_tproxy_signature("mangle", chain, line), "{line}");
            assert!(!is_tproxy_signature("nat", chain, line), "{line}");
        }
        assert!(!is_tproxy_signature(
            "mangle",
            "OUTPUT",
            "-A OUTPUT -o lo -p tcp -m mark --mark 0x1 -m comment --comment x -j RETURN"
        ));
        assert!(!is_tproxy_signature(
            "mangle",
            "OUTPUT",
            "-A OUTPUT -o lo -j RETURN"
        ));
        assert!(!is_tproxy_signature(
            "mangle",
            "OUTPUT",
            "-A OUTPUT -j MARK --set-xmark 0x53a/0xffffffff"
        ));
    }

    #[test]
    fn assemble_orders_tables_and_skips_empty() {
        let mut a = BTreeMap::new();
        a.insert("nat".to_string(), vec!["-F ISTIO_X".to_string()]);
        a.insert("filter".to_string(), vec![]);
        let mut b = BTreeMap::new();
        b.insert("mangle".to_string(), vec!["-N ISTIO_Y".to_string()]);
        assert_eq!(
            assemble(&[a, b]),
            "* mangle\n-N ISTIO_Y\nCOMMIT\n* nat\n-F ISTIO_X\nCOMMIT\n"
        );
        let split = split_restore_input("* nat\n-N A\n-A A -j RETURN\nCOMMIT\n");
        assert_eq!(split["nat"], vec!["-N A", "-A A -j RETURN"]);
    }
}
