//! Pod start-up, measured on a real node: the time from a pod's CREATE to its Ready
//! condition for four arms in the same run, on a cluster with one node (`e2e::product`: scripts/cluster.sh,
//! the images of scripts/images.sh, both charts installed with helm):
//!
//! - `bare`: the app alone (a namespace no injector serves);
//! - `init`: injected in init-container mode, `istio-init` running our `iptables-init` (Debian image);
//! - `cni`: injected in CNI mode (`istio-validation`; the istio-cni agent's plugin programs the pod);
//! - `istio`: injected in init-container mode with Istio's own `pilot-agent istio-iptables` as the init
//!   container (the `istio-pilot-agent` image, built from the Go-built peer).
//!
//! The app is `testproxy echo` with no probe of its own, and `istio-proxy` is `testproxy` as in the e2e
//! scenarios (native sidecars, as `auto` resolves on a 1.36 kubelet). istio-cni stays installed
//! throughout, as in a cluster that runs CNI mode: every arm's sandbox runs the plugin, which leaves all
//! but the `cni` arm's pods alone. Each round creates one pod per arm, one after another in an order
//! that rotates, each alone on the node: the next is created once the previous is Ready; the round's
//! pods are then deleted and gone before the next round. The Ready times come from a watch
//! (`kubectl get pods --watch`), stamped when the event arrives; the create time is taken just before the
//! POST. A first round warms up and is not counted. Prints a Markdown table for bench/README.md.
//!
//! `pod-startup-bench [--rounds N (30)]`

use std::collections::BTreeMap;
use std::io::BufReader;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use e2e::product::{pod_ready, Product};
use serde_json::{json, Value};

/// The arms: name, namespace, namespace labels.
const ARMS: [(&str, &str, &str); 4] = [
    ("bare", "bench-bare", ""),
    ("init", "bench-init", "istio-injection=enabled"),
    ("cni", "bench-cni", "istio.io/rev=cni"),
    ("istio", "bench-istio", "istio.io/rev=istio"),
];

/// When each pod (`ns/name`) was first seen Ready by the watch.
#[derive(Default)]
struct Seen {
    ready: Mutex<BTreeMap<String, Instant>>,
    changed: Condvar,
}

impl Seen {
    fn wait(&self, key: &str, bound: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + bound;
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(t) = ready.get(key) {
                return Ok(*t);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("pod {key} not Ready within {bound:?}");
            }
            ready = self
                .changed
                .wait_timeout(ready, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let rounds: usize = match argv.as_slice() {
        [] => 30,
        [flag, n] if flag == "--rounds" => n.parse().context("--rounds")?,
        _ => bail!("usage: pod-startup-bench [--rounds N]"),
    };
    let start = Instant::now();
    let p = Product::up(
        1,
        &[
            "injector",
            "iptables-init",
            "istio-cni",
            "testproxy",
            "istio-pilot-agent",
        ],
    );
    p.install_injector("", &[])?;
    p.install_injector("cni", &["--set", "cni.enabled=true"])?;
    let pilot_agent = format!(
        "global.proxy_init.image={}",
        p.images.reference("istio-pilot-agent")
    );
    p.install_injector("istio", &["--set", &pilot_agent])?;
    p.install_cni(&[])?;
    for (_, ns, label) in ARMS {
        let labels = match label.split_once('=') {
            Some((k, v)) => json!({ k: v }),
            None => json!({}),
        };
        p.namespace(ns, labels)?;
    }
    eprintln!(
        "pod-startup-bench: cluster, images and charts ready in {:.0} s",
        start.elapsed().as_secs_f64()
    );

    // The watch: every pod labelled bench=startup, Ready stamped as the event arrives.
    let seen = Arc::new(Seen::default());
    let mut watch = Command::new(&p.cluster.kubectl)
        .arg("--kubeconfig")
        .arg(&p.cluster.kubeconfig)
        .args([
            "get",
            "pods",
            "--all-namespaces",
            "--selector=bench=startup",
            "--watch",
            "--output=json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("kubectl get pods --watch")?;
    let out = watch.stdout.take().context("watch stdout")?;
    {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let stream =
                serde_json::Deserializer::from_reader(BufReader::new(out)).into_iter::<Value>();
            for pod in stream.flatten() {
                if pod_ready(&pod) {
                    let key = format!(
                        "{}/{}",
                        pod["metadata"]["namespace"].as_str().unwrap_or_default(),
                        pod["metadata"]["name"].as_str().unwrap_or_default()
                    );
                    let now = Instant::now();
                    let mut ready = seen.ready.lock().unwrap_or_else(|e| e.into_inner());
                    ready.entry(key).or_insert(now);
                    seen.changed.notify_all();
                }
            }
        });
    }

    let spec = p.testproxy_spec(
        &["echo".into(), "--port".into(), "8080".into()],
        &[8080],
        None,
    );
    let mut times: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut injected_shape: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for round in 0..=rounds {
        let mut made = Vec::new();
        for k in 0..ARMS.len() {
            let (arm, ns, _) = ARMS[(round + k) % ARMS.len()];
            let name = format!("r{round}");
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": {"bench": "startup"}},
                "spec": spec,
            });
            let t0 = Instant::now();
            let stored = p.create(&format!("/api/v1/namespaces/{ns}/pods"), &pod)?;
            let ready = seen.wait(&format!("{ns}/{name}"), e2e::PATIENCE)?;
            if round > 0 {
                times.entry(arm).or_default().push(ready - t0);
            } else {
                let (inits, _) = e2e::product::container_names(&stored);
                injected_shape.insert(arm, inits);
            }
            made.push((ns, name));
        }
        for (ns, name) in &made {
            p.kubectl(&["delete", "pod", "-n", ns, name, "--wait=false"])?;
        }
        for (ns, name) in &made {
            e2e::product::poll(&format!("pod {ns}/{name} gone"), || {
                let (status, _) =
                    p.api("GET", &format!("/api/v1/namespaces/{ns}/pods/{name}"), None)?;
                if status == hyper::StatusCode::NOT_FOUND {
                    Ok(())
                } else {
                    bail!("{status}")
                }
            })?;
        }
        eprintln!("pod-startup-bench: round {round}/{rounds}");
    }
    let _ = watch.kill();

    for (arm, inits) in &injected_shape {
        eprintln!("pod-startup-bench: {arm}: init containers {inits:?}");
    }
    let bare = {
        let mut b = times["bare"].clone();
        b.sort();
        percentile(&b, 0.5)
    };
    println!("| arm | pods | median | p99 | median over bare |");
    println!("| --- | --- | --- | --- | --- |");
    for (arm, _, _) in ARMS {
        let mut t = times[arm].clone();
        t.sort();
        let median = percentile(&t, 0.5);
        println!(
            "| {arm} | {} | {} | {} | {:+.0} ms |",
            t.len(),
            ms(median),
            ms(percentile(&t, 0.99)),
            (median.as_secs_f64() - bare.as_secs_f64()) * 1e3
        );
    }
    Ok(())
}
