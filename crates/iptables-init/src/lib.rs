//! `iptables-init`: the init-container half of transparent sidecar interception.
//!
//! The pipeline is deliberately split so that `--dry-run` prints exactly what would be applied:
//!
//! 1. `cli` reads istio-iptables' command line, and `config` resolves it with the environment and
//!    the surroundings (`detect`) into a validated `config::Config`; both read each flag's names,
//!    variables and default from its one definition in `flags`, and `logging` its log flags;
//! 2. the backend turns the configuration into its rule model, taking Istio's steps in the order
//!    `steps` lists them, and `routes` into the route actions both backends do after their rules;
//! 3. the backend renders the model as the text Istio would feed its tool (route actions as comments);
//! 4. the backend applies it, atomically, and implements `--reconcile` and `--cleanup-only`;
//! 5. `validation` proves interception with a real connection (`--run-validation`).
//!
//! The two backends are laid out alike, each a directory of `model`, `render`, `apply` and `walk`:
//! `iptables` (the default: a `Plan` rendered as `iptables-restore` input, applied per family through
//! `iptables-restore --noflush` with rollback, or by becoming `iptables-nft-restore`) and `nft`
//! (`--native-nftables`: a `Ruleset` rendered as the `nft -f` text Istio pipes, applied as one nf_tables
//! batch over netlink, routes and the `::6` address through `rtnetlink`). `netlink` is the framing and
//! the nf_tables existence probe they share.
//!
//! `explain` answers where connections go under a configuration without touching anything: the same
//! `cli`/`config` resolution with fixed surroundings, then the backend's `walk` of its rule model per
//! `connection`, both translating into the one evaluator in `walk`.
//!
//! `run` strings them together; `main` only calls it.

pub(crate) mod cli;
pub(crate) mod config;
pub(crate) mod connection;
pub(crate) mod detect;
pub(crate) mod explain;
pub(crate) mod iptables;
pub(crate) mod logging;
mod netlink;
pub(crate) mod nft;
pub(crate) mod routes;
pub(crate) mod rtnetlink;
mod stdio;
pub(crate) mod steps;
pub(crate) mod validation;
pub(crate) mod walk;

pub use cli::{Args, FlagValue, FlagValueError};
pub use config::Cidr;
pub use connection::{Connection, ConnectionError, Direction, Protocol};
pub use explain::{
    assumptions, explain, Backend, ExplainError, Explanation, Verdict, VerdictKind,
    OFFLINE_ASSUMPTIONS,
};
pub use sidecar_core::flags::parse_go_bool;

use std::ffi::OsString;
use std::io::Write as _;
use std::process::ExitCode;

use iptables::{apply, render};
use sidecar_core::flags;

/// Exit status for a configuration, environment, detection, apply or route error (Istio's 1).
pub const EXIT_ERROR: u8 = 1;
/// Exit status when `--run-validation` fails (Istio's 126).
pub const EXIT_VALIDATION_FAILED: u8 = 126;
/// Exit status for a command-line parse or logging-config error (Istio's `os.Exit(-1)`, 255).
pub const EXIT_USAGE: u8 = 255;

/// Every exit status of a run and its cause: docs/reference/exit-codes.md is generated from here
/// (`cargo run -p xtask -- docs`); `None` is any other status, which only the exec path gives.
pub const EXIT_STATUSES: &[(Option<u8>, &str)] = &[
    (Some(0), "Success (rules printed, applied or already in place)."),
    (
        Some(EXIT_ERROR),
        "Invalid configuration, environment or detection (nothing touched), or an apply/route error.",
    ),
    (
        None,
        "Exec path only: iptables-nft-restore refused the input with its own status (e.g. 4); nothing was applied.",
    ),
    (
        Some(EXIT_VALIDATION_FAILED),
        "`--run-validation` failed: interception could not be proven.",
    ),
    (
        Some(EXIT_USAGE),
        "Command-line parse error (unknown flag, bad boolean/number/duration) or invalid log flag.",
    ),
];

/// The options `apply::apply` needs from a configuration.
pub(crate) fn apply_options(cfg: &config::Config) -> apply::ApplyOptions {
    apply::ApplyOptions {
        reconcile: cfg.reconcile,
        cleanup_only: cfg.cleanup_only,
        force_apply: cfg.force_apply,
        force_binary: cfg.force_binary.clone(),
    }
}

