//! The typed context of Istio's `grpc-agent` template (`files/grpc-agent.yaml`): proxyless gRPC, a
//! `pilot-agent` named `istio-proxy` that runs without Envoy, and every application container patched to
//! use its bootstrap and certificates. `templates/grpc-agent.json` lays it out.

use std::borrow::Cow;

use askama::Template;
use serde_json::Value;

use super::error::RenderError;
use super::inputs::Inputs;
use super::shared::{
    self, env, env_static, named_objects, non_empty, pod_ports, proxy_image, resources, Env,
    EnvSource, IstioVolumes, PodMeta, Readiness,
};
use crate::pod::{self, USER_VOLUME_ANNOTATION, USER_VOLUME_MOUNT_ANNOTATION};
use sidecar_core::fields::Fields;

#[derive(Template)]
#[template(path = "grpc-agent.json", escape = "none")]
pub(crate) struct GrpcAgent<'a> {
    meta: PodMeta<'a>,
    proxy: Proxy<'a>,
    image_pull_policy: Option<&'a str>,
    /// The containers other than `istio-proxy`, each given the gRPC xDS env and mounts.
    app_containers: Vec<&'a str>,
    vol: IstioVolumes<'a>,
    user_volumes: Vec<Value>,
}

/// The agent's `istio-proxy` container.
pub(crate) struct Proxy<'a> {
    image: Cow<'a, str>,
    args: Vec<Cow<'a, str>>,
    env: Vec<Env<'a>>,
    /// Readiness probe, resources and the agent's mounts: all three only with a status port other than "0".
    readiness: Option<Readiness>,
    resources: Option<Cow<'a, Value>>,
    status_mounts: bool,
    user_volume_mounts: Vec<Value>,
}

impl<'a> GrpcAgent<'a> {
    pub(crate) fn build(inp: &Inputs<'a>) -> Result<GrpcAgent<'a>, RenderError> {
        let containers: &'a [Value] = pod::containers(inp.data.pod, "containers");
        let app_containers = shared::app_containers(containers);
        let status_port = inp.status_port() != "0";
        let mut env = proxy_env(inp, containers, &app_containers)?;
        let mut user_volume_mounts = named_objects(inp, USER_VOLUME_MOUNT_ANNOTATION)?;
        if !status_port {
            // The template closes its status-port `if` after the agent's mounts, so without a status port
            // the user mount items follow the env list and become env entries; the typed decode keeps only
            // their names.
            env.extend(user_volume_mounts.drain(..).map(|m| {
                Env {
                    name: Cow::Owned(
                        m.field("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                    ),
                    source: EnvSource::Value(Cow::Borrowed("")),
                }
            }));
        }
        let readiness = if status_port {
            Some(shared::readiness(inp)?)
        } else {
            None
        };
        let proxy = Proxy {
            image: proxy_image(inp),
            args: shared::proxy_args(inp, "sidecar"),
            env,
            readiness,
            resources: if status_port { resources(inp) } else { None },
            status_mounts: status_port,
            user_volume_mounts,
        };
        Ok(GrpcAgent {
            meta: PodMeta::build(inp, &app_containers),
            proxy,
            image_pull_policy: non_empty(Some(inp.values_str("global.imagePullPolicy"))),
            app_containers,
            vol: IstioVolumes::build(inp),
            user_volumes: named_objects(inp, USER_VOLUME_ANNOTATION)?,
        })
    }
}

/// The agent's env in the template's order: generator and certificate output first, no CPU/memory limits,
/// compliance or interception entries, and Envoy and DNS capture switched off last.
fn proxy_env<'a>(
    inp: &Inputs<'a>,
    containers: &'a [Value],
    app_containers: &[&'a str],
) -> Result<Vec<Env<'a>>, RenderError> {
    let mut out: Vec<Env<'a>> = Vec::with_capacity(24);
    out.push(env_static("ISTIO_META_GENERATOR", "grpc"));
    out.push(env_static("OUTPUT_CERTS", "/var/lib/istio/data"));
    if shared::localhost_inbound(inp) {
        out.push(env_static(
            "REWRITE_PROBE_LEGACY_LOCALHOST_DESTINATION",
            "true",
        ));
    }
    shared::push_control_plane_env(inp, &mut out);
    out.push(env("PROXY_CONFIG", shared::proxy_config_value(inp)?));
    out.push(env("ISTIO_META_POD_PORTS", pod_ports(containers)));
    out.push(env("ISTIO_META_APP_CONTAINERS", app_containers.join(",")));
    shared::push_cluster_env(inp, &mut out);
    shared::push_network_env(inp, &mut out);
    shared::push_workload_env(inp, non_empty(Some(inp.data.deploy_name)), &mut out);
    shared::push_mesh_identity_env(inp, &mut out);
    shared::push_proxy_metadata_env(inp, &mut out);
    out.push(env_static("ISTIO_META_DNS_CAPTURE", "false"));
    out.push(env_static("DISABLE_ENVOY", "true"));
    Ok(out)
}
