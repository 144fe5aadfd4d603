//! The rules differential: generated istio-iptables configurations run through Istio's
//! own `pilot-agent istio-iptables` and through `iptables-init istio-iptables`, the results compared.
//!
//! - [`generate`] draws the cases from a seed.
//! - A case with the iptables backend runs both with `--dry-run` and `DRY_RUN_FILE_PATH` in the same
//!   namespace (the same addresses and `/etc/resolv.conf`, see [`Namespaces`]), and the two records
//!   are compared after [`normalise`]. Whether each program refused is compared too: Istio accepts
//!   values that only `iptables-restore` refuses when it applies them, so a case Istio accepts and
//!   `iptables-init` refuses is checked by loading Istio's record into a fresh namespace; if the kernel
//!   refuses it, Istio's run would have failed as well ([`allow::Class::IstioRulesRefusedByKernel`]).
//! - A case with `--native-nftables` is applied for real by both in two fresh namespaces (Istio's
//!   `ProgramNftables` has no dry run), and `nft list ruleset` and the routes are compared.
//! - Every `apply_every`-th iptables case is also applied for real by both, and `iptables-save`,
//!   `ip6tables-save` and the routes are compared.
//!
//! A difference is allowed only when [`allow`] classifies it into a class listed, with its reason and
//! Istio's function, in `e2e/rules-differential-allow.tsv`.

pub mod allow;
pub mod generate;
pub mod normalise;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context as _, Result};

use crate::netns::{Family, NetNs};
use generate::{Case, Surroundings, RESOLV_CONFS};

/// The two programs under comparison.
#[derive(Debug, Clone)]
pub struct Programs {
    /// Istio's `pilot-agent` (run as `pilot-agent istio-iptables ...`).
    pub istio: PathBuf,
    /// `iptables-init` (run as `iptables-init istio-iptables ...`).
    pub ours: PathBuf,
}

impl Programs {
    /// The built peer and the built `iptables-init`; panics when either is missing.
    pub fn built() -> Programs {
        Programs {
            istio: crate::peers::peer("pilot-agent"),
            ours: crate::bin("iptables-init"),
        }
    }
}

/// How one program's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub ok: bool,
    pub status: String,
    /// The normalised `DRY_RUN_FILE_PATH` record (dry runs), or the normalised kernel state (applies).
    pub result: Vec<String>,
    pub stderr: String,
}

/// How a case compared.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// The same result, or both refused.
    Same { both_refused: bool },
    /// Different, but in an allow-listed class.
    Allowed(allow::Class),
    /// Different and unexplained.
    Differ(Box<Difference>),
}

/// An unexplained difference, with what reproduces it.
#[derive(Debug, Clone)]
pub struct Difference {
    pub what: String,
    pub istio: Outcome,
    pub ours: Outcome,
    /// The two command lines.
    pub reproducer: [String; 2],
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "difference: {}", self.what)?;
        writeln!(f, "  reproduce (Istio): {}", self.reproducer[0])?;
        writeln!(f, "  reproduce (ours):  {}", self.reproducer[1])?;
        for (name, o) in [("Istio", &self.istio), ("ours", &self.ours)] {
            writeln!(
                f,
                "  {name}: {} ({})",
                if o.ok { "accepted" } else { "refused" },
                o.status
            )?;
            if !o.ok {
                // The error lines (Istio logs much else), else the last lines.
                let errors: Vec<&str> = o
                    .stderr
                    .lines()
                    .filter(|l| l.contains("rror") && !l.contains("GOMEMLIMIT"))
                    .take(3)
                    .collect();
                let lines = if errors.is_empty() {
                    let mut tail: Vec<&str> = o.stderr.lines().rev().take(3).collect();
                    tail.reverse();
                    tail
                } else {
                    errors
                };
                for l in lines {
                    writeln!(f, "    output: {}", l.chars().take(240).collect::<String>())?;
                }
            }
        }
        // The lines only one side has (each side's order kept), at most 12 of each.
        let (a, b) = (&self.istio.result, &self.ours.result);
        for (name, x, y) in [("only Istio", a, b), ("only ours ", b, a)] {
            let mut rest: Vec<&String> = y.iter().collect();
            let mut shown = 0;
            for line in x {
                if let Some(at) = rest.iter().position(|r| *r == line) {
                    rest.remove(at);
                } else if shown < 12 {
                    writeln!(f, "  {name}: {line}")?;
                    shown += 1;
                }
            }
        }
        Ok(())
    }
}

