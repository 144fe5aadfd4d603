//! How the cluster watches of `injector serve --kubeconfig` scale: for each build
//! given, a real kube-apiserver (e2e::cluster) with `--namespaces` Namespaces (OpenShift's annotations,
//! labels, a last-applied annotation) and `--nodes` Nodes (a kubelet's status: images, conditions,
//! capacity), the injector started with `--platform openshift` and native sidecars `auto` (all three
//! kinds watched) and the chart's allocator settings; then ProxyConfigs created up to each level (spread
//! over the Namespaces, `--connections` POSTs at once) while reviews of distinct pods keep coming on one
//! connection. At each level: the reviews' latency during the creates; the time from a change's create
//! answer to the first review showing it, right after the creates (the backlog included) and again at
//! rest; the injector's RSS at rest and its peak; the engine rebuilds so far (its log); and a second
//! injector started fresh at that level (time to ready, RSS). A build that does not catch up within
//! `--deadline` seconds, or passes `--rss-cap` MiB, is stopped there. Prints Markdown rows for
//! bench/README.md.
//!
//! `watch-scale-bench --build NAME=PATH [--build NAME=PATH …] [--levels 1000,5000,20000]
//!  [--namespaces 10000] [--nodes 5000] [--connections 8] [--deadline 300] [--rss-cap 3072]`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use e2e::apiserver::{injector_certs, serve_args, ApiServer, CertFiles, Http, Injector, TempDir};
use e2e::cluster::Cluster;
use serde_json::{json, Value};
use test_support::corpus::{Config, ConfigFiles};
use test_support::pods;

struct Args {
    builds: Vec<(String, PathBuf)>,
    levels: Vec<usize>,
    namespaces: usize,
    nodes: usize,
    connections: usize,
    deadline: Duration,
    rss_cap: u64,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        builds: Vec::new(),
        levels: vec![1000, 5000, 20000],
        namespaces: 10_000,
        nodes: 5000,
        connections: 8,
        deadline: Duration::from_secs(300),
        rss_cap: 3072 << 20,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let [k, v] = pair else {
            bail!("usage: watch-scale-bench --build NAME=PATH [--levels 1000,5000,20000] [--namespaces N] [--nodes N] [--connections C] [--deadline S] [--rss-cap MIB]")
        };
        match k.as_str() {
            "--build" => {
                let (name, path) = v
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--build NAME=PATH"))?;
                a.builds.push((name.to_string(), PathBuf::from(path)));
            }
            "--levels" => {
                a.levels = v.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--namespaces" => a.namespaces = v.parse()?,
            "--nodes" => a.nodes = v.parse()?,
            "--connections" => a.connections = v.parse()?,
            "--deadline" => a.deadline = Duration::from_secs(v.parse()?),
            "--rss-cap" => a.rss_cap = v.parse::<u64>()? << 20,
            other => bail!("unknown flag {other}"),
        }
    }
    if a.builds.is_empty() {
        bail!("no --build given");
    }
    Ok(a)
}

const PROXY_CONFIGS: &str = "/apis/networking.istio.io/v1beta1/namespaces";

fn namespace_name(i: usize) -> String {
    format!("ns-{i:05}")
}

/// A Namespace as OpenShift leaves it: the SCC annotations, a few labels, and what `kubectl apply`
/// writes (a copy of the object).
fn namespace(i: usize) -> Value {
    let name = namespace_name(i);
    let applied = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"team": format!("team-{}", i % 50)}}});
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name,
            "labels": {"team": format!("team-{}", i % 50), "kubernetes.io/metadata.name": name,
                       "pod-security.kubernetes.io/audit": "restricted"},
            "annotations": {
                "openshift.io/sa.scc.uid-range": format!("{}/10000", 1_000_000_000 + i * 10_000),
                "openshift.io/sa.scc.supplemental-groups": format!("{}/10000", 1_000_000_000 + i * 10_000),
                "openshift.io/sa.scc.mcs": format!("s0:c{},c{}", i % 1000, i % 997),
                "kubectl.kubernetes.io/last-applied-configuration": applied.to_string()}}})
}

