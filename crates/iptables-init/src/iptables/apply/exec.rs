//! The exec path: for the init container's normal run, this process becomes `iptables-nft-restore`.
//!
//! Most of an apply's cost over a bare `iptables-restore` is process handling: our process, the restore
//! child it spawns, the pipe to it and the wait for it. When the run is the plain apply of one table into a
//! namespace that holds nothing of ours, the optimistic path would feed the `--dry-run` text to one
//! restore and be done; so instead of spawning that restore, the text is written into a pipe and the
//! process `exec`s the restore with the pipe as its stdin. Nothing of ours stays around.
//!
//! The trade-off: after the exec there is nobody left to interpret a failure. The restore's exit status is
//! the run's — non-zero, but not always our `EXIT_ERROR` (1 for a refused line; 4 for a resource problem,
//! e.g. a nat table whose base chains iptables-nft cannot use) — and its own message on stderr names the
//! failing input line, instead of our `ApplyError::Restore` wording. Nothing needs rolling back: with one
//! table, `iptables-nft-restore` commits one nf_tables transaction, so a refused input changes nothing.
//! Everything else takes the usual path ([`apply`](crate::iptables::apply::apply)), which stays as it was:
//! * `--reconcile`, `--cleanup-only`, `--force-apply`: they need the state;
//! * IPv6 (two families: a failure in the second must roll back the first), route actions (TPROXY), or
//!   more than one table (committed table by table, so a failure may leave some behind);
//! * `--run-validation` (checked by the caller): something has to run after the apply;
//! * debug logging: the usual path logs the restore input and the final state;
//! * a backend other than nft chosen without a process ([`super::backend::locate_without_exec`]), or
//!   missing capabilities (the usual path names them);
//! * any chain the plan declares already exists ([`crate::netlink::Probe`], no process: one netlink
//!   request for the table, and when the table exists one per chain): a run of ours was here, and only
//!   the checked path can tell "no-op" from "differs";
//! * the text does not fit into the pipe at once (the pipe is filled before the exec, and nobody would be
//!   left to write the rest).

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use tracing::info;

use super::backend;
use super::capabilities::check_capabilities;
use super::error::family_name;
use super::options::ApplyOptions;
use super::state::declares_nat_inbound;
use crate::config::Family;
use crate::iptables::model::Plan;
use crate::iptables::render;
use crate::netlink::{Probe, ProbeError};

/// A restore this process is ready to become, input already in its stdin pipe. Built by [`exec_restore`].
#[derive(Debug)]
pub struct ExecRestore {
    command: Command,
    program: PathBuf,
    backend: backend::Backend,
}

impl ExecRestore {
    /// Replaces this process with the restore. Returns only when the exec failed; nothing was applied
    /// then, and the caller can take the usual path.
    pub fn exec(mut self) -> std::io::Error {
        info!(
            backend = %self.backend,
            "applying the {} rules: {} --noflush replaces this process (exec); its exit status and messages are the run's",
            family_name(&self.backend.family),
            self.program.display()
        );
        self.command.exec()
    }
}

/// The restore input, when the plan and options alone allow the exec path (see the module
/// documentation): the plain apply, IPv4 only, no routes, exactly one table, declaring nat
/// `ISTIO_INBOUND`.
fn eligible_input(plan: &Plan, opts: &ApplyOptions) -> Option<String> {
    if opts.reconcile || opts.cleanup_only || opts.force_apply {
        return None;
    }
    if plan.v6.is_some() || !plan.routes.is_empty() {
        return None;
    }
    let text = render::restore_input(&plan.v4);
    let tables = text.lines().filter(|l| l.starts_with('*')).count();
    (tables == 1 && declares_nat_inbound(&text)).then_some(text)
}

/// The table and the chains the (single-table) restore input declares with `-N`.
fn declared_chains(text: &str) -> Option<(&str, Vec<&str>)> {
    let table = text.lines().find_map(|l| l.strip_prefix('*'))?.trim();
    let chains = text.lines().filter_map(|l| l.strip_prefix("-N ")).collect();
    Some((table, chains))
}

/// Decides whether this run can end in an exec of the restore and prepares it, or returns `None`: then
/// [`apply`](crate::iptables::apply::apply) must run (nothing has been changed). The caller makes sure nothing follows the apply
/// (no `--run-validation`). `probe` is the run's nf_tables probe, if it has one open.
pub fn exec_restore(plan: &Plan, opts: &ApplyOptions, probe: Option<Probe>) -> Option<ExecRestore> {
    // The usual path logs the restore input and the final state at debug level.
    if tracing::enabled!(tracing::Level::DEBUG) {
        return None;
    }
    let text = eligible_input(plan, opts)?;
    check_capabilities().ok()?;
    let force = opts.force_binary.as_deref().filter(|f| !f.is_empty());
    let (backend, program) = backend::locate_without_exec(Family::V4, force)?;
    let program = program?;
    let (table, chains) = declared_chains(&text)?;
    match none_exists(probe, table, &chains) {
        Ok(true) => {}
        // A chain of ours exists (a rerun): the checked path decides, and says what it found.
        Ok(false) => return None,
        // Debug logging is off here, so this is said at info: the probe failing is unexpected.
        Err(e) => {
            info!("cannot tell without a process whether rules of ours exist ({e}); reading the state");
            return None;
        }
    }
    let stdin = filled_pipe(&text)?;
    let mut command = Command::new(&program);
    command.arg("--noflush").stdin(stdin);
    Some(ExecRestore {
        command,
        program,
        backend,
    })
}