/// Namespaces per [`Surroundings`], each with its `/etc/netns/<name>/resolv.conf` (which `ip netns exec`
/// bind-mounts over `/etc/resolv.conf`); dry runs share them, since a dry run touches nothing.
#[derive(Default)]
pub struct Namespaces {
    shared: HashMap<Surroundings, Prepared>,
}

/// A namespace with its addresses and resolv.conf in place; removes the resolv.conf when dropped.
pub struct Prepared {
    pub ns: NetNs,
    etc: PathBuf,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}

impl Prepared {
    /// A fresh namespace set up as `s` says.
    pub fn new(prefix: &str, s: Surroundings) -> Result<Prepared> {
        Prepared::with(prefix, s.addresses, RESOLV_CONFS[s.resolv])
    }

    /// A fresh namespace with `addresses` and `resolv` as its `/etc/resolv.conf`.
    pub fn with(prefix: &str, addresses: generate::Addresses, resolv: &str) -> Result<Prepared> {
        let ns = NetNs::new(prefix)?;
        for cmd in addresses.commands() {
            ns.run(&cmd)?;
        }
        let etc = Path::new("/etc/netns").join(ns.name());
        std::fs::create_dir_all(&etc).with_context(|| format!("creating {}", etc.display()))?;
        let prepared = Prepared { ns, etc };
        std::fs::write(prepared.etc.join("resolv.conf"), resolv)
            .context("writing the namespace's resolv.conf")?;
        Ok(prepared)
    }
}

impl Namespaces {
    fn get(&mut self, s: Surroundings) -> Result<&Prepared> {
        if let std::collections::hash_map::Entry::Vacant(e) = self.shared.entry(s) {
            e.insert(Prepared::new("rdiff", s)?);
        }
        self.shared.get(&s).context("namespace just inserted")
    }
}

static RECORDS: AtomicU64 = AtomicU64::new(0);

/// Runs `program istio-iptables <args> [extra]` in `ns` with exactly the case's environment; with
/// `record`, the `DRY_RUN_FILE_PATH` record is read back.
fn run(
    ns: &NetNs,
    program: &Path,
    case: &Case,
    extra: &[&str],
    record: bool,
) -> Result<(Outcome, Option<String>)> {
    let file = record.then(|| {
        std::env::temp_dir().join(format!(
            "rdiff-{}-{}.rec",
            std::process::id(),
            RECORDS.fetch_add(1, Ordering::Relaxed)
        ))
    });
    let mut cmd = ns.command(program);
    cmd.arg("istio-iptables")
        .args(&case.args)
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(case.env.iter().map(|(k, v)| (k, v)))
        // Whatever a program writes beside its output (Istio's log to a --log_target file) lands there.
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null());
    if let Some(f) = &file {
        cmd.env("DRY_RUN_FILE_PATH", f);
    }
    let out = cmd
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    let text = match &file {
        Some(f) => {
            let t = std::fs::read_to_string(f).unwrap_or_default();
            let _ = std::fs::remove_file(f);
            Some(t)
        }
        None => None,
    };
    let outcome = Outcome {
        ok: out.status.success(),
        status: out.status.to_string(),
        result: Vec::new(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout),
    };
    Ok((outcome, text))
}

/// The namespace's kernel state in normal form: `nft list ruleset` (every table) for a
/// `--native-nftables` case, else `iptables-save` and `ip6tables-save`; then policy rules and routes.
fn kernel_state(ns: &NetNs, nft: bool) -> Result<Vec<String>> {
    let mut out = Vec::new();
    if nft {
        let text = ns.run(&["nft", "list", "ruleset"])?;
        out.extend(normalise::nft_ruleset(&text));
    } else {
        for family in [Family::V4, Family::V6] {
            let dump = normalise::save_dump(&ns.save(family)?);
            for (table, chains) in dump {
                for (chain, rules) in chains {
                    out.push(format!("{family:?} {table} {chain}: {}", rules.join(" | ")));
                }
            }
        }
    }
    for argv in [
        &["ip", "-4", "rule", "show"][..],
        &["ip", "-6", "rule", "show"],
        &["ip", "-4", "route", "show", "table", "all"],
        &["ip", "-6", "route", "show", "table", "all"],
    ] {
        let text = ns.run(argv)?;
        out.extend(
            normalise::sorted_lines(&text)
                .into_iter()
                .map(|l| format!("{}: {l}", argv[1..].join(" "))),
        );
    }
    Ok(out)
}

