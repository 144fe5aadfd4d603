//! The MutatingWebhookConfigurations that register `injector serve` with the API server, entry for entry
//! those of Istio's charts (`istio-discovery` `templates/mutatingwebhook.yaml` and
//! `revision-tags-mwc.yaml`), built with k8s-openapi types so every field is one the API server knows.
//! `injector webhook-config` prints them, `injector certs` writes them with its CA, and
//! `deploy/base/mutatingwebhookconfiguration.yaml` is their output without a caBundle.
//!
//! The revision's configuration carries `rev.namespace.` and `rev.object.` for the revision (or
//! `default`), and for the default revision also `namespace.`, `object.` and, with
//! `--enable-namespaces-by-default`, `auto.`; each `--tag T` adds a configuration with the same pair for
//! `T` (and the default-revision entries when `T` is `default`), all calling this injector. One difference
//! from Istio, on purpose: every entry also excludes `kube-system` and the injector's own namespace, so
//! the injector can always start its own pods while it is down (failurePolicy is Fail).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use k8s_openapi::ByteString;

/// The label of a tag's configuration (Istio's `label.IoIstioTag`).
pub const TAG_LABEL: &str = "istio.io/tag";

/// A generated configuration's name and its tag (`None` for the revision's own): what the policy's and
/// the guard's bindings are named and labelled after.
pub fn name_and_tag(c: &MutatingWebhookConfiguration) -> (String, Option<&str>) {
    let name = c.metadata.name.clone().unwrap_or_default();
    let tag = c
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(TAG_LABEL))
        .map(String::as_str);
    (name, tag)
}

/// When the API server calls the webhook again after other webhooks changed the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReinvocationPolicy {
    Never,
    IfNeeded,
}

impl ReinvocationPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ReinvocationPolicy::Never => "Never",
            ReinvocationPolicy::IfNeeded => "IfNeeded",
        }
    }
}

/// What the generated configurations select and point at: the flags of `injector webhook-config`, shared
/// with `injector certs`.
#[derive(Debug, Clone, clap::Args)]
#[group(id = "webhook_config")]
pub struct Args {
    /// Service name in front of the injector.
    #[arg(long, default_value = "sidecar-injector")]
    pub service: String,
    /// The revision the injector serves: its entries select `istio.io/rev=<R>`; without it (or with
    /// `default`) the injector is the default revision and also serves `istio-injection=enabled`.
    #[arg(long)]
    pub revision: Option<String>,
    #[command(flatten)]
    pub scope: Scope,
    /// The webhook's reinvocationPolicy.
    #[arg(long, value_enum, default_value = "never")]
    pub reinvocation_policy: ReinvocationPolicy,
    /// Every entry skips the pods the revision's MutatingAdmissionPolicy injected (`injector policy`;
    /// a matchCondition on its annotation): with both installed, the API server calls the webhook only
    /// for the pods outside the policy's subset.
    #[arg(long)]
    pub skip_policy_injected: bool,
    /// Service port the API server calls.
    #[arg(long, default_value_t = 443, value_parser = clap::value_parser!(i32).range(1..=65535))]
    pub port: i32,
    /// Seconds the API server waits for the webhook.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..=30))]
    pub timeout_seconds: i32,
}

/// Which pods a revision's registrations select and what they are named and carry, besides the revision:
/// the flags `injector policy` shares with `injector webhook-config` (the policy's bindings select what
/// the webhook's entries select, and inject as the webhook does on `--path`).
#[derive(Debug, Clone, clap::Args)]
pub struct Scope {
    /// Namespace of the service and of the injector (excluded from injection).
    #[arg(long, default_value = "sidecar-injector")]
    pub namespace: String,
    /// A revision tag pointing at this injector: one more configuration selecting `istio.io/rev=<T>`
    /// (repeatable; `default` also takes over the default revision's entries).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Also inject pods in namespaces without injection labels (Istio's `auto.` entry of
    /// `sidecarInjectorWebhook.enableNamespacesByDefault`); needs the default revision or a tag `default`.
    #[arg(long)]
    pub enable_namespaces_by_default: bool,
    /// Name of the revision's MutatingWebhookConfiguration (`-<revision>` is appended, tags add
    /// `<name>-tag-<T>`).
    #[arg(long, default_value = "sidecar-injector")]
    pub webhook_name: String,
    /// URL path the API server calls (its `/inject/cluster/C/net/N` parameters become the proxy's
    /// environment).
    #[arg(long, default_value = "/inject")]
    pub path: String,
}

/// `injector webhook-config` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct CommandArgs {
    #[command(flatten)]
    pub webhook: Args,
    #[command(flatten)]
    pub ca: CaBundleArgs,
}

