//! The latency a pod CREATE gains from the webhook, through a real kube-apiserver (e2e::cluster) calling a
//! real `injector serve` (the binary of `E2E_PROFILE`, debug or release): the configurations `injector
//! webhook-config` generates, in url mode to the injector; creates alternate between a namespace labelled
//! `istio-injection=enabled` (the webhook is called and injects) and an unlabelled one (the same
//! configuration is registered, its namespaceSelector does not match, no call), one keep-alive HTTPS
//! connection to the apiserver; then pods/s at saturation with `--clients` connections creating at once,
//! with and without the webhook, in alternating rounds. Prints Markdown rows for bench/README.md.
//!
//! The policy arm: the MutatingAdmissionPolicy `injector policy` compiles from the same configuration is
//! installed beside the webhook, both restricted by a pod label (`e2e::policy_differential::restrict`),
//! so the same pod, labelled for one or the other, is injected in process by the API server or by the
//! webhook call. The API server's memory (RSS and Go heap) is read before and after the policy is loaded.
//!
//! `pod-create-bench [--creates N] [--clients C] [--seconds S] [--rounds R] [--distinct 1]`

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;
use e2e::apiserver::{injector_certs, serve_args, CertFiles, Injector, TempDir};
use e2e::cluster::{Cluster, Connection};
use e2e::policy_differential::{
    install_crd, policy_objects, restrict, APISERVER_ARGS, MARKER, PHASE_LABEL,
};
use serde_json::{json, Value};
use test_support::corpus::Config;

/// The command line: `--name value` pairs.
struct Args {
    creates: usize,
    clients: usize,
    seconds: f64,
    rounds: usize,
    /// Every pod different (`generateName` per create): the injector's patch cache never hits.
    distinct: bool,
}

impl Args {
    /// The `generateName` prefix of create `i`: one for all (replicas), or one each (`--distinct 1`).
    fn prefix(&self, i: usize) -> String {
        if self.distinct {
            format!("p{i}")
        } else {
            "app".to_string()
        }
    }
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        creates: 500,
        clients: 8,
        seconds: 3.0,
        rounds: 3,
        distinct: false,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let [k, v] = pair else {
            bail!("usage: pod-create-bench [--creates N] [--clients C] [--seconds S] [--rounds R] [--distinct 1]")
        };
        match k.as_str() {
            "--creates" => a.creates = v.parse()?,
            "--clients" => a.clients = v.parse()?,
            "--seconds" => a.seconds = v.parse()?,
            "--rounds" => a.rounds = v.parse()?,
            "--distinct" => a.distinct = v == "1",
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

/// A pod as a ReplicaSet creates its replicas: `generateName`, so the webhook sees no name (the API
/// server names the pod after admission) and every replica is the same pod, as in a rollout; the
/// injector's patch cache answers from the third. `serviceAccountName` is set, as the ServiceAccount
/// admission plugin (off in the test apiserver) would.
fn pod(prefix: &str, phase: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": format!("{prefix}-"), "labels": {"app": "bench", PHASE_LABEL: phase}},
           "spec": {"serviceAccountName": "default",
                    "containers": [{"name": "app", "image": "registry.example/app:1",
                                    "ports": [{"containerPort": 8080}]}]}})
}

fn injected(pod: &Value) -> bool {
    ["initContainers", "containers"].iter().any(|l| {
        pod["spec"][l]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["name"] == "istio-proxy"))
    })
}

/// How a create is injected: by the webhook's call, or in process by the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Webhook,
    Policy,
}

impl By {
    /// The pod label value that routes a pod to this arm.
    fn phase(self) -> &'static str {
        match self {
            By::Webhook => "webhook",
            By::Policy => "policy",
        }
    }
}

/// Creates pod `name` in `ns`, labelled for `by`: the time the apiserver took to answer, and whether it
/// came back injected by `by` (the policy marks what it injects).
async fn create(
    conn: &mut Connection,
    ns: &str,
    name: &str,
    by: By,
) -> anyhow::Result<(Duration, bool)> {
    let (took, answer) = create_body(conn, ns, &pod(name, by.phase())).await?;
    let marked = answer["metadata"]["annotations"][MARKER].is_string();
    Ok((took, injected(&answer) && marked == (by == By::Policy)))
}

