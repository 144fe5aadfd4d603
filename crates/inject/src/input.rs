//! Reading the files the command-line flags name (`-f`, `--values`, `--mesh-config`, `--injector-config`,
//! `--config-dir`'s files, `--proxy-configs`, `--namespaces`, `--webhook-config`, certificates and keys),
//! stdin included, with one size limit checked while reading: `/dev/zero`, a FIFO that never ends or a
//! runaway file is refused at the limit instead of being read until the process is killed for memory.

use std::io::{self, Read};
use std::path::Path;

/// The most bytes any input file (or stdin) may hold: far above any real manifest or configuration
/// (Kubernetes itself refuses objects over 1.5 MiB, a ConfigMap over 1 MiB).
pub const MAX_INPUT_BYTES: u64 = 16 * 1024 * 1024;

/// The error of a file over [`MAX_INPUT_BYTES`], carried inside an [`io::Error`] so every caller's error
/// type names the flag and the file as it does for any read failure.
#[derive(Debug, thiserror::Error)]
#[error("larger than the input limit of 16 MiB ({MAX_INPUT_BYTES} bytes); reading stopped there")]
pub struct TooLarge;

fn too_large() -> io::Error {
    io::Error::new(io::ErrorKind::FileTooLarge, TooLarge)
}

/// Reads at most [`MAX_INPUT_BYTES`] from `r`; one byte more is an error, so the input is never read to its
/// end when it is larger. The buffer is reserved once, for `expected` bytes (a regular file's size) or
/// else for the limit, so it never doubles past it: an endless input costs the limit's worth of memory.
pub fn read_limited(r: impl Read, expected: Option<u64>) -> io::Result<Vec<u8>> {
    let reserve = expected.map_or(MAX_INPUT_BYTES, |n| n.min(MAX_INPUT_BYTES)) + 1;
    let mut buf = Vec::with_capacity(usize::try_from(reserve).unwrap_or(0));
    r.take(MAX_INPUT_BYTES + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_INPUT_BYTES {
        return Err(too_large());
    }
    Ok(buf)
}

/// The bytes of `path`, at most [`MAX_INPUT_BYTES`] (a regular file's size is checked before reading).
pub fn read_bytes(path: &Path) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let md = file.metadata()?;
    if md.is_file() && md.len() > MAX_INPUT_BYTES {
        return Err(too_large());
    }
    read_limited(file, md.is_file().then_some(md.len()))
}

fn utf8(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not UTF-8 text ({})", e.utf8_error()),
        )
    })
}

/// The text of `path`, at most [`MAX_INPUT_BYTES`].
pub fn read_text(path: &Path) -> io::Result<String> {
    utf8(read_bytes(path)?)
}

/// A file a flag names that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {path}: {source}")]
pub struct FlagFileError {
    /// The flag that names the file (`--config-dir` for a file of the directory).
    pub flag: &'static str,
    pub path: String,
    #[source]
    pub source: io::Error,
}

/// The text of `path`, which `flag` names, at most [`MAX_INPUT_BYTES`].
pub fn read_flag_file(flag: &'static str, path: &Path) -> Result<String, FlagFileError> {
    read_text(path).map_err(|source| FlagFileError {
        flag,
        path: path.display().to_string(),
        source,
    })
}

/// The text of stdin, at most [`MAX_INPUT_BYTES`].
pub fn read_stdin() -> io::Result<String> {
    utf8(read_limited(io::stdin().lock(), None)?)
}

/// The text of `name`, or of stdin when `name` is `-` (the `-f` convention of kube-inject and explain).
pub fn read_text_or_stdin(name: &str) -> io::Result<String> {
    if name == "-" {
        read_stdin()
    } else {
        read_text(Path::new(name))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_up_to_the_limit_and_refuses_one_byte_more() {
        let at = read_limited(io::repeat(b'a').take(MAX_INPUT_BYTES), None).unwrap();
        assert_eq!(at.len() as u64, MAX_INPUT_BYTES);
        // An endless reader: refused after the limit, not read forever.
        let e = read_limited(io::repeat(0), Some(10)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert!(e.to_string().contains("16 MiB (16777216 bytes)"), "{e}");
    }

    #[test]
    fn endless_device_and_large_file_are_refused() {
        let e = read_text(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        let dir = std::env::temp_dir().join(format!("input-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_INPUT_BYTES + 1).unwrap();
        assert_eq!(
            read_text(&big).unwrap_err().kind(),
            io::ErrorKind::FileTooLarge
        );
        std::fs::write(&big, b"\xff\xfe").unwrap();
        assert!(read_text(&big).unwrap_err().to_string().contains("UTF-8"));
        std::fs::write(&big, "a: 1\n").unwrap();
        assert_eq!(read_text_or_stdin(big.to_str().unwrap()).unwrap(), "a: 1\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
