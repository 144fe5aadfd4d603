//! The configuration-wide parts of an injection, as the policy's params object carries them: the engine
//! injects a canonical pod once per interception mode (`webhook_request::inject`, the webhook's own
//! path), and what the result adds beyond the pod's own parts is taken apart into the pieces the CEL
//! splices the pod's parts into (`cel`).
//!
//! The canonical pod is built to exercise every per-pod path once, so that each configuration-dependent
//! setting of those paths can be read off the engine's answer instead of being re-derived from the
//! values: it belongs to a Deployment (so `ISTIO_META_WORKLOAD_NAME` and `ISTIO_META_OWNER` are present
//! and show where they sit), has a port and an HTTP readiness probe (so the probe rewrite and its status
//! port show, and `ISTIO_KUBE_APP_PROBERS` is the proxy's last variable). Whatever else the injection
//! changes must be a fixed part; [`ParamsError::Unsupported`] names anything that is neither.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use inject::decision::{LabelSelector, Operator, Policy};
use inject::engine::Engine;
use inject::pod::{
    self, INIT_CONTAINER, INTERCEPTION_MODE_ANNOTATION, NATIVE_SIDECAR_ANNOTATION, PROXY_CONTAINER,
    STATUS_ANNOTATION, VALIDATION_CONTAINER,
};
use inject::template_source::{self, RenderPath};
use sidecar_core::annotations;
use sidecar_core::fields::{self, Fields};

/// The traffic annotations the CEL turns into `istio-init` arguments, by name (their rows are
/// `sidecar_core::annotations`' statics; `format!` needs constants).
pub const EXCLUDE_INBOUND_PORTS_ANNOTATION: &str = annotations::EXCLUDE_INBOUND_PORTS.name;
pub const EXCLUDE_INTERFACES_ANNOTATION: &str = annotations::EXCLUDE_INTERFACES.name;
pub const EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION: &str =
    annotations::EXCLUDE_OUTBOUND_IP_RANGES.name;
pub const EXCLUDE_OUTBOUND_PORTS_ANNOTATION: &str = annotations::EXCLUDE_OUTBOUND_PORTS.name;
pub const INCLUDE_INBOUND_PORTS_ANNOTATION: &str = annotations::INCLUDE_INBOUND_PORTS.name;
pub const INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION: &str =
    annotations::INCLUDE_OUTBOUND_IP_RANGES.name;
pub const INCLUDE_OUTBOUND_PORTS_ANNOTATION: &str = annotations::INCLUDE_OUTBOUND_PORTS.name;
pub const KUBEVIRT_INTERFACES_ANNOTATION: &str = annotations::KUBEVIRT_INTERFACES.name;
pub const REROUTE_VIRTUAL_INTERFACES_ANNOTATION: &str =
    annotations::REROUTE_VIRTUAL_INTERFACES.name;

/// The proxy's environment entries the CEL computes per pod, in the order the sidecar template writes
/// them (`render::context::proxy_env`); the probers' entry is written last by post-processing.
pub const PORTS_ENV: &str = "ISTIO_META_POD_PORTS";
pub const APP_CONTAINERS_ENV: &str = "ISTIO_META_APP_CONTAINERS";
pub const WORKLOAD_NAME_ENV: &str = "ISTIO_META_WORKLOAD_NAME";
pub const OWNER_ENV: &str = "ISTIO_META_OWNER";
pub const PROMETHEUS_ENV: &str = "ISTIO_PROMETHEUS_ANNOTATIONS";
pub const PROBERS_ENV: &str = inject::APP_PROBERS_ENV;

/// The labels the CEL computes per pod.
pub const TLS_MODE_LABEL: &str = "security.istio.io/tlsMode";
pub const TUNNEL_LABEL: &str = "networking.istio.io/tunnel";
pub const CANONICAL_NAME_LABEL: &str = "service.istio.io/canonical-name";
pub const CANONICAL_REVISION_LABEL: &str = "service.istio.io/canonical-revision";

/// The annotations the CEL computes per pod (the status annotation is fixed per mode).
pub const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";
pub const DEFAULT_LOGS_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-logs-container";
pub const PROMETHEUS_ANNOTATIONS: [&str; 3] = [
    "prometheus.io/scrape",
    "prometheus.io/port",
    "prometheus.io/path",
];

