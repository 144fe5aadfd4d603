//! The policy differential (issue 31, item 5): pods created through a real kube-apiserver with the
//! MutatingAdmissionPolicy of `injector policy` and no webhook, with the webhook (`injector serve`,
//! registered by `injector webhook-config`) and no policy, and with both (`--skip-policy-injected`), the
//! stored pods compared after the apiserver's defaulting.
//!
//! Per configuration, one namespace per worker (labelled `istio-injection=enabled`), the configuration's
//! params object, its bindings and its webhook configuration, each restricted to those namespaces; the
//! phase label [`PHASE_LABEL`] routes a pod to the policy (`policy`), the webhook (`webhook`) or both
//! (`both`). For each pod:
//!
//! - **agreement**: the policy injected it (its marker is set) exactly when `injector explain --policy`
//!   (the Rust side of the subset table) says it does;
//! - **exactness**: when it did, the pod is the webhook's, but for the marker;
//! - **untouched**: when it did not, the pod is as created;
//! - **both**: with both installed, every pod is the webhook's, but for the marker.
//!
//! Pods that every phase refuses (invalid on their own) count as `both_refused`. The phase label and the
//! marker annotation are the only parts taken out before comparing; generated names too.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::{json, Value};
use test_support::corpus::Config;
use test_support::pods;

use crate::apiserver::{injector_certs, serve_args, CertFiles, Injector, TempDir};
use crate::cluster::{comparable, Cluster};

/// The extra apiserver flags the policy needs: none, since the pinned 1.36 apiserver serves
/// `admissionregistration.k8s.io/v1` MutatingAdmissionPolicies by default (GA; 1.34 and 1.35 needed
/// `--feature-gates=MutatingAdmissionPolicy=true --runtime-config=admissionregistration.k8s.io/v1beta1=true`
/// and `injector policy --api-version v1beta1`).
pub const APISERVER_ARGS: &str = "";

/// The label that routes a test pod to the policy, the webhook or both.
pub const PHASE_LABEL: &str = "e2e.sidecar-inject.io/phase";
/// The annotation the injection sets (Istio's `sidecar.istio.io/status`).
const STATUS_ANNOTATION: &str = "sidecar.istio.io/status";
/// The annotation the policy sets on the pods it injects.
pub const MARKER: &str = "policy.sidecar-inject.io/injected";

const PHASES: [&str; 3] = ["webhook", "policy", "both"];

/// The counts of a run.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub configs: u64,
    /// Configurations `injector policy` compiled (the others: every pod goes to the webhook).
    pub configs_compiled: u64,
    /// Why the others were not, by message.
    pub configs_refused: BTreeMap<String, u64>,
    pub cases: u64,
    /// Pods the policy injected, equal to the webhook's.
    pub covered: u64,
    /// Pods left to the webhook, by the subset rule explain named.
    pub left: BTreeMap<String, u64>,
    /// Pods every phase refused.
    pub both_refused: u64,
    /// Pods the webhook injected (the policy could inject at most these).
    pub webhook_injected: u64,
    /// Each pod left to the webhook that the webhook injected: `config case: rule`.
    pub left_cases: Vec<String>,
    /// Per pod shape (a corpus input document), whether the webhook injected it under some
    /// configuration, and whether the policy injected it under every configuration the webhook did.
    pub shapes: BTreeMap<String, ShapeOutcome>,
    pub differences: Vec<Difference>,
}

/// What became of one pod shape across the configurations it ran under.
#[derive(Debug, Clone, Copy)]
pub struct ShapeOutcome {
    pub webhook_injected: bool,
    pub policy_injected_all: bool,
}

impl ShapeOutcome {
    fn add(&mut self, other: ShapeOutcome) {
        self.webhook_injected |= other.webhook_injected;
        self.policy_injected_all &= other.policy_injected_all;
    }
}

