//! Injection through `admission::handle` (the webhook's hot path) against the floor: decoding and
//! re-encoding the same AdmissionReview without injecting.
//!
//! `cargo bench -p injector --bench inject -- --warm-up-time 1 --measurement-time 3`
//!
//! The bench uses the same global allocator as the `injector` binary (mimalloc, the default feature),
//! so it measures what `injector serve` runs.
//!
//! Groups, each through `admission::Webhook` (the server's front end, with its cache of finished
//! patches): `hello` (the same pod again and again, as a workload's replicas arrive: the cache answers
//! from the third on), `hello-cold` (4096 distinct pods: never a cache hit, and more pods than the cache
//! remembers, so none is stored either), `large` (one large pod, repeated: cache hits) and
//! `grpc-agent-2000` (a `grpc-agent` pod of 2,000 containers, a new one each review). `hello-cold` also
//! runs the distinct pods through Istio's 1.31.0-rc.0 and 1.30.3 texts on the evaluator
//! (`inject-evaluated-<release>`), the render path a configured text takes. Figures are kept
//! in `bench/README.md` and closing notes, not here.

use criterion::{criterion_group, Criterion};
use inject::{Engine, Settings};
use injector::Webhook;
use serde_json::{json, Value};
use std::hint::black_box;

fn review(pod: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "object": pod
        }
    }))
    .unwrap_or_default()
}

/// The `hello` Deployment's pod, as the API server sends it.
fn hello_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "hello-7d8f9c-", "namespace": "default",
            "labels": {"app": "hello", "tier": "backend", "track": "stable", "pod-template-hash": "7d8f9c"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "hello-7d8f9c",
                                 "uid": "u", "controller": true}]
        },
        "spec": {
            "containers": [{"name": "hello", "image": "fake.docker.io/google-samples/hello-go-gke:1.0",
                            "ports": [{"name": "http", "containerPort": 80}], "resources": {}}]
        },
        "status": {}
    })
}

/// A large pod: 12 containers, each with 30 env vars, 8 ports, probes and mounts.
fn large_pod() -> Value {
    let containers: Vec<Value> = (0..12)
        .map(|i| {
            let env: Vec<Value> = (0..30).map(|j| json!({"name": format!("VAR_{i}_{j}"), "value": format!("value-{j}")})).collect();
            let ports: Vec<Value> = (0..8).map(|j| json!({"name": format!("p{j}"), "containerPort": 8000 + i * 10 + j})).collect();
            json!({
                "name": format!("app{i}"), "image": format!("registry.example.com/app{i}:1.2.3"),
                "env": env, "ports": ports, "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "p0"}, "periodSeconds": 5},
                "livenessProbe": {"tcpSocket": {"port": 8000 + i * 10}},
                "volumeMounts": [{"name": "data", "mountPath": format!("/data/{i}")}]
            })
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "large", "namespace": "default",
                     "labels": {"app": "large", "version": "v1"},
                     "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}},
        "spec": {"containers": containers, "volumes": [{"name": "data", "emptyDir": {}}]},
        "status": {}
    })
}

/// A `grpc-agent` pod of 2,000 containers (the template patches every one, and the cost must
/// grow linearly with them), its `app` label set to `label` so that every review is new to the cache.
fn grpc_agent_pod(label: usize) -> Value {
    let containers: Vec<Value> = (0..2000)
        .map(|i| {
            json!({"name": format!("app{i}"), "image": format!("registry.example.com/app{i}:1"),
                   "env": [{"name": "APP", "value": i.to_string()}],
                   "ports": [{"name": format!("p{i}"), "containerPort": 1024 + i}],
                   "volumeMounts": [{"name": "data", "mountPath": format!("/data/{i}")}]})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "grpc", "namespace": "default",
                     "labels": {"app": format!("grpc-{label}")},
                     "annotations": {"inject.istio.io/templates": "grpc-agent"}},
        "spec": {"containers": containers, "volumes": [{"name": "data", "emptyDir": {}}]},
        "status": {}
    })
}

fn floor(body: &[u8]) -> Vec<u8> {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    serde_json::to_vec(&v).unwrap_or_default()
}

/// `n` `hello` pods that differ in a label the template reads (`app`, the canonical name), so that no
/// two patches are the same: the webhook's patch cache cannot help them.
fn distinct_hello_bodies(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut pod = hello_pod();
            pod["metadata"]["labels"]["app"] = json!(format!("hello-{i}"));
            review(pod)
        })
        .collect()
}

/// Asserts that the webhook injects `body` (`what` names the benchmark): timing a refusal would
/// measure the wrong path.
fn assert_injects(engine: &Engine, webhook: &Webhook, body: &[u8], what: &str) {
    let check = webhook.handle(engine, 0, body, "/inject");
    assert_eq!(
        check.kind,
        injector::OutcomeKind::Injected,
        "{what}: {}",
        check.message
    );
}

