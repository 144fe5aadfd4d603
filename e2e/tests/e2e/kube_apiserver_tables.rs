//! Every row of `testdata/explain/routing.tsv` and `injection.tsv` through a real kube-apiserver: the
//! configurations `injector webhook-config` generates (url mode, to a real `injector serve` on the row's
//! injector configuration), the row's Namespace and a `dryRun=All` pod create. The apiserver itself
//! evaluates rules, namespace and object selectors; which entries it called comes from its own audit
//! record (the `mutation.webhook.admission.k8s.io/round_<r>_index_<i>` annotations), whether the pod
//! was injected from its answer. Both must equal the table, which `explain::routing_table` and
//! `explain::injection_table` hold `injector explain` to, row by row: so the apiserver replaces
//! test-support's LabelSelector code as the oracle for routing.
//!
//! A row's namespace `apps` becomes a fresh namespace per row (`r<line>`: nothing in the configurations
//! or in `injectRequired` reads that name), created with the row's labels, so no label is ever changed
//! under the apiserver's namespace cache (a namespace not yet in that cache is read from storage:
//! `GetNamespaceLabels` in k8s.io/apiserver's `webhook/predicates/namespace/matcher.go`). The system namespaces keep their names; where a row changes
//! their labels, the row is retried (a fresh dry run each time) until the apiserver's cache has the new
//! labels, up to 20 s.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::apiserver::{injector_certs, serve_args, CertFiles, Injector, TempDir};
use e2e::cluster::Cluster;
use serde_json::{json, Value};
use test_support::corpus::ConfigFiles;

use crate::explain::{assert_no_failures, pod, record, table, Configs, Row, ENTRY_SUFFIX};
use crate::kube_apiserver::{injected, labels, reviewed, to_url, webhook_config};

/// Namespaces whose name the configurations or `injectRequired` read; the rest are renamed per row.
const SYSTEM: &[&str] = &[
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "local-path-storage",
    "sidecar-injector",
];

/// A control plane, the serving certificates, and the audit log read so far.
struct Bench {
    cluster: Cluster,
    certs: CertFiles,
    audit_offset: u64,
    /// The labels each system namespace has now.
    system_labels: BTreeMap<String, BTreeMap<String, String>>,
    probes: usize,
    rt: tokio::runtime::Runtime,
    _dir: TempDir,
}

impl Bench {
    fn new() -> Bench {
        let cluster = Cluster::up();
        let dir = TempDir::new("apiserver-tables");
        let certs = injector_certs(&dir.path().join("certs"), &["--san", "127.0.0.1"])
            .expect("injector certs");
        let mut system_labels = BTreeMap::new();
        for ns in SYSTEM {
            cluster.namespace(ns, &BTreeMap::new()).unwrap();
            system_labels.insert(ns.to_string(), BTreeMap::new());
        }
        Bench {
            cluster,
            certs,
            audit_offset: 0,
            system_labels,
            probes: 0,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            _dir: dir,
        }
    }

