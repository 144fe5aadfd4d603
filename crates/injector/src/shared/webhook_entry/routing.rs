//! The API server's routing of a Pod CREATE to mutating webhooks (Kubernetes' admission `Matcher` and
//! `namespace`/`object` matchers): configurations in name order, their entries in order, each entry's
//! `rules`, then its `namespaceSelector` on the namespace's labels and its `objectSelector` on the pod's
//! labels, with the selector code of `decision`. `matchConditions` (CEL) cannot be evaluated offline:
//! an entry that has them is taken to be called, and says so.

use serde_json::{Map, Value};

use inject::decision::{LabelSelector, Operator, Requirement};
use sidecar_core::fields::Fields;

use super::entry::Entry;

/// A webhook entry that cannot be evaluated; names the configuration, entry, field and value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MutatingWebhookConfiguration {config:?} entry {entry:?}: field {field}: {reason}")]
pub struct EntryError {
    pub config: String,
    pub entry: String,
    pub field: String,
    pub reason: String,
}

/// One rule of `rules` (Kubernetes' `RuleWithOperations`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    operations: Vec<String>,
    api_groups: Vec<String>,
    api_versions: Vec<String>,
    resources: Vec<String>,
    scope: String,
}

impl Rule {
    /// Whether the rule covers a CREATE of `pods` (core group, `v1`, namespaced, no subresource), as
    /// Kubernetes' `rules.Matcher` decides: `*` matches any value, and a resource `R/S` matches when
    /// both halves do (`S` is empty for the pod itself).
    pub(crate) fn matches_pod_create(&self) -> bool {
        let any = |list: &[String], want: &str| list.iter().any(|v| v == "*" || v == want);
        let resource = self.resources.iter().any(|r| {
            let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
            (res == "*" || res == "pods") && (sub == "*" || sub.is_empty())
        });
        any(&self.operations, "CREATE")
            && any(&self.api_groups, "")
            && any(&self.api_versions, "v1")
            && resource
            && matches!(self.scope.as_str(), "*" | "Namespaced")
    }
}

/// What of an entry decides whether it is called: its rules and selectors, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Matcher {
    pub(crate) rules: Vec<Rule>,
    namespace_selector: LabelSelector,
    object_selector: LabelSelector,
}

fn strings(
    v: Option<&Value>,
    field: &str,
    err: &dyn Fn(&str, String) -> EntryError,
) -> Result<Vec<String>, EntryError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| err(field, format!("value {x} is not a string")))
            })
            .collect(),
        Some(other) => Err(err(
            field,
            format!("expected a list of strings, got {other}"),
        )),
    }
}

impl Matcher {
    /// Parses the entry's rules and selectors; a `failurePolicy` or `matchConditions` the API server
    /// would refuse is refused too, since the entry's verdicts could not be trusted.
    pub(crate) fn parse(entry: &Entry) -> Result<Matcher, EntryError> {
        let w = &entry.value;
        let err = |field: &str, reason: String| EntryError {
            config: entry.config.clone(),
            entry: entry.name.clone(),
            field: field.to_string(),
            reason,
        };
        let selector = |field: &str| {
            LabelSelector::from_json(w.field(field).unwrap_or(&Value::Null))
                .map_err(|e| err(field, e.to_string()))
        };
        let mut rules = Vec::new();
        match w.field("rules") {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for (i, r) in list.iter().enumerate() {
                    let f = |k: &str| format!("rules[{i}].{k}");
                    if !r.is_object() {
                        return Err(err(
                            &format!("rules[{i}]"),
                            format!("expected a mapping, got {r}"),
                        ));
                    }
                    rules.push(Rule {
                        operations: strings(r.field("operations"), &f("operations"), &err)?,
                        api_groups: strings(r.field("apiGroups"), &f("apiGroups"), &err)?,
                        api_versions: strings(r.field("apiVersions"), &f("apiVersions"), &err)?,
                        resources: strings(r.field("resources"), &f("resources"), &err)?,
                        scope: match r.field("scope") {
                            None | Some(Value::Null) => "*".to_string(),
                            Some(Value::String(s)) => s.clone(),
                            Some(other) => {
                                return Err(err(
                                    &f("scope"),
                                    format!("value {other} is not a string"),
                                ))
                            }
                        },
                    });
                }
            }
            Some(other) => return Err(err("rules", format!("expected a list, got {other}"))),
        }
        if let Some(p) = w
            .field("failurePolicy")
            .filter(|p| !p.is_null() && !matches!(p.as_str(), Some("Fail" | "Ignore")))
        {
            let reason = format!("value {p} is neither \"Fail\" nor \"Ignore\"");
            return Err(err("failurePolicy", reason));
        }
        if let Some(c) = w
            .field("matchConditions")
            .filter(|c| !c.is_null() && !c.is_array())
        {
            let reason = format!("expected a list, got {c}");
            return Err(err("matchConditions", reason));
        }
        Ok(Matcher {
            rules,
            namespace_selector: selector("namespaceSelector")?,
            object_selector: selector("objectSelector")?,
        })
    }

    /// Whether the API server calls `entry` (whose matcher this is) for a Pod CREATE in namespace
    /// `namespace` (labels `ns_labels`) of a pod with labels `pod_labels`: `Ok(why)` when it does,
    /// `Err(why not)` naming the first requirement that fails.
    pub(crate) fn check(
        &self,
        entry: &Entry,
        namespace: &str,
        ns_labels: &Map<String, Value>,
        pod_labels: Option<&Map<String, Value>>,
    ) -> Result<String, String> {
        if !self.rules.iter().any(Rule::matches_pod_create) {
            return Err(format!(
                "its rules do not cover a CREATE of pods (entry {} has {} rule(s))",
                entry.name,
                self.rules.len()
            ));
        }
        let ns_subject = format!("namespace {namespace:?}");
        if let Some(r) = self.namespace_selector.first_unmet(Some(ns_labels)) {
            return Err(unmet(&ns_subject, r, Some(ns_labels), &entry.name));
        }
        if let Some(r) = self.object_selector.first_unmet(pod_labels) {
            return Err(unmet("the pod", r, pod_labels, &entry.name));
        }
        let met = |subject: &str, s: &LabelSelector| {
            if s.is_empty() {
                format!("{subject}: any")
            } else {
                let reqs: Vec<String> = s.requirements.iter().map(ToString::to_string).collect();
                format!("{subject} meets {}", reqs.join(", "))
            }
        };
        Ok(format!(
            "{} selects the pod: {}; {}",
            entry.label(),
            met(&ns_subject, &self.namespace_selector),
            met("the pod", &self.object_selector)
        ))
    }
}

