//! The typed context of the `sidecar` template (Istio's `files/injection-template.yaml`): every decision of
//! Istio's Go template, made in Rust. `templates/sidecar.json` and `templates/sidecar-proxy.json` only lay
//! the result out.

use std::borrow::Cow;

use askama::Template;
use serde_json::{Map, Value};

use super::error::RenderError;
use super::init_args::{self, exclude_inbound, optional_setting, setting};
use super::inputs::{sprint, Inputs};
use super::shared::{
    self, container_image, env, env_static, named_objects, non_empty, pod_ports, proxy_image,
    resource_env, resources, Env, EnvSource, IstioVolumes, PodMeta, Readiness,
};
use crate::pod::{
    self, CAP_NET_BIND_SERVICE_ANNOTATION, INIT_CONTAINER, PROXY_IMAGE_TYPE_ANNOTATION,
    USER_VOLUME_ANNOTATION, USER_VOLUME_MOUNT_ANNOTATION, VALIDATION_CONTAINER,
};
use crate::traffic::{From, TRAFFIC};
use sidecar_core::fields::Fields;
use sidecar_core::goconv::{self, template_truthy};

/// The default `sidecar` template with its context.
#[derive(Template)]
#[template(path = "sidecar.json", escape = "none")]
pub(crate) struct Sidecar<'a> {
    // metadata.labels
    tls_mode: &'a str,
    tunnel: Option<&'a str>,
    // metadata labels and annotations shared with the other templates (canonical name truncated here)
    meta: PodMeta<'a>,
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
    vol: IstioVolumes<'a>,
    crl_config_map: &'a str,
    user_volumes: Vec<Value>,
    user_volume_mounts: Vec<Value>,
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

pub(crate) struct ProxySecurity {
    privileged: bool,
    add: Vec<&'static str>,
    run_as_group: i64,
    run_as_non_root: bool,
    run_as_user: i64,
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
        let app_containers = shared::app_containers(containers);
        let (tls_mode, tunnel) = metadata_labels(inp);
        let mut meta = PodMeta::build(inp, &app_containers);
        meta.canonical_name = canonical(meta.canonical_name);
        let cni_annotations = if inp.cni {
            cni_annotations(inp)?
        } else {
            Vec::new()
        };
        let init = if inp.interception_mode == "NONE" {
            None
        } else {
            Some(init_container(inp)?)
        };
        let proxy = proxy(inp, containers, &app_containers)?;
        Ok(Sidecar {
            tls_mode,
            tunnel,
            meta,
            cni_annotations,
            init,
            native: inp.native,
            proxy,
            image_pull_policy: non_empty(Some(inp.values_str("global.imagePullPolicy"))),
            resources: resources(inp),
            privileged: template_truthy(inp.values_at("global.proxy.privileged")),
            seccomp_profile: inp
                .values_at("global.proxy.seccompProfile")
                .filter(|v| template_truthy(Some(v))),
            vol: IstioVolumes::build(inp),
            crl_config_map: non_empty(Some(inp.values_str("pilot.crlConfigMapName")))
                .unwrap_or("istio-ca-crl"),
            user_volumes: named_objects(inp, USER_VOLUME_ANNOTATION)?,
            user_volume_mounts: named_objects(inp, USER_VOLUME_MOUNT_ANNOTATION)?,
        })
    }
}

