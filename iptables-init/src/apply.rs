//! Applying a [`Plan`]: backend detection, state check, one `iptables-restore --noflush` transaction per
//! family with rollback, `--reconcile`, `--cleanup-only`, and the TPROXY routes.
//!
//! How a run goes (details in `docs/iptables-apply.md`):
//! 1. Capabilities: without `CAP_NET_ADMIN` and `CAP_NET_RAW` in the effective set, stop before anything.
//! 2. For each family in the plan (v4; v6 when IPv6 is on): detect the backend ([`backend`]) and read the
//!    current state — both before anything is written, so a detection failure changes nothing.
//! 3. If nothing of ours is there, the transaction is exactly the `--dry-run` text. If something of ours
//!    is there, the plan is normalised by the kernel (written into throw-away chains, read back with
//!    `-save`, removed in the same transaction that follows), and ours is compared with it rule by rule:
//!    equal → nothing to do; different → with `--reconcile` (or `--force-apply`) one transaction per family
//!    removes everything of ours and installs the plan, without `--reconcile` an error before any change.
//! 4. A failure in any restore (or in the routes) rolls back every family already touched — including the
//!    failing one, since iptables-restore commits table by table — to the state read in step 2.
//! 5. Routes ([`routes`]) after the rules; the final state is logged at debug level.

mod backend;
mod routes;
mod state;

#[cfg(test)]
mod netns_tests;

use std::collections::{BTreeMap, BTreeSet};

use tracing::{debug, info, warn};

use crate::render;
use crate::rules::{Family, Plan, Rule};

pub use backend::{Backend, Kind};
use state::{assemble, is_our_chain, split_restore_input, Dump, Ours, SCRATCH_PREFIX};

/// How the plan is to be applied; built by `main` from the command line.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// Replace existing rules of ours that differ from the plan.
    pub reconcile: bool,
    /// Remove everything of ours and apply nothing.
    pub cleanup_only: bool,
    /// Apply even when the current state already matches (replaces ours, like `reconcile`).
    pub force_apply: bool,
    /// `FORCE_IPTABLES_BINARY`: `Some("legacy")` or `Some("nft")`.
    pub force_binary: Option<String>,
}

/// Human name of a family, for messages.
pub fn family_name(family: &Family) -> &'static str {
    match family {
        Family::V4 => "IPv4",
        Family::V6 => "IPv6",
    }
}

fn line_note(line: &Option<usize>, input: &Option<String>) -> String {
    match (line, input) {
        (Some(n), Some(text)) => format!(" at input line {n} `{text}`"),
        (Some(n), None) => format!(" at input line {n}"),
        _ => String::new(),
    }
}

/// Why applying failed. Every variant is reported after any partial change was rolled back, except
/// [`ApplyError::RollbackFailed`].
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The effective capability set lacks what netfilter needs; nothing was touched.
    #[error(
        "missing capability {} in the effective set (iptables-init needs CAP_NET_ADMIN and CAP_NET_RAW); nothing was changed",
        .missing.join(" and ")
    )]
    MissingCapabilities { missing: Vec<String> },
    /// The capability sets could not be read.
    #[error("cannot read the process capabilities: {0}")]
    Capabilities(String),
    /// No iptables binary for the family works (or the forced one does not).
    #[error("no usable {} iptables backend: {}", family_name(.family), .tried.join("; "))]
    NoBackend { family: Family, tried: Vec<String> },
    /// Reading the current rules failed.
    #[error("{backend}: reading the current {} rules failed: {message}", family_name(.family))]
    Save {
        backend: String,
        family: Family,
        message: String,
    },
    /// `iptables-restore` refused the input: the backend, the failing line of the input and the message.
    #[error(
        "{backend} failed applying the {} rules{}: {message}",
        family_name(.family),
        line_note(.line, .input_line)
    )]
    Restore {
        backend: String,
        family: Family,
        line: Option<usize>,
        input_line: Option<String>,
        message: String,
    },
    /// Rules of ours exist and differ from the configuration, and `--reconcile` was not given.
    #[error(
        "{backend}: {} rules of ours already exist in this network namespace and differ from the configuration ({detail}); nothing was changed; rerun with --reconcile to replace them",
        family_name(.family)
    )]
    Diverged {
        backend: String,
        family: Family,
        detail: String,
    },
    /// An `ip` command failed.
    #[error("failed to configure routes: `{command}`: {message}")]
    Route { command: String, message: String },
    /// Something failed and undoing the partial change failed too.
    #[error("{original}; rolling back failed too, rules of ours may remain: {rollback}")]
    RollbackFailed {
        original: Box<ApplyError>,
        rollback: Box<ApplyError>,
    },
}

