//! The typed context of the `sidecar` template (Istio's `files/injection-template.yaml`): every decision of
//! Istio's Go template, made in Rust. `templates/sidecar.json` and `templates/sidecar-proxy.json` only lay
//! the result out.

use std::borrow::Cow;

use askama::Template;
use serde_json::{Map, Value};

use super::init_args::{self, exclude_inbound, optional_setting, setting};
use super::{image, sprint, Inputs, RenderError};
use crate::goconv::{self, template_truthy};
use crate::pod::{
    self, BOOTSTRAP_OVERRIDE_ANNOTATION, CAP_NET_BIND_SERVICE_ANNOTATION,
    COMPONENT_LOG_LEVEL_ANNOTATION, EXCLUDE_INBOUND_PORTS_ANNOTATION,
    EXCLUDE_INTERFACES_ANNOTATION, EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION,
    EXCLUDE_OUTBOUND_PORTS_ANNOTATION, INCLUDE_INBOUND_PORTS_ANNOTATION,
    INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION, INCLUDE_OUTBOUND_PORTS_ANNOTATION, INIT_CONTAINER,
    INTERCEPTION_MODE_ANNOTATION, KUBEVIRT_INTERFACES_ANNOTATION, LOG_LEVEL_ANNOTATION,
    PROXY_CONTAINER, PROXY_CPU_ANNOTATION, PROXY_CPU_LIMIT_ANNOTATION, PROXY_IMAGE_ANNOTATION,
    PROXY_IMAGE_TYPE_ANNOTATION, PROXY_MEMORY_ANNOTATION, PROXY_MEMORY_LIMIT_ANNOTATION,
    READINESS_FAILURE_THRESHOLD_ANNOTATION, READINESS_INITIAL_DELAY_ANNOTATION,
    READINESS_PERIOD_ANNOTATION, REROUTE_VIRTUAL_INTERFACES_ANNOTATION, USER_VOLUME_ANNOTATION,
    USER_VOLUME_MOUNT_ANNOTATION, VALIDATION_CONTAINER,
};

/// The default `sidecar` template with its context.
#[derive(Template)]
#[template(path = "sidecar.json", escape = "none")]
pub(crate) struct Sidecar<'a> {
    // metadata.labels
    tls_mode: &'a str,
    tunnel: Option<&'a str>,
    canonical_name: &'a str,
    canonical_revision: &'a str,
    // metadata.annotations
    revision: &'a str,
    default_container: Option<&'a str>,
    default_logs_container: Option<&'a str>,
    cni_annotations: Vec<(&'static str, Cow<'a, str>)>,
    // spec
    init: Option<InitContainer<'a>>,
    native: bool,
    proxy: Proxy<'a>,
    // shared by both containers
    image_pull_policy: Option<&'a str>,
    resources: Option<Cow<'a, Value>>,
    privileged: bool,
    seccomp_profile: Option<&'a Value>,
    // volumes and mounts
    gke_workload_certificate: bool,
    bootstrap_override: Option<&'a str>,
    token_audience: Cow<'a, str>,
    istiod_ca: bool,
    cluster_trust_bundle: Option<String>,
    ca_root_config_map: &'a str,
    crl_config_map: &'a str,
    mtls_certs_secret: Option<String>,
    user_volumes: Vec<Value>,
    user_volume_mounts: Vec<Value>,
    image_pull_secrets: Vec<&'a str>,
}

/// `istio-init` (or `istio-validation` with CNI).
pub(crate) struct InitContainer<'a> {
    name: &'static str,
    image: Cow<'a, str>,
    args: Vec<String>,
    env: Vec<(&'a str, Cow<'a, str>)>,
    cni: bool,
    run_as_user: i64,
    run_as_group: i64,
}

/// The `istio-proxy` container's own parts.
pub(crate) struct Proxy<'a> {
    image: Cow<'a, str>,
    args: Vec<Cow<'a, str>>,
    lifecycle: Lifecycle<'a>,
    env: Vec<Env<'a>>,
    startup_failure_threshold: Option<i64>,
    readiness: Option<Readiness>,
    security: ProxySecurity,
    lightstep_certs_dir: Option<&'a str>,
}

