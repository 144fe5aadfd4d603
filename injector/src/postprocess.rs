//! Before and after the template: stripping a previous injection, re-inserting saved overrides, and
//! `postProcessPod` (Prometheus merge, probe rewrite, status annotation, container order; spec §5.2, §5.5).
//! (Contract only; the merge engineer fills it in.)

use std::collections::BTreeMap;

use serde_json::Value;

/// What post-processing needs beyond the pods.
#[derive(Debug, Clone, Copy)]
pub struct PostProcessParams<'a> {
    pub values: &'a Value,
    pub mesh: &'a Value,
    /// Effective ProxyConfig.
    pub proxy_config: &'a Value,
    /// The injector config's `injectedAnnotations`.
    pub injected_annotations: &'a BTreeMap<String, String>,
    /// Webhook revision; empty for default.
    pub revision: &'a str,
    /// Cluster/network env from the URL path parameters (spec §2.5).
    pub url_env: &'a BTreeMap<String, String>,
}

/// Why post-processing failed.
#[derive(Debug, thiserror::Error)]
pub enum PostProcessError {
    /// Placeholder until post-processing exists.
    #[error("post-processing is not implemented yet")]
    NotImplemented,
}

/// `stripPod`: the pod without a previous injection (by its parseable status annotation).
pub fn strip_pod(pod: &Value, _mesh: &Value) -> Value {
    pod.clone()
}

/// `reinsertOverrides`: containers saved in `proxy.istio.io/overrides` appended when absent.
pub fn reinsert_overrides(_pod: &mut Value) -> Result<(), PostProcessError> {
    Err(PostProcessError::NotImplemented)
}

/// `postProcessPod`, in Istio's order. `original` is the request pod; `template_pod` the template output.
pub fn post_process(
    _pod: &mut Value,
    _original: &Value,
    _template_pod: &Value,
    _params: &PostProcessParams<'_>,
) -> Result<(), PostProcessError> {
    Err(PostProcessError::NotImplemented)
}