/// The sidecar's own `metadata.labels`: `security.istio.io/tlsMode` and, with HBONE, the tunnel label.
fn metadata_labels<'a>(inp: &Inputs<'a>) -> (&'a str, Option<&'a str>) {
    let tls_mode = non_empty(inp.label("security.istio.io/tlsMode")).unwrap_or("istio");
    let hbone = inp.proxy_metadata_is_true("ISTIO_META_ENABLE_HBONE");
    let tunnel =
        hbone.then(|| non_empty(inp.label("networking.istio.io/tunnel")).unwrap_or("http"));
    (tls_mode, tunnel)
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
    for t in TRAFFIC {
        let name = t.annotation.name;
        let value = match t.from {
            From::Mode => Some(Cow::Borrowed(inp.interception_mode)),
            From::Setting { values, echo_empty } => {
                Some(setting(inp, name, values).0).filter(|v| echo_empty || !v.is_empty())
            }
            From::ExcludeInbound { values } => Some(exclude_inbound(inp, name, values).0),
            From::Optional { values } => optional_setting(inp, name, values).map(|(v, _)| v),
            From::Annotation | From::Preferred { .. } | From::FallbackOnly => {
                non_empty(inp.ann(name)).map(Cow::Borrowed)
            }
        };
        if let Some(v) = value {
            out.push((name, v));
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
            n.field("name").and_then(Value::as_str) == Some(name)
                && n.field("namespace").and_then(Value::as_str).unwrap_or("") == namespace
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

/// The proxy's arguments.
fn proxy_args<'a>(inp: &Inputs<'a>) -> Vec<Cow<'a, str>> {
    let mut args = shared::proxy_args(inp, "sidecar");
    let outlier = inp.values_str("global.proxy.outlierLogPath");
    if !outlier.is_empty() {
        args.push(Cow::Owned(format!("--outlierLogPath={outlier}")));
    }
    args
}

/// The proxy's lifecycle hooks.
fn proxy_lifecycle<'a>(inp: &Inputs<'a>) -> Lifecycle<'a> {
    let hold = (template_truthy(inp.proxy_config.field("holdApplicationUntilProxyStarts"))
        || inp.values_true("global.proxy.holdApplicationUntilProxyStarts"))
        && !inp.native;
    match shared::values_lifecycle(inp) {
        Some(l) => Lifecycle::Values(l),
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
    let readiness = shared::readiness(inp)?;
    Ok((startup.filter(|n| *n != 0), Some(readiness)))
}

/// The proxy's security context.
fn proxy_security(inp: &Inputs<'_>) -> ProxySecurity {
    let iptables_trace = inp.proxy_metadata_is_true("IPTABLES_TRACE_LOGGING");
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
            .field("tracing")
            .and_then(|t| t.field("tlsSettings"))
            .and_then(|t| t.field("caCertificates"))
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

/// The proxy's env in the order of Istio's `injection-template.yaml`.
fn proxy_env<'a>(
    inp: &Inputs<'a>,
    containers: &'a [Value],
    app_containers: &[&'a str],
) -> Result<Vec<Env<'a>>, RenderError> {
    let data = inp.data;
    let mut out: Vec<Env<'a>> = Vec::with_capacity(32);
    if shared::localhost_inbound(inp) {
        out.push(env_static(
            "REWRITE_PROBE_LEGACY_LOCALHOST_DESTINATION",
            "true",
        ));
    }
    shared::push_control_plane_env(inp, &mut out);
    out.push(resource_env("ISTIO_CPU_LIMIT", "limits.cpu"));
    out.push(env("PROXY_CONFIG", shared::proxy_config_value(inp)?));
    out.push(env("ISTIO_META_POD_PORTS", pod_ports(containers)));
    out.push(env("ISTIO_META_APP_CONTAINERS", app_containers.join(",")));
    out.push(resource_env("GOMEMLIMIT", "limits.memory"));
    // Istio 1.29-1.31's texts (not master's since August 2026) bound the Go runtime by the CPU limit.
    out.push(resource_env("GOMAXPROCS", "limits.cpu"));
    shared::push_compliance_env(inp, &mut out);
    shared::push_cluster_env(inp, &mut out);
    out.push(env("ISTIO_META_INTERCEPTION_MODE", inp.interception_mode));
    shared::push_network_env(inp, &mut out);
    let workload = non_empty(inp.label("service.istio.io/workload-name"))
        .or(non_empty(Some(data.deploy_name)));
    shared::push_workload_env(inp, workload, &mut out);
    shared::push_bootstrap_env(inp, &mut out);
    shared::push_mesh_identity_env(inp, &mut out);
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
                    source: EnvSource::Value(Cow::Owned(sprint(parsed.field(k)).into_owned())),
                });
            }
        }
    }
    if let Some(attrs) = sidecar_core::otel::resource_attributes(
        inp.mesh,
        inp.annotations,
        inp.labels,
        inp.data.deploy_namespace,
        containers,
    ) {
        out.push(env("OTEL_RESOURCE_ATTRIBUTES", attrs));
    }
    shared::push_proxy_metadata_env(inp, &mut out);
    Ok(out)
}
