//! `injector doctor --kubeconfig` and `injector explain --kubeconfig` against a real kube-apiserver
//! (e2e::cluster): what they read from the cluster instead of files (MutatingWebhookConfigurations, the
//! serving Secret, the Service and its EndpointSlices, Namespaces), and doctor's dry-run pod create, which
//! the apiserver sends to a real `injector serve` (the setup of `kube_apiserver`).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::Path;
use std::process::Command;

use base64::Engine as _;
use e2e::apiserver::{injector_certs, TempDir};
use e2e::cluster::Cluster;
use serde_json::{json, Value};
use test_support::corpus::Config;

use crate::doctor::{doctor, doctor_finds_errors, findings, Run};
use crate::kube_apiserver::{injected, install, labels, webhook_config, Setup};

/// `--kubeconfig <the cluster's>` and `extra`.
fn kube_args(c: &Cluster, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        "--kubeconfig".to_string(),
        c.kubeconfig.display().to_string(),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// The one finding of `check` in `run`, whatever its level.
/// The one `dry-run` finding of `run` is at `level`, and what it found passes `holds`.
fn dry_run_found(run: &Run, level: &str, holds: impl Fn(&str) -> bool) {
    let dry = only(run, "dry-run");
    assert_eq!(dry["level"], level, "{dry:#}");
    let found = dry["found"].as_str().unwrap();
    assert!(holds(found), "{dry:#}");
}

fn only<'a>(run: &'a Run, check: &str) -> &'a Value {
    let all: Vec<&Value> = run.report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check)
        .collect();
    assert_eq!(all.len(), 1, "one {check} finding: {:#}", run.report);
    all[0]
}

/// Service mode as deployed: the generated configurations, the Service and its EndpointSlice to the
/// injector in a network namespace, the serving Secret `sidecar-injector-tls`. `doctor --kubeconfig`
/// reads them all (no file flag), calls the endpoint it found in the EndpointSlice, checks the Secret's
/// certificate, and its dry-run create comes back injected: no error, and the report says where each
/// input came from.
#[test]
fn doctor_reads_the_cluster_and_passes_on_a_healthy_setup() {
    let s = Setup::service_mode("doctor");
    let c = &s.cluster;
    let link = s.link.as_ref().unwrap();
    let b64 =
        |p: &Path| base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).unwrap());
    c.apply(&json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "sidecar-injector-tls", "namespace": "sidecar-injector"},
        "data": {"tls.crt": b64(&s.certs.cert), "tls.key": b64(&s.certs.key)},
    }))
    .unwrap();
    s.namespaces(&["plain"]);
    install(c, &webhook_config(&[], &s.certs), "injected", |r| {
        r.as_ref().is_ok_and(injected)
    });

    let run = doctor(&kube_args(c, &[]));
    assert_eq!(run.code, 0, "{:#}", run.report);
    assert_eq!(run.report["errors"], json!(0), "{:#}", run.report);
    let text = run.report.to_string();
    assert!(
        text.contains("from Secret sidecar-injector/sidecar-injector-tls"),
        "the Secret's certificate was checked: {:#}",
        run.report
    );
    assert!(
        text.contains(&link.addr.to_string()),
        "the live checks called the EndpointSlice's address {}: {:#}",
        link.addr,
        run.report
    );
    assert!(
        !findings(&run, "ok", "review").is_empty(),
        "the sample review was answered: {:#}",
        run.report
    );
    dry_run_found(&run, "ok", |found| {
        found.contains("in namespace injected") && found.contains("came back with istio-proxy")
    });
    // The apiserver sent the dry-run pod to the injector.
    let log = s.injector.log();
    assert!(
        log.contains("injector-doctor-"),
        "the injector did not see doctor's pod:\n{log}"
    );

    // A dry run: nothing was stored.
    let stored = c
        .kubectl_json(&["get", "pods", "-n", "injected"], None)
        .unwrap();
    assert_eq!(stored["items"], json!([]), "doctor's pod was stored");

    // The Secret named explicitly, and one that does not exist: an error naming it.
    let run = doctor(&kube_args(
        c,
        &["--tls-secret", "sidecar-injector/sidecar-injector-tls"],
    ));
    assert_eq!(run.code, 0, "{:#}", run.report);
    let o = Command::new(e2e::bin("injector"))
        .arg("doctor")
        .args(kube_args(c, &["--tls-secret", "sidecar-injector/nope"]))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a missing Secret is an error");
    assert!(
        err.contains("reading Secret sidecar-injector/nope from the cluster"),
        "the error names the Secret: {err}"
    );
}