impl Tally {
    pub fn add(&mut self, other: Tally) {
        self.configs += other.configs;
        self.configs_compiled += other.configs_compiled;
        for (k, v) in other.configs_refused {
            *self.configs_refused.entry(k).or_default() += v;
        }
        self.cases += other.cases;
        self.covered += other.covered;
        for (k, v) in other.left {
            *self.left.entry(k).or_default() += v;
        }
        self.both_refused += other.both_refused;
        self.webhook_injected += other.webhook_injected;
        self.left_cases.extend(other.left_cases);
        for (k, v) in other.shapes {
            match self.shapes.get_mut(&k) {
                Some(s) => s.add(v),
                None => {
                    self.shapes.insert(k, v);
                }
            }
        }
        self.differences.extend(other.differences);
    }

    /// The fraction of the cases the policy injected, in percent.
    pub fn covered_percent(&self) -> f64 {
        if self.cases == 0 {
            0.0
        } else {
            100.0 * self.covered as f64 / self.cases as f64
        }
    }

    /// The fraction of the pods the webhook injected that the policy injected, in percent.
    pub fn covered_of_injected_percent(&self) -> f64 {
        if self.webhook_injected == 0 {
            0.0
        } else {
            100.0 * self.covered as f64 / self.webhook_injected as f64
        }
    }

    /// Pod shapes the webhook injects, and those the policy injects wherever the webhook does.
    pub fn shape_counts(&self) -> (u64, u64) {
        let injected = self.shapes.values().filter(|s| s.webhook_injected);
        let all = injected.clone().count() as u64;
        let covered = injected.filter(|s| s.policy_injected_all).count() as u64;
        (all, covered)
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} configurations ({} compiled), {} cases: {} injected by the policy as the webhook injects them ({:.1} %), \
             {} of the {} the webhook injected ({:.1} %); {} left to the webhook {:?}, {} refused by every phase, \
             {} unexplained differences",
            self.configs,
            self.configs_compiled,
            self.cases,
            self.covered,
            self.covered_percent(),
            self.covered,
            self.webhook_injected,
            self.covered_of_injected_percent(),
            self.left.values().sum::<u64>(),
            self.left,
            self.both_refused,
            self.differences.len()
        )
    }
}

/// One unexplained difference.
#[derive(Debug, Clone)]
pub struct Difference {
    pub config: String,
    pub case: String,
    pub what: String,
    pub detail: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}\n  {}",
            self.config,
            self.case,
            self.what,
            self.detail.replace('\n', "\n  ")
        )
    }
}

/// The control plane with the policy API, and the injector's serving certificate.
pub struct Harness {
    pub cluster: Cluster,
    pub certs: CertFiles,
    pub dir: TempDir,
}

/// A pod to compare, named for reports.
#[derive(Debug, Clone)]
pub struct TestPod {
    pub name: String,
    pub pod: Value,
    /// The corpus input document it came from (`None` for generated pods).
    pub shape: Option<String>,
}

/// One configuration: its files and flags, as both the webhook and `injector policy` take them.
#[derive(Debug, Clone)]
pub struct TestConfig {
    pub name: String,
    pub config: Config,
    pub native: bool,
}

impl Harness {
    /// A control plane serving MutatingAdmissionPolicies, with the params CRD installed.
    pub fn new() -> Result<Harness> {
        let cluster = Cluster::up_with(APISERVER_ARGS);
        let dir = TempDir::new("policy-differential");
        let certs = injector_certs(
            &dir.path().join("certs"),
            &["--san", "127.0.0.1", "--san", "localhost"],
        )?;
        let objects = policy_objects(&[])?;
        install_crd(&cluster, &objects[0])?;
        Ok(Harness {
            cluster,
            certs,
            dir,
        })
    }