/// A Node as a kubelet reports it (status set on create, which the API allows for Nodes).
fn node(i: usize) -> Value {
    let images: Vec<Value> = (0..20)
        .map(|j| {
            json!({"names": [format!("registry.example/team-{j}/app@sha256:{:064x}", i * 100 + j),
                             format!("registry.example/team-{j}/app:v{j}.{i}")],
                   "sizeBytes": 100_000_000 + j})
        })
        .collect();
    let condition = |t: &str, s: &str| {
        json!({"type": t, "status": s, "lastHeartbeatTime": "2026-12-01T09:00:00Z",
               "lastTransitionTime": "2026-12-01T08:00:00Z", "reason": format!("Kubelet{t}"),
               "message": format!("kubelet reports {t} {s}")})
    };
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{i:05}"),
            "labels": {"kubernetes.io/hostname": format!("node-{i:05}"), "kubernetes.io/os": "linux",
                       "node.kubernetes.io/instance-type": "m5.xlarge",
                       "topology.kubernetes.io/zone": format!("zone-{}", i % 3)},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"podCIDR": format!("10.{}.{}.0/24", i / 256, i % 256), "providerID": format!("aws:///zone/i-{i:017x}")},
        "status": {
            "capacity": {"cpu": "4", "memory": "16273048Ki", "pods": "110", "ephemeral-storage": "104845292Ki"},
            "allocatable": {"cpu": "3920m", "memory": "15256216Ki", "pods": "110", "ephemeral-storage": "95551679124"},
            "conditions": [condition("MemoryPressure", "False"), condition("DiskPressure", "False"),
                           condition("PIDPressure", "False"), condition("Ready", "True")],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 256, i % 256)},
                          {"type": "Hostname", "address": format!("node-{i:05}")}],
            "nodeInfo": {"machineID": format!("{i:032x}"), "systemUUID": format!("{i:032x}"),
                         "bootID": format!("{i:032x}"), "kernelVersion": "6.1.0-27-cloud-amd64",
                         "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://2.0.0",
                         "kubeletVersion": "v1.33.4", "kubeProxyVersion": "v1.33.4",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "images": images}})
}

fn proxy_config(namespace: &str, name: &str, watched: &str) -> Value {
    json!({"apiVersion": "networking.istio.io/v1beta1", "kind": "ProxyConfig",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"environmentVariables": {"WATCHED": watched}}})
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": {"app": name}},
           "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}})
}

/// The `WATCHED` variable of the injected proxy (the sentinel ProxyConfig's value).
fn watched(review_answer: &Value, pod: &Value) -> anyhow::Result<Option<String>> {
    let injected = e2e::apiserver::apply_patch(&review_answer["response"], pod)?;
    let find = |list: &str| -> Option<String> {
        injected["spec"][list]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "istio-proxy")?["env"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == "WATCHED")?["value"]
            .as_str()
            .map(str::to_string)
    };
    Ok(find("containers").or_else(|| find("initContainers")))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

/// Reviews of distinct pods, one after another on one connection, on their own thread; each latency
/// kept until taken.
struct Reviewer {
    latencies: Arc<Mutex<Vec<Duration>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Reviewer {
    fn start(api: ApiServer) -> Reviewer {
        let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (latencies.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let mut conn = api.connect(Http::H1).await?;
                let mut i = 0u64;
                while !s.load(Ordering::SeqCst) {
                    i += 1;
                    let review = pods::review("v1", "uid", "apps", &pod(&format!("app-{i}")));
                    let start = Instant::now();
                    let answer = api.review(&mut conn, &review).await?;
                    let took = start.elapsed();
                    if answer["response"]["allowed"] != json!(true) {
                        bail!("review refused: {answer}");
                    }
                    l.lock().unwrap_or_else(|e| e.into_inner()).push(took);
                    // About 20 reviews a second: a steady trickle, not a load test.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(())
            })
        });
        Reviewer {
            latencies,
            stop,
            thread: Some(thread),
        }
    }

    /// The latencies since the last call: count, p99, max.
    fn take(&self) -> (usize, Duration, Duration) {
        let mut l = std::mem::take(&mut *self.latencies.lock().unwrap_or_else(|e| e.into_inner()));
        l.sort();
        let p99 = l
            .get(((l.len() as f64 * 0.99).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or_default();
        (l.len(), p99, l.last().copied().unwrap_or_default())
    }

    fn finish(mut self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the reviewer panicked"),
            None => Ok(()),
        }
    }
}

