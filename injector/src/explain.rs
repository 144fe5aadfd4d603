//! `injector explain`: why each workload of a manifest would or would not be injected by the webhook,
//! what it would get, and where its connections would go — offline, through the code that decides in
//! the cluster. Every stage calls the code the webhook, kube-inject and iptables-init run:
//!
//! - **manifests**: kube-inject's stream walk and pod-template extraction (`kube_inject::visit_stream`,
//!   `kube_inject::pod_template`), with the same document errors;
//! - **webhook**: the API server's routing of a Pod CREATE over the MutatingWebhookConfigurations
//!   (`--webhook-config`, default: what `injector webhook-config` generates for the same `--revision`
//!   and `enableNamespacesByDefault` of `--values`), with `decision`'s label selectors (`webhook`);
//! - **decision**: the engine's webhook-mode decision (Istio's `injectRequired` with the configuration's
//!   policy and never/always selectors), the deciding [`Step`] marked;
//! - **result**: the engine's webhook-mode injection (the configuration's `defaultTemplates` and
//!   `aliases`, the pod's `inject.istio.io/templates`), its templates and its `istio-init` (or, with
//!   CNI, `istio-validation`) arguments, and the warnings of `warnings`;
//! - **traffic**: each `--connection` walked through the rule model of those arguments by
//!   iptables-init's library (`traffic`).
//!
//! `-o json` prints one object `{"items": [Item, ...]}`, one item per workload (a `List`'s items
//! included) in input order:
//!
//! | field | type | meaning |
//! | --- | --- | --- |
//! | `document` | number | the document's index in the stream, from 0 |
//! | `kind`, `name`, `namespace` | string | the workload; `namespace` defaults to `default` |
//! | `webhook` | `null` or `{"configuration", "entry"}` | the first webhook entry the API server calls |
//! | `webhook_reason` | string | why that entry is called, or per entry (`; `-separated) the requirement that failed |
//! | `injected` | bool | a webhook is called **and** the decision injects **and** injection succeeds |
//! | `decision` | `null` or `{"step", "inject", "reason"}` | `null` when no webhook is called; `step` is one of `host-network`, `ignored-namespace`, `label`, `annotation`, `never-selector`, `always-selector`, `policy`, `invalid-policy` |
//! | `templates` | list of strings | the templates applied (empty when not injected) |
//! | `warnings` | list of strings | see `warnings` |
//! | `init_args` | list of strings or `null` | the args of the injected `istio-init` (`istio-validation` with CNI), leading `istio-iptables` included |
//! | `connections` | list of `{"spec", "verdict", "port", "table", "chain", "rule", "address"}` | one per `--connection`, as `iptables-init explain` prints them |
//!
//! Exit status 0 when every document was explained (injected or not); a bad manifest, flag, file or
//! connection spec is an error naming the document (or flag), the field and the value.

mod traffic;
mod warnings;
mod webhook;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::cluster_state::{ClusterState, PlatformArgs, ProxyConfigArgs};
use crate::config::{ConfigArgs, ConfigError, Settings};
use crate::decision::{Decision, LabelSelector, Step};
use crate::doctor::{self, DoctorError, Output};
use crate::engine::{Engine, InjectRequest, Mode};
use crate::kube_inject::{self, DocumentError, KubeInjectError, Position, StreamVisitor};
use crate::kube_objects::{self, ObjectsError};
use crate::pod::{self, INJECT_KEY};
use crate::webhook_config;
use crate::workload::{self, Workload};

use webhook::{Entry, EntryError, Routing};

