#![allow(clippy::unwrap_used)]

use super::*;
use serde_json::json;

/// A context over `settings` with the generated configurations (or `webhook_yaml`), namespace labels
/// `labels` and connections `specs`.
fn ctx_with(
    settings: Settings,
    webhook_yaml: Option<&str>,
    labels: &str,
    specs: &[&str],
) -> Context {
    let entries = entries_from(webhook_yaml.map(|t| (Path::new("wh.yaml"), t)), &settings).unwrap();
    Context {
        engine: Engine::new(settings),
        entries,
        namespaces: None,
        namespace_labels: parse_namespace_labels(labels).unwrap(),
        connections: traffic::parse(&specs.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap(),
        policy: None,
    }
}

fn settings(
    values: Option<Value>,
    config: Option<Value>,
    native: bool,
    revision: &str,
) -> Settings {
    Settings::from_documents(
        values.as_ref().map(|v| ("values", v)),
        None,
        config.as_ref().map(|c| ("config", c)),
        native,
        revision,
        "",
    )
    .unwrap()
}

fn ctx(labels: &str) -> Context {
    ctx_with(Settings::default(), None, labels, &[])
}

fn explain(ctx: &Context, yaml: &str) -> Vec<Item> {
    explain_stream(ctx, yaml, "in.yaml").unwrap()
}

/// A Deployment `web` in `apps` with pod labels and annotations.
fn deployment(labels: Value, annotations: Value) -> String {
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {"template": {"metadata": {"labels": labels, "annotations": annotations},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    serde_json::to_string(&d).unwrap()
}

fn one(ctx: &Context, yaml: &str) -> Item {
    let mut items = explain(ctx, yaml);
    assert_eq!(items.len(), 1);
    items.remove(0)
}

#[test]
fn json_items_have_every_schema_field() {
    let c = ctx_with(
        Settings::default(),
        None,
        "istio-injection=enabled",
        &["outbound:tcp:10.0.0.5:5432", "inbound:tcp:8080"],
    );
    let yaml = format!(
        "{}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: s}}\n---\n{}",
        deployment(json!({}), json!({})),
        deployment(json!({"sidecar.istio.io/inject": "false"}), json!({}))
    );
    let v = json(&explain(&c, &yaml));
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    let keys = [
        "document",
        "kind",
        "name",
        "namespace",
        "webhook",
        "webhook_reason",
        "injected",
        "decision",
        "templates",
        "render_paths",
        "warnings",
        "init_args",
        "connections",
    ];
    for it in items {
        let got: Vec<&str> = it.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(got, keys);
    }
    let a = &items[0];
    assert_eq!(a["document"], json!(0));
    assert_eq!(
        (
            a["kind"].as_str(),
            a["name"].as_str(),
            a["namespace"].as_str()
        ),
        (Some("Deployment"), Some("web"), Some("apps"))
    );
    assert_eq!(
        a["webhook"],
        json!({"configuration": "sidecar-injector", "entry": "namespace.sidecar-injector.istio.io"})
    );
    assert_eq!(a["injected"], json!(true));
    assert_eq!(
        a["decision"],
        json!({"step": "policy", "inject": true, "reason": "policy enabled"})
    );
    assert_eq!(a["templates"], json!(["sidecar"]));
    assert_eq!(a["render_paths"], json!(["compiled"]));
    assert_eq!(a["init_args"][0], json!("istio-iptables"));
    let conn = &a["connections"][0];
    let ckeys: Vec<&str> = conn
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        ckeys,
        ["spec", "verdict", "port", "table", "chain", "rule", "address"]
    );
    assert_eq!(conn["verdict"], json!("outbound-proxy"));
    assert_eq!(conn["address"], json!("10.0.0.5"));
    assert_eq!(a["connections"][1]["verdict"], json!("inbound-proxy"));
    // The second workload (document 2): the label false stops the call.
    let b = &items[1];
    assert_eq!(b["document"], json!(2));
    assert_eq!(b["webhook"], Value::Null);
    assert_eq!(b["decision"], Value::Null);
    assert_eq!(b["injected"], json!(false));
    assert_eq!(b["init_args"], Value::Null);
    assert_eq!(b["connections"], json!([]));
    assert!(b["webhook_reason"]
        .as_str()
        .unwrap()
        .contains("the pod has label sidecar.istio.io/inject=false"));
}

#[test]
fn an_unlabelled_namespace_says_which_requirement_failed() {
    let it = one(&ctx(""), &deployment(json!({}), json!({})));
    assert!(it.webhook.is_none() && it.decision.is_none() && !it.injected);
    assert!(it.webhook_reason.contains("namespace \"apps\" has no label istio-injection=enabled (entry namespace.sidecar-injector.istio.io needs istio-injection In [enabled])"), "{}", it.webhook_reason);
    assert!(
        it.webhook_reason
            .contains("the pod has no label sidecar.istio.io/inject=true"),
        "{}",
        it.webhook_reason
    );
    assert_eq!(it.missed.len(), 4);
    let text = it.text();
    assert!(
        text.contains("Webhook:   none is called") && text.contains("Decision:  not reached"),
        "{text}"
    );
    // The pod label opts in through `object.`.
    let it = one(
        &ctx(""),
        &deployment(json!({"sidecar.istio.io/inject": "true"}), json!({})),
    );
    assert_eq!(
        it.webhook.unwrap().entry,
        "object.sidecar-injector.istio.io"
    );
    assert!(it.injected);
    assert_eq!(it.decision.unwrap().step, Step::Label);
}

#[test]
fn the_webhooks_policy_applies_not_kube_injects() {
    let disabled = settings(
        Some(json!({"global": {"proxy": {"autoInject": "disabled"}}})),
        None,
        true,
        "",
    );
    let c = ctx_with(disabled, None, "istio-injection=enabled", &[]);
    let it = one(&c, &deployment(json!({}), json!({})));
    assert!(it.webhook.is_some() && !it.injected);
    let d = it.decision.clone().unwrap();
    assert_eq!(
        (d.step, d.inject, d.reason.as_str()),
        (Step::Policy, false, "policy disabled")
    );
    assert!(
        it.text().contains("> policy             policy disabled"),
        "{}",
        it.text()
    );
    let it = one(
        &c,
        &deployment(json!({}), json!({"sidecar.istio.io/inject": "true"})),
    );
    assert!(it.injected);
    assert_eq!(it.decision.unwrap().step, Step::Annotation);
}

#[test]
fn selectors_and_invalid_policy_are_the_deciding_steps() {
    let cfg = json!({"policy": "disabled", "alwaysInjectSelector": [{"matchLabels": {"mesh": "yes"}}],
                     "neverInjectSelector": [{"matchLabels": {"legacy": "yes"}}]});
    let c = ctx_with(
        settings(None, Some(cfg), true, ""),
        None,
        "istio-injection=enabled",
        &[],
    );
    let it = one(&c, &deployment(json!({"mesh": "yes"}), json!({})));
    assert_eq!(it.decision.unwrap().step, Step::AlwaysSelector);
    assert!(it.injected);
    let it = one(
        &c,
        &deployment(json!({"mesh": "yes", "legacy": "yes"}), json!({})),
    );
    assert_eq!(it.decision.unwrap().step, Step::NeverSelector);
    assert!(!it.injected);
    let bad = settings(None, Some(json!({"policy": "sometimes"})), true, "");
    let c = ctx_with(bad, None, "istio-injection=enabled", &[]);
    let it = one(
        &c,
        &deployment(json!({"sidecar.istio.io/inject": "true"}), json!({})),
    );
    assert_eq!(it.decision.unwrap().step, Step::InvalidPolicy);
    assert!(!it.injected);
}

#[test]
fn host_network_and_ignored_namespaces_decide_first() {
    let yaml =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "apps"},
        "spec": {"hostNetwork": true, "containers": [{"name": "c"}]}})
        .to_string();
    let it = one(&ctx("istio-injection=enabled"), &yaml);
    assert_eq!(it.decision.unwrap().step, Step::HostNetwork);
    // kube-system is excluded by the generated configurations; with a configuration that selects it, the
    // decision refuses.
    let wh = "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: open}\nwebhooks:\n- name: all.example\n  failurePolicy: Ignore\n  rules: [{operations: ['*'], apiGroups: ['*'], apiVersions: ['*'], resources: ['*']}]\n";
    let c = ctx_with(Settings::default(), Some(wh), "", &[]);
    let yaml = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "kube-system"},
        "spec": {"containers": [{"name": "c"}]}})
    .to_string();
    let it = one(&c, &yaml);
    assert_eq!(it.webhook.clone().unwrap().configuration, "open");
    assert_eq!(it.decision.unwrap().step, Step::IgnoredNamespace);
    assert!(
        !it.warnings.iter().any(|w| w.contains("failurePolicy Fail")),
        "{:?}",
        it.warnings
    );
}

