//! What the caller asks of an apply.

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
