//! istio-cni, the chained CNI plugin, run as a container runtime runs it: the CNI project's
//! `cnitool` with a conflist of the reference `bridge` + `host-local` plugins and `istio-cni`, into
//! network namespaces of the test, the pods read from a real kube-apiserver. Istio's own `istio-cni`,
//! built from its module, is the reference for the kernel state.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::cluster::Cluster;
use e2e::cni::{has_rules, kernel_state, peer_on_bridge, Node, Plugin};
use e2e::netns::{NetNs, MASK_NETFILTER_TOOLS as MASKED};
use e2e::nettool::{client, Listener, APP_UID, PROXY_UID};
use serde_json::{json, Value};
use test_support::corpus::{self, Config};
use test_support::pods;
use test_support::tempdir::TempDir;

use crate::kube_apiserver::{create, fill_as_a_cluster_does, kube_inject_with};

/// The values that turn the injector's CNI mode on (`istio-validation` instead of `istio-init`).
fn cni_values() -> Value {
    json!({"pilot": {"cni": {"enabled": true}}})
}

/// `pod` injected in CNI mode with the test environment's configuration (plus `values`), named `name`.
fn injected_pod(dir: &TempDir, pod: &Value, name: &str, values: &Value) -> Value {
    let mut merged = cni_values();
    corpus::merge(&mut merged, values);
    let cfg = Config::with(&merged, &Value::Null, &Value::Null)
        .and_then(|c| c.write(&dir.path().join(name)))
        .expect("configuration");
    let mut out = kube_inject_with(dir.path(), &cfg, &[], &BTreeMap::new(), pod);
    fill_as_a_cluster_does(&mut out, name);
    out
}

/// A plain pod with one application container listening on 8080.
fn app_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [{"name": "app", "image": "example/app:1", "ports": [{"containerPort": 8080}]}]}
    })
}

/// The args of the injected `istio-validation` container.
fn validation_args(pod: &Value) -> Vec<String> {
    pods::container(pod, "istio-validation")
        .and_then(|c| c["args"].as_array())
        .expect("istio-validation args")
        .iter()
        .map(|a| a.as_str().unwrap_or_default().to_string())
        .collect()
}