#[test]
fn templates_come_from_the_configuration_and_the_pod() {
    let cfg = json!({"policy": "enabled", "defaultTemplates": ["sidecar"], "aliases": {"both": ["sidecar", "grpc-agent"]}});
    let c = ctx_with(
        settings(None, Some(cfg), true, ""),
        None,
        "istio-injection=enabled",
        &[],
    );
    let it = one(
        &c,
        &deployment(json!({}), json!({"inject.istio.io/templates": "both"})),
    );
    assert!(it.injected);
    assert_eq!(it.templates, ["sidecar", "grpc-agent"]);
    assert_eq!(it.render_paths, ["compiled", "compiled"]);
    assert!(it
        .text()
        .contains("templates: sidecar (compiled), grpc-agent (compiled)"));
    // A configured text of a built-in name renders through the evaluator, and explain says so.
    let cfg = json!({"policy": "enabled", "templates": {"sidecar": "metadata:\n  labels:\n    x: \"{{ .Revision }}\"\n"}});
    let c2 = ctx_with(
        settings(None, Some(cfg), true, ""),
        None,
        "istio-injection=enabled",
        &[],
    );
    let it = one(&c2, &deployment(json!({}), json!({})));
    assert_eq!(it.render_paths, ["evaluated"]);
    assert!(
        it.text().contains("templates: sidecar (evaluated)"),
        "{}",
        it.text()
    );
    // An unknown template: the webhook answers with an error.
    let it = one(
        &c,
        &deployment(json!({}), json!({"inject.istio.io/templates": "nope"})),
    );
    assert!(!it.injected);
    assert!(
        it.warnings
            .iter()
            .any(|w| w.contains("refuses the pod") && w.contains("\"nope\" not found")),
        "{:?}",
        it.warnings
    );
}

