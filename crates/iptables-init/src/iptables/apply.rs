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
//!
//! Before all this, the caller may end the run in [`exec_restore`] instead: for the plain single-table
//! IPv4 apply into a namespace without chains of ours, this process becomes the restore ([`exec`]).

mod backend;
mod capabilities;
mod error;
mod exec;
mod options;
mod routes;
mod state;

use std::collections::{BTreeMap, BTreeSet};

use tracing::{debug, info, warn};

use super::model::{Plan, Rule};
use super::render;
use crate::config::Family;
use crate::routes::RouteAction;

use crate::netlink::Probe;
pub(crate) use backend::Backend;
use capabilities::check_capabilities;
pub use error::{family_name, ApplyError};
pub(crate) use exec::exec_restore;
pub use options::ApplyOptions;
use state::{
    assemble, declares_nat_inbound, is_our_chain, split_restore_input, Dump, Ours, SCRATCH_PREFIX,
};

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

/// Writes the plan into scratch chains and reads it back; `before` is the current state (for scratch
/// chains an interrupted run left behind, which would make `-N` fail: they are removed in the same input).
fn normalise(backend: &Backend, rules: &[Rule], before: &Dump) -> Result<Normalised, ApplyError> {
    let input = scratch_input(rules);
    let input = assemble(&[scratch_removal_of(before), split_restore_input(&input)]);
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

/// The chain and the specification (matches and target) of a rule's tokens: `-A CHAIN spec…` or
/// `-I CHAIN [POS] spec…`; `None` for any other line.
fn chain_and_spec<S: AsRef<str>>(tokens: &[S]) -> Option<(&str, &[S])> {
    let chain = tokens.get(1)?.as_ref();
    let rest = &tokens[2..];
    match tokens.first()?.as_ref() {
        "-A" => Some((chain, rest)),
        "-I" => match rest.first() {
            Some(pos) if pos.as_ref().parse::<u32>().is_ok() => Some((chain, &rest[1..])),
            _ => Some((chain, rest)),
        },
        _ => None,
    }
}

/// Restore input that removes what `text` (restore input of ours, as `render::restore_input` writes it)
/// added, for the table sections that end before input line `before_line` (all sections when `None`):
/// rules in other chains deleted by their specification, then the declared chains flushed and deleted.
/// Exact because every `-N` in those sections succeeded, so those chains were new.
fn undo_input(text: &str, before_line: Option<usize>) -> String {
    let mut parts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut table = String::new();
    let mut section: Vec<&str> = Vec::new();
    let flush = |table: &str, section: &[&str], parts: &mut BTreeMap<String, Vec<String>>| {
        let chains: Vec<&str> = section
            .iter()
            .filter_map(|l| l.strip_prefix("-N "))
            .collect();
        let mut lines = Vec::new();
        for l in section {
            let tokens: Vec<&str> = l.split(' ').collect();
            if let Some((chain, rest)) = chain_and_spec(&tokens) {
                if !chains.contains(&chain) {
                    lines.push(format!("-D {chain} {}", rest.join(" ")));
                }
            }
        }
        lines.extend(chains.iter().map(|c| format!("-F {c}")));
        lines.extend(chains.iter().map(|c| format!("-X {c}")));
        if !lines.is_empty() {
            parts.entry(table.to_string()).or_default().extend(lines);
        }
    };
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if let Some(name) = line.strip_prefix('*') {
            table = name.trim().to_string();
            section.clear();
        } else if line == "COMMIT" {
            if before_line.is_none_or(|b| n < b) {
                flush(&table, &section, &mut parts);
            }
            section.clear();
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            section.push(line);
        }
    }
    assemble(&[parts])
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
    let norm = normalise(&fr.backend, fr.rules, &fr.before)?;
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

/// What undoes one family's change, should a later step fail.
enum Undo {
    /// The optimistic path applied exactly this restore input onto a state without ours.
    Input(String),
    /// The checked path replaced `previous` (ours as read in `before`).
    Previous { before: Dump, previous: Ours },
}

/// A family this run changed.
struct Applied {
    backend: Backend,
    undo: Undo,
}

fn log_final_state(backends: &[Backend]) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    for b in backends {
        match save(b) {
            Ok(text) => debug!(backend = %b, "final state:\n{text}"),
            Err(e) => debug!("final state unavailable: {e}"),
        }
    }
}

