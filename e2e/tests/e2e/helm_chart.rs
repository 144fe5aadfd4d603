//! The Helm chart `charts/sidecar-injector`, with the `helm` built from tools/helm: it lints; its
//! MutatingWebhookConfigurations are `injector webhook-config`'s for the same revision, tags and options
//! (and it refuses what the generator refuses); `deploy/base` is the chart rendered with
//! `deploy/values.yaml`; and `helm install` into the test kube-apiserver gives an injector that, run as the
//! chart's Deployment would run it, injects a labelled namespace's pod, with RBAC that grants what the
//! injector reads from the cluster and nothing more.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use e2e::apiserver::{injector_certs, CertFiles, Injector, TempDir};
use e2e::cluster::Cluster;
use e2e::helm::{self, Chart, Helm};
use e2e::netns::HostLink;
use serde_json::{json, Value};
use test_support::semantic;

use crate::kube_apiserver::{
    container_names, corpus_pod, create, eventually, injected, labels, webhook_config,
};

/// The release's namespace, as `deploy/` and `injector certs` default to.
const NS: &str = "sidecar-injector";

/// `helm template` with `set` (plus the serving CA as `tls.caBundle`) in namespace `ns`: its
/// MutatingWebhookConfigurations.
fn chart_configurations(helm: &Helm, ns: &str, set: &[&str], certs: &CertFiles) -> Vec<Value> {
    let ca = format!("tls.caBundle={}", certs.dir.join("ca.crt").display());
    let mut args = vec!["--set-file", &ca];
    args.extend(set);
    let docs = helm.template(ns, &args).unwrap();
    helm::of_kind(&docs, "MutatingWebhookConfiguration")
        .into_iter()
        .cloned()
        .collect()
}

/// For each option the chart shares with `injector webhook-config`, the chart's configurations equal the
/// generator's, object for object (names, labels, every entry and its selectors, the caBundle): the
/// default revision, a revision, revision tags (`default` among them, which takes over the default
/// revision's entries), `enableNamespacesByDefault` (with the default revision and with a tag `default`),
/// `reinvocationPolicy`, the path, the timeout and another namespace.
#[test]
fn chart_webhook_configurations_are_webhook_configs() {
    let helm = Helm::offline();
    let dir = TempDir::new("helm-mwc");
    let certs = injector_certs(&dir.path().join("certs"), &[]).unwrap();
    let canary = [
        "--revision",
        "canary",
        "--service",
        "sidecar-injector-canary",
    ];
    let cases: Vec<(&str, &str, Vec<&str>, Vec<&str>)> = vec![
        ("default revision", NS, vec![], vec![]),
        (
            "revision default is the default revision",
            NS,
            vec!["--set", "revision=default"],
            vec![],
        ),
        (
            "a revision",
            NS,
            vec!["--set", "revision=canary"],
            canary.to_vec(),
        ),
        (
            "revision tags",
            NS,
            vec![
                "--set",
                "revision=canary",
                "--set",
                "revisionTags={prod,default}",
            ],
            [&canary[..], &["--tag", "prod", "--tag", "default"]].concat(),
        ),
        (
            "a tag of the default revision",
            NS,
            vec!["--set", "revisionTags={stable}"],
            vec!["--tag", "stable"],
        ),
        (
            "enableNamespacesByDefault",
            NS,
            vec![
                "--set",
                "sidecarInjectorWebhook.enableNamespacesByDefault=true",
            ],
            vec!["--enable-namespaces-by-default"],
        ),
        (
            "enableNamespacesByDefault through the tag default",
            NS,
            vec![
                "--set",
                "revision=canary",
                "--set",
                "revisionTags={default}",
                "--set",
                "sidecarInjectorWebhook.enableNamespacesByDefault=true",
            ],
            [
                &canary[..],
                &["--tag", "default", "--enable-namespaces-by-default"],
            ]
            .concat(),
        ),
        (
            "reinvocation, path, timeout, namespace",
            "mesh",
            vec![
                "--set",
                "sidecarInjectorWebhook.reinvocationPolicy=IfNeeded",
                "--set",
                "istiodRemote.injectionPath=/inject/cluster/c1/net/n1",
                "--set",
                "webhook.timeoutSeconds=5,serve.reviewDeadlineMs=4000",
            ],
            vec![
                "--namespace",
                "mesh",
                "--reinvocation-policy",
                "if-needed",
                "--path",
                "/inject/cluster/c1/net/n1",
                "--timeout-seconds",
                "5",
            ],
        ),
    ];
    for (what, ns, set, flags) in cases {
        let got = chart_configurations(&helm, ns, &set, &certs);
        let want = webhook_config(&flags, &certs);
        assert!(
            got == want,
            "{what}: the chart's configurations are not `injector webhook-config {}`'s: {}\nchart:\n{}",
            flags.join(" "),
            semantic::compare_documents(&got, &want).err().unwrap_or_default(),
            serde_json::to_string_pretty(&got).unwrap()
        );
    }
}

