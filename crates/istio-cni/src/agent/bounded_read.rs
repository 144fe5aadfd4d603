//! Opening and reading the node's files so that none can stall or grow the agent: a CNI configuration,
//! the service account's token and CA are a few KiB, and a file that is not (a mistake, or a hostile
//! writer on the node) must not grow the agent. A FIFO, a socket or a device where a file should be
//! would block `open(2)` or `read(2)` forever (and with them the agent's SIGTERM handling), so every open
//! is non-blocking and anything but a regular file is refused before a byte is read.

use std::fs::{File, OpenOptions};
use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

use nix::fcntl::OFlag;

/// The most the agent reads of any one file.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Whether a symbolic link at the path itself is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Followed: the service account's `token` and `ca.crt` are symlinks into `..data` (the kubelet's
    /// atomic projection), and `--plugin-binary` defaults to `/proc/self/exe`.
    Follow,
    /// Refused: a CNI configuration the agent rewrites is one it found as a regular file in the folder
    /// (Istio's `getConfigFilenames` lists files), never a link to elsewhere on the node.
    NoFollow,
}

/// What kind of file `t` is, for an error message.
fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading without ever blocking in `open(2)` (`O_NONBLOCK`: a FIFO without a writer
/// opens at once), and refuses it (`InvalidInput`, naming the kind) unless it is a regular file as
/// `fstat` sees the opened file, so a swap between a check and the open cannot slip a FIFO in.
pub fn open_regular(path: &Path, links: Links) -> std::io::Result<File> {
    let mut flags = OFlag::O_NONBLOCK;
    if links == Links::NoFollow {
        flags |= OFlag::O_NOFOLLOW;
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
    {
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a symbolic link, which the agent does not follow here",
            ))
        }
        other => other?,
    };
    let t = file.metadata()?.file_type();
    if !t.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", kind(t)),
        ));
    }
    Ok(file)
}

/// Reads `path` (a regular file, see [`open_regular`]), failing with `InvalidData` (naming the limit)
/// when it holds more than [`MAX_FILE_BYTES`]; the limit is checked while reading, so a growing file
/// cannot outrun it.
pub fn read(path: &Path, links: Links) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_regular(path, links)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_FILE_BYTES} bytes"),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("bounded-read-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_over_the_bound_is_refused() {
        let dir = dir("big");
        let small = dir.join("small");
        std::fs::write(&small, b"{}").unwrap();
        assert_eq!(read(&small, Links::NoFollow).unwrap(), b"{}");
        let big = dir.join("big");
        std::fs::write(&big, vec![b' '; MAX_FILE_BYTES as usize + 1]).unwrap();
        let e = read(&big, Links::Follow).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("larger than"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A FIFO without a writer blocked `open(2)` forever before the fix; it is refused at once,
    /// followed through a symlink or not, and so is a directory.
    #[test]
    fn a_fifo_or_a_directory_is_refused_at_once_and_a_link_only_when_followed() {
        let dir = dir("fifo");
        let fifo = dir.join("10-bridge.conflist");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let paths = [fifo.clone(), link.clone(), dir.clone()];
        std::thread::spawn(move || {
            let out: Vec<_> = paths
                .iter()
                .map(|p| read(p, Links::Follow).map_err(|e| (e.kind(), e.to_string())))
                .collect();
            let _ = tx.send(out);
        });
        let start = Instant::now();
        let out = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("reading a FIFO blocked");
        eprintln!("refused in {:?}", start.elapsed());
        let kinds: Vec<_> = out.into_iter().map(|r| r.unwrap_err()).collect();
        assert_eq!(
            kinds[0],
            (
                std::io::ErrorKind::InvalidInput,
                "a FIFO, not a regular file".to_string()
            )
        );
        assert_eq!(kinds[1], kinds[0]);
        assert_eq!(kinds[2].1, "a directory, not a regular file");

        let target = dir.join("target");
        std::fs::write(&target, b"{}").unwrap();
        let to_file = dir.join("to-file");
        std::os::unix::fs::symlink(&target, &to_file).unwrap();
        assert_eq!(read(&to_file, Links::Follow).unwrap(), b"{}");
        let e = read(&to_file, Links::NoFollow).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
