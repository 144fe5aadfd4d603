//! Scratch directories for tests.

use std::path::{Path, PathBuf};

/// A fresh directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `<tmp>/test-<tag>-<pid>-<n>`, empty. Panics when it cannot: no test can run without it.
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p)
            .unwrap_or_else(|e| panic!("creating the temp dir {}: {e}", p.display()));
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_exists_until_dropped() {
        let d = TempDir::new("t");
        let p = d.path().to_path_buf();
        assert!(p.is_dir());
        drop(d);
        assert!(!p.exists());
    }
}
