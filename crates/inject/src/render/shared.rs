//! What the built-in templates share (Istio writes the same blocks into `injection-template.yaml`,
//! `gateway-injection-template.yaml` and `grpc-agent.yaml`): env entries, the canonical-service labels and
//! default-container annotations, images, log-level arguments, resources, the istiod/token/podinfo
//! volumes, pull secrets and `ISTIO_META_POD_PORTS`. Each template's own context composes these.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::error::RenderError;
use super::image;
use super::inputs::{sprint, Inputs};
use crate::pod::{
    BOOTSTRAP_OVERRIDE_ANNOTATION, COMPONENT_LOG_LEVEL_ANNOTATION, LOG_LEVEL_ANNOTATION,
    PROXY_CONTAINER, PROXY_CPU_ANNOTATION, PROXY_CPU_LIMIT_ANNOTATION, PROXY_IMAGE_ANNOTATION,
    PROXY_IMAGE_TYPE_ANNOTATION, PROXY_MEMORY_ANNOTATION, PROXY_MEMORY_LIMIT_ANNOTATION,
    READINESS_FAILURE_THRESHOLD_ANNOTATION, READINESS_INITIAL_DELAY_ANNOTATION,
    READINESS_PERIOD_ANNOTATION,
};
use sidecar_core::fields::Fields;
use sidecar_core::goconv::template_truthy;
use sidecar_core::proxy_config_json::proxy_config_env;

/// One env entry of a template's container.
pub(crate) struct Env<'a> {
    pub(crate) name: Cow<'a, str>,
    pub(crate) source: EnvSource<'a>,
}

pub(crate) enum EnvSource<'a> {
    /// `value:` (omitted when empty, as Kubernetes serialises it).
    Value(Cow<'a, str>),
    Field(&'static str),
    Resource(&'static str),
}

/// Readiness probe timings; `None` for 0, which Kubernetes omits.
pub(crate) struct Readiness {
    pub(crate) initial_delay_seconds: Option<i64>,
    pub(crate) period_seconds: Option<i64>,
    pub(crate) failure_threshold: Option<i64>,
}

pub(crate) fn env<'a>(name: &'static str, value: impl Into<Cow<'a, str>>) -> Env<'a> {
    Env {
        name: Cow::Borrowed(name),
        source: EnvSource::Value(value.into()),
    }
}

pub(crate) fn field_env(name: &'static str, path: &'static str) -> Env<'static> {
    Env {
        name: Cow::Borrowed(name),
        source: EnvSource::Field(path),
    }
}

pub(crate) fn resource_env(name: &'static str, resource: &'static str) -> Env<'static> {
    Env {
        name: Cow::Borrowed(name),
        source: EnvSource::Resource(resource),
    }
}

/// Labels that are "empty" to sprig's `default` count as absent.
pub(crate) fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}
/// Resources of both containers: the four resource annotations replace the values block entirely.
pub(crate) fn resources<'a>(inp: &Inputs<'a>) -> Option<Cow<'a, Value>> {
    let cpu = inp.ann(PROXY_CPU_ANNOTATION);
    let memory = inp.ann(PROXY_MEMORY_ANNOTATION);
    let cpu_limit = inp.ann(PROXY_CPU_LIMIT_ANNOTATION);
    let memory_limit = inp.ann(PROXY_MEMORY_LIMIT_ANNOTATION);
    if cpu.is_some() || memory.is_some() || cpu_limit.is_some() || memory_limit.is_some() {
        let block = |cpu: Option<&str>, memory: Option<&str>| {
            let mut m = Map::new();
            if let Some(c) = cpu {
                m.insert("cpu".into(), Value::from(c));
            }
            if let Some(mem) = memory {
                m.insert("memory".into(), Value::from(mem));
            }
            m
        };
        let mut out = Map::new();
        let requests = block(cpu, memory);
        if !requests.is_empty() {
            out.insert("requests".into(), Value::Object(requests));
        }
        let limits = block(cpu_limit, memory_limit);
        if !limits.is_empty() {
            out.insert("limits".into(), Value::Object(limits));
        }
        return Some(Cow::Owned(Value::Object(out)));
    }
    let values = inp.values_at("global.proxy.resources")?;
    // The values block rarely holds nulls: borrow it unless `omitNil` has something to drop.
    if has_null(values) || !template_truthy(Some(values)) {
        omit_nil(values).map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(values))
    }
}

