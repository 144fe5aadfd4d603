//! `injector serve --kubeconfig`: what Istio's webhook reads from the API server (ProxyConfig resources,
//! Namespaces, Nodes) watched in a real kube-apiserver (`scripts/cluster.sh`, e2e::cluster), changed
//! with kubectl, and seen in the next review sent straight to the injector. One control plane for the
//! whole file: the scenarios run in order in one test.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use e2e::apiserver::{apply_patch, injector_certs, ApiServer, CertFiles, Http, Injector, TempDir};
use e2e::cluster::{wait_for, Cluster};
use serde_json::{json, Value};
use test_support::corpus::{Config, ConfigFiles};
use test_support::pods;

/// Istio's ProxyConfig CRD (testdata/istio/crds, from Istio's `crd-all.gen.yaml`).
fn proxy_config_crd() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/istio/crds/proxyconfigs.networking.istio.io.yaml")
}

/// Installs the ProxyConfig CRD and waits until the apiserver serves it.
fn install_proxy_config_crd(c: &Cluster) {
    c.kubectl(&["apply", "-f", proxy_config_crd().to_str().unwrap()], None)
        .unwrap();
    c.kubectl(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/proxyconfigs.networking.istio.io",
        ],
        None,
    )
    .unwrap();
}

/// An `injector serve --kubeconfig` on the base configuration and its reviewer.
struct Served {
    injector: Injector,
    api: ApiServer,
    rt: tokio::runtime::Runtime,
}

fn serve(c: &Cluster, certs: &CertFiles, cfg: &ConfigFiles, extra: &[&str]) -> Served {
    let mut args = e2e::apiserver::serve_args(&certs.cert, &certs.key, cfg);
    args.extend([
        "--kubeconfig".to_string(),
        c.kubeconfig.display().to_string(),
    ]);
    args.extend(extra.iter().map(|a| a.to_string()));
    Served::start(&args, certs)
}

impl Served {
    /// `injector serve <args>` and a reviewer trusting `certs`' CA.
    fn start(args: &[String], certs: &CertFiles) -> Served {
        let injector = Injector::start(args, &BTreeMap::new()).expect("injector serve starts");
        let api = ApiServer::new(&certs.mwc, injector.https).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Served { injector, api, rt }
    }

    fn ready(&self) -> bool {
        self.rt.block_on(self.injector.ready()).unwrap()
    }

    fn metric(&self, sample: &str) -> f64 {
        self.rt.block_on(self.injector.metric(sample)).unwrap()
    }

    /// Polls `/readyz` until it answers 200 (the first full list of every watch).
    fn wait_ready(&self) {
        wait_for("/readyz 200", e2e::PATIENCE, || {
            self.ready().then_some(()).ok_or("not ready")
        });
    }

    /// The pod the injector makes of `pod` in `namespace`.
    fn inject(&self, namespace: &str, pod: &Value) -> Value {
        self.rt.block_on(async {
            let mut conn = self.api.connect(Http::H1).await.unwrap();
            let answer = self
                .api
                .review(&mut conn, &pods::review("v1", "uid-1", namespace, pod))
                .await
                .unwrap_or_else(|e| panic!("review: {e:#}\n{}", self.injector.log()));
            assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
            apply_patch(&answer["response"], pod).unwrap()
        })
    }
}

/// A plain pod (no injection annotations) named `name`.
fn pod(name: &str, node: Option<&str>) -> Value {
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
    });
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

/// The istio-proxy container of an injected pod, and whether it is a native sidecar (an init container).
fn proxy(injected: &Value) -> (Value, bool) {
    for (list, native) in [("initContainers", true), ("containers", false)] {
        if let Some(c) = injected["spec"][list]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == "istio-proxy"))
        {
            return (c.clone(), native);
        }
    }
    panic!("no istio-proxy in {injected}");
}

/// The value of the proxy's environment variable `name` (`environmentVariables` of a ProxyConfig land
/// there through `proxyMetadata`).
fn proxy_env(injected: &Value, name: &str) -> Option<String> {
    proxy(injected).0["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .map(str::to_string)
}

fn proxy_config(namespace: &str, name: &str, watched: &str) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1beta1",
        "kind": "ProxyConfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"environmentVariables": {"WATCHED": watched}},
    })
}