pub(crate) enum Lifecycle<'a> {
    None,
    /// `values.global.proxy.lifecycle`, verbatim.
    Values(&'a Value),
    /// Hold the application until the proxy is ready (non-native).
    WaitForProxy,
    /// Native sidecar: drain on stop; carries the `--debug-port=<statusPort>` argument.
    Drain(String),
}

pub(crate) struct Env<'a> {
    name: Cow<'a, str>,
    source: EnvSource<'a>,
}

pub(crate) enum EnvSource<'a> {
    /// `value:` (omitted when empty, as Kubernetes serialises it).
    Value(Cow<'a, str>),
    Field(&'static str),
    Resource(&'static str),
}

/// Readiness probe timings; `None` for 0, which Kubernetes omits.
pub(crate) struct Readiness {
    initial_delay_seconds: Option<i64>,
    period_seconds: Option<i64>,
    failure_threshold: Option<i64>,
}

pub(crate) struct ProxySecurity {
    privileged: bool,
    add: Vec<&'static str>,
    run_as_group: i64,
    run_as_non_root: bool,
    run_as_user: i64,
}

fn env<'a>(name: &'static str, value: impl Into<Cow<'a, str>>) -> Env<'a> {
    Env {
        name: Cow::Borrowed(name),
        source: EnvSource::Value(value.into()),
    }
}

fn field_env(name: &'static str, path: &'static str) -> Env<'static> {
    Env {
        name: Cow::Borrowed(name),
        source: EnvSource::Field(path),
    }
}

fn resource_env(name: &'static str, resource: &'static str) -> Env<'static> {
    Env {
        name: Cow::Borrowed(name),
        source: EnvSource::Resource(resource),
    }
}

/// Labels that are "empty" to sprig's `default` count as absent.
fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

/// sprig `trunc 63` (bytes, kept on a character boundary) then `trimAll "-_."`.
fn canonical(name: &str) -> &str {
    let mut end = name.len().min(63);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].trim_matches(|c| matches!(c, '-' | '_' | '.'))
}

impl<'a> Sidecar<'a> {
    pub(crate) fn build(inp: &Inputs<'a>) -> Result<Sidecar<'a>, RenderError> {
        let containers: &'a [Value] = pod::containers(inp.data.pod, "containers");
        let app_containers: Vec<&'a str> = containers
            .iter()
            .filter_map(|c| c.get("name").and_then(Value::as_str))
            .filter(|n| *n != PROXY_CONTAINER)
            .collect();
        let Labels {
            tls_mode,
            tunnel,
            canonical_name,
            canonical_revision,
        } = metadata_labels(inp);
        let Annotations {
            revision,
            default_container,
            default_logs_container,
            cni_annotations,
        } = metadata_annotations(inp, &app_containers)?;
        let Shared {
            image_pull_policy,
            resources,
            privileged,
            seccomp_profile,
        } = shared_container_parts(inp);
        let init = if inp.interception_mode == "NONE" {
            None
        } else {
            Some(init_container(inp)?)
        };
        let proxy = proxy(inp, containers, &app_containers)?;
        let Volumes {
            gke_workload_certificate,
            bootstrap_override,
            token_audience,
            istiod_ca,
            cluster_trust_bundle,
            ca_root_config_map,
            crl_config_map,
            mtls_certs_secret,
            user_volumes,
            user_volume_mounts,
            image_pull_secrets,
        } = volumes(inp)?;
        Ok(Sidecar {
            tls_mode,
            tunnel,
            canonical_name,
            canonical_revision,
            revision,
            default_container,
            default_logs_container,
            cni_annotations,
            init,
            native: inp.native,
            proxy,
            image_pull_policy,
            resources,
            privileged,
            seccomp_profile,
            gke_workload_certificate,
            bootstrap_override,
            token_audience,
            istiod_ca,
            cluster_trust_bundle,
            ca_root_config_map,
            crl_config_map,
            mtls_certs_secret,
            user_volumes,
            user_volume_mounts,
            image_pull_secrets,
        })
    }
}

/// The template's `metadata.labels`.
struct Labels<'a> {
    tls_mode: &'a str,
    tunnel: Option<&'a str>,
    canonical_name: &'a str,
    canonical_revision: &'a str,
}