/// Creates `body` in `ns`: the time the apiserver took to answer, and the stored pod.
async fn create_body(
    conn: &mut Connection,
    ns: &str,
    body: &Value,
) -> anyhow::Result<(Duration, Value)> {
    let path = format!("/api/v1/namespaces/{ns}/pods");
    let start = Instant::now();
    let (status, answer) = conn.request("POST", &path, Some(body)).await?;
    let took = start.elapsed();
    if status.as_u16() != 201 {
        bail!("create in {ns}: HTTP {status}: {answer}");
    }
    Ok((took, answer))
}

/// The stored injected pod as a new object (what the apiserver set of its own removed): the same large
/// pod created where no webhook is called separates the cost of storing a bigger pod from the call.
fn as_new(stored: &Value) -> Value {
    let mut v = e2e::cluster::comparable(stored);
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("name");
    }
    v
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `a - b` in milliseconds, signed (noise can make it negative).
fn diff(a: Duration, b: Duration) -> String {
    format!("{:+.2} ms", (a.as_secs_f64() - b.as_secs_f64()) * 1e3)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let cluster = Cluster::up_with(APISERVER_ARGS);
    let dir = TempDir::new("pod-create-bench");
    let certs = injector_certs(&dir.path().join("certs"), &["--san", "127.0.0.1"])?;
    let cfg = Config::base()?.write(&dir.path().join("cfg"))?;
    let injector = Injector::start(&serve_args(&certs.cert, &certs.key, &cfg), &BTreeMap::new())?;
    cluster.namespace(
        "injected",
        &BTreeMap::from([("istio-injection".to_string(), "enabled".to_string())]),
    )?;
    cluster.namespace("plain", &BTreeMap::new())?;
    register_webhooks(&cluster, &injector, &certs)?;

    let mut conn = cluster.connect().await?;
    wait_and_warm_up(&mut conn, &injector, &a, By::Webhook).await?;
    let before = apiserver_memory(&cluster).await?;
    install_policy(&cluster, &cfg.args())?;
    wait_and_warm_up(&mut conn, &injector, &a, By::Policy).await?;
    let loaded = apiserver_memory(&cluster).await?;
    // The injector's own time per injection (its histogram), over the latency run.
    let sum0 = injector
        .metric("sidecar_injection_time_seconds_sum")
        .await?;
    let count0 = injector
        .metric("sidecar_injection_time_seconds_count")
        .await?;
    let (_, stored) = create_body(&mut conn, "injected", &pod("app", "webhook")).await?;
    let big = as_new(&stored);
    let admission0 = admission_times(&cluster)?;
    latency(&mut conn, &injector, &a, &big, (sum0, count0)).await?;
    let admission1 = admission_times(&cluster)?;
    let mean = |i: usize| {
        let (sum, count) = (
            admission1[i].0 - admission0[i].0,
            admission1[i].1 - admission0[i].1,
        );
        if count > 0.0 {
            ms(Duration::from_secs_f64(sum / count))
        } else {
            "none".to_string()
        }
    };
    println!();
    println!("| the API server's own histograms over the latency run (mean) | policy evaluation (`apiserver_mutating_admission_policy_check_duration_seconds`) | webhook call (`apiserver_admission_webhook_admission_duration_seconds`) |");
    println!("| --- | --- | --- |");
    println!("| | {} | {} |", mean(0), mean(1));
    saturation(&cluster, &a, &big).await?;
    let after = apiserver_memory(&cluster).await?;
    println!();
    println!("| API server memory | RSS | Go heap in use |");
    println!("| --- | --- | --- |");
    for (when, m) in [
        ("webhook registered, warmed up", before),
        ("policy loaded, warmed up", loaded),
        ("after the runs", after),
    ] {
        println!("| {when} | {:.1} MiB | {:.1} MiB |", m.rss_mib, m.heap_mib);
    }
    drop(injector);
    Ok(())
}