/// Why `subject`'s labels fail `r`, e.g. `namespace "apps" has no label istio-injection=enabled (entry
/// namespace.sidecar-injector.istio.io needs istio-injection In [enabled])`.
fn unmet(
    subject: &str,
    r: &Requirement,
    labels: Option<&Map<String, Value>>,
    entry: &str,
) -> String {
    let value = labels.and_then(|l| l.field(&r.key)).and_then(Value::as_str);
    let has = match (value, r.operator) {
        (Some(v), _) => format!("has label {}={v}", r.key),
        (None, Operator::In) if r.values.len() == 1 => {
            format!("has no label {}={}", r.key, r.values[0])
        }
        (None, _) => format!("has no label {}", r.key),
    };
    format!("{subject} {has} (entry {entry} needs {r})")
}

/// Entries in the order the API server calls them, each with its matcher.
#[derive(Debug, Clone)]
pub struct Router {
    routes: Vec<(Entry, Matcher)>,
}

impl Router {
    /// Parses every entry and orders them as the API server calls them: configurations by name,
    /// entries in their order (the sort is stable).
    pub fn new(entries: Vec<Entry>) -> Result<Router, EntryError> {
        let mut routes = entries
            .into_iter()
            .map(|e| Matcher::parse(&e).map(|m| (e, m)))
            .collect::<Result<Vec<_>, _>>()?;
        routes.sort_by(|a, b| a.0.config.cmp(&b.0.config));
        Ok(Router { routes })
    }

    /// The entries, in call order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.routes.iter().map(|(e, _)| e)
    }

    /// Routes a Pod CREATE in `namespace` (labels `ns_labels`) of a pod with labels `pod_labels`.
    pub fn route(
        &self,
        namespace: &str,
        ns_labels: &Map<String, Value>,
        pod_labels: Option<&Map<String, Value>>,
    ) -> Routing<'_> {
        let mut routing = Routing {
            called: Vec::new(),
            missed: Vec::new(),
        };
        for (e, m) in &self.routes {
            match m.check(e, namespace, ns_labels, pod_labels) {
                Ok(why) => routing.called.push((e, why)),
                Err(why) => routing.missed.push((e, why)),
            }
        }
        routing
    }
}