/// The label the API server sets on every namespace, holding its name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// `injector explain` arguments. The injector configuration flags are kube-inject's (and serve's):
/// one definition, flattened here.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input manifest file, `-` for stdin (any stream kube-inject takes).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filename: String,
    /// Labels of every workload's namespace, `k=v,...` (over those of the namespace in `--namespaces`;
    /// `kubernetes.io/metadata.name` is implied).
    #[arg(long, value_name = "K=V,...")]
    pub namespace_labels: Option<String>,
    /// The MutatingWebhookConfigurations the API server holds (`kubectl get
    /// mutatingwebhookconfigurations -o yaml`: a YAML stream or a List); default: what `injector
    /// webhook-config` generates for `--revision` (with `auto.` when the values'
    /// `sidecarInjectorWebhook.enableNamespacesByDefault` is true).
    #[arg(long, value_name = "FILE")]
    pub webhook_config: Option<PathBuf>,
    /// A connection to walk through the pod's interception rules (repeatable):
    /// `outbound|inbound:tcp|udp:[ADDRESS:]PORT[,uid=N][,gid=N][,iface=NAME]`, as `iptables-init
    /// explain` takes it.
    #[arg(long = "connection", value_name = "SPEC")]
    pub connections: Vec<String>,
    /// Output format: text, or one JSON object `{"items": [...]}` for tools.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub cluster: ProxyConfigArgs,
    /// `--platform` and `--namespaces` (Namespace objects: their labels route the webhook, and on
    /// OpenShift their annotations give the proxy's uid).
    #[command(flatten)]
    pub platform: PlatformArgs,
}

/// Why explain could not run; each names the flag or document, the field and the value.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The manifest could not be read.
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// The injector configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `--proxy-configs` or `--namespaces` holds an unusable object.
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    /// `--namespace-labels` is not `k=v,...` of valid labels.
    #[error("--namespace-labels {value:?}: {reason}")]
    NamespaceLabels { value: String, reason: String },
    /// `--webhook-config` cannot be read or holds no configuration.
    #[error(transparent)]
    WebhookConfig(#[from] DoctorError),
    /// A webhook entry cannot be evaluated.
    #[error("--webhook-config {path}: {error}")]
    Entry { path: String, error: EntryError },
    /// The default configuration could not be generated.
    #[error("the default webhook configuration (injector webhook-config --revision {revision:?}): {reason}")]
    Generate { revision: String, reason: String },
    /// A `--connection` spec does not parse.
    #[error("--connection: {0}")]
    Connection(#[from] traffic::ConnectionError),
    /// A document of the manifest cannot be explained.
    #[error("{path}: {error}")]
    Manifest {
        path: String,
        error: KubeInjectError,
    },
}

/// The webhook entry called.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Called {
    pub configuration: String,
    pub entry: String,
}

/// What explain found for one workload (the JSON item, see the module docs).
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub document: usize,
    /// The index inside a `List` (text output only).
    #[serde(skip)]
    pub item: Option<usize>,
    pub kind: String,
    pub name: String,
    pub namespace: String,
    pub webhook: Option<Called>,
    pub webhook_reason: String,
    /// Per entry not called, why (text output only; `webhook_reason` joins them).
    #[serde(skip)]
    pub missed: Vec<String>,
    pub injected: bool,
    pub decision: Option<Decision>,
    pub templates: Vec<String>,
    pub warnings: Vec<String>,
    pub init_args: Option<Vec<String>>,
    pub connections: Vec<traffic::Verdict>,
}

/// The steps of Istio's `injectRequired`, in its order, as the text output lists them.
const STEPS: [Step; 7] = [
    Step::HostNetwork,
    Step::IgnoredNamespace,
    Step::Label,
    Step::Annotation,
    Step::NeverSelector,
    Step::AlwaysSelector,
    Step::Policy,
];

