//! `doctor --kubeconfig`: the inputs of the file flags read from the API server instead (the
//! MutatingWebhookConfigurations, the serving Secret's `tls.crt`, the endpoint behind each entry's Service
//! from its EndpointSlices, or its `clientConfig.url`), and the one check only a cluster allows: a
//! `dryRun=All` pod create through the real API server, which calls the webhook as it would for a real pod
//! (admission runs for dry runs; `sideEffects: None` lets it).

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};
use rustls::pki_types::CertificateDer;
use serde_json::{json, Map, Value};

use super::certificates::{now_unix, parse_chain};
use super::error::DoctorError;
use super::report::{Finding, Level};
use super::url::{parse_url, Url};
use crate::cluster::kube_client::KubeArgs;
use crate::cluster::kube_read::{self, ClusterError, KubeReadError, SelectArgs};
use crate::shared::webhook_entry::routing::Router;
use crate::shared::webhook_entry::Entry;
use inject::namespaces::Namespaces;
use inject::pod;
use sidecar_core::fields::Fields;

/// The Secret deploy/ (and Istio's own `istio-sidecar-injector` layout) serves from, in the service's
/// namespace, when `--tls-secret` is not given.
const DEFAULT_SECRET: &str = "sidecar-injector-tls";

/// A port a Service names when the entry does not (`service.port`'s default).
const DEFAULT_SERVICE_PORT: i64 = 443;

/// What the file flags would have given, read from the cluster.
pub(super) struct Inputs {
    pub(super) hooks: Vec<Entry>,
    /// The serving chain and where it came from (`from Secret ns/name`).
    pub(super) chain: Option<(String, Vec<CertificateDer<'static>>)>,
    /// The endpoint each entry's API server call reaches, by entry label.
    pub(super) urls: HashMap<String, Url>,
    /// What could not be found in the cluster but is a finding, not an error (a missing Service).
    pub(super) findings: Vec<Finding>,
}

/// Reads the configurations, the serving Secret and the endpoints.
pub(super) async fn read(
    client: &kube::Client,
    kube: &KubeArgs,
    select: &SelectArgs,
    tls_secret: Option<&str>,
) -> Result<Inputs, DoctorError> {
    let configs = kube_read::webhook_configurations(client, select)
        .await
        .map_err(ClusterError::from)?;
    let hooks = kube_read::entries(&configs, kube)?;
    let mut findings = Vec::new();
    let chain = secret_chain(client, &hooks, tls_secret, &mut findings).await?;
    let mut urls = HashMap::new();
    let mut resolved: HashMap<(String, String, i64), Option<Url>> = HashMap::new();
    for h in &hooks {
        let url = match h.service() {
            Some((name, ns, _)) => {
                let port = h
                    .client()
                    .and_then(|c| c.field("service"))
                    .and_then(|s| s.field("port"))
                    .and_then(Value::as_i64)
                    .unwrap_or(DEFAULT_SERVICE_PORT);
                let key = (ns.to_string(), name.to_string(), port);
                if !resolved.contains_key(&key) {
                    let url = endpoint(client, ns, name, port, h, &mut findings).await;
                    resolved.insert(key.clone(), url);
                }
                resolved.get(&key).cloned().flatten()
            }
            None => h
                .client()
                .and_then(|c| c.field("url"))
                .and_then(Value::as_str)
                .and_then(|u| parse_url(u).ok()),
        };
        if let Some(u) = url {
            urls.insert(h.label(), u);
        }
    }
    Ok(Inputs {
        hooks,
        chain,
        urls,
        findings,
    })
}

/// `tls.crt` of `--tls-secret` (`[NAMESPACE/]NAME`, the namespace defaulting to the first service
/// reference's), else of `sidecar-injector-tls` in that namespace when it exists.
async fn secret_chain(
    client: &kube::Client,
    hooks: &[Entry],
    flag: Option<&str>,
    findings: &mut Vec<Finding>,
) -> Result<Option<(String, Vec<CertificateDer<'static>>)>, DoctorError> {
    let service_ns = hooks.iter().find_map(|h| h.service().map(|(_, ns, _)| ns));
    let (ns, name) = match flag {
        Some(v) => match v.split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => match service_ns {
                Some(ns) => (ns.to_string(), v.to_string()),
                None => {
                    return Err(DoctorError::TlsSecret {
                        value: v.to_string(),
                        reason: "no entry calls a Service, so give the namespace: NAMESPACE/NAME",
                    })
                }
            },
        },
        None => match service_ns {
            Some(ns) => (ns.to_string(), DEFAULT_SECRET.to_string()),
            None => return Ok(None),
        },
    };
    let what = format!("Secret {ns}/{name}");
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret = match api.get(&name).await {
        Ok(s) => s,
        // The default name is a guess: its absence is reported, not fatal.
        Err(kube::Error::Api(status)) if status.code == 404 && flag.is_none() => {
            findings.push(Finding {
                level: Level::Warning,
                check: "serving-secret",
                entries: hooks.iter().map(Entry::label).collect(),
                found: format!(
                    "{what} does not exist: the serving certificate was checked only as served"
                ),
                why: "the Secret's certificate is what the injector loads on its next restart or reload; \
                      checking it catches a renewal that the caBundle does not trust before it is served"
                    .to_string(),
                fix: Some(format!(
                    "name the injector's serving Secret: injector doctor --kubeconfig FILE --tls-secret {ns}/NAME"
                )),
            });
            return Ok(None);
        }
        Err(e) => return Err(ClusterError::from(KubeReadError::new(&what, e)).into()),
    };
    let pem = secret
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .map(|b| b.0.clone())
        .ok_or_else(|| DoctorError::SecretCert {
            secret: what.clone(),
            detail: "no data key tls.crt".to_string(),
        })?;
    let chain = parse_chain(&pem).map_err(|detail| DoctorError::SecretCert {
        secret: what.clone(),
        detail,
    })?;
    Ok(Some((format!("from {what} (tls.crt)"), chain)))
}