fn metadata_labels<'a>(inp: &Inputs<'a>) -> Labels<'a> {
    let tls_mode = non_empty(inp.label("security.istio.io/tlsMode")).unwrap_or("istio");
    let hbone = inp
        .proxy_config
        .get("proxyMetadata")
        .and_then(|m| m.get("ISTIO_META_ENABLE_HBONE"))
        .and_then(Value::as_str)
        == Some("true");
    let tunnel =
        hbone.then(|| non_empty(inp.label("networking.istio.io/tunnel")).unwrap_or("http"));
    let canonical_name = canonical(
        [
            "service.istio.io/canonical-name",
            "app.kubernetes.io/name",
            "app",
        ]
        .iter()
        .find_map(|k| non_empty(inp.label(k)))
        .unwrap_or(inp.data.deploy_name),
    );
    let canonical_revision = [
        "service.istio.io/canonical-revision",
        "app.kubernetes.io/version",
        "version",
    ]
    .iter()
    .find_map(|k| non_empty(inp.label(k)))
    .unwrap_or("latest");
    Labels {
        tls_mode,
        tunnel,
        canonical_name,
        canonical_revision,
    }
}

/// The template's `metadata.annotations`.
struct Annotations<'a> {
    revision: &'a str,
    default_container: Option<&'a str>,
    default_logs_container: Option<&'a str>,
    cni_annotations: Vec<(&'static str, Cow<'a, str>)>,
}

fn metadata_annotations<'a>(
    inp: &Inputs<'a>,
    app_containers: &[&'a str],
) -> Result<Annotations<'a>, RenderError> {
    let revision = if inp.data.revision.is_empty() {
        "default"
    } else {
        inp.data.revision
    };
    let first_app = app_containers.first().copied();
    let default_container =
        first_app.filter(|_| inp.ann("kubectl.kubernetes.io/default-container").is_none());
    let default_logs_container = first_app.filter(|_| {
        inp.ann("kubectl.kubernetes.io/default-logs-container")
            .is_none()
    });
    let cni_annotations = if inp.cni {
        cni_annotations(inp)?
    } else {
        Vec::new()
    };
    Ok(Annotations {
        revision,
        default_container,
        default_logs_container,
        cni_annotations,
    })
}

/// The parts both containers share.
struct Shared<'a> {
    image_pull_policy: Option<&'a str>,
    resources: Option<Cow<'a, Value>>,
    privileged: bool,
    seccomp_profile: Option<&'a Value>,
}

fn shared_container_parts<'a>(inp: &Inputs<'a>) -> Shared<'a> {
    Shared {
        image_pull_policy: non_empty(Some(inp.values_str("global.imagePullPolicy"))),
        resources: resources(inp),
        privileged: template_truthy(inp.values_at("global.proxy.privileged")),
        seccomp_profile: inp
            .values_at("global.proxy.seccompProfile")
            .filter(|v| template_truthy(Some(v))),
    }
}

/// The template's volumes and the settings of their mounts.
struct Volumes<'a> {
    gke_workload_certificate: bool,
    bootstrap_override: Option<&'a str>,
    token_audience: Cow<'a, str>,
    istiod_ca: bool,
    cluster_trust_bundle: Option<String>,
    ca_root_config_map: &'a str,
    crl_config_map: &'a str,
    mtls_certs_secret: Option<String>,
    user_volumes: Vec<Value>,
    user_volume_mounts: Vec<Value>,
    image_pull_secrets: Vec<&'a str>,
}

fn volumes<'a>(inp: &Inputs<'a>) -> Result<Volumes<'a>, RenderError> {
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
            .get("spec")
            .and_then(|s| s.get("serviceAccountName"))
            .and_then(Value::as_str);
        format!("istio.{}", non_empty(sa).unwrap_or("default"))
    });
    let image_pull_secrets = inp
        .values_at("global.imagePullSecrets")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(|s| s.as_str().or_else(|| s.get("name").and_then(Value::as_str)))
                .collect()
        })
        .unwrap_or_default();
    Ok(Volumes {
        gke_workload_certificate: inp.values_str("global.caName") == "GkeWorkloadCertificate",
        bootstrap_override: inp.ann(BOOTSTRAP_OVERRIDE_ANNOTATION),
        token_audience: sprint(inp.values_at("global.sds.token.aud")),
        istiod_ca: inp.values_str("global.pilotCertProvider") == "istiod",
        cluster_trust_bundle,
        ca_root_config_map: trust_bundle_name.unwrap_or("istio-ca-root-cert"),
        crl_config_map: non_empty(Some(inp.values_str("pilot.crlConfigMapName")))
            .unwrap_or("istio-ca-crl"),
        mtls_certs_secret,
        user_volumes: named_objects(inp, USER_VOLUME_ANNOTATION)?,
        user_volume_mounts: named_objects(inp, USER_VOLUME_MOUNT_ANNOTATION)?,
        image_pull_secrets,
    })
}