/// Whether a null (or a map/list that `omitNil` would empty) occurs anywhere inside `v`.
pub(crate) fn has_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().any(|v| has_null(v) || is_empty_container(v)),
        Value::Array(a) => a.iter().any(|v| has_null(v) || is_empty_container(v)),
        _ => false,
    }
}

pub(crate) fn is_empty_container(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.is_empty()) || v.as_array().is_some_and(|a| a.is_empty())
}

/// sprig/Istio `omitNil`: nulls dropped recursively; maps and lists left empty by that disappear too.
pub(crate) fn omit_nil(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(m) => {
            let out: Map<String, Value> = m
                .iter()
                .filter_map(|(k, v)| omit_nil(v).map(|v| (k.clone(), v)))
                .collect();
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(a) => {
            let out: Vec<Value> = a.iter().filter_map(omit_nil).collect();
            (!out.is_empty()).then_some(Value::Array(out))
        }
        _ => Some(v.clone()),
    }
}

/// `sidecar.istio.io/userVolume` / `userVolumeMount`: a JSON object of name → fields (one entry per key
/// in sorted order) or a JSON list of fields (in order, named by their index). Istio's
/// `injection-template.yaml` ranges over `fromJSON` of the annotation and writes `name: "<key or index>"`
/// followed by the entry's own fields, so an entry's own `name` comes last and wins (Go's YAML decoder
/// keeps the last of duplicate keys); found by the injection differential against the pinned istioctl.
pub(crate) fn named_objects(
    inp: &Inputs<'_>,
    key: &'static str,
) -> Result<Vec<Value>, RenderError> {
    let Some(text) = inp.ann(key) else {
        return Ok(Vec::new());
    };
    let bad = |reason: String| RenderError::InvalidAnnotation {
        annotation: key,
        value: text.to_string(),
        reason,
    };
    let parsed: Value =
        serde_json::from_str(text).map_err(|e| bad(format!("not a JSON object or list: {e}")))?;
    let entries: Vec<(String, &Value)> = match &parsed {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            keys.into_iter()
                .map(|k| (k.clone(), &m[k.as_str()]))
                .collect()
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        _ => return Err(bad("not a JSON object or list".to_string())),
    };
    entries
        .into_iter()
        .map(|(name, entry)| {
            let Value::Object(fields) = entry else {
                return Err(bad(format!("entry {name:?} is not an object")));
            };
            let mut out = Map::with_capacity(fields.len() + 1);
            out.insert("name".into(), Value::from(name));
            for (k, v) in fields {
                out.insert(k.clone(), v.clone());
            }
            Ok(Value::Object(out))
        })
        .collect()
}
/// A container's image: the `sidecar.istio.io/proxyImage` annotation, else the values entry at
/// `values_path`, either used as is when it is a full reference (see `image::choose`).
pub(crate) fn container_image<'a>(
    inp: &Inputs<'a>,
    values_path: &str,
    image_type: &str,
) -> Cow<'a, str> {
    let requested: Cow<'a, str> = match inp.ann(PROXY_IMAGE_ANNOTATION) {
        Some(a) => Cow::Borrowed(a),
        None => sprint(inp.values_at(values_path)),
    };
    match requested {
        Cow::Borrowed(r) => image::choose(r, || proxy_image_url(inp, values_path, image_type)),
        Cow::Owned(r) => Cow::Owned(
            image::choose(&r, || proxy_image_url(inp, values_path, image_type)).into_owned(),
        ),
    }
}

/// `<hub>/<values image name or proxyv2>:<tag[-type]>`.
pub(crate) fn proxy_image_url(inp: &Inputs<'_>, name_path: &str, image_type: &str) -> String {
    let name = non_empty(Some(inp.values_str(name_path))).unwrap_or("proxyv2");
    let tag = sprint(inp.values_at("global.tag"));
    image::image_url(inp.values_str("global.hub"), name, &tag, image_type)
}