/// What `injector webhook-config` refuses, the chart refuses too (`helm template` fails with the
/// generator's reason), instead of registering configurations that would inject the same pods twice or
/// select nothing.
#[test]
fn chart_refuses_what_webhook_config_refuses() {
    let helm = Helm::offline();
    let cases: &[(&[&str], &[&str], &str)] = &[
        (
            &["--set", "revisionTags={prod,prod}"],
            &["--tag", "prod", "--tag", "prod"],
            "given twice",
        ),
        (
            &["--set", "revisionTags={default}"],
            &["--tag", "default"],
            "names the revision itself",
        ),
        (
            &[
                "--set",
                "revision=canary",
                "--set",
                "sidecarInjectorWebhook.enableNamespacesByDefault=true",
            ],
            &["--revision", "canary", "--enable-namespaces-by-default"],
            "needs the default revision",
        ),
        (
            &["--set", "revision=Canary"],
            &["--revision", "Canary"],
            "not a DNS label",
        ),
        (
            &["--set", "istiodRemote.injectionPath=inject"],
            &["--path", "inject"],
            "must start with '/'",
        ),
    ];
    for (set, flags, reason) in cases {
        let generator = Command::new(e2e::bin("injector"))
            .arg("webhook-config")
            .args(*flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&generator.stderr);
        assert!(
            !generator.status.success() && stderr.contains(reason),
            "webhook-config {flags:?}: {stderr}"
        );
        Chart::injector().assert_refused(&helm, &[(set, reason)]);
    }
}

/// `helm lint --strict` passes for the defaults, a revision with tags, and the autoscaled variant (HPA
/// and PDB from autoscaleMin), and `helm template` renders every object k8s-openapi's types accept.
#[test]
fn chart_lints_and_renders_typed_objects() {
    let helm = Helm::offline();
    let variants: &[&[&str]] = &[
        &[],
        &["--set", "revision=canary", "--set", "revisionTags={prod}"],
        &[
            "--set",
            "autoscaleEnabled=true",
            "--set",
            "autoscaleMin=3",
            "--set",
            "memory.targetAverageUtilization=70",
        ],
    ];
    for set in variants {
        let docs = Chart::injector().lint_and_template(&helm, set);
        let mut kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        kinds.sort();
        kinds.dedup();
        let autoscaled = set.contains(&"autoscaleEnabled=true");
        assert_eq!(
            kinds.contains(&"HorizontalPodAutoscaler"),
            autoscaled,
            "{set:?}: {kinds:?}"
        );
        assert!(kinds.contains(&"PodDisruptionBudget"), "{set:?}: {kinds:?}");
        if autoscaled {
            let dep = &helm::of_kind(&docs, "Deployment")[0];
            assert!(
                dep["spec"].get("replicas").is_none(),
                "the HPA owns replicas"
            );
        }
    }
}