/// The traffic annotations echoed onto the pod for the CNI plugin (CNI mode only).
fn cni_annotations<'a>(inp: &Inputs<'a>) -> Result<Vec<(&'static str, Cow<'a, str>)>, RenderError> {
    let mut out: Vec<(&'static str, Cow<'a, str>)> = Vec::with_capacity(8);
    if inp.values_str("pilot.cni.provider") == "multus" {
        const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
        let existing = inp.ann(NETWORKS).unwrap_or("");
        out.push((
            NETWORKS,
            append_multus_network(existing, "istio-cni", "default"),
        ));
    }
    out.push((
        INTERCEPTION_MODE_ANNOTATION,
        Cow::Borrowed(inp.interception_mode),
    ));
    for (key, values_path) in [
        (
            INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION,
            "global.proxy.includeIPRanges",
        ),
        (
            EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION,
            "global.proxy.excludeIPRanges",
        ),
    ] {
        let (v, _) = setting(inp, key, values_path);
        if !v.is_empty() {
            out.push((key, v));
        }
    }
    let (v, _) = setting(
        inp,
        INCLUDE_INBOUND_PORTS_ANNOTATION,
        "global.proxy.includeInboundPorts",
    );
    out.push((INCLUDE_INBOUND_PORTS_ANNOTATION, v));
    let (e, _) = exclude_inbound(inp);
    out.push((EXCLUDE_INBOUND_PORTS_ANNOTATION, e));
    for (key, values_path) in [
        (
            INCLUDE_OUTBOUND_PORTS_ANNOTATION,
            "global.proxy.includeOutboundPorts",
        ),
        (
            EXCLUDE_OUTBOUND_PORTS_ANNOTATION,
            "global.proxy.excludeOutboundPorts",
        ),
    ] {
        if let Some((v, _)) = optional_setting(inp, key, values_path) {
            out.push((key, v));
        }
    }
    for key in [
        KUBEVIRT_INTERFACES_ANNOTATION,
        REROUTE_VIRTUAL_INTERFACES_ANNOTATION,
        EXCLUDE_INTERFACES_ANNOTATION,
    ] {
        if let Some(v) = non_empty(inp.ann(key)) {
            out.push((key, Cow::Borrowed(v)));
        }
    }
    Ok(out)
}

/// `appendMultusNetwork`: add `<namespace>/<name>` to the pod's Multus networks unless already there,
/// keeping the existing text's format (JSON list or comma-separated list).
pub(crate) fn append_multus_network<'a>(
    existing: &'a str,
    name: &str,
    namespace: &str,
) -> Cow<'a, str> {
    let flat = format!("{namespace}/{name}");
    if existing.is_empty() {
        return Cow::Owned(flat);
    }
    if let Some(close) = existing.rfind(']') {
        let Ok(list) = serde_json::from_str::<Vec<Value>>(existing) else {
            return Cow::Borrowed(existing);
        };
        let present = list.iter().any(|n| {
            n.get("name").and_then(Value::as_str) == Some(name)
                && n.get("namespace").and_then(Value::as_str).unwrap_or("") == namespace
        });
        if present {
            return Cow::Borrowed(existing);
        }
        let entry = serde_json::json!({"name": name, "namespace": namespace});
        // The text is spliced (the user's formatting is kept), in Istio's `{"name": …}` spacing.
        let entry = format!(
            r#"{{"name": {}, "namespace": {}}}"#,
            entry["name"], entry["namespace"]
        );
        let sep = if list.is_empty() { "" } else { ", " };
        return Cow::Owned(format!(
            "{}{sep}{entry}{}",
            &existing[..close],
            &existing[close..]
        ));
    }
    if existing.split(',').any(|n| n.trim() == flat) {
        Cow::Borrowed(existing)
    } else {
        Cow::Owned(format!("{existing}, {flat}"))
    }
}

