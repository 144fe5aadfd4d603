//! Reading the node's files with a bound: a CNI configuration, the service account's token and CA are a
//! few KiB, and a file that is not (a mistake, or a hostile writer on the node) must not grow the agent.

use std::io::Read as _;
use std::path::Path;

/// The most the agent reads of any one file.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Reads `path`, failing with `InvalidData` (naming the limit) when it holds more than
/// [`MAX_FILE_BYTES`]; the limit is checked while reading, so a growing file cannot outrun it.
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
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

    #[test]
    fn a_file_over_the_bound_is_refused() {
        let dir = std::env::temp_dir().join(format!("bounded-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = dir.join("small");
        std::fs::write(&small, b"{}").unwrap();
        assert_eq!(read(&small).unwrap(), b"{}");
        let big = dir.join("big");
        std::fs::write(&big, vec![b' '; MAX_FILE_BYTES as usize + 1]).unwrap();
        let e = read(&big).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("larger than"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
