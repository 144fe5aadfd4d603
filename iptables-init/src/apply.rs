//! Applying a [`Plan`]: backend detection, state check, atomic restore per family with rollback,
//! `--reconcile`, `--cleanup-only`, and the TPROXY routes. (Contract only; the apply engineer fills it in.)

use crate::rules::Plan;

/// How the plan is to be applied; built by `main` from the command line.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// Replace existing rules of ours that differ from the plan.
    pub reconcile: bool,
    /// Remove everything of ours and apply nothing.
    pub cleanup_only: bool,
    /// Apply even when the current state already matches.
    pub force_apply: bool,
    /// `FORCE_IPTABLES_BINARY`: `Some("legacy")` or `Some("nft")`.
    pub force_binary: Option<String>,
}

/// Why applying failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Placeholder until the apply path exists.
    #[error("applying rules is not implemented yet")]
    NotImplemented,
}

/// Applies `plan` to the current network namespace.
pub fn apply(_plan: &Plan, _opts: &ApplyOptions) -> Result<(), ApplyError> {
    Err(ApplyError::NotImplemented)
}
