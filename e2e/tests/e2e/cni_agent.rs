//! `istio-cni install` against a real kube-apiserver and real files: the plugin installed (binary,
//! kubeconfig, our entry last in a bridge + host-local conflist), repaired when the conflist or the
//! binary is changed behind its back, the Node's not-ready taint removed, everything taken off again
//! on SIGTERM — stale `istio-cni` entries included, at once even while it copies a large binary or
//! while its conflist is a FIFO.
//!
//! Waits are tied to the work: each polls its condition and returns as soon as it holds, under one
//! generous deadline ([`WORK`]) that only a broken agent reaches, so a busy disk (the debug binary is
//! about 180 MB) slows the test down instead of failing it.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use e2e::cluster::{wait_for, Cluster};
use e2e::cni_agent::{metric, read_json, Agent, NodeDirs};
use serde_json::{json, Value};

const CONFLIST: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "k8s-pod-network",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
"#;

/// The deadline of every wait on the agent's work: generous, as each wait returns once its condition
/// holds.
const WORK: Duration = Duration::from_secs(180);

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn plugins(v: &Value) -> Vec<Value> {
    v["plugins"].as_array().cloned().unwrap_or_default()
}

/// A cluster, and a node's folders for istio-system's `istio-cni` account whose primary CNI is the
/// bridge conflist [`CONFLIST`] (its path returned).
fn bridge_node() -> (Cluster, NodeDirs, std::path::PathBuf) {
    let cluster = Cluster::up();
    let dirs = NodeDirs::new(&cluster, "istio-system", "istio-cni").unwrap();
    let conflist = dirs.conf.join("10-bridge.conflist");
    std::fs::write(&conflist, CONFLIST).unwrap();
    (cluster, dirs, conflist)
}