    /// Runs `pods` through the three phases under `config`, with `jobs` workers.
    pub fn run(&self, config: &TestConfig, pods: &[TestPod], jobs: usize) -> Result<Tally> {
        let mut tally = Tally {
            configs: 1,
            ..Tally::default()
        };
        let installed = self.install(config, jobs)?;
        match &installed.refused {
            Some(why) => {
                *tally
                    .configs_refused
                    .entry(format!("{}: {why}", config.name))
                    .or_default() += 1
            }
            None => tally.configs_compiled += 1,
        }
        let chunks: Vec<Vec<TestPod>> = (0..jobs)
            .map(|j| pods.iter().skip(j).step_by(jobs).cloned().collect())
            .collect();
        let results: Vec<Result<Tally>> = std::thread::scope(|s| {
            let handles: Vec<_> = chunks
                .into_iter()
                .enumerate()
                .map(|(j, chunk)| {
                    let installed = &installed;
                    s.spawn(move || installed.run_pods(j, &chunk))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow!("a worker panicked")))
                })
                .collect()
        });
        for r in results {
            tally.add(r?);
        }
        tally.configs = 1;
        tally.configs_compiled = u64::from(installed.refused.is_none());
        installed.uninstall()?;
        Ok(tally)
    }

    /// Starts the webhook for `config`, compiles and installs its policy objects and webhook
    /// configuration, and waits until the apiserver uses both.
    fn install(&self, config: &TestConfig, jobs: usize) -> Result<Installed<'_>> {
        let cdir = self.dir.path().join(&config.name);
        let files = config.config.write(&cdir.join("cfg"))?;
        let mut flags = files.args();
        flags.extend(["--native-sidecars".to_string(), config.native.to_string()]);
        let mut args = serve_args(&self.certs.cert, &self.certs.key, &files);
        args.extend(["--native-sidecars".to_string(), config.native.to_string()]);
        let injector = Injector::start(&args, &BTreeMap::new())?;
        let namespaces: Vec<String> = (0..jobs).map(|j| format!("{}-{j}", config.name)).collect();
        for ns in &namespaces {
            self.cluster.namespace(
                ns,
                &BTreeMap::from([("istio-injection".to_string(), "enabled".to_string())]),
            )?;
            self.cluster
                .namespace(&format!("{ns}-plain"), &BTreeMap::new())?;
        }
        let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
        let (objects, refused) = match policy_objects(&flag_refs) {
            Ok(o) => (o, None),
            Err(e) => (Vec::new(), Some(format!("{e:#}"))),
        };
        let mut installed_objects = Vec::new();
        if refused.is_none() {
            for mut o in objects.into_iter().skip(1) {
                restrict(&mut o, &config.name, &namespaces, &["policy", "both"]);
                self.cluster.apply(&o)?;
                // The policy is every configuration's: it stays.
                if o["kind"] != "MutatingAdmissionPolicy" {
                    installed_objects.push(o);
                }
            }
        }
        let mut mwcs = webhook_configurations(&self.certs, injector.https.port())?;
        for m in &mut mwcs {
            restrict(m, &config.name, &namespaces, &["webhook", "both"]);
            self.cluster.apply(m)?;
            installed_objects.push(m.clone());
        }
        let installed = Installed {
            harness: self,
            config: config.clone(),
            flags,
            namespaces,
            objects: installed_objects,
            refused,
            _injector: injector,
        };
        installed.wait_ready()?;
        Ok(installed)
    }
}

/// One configuration installed.
struct Installed<'h> {
    harness: &'h Harness,
    config: TestConfig,
    /// The configuration flags (`--values`, ..., `--native-sidecars`).
    flags: Vec<String>,
    namespaces: Vec<String>,
    objects: Vec<Value>,
    /// Why `injector policy` refused the configuration.
    refused: Option<String>,
    _injector: Injector,
}

/// A hello pod as the readiness probe of the installed objects.
fn probe_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "probe-", "labels": {"app": "probe"}},
        "spec": {"serviceAccountName": "default",
                 "containers": [{"name": "app", "image": "app", "ports": [{"containerPort": 8080}]}]}})
}