/// The address the API server dials for `service` (`ns/name:port`): the Service's port, its target in
/// the EndpointSlices, the first ready endpoint. What is missing is an `endpoint` finding (the API server
/// would fail the same way); `None` then.
async fn endpoint(
    client: &kube::Client,
    ns: &str,
    name: &str,
    port: i64,
    h: &Entry,
    findings: &mut Vec<Finding>,
) -> Option<Url> {
    let mut missing = |found: String, fix: String| {
        findings.push(Finding {
            level: Level::Error,
            check: "endpoint",
            entries: vec![h.label()],
            found,
            why:
                "the API server calls the webhook at an endpoint of its Service; without one every \
                  call fails (and the pod is refused under failurePolicy Fail)"
                    .to_string(),
            fix: Some(fix),
        });
    };
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let service = match services.get(name).await {
        Ok(s) => s,
        Err(e) => {
            missing(
                format!("reading Service {ns}/{name}: {e}"),
                format!(
                    "kubectl -n {ns} get service {name}  # create it, or fix clientConfig.service"
                ),
            );
            return None;
        }
    };
    let spec_port = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ps| ps.iter().find(|p| i64::from(p.port) == port))
        .cloned();
    let Some(spec_port) = spec_port else {
        missing(
            format!("Service {ns}/{name} has no port {port}"),
            format!("kubectl -n {ns} edit service {name}  # add port {port}, or fix clientConfig.service.port"),
        );
        return None;
    };
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let params = ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
    let list = match slices.list(&params).await {
        Ok(l) => l.items,
        Err(e) => {
            missing(
                format!("reading the EndpointSlices of Service {ns}/{name}: {e}"),
                format!("kubectl -n {ns} get endpointslices -l kubernetes.io/service-name={name}"),
            );
            return None;
        }
    };
    for slice in &list {
        // A slice's ports carry the Service port's name; a numeric targetPort is the fallback.
        let target = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name == spec_port.name)
            .and_then(|p| p.port)
            .or(match &spec_port.target_port {
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p)) => Some(*p),
                _ => None,
            });
        let address = slice
            .endpoints
            .iter()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
            .find_map(|e| e.addresses.first());
        if let (Some(port), Some(address)) = (target, address) {
            let port = u16::try_from(port).ok()?;
            return Some(Url {
                host: address.clone(),
                port,
                path: None,
            });
        }
    }
    missing(
        format!(
            "Service {ns}/{name} has no ready endpoint on port {port} in its {} EndpointSlice(s)",
            list.len()
        ),
        format!(
            "kubectl -n {ns} get endpointslices -l kubernetes.io/service-name={name}; kubectl -n {ns} get pods  # is the injector running and ready?"
        ),
    );
    None
}