/// Resources of both containers: the four resource annotations replace the values block entirely.
fn resources<'a>(inp: &Inputs<'a>) -> Option<Cow<'a, Value>> {
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
fn has_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().any(|v| has_null(v) || is_empty_container(v)),
        Value::Array(a) => a.iter().any(|v| has_null(v) || is_empty_container(v)),
        _ => false,
    }
}

fn is_empty_container(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.is_empty()) || v.as_array().is_some_and(|a| a.is_empty())
}

/// sprig/Istio `omitNil`: nulls dropped recursively; maps and lists left empty by that disappear too.
fn omit_nil(v: &Value) -> Option<Value> {
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

/// `sidecar.istio.io/userVolume` / `userVolumeMount`: a JSON object of name → fields, one entry per key in
/// sorted order, `name` first.
fn named_objects(inp: &Inputs<'_>, key: &'static str) -> Result<Vec<Value>, RenderError> {
    let Some(text) = inp.ann(key) else {
        return Ok(Vec::new());
    };
    let bad = |reason: String| RenderError::InvalidAnnotation {
        annotation: key,
        value: text.to_string(),
        reason,
    };
    let parsed: Map<String, Value> =
        serde_json::from_str(text).map_err(|e| bad(format!("not a JSON object: {e}")))?;
    let mut keys: Vec<&String> = parsed.keys().collect();
    keys.sort();
    keys.into_iter()
        .map(|name| {
            let Value::Object(fields) = &parsed[name.as_str()] else {
                return Err(bad(format!("entry {name:?} is not an object")));
            };
            let mut out = Map::with_capacity(fields.len() + 1);
            out.insert("name".into(), Value::from(name.as_str()));
            for (k, v) in fields {
                if k != "name" {
                    out.insert(k.clone(), v.clone());
                }
            }
            Ok(Value::Object(out))
        })
        .collect()
}

fn init_container<'a>(inp: &Inputs<'a>) -> Result<InitContainer<'a>, RenderError> {
    let image_type = inp
        .ann(PROXY_IMAGE_TYPE_ANNOTATION)
        .unwrap_or_else(|| inp.values_str("global.variant"));
    let image = container_image(inp, "global.proxy_init.image", image_type);
    let id = |v: i64| if inp.tproxy || v == 0 { 1337 } else { v };
    Ok(InitContainer {
        name: if inp.cni {
            VALIDATION_CONTAINER
        } else {
            INIT_CONTAINER
        },
        image,
        args: init_args::init_args(inp)?,
        env: inp.proxy_metadata(),
        cni: inp.cni,
        run_as_user: id(inp.proxy_uid),
        run_as_group: id(inp.proxy_gid),
    })
}

/// A container's image: the `sidecar.istio.io/proxyImage` annotation, else the values entry at
/// `values_path`, either used as is when it is a full reference (see `image::choose`).
fn container_image<'a>(inp: &Inputs<'a>, values_path: &str, image_type: &str) -> Cow<'a, str> {
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
fn proxy_image_url(inp: &Inputs<'_>, name_path: &str, image_type: &str) -> String {
    let name = non_empty(Some(inp.values_str(name_path))).unwrap_or("proxyv2");
    let tag = sprint(inp.values_at("global.tag"));
    image::image_url(inp.values_str("global.hub"), name, &tag, image_type)
}

/// An integer setting (annotation, else values); 0 becomes `None` (omitted by Kubernetes).
fn int_setting(
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

fn proxy<'a>(
    inp: &Inputs<'a>,
    containers: &'a [Value],
    app_containers: &[&'a str],
) -> Result<Proxy<'a>, RenderError> {
    let image = proxy_image(inp);
    let args = proxy_args(inp);
    let lifecycle = proxy_lifecycle(inp);
    let env = proxy_env(inp, containers, app_containers)?;
    let (startup_failure_threshold, readiness) = proxy_probes(inp)?;
    Ok(Proxy {
        image,
        args,
        lifecycle,
        env,
        startup_failure_threshold,
        readiness,
        security: proxy_security(inp),
        lightstep_certs_dir: lightstep_certs_dir(inp),
    })
}