/// Istio's `prometheus.istio.io/scrape-targets`: the `port[:path]` targets the agent merges.
pub const SCRAPE_TARGETS_ANNOTATION: &str = "prometheus.istio.io/scrape-targets";

/// The interception modes the sidecar template renders.
pub const MODES: [&str; 3] = ["REDIRECT", "TPROXY", "NONE"];

/// Why a configuration cannot be compiled into a policy; each names what the policy cannot reproduce.
#[derive(Debug, thiserror::Error)]
pub enum ParamsError {
    /// The configuration injects through templates other than the built-in `sidecar` alone.
    #[error("the configuration's default templates are {templates:?}: the policy reproduces only the built-in sidecar template (leave defaultTemplates and aliases unset, or inject with the webhook alone)")]
    Templates { templates: Vec<String> },
    /// The configuration's `sidecar` text renders through the evaluator: the CEL reproduces the compiled
    /// template's per-pod paths, and only the text that template was built from is known to share them.
    #[error("the configuration's templates.sidecar renders through the evaluator (a text other than Istio {release}'s, or --evaluate-texts): the policy reproduces only the compiled sidecar template (configure Istio {release}'s text or none, or inject with the webhook alone)")]
    EvaluatedText { release: &'static str },
    /// The engine refused the canonical pod.
    #[error("the configuration does not inject a plain Deployment pod ({mode}): {reason}")]
    Inject { mode: String, reason: String },
    /// The injection changes something the policy has no part for.
    #[error("the configuration's injection {what}; the policy cannot reproduce it (inject with the webhook alone)")]
    Unsupported { what: String },
}

/// One label-selector requirement as the CEL evaluates it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

/// Istio's `injectRequired` inputs that come from the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionParams {
    /// `enabled`, `disabled`, or anything else (never injected).
    pub policy: String,
    /// `neverInjectSelector` and `alwaysInjectSelector`, each selector its requirements; empty
    /// selectors are left out (Istio: they never match).
    pub never: Vec<Vec<Requirement>>,
    pub always: Vec<Vec<Requirement>>,
}

/// The proxy's environment around the entries computed per pod: `head`, then `ISTIO_META_POD_PORTS`
/// and `ISTIO_META_APP_CONTAINERS`, then `middle`, then the workload's name and owner (each when
/// known), then `tail`; the Prometheus and probers entries follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyEnv {
    pub head: Vec<Value>,
    pub middle: Vec<Value>,
    pub tail: Vec<Value>,
}

/// What one interception mode's injection adds, besides the per-pod parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Variant {
    /// `istio-init` (`istio-validation` with CNI); `None` in mode `NONE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<Value>,
    /// Its arguments taken apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_args: Option<InitArgs>,
    /// `istio-proxy` without `env`.
    pub proxy: Value,
    pub proxy_env: ProxyEnv,
    /// The annotations added whatever the pod (the status annotation among them).
    pub annotations: Map<String, Value>,
}

/// One mode's injection with and without native sidecars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variants {
    pub native: Variant,
    pub classic: Variant,
}

/// The params object's `spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParamsSpec {
    /// The revision the configuration injects as (`default` for the default revision).
    pub revision: String,
    pub decision: DecisionParams,
    /// Namespaces the policy leaves to the webhook: Istio's never-injected ones, and those whose
    /// ProxyConfig resources make their pods' injection differ.
    pub excluded_namespaces: Vec<String>,
    /// `istio-proxy` is a native sidecar (an init container after `istio-init`).
    pub native: bool,
    /// Without native sidecars (the configuration's or a pod's choice): `istio-proxy` first among the
    /// containers (hold the application).
    pub proxy_first: bool,
    /// The mesh status port the probes are rewritten to and the metrics are scraped on.
    pub status_port: i64,
    /// The app probes are rewritten through the agent.
    pub rewrite_probes: bool,
    /// The app's Prometheus settings are merged into the agent's.
    pub prometheus_merge: bool,
    /// HBONE: the pod gets `networking.istio.io/tunnel`.
    pub tunnel_label: bool,
    /// Labels added whatever the pod.
    pub labels: Map<String, Value>,
    /// CNI: `istio-validation`, and the traffic settings written as annotations.
    pub cni: bool,
    /// The status port the init container's `-d` excludes (the values', as the template reads it).
    pub init_status_port: String,
    /// The mode of a pod without `sidecar.istio.io/interceptionMode`.
    pub default_mode: String,
    /// Per interception mode, the injection with the proxy a native sidecar and without
    /// (`sidecar.istio.io/nativeSidecar` chooses, else [`ParamsSpec::native`]).
    pub variants: BTreeMap<String, Variants>,
    /// Volumes put before the pod's own.
    pub volumes: Vec<Value>,
    /// Image pull secrets put before the pod's own.
    pub image_pull_secrets: Vec<Value>,
}

