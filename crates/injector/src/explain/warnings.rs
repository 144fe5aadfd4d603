//! The warnings a platform engineer needs about one workload, each from what the manifest, the routing
//! and the injected pod show (nothing here decides injection).

use serde_json::{Map, Value};

use inject::pod::{self, INJECT_KEY};
use sidecar_core::fields;

use crate::shared::webhook_entry::Entry;

/// Prefixes of the annotations that steer injection or interception.
const STEERING_PREFIXES: [&str; 4] = [
    "sidecar.istio.io/",
    "traffic.sidecar.istio.io/",
    "proxy.istio.io/",
    "inject.istio.io/",
];
/// Labels that steer injection.
const STEERING_LABELS: [&str; 2] = [INJECT_KEY, "istio.io/rev"];

/// The object `leaf` under the dotted path `at` (`spec.jobTemplate.metadata`).
fn map_at<'a>(obj: &'a Value, at: &str, leaf: &str) -> Option<&'a Map<String, Value>> {
    fields::path(obj, at.split('.').chain([leaf])).and_then(Value::as_object)
}

/// Injection or traffic annotations, and injection labels, on the workload's own metadata (and a
/// CronJob's Job template) instead of the pod template: the webhook sees only the pod, so they do
/// nothing there.
pub fn own_metadata(obj: &Value, kind: &str, what: &str) -> Vec<String> {
    if kind == "Pod" {
        return Vec::new();
    }
    let pod_meta = match kind {
        "CronJob" => "spec.jobTemplate.spec.template.metadata",
        _ => "spec.template.metadata",
    };
    let mut places = vec!["metadata"];
    if kind == "CronJob" {
        places.push("spec.jobTemplate.metadata");
    }
    let mut out = Vec::new();
    for field in places {
        for (k, v) in map_at(obj, field, "annotations").into_iter().flatten() {
            if STEERING_PREFIXES.iter().any(|p| k.starts_with(p)) {
                out.push(format!(
                    "{what} has annotation {k}={v} on {field}, where it has no effect (the webhook sees only the pod): move it to {pod_meta}.annotations"
                ));
            }
        }
        for (k, v) in map_at(obj, field, "labels").into_iter().flatten() {
            if STEERING_LABELS.contains(&k.as_str()) {
                out.push(format!(
                    "{what} has label {k}={v} on {field}, where it has no effect (the webhook sees only the pod): move it to {pod_meta}.labels"
                ));
            }
        }
    }
    out
}

/// The annotation `sidecar.istio.io/inject: "true"` without the label, where the label would have
/// opted the pod in: `label_entry` is the entry the pod would reach with the label.
pub fn annotation_instead_of_label(namespace: &str, label_entry: &Entry) -> String {
    format!(
        "the pod has the annotation {INJECT_KEY}=\"true\" but not the label: the webhook's objectSelector \
         sees labels only, so from namespace {namespace:?} only the label {INJECT_KEY}: \"true\" opts in \
         (entry {})",
        label_entry.label()
    )
}

/// Whether `istio-proxy` is a native sidecar (an init container) in the injected pod.
fn native_proxy(injected: &Value) -> bool {
    pod::find_named(
        pod::containers(injected, "initContainers"),
        pod::PROXY_CONTAINER,
    )
    .is_some()
}

/// A Job or CronJob whose proxy is a regular container: it keeps running after the job's containers
/// exit, so the pod never completes.
pub fn job_without_native_sidecar(kind: &str, injected: &Value) -> Option<String> {
    let proxy = pod::find_named(
        pod::containers(injected, "containers"),
        pod::PROXY_CONTAINER,
    );
    (matches!(kind, "Job" | "CronJob") && proxy.is_some() && !native_proxy(injected)).then(|| {
        format!(
            "a {kind}'s pod with istio-proxy as a regular container never completes: the proxy keeps \
             running after the job's containers exit; use native sidecars (--native-sidecars true, or the \
             pod annotation {}: \"true\")",
            pod::NATIVE_SIDECAR_ANNOTATION
        )
    })
}

