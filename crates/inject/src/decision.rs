//! The injection decision, exactly as Istio's `injectRequired` (`inject.go`), with the reason returned so
//! that "why was/wasn't this pod injected" has an answer in logs, metrics and kube-inject warnings.

use serde_json::{Map, Value};

use crate::pod::{self, INJECT_KEY};
use sidecar_core::fields::{self, Fields};

/// Namespaces never injected, whatever the pod says (Istio's `IgnoredNamespaces`).
pub const IGNORED_NAMESPACES: [&str; 4] = [
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "local-path-storage",
];

/// The injector config's `policy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// Inject unless the pod opts out.
    Enabled,
    /// Inject only when the pod opts in.
    Disabled,
    /// Any other spelling (including empty): Istio never injects.
    Other(String),
}

impl Policy {
    /// Parses Istio's spelling (exact, case-sensitive).
    pub fn parse(s: &str) -> Policy {
        match s {
            "enabled" => Policy::Enabled,
            "disabled" => Policy::Disabled,
            other => Policy::Other(other.to_string()),
        }
    }
}

/// A `matchExpressions` operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

/// A Kubernetes `metav1.LabelSelector` converted to requirements (`matchLabels` become `In [v]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

/// A label selector that does not convert (Kubernetes' `LabelSelectorAsSelector` rules).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector: {0}")]
pub struct SelectorError(pub String);

impl LabelSelector {
    /// Converts a `metav1.LabelSelector` JSON object.
    pub fn from_json(v: &Value) -> Result<LabelSelector, SelectorError> {
        let obj = match v {
            Value::Object(o) => o,
            Value::Null => return Ok(LabelSelector::default()),
            other => return Err(SelectorError(format!("expected an object, got {other}"))),
        };
        let mut requirements = Vec::new();
        match obj.field("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(ml)) => {
                for (k, val) in ml {
                    let val = val.as_str().ok_or_else(|| {
                        SelectorError(format!("matchLabels.{k}: value {val} is not a string"))
                    })?;
                    check_label_key(k)?;
                    check_label_value(val)?;
                    requirements.push(Requirement {
                        key: k.clone(),
                        operator: Operator::In,
                        values: vec![val.to_string()],
                    });
                }
            }
            Some(other) => {
                return Err(SelectorError(format!(
                    "matchLabels: expected an object, got {other}"
                )))
            }
        }
        match obj.field("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for e in exprs {
                    requirements.push(requirement_from_json(e)?);
                }
            }
            Some(other) => {
                return Err(SelectorError(format!(
                    "matchExpressions: expected a list, got {other}"
                )))
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether the selector has no requirements (Istio: such a selector never matches).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Kubernetes selector semantics: every requirement holds. (An empty selector matches everything
    /// here; callers that follow Istio check [`LabelSelector::is_empty`] first.)
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.first_unmet(labels).is_none()
    }

    /// The first requirement (in selector order: `matchLabels`, then `matchExpressions`) that `labels`
    /// do not meet, `None` when the selector matches; says why a webhook entry did not select an object.
    pub fn first_unmet(&self, labels: Option<&Map<String, Value>>) -> Option<&Requirement> {
        self.requirements.iter().find(|r| !r.holds(labels))
    }
}

impl Requirement {
    /// Whether `labels` meet this requirement.
    pub fn holds(&self, labels: Option<&Map<String, Value>>) -> bool {
        let v = labels
            .and_then(|l| l.field(&self.key))
            .and_then(Value::as_str);
        match self.operator {
            Operator::In => v.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Operator::NotIn => v.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Operator::Exists => labels.is_some_and(|l| l.has_field(&self.key)),
            Operator::DoesNotExist => !labels.is_some_and(|l| l.has_field(&self.key)),
        }
    }
}

impl std::fmt::Display for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
        })
    }
}

