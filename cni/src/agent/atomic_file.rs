//! Replacing a file so that a reader sees the old bytes or the new ones, never a part (Istio's
//! `pkg/file` `AtomicWrite` and `AtomicCopy`): a temporary file in the same folder, its mode, fsync,
//! rename, then fsync of the folder so the rename itself survives a crash.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The temporary name next to `path`: Istio's `<name>.tmp.<suffix>`, so a copy left by a crash is found
/// and removed by the next start ([`remove_stale`]).
fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}.tmp.{}", std::process::id()))
}

/// Writes everything `source` yields to `path` with `mode`, atomically.
pub fn write_from(path: &Path, source: &mut dyn Read, mode: u32) -> std::io::Result<()> {
    let temp = temp_name(path);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temp)?;
        std::io::copy(source, &mut file)?;
        file.flush()?;
        // The umask may have narrowed the mode given at creation; the binary must be executable by all.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result?;
    sync_parent(path)
}

/// Writes `bytes` to `path` with `mode`, atomically.
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    write_from(path, &mut &bytes[..], mode)
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

    #[test]
    fn the_file_is_replaced_with_its_mode_and_no_temporary_is_left() {
        let dir = std::env::temp_dir().join(format!("atomic-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, b"old").unwrap();
        std::fs::write(dir.join("f.tmp.1"), b"stale").unwrap();
        remove_stale(&path).unwrap();
        write(&path, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
