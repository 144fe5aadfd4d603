//! The container runtime's side of a CNI plugin, for the istio-cni tests: a conflist of the reference
//! `bridge` plugin (with `host-local` IPAM) followed by `istio-cni`, ours or Istio's own, run by the CNI
//! project's `cnitool` into network namespaces of the test, as containerd runs it at sandbox creation.
//!
//! Each [`Node`] has its own bridge (in the host's namespace) and /16 subnet, so tests run concurrently;
//! dropping it deletes the bridge. The plugin reads the pod from the API server with the kubeconfig put
//! where the node agent would write it (`<run dir>/istio-cni-kubeconfig`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};
use test_support::tempdir::TempDir;

use crate::netns::{output_with_stdin, NetNs};
use crate::peers::{cni_tool, peer};

/// Which `istio-cni` the conflist's last entry runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    /// Ours, built by `cargo build --bins`.
    Ours,
    /// Istio's `cni/cmd/istio-cni`, built from the pinned module by `scripts/istio-peers.sh`.
    Istio,
}

impl Plugin {
    /// The plugin's binary.
    pub fn binary(self) -> PathBuf {
        match self {
            Plugin::Ours => crate::bin("istio-cni"),
            Plugin::Istio => peer("istio-cni"),
        }
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A node's CNI setup: bin dirs (one per [`Plugin`]), a conf dir with the conflist, the run dir.
#[derive(Debug)]
pub struct Node {
    dir: TempDir,
    /// The bridge plugin's bridge in the host's namespace.
    pub bridge: String,
    /// The first two octets of the node's pod subnet (`10.N.0.0/16`).
    pub subnet: String,
    /// The network's name in the conflist.
    pub network: String,
}

impl Node {
    /// A node whose plugin reads the API server through `kubeconfig`, with `istio_conf` (Istio's plugin
    /// keys) merged over `{"type": "istio-cni", "cni_agent_run_dir": <run dir>}`.
    pub fn new(kubeconfig: &Path, istio_conf: &Value) -> Node {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = TempDir::new("cni-node");
        let k = (std::process::id() as usize * 13 + n) % 200;
        let node = Node {
            bridge: format!("cni{}x{}", std::process::id() % 100_000, n % 100),
            subnet: format!("10.{}", 20 + k),
            network: format!("net{}x{}", std::process::id() % 100_000, n % 100),
            dir,
        };
        for plugin in [Plugin::Ours, Plugin::Istio] {
            let bin = node.bin_dir(plugin);
            std::fs::create_dir_all(&bin).expect("bin dir");
            for tool in ["bridge", "host-local", "loopback"] {
                std::os::unix::fs::symlink(cni_tool(tool), bin.join(tool)).expect("symlink");
            }
            std::os::unix::fs::symlink(plugin.binary(), bin.join("istio-cni")).expect("symlink");
        }
        std::fs::create_dir_all(node.run_dir()).expect("run dir");
        std::fs::create_dir_all(node.conf_dir()).expect("conf dir");
        std::fs::copy(kubeconfig, node.run_dir().join("istio-cni-kubeconfig")).expect("kubeconfig");
        node.write_conflist(istio_conf);
        node
    }

    /// The folder `CNI_PATH` names for `plugin`.
    pub fn bin_dir(&self, plugin: Plugin) -> PathBuf {
        self.dir.path().join(match plugin {
            Plugin::Ours => "bin-ours",
            Plugin::Istio => "bin-istio",
        })
    }

    /// The conf dir (`NETCONFPATH`).
    pub fn conf_dir(&self) -> PathBuf {
        self.dir.path().join("net.d")
    }

    /// The run dir (`cni_agent_run_dir`).
    pub fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// The bridge's address, the pods' gateway.
    pub fn gateway(&self) -> String {
        format!("{}.0.1", self.subnet)
    }

    /// The istio-cni entry of the conflist for `istio_conf`.
    pub fn istio_entry(&self, istio_conf: &Value) -> Value {
        let mut entry = json!({
            "type": "istio-cni",
            "cni_agent_run_dir": self.run_dir(),
            "plugin_log_level": "debug",
        });
        if let (Some(e), Some(over)) = (entry.as_object_mut(), istio_conf.as_object()) {
            for (k, v) in over {
                e.insert(k.clone(), v.clone());
            }
        }
        entry
    }

    /// The conflist: bridge with host-local, then the istio-cni entry.
    pub fn conflist(&self, istio_conf: &Value) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "name": self.network,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": true,
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": format!("{}.0.0/16", self.subnet), "gateway": self.gateway()}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": self.dir.path().join("ipam"),
                    }
                },
                self.istio_entry(istio_conf),
            ]
        })
    }

    /// (Re)writes the conflist.
    pub fn write_conflist(&self, istio_conf: &Value) {
        let text = serde_json::to_string_pretty(&self.conflist(istio_conf)).expect("json");
        std::fs::write(self.conf_dir().join("10-test.conflist"), text).expect("conflist");
    }

    /// `cnitool <command> <network> <netns path>` with `plugin` as istio-cni, for pod `namespace/name`.
    pub fn cnitool(
        &self,
        plugin: Plugin,
        command: &str,
        ns: &NetNs,
        namespace: &str,
        name: &str,
    ) -> Output {
        Command::new(cni_tool("cnitool"))
            .args([command, &self.network, &ns.path()])
            .env("NETCONFPATH", self.conf_dir())
            .env("CNI_PATH", self.bin_dir(plugin))
            .env(
                "CNI_ARGS",
                format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}"),
            )
            .stdin(Stdio::null())
            .output()
            .expect("running cnitool")
    }

    /// [`Node::cnitool`] `add`, which must succeed; returns the result JSON it printed.
    pub fn add_ok(&self, plugin: Plugin, ns: &NetNs, namespace: &str, name: &str) -> Value {
        let out = self.cnitool(plugin, "add", ns, namespace, name);
        let what = format!("cnitool add ({plugin:?}, {namespace}/{name})");
        assert_succeeded(&out, &what, &format!("plugin log:\n{}", self.plugin_log()));
        serde_json::from_slice(&out.stdout).expect("cnitool prints the result JSON")
    }

    /// Runs the plugin itself as the runtime does, `conf` on standard input and `CNI_*` from `env`.
    pub fn invoke(&self, plugin: Plugin, conf: &Value, env: &[(&str, String)]) -> Output {
        let mut cmd = Command::new(plugin.binary());
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .envs(env.iter().map(|(k, v)| (k, v)));
        output_with_stdin(&mut cmd, &conf.to_string()).expect("running the plugin")
    }

    /// The plugin's log file in the run dir (ours writes one line per event).
    pub fn plugin_log(&self) -> String {
        std::fs::read_to_string(self.run_dir().join("istio-cni.log")).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(Stdio::null())
            .status();
    }
}