    /// Starts `injector serve` on `cfg`, installs `configurations` (`injector webhook-config` argument
    /// lists, the last one the default revision's) in url mode to it, and waits until the apiserver
    /// calls it: a dry-run pod in a fresh `istio-injection=enabled` namespace reaches this injector.
    fn install(&mut self, cfg: &ConfigFiles, configurations: &[&[&str]]) -> Injector {
        let args = serve_args(&self.certs.cert, &self.certs.key, cfg);
        let injector = Injector::start(&args, &BTreeMap::new()).expect("injector serve starts");
        for flags in configurations {
            let mut mwcs = webhook_config(flags, &self.certs);
            to_url(&mut mwcs, injector.https.port(), |_| {});
            for m in &mwcs {
                self.cluster.apply(m).expect("applying a configuration");
            }
        }
        self.probes += 1;
        let ns = format!("probe-{}", self.probes);
        self.cluster
            .namespace(&ns, &labels(&[("istio-injection", "enabled")]))
            .unwrap();
        let deadline = Instant::now() + e2e::PATIENCE;
        let probe = pod("probe", &ns, &BTreeMap::new(), &BTreeMap::new(), false);
        loop {
            let _ = self.create(&ns, &probe);
            if reviewed(&injector, &ns, "probe") {
                return injector;
            }
            assert!(
                Instant::now() < deadline,
                "the apiserver did not call the new injector within {:?}:\n{}",
                e2e::PATIENCE,
                injector.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A `dryRun=All` create of `pod` in `ns` over HTTPS: the answer's status and object.
    fn create(&self, ns: &str, pod: &Value) -> (u16, Value) {
        let (status, body) = self
            .rt
            .block_on(self.cluster.request(
                "POST",
                &format!("/api/v1/namespaces/{ns}/pods?dryRun=All"),
                Some(pod),
            ))
            .unwrap();
        (status.as_u16(), body)
    }

    /// The namespace a row's pod goes to, created or relabelled as the row says; whether its labels were
    /// changed (the apiserver's namespace cache may then lag).
    fn namespace_for(&mut self, row: &Row) -> (String, bool) {
        let ns = row.get("namespace");
        let want = row.pairs("namespace_labels");
        if !SYSTEM.contains(&ns) {
            let name = format!("r{}", row.line);
            let object = json!({"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": name, "labels": want}});
            let (status, body) = self
                .rt
                .block_on(
                    self.cluster
                        .request("POST", "/api/v1/namespaces", Some(&object)),
                )
                .unwrap();
            assert_eq!(status.as_u16(), 201, "creating namespace {name}: {body}");
            return (name, false);
        }
        if self.system_labels[ns] == want {
            return (ns.to_string(), false);
        }
        let meta = json!({"name": ns, "labels": want});
        // A merge patch replaces only what it names: null out the labels the row does not have.
        let mut patch_labels = serde_json::Map::new();
        for k in self.system_labels[ns].keys() {
            patch_labels.insert(k.clone(), Value::Null);
        }
        for (k, v) in &want {
            patch_labels.insert(k.clone(), json!(v));
        }
        let patch = json!({"metadata": {"labels": patch_labels}});
        self.cluster
            .kubectl(
                &[
                    "patch",
                    "namespace",
                    ns,
                    "--type=merge",
                    "-p",
                    &patch.to_string(),
                ],
                None,
            )
            .unwrap_or_else(|e| panic!("relabelling {meta}: {e:#}"));
        self.system_labels.insert(ns.to_string(), want);
        (ns.to_string(), true)
    }

    /// The entries the apiserver called for the create of pod `name` in `ns` (from its audit event), as
    /// `<configuration>/<entry prefix>`.
    fn called(&mut self, ns: &str, name: &str) -> Result<Vec<String>, String> {
        let events = self
            .cluster
            .audit_since(&mut self.audit_offset)
            .map_err(|e| format!("{e:#}"))?;
        let event = events
            .iter()
            .rev()
            .find(|e| {
                e["stage"] == "ResponseComplete"
                    && e["verb"] == "create"
                    && e["objectRef"]["namespace"] == ns
                    && e["objectRef"]["name"] == name
            })
            .ok_or_else(|| format!("no audit event for the create of {ns}/{name}"))?;
        let mut called: Vec<(String, String)> = event["annotations"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("mutation.webhook.admission.k8s.io/round_"))
            .map(|(k, v)| {
                let record: Value = serde_json::from_str(v.as_str().unwrap_or_default())
                    .unwrap_or_else(|e| panic!("audit annotation {k}: {e}"));
                let entry = record["webhook"].as_str().unwrap_or("?");
                (
                    k.clone(),
                    format!(
                        "{}/{}",
                        record["configuration"].as_str().unwrap_or("?"),
                        entry.strip_suffix(ENTRY_SUFFIX).unwrap_or(entry)
                    ),
                )
            })
            .collect();
        called.sort();
        Ok(called.into_iter().map(|(_, c)| c).collect())
    }

    /// Runs one row: the pod's dry-run create, `webhook <called> injected <yes|no>` as the apiserver
    /// did it. A row whose system namespace was just relabelled is retried until it gives `want` (at most
    /// [`e2e::PATIENCE`]: the apiserver sees the new labels through an informer).
    fn run(&mut self, row: &Row, pod_labels: &BTreeMap<String, String>, want: &str) -> String {
        let (ns, relabelled) = self.namespace_for(row);
        let deadline = Instant::now() + e2e::PATIENCE;
        for attempt in 0.. {
            let name = format!("row-{}-{attempt}", row.line);
            // routing.tsv has neither column: the routing sees labels only.
            let annotations = if row.has("pod_annotations") {
                row.pairs("pod_annotations")
            } else {
                BTreeMap::new()
            };
            let host_network = row.has("host_network") && row.yes("host_network");
            let mut p = pod(&name, &ns, pod_labels, &annotations, host_network);
            // What the ServiceAccount admission plugin sets in a cluster (off here: scripts/cluster.sh).
            p["spec"]["serviceAccountName"] = json!("default");
            let (status, answer) = self.create(&ns, &p);
            let got = if status != 201 {
                format!("HTTP {status}: {answer}")
            } else {
                match self.called(&ns, &name) {
                    Err(e) => e,
                    Ok(called) => {
                        let webhook = match called.as_slice() {
                            [] => "-".to_string(),
                            [one] => one.clone(),
                            more => format!("several: {more:?}"),
                        };
                        format!(
                            "webhook {webhook} injected {}",
                            if injected(&answer) { "yes" } else { "no" }
                        )
                    }
                }
            };
            if got == want || !relabelled || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        unreachable!()
    }
}

/// Rows of a system namespace last, grouped by namespace and labels, so each is relabelled once.
fn order(rows: Vec<&Row>) -> Vec<&Row> {
    let mut rows = rows;
    rows.sort_by_key(|r| {
        let ns = r.get("namespace");
        (
            SYSTEM.contains(&ns),
            ns.to_string(),
            r.get("namespace_labels").to_string(),
            r.line,
        )
    });
    rows
}

/// Runs `row` through the apiserver and records a failure unless it went to `webhook` (`-`: none) and
/// was injected as the row says.
fn check(bench: &mut Bench, row: &Row, webhook: &str, table: &str, failures: &mut Vec<String>) {
    let want = format!(
        "webhook {webhook} injected {}",
        if row.yes("injected") { "yes" } else { "no" }
    );
    let got = bench.run(row, &row.pairs("pod_labels"), &want);
    record(
        failures,
        table,
        row,
        ["table     ", "apiserver "],
        &want,
        &got,
    );
}

fn report(failures: &[String], rows: usize, what: &str) {
    assert_no_failures(
        failures,
        &format!("{rows} rows of {what} disagree with the kube-apiserver"),
    );
}

/// routing.tsv: the default revision, revision `canary` and tag `prod` → canary installed, each row once
/// without and once with the `auto.` entry (one injector, the test base configuration, for all of them).
#[test]
fn routing_table_through_the_apiserver() {
    let rows = table("routing.tsv", 250);
    let mut bench = Bench::new();
    let mut configs = Configs::new();
    let mut failures = Vec::new();
    let mut checked = 0;
    for auto in ["no", "yes"] {
        let cfg = configs.get(
            &json!({"sidecarInjectorWebhook": {"enableNamespacesByDefault": auto == "yes"}}),
            &Value::Null,
        );
        let default: &[&str] = if auto == "yes" {
            &["--enable-namespaces-by-default"]
        } else {
            &[]
        };
        let injector = bench.install(&cfg, &[&["--revision", "canary", "--tag", "prod"], default]);
        let phase: Vec<&Row> = rows
            .iter()
            .filter(|r| r.get("enable_namespaces_by_default") == auto)
            .collect();
        for row in order(phase) {
            let webhook = match (row.get("configuration"), row.get("entry")) {
                ("-", "-") => "-".to_string(),
                (c, e) => format!("{c}/{e}"),
            };
            check(&mut bench, row, &webhook, "routing.tsv", &mut failures);
            checked += 1;
        }
        drop(injector);
    }
    assert_eq!(checked, rows.len());
    report(&failures, rows.len(), "routing.tsv");
}

/// injection.tsv: the default revision's configuration (with `auto.` where the row says so), one
/// injector per distinct injector configuration (policy, selectors).
#[test]
fn injection_table_through_the_apiserver() {
    let rows = table("injection.tsv", 140);
    let mut bench = Bench::new();
    let mut configs = Configs::new();
    let mut groups: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
    for row in &rows {
        let cfg = configs.for_row(row);
        let key = format!(
            "{} {}",
            row.get("enable_namespaces_by_default"),
            cfg.injector_config.display()
        );
        groups.entry(key).or_default().push(row);
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for group in groups.into_values() {
        let cfg = configs.for_row(group[0]);
        let flags: &[&str] = if group[0].yes("enable_namespaces_by_default") {
            &["--enable-namespaces-by-default"]
        } else {
            &[]
        };
        let injector = bench.install(&cfg, &[flags]);
        for row in order(group) {
            let webhook = match row.get("entry") {
                "-" => "-".to_string(),
                e => format!("sidecar-injector/{e}"),
            };
            check(&mut bench, row, &webhook, "injection.tsv", &mut failures);
            checked += 1;
        }
        drop(injector);
    }
    assert_eq!(checked, rows.len());
    report(&failures, rows.len(), "injection.tsv");
}
