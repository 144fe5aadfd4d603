//! The engine's cost grows linearly with the pod (a pod must not select its own cost). Each
//! case injects the same kind of pod at `n` and `4n` and compares the engine's time: linear work takes
//! about 4 times as long, a quadratic step 16 times, the cubic path the gRPC templates had 64 times.
//! The bound is the quadratic ratio, so timing noise cannot fail a linear engine; each time is the
//! thread's CPU time (not wall time, which a loaded machine stretches at random), the fastest of five
//! runs, alternating the sizes.

use std::time::Duration;

use nix::sys::resource::{getrusage, UsageWho};

use inject::{Engine, Mode, Settings};
use serde_json::{json, Value};
use test_support::pods::names;

fn engine() -> Engine {
    Engine::new(Settings::default())
}

/// An app container with a port, an env entry, a mount and HTTP/TCP probes (rewritten by the engine).
fn app(i: usize) -> Value {
    json!({"name": format!("app{i}"), "image": format!("example.com/app{i}:1"),
           "env": [{"name": "A", "value": i.to_string()}],
           "ports": [{"name": format!("p{i}"), "containerPort": 1024 + i}],
           "volumeMounts": [{"name": "data", "mountPath": format!("/d/{i}")}],
           "readinessProbe": {"httpGet": {"path": "/ready", "port": format!("p{i}")}},
           "livenessProbe": {"tcpSocket": {"port": 1024 + i}}})
}

fn pod(templates: &str, containers: Vec<Value>, init_containers: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "big", "namespace": "default",
                        "annotations": {"inject.istio.io/templates": templates}},
           "spec": {"containers": containers, "initContainers": init_containers,
                    "volumes": [{"name": "data", "emptyDir": {}}]}})
}

/// The calling thread's CPU time so far (user and system).
fn thread_cpu() -> Duration {
    let usage = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage(RUSAGE_THREAD)");
    let micros = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    micros(usage.user_time()) + micros(usage.system_time())
}

/// One injection of `pod` with the patch, as the webhook computes it, and the CPU time it took.
fn inject(engine: &Engine, pod: &Value, mode: Mode) -> (Duration, Value) {
    crate::with_request(pod, mode, |req| {
        let start = thread_cpu();
        let injected = engine.inject(req).expect("injects");
        std::hint::black_box(engine.patch(pod, &injected).expect("patch serialises"));
        (thread_cpu().saturating_sub(start), injected)
    })
}

/// Injects `make(n)` and `make(4n)` in both modes, alternately five times each (the fastest counts:
/// the machine is shared); the larger may take at most 16 times as long.
fn assert_linear(
    what: &str,
    n: usize,
    make: impl Fn(usize) -> Value,
    check: impl Fn(usize, &Value),
) {
    let e = engine();
    let (small_pod, large_pod) = (make(n), make(4 * n));
    for mode in [Mode::KubeInject, Mode::Webhook] {
        let (mut small, mut large) = (Duration::MAX, Duration::MAX);
        for _ in 0..5 {
            let (t, out) = inject(&e, &small_pod, mode);
            check(n, &out);
            small = small.min(t);
            let (t, out) = inject(&e, &large_pod, mode);
            check(4 * n, &out);
            large = large.min(t);
        }
        let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-6);
        assert!(
            ratio < 16.0,
            "{what} ({mode:?}): {n} took {small:?}, {} took {large:?} (x{ratio:.1}): not linear",
            4 * n
        );
    }
}

#[test]
fn grpc_agent_with_many_containers_is_linear() {
    assert_linear(
        "grpc-agent, containers",
        150,
        |n| pod("grpc-agent", (0..n).map(app).collect(), Vec::new()),
        |n, out| {
            let cs = out["spec"]["containers"].as_array().expect("containers");
            assert_eq!(cs.len(), n + 1);
            for c in cs.iter().filter(|c| c["name"] != "istio-proxy") {
                let env = names(&c["env"]);
                assert!(
                    env.contains(&"GRPC_XDS_BOOTSTRAP") && env.contains(&"A"),
                    "{c}"
                );
            }
        },
    );
}

#[test]
fn grpc_simple_with_many_containers_is_linear() {
    assert_linear(
        "grpc-simple, containers",
        100,
        |n| pod("grpc-simple", (0..n).map(app).collect(), Vec::new()),
        |n, out| {
            let cs = out["spec"]["containers"].as_array().expect("containers");
            assert_eq!(cs.len(), n);
            assert!(cs
                .iter()
                .all(|c| names(&c["env"]).contains(&"GRPC_XDS_BOOTSTRAP")));
        },
    );
}

#[test]
fn sidecar_and_gateway_with_many_containers_and_init_containers_are_linear() {
    for template in ["sidecar", "gateway"] {
        assert_linear(
            &format!("{template}, containers"),
            100,
            |n| {
                let inits = (0..n)
                    .map(|i| json!({"name": format!("init{i}"), "image": "i"}))
                    .collect();
                pod(template, (0..n).map(app).collect(), inits)
            },
            |n, out| {
                let cs = names(&out["spec"]["containers"]);
                let inits = names(&out["spec"]["initContainers"]);
                assert!(cs.len() >= n && inits.len() >= n, "{cs:?} {inits:?}");
                assert!(cs.contains(&"istio-proxy") || inits.contains(&"istio-proxy"));
            },
        );
    }
}

#[test]
fn reinjecting_a_pod_with_a_long_status_and_overrides_is_linear() {
    // `stripPod` removes the containers the status names, `reinsertOverrides` appends the saved ones:
    // both annotations are the pod's own and may be as long as the pod.
    assert_linear(
        "reinjection, status and overrides",
        100,
        |n| {
            let mut p = pod("grpc-agent", (0..n).map(app).collect(), Vec::new());
            let status = json!({"containers": (0..n).map(|i| format!("old{i}")).collect::<Vec<_>>(),
                                "initContainers": [], "volumes": [], "imagePullSecrets": [], "revision": "default"});
            let saved: Vec<Value> = (0..n)
                .map(|i| json!({"name": format!("saved{i}"), "image": "s"}))
                .collect();
            p["metadata"]["annotations"]["sidecar.istio.io/status"] = json!(status.to_string());
            p["metadata"]["annotations"]["proxy.istio.io/overrides"] =
                json!(json!({"containers": saved}).to_string());
            p
        },
        |n, out| {
            let cs = names(&out["spec"]["containers"]);
            assert!(cs.contains(&"saved0") && cs.len() >= 2 * n, "{}", cs.len());
        },
    );
}
