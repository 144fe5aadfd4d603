//! Helpers for the end-to-end tests: locating the built binaries, network namespaces, running
//! `iptables-init` in them and real traffic through `nettool`, TLS clients.
//! The tests themselves live in `tests/e2e/`; Istio's test data and the helpers shared with the injector's
//! tests are in the `test-support` crate.

// The end-to-end checks read the binaries' JSON with serde_json's own accessors, not the injector's
// `fields`, which clippy.toml prescribes for the injector's code: the checker shares no code with what it checks.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;

/// Path of a workspace binary built by `cargo build --bins` (the README's test command builds them first).
/// Panics with a clear message when it is missing: an end-to-end test never passes without its binary.
pub fn bin(name: &str) -> PathBuf {
    // The shipped iptables-init is the static musl release build (scripts/check-static-init.sh);
    // scripts/test.sh runs the netfilter tests a second time against it through this variable.
    // Likewise the shipped istio-cni, the static musl release build (scripts/check-static-cni.sh).
    let shipped = match name {
        "iptables-init" => Some("E2E_IPTABLES_INIT"),
        "istio-cni" => Some("E2E_ISTIO_CNI"),
        _ => None,
    };
    if let Some(var) = shipped {
        if let Some(path) = std::env::var_os(var) {
            let path = PathBuf::from(path);
            assert!(path.exists(), "{var}={} not found", path.display());
            return path;
        }
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let profile = std::env::var("E2E_PROFILE").unwrap_or_else(|_| "debug".to_string());
    let path = target.join(profile).join(name);
    assert!(
        path.exists(),
        "binary {} not found: run `cargo build --workspace --bins` first",
        path.display()
    );
    path
}

/// The overall bound of a test's wait for work it started elsewhere (a server to reload, an informer or
/// a watch to see a change, an agent to install, a process to exit): the waits poll their condition and
/// return as soon as it holds, so the bound costs nothing when things work and only ends a test that would
/// otherwise hang. It is generous because the suite shares its machine with other builds and jobs, where
/// work of a few milliseconds can take seconds (a 5 s deadline once failed under a busy disk).
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

pub mod apiserver;
pub mod cluster;
pub mod cni;
pub mod cni_agent;
pub mod diagnosis;
pub mod differential;
pub mod helm;
pub mod host_state;
pub mod hostile_values;
pub mod image_archive;
pub mod inject_differential;
pub mod interception;
pub mod iptables_init;
pub mod landing;
pub mod load;
pub mod netns;
pub mod nettool;
pub mod peers;
pub mod policy_differential;
pub mod product;
pub mod rules_differential;

/// Waits for `child`, a `what` started with `--port-file port_file` and its stderr in `stderr`, to write
/// its port file, until `read` finds the addresses in its text; fails when the child exits first (with
/// its stderr) or within [`PATIENCE`] it has not, killing it then.
pub fn wait_for_port_file<T>(
    child: &mut std::process::Child,
    what: &str,
    port_file: &std::path::Path,
    stderr: &std::path::Path,
    read: impl Fn(&str) -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        if let Ok(text) = std::fs::read_to_string(port_file) {
            if let Some(found) = read(&text)? {
                return Ok(found);
            }
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!(
                "{what} exited with {status} before listening: {}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            anyhow::bail!("{what} did not report its ports within {PATIENCE:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
