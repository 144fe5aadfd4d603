//! Reading the pod from the API server with the kubeconfig the node agent wrote, in bounded retries
//! (Istio's `newK8sClient` and the `podRetrievalMaxRetries` loop of `doAddRun`).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::spec::{code, CniError};

/// Each attempt's bound on connecting, and on each read and write: the whole fetch is bounded by
/// `attempts × (3 × this + interval)`, so a stalled API server cannot hold the sandbox forever.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// How the pod is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Retries {
    /// Attempts, at least one.
    pub attempts: u32,
    /// The wait between two attempts.
    pub interval: Duration,
}

/// Reads `namespace/name`. An unreadable or invalid kubeconfig fails at once (the node agent has not
/// written it yet: try again later); an API error is retried; `give_up` is asked after each failed
/// attempt and ends the loop early with `Ok(None)` (Istio's degraded-state check for its own agent pod).
pub fn fetch(
    kubeconfig: &Path,
    namespace: &str,
    name: &str,
    retries: Retries,
    give_up: &dyn Fn() -> bool,
) -> Result<Option<Pod>, CniError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CniError::new(code::IO_FAILURE, format!("starting the API client: {e}")))?;
    runtime.block_on(async {
        let client = client(kubeconfig).await?;
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, namespace);
        let mut last = String::new();
        for attempt in 1..=retries.attempts.max(1) {
            match pods.get(name).await {
                Ok(pod) => return Ok(Some(pod)),
                Err(e) => {
                    tracing::debug!(attempt, "failed to get pod info: {e}");
                    last = e.to_string();
                }
            }
            if give_up() {
                return Ok(None);
            }
            if attempt == 1 {
                tracing::warn!(
                    pod = %format!("{namespace}/{name}"),
                    "cannot read the pod from the API server ({last}); retrying up to {} times",
                    retries.attempts
                );
            }
            if attempt < retries.attempts {
                tokio::time::sleep(retries.interval).await;
            }
        }
        Err(CniError::new(
            code::TRY_AGAIN_LATER,
            format!(
                "failed to get pod {namespace}/{name} from the API server after {} attempts: {last}",
                retries.attempts
            ),
        ))
    })
}

async fn client(kubeconfig: &Path) -> Result<kube::Client, CniError> {
    let unavailable = |what: String| {
        CniError::new(
            code::TRY_AGAIN_LATER,
            format!("kubeconfig {}: {what}", kubeconfig.display()),
        )
        .with_details(
            "the istio-cni node agent writes it when it starts; is it running on this node?",
        )
    };
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| unavailable(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    config.connect_timeout = Some(ATTEMPT_TIMEOUT);
    config.read_timeout = Some(ATTEMPT_TIMEOUT);
    config.write_timeout = Some(ATTEMPT_TIMEOUT);
    kube::Client::try_from(config).map_err(|e| unavailable(e.to_string()))
}
