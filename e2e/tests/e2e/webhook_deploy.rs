//! The `deploy/` manifests: `kubectl kustomize deploy/` renders the chart's objects with the production
//! settings and a ConfigMap that configures a real `injector serve`, and the local overlay with the
//! certificates `injector certs` generates.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;

use e2e::apiserver::{
    injector_certs, webhook_called, webhooks_called, ApiServer, Injector, TempDir,
};
use serde_json::{json, Value};

use crate::webhook::{injected_images, labels};

/// `kubectl kustomize deploy/` (the chart rendered by scripts/render-deploy.sh, and its Namespace) renders,
/// every object parses with k8s-openapi types, and the manifests
/// carry the production settings; the ConfigMap's documents configure a real server whose injected pods
/// run the project's iptables-init image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_kustomize_base() {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;

    let docs = e2e::apiserver::kustomize(&e2e::helm::repo_dir().join("deploy"))
        .expect("kubectl kustomize deploy/");
    let mut kinds = Vec::new();
    let mut deployment = None;
    let mut service = None;
    let mut config = None;
    for d in &docs {
        let kind = d["kind"].as_str().unwrap_or_default().to_string();
        match kind.as_str() {
            "Namespace" => {
                e2e::helm::typed_as::<Namespace>(d);
            }
            "ServiceAccount" => {
                e2e::helm::typed_as::<ServiceAccount>(d);
            }
            "Secret" => {
                e2e::helm::typed_as::<Secret>(d);
            }
            "PodDisruptionBudget" => {
                let p = e2e::helm::typed_as::<PodDisruptionBudget>(d);
                assert!(p.spec.unwrap().min_available.is_some());
            }
            "MutatingWebhookConfiguration" => {
                let m = e2e::helm::typed_as::<MutatingWebhookConfiguration>(d);
                assert_eq!(
                    m.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("istio.io/rev"))
                        .map(String::as_str),
                    Some("default")
                );
                let hooks = m.webhooks.clone().unwrap();
                let wh = &hooks[0];
                assert_eq!(wh.failure_policy.as_deref(), Some("Fail"));
                assert_eq!(wh.side_effects, "None");
                // Istio's entries for the default revision, `object.` included, so an unlabelled
                // namespace (a gateway's) still sends its pods labelled sidecar.istio.io/inject=true.
                let names: Vec<&str> = hooks.iter().map(|w| w.name.as_str()).collect();
                assert_eq!(
                    names,
                    [
                        "rev.namespace.sidecar-injector.istio.io",
                        "rev.object.sidecar-injector.istio.io",
                        "namespace.sidecar-injector.istio.io",
                        "object.sidecar-injector.istio.io"
                    ]
                );
                for w in &hooks {
                    assert_eq!(w.failure_policy.as_deref(), Some("Fail"), "{}", w.name);
                    assert_eq!(w.side_effects, "None", "{}", w.name);
                    let svc = w.client_config.service.as_ref().unwrap();
                    assert_eq!(
                        (svc.name.as_str(), svc.namespace.as_str()),
                        ("sidecar-injector", "sidecar-injector"),
                        "{}",
                        w.name
                    );
                }
                let gateway_pod = labels(&[("sidecar.istio.io/inject", "true"), ("app", "gw")]);
                let called = webhooks_called(&m, "gateways", &BTreeMap::new(), &gateway_pod);
                assert_eq!(called.len(), 1);
                assert_eq!(called[0].name, "object.sidecar-injector.istio.io");
                assert!(!webhook_called(
                    &m,
                    "gateways",
                    &BTreeMap::new(),
                    &labels(&[("app", "gw")])
                ));
                for ns in ["kube-system", "sidecar-injector"] {
                    assert!(
                        !webhook_called(&m, ns, &BTreeMap::new(), &gateway_pod),
                        "{ns}"
                    );
                    assert!(
                        !webhook_called(
                            &m,
                            ns,
                            &labels(&[("istio-injection", "enabled")]),
                            &gateway_pod
                        ),
                        "{ns}"
                    );
                }
            }
            // The chart's least-privilege RBAC, checked against a real apiserver by helm_chart.rs.
            "ClusterRole" => {
                e2e::helm::typed_as::<k8s_openapi::api::rbac::v1::ClusterRole>(d);
            }
            "ClusterRoleBinding" => {
                e2e::helm::typed_as::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(d);
            }
            "Role" => {
                e2e::helm::typed_as::<k8s_openapi::api::rbac::v1::Role>(d);
            }
            "RoleBinding" => {
                e2e::helm::typed_as::<k8s_openapi::api::rbac::v1::RoleBinding>(d);
            }
            "Deployment" => deployment = Some(e2e::helm::typed_as::<Deployment>(d)),
            "Service" => service = Some(e2e::helm::typed_as::<Service>(d)),
            "ConfigMap" => config = Some(e2e::helm::typed_as::<ConfigMap>(d)),
            other => panic!("unexpected kind {other}"),
        }
        kinds.push(kind);
    }
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "MutatingWebhookConfiguration",
            "Namespace",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Secret",
            "Service",
            "ServiceAccount"
        ]
    );

    let dep = deployment.unwrap();
    let spec = dep.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert!(pod
        .topology_spread_constraints
        .is_some_and(|t| !t.is_empty()));
    assert_eq!(
        pod.security_context
            .as_ref()
            .and_then(|s| s.run_as_non_root),
        Some(true)
    );
    let c = &pod.containers[0];
    assert!(c
        .image
        .as_deref()
        .unwrap()
        .starts_with("ghcr.io/sidecar-inject/injector:"));
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_string()][..])
    );
    let live = c
        .liveness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(live.path.as_deref(), Some("/healthz"));
    assert!(c.readiness_probe.is_some());
    let res = c.resources.as_ref().unwrap();
    assert!(res.requests.is_some() && res.limits.is_some());
    let ports: Vec<String> = c
        .ports
        .iter()
        .flatten()
        .filter_map(|p| p.name.clone())
        .collect();
    let svc = service.unwrap().spec.unwrap();
    let https = svc
        .ports
        .unwrap()
        .into_iter()
        .find(|p| p.port == 443)
        .expect("port 443");
    let target = serde_json::to_value(https.target_port.unwrap()).unwrap();
    assert!(
        ports.contains(&target.as_str().unwrap().to_string()),
        "443 targets {target}, ports {ports:?}"
    );
    // The container's arguments parse: the same binary, started with them (paths swapped for local ones).
    let args = c.args.clone().unwrap();
    assert_eq!(args[0], "serve");
    assert!(args.iter().any(|a| a == "--config-dir=/etc/istio/inject"));

    // The ConfigMap in Istio's layout, mounted as a directory, drives a real server.
    let data = config.unwrap().data.unwrap();
    let dir = TempDir::new("deploy");
    let cfg = dir.path().join("inject");
    std::fs::create_dir_all(&cfg).unwrap();
    for key in ["values", "config", "mesh"] {
        std::fs::write(
            cfg.join(key),
            data.get(key)
                .unwrap_or_else(|| panic!("ConfigMap key {key}")),
        )
        .unwrap();
    }
    let certs = injector_certs(&dir.path().join("certs"), &[]).unwrap();
    let server = Injector::start(
        &[
            "--tls-cert".into(),
            certs.cert.display().to_string(),
            "--tls-key".into(),
            certs.key.display().to_string(),
            format!("--config-dir={}", cfg.display()),
            "--native-sidecars=false".into(),
            "--log-format=json".into(),
        ],
        &BTreeMap::new(),
    )
    .expect("serve with the deploy ConfigMap");
    let api = ApiServer::new(&certs.mwc, server.https).unwrap();
    let imgs = injected_images(&api, "deploy").await;
    assert!(
        imgs.contains(&"ghcr.io/sidecar-inject/iptables-init:0.1.0".to_string()),
        "init image: {imgs:?}"
    );
    // JSON logs carry the request's uid and decision.
    let log_line = server
        .log()
        .lines()
        .find(|l| l.contains("\"uid\":\"deploy\""))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no JSON log line for the review:\n{}", server.log()));
    let entry: Value = serde_json::from_str(&log_line).unwrap();
    assert_eq!(entry["decision"], json!("injected"));
    assert!(entry["latency_us"].is_u64());
}