/// The proxy's image; its type also comes from the ProxyConfig, unlike the init container's.
fn proxy_image<'a>(inp: &Inputs<'a>) -> Cow<'a, str> {
    let pc_image_type = inp
        .proxy_config
        .get("image")
        .and_then(|i| i.get("imageType"))
        .and_then(Value::as_str);
    let image_type = inp
        .ann(PROXY_IMAGE_TYPE_ANNOTATION)
        .or(non_empty(pc_image_type))
        .unwrap_or_else(|| inp.values_str("global.variant"));
    container_image(inp, "global.proxy.image", image_type)
}

/// The proxy's arguments.
fn proxy_args<'a>(inp: &Inputs<'a>) -> Vec<Cow<'a, str>> {
    let mut args: Vec<Cow<'a, str>> = vec![
        Cow::Borrowed("proxy"),
        Cow::Borrowed("sidecar"),
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
    let outlier = inp.values_str("global.proxy.outlierLogPath");
    if !outlier.is_empty() {
        args.push(Cow::Owned(format!("--outlierLogPath={outlier}")));
    }
    args
}

/// The proxy's lifecycle hooks.
fn proxy_lifecycle<'a>(inp: &Inputs<'a>) -> Lifecycle<'a> {
    let hold = (template_truthy(inp.proxy_config.get("holdApplicationUntilProxyStarts"))
        || inp.values_true("global.proxy.holdApplicationUntilProxyStarts"))
        && !inp.native;
    match inp.values_at("global.proxy.lifecycle") {
        Some(l) if template_truthy(Some(l)) => Lifecycle::Values(l),
        _ if hold => Lifecycle::WaitForProxy,
        _ if inp.native => Lifecycle::Drain(format!("--debug-port={}", inp.status_port())),
        _ => Lifecycle::None,
    }
}

/// The proxy's startup probe threshold and readiness probe timings; neither without a status port.
fn proxy_probes(inp: &Inputs<'_>) -> Result<(Option<i64>, Option<Readiness>), RenderError> {
    if inp.status_port() == "0" {
        return Ok((None, None));
    }
    let startup = if inp.values_true("global.proxy.startupProbe.enabled") {
        let v = inp.values_at("global.proxy.startupProbe.failureThreshold");
        match v.map(goconv::as_i64) {
            None => None,
            Some(Some(n)) => Some(n),
            Some(None) => {
                return Err(RenderError::InvalidSetting {
                    key: "global.proxy.startupProbe.failureThreshold",
                    value: sprint(v).into_owned(),
                    reason: "not an integer",
                })
            }
        }
    } else {
        None
    };
    let readiness = Readiness {
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
    };
    Ok((startup.filter(|n| *n != 0), Some(readiness)))
}

/// The proxy's security context.
fn proxy_security(inp: &Inputs<'_>) -> ProxySecurity {
    let iptables_trace = inp
        .proxy_config
        .get("proxyMetadata")
        .and_then(|m| m.get("IPTABLES_TRACE_LOGGING"))
        .and_then(Value::as_str)
        == Some("true");
    let cap_net_bind = inp.ann_or_values(
        CAP_NET_BIND_SERVICE_ANNOTATION,
        "global.proxy.capNetBindService",
    ) == "true";
    let or_1337 = |v: i64| if v == 0 { 1337 } else { v };
    if iptables_trace {
        ProxySecurity {
            privileged: true,
            add: vec!["NET_ADMIN"],
            run_as_group: or_1337(inp.proxy_gid),
            run_as_non_root: false,
            run_as_user: 0,
        }
    } else {
        let mut add = Vec::new();
        if inp.tproxy {
            add.push("NET_ADMIN");
        }
        if cap_net_bind {
            add.push("NET_BIND_SERVICE");
        }
        let root = inp.tproxy || cap_net_bind;
        ProxySecurity {
            privileged: template_truthy(inp.values_at("global.proxy.privileged")),
            add,
            run_as_group: if root { 1337 } else { or_1337(inp.proxy_gid) },
            run_as_non_root: !root,
            run_as_user: if root { 0 } else { or_1337(inp.proxy_uid) },
        }
    }
}

