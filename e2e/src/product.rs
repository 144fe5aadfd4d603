//! The whole product on a real cluster: the project's images (`scripts/images.sh build`)
//! imported into every node of a `scripts/cluster.sh up DIR --nodes N` cluster, both charts installed with
//! `helm install` as a user installs them (values pointing at the local images), and the scenarios'
//! workloads: the echo app (`testproxy echo`) behind a Service and a client pod (`testproxy get`), with
//! `testproxy` as the injected `istio-proxy` (values `global.proxy.image`).
//!
//! The images are found through the file `images.sh build` writes, `$IMAGES_OUT/images.env` (by default
//! `target/images/images.env`): a test never builds them and fails when one is missing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use serde_json::{json, Value};

use crate::apiserver::TempDir;
use crate::cluster::{read_env, stdout_of_success, Cluster};
use crate::helm::{chart_dir, cni_chart_dir, repo_dir};

/// The namespace both charts' injector releases go to (the chart's README default).
pub const INJECTOR_NAMESPACE: &str = "sidecar-injector";
/// The istio-cni chart's namespace (Istio's).
pub const CNI_NAMESPACE: &str = "istio-system";
/// The port the echo app serves and the client calls (through the Service, same port).
pub const ECHO_PORT: u16 = 8080;

/// The images `scripts/images.sh build` wrote: `NAME=REF` and `NAME_ARCHIVE=PATH` of `images.env`.
#[derive(Debug, Clone)]
pub struct Images {
    pub hub: String,
    pub tag: String,
    env: BTreeMap<String, String>,
}

impl Images {
    /// `$IMAGES_OUT/images.env`, by default the repository's `target/images/images.env`.
    pub fn manifest() -> PathBuf {
        std::env::var_os("IMAGES_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_dir().join("target/images"))
            .join("images.env")
    }

    /// The built images, each of `names` required (with its archive on disk).
    pub fn built(names: &[&str]) -> anyhow::Result<Images> {
        let path = Images::manifest();
        let env = read_env(&path).with_context(|| {
            format!(
                "no images built ({}): run `bash scripts/images.sh build` (scripts/test.sh does)",
                path.display()
            )
        })?;
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .ok_or_else(|| anyhow!("{k} missing in {}", path.display()))
        };
        let images = Images {
            hub: get("HUB")?,
            tag: get("TAG")?,
            env: env.clone(),
        };
        for name in names {
            let archive = get(&format!("{name}_ARCHIVE")).with_context(|| {
                format!("image {name} not built: run `bash scripts/images.sh build {name}`")
            })?;
            if !Path::new(&archive).exists() {
                bail!("image {name}: {archive} missing: run `bash scripts/images.sh build {name}`");
            }
        }
        Ok(images)
    }

    /// `<hub>/<name>:<tag>`, as the charts compose it.
    pub fn reference(&self, name: &str) -> String {
        self.env
            .get(name)
            .cloned()
            .unwrap_or_else(|| format!("{}/{name}:{}", self.hub, self.tag))
    }

    /// The image ID (`sha256:` and the config's digest) of image `name`, read from its archive's
    /// `manifest.json`: what the kubelet reports as a container's `imageID` for an imported image.
    pub fn id(&self, name: &str) -> anyhow::Result<String> {
        let archive = self
            .env
            .get(&format!("{name}_ARCHIVE"))
            .ok_or_else(|| anyhow!("image {name} not built"))?;
        let out = Command::new("tar")
            .args(["-xOf", archive, "manifest.json"])
            .output()
            .context("tar")?;
        let manifest: Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("{archive}: manifest.json"))?;
        let config = manifest[0]["Config"]
            .as_str()
            .ok_or_else(|| anyhow!("{archive}: no Config in manifest.json"))?;
        let hex = config
            .trim_start_matches("blobs/sha256/")
            .trim_end_matches(".json");
        Ok(format!("sha256:{hex}"))
    }

    /// `scripts/images.sh load DIR NAME...`: imports the images into every node of `cluster`.
    pub fn load(&self, cluster: &Cluster, names: &[&str]) -> anyhow::Result<()> {
        let out = Command::new("bash")
            .arg(repo_dir().join("scripts/images.sh"))
            .arg("load")
            .arg(cluster.dir())
            .args(names)
            .stdin(Stdio::null())
            .output()
            .context("running scripts/images.sh load")?;
        stdout_of_success("scripts/images.sh load", names, out).map(drop)
    }
}

