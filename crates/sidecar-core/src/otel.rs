//! The `OTEL_RESOURCE_ATTRIBUTES` value of the proxy (Istio's `template.go` `otelResourceAttributes`),
//! shared by the compiled templates and the evaluator's function of that name.

use serde_json::{Map, Value};

use crate::fields::Fields;

const SEMCONV: &str = "OTEL_SEMANTIC_CONVENTIONS";

/// The attributes, or None when no mesh extension provider asks for OpenTelemetry semantic conventions
/// or none applies. `annotations` and `labels` are the pod's maps, `containers` its app containers.
pub fn resource_attributes(
    mesh: &Value,
    annotations: Option<&Map<String, Value>>,
    labels: Option<&Map<String, Value>>,
    namespace: &str,
    containers: &[Value],
) -> Option<String> {
    let enabled = mesh
        .field("extensionProviders")
        .and_then(Value::as_array)?
        .iter()
        .any(|p| {
            let otel = p.field("opentelemetry");
            otel.is_some()
                && (otel
                    .and_then(|o| o.field("serviceAttributeEnrichment"))
                    .and_then(Value::as_str)
                    == Some(SEMCONV)
                    || p.field("serviceAttributeEnrichment")
                        .and_then(Value::as_str)
                        == Some(SEMCONV))
        });
    if !enabled {
        return None;
    }
    let get = |m: Option<&Map<String, Value>>, k: &str| -> Option<String> {
        m.and_then(|m| m.field(k))
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let mut parts: Vec<String> = Vec::with_capacity(3);
    if let Some(v) = get(annotations, "resource.opentelemetry.io/service.namespace")
        .or_else(|| (!namespace.is_empty()).then(|| namespace.to_string()))
    {
        parts.push(format!("service.namespace={v}"));
    }
    let version = get(annotations, "resource.opentelemetry.io/service.version")
        .or_else(|| get(labels, "app.kubernetes.io/version"))
        .or_else(|| match containers {
            [only] => image_version(only.field("image").and_then(Value::as_str).unwrap_or("")),
            _ => None,
        });
    if let Some(v) = version {
        parts.push(format!("service.version={v}"));
    }
    let instance = match get(annotations, "resource.opentelemetry.io/service.instance.id") {
        Some(v) => Some(v),
        None => containers.first().map(|c| {
            let name = c.field("name").and_then(Value::as_str).unwrap_or("");
            format!("{namespace}.$(POD_NAME).{name}")
        }),
    };
    if let Some(v) = instance {
        parts.push(format!("service.instance.id={v}"));
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

/// The version part of an image reference: `tag@digest`, `digest` or `tag` (Istio's
/// `parseImageTagDigest`: the tag is after the last `:` that follows the last `/`).
fn image_version(image: &str) -> Option<String> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last_segment = name.rsplit('/').next().unwrap_or(name);
    let tag = last_segment.rsplit_once(':').map(|(_, t)| t);
    match (
        tag.filter(|t| !t.is_empty()),
        digest.filter(|d| !d.is_empty()),
    ) {
        (Some(t), Some(d)) => Some(format!("{t}@{d}")),
        (None, Some(d)) => Some(d.to_string()),
        (Some(t), None) => Some(t.to_string()),
        (None, None) => None,
    }
}
