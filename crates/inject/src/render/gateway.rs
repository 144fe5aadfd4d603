//! The typed context of Istio's `gateway` template (`files/gateway-injection-template.yaml`): the
//! `istio-proxy` placeholder of an `istio/gateway` chart pod becomes Envoy in router mode.
//! `templates/gateway.json` lays it out.

use std::borrow::Cow;

use askama::Template;
use serde_json::{json, Value};

use super::error::RenderError;
use super::inputs::{proxy_config_interception_mode, Inputs};
use super::shared::{
    self, env, non_empty, pod_ports, proxy_image, resource_env, values_int, Env, EnvSource,
    IstioVolumes, PodMeta, Readiness,
};
use crate::pod;
use sidecar_core::goconv::template_truthy;

#[derive(Template)]
#[template(path = "gateway.json", escape = "none")]
pub(crate) struct Gateway<'a> {
    meta: PodMeta<'a>,
    /// `values.gateways.securityContext` when set, else the unprivileged-port sysctl.
    pod_security_context: Cow<'a, Value>,
    proxy: Proxy<'a>,
    image_pull_policy: Option<&'a str>,
    vol: IstioVolumes<'a>,
}

/// The gateway's `istio-proxy` container.
pub(crate) struct Proxy<'a> {
    image: Cow<'a, str>,
    args: Vec<Cow<'a, str>>,
    lifecycle: Option<&'a Value>,
    env: Vec<Env<'a>>,
    run_as_user: i64,
    run_as_group: i64,
    /// Timings from `values` only: the gateway template reads no readiness annotation.
    readiness: Readiness,
}

impl<'a> Gateway<'a> {
    pub(crate) fn build(inp: &Inputs<'a>) -> Result<Gateway<'a>, RenderError> {
        let containers: &'a [Value] = pod::containers(inp.data.pod, "containers");
        let app_containers = shared::app_containers(containers);
        let pod_security_context = match inp.values_at("gateways.securityContext") {
            Some(sc) if template_truthy(Some(sc)) => Cow::Borrowed(sc),
            _ => Cow::Owned(json!({
                "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]
            })),
        };
        let or_1337 = |v: i64| if v == 0 { 1337 } else { v };
        let proxy = Proxy {
            image: proxy_image(inp),
            args: shared::proxy_args(inp, "router"),
            lifecycle: shared::values_lifecycle(inp),
            env: proxy_env(inp, containers, &app_containers)?,
            run_as_user: or_1337(inp.proxy_uid),
            run_as_group: or_1337(inp.proxy_gid),
            readiness: Readiness {
                initial_delay_seconds: values_int(
                    inp,
                    "global.proxy.readinessInitialDelaySeconds",
                )?,
                period_seconds: values_int(inp, "global.proxy.readinessPeriodSeconds")?,
                failure_threshold: values_int(inp, "global.proxy.readinessFailureThreshold")?,
            },
        };
        Ok(Gateway {
            meta: PodMeta::build(inp, &app_containers),
            pod_security_context,
            proxy,
            image_pull_policy: non_empty(Some(inp.values_str("global.imagePullPolicy"))),
            vol: IstioVolumes::build(inp),
        })
    }
}

/// The gateway proxy's env in the template's order: `GOMEMLIMIT` before the compliance entries and
/// `ISTIO_META_APP_CONTAINERS`, the interception mode from the ProxyConfig only, the workload name from the
/// workload only, no probe, Datadog or OpenTelemetry entries.
fn proxy_env<'a>(
    inp: &Inputs<'a>,
    containers: &'a [Value],
    app_containers: &[&'a str],
) -> Result<Vec<Env<'a>>, RenderError> {
    let mut out: Vec<Env<'a>> = Vec::with_capacity(28);
    shared::push_control_plane_env(inp, &mut out);
    out.push(resource_env("ISTIO_CPU_LIMIT", "limits.cpu"));
    out.push(env("PROXY_CONFIG", shared::proxy_config_value(inp)?));
    out.push(env("ISTIO_META_POD_PORTS", pod_ports(containers)));
    out.push(resource_env("GOMEMLIMIT", "limits.memory"));
    // Istio 1.29-1.31's texts (not master's since August 2026) bound the Go runtime by the CPU limit.
    out.push(resource_env("GOMAXPROCS", "limits.cpu"));
    shared::push_compliance_env(inp, &mut out);
    out.push(env("ISTIO_META_APP_CONTAINERS", app_containers.join(",")));
    shared::push_cluster_env(inp, &mut out);
    out.push(env(
        "ISTIO_META_INTERCEPTION_MODE",
        proxy_config_interception_mode(inp.proxy_config),
    ));
    shared::push_network_env(inp, &mut out);
    shared::push_workload_env(inp, non_empty(Some(inp.data.deploy_name)), &mut out);
    shared::push_bootstrap_env(inp, &mut out);
    shared::push_mesh_identity_env(inp, &mut out);
    shared::push_proxy_metadata_env(inp, &mut out);
    Ok(out)
}