/// What `--cleanup-only --dry-run` prints: what `--cleanup-only` runs in a namespace that holds exactly
/// this plan. Per family, the restore input the cleanup computes ([`Ours::removal_lines`]: our rules in
/// other chains deleted by specification, then every chain of ours flushed and deleted), the IPv6 part
/// after the [`render::IP6TABLES_MARKER`] line; then the `ip rule`/`ip route` removals as `# ip ...`
/// comment lines, last added first. A real run derives the same removal from what `iptables-save` shows, so rules of ours
/// that are already gone are not deleted, and leftovers of ours are.
pub fn cleanup_dry_run(plan: &Plan) -> String {
    let mut out = String::from(
        "# --cleanup-only: the removal of this configuration's rules, chains and routes\n",
    );
    out.push_str(&removal_of_plan(&plan.v4));
    if let Some(v6) = &plan.v6 {
        out.push_str(render::IP6TABLES_MARKER);
        out.push('\n');
        out.push_str(&removal_of_plan(v6));
    }
    // As the cleanup (`routes::remove` without the address): `::6` on `lo` stays, a running proxy may
    // still use it.
    for action in plan.routes.iter().rev() {
        if *action != RouteAction::AddLoopbackV6Source {
            out.push_str(&format!("# ip {}\n", action.ip_args("del").join(" ")));
        }
    }
    out
}

/// The cleanup's restore input for a namespace holding exactly `rules`: the rules seen as a dump (as
/// planned, `-I CHAIN POS` written as the `-A CHAIN` line a save shows), their built-in-chain rules
/// known as ours, and the same extraction and removal a real cleanup runs.
fn removal_of_plan(rules: &[Rule]) -> String {
    let mut dump = Dump::parse(&input_as_dump(&render::restore_input(rules)));
    let mut known: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for rule in rules {
        let spec = chain_and_spec(&rule.tokens).map_or(&[][..], |(_, spec)| spec);
        let mut line = format!("-A {}", rule.chain);
        for token in spec {
            line.push(' ');
            line.push_str(token);
        }
        let table = rule.table.as_str().to_string();
        if !is_our_chain(&rule.chain) {
            known.entry(table.clone()).or_default().insert(line.clone());
        }
        dump.tables
            .entry(table)
            .or_default()
            .rules
            .push((rule.chain.clone(), line));
    }
    assemble(&[Ours::extract(&dump, &known).removal_lines()])
}

/// A netlink probe of nf_tables for this run, shared by [`warn_of_native_tables`] and
/// [`exec_restore`] so that the hot path opens one socket; `None` when it cannot be opened.
pub fn probe() -> Option<Probe> {
    Probe::open().ok()
}

/// Warns when the namespace already holds the tables of `--native-nftables`: with this run's iptables
/// rules both would see every packet (`nft::apply` warns the other way round). A probe that cannot answer
/// says nothing: this is advice, never a reason to stop.
pub fn warn_of_native_tables(probe: Option<&mut Probe>) {
    let Some(probe) = probe else {
        return;
    };
    let nat = crate::nft::model::TableId::Nat.name();
    if probe.inet_table_exists(nat).unwrap_or(false) {
        tracing::warn!(
            "this namespace also holds the tables of --native-nftables (inet {nat}): with the iptables \
             rules both see every packet; remove them with `iptables-init --native-nftables --cleanup-only`"
        );
    }
}