/// The options `validation::run` needs from a configuration. The probe's family is the detected host
/// IP's (Istio's rule); without detection it follows `--ipv6`.
pub(crate) fn validation_options(cfg: &config::Config) -> validation::ValidationOptions {
    validation::ValidationOptions {
        proxy_port: cfg.proxy_port,
        inbound_port: cfg.inbound_capture_port,
        probe_port: cfg.probe_port,
        timeout: cfg.probe_timeout,
        ipv6: cfg.host_ip.map_or(cfg.ipv6, |ip| ip.is_ipv6()),
    }
}

/// Reports the error that ends the run: through the log when errors are logged (so `--log_as_json`
/// keeps stderr machine-readable), else straight to stderr, so the reason is never lost.
fn report(msg: &str) {
    if tracing::enabled!(tracing::Level::ERROR) {
        tracing::error!("{msg}");
    } else {
        eprintln!("iptables-init: error: {msg}");
    }
}

/// Prints a command-line parse error (or the help or version clap was asked for) and returns the
/// exit status: [`EXIT_USAGE`] for an error, 0 for help and version.
pub(crate) fn parse_failure(e: &clap::Error) -> u8 {
    let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
    stdio::print_clap(e);
    if let Some(clap::error::ContextValue::String(arg)) =
        e.get(clap::error::ContextKind::InvalidArg)
    {
        if flags::parse_go_bool(arg).is_ok() {
            eprintln!(
                "tip: a boolean flag takes its value after '=', e.g. --dry-run={arg} \
                 (istio-iptables would ignore {arg:?} and leave the flag on)"
            );
        }
    }
    code
}

/// Why [`apply_in_process`] applied nothing.
#[derive(Debug, thiserror::Error)]
pub enum InProcessError {
    /// The settings ask for what an in-process caller does not do (a dry run, `--run-validation`).
    #[error("istio-iptables settings: {0}")]
    Usage(String),
    /// The configuration was refused before any rule was built.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The backend's apply failed; it is atomic, so nothing of it stays.
    #[error("{0}")]
    Apply(String),
}

/// Applies the rules that istio-iptables' settings `args` describe to the current network namespace,
/// inside this process and without ever `exec`ing: what the CNI plugin does once it has entered a pod's
/// namespace (Istio's `cni/pkg/plugin` `Program`, which fills istio-iptables' `config.Config` and calls
/// `ProgramIptables` or `ProgramNftables`). The caller fills [`Args`] by flag, as a command line would;
/// the same resolution, rule model and apply as `run` follow. `env` is read for the environment-only
/// settings, as Istio's `FillConfigFromEnvironment`. Dry runs and `--run-validation` are not for this
/// caller and are refused.
pub fn apply_in_process(
    args: &Args,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), InProcessError> {
    let cfg = resolve_in_process(args, env, &detect::HostSystem)?;
    tracing::debug!(?cfg, "configuration");
    if cfg.skip_rule_apply {
        return Ok(());
    }
    if cfg.native_nftables {
        return nft::apply::run(&cfg).map_err(|e| InProcessError::Apply(e.to_string()));
    }
    let mut probe = apply::probe();
    if !cfg.cleanup_only {
        apply::warn_of_native_tables(probe.as_mut());
    }
    apply::apply(&iptables::model::build(&cfg), &apply_options(&cfg))
        .map_err(|e| InProcessError::Apply(e.to_string()))
}

/// What [`apply_in_process`] would refuse before touching anything, without touching anything: the
/// same `config::resolve` (each value checked as for `iptables-init` itself),
/// with no surroundings read (the interface addresses, `/etc/resolv.conf` and `/etc/passwd` are those
/// of [`OFFLINE_ASSUMPTIONS`], since the pod's are known only inside its namespace). The CNI plugin
/// runs it on the argument each pod annotation becomes, before it enters the pod's namespace, so a
/// value passes its check exactly when the apply would take it.
pub fn check_in_process(
    args: &Args,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), InProcessError> {
    resolve_in_process(args, env, &explain::Offline { ipv6: false }).map(drop)
}

/// The in-process callers' resolution (one function, so the check and the apply refuse the same).
fn resolve_in_process(
    args: &Args,
    env: config::Env,
    sys: &dyn detect::System,
) -> Result<config::Config, InProcessError> {
    let cfg = config::resolve(args, env, sys)?;
    if cfg.dry_run || cfg.run_validation {
        return Err(InProcessError::Usage(
            "--dry-run and --run-validation are not applied in-process".to_string(),
        ));
    }
    Ok(cfg)
}