/// One injector of the build under test.
struct Running {
    injector: Injector,
    api: ApiServer,
}

impl Running {
    fn start(program: &Path, args: &[String], certs: &CertFiles) -> anyhow::Result<Running> {
        let env = BTreeMap::from(
            [
                ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
                ("MIMALLOC_PURGE_DELAY", "0"),
                ("RUST_LOG", "info"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let injector = Injector::start_program(program, None, "127.0.0.1:0", args, &env)?;
        let api = ApiServer::new(&certs.mwc, injector.https)?;
        Ok(Running { injector, api })
    }

    /// Waits for /readyz, within `deadline`, watching the RSS cap; the time it took.
    async fn ready(&self, deadline: Duration, cap: u64) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            if self.injector.ready().await.unwrap_or(false) {
                return Ok(start.elapsed());
            }
            self.check(start, deadline, cap, "ready")?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn check(
        &self,
        start: Instant,
        deadline: Duration,
        cap: u64,
        what: &str,
    ) -> anyhow::Result<()> {
        let (rss, _) = self.injector.memory()?;
        if rss > cap {
            bail!("RSS {} over the cap while waiting for {what}", mib(rss));
        }
        if start.elapsed() > deadline {
            bail!("not {what} within {deadline:?} (RSS {})", mib(rss));
        }
        Ok(())
    }

    /// From now to the first review of the pod labelled `sentinel: want` that shows `want` (polled on a
    /// connection of its own).
    async fn until_seen(
        &self,
        want: &str,
        deadline: Duration,
        cap: u64,
    ) -> anyhow::Result<Duration> {
        let start = Instant::now();
        let mut conn = self.api.connect(Http::H1).await?;
        let mut p = pod("sentinel");
        p["metadata"]["labels"]["sentinel"] = json!(want);
        loop {
            let answer = self
                .api
                .review(&mut conn, &pods::review("v1", "uid", "apps", &p))
                .await?;
            if watched(&answer, &p)?.as_deref() == Some(want) {
                return Ok(start.elapsed());
            }
            self.check(start, deadline, cap, "showing the change")?;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Engine rebuilds so far: the lines both builds log for each.
    fn rebuilds(&self) -> usize {
        self.injector.log().matches("engine rebuilt").count()
    }
}

/// A change: a new ProxyConfig in `apps` selecting only the next sentinel pod (one create, so one watch
/// event); the time from the create's answer to the first review of that pod showing it.
async fn change(
    c: &Cluster,
    r: &Running,
    serial: &mut usize,
    a: &Args,
) -> anyhow::Result<Duration> {
    *serial += 1;
    let name = format!("sentinel-{serial}");
    let mut pc = proxy_config("apps", &name, &name);
    pc["spec"]["selector"] = json!({"matchLabels": {"sentinel": name}});
    let (status, answer) = c
        .request(
            "POST",
            &format!("{PROXY_CONFIGS}/apps/proxyconfigs"),
            Some(&pc),
        )
        .await?;
    if status.as_u16() != 201 {
        bail!("creating {name}: {status} {answer}");
    }
    r.until_seen(&name, a.deadline, a.rss_cap).await
}

async fn run_build(
    name: &str,
    program: &Path,
    a: &Args,
    cfg: &ConfigFiles,
    certs: &CertFiles,
) -> anyhow::Result<()> {
    let c = Cluster::up();
    c.kubectl(
        &[
            "apply",
            "-f",
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../testdata/istio/crds/proxyconfigs.networking.istio.io.yaml")
                .to_str()
                .ok_or_else(|| anyhow!("path"))?,
        ],
        None,
    )?;
    c.kubectl(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/proxyconfigs.networking.istio.io",
        ],
        None,
    )?;
    for ns in ["apps", "istio-system"] {
        c.namespace(ns, &BTreeMap::new())?;
    }
    let start = Instant::now();
    c.create_all(
        (0..a.namespaces)
            .map(|i| ("/api/v1/namespaces".to_string(), namespace(i)))
            .collect(),
        a.connections,
    )
    .await?;
    c.create_all(
        (0..a.nodes)
            .map(|i| ("/api/v1/nodes".to_string(), node(i)))
            .collect(),
        a.connections,
    )
    .await?;
    eprintln!(
        "{name}: {} Namespaces and {} Nodes created in {:.1} s",
        a.namespaces,
        a.nodes,
        start.elapsed().as_secs_f64()
    );

    let mut args = serve_args(&certs.cert, &certs.key, cfg);
    args.extend(
        [
            "--kubeconfig",
            c.kubeconfig.to_str().ok_or_else(|| anyhow!("path"))?,
            "--platform",
            "openshift",
        ]
        .map(String::from),
    );
    let r = Running::start(program, &args, certs)?;
    let ready = r.ready(a.deadline, a.rss_cap).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss, peak) = r.injector.memory()?;
    println!(
        "| {name} | 0 | | | ready in {} | | {} | {} | {} | |",
        ms(ready),
        mib(rss),
        mib(peak),
        r.rebuilds()
    );
    let reviewer = Reviewer::start(r.api.clone());
    let mut serial = 0;
    let mut created = 0;
    for &level in &a.levels {
        let start = Instant::now();
        reviewer.take();
        let objects = (created..level)
            .map(|i| {
                let ns = namespace_name(i % a.namespaces.max(1));
                (
                    format!("{PROXY_CONFIGS}/{ns}/proxyconfigs"),
                    proxy_config(&ns, &format!("pc-{i}"), &format!("v{i}")),
                )
            })
            .collect();
        c.create_all(objects, a.connections).await?;
        created = level;
        let creates = start.elapsed();
        let outcome = async {
            let after_flood = change(&c, &r, &mut serial, a).await?;
            let (n, p99, max) = reviewer.take();
            tokio::time::sleep(Duration::from_secs(3)).await;
            let at_rest = change(&c, &r, &mut serial, a).await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            anyhow::Ok((after_flood, at_rest, n, p99, max))
        }
        .await;
        let (rss, peak) = r.injector.memory()?;
        let (after_flood, at_rest, n, p99, max) = match outcome {
            Ok(o) => o,
            Err(e) => {
                let (n, p99, max) = reviewer.take();
                println!(
                    "| {name} | {level} | {:.1} s | {n}: p99 {}, max {} | {e:#} | | {} | {} | {} | |",
                    creates.as_secs_f64(),
                    ms(p99),
                    ms(max),
                    mib(rss),
                    mib(peak),
                    r.rebuilds()
                );
                drop(r);
                let _ = reviewer.finish();
                return Ok(());
            }
        };
        let fresh = Running::start(program, &args, certs)?;
        let fresh_ready = fresh.ready(a.deadline, a.rss_cap).await;
        let fresh_figures = match fresh_ready {
            Ok(t) => {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let (rss, peak) = fresh.injector.memory()?;
                format!("{}, {} (peak {})", ms(t), mib(rss), mib(peak))
            }
            Err(e) => format!("{e:#}"),
        };
        drop(fresh);
        println!(
            "| {name} | {level} | {:.1} s | {n}: p99 {}, max {} | {} | {} | {} | {} | {} | {fresh_figures} |",
            creates.as_secs_f64(),
            ms(p99),
            ms(max),
            ms(after_flood),
            ms(at_rest),
            mib(rss),
            mib(peak),
            r.rebuilds(),
        );
    }
    reviewer.finish().context("reviews")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let dir = TempDir::new("watch-scale-bench");
    let certs = injector_certs(&dir.path().join("certs"), &["--san", "127.0.0.1"])?;
    let cfg = Config::base()?.write(&dir.path().join("cfg"))?;
    println!(
        "{} Namespaces, {} Nodes, ProxyConfigs created {} at a time over {} Namespaces; `--platform openshift`, native sidecars `auto`",
        a.namespaces, a.nodes, a.connections, a.namespaces
    );
    println!();
    println!("| build | ProxyConfigs | created in | reviews during the creates: n, p99, max | change to review, right after | change to review, at rest | RSS at rest | peak RSS | engine rebuilds | fresh start: ready in, RSS |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, program) in &a.builds {
        run_build(name, program, &a, &cfg, &certs).await?;
    }
    Ok(())
}
