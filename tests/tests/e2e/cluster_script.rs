//! `scripts/cluster.sh` itself: `down` and the owner watchdog leave no process and no state behind, and
//! `up` without built binaries fails loudly instead of passing a test by skipping it.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::apiserver::TempDir;
use e2e::cluster::script_command;
use test_support::process::run_ok;

/// Whether `pid` is a running process (a zombie is not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// The pids `up` recorded in `dir`.
fn pids(dir: &Path) -> Vec<u32> {
    ["etcd.pid", "kube-apiserver.pid"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(dir.join(f))
                .unwrap_or_else(|e| panic!("{f}: {e}"))
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}

fn up(dir: &Path, owner: Option<u32>) {
    let mut cmd = script_command("up", dir);
    if let Some(pid) = owner {
        cmd.env("CLUSTER_OWNER_PID", pid.to_string());
    }
    run_ok(
        &mut cmd,
        "cluster.sh up (build it with `bash scripts/cluster.sh build`; scripts/test.sh does)",
    );
}

/// Polls until `dir` is removed and none of `pids` runs (at most [`e2e::PATIENCE`]).
fn wait_gone(dir: &Path, pids: &[u32]) {
    let within = e2e::PATIENCE;
    let deadline = Instant::now() + within;
    while dir.exists() || pids.iter().any(|p| running(*p)) {
        assert!(
            Instant::now() < deadline,
            "after {within:?}: dir exists {}, running {:?}",
            dir.exists(),
            pids.iter().filter(|p| running(**p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn down_stops_both_servers_and_removes_the_state() {
    let parent = TempDir::new("cluster-down");
    let dir = parent.path().join("cp");
    up(&dir, None);
    let pids = pids(&dir);
    assert!(pids.iter().all(|p| running(*p)), "both servers run");
    run_ok(&mut script_command("down", &dir), "cluster.sh down");
    wait_gone(&dir, &pids);
}

/// A test process that dies without running its destructors (SIGKILL, abort) takes its control plane
/// down with it: `up`'s watchdog notices the owner is gone.
#[test]
fn a_dead_owner_takes_its_control_plane_down() {
    let parent = TempDir::new("cluster-owner");
    let dir = parent.path().join("cp");
    let mut owner = Command::new("sleep").arg("600").spawn().unwrap();
    up(&dir, Some(owner.id()));
    let pids = pids(&dir);
    assert!(pids.iter().all(|p| running(*p)), "both servers run");
    owner.kill().unwrap();
    owner.wait().unwrap();
    wait_gone(&dir, &pids);
}

#[test]
fn up_without_built_binaries_fails_loudly() {
    let parent = TempDir::new("cluster-unbuilt");
    let dir = parent.path().join("cp");
    let out = script_command("up", &dir)
        .env("SIDECAR_INJECT_CACHE", parent.path().join("empty-cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "up passed without binaries: {stderr}"
    );
    assert!(
        stderr.contains("not built") && stderr.contains("bash scripts/cluster.sh build"),
        "the message says what to run: {stderr}"
    );
    assert!(!dir.join("etcd.pid").exists(), "nothing was started");
}
