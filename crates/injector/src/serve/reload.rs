//! Change detection for mounted files by polling.
//!
//! Kubernetes updates ConfigMap and Secret volumes by swapping a `..data` symlink, which inotify on the
//! file itself never sees, and whose timing (kubelet sync period) is slow anyway. So the watcher polls:
//! every interval it hashes the *content* of every watched file (following symlinks; for a directory, every
//! non-hidden entry, sorted), and reports a change when the fingerprint differs. Reading a few kilobytes
//! every few seconds is cheap, and content hashing cannot be fooled by mtime granularity or by an atomic
//! rename that keeps the size.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};

/// A set of watched paths and the fingerprint last seen.
#[derive(Debug, Clone)]
pub struct Watch {
    paths: Vec<PathBuf>,
    last: u64,
}

impl Watch {
    /// Starts watching `paths`; the current content is the baseline (already loaded by the caller).
    pub fn new(paths: Vec<PathBuf>) -> Watch {
        let last = fingerprint(&paths);
        Watch { paths, last }
    }

    /// True when the content changed since the last call (or since [`Watch::new`]).
    /// The new state becomes the baseline, so a broken file is reported once, not on every poll.
    pub fn changed(&mut self) -> bool {
        let now = fingerprint(&self.paths);
        if now != self.last {
            self.last = now;
            true
        } else {
            false
        }
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

/// Hash of the content of `paths` (missing or unreadable files hash as such, so appearing and
/// disappearing count as changes).
pub fn fingerprint(paths: &[PathBuf]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in paths {
        p.hash(&mut h);
        hash_path(p, &mut h, 0);
    }
    h.finish()
}

fn hash_path(p: &Path, h: &mut DefaultHasher, depth: u32) {
    match fs::metadata(p) {
        Err(e) => {
            0u8.hash(h);
            e.kind().hash(h);
        }
        Ok(md) if md.is_dir() => {
            1u8.hash(h);
            // A ConfigMap directory is flat; a bound keeps a symlink loop from recursing forever.
            if depth > 2 {
                return;
            }
            let mut names: Vec<PathBuf> = match fs::read_dir(p) {
                Ok(rd) => rd
                    .filter_map(|e| e.ok())
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .map(|e| e.path())
                    .collect(),
                Err(e) => {
                    e.kind().hash(h);
                    return;
                }
            };
            names.sort();
            for n in names {
                n.hash(h);
                hash_path(&n, h, depth + 1);
            }
        }
        // Streamed in chunks and bounded like the loaders (`input`): a watched file swapped for an endless
        // one costs one chunk of memory and the limit's worth of reading, and its loader then refuses it.
        Ok(md) => match fs::File::open(p) {
            Ok(f) => {
                2u8.hash(h);
                md.len().hash(h);
                if let Err(e) = hash_content(f, h) {
                    3u8.hash(h);
                    e.kind().hash(h);
                }
            }
            Err(e) => {
                3u8.hash(h);
                e.kind().hash(h);
            }
        },
    }
}

/// Feeds at most `MAX_INPUT_BYTES + 1` bytes of `f` to `h`, 64 KiB at a time.
fn hash_content(f: fs::File, h: &mut DefaultHasher) -> std::io::Result<()> {
    let mut f = f.take(inject::input::MAX_INPUT_BYTES + 1);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => h.write(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn detects_symlink_swap_and_content_change() {
        let dir = std::env::temp_dir().join(format!("reload-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("a")).unwrap();
        fs::create_dir_all(dir.join("b")).unwrap();
        fs::write(dir.join("a/config"), "one").unwrap();
        fs::write(dir.join("b/config"), "two").unwrap();
        std::os::unix::fs::symlink("a", dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/config", dir.join("config")).unwrap();

        let mut w = Watch::new(vec![dir.join("config")]);
        assert!(!w.changed());
        // The kubelet's swap: a new symlink renamed over `..data`.
        std::os::unix::fs::symlink("b", dir.join("..data_tmp")).unwrap();
        fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        assert!(w.changed());
        assert!(!w.changed());
        fs::write(dir.join("b/config"), "three").unwrap();
        assert!(w.changed());
        fs::remove_file(dir.join("b/config")).unwrap();
        assert!(w.changed());

        // Directory watch: hidden entries are ignored, visible ones count.
        let mut d = Watch::new(vec![dir.join("a")]);
        fs::write(dir.join("a/.hidden"), "x").unwrap();
        assert!(!d.changed());
        fs::write(dir.join("a/values"), "x").unwrap();
        assert!(d.changed());
        fs::remove_dir_all(&dir).unwrap();
    }
}