/// `--ca-bundle`, taken by `webhook-config` (written into the entries) and `serve` (patched into the
/// revision's configurations in the cluster).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CaBundleArgs {
    /// PEM file of the CA that signed the serving certificate, the entries' `caBundle`: `webhook-config`
    /// writes it base64 into every entry (without it, no caBundle: patch one in, as `deploy/local`
    /// does); `serve --kubeconfig` / `--in-cluster` patches it into its revision's configurations and
    /// corrects them when changed (re-read when the file changes). At most 16 MiB.
    #[arg(long, value_name = "FILE")]
    pub ca_bundle: Option<PathBuf>,
}

/// Why no configuration was generated; each names the flag (or file) and the value.
#[derive(Debug, thiserror::Error)]
pub enum WebhookConfigError {
    /// A revision or tag that cannot be a label value and part of an object name.
    #[error("{flag} {value:?}: not a DNS label (lowercase letters, digits and '-', at most 63)")]
    Name { flag: &'static str, value: String },
    /// `--webhook-name` that cannot be an object name, or is too long for the tag configurations' names.
    #[error("--webhook-name {value:?}: not a DNS subdomain name of at most 185 characters")]
    WebhookName { value: String },
    /// A path the API server refuses.
    #[error("--path {value:?}: must start with '/'")]
    Path { value: String },
    /// The same tag twice.
    #[error("--tag {tag:?} is given twice")]
    DuplicateTag { tag: String },
    /// A tag naming the revision itself: both configurations would select the same pods. `revision` is
    /// `--revision` as given, `None` when it was not (the default revision).
    #[error("--tag {tag:?} names the revision itself ({}); both would inject the same pods", match revision {
        Some(r) => format!("--revision {r:?}"),
        None => "the default revision, served without --revision".to_string(),
    })]
    TagIsRevision {
        tag: String,
        revision: Option<String>,
    },
    /// `--enable-namespaces-by-default` for an injector that serves neither the default revision nor a
    /// tag `default`: Istio's charts then emit no `auto.` entry, so the flag would do nothing.
    #[error("--enable-namespaces-by-default needs the default revision or --tag default (have --revision {revision:?})")]
    AutoWithoutDefault { revision: String },
    /// The `--ca-bundle` file could not be read.
    #[error("--ca-bundle {}: {source}", path.display())]
    CaBundleRead {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The `--ca-bundle` file holds no PEM certificate.
    #[error("--ca-bundle {}: no PEM certificate in the file", path.display())]
    CaBundleEmpty { path: PathBuf },
    /// The `--ca-bundle` file holds something that is not valid PEM.
    #[error("--ca-bundle {}: {message}", path.display())]
    CaBundlePem { path: PathBuf, message: String },
    /// A configuration could not be serialised.
    #[error("serialising MutatingWebhookConfiguration {name}: {message}")]
    Serialise { name: String, message: String },
}

/// Namespaces never sent to the webhook, besides the injector's own.
pub const EXCLUDED_NAMESPACES: &[&str] = &["kube-system"];

/// Namespaces Istio's `auto.` entry leaves alone (the chart's list), besides the injector's own.
pub const AUTO_EXCLUDED_NAMESPACES: &[&str] = &[
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "local-path-storage",
];

/// The name of the matchCondition of `--skip-policy-injected`.
pub const SKIP_POLICY_INJECTED: &str = "not-injected-by-policy";

/// The suffix of every entry name, which istiod's certificate patcher keys on.
pub const ENTRY_SUFFIX: &str = "sidecar-injector.istio.io";

/// Which entry of Istio's charts (by the prefix of its name) a generated entry is; the entry itself is a
/// k8s-openapi `MutatingWebhook` here and a `webhook_entry::Entry` once read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Namespaces labelled `istio.io/rev=<X>` (and no `istio-injection`).
    RevNamespace,
    /// Pods labelled `istio.io/rev=<X>` in namespaces with neither injection label.
    RevObject,
    /// Namespaces labelled `istio-injection=enabled`.
    Namespace,
    /// Pods labelled `sidecar.istio.io/inject=true` in namespaces with neither injection label.
    Object,
    /// Pods without either label in namespaces with neither (`enableNamespacesByDefault`).
    Auto,
}

impl EntryKind {
    /// The entry's name, `<prefix>sidecar-injector.istio.io`.
    pub fn name(self) -> String {
        let prefix = match self {
            EntryKind::RevNamespace => "rev.namespace.",
            EntryKind::RevObject => "rev.object.",
            EntryKind::Namespace => "namespace.",
            EntryKind::Object => "object.",
            EntryKind::Auto => "auto.",
        };
        format!("{prefix}{ENTRY_SUFFIX}")
    }
}