impl ParamsSpec {
    /// The names the injection adds, which a pod in the subset must not use itself (the merge would
    /// combine the two).
    pub fn volume_names(&self) -> Vec<&str> {
        self.volumes.iter().map(pod::name_of).collect()
    }

    /// The image pull secrets' names the injection adds.
    pub fn image_pull_secret_names(&self) -> Vec<&str> {
        self.image_pull_secrets.iter().map(pod::name_of).collect()
    }
}

/// The canonical pod's names, chosen to be unlike anything they could be confused with in the result.
const APP: &str = "app";
const WORKLOAD: &str = "canonical";
const HASH: &str = "5d4b7c9f8";
/// Not a valid namespace name, so no ProxyConfig resource of the configuration can be in it.
const NAMESPACE: &str = "canonical_namespace";

/// The canonical pod with `annotations`, as the API server hands it to the webhook (defaulted where the
/// engine reads).
fn canonical_pod(annotations: &[(&str, &str)]) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{WORKLOAD}-{HASH}-"),
            "namespace": NAMESPACE,
            "labels": {"pod-template-hash": HASH},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{WORKLOAD}-{HASH}"), "uid": "00000000-0000-0000-0000-000000000000",
                "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "containers": [{
                "name": APP,
                "image": "app",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080, "scheme": "HTTP"},
                    "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
            }],
        },
    });
    if !annotations.is_empty() {
        pod["metadata"]["annotations"] = Value::Object(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), Value::from(*v)))
                .collect(),
        );
    }
    pod
}

fn unsupported(what: impl Into<String>) -> ParamsError {
    ParamsError::Unsupported { what: what.into() }
}

fn requirements(selectors: &[LabelSelector]) -> Vec<Vec<Requirement>> {
    selectors
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.requirements
                .iter()
                .map(|r| Requirement {
                    key: r.key.clone(),
                    operator: match r.operator {
                        Operator::In => "In",
                        Operator::NotIn => "NotIn",
                        Operator::Exists => "Exists",
                        Operator::DoesNotExist => "DoesNotExist",
                    }
                    .to_string(),
                    values: r.values.clone(),
                })
                .collect()
        })
        .collect()
}

/// The webhook's injection of the canonical pod with `annotations`, sent to `path`.
fn inject(
    engine: &Engine,
    annotations: &[(&str, &str)],
    path: &str,
) -> Result<(Value, Value), ParamsError> {
    let pod = canonical_pod(annotations);
    let out = crate::shared::webhook_request::inject(engine, &pod, None, path).map_err(|e| {
        ParamsError::Inject {
            mode: if annotations.is_empty() {
                "no annotations".to_string()
            } else {
                format!("{annotations:?}")
            },
            reason: e.to_string(),
        }
    })?;
    Ok((pod, out))
}

/// The arguments of `istio-init` (`istio-validation`) around the values a pod's annotations replace
/// (`render::init_args`): `head` through `-m MODE`, then `-i -x -b -d`, the optional `-q -o`, (a pod's
/// `-k -c`), `--log_output_level=`, then `tail`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitArgs {
    pub head: Vec<String>,
    pub include_ip_ranges: String,
    pub exclude_ip_ranges: String,
    pub include_inbound_ports: String,
    /// `-d`: Envoy's ports, the excluded ports and the status port.
    pub exclude_inbound: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_outbound_ports: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_outbound_ports: Option<String>,
    pub log_level: String,
    pub tail: Vec<String>,
}