/// Whether `iptables-restore` accepts the restore inputs of Istio's record in a fresh namespace.
fn kernel_accepts_record(record: &[String], s: Surroundings) -> Result<bool> {
    let (v4, v6) = normalise::restore_parts(record);
    let p = Prepared::new("rdiff-k", s)?;
    for (family, input) in [(Family::V4, v4), (Family::V6, v6)] {
        if !input.is_empty() && p.ns.restore(family, &input).is_err() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether two records' restore inputs, each loaded into a fresh namespace, leave the same
/// `iptables-save` / `ip6tables-save` state. A record iptables-restore refuses is never the same.
fn same_kernel_state(a: &[String], b: &[String], s: Surroundings) -> Result<bool> {
    let (pa, pb) = (Prepared::new("rdiff-ka", s)?, Prepared::new("rdiff-kb", s)?);
    let (a4, a6) = normalise::restore_parts(a);
    let (b4, b6) = normalise::restore_parts(b);
    for (family, x, y) in [(Family::V4, a4, b4), (Family::V6, a6, b6)] {
        for (ns, input) in [(&pa.ns, x), (&pb.ns, y)] {
            if !input.is_empty() && ns.restore(family, &input).is_err() {
                return Ok(false);
            }
        }
        if normalise::save_dump(&pa.ns.save(family)?) != normalise::save_dump(&pb.ns.save(family)?)
        {
            return Ok(false);
        }
    }
    // The commands outside the restore inputs (the save probes, a cleanup's discrete commands) must
    // still be the same.
    let outside = |r: &[String]| -> Vec<String> {
        let (mut out, mut in_table) = (Vec::new(), false);
        for l in r {
            if l.starts_with("* ") {
                in_table = true;
            } else if l == "COMMIT" {
                in_table = false;
            } else if !in_table {
                out.push(l.clone());
            }
        }
        out
    };
    Ok(outside(a) == outside(b))
}

/// Compares one case. `apply` also applies an iptables case for real.
pub fn compare(
    programs: &Programs,
    namespaces: &mut Namespaces,
    case: &Case,
    apply: bool,
) -> Result<Verdict> {
    let reproducer = |extra: &[&str]| {
        [
            case.shell_line("pilot-agent", extra),
            case.shell_line("iptables-init", extra),
        ]
    };
    if case.nftables || case.cleanup {
        return compare_applied(programs, case, case.nftables, reproducer(&[]));
    }
    let ns = &namespaces.get(case.surroundings)?.ns;
    let (mut istio, istio_rec) = run(ns, &programs.istio, case, &["--dry-run"], true)?;
    let (mut ours, ours_rec) = run(ns, &programs.ours, case, &["--dry-run"], true)?;
    istio.result = normalise::record(istio_rec.as_deref().unwrap_or_default());
    ours.result = normalise::record(ours_rec.as_deref().unwrap_or_default());
    let repro = reproducer(&["--dry-run"]);
    let verdict = match (istio.ok, ours.ok) {
        (false, false) => Verdict::Same { both_refused: true },
        (true, true) if istio.result == ours.result => Verdict::Same {
            both_refused: false,
        },
        // The same rules spelled differently (`--dport 080`, `::127.0.0.53`): the kernel reads both alike.
        (true, true) if same_kernel_state(&istio.result, &ours.result, case.surroundings)? => {
            Verdict::Same {
                both_refused: false,
            }
        }
        (true, false) if !kernel_accepts_record(&istio.result, case.surroundings)? => {
            Verdict::Allowed(allow::Class::IstioRulesRefusedByKernel)
        }
        _ => classify(case, &istio, &ours, "dry-run records differ", repro),
    };
    if apply
        && matches!(
            verdict,
            Verdict::Same {
                both_refused: false
            }
        )
    {
        return compare_applied(programs, case, false, reproducer(&[]));
    }
    Ok(verdict)
}

/// Both programs applied for real in two fresh namespaces; the kernel states compared.
fn compare_applied(
    programs: &Programs,
    case: &Case,
    nft: bool,
    reproducer: [String; 2],
) -> Result<Verdict> {
    let a = Prepared::new("rdiff-i", case.surroundings)?;
    let b = Prepared::new("rdiff-o", case.surroundings)?;
    if case.cleanup {
        // The same starting state in both: the configuration applied (by iptables-init; a configuration
        // it refuses leaves both namespaces empty).
        let setup = case.without_cleanup();
        for p in [&a, &b] {
            run(&p.ns, &programs.ours, &setup, &[], false)?;
        }
    }
    let (mut istio, _) = run(&a.ns, &programs.istio, case, &[], false)?;
    let (mut ours, _) = run(&b.ns, &programs.ours, case, &[], false)?;
    istio.result = kernel_state(&a.ns, nft)?;
    ours.result = kernel_state(&b.ns, nft)?;
    Ok(match (istio.ok, ours.ok) {
        (false, false) => Verdict::Same { both_refused: true },
        (true, true) if istio.result == ours.result => Verdict::Same {
            both_refused: false,
        },
        _ => classify(
            case,
            &istio,
            &ours,
            "kernel states after applying differ",
            reproducer,
        ),
    })
}

fn classify(
    case: &Case,
    istio: &Outcome,
    ours: &Outcome,
    what: &str,
    reproducer: [String; 2],
) -> Verdict {
    match allow::classify(case, istio, ours) {
        Some(class) => Verdict::Allowed(class),
        None => Verdict::Differ(Box::new(Difference {
            what: format!("case {}#{}: {what}", case.seed, case.index),
            istio: istio.clone(),
            ours: ours.clone(),
            reproducer,
        })),
    }
}

/// Counts of a run.
pub type Tally = crate::differential::Tally<Applied, Difference>;

/// What only the rules differential counts: the cases applied for real.
#[derive(Debug, Default, Clone)]
pub struct Applied {
    pub nftables: u64,
    pub cleanup: u64,
    pub applied: u64,
}

impl crate::differential::Counts for Applied {
    fn add(&mut self, other: Applied) {
        self.nftables += other.nftables;
        self.cleanup += other.cleanup;
        self.applied += other.applied;
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cases: {} same ({} of them refused by both), {} allowed {:?}, {} differences; applied for real: {} with --native-nftables, {} with --cleanup-only, {} other iptables cases",
            self.cases,
            self.same,
            self.both_refused,
            self.allowed.values().sum::<u64>(),
            self.allowed,
            self.differences.len(),
            self.own.nftables,
            self.own.cleanup,
            self.own.applied
        )
    }
}

/// Fails loudly unless running as root with the tools both programs and the comparison run.
pub fn require_root() {
    test_support::root::require_root_with(
        &[
            "ip",
            "iptables-restore",
            "ip6tables-restore",
            "iptables-save",
            "nft",
        ],
        "install iptables, iproute2 and nftables; scripts/test.sh does",
    );
}

/// Runs cases `start..start + count` of `seed` (stopping early at `deadline`), applying every
/// `apply_every`-th iptables case for real.
pub fn run_cases(
    programs: &Programs,
    seed: u64,
    range: std::ops::Range<u64>,
    apply_every: u64,
    deadline: Option<std::time::Instant>,
) -> Result<Tally> {
    let mut namespaces = Namespaces::default();
    let mut tally = Tally::default();
    for index in range {
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            break;
        }
        let case = generate::case(seed, index);
        let apply = !case.nftables && !case.cleanup && apply_every > 0 && index % apply_every == 0;
        let verdict = compare(programs, &mut namespaces, &case, apply)
            .with_context(|| format!("case {seed}#{index}"))?;
        tally.cases += 1;
        tally.own.nftables += u64::from(case.nftables);
        tally.own.cleanup += u64::from(case.cleanup);
        tally.own.applied += u64::from(apply);
        match verdict {
            Verdict::Same { both_refused } => {
                tally.same += 1;
                tally.both_refused += u64::from(both_refused);
            }
            Verdict::Allowed(class) => {
                *tally.allowed.entry(class.name().to_string()).or_default() += 1
            }
            Verdict::Differ(d) => tally.differences.push(*d),
        }
    }
    Ok(tally)
}