/// The chart's values reach the injected pod as istiod's do: `helm template` with istiod's value names
/// set, its ConfigMap written out as the mounted folder, then `injector kube-inject --config-dir` of the
/// example Deployment. `global.hub`/`global.tag` name the proxy image, `global.proxy.logLevel` and
/// `global.proxy.resources` shape the sidecar, `global.proxy_init.image` the init container,
/// `meshConfig.defaultConfig` and `global.istioNamespace` with `revision` the proxy's configuration, and
/// `revision` (the Deployment's `REVISION`) the status annotation; `cni.enabled` replaces istio-init.
#[test]
fn chart_values_reach_the_injected_pod() {
    let helm = Helm::offline();
    let deployment = kube_inject_with_chart(
        &helm,
        &[
            "--set",
            "global.hub=registry.example/istio,global.tag=1.28.1",
            "--set",
            "global.proxy.logLevel=debug,global.proxy.resources.requests.cpu=250m",
            "--set",
            "global.proxy_init.image=registry.example/init:2",
            "--set",
            "meshConfig.defaultConfig.concurrency=3,global.istioNamespace=mesh-system",
            "--set",
            "revision=canary",
        ],
    );
    let spec = &deployment["spec"]["template"]["spec"];
    let proxy = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "istio-proxy")
        .unwrap();
    assert_eq!(proxy["image"], "registry.example/istio/proxyv2:1.28.1");
    assert_eq!(proxy["resources"]["requests"]["cpu"], "250m");
    let args: Vec<&str> = proxy["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--proxyLogLevel=debug"), "{args:?}");
    let proxy_config = proxy["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "PROXY_CONFIG")
        .unwrap()["value"]
        .as_str()
        .unwrap();
    let proxy_config: Value = serde_json::from_str(proxy_config).unwrap();
    assert_eq!(
        proxy_config["discoveryAddress"],
        "istiod-canary.mesh-system.svc:15012"
    );
    assert_eq!(proxy_config["concurrency"], 3);
    assert_eq!(
        spec["initContainers"][0]["image"],
        "registry.example/init:2"
    );
    let status = deployment["spec"]["template"]["metadata"]["annotations"]
        ["sidecar.istio.io/status"]
        .as_str()
        .unwrap();
    let status: Value = serde_json::from_str(status).unwrap();
    assert_eq!(status["revision"], "canary");

    // `cni.enabled`: Istio's CNI plugin intercepts, so no istio-init (its validation container instead).
    let cni = kube_inject_with_chart(&helm, &["--set", "cni.enabled=true"]);
    assert_eq!(
        container_names(&cni["spec"]["template"], "initContainers"),
        ["istio-validation"]
    );
}

/// `injector kube-inject --config-dir` of the example Deployment with the ConfigMap `helm template
/// <set>` renders, written out as the mounted folder, and the environment of the chart's Deployment.
fn kube_inject_with_chart(helm: &Helm, set: &[&str]) -> Value {
    let docs = helm.template(NS, set).unwrap();
    let cm = helm::of_kind(&docs, "ConfigMap")[0];
    let dir = TempDir::new("helm-values");
    for (k, v) in cm["data"].as_object().unwrap() {
        std::fs::write(dir.path().join(k), v.as_str().unwrap()).unwrap();
    }
    let container =
        &helm::of_kind(&docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0];
    let env: BTreeMap<&str, &str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["value"].as_str().unwrap()))
        .collect();
    let out = test_support::process::stdout_ok(
        Command::new(e2e::bin("injector"))
            .envs(&env)
            .args(["kube-inject", "--native-sidecars", "false", "--config-dir"])
            .arg(dir.path())
            .arg("-f")
            .arg(helm::repo_dir().join("examples/hello.yaml")),
        "injector kube-inject with the chart's ConfigMap",
    );
    test_support::pods::documents(&out).unwrap().remove(0)
}

/// Hostile values: every value the chart's templates read (values.yaml's, and the paths the
/// templates name that it leaves out), set to text that would add the key `zzinjected` to the rendered
/// YAML if a template wrote it unquoted, adds no key. `helm template` refuses it naming the value
/// (values.schema.json, or the templates' own checks), or renders it as a scalar; and without the schema
/// (`--skip-schema-validation`) the templates' quoting alone holds. The values found unquoted on 9154c7e
/// (`tag`, `hub`, `pdb.minAvailable`, the container's `env` names, `global.proxy.autoInject` in the
/// injector's own configuration) are refused by the schema, naming their path.
#[test]
fn hostile_values_add_no_key() {
    // The HPA and its values render only with autoscaling on.
    let variants = [json!({"autoscaleEnabled": true})];
    let refused = [
        ("tag", "'/tag'"),
        ("hub", "'/hub'"),
        ("pdb.minAvailable", "'/pdb/minAvailable'"),
        ("replicaCount", "'/replicaCount'"),
        ("env{new key}", "'/env'"),
        ("global.proxy.autoInject", "'/global/proxy/autoInject'"),
        ("serve.drainDelaySecs", "'/serve/drainDelaySecs'"),
    ];
    Chart::injector().assert_hostile_values_held(&Helm::offline(), &variants, &refused);
}