#[test]
fn installs_repairs_untaints_and_cleans_up() {
    let (cluster, dirs, conflist) = bridge_node();
    let original: Value = serde_json::from_str(CONFLIST).unwrap();
    e2e::cni_agent::tainted_node(&cluster, "node-a").unwrap();

    let started = Instant::now();
    let mut agent = Agent::start(
        &cluster,
        &dirs,
        "node-a",
        &[
            "--exclude-namespaces=kube-system,istio-system",
            "--pod-namespace=istio-system",
        ],
    )
    .unwrap();
    wait_for("/readyz 200", WORK, || {
        agent.get("/readyz").and_then(|(s, b)| match s {
            200 => Ok(()),
            _ => Err(anyhow::anyhow!("{s} {b}")),
        })
    });
    eprintln!("ready after {:?}", started.elapsed());

    // The binary: this build's bytes, 0755.
    let installed = dirs.bin.join("istio-cni");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(e2e::bin("istio-cni")).unwrap()
    );
    assert_eq!(mode(&installed), 0o755);

    // The kubeconfig: 0600, the service account's token, usable by kubectl.
    let kubeconfig = dirs.run.join("istio-cni-kubeconfig");
    assert_eq!(mode(&kubeconfig), 0o600);
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(
        text.contains(&format!("server: {}\n", cluster.server)),
        "{text}"
    );
    assert!(
        text.contains("current-context: istio-cni-context\n"),
        "{text}"
    );
    let out = cluster
        .kubectl_as(&kubeconfig, &["get", "pods", "-n", "default"])
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl with the written kubeconfig: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let whoami = [
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ];
    let out = cluster.kubectl_as(&kubeconfig, &whoami).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "system:serviceaccount:istio-system:istio-cni"
    );

    // The conflist: the other plugins as they were, ours last with the plugin's keys.
    let v = read_json(&conflist).unwrap();
    let list = plugins(&v);
    assert_eq!(list.len(), 3);
    assert_eq!(list[..2], plugins(&original)[..]);
    assert_eq!(
        list[2],
        json!({
            "name": "istio-cni", "type": "istio-cni",
            "cni_agent_run_dir": dirs.run.to_str().unwrap(),
            "plugin_log_level": "info",
            "exclude_namespaces": ["kube-system", "istio-system"],
            "pod_namespace": "istio-system",
            "native_nftables": false,
        })
    );

    // The taint: ours gone, the others kept (the apiserver's TaintNodesByCondition admission added
    // node.kubernetes.io/not-ready to the new Node).
    let taints = wait_for("the not-ready taint removed", WORK, || {
        e2e::cni_agent::untainted(&cluster, "node-a")
    });
    let keys: Vec<&str> = taints.iter().filter_map(|t| t["key"].as_str()).collect();
    assert!(keys.contains(&"node.kubernetes.io/not-ready"), "{taints:?}");

    // The plugin's log lines are copied to the agent's stdout.
    let line = r#"{"level":"info","msg":"from the plugin"}"#;
    std::fs::write(dirs.run.join("istio-cni.log"), format!("{line}\n")).unwrap();
    wait_for("the plugin's log line on stdout", WORK, || {
        let out = agent.stdout();
        if out.contains(line) {
            Ok(())
        } else {
            Err(out)
        }
    });

    // The conflist rewritten without our entry: repaired.
    std::fs::write(&conflist, CONFLIST).unwrap();
    let t = Instant::now();
    wait_for("our entry back in the conflist", WORK, || {
        let v = read_json(&conflist)?;
        match plugins(&v).last() {
            Some(p) if p["type"] == "istio-cni" && plugins(&v).len() == 3 => Ok(()),
            _ => Err(anyhow::anyhow!("{v}")),
        }
    });
    eprintln!("conflist repaired in {:?}", t.elapsed());
    // The repair's pass counted before the binary goes: a binary removed while that pass still runs
    // fails the pass's closing check, and the next pass repairs both as one, so the count below would
    // never reach three (seen once at load 5.6, a 180 s timeout).
    let installs = |agent: &Agent| -> anyhow::Result<f64> {
        let (status, text) = agent.get("/metrics")?;
        match metric(&text, "istio_cni_installs_total{result=\"SUCCESS\"}") {
            Some(n) if status == 200 => Ok(n),
            _ => Err(anyhow::anyhow!("{status} {text}")),
        }
    };
    wait_for("the conflist's repair counted", WORK, || {
        match installs(&agent)? {
            n if n >= 2.0 => Ok(()),
            n => Err(anyhow::anyhow!("{n} installs")),
        }
    });

    // The binary removed: copied again.
    std::fs::remove_file(&installed).unwrap();
    let t = Instant::now();
    // A fixed 5 s here once failed while the disk was busy. The copy is atomic (a
    // temporary file renamed into place), so the binary is there whole or not at all.
    wait_for("the binary restored", WORK, || {
        std::fs::metadata(&installed)
    });
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(e2e::bin("istio-cni")).unwrap()
    );
    eprintln!("binary restored in {:?}", t.elapsed());
    assert_eq!(mode(&installed), 0o755);
    wait_for("/readyz 200 again", WORK, || {
        agent.get("/readyz").and_then(|(s, _)| match s {
            200 => Ok(()),
            _ => Err(anyhow::anyhow!("{s}")),
        })
    });

    // Three passes: the first, the conflist's repair, the binary's.
    let text = wait_for("three installs counted", WORK, || {
        let (status, text) = agent.get("/metrics")?;
        match metric(&text, "istio_cni_installs_total{result=\"SUCCESS\"}") {
            Some(n) if status == 200 && n >= 3.0 => Ok(text),
            _ => Err(anyhow::anyhow!("{status} {text}")),
        }
    });
    assert_eq!(
        metric(&text, "istio_cni_install_ready"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "istio_cni_node_untainted_total"),
        Some(1.0),
        "{text}"
    );

    // SIGTERM: everything taken off, exit 0.
    let status = agent.terminate().unwrap();
    assert!(status.success(), "{status}: {}", agent.stderr());
    assert_eq!(read_json(&conflist).unwrap(), original);
    assert!(!installed.exists());
    assert!(!kubeconfig.exists());
    let left: Vec<_> = std::fs::read_dir(&dirs.bin).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn waits_for_a_configuration_then_chains_into_a_conf() {
    let cluster = Cluster::up();
    let dirs = NodeDirs::new(&cluster, "istio-system", "istio-cni").unwrap();
    let agent = Agent::start(&cluster, &dirs, "node-b", &["--repair-enabled=false"]).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let (status, _) = agent.get("/readyz").unwrap();
    assert_eq!(status, 503, "ready without any CNI configuration");

    // A single-plugin .conf appears: it becomes a .conflist with the plugin first and ours second.
    let conf = json!({"cniVersion": "0.4.0", "name": "bridge-net", "type": "bridge",
                      "ipam": {"type": "host-local", "subnet": "10.245.0.0/24"}});
    std::fs::write(dirs.conf.join("10-bridge.conf"), conf.to_string()).unwrap();
    let list = dirs.conf.join("10-bridge.conflist");
    wait_for("the .conf chained as a .conflist", WORK, || {
        let v = read_json(&list)?;
        let p = plugins(&v);
        if p.len() == 2 && p[1]["type"] == "istio-cni" {
            Ok(v)
        } else {
            Err(anyhow::anyhow!("{v}"))
        }
    });
    assert!(!dirs.conf.join("10-bridge.conf").exists());
    let v = read_json(&list).unwrap();
    let mut first = conf.clone();
    first.as_object_mut().unwrap().remove("cniVersion");
    assert_eq!(plugins(&v)[0], first);
    assert_eq!(v["name"], "k8s-pod-network");
    wait_for("/readyz 200", WORK, || {
        agent.get("/readyz").and_then(|(s, _)| match s {
            200 => Ok(()),
            _ => Err(anyhow::anyhow!("{s}")),
        })
    });
}