/// Runs `iptables-init` with the process environment and surroundings.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let env = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
    run_with(args, &env, &detect::HostSystem)
}

/// Runs `iptables-init`: parse, validate, build the plan, then print it (`--dry-run`) or apply it, then
/// validate (`--run-validation`). Returns Istio's exit statuses. `iptables-init explain ...` runs
/// `explain` instead, which reads neither `env` nor `sys`.
pub fn run_with(
    args: impl IntoIterator<Item = OsString>,
    env: config::Env,
    sys: &dyn detect::System,
) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().collect();
    if args.get(1).is_some_and(|a| a == explain::SUBCOMMAND) {
        // Pure computation: neither the environment nor the surroundings are passed on.
        let code = explain::main(&args[2..], &mut stdio::out(), &mut stdio::err());
        return ExitCode::from(code);
    }
    let args = match cli::Args::parse_args(args) {
        Ok(a) => a,
        Err(e) => return ExitCode::from(parse_failure(&e)),
    };
    match logging::LogConfig::from_args(&args) {
        Ok(log) => log.install(),
        Err(e) => {
            eprintln!("iptables-init: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let cfg = match config::resolve(&args, env, sys) {
        Ok(c) => c,
        Err(e) => {
            report(&e.to_string());
            return ExitCode::from(EXIT_ERROR);
        }
    };
    tracing::debug!(?cfg, "configuration");
    let plan = iptables::model::build(&cfg);

    if cfg.skip_rule_apply {
        // Istio's ProgramIptables and ProgramNftables skip everything, the dry run's recording stub
        // included: no record, no rules printed (found by the rules differential).
        tracing::info!("--skip-rule-apply: not applying rules");
    } else if cfg.dry_run {
        if let Some(path) = &cfg.dry_run_file {
            if cfg.cleanup_only {
                tracing::warn!(path = %path.display(), "DRY_RUN_FILE_PATH is not written with --cleanup-only");
            } else if let Err(e) = std::fs::write(
                path,
                if cfg.native_nftables {
                    // Istio's nftables goldens are the transaction itself.
                    nft::render::transaction(&nft::model::build(&cfg))
                } else {
                    render::dry_run_record(&plan)
                },
            ) {
                report(&format!(
                    "DRY_RUN_FILE_PATH={}: cannot write the dry-run record: {e}",
                    path.display()
                ));
                return ExitCode::from(EXIT_ERROR);
            }
        }
        // With --cleanup-only nothing would be applied: the dry run shows the removal instead.
        let text = if cfg.native_nftables {
            if cfg.cleanup_only {
                nft::render::cleanup_transaction(&nft::model::build(&cfg))
            } else {
                nft::render::dry_run(&nft::model::build(&cfg))
            }
        } else if cfg.cleanup_only {
            apply::cleanup_dry_run(&plan)
        } else {
            render::dry_run(&plan)
        };
        let mut out = stdio::out();
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            eprintln!("iptables-init: writing the dry-run output: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    } else if cfg.native_nftables {
        if let Err(e) = nft::apply::run(&cfg) {
            report(&e.to_string());
            return ExitCode::from(EXIT_ERROR);
        }
    } else {
        let opts = apply_options(&cfg);
        let mut probe = apply::probe();
        if !cfg.cleanup_only {
            apply::warn_of_native_tables(probe.as_mut());
        }
        // The exec path ends this process, so it is only for a run in which nothing follows the apply.
        if !cfg.run_validation {
            if let Some(restore) = apply::exec_restore(&plan, &opts, probe.take()) {
                let e = restore.exec();
                tracing::warn!("exec of the restore failed ({e}); applying the usual way");
            }
        }
        if let Err(e) = apply::apply(&plan, &opts) {
            report(&e.to_string());
            return ExitCode::from(EXIT_ERROR);
        }
    }

    if cfg.run_validation {
        if let Err(e) = validation::run(&validation_options(&cfg)) {
            let msg = format!(
                "iptables validation failed; workload is not ready for Istio. \
                 When using Istio CNI, this can occur if a pod is scheduled before the node is ready: {e}"
            );
            report(&msg);
            return ExitCode::from(EXIT_VALIDATION_FAILED);
        }
        tracing::debug!("validation done");
    }
    ExitCode::SUCCESS
}
