//! `injector webhook-config` end to end: the real binary's YAML stream parsed with k8s-openapi types, and
//! which entry the API server calls for every namespace/pod label combination of the routing tables of
//! Istio's charts (`istio-discovery` `templates/mutatingwebhook.yaml`, `revision-tags-mwc.yaml`),
//! evaluated with test-support's own LabelSelector code.

use std::collections::BTreeMap;
use std::process::Command;

use e2e::apiserver::{webhooks_called, TempDir};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use serde_json::Value;
use test_support::process::run_ok;
use test_support::semantic;

/// The injector's namespace in every installation below (both injectors run there).
const OWN: &str = "mesh";

fn run(args: &[&str]) -> std::process::Output {
    Command::new(e2e::bin("injector"))
        .arg("webhook-config")
        .args(args)
        .output()
        .expect("running injector webhook-config")
}

/// The stdout of a successful `injector webhook-config <args>`.
fn stdout(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "webhook-config {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Parses a YAML stream of MutatingWebhookConfigurations, requiring the typed round trip to keep every
/// field (no key the API server would not know).
fn parse(yaml: &str) -> Vec<MutatingWebhookConfiguration> {
    yaml.split("\n---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| {
            let v: Value = serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("YAML: {e}\n{d}"));
            let m: MutatingWebhookConfiguration = serde_json::from_value(v.clone())
                .unwrap_or_else(|e| panic!("not a MutatingWebhookConfiguration: {e}\n{d}"));
            let back = serde_json::to_value(&m).expect("serialises");
            assert!(
                semantic::equal(&back, &v),
                "fields lost in a typed round trip:\n{}",
                semantic::diff(&back, &v, 10)
            );
            m
        })
        .collect()
}

fn webhook_config(args: &[&str]) -> Vec<MutatingWebhookConfiguration> {
    parse(&stdout(args))
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn meta_label<'a>(m: &'a MutatingWebhookConfiguration, key: &str) -> Option<&'a str> {
    m.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// An installation: the configurations of one or more injectors, as the API server holds them.
struct Installed {
    mwcs: Vec<MutatingWebhookConfiguration>,
}

/// The installation's injectors: the default revision (service `inj`) if `default_flags` is given, and
/// the revision `canary` (service `inj-canary`) with `canary_flags`.
fn install(default_flags: Option<&[&str]>, canary_flags: &[&str]) -> Installed {
    let mut mwcs = Vec::new();
    if let Some(extra) = default_flags {
        let mut args = vec!["--service", "inj", "--namespace", OWN];
        args.extend_from_slice(extra);
        mwcs.extend(webhook_config(&args));
    }
    let mut args = vec![
        "--service",
        "inj-canary",
        "--namespace",
        OWN,
        "--revision",
        "canary",
    ];
    args.extend_from_slice(canary_flags);
    mwcs.extend(webhook_config(&args));
    // The API server calls the configurations in name order; names must differ.
    mwcs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let names: Vec<_> = mwcs.iter().map(|m| m.metadata.name.clone()).collect();
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(names, unique, "duplicate configuration names");
    // Every entry calls the injector of its configuration's revision.
    for m in &mwcs {
        let rev = meta_label(m, "istio.io/rev").expect("istio.io/rev label");
        let want = if rev == "default" {
            "inj"
        } else {
            "inj-canary"
        };
        for w in m.webhooks.iter().flatten() {
            let svc = w.client_config.service.as_ref().expect("service");
            assert_eq!(
                (svc.name.as_str(), svc.namespace.as_str()),
                (want, OWN),
                "{:?} {}",
                m.metadata.name,
                w.name
            );
            assert!(w.name.ends_with(".sidecar-injector.istio.io"), "{}", w.name);
        }
    }
    Installed { mwcs }
}