/// A cluster with nodes, the images imported, and what the scenarios install into it.
pub struct Product {
    pub cluster: Cluster,
    pub images: Images,
    /// The injector releases' certificates (`injector certs`), one folder each.
    certs: TempDir,
    rt: tokio::runtime::Runtime,
}

/// The images the scenarios run.
pub const IMAGES: [&str; 5] = [
    "injector",
    "iptables-init",
    "iptables-init-native-nftables",
    "istio-cni",
    "testproxy",
];

/// One injector release of `charts/sidecar-injector`.
#[derive(Debug, Clone)]
pub struct InjectorRelease {
    /// The helm release, which is also the name of its objects (`sidecar-injector[-<revision>]`).
    pub name: String,
    /// The revision label value (`default` for the default revision).
    pub revision: String,
}

impl Product {
    /// A cluster of `nodes` nodes with `images` imported into each. Panics (never skips) when the cluster
    /// or an image cannot be had.
    pub fn up(nodes: usize, images: &[&str]) -> Product {
        let built = Images::built(images).unwrap_or_else(|e| panic!("{e:#}"));
        let cluster = Cluster::up_with_nodes(nodes);
        built
            .load(&cluster, images)
            .unwrap_or_else(|e| panic!("loading the images into the nodes: {e:#}"));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        Product {
            cluster,
            images: built,
            certs: TempDir::new("product-certs"),
            rt,
        }
    }

    /// The one `Product` of `slot`, shared by the tests that hold it: made by `make` for the first,
    /// taken down (the cluster's `down`) when the last holder drops it; the next test then makes a new
    /// one. A test that waits here while another makes it gets the same one.
    pub fn shared(
        slot: &'static Mutex<Weak<Product>>,
        make: impl FnOnce() -> Product,
    ) -> Arc<Product> {
        let mut weak = slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(p) = weak.upgrade() {
            return p;
        }
        let p = Arc::new(make());
        *weak = Arc::downgrade(&p);
        p
    }