/// A namespace joined to `node`'s bridge as a peer of the pods, at `<subnet>.255.<n>`.
pub fn peer_on_bridge(node: &Node, last: u8) -> NetNs {
    let ns = NetNs::new("cni-peer").expect("netns");
    let host_if = format!("{}p{last}", node.bridge);
    let host_if: String = host_if
        .chars()
        .rev()
        .take(15)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let run = |argv: &[&str]| {
        let st = Command::new(argv[0]).args(&argv[1..]).status().expect("ip");
        assert!(st.success(), "{argv:?}");
    };
    run(&[
        "ip",
        "link",
        "add",
        &host_if,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        ns.name(),
    ]);
    run(&["ip", "link", "set", &host_if, "master", &node.bridge]);
    run(&["ip", "link", "set", &host_if, "up"]);
    let addr = format!("{}.255.{last}/16", node.subnet);
    ns.run(&["ip", "addr", "add", &addr, "dev", "eth0"])
        .expect("peer address");
    ns.run(&["ip", "link", "set", "eth0", "up"])
        .expect("peer up");
    ns
}

/// A pod namespace's interception state in normal form (the rules differential's normalisation,
/// `rules_differential::normalise`): the iptables rules of both families as iptables-nft and as legacy
/// iptables list them (empty built-in chains and tables dropped: Istio's detection creates them by
/// listing), our nftables tables (`istio-*`), and the policy rules and TPROXY routes (table 133).
pub fn kernel_state(ns: &NetNs) -> Vec<String> {
    use crate::rules_differential::normalise;
    let mut out = Vec::new();
    for save in [
        "iptables-save",
        "ip6tables-save",
        "iptables-legacy-save",
        "ip6tables-legacy-save",
    ] {
        let text = ns.run(&[save]).unwrap_or_else(|e| panic!("{save}: {e:#}"));
        for (table, chains) in normalise::save_dump(&text) {
            for (chain, rules) in chains {
                out.push(format!("{save} {table} {chain}: {}", rules.join(" | ")));
            }
        }
    }
    let nft = ns
        .run(&["nft", "list", "ruleset"])
        .expect("nft list ruleset");
    out.extend(
        normalise::nft_ruleset(&nft)
            .into_iter()
            .filter(|l| l.starts_with("table inet istio")),
    );
    for argv in [
        &["ip", "-4", "rule", "show"][..],
        &["ip", "-6", "rule", "show"],
        &["ip", "-4", "route", "show", "table", "133"],
        &["ip", "-6", "route", "show", "table", "133"],
    ] {
        let text = ns.run(argv).unwrap_or_default();
        out.extend(
            normalise::sorted_lines(&text)
                .into_iter()
                .map(|l| format!("{}: {l}", argv[1..].join(" "))),
        );
    }
    out
}

/// Whether [`kernel_state`] holds any interception rule.
pub fn has_rules(state: &[String]) -> bool {
    state
        .iter()
        .any(|l| l.contains("ISTIO_") || l.starts_with("table inet istio"))
}

/// `out` is a success, or the failure names `what` with its output and `context` (a log that tells why).
pub fn assert_succeeded(out: &std::process::Output, what: &str, context: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}\n{context}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
}
