//! Applying a ruleset in-process: the TPROXY/IPv6 routes over rtnetlink, then one nf_tables batch that
//! re-creates each of Istio's tables (add + delete + add, so stale chains and tables a previous
//! configuration left are gone) and removes the tables this configuration does not need.
//!
//! Routes go first so that a refused batch can take back exactly the routes this run added; the batch
//! itself is applied whole or not at all by the kernel. No process is started.

use super::model::{Ruleset, TableId};
use super::netlink::{Batch, GroupFile, Groups, NetlinkError, Socket, UnknownGroup};
use crate::rtnetlink::{self, RouteError};

/// Why a `--native-nftables` apply or cleanup failed. Nothing is left changed by any of them.
#[derive(Debug, thiserror::Error)]
pub enum NftApplyError {
    /// `CAP_NET_ADMIN` is not in the effective set; nothing was touched.
    #[error("missing capability CAP_NET_ADMIN in the effective set (--native-nftables needs it to change nf_tables and routes); nothing was changed")]
    MissingCapability,
    /// The capability sets could not be read.
    #[error("cannot read the process capabilities: {0}")]
    Capabilities(String),
    /// An owner group name could not be resolved; nothing was touched.
    #[error("{0}; nothing was changed")]
    Group(#[from] UnknownGroup),
    /// The kernel refused the batch (nothing of it was applied; routes this run added were removed).
    #[error("{0}; nothing was changed")]
    Netlink(#[from] NetlinkError),
    /// A route action failed (the routes this run added before it were removed).
    #[error("{0}; nothing was changed")]
    Route(#[from] RouteError),
}

fn check_capability() -> Result<(), NftApplyError> {
    use caps::{CapSet, Capability};
    match caps::has_cap(None, CapSet::Effective, Capability::CAP_NET_ADMIN) {
        Ok(true) => Ok(()),
        Ok(false) => Err(NftApplyError::MissingCapability),
        Err(e) => Err(NftApplyError::Capabilities(e.to_string())),
    }
}

/// The batch that leaves exactly `rs`'s tables.
pub fn batch(rs: &Ruleset, groups: &dyn Groups) -> Result<(Vec<u8>, Vec<String>), UnknownGroup> {
    let mut b = Batch::new();
    for id in TableId::ALL {
        b.remove_table(id);
        if let Some(t) = rs.tables.iter().find(|t| t.id == id) {
            b.table(t, groups)?;
        }
    }
    Ok(b.finish())
}

/// Applies `rs` in the current network namespace: idempotent, exact, atomic.
pub fn apply(rs: &Ruleset) -> Result<(), NftApplyError> {
    check_capability()?;
    let (bytes, what) = batch(rs, &GroupFile::system())?;
    let socket = Socket::open()?;
    let added = rtnetlink::add_all(&rs.routes)?;
    if let Err(e) = socket.send_batch(&bytes, &what) {
        if let Err(undo) = rtnetlink::remove_added(&added) {
            tracing::warn!("removing the routes added before the failure: {undo}");
        }
        return Err(e.into());
    }
    tracing::info!(
        tables = rs.tables.len(),
        messages = what.len(),
        "nf_tables ruleset applied"
    );
    Ok(())
}

/// `--cleanup-only`: removes Istio's three tables and this configuration's policy routing, nothing else.
pub fn cleanup(rs: &Ruleset) -> Result<(), NftApplyError> {
    check_capability()?;
    let mut b = Batch::new();
    for id in TableId::ALL {
        b.remove_table(id);
    }
    let (bytes, what) = b.finish();
    Socket::open()?.send_batch(&bytes, &what)?;
    rtnetlink::remove_routes(&rs.routes)?;
    Ok(())
}

/// A `--native-nftables` run of `cfg`: `--cleanup-only` or the apply.
pub fn run(cfg: &crate::config::Config) -> Result<(), NftApplyError> {
    let rs = super::model::build(cfg);
    if cfg.cleanup_only {
        cleanup(&rs)
    } else {
        apply(&rs)
    }
}