const LOG_LEVEL_ARG: &str = "--log_output_level=";

impl InitArgs {
    /// The arguments of a pod without traffic annotations.
    pub fn assemble(&self) -> Vec<String> {
        let mut out = self.head.clone();
        for (flag, v) in [
            ("-i", &self.include_ip_ranges),
            ("-x", &self.exclude_ip_ranges),
            ("-b", &self.include_inbound_ports),
            ("-d", &self.exclude_inbound),
        ] {
            out.extend([flag.to_string(), v.clone()]);
        }
        for (flag, v) in [
            ("-q", &self.include_outbound_ports),
            ("-o", &self.exclude_outbound_ports),
        ] {
            if let Some(v) = v {
                out.extend([flag.to_string(), v.clone()]);
            }
        }
        out.push(format!("{LOG_LEVEL_ARG}{}", self.log_level));
        out.extend(self.tail.iter().cloned());
        out
    }

    /// Takes the rendered arguments apart; `None` when they are not laid out as `render::init_args`
    /// lays them out.
    fn parse(args: &[String]) -> Option<InitArgs> {
        let i = args.iter().position(|a| a == "-i")?;
        let (head, rest) = args.split_at(i);
        let (flags, rest) = rest.split_at(8.min(rest.len()));
        let value =
            |k: usize, flag: &str| (flags.get(k)? == flag).then(|| flags.get(k + 1).cloned())?;
        let mut rest = rest.iter().peekable();
        let mut optional = |flag: &str| {
            if rest.peek().is_some_and(|a| *a == flag) {
                rest.next();
                rest.next().cloned()
            } else {
                None
            }
        };
        let include_outbound_ports = optional("-q");
        let exclude_outbound_ports = optional("-o");
        let log_level = rest.next()?.strip_prefix(LOG_LEVEL_ARG)?.to_string();
        let parsed = InitArgs {
            head: head.to_vec(),
            include_ip_ranges: value(0, "-i")?,
            exclude_ip_ranges: value(2, "-x")?,
            include_inbound_ports: value(4, "-b")?,
            exclude_inbound: value(6, "-d")?,
            include_outbound_ports,
            exclude_outbound_ports,
            log_level,
            tail: rest.cloned().collect(),
        };
        (parsed.assemble() == args).then_some(parsed)
    }
}

/// The entries of `list` in `spec` of the injected pod.
fn list<'a>(pod: &'a Value, name: &str) -> &'a [Value] {
    pod::containers(pod, name)
}

fn env_names(env: &[Value]) -> Vec<&str> {
    env.iter().map(pod::name_of).collect()
}

/// Splits the proxy's environment around the per-pod entries (see [`ProxyEnv`]), checking they sit
/// where the CEL puts them.
fn split_env(env: &[Value]) -> Result<ProxyEnv, ParamsError> {
    let names = env_names(env);
    let at = |n: &str| names.iter().position(|x| *x == n);
    let bad = || {
        unsupported(format!(
            "writes the proxy's environment in an order the policy does not know ({})",
            names.join(", ")
        ))
    };
    let (Some(ports), Some(apps), Some(wl), Some(owner)) = (
        at(PORTS_ENV),
        at(APP_CONTAINERS_ENV),
        at(WORKLOAD_NAME_ENV),
        at(OWNER_ENV),
    ) else {
        return Err(bad());
    };
    // The probers' entry is last when the probes are rewritten.
    let probers = at(PROBERS_ENV).unwrap_or(env.len());
    if apps != ports + 1 || owner != wl + 1 || wl < apps || probers + 1 < env.len() {
        return Err(bad());
    }
    for per_pod in [PROMETHEUS_ENV, "OTEL_RESOURCE_ATTRIBUTES"] {
        if at(per_pod).is_some() {
            return Err(unsupported(format!(
                "sets {per_pod}, which depends on the pod"
            )));
        }
    }
    Ok(ProxyEnv {
        head: env[..ports].to_vec(),
        middle: env[apps + 1..wl].to_vec(),
        tail: env[owner + 1..probers].to_vec(),
    })
}

