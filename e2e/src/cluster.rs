//! A real Kubernetes control plane for a test: etcd and kube-apiserver started by `scripts/cluster.sh up`
//! into a temporary folder, stopped by `scripts/cluster.sh down` on drop; or with [`Cluster::up_with_nodes`]
//! a whole cluster (controller manager, scheduler, nodes with kubelet, containerd and kube-proxy). The
//! binaries must already be built (`bash scripts/cluster.sh build`, which scripts/test.sh runs before
//! `cargo test`); a test never builds them and never passes without them.
//!
//! Two clients: `kubectl` (the one built with the apiserver) for what a user would type, and
//! [`Cluster::request`], one HTTPS request with the cluster-admin client certificate, for loops over many
//! objects where a kubectl process per call would dominate the time.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::apiserver::TempDir;

/// A running etcd + kube-apiserver (and its nodes, if any); `scripts/cluster.sh down` on drop.
pub struct Cluster {
    /// The folder `cluster.sh up` filled (removed by `down`).
    dir: PathBuf,
    _parent: TempDir,
    /// The cluster-admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The `kubectl` built with the apiserver.
    pub kubectl: PathBuf,
    /// The `helm` built from tools/helm.
    pub helm: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    /// The nodes (none for an apiserver alone).
    pub nodes: Vec<Node>,
    /// Everything `DIR/env` holds (see the header of scripts/cluster.sh).
    pub env: BTreeMap<String, String>,
}

/// A node of a cluster started with nodes: the `NODE<i>_*` variables of `DIR/env`.
#[derive(Debug, Clone)]
pub struct Node {
    /// The Node's name (`node<i>`), also the node's hostname.
    pub name: String,
    /// Its InternalIP on the node network.
    pub ip: String,
    /// Its pod subnet.
    pub pod_cidr: String,
    /// The pid of the process holding the node's namespaces.
    pub pid: u32,
    /// The node's containerd socket (a host path).
    pub containerd_sock: PathBuf,
    /// The host folders the node sees at /opt/cni/bin and /etc/cni/net.d.
    pub cni_bin_dir: PathBuf,
    pub cni_conf_dir: PathBuf,
    pub kubelet_log: PathBuf,
    pub containerd_log: PathBuf,
    pub kube_proxy_log: PathBuf,
}

impl Node {
    /// `ctr -a <socket> -n k8s.io`, the containerd client on the node's CRI namespace.
    pub fn ctr(&self) -> Command {
        let mut cmd = Command::new("ctr");
        cmd.arg("-a")
            .arg(&self.containerd_sock)
            .args(["-n", "k8s.io"])
            .stdin(Stdio::null());
        cmd
    }

    /// `program` run on the node: in its network, mount and UTS namespaces.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args([
            "--target",
            &self.pid.to_string(),
            "--mount",
            "--net",
            "--uts",
            "--",
        ])
        .arg(program)
        .stdin(Stdio::null());
        cmd
    }
}

/// `bash scripts/cluster.sh <action> <dir>` with stdin closed (add `--nodes N` to `up` for nodes). `CLUSTER_NO_BUILD` is set because a test
/// never builds: `up` without built binaries fails instead (scripts/test.sh builds first).
pub fn script_command(action: &str, dir: &Path) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster.sh"))
        .arg(action)
        .arg(dir)
        .env("CLUSTER_NO_BUILD", "1")
        .stdin(Stdio::null());
    cmd
}

impl Cluster {
    /// Starts a control plane. Panics with the script's message when it cannot (binaries not built, a
    /// server that does not start): a test that needs an apiserver never passes without one.
    pub fn up() -> Cluster {
        Cluster::up_with_nodes(0)
    }

    /// Starts a cluster with `nodes` nodes (`cluster.sh up DIR --nodes N`; root only): `up` returns when
    /// every node is Ready and untainted, kube-proxy has synced on each, and the `default`
    /// ServiceAccount exists. Panics as [`Cluster::up`] does.
    pub fn up_with_nodes(nodes: usize) -> Cluster {
        Cluster::up_with_args(nodes, "")
    }

    /// [`Cluster::up`] with `apiserver_args` appended to kube-apiserver's flags (words split on blanks,
    /// `CLUSTER_APISERVER_EXTRA_ARGS` of `scripts/cluster.sh`).
    pub fn up_with(apiserver_args: &str) -> Cluster {
        Cluster::up_with_args(0, apiserver_args)
    }

    fn up_with_args(nodes: usize, apiserver_args: &str) -> Cluster {
        Cluster::try_up(nodes, apiserver_args).unwrap_or_else(|e| {
            panic!(
                "this test needs a kube-apiserver{}: {e:#}\n(build it once with `bash scripts/cluster.sh build`; \
                 scripts/test.sh does; it never skips)",
                if nodes > 0 { " and nodes" } else { "" }
            )
        })
    }