impl Installed<'_> {
    fn cluster(&self) -> &Cluster {
        &self.harness.cluster
    }

    /// Waits until a dry-run pod in every namespace shows the webhook (and the policy, when compiled)
    /// in use.
    fn wait_ready(&self) -> Result<()> {
        let rt = runtime()?;
        rt.block_on(async {
            let mut conn = self.cluster().connect().await?;
            for ns in &self.namespaces {
                for phase in PHASES {
                    if phase != "webhook" && self.refused.is_some() {
                        continue;
                    }
                    let mut pod = probe_pod();
                    pod["metadata"]["labels"][PHASE_LABEL] = json!(phase);
                    let deadline = std::time::Instant::now() + crate::PATIENCE;
                    loop {
                        let (status, body) = conn
                            .request(
                                "POST",
                                &format!("/api/v1/namespaces/{ns}/pods?dryRun=All"),
                                Some(&pod),
                            )
                            .await?;
                        let injected = status.is_success() && is_injected(&body);
                        let marked = body["metadata"]["annotations"][MARKER].is_string();
                        let ready = match phase {
                            "webhook" => injected && !marked,
                            _ => injected && marked,
                        };
                        if ready {
                            break;
                        }
                        if std::time::Instant::now() > deadline {
                            bail!("{ns}: phase {phase} not in use: {status} {body}");
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
            Ok(())
        })
    }

    fn uninstall(&self) -> Result<()> {
        for o in self.objects.iter().rev() {
            let resource = match o["kind"].as_str().unwrap_or_default() {
                "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
                "InjectionParams" => "injectionparams",
                "MutatingWebhookConfiguration" => "mutatingwebhookconfigurations",
                other => bail!("no resource known for kind {other}"),
            };
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            self.cluster().kubectl(
                &[
                    "delete",
                    &format!("{resource}.{}", group_of(o)),
                    name,
                    "--wait=false",
                ],
                None,
            )?;
        }
        Ok(())
    }

    /// The phases of `pods` in worker `j`'s namespace.
    fn run_pods(&self, j: usize, pods: &[TestPod]) -> Result<Tally> {
        let ns = &self.namespaces[j];
        let plain = format!("{ns}-plain");
        let rt = runtime()?;
        rt.block_on(async {
            let mut conn = self.cluster().connect().await?;
            // The pods as admission sees them: defaulted by a dry run in an unlabelled namespace.
            let mut admitted = Vec::new();
            for p in pods {
                let (status, body) = conn
                    .request(
                        "POST",
                        &format!("/api/v1/namespaces/{plain}/pods?dryRun=All"),
                        Some(&p.pod),
                    )
                    .await?;
                admitted.push(status.is_success().then(|| as_admitted(&body, ns)));
            }
            let verdicts = if self.refused.is_some() {
                vec![None; pods.len()]
            } else {
                explain_verdicts(&self.flags, &admitted)?
            };
            let mut tally = Tally::default();
            for ((p, admitted), verdict) in pods.iter().zip(&admitted).zip(verdicts) {
                tally.cases += 1;
                let mut stored = BTreeMap::new();
                for phase in PHASES {
                    let mut pod = p.pod.clone();
                    pod["metadata"]["labels"][PHASE_LABEL] = json!(phase);
                    let (status, body) = conn
                        .request("POST", &format!("/api/v1/namespaces/{ns}/pods"), Some(&pod))
                        .await?;
                    let outcome = if status.is_success() {
                        let name = body["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string();
                        let (ds, db) = conn
                            .request(
                                "DELETE",
                                &format!("/api/v1/namespaces/{ns}/pods/{name}"),
                                None,
                            )
                            .await?;
                        if !ds.is_success() {
                            bail!("deleting {ns}/{name}: {ds} {db}");
                        }
                        Ok(body)
                    } else {
                        Err(body["message"].as_str().unwrap_or_default().to_string())
                    };
                    stored.insert(phase, outcome);
                }
                self.compare(p, admitted.as_ref(), verdict, &stored, &mut tally);
            }
            Ok(tally)
        })
    }

    fn compare(
        &self,
        p: &TestPod,
        admitted: Option<&Value>,
        verdict: Option<(bool, String)>,
        stored: &BTreeMap<&str, std::result::Result<Value, String>>,
        tally: &mut Tally,
    ) {
        let mut differ = |what: &str, detail: String| {
            tally.differences.push(Difference {
                config: self.config.name.clone(),
                case: p.name.clone(),
                what: what.to_string(),
                detail,
            })
        };
        let (w, pol, both) = (&stored["webhook"], &stored["policy"], &stored["both"]);
        let marked = pol
            .as_ref()
            .is_ok_and(|v| v["metadata"]["annotations"][MARKER].is_string());
        // Injected by the webhook: stored with the status annotation the pod was created without (a pod
        // already carrying a proxy, or already injected, is not counted).
        let status = |v: &Value| v["metadata"]["annotations"][STATUS_ANNOTATION].is_string();
        let webhook_injected = w.as_ref().is_ok_and(status) && !admitted.is_some_and(status);
        tally.webhook_injected += u64::from(webhook_injected);
        if let Some(shape) = &p.shape {
            let outcome = ShapeOutcome {
                webhook_injected,
                policy_injected_all: marked || !webhook_injected,
            };
            match tally.shapes.get_mut(shape) {
                Some(s) => s.add(outcome),
                None => {
                    tally.shapes.insert(shape.clone(), outcome);
                }
            }
        }
        if let (Err(_), Err(_), Err(_)) = (w, pol, both) {
            tally.both_refused += 1;
            return;
        }
        // Both installed: the webhook's pod (or the same refusal).
        match (w, both) {
            (Ok(a), Ok(b)) => {
                let d = diff(&normal(a), &normal(b));
                if !d.is_empty() {
                    differ("with both installed the pod differs from the webhook's", d);
                }
            }
            (Err(_), Err(_)) => {}
            (a, b) => differ(
                "with both installed the outcome differs from the webhook's",
                format!("webhook: {}\nboth: {}", outcome(a), outcome(b)),
            ),
        }
        let (covers, reason) = verdict.unwrap_or((false, "configuration refused".to_string()));
        if covers != marked {
            differ(
                "explain --policy and the apiserver disagree",
                format!(
                    "explain: policy injects = {covers} ({reason}); the apiserver's policy phase: {}",
                    match pol {
                        Ok(_) => format!("stored, marker {marked}"),
                        Err(e) => format!("refused: {e}"),
                    }
                ),
            );
            return;
        }
        if marked {
            tally.covered += 1;
            match (w, pol) {
                (Ok(a), Ok(b)) => {
                    let d = diff(&normal(a), &normal(b));
                    if !d.is_empty() {
                        differ("the policy's pod differs from the webhook's", d);
                    }
                }
                (a, b) => differ(
                    "the policy stored a pod the webhook refused",
                    format!("webhook: {}\npolicy: {}", outcome(a), outcome(b)),
                ),
            }
        } else {
            *tally.left.entry(rule_of(&reason)).or_default() += 1;
            if webhook_injected {
                tally.left_cases.push(format!(
                    "{} {}: {}",
                    self.config.name,
                    p.name,
                    rule_of(&reason)
                ));
            }
            // Left alone: as created.
            if let (Ok(b), Some(a)) = (pol, admitted) {
                let d = diff(&normal(a), &normal(b));
                if !d.is_empty() {
                    differ("the policy changed a pod it leaves to the webhook", d);
                }
            }
        }
    }
}

fn outcome(r: &std::result::Result<Value, String>) -> String {
    match r {
        Ok(_) => "stored".to_string(),
        Err(e) => format!("refused: {e}"),
    }
}

/// `(rule NAME)` at the end of explain's reason, else the reason.
fn rule_of(reason: &str) -> String {
    reason
        .rsplit_once("(rule ")
        .map(|(_, r)| r.trim_end_matches(')').to_string())
        .unwrap_or_else(|| first_line(reason))
}

fn first_line(s: &str) -> String {
    s.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(160)
        .collect()
}

fn group_of(o: &Value) -> String {
    let api = o["apiVersion"].as_str().unwrap_or_default();
    match api.split_once('/') {
        Some((g, _)) => g.to_string(),
        None => String::new(),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Whether a pod carries the proxy.
pub fn is_injected(pod: &Value) -> bool {
    ["initContainers", "containers"].iter().any(|l| {
        pod["spec"][l]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["name"] == "istio-proxy"))
    })
}

/// A stored pod for comparison: what every stored object differs in, a generated name, the phase
/// label and the policy's marker taken out.
pub fn normal(stored: &Value) -> Value {
    let mut v = comparable(stored);
    let generated = v["metadata"]["generateName"]
        .as_str()
        .is_some_and(|g| !g.is_empty());
    if let Some(m) = v["metadata"].as_object_mut() {
        if generated {
            m.remove("name");
        }
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
    }
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for (key, drop) in [("labels", PHASE_LABEL), ("annotations", MARKER)] {
            if let Some(map) = m.get_mut(key).and_then(Value::as_object_mut) {
                map.remove(drop);
                if map.is_empty() {
                    m.remove(key);
                }
            }
        }
    }
    v
}

/// A dry-run answer as the admission chain saw the pod: in `ns`, without what creation adds.
pub fn as_admitted(answer: &Value, ns: &str) -> Value {
    let mut v = answer.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        for k in [
            "uid",
            "creationTimestamp",
            "managedFields",
            "resourceVersion",
        ] {
            m.remove(k);
        }
        if m.get("generateName")
            .and_then(Value::as_str)
            .is_some_and(|g| !g.is_empty())
        {
            m.remove("name");
        }
        m.insert("namespace".into(), json!(ns));
    }
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
    v
}

/// The paths where two values differ, one per line (at most 20).
pub fn diff(a: &Value, b: &Value) -> String {
    fn walk(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let p = format!("{path}/{k}");
                    match (x.get(k), y.get(k)) {
                        (Some(u), Some(v)) => walk(u, v, &p, out),
                        (u, v) => out.push(format!("{p}: {} | {}", short(u), short(v))),
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (u, v)) in x.iter().zip(y).enumerate() {
                    walk(u, v, &format!("{path}/{i}"), out);
                }
            }
            (Value::Array(x), Value::Array(y)) => {
                // Lists of named items: the names on each side, and the first item that differs.
                let names = |l: &[Value]| -> Vec<String> {
                    l.iter()
                        .map(|i| i["name"].as_str().unwrap_or("?").to_string())
                        .collect()
                };
                let at = x
                    .iter()
                    .zip(y)
                    .position(|(u, v)| u != v)
                    .unwrap_or(x.len().min(y.len()));
                out.push(format!(
                    "{path}: {} items {:?} | {} items {:?}; first difference at {at}: {} | {}",
                    x.len(),
                    names(x),
                    y.len(),
                    names(y),
                    short(x.get(at)),
                    short(y.get(at))
                ));
            }
            _ if a != b => out.push(format!("{path}: {} | {}", short(Some(a)), short(Some(b)))),
            _ => {}
        }
    }
    fn short(v: Option<&Value>) -> String {
        match v {
            None => "(absent)".to_string(),
            Some(v) => v.to_string().chars().take(300).collect(),
        }
    }
    let mut out = Vec::new();
    walk(a, b, "", &mut out);
    out.truncate(20);
    out.join("\n")
}