/// Applies `plan` to the current network namespace (see the module documentation for the steps).
pub fn apply(plan: &Plan, opts: &ApplyOptions) -> Result<(), ApplyError> {
    check_capabilities()?;
    let force = opts.force_binary.as_deref().filter(|f| !f.is_empty());

    let mut families: Vec<(Family, &[Rule], bool)> = vec![(Family::V4, &plan.v4, true)];
    match &plan.v6 {
        // A cleanup where ip6tables is unavailable has no IPv6 rules of ours to remove.
        Some(v6) => families.push((Family::V6, v6, !opts.cleanup_only)),
        // With IPv6 off, cleanup still removes IPv6 rules of ours left by an earlier configuration.
        None if opts.cleanup_only => families.push((Family::V6, &[], false)),
        None => {}
    }

    let mut applied: Vec<Applied> = Vec::new();
    let mut backends: Vec<Backend> = Vec::new();
    for (family, rules, required) in families {
        match apply_family(family, rules, required, force, opts, &mut backends) {
            Ok(Some(a)) => applied.push(a),
            Ok(None) => {}
            Err(e) => {
                let e = roll_back_all(&applied, e);
                log_final_state(&backends);
                return Err(e);
            }
        }
    }

    let result = if opts.cleanup_only {
        plan.routes
            .iter()
            .rev()
            .try_for_each(|action| routes::remove(action, false))
    } else {
        let mut added = Vec::new();
        let mut result = Ok(());
        for action in &plan.routes {
            match routes::add(action) {
                Ok(true) => added.push(action),
                Ok(false) => {}
                Err(e) => {
                    for a in added.iter().rev() {
                        let _ = routes::remove(a, true);
                    }
                    result = Err(roll_back_all(&applied, e));
                    break;
                }
            }
        }
        result
    };
    log_final_state(&backends);
    result
}