impl Item {
    /// The human-readable form: Webhook / Decision / Result / Warnings / Traffic.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let item = self.item.map(|i| format!(" item {i}")).unwrap_or_default();
        out.push_str(&format!(
            "{} {}/{} (document {}{item})\n",
            self.kind, self.namespace, self.name, self.document
        ));
        match &self.webhook {
            Some(c) => {
                out.push_str(&format!(
                    "  Webhook:   called: {} / {}\n",
                    c.configuration, c.entry
                ));
                out.push_str(&format!("             {}\n", self.webhook_reason));
            }
            None => {
                out.push_str("  Webhook:   none is called: the pod is created unchanged\n");
                for m in &self.missed {
                    out.push_str(&format!("             - {m}\n"));
                }
                if self.missed.is_empty() {
                    out.push_str(&format!("             {}\n", self.webhook_reason));
                }
            }
        }
        match &self.decision {
            None => out.push_str("  Decision:  not reached (no webhook is called)\n"),
            Some(d) => {
                let verdict = if d.inject { "inject" } else { "skip" };
                out.push_str(&format!(
                    "  Decision:  {verdict} (step {})\n",
                    d.step.as_str()
                ));
                let decided = match d.step {
                    Step::InvalidPolicy => Step::Policy,
                    s => s,
                };
                for s in STEPS {
                    if s == decided {
                        out.push_str(&format!(
                            "             > {:<18} {}\n",
                            d.step.as_str(),
                            d.reason
                        ));
                        break;
                    }
                    out.push_str(&format!("               {:<18} -\n", s.as_str()));
                }
            }
        }
        if self.injected {
            out.push_str(&format!(
                "  Result:    injected, templates: {}\n",
                self.templates.join(", ")
            ));
        } else {
            out.push_str("  Result:    not injected\n");
        }
        if self.warnings.is_empty() {
            out.push_str("  Warnings:  none\n");
        } else {
            out.push_str("  Warnings:\n");
            for w in &self.warnings {
                out.push_str(&format!("             - {w}\n"));
            }
        }
        match &self.init_args {
            None if !self.injected => out.push_str("  Traffic:   not intercepted (no sidecar)\n"),
            None => out.push_str("  Traffic:   not redirected (no istio-init container)\n"),
            Some(args) => {
                let shown: Vec<String> = args.iter().map(|a| shell_word(a)).collect();
                out.push_str(&format!("  Traffic:   {}\n", shown.join(" ")));
                for v in &self.connections {
                    out.push_str(&format!("             {}\n", traffic::text(v)));
                }
            }
        }
        out
    }
}

/// Namespace labels by namespace name.
type NamespaceLabels = BTreeMap<String, Map<String, Value>>;

/// Reads the Namespace objects of `--namespaces`: labels by name.
fn read_namespaces(path: &Path) -> Result<NamespaceLabels, ObjectsError> {
    let source = path.display().to_string();
    let mut out = BTreeMap::new();
    for (i, obj) in kube_objects::read(path)?.iter().enumerate() {
        let err = |field: &str, reason: String| ObjectsError::Invalid {
            path: source.clone(),
            object: kube_objects::describe(obj, i),
            field: field.to_string(),
            reason,
        };
        if obj.pointer("/kind").and_then(Value::as_str) != Some("Namespace") {
            let kind = obj.pointer("/kind").unwrap_or(&Value::Null);
            return Err(err("kind", format!("{kind} is not Namespace")));
        }
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| err("metadata.name", "is required".to_string()))?;
        let labels = match obj.pointer("/metadata/labels") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => {
                if let Some((k, v)) = m.iter().find(|(_, v)| !v.is_string()) {
                    return Err(err(
                        &format!("metadata.labels.{k}"),
                        format!("value {v} must be a string"),
                    ));
                }
                m.clone()
            }
            Some(other) => {
                return Err(err(
                    "metadata.labels",
                    format!("must be a mapping of strings, got {other}"),
                ))
            }
        };
        out.insert(name.to_string(), labels);
    }
    Ok(out)
}

/// Parses `--namespace-labels k=v,...`, each label checked as a selector's `matchLabels` would be.
fn parse_namespace_labels(value: &str) -> Result<Map<String, Value>, ExplainError> {
    let mut out = Map::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let err = |reason: String| ExplainError::NamespaceLabels {
            value: value.to_string(),
            reason,
        };
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| err(format!("{part:?} is not KEY=VALUE")))?;
        LabelSelector::from_json(&json!({"matchLabels": {k: v}}))
            .map_err(|e| err(format!("{part:?}: {e}")))?;
        out.insert(k.to_string(), Value::String(v.to_string()));
    }
    Ok(out)
}

/// The webhook entries, in call order: from `--webhook-config`, else generated.
fn load_entries(args: &Args, settings: &Settings) -> Result<Vec<Entry>, ExplainError> {
    match &args.webhook_config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| DoctorError::Read {
                flag: "--webhook-config",
                path: path.clone(),
                source,
            })?;
            entries_from(Some((path, &text)), settings)
        }
        None => entries_from(None, settings),
    }
}