/// Adds `name In [namespaces]` to every namespace selector and `PHASE_LABEL In [phases]` to every
/// object selector of a binding or webhook configuration, and makes its names (and a binding's params
/// reference) the configuration's own.
pub fn restrict(o: &mut Value, config: &str, namespaces: &[String], phases: &[&str]) {
    let ns_req =
        json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces});
    let phase_req = json!({"key": PHASE_LABEL, "operator": "In", "values": phases});
    let add = |sel: &mut Value, req: &Value| {
        if !sel.is_object() {
            *sel = json!({});
        }
        match sel["matchExpressions"].as_array_mut() {
            Some(a) => a.push(req.clone()),
            None => sel["matchExpressions"] = json!([req]),
        }
    };
    let name = o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    o["metadata"]["name"] = json!(format!("{config}-{name}"));
    match o["kind"].as_str().unwrap_or_default() {
        "MutatingAdmissionPolicyBinding" => {
            let spec = &mut o["spec"];
            spec["paramRef"]["name"] = json!(format!("{config}-params"));
            add(&mut spec["matchResources"]["namespaceSelector"], &ns_req);
            add(&mut spec["matchResources"]["objectSelector"], &phase_req);
            // One policy for every configuration: its text does not depend on one.
            let policy = spec["policyName"].as_str().unwrap_or_default().to_string();
            spec["policyName"] = json!(policy);
        }
        "MutatingWebhookConfiguration" => {
            for w in o["webhooks"].as_array_mut().into_iter().flatten() {
                add(&mut w["namespaceSelector"], &ns_req);
                add(&mut w["objectSelector"], &phase_req);
            }
        }
        "InjectionParams" => {
            o["metadata"]["name"] = json!(format!("{config}-params"));
        }
        "MutatingAdmissionPolicy" => {
            // Shared by every configuration.
            o["metadata"]["name"] = json!(name);
        }
        _ => {}
    }
}