/// An engine whose configuration carries `release`'s four pod-template texts
/// (`testdata/istio/releases/<release>`), all rendered through the evaluator (`--evaluate-texts`; for
/// 1.31.0-rc.0 the compiled templates would render them otherwise).
fn evaluating_engine(release: &str) -> Engine {
    let templates = test_support::corpus::release_texts(release).unwrap_or_default();
    let config = json!({"policy": "enabled", "templates": templates}).to_string();
    let args = inject::ConfigArgs {
        evaluate_texts: true,
        ..Default::default()
    };
    let settings = Settings::from_texts(None, None, Some(("config", &config)), &args)
        .unwrap_or_else(|e| panic!("{release}: {e}"));
    Engine::new(settings)
}

fn bench(c: &mut Criterion) {
    let engine = Engine::new(Settings::default());
    let webhook = Webhook::new(Default::default());
    let cold = distinct_hello_bodies(4096);
    let evaluating: Vec<(&str, Engine)> = ["1.31.0-rc.0", "1.30.3"]
        .into_iter()
        .map(|r| (r, evaluating_engine(r)))
        .collect();
    for (release, e) in &evaluating {
        assert_injects(e, &webhook, &cold[0], release);
    }
    {
        let mut g = c.benchmark_group("hello-cold");
        let mut i = 0;
        g.bench_function("floor", |b| {
            b.iter(|| {
                i = (i + 1) % cold.len();
                floor(black_box(&cold[i]))
            })
        });
        g.bench_function("inject", |b| {
            b.iter(|| {
                i = (i + 1) % cold.len();
                webhook.handle(&engine, 0, black_box(&cold[i]), "/inject")
            })
        });
        // The same distinct pods, rendered from Istio's texts by the evaluator: 1.31.0-rc.0's (the
        // compiled templates' own text, so the two arms differ by the render path only) and 1.30.3's.
        for (release, e) in &evaluating {
            g.bench_function(format!("inject-evaluated-{release}"), |b| {
                b.iter(|| {
                    i = (i + 1) % cold.len();
                    webhook.handle(e, 0, black_box(&cold[i]), "/inject")
                })
            });
        }
        g.finish();
    }
    {
        // Each review a new pod (built outside the measurement): the full engine every time.
        let mut g = c.benchmark_group("grpc-agent-2000");
        g.sample_size(10);
        let body = review(grpc_agent_pod(0));
        assert_injects(&engine, &webhook, &body, "grpc-agent-2000");
        g.bench_function("floor", |b| b.iter(|| floor(black_box(&body))));
        let mut i = 0;
        g.bench_function("inject", |b| {
            b.iter_batched(
                || {
                    i += 1;
                    review(grpc_agent_pod(i))
                },
                |body| webhook.handle(&engine, 0, black_box(&body), "/inject"),
                criterion::BatchSize::PerIteration,
            )
        });
        g.finish();
    }
    for (name, pod) in [("hello", hello_pod()), ("large", large_pod())] {
        let body = review(pod);
        assert_injects(&engine, &webhook, &body, name);
        let mut g = c.benchmark_group(name);
        g.bench_function("floor", |b| b.iter(|| floor(black_box(&body))));
        g.bench_function("inject", |b| {
            b.iter(|| webhook.handle(&engine, 0, black_box(&body), "/inject"))
        });
        g.finish();
    }
}

/// `INJECT_PROFILE=<n>` runs `n` hello and `n/10` large injections and exits, without criterion: a
/// deterministic workload for `valgrind --tool=callgrind` or `perf record` (criterion's own analysis would
/// dominate those profiles). `INJECT_PROFILE_POD=hello|large` runs only that pod, `n` times;
/// `INJECT_PROFILE_POD=hello-cold` runs `n` distinct hello pods, `INJECT_PROFILE_POD=hello-floor` the
/// `hello` floor `n` times.
fn profile(n: usize) {
    let engine = Engine::new(Settings::default());
    let webhook = Webhook::new(Default::default());
    let only = std::env::var("INJECT_PROFILE_POD").unwrap_or_default();
    let rounds = |name: &str, default: usize| match only.as_str() {
        "" => default,
        o if o == name => n,
        _ => 0,
    };
    for (pod, rounds) in [
        (hello_pod(), rounds("hello", n)),
        (large_pod(), rounds("large", n / 10)),
    ] {
        let body = review(pod);
        for _ in 0..rounds {
            black_box(webhook.handle(&engine, 0, black_box(&body), "/inject"));
        }
    }
    // `hello-floor`: the floor of the `hello` group (only when asked for by name).
    if only == "hello-floor" {
        let body = review(hello_pod());
        for _ in 0..n {
            black_box(floor(black_box(&body)));
        }
    }
    // `hello-cold`: distinct pods, no cache hits (only when asked for by name).
    if only == "hello-cold" {
        let cold = distinct_hello_bodies(n);
        for body in &cold {
            black_box(webhook.handle(&engine, 0, black_box(body), "/inject"));
        }
    }
}

criterion_group!(benches, bench);

/// As in `injector`'s main: see there why.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    if let Some(n) = std::env::var("INJECT_PROFILE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        profile(n);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
