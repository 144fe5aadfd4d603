//! The latency a pod CREATE gains from the webhook, through a real kube-apiserver (e2e::cluster) calling a
//! real `injector serve` (the binary of `E2E_PROFILE`, debug or release): the configurations `injector
//! webhook-config` generates, in url mode to the injector; creates alternate between a namespace labelled
//! `istio-injection=enabled` (the webhook is called and injects) and an unlabelled one (the same
//! configuration is registered, its namespaceSelector does not match, no call), one keep-alive HTTPS
//! connection to the apiserver; then pods/s at saturation with `--clients` connections creating at once,
//! with and without the webhook, in alternating rounds. Prints Markdown rows for bench/README.md.
//!
//! `pod-create-bench [--creates N] [--clients C] [--seconds S] [--rounds R] [--distinct 1]`

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;
use e2e::apiserver::{injector_certs, serve_args, CertFiles, Injector, TempDir};
use e2e::cluster::{Cluster, Connection};
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
fn pod(prefix: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": format!("{prefix}-"), "labels": {"app": "bench"}},
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

/// Creates pod `name` in `ns`: the time the apiserver took to answer, and whether it came back injected.
async fn create(conn: &mut Connection, ns: &str, name: &str) -> anyhow::Result<(Duration, bool)> {
    let (took, answer) = create_body(conn, ns, &pod(name)).await?;
    Ok((took, injected(&answer)))
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
    let cluster = Cluster::up();
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
    wait_and_warm_up(&mut conn, &injector, &a).await?;
    // The injector's own time per injection (its histogram), over the latency run.
    let sum0 = injector
        .metric("sidecar_injection_time_seconds_sum")
        .await?;
    let count0 = injector
        .metric("sidecar_injection_time_seconds_count")
        .await?;
    let (_, stored) = create_body(&mut conn, "injected", &pod("app")).await?;
    let big = as_new(&stored);
    latency(&mut conn, &injector, &a, &big, (sum0, count0)).await?;
    saturation(&cluster, &a, &big).await?;
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
        cluster.apply(&mwc)?;
    }
    Ok(())
}

/// Waits for the first injection, then warms up.
async fn wait_and_warm_up(
    conn: &mut Connection,
    injector: &Injector,
    a: &Args,
) -> anyhow::Result<()> {
    // The apiserver picks a new configuration up through an informer: wait for the first injection.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    loop {
        n += 1;
        if create(conn, "injected", &format!("warm{n}")).await?.1 {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the apiserver never called the injector:\n{}",
                injector.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Warm-up: connections, caches, the injector's patch cache (replicas of one pod, as here, hit it).
    for i in 0..50 {
        create(conn, "injected", &a.prefix(i)).await?;
        create(conn, "plain", &a.prefix(i)).await?;
    }
    Ok(())
}

/// The latency run: the three arms in turn on one connection; prints its Markdown row. `before` is the
/// injector's histogram (sum, count) before the run, for its own time per injection.
async fn latency(
    conn: &mut Connection,
    injector: &Injector,
    a: &Args,
    big: &Value,
    before: (f64, f64),
) -> anyhow::Result<()> {
    let (sum0, count0) = before;
    // Latency: the three arms in turn, one connection; the order rotates every round.
    let (mut with, mut without, mut big_without) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..a.creates {
        let name = a.prefix(i);
        for k in 0..3 {
            match (i + k) % 3 {
                0 => {
                    let (took, inj) = create(conn, "injected", &name).await?;
                    if !inj {
                        bail!("injected/{name}: not injected");
                    }
                    with.push(took);
                }
                1 => {
                    let (took, inj) = create(conn, "plain", &name).await?;
                    if inj {
                        bail!("plain/{name}: injected");
                    }
                    without.push(took);
                }
                _ => big_without.push(create_body(conn, "plain", big).await?.0),
            }
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
    with.sort();
    without.sort();
    big_without.sort();
    let (p50w, p99w) = (percentile(&with, 0.5), percentile(&with, 0.99));
    let (p50o, p99o) = (percentile(&without, 0.5), percentile(&without, 0.99));
    let (p50b, p99b) = (
        percentile(&big_without, 0.5),
        percentile(&big_without, 0.99),
    );
    println!(
        "| creates per arm | p50 with | p50 without | p50 added | p50 injected pod, no webhook | p50 added by the call | p99 with | p99 without | p99 injected pod, no webhook | injector time per review (mean) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| {} | {} | {} | **{}** | {} | **{}** | {} | {} | {} | {} ({count} reviews) |",
        with.len(),
        ms(p50w),
        ms(p50o),
        diff(p50w, p50o),
        ms(p50b),
        diff(p50w, p50b),
        ms(p99w),
        ms(p99o),
        ms(p99b),
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
    // Saturation: `clients` connections creating for `seconds`, rounds cycling through the three arms.
    const ARMS: [&str; 3] = ["with", "without", "injected pod, no webhook"];
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut seq = 0usize;
    for round in 0..a.rounds * 3 {
        let arm = ARMS[round % 3];
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
                    match round % 3 {
                        0 => create(&mut conn, "injected", &name).await?,
                        1 => create(&mut conn, "plain", &name).await?,
                        _ => (create_body(&mut conn, "plain", &big).await?.0, true),
                    };
                    done += 1;
                }
                anyhow::Ok(done)
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await??;
        }
        rates
            .entry(arm)
            .or_default()
            .push(total as f64 / start.elapsed().as_secs_f64());
    }
    let mut median = |arm: &'static str| {
        let v = rates.entry(arm).or_default();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let (w, o, b) = (median(ARMS[0]), median(ARMS[1]), median(ARMS[2]));
    println!();
    println!("| clients | rounds × s | pods/s with | pods/s without | pods/s injected pod, no webhook | with / without | with / injected pod, no webhook |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| {} | {} × {} | {w:.0} | {o:.0} | {b:.0} | {:.2} | {:.2} |",
        a.clients,
        a.rounds,
        a.seconds,
        w / o,
        w / b
    );
    Ok(())
}
