//! What two front ends share, below them all and free of the cluster: the webhook's shaping of a pod
//! before the engine (`webhook_request`), a manifest's documents and pod templates (`manifest`), the
//! webhook entries read or generated and the API server's routing over them (`webhook_entry`), the
//! MutatingWebhookConfigurations generated (`webhook_config`, with its own small `run`), the
//! hot-swappable certificate (`tls`), the generic cache and serve's metrics (`cache`, `metrics`),
//! doctor's and explain's output (`output`), and the injection compiled for a MutatingAdmissionPolicy
//! (`policy`: `injector policy` writes it, `explain --policy` predicts what it does to a pod).

pub mod cache;
pub mod manifest;
pub mod metrics;
pub mod output;
pub mod policy;
pub mod tls;
pub mod webhook_config;
pub mod webhook_entry;
pub mod webhook_request;
