//! The Go-built tools' scripts (`scripts/cluster.sh`, `istio-peers.sh`, `cni-tools.sh`) share one cache on
//! a machine, and two runs may build into it at once (two worktrees' test runs). Each holds a lock while it
//! builds: the second run waits, then finds the binary built, so one target is built once and both runs
//! succeed (before the lock, two `istio-peers.sh build` runs raced on one temporary file and one failed
//! with `mv: cannot stat …/istioctl.tmp`).
//!
//! Each test makes a private cache holding the machine's built binaries (links to them) but one cheap
//! target, runs two builds at once against it, and checks that both succeed with the same answer and
//! that exactly one of them built the missing target.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use e2e::apiserver::TempDir;
use test_support::process::stdout_ok;

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name)
}

/// `NAME=PATH` lines as (name, path).
fn paths(text: &str) -> Vec<(String, PathBuf)> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(n, p)| (n.to_string(), PathBuf::from(p)))
        .collect()
}

/// Runs `bash <script> build` twice at once with `env` set; both outputs.
fn two_builds(script_name: &str, env: &[(&str, &Path)]) -> [Output; 2] {
    let start = || {
        let mut cmd = Command::new("bash");
        cmd.arg(script(script_name))
            .arg("build")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    };
    let (a, b) = (start(), start());
    [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()]
}

/// Both runs succeeded with the same stdout, and `building` (the line a script prints when it starts a
/// build of the missing target) appears in exactly one run's stderr.
fn built_once(outs: &[Output; 2], building: &str) -> String {
    let stderr: Vec<String> = outs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    for (o, e) in outs.iter().zip(&stderr) {
        assert!(o.status.success(), "a build failed ({}): {e}", o.status);
    }
    assert_eq!(
        outs[0].stdout, outs[1].stdout,
        "both runs answer the same: {stderr:#?}"
    );
    let builds = stderr
        .iter()
        .map(|e| e.matches(building).count())
        .sum::<usize>();
    assert_eq!(builds, 1, "`{building}` once in all: {stderr:#?}");
    String::from_utf8(outs[0].stdout.clone()).unwrap()
}

/// Cache folders `<root>/<key>/bin` holding links to `tools` but `missing`, each tool under its own
/// folder's key (`istio-peers.sh` keys one folder per pinned module).
fn cache_without(root: &Path, tools: &[(String, PathBuf)], missing: &str) {
    for (name, path) in tools {
        let key = path
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .file_name()
            .unwrap();
        let bin = root.join(key).join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        if name != missing {
            std::os::unix::fs::symlink(path, bin.join(path.file_name().unwrap())).unwrap();
        }
    }
}

#[test]
fn two_istio_peers_builds_at_once_build_once() {
    let built = paths(&stdout_ok(
        Command::new("bash").arg(script("istio-peers.sh")).arg("path"),
        "istio-peers.sh path (build them with `bash scripts/istio-peers.sh build`; scripts/test.sh does)",
    ));
    let tmp = TempDir::new("peers-lock");
    // inject-batch: a small program of ours, linked in seconds from Go's build cache.
    cache_without(tmp.path(), &built, "inject-batch");
    let outs = two_builds("istio-peers.sh", &[("ISTIO_PEERS_CACHE", tmp.path())]);
    // `inject-batch (`: not `inject-batch-next`, which the cache holds.
    let out = built_once(&outs, "istio-peers: building inject-batch (");
    let (_, batch) = paths(&out)
        .into_iter()
        .find(|(n, _)| n == "inject-batch")
        .unwrap();
    assert!(batch.starts_with(tmp.path()) && batch.is_file(), "{out}");
}

#[test]
fn two_cni_tools_builds_at_once_build_once() {
    let built = paths(&stdout_ok(
        Command::new("bash").arg(script("cni-tools.sh")).arg("path"),
        "cni-tools.sh path (build them with `bash scripts/cni-tools.sh build`; scripts/test.sh does)",
    ));
    let tmp = TempDir::new("cni-lock");
    cache_without(tmp.path(), &built, "loopback");
    let outs = two_builds("cni-tools.sh", &[("CNI_TOOLS_CACHE", tmp.path())]);
    let out = built_once(&outs, "cni-tools: building");
    assert!(
        out.contains(&format!("loopback={}", tmp.path().display())),
        "{out}"
    );
}

#[test]
fn two_cluster_builds_at_once_build_once() {
    // The machine's cache folders, without building (scripts/test.sh has built them).
    let dirs: Vec<PathBuf> = stdout_ok(
        Command::new("bash")
            .arg(script("cluster.sh"))
            .arg("build")
            .env("CLUSTER_NO_BUILD", "1"),
        "cluster.sh build (build it with `bash scripts/cluster.sh build`; scripts/test.sh does)",
    )
    .lines()
    .map(PathBuf::from)
    .collect();
    assert_eq!(dirs.len(), 3, "{dirs:?}");
    let tmp = TempDir::new("cluster-lock");
    // The control plane's and the nodes' cache entries as they are; helm's missing (a link from Go's
    // build cache).
    for d in [&dirs[0], &dirs[2]] {
        let kind = d.parent().unwrap().parent().unwrap();
        std::os::unix::fs::symlink(kind, tmp.path().join(kind.file_name().unwrap())).unwrap();
    }
    let outs = two_builds("cluster.sh", &[("SIDECAR_INJECT_CACHE", tmp.path())]);
    let out = built_once(&outs, "cluster.sh: building helm");
    let helm = PathBuf::from(out.lines().nth(1).unwrap()).join("helm");
    assert!(helm.starts_with(tmp.path()) && helm.is_file(), "{out}");
}