/// What the injection of one mode adds; also the canonical app container after injection, for the
/// settings read off it.
struct Rendered {
    variant: Variant,
    labels: Map<String, Value>,
    native: bool,
    proxy_first: bool,
    app: Value,
    volumes: Vec<Value>,
    image_pull_secrets: Vec<Value>,
}

fn take_apart(before: &Value, after: &Value) -> Result<Rendered, ParamsError> {
    // Labels: the pod's own, the per-pod ones, and the fixed ones.
    let own_labels = pod::labels(before).cloned().unwrap_or_default();
    let mut labels = Map::new();
    for (k, v) in pod::labels(after).into_iter().flatten() {
        if own_labels.has_field(k) {
            if own_labels.field(k) != Some(v) {
                return Err(unsupported(format!("changes the pod's label {k}")));
            }
            continue;
        }
        if ![
            TLS_MODE_LABEL,
            TUNNEL_LABEL,
            CANONICAL_NAME_LABEL,
            CANONICAL_REVISION_LABEL,
        ]
        .contains(&k.as_str())
        {
            labels.insert(k.clone(), v.clone());
        }
    }
    let own_annotations = pod::annotations(before).cloned().unwrap_or_default();
    let mut annotations = Map::new();
    for (k, v) in pod::annotations(after).into_iter().flatten() {
        if own_annotations.has_field(k) {
            // The pod's own (its interception mode): in CNI mode the template writes the same value.
            if own_annotations.field(k) != Some(v) {
                return Err(unsupported(format!("changes the pod's annotation {k}")));
            }
            continue;
        }
        let per_pod = [
            DEFAULT_CONTAINER_ANNOTATION,
            DEFAULT_LOGS_CONTAINER_ANNOTATION,
        ]
        .iter()
        .chain(PROMETHEUS_ANNOTATIONS.iter())
        .any(|p| p == k);
        if !per_pod {
            annotations.insert(k.clone(), v.clone());
        }
    }
    if !annotations.has_field(STATUS_ANNOTATION) {
        return Err(unsupported("writes no status annotation"));
    }

    // The containers: the canonical app container, then `istio-init`/`istio-validation` and
    // `istio-proxy` where the webhook puts them.
    let inits = list(after, "initContainers");
    let containers = list(after, "containers");
    let init_names: Vec<&str> = inits.iter().map(pod::name_of).collect();
    let names: Vec<&str> = containers.iter().map(pod::name_of).collect();
    let init_name = init_names
        .iter()
        .copied()
        .find(|n| *n == INIT_CONTAINER || *n == VALIDATION_CONTAINER);
    let native = init_names.contains(&PROXY_CONTAINER);
    let (expected_inits, proxy_first) = if native {
        if names != [APP] {
            return Err(unsupported(format!("adds containers {names:?}")));
        }
        (
            init_name
                .into_iter()
                .chain([PROXY_CONTAINER])
                .collect::<Vec<_>>(),
            false,
        )
    } else {
        let first = names == [PROXY_CONTAINER, APP];
        if !first && names != [APP, PROXY_CONTAINER] {
            return Err(unsupported(format!("adds containers {names:?}")));
        }
        (init_name.into_iter().collect(), first)
    };
    if init_names != expected_inits {
        return Err(unsupported(format!("adds init containers {init_names:?}")));
    }
    let find = |l: &[Value], n: &str| l.iter().find(|c| pod::name_of(c) == n).cloned();
    let init = init_name.and_then(|n| find(inits, n));
    let mut proxy = find(if native { inits } else { containers }, PROXY_CONTAINER)
        .ok_or_else(|| unsupported("adds no istio-proxy"))?;
    let env = proxy
        .as_object_mut()
        .and_then(|p| p.shift_remove("env"))
        .and_then(|e| match e {
            Value::Array(a) => Some(a),
            _ => None,
        })
        .ok_or_else(|| unsupported("gives istio-proxy no environment"))?;
    let proxy_env = split_env(&env)?;
    let app = find(containers, APP).ok_or_else(|| unsupported("drops the app container"))?;

    // The volumes and pull secrets: all the injection's own (the canonical pod has none).
    let volumes = list(after, "volumes").to_vec();
    let image_pull_secrets = list(after, "imagePullSecrets").to_vec();

    // Nothing else may change: the result without the parts above is the canonical pod.
    let mut rest = after.clone();
    if let Some(meta) = rest.field_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("labels".into(), Value::Object(own_labels));
        if own_annotations.is_empty() {
            meta.shift_remove("annotations");
        } else {
            meta.insert("annotations".into(), Value::Object(own_annotations));
        }
    }
    if let Some(spec) = rest.field_mut("spec").and_then(Value::as_object_mut) {
        for k in ["initContainers", "volumes", "imagePullSecrets"] {
            spec.shift_remove(k);
        }
        spec.insert("containers".into(), before["spec"]["containers"].clone());
    }
    if !fields::same(&rest, before) {
        return Err(unsupported(format!(
            "changes the pod beyond labels, annotations, containers, volumes and pull secrets: {}",
            inject::create_patch_json(before, &rest)
                .map(|p| String::from_utf8_lossy(&p).into_owned())
                .unwrap_or_default()
        )));
    }
    let init_args = match &init {
        None => None,
        Some(c) => {
            let args: Vec<String> = c
                .field("args")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|a| a.as_str().unwrap_or_default().to_string())
                .collect();
            Some(InitArgs::parse(&args).ok_or_else(|| {
                unsupported(format!(
                    "gives {} arguments the policy does not know: {args:?}",
                    pod::name_of(c)
                ))
            })?)
        }
    };
    Ok(Rendered {
        variant: Variant {
            init,
            init_args,
            proxy,
            proxy_env,
            annotations,
        },
        labels,
        native,
        proxy_first,
        app,
        volumes,
        image_pull_secrets,
    })
}