/// The promised bound of the cluster reads: a change is in the next injected pod within a second.
const WITHIN: Duration = Duration::from_secs(1);

/// A cluster with `namespaces`, and the injector's serving certificates and base configuration in a
/// folder named for `tag` (kept alive by the caller).
fn cluster_with(tag: &str, namespaces: &[&str]) -> (Cluster, TempDir, CertFiles, ConfigFiles) {
    let c = Cluster::up();
    let dir = TempDir::new(tag);
    let certs = injector_certs(&dir.path().join("certs"), &["--san", "127.0.0.1"]).unwrap();
    let cfg = Config::base()
        .and_then(|c| c.write(&dir.path().join("cfg")))
        .unwrap();
    for ns in namespaces {
        c.namespace(ns, &BTreeMap::new()).unwrap();
    }
    (c, dir, certs, cfg)
}

#[test]
fn cluster_state_is_watched_from_the_apiserver() {
    // Its changes must reach reviews WITHIN a second: not beside the flood test.
    let _timed = e2e::load::timed();
    let (c, dir, certs, cfg) = cluster_with("cluster-watch", &["apps", "istio-system"]);

    // Before the ProxyConfig CRD exists its list fails: no ProxyConfigs (ready, as Istio's delayed
    // informer), the failure counted and retried until the CRD is there.
    let s = serve(&c, &certs, &cfg, &[]);
    let errors = r#"injector_cluster_watch_errors_total{resource="proxyconfigs"}"#;
    wait_for("a counted proxyconfigs watch error", e2e::PATIENCE, || {
        (s.metric(errors) >= 1.0).then_some(()).ok_or("none yet")
    });
    s.wait_ready();
    install_proxy_config_crd(&c);
    c.apply(&proxy_config("apps", "early", "early")).unwrap();
    // kube-rs' backoff after a few failed lists (0.8 s doubling): the CRD is found within seconds.
    wait_for("the CRD found on a retried list", e2e::PATIENCE, || {
        let got = proxy_env(&s.inject("apps", &pod("app", None)), "WATCHED");
        (got.as_deref() == Some("early")).then_some(()).ok_or(got)
    });
    c.kubectl(&["delete", "proxyconfig", "-n", "apps", "early"], None)
        .unwrap();
    // The delete reaches reviews at the next hand-over (at most one SETTLE window away), not at once.
    wait_for("the early ProxyConfig's delete", WITHIN, || {
        let got = proxy_env(&s.inject("apps", &pod("app", None)), "WATCHED");
        got.is_none().then_some(()).ok_or(got)
    });

    proxy_configs_apply_to_the_next_pod(&c, &s);
    native_sidecars_follow_the_nodes(&c, &s);
    drop(s);
    openshift_ids_follow_the_namespace(&c, &certs, &cfg);
    a_lost_apiserver_keeps_the_last_state(&c, &certs, &cfg, dir.path());
    configuration_from_config_maps(&c, &certs, &cfg);
}