/// Counts and budgets are validated (`replicaCount=-1` once rendered silently): replicas and the
/// HPA's bounds are integers in the API server's ranges, the PodDisruptionBudget's values an integer or a
/// percentage, the rollout not stuck at 0/0, the webhook's timeout 1–30 s; each refusal names the
/// value. What is valid still renders, as the API server would take it.
#[test]
fn chart_validates_counts_and_budgets() {
    let helm = Helm::offline();
    let refused: &[(&[&str], &str)] = &[
        (&["--set", "replicaCount=-1"], "/replicaCount"),
        (&["--set", "replicaCount=1.5"], "/replicaCount"),
        (&["--set-string", "replicaCount=2"], "/replicaCount"),
        (&["--set", "pdb.minAvailable=-1"], "/pdb/minAvailable"),
        (&["--set", "pdb.minAvailable=150%"], "/pdb/minAvailable"),
        (&["--set", "pdb.maxUnavailable=one"], "/pdb/maxUnavailable"),
        (&["--set", "pdb.minAvaliable=1"], "minAvaliable"),
        (
            &["--set", "pdb.unhealthyPodEvictionPolicy=Sometimes"],
            "/pdb/unhealthyPodEvictionPolicy",
        ),
        (&["--set", "autoscaleMin=0"], "/autoscaleMin"),
        (
            &[
                "--set",
                "autoscaleEnabled=true,autoscaleMin=4,autoscaleMax=3",
            ],
            "autoscaleMax 3 is below autoscaleMin 4",
        ),
        (&["--set", "rollingMaxSurge=-1"], "/rollingMaxSurge"),
        (
            &["--set", "rollingMaxSurge=0,rollingMaxUnavailable=0%"],
            "rollingMaxSurge 0 and rollingMaxUnavailable 0%",
        ),
        (
            &["--set", "webhook.timeoutSeconds=31"],
            "/webhook/timeoutSeconds",
        ),
        (
            &["--set", "webhook.timeoutSeconds=5"],
            "serve.reviewDeadlineMs 8000 is not below webhook.timeoutSeconds 5",
        ),
        (
            &["--set", "serve.maxBodyBytesInFlight=1024"],
            "/serve/maxBodyBytesInFlight",
        ),
        (&["--set-json", "global.tag=1.28"], "/global/tag"),
    ];
    Chart::injector().assert_refused(&helm, refused);
    let accepted: &[(&[&str], &str, Value)] = &[
        (
            &["--set", "replicaCount=0"],
            "Deployment",
            json!({"replicas": 0}),
        ),
        (
            &["--set", "replicaCount=3,pdb.minAvailable=50%"],
            "PodDisruptionBudget",
            json!({"minAvailable": "50%"}),
        ),
        (
            &["--set", "pdb.maxUnavailable=1"],
            "PodDisruptionBudget",
            json!({"maxUnavailable": 1}),
        ),
        (
            &["--set", "rollingMaxSurge=25%,rollingMaxUnavailable=0"],
            "Deployment",
            json!({"strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}}),
        ),
    ];
    for (set, kind, want) in accepted {
        let docs = helm.template(NS, set).unwrap();
        let spec = &helm::of_kind(&docs, kind)[0]["spec"];
        for (k, v) in want.as_object().unwrap() {
            assert!(holds(&spec[k], v), "{set:?}: {kind} {k} is {}", spec[k]);
        }
        docs.iter().for_each(helm::typed);
    }
}

/// The pod a workload's template makes, named `name`, as its controller would create it.
fn template_pod(workload: &Value, name: &str) -> Value {
    let template = &workload["spec"]["template"];
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": template["metadata"]["labels"],
                     "annotations": template["metadata"]["annotations"]},
        "spec": template["spec"],
    })
}