/// Registers the generated configurations, each entry's clientConfig turned into a url to `injector`.
fn register_webhooks(
    cluster: &Cluster,
    injector: &Injector,
    certs: &CertFiles,
) -> anyhow::Result<()> {
    let configs = e2e::cluster::run_stdout(
        Command::new(e2e::bin("injector"))
            .arg("webhook-config")
            .arg("--ca-bundle")
            .arg(certs.dir.join("ca.crt")),
        "injector webhook-config",
    )?;
    let port = injector.https.port();
    for mut mwc in test_support::pods::documents(&configs)? {
        for wh in mwc["webhooks"].as_array_mut().into_iter().flatten() {
            let cc = &mut wh["clientConfig"];
            let path = cc["service"]["path"]
                .as_str()
                .unwrap_or("/inject")
                .to_string();
            *cc = json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": cc["caBundle"].clone()});
        }
        restrict(&mut mwc, "bench", &namespaces(), &["webhook"]);
        cluster.apply(&mwc)?;
    }
    Ok(())
}

/// The namespaces the webhook and the policy are restricted to.
fn namespaces() -> Vec<String> {
    vec!["injected".to_string()]
}

/// Installs `injector policy`'s objects for the configuration `flags` (the CRD first, established
/// before the params object), restricted to pods labelled for the policy.
fn install_policy(cluster: &Cluster, flags: &[String]) -> anyhow::Result<()> {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let objects = policy_objects(&flags)?;
    let Some((crd, rest)) = objects.split_first() else {
        bail!("injector policy wrote nothing");
    };
    install_crd(cluster, crd)?;
    for o in rest {
        let mut o = o.clone();
        if o["kind"] != "MutatingAdmissionPolicy" {
            restrict(&mut o, "bench", &namespaces(), &["policy"]);
        }
        cluster.apply(&o)?;
    }
    Ok(())
}

/// The API server's (sum, count) of the policy's evaluation and of the webhook calls, every series added.
fn admission_times(cluster: &Cluster) -> anyhow::Result<[(f64, f64); 2]> {
    let metrics = cluster.kubectl(&["get", "--raw", "/metrics"], None)?;
    let total = |name: &str| -> (f64, f64) {
        let mut out = (0.0, 0.0);
        for line in metrics.lines() {
            let value = || {
                line.rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            if line.starts_with(&format!("{name}_sum")) {
                out.0 += value();
            } else if line.starts_with(&format!("{name}_count")) {
                out.1 += value();
            }
        }
        out
    };
    Ok([
        total("apiserver_mutating_admission_policy_check_duration_seconds"),
        total("apiserver_admission_webhook_admission_duration_seconds"),
    ])
}

/// The API server's memory: its resident set (procfs) and its Go heap in use (its `/metrics`).
#[derive(Debug, Clone, Copy)]
struct Memory {
    rss_mib: f64,
    heap_mib: f64,
}

async fn apiserver_memory(cluster: &Cluster) -> anyhow::Result<Memory> {
    let pid = std::fs::read_to_string(cluster.dir().join("kube-apiserver.pid"))?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim()))?;
    let rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/{}/status", pid.trim()))?
        .parse()?;
    let metrics = cluster.kubectl(&["get", "--raw", "/metrics"], None)?;
    let heap: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("go_memstats_heap_inuse_bytes "))
        .ok_or_else(|| {
            anyhow::anyhow!("no go_memstats_heap_inuse_bytes in the apiserver's /metrics")
        })?
        .trim()
        .parse()?;
    Ok(Memory {
        rss_mib: rss_kib / 1024.0,
        heap_mib: heap / (1024.0 * 1024.0),
    })
}

