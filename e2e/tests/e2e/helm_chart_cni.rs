//! The Helm chart `charts/istio-cni` (the node agent's DaemonSet), with the `helm` built from tools/helm:
//! it lints and renders typed objects with the fields the agent needs (root without capabilities, the
//! hostPath mounts, tolerations of every taint, Istio's variables); `deploy/istio-cni` is its rendering;
//! and `helm install` into the test kube-apiserver gives RBAC under which the built `istio-cni install`,
//! run as the installed DaemonSet runs it (its arguments and environment, the ServiceAccount's own
//! token, all capabilities dropped, a read-only root filesystem), installs the plugin, becomes ready,
//! untaints its Node and repairs a broken pod, while `kubectl auth can-i` denies the rest.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use e2e::apiserver::TempDir;
use e2e::cluster::{wait_for, Cluster};
use e2e::cni_agent::{read_json, Agent};
use e2e::helm::{self, Chart, Helm};
use serde_json::{json, Value};

/// Istio's namespace, where deploy/istio-cni installs.
const NS: &str = "istio-system";
/// The ServiceAccount the chart's agent runs as.
const SA: &str = "system:serviceaccount:istio-system:istio-cni";

fn env_of(container: &Value) -> BTreeMap<String, Value> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e.clone()))
        .collect()
}

fn value(env: &BTreeMap<String, Value>, name: &str) -> Option<String> {
    env.get(name)
        .and_then(|e| e["value"].as_str().map(str::to_string))
}