/// Whether none of `chains` exists in the IPv4 `table`. In the init container's namespace the table does
/// not exist yet (nothing ran iptables-nft there), and that one answer covers every chain.
fn none_exists(probe: Option<Probe>, table: &str, chains: &[&str]) -> Result<bool, ProbeError> {
    let mut probe = match probe {
        Some(p) => p,
        None => Probe::open()?,
    };
    if !probe.table_exists(Family::V4, table)? {
        return Ok(true);
    }
    for chain in chains {
        if probe.chain_exists(Family::V4, table, chain)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A pipe holding all of `text`, write end closed, as a stdin for the restore; `None` when the text does
/// not fit into the pipe at once (the write end is non-blocking, so this cannot hang) or a call fails.
fn filled_pipe(text: &str) -> Option<Stdio> {
    // O_CLOEXEC: the descriptors must not leak into the restore beyond its stdin (which `Command` dup2s
    // to 0 without the flag).
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).ok()?;
    fcntl(&write, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).ok()?;
    let written = nix::unistd::write(&write, text.as_bytes()).ok()?;
    // Closing the write end now: the restore reads to end of file.
    drop(write);
    (written == text.len()).then(|| Stdio::from(read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::apply::netns_tests::{default_rules, in_fresh_netns, injected_plan, sh};
    use crate::iptables::model::{Rule, Table};
    use crate::routes::RouteAction;

    fn plan(v4: Vec<Rule>) -> Plan {
        Plan {
            v4,
            v6: None,
            routes: vec![],
        }
    }

    #[test]
    fn only_the_plain_single_table_ipv4_apply_is_eligible() {
        let p = injected_plan();
        let text = eligible_input(&p, &ApplyOptions::default()).expect("the injected plan");
        assert_eq!(text, render::restore_input(&p.v4));
        assert_eq!(
            declared_chains(&text),
            Some((
                "nat",
                vec![
                    "ISTIO_INBOUND",
                    "ISTIO_REDIRECT",
                    "ISTIO_IN_REDIRECT",
                    "ISTIO_OUTPUT"
                ]
            ))
        );
        for opts in [
            ApplyOptions {
                reconcile: true,
                ..Default::default()
            },
            ApplyOptions {
                cleanup_only: true,
                ..Default::default()
            },
            ApplyOptions {
                force_apply: true,
                ..Default::default()
            },
        ] {
            assert_eq!(eligible_input(&p, &opts), None, "{opts:?}");
        }
        let with_v6 = Plan {
            v6: Some(vec![]),
            ..injected_plan()
        };
        assert_eq!(eligible_input(&with_v6, &ApplyOptions::default()), None);
        let with_routes = Plan {
            routes: vec![RouteAction::AddLoopbackV6Source],
            ..injected_plan()
        };
        assert_eq!(eligible_input(&with_routes, &ApplyOptions::default()), None);
        let mut two_tables = default_rules(&[]);
        two_tables.push(Rule::new(Table::Mangle, "-A PREROUTING -j RETURN"));
        assert_eq!(
            eligible_input(&plan(two_tables), &ApplyOptions::default()),
            None
        );
        // Without nat ISTIO_INBOUND, "no chain of ours" would not mean "no run of ours".
        let no_inbound = vec![Rule::new(Table::Nat, "-A OUTPUT -p tcp -j RETURN")];
        assert_eq!(
            eligible_input(&plan(no_inbound), &ApplyOptions::default()),
            None
        );
    }

    #[test]
    fn none_exists_asks_the_table_then_each_chain() {
        let chains = ["ISTIO_INBOUND", "ISTIO_OUTPUT"];
        in_fresh_netns(move || {
            // No nat table: one answer for all chains.
            assert_eq!(none_exists(None, "nat", &chains), Ok(true));
            // A nat table without our chains: asked chain by chain.
            sh("printf '*nat\\n-N FOREIGN\\nCOMMIT\\n' | iptables-nft-restore --noflush");
            assert_eq!(none_exists(None, "nat", &chains), Ok(true));
            sh("printf '*nat\\n-N ISTIO_OUTPUT\\nCOMMIT\\n' | iptables-nft-restore --noflush");
            assert_eq!(none_exists(None, "nat", &chains), Ok(false));
        });
    }

    #[test]
    fn a_small_text_fills_the_pipe_and_a_huge_one_does_not() {
        assert!(filled_pipe("* nat\nCOMMIT\n").is_some());
        // Larger than any pipe buffer (default 64 KiB, at most /proc/sys/fs/pipe-max-size, 1 MiB).
        assert!(filled_pipe(&"#".repeat(4 << 20)).is_none());
    }
}