/// Waits for the first injection by `by`, then warms up.
async fn wait_and_warm_up(
    conn: &mut Connection,
    injector: &Injector,
    a: &Args,
    by: By,
) -> anyhow::Result<()> {
    // The apiserver picks a new configuration up through an informer: wait for the first injection.
    let deadline = Instant::now() + e2e::PATIENCE;
    let mut n = 0;
    loop {
        n += 1;
        if create(conn, "injected", &format!("warm{n}"), by).await?.1 {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the apiserver never injected by the {}:\n{}",
                by.phase(),
                injector.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Warm-up: connections, caches, the injector's patch cache (replicas of one pod, as here, hit it).
    for i in 0..50 {
        create(conn, "injected", &a.prefix(i), by).await?;
        create(conn, "plain", &a.prefix(i), by).await?;
    }
    Ok(())
}

/// The arms of both runs: the same pod injected by the webhook, by the policy, not injected (a namespace
/// nothing is registered for), and the webhook's injected pod stored where nothing is called.
const ARMS: [&str; 4] = ["webhook", "policy", "without", "injected pod, no webhook"];

/// One create of arm `arm` (an index of [`ARMS`]): its time; fails when the pod was not injected as the
/// arm says.
async fn create_arm(
    conn: &mut Connection,
    arm: usize,
    name: &str,
    big: &Value,
) -> anyhow::Result<Duration> {
    let (ns, by) = match arm {
        0 => ("injected", By::Webhook),
        1 => ("injected", By::Policy),
        2 => ("plain", By::Webhook),
        _ => return Ok(create_body(conn, "plain", big).await?.0),
    };
    let (took, inj) = create(conn, ns, name, by).await?;
    if inj != (arm < 2) {
        bail!("{ns}/{name} ({}): injected as expected: {inj}", ARMS[arm]);
    }
    Ok(took)
}

/// The latency run: the arms in turn on one connection; prints its Markdown row. `before` is the
/// injector's histogram (sum, count) before the run, for its own time per injection.
async fn latency(
    conn: &mut Connection,
    injector: &Injector,
    a: &Args,
    big: &Value,
    before: (f64, f64),
) -> anyhow::Result<()> {
    let (sum0, count0) = before;
    // The arms in turn, one connection; the order rotates every round.
    let mut took: [Vec<Duration>; 4] = Default::default();
    for i in 0..a.creates {
        let name = a.prefix(i);
        for k in 0..ARMS.len() {
            let arm = (i + k) % ARMS.len();
            took[arm].push(create_arm(conn, arm, &name, big).await?);
        }
    }
    let sum = injector
        .metric("sidecar_injection_time_seconds_sum")
        .await?
        - sum0;
    let count = injector
        .metric("sidecar_injection_time_seconds_count")
        .await?
        - count0;
    for t in &mut took {
        t.sort();
    }
    let p = |arm: usize, q: f64| percentile(&took[arm], q);
    println!(
        "| creates per arm | p50 webhook | p50 policy | p50 without | p50 injected pod, no webhook | p50 added by the webhook | p50 added by the policy | p99 webhook | p99 policy | p99 without | p99 injected pod, no webhook | injector time per review (mean) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| {} | {} | {} | {} | {} | **{}** | **{}** | {} | {} | {} | {} | {} ({count} reviews) |",
        took[0].len(),
        ms(p(0, 0.5)),
        ms(p(1, 0.5)),
        ms(p(2, 0.5)),
        ms(p(3, 0.5)),
        diff(p(0, 0.5), p(2, 0.5)),
        diff(p(1, 0.5), p(2, 0.5)),
        ms(p(0, 0.99)),
        ms(p(1, 0.99)),
        ms(p(2, 0.99)),
        ms(p(3, 0.99)),
        ms(Duration::from_secs_f64(if count > 0.0 {
            sum / count
        } else {
            0.0
        })),
    );
    Ok(())
}

/// The saturation run; prints its Markdown row.
async fn saturation(cluster: &Cluster, a: &Args, big: &Value) -> anyhow::Result<()> {
    // `clients` connections creating for `seconds`, rounds cycling through the arms.
    let mut rates: [Vec<f64>; 4] = Default::default();
    let mut seq = 0usize;
    for round in 0..a.rounds * ARMS.len() {
        let arm = round % ARMS.len();
        let stop = Instant::now() + Duration::from_secs_f64(a.seconds);
        let start = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..a.clients {
            let mut conn = cluster.connect().await?;
            seq += 1;
            let prefix = a.prefix(seq);
            let distinct = a.distinct;
            let big = big.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = 0usize;
                while Instant::now() < stop {
                    let name = if distinct {
                        format!("{prefix}-{c}-{done}")
                    } else {
                        prefix.clone()
                    };
                    create_arm(&mut conn, arm, &name, &big).await?;
                    done += 1;
                }
                anyhow::Ok(done)
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await??;
        }
        rates[arm].push(total as f64 / start.elapsed().as_secs_f64());
    }
    let [w, pol, o, b] = rates.map(|mut v| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    });
    println!();
    println!("| clients | rounds × s | pods/s webhook | pods/s policy | pods/s without | pods/s injected pod, no webhook | policy / webhook | webhook / without |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| {} | {} × {} | {w:.0} | {pol:.0} | {o:.0} | {b:.0} | {:.2} | {:.2} |",
        a.clients,
        a.rounds,
        a.seconds,
        pol / w,
        w / o
    );
    Ok(())
}