#[test]
fn revisions_route_to_their_own_configuration() {
    let c = ctx_with(
        settings(None, None, true, "canary"),
        None,
        "istio.io/rev=canary",
        &[],
    );
    let it = one(&c, &deployment(json!({}), json!({})));
    assert_eq!(
        it.webhook.unwrap(),
        Called {
            configuration: "sidecar-injector-canary".into(),
            entry: "rev.namespace.sidecar-injector.istio.io".into()
        }
    );
    // istio-injection=enabled means the default revision, which a canary-only installation lacks.
    let c = ctx_with(
        settings(None, None, true, "canary"),
        None,
        "istio-injection=enabled",
        &[],
    );
    let it = one(&c, &deployment(json!({}), json!({})));
    assert!(it.webhook.is_none());
    assert!(it.webhook_reason.contains("namespace \"apps\" has no label istio.io/rev=canary (entry rev.namespace.sidecar-injector.istio.io needs istio.io/rev In [canary]); namespace \"apps\" has label istio-injection=enabled (entry rev.object.sidecar-injector.istio.io needs istio-injection DoesNotExist)"), "{}", it.webhook_reason);
}

#[test]
fn enable_namespaces_by_default_adds_auto_for_the_default_revision_only() {
    let v = json!({"sidecarInjectorWebhook": {"enableNamespacesByDefault": true}});
    let c = ctx_with(settings(Some(v.clone()), None, true, ""), None, "", &[]);
    let it = one(&c, &deployment(json!({}), json!({})));
    assert_eq!(it.webhook.unwrap().entry, "auto.sidecar-injector.istio.io");
    assert!(it.injected);
    let c = ctx_with(settings(Some(v), None, true, "canary"), None, "", &[]);
    assert!(one(&c, &deployment(json!({}), json!({}))).webhook.is_none());
}

