//! `injector explain` against the injection tables of `testdata/explain/` (its README says where each comes
//! from): which MutatingWebhookConfiguration entry the API server calls, as Istio's charts register them
//! (`istio-discovery` `templates/mutatingwebhook.yaml`, `revision-tags-mwc.yaml`; generated here with
//! `injector webhook-config`), and what Istio's `injectRequired` in `inject.go` then decides. Every row runs
//! the built binary on a Pod manifest and its Namespace; disagreeing rows are collected and reported
//! together, each with its input, the expected and the reported answer. The last test checks that explain
//! agrees with the real `injector serve`, reached as the API server would reach it (test-support's own
//! LabelSelector code picks the entry), for every row of the injection table.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use e2e::apiserver::{
    injector_certs, serve_args, webhooks_called, ApiServer, CertFiles, Http, Injector, TempDir,
};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use serde_json::{json, Value};
use test_support::corpus::{Config, ConfigFiles};
use test_support::pods;
use test_support::process::run_ok;

/// Every entry name ends so (Istio's certificate patcher keys on it); the tables name entries by prefix.
pub(crate) const ENTRY_SUFFIX: &str = ".sidecar-injector.istio.io";

/// One row of a table: its line in the file (for messages) and its cells by column name.
pub(crate) struct Row {
    pub(crate) line: usize,
    cells: BTreeMap<String, String>,
}

impl Row {
    pub(crate) fn get(&self, column: &str) -> &str {
        self.cells
            .get(column)
            .unwrap_or_else(|| panic!("line {}: no column {column}", self.line))
    }

    /// Whether the table has `column`.
    pub(crate) fn has(&self, column: &str) -> bool {
        self.cells.contains_key(column)
    }

    pub(crate) fn yes(&self, column: &str) -> bool {
        match self.get(column) {
            "yes" => true,
            "no" => false,
            other => panic!("line {}: {column} is {other:?}, not yes/no", self.line),
        }
    }