/// App init containers that run before `istio-proxy` (all of them when the proxy is a regular
/// container): with the redirection already installed (by the CNI plugin, which `istio-validation`
/// stands for, or an earlier `istio-init`) their connections go to a proxy that is not there yet;
/// before `istio-init` they leave without the proxy (no mTLS).
pub fn init_containers_before_proxy(injected: &Value) -> Vec<String> {
    let inits = pod::containers(injected, "initContainers");
    let native = native_proxy(injected);
    let position = |name: &str| inits.iter().position(|c| pod::name_of(c) == name);
    let cni = position(pod::VALIDATION_CONTAINER).is_some();
    let istio_init = position(pod::INIT_CONTAINER);
    if !cni && istio_init.is_none() {
        return Vec::new();
    }
    let proxy = position(pod::PROXY_CONTAINER).unwrap_or(inits.len());
    let istio = [
        pod::INIT_CONTAINER,
        pod::VALIDATION_CONTAINER,
        pod::PROXY_CONTAINER,
        pod::CORE_DUMP_CONTAINER,
    ];
    let before = if native {
        "before the native istio-proxy sidecar starts"
    } else {
        "before istio-proxy (a regular container, started after every init container)"
    };
    inits
        .iter()
        .enumerate()
        .filter(|(i, c)| *i < proxy && !istio.contains(&pod::name_of(c)))
        .map(|(i, c)| {
            let name = pod::name_of(c);
            if cni || istio_init.is_some_and(|r| i > r) {
                let by = if cni { "the CNI plugin" } else { "istio-init" };
                format!(
                    "init container {name:?} runs {before}, with its traffic already redirected by {by}: if it needs the network its connections fail; run it as uid 1337, exclude its destinations (traffic.sidecar.istio.io/excludeOutboundIPRanges or excludeOutboundPorts), or use native sidecars"
                )
            } else {
                format!(
                    "init container {name:?} runs {before} and before istio-init: if it needs the network its connections bypass the mesh (no mTLS: servers that require it refuse them); use native sidecars to run it after the proxy"
                )
            }
        })
        .collect()
}

/// A called entry with `failurePolicy: Fail`: without a ready injector endpoint the pod is refused.
pub fn fail_closed(entry: &Entry) -> Option<String> {
    (entry.failure_policy == "Fail").then(|| {
        format!(
            "entry {} has failurePolicy Fail: while the injector has no ready endpoint, creating this pod \
             is refused (check with `kubectl get endpoints` for the webhook's service, or `injector doctor`)",
            entry.label()
        )
    })
}

/// A called entry of another revision's configuration than the one explained (`revision` empty for
/// the default): that revision's injector decides and injects with its own configuration.
pub fn other_revision(entry: &Entry, revision: &str) -> Option<String> {
    let ours = if revision.is_empty() {
        "default"
    } else {
        revision
    };
    let theirs = entry.revision.as_deref()?;
    (theirs != ours).then(|| {
        format!(
            "entry {} belongs to revision {theirs:?} (its configuration's istio.io/rev label), but the \
             decision and injection shown use this injector configuration (--revision {ours:?}); pass \
             that revision's configuration to see its answer",
            entry.label()
        )
    })
}