#[test]
fn warnings_for_the_deployments_metadata_and_the_annotation_form() {
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "apps", "annotations": {"sidecar.istio.io/inject": "true"}},
        "spec": {"template": {"metadata": {"annotations": {"sidecar.istio.io/inject": "true"}},
                              "spec": {"containers": [{"name": "web"}]}}}})
    .to_string();
    let it = one(&ctx(""), &d);
    assert!(!it.injected);
    assert_eq!(it.warnings.len(), 2, "{:?}", it.warnings);
    assert!(
        it.warnings[0].contains("on metadata, where it has no effect"),
        "{}",
        it.warnings[0]
    );
    assert!(
        it.warnings[1].contains("objectSelector sees labels only")
            && it.warnings[1].contains("object.sidecar-injector.istio.io"),
        "{}",
        it.warnings[1]
    );
    // In a labelled namespace the annotation works: no second warning.
    let it = one(&ctx("istio-injection=enabled"), &d);
    assert!(it.injected);
    assert!(
        !it.warnings.iter().any(|w| w.contains("objectSelector")),
        "{:?}",
        it.warnings
    );
    assert!(
        it.warnings.iter().any(|w| w.contains("failurePolicy Fail")),
        "{:?}",
        it.warnings
    );
}

#[test]
fn jobs_and_app_init_containers_are_warned_about() {
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "apps"},
        "spec": {"template": {"spec": {"initContainers": [{"name": "fetch"}], "containers": [{"name": "j"}]}}}})
    .to_string();
    let regular = ctx_with(
        settings(None, None, false, ""),
        None,
        "istio-injection=enabled",
        &[],
    );
    let it = one(&regular, &job);
    assert!(it.injected);
    assert!(
        it.warnings.iter().any(
            |w| w.contains("Job's pod with istio-proxy as a regular container never completes")
        ),
        "{:?}",
        it.warnings
    );
    assert!(
        it.warnings
            .iter()
            .any(|w| w.contains("init container \"fetch\" runs before istio-proxy")),
        "{:?}",
        it.warnings
    );
    let native = ctx_with(
        settings(None, None, true, ""),
        None,
        "istio-injection=enabled",
        &[],
    );
    let it = one(&native, &job);
    assert!(
        !it.warnings
            .iter()
            .any(|w| w.contains("never completes") || w.contains("\"fetch\"")),
        "{:?}",
        it.warnings
    );
}

#[test]
fn a_cronjob_is_routed_by_its_pod_templates_labels() {
    let cj = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "apps"},
        "spec": {"jobTemplate": {"metadata": {"labels": {"sidecar.istio.io/inject": "true"}},
                 "spec": {"template": {"metadata": {"labels": {"app": "c"}}, "spec": {"containers": [{"name": "c"}]}}}}}})
    .to_string();
    let it = one(&ctx(""), &cj);
    assert!(it.webhook.is_none());
    assert!(
        it.warnings
            .iter()
            .any(|w| w.contains("spec.jobTemplate.metadata,")),
        "{:?}",
        it.warnings
    );
}

#[test]
fn webhook_config_files_lists_and_match_conditions() {
    let mut wc = webhook_config::Args::for_revision("", false).unwrap();
    wc.scope.tags = vec!["prod".into()];
    let configs: Vec<Value> = wc
        .configurations(None)
        .unwrap()
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    let mut list = json!({"apiVersion": "v1", "kind": "List", "items": configs});
    list["items"][1]["webhooks"][0]["matchConditions"] =
        json!([{"name": "not-ci", "expression": "true"}]);
    let c = ctx_with(
        Settings::default(),
        Some(&list.to_string()),
        "istio.io/rev=prod",
        &[],
    );
    let it = one(&c, &deployment(json!({}), json!({})));
    assert_eq!(
        it.webhook.clone().unwrap().configuration,
        "sidecar-injector-tag-prod"
    );
    assert!(
        it.warnings
            .iter()
            .any(|w| w.contains("cannot be evaluated offline")),
        "{:?}",
        it.warnings
    );
    // Several configurations: each missed entry names its configuration.
    let it = one(
        &c,
        &deployment(json!({"sidecar.istio.io/inject": "false"}), json!({})),
    );
    assert!(
        it.missed
            .iter()
            .any(|m| m.starts_with("sidecar-injector-tag-prod: ")),
        "{:?}",
        it.missed
    );
    // A broken entry names the file, configuration, entry and field.
    list["items"][0]["webhooks"][1]["objectSelector"] = json!({"matchLabels": {"a b": "x"}});
    let e = entries_from(
        Some((Path::new("wh.yaml"), &list.to_string())),
        &Settings::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("--webhook-config wh.yaml: MutatingWebhookConfiguration \"sidecar-injector\" entry \"rev.object.sidecar-injector.istio.io\": field objectSelector"), "{e}");
}