/// The verbs of `rules` on `resource` (of the core group).
fn verbs(role: &Value, resource: &str) -> Vec<String> {
    let mut v: Vec<String> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["apiGroups"] == json!([""]))
        .filter(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .contains(&json!(resource))
        })
        .flat_map(|r| r["verbs"].as_array().unwrap().clone())
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// `helm lint --strict` passes and every object is typed for the defaults and the variants; the
/// DaemonSet holds what the agent needs and no more (root, no capability, no privilege escalation, a
/// read-only root, RuntimeDefault seccomp, no host network; the three hostPath mounts at the paths its
/// arguments name; tolerations of the not-ready taints; Istio's variables from the values), and the
/// ClusterRole follows the repair mode.
#[test]
fn cni_chart_lints_and_renders_the_daemonset() {
    let helm = Helm::offline();
    let variants: &[&[&str]] = &[
        &[],
        &[
            "--set",
            "cni.repair.deletePods=false,cni.repair.labelPods=true",
            "--set",
            "cni.capabilities={DAC_OVERRIDE}",
            "--set",
            "cni.cniBinDir=/home/kubernetes/bin,cni.cniConfFileName=10-calico.conflist",
            "--set",
            "global.nativeNftables=true,cni.logging.level=debug",
            "--set",
            "cni.excludeNamespaces={kube-system,istio-system}",
        ],
        &["--set", "cni.repair.enabled=false"],
    ];
    for set in variants {
        let docs = Chart::cni().lint_and_template(&helm, set);
        let mut kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                "ClusterRole",
                "ClusterRoleBinding",
                "DaemonSet",
                "ServiceAccount"
            ]
        );
        let ds = helm::of_kind(&docs, "DaemonSet")[0];
        assert_eq!(
            ds["metadata"]["name"], "istio-cni-node",
            "the plugin's name"
        );
        let pod = &ds["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(c["image"], "ghcr.io/sidecar-inject/istio-cni:0.1.0");
        assert_eq!(pod["serviceAccountName"], "istio-cni");
        assert_eq!(pod["priorityClassName"], "system-node-critical");
        assert_eq!(pod["terminationGracePeriodSeconds"], 30);
        assert!(pod.get("hostNetwork").is_none(), "no host network");
        assert!(pod.get("hostPID").is_none());
        let label_mode = set.iter().any(|s| s.contains("labelPods=true"));
        let sc = &c["securityContext"];
        let caps = if label_mode {
            json!({"drop": ["ALL"], "add": ["DAC_OVERRIDE"]})
        } else {
            json!({"drop": ["ALL"]})
        };
        assert_eq!(
            *sc,
            json!({"privileged": false, "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": false,
                   "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                   "capabilities": caps, "seccompProfile": {"type": "RuntimeDefault"}}),
            "{set:?}"
        );
        assert!(pod.get("securityContext").is_none());
        assert_eq!(
            c["readinessProbe"]["httpGet"],
            json!({"path": "/readyz", "port": 8000})
        );
        // The mounts: each at the path the arguments name, from the host folder of the values.
        let bin = if label_mode {
            "/home/kubernetes/bin"
        } else {
            "/opt/cni/bin"
        };
        let mut mounts = BTreeMap::new();
        for m in c["volumeMounts"].as_array().unwrap() {
            let v = helm::volume(pod, m["name"].as_str().unwrap());
            assert!(m.get("readOnly").is_none());
            mounts.insert(
                m["mountPath"].as_str().unwrap().to_string(),
                v["hostPath"]["path"].as_str().unwrap().to_string(),
            );
        }
        assert_eq!(
            mounts,
            BTreeMap::from([
                ("/host/opt/cni/bin".to_string(), bin.to_string()),
                (
                    "/host/etc/cni/net.d".to_string(),
                    "/etc/cni/net.d".to_string()
                ),
                (
                    "/var/run/istio-cni".to_string(),
                    "/var/run/istio-cni".to_string()
                ),
            ])
        );
        assert_eq!(
            c["args"],
            json!([
                "install",
                "--cni-bin-dir=/host/opt/cni/bin",
                "--mounted-cni-net-dir=/host/etc/cni/net.d",
                "--cni-agent-run-dir=/var/run/istio-cni",
                "--listen=0.0.0.0:8000"
            ])
        );
        // Scheduled on a node whose CNI is not ready yet, and never evicted by a taint.
        let tolerations = pod["tolerations"].as_array().unwrap();
        for (key, effect) in [
            ("cni.istio.io/not-ready", "NoSchedule"),
            ("node.kubernetes.io/not-ready", "NoSchedule"),
            ("node.kubernetes.io/not-ready", "NoExecute"),
            ("node.kubernetes.io/unreachable", "NoExecute"),
            ("CriticalAddonsOnly", "NoSchedule"),
        ] {
            let tolerated = tolerations.iter().any(|t| {
                t["operator"] == "Exists"
                    && (t.get("key").is_none() || t["key"] == key)
                    && (t.get("effect").is_none() || t["effect"] == effect)
            });
            assert!(tolerated, "{key}:{effect} not tolerated: {tolerations:?}");
        }
        // Istio's variables.
        let env = env_of(c);
        assert_eq!(
            env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
            "spec.nodeName"
        );
        assert_eq!(
            env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.namespace"
        );
        let want: &[(&str, Option<&str>)] = if label_mode {
            &[
                ("EXCLUDE_NAMESPACES", Some("kube-system,istio-system")),
                ("CHAINED_CNI_PLUGIN", Some("true")),
                ("CNI_CONF_NAME", Some("10-calico.conflist")),
                ("NATIVE_NFTABLES", Some("true")),
                ("PLUGIN_LOG_LEVEL", Some("debug")),
                ("REPAIR_ENABLED", Some("true")),
                ("REPAIR_DELETE_PODS", Some("false")),
                ("REPAIR_LABEL_PODS", Some("true")),
            ]
        } else {
            &[
                ("EXCLUDE_NAMESPACES", Some("kube-system")),
                ("CHAINED_CNI_PLUGIN", Some("true")),
                ("CNI_CONF_NAME", None),
                ("NATIVE_NFTABLES", Some("false")),
                ("PLUGIN_LOG_LEVEL", Some("info")),
                ("REPAIR_INIT_CONTAINER_NAME", Some("istio-validation")),
                (
                    "REPAIR_BROKEN_POD_LABEL_KEY",
                    Some("cni.istio.io/uninitialized"),
                ),
                ("REPAIR_BROKEN_POD_LABEL_VALUE", Some("true")),
            ]
        };
        for (name, v) in want {
            assert_eq!(value(&env, name).as_deref(), *v, "{name} {set:?}");
        }
        // The ClusterRole follows the repair mode.
        let role = helm::of_kind(&docs, "ClusterRole")[0];
        let repair_off = set.contains(&"cni.repair.enabled=false");
        let (pods, status): (&[&str], &[&str]) = if repair_off {
            (&["get"], &[])
        } else if label_mode {
            (&["get", "list", "watch"], &["patch"])
        } else {
            (&["delete", "get", "list", "watch"], &[])
        };
        assert_eq!(verbs(role, "pods"), pods, "{set:?}");
        assert_eq!(verbs(role, "pods/status"), status, "{set:?}");
        assert_eq!(verbs(role, "nodes"), ["get", "patch"]);
        let rules = if repair_off { 2 } else { 3 };
        assert_eq!(role["rules"].as_array().unwrap().len(), rules, "{role}");
    }

    // What the agent cannot do, the chart refuses, naming the value.
    let refused: &[(&[&str], &str)] = &[
        (
            &["--set", "cni.repair.repairPods=true"],
            "in-place repair is not implemented",
        ),
        (
            &["--set", "cni.logging.level=loud"],
            "cni.logging.level \"loud\"",
        ),
        (
            &["--set", "cni.excludeNamespaces={Kube_System}"],
            "not a namespace name",
        ),
    ];
    Chart::cni().assert_refused(&helm, refused);
}

/// Hostile values, as for the injector's chart (helm_chart.rs): every value the templates read
/// adds no key to the rendered objects, with Helm's schema check or without it. The values found
/// unquoted on 9154c7e (`cni.tag`, `cni.hub` through the image, `cni.cniConfDir` and `cni.cniBinDir` as
/// hostPaths, `global.imagePullSecrets` in the ServiceAccount, the container's `env` names) are refused
/// by the schema, naming their path.
#[test]
fn cni_hostile_values_add_no_key() {
    let refused = [
        ("cni.tag", "'/cni/tag'"),
        ("cni.hub", "'/cni/hub'"),
        ("cni.cniConfDir", "'/cni/cniConfDir'"),
        ("cni.cniBinDir", "'/cni/cniBinDir'"),
        ("global.imagePullSecrets[]", "'/global/imagePullSecrets/0'"),
        ("cni.env{new key}", "'/cni/env'"),
        ("cni.priorityClassName", "'/cni/priorityClassName'"),
        (
            "cni.terminationGracePeriodSeconds",
            "'/cni/terminationGracePeriodSeconds'",
        ),
    ];
    Chart::cni().assert_hostile_values_held(&Helm::offline(), &[], &refused);
}

/// The values the agent's pod is made of are validated, each refusal naming the value: node paths
/// absolute and without `..`, a grace period of at least 0, image parts in their grammar (a tag is a
/// string: `1.28` unquoted is a number), Secret names as Kubernetes names them. What is valid renders.
#[test]
fn cni_chart_validates_its_values() {
    let helm = Helm::offline();
    let refused: &[(&[&str], &str)] = &[
        (
            &["--set", "cni.cniConfDir=etc/cni/net.d"],
            "/cni/cniConfDir",
        ),
        (
            &["--set", "cni.cniBinDir=/opt/cni/../../etc"],
            "/cni/cniBinDir",
        ),
        (
            &["--set", "cni.terminationGracePeriodSeconds=-1"],
            "/cni/terminationGracePeriodSeconds",
        ),
        (&["--set-json", "cni.tag=1.28"], "/cni/tag"),
        (&["--set", "global.tag=a:b"], "/global/tag"),
        (&["--set", "cni.pullPolicy=Sometimes"], "/cni/pullPolicy"),
        (
            &["--set", "global.imagePullSecrets={Reg_Cred}"],
            "/global/imagePullSecrets/0",
        ),
        (&["--set", "cni.chained=yes"], "/cni/chained"),
    ];
    Chart::cni().assert_refused(&helm, refused);
    let docs = Chart::cni().template(
        &helm,
        &[
            "--set",
            "global.imagePullSecrets={regcred},cni.cniConfDir=/var/lib/cni/net.d",
            "--set",
            "cni.tag=1.28-debug,cni.terminationGracePeriodSeconds=0",
        ],
    );
    docs.iter().for_each(helm::typed);
    let sa = helm::of_kind(&docs, "ServiceAccount")[0];
    assert_eq!(sa["imagePullSecrets"], json!([{"name": "regcred"}]));
    let pod = &helm::of_kind(&docs, "DaemonSet")[0]["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 0);
    assert_eq!(
        pod["containers"][0]["image"],
        "ghcr.io/sidecar-inject/istio-cni:1.28-debug"
    );
    let conf = helm::volume(pod, "cni-net-dir");
    assert_eq!(conf["hostPath"]["path"], "/var/lib/cni/net.d");
}

/// `deploy/istio-cni` holds the chart rendered with `deploy/istio-cni/values.yaml`
/// (scripts/render-deploy.sh), byte for byte, and no generated file the chart no longer renders; its
/// kustomization lists exactly the rendered files.
#[test]
fn deploy_istio_cni_is_the_rendered_chart() {
    let dir = helm::render_deploy();
    let rendered =
        helm::assert_deployed_is_rendered(&dir.path().join("istio-cni"), "deploy/istio-cni");
    assert_eq!(
        rendered,
        ["daemonset.yaml", "rbac.yaml", "serviceaccount.yaml"]
    );
    let deployed = helm::repo_dir().join("deploy/istio-cni");
    let kustomization = std::fs::read_to_string(deployed.join("kustomization.yaml")).unwrap();
    let listed: Vec<&str> = kustomization
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .collect();
    let mut listed = listed;
    listed.sort();
    assert_eq!(listed, rendered);
}

/// A node's folders for the agent: root's, 0755, as on a node; a bridge + host-local conflist as the
/// primary CNI's.
struct Node {
    _root: TempDir,
    bin: PathBuf,
    conf: PathBuf,
    run: PathBuf,
    sa: PathBuf,
}

impl Node {
    fn new() -> Node {
        let root = TempDir::new("cni-chart-node");
        let dir = |n: &str| {
            let p = root.path().join(n);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let node = Node {
            bin: dir("opt-cni-bin"),
            conf: dir("etc-cni-net.d"),
            run: dir("var-run-istio-cni"),
            sa: dir("serviceaccount"),
            _root: root,
        };
        std::fs::write(
            node.conf.join("10-bridge.conflist"),
            r#"{"cniVersion":"1.0.0","name":"k8s","plugins":[{"type":"bridge","ipam":{"type":"host-local"}}]}"#,
        )
        .unwrap();
        node
    }
}

/// The installed DaemonSet's container, run as the kubelet would run it on node `node_name`: its
/// arguments with each mount path replaced by the node folder standing for the host path, its
/// environment (the downward API resolved), the ServiceAccount's own token (the mounted one, and a
/// kubeconfig in place of in-cluster, which needs a pod), the capabilities of its securityContext
/// (root with the bounding set cut to them: none), no new privileges, and, when the securityContext says
/// so, a read-only root filesystem (a mount namespace where / is read-only and only the mounts are
/// writable).
fn run_installed(cluster: &Cluster, node: &Node, node_name: &str, work: &Path) -> Agent {
    let ds = cluster
        .kubectl_json(&["get", "daemonset", "-n", NS, "istio-cni-node"], None)
        .unwrap();
    let spec = &ds["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    assert_eq!(spec["serviceAccountName"], "istio-cni");
    let sa_name = spec["serviceAccountName"].as_str().unwrap();
    // The mounted token and CA, and the agent's client with the same token.
    let token = cluster
        .kubectl(
            &["create", "token", sa_name, "-n", NS, "--duration=1h"],
            None,
        )
        .unwrap();
    std::fs::write(node.sa.join("token"), token.trim()).unwrap();
    std::fs::copy(cluster.dir().join("pki/ca.crt"), node.sa.join("ca.crt")).unwrap();
    let kubeconfig = work.join("agent.kubeconfig");
    cluster
        .service_account_kubeconfig(NS, sa_name, &kubeconfig)
        .unwrap();

    let host: BTreeMap<&str, &Path> = BTreeMap::from([
        ("cni-bin-dir", node.bin.as_path()),
        ("cni-net-dir", node.conf.as_path()),
        ("cni-run-dir", node.run.as_path()),
    ]);
    let mut local: Vec<(String, PathBuf)> = Vec::new();
    for m in c["volumeMounts"].as_array().unwrap() {
        let name = m["name"].as_str().unwrap();
        let volume = helm::volume(spec, name);
        assert!(volume["hostPath"].is_object(), "{name}");
        local.push((
            m["mountPath"].as_str().unwrap().to_string(),
            host[name].to_path_buf(),
        ));
    }
    let mut args: Vec<String> = Vec::new();
    for a in c["args"].as_array().unwrap() {
        let a = a.as_str().unwrap();
        if a.starts_with("--listen=") {
            // The container's own network namespace: here a free loopback port.
            args.push("--listen=127.0.0.1:0".into());
            continue;
        }
        let mut a = a.to_string();
        for (path, folder) in &local {
            if let Some(v) = a.strip_suffix(path.as_str()) {
                a = format!("{v}{}", folder.display());
            }
        }
        args.push(a);
    }
    let proc_dir = TempDir::new("cni-chart-agent");
    let port_file = proc_dir.path().join("port");
    args.extend([
        "--service-account-dir".to_string(),
        node.sa.display().to_string(),
        format!("--kube-server={}", cluster.server),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--port-file={}", port_file.display()),
    ]);
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for e in c["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        let v = if let Some(v) = e["value"].as_str() {
            v.to_string()
        } else {
            match e["valueFrom"]["fieldRef"]["fieldPath"].as_str().unwrap() {
                "spec.nodeName" => node_name.to_string(),
                "metadata.namespace" => NS.to_string(),
                other => panic!("{name}: downward API field {other}"),
            }
        };
        env.insert(name, v);
    }

    let sc = &c["securityContext"];
    assert_eq!(sc["runAsUser"], 0);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    let add: Vec<String> = sc["capabilities"]["add"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| format!(",+{}", c.as_str().unwrap().to_lowercase()))
                .collect()
        })
        .unwrap_or_default();
    let bounding = format!("-all{}", add.concat());
    let read_only = sc["readOnlyRootFilesystem"] == true;
    // Inside a private mount namespace: each writable folder bind-mounted on itself (a mount of its
    // own), then / read-only; then root with only the container's capabilities.
    let script = r#"
        if [ "$READ_ONLY" = true ]; then
          for d in $RW_DIRS; do mount --bind "$d" "$d"; done
          mount -o remount,bind,ro /
        fi
        exec setpriv --reuid=0 --regid=0 --clear-groups --no-new-privs --inh-caps=-all \
          --ambient-caps=-all --bounding-set="$BOUNDING" -- "$@"
    "#;
    let rw: Vec<String> = [
        &node.bin,
        &node.conf,
        &node.run,
        &proc_dir.path().to_path_buf(),
    ]
    .iter()
    .map(|p| p.display().to_string())
    .collect();
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-euc",
        script,
        "sh",
    ])
    .arg(e2e::bin("istio-cni"))
    .args(&args)
    .env_clear()
    .env("PATH", std::env::var("PATH").unwrap_or_default())
    .env("RW_DIRS", rw.join(" "))
    .env("READ_ONLY", read_only.to_string())
    .env("BOUNDING", &bounding)
    .env("RUST_LOG", "info")
    .envs(&env);
    Agent::spawn(&mut cmd, proc_dir).unwrap()
}