/// Stops with the missing capability names unless both are in the effective set.
fn check_capabilities() -> Result<(), ApplyError> {
    use caps::{CapSet, Capability};
    let mut missing = Vec::new();
    for cap in [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW] {
        match caps::has_cap(None, CapSet::Effective, cap) {
            Ok(true) => {}
            Ok(false) => missing.push(cap.to_string()),
            Err(e) => return Err(ApplyError::Capabilities(e.to_string())),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ApplyError::MissingCapabilities { missing })
    }
}

/// Finds the input line number in iptables-restore's stderr: `line N failed`, `Error occurred at line: N`,
/// or nft's `line N: ... failed`.
fn failing_line(stderr: &str) -> Option<usize> {
    let mut rest = stderr;
    while let Some(i) = rest.find("line") {
        let after = rest[i + 4..].trim_start_matches([':', ' ']);
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(n) = digits.parse() {
            return Some(n);
        }
        rest = &rest[i + 4..];
    }
    None
}

/// Feeds `input` to the backend's restore with `--noflush` (and `--wait` for legacy).
fn restore(backend: &Backend, input: &str) -> Result<(), ApplyError> {
    let mut args = vec!["--noflush"];
    if backend.wait {
        args.push("--wait=30");
    }
    debug!(backend = %backend, "restore input:\n{input}");
    let out =
        backend::run(&backend.restore, &args, Some(input)).map_err(|e| ApplyError::Restore {
            backend: backend.to_string(),
            family: backend.family,
            line: None,
            input_line: None,
            message: format!("cannot run {}: {e}", backend.restore),
        })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = failing_line(&stderr);
    let input_line = line.and_then(|n| input.lines().nth(n.wrapping_sub(1)).map(str::to_string));
    let message = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Try `"))
        .collect::<Vec<_>>()
        .join("; ");
    Err(ApplyError::Restore {
        backend: backend.to_string(),
        family: backend.family,
        line,
        input_line,
        message: if message.is_empty() {
            format!("exited with {}", out.status)
        } else {
            message
        },
    })
}

/// Reads the current state through the backend's `-save`.
fn save(backend: &Backend) -> Result<String, ApplyError> {
    let fail = |message: String| ApplyError::Save {
        backend: backend.to_string(),
        family: backend.family,
        message,
    };
    let out = backend::run(&backend.save, &[], None).map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The plan as the kernel prints it, obtained by writing it into throw-away chains.
struct Normalised {
    /// What ours looks like once the plan is applied (hook positions are meaningless here).
    expected: Ours,
    /// Save-format lines of the plan's rules in chains that are not ours, per table.
    known_hooks: BTreeMap<String, BTreeSet<String>>,
    /// The state after the scratch chains were written (the current state plus them).
    dump: Dump,
    /// Restore lines that delete every scratch chain, per table.
    scratch_removal: BTreeMap<String, Vec<String>>,
}

fn scratch_name(chain: &str) -> String {
    format!("{SCRATCH_PREFIX}{chain}")
}

/// Restore input that writes the plan into scratch chains: every chain of the plan (built-ins included)
/// renamed, so nothing is hooked into the packet path and the kernel accepts every target.
fn scratch_input(rules: &[Rule]) -> String {
    let mut parts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut declared: BTreeSet<(String, String)> = BTreeSet::new();
    let mut chains: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for r in rules {
        chains
            .entry(r.table.as_str().to_string())
            .or_default()
            .insert(r.chain.as_str());
    }
    let mut decl = |table: &str, chain: &str, parts: &mut BTreeMap<String, Vec<String>>| {
        if declared.insert((table.to_string(), chain.to_string())) {
            parts
                .entry(table.to_string())
                .or_default()
                .push(format!("-N {}", scratch_name(chain)));
        }
    };
    let mut bodies: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in rules {
        let table = r.table.as_str();
        decl(table, &r.chain, &mut parts);
        let own = &chains[table];
        let mut tokens: Vec<String> = r.tokens.clone();
        if tokens.len() >= 2 {
            tokens[1] = scratch_name(&tokens[1]);
        }
        for i in 0..tokens.len().saturating_sub(1) {
            if tokens[i] == "-j" || tokens[i] == "-g" {
                let target = tokens[i + 1].clone();
                if own.contains(target.as_str()) || is_our_chain(&target) {
                    decl(table, &target, &mut parts);
                    tokens[i + 1] = scratch_name(&target);
                }
            }
        }
        bodies
            .entry(table.to_string())
            .or_default()
            .push(tokens.join(" "));
    }
    for (t, b) in bodies {
        parts.entry(t).or_default().extend(b);
    }
    assemble(&[parts])
}

fn unscratch(line: &str) -> String {
    line.split(' ')
        .map(|tok| tok.strip_prefix(SCRATCH_PREFIX).unwrap_or(tok))
        .collect::<Vec<_>>()
        .join(" ")
}

fn normalise(backend: &Backend, rules: &[Rule]) -> Result<Normalised, ApplyError> {
    let input = scratch_input(rules);
    // Scratch chains left by an interrupted run would make `-N` fail: remove any first, in the same input.
    let before = Dump::parse(&save(backend)?);
    let mut stale: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, t) in &before.tables {
        let s: Vec<&String> = t
            .chains
            .iter()
            .filter(|c| c.starts_with(SCRATCH_PREFIX))
            .collect();
        let lines = stale.entry(name.clone()).or_default();
        lines.extend(s.iter().map(|c| format!("-F {c}")));
        lines.extend(s.iter().map(|c| format!("-X {c}")));
    }
    let input = assemble(&[stale, split_restore_input(&input)]);
    if let Err(mut e) = restore(backend, &input) {
        // A table may have committed before the failing one: remove whatever scratch chains exist.
        if let Ok(text) = save(backend) {
            let cleanup = assemble(&[scratch_removal_of(&Dump::parse(&text))]);
            if !cleanup.is_empty() {
                let _ = restore(backend, &cleanup);
            }
        }
        // Quote the plan's line, not its scratch-renamed copy.
        if let ApplyError::Restore { input_line, .. } = &mut e {
            *input_line = input_line.as_deref().map(unscratch);
        }
        return Err(e);
    }
    let dump = match save(backend) {
        Ok(text) => Dump::parse(&text),
        Err(e) => {
            let _ = restore(
                backend,
                &assemble(&[scratch_removal_of(&Dump::parse(&input_as_dump(&input)))]),
            );
            return Err(e);
        }
    };
    let scratch_removal = scratch_removal_of(&dump);
    let mut expected = Ours::default();
    let mut known_hooks: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, t) in &dump.tables {
        let mut ot = state::OursTable::default();
        for c in &t.chains {
            if let Some(real) = c.strip_prefix(SCRATCH_PREFIX) {
                if is_our_chain(real) {
                    ot.chains.insert(real.to_string(), Vec::new());
                }
            }
        }
        for (chain, line) in &t.rules {
            let Some(real) = chain.strip_prefix(SCRATCH_PREFIX) else {
                continue;
            };
            let line = unscratch(line);
            if is_our_chain(real) {
                ot.chains.entry(real.to_string()).or_default().push(line);
            } else {
                known_hooks
                    .entry(name.clone())
                    .or_default()
                    .insert(line.clone());
                ot.hooks.push(state::HookRule {
                    chain: real.to_string(),
                    position: 0,
                    line,
                });
            }
        }
        if !ot.chains.is_empty() || !ot.hooks.is_empty() {
            expected.tables.insert(name.clone(), ot);
        }
    }
    Ok(Normalised {
        expected,
        known_hooks,
        dump,
        scratch_removal,
    })
}

/// Turns scratch restore input into a fake dump listing its chains (to clean up after a failed save).
fn input_as_dump(input: &str) -> String {
    let mut out = String::new();
    for line in input.lines() {
        if let Some(t) = line.strip_prefix("* ") {
            out.push_str(&format!("*{t}\n"));
        } else if let Some(c) = line.strip_prefix("-N ") {
            out.push_str(&format!(":{c} - [0:0]\n"));
        }
    }
    out
}

fn scratch_removal_of(dump: &Dump) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for (name, t) in &dump.tables {
        let s: Vec<&String> = t
            .chains
            .iter()
            .filter(|c| c.starts_with(SCRATCH_PREFIX))
            .collect();
        if s.is_empty() {
            continue;
        }
        let mut lines: Vec<String> = s.iter().map(|c| format!("-F {c}")).collect();
        lines.extend(s.iter().map(|c| format!("-X {c}")));
        out.insert(name.clone(), lines);
    }
    out
}

/// Ours without the scratch chains (which are handled by `scratch_removal`).
fn without_scratch(mut ours: Ours) -> Ours {
    for t in ours.tables.values_mut() {
        t.chains.retain(|c, _| !c.starts_with(SCRATCH_PREFIX));
    }
    ours.tables
        .retain(|_, t| !t.chains.is_empty() || !t.hooks.is_empty());
    ours
}

/// Describes the first difference between two states of ours, for the `Diverged` message.
fn first_difference(current: &Ours, expected: &Ours) -> String {
    let (c, e) = (current.shape(), expected.shape());
    for (table, (echains, ehooks)) in &e {
        let Some((cchains, chooks)) = c.get(table) else {
            return format!("table {table}: nothing of ours present");
        };
        for (chain, rules) in echains {
            match cchains.get(chain) {
                None => return format!("table {table}: chain {chain} missing"),
                Some(r) if r != rules => {
                    return format!("table {table}: chain {chain} has different rules")
                }
                _ => {}
            }
        }
        for chain in cchains.keys() {
            if !echains.contains_key(chain) {
                return format!("table {table}: unexpected chain {chain}");
            }
        }
        if chooks != ehooks {
            return format!("table {table}: the rules of ours in built-in chains differ");
        }
    }
    for table in c.keys() {
        if !e.contains_key(table) {
            return format!("table {table}: unexpected rules of ours");
        }
    }
    "states differ".to_string()
}

/// One family's part of the run.
struct FamilyRun<'a> {
    backend: Backend,
    rules: &'a [Rule],
    /// The state read before anything was written (for rollback).
    before: Dump,
}

/// What the family run decided.
enum Decision {
    /// Nothing to do (but scratch chains to remove, if any).
    Noop(String),
    /// Apply this transaction; `previous` is ours before it (what a rollback restores).
    Apply { input: String, previous: Ours },
}

fn decide(fr: &FamilyRun<'_>, opts: &ApplyOptions) -> Result<Decision, ApplyError> {
    let quick = Ours::extract(&fr.before, &BTreeMap::new());
    let plan_text = render::restore_input(fr.rules);
    let needs_norm =
        !fr.rules.is_empty() && (!quick.is_empty() || (opts.cleanup_only && fr.before.has_rules()));
    if !needs_norm {
        if opts.cleanup_only {
            return Ok(match quick.is_empty() {
                true => Decision::Noop(String::new()),
                false => Decision::Apply {
                    input: assemble(&[quick.removal_lines()]),
                    previous: quick,
                },
            });
        }
        // Nothing of ours here: the transaction is exactly the dry-run text.
        return Ok(Decision::Apply {
            input: plan_text,
            previous: Ours::default(),
        });
    }
    let norm = normalise(&fr.backend, fr.rules)?;
    let current = without_scratch(Ours::extract(&norm.dump, &norm.known_hooks));
    let family = fr.backend.family;
    if opts.cleanup_only {
        let input = assemble(&[norm.scratch_removal.clone(), current.removal_lines()]);
        return Ok(Decision::Apply {
            input,
            previous: current,
        });
    }
    if current.is_empty() {
        let input = assemble(&[
            norm.scratch_removal.clone(),
            split_restore_input(&plan_text),
        ]);
        return Ok(Decision::Apply {
            input,
            previous: current,
        });
    }
    let same = current.shape() == norm.expected.shape();
    if same && !opts.force_apply {
        info!(
            family = family_name(&family),
            "rules of ours already match the configuration; nothing to do"
        );
        return Ok(Decision::Noop(assemble(&[norm.scratch_removal])));
    }
    if opts.reconcile || opts.force_apply {
        if !same {
            info!(
                family = family_name(&family),
                difference = first_difference(&current, &norm.expected),
                "replacing the rules of ours with the configuration"
            );
        }
        let input = assemble(&[
            norm.scratch_removal.clone(),
            current.removal_lines(),
            split_restore_input(&plan_text),
        ]);
        return Ok(Decision::Apply {
            input,
            previous: current,
        });
    }
    let detail = first_difference(&current, &norm.expected);
    let cleanup = assemble(&[norm.scratch_removal]);
    if !cleanup.is_empty() {
        if let Err(e) = restore(&fr.backend, &cleanup) {
            warn!("removing the scratch chains failed: {e}");
        }
    }
    Err(ApplyError::Diverged {
        backend: fr.backend.to_string(),
        family,
        detail,
    })
}

/// Puts a family back to `previous` (ours as it was before this run), removing whatever of ours is there now.
/// Rules in built-in chains that were not there before the run count as ours (that covers the plan's
/// non-jump rules, e.g. interface RETURNs, even on the fast path where they were never normalised).
fn rollback(fr: &FamilyRun<'_>, previous: &Ours) -> Result<(), ApplyError> {
    let now = Dump::parse(&save(&fr.backend)?);
    let mut new_lines: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, t) in &now.tables {
        let old: BTreeSet<&String> = fr
            .before
            .tables
            .get(name)
            .map(|b| b.rules.iter().map(|(_, l)| l).collect())
            .unwrap_or_default();
        for (_, line) in &t.rules {
            if !old.contains(line) {
                new_lines
                    .entry(name.clone())
                    .or_default()
                    .insert(line.clone());
            }
        }
    }
    let mut known = new_lines;
    for (name, t) in &previous.tables {
        known
            .entry(name.clone())
            .or_default()
            .extend(t.hooks.iter().map(|h| h.line.clone()));
    }
    let current = Ours::extract(&now, &known);
    let input = assemble(&[current.removal_lines(), previous.restore_lines()]);
    if input.is_empty() {
        return Ok(());
    }
    restore(&fr.backend, &input)
}

fn log_final_state(runs: &[FamilyRun<'_>]) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    for fr in runs {
        match save(&fr.backend) {
            Ok(text) => debug!(backend = %fr.backend, "final state:\n{text}"),
            Err(e) => debug!("final state unavailable: {e}"),
        }
    }
}

/// Applies `plan` to the current network namespace (see the module documentation for the steps).
pub fn apply(plan: &Plan, opts: &ApplyOptions) -> Result<(), ApplyError> {
    check_capabilities()?;
    let force = opts.force_binary.as_deref().filter(|f| !f.is_empty());

    // Detect and read every family before writing anything.
    let mut runs: Vec<FamilyRun<'_>> = Vec::new();
    let d4 = backend::detect(Family::V4, force)?;
    info!(backend = %d4.backend, "IPv4 backend");
    runs.push(FamilyRun {
        before: Dump::parse(&d4.dump),
        backend: d4.backend,
        rules: &plan.v4,
    });
    match &plan.v6 {
        Some(v6) => {
            let d6 = backend::detect(Family::V6, force)?;
            info!(backend = %d6.backend, "IPv6 backend");
            runs.push(FamilyRun {
                before: Dump::parse(&d6.dump),
                backend: d6.backend,
                rules: v6,
            });
        }
        // With IPv6 off, cleanup still removes IPv6 rules of ours left by an earlier configuration.
        None if opts.cleanup_only => match backend::detect(Family::V6, force) {
            Ok(d6) => runs.push(FamilyRun {
                before: Dump::parse(&d6.dump),
                backend: d6.backend,
                rules: &[],
            }),
            Err(e) => debug!("IPv6 cleanup skipped: {e}"),
        },
        None => {}
    }

    let result = apply_families(&runs, opts);
    let result = result.and_then(|applied| {
        if opts.cleanup_only {
            for action in plan.routes.iter().rev() {
                routes::remove(action, false)?;
            }
            return Ok(());
        }
        let mut added = Vec::new();
        for action in &plan.routes {
            match routes::add(action) {
                Ok(changed) => {
                    if changed {
                        added.push(action);
                    }
                }
                Err(e) => {
                    for a in added.iter().rev() {
                        let _ = routes::remove(a, true);
                    }
                    return Err(roll_back_all(&runs, &applied, e));
                }
            }
        }
        Ok(())
    });
    log_final_state(&runs);
    result
}

/// Rolls back the families in `applied` (index into `runs`, previous state) and returns `err`, or
/// `RollbackFailed` when undoing failed.
fn roll_back_all(runs: &[FamilyRun<'_>], applied: &[(usize, Ours)], err: ApplyError) -> ApplyError {
    for (i, previous) in applied.iter().rev() {
        let fr = &runs[*i];
        match rollback(fr, previous) {
            Ok(()) => {
                info!(backend = %fr.backend, "rolled back the {} rules", family_name(&fr.backend.family))
            }
            Err(rb) => {
                return ApplyError::RollbackFailed {
                    original: Box::new(err),
                    rollback: Box::new(rb),
                }
            }
        }
    }
    err
}

/// Decides and applies each family in turn; on failure rolls back every family touched so far.
/// Returns the families applied with their previous state (for a later rollback).
fn apply_families(
    runs: &[FamilyRun<'_>],
    opts: &ApplyOptions,
) -> Result<Vec<(usize, Ours)>, ApplyError> {
    let mut applied: Vec<(usize, Ours)> = Vec::new();
    for (i, fr) in runs.iter().enumerate() {
        let decision = match decide(fr, opts) {
            Ok(d) => d,
            Err(e) => {
                // `decide` only writes scratch chains, which it removes itself; earlier families did apply.
                return Err(roll_back_all(runs, &applied, e));
            }
        };
        match decision {
            Decision::Noop(cleanup) => {
                if !cleanup.is_empty() {
                    if let Err(e) = restore(&fr.backend, &cleanup) {
                        return Err(roll_back_all(runs, &applied, e));
                    }
                }
            }
            Decision::Apply { input, previous } => {
                if input.is_empty() {
                    continue;
                }
                applied.push((i, previous));
                if let Err(e) = restore(&fr.backend, &input) {
                    return Err(roll_back_all(runs, &applied, e));
                }
                info!(backend = %fr.backend, "applied the {} rules", family_name(&fr.backend.family));
            }
        }
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Table;

    fn rule(table: Table, line: &str) -> Rule {
        let tokens: Vec<String> = line.split(' ').map(str::to_string).collect();
        Rule {
            table,
            chain: tokens[1].clone(),
            tokens,
        }
    }

    #[test]
    fn finds_the_failing_line() {
        assert_eq!(failing_line("iptables-restore: line 2 failed"), Some(2));
        assert_eq!(
            failing_line(
                "iptables-nft-restore v1.8.9 (nf_tables): bad\nError occurred at line: 7\nTry `x'"
            ),
            Some(7)
        );
        assert_eq!(failing_line("x:\nline 3: CHAIN_DEL failed (busy)"), Some(3));
        assert_eq!(failing_line("something else"), None);
    }

    #[test]
    fn scratch_renames_chains_and_jumps_only() {
        let rules = vec![
            rule(
                Table::Nat,
                "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
            ),
            rule(Table::Nat, "-A OUTPUT -j ISTIO_OUTPUT"),
            rule(Table::Nat, "-A ISTIO_OUTPUT -j ISTIO_REDIRECT"),
            rule(Table::Nat, "-I PREROUTING 1 -i eth1 -j RETURN"),
        ];
        let text = scratch_input(&rules);
        assert_eq!(
            text,
            "* nat\n-N IPTINIT-ISTIO_REDIRECT\n-N IPTINIT-OUTPUT\n-N IPTINIT-ISTIO_OUTPUT\n-N IPTINIT-PREROUTING\n\
             -A IPTINIT-ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001\n-A IPTINIT-OUTPUT -j IPTINIT-ISTIO_OUTPUT\n\
             -A IPTINIT-ISTIO_OUTPUT -j IPTINIT-ISTIO_REDIRECT\n-I IPTINIT-PREROUTING 1 -i eth1 -j RETURN\nCOMMIT\n"
        );
        assert_eq!(
            unscratch("-A IPTINIT-OUTPUT -j IPTINIT-ISTIO_OUTPUT"),
            "-A OUTPUT -j ISTIO_OUTPUT"
        );
    }
}