    /// `kubectl <args>` that must succeed.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.cluster.kubectl(args, None)
    }

    /// One request to the apiserver as cluster-admin; the status and body.
    pub fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(hyper::StatusCode, Value)> {
        self.rt.block_on(self.cluster.request(method, path, body))
    }

    /// `GET path`, which must answer 200.
    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        let (status, body) = self.api("GET", path, None)?;
        if !status.is_success() {
            bail!("GET {path}: {status}: {body}");
        }
        Ok(body)
    }

    /// `POST path` (a create), which must answer 201 (or 200).
    pub fn create(&self, path: &str, object: &Value) -> anyhow::Result<Value> {
        let (status, body) = self.api("POST", path, Some(object))?;
        if !status.is_success() {
            bail!("POST {path}: {status}: {body}");
        }
        Ok(body)
    }

    /// A Namespace `name` with `labels`, holding the ConfigMap `istio-ca-root-cert` that istiod
    /// publishes into every namespace of a mesh: the injected `istiod-ca-cert` volume names it (Istio's
    /// template, with the default `global.pilotCertProvider: istiod`) and the kubelet starts no injected
    /// pod without it. There is no istiod here (and testproxy reads no certificate), so it holds the
    /// cluster's CA.
    pub fn namespace(&self, name: &str, labels: Value) -> anyhow::Result<()> {
        self.cluster.apply(&json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
        }))?;
        let ca = std::fs::read_to_string(self.cluster.dir().join("pki/ca.crt"))?;
        self.cluster.apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "istio-ca-root-cert", "namespace": name},
            "data": {"root-cert.pem": ca},
        }))
    }

    /// Runs a tokio future to its end on the product's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The chart values pointing the injector, the injected proxy (`testproxy`) and the init container
    /// (our `iptables-init`, or `init_image`) at the local images.
    pub fn injector_values(&self, init_image: &str) -> Vec<String> {
        let i = &self.images;
        [
            format!("hub={}", i.hub),
            format!("tag={}", i.tag),
            format!("global.hub={}", i.hub),
            format!("global.tag={}", i.tag),
            "global.proxy.image=testproxy".to_string(),
            format!("global.proxy_init.image={}", i.reference(init_image)),
        ]
        .into_iter()
        .flat_map(|v| ["--set".to_string(), v])
        .collect()
    }

    /// The folder of `injector certs`' files (`ca.crt`, `tls.crt`, `tls.key`) of injector release `name`.
    pub fn certs_of(&self, name: &str) -> PathBuf {
        self.certs.path().join(name)
    }

    /// `helm install` of `charts/sidecar-injector` for `revision` ("" for the default revision) into
    /// [`INJECTOR_NAMESPACE`], with a serving certificate from `injector certs` for its Service, the
    /// local images and `extra` arguments (`--set k=v`), then waits until both replicas are ready and
    /// have each put their record (and CA) into the release's webhook configuration: from then on pods
    /// of its namespaces are injected.
    pub fn install_injector(
        &self,
        revision: &str,
        extra: &[&str],
    ) -> anyhow::Result<InjectorRelease> {
        let name = if revision.is_empty() {
            "sidecar-injector".to_string()
        } else {
            format!("sidecar-injector-{revision}")
        };
        let dir = self.certs_of(&name);
        std::fs::create_dir_all(&dir)?;
        crate::apiserver::injector_certs(
            &dir,
            &["--namespace", INJECTOR_NAMESPACE, "--service", &name],
        )?;
        let chart = chart_dir().display().to_string();
        let mut args: Vec<String> = [
            "install",
            &name,
            &chart,
            "--namespace",
            INJECTOR_NAMESPACE,
            "--create-namespace",
            "--set",
            &format!("revision={revision}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for (key, f) in [
            ("cert", "tls.crt"),
            ("key", "tls.key"),
            ("caBundle", "ca.crt"),
        ] {
            args.push("--set-file".into());
            args.push(format!("tls.{key}={}", dir.join(f).display()));
        }
        args.extend(self.injector_values("iptables-init"));
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.cluster.helm().run(&args)?;
        let release = InjectorRelease {
            revision: if revision.is_empty() {
                "default".to_string()
            } else {
                revision.to_string()
            },
            name,
        };
        self.wait_injector(&release)?;
        Ok(release)
    }

    /// Waits until `release`'s Deployment has all its replicas ready and updated, and the webhook
    /// configuration carries one caBundle record per ready replica (each names its pod).
    pub fn wait_injector(&self, release: &InjectorRelease) -> anyhow::Result<Vec<String>> {
        let deployment = format!(
            "/apis/apps/v1/namespaces/{INJECTOR_NAMESPACE}/deployments/{}",
            release.name
        );
        let pods = format!(
            "/api/v1/namespaces/{INJECTOR_NAMESPACE}/pods?labelSelector=app.kubernetes.io/name%3Dsidecar-injector,istio.io/rev%3D{}",
            release.revision
        );
        let mwc = format!(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{}",
            release.name
        );
        let selector = format!(
            "app.kubernetes.io/name=sidecar-injector,istio.io/rev={}",
            release.revision
        );
        poll(&format!("injector {} ready", release.name), || {
            let d = self.get(&deployment)?;
            let want = d["spec"]["replicas"].as_u64().unwrap_or(1);
            let s = &d["status"];
            let settled = d["metadata"]["generation"] == s["observedGeneration"]
                && s["updatedReplicas"].as_u64() == Some(want)
                && s["readyReplicas"].as_u64() == Some(want)
                && s["replicas"].as_u64() == Some(want);
            if !settled {
                bail!("deployment status {s}");
            }
            let pods = self.get(&pods)?;
            let ready: Vec<String> = pods["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null() && pod_ready(p))
                .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
                .collect();
            let recorded = ca_bundle_records(&self.get(&mwc)?);
            let all = ready.len() as u64 == want
                && ready
                    .iter()
                    .all(|p| recorded.iter().any(|r| r.starts_with(&format!("{p}/"))));
            if !all {
                bail!("ready pods {ready:?}, caBundle records {recorded:?}");
            }
            Ok(ready)
        })
        .map_err(|e| {
            anyhow!(
                "{e:#}\n{}",
                crate::diagnosis::pods(self, INJECTOR_NAMESPACE, &selector)
            )
        })
    }

    /// `helm install istio-cni charts/istio-cni` into [`CNI_NAMESPACE`] with the local image, then waits
    /// until the agent is ready on every node.
    pub fn install_cni(&self, extra: &[&str]) -> anyhow::Result<()> {
        let chart = cni_chart_dir().display().to_string();
        let hub = format!("global.hub={}", self.images.hub);
        let tag = format!("global.tag={}", self.images.tag);
        let mut args = vec![
            "install",
            "istio-cni",
            &chart,
            "--namespace",
            CNI_NAMESPACE,
            "--create-namespace",
            "--set",
            &hub,
            "--set",
            &tag,
        ];
        args.extend(extra);
        self.cluster.helm().run(&args)?;
        let path = format!("/apis/apps/v1/namespaces/{CNI_NAMESPACE}/daemonsets/istio-cni-node");
        let nodes = self.cluster.nodes.len() as u64;
        poll("the istio-cni agent ready on every node", || {
            let ds = self.get(&path)?;
            let s = &ds["status"];
            if s["desiredNumberScheduled"].as_u64() == Some(nodes)
                && s["numberReady"].as_u64() == Some(nodes)
                && s["updatedNumberScheduled"].as_u64() == Some(nodes)
            {
                Ok(())
            } else {
                bail!("daemonset status {s}")
            }
        })
        .map_err(|e| {
            anyhow!(
                "{e:#}\n{}",
                crate::diagnosis::pods(self, CNI_NAMESPACE, "k8s-app=istio-cni-node")
            )
        })
    }

    /// A Service `name` in `ns` selecting `app: name`, with one port per entry of `ports` (the same
    /// number on both sides); its ClusterIP.
    pub fn service(&self, ns: &str, name: &str, ports: &[u16]) -> anyhow::Result<String> {
        let ports: Vec<Value> = ports
            .iter()
            .map(|p| json!({"name": format!("http-{p}"), "port": p, "targetPort": p, "protocol": "TCP"}))
            .collect();
        let svc = self.create(
            &format!("/api/v1/namespaces/{ns}/services"),
            &json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"selector": {"app": name}, "ports": ports},
            }),
        )?;
        svc["spec"]["clusterIP"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| anyhow!("Service {ns}/{name} has no clusterIP: {svc}"))
    }

    /// The pod spec of a `testproxy` container `app` with `args`, on `node` (none: the scheduler's
    /// choice). It names no service account (ServiceAccount admission gives it `default`).
    pub fn testproxy_spec(&self, args: &[String], ports: &[u16], node: Option<&str>) -> Value {
        let mut spec = json!({
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "app",
                "image": self.images.reference("testproxy"),
                "imagePullPolicy": "IfNotPresent",
                "args": args,
                "ports": ports.iter().map(|p| json!({"containerPort": p})).collect::<Vec<_>>(),
            }],
        });
        if let Some(n) = node {
            spec["nodeSelector"] = json!({"kubernetes.io/hostname": n});
        }
        spec
    }

    /// A Deployment `name` of one echo pod (`testproxy echo` on `ports`, readiness probed over HTTP on
    /// the first) in `ns`, with pod `annotations`, on `node`; returns its Ready pod.
    pub fn echo(
        &self,
        ns: &str,
        name: &str,
        ports: &[u16],
        annotations: Value,
        node: Option<&str>,
    ) -> anyhow::Result<Value> {
        let mut args = vec!["echo".to_string()];
        for p in ports {
            args.extend(["--port".to_string(), p.to_string()]);
        }
        let mut spec = self.testproxy_spec(&args, ports, node);
        spec["containers"][0]["readinessProbe"] =
            json!({"httpGet": {"path": "/ready", "port": ports[0]}, "periodSeconds": 1});
        self.create(
            &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
            &json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}, "annotations": annotations},
                        "spec": spec,
                    },
                },
            }),
        )?;
        self.wait_ready_pod(ns, &format!("app={name}"))
    }

    /// A client pod `name` in `ns` (`testproxy echo` idles as its app; requests are sent with `kubectl
    /// exec … testproxy get`), with `annotations`, on `node`; returns it Ready.
    pub fn client(
        &self,
        ns: &str,
        name: &str,
        annotations: Value,
        node: Option<&str>,
    ) -> anyhow::Result<Value> {
        let args = ["echo", "--port", "8081"].map(String::from);
        let spec = self.testproxy_spec(&args, &[], node);
        self.create(
            &format!("/api/v1/namespaces/{ns}/pods"),
            &json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": {"role": "client"},
                             "annotations": annotations},
                "spec": spec,
            }),
        )?;
        self.wait_pod(ns, name, pod_ready)
    }

    /// Pod `ns/name` once `done(pod)` holds.
    pub fn wait_pod(
        &self,
        ns: &str,
        name: &str,
        done: fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        poll(&format!("pod {ns}/{name}"), || {
            let pod = self.get(&path)?;
            if done(&pod) {
                Ok(pod)
            } else {
                bail!("{}", pod["status"])
            }
        })
        .map_err(|e| anyhow!("{e:#}\n{}", crate::diagnosis::pod(self, ns, name)))
    }

    /// The one Ready, not terminating pod of `ns` matching `selector`, once there is exactly one.
    pub fn wait_ready_pod(&self, ns: &str, selector: &str) -> anyhow::Result<Value> {
        let path = format!(
            "/api/v1/namespaces/{ns}/pods?labelSelector={}",
            selector.replace('=', "%3D")
        );
        poll(&format!("one Ready pod {ns}/{selector}"), || {
            let pods = self.get(&path)?;
            let items = pods["items"].as_array().cloned().unwrap_or_default();
            let live: Vec<&Value> = items
                .iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect();
            match live.as_slice() {
                [p] if pod_ready(p) => Ok((*p).clone()),
                _ => bail!(
                    "{:?}",
                    live.iter()
                        .map(|p| (&p["metadata"]["name"], &p["status"]))
                        .collect::<Vec<_>>()
                ),
            }
        })
        .map_err(|e| anyhow!("{e:#}\n{}", crate::diagnosis::pods(self, ns, selector)))
    }

    /// `kubectl exec -n ns pod -c container -- argv…`: its stdout.
    pub fn exec(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        argv: &[&str],
    ) -> anyhow::Result<String> {
        let mut args = vec!["exec", "-n", ns, pod, "-c", container, "--"];
        args.extend(argv);
        self.kubectl(&args)
    }

    /// `testproxy get url` run in the client's app container: the response body.
    pub fn get_from(&self, ns: &str, client: &str, url: &str) -> anyhow::Result<String> {
        self.exec(ns, client, "app", &["testproxy", "get", url])
    }

    /// The proxy's counters (`GET 127.0.0.1:15000/stats`, asked inside its container).
    pub fn stats(&self, ns: &str, pod: &str) -> anyhow::Result<ProxyStats> {
        let text = self.exec(
            ns,
            pod,
            "istio-proxy",
            &["testproxy", "request", "GET", "stats"],
        )?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("/stats: {text}"))?;
        Ok(ProxyStats {
            inbound: v["inbound"]
                .as_u64()
                .ok_or_else(|| anyhow!("/stats: {v}"))?,
            outbound: v["outbound"]
                .as_u64()
                .ok_or_else(|| anyhow!("/stats: {v}"))?,
            destinations: v["destinations"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d.as_str().map(String::from))
                .collect(),
        })
    }

    /// The node `pod` runs on.
    pub fn node_of(&self, pod: &Value) -> anyhow::Result<&crate::cluster::Node> {
        let name = pod["spec"]["nodeName"]
            .as_str()
            .ok_or_else(|| anyhow!("pod not scheduled: {}", pod["metadata"]["name"]))?;
        self.cluster
            .nodes
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| anyhow!("no node {name}"))
    }

    /// The container's record in containerd on its node (`ctr containers info`): its OCI runtime spec
    /// (`Spec`), `CreatedAt` and image.
    pub fn container_info(&self, pod: &Value, status: &Value) -> anyhow::Result<Value> {
        let id = status["containerID"]
            .as_str()
            .and_then(|c| c.strip_prefix("containerd://"))
            .ok_or_else(|| anyhow!("no containerd ID in {status}"))?;
        let node = self.node_of(pod)?;
        let out = node
            .ctr()
            .args(["containers", "info", id])
            .output()
            .context("ctr containers info")?;
        let text = stdout_of_success("ctr containers info", &[id], out)?;
        serde_json::from_str(&text).context("ctr containers info is not JSON")
    }

    /// The CNI configuration folder of every node: file name to content.
    pub fn cni_confs(&self) -> anyhow::Result<Vec<BTreeMap<String, String>>> {
        self.cluster
            .nodes
            .iter()
            .map(|n| {
                let mut files = BTreeMap::new();
                for e in std::fs::read_dir(&n.cni_conf_dir)? {
                    let e = e?;
                    files.insert(
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read_to_string(e.path()).unwrap_or_default(),
                    );
                }
                Ok(files)
            })
            .collect()
    }
}

