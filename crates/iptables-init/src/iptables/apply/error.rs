//! Why an apply failed, and how its messages name a family.

use crate::config::Family;

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
