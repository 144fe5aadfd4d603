//! Replacing a file so that a reader sees the old bytes or the new ones, never a part (Istio's
//! `pkg/file` `AtomicWrite` and `AtomicCopy`): a temporary file in the same folder, its mode, fsync,
//! rename, then fsync of the folder so the rename itself survives a crash.
//!
//! Unlike Istio's, a write can be stopped ([`Stop`]): a long copy (the plugin binary can be hundreds of
//! MB on a busy disk) checks between chunks and gives up, and once the agent is shutting down no write
//! renames anything into place any more, so its cleanup is the last word on the node's files.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The most copied between two checks of [`Stop`]: a few milliseconds of disk time.
pub const CHUNK_BYTES: u64 = 4 << 20;

/// Shared by the install passes and the shutdown: set once, it makes every write in progress fail
/// with `Interrupted` at its next chunk, and refuses every rename after it.
#[derive(Debug, Default)]
pub struct Stop {
    stopped: AtomicBool,
    /// Held around each rename into place (with the flag checked under it) and while the flag is set,
    /// so once [`Stop::stop`] returns no rename is in progress and none follows.
    commit: Mutex<()>,
}

impl Stop {
    /// Stops every write: returns once no rename is in progress; none happens after.
    pub fn stop(&self) {
        let _held = self.commit.lock().unwrap_or_else(|e| e.into_inner());
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Whether [`Stop::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    fn check(&self) -> std::io::Result<()> {
        if self.is_stopped() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "interrupted: the agent is shutting down",
            ));
        }
        Ok(())
    }
}

/// The temporary name next to `path`: Istio's `<name>.tmp.<suffix>`, so a copy left by a crash is found
/// and removed by the next start ([`remove_stale`]).
fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}.tmp.{}", std::process::id()))
}

/// Writes what `fill` puts into the temporary file to `path` with `mode`, atomically. With `stop`,
/// the rename happens only while it is not stopped; without, always (the shutdown's own writes).
fn replace(
    path: &Path,
    mode: u32,
    stop: Option<&Stop>,
    fill: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let temp = temp_name(path);
    let result = (|| {
        // A leftover of this pid (or anything planted under the name) is removed, and the file is
        // created afresh (O_EXCL): never opened through a link or as a FIFO.
        match std::fs::remove_file(&temp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)?;
        fill(&mut file)?;
        file.flush()?;
        // The umask may have narrowed the mode given at creation; the binary must be executable by all.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        match stop {
            Some(stop) => {
                let _held = stop.commit.lock().unwrap_or_else(|e| e.into_inner());
                stop.check()?;
                std::fs::rename(&temp, path)
            }
            None => std::fs::rename(&temp, path),
        }
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result?;
    sync_parent(path)
}

/// Copies `source` to `path` with `mode`, atomically, in chunks of [`CHUNK_BYTES`] (each through the
/// kernel's copy, `copy_file_range`), giving up with `Interrupted` as soon as `stop` is set.
pub fn copy(path: &Path, source: &File, mode: u32, stop: &Stop) -> std::io::Result<()> {
    replace(path, mode, Some(stop), |file| loop {
        stop.check()?;
        if std::io::copy(&mut source.take(CHUNK_BYTES), file)? == 0 {
            return Ok(());
        }
    })
}

/// Writes `bytes` to `path` with `mode`, atomically; with `stop`, not once it is set.
pub fn write(path: &Path, bytes: &[u8], mode: u32, stop: Option<&Stop>) -> std::io::Result<()> {
    replace(path, mode, stop, |file| {
        if let Some(stop) = stop {
            stop.check()?;
        }
        file.write_all(bytes)
    })
}

/// Renames `from` to `to` unless `stop` is set (a `.conf` chained into becomes a `.conflist`).
pub fn rename(from: &Path, to: &Path, stop: &Stop) -> std::io::Result<()> {
    let _held = stop.commit.lock().unwrap_or_else(|e| e.into_inner());
    stop.check()?;
    std::fs::rename(from, to)
}

/// Removes the temporary copies of `path` an earlier run left behind (Istio's `copyBinaries` does so
/// before each copy).
pub fn remove_stale(path: &Path) -> std::io::Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(());
    };
    let prefix = format!("{}.tmp.", name.to_string_lossy());
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("atomic-file-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<std::ffi::OsString> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_file_is_replaced_with_its_mode_and_no_temporary_is_left() {
        let dir = dir("replace");
        let path = dir.join("f");
        std::fs::write(&path, b"old").unwrap();
        std::fs::write(dir.join("f.tmp.1"), b"stale").unwrap();
        remove_stale(&path).unwrap();
        write(&path, b"new", 0o600, None).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(names(&dir), ["f"]);
        // A FIFO planted under the temporary name is replaced, not opened (which would block).
        nix::unistd::mkfifo(
            &temp_name(&path),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let source = dir.join("source");
        std::fs::write(&source, vec![7u8; 3 * CHUNK_BYTES as usize + 5]).unwrap();
        copy(
            &path,
            &File::open(&source).unwrap(),
            0o755,
            &Stop::default(),
        )
        .unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(&source).unwrap()
        );
        assert_eq!(names(&dir), ["f", "source"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A stopped copy ends at its next chunk, leaves neither the file nor a temporary, and no write
    /// renames anything once stopped (before the fix, a 3 GB copy held SIGTERM for 12 s).
    #[test]
    fn a_stopped_copy_gives_up_and_no_write_lands_after_the_stop() {
        let dir = dir("stop");
        let source = dir.join("big");
        // Sparse: no disk is used, and every chunk still has to be copied.
        File::create(&source).unwrap().set_len(1 << 30).unwrap();
        let stop = std::sync::Arc::new(Stop::default());
        let (path, s) = (dir.join("istio-cni"), stop.clone());
        let copying =
            std::thread::spawn(move || copy(&path, &File::open(&source).unwrap(), 0o755, &s));
        // Tied to the work: stop once the copy has visibly started.
        let temp = temp_name(&dir.join("istio-cni"));
        while std::fs::metadata(&temp).map_or(0, |m| m.len()) == 0 {
            assert!(
                !copying.is_finished(),
                "the copy ended before it was stopped"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        stop.stop();
        let at_stop = std::fs::metadata(&temp).map_or(0, |m| m.len());
        // It gives up at its next chunk: the temporary file grows by at most the chunk in flight (a
        // copy that ran on would reach the source's 1 GiB, and the rename's own check would still
        // make it fail with Interrupted).
        let mut most = at_stop;
        while !copying.is_finished() {
            most = most.max(std::fs::metadata(&temp).map_or(0, |m| m.len()));
        }
        assert!(
            most <= at_stop + 2 * CHUNK_BYTES,
            "the copy went on from {at_stop} to {most} bytes after the stop"
        );
        let e = copying.join().unwrap().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "{e}");
        assert_eq!(names(&dir), ["big"]);
        let e = write(&dir.join("conf"), b"{}", 0o600, Some(&stop)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "{e}");
        assert_eq!(names(&dir), ["big"]);
        // The shutdown's own writes still land.
        write(&dir.join("conf"), b"{}", 0o600, None).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