/// A caBundle of another CA in the cluster's configuration: doctor --kubeconfig reports it from the
/// live handshake, and its dry-run create is refused with the apiserver's own TLS message. Then the
/// webhook goes down (failurePolicy Fail): the endpoint check fails and the dry-run create is refused
/// with the apiserver's "failed calling webhook … connection refused".
#[test]
fn doctor_kubeconfig_finds_a_wrong_ca_bundle_and_a_webhook_that_is_down() {
    let mut s = Setup::new();
    s.namespaces(&[]);
    let c = &s.cluster;
    let good = s.url_configurations(&[], |_| {});
    install(c, &good, "injected", |r| r.as_ref().is_ok_and(injected));

    let dir = TempDir::new("other-ca");
    let other = injector_certs(&dir.path().join("certs"), &[]).expect("another CA");
    let other_bundle =
        webhook_config(&[], &other)[0]["webhooks"][0]["clientConfig"]["caBundle"].clone();
    let wrong = s.url_configurations(&[], |wh| {
        wh["clientConfig"]["caBundle"] = other_bundle.clone()
    });
    install(c, &wrong, "injected", |r| r.is_err());
    let run = doctor_finds_errors(&kube_args(c, &[]));
    let ca_errors: Vec<&Value> = run.report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["level"] == "error"
                && f["check"]
                    .as_str()
                    .unwrap()
                    .starts_with("certificate-authority")
        })
        .collect();
    assert!(
        !ca_errors.is_empty(),
        "the caBundle that does not trust the served certificate is an error: {:#}",
        run.report
    );
    dry_run_found(&run, "error", |found| {
        found.contains("refused by the API server")
            && found.contains("failed calling webhook")
            && found.contains("x509")
    });

    install(c, &good, "injected", |r| r.as_ref().is_ok_and(injected));
    s.injector.terminate().expect("the injector stops");
    let down = s.url_configurations(&[], |wh| wh["failurePolicy"] = json!("Fail"));
    install(c, &down, "injected", |r| r.is_err());
    let run = doctor_finds_errors(&kube_args(c, &[]));
    assert!(
        !findings(&run, "error", "endpoint").is_empty(),
        "the endpoint does not answer: {:#}",
        run.report
    );
    dry_run_found(&run, "error", |found| {
        found.contains("failed calling webhook \"namespace.sidecar-injector.istio.io\"")
            && found.contains("connection refused")
    });
}

/// `explain -o json` of `manifest` with `args`; its items.
fn explain(dir: &Path, manifest: &Value, args: &[String]) -> Vec<Value> {
    let file = dir.join("pods.json");
    std::fs::write(&file, serde_json::to_vec(manifest).unwrap()).unwrap();
    let o = Command::new(e2e::bin("injector"))
        .arg("explain")
        .arg("-f")
        .arg(&file)
        .args(args)
        .args(["-o", "json"])
        .env_remove("REVISION")
        .env_remove("ENABLE_NATIVE_SIDECARS")
        .env_remove("PLATFORM")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "explain {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["items"].as_array().unwrap().clone()
}

/// Routing rows (the default and a `canary` revision installed; namespaces labelled for either, opted
/// out, and unlabelled; pods with each injection label): `explain --kubeconfig` reads the Namespaces and
/// configurations from the cluster and gives, item for item, what `explain` gives on the same objects
/// saved by `kubectl get -o json` into `--namespaces` and `--webhook-config` files.
#[test]
fn explain_kubeconfig_equals_explain_on_the_same_objects_as_files() {
    let c = Cluster::up();
    let dir = TempDir::new("explain-kube");
    let certs = injector_certs(&dir.path().join("certs"), &[]).expect("certs");
    for flags in [&["--revision", "canary"][..], &[][..]] {
        for m in webhook_config(flags, &certs) {
            c.apply(&m).unwrap();
        }
    }
    let namespaces = [
        ("inj", vec![("istio-injection", "enabled")]),
        ("off", vec![("istio-injection", "disabled")]),
        ("can", vec![("istio.io/rev", "canary")]),
        ("plain", vec![]),
        ("kube-system", vec![]),
    ];
    let pod_labels: [Vec<(&str, &str)>; 4] = [
        vec![],
        vec![("sidecar.istio.io/inject", "true")],
        vec![("sidecar.istio.io/inject", "false")],
        vec![("istio.io/rev", "canary")],
    ];
    let mut pods = Vec::new();
    for (ns, ns_labels) in &namespaces {
        c.namespace(ns, &labels(ns_labels)).unwrap();
        for (i, l) in pod_labels.iter().enumerate() {
            pods.push(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}"), "namespace": ns, "labels": labels(l)},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}));
        }
    }
    let manifest = json!({"apiVersion": "v1", "kind": "List", "items": pods});
    let cfg = Config::base()
        .and_then(|c| c.write(&dir.path().join("cfg")))
        .unwrap();
    let ns_file = dir.path().join("ns.json");
    std::fs::write(
        &ns_file,
        c.kubectl(&["get", "namespaces", "-o", "json"], None)
            .unwrap(),
    )
    .unwrap();
    let wh_file = dir.path().join("mwc.json");
    std::fs::write(
        &wh_file,
        c.kubectl(
            &["get", "mutatingwebhookconfigurations", "-o", "json"],
            None,
        )
        .unwrap(),
    )
    .unwrap();

    let mut from_files = cfg.args();
    from_files.extend([
        "--namespaces".to_string(),
        ns_file.display().to_string(),
        "--webhook-config".to_string(),
        wh_file.display().to_string(),
    ]);
    let mut from_cluster = cfg.args();
    from_cluster.extend(kube_args(&c, &[]));
    let files = explain(dir.path(), &manifest, &from_files);
    let cluster = explain(dir.path(), &manifest, &from_cluster);
    assert_eq!(files.len(), namespaces.len() * pod_labels.len());
    assert_eq!(
        cluster, files,
        "explain --kubeconfig differs from explain on the files"
    );
    // Not a vacuous agreement: both revisions' entries are called, and some pods are not injected.
    let called: std::collections::BTreeSet<String> = cluster
        .iter()
        .filter_map(|i| i["webhook"]["configuration"].as_str().map(str::to_string))
        .collect();
    assert!(called.len() >= 2, "both revisions called: {called:?}");
    let injected = cluster.iter().filter(|i| i["injected"] == true).count();
    assert!(
        injected > 0 && injected < cluster.len(),
        "{injected} injected"
    );

    // A configuration named that does not exist: the error names it.
    let mut missing = from_cluster.clone();
    missing.extend(["--webhook-config-name".to_string(), "nope".to_string()]);
    let o = Command::new(e2e::bin("injector"))
        .arg("explain")
        .arg("-f")
        .arg(dir.path().join("pods.json"))
        .args(&missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("reading MutatingWebhookConfiguration nope from the cluster"),
        "{err}"
    );
}
