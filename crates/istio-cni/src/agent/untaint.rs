//! Removing the `cni.istio.io/not-ready` taint from the agent's own Node once the plugin is installed,
//! as istiod's `pilot/pkg/controllers/untaint/nodeuntainter.go` `removeReadinessTaint` does for nodes
//! whose istio-cni pod is ready; here the agent does it for its node, so no cluster-wide controller
//! (and no Node write permission in istiod) is needed.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};

/// The taint's key (Istio's `features.NodeUntaintTaintName` default).
pub const TAINT_KEY: &str = "cni.istio.io/not-ready";

/// Why one attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum UntaintError {
    /// Reading or patching the Node failed (not found, forbidden, a conflict with another writer).
    #[error("node {node}: {source}")]
    Api {
        node: String,
        #[source]
        source: kube::Error,
    },
}

/// The taints without ours, `None` when ours is not there.
pub fn without_ours(taints: &[Taint]) -> Option<Vec<Taint>> {
    let kept: Vec<Taint> = taints
        .iter()
        .filter(|t| t.key != TAINT_KEY)
        .cloned()
        .collect();
    (kept.len() != taints.len()).then_some(kept)
}

/// One attempt: reads the Node and, when the taint is there, writes the other taints back in a merge
/// patch carrying the resourceVersion read, so a concurrent change to the taints makes it fail (and be
/// retried) instead of being overwritten. `Ok(true)` when a taint was removed.
pub async fn once(nodes: &Api<Node>, name: &str) -> Result<bool, UntaintError> {
    let api = |source| UntaintError::Api {
        node: name.to_string(),
        source,
    };
    let node = nodes.get(name).await.map_err(api)?;
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let Some(kept) = without_ours(&taints) else {
        return Ok(false);
    };
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": kept},
    });
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api)?;
    Ok(true)
}

/// Retries [`once`] (1 s, doubling to 30 s) until the Node carries no taint of ours.
pub async fn run(client: kube::Client, name: String, state: Arc<super::health::State>) {
    let nodes: Api<Node> = Api::all(client);
    let mut wait = Duration::from_secs(1);
    loop {
        match once(&nodes, &name).await {
            Ok(removed) => {
                if removed {
                    state.metrics.untainted();
                    tracing::info!(node = %name, "removed the {TAINT_KEY} taint");
                } else {
                    tracing::info!(node = %name, "no {TAINT_KEY} taint to remove");
                }
                return;
            }
            Err(e) => tracing::warn!("removing the {TAINT_KEY} taint: {e}; retrying in {wait:?}"),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn taint(key: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }
    }

    #[test]
    fn only_our_taint_goes() {
        let kept = without_ours(&[taint("a"), taint(TAINT_KEY), taint("b")]).unwrap();
        assert_eq!(kept, [taint("a"), taint("b")]);
        assert!(without_ours(&[taint("a")]).is_none());
    }
}