/// `--injector-configmap` / `--mesh-configmap` (Istio's `NewConfigMapWatcher`): the same documents read
/// through the API inject as the files do, a change is followed, a deleted ConfigMap keeps the last
/// configuration.
fn configuration_from_config_maps(c: &Cluster, certs: &CertFiles, cfg: &ConfigFiles) {
    let file = |p: &std::path::Path| format!("{}", p.display());
    c.kubectl(
        &[
            "create",
            "configmap",
            "istio-sidecar-injector",
            "-n",
            "istio-system",
            &format!("--from-file=values={}", file(&cfg.values)),
            &format!("--from-file=config={}", file(&cfg.injector_config)),
        ],
        None,
    )
    .unwrap();
    c.kubectl(
        &[
            "create",
            "configmap",
            "istio",
            "-n",
            "istio-system",
            &format!("--from-file=mesh={}", file(&cfg.mesh)),
        ],
        None,
    )
    .unwrap();
    let from_files = serve(c, certs, cfg, &[]);
    from_files.wait_ready();
    let mut args: Vec<String> = [
        "--tls-cert",
        &file(&certs.cert),
        "--tls-key",
        &file(&certs.key),
        "--kubeconfig",
        &file(&c.kubeconfig),
        "--injector-configmap",
        "istio-sidecar-injector",
        "--mesh-configmap",
        "istio",
        "--configmap-namespace",
        "istio-system",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let s = Served::start(&args, certs);
    s.wait_ready();
    let p = pod("app", None);
    assert_eq!(
        s.inject("apps", &p),
        from_files.inject("apps", &p),
        "ConfigMaps inject as the files"
    );

    // The mesh document changed in place: followed.
    let mut mesh =
        pods::documents(&std::fs::read_to_string(&cfg.mesh).unwrap()).unwrap()[0].clone();
    mesh["defaultConfig"]["proxyMetadata"]["FROM_CONFIGMAP"] = json!("yes");
    c.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "istio", "namespace": "istio-system"},
        "data": {"mesh": mesh.to_string()},
    }))
    .unwrap();
    let from_configmap = || proxy_env(&s.inject("apps", &p), "FROM_CONFIGMAP");
    wait_for("the changed mesh ConfigMap", e2e::PATIENCE, || {
        let v = from_configmap();
        (v.as_deref() == Some("yes")).then_some(()).ok_or(v)
    });

    // Deleted: the last configuration stays (and is counted as a failed reload).
    c.kubectl(
        &[
            "delete",
            "configmap",
            "-n",
            "istio-system",
            "istio-sidecar-injector",
        ],
        None,
    )
    .unwrap();
    wait_for("the delete refused", e2e::PATIENCE, || {
        let failed = s.metric(r#"injector_config_reloads_total{result="failure"}"#);
        (failed >= 1.0).then_some(()).ok_or(failed)
    });
    assert_eq!(from_configmap().as_deref(), Some("yes"));
    args.push("--values".to_string());
    args.push(file(&cfg.values));
    let both = Injector::start(&args, &BTreeMap::new());
    assert!(
        both.is_err(),
        "--values with --injector-configmap must be refused"
    );
}

/// A TCP forwarder to the apiserver that the test can cut (open connections closed, new ones dropped
/// at once) and restore: the apiserver lost, from the injector's side.
struct Cuttable {
    addr: std::net::SocketAddr,
    open: tokio::sync::watch::Sender<bool>,
    _rt: tokio::runtime::Runtime,
}

impl Cuttable {
    fn to(upstream: std::net::SocketAddr) -> Cuttable {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (open, rx) = tokio::sync::watch::channel(true);
        rt.spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut rx = rx.clone();
                if !*rx.borrow() {
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut out) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut out) => {}
                        _ = rx.wait_for(|open| !*open) => {}
                    }
                });
            }
        });
        Cuttable {
            addr,
            open,
            _rt: rt,
        }
    }
}

