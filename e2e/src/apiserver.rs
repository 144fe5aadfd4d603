//! A client that talks to the webhook the way the kube-apiserver does, and the plumbing around the real
//! `injector serve` process: certificates from `injector certs`, the server started on an ephemeral port,
//! TLS verified against the `caBundle` of the generated MutatingWebhookConfiguration with the service's DNS
//! name, label selectors evaluated as the API server evaluates them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, MutatingWebhookConfiguration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

pub use test_support::TempDir;

/// The output of `injector certs`.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub dir: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub mwc: MutatingWebhookConfiguration,
}

/// Runs `injector certs --out-dir dir <extra>` and parses the MutatingWebhookConfiguration it wrote.
pub fn injector_certs(dir: &Path, extra: &[&str]) -> anyhow::Result<CertFiles> {
    crate::cluster::run_stdout(
        Command::new(crate::bin("injector"))
            .arg("certs")
            .arg("--out-dir")
            .arg(dir)
            .args(extra),
        "injector certs",
    )?;
    let yaml = std::fs::read_to_string(dir.join("mutatingwebhookconfiguration.yaml"))?;
    let mwc: MutatingWebhookConfiguration =
        serde_saphyr::from_str(&yaml).map_err(|e| anyhow!("parsing the MWC: {e}"))?;
    Ok(CertFiles {
        dir: dir.to_path_buf(),
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        mwc,
    })
}

/// The arguments of `injector serve` for the serving certificate `cert`/`key` and the configuration files
/// `cfg` (values, mesh config, injector config).
pub fn serve_args(cert: &Path, key: &Path, cfg: &test_support::corpus::ConfigFiles) -> Vec<String> {
    let mut args = vec![
        "--tls-cert".to_string(),
        cert.display().to_string(),
        "--tls-key".to_string(),
        key.display().to_string(),
    ];
    args.extend(cfg.args());
    args
}

/// A running `injector serve`; SIGKILLed on drop unless [`Injector::terminate`] was called.
#[derive(Debug)]
pub struct Injector {
    child: Option<Child>,
    pub https: SocketAddr,
    pub metrics: SocketAddr,
    pub stderr: PathBuf,
    _dir: TempDir,
}

impl Injector {
    /// Starts `injector serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 <args>` with `env`, and
    /// waits until it reports its ports.
    pub fn start(args: &[String], env: &BTreeMap<String, String>) -> anyhow::Result<Injector> {
        Injector::start_in(None, "127.0.0.1:0", args, env)
    }

    /// [`Injector::start`] inside network namespace `ns` (when given), the HTTPS port on `listen`.
    pub fn start_in(
        ns: Option<&crate::netns::NetNs>,
        listen: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
    ) -> anyhow::Result<Injector> {
        Injector::start_program(&crate::bin("injector"), ns, listen, args, env)
    }