/// A called entry with `matchConditions`: their CEL expressions are not evaluated offline.
pub fn match_conditions(entry: &Entry) -> Option<String> {
    (entry.match_conditions > 0).then(|| {
        format!(
            "entry {} has {} matchCondition(s), which cannot be evaluated offline: explained as if they \
             all hold (if one is false, the webhook is not called)",
            entry.label(),
            entry.match_conditions
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(value: Value) -> Entry {
        Entry::new("cfg", 0, "e.sidecar-injector.istio.io", value)
    }

    #[test]
    fn steering_metadata_on_the_deployment_is_named_with_where_it_belongs() {
        let d = json!({"kind": "Deployment", "metadata": {"name": "web",
            "annotations": {"sidecar.istio.io/inject": "true", "traffic.sidecar.istio.io/excludeOutboundPorts": "5432", "team": "a"},
            "labels": {"sidecar.istio.io/inject": "true", "app": "web"}},
            "spec": {"template": {"metadata": {}, "spec": {}}}});
        let w = own_metadata(&d, "Deployment", "Deployment \"web\"");
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].contains("annotation sidecar.istio.io/inject=\"true\" on metadata")
                && w[0].contains("spec.template.metadata.annotations"),
            "{}",
            w[0]
        );
        assert!(
            w[1].contains("traffic.sidecar.istio.io/excludeOutboundPorts"),
            "{}",
            w[1]
        );
        assert!(
            w[2].contains("label sidecar.istio.io/inject=\"true\" on metadata")
                && w[2].contains("spec.template.metadata.labels"),
            "{}",
            w[2]
        );
        let c = json!({"kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"jobTemplate": {"metadata": {"annotations": {"sidecar.istio.io/inject": "false"}}}}});
        let w = own_metadata(&c, "CronJob", "CronJob \"c\"");
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("spec.jobTemplate.metadata,")
                && w[0].contains("spec.jobTemplate.spec.template.metadata.annotations"),
            "{}",
            w[0]
        );
        // A Pod's metadata is the pod's.
        let p = json!({"kind": "Pod", "metadata": {"annotations": {"sidecar.istio.io/inject": "true"}}});
        assert!(own_metadata(&p, "Pod", "Pod \"p\"").is_empty());
    }

    #[test]
    fn jobs_without_native_sidecars_are_warned_about() {
        let regular = json!({"spec": {"containers": [{"name": "istio-proxy"}, {"name": "job"}]}});
        let native = json!({"spec": {"initContainers": [{"name": "istio-proxy"}], "containers": [{"name": "job"}]}});
        assert!(job_without_native_sidecar("Job", &regular)
            .unwrap()
            .contains("never completes"));
        assert!(job_without_native_sidecar("CronJob", &regular).is_some());
        assert!(job_without_native_sidecar("Job", &native).is_none());
        assert!(job_without_native_sidecar("Deployment", &regular).is_none());
    }

    #[test]
    fn app_init_containers_before_the_proxy_are_named_with_what_happens() {
        // Without native sidecars the app's init containers come before istio-init: not redirected.
        let regular = json!({"spec": {"initContainers": [{"name": "migrate"}, {"name": "istio-init"}],
                                       "containers": [{"name": "istio-proxy"}]}});
        let w = init_containers_before_proxy(&regular);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("\"migrate\"")
                && w[0].contains("regular container")
                && w[0].contains("bypass the mesh"),
            "{}",
            w[0]
        );
        let after_init = json!({"spec": {"initContainers": [{"name": "istio-init"}, {"name": "migrate"}],
                                          "containers": [{"name": "istio-proxy"}]}});
        let w = init_containers_before_proxy(&after_init);
        assert!(
            w[0].contains("redirected by istio-init") && w[0].contains("connections fail"),
            "{}",
            w[0]
        );
        // Native: after the proxy is fine, before it is not.
        let native_after = json!({"spec": {"initContainers": [{"name": "istio-init"}, {"name": "istio-proxy"}, {"name": "migrate"}]}});
        assert!(init_containers_before_proxy(&native_after).is_empty());
        let native_before = json!({"spec": {"initContainers": [{"name": "migrate"}, {"name": "istio-validation"}, {"name": "istio-proxy"}]}});
        let w = init_containers_before_proxy(&native_before);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("native istio-proxy") && w[0].contains("redirected by the CNI plugin"),
            "{}",
            w[0]
        );
        // Each warning is one sentence line: no run of spaces from a broken string continuation.
        for pod in [&regular, &after_init, &native_before] {
            for w in init_containers_before_proxy(pod) {
                assert!(!w.contains("  "), "{w:?}");
            }
        }
        // No redirection at all: nothing to say.
        let no_redirect = json!({"spec": {"initContainers": [{"name": "migrate"}], "containers": [{"name": "istio-proxy"}]}});
        assert!(init_containers_before_proxy(&no_redirect).is_empty());
    }

    #[test]
    fn fail_closed_and_match_conditions_are_named() {
        let fail = entry(json!({}));
        assert!(fail_closed(&fail)
            .unwrap()
            .contains("cfg/e.sidecar-injector.istio.io has failurePolicy Fail"));
        assert!(fail_closed(&entry(json!({"failurePolicy": "Ignore"}))).is_none());
        assert!(match_conditions(&fail).is_none());
        let mc = entry(json!({"matchConditions": [{"name": "a", "expression": "true"}]}));
        assert!(match_conditions(&mc)
            .unwrap()
            .contains("cannot be evaluated offline"));
    }

    #[test]
    fn another_revisions_entry_is_named() {
        let mut e = entry(json!({}));
        assert!(other_revision(&e, "").is_none(), "unlabelled configuration");
        e.revision = Some("default".into());
        assert!(other_revision(&e, "").is_none());
        e.revision = Some("canary".into());
        let w = other_revision(&e, "").unwrap();
        assert!(
            w.contains("belongs to revision \"canary\"") && w.contains("--revision \"default\""),
            "{w}"
        );
        assert!(other_revision(&e, "canary").is_none());
    }

    #[test]
    fn the_annotation_instead_of_the_label_names_the_entry() {
        let w = annotation_instead_of_label("apps", &entry(json!({})));
        assert!(
            w.contains("objectSelector sees labels only")
                && w.contains("cfg/e.sidecar-injector.istio.io"),
            "{w}"
        );
    }
}