/// An integer setting (annotation, else values); 0 becomes `None` (omitted by Kubernetes).
pub(crate) fn int_setting(
    inp: &Inputs<'_>,
    annotation: &'static str,
    values_path: &'static str,
) -> Result<Option<i64>, RenderError> {
    let text = inp.ann_or_values(annotation, values_path);
    let n: i64 = text.trim().parse().map_err(|_| match inp.ann(annotation) {
        Some(v) => RenderError::InvalidAnnotation {
            annotation,
            value: v.to_string(),
            reason: "not an integer".to_string(),
        },
        None => RenderError::InvalidSetting {
            key: values_path,
            value: text.to_string(),
            reason: "not an integer",
        },
    })?;
    Ok((n != 0).then_some(n))
}

/// The proxy's readiness probe timings, from the pod's annotations, else the values.
pub(crate) fn readiness(inp: &Inputs<'_>) -> Result<Readiness, RenderError> {
    Ok(Readiness {
        initial_delay_seconds: int_setting(
            inp,
            READINESS_INITIAL_DELAY_ANNOTATION,
            "global.proxy.readinessInitialDelaySeconds",
        )?,
        period_seconds: int_setting(
            inp,
            READINESS_PERIOD_ANNOTATION,
            "global.proxy.readinessPeriodSeconds",
        )?,
        failure_threshold: int_setting(
            inp,
            READINESS_FAILURE_THRESHOLD_ANNOTATION,
            "global.proxy.readinessFailureThreshold",
        )?,
    })
}
/// The proxy's image; its type also comes from the ProxyConfig, unlike the init container's.
pub(crate) fn proxy_image<'a>(inp: &Inputs<'a>) -> Cow<'a, str> {
    let pc_image_type = inp
        .proxy_config
        .field("image")
        .and_then(|i| i.field("imageType"))
        .and_then(Value::as_str);
    let image_type = inp
        .ann(PROXY_IMAGE_TYPE_ANNOTATION)
        .or(non_empty(pc_image_type))
        .unwrap_or_else(|| inp.values_str("global.variant"));
    container_image(inp, "global.proxy.image", image_type)
}

/// `ISTIO_META_POD_PORTS`: every port of every (non-init) container, one per line, in Go's `ContainerPort`
/// field order with zero values omitted (except `containerPort`).
pub(crate) fn pod_ports(containers: &[Value]) -> String {
    /// Go's `ContainerPort` JSON: field order and `omitempty` as in k8s.io/api.
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Port<'p> {
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<&'p Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        host_port: Option<&'p Value>,
        container_port: &'p Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        protocol: Option<&'p Value>,
        #[serde(rename = "hostIP", skip_serializing_if = "Option::is_none")]
        host_ip: Option<&'p Value>,
    }
    let zero = Value::from(0);
    let mut out: Vec<u8> = Vec::with_capacity(64);
    out.push(b'[');
    let mut first = true;
    for port in containers
        .iter()
        .filter_map(|c| c.field("ports").and_then(Value::as_array))
        .flatten()
    {
        out.extend_from_slice(b"\n    ");
        if !first {
            out.push(b',');
        }
        first = false;
        let text = |k: &str| {
            port.field(k)
                .filter(|v| !v.is_null() && v.as_str() != Some(""))
        };
        let p = Port {
            name: text("name"),
            host_port: port.field("hostPort").filter(|v| !is_zero(v)),
            container_port: port.field("containerPort").unwrap_or(&zero),
            protocol: text("protocol"),
            host_ip: text("hostIP"),
        };
        // Serialising borrowed JSON values into memory cannot fail.
        let _ = serde_json::to_writer(&mut out, &p);
    }
    out.extend_from_slice(b"\n]");
    String::from_utf8(out).unwrap_or_default()
}

pub(crate) fn is_zero(v: &Value) -> bool {
    v.is_null() || v.as_f64() == Some(0.0)
}

pub(crate) fn env_static(name: &'static str, value: &'static str) -> Env<'static> {
    Env {
        name: Cow::Borrowed(name),
        source: EnvSource::Value(Cow::Borrowed(value)),
    }
}

/// The templates' `$containers`: names of the pod's containers other than `istio-proxy`, in order.
pub(crate) fn app_containers(containers: &[Value]) -> Vec<&str> {
    containers
        .iter()
        .filter_map(|c| c.field("name").and_then(Value::as_str))
        .filter(|n| *n != PROXY_CONTAINER)
        .collect()
}

