//! Strategic merge with the Pod schema's rules (spec §5.3) and re-applying user-set container fields
//! (spec §5.4). (Contract only; the merge engineer fills it in.)

use serde_json::Value;

/// Why a merge failed.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Placeholder until merging exists.
    #[error("strategic merge is not implemented yet")]
    NotImplemented,
}

/// Strategic-merges `patch` (a partial Pod) onto `original` (a Pod), Kubernetes' rules and list order.
pub fn strategic_merge_pod(_original: &Value, _patch: &Value) -> Result<Value, MergeError> {
    Err(MergeError::NotImplemented)
}

/// `reapplyOverwrittenContainers` + `adjustInitContainerUser`: fields the user set on a container the
/// template also defines win. `original` is the request pod, `template_pod` the merged template output.
pub fn reapply_overwritten_containers(
    _final_pod: &mut Value,
    _original: &Value,
    _template_pod: &Value,
    _proxy_config: &Value,
) -> Result<(), MergeError> {
    Err(MergeError::NotImplemented)
}