/// The entries of `file` (path and text), else of the configurations `injector webhook-config`
/// generates for the settings' revision.
fn entries_from(
    file: Option<(&Path, &str)>,
    settings: &Settings,
) -> Result<Vec<Entry>, ExplainError> {
    let (hooks, path, objects) = match file {
        Some((path, text)) => {
            let hooks = doctor::read_hooks(path, text)?;
            let objects = kube_objects::parse(text, &path.display().to_string())?;
            (hooks, path.display().to_string(), objects)
        }
        None => {
            let gen_err = |reason: String| ExplainError::Generate {
                revision: settings.revision.clone(),
                reason,
            };
            let by_default = settings
                .values
                .pointer("/sidecarInjectorWebhook/enableNamespacesByDefault")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let mut wc = webhook_config::Args::for_revision(&settings.revision, false)
                .map_err(|e| gen_err(e.to_string()))?;
            // Istio's charts emit `auto.` only for the default revision.
            wc.enable_namespaces_by_default = by_default && wc.named_revision().is_none();
            let configs = wc
                .configurations(None)
                .map_err(|e| gen_err(e.to_string()))?;
            let hooks = webhook::hooks_of(&configs).map_err(|e| gen_err(e.to_string()))?;
            let objects = configs
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| gen_err(e.to_string()))?;
            (hooks, "(generated)".to_string(), objects)
        }
    };
    Entry::parse_all(&hooks, &objects).map_err(|error| ExplainError::Entry { path, error })
}

/// Everything loaded once for a run.
struct Context {
    engine: Engine,
    entries: Vec<Entry>,
    /// `--namespaces`, when given: labels by namespace.
    namespaces: Option<(String, NamespaceLabels)>,
    /// `--namespace-labels`.
    namespace_labels: Map<String, Value>,
    connections: Vec<traffic::Connection>,
}

impl Context {
    /// The labels of `namespace` as the API server holds them, and a warning when `--namespaces` does
    /// not know it.
    fn namespace_labels(&self, namespace: &str) -> (Map<String, Value>, Option<String>) {
        let mut labels = Map::new();
        let mut warning = None;
        if let Some((path, known)) = &self.namespaces {
            match known.get(namespace) {
                Some(l) => labels.extend(l.clone()),
                None => {
                    warning = Some(format!(
                        "namespace {namespace:?} is not in --namespaces {path}: taken to have no labels but {NAMESPACE_NAME_LABEL}{}",
                        if self.namespace_labels.is_empty() { "" } else { " and --namespace-labels" }
                    ))
                }
            }
        }
        labels.extend(self.namespace_labels.clone());
        labels.insert(
            NAMESPACE_NAME_LABEL.to_string(),
            Value::String(namespace.to_string()),
        );
        (labels, warning)
    }

    /// Explains one workload object.
    fn explain(&self, obj: &Value, kind: &str, at: Position) -> Result<Item, DocumentError> {
        let tmpl = kube_inject::pod_template(obj, kind)?;
        let mut pod = tmpl.pod;
        if kind == "CronJob" {
            // kube-inject writes a CronJob's labels on the Job template (as Istio's does); the pod the
            // webhook sees carries the pod template's.
            let at = "spec.jobTemplate.spec.template.metadata";
            let meta = match obj.pointer("/spec/jobTemplate/spec/template/metadata") {
                Some(m @ Value::Object(_)) => m.clone(),
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(_) => return Err(kube_inject::field(at, "expected a mapping")),
            };
            kube_inject::check_metadata(&meta, at)?;
            pod["metadata"] = meta;
        }
        let namespace = Some(tmpl.obj_namespace.as_str())
            .filter(|n| !n.is_empty())
            .or_else(|| pod.pointer("/metadata/namespace").and_then(Value::as_str))
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
            .to_string();
        // As the webhook's pod: namespace defaulted from the request.
        pod["metadata"]["namespace"] = Value::String(namespace.clone());

        let mut warnings = warnings::own_metadata(obj, kind, &tmpl.what);
        let (ns_labels, ns_warning) = self.namespace_labels(&namespace);
        warnings.extend(ns_warning);
        let routing = webhook::route(&self.entries, &namespace, &ns_labels, pod::labels(&pod));
        let mut item = Item {
            document: at.index,
            item: at.item,
            kind: kind.to_string(),
            name: tmpl.obj_name.clone(),
            namespace: namespace.clone(),
            webhook: None,
            webhook_reason: routing.reason(),
            missed: self.missed(&routing),
            injected: false,
            decision: None,
            templates: Vec::new(),
            warnings: Vec::new(),
            init_args: None,
            connections: Vec::new(),
        };
        let Some((entry, _)) = routing.called.first() else {
            if let Some(w) = self.annotation_instead_of_label(&pod, &namespace, &ns_labels) {
                warnings.push(w);
            }
            item.warnings = warnings;
            return Ok(item);
        };
        item.webhook = Some(Called {
            configuration: entry.config.clone(),
            entry: entry.name.clone(),
        });
        warnings.extend(warnings::other_revision(
            entry,
            &self.engine.settings.revision,
        ));
        warnings.extend(warnings::match_conditions(entry));
        warnings.extend(warnings::fail_closed(entry));
        for (also, _) in routing.called.iter().skip(1) {
            warnings.push(format!(
                "entry {} is called too, after {}: it sees the pod already injected (an installation should select each pod once)",
                also.label(),
                entry.label()
            ));
        }

        let decision = self.engine.decide(&pod, Mode::Webhook);
        let inject = decision.inject;
        item.decision = Some(decision);
        if inject {
            self.inject(&mut item, &mut warnings, &mut pod, obj, kind, entry)?;
        }
        item.warnings = warnings;
        Ok(item)
    }