/// `key In [a, b]`, `key DoesNotExist`: the requirement as Kubernetes writes it.
impl std::fmt::Display for Requirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.key, self.operator)?;
        if !self.values.is_empty() {
            write!(f, " [{}]", self.values.join(", "))?;
        }
        Ok(())
    }
}

fn requirement_from_json(e: &Value) -> Result<Requirement, SelectorError> {
    let key = e
        .field("key")
        .and_then(Value::as_str)
        .ok_or_else(|| SelectorError(format!("matchExpressions: {e}: missing key")))?;
    check_label_key(key)?;
    let op = e.field("operator").and_then(Value::as_str).unwrap_or("");
    let operator = match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => {
            return Err(SelectorError(format!(
                "key {key}: {other:?} is not a valid label selector operator"
            )))
        }
    };
    let values: Vec<String> = match e.field("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| SelectorError(format!("key {key}: value {x} is not a string")))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(SelectorError(format!(
                "key {key}: values: expected a list, got {other}"
            )))
        }
    };
    match operator {
        Operator::In | Operator::NotIn if values.is_empty() => Err(SelectorError(format!(
            "key {key}: for 'in', 'notin' operators, values set can't be empty"
        ))),
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => Err(SelectorError(
            format!("key {key}: values set must be empty for exists and does not exist"),
        )),
        _ => {
            for v in &values {
                check_label_value(v)?;
            }
            Ok(Requirement {
                key: key.to_string(),
                operator,
                values,
            })
        }
    }
}

fn is_label_name(s: &str) -> bool {
    // [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, at most 63 characters.
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|p| {
            let b = p.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

fn check_label_key(k: &str) -> Result<(), SelectorError> {
    let ok = match k.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(k),
    };
    if ok {
        Ok(())
    } else {
        Err(SelectorError(format!("invalid label key {k:?}")))
    }
}

fn check_label_value(v: &str) -> Result<(), SelectorError> {
    if v.is_empty() || is_label_name(v) {
        Ok(())
    } else {
        Err(SelectorError(format!("invalid label value {v:?}")))
    }
}

/// The step of [`injection_required`] that decided, in Istio's order (serialised kebab-case, as
/// `injector explain -o json` prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// `spec.hostNetwork: true`.
    HostNetwork,
    /// One of [`IGNORED_NAMESPACES`].
    IgnoredNamespace,
    /// The `sidecar.istio.io/inject` label, `true` or `false`.
    Label,
    /// The `sidecar.istio.io/inject` annotation, `true` or `false` (no label of that key).
    Annotation,
    /// A `neverInjectSelector` matched the pod's labels.
    NeverSelector,
    /// An `alwaysInjectSelector` matched the pod's labels.
    AlwaysSelector,
    /// Nothing explicit: the policy `enabled` or `disabled` decided.
    Policy,
    /// A policy other than `enabled`/`disabled`: never injected.
    InvalidPolicy,
}

impl Step {
    /// The serialised name (`host-network`, …, `invalid-policy`).
    pub fn as_str(self) -> &'static str {
        match self {
            Step::HostNetwork => "host-network",
            Step::IgnoredNamespace => "ignored-namespace",
            Step::Label => "label",
            Step::Annotation => "annotation",
            Step::NeverSelector => "never-selector",
            Step::AlwaysSelector => "always-selector",
            Step::Policy => "policy",
            Step::InvalidPolicy => "invalid-policy",
        }
    }
}

/// The outcome of [`injection_required`]: whether to inject, which step decided and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Decision {
    pub step: Step,
    pub inject: bool,
    pub reason: String,
}

impl Decision {
    fn new(step: Step, inject: bool, reason: impl Into<String>) -> Decision {
        Decision {
            step,
            inject,
            reason: reason.into(),
        }
    }
}

