//! The whole product on real nodes: a cluster with two nodes
//! (`scripts/cluster.sh up --nodes 2`), the project's images imported into both (`scripts/images.sh`),
//! `charts/sidecar-injector` installed with helm as a Deployment of two replicas behind its Service, and
//! `charts/istio-cni` as a DaemonSet; kubelets run the injected pods, `istio-init` runs our image, and
//! `testproxy` stands in for Envoy as `istio-proxy` (values `global.proxy.image`), counting what the
//! rules send it.
//!
//! The tests share one cluster (`Product::shared`): the first makes it and installs the default
//! revision (init-container mode); a scenario that needs other values installs a revision of its own
//! (`nft`, `cni`, `roll`), so that none changes what another relies on. The cluster goes down when the
//! last test holding it ends (or, if the process dies, through cluster.sh's owner watchdog). Each
//! scenario works in namespaces of its own.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use base64::Engine as _;
use e2e::product::{
    container, container_names, container_status, pod_ready, poll, Product, ProxyStats, ECHO_PORT,
    IMAGES, INJECTOR_NAMESPACE,
};
use serde_json::{json, Value};
use test_support::root::require_root_with;

static SHARED: Mutex<Weak<Product>> = Mutex::new(Weak::new());

/// The shared cluster with the default injector revision installed.
fn product() -> Arc<Product> {
    require_root_with(
        &["ctr", "nsenter", "tar", "curl", "containerd", "runc"],
        "scripts/test.sh installs them",
    );
    Product::shared(&SHARED, || {
        let p = Product::up(2, &IMAGES);
        p.install_injector("", &[])
            .unwrap_or_else(|e| panic!("helm install of the injector: {e:#}"));
        p
    })
}

/// The two nodes' names.
fn nodes(p: &Product) -> (String, String) {
    (
        p.cluster.nodes[0].name.clone(),
        p.cluster.nodes[1].name.clone(),
    )
}

fn name(pod: &Value) -> &str {
    pod["metadata"]["name"].as_str().unwrap()
}

fn pod_ip(pod: &Value) -> &str {
    pod["status"]["podIP"].as_str().unwrap()
}

/// Sends `n` requests from the client pod to `url`; each must be answered by `server` (the echo app
/// answers with its pod's name).
fn requests(p: &Product, ns: &str, client: &str, url: &str, n: u64, server: &str) {
    for i in 0..n {
        let body = p
            .get_from(ns, client, url)
            .unwrap_or_else(|e| panic!("request {i} to {url}: {e:#}"));
        assert_eq!(body.trim(), server, "request {i} to {url} answered by");
    }
}

/// The change of the counters from `before` to `after`: (inbound, outbound).
fn delta(before: &ProxyStats, after: &ProxyStats) -> (u64, u64) {
    (
        after.inbound - before.inbound,
        after.outbound - before.outbound,
    )
}

/// The capability sets runc was given for a container (its OCI spec in containerd), each sorted.
fn oci_capabilities(p: &Product, pod: &Value, container: &str) -> Value {
    let status = container_status(pod, container).unwrap();
    let info = p.container_info(pod, status).unwrap();
    let caps = info["Spec"]["process"]["capabilities"].clone();
    assert!(
        caps.is_object(),
        "no capabilities in the OCI spec: {info:#}"
    );
    caps
}

