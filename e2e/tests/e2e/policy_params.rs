//! `injector serve --kubeconfig --own-policy-params` through the real kube-apiserver with the
//! MutatingAdmissionPolicy API (issue 31, "kept current in the cluster"): serve creates the revision's
//! params object as `injector policy` compiles it, rewrites it when its ConfigMap changes (and only
//! then) and when a ProxyConfig changes, never writes another revision's object, and gives a
//! configuration the policy cannot reproduce params under which the policy injects no pod. No webhook
//! is installed: every injection seen is the policy's, run by the apiserver.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use e2e::apiserver::Injector;
use e2e::cluster::{wait_for, Cluster};
use e2e::policy_differential::{policy_objects, Harness};
use serde_json::{json, Value};
use test_support::corpus::{Config, ConfigFiles};

use crate::kube_apiserver::{create, injected};

/// Where the ConfigMaps live (serve's `--configmap-namespace`).
const CM_NS: &str = "istio-system";
/// The namespace the test's binding selects, labelled for injection.
const NS: &str = "owned";
/// The params object of the default revision, as `injector policy` names it.
const PARAMS: &str = "sidecar-injector";

fn params(c: &Cluster, name: &str) -> Option<Value> {
    c.kubectl_json(&["get", "injectionparams", name], None).ok()
}

/// `injector policy <cfg's file flags> <extra>`'s params spec.
fn compiled_spec(cfg: &ConfigFiles, extra: &[&str]) -> Value {
    let mut flags = cfg.args();
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let objects = policy_objects(&flags).unwrap();
    let p = objects
        .iter()
        .find(|o| o["kind"] == "InjectionParams")
        .unwrap();
    p["spec"].clone()
}

/// Writes the ConfigMaps from `cfg`'s files (created or replaced).
fn apply_config_maps(c: &Cluster, cfg: &ConfigFiles) {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    c.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "istio-sidecar-injector", "namespace": CM_NS},
        "data": {"values": read(&cfg.values), "config": read(&cfg.injector_config)},
    }))
    .unwrap();
    c.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "istio", "namespace": CM_NS},
        "data": {"mesh": read(&cfg.mesh)},
    }))
    .unwrap();
}

/// The policy of `injector policy` as `owned-policy`, and one binding of it to our params for [`NS`].
fn install_policy(c: &Cluster) {
    let objects = policy_objects(&[]).unwrap();
    let mut policy = objects
        .iter()
        .find(|o| o["kind"] == "MutatingAdmissionPolicy")
        .unwrap()
        .clone();
    policy["metadata"]["name"] = json!("owned-policy");
    c.apply(&policy).unwrap();
    let mut binding = objects
        .iter()
        .find(|o| o["kind"] == "MutatingAdmissionPolicyBinding")
        .unwrap()
        .clone();
    assert_eq!(binding["spec"]["paramRef"]["name"], PARAMS);
    binding["metadata"]["name"] = json!("owned-binding");
    binding["spec"]["policyName"] = json!("owned-policy");
    binding["spec"]["matchResources"] = json!({
        "matchPolicy": "Equivalent",
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
    });
    c.apply(&binding).unwrap();
}

/// A plain Deployment-like pod, created with `dryRun=All` in [`NS`]: the apiserver's answer after
/// admission (the policy ran on it), nothing stored.
fn admitted(c: &Cluster) -> Value {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "app-", "labels": {"app": "app"}},
        "spec": {"serviceAccountName": "default",
                 "containers": [{"name": "app", "image": "app", "ports": [{"containerPort": 8080}]}]}});
    create(c, NS, &pod, &["--dry-run=server"]).unwrap()
}

struct Metrics {
    injector: Injector,
    rt: tokio::runtime::Runtime,
}

impl Metrics {
    fn get(&self, sample: &str) -> f64 {
        self.rt.block_on(self.injector.metric(sample)).unwrap()
    }
}

