//! Istio's own binaries as peers: the paths `scripts/istio-peers.sh` built them at (issue 21).
//!
//! The peers are built from the `istio.io/istio` Go module pinned in `tools/istio` and cached outside the
//! clone; `scripts/test.sh` builds them before the tests. A test that needs one panics with the command to
//! run when it is missing: a differential test never passes without its peer.

use std::path::PathBuf;
use std::process::Command;

/// The path of the Istio peer `name` (`pilot-agent`, `istioctl`), as `scripts/istio-peers.sh path`
/// prints it. Panics when the peer is not built.
pub fn peer(name: &str) -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/istio-peers.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("path")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let found = stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .map(PathBuf::from);
    match found {
        Some(path) if path.is_file() => path,
        _ => panic!(
            "the Istio peer `{name}` is not built ({}): run `bash scripts/istio-peers.sh build` \
             (scripts/test.sh does; the first build takes many minutes)",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}
