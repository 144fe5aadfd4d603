//! Race repair: pods of this node that started before the plugin was installed have no interception
//! rules, and their `istio-validation` init container fails with exit code 126; they are deleted (so
//! they are created again, this time through the plugin) or labelled. Istio's `cni/pkg/repair`
//! (`repaircontroller.go` `matchesFilter`, `deleteBrokenPod`, `labelBrokenPod`), over a kube-rs watch.

use std::sync::Arc;

use clap::{ArgAction, Args};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher;

/// Counts one handled pod: `type` (`delete`, `label`) and `result` (`success`, `skip`, `fail`), as
/// Istio's `istio_cni_repair_pods_repaired_total`; the agent passes its metrics in, so this module
/// depends on nothing of the agent's.
pub type Record = Arc<dyn Fn(&'static str, &'static str) + Send + Sync>;

/// The repair flags (Istio's `REPAIR_*`).
#[derive(Debug, Clone, Args)]
pub struct RepairArgs {
    /// Run race repair.
    #[arg(long, env = "REPAIR_ENABLED", value_name = "BOOL", default_value_t = true,
          action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub repair_enabled: bool,
    /// Delete a broken pod (ahead of labelling, as Istio's order).
    #[arg(long, env = "REPAIR_DELETE_PODS", value_name = "BOOL", default_value_t = true,
          action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub repair_delete_pods: bool,
    /// Label a broken pod (when not deleting).
    #[arg(long, env = "REPAIR_LABEL_PODS", value_name = "BOOL", default_value_t = false,
          action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub repair_label_pods: bool,
    /// The label's key.
    #[arg(
        long = "repair-broken-pod-label-key",
        env = "REPAIR_BROKEN_POD_LABEL_KEY",
        value_name = "KEY",
        default_value = "cni.istio.io/uninitialized"
    )]
    pub label_key: String,
    /// The label's value.
    #[arg(
        long = "repair-broken-pod-label-value",
        env = "REPAIR_BROKEN_POD_LABEL_VALUE",
        value_name = "VALUE",
        default_value = "true"
    )]
    pub label_value: String,
    /// The node whose pods are watched (default: --node-name).
    #[arg(long, env = "REPAIR_NODE_NAME", value_name = "NAME")]
    pub repair_node_name: Option<String>,
    /// Only pods with this annotation are sidecar pods; empty: every pod.
    #[arg(
        long,
        env = "REPAIR_SIDECAR_ANNOTATION",
        value_name = "KEY",
        default_value = sidecar_core::annotations::STATUS.name
    )]
    pub repair_sidecar_annotation: String,
    /// The init container that fails when the pod was not programmed; empty: any.
    #[arg(
        long,
        env = "REPAIR_INIT_CONTAINER_NAME",
        value_name = "NAME",
        default_value = "istio-validation"
    )]
    pub repair_init_container_name: String,
    /// Its expected termination message; empty: any.
    #[arg(
        long = "repair-init-container-termination-message",
        env = "REPAIR_INIT_CONTAINER_TERMINATION_MESSAGE",
        value_name = "TEXT",
        default_value = ""
    )]
    pub repair_init_termination_message: String,
    /// Its expected exit code (istio-iptables' validation error code); 0: any.
    #[arg(
        long,
        env = "REPAIR_INIT_CONTAINER_EXIT_CODE",
        value_name = "CODE",
        default_value_t = 126
    )]
    pub repair_init_container_exit_code: i32,
    /// A label selector added to the watch.
    #[arg(
        long,
        env = "REPAIR_LABEL_SELECTORS",
        value_name = "SELECTOR",
        default_value = ""
    )]
    pub repair_label_selectors: String,
    /// A field selector added to the watch (with spec.nodeName).
    #[arg(
        long,
        env = "REPAIR_FIELD_SELECTORS",
        value_name = "SELECTOR",
        default_value = ""
    )]
    pub repair_field_selectors: String,
}

/// What is done to a broken pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Deleted with its uid and resourceVersion as preconditions.
    Delete,
    /// Labelled with the configured key and value.
    Label,
    /// Nothing (both off): the pod is only logged.
    Report,
}

impl RepairArgs {
    /// Istio's `ReconcilePod` order: delete, then label.
    pub fn action(&self) -> Action {
        if self.repair_delete_pods {
            Action::Delete
        } else if self.repair_label_pods {
            Action::Label
        } else {
            Action::Report
        }
    }

    /// The watch's field selector: the configured one and `spec.nodeName=<node>`.
    pub fn field_selector(&self, node: &str) -> String {
        let node = self.repair_node_name.as_deref().unwrap_or(node);
        let mine = format!("spec.nodeName={node}");
        if self.repair_field_selectors.is_empty() {
            mine
        } else {
            format!("{},{mine}", self.repair_field_selectors)
        }
    }

    fn terminated_as_broken(&self, state: &ContainerStateTerminated) -> bool {
        let want = self.repair_init_termination_message.trim();
        let message_ok =
            want.is_empty() || want == state.message.as_deref().unwrap_or_default().trim();
        let code = self.repair_init_container_exit_code;
        message_ok && (code == 0 || code == state.exit_code)
    }