/// Runs the injected `istio-validation` container's command in `ns`, as its uid (1337), and returns the
/// exit status.
fn validate(ns: &NetNs, pod: &Value) -> (Option<i32>, String) {
    let args = validation_args(pod);
    let u = PROXY_UID.to_string();
    let out = ns
        .command("setpriv")
        .args(["--reuid", &u, "--regid", &u, "--clear-groups"])
        .arg(e2e::bin("iptables-init"))
        // args[0] is `istio-iptables`, the program name in the image.
        .args(&args[1..])
        .arg("--probe-timeout=2s")
        .stdin(Stdio::null())
        .output()
        .expect("validation run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The pod's first address in a CNI result.
fn result_ip(result: &Value) -> String {
    let cidr = result["ips"][0]["address"]
        .as_str()
        .unwrap_or_else(|| panic!("no address in {result}"));
    cidr.split('/').next().unwrap_or_default().to_string()
}

/// Where a connection landed: the listener's first event.
fn connect(from: &NetNs, uid: Option<u32>, target: &str, listener: Listener) -> String {
    let (code, line) = client(from, uid, &["connect-tcp", target]);
    assert_eq!(code, 0, "{target}: {line}");
    listener.event()
}

/// `state` without the lines of chain `chain`, and that chain's rules, sorted.
fn split_chain(state: &[String], chain: &str) -> (Vec<String>, Vec<String>) {
    let (mut of, rest): (Vec<String>, Vec<String>) = state
        .iter()
        .cloned()
        .partition(|l| l.contains(&format!(" {chain}: ")));
    let mut rules: Vec<String> = of
        .drain(..)
        .flat_map(|l| {
            l.split_once(": ")
                .map(|(_, r)| r.split(" | ").map(str::to_string).collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .collect();
    rules.sort();
    (rest, rules)
}

#[test]
fn add_programs_an_injected_pod_as_its_istio_init_would_and_traffic_is_intercepted() {
    test_support::require_root();
    let (_cluster, _dir, pod, node) = with_web_pod("cni-add", &json!({}));

    let ns = NetNs::new("cni-web").expect("netns");
    let result = node.add_ok(Plugin::Ours, &ns, "default", "web");
    // prevResult, the bridge's result, is passed on: the pod's address from host-local.
    let pod_ip = result_ip(&result);
    assert!(pod_ip.starts_with(&node.subnet), "{result}");
    assert_eq!(result["cniVersion"], "1.0.0", "{result}");
    let state = kernel_state(&ns);
    assert!(has_rules(&state), "no rules: {state:#?}");

    // The same rules as iptables-init with the injected arguments (istio-validation's, which are
    // istio-init's, without the validation flags), but for what Istio's NewRedirect does in CNI mode and
    // the injected arguments do not: outbound 15020 is excluded by default, and Istio's own inbound ports
    // come after the pod's, so ISTIO_INBOUND holds the same rules in another order.
    // The reference namespace has the pod's address too, so both detect the same (IPv4-only) host.
    let reference = NetNs::new("cni-web-ref").expect("netns");
    for argv in [
        &[
            "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
        ][..],
        &["ip", "addr", "add", &format!("{pod_ip}/16"), "dev", "eth0"],
        &["ip", "link", "set", "eth0", "up"],
    ] {
        reference.run(argv).expect("reference address");
    }
    let mut args: Vec<String> = validation_args(&pod)
        .into_iter()
        .skip(1)
        .filter(|a| a != "--run-validation" && a != "--skip-rule-apply")
        .collect();
    args.extend(["-o".to_string(), "15020".to_string()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    e2e::iptables_init::init_ok(&reference, &refs);
    let (ours, ours_inbound) = split_chain(&state, "ISTIO_INBOUND");
    let (theirs, theirs_inbound) = split_chain(&kernel_state(&reference), "ISTIO_INBOUND");
    assert_eq!(ours, theirs, "kernel state against iptables-init {args:?}");
    assert_eq!(ours_inbound, theirs_inbound, "ISTIO_INBOUND as a set");

    // Real traffic through the bridge: the app's outbound lands on 15001, a peer's inbound on 15006.
    let peer = peer_on_bridge(&node, 9);
    let peer_ip = format!("{}.255.9", node.subnet);
    let proxy = Listener::start(&ns, &["listen-tcp", "0.0.0.0:15001"]);
    let ev = connect(&ns, Some(APP_UID), &format!("{peer_ip}:8080"), proxy);
    assert!(ev.contains(&format!("orig={peer_ip}:8080")), "{ev}");
    let inbound = Listener::start(&ns, &["listen-tcp", "0.0.0.0:15006"]);
    let ev = connect(&peer, None, &format!("{pod_ip}:8080"), inbound);
    assert!(
        ev.starts_with(&format!("ACCEPTED peer={peer_ip}:"))
            && ev.contains(&format!("orig={pod_ip}:8080")),
        "{ev}"
    );

    // The injected istio-validation container passes in the programmed namespace.
    let (code, err) = validate(&ns, &pod);
    assert_eq!(code, Some(0), "validation after ADD: {err}");

    // CHECK and DEL succeed (Istio's CmdCheck and CmdDelete do nothing); a second DEL too, as the spec
    // requires of a DEL for something already gone.
    for cmd in ["check", "del", "del"] {
        let out = node.cnitool(Plugin::Ours, cmd, &ns, "default", "web");
        assert!(
            out.status.success(),
            "cnitool {cmd}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The log went to the run dir for the node agent to follow.
    assert!(
        node.plugin_log().contains("programmed"),
        "{}",
        node.plugin_log()
    );
}

#[test]
fn excluded_and_uninjected_pods_get_no_rules_and_their_validation_fails_with_126() {
    test_support::require_root();
    let cluster = Cluster::up();
    let dir = TempDir::new("cni-skip");
    cluster
        .kubectl(&["create", "namespace", "excluded"], None)
        .expect("namespace");
    let injected = injected_pod(&dir, &app_pod("in-excluded"), "in-excluded", &Value::Null);
    create(&cluster, "excluded", &injected, &[]).expect("pod");
    let mut plain = app_pod("plain");
    fill_as_a_cluster_does(&mut plain, "plain");
    create(&cluster, "default", &plain, &[]).expect("pod");
    let mut disabled = injected_pod(&dir, &app_pod("disabled"), "disabled", &Value::Null);
    disabled["metadata"]["labels"]["sidecar.istio.io/inject"] = json!("false");
    create(&cluster, "default", &disabled, &[]).expect("pod");
    let node = Node::new(
        &cluster.kubeconfig,
        &json!({"exclude_namespaces": ["excluded"]}),
    );

    for (namespace, name) in [
        ("excluded", "in-excluded"),
        ("default", "plain"),
        ("default", "disabled"),
    ] {
        let ns = NetNs::new("cni-skip").expect("netns");
        let result = node.add_ok(Plugin::Ours, &ns, namespace, name);
        assert!(result_ip(&result).starts_with(&node.subnet), "{result}");
        let state = kernel_state(&ns);
        assert!(
            !has_rules(&state),
            "{namespace}/{name} got rules: {state:#?}"
        );
        if name == "in-excluded" {
            // The pod's istio-validation finds no interception: Istio's 126, which the repair acts on.
            let start = Instant::now();
            let (code, err) = validate(&ns, &injected);
            assert_eq!(code, Some(126), "{err}");
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "validation not bounded"
            );
        }
    }
    let log = node.plugin_log();
    for why in [
        "pod namespace excluded excluded",
        "excluded because it does not have istio-proxy container",
        "excluded due to inject-disabled annotation",
    ] {
        assert!(log.contains(why), "log lacks {why:?}:\n{log}");
    }
}

/// The `CNI_*` variables of an ADD into `ns` for pod `namespace/name`.
fn add_env(node: &Node, ns: &NetNs, namespace: &str, name: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CNI_COMMAND", "ADD".to_string()),
        ("CNI_CONTAINERID", "c0ffee".to_string()),
        ("CNI_NETNS", ns.path()),
        ("CNI_IFNAME", "eth0".to_string()),
        ("CNI_PATH", node.bin_dir(Plugin::Ours).display().to_string()),
        (
            "CNI_ARGS",
            format!("K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}"),
        ),
    ]
}

/// A cluster holding the injected pod `web` in `default` (its files under the returned folder), and a
/// node whose plugin configuration has `conf`.
fn with_web_pod(tag: &str, conf: &Value) -> (Cluster, TempDir, Value, Node) {
    let cluster = Cluster::up();
    let dir = TempDir::new(tag);
    let pod = injected_pod(&dir, &app_pod("web"), "web", &Value::Null);
    create(&cluster, "default", &pod, &[]).expect("pod created");
    let node = Node::new(&cluster.kubeconfig, conf);
    (cluster, dir, pod, node)
}

/// Sets `annotation` (`key=value`) on the pod `web` of `default`, overwriting it.
fn annotate_web(cluster: &Cluster, annotation: &str) {
    cluster
        .kubectl(&["annotate", "pod", "web", "--overwrite", annotation], None)
        .expect("annotate");
}

/// The error JSON a failed invocation printed, checked for the spec's fields.
fn error_json(out: &std::process::Output) -> Value {
    assert!(!out.status.success(), "the plugin succeeded: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out:?}"));
    assert!(
        v["code"].is_u64() && v["msg"].is_string() && v["cniVersion"].is_string(),
        "{v}"
    );
    v
}

#[test]
fn errors_are_cni_error_json_and_leave_no_rules() {
    test_support::require_root();
    let (cluster, dir, _pod, node) = with_web_pod("cni-err", &json!({}));
    let prev = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.9.0.2/24"}]});

    // A malformed configuration: the field and the value are named, code 6.
    let ns = NetNs::new("cni-err").expect("netns");
    let mut conf = node.istio_entry(&json!({"native_nftables": "yes"}));
    conf["cniVersion"] = json!("1.0.0");
    conf["name"] = json!("testnet");
    conf["prevResult"] = prev.clone();
    let e = error_json(&node.invoke(Plugin::Ours, &conf, &add_env(&node, &ns, "default", "web")));
    assert_eq!(e["code"], 6, "{e}");
    assert_eq!(
        e["cniVersion"], "1.0.0",
        "answered in the configuration's version: {e}"
    );
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("native_nftables is \"yes\""),
        "{e}"
    );
    assert!(!has_rules(&kernel_state(&ns)));

    // The same through the runtime: cnitool fails the ADD.
    node.write_conflist(&json!({"native_nftables": "yes"}));
    let out = node.cnitool(Plugin::Ours, "add", &ns, "default", "web");
    assert!(
        !out.status.success(),
        "cnitool add with a malformed conflist succeeded"
    );
    assert!(!has_rules(&kernel_state(&ns)));
    node.write_conflist(&json!({}));

    // An invalid traffic annotation: Istio's NewRedirect refuses it; code 100 names it; no rules.
    annotate_web(
        &cluster,
        "traffic.sidecar.istio.io/excludeOutboundPorts=80,http",
    );
    let mut conf = node.istio_entry(&json!({}));
    conf["cniVersion"] = json!("1.0.0");
    conf["prevResult"] = prev.clone();
    let ns = NetNs::new("cni-err-ann").expect("netns");
    let e = error_json(&node.invoke(Plugin::Ours, &conf, &add_env(&node, &ns, "default", "web")));
    assert_eq!(e["code"], 100, "{e}");
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("excludeOutboundPorts=\"80,http\""),
        "{e}"
    );
    assert!(!has_rules(&kernel_state(&ns)));

    // An API server that does not answer: bounded retries, then code 11 (try again later); no rules.
    let unreachable = dir.path().join("unreachable");
    std::fs::create_dir_all(&unreachable).unwrap();
    let kc = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
    let server = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("server in kubeconfig")
        .to_string();
    std::fs::write(
        unreachable.join("istio-cni-kubeconfig"),
        kc.replace(&server, "https://127.0.0.1:9"),
    )
    .unwrap();
    let mut conf = node.istio_entry(&json!({
        "cni_agent_run_dir": unreachable,
        "pod_fetch_attempts": 3,
        "pod_fetch_interval_ms": 100,
    }));
    conf["cniVersion"] = json!("1.0.0");
    conf["prevResult"] = prev.clone();
    let ns = NetNs::new("cni-err-api").expect("netns");
    let start = Instant::now();
    let e = error_json(&node.invoke(Plugin::Ours, &conf, &add_env(&node, &ns, "default", "web")));
    assert_eq!(e["code"], 11, "{e}");
    assert!(
        e["msg"].as_str().unwrap().contains("after 3 attempts"),
        "{e}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(!has_rules(&kernel_state(&ns)));

    // No kubeconfig at all (the node agent has not run): code 11 at once, and STATUS says not available.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let mut conf = node.istio_entry(&json!({"cni_agent_run_dir": empty}));
    conf["cniVersion"] = json!("1.1.0");
    let e = error_json(&node.invoke(Plugin::Ours, &conf, &add_env(&node, &ns, "default", "web")));
    assert_eq!(e["code"], 11, "{e}");
    let status = [("CNI_COMMAND", "STATUS".to_string())];
    assert_eq!(
        error_json(&node.invoke(Plugin::Ours, &conf, &status))["code"],
        50
    );
    let mut ready = node.istio_entry(&json!({}));
    ready["cniVersion"] = json!("1.1.0");
    let out = node.invoke(Plugin::Ours, &ready, &status);
    assert!(
        out.status.success(),
        "STATUS with the kubeconfig in place: {out:?}"
    );

    // Version negotiation: VERSION lists 0.3.0 to 1.1.0; CHECK needs 0.4.0; 0.2.0 is refused.
    let out = node.invoke(
        Plugin::Ours,
        &json!({"cniVersion": "1.1.0"}),
        &[("CNI_COMMAND", "VERSION".into())],
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("VERSION JSON");
    assert_eq!(
        v["supportedVersions"],
        json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );
    let mut old = node.istio_entry(&json!({}));
    old["cniVersion"] = json!("0.3.1");
    let mut env = add_env(&node, &ns, "default", "web");
    env[0].1 = "CHECK".to_string();
    assert_eq!(
        error_json(&node.invoke(Plugin::Ours, &old, &env))["code"],
        1
    );
    old["cniVersion"] = json!("0.2.0");
    assert_eq!(
        error_json(&node.invoke(Plugin::Ours, &old, &add_env(&node, &ns, "default", "web")))
            ["code"],
        1
    );
    // A missing CNI_NETNS is code 4.
    let mut env = add_env(&node, &ns, "default", "web");
    env.retain(|(k, _)| *k != "CNI_NETNS");
    assert_eq!(
        error_json(&node.invoke(Plugin::Ours, &ready, &env))["code"],
        4
    );
}

#[test]
fn native_nftables_add_works_with_every_userspace_netfilter_tool_masked() {
    test_support::require_root();
    let (_cluster, _dir, _pod, node) = with_web_pod("cni-nft", &json!({"native_nftables": true}));
    let ns = NetNs::new("cni-nft").expect("netns");
    let cnitool = e2e::peers::cni_tool("cnitool");
    let script = format!(
        "set -e; {MASKED}; if nft --version || ip link >/dev/null || iptables -V || ip6tables -V; then \
         echo 'a tool is still usable' >&2; exit 99; fi; exec '{}' add {} {}",
        cnitool.display(),
        node.network,
        ns.path()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("NETCONFPATH", node.conf_dir())
        .env("CNI_PATH", node.bin_dir(Plugin::Ours))
        .env(
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web",
        )
        .stdin(Stdio::null())
        .output()
        .expect("sandboxed cnitool");
    assert_ne!(
        out.status.code(),
        Some(99),
        "the sandbox left a tool usable"
    );
    e2e::cni::assert_succeeded(&out, "ADD without tools", &node.plugin_log());
    let state = kernel_state(&ns);
    assert!(
        state.iter().any(|l| l.starts_with("table inet istio")),
        "{state:#?}"
    );
    assert!(
        !state.iter().any(|l| l.contains("ISTIO_")),
        "iptables rules too: {state:#?}"
    );
    let proxy = Listener::start(&ns, &["listen-tcp", "0.0.0.0:15001"]);
    let target = format!("{}:8080", node.gateway());
    let ev = connect(&ns, Some(APP_UID), &target, proxy);
    assert!(ev.contains(&format!("orig={target}")), "{ev}");
}

/// Every pod of the injection corpus, injected in CNI mode with the case's configuration, created in the
/// API server; then ADD by ours and by Istio's `istio-cni` into two fresh namespaces each, which must
/// hold the same kernel state, for both backends.
#[test]
fn same_kernel_state_as_istio_s_istio_cni_for_the_injection_corpus() {
    test_support::require_root();
    let cluster = Cluster::up();
    let dir = TempDir::new("cni-corpus");
    let mut names = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    for (i, case) in corpus::load_cases().expect("cases").iter().enumerate() {
        if case.expected_error.is_some() || !case.runs_in("kube-inject") {
            continue;
        }
        let text = case.input_text().expect("input");
        let docs = pods::injectable_documents(&text).expect("documents");
        for (j, doc) in docs.iter().enumerate() {
            let pod = pods::to_pod(doc).expect("pod");
            let name = format!("c{i}-{j}");
            let mut values = case.values.clone();
            corpus::merge(&mut values, &cni_values());
            let cfg = Config::with(&values, &case.mesh, &case.injector_config)
                .and_then(|c| c.write(&dir.path().join(&name)))
                .expect("configuration");
            let flags = vec![format!("--native-sidecars={}", case.native_sidecars)];
            let mut out = kube_inject_with(dir.path(), &cfg, &flags, &case.env, &pod);
            fill_as_a_cluster_does(&mut out, &name);
            // The apiserver keeps a pod's namespace; the corpus's own namespaces do not exist here.
            // Istio's corpus is not written for an API server: a few inputs are pods it refuses
            // (an absolute ConfigMap item path, a mount of a volume the input lacks).
            match create(&cluster, "default", &out, &[]) {
                Ok(_) => names.push((case.name.clone(), name)),
                Err(e) => refused.push(format!("{} ({name}): {e:#}", case.name)),
            }
        }
    }
    eprintln!(
        "{} pods created; refused by the apiserver: {refused:#?}",
        names.len()
    );
    assert!(
        names.len() > 64 && refused.len() <= 3,
        "{} pods created; refused: {refused:#?}",
        names.len()
    );
    let mut programmed = 0;
    let mut refused_by_both = 0;
    for native in [false, true] {
        let node = Node::new(&cluster.kubeconfig, &json!({"native_nftables": native}));
        for (case, name) in &names {
            let ours = NetNs::new("cni-ours").expect("netns");
            let theirs = NetNs::new("cni-istio").expect("netns");
            let a = node.cnitool(Plugin::Ours, "add", &ours, "default", name);
            let b = node.cnitool(Plugin::Istio, "add", &theirs, "default", name);
            let what = format!("{case} ({name}, native_nftables={native})");
            // Both refuse the same pods (an interception mode NewRedirect rejects), leaving no rules.
            assert_eq!(
                a.status.success(),
                b.status.success(),
                "{what}: ours {}, Istio's {}",
                String::from_utf8_lossy(&a.stderr),
                String::from_utf8_lossy(&b.stderr)
            );
            if !a.status.success() {
                refused_by_both += 1;
            }
            let (a, b) = (kernel_state(&ours), kernel_state(&theirs));
            assert_eq!(a, b, "{what}: ours, then Istio's");
            if has_rules(&a) {
                programmed += 1;
            }
        }
    }
    eprintln!("{programmed} programmed, {refused_by_both} refused by both");
    assert!(
        programmed > names.len(),
        "too few pods programmed: {programmed}"
    );
}

/// The whole node: `istio-cni install` puts the plugin into a bridge conflist (the binary it copies, the
/// kubeconfig of its ServiceAccount, which may only read pods), then the runtime's ADD through exactly
/// what it installed programs an injected pod, and STATUS (spec 1.1) reports the plugin ready. Once the
/// agent is stopped its entry is gone, and a pod created then is not programmed: its validation fails
/// with 126, the case the race repair exists for.
#[test]
fn the_runtime_programs_a_pod_through_what_the_node_agent_installed() {
    test_support::require_root();
    let cluster = Cluster::up();
    let dir = TempDir::new("cni-flow");
    let dirs = e2e::cni_agent::NodeDirs::new(&cluster, "istio-system", "istio-cni").unwrap();
    // The node's own network: the bridge of a test Node, written as the cluster's CNI would.
    let names = Node::new(&cluster.kubeconfig, &json!({}));
    let mut conflist = names.conflist(&json!({}));
    conflist["cniVersion"] = json!("1.1.0");
    conflist["plugins"].as_array_mut().unwrap().truncate(1);
    std::fs::write(dirs.conf.join("10-bridge.conflist"), conflist.to_string()).unwrap();
    for tool in ["bridge", "host-local"] {
        std::os::unix::fs::symlink(e2e::peers::cni_tool(tool), dirs.bin.join(tool)).unwrap();
    }
    let mut agent = e2e::cni_agent::Agent::start(
        &cluster,
        &dirs,
        "node-flow",
        &[
            "--exclude-namespaces=kube-system",
            "--pod-namespace=istio-system",
        ],
    )
    .unwrap();
    e2e::cluster::wait_for("/readyz 200", e2e::PATIENCE, || {
        agent.get("/readyz").and_then(|(s, b)| match s {
            200 => Ok(()),
            _ => Err(anyhow::anyhow!("{s} {b}")),
        })
    });
    let pod = injected_pod(&dir, &app_pod("web"), "web", &Value::Null);
    create(&cluster, "default", &pod, &[]).expect("pod");
    let runtime = |command: &str, ns: &NetNs, name: &str| {
        Command::new(e2e::peers::cni_tool("cnitool"))
            .args([command, &names.network, &ns.path()])
            .env("NETCONFPATH", &dirs.conf)
            .env("CNI_PATH", &dirs.bin)
            .env(
                "CNI_ARGS",
                format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name}"),
            )
            .stdin(Stdio::null())
            .output()
            .expect("cnitool")
    };
    let ns = NetNs::new("cni-flow").expect("netns");
    let status = runtime("status", &ns, "web");
    assert!(status.status.success(), "STATUS: {status:?}");
    let out = runtime("add", &ns, "web");
    let agent_log = format!("agent: {}", agent.stderr());
    e2e::cni::assert_succeeded(&out, "ADD through the agent's installation", &agent_log);
    assert!(has_rules(&kernel_state(&ns)), "no rules after ADD");
    let (code, err) = validate(&ns, &pod);
    assert_eq!(code, Some(0), "{err}");
    // The plugin's log reaches the agent's output.
    e2e::cluster::wait_for(
        "the plugin's log in the agent's output",
        e2e::PATIENCE,
        || {
            if agent.stdout().contains("programmed") {
                Ok(())
            } else {
                Err(anyhow::anyhow!("not yet"))
            }
        },
    );

    assert!(agent.terminate().unwrap().success(), "{}", agent.stderr());
    let later = injected_pod(&dir, &app_pod("later"), "later", &Value::Null);
    create(&cluster, "default", &later, &[]).expect("pod");
    let ns = NetNs::new("cni-flow-late").expect("netns");
    let out = runtime("add", &ns, "later");
    assert!(out.status.success(), "ADD without istio-cni: {out:?}");
    assert!(!has_rules(&kernel_state(&ns)), "rules without the plugin");
    let (code, err) = validate(&ns, &later);
    assert_eq!(code, Some(126), "{err}");
}

/// How long a hostile input may hold the plugin before the test kills it: generous, since a refusal
/// is at once and only a plugin that blocks (a FIFO before the fix) or retries reaches it.
const HOSTILE_BOUND: Duration = Duration::from_secs(120);

/// Runs `cmd` (the plugin) with `conf` on standard input as the runtime does, killed if it has not
/// exited within [`HOSTILE_BOUND`]; the output and how long it ran.
fn invoke_bounded(cmd: &mut Command, conf: &Value) -> (std::process::Output, Duration) {
    use std::io::Write as _;
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running the plugin");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(conf.to_string().as_bytes()).unwrap();
    }
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > HOSTILE_BOUND {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the plugin was still running after {HOSTILE_BOUND:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), start.elapsed())
}

/// Before the fix, the plugin trusted what the runtime passed. The node's own namespace, a FIFO
/// or another namespace type as `CNI_NETNS`, and names Kubernetes would not accept (which went into the
/// request path unescaped) are refused at once with code 4 naming the value; an annotation iptables-init
/// would refuse is refused up front with code 100, not by the apply (101). None leaves a rule.
#[test]
fn hostile_runtime_inputs_are_refused_at_once() {
    test_support::require_root();
    let (cluster, dir, _pod, node) = with_web_pod("cni-hostile", &json!({}));
    let mut conf =
        node.istio_entry(&json!({"pod_fetch_attempts": 2, "pod_fetch_interval_ms": 100}));
    conf["cniVersion"] = json!("1.0.0");
    conf["prevResult"] = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.9.0.2/24"}]});
    let plugin = |cmd: &mut Command, env: &[(&str, String)]| {
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .envs(env.iter().map(|(k, v)| (k, v)));
        invoke_bounded(cmd, &conf)
    };
    let refused = |out: &std::process::Output, code: u64, names: &str| {
        let e = error_json(out);
        assert_eq!(e["code"], code, "{e}");
        let msg = e["msg"].as_str().unwrap_or_default();
        assert!(msg.contains(names), "{msg:?} does not name {names:?}");
        e
    };

    // The node's own namespace: the plugin runs inside a throwaway namespace, the node for this run,
    // so a plugin that took it would program only that one. (The API server is not reachable from
    // there, so before the fix these ended in code 11 after the retries, never refused.)
    // pid 1's may be closed to this machine's root (a container's pid 1 under another LSM profile):
    // the kernel then refuses the open (code 5), and nothing is programmed either.
    let pid1_open = std::fs::metadata("/proc/1/ns/net").is_ok();
    let sandbox = NetNs::new("cni-hostile-node").expect("netns");
    for (netns, why) in [
        ("/proc/self/ns/net", "the plugin's own network namespace"),
        ("/proc/1/ns/net", "the network namespace of pid 1"),
    ] {
        let ns = NetNs::new("cni-hostile").expect("netns");
        let mut env = add_env(&node, &ns, "default", "web");
        env[2].1 = netns.to_string();
        let (out, took) = plugin(&mut sandbox.command(Plugin::Ours.binary()), &env);
        if netns == "/proc/1/ns/net" && !pid1_open {
            let e = refused(&out, 5, "failed to open netns \"/proc/1/ns/net\"");
            eprintln!("CNI_NETNS={netns}: refused in {took:?}: {e}");
            continue;
        }
        let e = refused(&out, 4, &format!("CNI_NETNS {netns:?}"));
        assert!(e["msg"].as_str().unwrap().contains(why), "{e}");
        eprintln!("CNI_NETNS={netns}: refused in {took:?}: {e}");
        assert!(!has_rules(&kernel_state(&sandbox)));
    }

    // Not a network namespace: a FIFO (which blocked open(2) until the runtime killed the plugin), a
    // namespace of another type, a plain file.
    let fifo = dir.path().join("netns-fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let plain = dir.path().join("netns-file");
    std::fs::write(&plain, b"").unwrap();
    for (netns, why) in [
        (fifo.display().to_string(), "a FIFO"),
        (
            "/proc/self/ns/mnt".to_string(),
            "a namespace of another type",
        ),
        (plain.display().to_string(), "not on nsfs"),
    ] {
        let ns = NetNs::new("cni-hostile").expect("netns");
        let mut env = add_env(&node, &ns, "default", "web");
        env[2].1 = netns.clone();
        let (out, took) = plugin(&mut Command::new(Plugin::Ours.binary()), &env);
        let e = refused(&out, 4, &format!("CNI_NETNS {netns:?}"));
        assert!(e["msg"].as_str().unwrap().contains(why), "{e}");
        eprintln!("CNI_NETNS={netns}: refused in {took:?}: {e}");
    }

    // Names that are no pod's or namespace's, which went into the request path as they were.
    for (namespace, name, names) in [
        ("default", "p?watch=true", r#"K8S_POD_NAME "p?watch=true""#),
        (
            "default",
            "../../api/v1/namespaces/kube-system/secrets/s",
            r#"K8S_POD_NAME "../../api/v1/namespaces/kube-system/secrets/s""#,
        ),
        (
            "../kube-system",
            "web",
            r#"K8S_POD_NAMESPACE "../kube-system""#,
        ),
    ] {
        let ns = NetNs::new("cni-hostile").expect("netns");
        let env = add_env(&node, &ns, namespace, name);
        let (out, took) = plugin(&mut Command::new(Plugin::Ours.binary()), &env);
        let e = refused(&out, 4, names);
        eprintln!("{namespace}/{name}: refused in {took:?}: {e}");
        assert!(!has_rules(&kernel_state(&ns)));
    }

    // An annotation Istio's check takes and iptables-init refuses: refused up front (100), naming it.
    annotate_web(
        &cluster,
        "traffic.sidecar.istio.io/excludeOutboundPorts= 80 , 81 ",
    );
    let ns = NetNs::new("cni-hostile-ann").expect("netns");
    let (out, _) = plugin(
        &mut Command::new(Plugin::Ours.binary()),
        &add_env(&node, &ns, "default", "web"),
    );
    let e = refused(
        &out,
        100,
        r#"traffic.sidecar.istio.io/excludeOutboundPorts=" 80 , 81 ""#,
    );
    eprintln!("excludeOutboundPorts=\" 80 , 81 \": {e}");
    assert!(!has_rules(&kernel_state(&ns)));
}