/// The outcome of routing one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing<'a> {
    /// Every entry called, in call order (more than one in an inconsistent installation).
    pub called: Vec<(&'a Entry, String)>,
    /// The entries not called, with the failed requirement.
    pub missed: Vec<(&'a Entry, String)>,
}

impl Routing<'_> {
    /// `webhook_reason`: why the first entry is called, or why none is (per entry, `; `-separated).
    pub fn reason(&self) -> String {
        match self.called.first() {
            Some((_, why)) => why.clone(),
            None if self.missed.is_empty() => "no webhook entry is configured".to_string(),
            None => self
                .missed
                .iter()
                .map(|(_, why)| why.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::shared::webhook_config;
    use serde_json::json;

    fn generated(revision: &str, auto: bool, tags: &[&str]) -> Vec<Entry> {
        let mut a = webhook_config::Args::for_revision(revision, auto).unwrap();
        a.scope.tags = tags.iter().map(|t| t.to_string()).collect();
        let configs = a.configurations(None).unwrap();
        let entries = crate::shared::webhook_entry::generated(&configs).unwrap();
        let want = a.named_revision().unwrap_or("default");
        assert!(
            entries.iter().all(|e| e.revision.as_deref() == Some(want)),
            "{entries:?}"
        );
        entries
    }

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn ns(name: &str, v: Value) -> Map<String, Value> {
        let mut l = labels(v);
        l.insert("kubernetes.io/metadata.name".into(), json!(name));
        l
    }

    /// The called entry (`configuration/entry`) or `None`.
    fn called(entries: &Router, namespace: &str, ns_labels: Value, pod: Value) -> Option<String> {
        let r = entries.route(namespace, &ns(namespace, ns_labels), pod.as_object());
        assert!(r.called.len() <= 1, "{:?}", r.called);
        r.called.first().map(|(e, _)| e.label())
    }

    fn rule(v: Value) -> Rule {
        let entry = Entry::new("c", 0, "e", json!({"name": "e", "rules": [v]}));
        Matcher::parse(&entry).unwrap().rules.remove(0)
    }

    #[test]
    fn rules_match_a_pod_create_with_wildcards_and_nothing_else() {
        let base = json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]});
        assert!(rule(base.clone()).matches_pod_create());
        for (k, v, want) in [
            ("operations", json!(["*"]), true),
            ("operations", json!(["UPDATE", "CREATE"]), true),
            ("operations", json!(["UPDATE"]), false),
            ("apiGroups", json!(["*"]), true),
            ("apiGroups", json!(["apps"]), false),
            ("apiVersions", json!(["*"]), true),
            ("apiVersions", json!(["v1beta1"]), false),
            ("resources", json!(["*"]), true),
            ("resources", json!(["*/*"]), true),
            ("resources", json!(["pods/*"]), true),
            ("resources", json!(["pods/status"]), false),
            ("resources", json!(["deployments"]), false),
            ("scope", json!("Namespaced"), true),
            ("scope", json!("Cluster"), false),
        ] {
            let mut r = base.clone();
            r[k] = v.clone();
            assert_eq!(rule(r).matches_pod_create(), want, "{k}: {v}");
        }
        // An entry without rules is never called.
        let e = Entry::new("c", 0, "e", json!({"name": "e"}));
        let why = Matcher::parse(&e)
            .unwrap()
            .check(&e, "apps", &ns("apps", json!({})), None)
            .unwrap_err();
        assert!(why.contains("rules do not cover a CREATE of pods"), "{why}");
    }

    #[test]
    fn bad_entries_name_the_field_and_value() {
        for (value, field) in [
            (json!({"rules": "x"}), "rules"),
            (
                json!({"rules": [{"operations": [1]}]}),
                "rules[0].operations",
            ),
            (
                json!({"namespaceSelector": {"matchLabels": {"a b": "x"}}}),
                "namespaceSelector",
            ),
            (
                json!({"objectSelector": {"matchExpressions": [{"key": "a", "operator": "Foo"}]}}),
                "objectSelector",
            ),
            (json!({"failurePolicy": "Sometimes"}), "failurePolicy"),
        ] {
            let e = Matcher::parse(&Entry::new("cfg", 0, "e", value)).unwrap_err();
            assert_eq!(e.field, field);
            let text = e.to_string();
            assert!(text.contains("\"cfg\"") && text.contains(field), "{text}");
        }
    }

    #[test]
    fn default_revision_routing_names_the_failed_requirement() {
        let entries = Router::new(generated("", false, &[])).unwrap();
        assert_eq!(
            called(
                &entries,
                "apps",
                json!({"istio-injection": "enabled"}),
                json!({})
            )
            .as_deref(),
            Some("sidecar-injector/namespace.sidecar-injector.istio.io")
        );
        assert_eq!(
            called(
                &entries,
                "apps",
                json!({}),
                json!({"sidecar.istio.io/inject": "true"})
            )
            .as_deref(),
            Some("sidecar-injector/object.sidecar-injector.istio.io")
        );
        let r = entries.route("apps", &ns("apps", json!({})), None);
        assert!(r.called.is_empty());
        let why = r.reason();
        assert!(
            why.contains("namespace \"apps\" has no label istio-injection=enabled (entry namespace.sidecar-injector.istio.io needs istio-injection In [enabled])"),
            "{why}"
        );
        assert!(
            why.contains("the pod has no label sidecar.istio.io/inject=true (entry object.sidecar-injector.istio.io needs sidecar.istio.io/inject In [true])"),
            "{why}"
        );
        assert!(
            why.contains("namespace \"apps\" has no label istio.io/rev=default (entry rev.namespace.sidecar-injector.istio.io"),
            "{why}"
        );
        assert_eq!(r.missed.len(), 4);
        // A pod label false stops every entry; disabled namespaces call nothing.
        let r = entries.route(
            "apps",
            &ns("apps", json!({"istio-injection": "enabled"})),
            json!({"sidecar.istio.io/inject": "false"}).as_object(),
        );
        assert!(r.called.is_empty());
        assert!(r.reason().contains("the pod has label sidecar.istio.io/inject=false (entry namespace.sidecar-injector.istio.io needs sidecar.istio.io/inject NotIn [false])"), "{}", r.reason());
        assert_eq!(
            called(
                &entries,
                "apps",
                json!({"istio-injection": "disabled"}),
                json!({"sidecar.istio.io/inject": "true"})
            ),
            None
        );
        // The injector's own namespace and kube-system are excluded.
        let r = entries.route(
            "kube-system",
            &ns("kube-system", json!({"istio-injection": "enabled"})),
            None,
        );
        assert!(
            r.reason()
                .contains("has label kubernetes.io/metadata.name=kube-system"),
            "{}",
            r.reason()
        );
        // auto. only with enableNamespacesByDefault.
        let auto = Router::new(generated("", true, &[])).unwrap();
        assert_eq!(
            called(&auto, "apps", json!({}), json!({})).as_deref(),
            Some("sidecar-injector/auto.sidecar-injector.istio.io")
        );
        assert_eq!(called(&auto, "kube-public", json!({}), json!({})), None);
    }

    #[test]
    fn revisions_and_tags_route_as_istios_table() {
        // A revision canary with a tag prod, next to the default revision (Istio's "which entry is called"
        // table): configurations sorted by name, each selecting its own X.
        let mut entries = generated("", false, &[]);
        entries.extend(generated("canary", false, &["prod"]));
        let entries = Router::new(entries).unwrap();
        let rows: [(Value, Value, Option<&str>); 10] = [
            (
                json!({}),
                json!({"istio.io/rev": "canary"}),
                Some("sidecar-injector-canary/rev.object.sidecar-injector.istio.io"),
            ),
            (
                json!({}),
                json!({"istio.io/rev": "prod"}),
                Some("sidecar-injector-tag-prod/rev.object.sidecar-injector.istio.io"),
            ),
            (
                json!({}),
                json!({"istio.io/rev": "default"}),
                Some("sidecar-injector/rev.object.sidecar-injector.istio.io"),
            ),
            (
                json!({"istio.io/rev": "canary"}),
                json!({}),
                Some("sidecar-injector-canary/rev.namespace.sidecar-injector.istio.io"),
            ),
            (
                json!({"istio.io/rev": "prod"}),
                json!({"sidecar.istio.io/inject": "true"}),
                Some("sidecar-injector-tag-prod/rev.namespace.sidecar-injector.istio.io"),
            ),
            (
                json!({"istio-injection": "enabled", "istio.io/rev": "canary"}),
                json!({}),
                Some("sidecar-injector/namespace.sidecar-injector.istio.io"),
            ),
            (
                json!({"istio-injection": "disabled", "istio.io/rev": "canary"}),
                json!({}),
                None,
            ),
            (json!({"istio.io/rev": "nosuch"}), json!({}), None),
            (json!({}), json!({"sidecar.istio.io/inject": "yes"}), None),
            (
                json!({}),
                json!({"sidecar.istio.io/inject": "false", "istio.io/rev": "canary"}),
                None,
            ),
        ];
        for (i, (ns_labels, pod, want)) in rows.into_iter().enumerate() {
            assert_eq!(
                called(&entries, "apps", ns_labels, pod).as_deref(),
                want,
                "row {i}"
            );
        }
        let names: Vec<&str> = entries.entries().map(|e| e.config.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn match_conditions_failure_policy_and_path_are_read() {
        let e = Entry::new(
            "c",
            0,
            "e",
            json!({"failurePolicy": "Ignore", "matchConditions": [{"name": "x", "expression": "true"}],
                          "clientConfig": {"url": "https://injector.example:9443/inject/cluster/c1/net/n1"}}),
        );
        Matcher::parse(&e).unwrap();
        assert_eq!(e.failure_policy, "Ignore");
        assert_eq!(e.match_conditions, 1);
        assert_eq!(e.path, "/inject/cluster/c1/net/n1");
        let generated = generated("", false, &[]);
        assert_eq!(generated[0].failure_policy, "Fail");
        assert_eq!(generated[0].path, "/inject");
    }
}