/// What a pod of init-container mode must show: `istio-init` from `init_image` (the image ID the
/// kubelet reports is the archive's), exited 0, with `NET_ADMIN` and `NET_RAW` only: in the pod spec and
/// in the OCI spec runc ran it with.
fn assert_istio_init(p: &Product, pod: &Value, init_image: &str) {
    let pod_name = name(pod);
    let init =
        container(pod, "istio-init").unwrap_or_else(|| panic!("no istio-init in {pod_name}"));
    assert_eq!(init["image"], p.images.reference(init_image), "{pod_name}");
    assert_eq!(
        init["securityContext"]["capabilities"],
        json!({"add": ["NET_ADMIN", "NET_RAW"], "drop": ["ALL"]}),
        "{pod_name}: {init:#}"
    );
    assert_ne!(init["securityContext"]["privileged"], true, "{init:#}");
    let status = container_status(pod, "istio-init").unwrap();
    let terminated = &status["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 0, "{pod_name}: {status:#}");
    assert_eq!(terminated["reason"], "Completed", "{status:#}");
    assert_eq!(
        status["imageID"].as_str().unwrap(),
        p.images.id(init_image).unwrap(),
        "{pod_name}: istio-init ran the built image: {status:#}"
    );
    let caps = oci_capabilities(p, pod, "istio-init");
    let both = json!(["CAP_NET_ADMIN", "CAP_NET_RAW"]);
    for set in ["bounding", "effective", "permitted"] {
        let mut got: Vec<String> = serde_json::from_value(caps[set].clone()).unwrap_or_default();
        got.sort();
        assert_eq!(
            json!(got),
            both,
            "{pod_name}: istio-init's {set} set: {caps:#}"
        );
    }
    for set in ["inheritable", "ambient"] {
        assert!(
            caps[set].as_array().is_none_or(|s| s.is_empty()),
            "{pod_name}: istio-init's {set} set: {caps:#}"
        );
    }
}

/// The scenario of init-container mode in namespace `ns` (already labelled for the revision under
/// test): an echo server on one node behind a Service, a client on the other; every request answered,
/// the client's proxy counts each as outbound to the Service, the server's as inbound to the app.
fn init_container_mode(p: &Product, ns: &str, init_image: &str) -> (Value, Value) {
    let (n1, n2) = nodes(p);
    let svc = p.service(ns, "echo", &[ECHO_PORT]).unwrap();
    let server = p
        .echo(ns, "echo", &[ECHO_PORT], json!({}), Some(&n1))
        .unwrap();
    let client = p.client(ns, "client", json!({}), Some(&n2)).unwrap();
    for pod in [&server, &client] {
        assert_istio_init(p, pod, init_image);
    }
    let (s0, c0) = (
        p.stats(ns, name(&server)).unwrap(),
        p.stats(ns, "client").unwrap(),
    );
    let n = 5;
    let url = format!("http://{svc}:{ECHO_PORT}/");
    requests(p, ns, "client", &url, n, name(&server));
    let (s1, c1) = (
        p.stats(ns, name(&server)).unwrap(),
        p.stats(ns, "client").unwrap(),
    );
    assert_eq!(delta(&c0, &c1), (0, n), "client proxy: {c0:?} -> {c1:?}");
    assert_eq!(delta(&s0, &s1), (n, 0), "server proxy: {s0:?} -> {s1:?}");
    let to_service = format!("{svc}:{ECHO_PORT}");
    assert!(c1.destinations.contains(&to_service), "{c1:?}");
    let to_app = format!("{}:{ECHO_PORT}", pod_ip(&server));
    assert!(s1.destinations.contains(&to_app), "{s1:?}");
    (server, client)
}

/// 5a: init-container mode, `iptables-init` from the Debian image.
#[test]
fn init_container_mode_intercepts_both_sides() {
    let p = product();
    let ns = "init-mode";
    p.namespace(ns, json!({"istio-injection": "enabled"}))
        .unwrap();
    let (server, _) = init_container_mode(&p, ns, "iptables-init");
    let init = container(&server, "istio-init").unwrap();
    assert!(
        !init["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--native-nftables")),
        "{init:#}"
    );
}

/// 5a again with `--native-nftables` (values `global.nativeNftables`) and the scratch image holding only
/// the static binary: a revision of its own.
#[test]
fn init_container_mode_with_native_nftables() {
    let p = product();
    let native = p.images.reference("iptables-init-native-nftables");
    p.install_injector(
        "nft",
        &[
            "--set",
            "global.nativeNftables=true",
            "--set",
            &format!("global.proxy_init.image={native}"),
        ],
    )
    .unwrap();
    let ns = "init-mode-nft";
    p.namespace(ns, json!({"istio.io/rev": "nft"})).unwrap();
    let (server, _) = init_container_mode(&p, ns, "iptables-init-native-nftables");
    let init = container(&server, "istio-init").unwrap();
    assert!(
        init["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--native-nftables")),
        "{init:#}"
    );
}