    /// Per entry not called, why (the configuration named when there are several).
    fn missed(&self, routing: &Routing<'_>) -> Vec<String> {
        let several = self.entries.windows(2).any(|w| w[0].config != w[1].config);
        routing
            .missed
            .iter()
            .map(|(e, why)| {
                if several {
                    format!("{}: {why}", e.config)
                } else {
                    why.clone()
                }
            })
            .collect()
    }

    /// The warning for `sidecar.istio.io/inject: "true"` as an annotation where only the label would
    /// have reached a webhook.
    fn annotation_instead_of_label(
        &self,
        pod: &Value,
        namespace: &str,
        ns_labels: &Map<String, Value>,
    ) -> Option<String> {
        if pod::annotation(pod, INJECT_KEY) != Some("true") || pod::label(pod, INJECT_KEY).is_some()
        {
            return None;
        }
        let mut labels = pod::labels(pod).cloned().unwrap_or_default();
        labels.insert(INJECT_KEY.to_string(), Value::String("true".to_string()));
        let with_label = webhook::route(&self.entries, namespace, ns_labels, Some(&labels));
        with_label
            .called
            .first()
            .map(|(e, _)| warnings::annotation_instead_of_label(namespace, e))
    }

    /// The webhook's injection of `pod` (as `serve` runs it), and what follows from the injected pod.
    fn inject(
        &self,
        item: &mut Item,
        warnings: &mut Vec<String>,
        pod: &mut Value,
        obj: &Value,
        kind: &str,
        entry: &Entry,
    ) -> Result<(), DocumentError> {
        if self.engine.openshift() {
            crate::openshift::clear_proxy_user_equal_to_app(pod);
        }
        let workload = if kind == "Pod" {
            workload::deploy_meta_from_pod(pod)
        } else {
            Workload {
                kind: kind.to_string(),
                api_version: obj
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                name: item.name.clone(),
                namespace: item.namespace.clone(),
            }
        };
        let req = InjectRequest {
            pod: &*pod,
            workload: &workload,
            url_env: crate::admission::parse_inject_envs(&entry.path),
            mode: Mode::Webhook,
        };
        let injected = match self.engine.inject(&req) {
            Ok(p) => p,
            Err(e) => {
                warnings.push(format!(
                    "the webhook answers with an error, so the API server refuses the pod: {e}"
                ));
                return Ok(());
            }
        };
        item.injected = true;
        item.templates = self.engine.templates(pod::annotations(pod), Mode::Webhook);
        warnings.extend(warnings::job_without_native_sidecar(kind, &injected));
        warnings.extend(warnings::init_containers_before_proxy(&injected));
        let inits = pod::containers(&injected, "initContainers");
        item.init_args = pod::find_named(inits, pod::INIT_CONTAINER)
            .or_else(|| pod::find_named(inits, pod::VALIDATION_CONTAINER))
            .map(|c| {
                c.get("args")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            });
        match &item.init_args {
            Some(args) if !self.connections.is_empty() => {
                item.connections = traffic::walk(args, &self.connections).map_err(|e| {
                    kube_inject::field("initContainers[istio-init].args", e.to_string())
                })?;
            }
            None if !self.connections.is_empty() => warnings.push(
                "the injected pod has no istio-init (or istio-validation) container: its traffic is not redirected, and no connection is walked".to_string(),
            ),
            _ => {}
        }
        Ok(())
    }
}