fn types(v: &Value) -> Vec<String> {
    plugins(v)
        .iter()
        .map(|p| p["type"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn ready(agent: &Agent) -> anyhow::Result<()> {
    agent.get("/readyz").and_then(|(s, b)| match s {
        200 => Ok(()),
        _ => Err(anyhow::anyhow!("{s} {b}")),
    })
}

/// Before the fix, a conflist already holding `istio-cni` twice kept the second entry after
/// install, and after SIGTERM still held one pointing at the removed binary and kubeconfig: every new
/// sandbox then failed. Install leaves exactly our entry; cleanup leaves none, in any file.
#[test]
fn every_istio_cni_entry_is_replaced_on_install_and_removed_on_sigterm() {
    let cluster = Cluster::up();
    let dirs = NodeDirs::new(&cluster, "istio-system", "istio-cni").unwrap();
    let original: Value = serde_json::from_str(CONFLIST).unwrap();
    let stale = json!({"name": "istio-cni", "type": "istio-cni", "cni_agent_run_dir": "/var/run/old-istio-cni"});
    let mut twice = original.clone();
    let list = twice["plugins"].as_array_mut().unwrap();
    list.insert(1, stale.clone());
    list.push(stale.clone());
    let conflist = dirs.conf.join("10-bridge.conflist");
    std::fs::write(&conflist, twice.to_string()).unwrap();
    // A file the runtime does not read while the first is there, but would once it is gone.
    let other = dirs.conf.join("20-other.conflist");
    let other_list =
        json!({"cniVersion": "1.0.0", "name": "other", "plugins": [{"type": "ptp"}, stale]});
    std::fs::write(&other, other_list.to_string()).unwrap();

    let mut agent = Agent::start(&cluster, &dirs, "node-c", &["--repair-enabled=false"]).unwrap();
    wait_for("/readyz 200", WORK, || ready(&agent));
    let v = read_json(&conflist).unwrap();
    assert_eq!(types(&v), ["bridge", "portmap", "istio-cni"], "{v}");
    assert_eq!(
        plugins(&v)[2]["cni_agent_run_dir"],
        dirs.run.to_str().unwrap()
    );
    assert_eq!(
        read_json(&other).unwrap(),
        other_list,
        "a file not chained into is left alone"
    );

    let status = agent.terminate().unwrap();
    assert!(status.success(), "{status}: {}", agent.stderr());
    assert_eq!(read_json(&conflist).unwrap(), original);
    assert_eq!(types(&read_json(&other).unwrap()), ["ptp"]);
}

/// Before the fix, with `CNI_CONF_NAME` set, a conflist replaced by a FIFO blocked the agent in
/// open(2), and SIGTERM was no longer handled. The FIFO is refused, and SIGTERM cleans up and exits.
#[test]
fn sigterm_is_handled_with_a_fifo_in_place_of_the_conflist() {
    let (cluster, dirs, conflist) = bridge_node();
    let mut agent = Agent::start(
        &cluster,
        &dirs,
        "node-d",
        &[
            "--repair-enabled=false",
            "--cni-conf-name=10-bridge.conflist",
        ],
    )
    .unwrap();
    wait_for("/readyz 200", WORK, || ready(&agent));

    std::fs::remove_file(&conflist).unwrap();
    nix::unistd::mkfifo(&conflist, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    wait_for("not ready after the swap", WORK, || match ready(&agent) {
        Ok(()) => Err("still ready".to_string()),
        Err(_) => Ok(()),
    });
    // Tied to the work: the agent has met the FIFO (and, before the fix, blocked on it).
    wait_for("the FIFO refused", WORK, || {
        let err = agent.stderr();
        if err.contains("a FIFO, not a regular file") {
            Ok(())
        } else {
            Err(err)
        }
    });

    let t = Instant::now();
    let status = agent.terminate().unwrap();
    eprintln!("exited {:?} after SIGTERM", t.elapsed());
    assert!(status.success(), "{status}: {}", agent.stderr());
    assert!(!dirs.bin.join("istio-cni").exists());
    assert!(!dirs.run.join("istio-cni-kubeconfig").exists());
    use std::os::unix::fs::FileTypeExt as _;
    assert!(
        std::fs::symlink_metadata(&conflist)
            .unwrap()
            .file_type()
            .is_fifo(),
        "the FIFO is not the agent's to remove"
    );
}

/// Before the fix, copying a 3 GB `--plugin-binary` held SIGTERM for 12 s. The copy is stopped
/// at its next chunk, and nothing of it stays.
#[test]
fn sigterm_stops_the_copy_of_a_large_binary() {
    let (cluster, dirs, _) = bridge_node();
    let big = dirs.run.parent().unwrap().join("big-plugin");
    // Sparse: no disk until copied, and every byte still has to be copied.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    let mut agent = Agent::start(
        &cluster,
        &dirs,
        "node-e",
        &[
            "--repair-enabled=false",
            "--plugin-binary",
            big.to_str().unwrap(),
        ],
    )
    .unwrap();
    // Tied to the work: the copy is under way once its temporary file holds bytes.
    wait_for("the copy under way", WORK, || {
        let copying = std::fs::read_dir(&dirs.bin)?.flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("istio-cni.tmp.")
                && e.metadata().is_ok_and(|m| m.len() > 0)
        });
        if copying {
            Ok(())
        } else {
            Err(std::io::Error::other("no temporary file with bytes yet"))
        }
    });
    let t = Instant::now();
    let status = agent.terminate().unwrap();
    eprintln!("exited {:?} after SIGTERM", t.elapsed());
    assert!(status.success(), "{status}: {}", agent.stderr());
    let err = agent.stderr();
    assert!(
        err.contains("stopped the install pass in progress"),
        "the copy was not stopped: {err}"
    );
    let left: Vec<_> = std::fs::read_dir(&dirs.bin)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_file(&big).unwrap();
}