/// The `metadata` entries every proxy template writes alike: canonical-service labels (the sidecar
/// truncates the name, the others do not), `istio.io/rev` and the default-container pair.
pub(crate) struct PodMeta<'a> {
    pub(crate) canonical_name: &'a str,
    pub(crate) canonical_revision: &'a str,
    pub(crate) revision: &'a str,
    pub(crate) default_container: Option<&'a str>,
    pub(crate) default_logs_container: Option<&'a str>,
}

impl<'a> PodMeta<'a> {
    pub(crate) fn build(inp: &Inputs<'a>, app_containers: &[&'a str]) -> PodMeta<'a> {
        // The first non-empty of the labels, in Istio's order of precedence.
        let first_label = |keys: [&str; 3]| keys.iter().find_map(|k| non_empty(inp.label(k)));
        let canonical_name = first_label([
            "service.istio.io/canonical-name",
            "app.kubernetes.io/name",
            "app",
        ])
        .unwrap_or(inp.data.deploy_name);
        let canonical_revision = first_label([
            "service.istio.io/canonical-revision",
            "app.kubernetes.io/version",
            "version",
        ])
        .unwrap_or("latest");
        let revision = non_empty(Some(inp.data.revision)).unwrap_or("default");
        let first_app = app_containers.first().copied();
        PodMeta {
            canonical_name,
            canonical_revision,
            revision,
            default_container: first_app
                .filter(|_| inp.ann("kubectl.kubernetes.io/default-container").is_none()),
            default_logs_container: first_app.filter(|_| {
                inp.ann("kubectl.kubernetes.io/default-logs-container")
                    .is_none()
            }),
        }
    }
}

/// The volumes (and the settings of their mounts) that the proxy templates write alike.
pub(crate) struct IstioVolumes<'a> {
    pub(crate) gke_workload_certificate: bool,
    pub(crate) bootstrap_override: Option<&'a str>,
    pub(crate) token_audience: Cow<'a, str>,
    pub(crate) istiod_ca: bool,
    pub(crate) cluster_trust_bundle: Option<String>,
    pub(crate) ca_root_config_map: &'a str,
    pub(crate) mtls_certs_secret: Option<String>,
    pub(crate) image_pull_secrets: Vec<&'a str>,
}

impl<'a> IstioVolumes<'a> {
    pub(crate) fn build(inp: &Inputs<'a>) -> IstioVolumes<'a> {
        let trust_bundle_name = non_empty(Some(inp.values_str("global.trustBundleName")));
        let ctb = inp.values_at("pilot.env.ENABLE_CLUSTER_TRUST_BUNDLE_API");
        let cluster_trust_bundle = (ctb == Some(&Value::Bool(true))
            || ctb.and_then(Value::as_str) == Some("true"))
        .then(|| {
            format!(
                "istio.io:istiod-ca:{}",
                trust_bundle_name.unwrap_or("root-cert")
            )
        });
        let mtls_certs_secret = inp.values_true("global.mountMtlsCerts").then(|| {
            let sa = inp
                .data
                .pod
                .field("spec")
                .and_then(|s| s.field("serviceAccountName"))
                .and_then(Value::as_str);
            format!("istio.{}", non_empty(sa).unwrap_or("default"))
        });
        let image_pull_secrets = inp
            .values_at("global.imagePullSecrets")
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(|s| {
                        s.as_str()
                            .or_else(|| s.field("name").and_then(Value::as_str))
                    })
                    .collect()
            })
            .unwrap_or_default();
        IstioVolumes {
            gke_workload_certificate: inp.values_str("global.caName") == "GkeWorkloadCertificate",
            bootstrap_override: inp.ann(BOOTSTRAP_OVERRIDE_ANNOTATION),
            token_audience: sprint(inp.values_at("global.sds.token.aud")),
            istiod_ca: inp.values_str("global.pilotCertProvider") == "istiod",
            cluster_trust_bundle,
            ca_root_config_map: trust_bundle_name.unwrap_or("istio-ca-root-cert"),
            mtls_certs_secret,
            image_pull_secrets,
        }
    }
}