    fn try_up(nodes: usize, apiserver_args: &str) -> anyhow::Result<Cluster> {
        let parent = TempDir::new("cluster");
        let dir = parent.path().join("cp");
        let mut cmd = script_command("up", &dir);
        if nodes > 0 {
            cmd.args(["--nodes", &nodes.to_string()]);
        }
        let out = cmd
            .env("CLUSTER_APISERVER_EXTRA_ARGS", apiserver_args)
            // If this process dies without running Drop, the script's watchdog stops the servers.
            .env("CLUSTER_OWNER_PID", std::process::id().to_string())
            .output()
            .context("running scripts/cluster.sh up")?;
        if !out.status.success() {
            bail!(
                "scripts/cluster.sh up failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let env = read_env(&dir.join("env"))?;
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .ok_or_else(|| anyhow!("{k} missing in {}/env", dir.display()))
        };
        let server = get("KUBE_SERVER")?;
        let addr: SocketAddr = server
            .strip_prefix("https://")
            .ok_or_else(|| anyhow!("server {server} is not https"))?
            .parse()
            .context("server address")?;
        let tls = client_tls(
            Path::new(&get("KUBE_CA")?),
            Path::new(&get("KUBE_CLIENT_CERT")?),
            Path::new(&get("KUBE_CLIENT_KEY")?),
        )?;
        let nodes = (1..=nodes)
            .map(|i| {
                let var = |k: &str| get(&format!("NODE{i}_{k}"));
                Ok(Node {
                    name: var("NAME")?,
                    ip: var("IP")?,
                    pod_cidr: var("POD_CIDR")?,
                    pid: var("PID")?.parse().context("NODE<i>_PID")?,
                    containerd_sock: var("CONTAINERD_SOCK")?.into(),
                    cni_bin_dir: var("CNI_BIN_DIR")?.into(),
                    cni_conf_dir: var("CNI_CONF_DIR")?.into(),
                    kubelet_log: var("KUBELET_LOG")?.into(),
                    containerd_log: var("CONTAINERD_LOG")?.into(),
                    kube_proxy_log: var("KUBE_PROXY_LOG")?.into(),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Cluster {
            nodes,
            kubeconfig: PathBuf::from(get("KUBECONFIG")?),
            kubectl: PathBuf::from(get("KUBECTL")?),
            helm: PathBuf::from(get("HELM")?),
            server,
            addr,
            tls,
            dir,
            _parent: parent,
            env,
        })
    }

    /// `helm` as cluster-admin of this control plane.
    pub fn helm(&self) -> crate::helm::Helm {
        crate::helm::Helm {
            path: self.helm.clone(),
            kubeconfig: Some(self.kubeconfig.clone()),
        }
    }

    /// The folder holding the kubeconfig, certificates and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The kube-apiserver's log so far (for failure messages).
    pub fn apiserver_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kube-apiserver.log")).unwrap_or_default()
    }

    /// The audit events written since byte `offset` of the audit log, which is advanced past them
    /// (`cluster.sh` records pod creates at Metadata level; each event is written before the response).
    pub fn audit_since(&self, offset: &mut u64) -> anyhow::Result<Vec<Value>> {
        use std::io::{Read as _, Seek as _};
        let mut f = std::fs::File::open(self.dir.join("audit.log")).context("opening audit.log")?;
        f.seek(std::io::SeekFrom::Start(*offset))?;
        let mut text = String::new();
        f.read_to_string(&mut text)?;
        // Only whole lines: an event being written stays for the next call.
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        *offset += whole as u64;
        text[..whole]
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).context("an audit event is not JSON"))
            .collect()
    }

    /// `kubectl --kubeconfig <ours> <args>`, `stdin` fed to it; the raw output.
    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&[u8]>) -> anyhow::Result<Output> {
        use std::io::Write as _;
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting kubectl")?;
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().ok_or_else(|| anyhow!("kubectl stdin"))?;
            pipe.write_all(input)?;
        }
        Ok(child.wait_with_output()?)
    }

    /// `kubectl --kubeconfig <kubeconfig> <args>`: as another user than ours (a ServiceAccount's
    /// token, a kubeconfig a binary wrote); the raw output.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> anyhow::Result<Output> {
        Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running kubectl")
    }

    /// `kubectl <args>` that must succeed; its stdout.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&[u8]>) -> anyhow::Result<String> {
        stdout_of_success("kubectl", args, self.kubectl_output(args, stdin)?)
    }

    /// `kubectl <args> -o json` that must succeed, decoded.
    pub fn kubectl_json(&self, args: &[&str], stdin: Option<&[u8]>) -> anyhow::Result<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.kubectl(&all, stdin)?;
        serde_json::from_str(&text).context("kubectl output is not JSON")
    }

    /// Creates (or replaces) `object` with `kubectl apply --server-side`.
    pub fn apply(&self, object: &Value) -> anyhow::Result<()> {
        let body = serde_json::to_vec(object)?;
        self.kubectl(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&body),
        )?;
        Ok(())
    }

    /// Creates a Namespace `name` with `labels`.
    pub fn namespace(&self, name: &str, labels: &BTreeMap<String, String>) -> anyhow::Result<()> {
        self.apply(&serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
        }))
    }

    /// Writes to `path` a kubeconfig that authenticates as ServiceAccount `namespace/name` with a token
    /// from `kubectl create token` (the TokenRequest API, valid one hour): a client holding it has exactly
    /// that account's RBAC, as an in-cluster process with the account's mounted token would.
    pub fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        path: &Path,
    ) -> anyhow::Result<()> {
        let token = self.kubectl(
            &["create", "token", name, "-n", namespace, "--duration=1h"],
            None,
        )?;
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {
                "server": self.server,
                "certificate-authority": self.dir.join("pki/ca.crt"),
            }}],
            "users": [{"name": user, "user": {"token": token.trim()}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
            "current-context": "test",
        });
        std::fs::write(path, serde_json::to_vec_pretty(&config)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// One HTTPS request to the apiserver as cluster-admin, on a connection of its own; the status and
    /// the body as JSON (`Null` when empty).
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        self.connect().await?.request(method, path, body).await
    }

    /// Creates every `(path, object)` by POST over `connections` keep-alive connections at once, as fast
    /// as the apiserver takes them (a flood, or the thousands of objects of a scale benchmark); each must
    /// be answered 201.
    pub async fn create_all(
        &self,
        objects: Vec<(String, Value)>,
        connections: usize,
    ) -> anyhow::Result<()> {
        let queue = Arc::new(std::sync::Mutex::new(objects.into_iter()));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..connections.max(1) {
            let mut conn = self.connect().await?;
            let queue = queue.clone();
            tasks.spawn(async move {
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((path, object)) = next else {
                        return anyhow::Ok(());
                    };
                    let (status, answer) = conn.request("POST", &path, Some(&object)).await?;
                    if status != StatusCode::CREATED {
                        bail!("POST {path}: HTTP {status}: {answer}");
                    }
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        Ok(())
    }

    /// A keep-alive HTTPS/1.1 connection to the apiserver as cluster-admin, for many requests in a row
    /// (benchmarks: no handshake per request).
    pub async fn connect(&self) -> anyhow::Result<Connection> {
        let tcp = TcpStream::connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::IpAddress(self.addr.ip().into());
        let tls = TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .context("TLS to the apiserver")?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok(Connection {
            send,
            host: self.addr.to_string(),
        })
    }
}

/// One connection to the apiserver ([`Cluster::connect`]); requests go one after another.
pub struct Connection {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
}

impl Connection {
    /// `method path` with `body` as JSON; the status and the answer as JSON (`Null` when empty).
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let bytes = match body {
            Some(v) => Bytes::from(serde_json::to_vec(v)?),
            None => Bytes::new(),
        };
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host)
            .header("accept", "application/json")
            .header("content-type", "application/json")
            .body(Full::new(bytes))?;
        self.send.ready().await?;
        let resp = self.send.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        let value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).with_context(|| {
                format!(
                    "{method} {path}: answer is not JSON: {}",
                    String::from_utf8_lossy(&body)
                )
            })?
        };
        Ok((status, value))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = script_command("down", &self.dir).output();
    }
}

