//! `istio-cni install` run by a test: the node's folders in a temporary folder, a service account of a
//! real control plane, the agent's health listener found through `--port-file`, its output in files.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use crate::apiserver::TempDir;
use crate::cluster::Cluster;

/// The node's folders the agent works in.
pub struct NodeDirs {
    _root: TempDir,
    /// The CNI binaries' folder.
    pub bin: PathBuf,
    /// The CNI configuration folder.
    pub conf: PathBuf,
    /// The agent's run dir.
    pub run: PathBuf,
    /// The service-account folder (`token`, `ca.crt`).
    pub sa: PathBuf,
}

impl NodeDirs {
    /// Empty folders, and the service account `namespace/name` of `cluster` (created, allowed to read
    /// pods as the plugin does) with a token from the TokenRequest API and the cluster's CA.
    pub fn new(cluster: &Cluster, namespace: &str, name: &str) -> anyhow::Result<NodeDirs> {
        let root = TempDir::new("cni-agent");
        let dir = |n: &str| -> anyhow::Result<PathBuf> {
            let p = root.path().join(n);
            std::fs::create_dir_all(&p)?;
            Ok(p)
        };
        let dirs = NodeDirs {
            bin: dir("bin")?,
            conf: dir("net.d")?,
            run: dir("run")?,
            sa: dir("sa")?,
            _root: root,
        };
        cluster.namespace(namespace, &Default::default())?;
        cluster.kubectl(&["create", "serviceaccount", name, "-n", namespace], None)?;
        // The plugin's own permission; the built-in `view` role stays empty without the controller
        // manager's aggregation.
        cluster.kubectl(
            &[
                "create",
                "clusterrole",
                &format!("{name}-pods"),
                "--verb=get,list,watch",
                "--resource=pods",
            ],
            None,
        )?;
        cluster.kubectl(
            &[
                "create",
                "clusterrolebinding",
                &format!("{name}-pods"),
                &format!("--clusterrole={name}-pods"),
                &format!("--serviceaccount={namespace}:{name}"),
            ],
            None,
        )?;
        let token = cluster.kubectl(
            &["create", "token", name, "-n", namespace, "--duration=1h"],
            None,
        )?;
        std::fs::write(dirs.sa.join("token"), token.trim())?;
        std::fs::copy(cluster.dir().join("pki/ca.crt"), dirs.sa.join("ca.crt"))?;
        Ok(dirs)
    }
}

/// A running `istio-cni install`.
pub struct Agent {
    child: Option<Child>,
    /// `/readyz` and `/metrics`.
    pub http: SocketAddr,
    out: PathBuf,
    err: PathBuf,
    _dir: TempDir,
}

impl Agent {
    /// Starts `istio-cni install` for `dirs` against `cluster` (the agent's own client as
    /// cluster-admin, the plugin's kubeconfig from the service account), node `node`, `extra` flags.
    pub fn start(
        cluster: &Cluster,
        dirs: &NodeDirs,
        node: &str,
        extra: &[&str],
    ) -> anyhow::Result<Agent> {
        let dir = TempDir::new("cni-agent-proc");
        let port_file = dir.path().join("port");
        let mut cmd = Command::new(crate::bin("istio-cni"));
        cmd.arg("install")
            .arg("--cni-bin-dir")
            .arg(&dirs.bin)
            .arg("--mounted-cni-net-dir")
            .arg(&dirs.conf)
            .arg("--cni-agent-run-dir")
            .arg(&dirs.run)
            .arg("--service-account-dir")
            .arg(&dirs.sa)
            .args(["--kube-server", &cluster.server])
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args(["--listen", "127.0.0.1:0", "--node-name", node])
            .arg("--port-file")
            .arg(&port_file)
            .args(extra)
            .env("RUST_LOG", "info");
        Agent::spawn(&mut cmd, dir)
    }