const INJECTION: &str = "istio-injection";
const REV: &str = "istio.io/rev";
const INJECT: &str = "sidecar.istio.io/inject";
const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: if values.is_empty() {
            None
        } else {
            Some(values.iter().map(|v| v.to_string()).collect())
        },
    }
}

fn selector(exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(exprs),
        match_labels: None,
    }
}

/// `kubernetes.io/metadata.name NotIn [<system>..., <own namespace>]`.
fn excluded(system: &[&str], own_namespace: &str) -> LabelSelectorRequirement {
    let mut names = system.to_vec();
    if !names.contains(&own_namespace) {
        names.push(own_namespace);
    }
    requirement(NAMESPACE_NAME, "NotIn", &names)
}

/// The namespaceSelector of `entry` for revision or tag `x` (as in Istio's chart, plus the exclusions).
pub fn namespace_selector(entry: EntryKind, x: &str, own_namespace: &str) -> LabelSelector {
    let mut exprs = match entry {
        EntryKind::RevNamespace => vec![
            requirement(REV, "In", &[x]),
            requirement(INJECTION, "DoesNotExist", &[]),
        ],
        EntryKind::RevObject => vec![
            requirement(REV, "DoesNotExist", &[]),
            requirement(INJECTION, "DoesNotExist", &[]),
        ],
        EntryKind::Namespace => vec![requirement(INJECTION, "In", &["enabled"])],
        EntryKind::Object | EntryKind::Auto => vec![
            requirement(INJECTION, "DoesNotExist", &[]),
            requirement(REV, "DoesNotExist", &[]),
        ],
    };
    let system = match entry {
        EntryKind::Auto => AUTO_EXCLUDED_NAMESPACES,
        _ => EXCLUDED_NAMESPACES,
    };
    exprs.push(excluded(system, own_namespace));
    selector(exprs)
}

/// The objectSelector (pod labels) of `entry` for revision or tag `x`, as in Istio's chart.
pub fn object_selector(entry: EntryKind, x: &str) -> LabelSelector {
    selector(match entry {
        EntryKind::RevNamespace | EntryKind::Namespace => {
            vec![requirement(INJECT, "NotIn", &["false"])]
        }
        EntryKind::RevObject => vec![
            requirement(INJECT, "NotIn", &["false"]),
            requirement(REV, "In", &[x]),
        ],
        EntryKind::Object => vec![
            requirement(INJECT, "In", &["true"]),
            requirement(REV, "DoesNotExist", &[]),
        ],
        EntryKind::Auto => vec![
            requirement(INJECT, "DoesNotExist", &[]),
            requirement(REV, "DoesNotExist", &[]),
        ],
    })
}

/// The entries a configuration for revision or tag `x` carries, in Istio's order.
pub fn entries(x: &str, enable_namespaces_by_default: bool) -> Vec<EntryKind> {
    let mut out = vec![EntryKind::RevNamespace, EntryKind::RevObject];
    if x == "default" {
        out.extend([EntryKind::Namespace, EntryKind::Object]);
        if enable_namespaces_by_default {
            out.push(EntryKind::Auto);
        }
    }
    out
}

/// Whether `s` is a DNS-1123 label (what a revision or tag must be to name objects and label values).
fn dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

impl Args {
    /// The flags' defaults for `revision` (empty or `default`: the default revision), with or without
    /// the `auto.` entry: what `injector webhook-config --revision R [--enable-namespaces-by-default]`
    /// generates.
    pub fn for_revision(
        revision: &str,
        enable_namespaces_by_default: bool,
    ) -> Result<Args, clap::Error> {
        use clap::FromArgMatches as _;
        let command = <Args as clap::Args>::augment_args(clap::Command::new("webhook-config"));
        let mut args = Args::from_arg_matches(&command.try_get_matches_from(["webhook-config"])?)?;
        args.revision = Some(revision.to_string()).filter(|r| !r.is_empty());
        args.scope.enable_namespaces_by_default = enable_namespaces_by_default;
        Ok(args)
    }

    /// The revision served, `None` for the default revision (absent, empty or `default`).
    pub fn named_revision(&self) -> Option<&str> {
        self.revision
            .as_deref()
            .filter(|r| !r.is_empty() && *r != "default")
    }