/// A proxy's `/stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyStats {
    pub inbound: u64,
    pub outbound: u64,
    /// Recent original destinations, `ip:port`, oldest first.
    pub destinations: Vec<String>,
}

/// Whether the pod's Ready condition is True.
pub fn pod_ready(pod: &Value) -> bool {
    condition(pod, "Ready")
}

/// Whether the pod's condition `kind` is True.
pub fn condition(pod: &Value, kind: &str) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

/// The replicas (`<pod>/<pid>`) named by the caBundle records of a webhook configuration.
pub fn ca_bundle_records(mwc: &Value) -> Vec<String> {
    mwc["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("ca-bundle.sidecar-inject.io/"))
        .filter_map(|(_, v)| {
            let r: Value = serde_json::from_str(v.as_str()?).ok()?;
            r["replica"].as_str().map(String::from)
        })
        .collect()
}

/// The container (or init container) `name` of a pod's spec.
pub fn container<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    ["initContainers", "containers"]
        .iter()
        .flat_map(|k| pod["spec"][k].as_array().into_iter().flatten())
        .find(|c| c["name"] == name)
}

/// The status of the container (or init container) `name`.
pub fn container_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|k| pod["status"][k].as_array().into_iter().flatten())
        .find(|c| c["name"] == name)
}

/// The names of a pod's init containers and containers.
pub fn container_names(pod: &Value) -> (Vec<String>, Vec<String>) {
    let names = |k: &str| {
        pod["spec"][k]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(String::from))
            .collect()
    };
    (names("initContainers"), names("containers"))
}

/// Calls `f` until it answers `Ok`, polling every 250 ms for at most [`crate::PATIENCE`]; the last error
/// when it never does.
pub fn poll<T>(what: &str, mut f: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let deadline = Instant::now() + crate::PATIENCE;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => {
                return Err(e.context(format!("not within {:?}: {what}", crate::PATIENCE)))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}