/// Explains every workload of a manifest stream.
struct Explainer<'a> {
    ctx: &'a Context,
    items: Vec<Item>,
}

impl StreamVisitor for Explainer<'_> {
    fn workload(&mut self, obj: &mut Value, kind: &str, at: Position) -> Result<(), DocumentError> {
        let item = self.ctx.explain(obj, kind, at)?;
        self.items.push(item);
        Ok(())
    }

    fn document(&mut self, _raw: &str, _doc: Option<&mut Value>) -> Result<(), DocumentError> {
        Ok(())
    }
}

/// Loads everything `args` names (configuration, cluster state, webhook entries, namespaces,
/// connections).
fn context(args: &Args) -> Result<Context, ExplainError> {
    let settings = Settings::load(&args.config)?;
    let entries = load_entries(args, &settings)?;
    // `--namespaces` gives labels here; its annotations matter only on OpenShift (as for serve).
    let cluster = ClusterState::load(
        &args.cluster,
        args.platform.is_openshift().then_some(&args.platform),
    )?;
    let namespaces = match &args.platform.namespaces {
        Some(p) => Some((p.display().to_string(), read_namespaces(p)?)),
        None => None,
    };
    let namespace_labels = match &args.namespace_labels {
        Some(v) => parse_namespace_labels(v)?,
        None => Map::new(),
    };
    let connections = traffic::parse(&args.connections)?;
    Ok(Context {
        engine: Engine::new(settings).with_cluster(cluster),
        entries,
        namespaces,
        namespace_labels,
        connections,
    })
}

/// Explains the manifest `input` (`source` names it in errors).
fn explain_stream(ctx: &Context, input: &str, source: &str) -> Result<Vec<Item>, ExplainError> {
    let mut explainer = Explainer {
        ctx,
        items: Vec::new(),
    };
    kube_inject::visit_stream(input, &mut explainer).map_err(|error| ExplainError::Manifest {
        path: source.to_string(),
        error,
    })?;
    Ok(explainer.items)
}

/// The text form: each item's, and once, when a connection was walked, what the walk assumes.
pub fn text(items: &[Item]) -> String {
    let mut out = items.iter().map(Item::text).collect::<Vec<_>>().join("\n");
    if items.iter().any(|i| !i.connections.is_empty()) {
        out.push_str("\nTraffic verdicts assume:\n");
        for a in iptables_init::assumptions() {
            out.push_str(&format!("  - {a}\n"));
        }
    }
    out
}

/// The JSON form: `{"items": [...]}`.
pub fn json(items: &[Item]) -> Value {
    json!({ "items": items })
}

/// Runs `injector explain`: prints the explanation of every workload.
pub fn run(args: Args) -> Result<(), ExplainError> {
    let ctx = context(&args)?;
    for w in &ctx.engine.settings.warnings {
        eprintln!("warning: {w}");
    }
    let input = if args.filename == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|error| ExplainError::Read {
                path: "-".to_string(),
                error,
            })?;
        s
    } else {
        std::fs::read_to_string(&args.filename).map_err(|error| ExplainError::Read {
            path: args.filename.clone(),
            error,
        })?
    };
    let items = explain_stream(&ctx, &input, &args.filename)?;
    match args.output {
        Output::Text => print!("{}", text(&items)),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&json(&items))
                .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        ),
    }
    Ok(())
}

/// `arg` as a POSIX shell word, so the printed `istio-iptables` line can be pasted (`-i '*'`, `-x ''`).
fn shell_word(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.,:/=@%+".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests;