    fn validate(&self) -> Result<(), WebhookConfigError> {
        if let Some(rev) = self.named_revision() {
            if !dns_label(rev) {
                return Err(WebhookConfigError::Name {
                    flag: "--revision",
                    value: rev.to_string(),
                });
            }
        }
        // The longest name generated is `<webhook-name>-tag-<63-character tag>`; object names stop at 253.
        if self.scope.webhook_name.len() + "-tag-".len() + 63 > 253
            || !self.scope.webhook_name.split('.').all(dns_label)
        {
            return Err(WebhookConfigError::WebhookName {
                value: self.scope.webhook_name.clone(),
            });
        }
        if !self.scope.path.starts_with('/') {
            return Err(WebhookConfigError::Path {
                value: self.scope.path.clone(),
            });
        }
        let revision = self.named_revision().unwrap_or("default");
        for (i, tag) in self.scope.tags.iter().enumerate() {
            if !dns_label(tag) {
                return Err(WebhookConfigError::Name {
                    flag: "--tag",
                    value: tag.clone(),
                });
            }
            if self.scope.tags[..i].contains(tag) {
                return Err(WebhookConfigError::DuplicateTag { tag: tag.clone() });
            }
            if tag == revision {
                return Err(WebhookConfigError::TagIsRevision {
                    tag: tag.clone(),
                    revision: self.revision.clone().filter(|r| !r.is_empty()),
                });
            }
        }
        if self.scope.enable_namespaces_by_default
            && self.named_revision().is_some()
            && !self.scope.tags.iter().any(|t| t == "default")
        {
            return Err(WebhookConfigError::AutoWithoutDefault {
                revision: revision.to_string(),
            });
        }
        Ok(())
    }

    fn webhook(&self, entry: EntryKind, x: &str, ca_bundle: Option<&[u8]>) -> MutatingWebhook {
        MutatingWebhook {
            name: entry.name(),
            admission_review_versions: vec!["v1".to_string(), "v1beta1".to_string()],
            client_config: WebhookClientConfig {
                ca_bundle: ca_bundle.map(|b| ByteString(b.to_vec())),
                service: Some(ServiceReference {
                    name: self.service.clone(),
                    namespace: self.scope.namespace.clone(),
                    path: Some(self.scope.path.clone()),
                    port: Some(self.port),
                }),
                url: None,
            },
            failure_policy: Some("Fail".to_string()),
            match_policy: Some("Equivalent".to_string()),
            namespace_selector: Some(namespace_selector(entry, x, &self.scope.namespace)),
            object_selector: Some(object_selector(entry, x)),
            reinvocation_policy: Some(self.reinvocation_policy.as_str().to_string()),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".to_string()]),
                operations: Some(vec!["CREATE".to_string()]),
                resources: Some(vec!["pods".to_string()]),
                scope: None,
            }]),
            side_effects: "None".to_string(),
            timeout_seconds: Some(self.timeout_seconds),
            match_conditions: self.skip_policy_injected.then(|| {
                vec![MatchCondition {
                    name: SKIP_POLICY_INJECTED.to_string(),
                    expression: format!(
                        "!has(object.metadata.annotations) || !('{}' in object.metadata.annotations)",
                        inject::pod::POLICY_MARKER_ANNOTATION
                    ),
                }]
            }),
        }
    }

    fn configuration(
        &self,
        name: String,
        tag: Option<&str>,
        x: &str,
        ca_bundle: Option<&[u8]>,
    ) -> MutatingWebhookConfiguration {
        let mut labels = BTreeMap::new();
        labels.insert(
            "app.kubernetes.io/name".to_string(),
            "sidecar-injector".to_string(),
        );
        labels.insert(
            REV.to_string(),
            self.named_revision().unwrap_or("default").to_string(),
        );
        if let Some(tag) = tag {
            labels.insert(TAG_LABEL.to_string(), tag.to_string());
        }
        MutatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some(labels),
                ..Default::default()
            },
            webhooks: Some(
                entries(x, self.scope.enable_namespaces_by_default)
                    .into_iter()
                    .map(|e| self.webhook(e, x, ca_bundle))
                    .collect(),
            ),
        }
    }

    /// The revision's configuration followed by one per tag, with `ca_bundle` (PEM) in every entry.
    pub fn configurations(
        &self,
        ca_bundle: Option<&[u8]>,
    ) -> Result<Vec<MutatingWebhookConfiguration>, WebhookConfigError> {
        self.validate()?;
        let revision = self.named_revision();
        let name = match revision {
            Some(rev) => format!("{}-{rev}", self.scope.webhook_name),
            None => self.scope.webhook_name.clone(),
        };
        let mut out =
            vec![self.configuration(name, None, revision.unwrap_or("default"), ca_bundle)];
        for tag in &self.scope.tags {
            out.push(self.configuration(
                format!("{}-tag-{tag}", self.scope.webhook_name),
                Some(tag),
                tag,
                ca_bundle,
            ));
        }
        Ok(out)
    }

    /// [`Args::configurations`] as a YAML stream (documents separated by `---`).
    pub fn yaml(&self, ca_bundle: Option<&[u8]>) -> Result<String, WebhookConfigError> {
        let mut out = String::new();
        for (i, c) in self.configurations(ca_bundle)?.iter().enumerate() {
            if i > 0 {
                out.push_str("---\n");
            }
            let doc = serde_saphyr::to_string(c).map_err(|e| WebhookConfigError::Serialise {
                name: c.metadata.name.clone().unwrap_or_default(),
                message: e.to_string(),
            })?;
            out.push_str(&doc);
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
        Ok(out)
    }
}

