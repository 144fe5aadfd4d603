//! `injector explain`: why each workload of a manifest would or would not be injected by the webhook,
//! what it would get, and where its connections would go — offline, through the code that decides in
//! the cluster. Every stage calls the code the webhook, kube-inject and iptables-init run:
//!
//! - **manifests**: kube-inject's documents and pod-template extraction (`manifest::documents`,
//!   `manifest::pod_template`), with the same document errors;
//! - **webhook**: the API server's routing of a Pod CREATE over the MutatingWebhookConfigurations
//!   (`--webhook-config`, default: what `injector webhook-config` generates for the same `--revision`
//!   and `enableNamespacesByDefault` of `--values`), with `decision`'s label selectors
//!   (`webhook_entry::routing`);
//! - **decision**: the engine's webhook-mode decision (Istio's `injectRequired` with the configuration's
//!   policy and never/always selectors), the deciding [`Step`] marked;
//! - **result**: the engine's webhook-mode injection (the configuration's `defaultTemplates` and
//!   `aliases`, the pod's `inject.istio.io/templates`), its templates and its `istio-init` (or, with
//!   CNI, `istio-validation`) arguments, and the warnings of `warnings`;
//! - **traffic**: each `--connection` walked through the rule model of those arguments by
//!   iptables-init's library (`traffic`);
//! - **policy** (`--policy`): whether the MutatingAdmissionPolicy `injector policy` compiles from the
//!   same configuration injects the pod (its bindings select what the entries select, then
//!   `shared::policy::covers`, the Rust side of the subset table the policy's matchConditions are written from).
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
//! | `render_paths` | list of strings | per template applied, how it rendered: `compiled` (the compiled template: no text configured, or the text it was built from) or `evaluated` (the configured text, through the evaluator) |
//! | `warnings` | list of strings | see `warnings` |
//! | `init_args` | list of strings or `null` | the args of the injected `istio-init` (`istio-validation` with CNI), leading `istio-iptables` included |
//! | `connections` | list of `{"spec", "verdict", "port", "table", "chain", "rule", "address"}` | one per `--connection`, as `iptables-init explain` prints them |
//! | `policy` | `{"injects", "reason"}`, only with `--policy` | whether the revision's MutatingAdmissionPolicy injects the pod inside the API server (the webhook then skips it, so an injector outage cannot refuse it), else why it leaves it to the webhook (the rule of `shared::policy::subset` not met, or the configuration the compiler refuses) |
//!
//! Exit status 0 when every document was explained (injected or not); a bad manifest, flag, file or
//! connection spec is an error naming the document (or flag), the field and the value.

mod traffic;
mod warnings;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::cluster::kube_client::KubeArgs;
use crate::cluster::kube_read::{self, ClusterError, SelectArgs};
use crate::shared::manifest::{self, DocumentError, ManifestError, Position};
use crate::shared::output::{self, Output};
use crate::shared::webhook_config;
use crate::shared::webhook_entry::routing::{EntryError, Router, Routing};
use crate::shared::webhook_entry::{self, Entry, ReadError};
use crate::shared::webhook_request;
use inject::cluster_state::{ClusterState, PlatformArgs, ProxyConfigArgs};
use inject::config::{ConfigArgs, ConfigError, Settings};
use inject::decision::{Decision, LabelSelector, Step};
use inject::engine::{Engine, Mode};
use inject::kube_objects::ObjectsError;
use inject::namespaces::Namespaces;
use inject::pod::{self, INJECT_KEY};
use sidecar_core::fields::{self, Fields};

/// The label the API server sets on every namespace, holding its name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// `injector explain` arguments. The injector configuration flags are kube-inject's (and serve's):
/// one definition, flattened here.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input manifest file, `-` for stdin (any stream kube-inject takes; at most 16 MiB).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filename: String,
    /// Labels of every workload's namespace, `k=v,...` (over those of the namespace in `--namespaces`;
    /// `kubernetes.io/metadata.name` is implied).
    #[arg(long, value_name = "K=V,...")]
    pub namespace_labels: Option<String>,
    /// The MutatingWebhookConfigurations the API server holds (`kubectl get
    /// mutatingwebhookconfigurations -o yaml`: a YAML stream or a List); default: what `injector
    /// webhook-config` generates for `--revision` (with `auto.` when the values'
    /// `sidecarInjectorWebhook.enableNamespacesByDefault` is true). At most 16 MiB.
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
    /// `--kubeconfig` / `--in-cluster`: the Namespaces (in place of `--namespaces`, which then serves
    /// only OpenShift's annotations) and, without `--webhook-config`, this injector's
    /// MutatingWebhookConfigurations are read from the cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub select: SelectArgs,
    /// The revision's MutatingAdmissionPolicy (`injector policy`) is installed beside the webhook: say
    /// for each pod whether the policy injects it inside the API server or leaves it to the webhook.
    #[arg(long)]
    pub policy: bool,
}

