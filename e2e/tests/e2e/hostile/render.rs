//! Pods whose size selects the cost of rendering: the built-in templates stay linear in the pod's size.
//!
//! A `grpc-agent` pod patches every app container, and Istio's `reapplyOverwrittenContainers` then
//! merges the whole pod once per container: with a scan per list item in each merge that was cubic
//! (2,000 containers took 38-59 s of CPU). `injector kube-inject` must inject such a pod completely,
//! with the time growing like the pod: 4 times the containers may take at most 16 times as long (the
//! quadratic ratio; linear is about 4, the cubic path was 64).

use std::process::Command;
use std::time::Duration;

use e2e::apiserver::TempDir;
use serde_json::{json, Value};

/// A pod of `n` app containers, each with its own env, port, mount and readiness probe.
fn grpc_agent_pod(n: usize) -> Value {
    let containers: Vec<Value> = (0..n)
        .map(|i| {
            json!({"name": format!("app{i}"), "image": format!("example.com/app{i}:1"),
                   "env": [{"name": "APP", "value": i.to_string()}],
                   "ports": [{"name": format!("p{i}"), "containerPort": 1024 + i}],
                   "volumeMounts": [{"name": "data", "mountPath": format!("/data/{i}")}],
                   "readinessProbe": {"httpGet": {"path": "/ready", "port": format!("p{i}")}}})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "big", "namespace": "default",
                        "annotations": {"inject.istio.io/templates": "grpc-agent"}},
           "spec": {"containers": containers, "volumes": [{"name": "data", "emptyDir": {}}]}})
}

/// `injector kube-inject -f <pod>`: its CPU time (user and system, as `/usr/bin/time` reports it: wall
/// time is stretched at random on a loaded machine) and the injected pod.
fn kube_inject(dir: &TempDir, pod: &Value) -> (Duration, Value) {
    let file = dir.path().join("pod.json");
    let times = dir.path().join("times");
    std::fs::write(&file, pod.to_string()).expect("writing the pod");
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%U %S", "-o"])
        .arg(&times)
        .arg(e2e::bin("injector"))
        .arg("kube-inject")
        .arg("-f")
        .arg(&file)
        .output()
        .expect("running injector kube-inject under /usr/bin/time (scripts/test.sh installs it)");
    let times = std::fs::read_to_string(&times).expect("/usr/bin/time's report");
    let took = times
        .split_whitespace()
        .map(|t| t.parse::<f64>().expect("seconds"))
        .map(Duration::from_secs_f64)
        .sum::<Duration>();
    assert!(
        out.status.success(),
        "kube-inject failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    let mut docs: Vec<Value> = serde_saphyr::from_str_multiple(&text).expect("the output is YAML");
    docs.retain(|d| !d.is_null());
    assert_eq!(docs.len(), 1, "one pod in, one out");
    (took, docs.remove(0))
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default()
}

/// Every app container kept its own settings and got the gRPC bootstrap env and the agent's mounts;
/// the agent is there and the status annotation names it.
fn check_injected(n: usize, pod: &Value) {
    let containers = pod["spec"]["containers"].as_array().expect("containers");
    assert_eq!(
        containers.len(),
        n + 1,
        "the app containers and istio-proxy"
    );
    assert!(names(&pod["spec"]["containers"]).contains(&"istio-proxy"));
    for (i, c) in containers
        .iter()
        .filter(|c| c["name"] != "istio-proxy")
        .enumerate()
    {
        assert_eq!(c["name"], json!(format!("app{i}")), "the app order is kept");
        let env = names(&c["env"]);
        for want in [
            "APP",
            "GRPC_XDS_EXPERIMENTAL_SECURITY_SUPPORT",
            "GRPC_XDS_BOOTSTRAP",
        ] {
            assert!(
                env.contains(&want),
                "{} lacks env {want}: {env:?}",
                c["name"]
            );
        }
        let mounts = names(&c["volumeMounts"]);
        for want in ["data", "istio-data", "istio-xds"] {
            assert!(
                mounts.contains(&want),
                "{} lacks mount {want}: {mounts:?}",
                c["name"]
            );
        }
        assert_eq!(c["image"], json!(format!("example.com/app{i}:1")));
    }
    let status = pod["metadata"]["annotations"]["sidecar.istio.io/status"]
        .as_str()
        .expect("status annotation");
    let status: Value = serde_json::from_str(status).expect("status JSON");
    assert_eq!(status["containers"].as_array().map(Vec::len), Some(n + 1));
}

#[test]
fn a_grpc_agent_pod_of_thousands_of_containers_injects_completely_in_linear_time() {
    let dir = TempDir::new("render-grpc-agent");
    let (small_pod, large_pod) = (grpc_agent_pod(500), grpc_agent_pod(2000));
    let (mut small, mut large) = (Duration::MAX, Duration::MAX);
    // Alternating, the fastest of each counts: the machine is shared.
    for _ in 0..2 {
        let (t, out) = kube_inject(&dir, &small_pod);
        check_injected(500, &out);
        small = small.min(t);
        let (t, out) = kube_inject(&dir, &large_pod);
        check_injected(2000, &out);
        large = large.min(t);
    }
    // /usr/bin/time reports hundredths of a second.
    let ratio = large.as_secs_f64() / small.as_secs_f64().max(0.01);
    assert!(
        ratio < 16.0,
        "500 containers took {small:?}, 2,000 took {large:?} (x{ratio:.1}): not linear"
    );
}