/// 5b: the traffic annotations reach the kernel. `excludeInboundPorts: "9090"` on the server: a request
/// to 9090 reaches the app with the server's proxy not seeing it, while 8080 still passes through it.
/// `excludeOutboundIPRanges: <Service IP>/32` on the client: a request to the Service bypasses the
/// client's proxy, while one to the server's pod address still passes through it.
#[test]
fn annotations_take_effect_in_the_kernel() {
    let p = product();
    let ns = "annotations";
    let (n1, n2) = nodes(&p);
    p.namespace(ns, json!({"istio-injection": "enabled"}))
        .unwrap();
    let svc = p.service(ns, "echo", &[ECHO_PORT, 9090]).unwrap();
    let server = p
        .echo(
            ns,
            "echo",
            &[ECHO_PORT, 9090],
            json!({"traffic.sidecar.istio.io/excludeInboundPorts": "9090"}),
            Some(&n1),
        )
        .unwrap();
    let client = p
        .client(
            ns,
            "client",
            json!({"traffic.sidecar.istio.io/excludeOutboundIPRanges": format!("{svc}/32")}),
            Some(&n2),
        )
        .unwrap();
    let init_args = |pod: &Value| container(pod, "istio-init").unwrap()["args"].clone();
    let args = init_args(&server);
    let d = args
        .as_array()
        .unwrap()
        .iter()
        .position(|a| a == "-d")
        .unwrap();
    assert!(
        args[d + 1]
            .as_str()
            .unwrap()
            .split(',')
            .any(|p| p == "9090"),
        "-d names 9090: {args}"
    );
    assert!(
        init_args(&client)
            .to_string()
            .contains(&format!("{svc}/32")),
        "{}",
        init_args(&client)
    );
    let (server_name, server_ip) = (name(&server), pod_ip(&server));
    let stats = || {
        (
            p.stats(ns, server_name).unwrap(),
            p.stats(ns, "client").unwrap(),
        )
    };
    let mut last = stats();
    let mut step = |url: String, server_in: u64, client_out: u64, why: &str| {
        requests(&p, ns, "client", &url, 2, server_name);
        let now = stats();
        assert_eq!(
            (delta(&last.0, &now.0).0, delta(&last.1, &now.1).1),
            (2 * server_in, 2 * client_out),
            "{why}: (server inbound, client outbound) for two requests to {url}: \
             server {:?} -> {:?}, client {:?} -> {:?}",
            last.0,
            now.0,
            last.1,
            now.1
        );
        last = now;
    };
    step(
        format!("http://{server_ip}:{ECHO_PORT}/"),
        1,
        1,
        "neither excluded: both proxies",
    );
    step(
        format!("http://{server_ip}:9090/"),
        0,
        1,
        "port 9090 excluded inbound on the server: only the client's proxy",
    );
    step(
        format!("http://{svc}:{ECHO_PORT}/"),
        1,
        0,
        "the Service's address excluded outbound on the client: only the server's proxy",
    );
    assert!(
        !last
            .1
            .destinations
            .iter()
            .any(|d| d.starts_with(&format!("{svc}:"))),
        "the client's proxy never saw the Service: {:?}",
        last.1
    );
}

