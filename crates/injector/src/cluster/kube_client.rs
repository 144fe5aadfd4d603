//! The connection to the Kubernetes API server (kube-rs), for the front ends that read the cluster
//! instead of files: `--kubeconfig FILE` or `--in-cluster` (the pod's service account, as istiod
//! always runs). Without either flag nothing connects and the file flags stay the whole truth.

use std::path::PathBuf;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// `--kubeconfig` and `--in-cluster`, defined once for every subcommand that can read the cluster.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KubeArgs {
    /// Read the cluster through this kubeconfig (its current context). KUBECONFIG is not read, so an
    /// environment meant for kubectl never connects the injector by surprise.
    #[arg(
        long = "kubeconfig",
        value_name = "FILE",
        conflicts_with = "in_cluster"
    )]
    pub kubeconfig: Option<PathBuf>,
    /// Read the cluster with the pod's service account (KUBERNETES_SERVICE_HOST and the token mounted
    /// under /var/run/secrets/kubernetes.io/serviceaccount), as istiod does.
    #[arg(long = "in-cluster")]
    pub in_cluster: bool,
}

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    /// `--kubeconfig` names a file that cannot be read or parsed.
    #[error("--kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// `--in-cluster` outside a pod (or with its service account not mounted).
    #[error("--in-cluster: {0}")]
    InCluster(#[source] kube::config::InClusterError),
    /// The configuration is read but the HTTP client cannot be built from it (TLS material, proxy).
    #[error("the cluster client for {server}: {source}")]
    Client {
        server: String,
        #[source]
        source: kube::Error,
    },
}

/// A connection that is not up by then fails (a watch then reconnects with backoff) instead of hanging
/// the caller. Reads keep kube-rs' bound (295 s), which an idle watch's long poll (290 s) must fit in.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl KubeArgs {
    /// Whether a flag asks for the cluster.
    pub fn wanted(&self) -> bool {
        self.kubeconfig.is_some() || self.in_cluster
    }

    /// The client the flags ask for, `None` without them. Needs a tokio runtime.
    pub async fn client(&self) -> Result<Option<kube::Client>, KubeClientError> {
        let mut config = if let Some(path) = &self.kubeconfig {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| KubeClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| KubeClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        } else if self.in_cluster {
            kube::Config::incluster().map_err(KubeClientError::InCluster)?
        } else {
            return Ok(None);
        };
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        let server = config.cluster_url.to_string();
        kube::Client::try_from(config)
            .map(Some)
            .map_err(|source| KubeClientError::Client { server, source })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_a_flag_nothing_connects() {
        assert!(KubeArgs::default().client().await.unwrap().is_none());
        assert!(!KubeArgs::default().wanted());
    }

    #[tokio::test]
    async fn an_unreadable_kubeconfig_is_named() {
        let args = KubeArgs {
            kubeconfig: Some(PathBuf::from("/nonexistent/kubeconfig")),
            in_cluster: false,
        };
        let e = match args.client().await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a client from a bad kubeconfig"),
        };
        assert!(e.contains("--kubeconfig /nonexistent/kubeconfig"), "{e}");
    }

    #[tokio::test]
    async fn a_kubeconfig_that_is_not_yaml_is_named() {
        let dir = std::env::temp_dir().join(format!("kube-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(&path, "clusters: [unclosed").unwrap();
        let args = KubeArgs {
            kubeconfig: Some(path.clone()),
            in_cluster: false,
        };
        let e = match args.client().await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a client from a bad kubeconfig"),
        };
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            e.contains(&format!("--kubeconfig {}", path.display())),
            "{e}"
        );
    }
}