/// The Pod Security levels docs/helm.md and the charts' NOTES give, held against the API server's own
/// PodSecurity admission: the pod of the injector's Deployment is admitted (a server-side dry
/// run) into a namespace enforcing `restricted`, so its namespace can enforce it; the pod of the istio-cni
/// DaemonSet is refused by `baseline` (its hostPath mounts) and by `restricted` (root, among others), and
/// admitted only where `privileged` is allowed, as its job requires.
#[test]
fn pod_security_levels_the_charts_need() {
    let cluster = Cluster::up();
    let helm = Helm::offline();
    let injector = helm.template(NS, &[]).unwrap();
    let injector = template_pod(helm::of_kind(&injector, "Deployment")[0], "injector");
    let cni = helm
        .template_chart(&helm::cni_chart_dir(), "istio-cni", "istio-system", &[])
        .unwrap();
    let cni = template_pod(helm::of_kind(&cni, "DaemonSet")[0], "istio-cni-node");
    for level in ["restricted", "baseline", "privileged"] {
        let ns = format!("pss-{level}");
        cluster
            .namespace(
                &ns,
                &labels(&[("pod-security.kubernetes.io/enforce", level)]),
            )
            .unwrap();
    }
    // One server-side dry-run create of `pod` in namespace `ns`: Ok, or the API server's refusal.
    let admit = |pod: &Value, ns: &str| -> Result<(), String> {
        let body = serde_json::to_vec(pod).unwrap();
        let out = cluster
            .kubectl_output(
                &[
                    "create",
                    "--dry-run=server",
                    "-n",
                    ns,
                    "-o",
                    "name",
                    "-f",
                    "-",
                ],
                Some(&body),
            )
            .unwrap();
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    // The admission plugin reads namespaces from its informer: the refusals show that it sees the new
    // labels, so the admissions after them are judged under those labels too.
    for (level, reasons) in [
        (
            "baseline",
            &[
                "violates PodSecurity \"baseline:latest\"",
                "hostPath volumes",
            ][..],
        ),
        (
            "restricted",
            &[
                "violates PodSecurity \"restricted:latest\"",
                "restricted volume type \"hostPath\"",
                "runAsNonRoot != true",
                "runAsUser=0",
            ][..],
        ),
    ] {
        let ns = format!("pss-{level}");
        let refusal = e2e::cluster::wait_for(
            &format!("the istio-cni pod refused under {level}"),
            Duration::from_secs(60),
            || match admit(&cni, &ns) {
                Ok(()) => Err("admitted".to_string()),
                Err(e) => Ok(e),
            },
        );
        for reason in reasons {
            assert!(
                refusal.contains(reason),
                "{level}: {reason:?} not in {refusal}"
            );
        }
    }
    for level in ["restricted", "baseline", "privileged"] {
        if let Err(e) = admit(&injector, &format!("pss-{level}")) {
            panic!("the injector's pod is refused in a namespace enforcing {level}: {e}");
        }
    }
    if let Err(e) = admit(&cni, "pss-privileged") {
        panic!("the istio-cni pod is refused in a namespace enforcing privileged: {e}");
    }
    // What each chart's NOTES tell the installer is what was just shown.
    for (chart, level) in [
        (helm::chart_dir(), "restricted"),
        (helm::cni_chart_dir(), "privileged"),
    ] {
        let notes = std::fs::read_to_string(chart.join("templates/NOTES.txt")).unwrap();
        let said: Vec<&str> = notes
            .match_indices("pod-security.kubernetes.io/enforce=")
            .map(|(at, m)| {
                notes[at + m.len()..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
            })
            .collect();
        assert_eq!(said, [level], "{}", chart.display());
    }
}

/// Whether `got` has every field of `want` with its value (objects compared field by field).
fn holds(got: &Value, want: &Value) -> bool {
    match want {
        Value::Object(m) => m.iter().all(|(k, v)| holds(&got[k], v)),
        _ => got == want,
    }
}

/// `deploy/base` holds the chart rendered with `deploy/values.yaml` (scripts/render-deploy.sh), byte for
/// byte: rendering again into a temporary folder gives the same files, and deploy/base has no generated
/// file the chart no longer renders.
#[test]
fn deploy_base_is_the_rendered_chart() {
    let dir = helm::render_deploy();
    let rendered = helm::assert_deployed_is_rendered(&dir.path().join("base"), "deploy/base");
    assert!(rendered.len() >= 8, "rendered: {rendered:?}");
}

/// The ServiceAccount the chart's injector runs as.
const SA: &str = "system:serviceaccount:sidecar-injector:sidecar-injector";

/// `helm install` of the chart into the test apiserver, as a user installs it (the serving pair and its CA
/// as values), then the injector run as the installed Deployment runs it: its container's arguments and
/// environment, its mounted Secret and ConfigMap read back from the apiserver into local folders standing
/// for the mounts, in a network namespace of its own (the pod's), listening on the container port. The
/// installed Service reaches it through an EndpointSlice (what the endpoint controller would write for a
/// ready pod), and a pod created with kubectl in a namespace labelled `istio-injection=enabled` is stored
/// injected, one in an unlabelled namespace is not. Then the installed RBAC: `kubectl auth can-i` as the
/// ServiceAccount for each permission granted and for what must be denied, and the same through a
/// kubeconfig holding the account's own token.
#[test]
fn helm_install_injects_a_labelled_namespace() {
    test_support::require_root();
    let cluster = Cluster::up();
    let dir = TempDir::new("helm-install");
    let certs = injector_certs(&dir.path().join("certs"), &[]).unwrap();
    let file = |name: &str| certs.dir.join(name).display().to_string();
    let (cert, key, ca) = (
        format!("tls.cert={}", file("tls.crt")),
        format!("tls.key={}", file("tls.key")),
        format!("tls.caBundle={}", file("ca.crt")),
    );
    let chart = Chart::injector();
    chart.install(
        &cluster,
        &["--set-file", &cert, "--set-file", &key, "--set-file", &ca],
    );
    let helm = cluster.helm();
    let status = helm.run(&["status", "sidecar-injector", "-n", NS]).unwrap();
    assert!(status.contains("STATUS: deployed"), "{status}");

    // The installed configuration carries the CA that signed the serving certificate.
    let mwc = cluster
        .kubectl_json(
            &["get", "mutatingwebhookconfiguration", "sidecar-injector"],
            None,
        )
        .unwrap();
    let bundle = std::fs::read(certs.dir.join("ca.crt")).unwrap();
    for wh in mwc["webhooks"].as_array().unwrap() {
        let got = base64::engine::general_purpose::STANDARD
            .decode(wh["clientConfig"]["caBundle"].as_str().unwrap())
            .unwrap();
        assert_eq!(got, bundle, "{}", wh["name"]);
    }

    // The injector runs as the installed Deployment runs it, with the service account's own token in
    // place of the mounted one (`--in-cluster` needs a pod): exactly the chart's RBAC. It listens on
    // the host end of a veth pair, an address the EndpointSlice may name (not loopback) from which it
    // still reaches the apiserver on 127.0.0.1.
    proxy_config_crd(&cluster);
    let link = HostLink::new("helm-injector");
    let [a, b, c, _] = link.addr.octets();
    let host = std::net::Ipv4Addr::new(a, b, c, 1);
    let mut pod = InstalledPod::read(&cluster, NS, "sidecar-injector", &dir.path().join("mounts"));
    let serve_kubeconfig = dir.path().join("serve.kubeconfig");
    cluster
        .service_account_kubeconfig(NS, "sidecar-injector", &serve_kubeconfig)
        .unwrap();
    let at = pod.args.iter().position(|a| a == "--in-cluster");
    let at = at.expect("the chart's serve.inCluster passes --in-cluster");
    pod.args[at] = format!("--kubeconfig={}", serve_kubeconfig.display());
    let listen = pod.listen.replace("0.0.0.0", &host.to_string());
    let injector = Injector::start_in(None, &listen, &pod.args, &pod.env)
        .expect("injector serve with the installed Deployment's arguments");
    cluster
        .apply(&json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "sidecar-injector-pod",
                "namespace": NS,
                "labels": {"kubernetes.io/service-name": "sidecar-injector"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host.to_string()], "conditions": {"ready": true}}],
            "ports": [{"name": "https-webhook", "port": injector.https.port(), "protocol": "TCP"}],
        }))
        .unwrap();

    cluster
        .namespace("apps", &labels(&[("istio-injection", "enabled")]))
        .unwrap();
    cluster.namespace("plain", &BTreeMap::new()).unwrap();
    let probe = corpus_pod("hello.yaml", "probe");
    eventually(
        "the apiserver to call the installed webhook",
        || match create(&cluster, "apps", &probe, &["--dry-run=server"]) {
            Ok(p) if injected(&p) => Ok(()),
            Ok(p) => Err(format!("not injected: {p}")),
            Err(e) => Err(format!("{e:#}")),
        },
    );
    let stored = create(&cluster, "apps", &corpus_pod("hello.yaml", "hello"), &[]).unwrap();
    assert!(injected(&stored), "not injected: {stored}");
    let init = stored["spec"]["initContainers"][0]["image"]
        .as_str()
        .unwrap();
    assert_eq!(
        init, "ghcr.io/sidecar-inject/iptables-init:0.1.0",
        "the chart's global.proxy_init.image"
    );
    let plain = create(&cluster, "plain", &corpus_pod("hello.yaml", "hello"), &[]).unwrap();
    assert!(!injected(&plain), "injected in an unlabelled namespace");
    // The chart's --log-format=json: one line per review, with its decision.
    let decided = injector.log().lines().any(|l| {
        serde_json::from_str::<Value>(l).is_ok_and(|e| {
            e["namespace"] == "apps" && e["pod"] == "hello" && e["decision"] == "injected"
        })
    });
    assert!(decided, "no JSON review line:\n{}", injector.log());

    // Under that RBAC the injector keeps its configuration's caBundle: a wrong one written with
    // kubectl is corrected (the watch by name and the patch both allowed), and nothing was forbidden.
    let wrong = base64::engine::general_purpose::STANDARD.encode(b"not the CA");
    cluster
        .kubectl(
            &[
                "patch",
                "mutatingwebhookconfiguration",
                "sidecar-injector",
                "--type=json",
                "-p",
                &json!([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": wrong}])
                    .to_string(),
            ],
            None,
        )
        .unwrap();
    e2e::cluster::wait_for(
        "the injector to correct the caBundle",
        e2e::PATIENCE,
        || {
            let mwc = cluster.kubectl_json(
                &["get", "mutatingwebhookconfiguration", "sidecar-injector"],
                None,
            )?;
            let got = mwc["webhooks"][0]["clientConfig"]["caBundle"]
                .as_str()
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
            if got.as_deref() == Some(bundle.as_slice()) {
                Ok(())
            } else {
                Err(anyhow::anyhow!("caBundle still {got:?}"))
            }
        },
    );
    let log = injector.log();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "the chart's RBAC refused the injector something:\n{log}"
    );
    assert_rbac(&cluster, &dir.path().join("sa.kubeconfig"));

    // An upgrade that adds a revision tag adds its configuration and grants the patch of that one too;
    // an uninstall leaves no configuration and no cluster role behind.
    chart.upgrade(&cluster, &["--set", "revisionTags={prod}"]);
    let tag = cluster
        .kubectl_json(
            &[
                "get",
                "mutatingwebhookconfiguration",
                "sidecar-injector-tag-prod",
            ],
            None,
        )
        .unwrap();
    assert_eq!(tag["metadata"]["labels"]["istio.io/tag"], "prod");
    let tagged = "mutatingwebhookconfigurations/sidecar-injector-tag-prod";
    assert!(helm::can_i(&cluster, SA, &["patch", tagged]));
    chart.assert_uninstall_leaves_nothing(
        &cluster,
        "mutatingwebhookconfigurations,clusterroles,clusterrolebindings",
    );
}