/// 5c: CNI mode, its race repair, and a clean uninstall. The injector revision `cni` has
/// `cni.enabled=true`, so injected pods get `istio-validation` instead of `istio-init`. The echo pod is
/// created before the istio-cni chart is installed: nothing programs its namespace, its validation fails
/// (exit 126). Once the agent runs on every node (its entry chained into the node's CNI configuration),
/// repair (delete mode, the chart's default) deletes that pod and its Deployment's next one is set up
/// by the plugin; traffic is then intercepted on both sides as in init-container mode. `helm uninstall`
/// leaves every node's CNI configuration as it was before the install.
#[test]
fn cni_mode_repairs_the_race_and_uninstalls_cleanly() {
    let p = product();
    let (n1, n2) = nodes(&p);
    let before = p.cni_confs().unwrap();
    for (node, files) in p.cluster.nodes.iter().zip(&before) {
        assert!(
            files.values().all(|c| !c.contains("istio-cni")),
            "{}: istio-cni before the install: {files:#?}",
            node.name
        );
    }
    p.install_injector("cni", &["--set", "cni.enabled=true"])
        .unwrap();
    let ns = "cni-mode";
    p.namespace(ns, json!({"istio.io/rev": "cni"})).unwrap();
    let svc = p.service(ns, "echo", &[ECHO_PORT]).unwrap();

    // The race: the echo pod starts while no agent runs.
    let mut args = vec!["echo".to_string()];
    args.extend(["--port".to_string(), ECHO_PORT.to_string()]);
    let spec = p.testproxy_spec(&args, &[ECHO_PORT], Some(&n1));
    p.create(
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        &json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "echo", "namespace": ns},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "echo"}},
                "template": {"metadata": {"labels": {"app": "echo"}}, "spec": spec},
            },
        }),
    )
    .unwrap();
    let list = format!("/api/v1/namespaces/{ns}/pods?labelSelector=app%3Decho");
    let broken = poll("the echo pod's istio-validation fails (no rules)", || {
        let pods = p.get(&list)?;
        for pod in pods["items"].as_array().into_iter().flatten() {
            if let Some(s) = container_status(pod, "istio-validation") {
                let code = |state: &Value| state["terminated"]["exitCode"].as_i64();
                if code(&s["state"]) == Some(126) || code(&s["lastState"]) == Some(126) {
                    return Ok(pod.clone());
                }
            }
        }
        anyhow::bail!("{pods}")
    })
    .unwrap();
    assert!(container(&broken, "istio-init").is_none(), "{broken:#}");

    p.install_cni(&[]).unwrap();
    let installed = p.cni_confs().unwrap();
    for (node, files) in p.cluster.nodes.iter().zip(&installed) {
        assert!(
            files.values().any(|c| c.contains("\"istio-cni\"")),
            "{}: the agent chained the plugin: {files:#?}",
            node.name
        );
        assert!(
            node.cni_bin_dir.join("istio-cni").exists(),
            "{}: the plugin binary in /opt/cni/bin",
            node.name
        );
    }

    // Repair: the broken pod goes, the Deployment's next pod runs with the plugin's rules.
    let broken_path = format!("/api/v1/namespaces/{ns}/pods/{}", name(&broken));
    poll("repair deletes the broken pod", || {
        let (status, pod) = p.api("GET", &broken_path, None)?;
        if status == hyper::StatusCode::NOT_FOUND || !pod["metadata"]["deletionTimestamp"].is_null()
        {
            Ok(())
        } else {
            anyhow::bail!("{}", pod["status"])
        }
    })
    .unwrap();
    let server = p.wait_ready_pod(ns, "app=echo").unwrap();
    assert_ne!(name(&server), name(&broken));
    let client = p.client(ns, "client", json!({}), Some(&n2)).unwrap();
    for pod in [&server, &client] {
        let (inits, _) = container_names(pod);
        assert!(!inits.contains(&"istio-init".to_string()), "{inits:?}");
        assert_eq!(
            inits.first().map(String::as_str),
            Some("istio-validation"),
            "{inits:?}"
        );
        let v = container(pod, "istio-validation").unwrap();
        assert_eq!(
            v["securityContext"]["capabilities"],
            json!({"drop": ["ALL"]}),
            "istio-validation holds no capability: {v:#}"
        );
        let status = container_status(pod, "istio-validation").unwrap();
        assert_eq!(status["state"]["terminated"]["exitCode"], 0, "{status:#}");
    }
    let (s0, c0) = (
        p.stats(ns, name(&server)).unwrap(),
        p.stats(ns, "client").unwrap(),
    );
    let n = 5;
    requests(
        &p,
        ns,
        "client",
        &format!("http://{svc}:{ECHO_PORT}/"),
        n,
        name(&server),
    );
    let (s1, c1) = (
        p.stats(ns, name(&server)).unwrap(),
        p.stats(ns, "client").unwrap(),
    );
    assert_eq!(delta(&c0, &c1), (0, n), "client proxy: {c0:?} -> {c1:?}");
    assert_eq!(delta(&s0, &s1), (n, 0), "server proxy: {s0:?} -> {s1:?}");

    // Uninstall: every node's CNI configuration as before, the plugin binary gone. The agent writes the
    // file back as indented JSON without its entry (as Istio's install-cni does), so the files are
    // compared as JSON documents: the same files, keys, order and values.
    p.cluster
        .helm()
        .run(&[
            "uninstall",
            "istio-cni",
            "--namespace",
            "istio-system",
            "--wait",
        ])
        .unwrap();
    // Compact JSON text, keys in the file's order (serde_json's preserve_order).
    let parsed = |confs: Vec<BTreeMap<String, String>>| -> Vec<BTreeMap<String, String>> {
        confs
            .into_iter()
            .map(|files| {
                files
                    .into_iter()
                    .map(|(f, text)| match serde_json::from_str::<Value>(&text) {
                        Ok(v) => (f, v.to_string()),
                        Err(_) => (f, text),
                    })
                    .collect()
            })
            .collect()
    };
    let before = parsed(before);
    poll("the nodes' CNI configuration restored", || {
        let now = parsed(p.cni_confs()?);
        let bins: Vec<bool> = p
            .cluster
            .nodes
            .iter()
            .map(|n| n.cni_bin_dir.join("istio-cni").exists())
            .collect();
        if now == before && bins.iter().all(|b| !b) {
            Ok(())
        } else {
            anyhow::bail!("now {now:#?}, before {before:#?}, binaries left {bins:?}")
        }
    })
    .unwrap();
}

