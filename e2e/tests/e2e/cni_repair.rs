//! `istio-cni install`'s race repair against a real kube-apiserver. There is no kubelet: pods are
//! created bound to a node (`spec.nodeName`) and their init container's status is written through the
//! status subresource, as a kubelet would after `istio-validation` failed with exit code 126.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use e2e::cluster::{wait_for, Cluster};
use e2e::cni_agent::{metric, sidecar_pod, validation_exited, Agent, NodeDirs};
use e2e::PATIENCE;
use serde_json::Value;

const NS: &str = "apps";

/// A sidecar pod of [`NS`] bound to `node`.
fn pod(cluster: &Cluster, name: &str, node: &str) {
    sidecar_pod(cluster, NS, name, node).unwrap();
}

/// Its `istio-validation` terminated with `code`.
fn init_exited(cluster: &Cluster, name: &str, code: i32) {
    validation_exited(cluster, NS, name, code).unwrap();
}

fn get(cluster: &Cluster, name: &str) -> Value {
    cluster
        .kubectl_json(&["get", "pod", name, "-n", NS], None)
        .unwrap()
}

fn setup() -> (Cluster, NodeDirs) {
    let cluster = Cluster::up();
    let dirs = NodeDirs::new(&cluster, "istio-system", "istio-cni").unwrap();
    std::fs::write(
        dirs.conf.join("10-bridge.conflist"),
        r#"{"cniVersion":"1.0.0","name":"k8s","plugins":[{"type":"bridge","ipam":{"type":"host-local"}}]}"#,
    )
    .unwrap();
    cluster.namespace(NS, &Default::default()).unwrap();
    (cluster, dirs)
}

fn repaired(agent: &Agent, labels: &str) -> Option<f64> {
    let (_, text) = agent.get("/metrics").ok()?;
    metric(
        &text,
        &format!("istio_cni_repair_pods_repaired_total{{{labels}}}"),
    )
}

/// Waits until pod `name` is deleted: bound to a node, a deleted pod waits for its kubelet, so its
/// deletionTimestamp is the apiserver's record.
fn wait_deleted(cluster: &Cluster, agent: &Agent, name: &str) {
    wait_for(&format!("{name} deleted"), PATIENCE, || {
        match get(cluster, name)["metadata"]["deletionTimestamp"].as_str() {
            Some(_) => Ok(()),
            None => Err(agent.stderr()),
        }
    });
}

/// Waits until the agent counts `n` successful deletions.
fn wait_deletions_counted(agent: &Agent, n: u32) {
    wait_for(
        &format!("{n} deletions counted"),
        PATIENCE,
        || match repaired(agent, "type=\"delete\",result=\"success\"") {
            Some(c) if c == f64::from(n) => Ok(()),
            other => Err(other),
        },
    );
}

#[test]
fn a_broken_pod_of_this_node_is_deleted_and_others_are_left() {
    let (cluster, dirs) = setup();
    // Broken before the agent starts (seen in the initial list) and after (seen as a watch event).
    pod(&cluster, "broken-early", "node-r");
    init_exited(&cluster, "broken-early", 126);
    let agent = Agent::start(&cluster, &dirs, "node-r", &[]).unwrap();
    for (name, node) in [
        ("broken-late", "node-r"),
        ("fine", "node-r"),
        ("elsewhere", "node-x"),
    ] {
        pod(&cluster, name, node);
    }
    init_exited(&cluster, "broken-late", 126);
    init_exited(&cluster, "fine", 0);
    init_exited(&cluster, "elsewhere", 126);
    // Bound to a node, a deleted pod waits for its kubelet: deletionTimestamp is the apiserver's record.
    for name in ["broken-early", "broken-late"] {
        wait_deleted(&cluster, &agent, name);
    }
    wait_deletions_counted(&agent, 2);
    // The terminating pods are not deleted again on their next events, and the others are left. The
    // agent handles its watch's events in order, so once a pod broken after that event is deleted, the
    // event has been seen: the count then tells whether it caused a second deletion.
    init_exited(&cluster, "broken-late", 126);
    pod(&cluster, "marker", "node-r");
    init_exited(&cluster, "marker", 126);
    wait_deleted(&cluster, &agent, "marker");
    wait_deletions_counted(&agent, 3);
    assert_eq!(
        repaired(&agent, "type=\"delete\",result=\"success\""),
        Some(3.0)
    );
    assert_eq!(repaired(&agent, "type=\"delete\",result=\"fail\""), None);
    for name in ["fine", "elsewhere"] {
        assert!(
            get(&cluster, name)["metadata"]["deletionTimestamp"].is_null(),
            "{name}"
        );
    }
}

#[test]
fn in_label_mode_a_broken_pod_is_labelled_once() {
    let (cluster, dirs) = setup();
    let agent = Agent::start(
        &cluster,
        &dirs,
        "node-r",
        &["--repair-delete-pods=false", "--repair-label-pods=true"],
    )
    .unwrap();
    pod(&cluster, "broken", "node-r");
    pod(&cluster, "fine", "node-r");
    init_exited(&cluster, "broken", 126);
    init_exited(&cluster, "fine", 0);
    wait_for("broken labelled", PATIENCE, || {
        match get(&cluster, "broken")["metadata"]["labels"]["cni.istio.io/uninitialized"].as_str() {
            Some("true") => Ok(()),
            _ => Err(agent.stderr()),
        }
    });
    wait_for("1 label counted", PATIENCE, || {
        match repaired(&agent, "type=\"label\",result=\"success\"") {
            Some(1.0) => Ok(()),
            other => Err(other),
        }
    });
    let broken = get(&cluster, "broken");
    assert!(broken["metadata"]["deletionTimestamp"].is_null());
    assert!(get(&cluster, "fine")["metadata"]["labels"].is_null());
}
