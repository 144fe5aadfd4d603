//! The pod's network namespace (`CNI_NETNS`): opened and checked at once, entered for the apply.
//!
//! Istio's `Program` runs the apply inside `ns.NetNS.Do` over `ns.GetNS`, which checks that the path is
//! on nsfs. Here the plugin is one short process: the namespace is opened and checked first, before
//! the API server is asked anything; the pod is read from the node's namespace (where the API server
//! is reachable); then the main thread enters the pod's namespace and the apply runs there, its netlink
//! sockets and any `iptables-restore` child created in that namespace.
//!
//! What the runtime passes is not trusted: a FIFO would block `open(2)` until the runtime kills the
//! plugin, and the plugin's own namespace (`/proc/self/ns/net`) or pid 1's would have the node's own
//! traffic intercepted. Each is refused with the spec's code 4 (an invalid `CNI_*` variable), naming the
//! value.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};

use nix::fcntl::OFlag;
use nix::sched::{setns, CloneFlags};
use nix::sys::statfs::{fstatfs, NSFS_MAGIC};

use super::spec::{code, CniError};

/// The pod's network namespace, open: entered through this descriptor, so what was checked is what is
/// entered.
#[derive(Debug)]
pub struct PodNetns {
    file: File,
    path: String,
}

fn refused(path: &str, why: impl std::fmt::Display) -> CniError {
    CniError::new(
        code::INVALID_ENVIRONMENT,
        format!("CNI_NETNS {path:?} {why}"),
    )
}

/// The namespaces that are the node's, never a pod's: this process's and pid 1's.
const NODE_NAMESPACES: &[(&str, &str)] = &[
    ("/proc/self/ns/net", "the plugin's own network namespace"),
    ("/proc/1/ns/net", "the network namespace of pid 1"),
];

/// Opens `path` without blocking (`O_NONBLOCK`: a FIFO opens at once) and checks that it is a network
/// namespace that is not the node's: on nsfs (`fstatfs`), not the plugin's own or pid 1's (device and
/// inode), and of the network type (a thread of ours enters it, which fails with `EINVAL` for another
/// type of namespace; the thread and its namespace end at once).
pub fn open(path: &str) -> Result<PodNetns, CniError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("failed to open netns {path:?}: {e}"),
            )
        })?;
    let meta = file.metadata().map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("failed to stat netns {path:?}: {e}"),
        )
    })?;
    let t = meta.file_type();
    let kind = if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() || t.is_block_device() {
        Some("a device")
    } else if t.is_dir() {
        Some("a directory")
    } else {
        None
    };
    if let Some(kind) = kind {
        return Err(refused(path, format!("is not a network namespace: {kind}")));
    }
    let nsfs = fstatfs(&file).is_ok_and(|s| s.filesystem_type() == NSFS_MAGIC);
    if !nsfs {
        return Err(refused(
            path,
            "is not a network namespace: a file that is not on nsfs",
        ));
    }
    for (node, what) in NODE_NAMESPACES {
        // pid 1's may be unreadable without privilege; the plugin's own always is.
        if let Ok(m) = std::fs::metadata(node) {
            if (m.dev(), m.ino()) == (meta.dev(), meta.ino()) {
                return Err(refused(
                    path,
                    format!(
                        "is {what} ({node}), the node's: refusing to intercept the node's traffic"
                    ),
                ));
            }
        }
    }
    let probe = file.try_clone().map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("failed to check netns {path:?}: {e}"),
        )
    })?;
    let entered = std::thread::spawn(move || setns(&probe, CloneFlags::CLONE_NEWNET))
        .join()
        .map_err(|_| CniError::new(code::IO_FAILURE, format!("failed to check netns {path:?}")))?;
    match entered {
        Ok(()) => Ok(PodNetns {
            file,
            path: path.to_string(),
        }),
        Err(nix::errno::Errno::EINVAL) => Err(refused(
            path,
            "is not a network namespace: a namespace of another type",
        )),
        Err(e) => Err(CniError::new(
            code::IO_FAILURE,
            format!("failed to enter netns {path:?}: {e}"),
        )),
    }
}

impl PodNetns {
    /// Moves the calling thread into the namespace, for the rest of its life.
    pub fn enter(&self) -> Result<(), CniError> {
        setns(&self.file, CloneFlags::CLONE_NEWNET).map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("failed to enter netns {:?}: {e}", self.path),
            )
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Before the fix, the node's own namespace was programmed, and a FIFO hung the plugin until
    /// the runtime killed it. Each is refused at once with code 4 naming the value.
    #[test]
    fn the_node_s_namespace_and_what_is_no_network_namespace_are_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("netns-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let file = dir.join("file");
        std::fs::write(&file, b"").unwrap();
        let mut cases = vec![
            (
                "/proc/self/ns/net".to_string(),
                "is the plugin's own network namespace",
            ),
            (
                format!("/proc/{}/ns/net", std::process::id()),
                "is the plugin's own network namespace",
            ),
            (
                fifo.display().to_string(),
                "is not a network namespace: a FIFO",
            ),
            (
                file.display().to_string(),
                "is not a network namespace: a file that is not on nsfs",
            ),
            (
                "/proc/self/ns/mnt".to_string(),
                "a namespace of another type",
            ),
            (
                "/proc/self/ns/uts".to_string(),
                "a namespace of another type",
            ),
        ];
        if std::fs::metadata("/proc/1/ns/net").is_ok() {
            cases.push((
                "/proc/1/ns/net".to_string(),
                "is the network namespace of pid 1",
            ));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let paths: Vec<String> = cases.iter().map(|(p, _)| p.clone()).collect();
        std::thread::spawn(move || {
            let _ = tx.send(
                paths
                    .iter()
                    .map(|p| open(p).unwrap_err())
                    .collect::<Vec<_>>(),
            );
        });
        let start = Instant::now();
        let errors = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the checks blocked");
        eprintln!("refused in {:?}", start.elapsed());
        for ((path, why), e) in cases.iter().zip(errors) {
            assert_eq!(e.code, code::INVALID_ENVIRONMENT, "{path}: {e}");
            assert!(e.msg.starts_with(&format!("CNI_NETNS {path:?} ")), "{e}");
            assert!(e.msg.contains(why), "{path}: {e}");
        }
        // pid 1's namespace may be closed to this process (a container's pid 1 under another LSM
        // profile): it is then refused by the kernel, never programmed.
        let e = open("/proc/1/ns/net").unwrap_err();
        if std::fs::metadata("/proc/1/ns/net").is_err() {
            assert_eq!(e.code, code::IO_FAILURE, "{e}");
            assert!(e.msg.contains("/proc/1/ns/net"), "{e}");
        }
        let e = open("/nonexistent/netns").unwrap_err();
        assert_eq!(e.code, code::IO_FAILURE, "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