impl Installed {
    /// The entry the API server calls, written as in the tables of Istio's charts:
    /// `<prefix>[(<tag>)]@<revision>`, or `—` when none is. Panics when more than one would be.
    fn route(&self, ns: &str, ns_labels: &[(&str, &str)], pod_labels: &[(&str, &str)]) -> String {
        let (ns_l, pod_l) = (labels(ns_labels), labels(pod_labels));
        let mut called = Vec::new();
        for m in &self.mwcs {
            for w in webhooks_called(m, ns, &ns_l, &pod_l) {
                let prefix = w.name.trim_end_matches(".sidecar-injector.istio.io");
                let tag = meta_label(m, "istio.io/tag")
                    .map(|t| format!("({t})"))
                    .unwrap_or_default();
                let rev = meta_label(m, "istio.io/rev").unwrap_or("?");
                called.push(format!("{prefix}{tag}@{rev}"));
            }
        }
        assert!(
            called.len() <= 1,
            "{ns} {ns_labels:?} / pod {pod_labels:?}: more than one entry called: {called:?}"
        );
        called.pop().unwrap_or_else(|| "—".to_string())
    }
}

const INJ: &str = "istio-injection";
const REV: &str = "istio.io/rev";
const POD: &str = "sidecar.istio.io/inject";

/// A row of the routing table: namespace name, namespace labels, the cell per pod column.
type Row = (&'static str, Vec<(&'static str, &'static str)>, [String; 9]);

/// A configuration summarised: name, `istio.io/rev` and `istio.io/tag` labels, entry prefixes.
type Summary<'a> = (String, Option<&'a str>, Option<&'a str>, Vec<&'a str>);

/// The pod columns of the "Which entry is called" table of Istio's charts.
const COLUMNS: [&[(&str, &str)]; 9] = [
    &[],
    &[(POD, "true")],
    &[(POD, "false")],
    &[(REV, "canary")],
    &[(POD, "true"), (REV, "canary")],
    &[(POD, "false"), (REV, "canary")],
    &[(REV, "default")],
    &[(REV, "prod")],
    &[(POD, "yes")],
];

/// `cell` nine times except `—` where the pod is labelled `sidecar.istio.io/inject=false` (columns 2, 5).
fn same(cell: &str) -> [String; 9] {
    std::array::from_fn(|i| {
        if i == 2 || i == 5 {
            "—".into()
        } else {
            cell.into()
        }
    })
}

fn none() -> [String; 9] {
    std::array::from_fn(|_| "—".into())
}

fn row(cells: [&str; 9]) -> [String; 9] {
    cells.map(String::from)
}

/// Installed: the default revision, a revision `canary` and a tag `prod` pointing at it — the table of
/// Istio's charts, row by row. The one difference: the generated configurations exclude kube-system (and
/// the injector's namespace) outright, where Istio's `object.` and `rev.object.` entries call the webhook
/// and `injectRequired` then refuses the pod.
#[test]
fn routing_table_of_istios_charts() {
    let table: Vec<Row> = vec![
        (
            "apps",
            vec![],
            row([
                "—",
                "object@default",
                "—",
                "rev.object@canary",
                "rev.object@canary",
                "—",
                "rev.object@default",
                "rev.object(prod)@canary",
                "—",
            ]),
        ),
        ("apps", vec![(INJ, "enabled")], same("namespace@default")),
        ("apps", vec![(INJ, "disabled")], none()),
        (
            "apps",
            vec![(REV, "default")],
            same("rev.namespace@default"),
        ),
        ("apps", vec![(REV, "canary")], same("rev.namespace@canary")),
        (
            "apps",
            vec![(REV, "prod")],
            same("rev.namespace(prod)@canary"),
        ),
        (
            "apps",
            vec![(INJ, "enabled"), (REV, "canary")],
            same("namespace@default"),
        ),
        ("apps", vec![(INJ, "disabled"), (REV, "canary")], none()),
        ("apps", vec![(REV, "nosuch")], none()),
        ("kube-system", vec![], none()),
    ];
    let off = install(Some(&[]), &["--tag", "prod"]);
    let on = install(
        Some(&["--enable-namespaces-by-default"]),
        &["--tag", "prod"],
    );
    for (ns, ns_labels, cells) in &table {
        for (col, pod) in COLUMNS.iter().enumerate() {
            assert_eq!(
                off.route(ns, ns_labels, pod),
                cells[col],
                "{ns} {ns_labels:?} / pod {pod:?}"
            );
            // enableNamespacesByDefault changes one cell: an unlabelled pod in an unlabelled namespace.
            let want_on = if *ns == "apps" && ns_labels.is_empty() && col == 0 {
                "auto@default"
            } else {
                cells[col].as_str()
            };
            assert_eq!(
                on.route(ns, ns_labels, pod),
                want_on,
                "enableNamespacesByDefault: {ns} {ns_labels:?} / pod {pod:?}"
            );
        }
    }
    // `auto.` leaves Istio's system namespaces alone; `object.` does not (injectRequired refuses later).
    assert_eq!(on.route("kube-public", &[], &[]), "—");
    assert_eq!(on.route("local-path-storage", &[], &[]), "—");
    assert_eq!(
        on.route("kube-public", &[], &[(POD, "true")]),
        "object@default"
    );
}