/// Istio's `injectRequired` in `inject.go`, in its order: hostNetwork, ignored namespaces, the
/// `sidecar.istio.io/inject` label (if present) over the annotation, never- then always-selectors, policy.
/// `pod` is the Pod JSON (its `metadata.namespace` already defaulted by the caller).
pub fn injection_required(
    pod: &Value,
    policy: &Policy,
    never: &[LabelSelector],
    always: &[LabelSelector],
) -> Decision {
    if fields::path(pod, ["spec", "hostNetwork"]).and_then(Value::as_bool) == Some(true) {
        return Decision::new(
            Step::HostNetwork,
            false,
            "the pod uses the host network (spec.hostNetwork)",
        );
    }
    let namespace = fields::path(pod, ["metadata", "namespace"])
        .and_then(Value::as_str)
        .unwrap_or("");
    if IGNORED_NAMESPACES.contains(&namespace) {
        return Decision::new(
            Step::IgnoredNamespace,
            false,
            format!("namespace {namespace:?} is never injected"),
        );
    }
    let labels = pod::labels(pod);
    let annotations = pod::annotations(pod);

    // The label wins whenever its key is present, even with an empty value.
    let (source, step, value) = match labels.and_then(|l| l.field(INJECT_KEY)) {
        Some(v) => ("label", Step::Label, v.as_str().unwrap_or("")),
        None => (
            "annotation",
            Step::Annotation,
            annotations
                .and_then(|a| a.field(INJECT_KEY))
                .and_then(Value::as_str)
                .unwrap_or(""),
        ),
    };
    let mut explicit: Option<(Step, bool, String)> = match value {
        "true" => Some((step, true, format!("{source} {INJECT_KEY}=true"))),
        "false" => Some((step, false, format!("{source} {INJECT_KEY}=false"))),
        // Anything else (including "yes", "TRUE", "1") means "use the default", as in Istio.
        _ => None,
    };
    let ignored_spelling = if value.is_empty() || explicit.is_some() {
        String::new()
    } else {
        format!(" ({source} {INJECT_KEY}={value:?} is not \"true\"/\"false\"; ignored)")
    };

    if explicit.is_none() {
        for (i, sel) in never.iter().enumerate() {
            if !sel.is_empty() && sel.matches(labels) {
                explicit = Some((
                    Step::NeverSelector,
                    false,
                    format!("the pod's labels match neverInjectSelector[{i}]"),
                ));
                break;
            }
        }
    }
    if explicit.is_none() {
        for (i, sel) in always.iter().enumerate() {
            if !sel.is_empty() && sel.matches(labels) {
                explicit = Some((
                    Step::AlwaysSelector,
                    true,
                    format!("the pod's labels match alwaysInjectSelector[{i}]"),
                ));
                break;
            }
        }
    }

    match policy {
        Policy::Enabled => match explicit {
            Some((step, inject, why)) => Decision::new(step, inject, why),
            None => Decision::new(
                Step::Policy,
                true,
                format!("policy enabled{ignored_spelling}"),
            ),
        },
        Policy::Disabled => match explicit {
            Some((step, inject, why)) => Decision::new(step, inject, why),
            None => Decision::new(
                Step::Policy,
                false,
                format!("policy disabled{ignored_spelling}"),
            ),
        },
        Policy::Other(p) => Decision::new(
            Step::InvalidPolicy,
            false,
            format!("invalid injection policy {p:?} (want \"enabled\" or \"disabled\"): never injecting"),
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sel(v: Value) -> LabelSelector {
        LabelSelector::from_json(&v).expect("valid selector")
    }

    fn pod(labels: Value, annotations: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "default", "labels": labels, "annotations": annotations},
               "spec": {"containers": [{"name": "c"}]}})
    }

    /// Istio's `TestInjectRequired` table (`inject_test.go`).
    #[test]
    fn inject_required_table() {
        let foo_bar = || vec![sel(json!({"matchLabels": {"foo": "bar"}}))];
        let foo_exists = || {
            vec![sel(
                json!({"matchExpressions": [{"key": "foo", "operator": "Exists"}]}),
            )]
        };
        let e = Policy::Enabled;
        let d = Policy::Disabled;
        type Row = (
            Policy,
            Value,
            Value,
            Vec<LabelSelector>,
            Vec<LabelSelector>,
            bool,
        );
        let rows: Vec<Row> = vec![
            (e.clone(), json!({}), json!({}), vec![], vec![], true),
            (
                e.clone(),
                json!({}),
                json!({INJECT_KEY: "true"}),
                vec![],
                vec![],
                true,
            ),
            (
                e.clone(),
                json!({}),
                json!({INJECT_KEY: "false"}),
                vec![],
                vec![],
                false,
            ),
            (d.clone(), json!({}), json!({}), vec![], vec![], false),
            (
                d.clone(),
                json!({}),
                json!({INJECT_KEY: "true"}),
                vec![],
                vec![],
                true,
            ),
            (
                d.clone(),
                json!({}),
                json!({INJECT_KEY: "false"}),
                vec![],
                vec![],
                false,
            ),
            (
                e.clone(),
                json!({}),
                json!({INJECT_KEY: "yes"}),
                vec![],
                vec![],
                true,
            ),
            (
                d.clone(),
                json!({}),
                json!({INJECT_KEY: "on"}),
                vec![],
                vec![],
                false,
            ),
            (
                e.clone(),
                json!({INJECT_KEY: "random"}),
                json!({}),
                vec![],
                vec![],
                true,
            ),
            (
                Policy::parse("wrong_policy"),
                json!({}),
                json!({}),
                vec![],
                vec![],
                false,
            ),
            (
                Policy::parse("wrong_policy"),
                json!({}),
                json!({INJECT_KEY: "true"}),
                vec![],
                vec![],
                false,
            ),
            (e.clone(), json!({}), json!({}), vec![], foo_bar(), true),
            (
                e.clone(),
                json!({"foo": "bar1"}),
                json!({}),
                vec![],
                foo_bar(),
                true,
            ),
            (
                d.clone(),
                json!({"foo": "bar"}),
                json!({}),
                vec![],
                foo_bar(),
                true,
            ),
            (d.clone(), json!({}), json!({}), vec![], foo_bar(), false),
            (
                e.clone(),
                json!({"foo": "bar"}),
                json!({}),
                foo_bar(),
                vec![],
                false,
            ),
            (
                e.clone(),
                json!({"foo": ""}),
                json!({}),
                foo_exists(),
                vec![],
                false,
            ),
            (
                d.clone(),
                json!({"foo": ""}),
                json!({}),
                vec![],
                foo_exists(),
                true,
            ),
            (
                e.clone(),
                json!({"foo": ""}),
                json!({INJECT_KEY: "true"}),
                foo_exists(),
                vec![],
                true,
            ),
            (
                e.clone(),
                json!({"foo": ""}),
                json!({INJECT_KEY: "false"}),
                vec![],
                foo_exists(),
                false,
            ),
            (
                d.clone(),
                json!({INJECT_KEY: "true"}),
                json!({}),
                vec![],
                vec![],
                true,
            ),
            (
                d.clone(),
                json!({INJECT_KEY: "true"}),
                json!({INJECT_KEY: "false"}),
                vec![],
                vec![],
                true,
            ),
            (
                d.clone(),
                json!({INJECT_KEY: "false"}),
                json!({INJECT_KEY: "true"}),
                vec![],
                vec![],
                false,
            ),
            // The label wins even when empty: empty means "use default", the annotation is not read.
            (
                d.clone(),
                json!({INJECT_KEY: ""}),
                json!({INJECT_KEY: "true"}),
                vec![],
                vec![],
                false,
            ),
        ];
        // The step that decides each row (what `injector explain` marks).
        use Step as S;
        let steps = [
            S::Policy,
            S::Annotation,
            S::Annotation,
            S::Policy,
            S::Annotation,
            S::Annotation,
            S::Policy,
            S::Policy,
            S::Policy,
            S::InvalidPolicy,
            S::InvalidPolicy,
            S::Policy,
            S::Policy,
            S::AlwaysSelector,
            S::Policy,
            S::NeverSelector,
            S::NeverSelector,
            S::AlwaysSelector,
            S::Annotation,
            S::Annotation,
            S::Label,
            S::Label,
            S::Label,
            S::Policy,
        ];
        assert_eq!(steps.len(), rows.len());
        for (i, ((policy, labels, ann, never, always, want), step)) in
            rows.into_iter().zip(steps).enumerate()
        {
            let got = injection_required(&pod(labels, ann), &policy, &never, &always);
            assert_eq!(got.inject, want, "row {i}: {got:?}");
            assert!(!got.reason.is_empty());
            assert_eq!(got.step, step, "row {i}: {got:?}");
        }
    }

    #[test]
    fn steps_serialise_kebab_case_and_host_network_comes_first() {
        for (step, name) in [
            (Step::HostNetwork, "host-network"),
            (Step::IgnoredNamespace, "ignored-namespace"),
            (Step::Label, "label"),
            (Step::Annotation, "annotation"),
            (Step::NeverSelector, "never-selector"),
            (Step::AlwaysSelector, "always-selector"),
            (Step::Policy, "policy"),
            (Step::InvalidPolicy, "invalid-policy"),
        ] {
            assert_eq!(serde_json::to_value(step).unwrap(), json!(name));
            assert_eq!(step.as_str(), name);
        }
        let mut p = pod(json!({INJECT_KEY: "true"}), json!({}));
        p["spec"]["hostNetwork"] = json!(true);
        p["metadata"]["namespace"] = json!("kube-system");
        let d = injection_required(&p, &Policy::Enabled, &[], &[]);
        assert_eq!((d.step, d.inject), (Step::HostNetwork, false));
        p["spec"]["hostNetwork"] = json!(false);
        let d = injection_required(&p, &Policy::Enabled, &[], &[]);
        assert_eq!((d.step, d.inject), (Step::IgnoredNamespace, false));
    }

    #[test]
    fn first_unmet_is_the_first_failing_requirement_in_order() {
        let s = sel(
            json!({"matchLabels": {"istio-injection": "enabled"}, "matchExpressions": [
                {"key": "istio.io/rev", "operator": "DoesNotExist"},
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "mesh"]}
            ]}),
        );
        let unmet = |v: Value| s.first_unmet(v.as_object()).map(ToString::to_string);
        assert_eq!(
            unmet(json!({})).as_deref(),
            Some("istio-injection In [enabled]")
        );
        assert_eq!(
            s.first_unmet(None).map(|r| r.key.as_str()),
            Some("istio-injection")
        );
        assert_eq!(
            unmet(json!({"istio-injection": "enabled", "istio.io/rev": "canary"})).as_deref(),
            Some("istio.io/rev DoesNotExist")
        );
        assert_eq!(
            unmet(json!({"istio-injection": "enabled", "kubernetes.io/metadata.name": "mesh"}))
                .as_deref(),
            Some("kubernetes.io/metadata.name NotIn [kube-system, mesh]")
        );
        assert_eq!(
            unmet(json!({"istio-injection": "enabled", "kubernetes.io/metadata.name": "apps"})),
            None
        );
        assert!(s.matches(json!({"istio-injection": "enabled"}).as_object()));
        let exists = sel(json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]}));
        assert_eq!(
            exists
                .first_unmet(json!({"b": ""}).as_object())
                .map(ToString::to_string)
                .as_deref(),
            Some("a Exists")
        );
    }

    #[test]
    fn never_before_always_and_or_semantics() {
        let always = vec![sel(json!({"matchLabels": {"always": "bar"}}))];
        let never = vec![
            sel(json!({"matchExpressions": [{"key": "foo", "operator": "Exists"}]})),
            sel(json!({"matchExpressions": [{"key": "never", "operator": "Exists"}]})),
        ];
        let d = Policy::Disabled;
        let cases = [
            (json!({"always": "bar"}), true),
            (json!({"never": "bar"}), false),
            (json!({"always": "bar", "never": "bar"}), false),
            (json!({"foo": "x"}), false),
        ];
        for (labels, want) in cases {
            let got = injection_required(&pod(labels.clone(), json!({})), &d, &never, &always);
            assert_eq!(got.inject, want, "{labels}: {got:?}");
        }
    }

    #[test]
    fn host_network_and_ignored_namespaces_cannot_be_overridden() {
        let mut p = pod(json!({INJECT_KEY: "true"}), json!({}));
        p["spec"]["hostNetwork"] = json!(true);
        assert!(!injection_required(&p, &Policy::Enabled, &[], &[]).inject);
        for ns in IGNORED_NAMESPACES {
            let mut p = pod(json!({INJECT_KEY: "true"}), json!({}));
            p["metadata"]["namespace"] = json!(ns);
            let d = injection_required(&p, &Policy::Enabled, &[], &[]);
            assert!(!d.inject && d.reason.contains(ns), "{d:?}");
        }
        let mut p = pod(json!({}), json!({}));
        p["metadata"]["namespace"] = json!("istio-system");
        assert!(injection_required(&p, &Policy::Enabled, &[], &[]).inject);
    }

    #[test]
    fn selector_operators() {
        let s = sel(json!({"matchExpressions": [
            {"key": "a", "operator": "In", "values": ["1", "2"]},
            {"key": "b", "operator": "NotIn", "values": ["x"]},
            {"key": "c", "operator": "DoesNotExist"}
        ]}));
        let m = |v: Value| s.matches(v.as_object());
        assert!(m(json!({"a": "1"})));
        assert!(m(json!({"a": "2", "b": "y"})));
        assert!(!m(json!({"a": "3"})));
        assert!(!m(json!({"a": "1", "b": "x"})));
        assert!(!m(json!({"a": "1", "c": ""})));
        assert!(!s.matches(None));
        // An empty selector never matches in injectRequired.
        let empty = sel(json!({}));
        assert!(empty.is_empty());
        assert!(
            !injection_required(&pod(json!({}), json!({})), &Policy::Disabled, &[], &[empty])
                .inject
        );
    }

    #[test]
    fn invalid_selectors_are_rejected() {
        for bad in [
            json!({"matchExpressions": [{"key": "a", "operator": "Foo"}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            json!({"matchLabels": {"a b": "x"}}),
            json!({"matchLabels": {"a": 1}}),
            json!([1]),
        ] {
            assert!(LabelSelector::from_json(&bad).is_err(), "{bad}");
        }
    }

    /// The classic 8-row table of istio.io's "Automatic Sidecar Injection" page (v1.3–v1.8). The
    /// namespace-selector column is the webhook configuration's job: when no webhook entry selects the pod
    /// the API server never calls us (rows 5-8); here the pod/policy part is checked for rows 1-4, and rows
    /// 5-8 are "not called → not injected".
    #[test]
    fn classic_eight_rows() {
        let rows = [
            (true, Policy::Enabled, None, true),
            (true, Policy::Enabled, Some("false"), false),
            (true, Policy::Disabled, Some("true"), true),
            (true, Policy::Disabled, None, false),
            (false, Policy::Enabled, None, false),
            (false, Policy::Enabled, Some("false"), false),
            (false, Policy::Disabled, Some("true"), false),
            (false, Policy::Disabled, None, false),
        ];
        for (i, (ns_match, policy, ann, want)) in rows.into_iter().enumerate() {
            let anns = match ann {
                Some(v) => json!({INJECT_KEY: v}),
                None => json!({}),
            };
            let injected =
                ns_match && injection_required(&pod(json!({}), anns), &policy, &[], &[]).inject;
            assert_eq!(injected, want, "row {}", i + 1);
        }
    }
}