/// 5d: native sidecars. The 1.36 kubelets make `--native-sidecars=auto` (the chart's default) resolve to
/// on: `istio-proxy` is an init container with `restartPolicy: Always`, containerd created it after
/// `istio-init` and before the app, and the pod is Ready.
#[test]
fn native_sidecars_start_the_proxy_before_the_app() {
    let p = product();
    let ns = "native-sidecars";
    p.namespace(ns, json!({"istio-injection": "enabled"}))
        .unwrap();
    let deployment = p
        .get(&format!(
            "/apis/apps/v1/namespaces/{INJECTOR_NAMESPACE}/deployments/sidecar-injector"
        ))
        .unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(
        args.as_array()
            .unwrap()
            .contains(&json!("--native-sidecars=auto")),
        "{args}"
    );
    let pod = p.client(ns, "app", json!({}), None).unwrap();
    let (inits, containers) = container_names(&pod);
    assert_eq!(inits, ["istio-init", "istio-proxy"], "{pod:#}");
    assert_eq!(containers, ["app"], "{pod:#}");
    let proxy = container(&pod, "istio-proxy").unwrap();
    assert_eq!(proxy["restartPolicy"], "Always", "{proxy:#}");
    assert!(proxy["startupProbe"].is_object(), "{proxy:#}");
    let status = container_status(&pod, "istio-proxy").unwrap();
    assert_eq!(status["started"], true, "{status:#}");
    assert_eq!(status["ready"], true, "{status:#}");
    assert!(status["state"]["running"].is_object(), "{status:#}");
    // containerd's creation times (nanoseconds; the kubelet's startedAt has seconds only).
    let created = |c: &str| -> String {
        let info = p
            .container_info(&pod, container_status(&pod, c).unwrap())
            .unwrap();
        info["CreatedAt"].as_str().unwrap().to_string()
    };
    let times = ["istio-init", "istio-proxy", "app"].map(created);
    let parsed: Vec<(i64, u32)> = times.iter().map(|t| rfc3339_nanos(t)).collect();
    assert!(
        parsed[0] < parsed[1] && parsed[1] < parsed[2],
        "created in the order istio-init, istio-proxy, app: {times:?}"
    );
}

/// RFC 3339 time (`2026-01-02T03:04:05.123456789Z`) as (seconds of the day and date folded, nanos), for
/// ordering times of the same clock.
fn rfc3339_nanos(t: &str) -> (i64, u32) {
    let (date_time, frac) = t.trim_end_matches('Z').split_once('.').unwrap_or((t, "0"));
    let digits: String = date_time.chars().filter(char::is_ascii_digit).collect();
    let nanos: u32 = format!("{frac:0<9}")[..9].parse().unwrap();
    (digits.parse().unwrap(), nanos)
}

