//! Rendering the injection templates (askama, compiled in from `templates/`) from a typed context.
//! (Contract only; the render engineer fills it in.)

use serde_json::Value;

/// The template input (Istio's `SidecarTemplateData`). All documents are JSON as Istio serialises them.
#[derive(Debug, Clone, Copy)]
pub struct TemplateData<'a> {
    /// Workload `kind` / `apiVersion` (webhook: from owner references; kube-inject: the object's own).
    pub kind: &'a str,
    pub api_version: &'a str,
    /// Workload name and namespace.
    pub deploy_name: &'a str,
    pub deploy_namespace: &'a str,
    /// The pod as the template sees it: previous injection stripped, saved overrides re-inserted.
    pub pod: &'a Value,
    /// Effective ProxyConfig (proto JSON names, camelCase).
    pub proxy_config: &'a Value,
    /// MeshConfig (proto JSON names).
    pub mesh: &'a Value,
    /// The `values` document (defaults merged).
    pub values: &'a Value,
    /// Webhook revision; empty for the default revision.
    pub revision: &'a str,
    /// Whether `istio-proxy` runs as a native sidecar (init container with `restartPolicy: Always`).
    pub native_sidecars: bool,
    pub proxy_uid: i64,
    pub proxy_gid: i64,
    /// `COMPLIANCE_POLICY` of the injector process.
    pub compliance_policy: &'a str,
}

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The pod asked for a template that is not compiled in.
    #[error("requested template {name:?} not found; have {have}")]
    NotFound { name: String, have: String },
}

/// Names of the compiled-in templates.
pub fn template_names() -> &'static [&'static str] {
    &["sidecar"]
}

/// Renders template `name` to a partial Pod (JSON: `metadata.labels/annotations`, `spec.initContainers`,
/// `spec.containers`, `spec.volumes`, …) to be strategically merged into the pod.
pub fn render(name: &str, _data: &TemplateData<'_>) -> Result<Value, RenderError> {
    Err(RenderError::NotFound {
        name: name.to_string(),
        have: template_names().join(", "),
    })
}