    pub(crate) fn pairs(&self, column: &str) -> BTreeMap<String, String> {
        let cell = self.get(column);
        if cell == "-" {
            return BTreeMap::new();
        }
        cell.split(',')
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or_else(|| {
                    panic!("line {}: {column}: {p:?} is not key=value", self.line)
                });
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    /// A selector cell as the injector configuration's list: `k=v` is matchLabels, a bare `k` is Exists.
    fn selectors(&self, column: &str) -> Value {
        match self.get(column) {
            "-" => json!([]),
            cell => match cell.split_once('=') {
                Some((k, v)) => json!([{ "matchLabels": { k: v } }]),
                None => json!([{ "matchExpressions": [{"key": cell, "operator": "Exists"}] }]),
            },
        }
    }

    /// The row as written, for failure messages.
    pub(crate) fn input(&self) -> String {
        self.cells
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The rows of `testdata/explain/<name>`, at least `min` of them.
pub(crate) fn table(name: &str, min: usize) -> Vec<Row> {
    let path = repo_dir().join("testdata/explain").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut lines = text.lines().enumerate();
    let (_, header) = lines.next().unwrap_or_else(|| panic!("{name} is empty"));
    let header: Vec<&str> = header.split('\t').collect();
    let rows: Vec<Row> = lines
        .filter(|(_, l)| !l.is_empty())
        .map(|(i, l)| {
            let cells: Vec<&str> = l.split('\t').collect();
            assert_eq!(
                cells.len(),
                header.len(),
                "{name}:{}: {} cells, {} columns",
                i + 1,
                cells.len(),
                header.len()
            );
            Row {
                line: i + 1,
                cells: header
                    .iter()
                    .zip(cells)
                    .map(|(h, c)| (h.to_string(), c.to_string()))
                    .collect(),
            }
        })
        .collect();
    assert!(rows.len() >= min, "{name}: {} rows, want {min}", rows.len());
    rows
}

/// A Pod as a controller would create it, with the row's labels, annotations and hostNetwork.
pub(crate) fn pod(
    name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    host_network: bool,
) -> Value {
    let mut metadata = json!({"name": name, "namespace": namespace});
    if !labels.is_empty() {
        metadata["labels"] = json!(labels);
    }
    if !annotations.is_empty() {
        metadata["annotations"] = json!(annotations);
    }
    let mut spec = json!({"containers": [{"name": "app", "image": "registry.example/app:1",
                                          "ports": [{"containerPort": 8080}]}]});
    if host_network {
        spec["hostNetwork"] = json!(true);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// The Namespace objects of a `--namespaces` file (a `v1 List`, as `kubectl get ns -o yaml` prints it).
fn namespaces(name: &str, labels: &BTreeMap<String, String>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    ]})
}

/// The stdout of a successful `injector webhook-config <args>`.
fn webhook_config(args: &[&str]) -> String {
    let out = run_ok(
        Command::new(e2e::bin("injector"))
            .arg("webhook-config")
            .args(args),
        &format!("injector webhook-config {args:?}"),
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Injector configuration files (the test base with `values` and `config` overrides), written once each.
pub(crate) struct Configs {
    dir: TempDir,
    written: BTreeMap<String, ConfigFiles>,
}

impl Configs {
    pub(crate) fn new() -> Configs {
        Configs {
            dir: TempDir::new("explain-cfg"),
            written: BTreeMap::new(),
        }
    }

    pub(crate) fn get(&mut self, values: &Value, config: &Value) -> ConfigFiles {
        let key = json!([values, config]).to_string();
        let n = self.written.len();
        let dir = self.dir.path().join(format!("cfg{n}"));
        self.written
            .entry(key)
            .or_insert_with(|| {
                Config::with(values, &Value::Null, config)
                    .and_then(|c| c.write(&dir))
                    .expect("config files")
            })
            .clone()
    }

    /// The configuration of an injection-table row: its policy, selectors and enableNamespacesByDefault.
    pub(crate) fn for_row(&mut self, row: &Row) -> ConfigFiles {
        let values = json!({"sidecarInjectorWebhook":
            {"enableNamespacesByDefault": row.yes("enable_namespaces_by_default")}});
        let config = json!({
            "policy": row.get("policy"),
            "neverInjectSelector": row.selectors("never_inject_selector"),
            "alwaysInjectSelector": row.selectors("always_inject_selector"),
        });
        self.get(&values, &config)
    }
}

/// What one explain run is given: a pod, its Namespace, the webhook configuration file (`None`: explain's
/// default, what `injector webhook-config` generates) and the injector configuration.
struct Input<'a> {
    pod: Value,
    namespaces: Value,
    webhook_config: Option<&'a Path>,
    cfg: ConfigFiles,
}

/// Runs `injector explain -o json` on the input (files written to `dir`) and returns its one item, or why
/// not.
fn explain(dir: &Path, input: &Input) -> Result<Value, String> {
    let Input {
        pod,
        namespaces,
        webhook_config,
        cfg,
    } = input;
    let pod_file = dir.join("pod.yaml");
    let ns_file = dir.join("namespaces.yaml");
    // JSON is YAML, and quotes every string (`yes`, `on` and empty values stay strings for any reader).
    std::fs::write(&pod_file, serde_json::to_string_pretty(pod).unwrap()).unwrap();
    std::fs::write(&ns_file, serde_json::to_string_pretty(namespaces).unwrap()).unwrap();
    let mut cmd = Command::new(e2e::bin("injector"));
    cmd.arg("explain")
        .arg("-f")
        .arg(&pod_file)
        .arg("--namespaces")
        .arg(&ns_file)
        .args(cfg.args())
        .args(["-o", "json"])
        // The flags' environment fallbacks would change the answer.
        .env_remove("REVISION")
        .env_remove("ENABLE_NATIVE_SIDECARS")
        .env_remove("PLATFORM")
        .env_remove("COMPLIANCE_POLICY");
    if let Some(w) = webhook_config {
        cmd.arg("--webhook-config").arg(w);
    }
    let out = cmd.output().map_err(|e| format!("running explain: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("explain exited with {}: {stderr}", out.status));
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "explain -o json printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    match v["items"].as_array().map(Vec::as_slice) {
        Some([item]) => Ok(item.clone()),
        _ => Err(format!("want exactly one item: {v}")),
    }
}

/// explain's answer in the tables' terms: `webhook <configuration>/<entry prefix> injected <yes|no> step
/// <step>` (`-` for no webhook and no decision), or the schema rule it breaks.
fn answer(item: &Value, namespace: &str) -> String {
    if item["kind"] != json!("Pod") || item["namespace"] != json!(namespace) {
        return format!(
            "item kind {} namespace {}, want Pod {namespace}",
            item["kind"], item["namespace"]
        );
    }
    let webhook = match &item["webhook"] {
        Value::Null => "-".to_string(),
        w => {
            let entry = w["entry"].as_str().unwrap_or("?");
            format!(
                "{}/{}",
                w["configuration"].as_str().unwrap_or("?"),
                entry.strip_suffix(ENTRY_SUFFIX).unwrap_or(entry)
            )
        }
    };
    let Some(injected) = item["injected"].as_bool() else {
        return format!("injected is {}, not a bool", item["injected"]);
    };
    let decision = &item["decision"];
    let step = match decision {
        Value::Null => "-".to_string(),
        d => d["step"].as_str().unwrap_or("?").to_string(),
    };
    // The schema's own rules: a decision exactly when a webhook is called; injected = called and inject.
    if item["webhook"].is_null() != decision.is_null() {
        return format!("webhook {webhook} but decision {decision}");
    }
    if item["webhook"].is_null() && item["webhook_reason"].as_str().is_none_or(str::is_empty) {
        return format!("no webhook and no webhook_reason: {item}");
    }
    if !decision.is_null() {
        if decision["inject"].as_bool() != Some(injected) {
            return format!("injected {injected} but decision {decision}");
        }
        if decision["reason"].as_str().is_none_or(str::is_empty) {
            return format!("decision without a reason: {decision}");
        }
    }
    summary(&webhook, injected, &step)
}

fn summary(webhook: &str, injected: bool, step: &str) -> String {
    let injected = if injected { "yes" } else { "no" };
    format!("webhook {webhook} injected {injected} step {step}")
}

/// Runs one row and records a disagreement (input, expected, got) in `failures`.
fn check(failures: &mut Vec<String>, what: &str, row: &Row, dir: &Path, input: &Input, want: &str) {
    let namespace = input.pod["metadata"]["namespace"].as_str().unwrap();
    let got = match explain(dir, input) {
        Ok(item) => answer(&item, namespace),
        Err(e) => e,
    };
    record(failures, what, row, ["want", "got "], want, &got);
}

/// Records in `failures` that `row` of `table` gave `got` where `want` was expected, unless they agree;
/// `sides` names the two in the message.
pub(crate) fn record(
    failures: &mut Vec<String>,
    table: &str,
    row: &Row,
    sides: [&str; 2],
    want: &str,
    got: &str,
) {
    if got != want {
        let [want_side, got_side] = sides;
        failures.push(format!(
            "{table} line {}: {}\n    {want_side} {want}\n    {got_side} {got}",
            row.line,
            row.input()
        ));
    }
}

fn report(failures: &[String], rows: usize, table: &str) {
    assert_no_failures(failures, &format!("{rows} checks of {table} disagree"));
}

/// Fails with every failure listed, headed "<count> of <of>:", unless there is none.
pub(crate) fn assert_no_failures(failures: &[String], of: &str) {
    assert!(
        failures.is_empty(),
        "{} of {of}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A YAML stream of MutatingWebhookConfigurations.
fn parse_configurations(yaml: &str) -> Vec<MutatingWebhookConfiguration> {
    yaml.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("YAML: {e}\n{d}")))
        .collect()
}

/// `<configuration>/<entry prefix>` of the one entry the API server calls, `-` for none.
fn routed(
    configurations: &[MutatingWebhookConfiguration],
    namespace: &str,
    namespace_labels: &BTreeMap<String, String>,
    pod_labels: &BTreeMap<String, String>,
) -> String {
    let called: Vec<String> = configurations
        .iter()
        .flat_map(|c| {
            webhooks_called(c, namespace, namespace_labels, pod_labels)
                .into_iter()
                .map(|w| {
                    let entry = w.name.strip_suffix(ENTRY_SUFFIX).unwrap_or(&w.name);
                    format!("{}/{entry}", c.metadata.name.as_deref().unwrap_or("?"))
                })
        })
        .collect();
    match called.as_slice() {
        [] => "-".to_string(),
        [one] => one.clone(),
        more => format!("several: {more:?}"),
    }
}

/// Which entry is called with the default revision, revision `canary` and tag `prod` → canary installed,
/// and what the pod's decision then is. For rows routed to `canary`'s configuration, `canary`'s own
/// istiod would decide with its own configuration: explain is given one injector configuration (the test
/// base, policy enabled) and decides with it, so those rows expect that configuration's decision.
#[test]
fn routing_table() {
    let rows = table("routing.tsv", 250);
    let dir = TempDir::new("explain-routing");
    let canary = webhook_config(&["--revision", "canary", "--tag", "prod"]);
    let mut mwc = BTreeMap::new();
    for (auto, flags) in [
        ("no", &[][..]),
        ("yes", &["--enable-namespaces-by-default"][..]),
    ] {
        let path = dir.path().join(format!("mwc-{auto}.yaml"));
        let text = format!("{}---\n{canary}", webhook_config(flags));
        std::fs::write(&path, &text).unwrap();
        mwc.insert(auto, (path, parse_configurations(&text)));
    }
    let mut configs = Configs::new();
    let mut failures = Vec::new();
    for row in &rows {
        let auto = row.get("enable_namespaces_by_default");
        // The transcription against the API server's routing (test-support's LabelSelector code).
        let routed = routed(
            &mwc[auto].1,
            row.get("namespace"),
            &row.pairs("namespace_labels"),
            &row.pairs("pod_labels"),
        );
        let table_says = match (row.get("configuration"), row.get("entry")) {
            ("-", "-") => "-".to_string(),
            (c, e) => format!("{c}/{e}"),
        };
        let sides = ["table     ", "selectors "];
        record(
            &mut failures,
            "routing.tsv",
            row,
            sides,
            &table_says,
            &routed,
        );
        let cfg = configs.get(
            &json!({"sidecarInjectorWebhook": {"enableNamespacesByDefault": auto == "yes"}}),
            &Value::Null,
        );
        let ns = row.get("namespace");
        let pod = pod(
            &format!("row-{}", row.line),
            ns,
            &row.pairs("pod_labels"),
            &BTreeMap::new(),
            false,
        );
        let webhook = match (row.get("configuration"), row.get("entry")) {
            ("-", "-") => "-".to_string(),
            (c, e) => format!("{c}/{e}"),
        };
        let want = summary(&webhook, row.yes("injected"), row.get("step"));
        let input = Input {
            pod,
            namespaces: namespaces(ns, &row.pairs("namespace_labels")),
            webhook_config: Some(&mwc[auto].0),
            cfg,
        };
        check(&mut failures, "routing.tsv", row, dir.path(), &input, &want);
    }
    report(&failures, rows.len(), "routing.tsv");
}

/// The injection table of the default revision: each row once with the configuration `injector
/// webhook-config` generates given as `--webhook-config`, and once with explain's default configuration
/// (enableNamespacesByDefault then comes from `--values`); both must give the table's answer.
#[test]
fn injection_table() {
    let rows = table("injection.tsv", 140);
    let dir = TempDir::new("explain-injection");
    let mut mwc = BTreeMap::new();
    for (auto, flags) in [
        ("no", &[][..]),
        ("yes", &["--enable-namespaces-by-default"][..]),
    ] {
        let path = dir.path().join(format!("mwc-{auto}.yaml"));
        std::fs::write(&path, webhook_config(flags)).unwrap();
        mwc.insert(auto, path);
    }
    let mut configs = Configs::new();
    let mut failures = Vec::new();
    for row in &rows {
        let cfg = configs.for_row(row);
        let ns = row.get("namespace");
        let pod = pod(
            &format!("row-{}", row.line),
            ns,
            &row.pairs("pod_labels"),
            &row.pairs("pod_annotations"),
            row.yes("host_network"),
        );
        let webhook = match row.get("entry") {
            "-" => "-".to_string(),
            e => format!("sidecar-injector/{e}"),
        };
        let want = summary(&webhook, row.yes("injected"), row.get("step"));
        let given = &mwc[row.get("enable_namespaces_by_default")];
        for (what, webhook_config) in [
            ("injection.tsv --webhook-config", Some(given.as_path())),
            ("injection.tsv default webhook configuration", None),
        ] {
            let input = Input {
                pod: pod.clone(),
                namespaces: namespaces(ns, &row.pairs("namespace_labels")),
                webhook_config,
                cfg: cfg.clone(),
            };
            check(&mut failures, what, row, dir.path(), &input, &want);
        }
    }
    report(&failures, 2 * rows.len(), "injection.tsv");
}

/// A configuration whose one entry has no selectors, so the API server calls it for every pod (an absent
/// selector defaults to `{}`, which selects everything).
const ALWAYS_CALLED: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: always
webhooks:
- name: always.sidecar-injector.istio.io
  admissionReviewVersions: [v1]
  clientConfig:
    service: {name: sidecar-injector, namespace: sidecar-injector, path: /inject, port: 443}
  rules:
  - {operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [pods]}
  sideEffects: None
  failurePolicy: Fail
";

/// Istio's `TestInjectRequired` rows: every pod reaches the decision, whose step and verdict must match.
#[test]
fn inject_required_table() {
    let rows = table("inject_required.tsv", 24);
    let dir = TempDir::new("explain-required");
    let mwc = dir.path().join("always.yaml");
    std::fs::write(&mwc, ALWAYS_CALLED).unwrap();
    let mut configs = Configs::new();
    let mut failures = Vec::new();
    for row in &rows {
        let config = json!({
            "policy": row.get("policy"),
            "neverInjectSelector": row.selectors("never_inject_selector"),
            "alwaysInjectSelector": row.selectors("always_inject_selector"),
        });
        let cfg = configs.get(&Value::Null, &config);
        let pod = pod(
            &format!("row-{}", row.line),
            "default",
            &row.pairs("pod_labels"),
            &row.pairs("pod_annotations"),
            false,
        );
        let want = summary("always/always", row.yes("injected"), row.get("step"));
        let input = Input {
            pod,
            namespaces: namespaces("default", &BTreeMap::new()),
            webhook_config: Some(&mwc),
            cfg,
        };
        check(
            &mut failures,
            "inject_required.tsv",
            row,
            dir.path(),
            &input,
            &want,
        );
    }
    report(&failures, rows.len(), "inject_required.tsv");
}

/// The classic eight rows through explain's default webhook configuration: only `injected` is the
/// table's (the classic table says nothing about entries or steps).
#[test]
fn classic_table() {
    let rows = table("classic.tsv", 13);
    let dir = TempDir::new("explain-classic");
    let mut configs = Configs::new();
    let mut failures = Vec::new();
    for row in &rows {
        let cfg = configs.get(&Value::Null, &json!({"policy": row.get("policy")}));
        let pod = pod(
            &format!("row-{}", row.line),
            "apps",
            &row.pairs("pod_labels"),
            &row.pairs("pod_annotations"),
            false,
        );
        let input = Input {
            pod,
            namespaces: namespaces("apps", &row.pairs("namespace_labels")),
            webhook_config: None,
            cfg,
        };
        let got = match explain(dir.path(), &input) {
            Ok(item) => match item["injected"].as_bool() {
                Some(b) => format!("injected {b}"),
                None => format!("injected is {}", item["injected"]),
            },
            Err(e) => e,
        };
        let want = format!("injected {}", row.yes("injected"));
        if got != want {
            failures.push(format!(
                "classic.tsv line {} (classic row {}): {}\n    want {want}\n    got  {got}",
                row.line,
                row.get("classic"),
                row.input()
            ));
        }
    }
    report(&failures, rows.len(), "classic.tsv");
}

/// explain agrees with the real webhook on every row of the injection table: the API-server-like client
/// picks the entries of the configuration `injector certs` wrote with test-support's LabelSelector code,
/// sends the pod to the real `injector serve` when one matches, and the patch says whether it was
/// injected; explain is given the same configuration file and injector configuration. Each is also held
/// to the table, so a wrong transcription shows up against the real webhook too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_agrees_with_the_webhook() {
    let rows = table("injection.tsv", 140);
    let dir = TempDir::new("explain-agree");
    let certs: BTreeMap<&str, CertFiles> = [
        ("no", &[][..]),
        ("yes", &["--enable-namespaces-by-default"][..]),
    ]
    .into_iter()
    .map(|(auto, flags)| {
        let args = [&["--san", "localhost", "--san", "127.0.0.1"][..], flags].concat();
        let c = injector_certs(&dir.path().join(format!("certs-{auto}")), &args)
            .expect("injector certs");
        (auto, c)
    })
    .collect();
    let mut configs = Configs::new();
    // One server per injector configuration, the rows in table order within it.
    let mut groups: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
    for row in &rows {
        let cfg = configs.for_row(row);
        groups
            .entry(cfg.injector_config.display().to_string())
            .or_default()
            .push(row);
    }
    let mut failures = Vec::new();
    let mut called = 0;
    for group in groups.values() {
        let auto = group[0].get("enable_namespaces_by_default");
        let c = &certs[auto];
        let cfg = configs.for_row(group[0]);
        let args = serve_args(&c.cert, &c.key, &cfg);
        let server = Injector::start(&args, &BTreeMap::new()).expect("injector serve starts");
        let api = ApiServer::new(&c.mwc, server.https).expect("api server client");
        let mwc_file = c.dir.join("mutatingwebhookconfiguration.yaml");
        for row in group {
            let ns = row.get("namespace");
            let pod_labels = row.pairs("pod_labels");
            let ns_labels = row.pairs("namespace_labels");
            let pod = pod(
                &format!("row-{}", row.line),
                ns,
                &pod_labels,
                &row.pairs("pod_annotations"),
                row.yes("host_network"),
            );
            let entries = webhooks_called(&c.mwc, ns, &ns_labels, &pod_labels);
            let (entry, injected) = match entries.as_slice() {
                [] => ("-".to_string(), false),
                [wh] => {
                    called += 1;
                    let mut conn = api.connect(Http::H1).await.unwrap();
                    let review = pods::review(
                        "v1",
                        &format!("row-{}", row.line),
                        ns,
                        &pods::as_typed_pod(pod.clone()),
                    );
                    let a = api.review(&mut conn, &review).await.unwrap();
                    assert_eq!(
                        a["response"]["allowed"],
                        json!(true),
                        "line {}: {a}",
                        row.line
                    );
                    let name = wh.name.strip_suffix(ENTRY_SUFFIX).unwrap_or(&wh.name);
                    (name.to_string(), a["response"].get("patch").is_some())
                }
                more => panic!(
                    "line {}: {} entries called at once: {:?}",
                    row.line,
                    more.len(),
                    more.iter().map(|w| &w.name).collect::<Vec<_>>()
                ),
            };
            let webhook = if entry == "-" {
                "-".to_string()
            } else {
                format!("{}/{entry}", c.mwc.metadata.name.as_deref().unwrap_or("?"))
            };
            let served = format!(
                "webhook {webhook} injected {}",
                if injected { "yes" } else { "no" }
            );
            let table_says = format!(
                "webhook {} injected {}",
                match row.get("entry") {
                    "-" => "-".to_string(),
                    e => format!("sidecar-injector/{e}"),
                },
                row.get("injected")
            );
            if served != table_says {
                failures.push(format!(
                    "line {}: {}\n    table   {table_says}\n    webhook {served}",
                    row.line,
                    row.input()
                ));
            }
            let input = Input {
                pod,
                namespaces: namespaces(ns, &ns_labels),
                webhook_config: Some(&mwc_file),
                cfg: cfg.clone(),
            };
            let explained = match explain(dir.path(), &input) {
                Ok(item) => {
                    let a = answer(&item, ns);
                    // Drop the step: the webhook does not report one.
                    a.rsplit_once(" step ")
                        .map_or(a.clone(), |(head, _)| head.to_string())
                }
                Err(e) => e,
            };
            if explained != served {
                failures.push(format!(
                    "line {}: {}\n    webhook {served}\n    explain {explained}",
                    row.line,
                    row.input()
                ));
            }
        }
        drop(server);
    }
    // The sample reaches the server for most rows, so agreement on "injected" is not only agreement on "not called".
    assert!(called >= 90, "only {called} rows reached the webhook");
    report(
        &failures,
        2 * rows.len(),
        "injection.tsv against the webhook",
    );
}
