//! Entering the pod's network namespace (`CNI_NETNS`) for the rest of this thread's life.
//!
//! Istio's `Program` runs the apply inside `ns.NetNS.Do`. Here the plugin is one short process: the pod is
//! read first (from the node's namespace, where the API server is reachable), then the main thread enters
//! the pod's namespace and the apply runs there, its netlink sockets and any `iptables-restore` child
//! created in that namespace.

use std::fs::File;

use nix::sched::{setns, CloneFlags};

use super::spec::{code, CniError};

/// Moves the calling thread into the network namespace at `path`.
pub fn enter(path: &str) -> Result<(), CniError> {
    let file = File::open(path).map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("failed to open netns {path:?}: {e}"),
        )
    })?;
    setns(&file, CloneFlags::CLONE_NEWNET).map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("failed to enter netns {path:?}: {e}"),
        )
    })
}
