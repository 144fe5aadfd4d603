//! What stops `injector doctor` before it can report.

use std::path::PathBuf;

use crate::cluster::kube_read::ClusterError;
use crate::shared::webhook_entry::ReadError;

/// The input could not be read; findings about the webhook are never errors of this type.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// A file could not be read.
    #[error("{flag} {}: {source}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// `--webhook-config` cannot be read, is not a stream of MutatingWebhookConfigurations, or holds no
    /// webhook entry.
    #[error(transparent)]
    WebhookConfig(#[from] ReadError),
    /// `--tls-cert` holds no PEM certificate, or a broken one.
    #[error("--tls-cert {}: {detail}", path.display())]
    Cert { path: PathBuf, detail: String },
    /// `--url` is not an `https://` URL.
    #[error("--url {value:?}: {reason}")]
    Url { value: String, reason: &'static str },
    /// `--server-name` is neither a DNS name nor an IP address.
    #[error("--server-name {value:?}: not a DNS name or IP address")]
    ServerName { value: String },
    /// The async runtime for the live checks could not start.
    #[error("starting the runtime: {0}")]
    Runtime(std::io::Error),
    /// `--kubeconfig` / `--in-cluster` gave nothing to check (the object that could not be read named).
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// `--tls-secret` cannot be resolved.
    #[error("--tls-secret {value:?}: {reason}")]
    TlsSecret { value: String, reason: &'static str },
    /// The serving Secret holds no usable `tls.crt`.
    #[error("{secret}: tls.crt: {detail}")]
    SecretCert { secret: String, detail: String },
}