#[test]
fn namespace_labels_and_namespace_files() {
    assert_eq!(
        parse_namespace_labels("a=1, b=").unwrap(),
        json!({"a": "1", "b": ""}).as_object().unwrap().clone()
    );
    for bad in ["a", "a b=1", "a=b c"] {
        let e = parse_namespace_labels(bad).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("--namespace-labels {bad:?}: ")),
            "{e}"
        );
    }
    let dir = std::env::temp_dir().join(format!("explain-ns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ns.yaml");
    std::fs::write(&path, "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: apps, labels: {istio-injection: enabled}}\n").unwrap();
    let mut c = ctx("");
    c.namespaces = Some((
        format!("--namespaces {}", path.display()),
        Namespaces::load(&path).unwrap(),
    ));
    let it = one(&c, &deployment(json!({}), json!({})));
    assert!(it.injected);
    let other = deployment(json!({}), json!({})).replace("\"apps\"", "\"shop\"");
    let it = one(&c, &other);
    assert!(!it.injected);
    assert!(
        it.warnings
            .iter()
            .any(|w| w.contains("namespace \"shop\" is not in --namespaces")),
        "{:?}",
        it.warnings
    );
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: apps, labels: {a: 1}}\n",
    )
    .unwrap();
    let e = Namespaces::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("Namespace apps: field metadata.labels.a: value 1 must be a string"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_manifests_name_the_document_and_field() {
    let bad = format!(
        "{}\n---\n{}",
        deployment(json!({}), json!({})),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "broken"},
               "spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}})
    );
    let e = explain_stream(&ctx(""), &bad, "in.yaml")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "in.yaml: document 1 (Deployment \"broken\"): field spec.template.spec.containers[0].name: is required (a string)");
    let e = ExplainError::from(traffic::parse(&["outbound:tcp:99999".to_string()]).unwrap_err())
        .to_string();
    assert!(
        e.starts_with("--connection: connection \"outbound:tcp:99999\": invalid port"),
        "{e}"
    );
}