/// One family: the optimistic restore when it applies, else detection, state check and decision.
/// Returns what was changed (for a rollback), or `None` when nothing was.
fn apply_family(
    family: Family,
    rules: &[Rule],
    required: bool,
    force: Option<&str>,
    opts: &ApplyOptions,
    backends: &mut Vec<Backend>,
) -> Result<Option<Applied>, ApplyError> {
    let name = family_name(&family);
    // Optimistic path: in a namespace without rules of ours (the init container's normal case) the
    // dry-run text applies as is, and a state check would only cost processes. When rules of ours
    // exist, the restore fails on the first `-N` of the nat table; sections committed before that are
    // undone exactly, and the checked path below takes over.
    let text = render::restore_input(rules);
    if !opts.cleanup_only && declares_nat_inbound(&text) {
        if let Some(backend) = backend::detect_without_exec(family, force) {
            match restore(&backend, &text) {
                Ok(()) => {
                    info!(backend = %backend, "applied the {name} rules");
                    backends.push(backend.clone());
                    return Ok(Some(Applied {
                        backend,
                        undo: Undo::Input(text),
                    }));
                }
                Err(e) => {
                    let line = match &e {
                        ApplyError::Restore { line, .. } => *line,
                        _ => None,
                    };
                    debug!("optimistic {name} apply refused ({e}); reading the current state");
                    let undo = match line {
                        Some(n) => undo_input(&text, Some(n)),
                        // No line reported: no way to tell which sections committed; the checked
                        // path below sees them as rules of ours.
                        None => String::new(),
                    };
                    if !undo.is_empty() {
                        restore(&backend, &undo)?;
                    }
                }
            }
        }
    }

    let detected = match backend::detect(family, force) {
        Ok(d) => d,
        Err(e) if !required => {
            debug!("{name} skipped: {e}");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    info!(backend = %detected.backend, "{name} backend");
    backends.push(detected.backend.clone());
    let fr = FamilyRun {
        before: Dump::parse(&detected.dump),
        backend: detected.backend,
        rules,
    };
    match decide(&fr, opts)? {
        Decision::Noop(cleanup) => {
            if !cleanup.is_empty() {
                restore(&fr.backend, &cleanup)?;
            }
            Ok(None)
        }
        Decision::Apply { input, previous } => {
            if input.is_empty() {
                return Ok(None);
            }
            let applied = Applied {
                backend: fr.backend.clone(),
                undo: Undo::Previous {
                    before: fr.before.clone(),
                    previous,
                },
            };
            if let Err(e) = restore(&fr.backend, &input) {
                // The failing restore may have committed earlier tables: undo this family too.
                return Err(roll_back_all(std::slice::from_ref(&applied), e));
            }
            info!(backend = %fr.backend, "{} the {name} rules", if opts.cleanup_only { "removed" } else { "applied" });
            Ok(Some(applied))
        }
    }
}

/// Rolls back every family in `applied` (latest first) and returns `err`, or `RollbackFailed` when
/// undoing failed.
fn roll_back_all(applied: &[Applied], err: ApplyError) -> ApplyError {
    for a in applied.iter().rev() {
        let result = match &a.undo {
            Undo::Input(text) => {
                let undo = undo_input(text, None);
                if undo.is_empty() {
                    Ok(())
                } else {
                    restore(&a.backend, &undo)
                }
            }
            Undo::Previous { before, previous } => rollback(
                &FamilyRun {
                    backend: a.backend.clone(),
                    rules: &[],
                    before: before.clone(),
                },
                previous,
            ),
        };
        match result {
            Ok(()) => {
                info!(backend = %a.backend, "rolled back the {} rules", family_name(&a.backend.family))
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

// Declared here, after the production code, so that the module-graph check (e2e `modules`) reads all
// of it.
#[cfg(test)]
pub(crate) mod netns_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::model::Table;

    /// The rules of `table` written as `iptables-save` lines.
    fn rules(table: Table, lines: &[&str]) -> Vec<Rule> {
        lines
            .iter()
            .map(|line| {
                let tokens: Vec<String> = line.split(' ').map(str::to_string).collect();
                Rule {
                    table,
                    chain: tokens[1].clone(),
                    tokens,
                }
            })
            .collect()
    }

    #[test]
    fn cleanup_dry_run_removes_the_plan() {
        let plan = Plan {
            v4: [
                rules(
                    Table::Nat,
                    &[
                        "-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN",
                        "-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006",
                        "-A PREROUTING -p tcp -j ISTIO_INBOUND",
                        "-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT",
                        "-I PREROUTING 1 -i eth1 -j RETURN",
                    ],
                ),
                rules(
                    Table::Mangle,
                    &["-A OUTPUT -p tcp -m connmark --mark 1337 -j CONNMARK --restore-mark"],
                ),
            ]
            .concat(),
            v6: Some(rules(Table::Nat, &["-A OUTPUT -j ISTIO_OUTPUT"])),
            routes: vec![
                RouteAction::AddLoopbackV6Source,
                RouteAction::AddFwmarkRule {
                    family: Family::V4,
                    mark: 1337,
                    table: 133,
                },
            ],
        };
        assert_eq!(
            cleanup_dry_run(&plan),
            "# --cleanup-only: the removal of this configuration's rules, chains and routes\n\
             * mangle\n\
             -D OUTPUT -p tcp -m connmark --mark 1337 -j CONNMARK --restore-mark\n\
             COMMIT\n\
             * nat\n\
             -D PREROUTING -p tcp -j ISTIO_INBOUND\n\
             -D PREROUTING -i eth1 -j RETURN\n\
             -F ISTIO_INBOUND\n\
             -F ISTIO_IN_REDIRECT\n\
             -X ISTIO_INBOUND\n\
             -X ISTIO_IN_REDIRECT\n\
             COMMIT\n\
             # ip6tables-restore\n\
             * nat\n\
             -D OUTPUT -j ISTIO_OUTPUT\n\
             -F ISTIO_OUTPUT\n\
             -X ISTIO_OUTPUT\n\
             COMMIT\n\
             # ip -4 rule del fwmark 1337 lookup 133\n"
        );
    }

    #[test]
    fn undo_removes_exactly_the_committed_sections() {
        let text = "* mangle\n-N ISTIO_DIVERT\n-A ISTIO_DIVERT -j ACCEPT\n-A PREROUTING -p tcp -j ISTIO_DIVERT\nCOMMIT\n\
                    * nat\n-N ISTIO_INBOUND\n-I PREROUTING 1 -i eth1 -j RETURN\nCOMMIT\n";
        // Line 7 (`-N ISTIO_INBOUND`) failed: only mangle committed.
        assert_eq!(
            undo_input(text, Some(7)),
            "* mangle\n-D PREROUTING -p tcp -j ISTIO_DIVERT\n-F ISTIO_DIVERT\n-X ISTIO_DIVERT\nCOMMIT\n"
        );
        assert_eq!(undo_input(text, Some(2)), "");
        assert!(
            undo_input(text, None).contains("-D PREROUTING -i eth1 -j RETURN\n-F ISTIO_INBOUND")
        );
        assert!(declares_nat_inbound(text));
        assert!(!declares_nat_inbound(
            "* mangle\n-N ISTIO_INBOUND\nCOMMIT\n"
        ));
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
        let rules = rules(
            Table::Nat,
            &[
                "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
                "-A OUTPUT -j ISTIO_OUTPUT",
                "-A ISTIO_OUTPUT -j ISTIO_REDIRECT",
                "-I PREROUTING 1 -i eth1 -j RETURN",
            ],
        );
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
