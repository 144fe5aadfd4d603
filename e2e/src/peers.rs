//! Istio's own binaries as peers: the paths `scripts/istio-peers.sh` built them at, and the CNI
//! project's tools (`cnitool` and reference plugins) that run a CNI plugin the way a container runtime
//! does, at the paths `scripts/cni-tools.sh` built them at.
//!
//! The peers are built from the `istio.io/istio` Go module pinned in `tools/istio`, the CNI tools from
//! `tools/cni`, both cached outside the clone; `scripts/test.sh` builds them before the tests. A test that
//! needs one panics with the command to run when it is missing: a differential test never passes without
//! its peer.

use std::path::PathBuf;
use std::process::Command;

/// The path of the Istio peer `name` (`pilot-agent`, `istioctl`, `istio-cni`), as
/// `scripts/istio-peers.sh path` prints it. Panics when the peer is not built.
pub fn peer(name: &str) -> PathBuf {
    built("istio-peers.sh", name).unwrap_or_else(|stderr| {
        panic!(
            "the Istio peer `{name}` is not built ({stderr}): run `bash scripts/istio-peers.sh build` \
             (scripts/test.sh does; the first build takes many minutes)"
        )
    })
}

/// The path of the CNI tool `name` (`cnitool`, `bridge`, `ptp`, `loopback`, `host-local`), as
/// `scripts/cni-tools.sh path` prints it; all are in one folder, which can serve as `CNI_PATH`. Panics
/// when the tool is not built.
pub fn cni_tool(name: &str) -> PathBuf {
    built("cni-tools.sh", name).unwrap_or_else(|stderr| {
        panic!(
            "the CNI tool `{name}` is not built ({stderr}): run `bash scripts/cni-tools.sh build` \
             (scripts/test.sh does; the first build takes about half a minute)"
        )
    })
}

/// The path `scripts/<script> path` prints for `name` when that file exists, else why not (its stderr).
fn built(script: &str, name: &str) -> Result<PathBuf, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(script);
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
        Some(path) if path.is_file() => Ok(path),
        _ => Err(match String::from_utf8_lossy(&out.stderr).trim() {
            "" => format!("{} path prints no `{name}=`", script.display()),
            stderr => stderr.to_string(),
        }),
    }
}