#[test]
fn the_text_marks_the_deciding_step_and_lists_the_traffic() {
    let c = ctx_with(
        Settings::default(),
        None,
        "istio-injection=enabled",
        &["outbound:tcp:10.0.0.5:5432"],
    );
    let text = one(
        &c,
        &deployment(json!({"sidecar.istio.io/inject": "true"}), json!({})),
    )
    .text();
    for want in [
        "Deployment apps/web (document 0)",
        "Webhook:   called: sidecar-injector / namespace.sidecar-injector.istio.io",
        "Decision:  inject (step label)",
        "               host-network       -",
        "             > label              label sidecar.istio.io/inject=true",
        "Result:    injected, templates: sidecar",
        "Traffic:   istio-iptables -p 15001",
        " -i '*' -x '' -b '*' ",
        "outbound:tcp:10.0.0.5:5432 -> outbound-proxy port 15001 (nat/ISTIO_OUTPUT",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
    assert!(
        !text.contains("annotation         -"),
        "steps after the deciding one are not listed:\n{text}"
    );
}

/// The extended classic table (default revision): namespace labels × pod label/annotation × policy ×
/// enableNamespacesByDefault → injected.
#[test]
fn the_extended_injection_table() {
    let l = |v: &str| json!({"sidecar.istio.io/inject": v});
    let none = json!({});
    type Row = (&'static str, bool, Value, Value, bool, bool);
    let rows: Vec<Row> = vec![
        (
            "istio-injection=enabled",
            false,
            none.clone(),
            none.clone(),
            true,
            false,
        ),
        (
            "istio-injection=enabled",
            false,
            l("true"),
            none.clone(),
            true,
            true,
        ),
        (
            "istio-injection=enabled",
            false,
            l("false"),
            none.clone(),
            false,
            false,
        ),
        (
            "istio-injection=enabled",
            false,
            none.clone(),
            l("true"),
            true,
            true,
        ),
        (
            "istio-injection=enabled",
            false,
            none.clone(),
            l("false"),
            false,
            false,
        ),
        (
            "istio-injection=enabled",
            false,
            l("true"),
            l("false"),
            true,
            true,
        ),
        (
            "istio-injection=enabled",
            false,
            l("false"),
            l("true"),
            false,
            false,
        ),
        (
            "istio-injection=enabled",
            false,
            l("yes"),
            l("true"),
            true,
            false,
        ),
        (
            "istio.io/rev=default",
            false,
            none.clone(),
            none.clone(),
            true,
            false,
        ),
        ("", false, none.clone(), l("true"), false, false),
        ("", false, l("true"), none.clone(), true, true),
        ("", false, l("yes"), none.clone(), false, false),
        ("", true, none.clone(), none.clone(), true, false),
        ("", true, none.clone(), l("true"), true, true),
        ("", true, none.clone(), l("false"), false, false),
        ("", true, l("true"), none.clone(), true, true),
        ("", true, l("false"), none.clone(), false, false),
        (
            "istio-injection=disabled",
            true,
            l("true"),
            none.clone(),
            false,
            false,
        ),
    ];
    for (i, (ns, auto, labels, ann, enabled, disabled)) in rows.into_iter().enumerate() {
        for (policy, want) in [("enabled", enabled), ("disabled", disabled)] {
            let v = json!({"global": {"proxy": {"autoInject": policy}},
                           "sidecarInjectorWebhook": {"enableNamespacesByDefault": auto}});
            let c = ctx_with(settings(Some(v), None, true, ""), None, ns, &[]);
            let it = one(&c, &deployment(labels.clone(), ann.clone()));
            assert_eq!(
                it.injected, want,
                "row {i} policy {policy}: {}",
                it.webhook_reason
            );
        }
    }
}

#[test]
fn an_entry_of_another_revision_is_explained_with_a_warning() {
    let canary = webhook_config::Args::for_revision("canary", false)
        .unwrap()
        .yaml(None)
        .unwrap();
    let c = ctx_with(
        Settings::default(),
        Some(&canary),
        "istio.io/rev=canary",
        &[],
    );
    let it = one(&c, &deployment(json!({}), json!({})));
    assert_eq!(
        it.webhook.clone().unwrap().configuration,
        "sidecar-injector-canary"
    );
    assert!(
        it.warnings
            .iter()
            .any(|w| w.contains("belongs to revision \"canary\"")),
        "{:?}",
        it.warnings
    );
    let c = ctx_with(
        settings(None, None, true, "canary"),
        Some(&canary),
        "istio.io/rev=canary",
        &[],
    );
    let it = one(&c, &deployment(json!({}), json!({})));
    assert!(
        !it.warnings
            .iter()
            .any(|w| w.contains("belongs to revision")),
        "{:?}",
        it.warnings
    );
}

/// The printed `istio-iptables` line pastes into a shell: globs, empty and quoted words are quoted.
#[test]
fn shell_words_are_quoted_only_when_needed() {
    assert_eq!(shell_word("15090,15021"), "15090,15021");
    assert_eq!(
        shell_word("--log_output_level=default:info"),
        "--log_output_level=default:info"
    );
    assert_eq!(shell_word("*"), "'*'");
    assert_eq!(shell_word(""), "''");
    assert_eq!(shell_word("a b"), "'a b'");
    assert_eq!(shell_word("it's"), "'it'\\''s'");
}

/// `--policy`: the policy's verdict beside the webhook's, in text and JSON, and nothing without it.
#[test]
fn policy_says_whether_the_admission_policy_or_the_webhook_injects() {
    let mut c = ctx("istio-injection=enabled");
    c.policy = Some(Ok(crate::shared::policy::params::compile(
        &c.engine,
        "/inject",
        &[],
    )
    .unwrap()));
    let yaml = [
        deployment(json!({}), json!({})),
        deployment(
            json!({}),
            json!({"sidecar.istio.io/proxyImageType": "debug"}),
        ),
    ]
    .join("\n---\n");
    let items = explain(&c, &yaml);
    let policy: Vec<_> = items.iter().map(|i| i.policy.clone().unwrap()).collect();
    assert!(policy[0].injects, "{:?}", policy[0]);
    assert!(
        policy[0]
            .reason
            .contains("namespace.sidecar-injector.istio.io"),
        "{:?}",
        policy[0]
    );
    assert!(!policy[1].injects);
    assert!(
        policy[1].reason.contains("(rule annotations)"),
        "{:?}",
        policy[1]
    );
    let text = text(&items);
    assert!(
        text.contains("  Policy:    injects it in the API server ("),
        "{text}"
    );
    assert!(
        text.contains("  Policy:    leaves it to the webhook: "),
        "{text}"
    );
    assert_eq!(json(&items)["items"][0]["policy"]["injects"], json!(true));
    // Both are injected, by one or the other.
    assert!(items.iter().all(|i| i.injected));

    // A namespace no entry selects: no binding selects it either.
    let mut c = ctx("");
    c.policy = Some(Ok(crate::shared::policy::params::compile(
        &c.engine,
        "/inject",
        &[],
    )
    .unwrap()));
    let item = one(&c, &deployment(json!({}), json!({})));
    let p = item.policy.unwrap();
    assert!(
        !p.injects && p.reason.contains("no binding selects it"),
        "{p:?}"
    );

    // Without --policy, no field and no line.
    let item = one(
        &ctx("istio-injection=enabled"),
        &deployment(json!({}), json!({})),
    );
    assert!(item.policy.is_none());
    assert!(!item.text().contains("Policy:"));
    assert!(json(&[item])["items"][0].get("policy").is_none());
}

/// `--policy`: a pod the policy injects gets no failurePolicy warning (the webhook skips it, so an
/// injector outage cannot refuse it); a pod it leaves to the webhook still does.
#[test]
fn a_pod_the_policy_injects_is_not_refused_by_an_injector_outage() {
    let mut c = ctx("istio-injection=enabled");
    let yaml = [
        deployment(json!({}), json!({})),
        deployment(
            json!({}),
            json!({"proxy.istio.io/config": "concurrency: 3"}),
        ),
    ]
    .join("\n---\n");
    let fail_closed = |i: &Item| i.warnings.iter().any(|w| w.contains("failurePolicy Fail"));
    // Without --policy both are refused while the injector is down.
    let without = explain(&c, &yaml);
    assert!(without.iter().all(fail_closed), "{without:?}");
    c.policy = Some(Ok(crate::shared::policy::params::compile(
        &c.engine,
        "/inject",
        &[],
    )
    .unwrap()));
    let with = explain(&c, &yaml);
    assert!(with[0].policy.as_ref().unwrap().injects);
    assert!(!fail_closed(&with[0]), "{:?}", with[0].warnings);
    assert!(
        with[0]
            .policy
            .as_ref()
            .unwrap()
            .reason
            .contains("while the injector is down"),
        "{:?}",
        with[0].policy
    );
    assert!(fail_closed(&with[1]), "{:?}", with[1].warnings);
}

/// `--policy` with a configuration the compiler refuses: explain answers, and says the policy leaves
/// every pod to the webhook and why.
#[test]
fn a_configuration_the_policy_cannot_compile_leaves_every_pod_to_the_webhook() {
    let mut c = ctx("istio-injection=enabled");
    c.policy = Some(Err(
        "templates.sidecar renders through the evaluator".to_string()
    ));
    let items = explain(&c, &deployment(json!({}), json!({})));
    let verdict = items[0].policy.clone().unwrap();
    assert!(!verdict.injects);
    assert!(
        verdict
            .reason
            .starts_with("leaves every pod to the webhook: the configuration is not compiled")
            && verdict.reason.contains("templates.sidecar"),
        "{verdict:?}"
    );
    assert!(items[0].injected, "the webhook still injects it");
}