/// 5e: no pod creation lost during a rollout of the injector. A client creates pods at a steady rate in
/// a namespace of revision `roll` (`failurePolicy: Fail`) while `kubectl rollout restart` replaces both
/// replicas; it goes on until both old replicas are gone and at least 300 pods were created. Every
/// create is accepted and every pod comes back injected. The pods carry a scheduling gate, so no node
/// runs them: the creates are the point.
#[test]
fn no_pod_creation_lost_during_an_injector_rollout() {
    let p = product();
    // 300 creates through the webhook and a rollout of two replicas load both cores: the tests with
    // one-second bounds (`e2e::load::timed`) wait until it is over. Taken once the shared product is
    // had, so this test never waits for the cluster while holding the lock; from here on it waits only
    // on the cluster's processes, never on another test, so a timed test waiting here cannot deadlock.
    let _alone = e2e::load::alone();
    let release = p.install_injector("roll", &[]).unwrap();
    let ns = "rollout";
    p.namespace(ns, json!({"istio.io/rev": "roll"})).unwrap();
    let pdb = p
        .get(&format!(
            "/apis/policy/v1/namespaces/{INJECTOR_NAMESPACE}/poddisruptionbudgets/{}",
            release.name
        ))
        .unwrap();
    assert_eq!(pdb["spec"]["minAvailable"], 1, "{pdb:#}");
    let old: BTreeSet<String> = p.wait_injector(&release).unwrap().into_iter().collect();

    let created = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "p-", "namespace": ns},
        "spec": {
            "schedulingGates": [{"name": "e2e.sidecar-inject.io/never"}],
            "containers": [{"name": "app", "image": p.images.reference("testproxy"),
                            "args": ["echo", "--port", "8080"]}],
        },
    });
    const MIN_CREATES: usize = 300;
    let creator = {
        let (p, created, stop) = (p.clone(), created.clone(), stop.clone());
        std::thread::spawn(move || {
            p.block_on(async {
                let path = format!("/api/v1/namespaces/{ns}/pods");
                let mut conn = p.cluster.connect().await.unwrap();
                // 10 creates a second, steadily (a slow create delays the next, it never bunches up).
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut failures = Vec::new();
                let mut count = 0;
                while !(stop.load(Ordering::SeqCst) && count >= MIN_CREATES) {
                    tick.tick().await;
                    let answer = conn.request("POST", &path, Some(&pod)).await;
                    count += 1;
                    created.store(count, Ordering::SeqCst);
                    match answer {
                        Ok((status, body)) if status == hyper::StatusCode::CREATED => {
                            let injected = container(&body, "istio-proxy").is_some()
                                && !body["metadata"]["annotations"]["sidecar.istio.io/status"]
                                    .is_null();
                            if !injected {
                                failures.push(format!("create {count}: not injected: {body}"));
                            }
                        }
                        Ok((status, body)) => {
                            failures.push(format!("create {count}: {status}: {body}"))
                        }
                        Err(e) => {
                            failures.push(format!("create {count}: {e:#}"));
                            conn = p.cluster.connect().await.unwrap();
                        }
                    }
                }
                (count, failures)
            })
        })
    };

    let wait_creates = |n: usize| {
        poll(&format!("{n} creates"), || {
            let c = created.load(Ordering::SeqCst);
            if c >= n {
                Ok(c)
            } else {
                anyhow::bail!("{c} created")
            }
        })
        .unwrap()
    };
    wait_creates(30);
    let restart_at = created.load(Ordering::SeqCst);
    let started = Instant::now();
    p.kubectl(&[
        "rollout",
        "restart",
        "-n",
        INJECTOR_NAMESPACE,
        &format!("deployment/{}", release.name),
    ])
    .unwrap();
    // Rolled out: both replicas new and ready (with their caBundle records), and no old pod left at all
    // (its graceful shutdown over).
    let selector = format!(
        "/api/v1/namespaces/{INJECTOR_NAMESPACE}/pods?labelSelector=istio.io/rev%3D{}",
        release.revision
    );
    poll("the rollout replaced both replicas", || {
        let new: BTreeSet<String> = p.wait_injector(&release)?.into_iter().collect();
        let pods = p.get(&selector)?;
        let all: BTreeSet<String> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| name(p).to_string())
            .collect();
        if new.is_disjoint(&old) && all == new {
            Ok(())
        } else {
            anyhow::bail!("old {old:?}, new ready {new:?}, all {all:?}")
        }
    })
    .unwrap();
    let rolled_at = created.load(Ordering::SeqCst);
    let rollout = started.elapsed();
    wait_creates(rolled_at + 30);
    stop.store(true, Ordering::SeqCst);
    let (count, failures) = creator.join().unwrap();
    assert!(count >= MIN_CREATES, "{count} creates");
    assert!(
        failures.is_empty(),
        "{} of {count} creates failed or were not injected (rollout from create {restart_at} to \
         {rolled_at}, {rollout:?}):\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "rollout: {count} creates, all injected; the rollout ran from create {restart_at} to {rolled_at} ({rollout:?})"
    );
    let _ = p.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}

/// 5f: ServiceAccount admission on (a real cluster's admission chain): a pod that names no service
/// account gets `default` and its token volume before the injector sees it; the injected projected
/// `istio-token` volume is accepted, mounted into `istio-proxy`, and the pod runs.
#[test]
fn service_account_admission_on() {
    let p = product();
    let ns = "service-accounts";
    p.namespace(ns, json!({"istio-injection": "enabled"}))
        .unwrap();
    let pod = p.client(ns, "no-account", json!({}), None).unwrap();
    assert_eq!(pod["spec"]["serviceAccountName"], "default", "{pod:#}");
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    let token = volumes
        .iter()
        .find(|v| v["name"] == "istio-token")
        .unwrap_or_else(|| panic!("no istio-token volume: {volumes:#?}"));
    assert_eq!(
        token["projected"]["sources"][0]["serviceAccountToken"]["audience"], "istio-ca",
        "{token:#}"
    );
    assert!(
        volumes.iter().any(|v| v["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"))),
        "ServiceAccount admission's token volume: {volumes:#?}"
    );
    let proxy = container(&pod, "istio-proxy").unwrap();
    assert!(
        proxy["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "istio-token"),
        "{proxy:#}"
    );
    assert!(pod_ready(&pod));
}