/// Who serves the default revision's entries in a scenario: the default revision itself, a tag
/// `default` of canary, or nobody.
#[derive(Clone, Copy, Debug)]
enum DefaultHolder {
    Revision,
    CanaryTag,
    Nobody,
}

/// One installation and what the rules of Istio's charts say it routes.
struct Scenario {
    name: &'static str,
    installed: Installed,
    holder: DefaultHolder,
    auto: bool,
    /// The `istio.io/rev` values served, and by whom (`@canary`, `(prod)@canary`, ...).
    revs: BTreeMap<&'static str, String>,
}

impl Scenario {
    fn new(
        name: &'static str,
        default_flags: Option<&[&str]>,
        canary_flags: &[&'static str],
        auto: bool,
    ) -> Scenario {
        let installed = install(default_flags, canary_flags);
        let tags: Vec<&str> = canary_flags
            .windows(2)
            .filter(|w| w[0] == "--tag")
            .map(|w| w[1])
            .collect();
        let holder = if default_flags.is_some() {
            DefaultHolder::Revision
        } else if tags.contains(&"default") {
            DefaultHolder::CanaryTag
        } else {
            DefaultHolder::Nobody
        };
        let mut revs = BTreeMap::from([("canary", "@canary".to_string())]);
        for t in &tags {
            revs.insert(t, format!("({t})@canary"));
        }
        if let DefaultHolder::Revision = holder {
            revs.insert("default", "@default".to_string());
        }
        Scenario {
            name,
            installed,
            holder,
            auto,
            revs,
        }
    }

    fn holder(&self) -> Option<String> {
        match self.holder {
            DefaultHolder::Revision => Some("@default".into()),
            DefaultHolder::CanaryTag => Some("(default)@canary".into()),
            DefaultHolder::Nobody => None,
        }
    }

    /// The rules of the routing table, written out: the namespace label decides whenever present
    /// (`istio-injection=enabled` beats `istio.io/rev` and means the default revision; `disabled` and
    /// an unknown revision stop everything); a pod `istio.io/rev` counts only in an unlabelled
    /// namespace; pod label `inject=false` always stops the call, `true` opts in from an unlabelled
    /// namespace, other values opt in nowhere; `auto` takes unlabelled pods in unlabelled namespaces
    /// except Istio's system namespaces. Plus this project's exclusion of kube-system and its own namespace.
    fn expected(
        &self,
        ns: &str,
        ns_inj: Option<&str>,
        ns_rev: Option<&str>,
        pod_inj: Option<&str>,
        pod_rev: Option<&str>,
    ) -> String {
        let served = |prefix: &str, by: Option<String>| {
            by.map(|b| format!("{prefix}{b}"))
                .unwrap_or_else(|| "—".into())
        };
        if ns == "kube-system" || ns == OWN || pod_inj == Some("false") {
            return "—".into();
        }
        let rev = |x: &str| self.revs.get(x).cloned();
        match (ns_inj, ns_rev) {
            (Some("enabled"), _) => served("namespace", self.holder()),
            (Some(_), _) => "—".into(),
            (None, Some(x)) => served("rev.namespace", rev(x)),
            (None, None) => match (pod_rev, pod_inj) {
                (Some(x), _) => served("rev.object", rev(x)),
                (None, Some("true")) => served("object", self.holder()),
                (None, None)
                    if self.auto
                        && !["kube-public", "kube-node-lease", "local-path-storage"]
                            .contains(&ns) =>
                {
                    served("auto", self.holder())
                }
                _ => "—".into(),
            },
        }
    }
}

/// Every combination of namespace `istio-injection` (enabled/disabled/absent) and `istio.io/rev`
/// (default/canary/prod/other/absent) with pod `sidecar.istio.io/inject` (true/false/empty/other/absent)
/// and pod `istio.io/rev`, in an ordinary namespace, an Istio system namespace, kube-system and the
/// injector's own, over five installations, routes as the rules of Istio's charts say.
#[test]
fn every_label_combination_routes_as_istio() {
    let scenarios = [
        Scenario::new(
            "default + canary/prod",
            Some(&[]),
            &["--tag", "prod"],
            false,
        ),
        Scenario::new(
            "default (enableNamespacesByDefault) + canary/prod",
            Some(&["--enable-namespaces-by-default"]),
            &["--tag", "prod"],
            true,
        ),
        Scenario::new(
            "canary/prod without a default",
            None,
            &["--tag", "prod"],
            false,
        ),
        Scenario::new(
            "canary/prod,default",
            None,
            &["--tag", "prod", "--tag", "default"],
            false,
        ),
        Scenario::new(
            "canary/prod,default (enableNamespacesByDefault)",
            None,
            &[
                "--tag",
                "prod",
                "--tag",
                "default",
                "--enable-namespaces-by-default",
            ],
            true,
        ),
    ];
    let revs = [
        None,
        Some("default"),
        Some("canary"),
        Some("prod"),
        Some("nosuch"),
    ];
    let injs = [None, Some("enabled"), Some("disabled")];
    let pod_injs = [None, Some("true"), Some("false"), Some(""), Some("yes")];
    let mut checked = 0;
    let mut called = BTreeMap::<&str, usize>::new();
    for s in &scenarios {
        for ns in ["apps", "kube-public", "kube-system", OWN] {
            for ns_inj in injs {
                for ns_rev in revs {
                    for pod_inj in pod_injs {
                        for pod_rev in revs {
                            let mut nl = Vec::new();
                            nl.extend(ns_inj.map(|v| (INJ, v)));
                            nl.extend(ns_rev.map(|v| (REV, v)));
                            let mut pl = Vec::new();
                            pl.extend(pod_inj.map(|v| (POD, v)));
                            pl.extend(pod_rev.map(|v| (REV, v)));
                            let got = s.installed.route(ns, &nl, &pl);
                            let want = s.expected(ns, ns_inj, ns_rev, pod_inj, pod_rev);
                            assert_eq!(got, want, "{}: {ns} {nl:?} / pod {pl:?}", s.name);
                            if got != "—" {
                                *called.entry(s.name).or_default() += 1;
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 5 * 4 * 3 * 5 * 5 * 5);
    // Each installation routes a good share of the combinations somewhere (the table is not all "—").
    for s in &scenarios {
        assert!(
            called.get(s.name).copied().unwrap_or(0) > 50,
            "{}: {called:?}",
            s.name
        );
    }
}

/// The revision and tag configurations: names, labels, entries in Istio's order.
#[test]
fn revision_and_tag_configurations() {
    let c = webhook_config(&["--revision", "canary", "--tag", "prod", "--tag", "default"]);
    let got: Vec<Summary> = c
        .iter()
        .map(|m| {
            (
                m.metadata.name.clone().unwrap_or_default(),
                meta_label(m, "istio.io/rev"),
                meta_label(m, "istio.io/tag"),
                m.webhooks
                    .iter()
                    .flatten()
                    .map(|w| w.name.trim_end_matches(".sidecar-injector.istio.io"))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "sidecar-injector-canary".to_string(),
                Some("canary"),
                None,
                vec!["rev.namespace", "rev.object"]
            ),
            (
                "sidecar-injector-tag-prod".to_string(),
                Some("canary"),
                Some("prod"),
                vec!["rev.namespace", "rev.object"]
            ),
            (
                "sidecar-injector-tag-default".to_string(),
                Some("canary"),
                Some("default"),
                vec!["rev.namespace", "rev.object", "namespace", "object"]
            ),
        ]
    );
    let d = webhook_config(&["--enable-namespaces-by-default"]);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].metadata.name.as_deref(), Some("sidecar-injector"));
    assert_eq!(meta_label(&d[0], "istio.io/rev"), Some("default"));
    assert_eq!(d[0].webhooks.as_ref().map(Vec::len), Some(5));
}

/// `--ca-bundle` goes into every entry, and `injector certs` writes exactly what `webhook-config` prints
/// with its CA; the deployed base is `webhook-config`'s output without one.
#[test]
fn certs_and_deploy_use_the_same_generator() {
    let dir = TempDir::new("mwc-certs");
    let flags = ["--revision", "canary", "--tag", "prod", "--namespace", OWN];
    run_ok(
        Command::new(e2e::bin("injector"))
            .arg("certs")
            .arg("--out-dir")
            .arg(dir.path())
            .args(flags),
        "injector certs",
    );
    let ca = dir.path().join("ca.crt");
    let mut args = flags.to_vec();
    let ca_arg = ca.display().to_string();
    args.extend(["--ca-bundle", &ca_arg]);
    let printed = stdout(&args);
    let written = std::fs::read_to_string(dir.path().join("mutatingwebhookconfiguration.yaml"))
        .expect("certs wrote the configurations");
    assert_eq!(printed, written);
    let pem = std::fs::read(&ca).expect("certs wrote ca.crt");
    let mwcs = parse(&printed);
    assert_eq!(mwcs.len(), 2);
    for w in mwcs.iter().flat_map(|m| m.webhooks.iter().flatten()) {
        assert_eq!(
            w.client_config.ca_bundle.as_ref().map(|b| &b.0),
            Some(&pem),
            "{}",
            w.name
        );
    }

    // deploy/base's configuration is the chart's (scripts/render-deploy.sh), which must be this output
    // without a caBundle; helm_chart.rs checks the chart against the generator for more options.
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/base/mutatingwebhookconfiguration.yaml"
    ))
    .expect("deploy/base/mutatingwebhookconfiguration.yaml");
    let got = test_support::pods::documents(&base).expect("deploy's YAML");
    let want = test_support::pods::documents(&stdout(&[])).expect("webhook-config's YAML");
    assert_eq!(
        got,
        want,
        "deploy/base/mutatingwebhookconfiguration.yaml is not `injector webhook-config`'s output: {}",
        semantic::compare_documents(&got, &want).err().unwrap_or_default()
    );
    assert!(!base.contains("caBundle"));
}

/// Refused combinations exit non-zero naming the flag and value, and print nothing on stdout.
#[test]
fn refused_options_name_flag_and_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["--tag", "default"], "--tag \"default\""),
        (
            &["--revision", "canary", "--tag", "canary"],
            "--tag \"canary\"",
        ),
        (&["--tag", "a", "--tag", "a"], "--tag \"a\" is given twice"),
        (&["--tag", "Prod"], "--tag \"Prod\""),
        (
            &["--revision", "canary", "--enable-namespaces-by-default"],
            "--enable-namespaces-by-default",
        ),
        (
            &["--ca-bundle", "/nonexistent/ca.crt"],
            "/nonexistent/ca.crt",
        ),
        (&["--timeout-seconds", "0"], "--timeout-seconds"),
    ];
    for (args, want) in cases {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed output");
    }
}