/// Applies the params CRD (`injector policy`'s first object) and waits until it is established, so the
/// params objects after it are accepted.
pub fn install_crd(cluster: &Cluster, crd: &Value) -> Result<()> {
    cluster.apply(crd)?;
    cluster.kubectl(
        &[
            "wait",
            "--for",
            "condition=established",
            "--timeout=120s",
            "crd/injectionparams.policy.sidecar-inject.io",
        ],
        None,
    )?;
    Ok(())
}

/// `injector policy <flags>`'s objects (the CRD first).
pub fn policy_objects(flags: &[&str]) -> Result<Vec<Value>> {
    let out = Command::new(crate::bin("injector"))
        .arg("policy")
        .args(flags)
        .output()
        .context("running injector policy")?;
    if !out.status.success() {
        bail!(
            "injector policy: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let docs = pods::documents(&String::from_utf8(out.stdout)?)?;
    if docs.len() < 4 {
        bail!("injector policy wrote {} objects", docs.len());
    }
    Ok(docs)
}

/// `injector webhook-config --skip-policy-injected --ca-bundle`, in url mode to the injector on `port`.
fn webhook_configurations(certs: &CertFiles, port: u16) -> Result<Vec<Value>> {
    let out = Command::new(crate::bin("injector"))
        .arg("webhook-config")
        .arg("--skip-policy-injected")
        .arg("--ca-bundle")
        .arg(certs.dir.join("ca.crt"))
        .output()
        .context("running injector webhook-config")?;
    if !out.status.success() {
        bail!(
            "injector webhook-config: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut docs = pods::documents(&String::from_utf8(out.stdout)?)?;
    for mwc in &mut docs {
        for wh in mwc["webhooks"].as_array_mut().into_iter().flatten() {
            let cc = &mut wh["clientConfig"];
            let path = cc["service"]["path"]
                .as_str()
                .unwrap_or("/inject")
                .to_string();
            let bundle = cc["caBundle"].clone();
            *cc = json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": bundle});
        }
    }
    Ok(docs)
}

/// `injector explain --policy -o json` of the admitted pods (`None`: refused by the apiserver on their
/// own): per pod, whether the policy injects it and why not.
fn explain_verdicts(
    flags: &[String],
    admitted: &[Option<Value>],
) -> Result<Vec<Option<(bool, String)>>> {
    let docs: Vec<&Value> = admitted.iter().flatten().collect();
    let mut verdicts = vec![None; admitted.len()];
    if docs.is_empty() {
        return Ok(verdicts);
    }
    let stream = docs
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n---\n");
    let mut child = Command::new(crate::bin("injector"))
        .args(["explain", "--policy", "-o", "json", "-f", "-"])
        .args(["--namespace-labels", "istio-injection=enabled"])
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running injector explain")?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow!("explain stdin"))?
        .write_all(stream.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "injector explain --policy: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: Value = serde_json::from_slice(&out.stdout)?;
    let items = v["items"].as_array().cloned().unwrap_or_default();
    if items.len() != docs.len() {
        bail!(
            "injector explain --policy explained {} of {} pods",
            items.len(),
            docs.len()
        );
    }
    let mut items = items.into_iter();
    for (slot, a) in verdicts.iter_mut().zip(admitted) {
        if a.is_some() {
            let item = items.next().unwrap_or(Value::Null);
            let p = &item["policy"];
            *slot = Some((
                p["injects"].as_bool().unwrap_or(false),
                p["reason"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    Ok(verdicts)
}

/// A workload document's pod as a controller creates it (`pods::to_pod`), filled in as a cluster fills
/// it: the owner's uid (the apiserver refuses an empty one) and `serviceAccountName: default` (the
/// ServiceAccount admission plugin, which runs before the policy and the webhook, is off in the test
/// control plane); its own namespace dropped (the test's is used).
pub fn pod_of(doc: &Value) -> Result<Value> {
    let mut pod = pods::to_pod(doc)?;
    if let Some(refs) = pod["metadata"]["ownerReferences"].as_array_mut() {
        for r in refs {
            r["uid"] = json!("00000000-0000-0000-0000-000000000001");
        }
    }
    if pod["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        pod["spec"]["serviceAccountName"] = json!("default");
    }
    if let Some(m) = pod["metadata"].as_object_mut() {
        m.remove("namespace");
        if !m.contains_key("name") && !m.contains_key("generateName") {
            m.insert("generateName".into(), json!("pod-"));
        }
    }
    Ok(pod)
}

/// The pods of a workload stream; `input`, the corpus file it was read from, names their shapes.
pub fn pods_of(stream: &str, name: &str, input: Option<&str>) -> Result<Vec<TestPod>> {
    let docs = pods::injectable_documents(stream)?;
    docs.iter()
        .enumerate()
        .map(|(i, d)| {
            Ok(TestPod {
                name: format!("{name}#{i}"),
                pod: pod_of(d)?,
                shape: input.map(|f| format!("{f}#{i}")),
            })
        })
        .collect()
}

/// The generated cases `from..to` of `seed`: the pods of their workloads, and the configuration of
/// each `per_config`-th case (the pods of the following cases run under it).
pub fn generated(
    seed: u64,
    from: u64,
    to: u64,
    per_config: u64,
) -> Result<Vec<(TestConfig, Vec<TestPod>)>> {
    use crate::inject_differential::generate::{case, Kind};
    let mut out: Vec<(TestConfig, Vec<TestPod>)> = Vec::new();
    for i in from..to {
        let c = case(Kind::Inject, seed, i);
        if (i - from).is_multiple_of(per_config.max(1)) {
            out.push((
                TestConfig {
                    name: format!("s{seed}c{i}"),
                    config: Config::with(&c.values, &c.mesh, &Value::Null)?,
                    native: c.native,
                },
                Vec::new(),
            ));
        }
        if let Some(last) = out.last_mut() {
            last.1
                .extend(pods_of(&c.input, &format!("case {i}"), None)?);
        }
    }
    Ok(out)
}

/// The corpus' cases that run in webhook mode (`testdata/istio/inject/cases*.json`): each case's
/// configuration and the pods of its input.
pub fn corpus() -> Result<Vec<(TestConfig, Vec<TestPod>)>> {
    let mut out = Vec::new();
    let mut cases = test_support::corpus::load_cases()?;
    cases.extend(test_support::corpus::load_template_cases()?);
    for c in cases {
        if !c.runs_in("webhook")
            || c.golden.is_none()
            || !c.env.is_empty()
            || c.namespaces.is_some()
        {
            continue;
        }
        let name: String = c
            .name
            .chars()
            .map(|ch| {
                if ch.is_ascii_alphanumeric() {
                    ch.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect::<String>()
            .trim_matches('-')
            .chars()
            .take(40)
            .collect();
        out.push((
            TestConfig {
                name: format!("k-{name}").trim_end_matches('-').to_string(),
                config: c.config()?,
                native: c.native_sidecars == "true",
            },
            pods_of(&c.input_text()?, &c.name, Some(&c.input))?,
        ));
    }
    Ok(out)
}

/// Writes a tally's report lines.
pub fn report(label: &str, tally: &Tally) -> String {
    let mut out = String::new();
    for d in &tally.differences {
        out.push_str(&format!("{d}\n"));
    }
    out.push_str(&format!("{label}: {tally}\n"));
    if !tally.shapes.is_empty() {
        let (all, covered) = tally.shape_counts();
        out.push_str(&format!(
            "{label}: {} pod shapes, {all} injected by the webhook, {covered} of them by the policy wherever the webhook injects them ({:.1} %)\n",
            tally.shapes.len(),
            if all == 0 { 0.0 } else { 100.0 * covered as f64 / all as f64 }
        ));
    }
    if !tally.configs_refused.is_empty() {
        out.push_str(&format!(
            "{label}: configurations injector policy refuses: {:?}\n",
            tally.configs_refused
        ));
    }
    out
}
