//! `scripts/cluster.sh` itself: `down` and the owner watchdog leave no process and no state behind, and
//! `up` without built binaries fails loudly instead of passing a test by skipping it; with nodes, two
//! clusters run side by side as clusters, and `down` leaves the host as it found it.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::apiserver::TempDir;
use e2e::cluster::{script_command, wait_for, Cluster, Node};
use e2e::host_state::{HostState, Marks};
use test_support::process::{run_ok, stdout_ok};
use test_support::root::require_root_with;

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

/// A pod on `node` running the pause image (the only image a node has), naming no service account:
/// ServiceAccount admission gives it `default` and the projected token volume.
fn pause_pod(name: &str, node: &str, image: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "pause", "image": image, "imagePullPolicy": "Never"}],
        },
    })
}

/// The pid of the task of container `id` on `node` (`ctr task ls`).
fn task_pid(node: &Node, id: &str) -> u32 {
    let tasks = stdout_ok(node.ctr().args(["task", "ls"]), "ctr task ls");
    tasks
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&id)).then(|| f[1].parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no task {id} on {}: {tasks}", node.name))
}

/// Whether `ip` is in the IPv4 `cidr`.
fn in_cidr(ip: &str, cidr: &str) -> bool {
    let (net, len) = cidr.split_once('/').unwrap();
    let (ip, net): (std::net::Ipv4Addr, std::net::Ipv4Addr) =
        (ip.parse().unwrap(), net.parse().unwrap());
    let mask = u32::MAX
        .checked_shl(32 - len.parse::<u32>().unwrap())
        .unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

/// What a cluster with nodes must do: every node Ready; on each, a pod scheduled there by the scheduler
/// runs, with the service account ServiceAccount admission gave it and an address of the node's pod
/// subnet, which the host reaches; `kubectl logs` and `exec` reach the kubelet; from the pod's network namespace
/// the `kubernetes` Service's ClusterIP answers (kube-proxy's rules on the node, the route back through
/// the host); the node sees its own CNI folders at the standard paths.
fn check_cluster(c: &Cluster) {
    let image = c.env["PAUSE_IMAGE"].clone();
    let nodes = c.kubectl_json(&["get", "nodes"], None).unwrap();
    let items = nodes["items"].as_array().unwrap();
    assert_eq!(items.len(), c.nodes.len(), "{nodes:#}");
    for n in items {
        let ready = n["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(ready, "node not Ready: {n:#}");
    }
    for node in &c.nodes {
        c.apply(&pause_pod(&format!("p-{}", node.name), &node.name, &image))
            .unwrap();
    }
    let service_ip = c
        .kubectl(
            &[
                "get",
                "service",
                "kubernetes",
                "-o",
                "jsonpath={.spec.clusterIP}",
            ],
            None,
        )
        .unwrap();
    for node in &c.nodes {
        let name = format!("p-{}", node.name);
        let pod = wait_for(
            &format!("pod {name} Ready"),
            Duration::from_secs(180),
            || {
                let pod = c.kubectl_json(&["get", "pod", &name], None)?;
                let ready = pod["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
                if ready {
                    Ok(pod)
                } else {
                    Err(anyhow::anyhow!("{:#}", pod["status"]))
                }
            },
        );
        assert_eq!(pod["spec"]["nodeName"], node.name.as_str(), "{pod:#}");
        assert_eq!(pod["spec"]["serviceAccountName"], "default", "{pod:#}");
        let token_volume = pod["spec"]["volumes"].as_array().unwrap().iter().any(|v| {
            v["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("kube-api-access-"))
                && v["projected"].is_object()
        });
        assert!(
            token_volume,
            "ServiceAccount admission added the token volume: {pod:#}"
        );
        let ip = pod["status"]["podIP"].as_str().unwrap().to_string();
        assert!(in_cidr(&ip, &node.pod_cidr), "{ip} in {}", node.pod_cidr);
        // The host routes the pod subnet to the node: a closed port answers at once (a reset), where an
        // unrouted address would time out.
        let err = std::net::TcpStream::connect_timeout(
            &format!("{ip}:7").parse().unwrap(),
            Duration::from_secs(20),
        )
        .unwrap_err();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "host -> {ip}:7: {err}"
        );
        c.kubectl(&["logs", &name], None).unwrap();
        let version = c
            .kubectl(&["exec", &name, "--", "/pause", "-v"], None)
            .unwrap();
        assert!(version.starts_with("pause.c v"), "{version}");
        let id = pod["status"]["containerStatuses"][0]["containerID"]
            .as_str()
            .unwrap()
            .strip_prefix("containerd://")
            .unwrap()
            .to_string();
        let pid = task_pid(node, &id);
        let readyz = stdout_ok(
            Command::new("nsenter")
                .arg(format!("--net=/proc/{pid}/ns/net"))
                .args(["curl", "-sk", "--max-time", "20"])
                .arg(format!("https://{service_ip}/readyz")),
            &format!("curl https://{service_ip}/readyz in pod {name}'s network namespace"),
        );
        assert_eq!(readyz, "ok");
        // The node's /opt/cni/bin and /etc/cni/net.d are the host folders env names.
        std::fs::write(node.cni_conf_dir.join("probe"), &node.name).unwrap();
        let seen = stdout_ok(
            node.command("sh").args([
                "-c",
                "cat /etc/cni/net.d/probe; ls /etc/cni/net.d /opt/cni/bin; hostname",
            ]),
            "reading the node's CNI folders",
        );
        let seen: Vec<&str> = seen.split_whitespace().collect();
        for want in [
            node.name.as_str(),
            "10-bridge.conflist",
            "bridge",
            "host-local",
            "loopback",
        ] {
            assert!(seen.contains(&want), "{want} on {}: {seen:?}", node.name);
        }
        std::fs::remove_file(node.cni_conf_dir.join("probe")).unwrap();
    }
}

/// Two clusters with nodes (2 and 1) started at once work side by side, and after
/// `down` the host's processes, mounts, links, network namespaces, cgroups, netfilter state and sysctls
/// are as a snapshot from before `up` shows them. While they run, the host's netfilter state and sysctls
/// are untouched and none of the nodes' mounts is visible on the host.
#[test]
fn clusters_with_nodes_run_side_by_side_and_down_leaves_the_host_as_found() {
    require_root_with(
        &[
            "ctr",
            "nsenter",
            "curl",
            "nft",
            "iptables-save",
            "ip6tables-save",
        ],
        "scripts/test.sh installs them",
    );
    let cni_paths = [
        "/etc/cni",
        "/opt/cni",
        "/var/lib/kubelet",
        "/var/lib/containerd",
        "/run/containerd",
    ];
    let existed: Vec<bool> = cni_paths.iter().map(|p| Path::new(p).exists()).collect();
    let before = HostState::take().unwrap();

    let ups: Vec<_> = [2, 1]
        .into_iter()
        .map(|n| std::thread::spawn(move || Cluster::up_with_nodes(n)))
        .collect();
    let clusters: Vec<Cluster> = ups.into_iter().map(|h| h.join().unwrap()).collect();
    let mut marks = Marks::default();
    for c in &clusters {
        marks.add_cluster(c.dir(), &c.env).unwrap();
    }
    assert_ne!(marks.slots[0], marks.slots[1], "two clusters, two slots");
    assert_ne!(clusters[0].env["POD_CIDR"], clusters[1].env["POD_CIDR"]);
    assert_ne!(
        clusters[0].env["SERVICE_CIDR"],
        clusters[1].env["SERVICE_CIDR"]
    );

    let during = HostState::take().unwrap();
    // The snapshot sees the clusters (so that an empty difference below means something).
    let running = before.left_behind(&during, &marks);
    for want in ["process", "link sik", "cgroup"] {
        assert!(
            running.iter().any(|l| l.starts_with(want)),
            "the running clusters' {want} entries are seen: {running:#?}"
        );
    }
    assert_eq!(
        during.netfilter, before.netfilter,
        "the host's netfilter state is untouched"
    );
    let sysctls: Vec<&String> = running.iter().filter(|l| l.starts_with("sysctl")).collect();
    assert!(
        sysctls.is_empty(),
        "the host's sysctls are untouched: {sysctls:#?}"
    );
    for m in &during.mounts {
        assert!(
            !marks.dirs.iter().any(|d| m.contains(&*d.to_string_lossy())),
            "a node's mount on the host: {m}"
        );
    }
    let exist_now: Vec<bool> = cni_paths.iter().map(|p| Path::new(p).exists()).collect();
    assert_eq!(existed, exist_now, "the host's own {cni_paths:?}");

    for c in &clusters {
        check_cluster(c);
    }

    for c in &clusters {
        run_ok(&mut script_command("down", c.dir()), "cluster.sh down");
        assert!(!c.dir().exists());
    }
    let after = HostState::take().unwrap();
    let left = before.left_behind(&after, &marks);
    assert!(left.is_empty(), "down left behind:\n{}", left.join("\n"));
    drop(clusters);
}