/// The directory of the Lightstep tracer's CA certificates, mounted into the proxy.
fn lightstep_certs_dir<'a>(inp: &Inputs<'a>) -> Option<&'a str> {
    if inp.values_str("global.proxy.tracer") == "lightstep" {
        inp.proxy_config
            .get("tracing")
            .and_then(|t| t.get("tlsSettings"))
            .and_then(|t| t.get("caCertificates"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(|path| match path.rfind('/') {
                Some(0) => "/",
                Some(i) => &path[..i],
                None => ".",
            })
    } else {
        None
    }
}

/// `ISTIO_META_POD_PORTS`: every port of every (non-init) container, one per line, in Go's `ContainerPort`
/// field order with zero values omitted (except `containerPort`).
fn pod_ports(containers: &[Value]) -> String {
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
        .filter_map(|c| c.get("ports").and_then(Value::as_array))
        .flatten()
    {
        out.extend_from_slice(b"\n    ");
        if !first {
            out.push(b',');
        }
        first = false;
        let text = |k: &str| {
            port.get(k)
                .filter(|v| !v.is_null() && v.as_str() != Some(""))
        };
        let p = Port {
            name: text("name"),
            host_port: port.get("hostPort").filter(|v| !is_zero(v)),
            container_port: port.get("containerPort").unwrap_or(&zero),
            protocol: text("protocol"),
            host_ip: text("hostIP"),
        };
        // Serialising borrowed JSON values into memory cannot fail.
        let _ = serde_json::to_writer(&mut out, &p);
    }
    out.extend_from_slice(b"\n]");
    String::from_utf8(out).unwrap_or_default()
}

fn is_zero(v: &Value) -> bool {
    v.is_null() || v.as_f64() == Some(0.0)
}

/// The proxy's env in the order of Istio's `injection-template.yaml`.
fn proxy_env<'a>(
    inp: &Inputs<'a>,
    containers: &'a [Value],
    app_containers: &[&'a str],
) -> Result<Vec<Env<'a>>, RenderError> {
    let data = inp.data;
    let mut out: Vec<Env<'a>> = Vec::with_capacity(32);
    let inbound_mode = inp
        .mesh
        .get("inboundTrafficPolicy")
        .and_then(|p| p.get("mode"))
        .and_then(Value::as_str);
    if inbound_mode == Some("LOCALHOST") {
        out.push(env_static(
            "REWRITE_PROBE_LEGACY_LOCALHOST_DESTINATION",
            "true",
        ));
    }
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
    out.push(resource_env("ISTIO_CPU_LIMIT", "limits.cpu"));
    let proxy_config: Cow<'a, str> = match data.proxy_config_env {
        Some(text) => Cow::Borrowed(text),
        None => Cow::Owned(super::proxy_config_env(inp.proxy_config)?),
    };
    out.push(env("PROXY_CONFIG", proxy_config));
    out.push(env("ISTIO_META_POD_PORTS", pod_ports(containers)));
    out.push(env("ISTIO_META_APP_CONTAINERS", app_containers.join(",")));
    out.push(resource_env("GOMEMLIMIT", "limits.memory"));
    if !data.compliance_policy.is_empty() {
        out.push(env("COMPLIANCE_POLICY", data.compliance_policy));
        if data.compliance_policy == "fips-140-3" {
            out.push(env_static("GODEBUG", "fips140=only"));
        }
    }
    let cluster = inp.values_str("global.multiCluster.clusterName");
    out.push(env(
        "ISTIO_META_CLUSTER_ID",
        if cluster.is_empty() {
            "Kubernetes"
        } else {
            cluster
        },
    ));
    out.push(field_env("ISTIO_META_NODE_NAME", "spec.nodeName"));
    out.push(env("ISTIO_META_INTERCEPTION_MODE", inp.interception_mode));
    let network = inp.values_str("global.network");
    if !network.is_empty() {
        out.push(env("ISTIO_META_NETWORK", network));
    }
    let workload = non_empty(inp.label("service.istio.io/workload-name"))
        .or(non_empty(Some(data.deploy_name)));
    if let Some(w) = workload {
        out.push(env("ISTIO_META_WORKLOAD_NAME", w));
    }
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
    if inp.ann(BOOTSTRAP_OVERRIDE_ANNOTATION).is_some() {
        out.push(env_static(
            "ISTIO_BOOTSTRAP_OVERRIDE",
            "/etc/istio/custom-bootstrap/custom_bootstrap.json",
        ));
    }
    let trust_domain = non_empty(inp.mesh.get("trustDomain").and_then(Value::as_str))
        .or(non_empty(Some(inp.values_str("global.trustDomain"))));
    if let Some(mesh_id) = non_empty(Some(inp.values_str("global.meshID"))).or(trust_domain) {
        out.push(env("ISTIO_META_MESH_ID", mesh_id));
    }
    if let Some(td) = trust_domain {
        out.push(env("TRUST_DOMAIN", td));
    }
    if inp.values_str("global.proxy.tracer") == "datadog" {
        const DD: &str = "apm.datadoghq.com/env";
        if let Some(text) = inp.ann(DD) {
            let parsed: Map<String, Value> =
                serde_json::from_str(text).map_err(|e| RenderError::InvalidAnnotation {
                    annotation: DD,
                    value: text.to_string(),
                    reason: format!("not a JSON object: {e}"),
                })?;
            let mut keys: Vec<&String> = parsed.keys().collect();
            keys.sort();
            for k in keys {
                out.push(Env {
                    name: Cow::Owned(k.clone()),
                    source: EnvSource::Value(Cow::Owned(sprint(parsed.get(k)).into_owned())),
                });
            }
        }
    }
    if let Some(attrs) = otel_resource_attributes(inp, containers) {
        out.push(env("OTEL_RESOURCE_ATTRIBUTES", attrs));
    }
    for (k, v) in inp.proxy_metadata() {
        out.push(Env {
            name: Cow::Borrowed(k),
            source: EnvSource::Value(v),
        });
    }
    Ok(out)
}