/// Why explain could not run; each names the flag or document, the field and the value.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// `--kubeconfig` / `--in-cluster` gave no Namespaces or configurations (the object named).
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The manifest could not be read.
    #[error("-f {path}: {error}")]
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
    WebhookConfig(#[from] ReadError),
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
    Manifest { path: String, error: ManifestError },
}

/// The webhook entry called.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Called {
    pub configuration: String,
    pub entry: String,
}

/// Whether the MutatingAdmissionPolicy injects the pod (`--policy`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyVerdict {
    /// The policy injects it, inside the API server; the webhook leaves it alone.
    pub injects: bool,
    /// Why not, or which binding selects it.
    pub reason: String,
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
    pub render_paths: Vec<&'static str>,
    pub warnings: Vec<String>,
    pub init_args: Option<Vec<String>>,
    pub connections: Vec<traffic::Verdict>,
    /// `--policy` only: what the MutatingAdmissionPolicy does with the pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyVerdict>,
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
        if let Some(p) = &self.policy {
            if p.injects {
                out.push_str(&format!(
                    "  Policy:    injects it in the API server ({})\n",
                    p.reason
                ));
            } else {
                out.push_str(&format!(
                    "  Policy:    leaves it to the webhook: {}\n",
                    p.reason
                ));
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
            let shown: Vec<String> = self
                .templates
                .iter()
                .zip(&self.render_paths)
                .map(|(t, p)| format!("{t} ({p})"))
                .collect();
            out.push_str(&format!(
                "  Result:    injected, templates: {}\n",
                shown.join(", ")
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
fn load_entries(args: &Args, settings: &Settings) -> Result<Router, ExplainError> {
    match &args.webhook_config {
        Some(path) => {
            let text = webhook_entry::read_file(path)?;
            entries_from(Some((path, &text)), settings)
        }
        None => entries_from(None, settings),
    }
}

/// The entries of `file` (path and text), else of the configurations `injector webhook-config`
/// generates for the settings' revision.
fn entries_from(file: Option<(&Path, &str)>, settings: &Settings) -> Result<Router, ExplainError> {
    if let Some((path, text)) = file {
        return router(
            webhook_entry::read(path, text)?,
            &path.display().to_string(),
        );
    }
    let gen_err = |reason: String| ExplainError::Generate {
        revision: settings.revision.clone(),
        reason,
    };
    let by_default = fields::path(
        &settings.values,
        ["sidecarInjectorWebhook", "enableNamespacesByDefault"],
    )
    .and_then(Value::as_bool)
    .unwrap_or(false);
    let mut wc = webhook_config::Args::for_revision(&settings.revision, false)
        .map_err(|e| gen_err(e.to_string()))?;
    // Istio's charts emit `auto.` only for the default revision.
    wc.scope.enable_namespaces_by_default = by_default && wc.named_revision().is_none();
    let configs = wc
        .configurations(None)
        .map_err(|e| gen_err(e.to_string()))?;
    let entries = webhook_entry::generated(&configs).map_err(|e| gen_err(e.to_string()))?;
    router(entries, "(generated)")
}

/// The entries in call order, every one of them evaluable (`path` names where they come from).
fn router(entries: Vec<Entry>, path: &str) -> Result<Router, ExplainError> {
    Router::new(entries).map_err(|error| ExplainError::Entry {
        path: path.to_string(),
        error,
    })
}

/// Everything loaded once for a run.
struct Context {
    engine: Engine,
    entries: Router,
    /// `--namespaces` (or the cluster's), when given, and where they came from.
    namespaces: Option<(String, Namespaces)>,
    /// `--namespace-labels`.
    namespace_labels: Map<String, Value>,
    connections: Vec<traffic::Connection>,
    /// `--policy`: the params the revision's policy is compiled to, or why the configuration is not
    /// compiled (then the policy injects nothing and every pod is the webhook's).
    policy: Option<Result<crate::shared::policy::ParamsSpec, String>>,
}

impl Context {
    /// The labels of `namespace` as the API server holds them, and a warning when `--namespaces` does
    /// not know it.
    fn namespace_labels(&self, namespace: &str) -> (Map<String, Value>, Option<String>) {
        let mut labels = Map::new();
        let mut warning = None;
        if let Some((path, known)) = &self.namespaces {
            match known.labels(namespace) {
                Some(l) => labels.extend(l.clone()),
                None => {
                    warning = Some(format!(
                        "namespace {namespace:?} is not in {path}: taken to have no labels but {NAMESPACE_NAME_LABEL}{}",
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
        let tmpl = manifest::pod_template(obj, kind)?;
        let mut pod = tmpl.pod;
        if kind == "CronJob" {
            // kube-inject writes a CronJob's labels on the Job template (as Istio's does); the pod the
            // webhook sees carries the pod template's.
            let at = "spec.jobTemplate.spec.template.metadata";
            let meta =
                match fields::path(obj, ["spec", "jobTemplate", "spec", "template", "metadata"]) {
                    Some(m @ Value::Object(_)) => m.clone(),
                    None | Some(Value::Null) => Value::Object(Map::new()),
                    Some(_) => return Err(manifest::field(at, "expected a mapping")),
                };
            manifest::check_metadata(&meta, at)?;
            pod["metadata"] = meta;
        }
        let namespace = Some(tmpl.obj_namespace.as_str())
            .filter(|n| !n.is_empty())
            .or_else(|| fields::path(&pod, ["metadata", "namespace"]).and_then(Value::as_str))
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
            .to_string();
        // As the webhook's pod: namespace defaulted from the request.
        webhook_request::normalise(&mut pod, Some(&namespace));

        let mut warnings = warnings::own_metadata(obj, kind, &tmpl.what);
        let (ns_labels, ns_warning) = self.namespace_labels(&namespace);
        warnings.extend(ns_warning);
        let routing = self
            .entries
            .route(&namespace, &ns_labels, pod::labels(&pod));
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
            render_paths: Vec::new(),
            warnings: Vec::new(),
            init_args: None,
            connections: Vec::new(),
            policy: self.policy.as_ref().map(|compiled| {
                let spec = match compiled {
                    Ok(spec) => spec,
                    Err(why) => {
                        return PolicyVerdict {
                            injects: false,
                            reason: format!(
                                "leaves every pod to the webhook: the configuration is not compiled into a policy ({why})"
                            ),
                        }
                    }
                };
                let Some((entry, _)) = routing.called.first() else {
                    return PolicyVerdict {
                        injects: false,
                        reason: "no binding selects it (the bindings select what the webhook's entries select)".to_string(),
                    };
                };
                match crate::shared::policy::covers(&self.engine, spec, &pod) {
                    Ok(()) => PolicyVerdict {
                        injects: true,
                        reason: format!(
                            "binding of {}; the webhook skips the pods it injected, so this pod is created and injected while the injector is down",
                            entry.label()
                        ),
                    },
                    Err(rule) => PolicyVerdict {
                        injects: false,
                        reason: format!("{} (rule {})", rule.why, rule.name),
                    },
                }
            }),
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
        // A pod the policy injects is skipped by the webhook's match conditions: no call, so no
        // failure to call.
        if !item.policy.as_ref().is_some_and(|p| p.injects) {
            warnings.extend(warnings::fail_closed(entry));
        }
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
        let mut configs = self.entries.entries().map(|e| &e.config);
        let first = configs.next();
        let several = configs.any(|c| Some(c) != first);
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
        let with_label = self.entries.route(namespace, ns_labels, Some(&labels));
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
        if let Some(cleared) = webhook_request::openshift_cleared(&self.engine, pod) {
            *pod = cleared;
        }
        let workload = manifest::workload(obj, kind, pod, &item.namespace);
        let injected =
            match webhook_request::inject(&self.engine, pod, Some(&workload), &entry.path) {
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
        let user = &self.engine.settings.user_templates;
        item.render_paths = item
            .templates
            .iter()
            .map(|t| user.path(t).as_str())
            .collect();
        warnings.extend(warnings::job_without_native_sidecar(kind, &injected));
        warnings.extend(warnings::init_containers_before_proxy(&injected));
        let inits = pod::containers(&injected, "initContainers");
        item.init_args = pod::find_named(inits, pod::INIT_CONTAINER)
            .or_else(|| pod::find_named(inits, pod::VALIDATION_CONTAINER))
            .map(|c| {
                c.field("args")
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
                    manifest::field("initContainers[istio-init].args", e.to_string())
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

/// Loads everything `args` names (configuration, cluster state, webhook entries, namespaces,
/// connections).
fn context(args: &Args) -> Result<Context, ExplainError> {
    let settings = Settings::load(&args.config)?;
    // `--namespaces` gives labels here; its annotations matter only on OpenShift (as for serve).
    let cluster = ClusterState::load(
        &args.cluster,
        args.platform.is_openshift().then_some(&args.platform),
    )?;
    let (entries, namespaces) = if args.kube.wanted() {
        from_cluster(args, &settings)?
    } else {
        let namespaces = match &args.platform.namespaces {
            Some(p) => Some((
                format!("--namespaces {}", p.display()),
                Namespaces::load(p)?,
            )),
            None => None,
        };
        (load_entries(args, &settings)?, namespaces)
    };
    let namespace_labels = match &args.namespace_labels {
        Some(v) => parse_namespace_labels(v)?,
        None => Map::new(),
    };
    let connections = traffic::parse(&args.connections)?;
    let engine = Engine::new(settings).with_cluster(cluster);
    let policy = if args.policy {
        // Compiled for the path of the entries (the webhook's environment comes from it).
        let path = entries
            .entries()
            .next()
            .map(|e| e.path.clone())
            .unwrap_or_else(|| "/inject".to_string());
        let excluded = engine.proxy_config_namespaces();
        // A configuration the compiler refuses is not an error of explain: `injector policy` refuses
        // it, so no policy injects and the webhook takes every pod, which is what explain says.
        Some(
            crate::shared::policy::params::compile(&engine, &path, &excluded)
                .map_err(|e| e.to_string()),
        )
    } else {
        None
    };
    Ok(Context {
        engine,
        entries,
        namespaces,
        namespace_labels,
        connections,
        policy,
    })
}

/// The entries (the cluster's configurations, unless `--webhook-config` names a file) and the Namespaces
/// read through `--kubeconfig` / `--in-cluster`.
fn from_cluster(
    args: &Args,
    settings: &Settings,
) -> Result<(Router, Option<(String, Namespaces)>), ExplainError> {
    let (rt, client) = kube_read::connect(&args.kube)?;
    let source = kube_read::source(&args.kube);
    let objects = rt
        .block_on(kube_read::namespaces(&client))
        .map_err(ClusterError::from)?;
    let namespaces = Namespaces::from_objects(objects, &source)?;
    let entries = match &args.webhook_config {
        Some(_) => load_entries(args, settings)?,
        None => {
            let configs = rt
                .block_on(kube_read::webhook_configurations(&client, &args.select))
                .map_err(ClusterError::from)?;
            router(kube_read::entries(&configs, &args.kube)?, &source)?
        }
    };
    Ok((entries, Some((source, namespaces))))
}

/// Explains the manifest `input` (`source` names it in errors).
fn explain_stream(ctx: &Context, input: &str, source: &str) -> Result<Vec<Item>, ExplainError> {
    let failed = |error| ExplainError::Manifest {
        path: source.to_string(),
        error,
    };
    let mut items = Vec::new();
    for doc in manifest::documents(input) {
        let doc = doc.map_err(failed)?;
        for (at, kind) in doc.workloads() {
            let item = ctx
                .explain(doc.object(at), &kind, at)
                .map_err(|e| failed(doc.error(at.item, e)))?;
            items.push(item);
        }
    }
    Ok(items)
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
    let input =
        inject::input::read_text_or_stdin(&args.filename).map_err(|error| ExplainError::Read {
            path: args.filename.clone(),
            error,
        })?;
    let items = explain_stream(&ctx, &input, &args.filename)?;
    match args.output {
        Output::Text => print!("{}", text(&items)),
        Output::Json => output::print_json(&json(&items)),
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