/// Compiles the configuration of `engine`, injecting as the webhook does on `path`, into the params
/// `spec`; `excluded_namespaces` are left to the webhook besides Istio's own.
pub fn compile(
    engine: &Engine,
    path: &str,
    excluded_namespaces: &[String],
) -> Result<ParamsSpec, ParamsError> {
    let templates = engine.templates(None, inject::engine::Mode::Webhook);
    if templates != ["sidecar"] {
        return Err(ParamsError::Templates { templates });
    }
    // Since issue 30 a configured text is what the pod gets (`inject::template_source`); the per-pod CEL
    // and the policy differential cover the compiled template alone.
    if engine.settings.user_templates.path("sidecar") != RenderPath::Compiled {
        return Err(ParamsError::EvaluatedText {
            release: template_source::RELEASE,
        });
    }
    let (before, after) = inject(engine, &[], path)?;
    let default = take_apart(&before, &after)?;
    // The fixed parts must not depend on what the canonical pod leaves unset and a pod may set: its
    // service account (`global.mountMtlsCerts` names a Secret after it).
    let mut other = before.clone();
    other["spec"]["serviceAccountName"] = Value::from("canonical-account");
    let out = crate::shared::webhook_request::inject(engine, &other, None, path).map_err(|e| {
        ParamsError::Inject {
            mode: "spec.serviceAccountName set".to_string(),
            reason: e.to_string(),
        }
    })?;
    let r = take_apart(&other, &out)?;
    if (&r.variant, &r.labels, &r.volumes, &r.image_pull_secrets)
        != (
            &default.variant,
            &default.labels,
            &default.volumes,
            &default.image_pull_secrets,
        )
    {
        return Err(unsupported("depends on the pod's spec.serviceAccountName"));
    }
    let default_mode = default
        .variant
        .proxy_env
        .middle
        .iter()
        .chain(&default.variant.proxy_env.tail)
        .find(|e| pod::name_of(e) == "ISTIO_META_INTERCEPTION_MODE")
        .and_then(|e| e.field("value"))
        .and_then(Value::as_str)
        .filter(|m| MODES.contains(m))
        .ok_or_else(|| unsupported("names no interception mode"))?
        .to_string();
    let cni = default
        .variant
        .init
        .as_ref()
        .is_some_and(|c| pod::name_of(c) == VALIDATION_CONTAINER);

    // Every mode, with and without native sidecars: the pod's annotations choose.
    let mut variants = BTreeMap::new();
    let mut proxy_first = default.proxy_first;
    for mode in MODES {
        let mut pair = Vec::new();
        for native in [true, false] {
            let flag = if native { "true" } else { "false" };
            let (before, after) = inject(
                engine,
                &[
                    (INTERCEPTION_MODE_ANNOTATION, mode),
                    (NATIVE_SIDECAR_ANNOTATION, flag),
                ],
                path,
            )?;
            let mut r = take_apart(&before, &after)?;
            // With CNI the template writes the pod's mode into this annotation, which the canonical
            // pod of a mode carries itself (so `take_apart` counted it the pod's own).
            if cni {
                r.variant
                    .annotations
                    .insert(INTERCEPTION_MODE_ANNOTATION.to_string(), Value::from(mode));
            }
            if r.native != native {
                return Err(unsupported(format!(
                    "ignores {NATIVE_SIDECAR_ANNOTATION}: {flag}"
                )));
            }
            if !native {
                proxy_first = r.proxy_first;
            }
            if (&r.labels, &r.volumes, &r.image_pull_secrets)
                != (
                    &default.labels,
                    &default.volumes,
                    &default.image_pull_secrets,
                )
            {
                return Err(unsupported(format!(
                    "in mode {mode} (native sidecars {flag}) differs from the default beyond the containers"
                )));
            }
            pair.push(r.variant);
        }
        let classic = pair
            .pop()
            .ok_or_else(|| unsupported("renders no variant"))?;
        let native = pair
            .pop()
            .ok_or_else(|| unsupported("renders no variant"))?;
        variants.insert(mode.to_string(), Variants { native, classic });
    }
    let chosen = variants.get(&default_mode).map(|v| {
        if default.native {
            &v.native
        } else {
            &v.classic
        }
    });
    if chosen != Some(&default.variant) {
        let json = |v: Option<&Variant>| serde_json::to_value(v).unwrap_or_default();
        let patch = inject::create_patch_json(&json(Some(&default.variant)), &json(chosen))
            .map(|p| String::from_utf8_lossy(&p).into_owned())
            .unwrap_or_default();
        return Err(unsupported(format!(
            "of a pod without annotations differs from one asking for its mode {default_mode} and native sidecars {} ({patch})",
            default.native
        )));
    }

    // The settings of the per-pod paths, read off the canonical app container and annotations.
    let probe = fields::path(&default.app, ["readinessProbe", "httpGet"]);
    let probe_path = probe
        .and_then(|p| p.field("path"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let rewrite_probes = probe_path.starts_with("/app-health/");
    let prom_port = pod::annotation(&after, "prometheus.io/port");
    let prometheus_merge = prom_port.is_some();
    let status_port = if rewrite_probes {
        probe.and_then(|p| p.field("port")).and_then(Value::as_i64)
    } else {
        prom_port.and_then(|p| p.parse().ok())
    }
    // Neither path is on: the port is never used.
    .unwrap_or(0);

    let settings = &engine.settings;
    let mut excluded: Vec<String> = inject::decision::IGNORED_NAMESPACES
        .iter()
        .map(|s| s.to_string())
        .collect();
    excluded.extend(excluded_namespaces.iter().cloned());
    Ok(ParamsSpec {
        revision: if settings.revision.is_empty() {
            "default".to_string()
        } else {
            settings.revision.clone()
        },
        decision: DecisionParams {
            policy: match &settings.injector.policy {
                Policy::Enabled => "enabled".to_string(),
                Policy::Disabled => "disabled".to_string(),
                Policy::Other(p) => p.clone(),
            },
            never: requirements(&settings.injector.never_inject_selector),
            always: requirements(&settings.injector.always_inject_selector),
        },
        excluded_namespaces: excluded,
        native: default.native,
        proxy_first,
        status_port,
        rewrite_probes,
        prometheus_merge,
        tunnel_label: pod::label(&after, TUNNEL_LABEL).is_some(),
        labels: default.labels,
        cni,
        init_status_port: inject::go_sprint(fields::path(
            &settings.values,
            ["global", "proxy", "statusPort"],
        ))
        .into_owned(),
        default_mode,
        variants,
        volumes: default.volumes,
        image_pull_secrets: default.image_pull_secrets,
    })
}