/// Item 3: the injector as its chart installs it. Two replicas of the Deployment, ready, spread by the
/// scheduler, running `--in-cluster` as the chart's ServiceAccount; a PodDisruptionBudget that allows
/// one disruption; the Service's EndpointSlice lists both, and each serves TLS on 15017 that the CA in
/// the webhook configuration verifies for `sidecar-injector.sidecar-injector.svc`; the apiserver calls
/// it through that Service (a dry-run create comes back injected). The replicas keep their own
/// caBundle: each has its record in the configuration, and a CA that no replica serves with, added by
/// hand, is taken out again.
#[test]
fn the_injector_runs_as_its_chart_installs_it() {
    let p = product();
    let release = e2e::product::InjectorRelease {
        name: "sidecar-injector".into(),
        revision: "default".into(),
    };
    let ready = p.wait_injector(&release).unwrap();
    assert_eq!(ready.len(), 2, "{ready:?}");
    let pods = p
        .get(&format!(
            "/api/v1/namespaces/{INJECTOR_NAMESPACE}/pods?labelSelector=istio.io/rev%3Ddefault"
        ))
        .unwrap();
    let pods: Vec<Value> = pods["items"].as_array().unwrap().clone();
    let ca = p.certs_of("sidecar-injector").join("ca.crt");
    for pod in &pods {
        let spec = &pod["spec"];
        assert_eq!(spec["serviceAccountName"], "sidecar-injector");
        let c = &spec["containers"][0];
        assert_eq!(c["image"], p.images.reference("injector"));
        assert!(
            c["args"]
                .as_array()
                .unwrap()
                .contains(&json!("--in-cluster")),
            "{c:#}"
        );
        // TLS from each replica, verified as the apiserver verifies it.
        let ip = pod_ip(pod);
        let host = "sidecar-injector.sidecar-injector.svc";
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "20", "--cacert"])
            .arg(&ca)
            .args(["--resolve", &format!("{host}:15017:{ip}")])
            .arg(format!("https://{host}:15017/readyz"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            name(pod),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "injector replicas on nodes {:?}",
        pods.iter()
            .map(|p| &p["spec"]["nodeName"])
            .collect::<Vec<_>>()
    );
    let pdb = p
        .get(&format!(
            "/apis/policy/v1/namespaces/{INJECTOR_NAMESPACE}/poddisruptionbudgets/sidecar-injector"
        ))
        .unwrap();
    poll("the PodDisruptionBudget allows one disruption", || {
        let pdb = p.get(&format!(
            "/apis/policy/v1/namespaces/{INJECTOR_NAMESPACE}/poddisruptionbudgets/sidecar-injector"
        ))?;
        let s = &pdb["status"];
        if s["currentHealthy"] == 2 && s["disruptionsAllowed"] == 1 {
            Ok(())
        } else {
            anyhow::bail!("{s}")
        }
    })
    .unwrap();
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    let slices = p
        .get(&format!(
            "/apis/discovery.k8s.io/v1/namespaces/{INJECTOR_NAMESPACE}/endpointslices?labelSelector=kubernetes.io/service-name%3Dsidecar-injector"
        ))
        .unwrap();
    let endpoints: BTreeSet<String> = slices["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] == true)
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let ips: BTreeSet<String> = pods.iter().map(|p| pod_ip(p).to_string()).collect();
    assert_eq!(endpoints, ips, "{slices:#}");

    // Through the Service: a dry-run create in a labelled namespace comes back injected.
    let ns = "chart-check";
    p.namespace(ns, json!({"istio-injection": "enabled"}))
        .unwrap();
    let spec = p.testproxy_spec(&["echo".into(), "--port".into(), "8080".into()], &[], None);
    let answer = p
        .create(
            &format!("/api/v1/namespaces/{ns}/pods?dryRun=All"),
            &json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "dry", "namespace": ns}, "spec": spec}),
        )
        .unwrap();
    assert!(container(&answer, "istio-proxy").is_some(), "{answer:#}");

    // The caBundle: our CA, one record per replica; an extra CA added by hand is pruned again.
    let mwc_path =
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/sidecar-injector";
    let pem = std::fs::read_to_string(&ca).unwrap();
    let bundle_of = |mwc: &Value| -> Vec<String> {
        mwc["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                let b = base64::engine::general_purpose::STANDARD
                    .decode(w["clientConfig"]["caBundle"].as_str().unwrap())
                    .unwrap();
                String::from_utf8(b).unwrap()
            })
            .collect()
    };
    let mwc = p.get(mwc_path).unwrap();
    for b in bundle_of(&mwc) {
        assert_eq!(b.trim(), pem.trim(), "caBundle is the release's CA");
    }
    let stranger = e2e::apiserver::TempDir::new("stranger-ca");
    e2e::apiserver::injector_certs(stranger.path(), &[]).unwrap();
    let other = std::fs::read_to_string(stranger.path().join("ca.crt")).unwrap();
    let both = base64::engine::general_purpose::STANDARD.encode(format!("{pem}{other}"));
    let patch: Vec<Value> = (0..mwc["webhooks"].as_array().unwrap().len())
        .map(|i| json!({"op": "replace", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": both}))
        .collect();
    p.kubectl(&[
        "patch",
        "mutatingwebhookconfiguration",
        "sidecar-injector",
        "--type=json",
        "-p",
        &serde_json::to_string(&patch).unwrap(),
    ])
    .unwrap();
    poll("the replicas prune the CA no replica serves with", || {
        let mwc = p.get(mwc_path)?;
        let bundles = bundle_of(&mwc);
        if bundles.iter().all(|b| b.trim() == pem.trim()) {
            Ok(())
        } else {
            anyhow::bail!(
                "{} bundles, one of {} bytes",
                bundles.len(),
                bundles[0].len()
            )
        }
    })
    .unwrap();
}

/// A wait that fails carries why: the report names a container that exited, with its exit code and the
/// last lines it wrote, and a container whose image is not on the node (a CI log shows only the message).
#[test]
fn a_failed_wait_says_why_the_pod_is_not_ready() {
    let p = product();
    let ns = "diagnosis";
    p.namespace(ns, json!({})).unwrap();
    let mut exits = p.testproxy_spec(&["--no-such-flag".into()], &[], None);
    exits["restartPolicy"] = json!("Never");
    let mut missing = p.testproxy_spec(&[], &[], None);
    missing["containers"][0]["image"] = json!("localhost/sidecar-inject/not-built:dev");
    missing["containers"][0]["imagePullPolicy"] = json!("Never");
    for (name, spec) in [("exits", exits), ("missing", missing)] {
        p.create(
            &format!("/api/v1/namespaces/{ns}/pods"),
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}),
        )
        .unwrap();
    }
    p.wait_pod(ns, "exits", |pod| pod["status"]["phase"] == "Failed")
        .unwrap();
    p.wait_pod(ns, "missing", |pod| {
        container_status(pod, "app")
            .is_some_and(|c| c["state"]["waiting"]["reason"] == "ErrImageNeverPull")
    })
    .unwrap();
    let exits = e2e::diagnosis::pod(&p, ns, "exits");
    assert!(exits.contains("terminated Error (exit 2)"), "{exits}");
    assert!(
        exits.contains("unexpected argument '--no-such-flag'"),
        "{exits}"
    );
    let missing = e2e::diagnosis::pod(&p, ns, "missing");
    assert!(
        missing.contains("now waiting ErrImageNeverPull"),
        "{missing}"
    );
    assert!(
        missing.contains("ErrImageNeverPull Pod/missing"),
        "{missing}"
    );
}

/// The test nodes never evict: the disk and memory a kubelet measures are the host's, which the builds
/// beside the tests fill, and a kubelet with thresholds put both nodes under DiskPressure on a host with
/// 2.3 GB free, evicting the injector's pods (scripts/cluster.sh `start_node`).
#[test]
fn the_nodes_never_evict_for_the_hosts_disk_or_memory() {
    let p = product();
    for node in &p.cluster.nodes {
        let config = p
            .get(&format!("/api/v1/nodes/{}/proxy/configz", node.name))
            .unwrap();
        let hard = &config["kubeletconfig"]["evictionHard"];
        let thresholds = hard.as_object().unwrap();
        for signal in [
            "memory.available",
            "nodefs.available",
            "nodefs.inodesFree",
            "imagefs.available",
            "imagefs.inodesFree",
        ] {
            assert_eq!(
                thresholds.get(signal),
                Some(&json!("0%")),
                "{}: {hard}",
                node.name
            );
        }
        let n = p.get(&format!("/api/v1/nodes/{}", node.name)).unwrap();
        for c in n["status"]["conditions"].as_array().unwrap() {
            if c["type"] != "Ready" {
                assert_eq!(c["status"], "False", "{}: {c}", node.name);
            }
        }
    }
}
