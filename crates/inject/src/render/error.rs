//! Why rendering failed.

use sidecar_core::proxy_config_json::ProxyConfigError;

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The pod asked for a template that is not compiled in.
    #[error("requested template {name:?} not found; have {have}")]
    NotFound { name: String, have: String },
    /// A value that would become an `istio-init` argument does not have the shape of that argument.
    #[error("invalid value '{value}' for {origin}: not a valid istio-iptables argument")]
    InvalidArgument { origin: String, value: String },
    /// An annotation the template reads could not be used.
    #[error("invalid value '{value}' for annotation '{annotation}': {reason}")]
    InvalidAnnotation {
        annotation: &'static str,
        value: String,
        reason: String,
    },
    /// A values/mesh setting the template reads has an unusable value.
    #[error("invalid value '{value}' for {key}: {reason}")]
    InvalidSetting {
        key: &'static str,
        value: String,
        reason: &'static str,
    },
    /// The effective ProxyConfig could not be printed.
    #[error(transparent)]
    ProxyConfig(#[from] ProxyConfigError),
    /// askama failed (a `Display`/serialisation error inside the template).
    #[error("rendering template {name:?}: {source}")]
    Template {
        name: &'static str,
        source: askama::Error,
    },
    /// The rendered text did not parse as JSON (a bug in a template: values cannot cause it).
    #[error("template {name:?} produced invalid JSON: {message}")]
    Json { name: &'static str, message: String },
}
