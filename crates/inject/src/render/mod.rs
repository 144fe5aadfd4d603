//! Rendering the injection templates (askama, compiled in from `templates/`) from typed contexts.
//!
//! `render(name, data)` computes the named template's typed context from [`TemplateData`] (all of the
//! logic of Istio's Go template: annotation lookups with defaults, traffic arguments, images, ProxyConfig
//! JSON, env, resources, security contexts, volumes, probes, lifecycle), renders its `templates/*.json`
//! with it, and parses the result into the partial Pod that the engine strategically merges into the pod.
//! The contexts are `context::Sidecar`, `gateway::Gateway`, `grpc_agent::GrpcAgent` and
//! `grpc_simple::GrpcSimple`; what the proxy templates write alike is built once in `shared`.
//!
//! The templates emit JSON rather than block YAML: JSON is YAML too, and with every value interpolated
//! through `|json` it parses with `serde_json` much faster than a YAML parser reads the same partial Pod as
//! block YAML (the render is on the hot path of a fail-closed webhook). It also removes a class of
//! failures: YAML forbids some characters raw (DEL, C1 controls) that JSON strings may carry.

mod context;
mod error;
mod gateway;
mod grpc_agent;
mod grpc_simple;
pub(crate) mod image;
mod init_args;
mod inputs;
mod shared;

use askama::Template;
use serde_json::Value;

use inputs::Inputs;

pub use error::RenderError;
pub use inputs::sprint;
pub use inputs::TemplateData;
pub use sidecar_core::proxy_config_json::proxy_config_env;

/// Names of the compiled-in templates (Istio's chart ships the same four pod templates).
pub fn template_names() -> &'static [&'static str] {
    &["sidecar", "gateway", "grpc-agent", "grpc-simple"]
}

/// Renders template `name` to a partial Pod (JSON: `metadata.labels/annotations`, `spec.initContainers`,
/// `spec.containers`, `spec.volumes`, …) to be strategically merged into the pod.
pub fn render(name: &str, data: &TemplateData<'_>) -> Result<Value, RenderError> {
    let (name, text) = render_named(name, data)?;
    parse(name, &text)
}

/// Builds the named template's context and renders it; returns the template's static name with the text.
fn render_named(
    name: &str,
    data: &TemplateData<'_>,
) -> Result<(&'static str, String), RenderError> {
    let inputs = Inputs::new(data)?;
    let (name, rendered) = match name {
        "sidecar" => ("sidecar", context::Sidecar::build(&inputs)?.render()),
        "gateway" => ("gateway", gateway::Gateway::build(&inputs)?.render()),
        "grpc-agent" => (
            "grpc-agent",
            grpc_agent::GrpcAgent::build(&inputs)?.render(),
        ),
        "grpc-simple" => (
            "grpc-simple",
            grpc_simple::GrpcSimple::build(&inputs).render(),
        ),
        _ => {
            return Err(RenderError::NotFound {
                name: name.to_string(),
                have: template_names().join(", "),
            })
        }
    };
    rendered
        .map(|text| (name, text))
        .map_err(|source| RenderError::Template { name, source })
}

fn parse(name: &'static str, text: &str) -> Result<Value, RenderError> {
    serde_json::from_str::<Value>(text).map_err(|e| RenderError::Json {
        name,
        message: e.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