    /// [`Injector::start_in`] of another build of the injector, `program` (a benchmark's baseline).
    pub fn start_program(
        program: &Path,
        ns: Option<&crate::netns::NetNs>,
        listen: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
    ) -> anyhow::Result<Injector> {
        let dir = TempDir::new("serve");
        let port_file = dir.path().join("ports");
        let stderr = dir.path().join("stderr");
        let mut cmd = match ns {
            Some(ns) => ns.command(program),
            None => Command::new(program),
        };
        let mut child = cmd
            .arg("serve")
            .args(["--listen", listen, "--metrics-listen", "127.0.0.1:0"])
            .arg("--port-file")
            .arg(&port_file)
            .args(args)
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .context("starting injector serve")?;
        let read = |text: &str| -> anyhow::Result<Option<(SocketAddr, SocketAddr)>> {
            let get = |k: &str| -> anyhow::Result<SocketAddr> {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("{k}=")))
                    .ok_or_else(|| anyhow!("{k} missing in port file"))?
                    .parse()
                    .context("port file address")
            };
            Ok(Some((get("https")?, get("metrics")?)))
        };
        let (https, metrics) =
            crate::wait_for_port_file(&mut child, "injector serve", &port_file, &stderr, read)?;
        Ok(Injector {
            https,
            metrics,
            child: Some(child),
            stderr,
            _dir: dir,
        })
    }

    /// The process id (None once waited for).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The process's resident set and its peak so far (`VmRSS`, `VmHWM` of /proc/PID/status), in bytes.
    pub fn memory(&self) -> anyhow::Result<(u64, u64)> {
        let pid = self
            .pid()
            .ok_or_else(|| anyhow!("injector already waited for"))?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib = |key: &str| -> anyhow::Result<u64> {
            let line = status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .ok_or_else(|| anyhow!("no {key} in /proc/{pid}/status"))?;
            let n = line.trim().trim_end_matches("kB").trim();
            Ok(n.parse::<u64>().context(key.to_string())? * 1024)
        };
        Ok((kib("VmRSS:")?, kib("VmHWM:")?))
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Sends SIGTERM (without waiting).
    pub fn signal_term(&self) {
        if let Some(c) = &self.child {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }

    /// Waits for the process to exit (at most `timeout`).
    pub fn wait(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let child = self
            .child
            .as_mut()
            .ok_or_else(|| anyhow!("already waited"))?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = child.try_wait()? {
                self.child = None;
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("injector serve did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait for the exit.
    pub fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        self.signal_term();
        self.wait(crate::PATIENCE)
    }

    /// The Prometheus exposition from the metrics port (plain HTTP/1.1).
    pub async fn metrics_text(&self) -> anyhow::Result<String> {
        Ok(self.get_plain("/metrics").await?.1)
    }

    /// Whether `/readyz` on the metrics port answers 200.
    pub async fn ready(&self) -> anyhow::Result<bool> {
        Ok(self.get_plain("/readyz").await?.0 == StatusCode::OK)
    }

    /// `GET path` on the metrics port: the status and the body.
    async fn get_plain(&self, path: &str) -> anyhow::Result<(StatusCode, String)> {
        let tcp = TcpStream::connect(self.metrics).await?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        let req = Request::get(path)
            .header("host", "metrics")
            .body(Full::new(Bytes::new()))?;
        let resp = send.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// The value of a metric sample (`name{labels}` as exposed, or a bare name), 0 when absent.
    pub async fn metric(&self, sample: &str) -> anyhow::Result<f64> {
        let text = self.metrics_text().await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                (k == sample).then(|| v.parse::<f64>().ok()).flatten()
            })
            .unwrap_or(0.0))
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Which HTTP version the client speaks (offered by ALPN, as the API server does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Http {
    H1,
    H2,
}

/// The API server's view of the webhook: address, trusted CA, expected name, path.
#[derive(Clone)]
pub struct ApiServer {
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
    pub path: String,
}

/// One HTTP connection to the webhook.
pub enum Conn {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: Option<String>,
    /// The answer carried `Connection: close` (HTTP/1: the server closes the connection after it).
    pub connection_close: bool,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "answer is not JSON: {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

impl ApiServer {
    /// Trusts exactly the `caBundle` of the (first) webhook in `mwc` and expects the certificate to name
    /// `<service>.<namespace>.svc`, as the API server does for a service reference.
    pub fn new(mwc: &MutatingWebhookConfiguration, addr: SocketAddr) -> anyhow::Result<ApiServer> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let wh = mwc
            .webhooks
            .as_ref()
            .and_then(|w| w.first())
            .ok_or_else(|| anyhow!("MWC without webhooks"))?;
        let cc = &wh.client_config;
        let bundle = cc
            .ca_bundle
            .as_ref()
            .ok_or_else(|| anyhow!("no caBundle"))?;
        let svc = cc
            .service
            .as_ref()
            .ok_or_else(|| anyhow!("no service reference"))?;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut bundle.0.as_slice()) {
            roots.add(c?)?;
        }
        if roots.is_empty() {
            bail!("caBundle holds no certificate");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let name = format!("{}.{}.svc", svc.name, svc.namespace);
        Ok(ApiServer {
            addr,
            tls: Arc::new(cfg),
            server_name: ServerName::try_from(name)?,
            path: svc.path.clone().unwrap_or_else(|| "/".to_string()),
        })
    }

    /// The same verifier with a TLS config changed by `f` (e.g. protocol versions, ALPN).
    pub fn with_tls(&self, f: impl FnOnce(&mut rustls::ClientConfig)) -> ApiServer {
        let mut cfg = (*self.tls).clone();
        f(&mut cfg);
        ApiServer {
            tls: Arc::new(cfg),
            ..self.clone()
        }
    }

    /// TLS handshake only: the server's certificate chain (leaf first).
    pub async fn peer_certificates(&self) -> anyhow::Result<Vec<CertificateDer<'static>>> {
        let tls = self.tls_stream(&[b"http/1.1"]).await?;
        let certs = tls
            .get_ref()
            .1
            .peer_certificates()
            .ok_or_else(|| anyhow!("no peer certificates"))?;
        Ok(certs.iter().map(|c| c.clone().into_owned()).collect())
    }

    /// A verified TLS stream offering `alpn`, for clients that write raw HTTP.
    pub async fn tls_stream(
        &self,
        alpn: &[&[u8]],
    ) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let mut cfg = (*self.tls).clone();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let tcp = TcpStream::connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        Ok(TlsConnector::from(Arc::new(cfg))
            .connect(self.server_name.clone(), tcp)
            .await?)
    }

    /// A verified connection speaking `http`.
    pub async fn connect(&self, http: Http) -> anyhow::Result<Conn> {
        match http {
            Http::H1 => {
                let tls = self.tls_stream(&[b"http/1.1"]).await?;
                let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
                tokio::spawn(conn);
                Ok(Conn::H1(send))
            }
            Http::H2 => {
                let tls = self.tls_stream(&[b"h2"]).await?;
                if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
                    bail!("server did not negotiate h2");
                }
                let (send, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                        .await?;
                tokio::spawn(conn);
                Ok(Conn::H2(send))
            }
        }
    }

    /// One request on a new connection.
    pub async fn post(
        &self,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> anyhow::Result<Answer> {
        let mut conn = self.connect(Http::H1).await?;
        conn.send("POST", path, content_type, body.into()).await
    }

    /// POSTs a review as JSON to the webhook's path and returns the decoded answer (must be HTTP 200).
    pub async fn review(
        &self,
        conn: &mut Conn,
        review: &serde_json::Value,
    ) -> anyhow::Result<serde_json::Value> {
        let body = serde_json::to_vec(review)?;
        let path = self.path.clone();
        let a = conn
            .send("POST", &path, Some("application/json"), body.into())
            .await?;
        if a.status != StatusCode::OK {
            bail!(
                "HTTP {} for a review: {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            );
        }
        a.json()
    }
}

impl Conn {
    /// True once the connection is gone (the server closed it, or it failed).
    pub fn is_closed(&self) -> bool {
        match self {
            Conn::H1(s) => s.is_closed(),
            Conn::H2(s) => s.is_closed(),
        }
    }

    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<Answer> {
        let mut req = Request::builder().method(method).uri(path);
        if let Conn::H1(_) = self {
            req = req.header("host", "webhook");
        } else {
            req = req.uri(format!("https://webhook{path}"));
        }
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let req = req.body(Full::new(body))?;
        let resp = match self {
            Conn::H1(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
            Conn::H2(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
        };
        let status = resp.status();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let connection_close = resp
            .headers()
            .get("connection")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Answer {
            status,
            content_type,
            connection_close,
            body,
        })
    }
}

/// Decodes and applies the JSON patch of an admission response to `object` (with the independent
/// `json-patch` crate). No patch: the object unchanged.
pub fn apply_patch(
    response: &serde_json::Value,
    object: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    use base64::Engine as _;
    let mut out = object.clone();
    let Some(patch) = response.get("patch").and_then(|p| p.as_str()) else {
        return Ok(out);
    };
    if response.get("patchType").and_then(|p| p.as_str()) != Some("JSONPatch") {
        bail!("patch without patchType JSONPatch: {response}");
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(patch)?;
    let patch: json_patch::Patch =
        serde_json::from_slice(&bytes).context("patch is not RFC 6902")?;
    json_patch::patch(&mut out, &patch).context("applying the patch")?;
    Ok(out)
}

/// Whether `selector` matches `labels`, with the API server's semantics (test-support's
/// [`LabelSelector`](test_support::label_selector::LabelSelector)); panics on a selector the API server
/// would refuse.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let json = serde_json::to_value(selector).expect("a LabelSelector serialises");
    test_support::label_selector::LabelSelector::from_json(&json)
        .unwrap_or_else(|e| panic!("invalid label selector {json}: {e}"))
        .matches(labels)
}

/// The entries of `mwc` the API server would call for a CREATE of a pod with `pod_labels` in namespace
/// `ns_name` with `ns_labels` (the API server adds `kubernetes.io/metadata.name`).
pub fn webhooks_called<'a>(
    mwc: &'a MutatingWebhookConfiguration,
    ns_name: &str,
    ns_labels: &BTreeMap<String, String>,
    pod_labels: &BTreeMap<String, String>,
) -> Vec<&'a MutatingWebhook> {
    let mut ns = ns_labels.clone();
    ns.insert("kubernetes.io/metadata.name".into(), ns_name.into());
    let everything = LabelSelector::default();
    mwc.webhooks
        .iter()
        .flatten()
        .filter(|wh| {
            let rule_ok = wh.rules.iter().flatten().any(|r| {
                r.operations
                    .iter()
                    .flatten()
                    .any(|o| o == "CREATE" || o == "*")
                    && r.resources
                        .iter()
                        .flatten()
                        .any(|x| x == "pods" || x == "*")
            });
            rule_ok
                && selector_matches(wh.namespace_selector.as_ref().unwrap_or(&everything), &ns)
                && selector_matches(
                    wh.object_selector.as_ref().unwrap_or(&everything),
                    pod_labels,
                )
        })
        .collect()
}

/// Whether the API server would call any entry of `mwc` for such a pod (see [`webhooks_called`]).
pub fn webhook_called(
    mwc: &MutatingWebhookConfiguration,
    ns_name: &str,
    ns_labels: &BTreeMap<String, String>,
    pod_labels: &BTreeMap<String, String>,
) -> bool {
    !webhooks_called(mwc, ns_name, ns_labels, pod_labels).is_empty()
}

/// The `kubectl` binary. Panics when there is none: test helpers never install packages; scripts/test.sh
/// installs Debian's `kubernetes-client` when `kubectl` is missing.
pub fn kubectl() -> PathBuf {
    for p in ["/usr/bin/kubectl", "/usr/local/bin/kubectl"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "this test needs `kubectl` (/usr/bin/kubectl or /usr/local/bin/kubectl) to render deploy/; \
         install Debian's kubernetes-client (scripts/test.sh does); it never skips"
    );
}

/// `kubectl kustomize <dir>` split into documents.
pub fn kustomize(dir: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .context("running kubectl kustomize")?;
    if !out.status.success() {
        bail!(
            "kubectl kustomize {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    text.split("\n---")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).map_err(|e| anyhow!("rendered YAML: {e}")))
        .collect()
}