/// Reads a PEM CA bundle, requiring at least one certificate and nothing malformed.
pub fn read_ca_bundle(path: &Path) -> Result<Vec<u8>, WebhookConfigError> {
    let pem =
        inject::input::read_bytes(path).map_err(|source| WebhookConfigError::CaBundleRead {
            path: path.to_path_buf(),
            source,
        })?;
    let mut n = 0;
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        c.map_err(|e| WebhookConfigError::CaBundlePem {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        n += 1;
    }
    if n == 0 {
        return Err(WebhookConfigError::CaBundleEmpty {
            path: path.to_path_buf(),
        });
    }
    Ok(pem)
}

/// Runs `injector webhook-config`: the YAML stream on stdout.
pub fn run(args: CommandArgs) -> anyhow::Result<()> {
    use std::io::Write as _;
    let ca = args
        .ca
        .ca_bundle
        .as_deref()
        .map(read_ca_bundle)
        .transpose()?;
    let yaml = args.webhook.yaml(ca.as_deref())?;
    std::io::stdout().lock().write_all(yaml.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::{json, Value};
    use test_support::label_selector::LabelSelector as Evaluator;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(flags: &[&str]) -> Args {
        let mut argv = vec!["webhook-config"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("{flags:?}: {e}"))
            .args
    }

    /// A revision with two tags, one of them `default`: three configurations.
    const CANARY_PROD_DEFAULT: [&str; 6] =
        ["--revision", "canary", "--tag", "prod", "--tag", "default"];

    fn configs(flags: &[&str]) -> Vec<MutatingWebhookConfiguration> {
        args(flags)
            .configurations(None)
            .unwrap_or_else(|e| panic!("{flags:?}: {e}"))
    }

    fn names(c: &MutatingWebhookConfiguration) -> Vec<String> {
        c.webhooks
            .iter()
            .flatten()
            .map(|w| w.name.clone())
            .collect()
    }

    fn entry_names(prefixes: &[&str]) -> Vec<String> {
        prefixes
            .iter()
            .map(|p| format!("{p}.sidecar-injector.istio.io"))
            .collect()
    }

    fn labels(c: &MutatingWebhookConfiguration) -> BTreeMap<String, String> {
        c.metadata.labels.clone().unwrap_or_default()
    }

    fn hook<'a>(c: &'a MutatingWebhookConfiguration, prefix: &str) -> &'a MutatingWebhook {
        let name = format!("{prefix}.sidecar-injector.istio.io");
        c.webhooks
            .iter()
            .flatten()
            .find(|w| w.name == name)
            .unwrap_or_else(|| panic!("no entry {name} in {:?}", names(c)))
    }

    fn json_of<T: serde::Serialize>(t: &T) -> Value {
        serde_json::to_value(t).expect("serialises")
    }

    #[test]
    fn default_revision_has_istios_four_entries() {
        let c = configs(&[]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].metadata.name.as_deref(), Some("sidecar-injector"));
        assert_eq!(
            names(&c[0]),
            entry_names(&["rev.namespace", "rev.object", "namespace", "object"])
        );
        assert_eq!(labels(&c[0])["istio.io/rev"], "default");
        assert!(!labels(&c[0]).contains_key("istio.io/tag"));
        // `--revision default` and an empty revision are the default revision too.
        for flags in [&["--revision", "default"][..], &["--revision", ""][..]] {
            let again = configs(flags);
            assert_eq!(json_of(&again), json_of(&c), "{flags:?}");
        }
    }

    #[test]
    fn entries_select_as_istios_chart_plus_the_exclusions() {
        let c = configs(&["--enable-namespaces-by-default", "--namespace", "mesh"]);
        let excl = json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                          "values": ["kube-system", "mesh"]});
        let want = [
            (
                "rev.namespace",
                json!([{"key": "istio.io/rev", "operator": "In", "values": ["default"]},
                       {"key": "istio-injection", "operator": "DoesNotExist"}, excl]),
                json!([{"key": "sidecar.istio.io/inject", "operator": "NotIn", "values": ["false"]}]),
            ),
            (
                "rev.object",
                json!([{"key": "istio.io/rev", "operator": "DoesNotExist"},
                       {"key": "istio-injection", "operator": "DoesNotExist"}, excl]),
                json!([{"key": "sidecar.istio.io/inject", "operator": "NotIn", "values": ["false"]},
                       {"key": "istio.io/rev", "operator": "In", "values": ["default"]}]),
            ),
            (
                "namespace",
                json!([{"key": "istio-injection", "operator": "In", "values": ["enabled"]}, excl]),
                json!([{"key": "sidecar.istio.io/inject", "operator": "NotIn", "values": ["false"]}]),
            ),
            (
                "object",
                json!([{"key": "istio-injection", "operator": "DoesNotExist"},
                       {"key": "istio.io/rev", "operator": "DoesNotExist"}, excl]),
                json!([{"key": "sidecar.istio.io/inject", "operator": "In", "values": ["true"]},
                       {"key": "istio.io/rev", "operator": "DoesNotExist"}]),
            ),
            (
                "auto",
                json!([{"key": "istio-injection", "operator": "DoesNotExist"},
                       {"key": "istio.io/rev", "operator": "DoesNotExist"},
                       {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                        "values": ["kube-system", "kube-public", "kube-node-lease",
                                   "local-path-storage", "mesh"]}]),
                json!([{"key": "sidecar.istio.io/inject", "operator": "DoesNotExist"},
                       {"key": "istio.io/rev", "operator": "DoesNotExist"}]),
            ),
        ];
        assert_eq!(
            names(&c[0]),
            entry_names(&want.iter().map(|w| w.0).collect::<Vec<_>>())
        );
        for (prefix, ns, obj) in want {
            let h = hook(&c[0], prefix);
            assert_eq!(
                json_of(&h.namespace_selector),
                json!({ "matchExpressions": ns }),
                "{prefix} namespaceSelector"
            );
            assert_eq!(
                json_of(&h.object_selector),
                json!({ "matchExpressions": obj }),
                "{prefix} objectSelector"
            );
        }
    }

    #[test]
    fn a_revision_has_only_its_rev_entries() {
        let c = configs(&[
            "--revision",
            "canary",
            "--enable-namespaces-by-default",
            "--tag",
            "default",
        ]);
        assert_eq!(
            c[0].metadata.name.as_deref(),
            Some("sidecar-injector-canary")
        );
        assert_eq!(names(&c[0]), entry_names(&["rev.namespace", "rev.object"]));
        assert_eq!(labels(&c[0])["istio.io/rev"], "canary");
        let rn = json_of(&hook(&c[0], "rev.namespace").namespace_selector);
        assert_eq!(rn["matchExpressions"][0]["values"], json!(["canary"]));
        let ro = json_of(&hook(&c[0], "rev.object").object_selector);
        assert_eq!(ro["matchExpressions"][1]["values"], json!(["canary"]));
        // Without a tag `default`, nothing would use --enable-namespaces-by-default.
        let c = configs(&["--revision", "canary"]);
        assert_eq!(c.len(), 1);
        assert_eq!(names(&c[0]), entry_names(&["rev.namespace", "rev.object"]));
    }

    #[test]
    fn one_configuration_per_tag_labelled_and_calling_this_injector() {
        let c = configs(
            &[
                &CANARY_PROD_DEFAULT[..],
                &[
                    "--service",
                    "inj",
                    "--namespace",
                    "mesh",
                    "--path",
                    "/inject/cluster/c1/net/n1",
                    "--port",
                    "8443",
                    "--reinvocation-policy",
                    "if-needed",
                    "--timeout-seconds",
                    "5",
                ],
            ]
            .concat(),
        );
        let got: Vec<_> = c
            .iter()
            .map(|c| {
                (
                    c.metadata.name.clone().unwrap_or_default(),
                    labels(c),
                    names(c),
                )
            })
            .collect();
        let l = |tag: Option<&str>| {
            let mut m = BTreeMap::from([
                (
                    "app.kubernetes.io/name".to_string(),
                    "sidecar-injector".to_string(),
                ),
                ("istio.io/rev".to_string(), "canary".to_string()),
            ]);
            if let Some(t) = tag {
                m.insert("istio.io/tag".to_string(), t.to_string());
            }
            m
        };
        assert_eq!(
            got,
            vec![
                (
                    "sidecar-injector-canary".to_string(),
                    l(None),
                    entry_names(&["rev.namespace", "rev.object"])
                ),
                (
                    "sidecar-injector-tag-prod".to_string(),
                    l(Some("prod")),
                    entry_names(&["rev.namespace", "rev.object"])
                ),
                (
                    "sidecar-injector-tag-default".to_string(),
                    l(Some("default")),
                    entry_names(&["rev.namespace", "rev.object", "namespace", "object"])
                ),
            ]
        );
        let prod = json_of(&hook(&c[1], "rev.namespace").namespace_selector);
        assert_eq!(prod["matchExpressions"][0]["values"], json!(["prod"]));
        for w in c.iter().flat_map(|c| c.webhooks.iter().flatten()) {
            let svc = w.client_config.service.as_ref().expect("service");
            assert_eq!(
                (
                    svc.name.as_str(),
                    svc.namespace.as_str(),
                    svc.path.as_deref(),
                    svc.port
                ),
                ("inj", "mesh", Some("/inject/cluster/c1/net/n1"), Some(8443)),
                "{}",
                w.name
            );
            assert_eq!(w.reinvocation_policy.as_deref(), Some("IfNeeded"));
            assert_eq!(w.timeout_seconds, Some(5));
            assert_eq!(w.failure_policy.as_deref(), Some("Fail"));
            assert_eq!(w.side_effects, "None");
            assert!(w.client_config.ca_bundle.is_none());
        }
    }

    #[test]
    fn skip_policy_injected_adds_one_match_condition_to_every_entry() {
        let flags = ["--tag", "prod", "--enable-namespaces-by-default"];
        let plain = configs(&flags);
        let hooks = |c: &[MutatingWebhookConfiguration]| -> Vec<MutatingWebhook> {
            c.iter()
                .flat_map(|c| c.webhooks.clone().unwrap_or_default())
                .collect()
        };
        assert!(hooks(&plain).iter().all(|w| w.match_conditions.is_none()));
        let skip = configs(&[&flags[..], &["--skip-policy-injected"]].concat());
        let mut skipped = hooks(&skip);
        assert_eq!(skipped.len(), 7);
        for w in &mut skipped {
            let mc = w.match_conditions.take().expect("a match condition");
            assert_eq!(mc.len(), 1, "{}", w.name);
            assert_eq!(mc[0].name, SKIP_POLICY_INJECTED);
            assert_eq!(
                mc[0].expression,
                "!has(object.metadata.annotations) || !('policy.sidecar-inject.io/injected' in object.metadata.annotations)"
            );
        }
        // Nothing else changes.
        assert_eq!(json_of(&skipped), json_of(&hooks(&plain)));
    }

    #[test]
    fn kube_system_and_the_own_namespace_are_never_selected() {
        let all = [
            configs(&["--enable-namespaces-by-default", "--namespace", "mesh"]),
            configs(&[&CANARY_PROD_DEFAULT[..], &["--namespace", "mesh"]].concat()),
        ];
        let ns_labels = [
            vec![],
            vec![("istio-injection", "enabled")],
            vec![("istio.io/rev", "default")],
            vec![("istio.io/rev", "canary")],
            vec![("istio.io/rev", "prod")],
        ];
        let pod_labels = [
            vec![],
            vec![("sidecar.istio.io/inject", "true")],
            vec![("istio.io/rev", "canary")],
            vec![("istio.io/rev", "default")],
        ];
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut selected_elsewhere = 0;
        for w in all
            .iter()
            .flatten()
            .flat_map(|c| c.webhooks.iter().flatten())
        {
            let ns_sel = Evaluator::from_json(&json_of(&w.namespace_selector)).expect("valid");
            let obj_sel = Evaluator::from_json(&json_of(&w.object_selector)).expect("valid");
            for name in ["kube-system", "mesh", "apps"] {
                for nl in &ns_labels {
                    let mut ns = map(nl);
                    ns.insert("kubernetes.io/metadata.name".into(), name.into());
                    for pl in &pod_labels {
                        let hit = ns_sel.matches(&ns) && obj_sel.matches(&map(pl));
                        if name == "apps" {
                            selected_elsewhere += usize::from(hit);
                        } else {
                            assert!(!hit, "{} selects {name} {nl:?} {pl:?}", w.name);
                        }
                    }
                }
            }
        }
        // The same labels in another namespace do reach the entries.
        assert!(selected_elsewhere > 10, "{selected_elsewhere}");
        // The own namespace is listed once when it is kube-system.
        let c = configs(&["--namespace", "kube-system"]);
        let sel = json_of(&hook(&c[0], "namespace").namespace_selector);
        assert_eq!(sel["matchExpressions"][1]["values"], json!(["kube-system"]));
    }

    #[test]
    fn ca_bundle_goes_base64_into_every_entry() {
        let a = args(&["--tag", "prod"]);
        let pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let yaml = a.yaml(Some(pem)).expect("yaml");
        let docs: Vec<&str> = yaml.split("---\n").collect();
        assert_eq!(docs.len(), 2, "{yaml}");
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pem);
        assert_eq!(yaml.matches(&b64).count(), 6, "{yaml}");
        for doc in docs {
            let c: MutatingWebhookConfiguration = serde_saphyr::from_str(doc).expect("parses");
            for w in c.webhooks.iter().flatten() {
                assert_eq!(
                    w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()),
                    Some(&pem[..])
                );
            }
        }
        let without = a.yaml(None).expect("yaml");
        assert!(!without.contains("caBundle"), "{without}");
    }

    #[test]
    fn ca_bundle_file_must_hold_a_certificate() {
        let dir = test_support::TempDir::new("ca-bundle");
        let missing = dir.path().join("missing.pem");
        let err = read_ca_bundle(&missing).expect_err("missing file");
        assert!(matches!(err, WebhookConfigError::CaBundleRead { .. }));
        assert!(err.to_string().contains("missing.pem"), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a pem\n").expect("write");
        let err = read_ca_bundle(&empty).expect_err("no certificate");
        assert!(
            matches!(err, WebhookConfigError::CaBundleEmpty { .. }),
            "{err}"
        );
        let good = dir.path().join("ca.pem");
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        std::fs::write(&good, pem).expect("write");
        assert_eq!(read_ca_bundle(&good).expect("reads"), pem.as_bytes());
    }

    #[test]
    fn refused_flag_combinations_name_the_flag_and_value() {
        let cases: &[(&[&str], &str)] = &[
            (&["--tag", "Prod"], "--tag \"Prod\""),
            (&["--tag=-x"], "--tag \"-x\""),
            (&["--revision", "canary_1"], "--revision \"canary_1\""),
            (
                &["--tag", "prod", "--tag", "prod"],
                "--tag \"prod\" is given twice",
            ),
            (
                &["--revision", "canary", "--tag", "canary"],
                "--tag \"canary\" names the revision",
            ),
            (
                &["--tag", "default"],
                "--tag \"default\" names the revision itself (the default revision, served without --revision); both",
            ),
            (
                &["--revision", "", "--tag", "default"],
                "(the default revision, served without --revision)",
            ),
            (
                &["--revision", "default", "--tag", "default"],
                "--tag \"default\" names the revision itself (--revision \"default\"); both",
            ),
            (
                &["--revision", "canary", "--enable-namespaces-by-default"],
                "--enable-namespaces-by-default needs",
            ),
            (&["--path", "inject"], "--path \"inject\""),
            (
                &["--webhook-name", "Bad Name"],
                "--webhook-name \"Bad Name\"",
            ),
        ];
        for (flags, want) in cases {
            let err = args(flags)
                .configurations(None)
                .expect_err(&format!("{flags:?} accepted"));
            assert!(err.to_string().contains(want), "{flags:?}: {err}");
        }
        // Dot-separated labels of at most 63: 186 characters is one too many, 185 fits.
        let name = |last: usize| format!("{0}.{0}.{1}", "a".repeat(62), "a".repeat(last));
        let err = args(&["--webhook-name", &name(60)])
            .configurations(None)
            .expect_err("a name too long for the tag configurations");
        assert!(err.to_string().contains("at most 185"), "{err}");
        let fits = args(&["--webhook-name", &name(59), "--tag", &"t".repeat(63)])
            .configurations(None)
            .expect("185 characters fit");
        assert_eq!(fits[1].metadata.name.as_ref().map(String::len), Some(253));
        assert!(Cli::try_parse_from(["x", "--timeout-seconds", "31"]).is_err());
        assert!(Cli::try_parse_from(["x", "--reinvocation-policy", "always"]).is_err());
    }

    #[test]
    fn certs_takes_the_same_flags() {
        #[derive(Debug, Parser)]
        struct Certs {
            #[command(flatten)]
            args: crate::certs::Args,
        }
        let flags = [
            "--revision",
            "canary",
            "--tag",
            "prod",
            "--service",
            "inj",
            "--namespace",
            "mesh",
            "--reinvocation-policy",
            "if-needed",
            "--timeout-seconds",
            "7",
            "--path",
            "/x",
        ];
        let certs = Certs::try_parse_from(std::iter::once("certs").chain(flags))
            .expect("certs parses the webhook flags")
            .args;
        assert_eq!(
            json_of(&certs.webhook.configurations(None).expect("generates")),
            json_of(&configs(&flags))
        );
    }
}
