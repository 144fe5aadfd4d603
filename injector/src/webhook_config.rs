//! The MutatingWebhookConfiguration that registers `injector serve` with the API server (spec §1.3),
//! built with k8s-openapi types so every field is one the API server knows.
//!
//! One webhook entry, scoped like Istio's: without a revision, namespaces labelled
//! `istio-injection=enabled` (Istio's `namespace.` entry); with revision `R`, namespaces labelled
//! `istio.io/rev=R` and without `istio-injection` (Istio's `rev.namespace.` entry, so `istio-injection`
//! wins over a revision label as in Istio). Pods labelled `sidecar.istio.io/inject=false` are never sent.
//! `kube-system` and the injector's own namespace are excluded, so the injector can always start its own
//! pods even when it is down (failurePolicy is Fail).

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use k8s_openapi::ByteString;
use std::collections::BTreeMap;

/// When the API server calls the webhook again after other webhooks changed the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReinvocationPolicy {
    Never,
    IfNeeded,
}

impl ReinvocationPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ReinvocationPolicy::Never => "Never",
            ReinvocationPolicy::IfNeeded => "IfNeeded",
        }
    }
}

/// What the generated configuration points at.
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    /// Name of the MutatingWebhookConfiguration object (the revision is appended when set).
    pub name: String,
    /// Service in front of the injector.
    pub service: String,
    /// Namespace of the service (and of the injector; excluded from injection).
    pub namespace: String,
    /// URL path (`/inject`, or `/inject/cluster/<id>/net/<network>`).
    pub path: String,
    /// Service port.
    pub port: i32,
    /// The revision served (`--revision` of the injector), if any.
    pub revision: Option<String>,
    pub reinvocation_policy: ReinvocationPolicy,
    /// Seconds the API server waits for an answer (1–30).
    pub timeout_seconds: i32,
    /// PEM of the CA that signed the serving certificate.
    pub ca_bundle: Vec<u8>,
}

/// Namespaces never sent to the webhook besides the injector's own.
pub const EXCLUDED_NAMESPACES: &[&str] = &["kube-system"];

fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: if values.is_empty() {
            None
        } else {
            Some(values.iter().map(|v| v.to_string()).collect())
        },
    }
}

/// The namespace selector for `revision` (see the module documentation).
pub fn namespace_selector(revision: Option<&str>, own_namespace: &str) -> LabelSelector {
    let mut excluded: Vec<&str> = EXCLUDED_NAMESPACES.to_vec();
    if !excluded.contains(&own_namespace) {
        excluded.push(own_namespace);
    }
    let mut exprs = match revision {
        None => vec![requirement("istio-injection", "In", &["enabled"])],
        Some(rev) => vec![
            requirement("istio.io/rev", "In", &[rev]),
            requirement("istio-injection", "DoesNotExist", &[]),
        ],
    };
    exprs.push(requirement(
        "kubernetes.io/metadata.name",
        "NotIn",
        &excluded,
    ));
    LabelSelector {
        match_expressions: Some(exprs),
        match_labels: None,
    }
}

/// The object (pod label) selector: `sidecar.istio.io/inject` NotIn `[false]` (absent matches).
pub fn object_selector() -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![requirement(
            "sidecar.istio.io/inject",
            "NotIn",
            &["false"],
        )]),
        match_labels: None,
    }
}

/// Builds the MutatingWebhookConfiguration.
pub fn mutating_webhook_configuration(o: &WebhookOptions) -> MutatingWebhookConfiguration {
    let revision = o
        .revision
        .as_deref()
        .filter(|r| !r.is_empty() && *r != "default");
    let name = match revision {
        Some(rev) => format!("{}-{rev}", o.name),
        None => o.name.clone(),
    };
    let webhook_name = match revision {
        Some(_) => "rev.namespace.sidecar-injector.istio.io",
        None => "namespace.sidecar-injector.istio.io",
    };
    let mut labels = BTreeMap::new();
    labels.insert(
        "app.kubernetes.io/name".to_string(),
        "sidecar-injector".to_string(),
    );
    labels.insert(
        "istio.io/rev".to_string(),
        revision.unwrap_or("default").to_string(),
    );
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: webhook_name.to_string(),
            admission_review_versions: vec!["v1".to_string(), "v1beta1".to_string()],
            client_config: WebhookClientConfig {
                ca_bundle: Some(ByteString(o.ca_bundle.clone())),
                service: Some(ServiceReference {
                    name: o.service.clone(),
                    namespace: o.namespace.clone(),
                    path: Some(o.path.clone()),
                    port: Some(o.port),
                }),
                url: None,
            },
            failure_policy: Some("Fail".to_string()),
            match_policy: Some("Equivalent".to_string()),
            namespace_selector: Some(namespace_selector(revision, &o.namespace)),
            object_selector: Some(object_selector()),
            reinvocation_policy: Some(o.reinvocation_policy.as_str().to_string()),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".to_string()]),
                operations: Some(vec!["CREATE".to_string()]),
                resources: Some(vec!["pods".to_string()]),
                scope: None,
            }]),
            side_effects: "None".to_string(),
            timeout_seconds: Some(o.timeout_seconds),
            match_conditions: None,
        }]),
    }
}