/// The labels a pod may carry to be selected, tried in order: none, Istio's object label, each
/// revision's.
fn candidate_pod_labels(hooks: &[Entry]) -> Vec<Map<String, Value>> {
    let mut out = vec![Map::new()];
    let mut inject = Map::new();
    inject.insert(pod::INJECT_KEY.to_string(), json!("true"));
    out.push(inject);
    for rev in hooks.iter().filter_map(|h| h.revision.as_deref()) {
        let mut m = Map::new();
        m.insert("istio.io/rev".to_string(), json!(rev));
        if !out.contains(&m) {
            out.push(m);
        }
    }
    out
}

/// A namespace (and pod labels) whose pod CREATE the API server sends to one of `hooks`, as
/// `webhook_entry::routing` evaluates the selectors on the cluster's Namespaces; the entries called.
async fn routed_namespace(
    client: &kube::Client,
    hooks: &[Entry],
) -> Result<Option<(String, Map<String, Value>, Vec<String>)>, String> {
    let objects = kube_read::namespaces(client)
        .await
        .map_err(|e| e.to_string())?;
    let mut names: Vec<String> = objects
        .iter()
        .filter_map(|o| sidecar_core::fields::path(o, ["metadata", "name"]))
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    names.sort();
    let known = Namespaces::from_objects(objects, "Namespaces").map_err(|e| e.to_string())?;
    let router = Router::new(hooks.to_vec()).map_err(|e| e.to_string())?;
    for labels in candidate_pod_labels(hooks) {
        for ns in &names {
            let ns_labels = known.labels(ns).cloned().unwrap_or_default();
            let routing = router.route(ns, &ns_labels, Some(&labels));
            if !routing.called.is_empty() {
                let called = routing.called.iter().map(|(e, _)| e.label()).collect();
                return Ok(Some((ns.clone(), labels, called)));
            }
        }
    }
    Ok(None)
}