/// A ProxyConfig CustomResourceDefinition (`networking.istio.io/v1beta1`, namespaced, its schema left
/// open), so that the apiserver and kubectl know the resource the chart's ClusterRole names; the RBAC
/// checks need no more of Istio's schema.
pub(crate) fn proxy_config_crd(cluster: &Cluster) {
    cluster
        .apply(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "proxyconfigs.networking.istio.io"},
            "spec": {
                "group": "networking.istio.io",
                "names": {"kind": "ProxyConfig", "listKind": "ProxyConfigList",
                          "plural": "proxyconfigs", "singular": "proxyconfig"},
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1beta1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                                                   "x-kubernetes-preserve-unknown-fields": true}},
                }],
            },
        }))
        .unwrap();
    cluster
        .kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "crd/proxyconfigs.networking.istio.io",
                &format!("--timeout={}s", e2e::PATIENCE.as_secs()),
            ],
            None,
        )
        .unwrap();
}

/// The installed Deployment's container as the kubelet would run it: `injector serve`'s arguments
/// (without `serve` and `--listen`, which [`Injector::start_in`] gives), with each mounted volume's path
/// replaced by a local folder holding what the kubelet would mount there (the Secret's or ConfigMap's
/// data, read back from the apiserver), and the container's environment.
struct InstalledPod {
    args: Vec<String>,
    env: BTreeMap<String, String>,
    /// The `--listen` address of the container.
    listen: String,
}