/// The proxy's arguments up to `--log_as_json`; `role` is `sidecar` or `router`.
pub(crate) fn proxy_args<'a>(inp: &Inputs<'a>, role: &'static str) -> Vec<Cow<'a, str>> {
    let mut args: Vec<Cow<'a, str>> = vec![
        Cow::Borrowed("proxy"),
        Cow::Borrowed(role),
        Cow::Borrowed("--domain"),
        Cow::Owned(format!(
            "$(POD_NAMESPACE).svc.{}",
            sprint(inp.values_at("global.proxy.clusterDomain"))
        )),
        Cow::Owned(format!(
            "--proxyLogLevel={}",
            inp.ann_or_values(LOG_LEVEL_ANNOTATION, "global.proxy.logLevel")
        )),
        Cow::Owned(format!(
            "--proxyComponentLogLevel={}",
            inp.ann_or_values(
                COMPONENT_LOG_LEVEL_ANNOTATION,
                "global.proxy.componentLogLevel"
            )
        )),
        Cow::Owned(format!("--log_output_level={}", inp.agent_log_level().0)),
    ];
    if inp.values_true("global.sts.servicePort") {
        args.push(Cow::Owned(format!(
            "--stsPort={}",
            sprint(inp.values_at("global.sts.servicePort"))
        )));
    }
    if inp.values_true("global.logAsJson") {
        args.push(Cow::Borrowed("--log_as_json"));
    }
    args
}

/// `values.global.proxy.lifecycle` when it is set (truthy).
pub(crate) fn values_lifecycle<'a>(inp: &Inputs<'a>) -> Option<&'a Value> {
    inp.values_at("global.proxy.lifecycle")
        .filter(|l| template_truthy(Some(l)))
}

/// Whether the mesh's inbound traffic policy is `LOCALHOST` (the legacy probe destination env).
pub(crate) fn localhost_inbound(inp: &Inputs<'_>) -> bool {
    inp.mesh
        .field("inboundTrafficPolicy")
        .and_then(|p| p.field("mode"))
        .and_then(Value::as_str)
        == Some("LOCALHOST")
}

/// `PILOT_CERT_PROVIDER`, `CA_ADDR` and the five downward-API entries every proxy template starts with.
pub(crate) fn push_control_plane_env<'a>(inp: &Inputs<'a>, out: &mut Vec<Env<'a>>) {
    out.push(env(
        "PILOT_CERT_PROVIDER",
        sprint(inp.values_at("global.pilotCertProvider")),
    ));
    let ca_addr = inp.values_str("global.caAddress");
    let ca_addr: Cow<'a, str> = if ca_addr.is_empty() {
        let rev = inp.values_str("revision");
        let ns = sprint(inp.values_at("global.istioNamespace"));
        Cow::Owned(if rev.is_empty() {
            format!("istiod.{ns}.svc:15012")
        } else {
            format!("istiod-{rev}.{ns}.svc:15012")
        })
    } else {
        Cow::Borrowed(ca_addr)
    };
    out.push(env("CA_ADDR", ca_addr));
    out.push(field_env("POD_NAME", "metadata.name"));
    out.push(field_env("POD_NAMESPACE", "metadata.namespace"));
    out.push(field_env("INSTANCE_IP", "status.podIP"));
    out.push(field_env("SERVICE_ACCOUNT", "spec.serviceAccountName"));
    out.push(field_env("HOST_IP", "status.hostIP"));
}

/// `PROXY_CONFIG`: precomputed by the engine when the pod has no ProxyConfig of its own.
pub(crate) fn proxy_config_value<'a>(inp: &Inputs<'a>) -> Result<Cow<'a, str>, RenderError> {
    Ok(match inp.data.proxy_config_env {
        Some(text) => Cow::Borrowed(text),
        None => Cow::Owned(proxy_config_env(inp.proxy_config)?),
    })
}

/// `COMPLIANCE_POLICY` and, for FIPS 140-3, `GODEBUG`.
pub(crate) fn push_compliance_env<'a>(inp: &Inputs<'a>, out: &mut Vec<Env<'a>>) {
    let policy = inp.data.compliance_policy;
    if !policy.is_empty() {
        out.push(env("COMPLIANCE_POLICY", policy));
        if policy == "fips-140-3" {
            out.push(env_static("GODEBUG", "fips140=only"));
        }
    }
}