/// The `dry-run` finding: a minimal pod created with `dryRun=All` in `--dry-run-namespace` or a namespace
/// the entries select, through the API server to the webhook and back.
pub(super) async fn dry_run(
    client: &kube::Client,
    hooks: &[Entry],
    namespace: Option<&str>,
) -> Finding {
    let all: Vec<String> = hooks.iter().map(Entry::label).collect();
    let finding =
        |level, entries: Vec<String>, found: String, why: &str, fix: Option<String>| Finding {
            level,
            check: "dry-run",
            entries,
            found,
            why: why.to_string(),
            fix,
        };
    let (ns, labels, entries) = match namespace {
        Some(ns) => (ns.to_string(), Map::new(), all.clone()),
        None => match routed_namespace(client, hooks).await {
            Ok(Some(chosen)) => chosen,
            Ok(None) => {
                return finding(
                    Level::Warning,
                    all,
                    "no namespace of the cluster is selected by these entries, so no pod create was tried"
                        .to_string(),
                    "a dry-run create exercises the whole path API server → webhook; it needs a namespace whose pods the webhook is called for",
                    Some("kubectl label namespace NS istio-injection=enabled, or name one: injector doctor --kubeconfig FILE --dry-run-namespace NS".to_string()),
                )
            }
            Err(e) => {
                return finding(
                    Level::Warning,
                    all,
                    format!("no namespace chosen for the dry-run create: {e}"),
                    "a dry-run create exercises the whole path API server → webhook; the entries' selectors could not be evaluated here",
                    Some("name a namespace the webhook is called for: injector doctor --kubeconfig FILE --dry-run-namespace NS".to_string()),
                )
            }
        },
    };
    let name = format!("injector-doctor-{}-{}", std::process::id(), now_unix());
    let shown_labels = if labels.is_empty() {
        String::new()
    } else {
        format!(" (pod labels {})", Value::Object(labels.clone()))
    };
    let body = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        // The ServiceAccount admission plugin would set it; named so the injected token volume validates
        // where that plugin is off.
        "spec": {"serviceAccountName": "default",
                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    });
    let pod_obj: Pod = match serde_json::from_value(body) {
        Ok(p) => p,
        Err(e) => {
            return finding(
                Level::Error,
                entries,
                format!("the dry-run pod could not be built: {e}"),
                "a bug in doctor",
                Some("report it".to_string()),
            )
        }
    };
    // The API server bounds each webhook call by its timeoutSeconds (at most 30 s); a create calls each
    // selected entry once or twice (reinvocation).
    let bound = Duration::from_secs(
        hooks
            .iter()
            .map(|h| h.timeout_seconds().clamp(1, 30) as u64)
            .sum::<u64>()
            * 2
            + 10,
    );
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let params = PostParams {
        dry_run: true,
        field_manager: Some("injector-doctor".to_string()),
    };
    let what = format!("a dryRun=All create of pod {name} in namespace {ns}{shown_labels}");
    let answer = tokio::time::timeout(bound, api.create(&params, &pod_obj)).await;
    match answer {
        Err(_) => finding(
            Level::Error,
            entries,
            format!("{what}: no answer from the API server within {} s", bound.as_secs()),
            "pod creates hang for as long as the webhook does not answer",
            Some("see the endpoint and review findings above; kubectl get --raw /metrics | grep apiserver_admission_webhook".to_string()),
        ),
        Ok(Err(kube::Error::Api(status))) => finding(
            Level::Error,
            entries,
            format!("{what} was refused by the API server: {}", status.message),
            "a pod the webhook is called for cannot be created: this is what users see",
            Some(if status.message.contains("failed calling webhook") {
                "the API server cannot call the webhook: fix the endpoint, caBundle and certificate findings above, then run doctor again".to_string()
            } else {
                format!("kubectl -n {ns} create --dry-run=server -f POD.yaml  # the same refusal, for a real pod of yours")
            }),
        ),
        Ok(Err(e)) => finding(
            Level::Error,
            entries,
            format!("{what} failed: {e}"),
            "the API server could not be asked; nothing is known of the path API server → webhook",
            Some("check --kubeconfig and the API server's reachability: kubectl --kubeconfig FILE get --raw /readyz".to_string()),
        ),
        Ok(Ok(answered)) => {
            let v = serde_json::to_value(&answered).unwrap_or(Value::Null);
            let sidecar = ["initContainers", "containers"]
                .iter()
                .any(|l| pod::find_named(pod::containers(&v, l), pod::PROXY_CONTAINER).is_some());
            if sidecar {
                finding(
                    Level::Ok,
                    entries,
                    format!(
                        "{what} went through the API server to the webhook and came back with {}",
                        pod::PROXY_CONTAINER
                    ),
                    "the whole path works: the API server's routing, its TLS call to the endpoint, the review and the patch",
                    None,
                )
            } else {
                finding(
                    Level::Error,
                    entries,
                    format!("{what} was admitted without {}", pod::PROXY_CONTAINER),
                    "the API server did not call the webhook, or a failed call was ignored (failurePolicy Ignore), or the webhook decided not to inject",
                    Some(format!(
                        "kubectl get --raw /metrics | grep apiserver_admission_webhook_fail_open_count; injector explain --kubeconfig FILE -f POD.yaml  # with a pod of namespace {ns}"
                    )),
                )
            }
        }
    }
}