impl InstalledPod {
    fn read(cluster: &Cluster, ns: &str, deployment: &str, mounts: &Path) -> InstalledPod {
        let dep = cluster
            .kubectl_json(&["get", "deployment", "-n", ns, deployment], None)
            .unwrap();
        let spec = &dep["spec"]["template"]["spec"];
        let container = &spec["containers"][0];
        let mut local: Vec<(String, PathBuf)> = Vec::new();
        for m in container["volumeMounts"].as_array().unwrap() {
            let name = m["name"].as_str().unwrap();
            let volume = helm::volume(spec, name);
            let folder = mounts.join(name);
            std::fs::create_dir_all(&folder).unwrap();
            let (kind, object, encoded) = if let Some(s) = volume["secret"]["secretName"].as_str() {
                ("secret", s, true)
            } else {
                let c = volume["configMap"]["name"].as_str().unwrap();
                ("configmap", c, false)
            };
            let obj = cluster
                .kubectl_json(&["get", kind, "-n", ns, object], None)
                .unwrap();
            for (k, v) in obj["data"].as_object().unwrap() {
                let text = v.as_str().unwrap();
                let bytes = if encoded {
                    base64::engine::general_purpose::STANDARD
                        .decode(text)
                        .unwrap()
                } else {
                    text.as_bytes().to_vec()
                };
                std::fs::write(folder.join(k), bytes).unwrap();
            }
            local.push((m["mountPath"].as_str().unwrap().to_string(), folder));
        }
        let all: Vec<String> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        assert_eq!(all[0], "serve");
        let mut listen = None;
        let mut args = Vec::new();
        for a in &all[1..] {
            if let Some(l) = a.strip_prefix("--listen=") {
                listen = Some(l.to_string());
                continue;
            }
            if a.starts_with("--metrics-listen=") {
                continue;
            }
            let mut a = a.clone();
            for (path, folder) in &local {
                a = a.replace(path.as_str(), &folder.display().to_string());
            }
            args.push(a);
        }
        let env = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["value"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        InstalledPod {
            args,
            env,
            listen: listen.expect("the container's --listen"),
        }
    }
}

/// What the chart's ServiceAccount may and may not do, asked with `kubectl auth can-i --as` (the
/// apiserver's own RBAC evaluation of the installed roles), then checked by requests made with the
/// account's own token (`Cluster::service_account_kubeconfig`, which the injector's API client will run
/// with).
fn assert_rbac(cluster: &Cluster, kubeconfig: &Path) {
    let granted: &[&[&str]] = &[
        &["get", "namespaces"],
        &["list", "namespaces"],
        &["watch", "namespaces"],
        &["get", "nodes"],
        &["list", "nodes"],
        &["watch", "nodes"],
        &["get", "proxyconfigs.networking.istio.io", "-A"],
        &["list", "proxyconfigs.networking.istio.io", "-A"],
        &["watch", "proxyconfigs.networking.istio.io", "-A"],
        &["get", "mutatingwebhookconfigurations/sidecar-injector"],
        &["patch", "mutatingwebhookconfigurations/sidecar-injector"],
        &["watch", "mutatingwebhookconfigurations/sidecar-injector"],
        &["get", "configmaps/istio-sidecar-injector", "-n", NS],
        &["watch", "configmaps/istio-sidecar-injector", "-n", NS],
    ];
    let denied: &[&[&str]] = &[
        // Another webhook configuration, or all of them.
        &[
            "patch",
            "mutatingwebhookconfigurations/istio-sidecar-injector",
        ],
        &["get", "mutatingwebhookconfigurations/zz-other"],
        &["list", "mutatingwebhookconfigurations"],
        &["update", "mutatingwebhookconfigurations/sidecar-injector"],
        &["delete", "mutatingwebhookconfigurations/sidecar-injector"],
        &["create", "mutatingwebhookconfigurations"],
        &["patch", "validatingwebhookconfigurations/sidecar-injector"],
        // Secrets anywhere, its own included (the serving pair is mounted).
        &["list", "secrets", "-A"],
        &["get", "secrets/sidecar-injector-tls", "-n", NS],
        // Workloads and writes to what it reads.
        &["create", "pods", "-n", "apps"],
        &["list", "pods", "-A"],
        &["patch", "namespaces/apps"],
        &["create", "namespaces"],
        &["patch", "nodes"],
        &["create", "proxyconfigs.networking.istio.io", "-n", "apps"],
        &["get", "configmaps/other", "-n", NS],
        &["update", "configmaps/istio-sidecar-injector", "-n", NS],
        &["create", "serviceaccounts/token", "-n", NS],
        &["impersonate", "serviceaccounts"],
        &["escalate", "clusterroles"],
    ];
    helm::assert_may(cluster, SA, granted, denied);

    // The account's own token: a client of its kubeconfig gets what RBAC grants, and no more.
    cluster
        .service_account_kubeconfig(NS, "sidecar-injector", kubeconfig)
        .unwrap();
    let as_sa = |args: &[&str]| cluster.kubectl_as(kubeconfig, args).unwrap();
    let who = as_sa(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(String::from_utf8_lossy(&who.stdout), SA);
    for args in [
        &["get", "namespaces", "apps"][..],
        &["get", "mutatingwebhookconfiguration", "sidecar-injector"],
        &["get", "nodes"],
        &["get", "configmap", "-n", NS, "istio-sidecar-injector"],
    ] {
        let out = as_sa(args);
        assert!(
            out.status.success(),
            "{args:?} with the account's token: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for args in [
        &["get", "secrets", "-A"][..],
        &["get", "mutatingwebhookconfigurations"],
        &["get", "pods", "-n", "apps"],
    ] {
        let out = as_sa(args);
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("forbidden"),
            "{args:?} with the account's token: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