/// A field of /proc/<pid>/status.
fn proc_status(pid: u32, field: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap()
        .trim()
        .to_string()
}

const APPS: &str = "apps";

/// A sidecar pod bound to `node` whose `istio-validation` init container exited 126, its status
/// written as the kubelet would.
fn broken_pod(cluster: &Cluster, name: &str, node: &str) {
    e2e::cni_agent::sidecar_pod(cluster, APPS, name, node).unwrap();
    e2e::cni_agent::validation_exited(cluster, APPS, name, 126).unwrap();
}

fn pod(cluster: &Cluster, name: &str) -> Value {
    cluster
        .kubectl_json(&["get", "pod", name, "-n", APPS], None)
        .unwrap()
}

fn ready(agent: &Agent) {
    wait_for("/readyz 200", e2e::PATIENCE, || {
        match agent.get("/readyz") {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}\n{}", agent.stderr())),
        }
    });
}

/// `helm install` of the chart, then the built agent run as the installed DaemonSet runs it (root with no
/// capability, a read-only root, the ServiceAccount's own token): it installs the plugin into root's
/// 0755 folders and becomes ready, removes its Node's not-ready taint and keeps the other, deletes a
/// broken pod of its node and leaves another node's, and its plugin kubeconfig reads a pod, all with
/// exactly the chart's RBAC (nothing forbidden in its log); SIGTERM cleans up. `kubectl auth can-i` as
/// the account: what is granted, and what must be denied. Then `helm upgrade` to label mode: `patch` on
/// pods/status replaces `delete`, and the agent labels a broken pod through it.
#[test]
fn helm_install_cni_agent_runs_with_the_chart_rbac() {
    test_support::require_root();
    let started = Instant::now();
    let cluster = Cluster::up();
    let work = TempDir::new("helm-install-cni");
    let chart = Chart::cni();
    eprintln!("{}", chart.install(&cluster, &[]));

    e2e::cni_agent::tainted_node(&cluster, "node-a").unwrap();
    cluster.namespace(APPS, &BTreeMap::new()).unwrap();
    broken_pod(&cluster, "broken", "node-a");
    broken_pod(&cluster, "elsewhere", "node-b");

    let node = Node::new();
    let mut agent = run_installed(&cluster, &node, "node-a", work.path());
    let pid = agent.pid().unwrap();
    // Root without any capability, no new privileges, / read-only.
    assert_eq!(proc_status(pid, "Uid").split_whitespace().next(), Some("0"));
    assert_eq!(proc_status(pid, "CapEff"), "0000000000000000");
    assert_eq!(proc_status(pid, "CapBnd"), "0000000000000000");
    assert_eq!(proc_status(pid, "NoNewPrivs"), "1");
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/"))
        .unwrap();
    assert!(
        root.split(' ')
            .nth(5)
            .unwrap()
            .split(',')
            .any(|o| o == "ro"),
        "{root}"
    );
    ready(&agent);
    eprintln!("ready {:?} after the cluster started", started.elapsed());

    // Installed into root's 0755 folders as their owner.
    assert_eq!(
        std::fs::read(node.bin.join("istio-cni")).unwrap(),
        std::fs::read(e2e::bin("istio-cni")).unwrap()
    );
    let conflist = read_json(&node.conf.join("10-bridge.conflist")).unwrap();
    let ours = conflist["plugins"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(ours["type"], "istio-cni");
    assert_eq!(ours["exclude_namespaces"], json!(["kube-system"]));
    assert_eq!(ours["pod_namespace"], NS);

    // The plugin's kubeconfig (the account's token) reads a pod, as the plugin does on ADD.
    let plugin_kubeconfig = node.run.join("istio-cni-kubeconfig");
    let read = cluster
        .kubectl_as(
            &plugin_kubeconfig,
            &["get", "pod", "elsewhere", "-n", APPS, "-o", "name"],
        )
        .unwrap();
    assert!(
        read.status.success(),
        "the plugin's kubeconfig: {}",
        String::from_utf8_lossy(&read.stderr)
    );

    // Untainted: ours gone, the other kept.
    wait_for("node-a untainted", e2e::PATIENCE, || {
        e2e::cni_agent::untainted(&cluster, "node-a")
            .map_err(|e| format!("{e}\n{}", agent.stderr()))
    });
    // Repaired: the broken pod of node-a deleted, node-b's left.
    wait_for("broken deleted", e2e::PATIENCE, || {
        match pod(&cluster, "broken")["metadata"]["deletionTimestamp"].as_str() {
            Some(_) => Ok(()),
            None => Err(agent.stderr()),
        }
    });
    assert!(pod(&cluster, "elsewhere")["metadata"]["deletionTimestamp"].is_null());
    let log = agent.stderr();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "the chart's RBAC refused the agent something:\n{log}"
    );
    let status = agent.terminate().unwrap();
    assert!(status.success(), "{status}: {}", agent.stderr());
    assert!(!node.bin.join("istio-cni").exists());
    assert!(!plugin_kubeconfig.exists());

    // RBAC, as the apiserver evaluates it for the account (`pods/x` would name a pod: subresources
    // are asked with --subresource).
    let granted: &[&[&str]] = &[
        &["get", "pods", "-n", APPS],
        &["list", "pods", "-A"],
        &["watch", "pods", "-A"],
        &["delete", "pods", "-n", APPS],
        &["get", "nodes/node-a"],
        &["patch", "nodes/node-a"],
    ];
    let denied: &[&[&str]] = &[
        // Secrets anywhere, its own namespace's included.
        &["get", "secrets", "-n", NS],
        &["list", "secrets", "-A"],
        // Pod writes other than the repair's, and its other subresources.
        &["create", "pods", "-n", APPS],
        &["update", "pods", "-n", APPS],
        &["patch", "pods", "-n", APPS],
        &["deletecollection", "pods", "-n", APPS],
        &["patch", "pods", "--subresource=status", "-n", APPS],
        &["create", "pods", "--subresource=exec", "-n", APPS],
        &["create", "pods", "--subresource=eviction", "-n", APPS],
        &["get", "pods", "--subresource=log", "-n", APPS],
        // Nodes: no list, no other write, no status.
        &["list", "nodes"],
        &["watch", "nodes"],
        &["update", "nodes/node-a"],
        &["delete", "nodes/node-a"],
        &["create", "nodes"],
        &["patch", "nodes", "--subresource=status"],
        &["get", "nodes", "--subresource=proxy"],
        // Nothing else it does not use.
        &["get", "namespaces"],
        &["create", "events", "-n", APPS],
        &["get", "configmaps", "-n", NS],
        &["create", "serviceaccounts/token", "-n", NS],
        &["patch", "daemonsets.apps/istio-cni-node", "-n", NS],
        &["create", "clusterrolebindings"],
        &["impersonate", "serviceaccounts"],
        &["escalate", "clusterroles"],
        &["bind", "clusterroles"],
    ];
    helm::assert_may(&cluster, SA, granted, denied);

    // Label mode: patch on pods/status instead of delete, and the agent labels through it.
    chart.upgrade(
        &cluster,
        &[
            "--set",
            "cni.repair.deletePods=false,cni.repair.labelPods=true",
        ],
    );
    helm::assert_may(
        &cluster,
        SA,
        &[&["patch", "pods", "--subresource=status", "-n", APPS]],
        &[
            &["delete", "pods", "-n", APPS],
            &["patch", "pods", "-n", APPS],
        ],
    );
    broken_pod(&cluster, "broken-2", "node-a");
    let node = Node::new();
    let mut agent = run_installed(&cluster, &node, "node-a", work.path());
    wait_for("broken-2 labelled", e2e::PATIENCE, || {
        match pod(&cluster, "broken-2")["metadata"]["labels"]["cni.istio.io/uninitialized"].as_str()
        {
            Some("true") => Ok(()),
            _ => Err(agent.stderr()),
        }
    });
    assert!(pod(&cluster, "broken-2")["metadata"]["deletionTimestamp"].is_null());
    ready(&agent);
    let log = agent.stderr();
    assert!(!log.to_lowercase().contains("forbidden"), "{log}");
    assert!(agent.terminate().unwrap().success());

    chart.assert_uninstall_leaves_nothing(&cluster, "clusterroles,clusterrolebindings");
}