/// `ISTIO_META_CLUSTER_ID` (`Kubernetes` by default) and `ISTIO_META_NODE_NAME`.
pub(crate) fn push_cluster_env<'a>(inp: &Inputs<'a>, out: &mut Vec<Env<'a>>) {
    let cluster = non_empty(Some(inp.values_str("global.multiCluster.clusterName")));
    out.push(env(
        "ISTIO_META_CLUSTER_ID",
        cluster.unwrap_or("Kubernetes"),
    ));
    out.push(field_env("ISTIO_META_NODE_NAME", "spec.nodeName"));
}

/// `ISTIO_META_NETWORK` when `values.global.network` is set.
pub(crate) fn push_network_env<'a>(inp: &Inputs<'a>, out: &mut Vec<Env<'a>>) {
    if let Some(network) = non_empty(Some(inp.values_str("global.network"))) {
        out.push(env("ISTIO_META_NETWORK", network));
    }
}

/// `ISTIO_META_WORKLOAD_NAME` when the workload has a name (`name`), then `ISTIO_META_OWNER`.
pub(crate) fn push_workload_env<'a>(
    inp: &Inputs<'a>,
    name: Option<&'a str>,
    out: &mut Vec<Env<'a>>,
) {
    if let Some(w) = name {
        out.push(env("ISTIO_META_WORKLOAD_NAME", w));
    }
    push_owner_env(inp, out);
}

/// `ISTIO_META_OWNER` when the workload's apiVersion and name are known.
pub(crate) fn push_owner_env<'a>(inp: &Inputs<'a>, out: &mut Vec<Env<'a>>) {
    let data = inp.data;
    if !data.api_version.is_empty() && !data.deploy_name.is_empty() {
        let ns = non_empty(Some(data.deploy_namespace)).unwrap_or("default");
        out.push(env(
            "ISTIO_META_OWNER",
            format!(
                "kubernetes://apis/{}/namespaces/{ns}/{}s/{}",
                data.api_version,
                data.kind.to_lowercase(),
                data.deploy_name
            ),
        ));
    }
}

/// `ISTIO_BOOTSTRAP_OVERRIDE` when the pod names a bootstrap ConfigMap.
pub(crate) fn push_bootstrap_env<'a>(inp: &Inputs<'a>, out: &mut Vec<Env<'a>>) {
    if inp.ann(BOOTSTRAP_OVERRIDE_ANNOTATION).is_some() {
        out.push(env_static(
            "ISTIO_BOOTSTRAP_OVERRIDE",
            "/etc/istio/custom-bootstrap/custom_bootstrap.json",
        ));
    }
}

/// `ISTIO_META_MESH_ID` and `TRUST_DOMAIN` (mesh trust domain, else `values.global.trustDomain`).
pub(crate) fn push_mesh_identity_env<'a>(inp: &Inputs<'a>, out: &mut Vec<Env<'a>>) {
    let trust_domain = non_empty(inp.mesh.field("trustDomain").and_then(Value::as_str))
        .or(non_empty(Some(inp.values_str("global.trustDomain"))));
    if let Some(mesh_id) = non_empty(Some(inp.values_str("global.meshID"))).or(trust_domain) {
        out.push(env("ISTIO_META_MESH_ID", mesh_id));
    }
    if let Some(td) = trust_domain {
        out.push(env("TRUST_DOMAIN", td));
    }
}

/// One entry per ProxyConfig `proxyMetadata` key, sorted.
pub(crate) fn push_proxy_metadata_env<'a>(inp: &Inputs<'a>, out: &mut Vec<Env<'a>>) {
    for (k, v) in inp.proxy_metadata() {
        out.push(Env {
            name: Cow::Borrowed(k),
            source: EnvSource::Value(v),
        });
    }
}

/// An integer from `values` only; 0 becomes `None` (omitted by Kubernetes).
pub(crate) fn values_int(inp: &Inputs<'_>, path: &'static str) -> Result<Option<i64>, RenderError> {
    let text = sprint(inp.values_at(path));
    let n: i64 = text
        .trim()
        .parse()
        .map_err(|_| RenderError::InvalidSetting {
            key: path,
            value: text.to_string(),
            reason: "not an integer",
        })?;
    Ok((n != 0).then_some(n))
}
