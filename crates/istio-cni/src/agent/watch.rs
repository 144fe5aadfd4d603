//! Waiting for a change to the node's files: inotify on the folders that hold them, as Istio's install
//! loop waits on fsnotify (`cni/pkg/util/pluginutil.go` `CreateFileWatcher`, used by `install.go`
//! `sleepWatchInstall`), with a slow poll as the fallback for what inotify cannot see (a folder that did
//! not exist yet, a full inotify table, a network filesystem).
//!
//! Folders are watched rather than files, so an atomic replacement (a rename over the file) and a
//! kubelet's projected-volume swap (`..data`) are seen, and a watch never outlives the file it was put
//! on (Istio re-creates its watcher after each pass for that reason; so does the agent).

use std::ffi::OsString;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use tokio::sync::Notify;

/// What to watch: a folder, and the names in it that matter (empty: every name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The folder.
    pub dir: PathBuf,
    /// The entries whose events count; empty for all.
    pub names: Vec<OsString>,
}

/// An inotify instance over some folders, read by a thread of its own (tokio's readiness for a raw
/// descriptor needs `unsafe`, which the workspace forbids) that wakes the waiter on an event that
/// counts. Dropping it ends the thread: the thread also polls a pipe whose write end this holds.
pub struct Watch {
    changed: Arc<Notify>,
    watching: bool,
    _stop: OwnedFd,
}

/// What changes a folder's entries or contents, and the loss of the folder itself.
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
}

/// Whether an event is about a watched name, or says a watch itself is gone or overflowed.
fn counts(watched: &[(WatchDescriptor, Target)], e: &InotifyEvent) -> bool {
    let lost = AddWatchFlags::IN_Q_OVERFLOW
        | AddWatchFlags::IN_IGNORED
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_UNMOUNT;
    if e.mask.intersects(lost) {
        return true;
    }
    watched.iter().any(|(w, t)| {
        *w == e.wd && (t.names.is_empty() || e.name.as_ref().is_some_and(|n| t.names.contains(n)))
    })
}

/// The thread: waits for inotify events or the end (the pipe's write end dropped), and wakes the
/// waiter on each batch that holds an event that counts. A read error wakes it too (the caller then
/// checks the files) and ends the watch; the fallback poll carries on.
fn read_events(
    inotify: Inotify,
    stop: OwnedFd,
    watched: Vec<(WatchDescriptor, Target)>,
    changed: Arc<Notify>,
) {
    loop {
        let mut fds = [
            PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                tracing::warn!("waiting for inotify events: {e}");
                changed.notify_one();
                return;
            }
        }
        if fds[1].any().unwrap_or(true) {
            return;
        }
        match inotify.read_events() {
            Ok(events) => {
                if events.iter().any(|e| counts(&watched, e)) {
                    changed.notify_one();
                }
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
            Err(e) => {
                tracing::warn!("reading inotify events: {e}");
                changed.notify_one();
                return;
            }
        }
    }
}

impl Watch {
    /// Watches `targets`. A folder that does not exist is skipped (Istio's watcher skips a missing
    /// path too; the fallback poll covers it); failing to create the instance is an error.
    pub fn new(targets: &[Target]) -> std::io::Result<Watch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let mut watched = Vec::new();
        for target in targets {
            match inotify.add_watch(target.dir.as_path(), mask()) {
                Ok(wd) => watched.push((wd, target.clone())),
                Err(e) => tracing::debug!(
                    "not watching {}: {e} (the fallback poll covers it)",
                    target.dir.display()
                ),
            }
        }
        let (stop_read, stop_write) = nix::unistd::pipe()?;
        let changed = Arc::new(Notify::new());
        let watching = !watched.is_empty();
        let woken = changed.clone();
        std::thread::Builder::new()
            .name("inotify".into())
            .spawn(move || read_events(inotify, stop_read, watched, woken))?;
        Ok(Watch {
            changed,
            watching,
            _stop: stop_write,
        })
    }

    /// Whether any folder is watched (none existed when the watch was made).
    pub fn watching(&self) -> bool {
        self.watching
    }

    /// Returns at the first event that counts since the last return (or since the watch began).
    pub async fn changed(&mut self) {
        self.changed.notified().await;
    }
}

/// Waits for a change that `watch` reports, or `fallback` at most: the slow poll.
pub async fn changed_or(watch: Option<&mut Watch>, fallback: Duration) {
    match watch {
        Some(w) => {
            tokio::select! {
                () = w.changed() => {}
                () = tokio::time::sleep(fallback) => {}
            }
        }
        None => tokio::time::sleep(fallback).await,
    }
}

/// A watch on `targets`, or none (logged once by the caller's `warned`) when inotify is unavailable.
pub fn try_new(targets: &[Target], warned: &mut bool) -> Option<Watch> {
    match Watch::new(targets) {
        Ok(w) => Some(w),
        Err(e) => {
            if !*warned {
                tracing::warn!("inotify is unavailable ({e}): polling the files instead");
                *warned = true;
            }
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// An event on a watched name wakes the waiter; one on another name in the same folder does not.
    #[test]
    fn a_watched_name_wakes_and_another_does_not() {
        let dir = std::env::temp_dir().join(format!("watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut w = Watch::new(&[
                Target {
                    dir: dir.clone(),
                    names: vec!["istio-cni".into()],
                },
                Target {
                    dir: dir.join("missing"),
                    names: vec![],
                },
            ])
            .unwrap();
            std::fs::write(dir.join("other"), b"x").unwrap();
            let woke = tokio::time::timeout(Duration::from_millis(300), w.changed()).await;
            assert!(woke.is_err(), "woken by another name");
            let path = dir.join("istio-cni");
            let writer = tokio::task::spawn_blocking(move || std::fs::write(path, b"x"));
            tokio::time::timeout(Duration::from_secs(60), w.changed())
                .await
                .expect("no event for the watched name");
            writer.await.unwrap().unwrap();
        });
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
