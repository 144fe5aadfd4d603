//! Applying a ruleset in-process: the TPROXY/IPv6 routes over rtnetlink, then one nf_tables batch that
//! re-creates each of Istio's tables (add + delete + add, so stale chains and tables a previous
//! configuration left are gone) and removes the tables this configuration does not need.
//!
//! Routes go first so that a refused batch can take back exactly the routes this run added; the batch
//! itself is applied whole or not at all by the kernel. No process is started.

use super::model::{Ruleset, TableId};
use super::netlink::{
    check_groups, Batch, Groups, NetlinkError, Socket, SystemGroups, UnknownGroup, What,
};
use super::state;
use crate::config::Family;
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

/// The batch that leaves exactly `rs`'s tables, given the `inet` tables that exist: an existing
/// table of ours is removed first (so nothing of an earlier configuration survives), a missing one is
/// not touched (deleting costs the kernel an RCU grace period when the socket closes).
pub fn batch<'a>(
    rs: &'a Ruleset,
    existing: &[String],
    genid: Option<u32>,
    groups: &dyn Groups,
) -> Result<(Vec<u8>, Vec<What<'a>>), UnknownGroup> {
    let mut b = Batch::new(genid);
    for id in TableId::ALL {
        if existing.iter().any(|t| t == id.name()) {
            b.remove_table(id);
        }
        if let Some(t) = rs.tables.iter().find(|t| t.id == id) {
            b.table(t, groups)?;
        }
    }
    Ok(b.finish())
}

/// How often a batch is rebuilt when another writer changed the ruleset in between.
const ATTEMPTS: usize = 3;

/// Reads the generation and our existing tables, then sends the batch `build` makes of them; a batch
/// refused with `ERESTART` (the ruleset changed meanwhile) is rebuilt and sent again.
fn send_current<'a>(
    socket: &Socket,
    in_place: impl Fn(&[String], u32) -> bool,
    build: impl Fn(&[String], u32) -> Result<(Vec<u8>, Vec<What<'a>>), NftApplyError>,
) -> Result<Option<usize>, NftApplyError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let genid = socket.generation()?;
        let existing = socket.inet_tables()?;
        if in_place(&existing, genid) {
            return Ok(None);
        }
        let (bytes, what) = build(&existing, genid)?;
        if what.is_empty() {
            // Nothing to change (a cleanup of a namespace without our tables).
            return Ok(Some(0));
        }
        match socket.send_batch(&bytes, &what) {
            Err(NetlinkError::Refused {
                errno: nix::errno::Errno::ERESTART,
                ..
            }) if attempt < ATTEMPTS => {
                tracing::info!(
                    "the nf_tables ruleset changed while the batch was built; rebuilding it"
                );
            }
            Err(e) => return Err(e.into()),
            Ok(()) => return Ok(Some(what.len())),
        }
    }
}

/// Warns when istio-iptables rules (iptables-nft's nat `ISTIO_INBOUND`, which every run of theirs
/// declares) are in the namespace too: both rule sets would see every packet. Asked over the apply's own
/// socket; iptables-legacy rules are invisible to nf_tables, and a failed question says nothing.
fn warn_of_iptables_rules(socket: &Socket) {
    let mut probe = socket.probe();
    for (ip, tool, family) in [
        (Family::V4, "iptables", "ip"),
        (Family::V6, "ip6tables", "ip6"),
    ] {
        if probe
            .chain_exists(ip, "nat", "ISTIO_INBOUND")
            .unwrap_or(false)
        {
            tracing::warn!(
                "this namespace also holds istio-iptables rules ({tool}-nft: {family} nat ISTIO_INBOUND): \
                 with the native tables both see every packet; remove them with \
                 `iptables-init --cleanup-only` (without --native-nftables)"
            );
        }
    }
}

/// Applies `rs` in the current network namespace: idempotent, exact, atomic. When the kernel already
/// holds exactly these tables nothing is sent (so counters survive a rerun), unless `force`.
pub fn apply(rs: &Ruleset, force: bool) -> Result<(), NftApplyError> {
    check_capability()?;
    let groups = SystemGroups::default();
    // Resolve the group names before anything changes.
    check_groups(rs, &groups)?;
    let socket = Socket::open()?;
    warn_of_iptables_rules(&socket);
    let added = rtnetlink::add_all(&rs.routes)?;
    // Reading back only pays when our tables are the ones this configuration has; it is a shortcut, so
    // on any doubt the tables are re-created.
    let in_place = |existing: &[String], genid: u32| {
        let ours = TableId::ALL
            .iter()
            .filter(|t| existing.iter().any(|e| e == t.name()));
        let same_tables = ours
            .map(|t| Some(*t))
            .eq(rs.tables.iter().map(|t| Some(t.id)));
        if force || !same_tables {
            return false;
        }
        state::matches(&socket, rs, genid, &groups).unwrap_or_else(|e| {
            tracing::debug!("reading the current ruleset: {e}");
            false
        })
    };
    match send_current(&socket, in_place, |existing, genid| {
        Ok(batch(rs, existing, Some(genid), &groups)?)
    }) {
        Err(e) => {
            if let Err(undo) = rtnetlink::remove_added(&added) {
                tracing::warn!("removing the routes added before the failure: {undo}");
            }
            Err(e)
        }
        Ok(None) => {
            tracing::info!("the nf_tables ruleset is already in place; nothing to change");
            Ok(())
        }
        Ok(Some(messages)) => {
            tracing::info!(
                tables = rs.tables.len(),
                messages,
                "nf_tables ruleset applied"
            );
            Ok(())
        }
    }
}

/// `--cleanup-only`: removes Istio's three tables and this configuration's policy routing, nothing else.
pub fn cleanup(rs: &Ruleset) -> Result<(), NftApplyError> {
    check_capability()?;
    let socket = Socket::open()?;
    send_current(
        &socket,
        |_, _| false,
        |existing, genid| {
            let mut b = Batch::new(Some(genid));
            for id in TableId::ALL {
                if existing.iter().any(|t| t == id.name()) {
                    b.remove_table(id);
                }
            }
            Ok(b.finish())
        },
    )?;
    rtnetlink::remove_routes(&rs.routes)?;
    Ok(())
}

/// A `--native-nftables` run of `cfg`: `--cleanup-only` or the apply.
pub fn run(cfg: &crate::config::Config) -> Result<(), NftApplyError> {
    let rs = super::model::build(cfg);
    if cfg.cleanup_only {
        cleanup(&rs)
    } else {
        apply(&rs, cfg.force_apply)
    }
}