fn env_static(name: &'static str, value: &'static str) -> Env<'static> {
    Env {
        name: Cow::Borrowed(name),
        source: EnvSource::Value(Cow::Borrowed(value)),
    }
}

/// `otelResourceAttributes`: only when a mesh extension provider asks for OpenTelemetry semantic
/// conventions.
fn otel_resource_attributes(inp: &Inputs<'_>, containers: &[Value]) -> Option<String> {
    const SEMCONV: &str = "OTEL_SEMANTIC_CONVENTIONS";
    let enabled = inp
        .mesh
        .get("extensionProviders")
        .and_then(Value::as_array)?
        .iter()
        .any(|p| {
            let otel = p.get("opentelemetry");
            otel.is_some()
                && (otel
                    .and_then(|o| o.get("serviceAttributeEnrichment"))
                    .and_then(Value::as_str)
                    == Some(SEMCONV)
                    || p.get("serviceAttributeEnrichment").and_then(Value::as_str) == Some(SEMCONV))
        });
    if !enabled {
        return None;
    }
    let ns = inp.data.deploy_namespace;
    let mut parts: Vec<String> = Vec::with_capacity(3);
    if let Some(v) =
        non_empty(inp.ann("resource.opentelemetry.io/service.namespace")).or(non_empty(Some(ns)))
    {
        parts.push(format!("service.namespace={v}"));
    }
    let version: Option<Cow<'_, str>> =
        non_empty(inp.ann("resource.opentelemetry.io/service.version"))
            .or(non_empty(inp.label("app.kubernetes.io/version")))
            .map(Cow::Borrowed)
            .or_else(|| {
                if containers.len() != 1 {
                    return None;
                }
                let image = containers[0].get("image").and_then(Value::as_str)?;
                image_version(image)
            });
    if let Some(v) = version {
        parts.push(format!("service.version={v}"));
    }
    let instance = match non_empty(inp.ann("resource.opentelemetry.io/service.instance.id")) {
        Some(v) => Some(v.to_string()),
        None => containers
            .first()
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str)
            .map(|c| format!("{ns}.$(POD_NAME).{c}")),
    };
    if let Some(v) = instance {
        parts.push(format!("service.instance.id={v}"));
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

/// The version part of an image reference: `tag@digest`, `digest` or `tag`.
fn image_version(image: &str) -> Option<Cow<'_, str>> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last_segment = name.rsplit('/').next().unwrap_or(name);
    let tag = last_segment.split_once(':').map(|(_, t)| t);
    match (tag, digest) {
        (Some(t), Some(d)) => Some(Cow::Owned(format!("{t}@{d}"))),
        (None, Some(d)) => Some(Cow::Borrowed(d)),
        (Some(t), None) => Some(Cow::Borrowed(t)),
        (None, None) => None,
    }
}