/// Watch failures keep the last state (and readiness): a ProxyConfig deleted while the apiserver cannot
/// be reached stays applied, the failures are counted, and once it is back the delete is seen.
fn a_lost_apiserver_keeps_the_last_state(
    c: &Cluster,
    certs: &CertFiles,
    cfg: &ConfigFiles,
    dir: &std::path::Path,
) {
    let upstream: std::net::SocketAddr =
        c.server.strip_prefix("https://").unwrap().parse().unwrap();
    let proxy = Cuttable::to(upstream);
    // The same kubeconfig through the forwarder (same IP, so the serving certificate still matches).
    let kubeconfig = dir.join("kubeconfig-through-proxy");
    let text = std::fs::read_to_string(&c.kubeconfig).unwrap();
    assert!(text.contains(&c.server), "{text}");
    std::fs::write(
        &kubeconfig,
        text.replace(&c.server, &format!("https://{}", proxy.addr)),
    )
    .unwrap();
    let mut args = e2e::apiserver::serve_args(&certs.cert, &certs.key, cfg);
    args.extend(["--kubeconfig".to_string(), kubeconfig.display().to_string()]);
    // Started with the apiserver out of reach: not ready until the first list.
    proxy.open.send_replace(false);
    let s = Served::start(&args, certs);
    wait_for("a counted watch error while cut off", e2e::PATIENCE, || {
        let e = s.metric(r#"injector_cluster_watch_errors_total{resource="proxyconfigs"}"#);
        (e >= 1.0).then_some(()).ok_or(e)
    });
    assert!(!s.ready(), "ready before any watch listed");
    proxy.open.send_replace(true);
    s.wait_ready();
    let p = pod("app", None);
    let watched = || proxy_env(&s.inject("apps", &p), "WATCHED");
    c.apply(&proxy_config("apps", "kept", "kept")).unwrap();
    wait_for("the ProxyConfig through the forwarder", WITHIN, || {
        let w = watched();
        (w.as_deref() == Some("kept")).then_some(()).ok_or(w)
    });

    let errors = |s: &Served| {
        ["proxyconfigs", "namespaces", "nodes"]
            .iter()
            .map(|r| {
                s.metric(&format!(
                    r#"injector_cluster_watch_errors_total{{resource="{r}"}}"#
                ))
            })
            .sum::<f64>()
    };
    let before = errors(&s);
    proxy.open.send_replace(false);
    c.kubectl(&["delete", "proxyconfig", "-n", "apps", "kept"], None)
        .unwrap();
    wait_for("watch errors counted while cut off", e2e::PATIENCE, || {
        (errors(&s) > before).then_some(()).ok_or("none")
    });
    assert_eq!(watched().as_deref(), Some("kept"), "the last state is kept");
    assert!(s.ready(), "readiness stays after the first sync");

    proxy.open.send_replace(true);
    // kube-rs' default backoff (0.8 s doubling) after a few seconds of failures: well under 30 s.
    wait_for("the delete seen once reconnected", e2e::PATIENCE, || {
        let w = watched();
        w.is_none().then_some(()).ok_or(w)
    });
}

/// Istio's acceptance: a ProxyConfig created with kubectl changes the next injected pod within a second,
/// deleting it reverts it; with Istio's precedence (the pod's namespace over the root namespace).
fn proxy_configs_apply_to_the_next_pod(c: &Cluster, s: &Served) {
    let p = pod("app", None);
    assert_eq!(proxy_env(&s.inject("apps", &p), "WATCHED"), None);
    let seen = |want: Option<&str>, after: &str| {
        wait_for(after, WITHIN, || {
            let got = proxy_env(&s.inject("apps", &p), "WATCHED");
            (got.as_deref() == want).then_some(()).ok_or(got)
        })
    };
    c.apply(&proxy_config("apps", "watched", "namespace"))
        .unwrap();
    seen(
        Some("namespace"),
        "the namespace's ProxyConfig after its create",
    );
    c.apply(&proxy_config("istio-system", "mesh-wide", "root"))
        .unwrap();
    // The root namespace's resource is below the pod namespace's: no change may show, so give the
    // watch the same second, then check.
    std::thread::sleep(WITHIN);
    seen(
        Some("namespace"),
        "the namespace's ProxyConfig over the root's",
    );
    c.kubectl(&["delete", "proxyconfig", "-n", "apps", "watched"], None)
        .unwrap();
    seen(
        Some("root"),
        "the root namespace's ProxyConfig after the delete",
    );
    c.kubectl(
        &["delete", "proxyconfig", "-n", "istio-system", "mesh-wide"],
        None,
    )
    .unwrap();
    seen(None, "no ProxyConfig after both deletes");
}

/// Creates a Node named `name` whose kubelet reports `version` (status written through its subresource,
/// as a kubelet does).
fn node(c: &Cluster, name: &str, version: &str) {
    c.apply(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
        .unwrap();
    let status = json!({"status": {"nodeInfo": {"kubeletVersion": version}}}).to_string();
    c.kubectl(
        &[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ],
        None,
    )
    .unwrap();
}

/// Native sidecars `auto` (serve's default) as Istio's `DetectNativeSidecar`: the pod's node when set and
/// known, else every node, at least 1.33.
fn native_sidecars_follow_the_nodes(c: &Cluster, s: &Served) {
    let native = |node: Option<&str>| proxy(&s.inject("apps", &pod("app", node))).1;
    // No nodes: nothing disagrees.
    assert!(native(None));
    node(c, "new", "v1.33.0");
    node(c, "old", "v1.32.5");
    // Each node is created, then its status written: wait until both versions are seen, not only the
    // first node without one (which alone turns native sidecars off).
    wait_for("a 1.32 node turns native sidecars off", WITHIN, || {
        (!native(None) && native(Some("new")) && !native(Some("old")))
            .then_some(())
            .ok_or("the nodes' versions not seen yet")
    });
    assert!(native(Some("new")), "a pod on the 1.33 node");
    assert!(!native(Some("old")), "a pod on the 1.32 node");
    assert!(
        !native(Some("unknown")),
        "an unknown node: all nodes decide"
    );
    c.kubectl(&["delete", "node", "old"], None).unwrap();
    wait_for(
        "without the 1.32 node, native sidecars again",
        WITHIN,
        || native(None).then_some(()).ok_or("not native"),
    );
    assert!(native(Some("unknown")));
    c.kubectl(&["delete", "node", "new"], None).unwrap();
}

/// On OpenShift the proxy's uid comes from the pod's Namespace, watched like the rest.
fn openshift_ids_follow_the_namespace(c: &Cluster, certs: &CertFiles, cfg: &ConfigFiles) {
    let s = serve(c, certs, cfg, &["--platform", "openshift"]);
    s.wait_ready();
    let uid =
        || proxy(&s.inject("apps", &pod("app", None))).0["securityContext"]["runAsUser"].clone();
    assert_eq!(
        uid(),
        json!(1337),
        "a Namespace without OpenShift's annotations"
    );
    c.kubectl(
        &[
            "annotate",
            "namespace",
            "apps",
            "openshift.io/sa.scc.uid-range=1000620000/10000",
        ],
        None,
    )
    .unwrap();
    wait_for("the uid of the Namespace's range", WITHIN, || {
        let u = uid();
        (u == json!(1000629999)).then_some(()).ok_or(u)
    });
}

/// What a flood of ProxyConfigs may cost at its peak, the engine included: the chart's limit is sized for the
/// request bounds' worst case plus a watched cluster's state (docs/operations.md, "Memory"), so the state
/// of a flood must stay a small part of it, whatever the limit is set to.
const FLOOD_MEMORY_BOUND: u64 = 80 << 20;

/// The memory limit of the injector's Deployment in the chart (`resources.limits.memory`), in bytes.
fn chart_memory_limit() -> u64 {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/sidecar-injector/values.yaml");
    let values: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let limit = values["resources"]["limits"]["memory"].as_str().unwrap();
    let (n, unit) = limit.split_at(limit.find(|c: char| !c.is_ascii_digit()).unwrap());
    let unit = match unit {
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => panic!("{limit}: unit {other} not read here"),
    };
    n.parse::<u64>().unwrap() * unit
}

/// The promised bound at scale: a review, even during a flood, is answered within a second.
const REVIEW_BOUND: Duration = Duration::from_secs(1);
/// At scale a change reaches reviews within a second; twice that on a busy machine (the
/// watch event, one settle window of the hand-over, and the review).
const SETTLE_BOUND: Duration = Duration::from_secs(2);

/// Thousands of ProxyConfigs created in one namespace as fast as the apiserver takes
/// them (anyone allowed to create ProxyConfigs there can), while reviews keep coming, each for a
/// different pod (no patch-cache hit). Every review is answered within [`REVIEW_BOUND`], the injector's
/// peak resident set stays under the chart's memory limit, and a ProxyConfig created after the flood is
/// in the reviews within [`SETTLE_BOUND`] of its create's answer. All three kinds are watched
/// (`--platform openshift`, native sidecars `auto`).
#[test]
fn a_proxy_config_flood_keeps_reviews_fast_and_memory_bounded() {
    const FLOOD: usize = 5000;
    let _alone = e2e::load::alone();
    let (c, _dir, certs, cfg) =
        cluster_with("cluster-watch-flood", &["apps", "flood", "istio-system"]);
    install_proxy_config_crd(&c);
    node(&c, "n1", "v1.33.0");
    let mut args = e2e::apiserver::serve_args(&certs.cert, &certs.key, &cfg);
    args.extend(
        [
            "--kubeconfig",
            c.kubeconfig.to_str().unwrap(),
            "--platform",
            "openshift",
        ]
        .map(String::from),
    );
    // The chart's allocator settings (charts/sidecar-injector/values.yaml `env`).
    let env = BTreeMap::from(
        [
            ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
            ("MIMALLOC_PURGE_DELAY", "0"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let injector = Injector::start(&args, &env).expect("injector serve starts");
    let s = Served {
        api: ApiServer::new(&certs.mwc, injector.https).unwrap(),
        injector,
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    };
    s.wait_ready();

    // Reviews, one after another on one connection, for as long as the flood lasts: each one's time,
    // and the refused or failed ones (an injector past its review deadline answers `allowed: false`).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reviewer = {
        let (api, stop) = (s.api.clone(), stop.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut conn = api.connect(Http::H1).await.unwrap();
                let (mut took, mut failed) = (Vec::new(), Vec::new());
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    let review = pods::review("v1", "uid", "apps", &pod(&format!("app-{i}"), None));
                    let start = std::time::Instant::now();
                    let answer = api.review(&mut conn, &review).await;
                    took.push(start.elapsed());
                    match answer {
                        Ok(a) if a["response"]["allowed"] == json!(true) => {}
                        Ok(a) => failed.push(a["response"]["status"]["message"].to_string()),
                        Err(e) => {
                            failed.push(format!("{e:#}"));
                            conn = api.connect(Http::H1).await.unwrap();
                        }
                    }
                }
                (took, failed)
            })
        })
    };

    let flood: Vec<(String, Value)> = (0..FLOOD)
        .map(|i| {
            (
                "/apis/networking.istio.io/v1beta1/namespaces/flood/proxyconfigs".to_string(),
                proxy_config("flood", &format!("pc-{i}"), &format!("flood-{i}")),
            )
        })
        .collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let started = std::time::Instant::now();
    rt.block_on(c.create_all(flood, 8)).unwrap();
    let flood_took = started.elapsed();

    // The ProxyConfig created after the flood: from its create's answer to the first review showing it.
    let (status, _) = rt
        .block_on(c.request(
            "POST",
            "/apis/networking.istio.io/v1beta1/namespaces/apps/proxyconfigs",
            Some(&proxy_config("apps", "late", "late")),
        ))
        .unwrap();
    assert_eq!(status.as_u16(), 201);
    let created = std::time::Instant::now();
    // Polled with a generous deadline, so that a slow injector is measured, not just failed.
    let p = pod("app", None);
    let shows_late = || {
        let answer = s.rt.block_on(async {
            let mut conn = s.api.connect(Http::H1).await?;
            s.api
                .review(&mut conn, &pods::review("v1", "uid-late", "apps", &p))
                .await
        });
        let injected = match answer {
            Ok(a) if a["response"]["allowed"] == json!(true) => apply_patch(&a["response"], &p),
            _ => return false,
        };
        injected.is_ok_and(|i| proxy_env(&i, "WATCHED").as_deref() == Some("late"))
    };
    let settle = loop {
        if shows_late() {
            break Some(created.elapsed());
        }
        if created.elapsed() > Duration::from_secs(120) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (reviews, failed) = reviewer.join().expect("the reviewer thread");
    let (rss, peak) = s.injector.memory().unwrap();
    let limit = chart_memory_limit();
    let slowest = reviews.iter().max().copied().unwrap_or_default();
    let figures = format!(
        "{FLOOD} ProxyConfigs created in {flood_took:?}; {} reviews, {} refused or failed, slowest \
         {slowest:?}; RSS {} MiB, peak {} MiB (chart limit {} MiB); the late ProxyConfig in reviews \
         after {}; {} engine rebuilds",
        reviews.len(),
        failed.len(),
        rss >> 20,
        peak >> 20,
        limit >> 20,
        settle.map_or("more than 120 s".to_string(), |d| format!("{d:?}")),
        s.metric("injector_cluster_state_rebuilds_total"),
    );
    eprintln!("{figures}");
    assert!(
        reviews.len() >= 10,
        "too few reviews during the flood: {figures}"
    );
    assert!(
        failed.is_empty(),
        "reviews refused or failed ({:?}…): {figures}",
        failed.first()
    );
    assert!(
        slowest < REVIEW_BOUND,
        "a review took {slowest:?}: {figures}"
    );
    assert!(peak < limit, "peak RSS over the chart's limit: {figures}");
    assert!(
        peak < FLOOD_MEMORY_BOUND,
        "peak RSS over {} MiB, the watched state's share of the limit: {figures}",
        FLOOD_MEMORY_BOUND >> 20
    );
    assert!(
        settle.is_some_and(|d| d <= SETTLE_BOUND),
        "the late ProxyConfig was not in reviews within {SETTLE_BOUND:?}: {figures}"
    );
    assert_eq!(
        s.metric(r#"injector_cluster_watch_objects{resource="proxyconfigs"}"#),
        (FLOOD + 1) as f64,
        "{figures}"
    );
}