    /// Istio's `matchesFilter`, and a pod already terminating is left alone (deleting or labelling it
    /// again changes nothing). The init container's current termination counts as well as its last one:
    /// a pod is broken from its first failure, before the kubelet restarts the container.
    pub fn is_broken(&self, pod: &Pod) -> bool {
        if pod.metadata.deletion_timestamp.is_some() {
            return false;
        }
        let key = &self.repair_sidecar_annotation;
        if !key.is_empty()
            && !pod
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(key))
        {
            return false;
        }
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_deref())
            .unwrap_or_default();
        statuses.iter().any(|c| {
            if !self.repair_init_container_name.is_empty()
                && c.name != self.repair_init_container_name
            {
                return false;
            }
            let current = c.state.as_ref().and_then(|s| s.terminated.as_ref());
            if current.is_some_and(|t| t.exit_code == 0 || t.reason.as_deref() == Some("Completed"))
            {
                return false;
            }
            let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
            current.is_some_and(|t| self.terminated_as_broken(t))
                || last.is_some_and(|t| self.terminated_as_broken(t))
        })
    }
}

/// Why one repair failed.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// Deleting or labelling the pod failed.
    #[error("pod {pod}: {source}")]
    Api {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

/// Deletes or labels one broken pod and counts it as Istio does (`type` delete or label, `result`
/// success, skip or fail).
pub async fn repair(
    client: &kube::Client,
    args: &RepairArgs,
    pod: &Pod,
    record: &Record,
) -> Result<(), RepairError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let id = format!("{namespace}/{name}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let failed = |kind: &'static str, source| {
        record(kind, "fail");
        RepairError::Api {
            pod: id.clone(),
            source,
        }
    };
    match args.action() {
        Action::Delete => {
            tracing::info!(pod = %id, "pod detected as broken, deleting");
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: pod.metadata.resource_version.clone(),
                }),
                ..DeleteParams::default()
            };
            pods.delete(&name, &params)
                .await
                .map_err(|e| failed("delete", e))?;
            record("delete", "success");
        }
        Action::Label => {
            let labelled = pod
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(&args.label_key));
            if labelled {
                record("label", "skip");
                return Ok(());
            }
            tracing::info!(pod = %id, "pod detected as broken, labelling {}={}", args.label_key, args.label_value);
            let patch =
                serde_json::json!({"metadata": {"labels": {&args.label_key: &args.label_value}}});
            // Through the status subresource, as Istio's labelBrokenPod: the apiserver keeps labels
            // written there, and a client allowed `patch` on pods/status cannot change the pod's spec.
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| failed("label", e))?;
            record("label", "success");
        }
        Action::Report => {
            tracing::warn!(pod = %id, "pod detected as broken; repair deletes and labels nothing")
        }
    }
    Ok(())
}

/// Watches this node's pods and repairs each broken one, until the task is dropped. The watch
/// reconnects on its own (kube-rs' default backoff); a failed repair is logged and tried again on the
/// pod's next event.
pub async fn run(client: kube::Client, args: RepairArgs, node: String, record: Record) {
    let mut config = watcher::Config::default().fields(&args.field_selector(&node));
    if !args.repair_label_selectors.is_empty() {
        config = config.labels(&args.repair_label_selectors);
    }
    let pods: Api<Pod> = Api::all(client.clone());
    tracing::info!(selector = %args.field_selector(&node), action = ?args.action(), "starting race repair");
    let mut events = watcher::watcher(pods, config).boxed();
    while let Some(event) = events.next().await {
        let pod = match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!("race repair's pod watch: {e}");
                continue;
            }
        };
        if !args.is_broken(&pod) {
            continue;
        }
        if let Err(e) = repair(&client, &args, &pod, &record).await {
            tracing::warn!("race repair: {e}");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        repair: RepairArgs,
    }

    fn args(extra: &[&str]) -> RepairArgs {
        Cli::try_parse_from(std::iter::once("t").chain(extra.iter().copied()))
            .unwrap()
            .repair
    }

    fn pod(annotated: bool, state: serde_json::Value) -> Pod {
        let annotations = if annotated {
            serde_json::json!({"sidecar.istio.io/status": "{}"})
        } else {
            serde_json::json!({})
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n", "annotations": annotations},
            "status": {"initContainerStatuses": [state]},
        }))
        .unwrap()
    }

    fn status(name: &str, state: serde_json::Value, last: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"name": name, "ready": false, "restartCount": 1, "image": "i", "imageID": "",
                           "state": state, "lastState": last})
    }

    #[test]
    fn istio_s_filter() {
        let a = args(&[]);
        let t = |code: i32| serde_json::json!({"terminated": {"exitCode": code}});
        let waiting = serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}});
        assert!(a.is_broken(&pod(
            true,
            status("istio-validation", waiting.clone(), t(126))
        )));
        assert!(a.is_broken(&pod(
            true,
            status("istio-validation", t(126), serde_json::json!({}))
        )));
        assert!(!a.is_broken(&pod(false, status("istio-validation", t(126), t(126)))));
        assert!(!a.is_broken(&pod(true, status("istio-init", t(126), t(126)))));
        assert!(!a.is_broken(&pod(true, status("istio-validation", t(0), t(126)))));
        assert!(!a.is_broken(&pod(true, status("istio-validation", t(1), t(1)))));
        assert!(args(&["--repair-init-container-exit-code=0"])
            .is_broken(&pod(true, status("istio-validation", waiting, t(1)))));
        let mut terminating = pod(true, status("istio-validation", t(126), t(126)));
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!a.is_broken(&terminating));
    }

    #[test]
    fn the_action_and_the_selector() {
        assert_eq!(args(&[]).action(), Action::Delete);
        assert_eq!(
            args(&["--repair-delete-pods=false", "--repair-label-pods"]).action(),
            Action::Label
        );
        assert_eq!(args(&[]).field_selector("n1"), "spec.nodeName=n1");
        assert_eq!(
            args(&[
                "--repair-field-selectors=status.phase=Pending",
                "--repair-node-name=n2"
            ])
            .field_selector("n1"),
            "status.phase=Pending,spec.nodeName=n2"
        );
    }
}