/// The `deploy/local` overlay puts `injector certs`' output into the Secret and the caBundle.
#[test]
fn deploy_local_overlay_with_generated_certs() {
    let dir = TempDir::new("overlay");
    let copy = dir.path().join("deploy");
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(e2e::helm::repo_dir().join("deploy"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let _ = std::fs::remove_dir_all(copy.join("local/certs"));
    let certs = injector_certs(&copy.join("local/certs"), &[]).unwrap();
    let docs =
        e2e::apiserver::kustomize(&copy.join("local")).expect("kubectl kustomize deploy/local");
    let mut secret = docs
        .iter()
        .find(|d| d["kind"] == json!("Secret"))
        .unwrap()
        .clone();
    // kustomize wraps long base64 in block scalars; the API server's decoder skips the newlines.
    for v in secret["data"].as_object_mut().unwrap().values_mut() {
        *v = json!(v.as_str().unwrap().replace('\n', ""));
    }
    let secret = e2e::helm::typed_as::<k8s_openapi::api::core::v1::Secret>(&secret);
    let data = secret.data.unwrap();
    assert_eq!(data["tls.crt"].0, std::fs::read(&certs.cert).unwrap());
    assert_eq!(data["tls.key"].0, std::fs::read(&certs.key).unwrap());
    let mwc = docs
        .iter()
        .find(|d| d["kind"] == json!("MutatingWebhookConfiguration"))
        .unwrap();
    let mwc = e2e::helm::typed_as::<
        k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
    >(mwc);
    let hooks = mwc.webhooks.unwrap();
    // The base's four entries (`object.` included), each with the generated CA.
    assert_eq!(hooks.len(), 4);
    for h in &hooks {
        assert_eq!(
            h.client_config.ca_bundle.as_ref().unwrap().0,
            std::fs::read(copy.join("local/certs/ca.crt")).unwrap(),
            "{}",
            h.name
        );
    }
}