/// The stdout of `program args` that exited with `out`, or an error with its status and stderr when it
/// failed.
pub fn stdout_of_success(program: &str, args: &[&str], out: Output) -> anyhow::Result<String> {
    if !out.status.success() {
        let line: Vec<&str> = std::iter::once(program)
            .chain(args.iter().copied())
            .collect();
        bail!(
            "{} failed ({}): {}",
            line.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Runs `cmd`, which must succeed: its stdout, or an error naming `what` with its stderr.
pub fn run_stdout(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    stdout_of_success(what, &[], out)
}

/// `stored` without what the apiserver adds to every object of its own (uid, resourceVersion, timestamps,
/// managedFields, namespace, generation, status), which differs between two stored pods.
pub fn comparable(stored: &Value) -> Value {
    let mut v = stored.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "namespace",
            "generation",
        ] {
            m.remove(k);
        }
    }
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
    v
}

/// Calls `f` until it answers `Ok`, at most `bound` from now (then panics naming `what` and the last
/// answer): for a change the cluster makes on its own time, polled every 20 ms.
pub fn wait_for<T, E: std::fmt::Debug>(
    what: &str,
    bound: std::time::Duration,
    mut f: impl FnMut() -> Result<T, E>,
) -> T {
    let deadline = std::time::Instant::now() + bound;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if std::time::Instant::now() > deadline => {
                panic!("not within {bound:?}: {what}; last: {e:?}")
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// `KEY=VALUE` lines; a value with spaces is in double quotes (so that bash can `source` the file), which
/// are taken off.
pub fn read_env(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            (k.to_string(), v.to_string())
        })
        .collect())
}

/// Trusts the cluster CA only and presents the cluster-admin client certificate.
fn client_tls(ca: &Path, cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut read(ca)?.as_slice()) {
        roots.add(c?)?;
    }
    let chain =
        rustls_pemfile::certs(&mut read(cert)?.as_slice()).collect::<Result<Vec<_>, _>>()?;
    let key = rustls_pemfile::private_key(&mut read(key)?.as_slice())?
        .ok_or_else(|| anyhow!("no private key in {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)?;
    Ok(Arc::new(cfg))
}