    /// Runs `cmd` (an `istio-cni install` given `--port-file <dir>/port`, possibly behind a wrapper that
    /// execs it), its output in `dir`, and waits for the port file.
    pub fn spawn(cmd: &mut Command, dir: TempDir) -> anyhow::Result<Agent> {
        let port_file = dir.path().join("port");
        let out = dir.path().join("stdout");
        let err = dir.path().join("stderr");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(&err)?)
            .spawn()
            .context("starting istio-cni install")?;
        let read = |text: &str| -> anyhow::Result<Option<SocketAddr>> {
            match text.trim().strip_prefix("http=") {
                Some(addr) => Ok(Some(addr.parse().context("port file address")?)),
                None => Ok(None),
            }
        };
        let http =
            crate::wait_for_port_file(&mut child, "istio-cni install", &port_file, &err, read)?;
        Ok(Agent {
            http,
            child: Some(child),
            out,
            err,
            _dir: dir,
        })
    }

    /// The process id (that of a wrapper which exec'd the agent is the agent's).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `GET path` over HTTP/1.0: the status and the body.
    pub fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let mut s = TcpStream::connect(self.http)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: agent\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| anyhow!("no HTTP status in {text:?}"))?;
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Ok((status, body.to_string()))
    }

    /// What the agent printed on standard output (the plugin's log lines).
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// The agent's own log.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Sends SIGTERM and waits (at most 60 s: the agent stops what it is doing at once, so only one
    /// that does not handle the signal takes that long) for the exit.
    pub fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| anyhow!("already stopped"))?;
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id())?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        let bound = Duration::from_secs(60);
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("no exit within {bound:?} of SIGTERM: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The value of the sample `line_start` (a metric name with its labels) in a text exposition.
pub fn metric(text: &str, line_start: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

/// Reads `path` as JSON.
pub fn read_json(path: &Path) -> anyhow::Result<serde_json::Value> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not JSON", path.display()))
}

/// The taint a node keeps that is not the agent's: untainting must leave it.
fn other_taint() -> serde_json::Value {
    serde_json::json!({"key": "example.com/other", "value": "kept", "effect": "NoExecute"})
}

/// Creates Node `name` tainted with the agent's `cni.istio.io/not-ready` and [`other_taint`].
pub fn tainted_node(cluster: &Cluster, name: &str) -> anyhow::Result<()> {
    cluster.apply(&serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name},
        "spec": {"taints": [
            {"key": "cni.istio.io/not-ready", "effect": "NoSchedule"},
            other_taint(),
        ]},
    }))
}

/// Node `name`'s taints when the agent's is gone and [`other_taint`] kept; why not otherwise.
pub fn untainted(cluster: &Cluster, name: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let node = cluster.kubectl_json(&["get", "node", name], None)?;
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ours = taints.iter().any(|t| t["key"] == "cni.istio.io/not-ready");
    if ours || !taints.contains(&other_taint()) {
        anyhow::bail!("taints {taints:?}");
    }
    Ok(taints)
}

/// Creates a sidecar pod (Istio's status annotation, an `istio-validation` init container) in
/// `namespace`, bound to `node` (there is no scheduler or kubelet in the test control plane).
pub fn sidecar_pod(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    node: &str,
) -> anyhow::Result<()> {
    cluster.apply(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {"sidecar.istio.io/status": "{\"initContainers\":[\"istio-validation\"]}"}},
        "spec": {"nodeName": node,
                 "initContainers": [{"name": "istio-validation", "image": "proxyv2"}],
                 "containers": [{"name": "app", "image": "app"}]},
    }))
}

/// Writes the pod's status as the kubelet would after `istio-validation` terminated with `code` and was
/// restarted once after the same exit (`state` and `lastState`).
pub fn validation_exited(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    code: i32,
) -> anyhow::Result<()> {
    let reason = if code == 0 { "Completed" } else { "Error" };
    let terminated = serde_json::json!({"terminated": {"exitCode": code, "reason": reason,
        "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}});
    let patch = serde_json::json!({"status": {"initContainerStatuses": [{
        "name": "istio-validation", "image": "proxyv2", "imageID": "", "ready": false, "restartCount": 1,
        "state": terminated, "lastState": terminated,
    }]}});
    cluster.kubectl(
        &[
            "patch",
            "pod",
            name,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    )?;
    Ok(())
}