#[test]
fn serve_keeps_its_revisions_policy_params_and_no_other() {
    let h = Harness::new().expect("a control plane with the policy API");
    let c = &h.cluster;
    let base = Config::base().unwrap();
    let cfg = base.write(&h.dir.path().join("cfg")).unwrap();
    c.namespace(CM_NS, &BTreeMap::new()).unwrap();
    c.namespace(
        NS,
        &BTreeMap::from([("istio-injection".to_string(), "enabled".to_string())]),
    )
    .unwrap();
    apply_config_maps(c, &cfg);
    install_policy(c);
    crate::helm_chart::proxy_config_crd(c);

    // Another revision's params object, which must never be written.
    let canary = policy_objects(&["--revision", "canary"]).unwrap();
    let canary = canary
        .iter()
        .find(|o| o["kind"] == "InjectionParams")
        .unwrap();
    assert_ne!(canary["metadata"]["name"], PARAMS);
    c.apply(canary).unwrap();
    let canary_name = canary["metadata"]["name"].as_str().unwrap();
    let canary_version = || params(c, canary_name).unwrap()["metadata"]["resourceVersion"].clone();
    let canary_before = canary_version();

    let file = |p: &Path| p.display().to_string();
    let args: Vec<String> = [
        "--tls-cert",
        &file(&h.certs.cert),
        "--tls-key",
        &file(&h.certs.key),
        "--kubeconfig",
        &file(&c.kubeconfig),
        "--injector-configmap",
        "istio-sidecar-injector",
        "--mesh-configmap",
        "istio",
        "--configmap-namespace",
        CM_NS,
        "--own-policy-params",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let serve = Metrics {
        injector: Injector::start(&args, &BTreeMap::new()).expect("injector serve starts"),
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    };

    // Created on start, as `injector policy` compiles the same configuration.
    let want = compiled_spec(&cfg, &[]);
    wait_for("the params object created", e2e::PATIENCE, || {
        let spec = params(c, PARAMS).map(|p| p["spec"].clone());
        (spec.as_ref() == Some(&want)).then_some(()).ok_or(spec)
    });
    let stored = params(c, PARAMS).unwrap();
    assert_eq!(stored["metadata"]["labels"]["istio.io/rev"], "default");
    // The apiserver runs the policy with them: a pod of the bound namespace is injected.
    wait_for("the policy injects with the params", e2e::PATIENCE, || {
        let pod = admitted(c);
        injected(&pod).then_some(()).ok_or(pod["metadata"].clone())
    });

    // A changed mesh ConfigMap: the params follow, once.
    let writes = r#"injector_policy_params_writes_total{result="success"}"#;
    let writes_before = serve.get(writes);
    let mut changed = base.clone();
    changed.mesh["defaultConfig"]["proxyMetadata"]["FROM_CONFIGMAP"] = json!("yes");
    let changed_cfg = changed.write(&h.dir.path().join("changed")).unwrap();
    let want = compiled_spec(&changed_cfg, &[]);
    assert_ne!(want, stored["spec"], "the change must reach the params");
    apply_config_maps(c, &changed_cfg);
    // From the stored change (the mesh ConfigMap is written last) to the params seen changed, by a
    // client polling with kubectl (each poll itself tens of milliseconds).
    let at = Instant::now();
    wait_for(
        "the params follow the mesh ConfigMap",
        e2e::PATIENCE,
        || {
            let spec = params(c, PARAMS).map(|p| p["spec"].clone());
            (spec.as_ref() == Some(&want)).then_some(()).ok_or(spec)
        },
    );
    let seen = at.elapsed().as_millis();
    // The injector's own figure: from the new engine to the write's answer.
    let log = std::fs::read_to_string(&serve.injector.stderr).unwrap();
    let written = log
        .lines()
        .rfind(|l| l.contains("policy params written"))
        .and_then(|l| l.split("since_change_ms=").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or("?")
        .to_string();
    eprintln!(
        "policy params: a ConfigMap change reached the params object in {written} ms (engine swapped to write answered); a polling client saw it {seen} ms after its write returned"
    );
    assert_eq!(
        serve.get(writes),
        writes_before + 1.0,
        "one write per change"
    );

    // A change that compiles to the same spec: compiled, not written.
    let version = params(c, PARAMS).unwrap()["metadata"]["resourceVersion"].clone();
    let compiles = serve.get("injector_policy_params_compiles_total");
    let same_cfg = changed.write(&h.dir.path().join("same")).unwrap();
    // The same documents with a comment: a new text, a reload, the same configuration.
    let text = std::fs::read_to_string(&same_cfg.mesh).unwrap();
    std::fs::write(&same_cfg.mesh, format!("# a comment\n{text}")).unwrap();
    apply_config_maps(c, &same_cfg);
    wait_for(
        "the unchanged configuration compiled",
        e2e::PATIENCE,
        || {
            let n = serve.get("injector_policy_params_compiles_total");
            (n > compiles).then_some(()).ok_or(n)
        },
    );
    assert_eq!(
        serve.get(writes),
        writes_before + 1.0,
        "no write for the same spec"
    );
    assert_eq!(
        params(c, PARAMS).unwrap()["metadata"]["resourceVersion"],
        version
    );

    // A configuration the policy cannot reproduce: params that inject no pod, and the metric says so.
    let mut refused = changed.clone();
    refused.injector_config["defaultTemplates"] = json!(["sidecar", "grpc-agent"]);
    let refused_cfg = refused.write(&h.dir.path().join("refused")).unwrap();
    assert!(
        policy_objects(
            &refused_cfg
                .args()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
        )
        .is_err(),
        "injector policy refuses it too"
    );
    apply_config_maps(c, &refused_cfg);
    let spec = wait_for("the refused configuration's params", e2e::PATIENCE, || {
        let spec = params(c, PARAMS).map(|p| p["spec"].clone());
        match &spec {
            Some(s) if s["refused"].is_string() => Ok(s.clone()),
            _ => Err(spec),
        }
    });
    assert!(
        spec["refused"].as_str().unwrap().contains("grpc-agent"),
        "{spec}"
    );
    assert_eq!(serve.get("injector_policy_params_refused"), 1.0);
    // The apiserver picks the new params up on its own time: wait for the first pod left alone, then
    // every further one is too.
    wait_for("the policy stops injecting", e2e::PATIENCE, || {
        let pod = admitted(c);
        (!injected(&pod))
            .then_some(())
            .ok_or(pod["metadata"].clone())
    });
    for _ in 0..3 {
        assert!(!injected(&admitted(c)), "the refused params injected a pod");
    }

    // Back to a configuration it compiles: the params and the injection return.
    apply_config_maps(c, &changed_cfg);
    let want = compiled_spec(&changed_cfg, &[]);
    wait_for("the params compiled again", e2e::PATIENCE, || {
        let spec = params(c, PARAMS).map(|p| p["spec"].clone());
        (spec.as_ref() == Some(&want)).then_some(()).ok_or(spec)
    });
    assert_eq!(serve.get("injector_policy_params_refused"), 0.0);
    wait_for("the policy injects again", e2e::PATIENCE, || {
        let pod = admitted(c);
        injected(&pod).then_some(()).ok_or(pod["metadata"].clone())
    });

    // A namespace's ProxyConfig: the cluster watch's new engine leaves the namespace to the webhook.
    c.namespace("tuned", &BTreeMap::new()).unwrap();
    c.apply(&json!({
        "apiVersion": "networking.istio.io/v1beta1", "kind": "ProxyConfig",
        "metadata": {"name": "tuned", "namespace": "tuned"},
        "spec": {"concurrency": 3},
    }))
    .unwrap();
    wait_for("the params follow the ProxyConfig", e2e::PATIENCE, || {
        let excluded = params(c, PARAMS).map(|p| p["spec"]["excludedNamespaces"].clone());
        excluded
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|e| e.contains(&json!("tuned")))
            .then_some(())
            .ok_or(excluded)
    });

    // Our name relabelled to another revision: left alone through a change.
    c.kubectl(
        &[
            "label",
            "--overwrite",
            "injectionparams",
            PARAMS,
            "istio.io/rev=canary",
        ],
        None,
    )
    .unwrap();
    let relabelled = params(c, PARAMS).unwrap()["metadata"]["resourceVersion"].clone();
    let compiles = serve.get("injector_policy_params_compiles_total");
    apply_config_maps(c, &cfg);
    wait_for("the change compiled", e2e::PATIENCE, || {
        let n = serve.get("injector_policy_params_compiles_total");
        (n > compiles).then_some(()).ok_or(n)
    });
    wait_for(
        "the relabelled object seen as another revision's",
        e2e::PATIENCE,
        || {
            let log = std::fs::read_to_string(&serve.injector.stderr).unwrap_or_default();
            log.contains("carries another revision's label")
                .then_some(())
                .ok_or("no log line yet")
        },
    );
    assert_eq!(
        params(c, PARAMS).unwrap()["metadata"]["resourceVersion"],
        relabelled,
        "another revision's object was written"
    );
    assert_eq!(
        canary_version(),
        canary_before,
        "the canary params were written"
    );
}
