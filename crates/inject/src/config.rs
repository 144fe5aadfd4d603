//! Configuration in Istio's formats: the `values`, `config` and `mesh` documents of Istio's ConfigMaps,
//! the process environment istiod reads for injection, and the command-line flags shared by `serve` and
//! `kube-inject`. Everything is parsed and validated once, in [`Settings::load`], never per request.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::decision::{LabelSelector, Policy};
use crate::defaults::{builtin_mesh, builtin_values, deep_merge};
use crate::user_template::{self, UserTemplates};
use sidecar_core::fields::{self, Fields};

/// `--native-sidecars` / `ENABLE_NATIVE_SIDECARS`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum NativeSidecars {
    /// Istio detects native-sidecar support from the cluster's kubelet versions (the pod's node, else
    /// all nodes ≥ 1.33 → on): so does `serve --kubeconfig` / `--in-cluster`.
    /// Without a cluster client every supported Kubernetes (≥ 1.33, the version this project targets)
    /// runs native sidecars, so `auto` resolves to on — as in Istio's test environment.
    #[default]
    Auto,
    /// `istio-proxy` is an init container with `restartPolicy: Always`.
    True,
    /// `istio-proxy` is a regular container.
    False,
}

impl NativeSidecars {
    /// The global decision (Istio's `DetectNativeSidecar` in `webhook.go`, without a node client).
    pub fn resolve(self) -> bool {
        !matches!(self, NativeSidecars::False)
    }
}

/// Flags shared by `injector serve`, `injector kube-inject` and `injector explain` (flattened into each).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// The `values` document of the istio-sidecar-injector ConfigMap (JSON or YAML), merged over the
    /// built-in chart defaults; a null deletes a key. At most 16 MiB, as every input file.
    #[arg(long = "values", alias = "valuesFile", value_name = "FILE")]
    pub values: Option<PathBuf>,
    /// The injector `config` document (policy, selectors, injectedAnnotations, defaultTemplates,
    /// aliases, `templates`: a text given renders as given, one not given is Istio 1.31.0-rc.0's, compiled
    /// in). At most 16 MiB.
    #[arg(
        long = "injector-config",
        alias = "injectConfigFile",
        value_name = "FILE"
    )]
    pub injector_config: Option<PathBuf>,
    /// The MeshConfig document (YAML), merged over Istio's MeshConfig defaults. At most 16 MiB.
    #[arg(long = "mesh-config", alias = "meshConfigFile", value_name = "FILE")]
    pub mesh_config: Option<PathBuf>,
    /// A directory laid out like Istio's mounted ConfigMaps: files `values`, `config` and `mesh` (each
    /// optional, each at most 16 MiB). An explicit file flag wins over the directory's file.
    #[arg(long = "config-dir", value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// Whether `istio-proxy` runs as a native sidecar.
    #[arg(
        long = "native-sidecars",
        env = "ENABLE_NATIVE_SIDECARS",
        value_enum,
        ignore_case = true,
        default_value = "auto"
    )]
    pub native_sidecars: NativeSidecars,
    /// The revision this injector serves (`default` and empty mean the default revision).
    #[arg(long = "revision", env = "REVISION", default_value = "")]
    pub revision: String,
    /// Compliance policy of the injector process (istiod's `COMPLIANCE_POLICY`, e.g. `fips-140-3`),
    /// passed to the proxy.
    #[arg(
        long = "compliance-policy",
        env = "COMPLIANCE_POLICY",
        default_value = ""
    )]
    pub compliance_policy: String,
    /// Render every configured pod-template text through the evaluator, also a text the compiled
    /// templates were built from (which otherwise renders compiled, the faster path with the same
    /// output). For checking that claim on your own pods, and for the differentials.
    #[arg(long = "evaluate-texts", env = "INJECTOR_EVALUATE_TEXTS")]
    pub evaluate_texts: bool,
}

impl ConfigArgs {
    /// Every file or directory whose change should trigger a reload (values, injector config, mesh
    /// config, config dir), for the webhook's reload watcher.
    pub fn watched_paths(&self) -> Vec<PathBuf> {
        [
            &self.values,
            &self.injector_config,
            &self.mesh_config,
            &self.config_dir,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }
}

/// An invalid configuration document; names the file, key and value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] crate::input::FlagFileError),
    /// The file is not valid JSON/YAML.
    #[error("{path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: sidecar_core::yaml::YamlError,
    },
    /// A key has a value of the wrong type or an invalid value.
    #[error("{path}: key {key}: invalid value {value}: {reason}")]
    Invalid {
        path: String,
        key: String,
        value: String,
        reason: String,
    },
    /// A user template was refused (file, key, template, line and construct).
    #[error(transparent)]
    Template(#[from] crate::user_template::LoadError),
}

/// The injector `config` document, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct InjectorConfig {
    pub policy: Policy,
    pub always_inject_selector: Vec<LabelSelector>,
    pub never_inject_selector: Vec<LabelSelector>,
    pub injected_annotations: BTreeMap<String, String>,
    /// Never empty (Istio: empty means `[sidecar]`).
    pub default_templates: Vec<String>,
    pub aliases: BTreeMap<String, Vec<String>>,
}

impl Default for InjectorConfig {
    fn default() -> Self {
        InjectorConfig {
            policy: Policy::Enabled,
            always_inject_selector: Vec::new(),
            never_inject_selector: Vec::new(),
            injected_annotations: BTreeMap::new(),
            default_templates: vec!["sidecar".to_string()],
            aliases: BTreeMap::new(),
        }
    }
}

/// Everything the engine needs, loaded and validated once (not per request).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The values document, defaults merged.
    pub values: Value,
    /// The MeshConfig, defaults merged.
    pub mesh: Value,
    pub injector: InjectorConfig,
    /// The global native-sidecar decision.
    pub native_sidecars: bool,
    /// `--native-sidecars auto`: with watched Nodes the webhook decides per pod (`native_sidecars`).
    pub native_sidecars_auto: bool,
    /// Empty for the default revision.
    pub revision: String,
    pub compliance_policy: String,
    /// The user templates of `templates`, parsed once here.
    pub user_templates: UserTemplates,
    /// Non-fatal findings while loading (e.g. unused chart template texts), for the caller to log.
    pub warnings: Vec<String>,
    /// The files the settings came from (for reload watchers).
    pub sources: Sources,
}

/// Where each document came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    pub values: Option<PathBuf>,
    pub injector_config: Option<PathBuf>,
    pub mesh_config: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            values: builtin_values().clone(),
            mesh: builtin_mesh().clone(),
            injector: InjectorConfig::default(),
            native_sidecars: true,
            native_sidecars_auto: false,
            revision: String::new(),
            compliance_policy: String::new(),
            user_templates: UserTemplates::default(),
            warnings: Vec::new(),
            sources: Sources::default(),
        }
    }
}

/// Values blocks that replace the default whole instead of merging into it. A `values` document from an
/// Istio ConfigMap is complete (Helm already merged the chart defaults and dropped nulls), so a resources
/// block without `cpu` means "no cpu": merging the default `cpu` back in would undo the user's deletion.
const ATOMIC_VALUES_BLOCKS: [&[&str]; 1] = [&["global", "proxy", "resources"]];

fn replace_atomic_blocks(merged: &mut Value, overlay: &Value) {
    for keys in ATOMIC_VALUES_BLOCKS {
        if let Some(block @ Value::Object(_)) = fields::path(overlay, keys) {
            let mut fresh = Value::Object(Map::new());
            deep_merge(&mut fresh, block);
            if let Some(slot) = fields::path_mut(merged, keys) {
                *slot = fresh;
            }
        }
    }
}

fn read_doc(flag: &'static str, path: &Path) -> Result<Value, ConfigError> {
    let text = crate::input::read_flag_file(flag, path)?;
    sidecar_core::yaml::parse_json_or_yaml(&text).map_err(|source| ConfigError::Parse {
        path: path.display().to_string(),
        source,
    })
}

fn invalid(path: &str, key: &str, value: &Value, reason: impl Into<String>) -> ConfigError {
    let mut v = value.to_string();
    if v.len() > 200 {
        v.truncate(200);
        v.push('…');
    }
    ConfigError::Invalid {
        path: path.to_string(),
        key: key.to_string(),
        value: v,
        reason: reason.into(),
    }
}

fn expect_object(path: &str, key: &str, v: &Value) -> Result<(), ConfigError> {
    if v.is_object() {
        Ok(())
    } else {
        Err(invalid(path, key, v, "expected a mapping"))
    }
}

impl Settings {
    /// Loads and validates the configuration named by `args` (the environment was read by clap).
    pub fn load(args: &ConfigArgs) -> Result<Settings, ConfigError> {
        let pick = |flag: &Option<PathBuf>, name: &str| -> Option<PathBuf> {
            flag.clone().or_else(|| {
                args.config_dir
                    .as_ref()
                    .map(|d| d.join(name))
                    .filter(|p| p.exists())
            })
        };
        let sources = Sources {
            values: pick(&args.values, "values"),
            injector_config: pick(&args.injector_config, "config"),
            mesh_config: pick(&args.mesh_config, "mesh"),
        };
        // The flag a read error names: the file's own flag, else the directory it was found in.
        let flag = |own: &Option<PathBuf>, name: &'static str| {
            if own.is_some() {
                name
            } else {
                "--config-dir"
            }
        };
        let values = match &sources.values {
            Some(p) => Some((
                p.display().to_string(),
                read_doc(flag(&args.values, "--values"), p)?,
            )),
            None => None,
        };
        let mesh = match &sources.mesh_config {
            Some(p) => Some((
                p.display().to_string(),
                read_doc(flag(&args.mesh_config, "--mesh-config"), p)?,
            )),
            None => None,
        };
        let config = match &sources.injector_config {
            Some(p) => Some((
                p.display().to_string(),
                read_doc(flag(&args.injector_config, "--injector-config"), p)?,
            )),
            None => None,
        };
        let mut s = Settings::with_args(
            values.as_ref().map(|(p, v)| (p.as_str(), v)),
            mesh.as_ref().map(|(p, v)| (p.as_str(), v)),
            config.as_ref().map(|(p, v)| (p.as_str(), v)),
            args,
        )?;
        s.sources = sources;
        Ok(s)
    }

    /// [`Settings::from_documents`] with the other settings of `args` (native sidecars, revision,
    /// compliance).
    fn with_args(
        values: Option<(&str, &Value)>,
        mesh: Option<(&str, &Value)>,
        injector_config: Option<(&str, &Value)>,
        args: &ConfigArgs,
    ) -> Result<Settings, ConfigError> {
        let mut s = Settings::from_documents_evaluating(
            values,
            mesh,
            injector_config,
            args.native_sidecars.resolve(),
            &args.revision,
            &args.compliance_policy,
            args.evaluate_texts,
        )?;
        s.native_sidecars_auto = args.native_sidecars == NativeSidecars::Auto;
        Ok(s)
    }

    /// Builds settings from documents' text (`(name for errors, text)`), e.g. ConfigMap keys read
    /// through the API, with the other settings of `args` (native sidecars, revision, compliance).
    pub fn from_texts(
        values: Option<(&str, &str)>,
        mesh: Option<(&str, &str)>,
        injector_config: Option<(&str, &str)>,
        args: &ConfigArgs,
    ) -> Result<Settings, ConfigError> {
        fn parse<'a>(
            doc: Option<(&'a str, &str)>,
        ) -> Result<Option<(&'a str, Value)>, ConfigError> {
            doc.map(|(name, text)| {
                sidecar_core::yaml::parse_json_or_yaml(text)
                    .map(|v| (name, v))
                    .map_err(|source| ConfigError::Parse {
                        path: name.to_string(),
                        source,
                    })
            })
            .transpose()
        }
        let (values, mesh, config) = (parse(values)?, parse(mesh)?, parse(injector_config)?);
        Settings::with_args(
            values.as_ref().map(|(p, v)| (*p, v)),
            mesh.as_ref().map(|(p, v)| (*p, v)),
            config.as_ref().map(|(p, v)| (*p, v)),
            args,
        )
    }

    /// Builds settings from already-parsed documents (`(name for errors, document)`), e.g. from a
    /// ConfigMap or in tests.
    pub fn from_documents(
        values: Option<(&str, &Value)>,
        mesh: Option<(&str, &Value)>,
        injector_config: Option<(&str, &Value)>,
        native_sidecars: bool,
        revision: &str,
        compliance_policy: &str,
    ) -> Result<Settings, ConfigError> {
        Settings::from_documents_evaluating(
            values,
            mesh,
            injector_config,
            native_sidecars,
            revision,
            compliance_policy,
            false,
        )
    }

    /// [`Settings::from_documents`], rendering every configured pod-template text through the evaluator
    /// when `evaluate_texts` ([`ConfigArgs::evaluate_texts`]).
    #[allow(clippy::too_many_arguments)]
    fn from_documents_evaluating(
        values: Option<(&str, &Value)>,
        mesh: Option<(&str, &Value)>,
        injector_config: Option<(&str, &Value)>,
        native_sidecars: bool,
        revision: &str,
        compliance_policy: &str,
        evaluate_texts: bool,
    ) -> Result<Settings, ConfigError> {
        let mut warnings = Vec::new();

        let mut merged_values = builtin_values().clone();
        if let Some((path, v)) = values {
            if !v.is_null() {
                expect_object(path, "(document)", v)?;
                deep_merge(&mut merged_values, v);
                replace_atomic_blocks(&mut merged_values, v);
            }
            validate_values(path, &merged_values)?;
        }

        let mut merged_mesh = builtin_mesh().clone();
        if let Some((path, m)) = mesh {
            if !m.is_null() {
                expect_object(path, "(document)", m)?;
                deep_merge(&mut merged_mesh, m);
            }
            validate_mesh(path, &merged_mesh)?;
        }

        let injector = match injector_config {
            Some((path, c)) if !c.is_null() => parse_injector_config(path, c, &mut warnings)?,
            _ => injector_config_from_values(&merged_values, &mut warnings)?,
        };
        let user_templates = UserTemplates::load(
            user_template::Sources {
                config: injector_config
                    .filter(|(_, c)| c.is_object())
                    .and_then(|(p, c)| c.field("templates").map(|t| (p, t))),
                values: fields::path(&merged_values, ["sidecarInjectorWebhook", "templates"])
                    .map(|t| (values.map_or("values", |(p, _)| p), t)),
                evaluate_texts,
            },
            &mut warnings,
        )?;

        let revision = if revision == "default" { "" } else { revision };
        Ok(Settings {
            values: merged_values,
            mesh: merged_mesh,
            injector,
            native_sidecars,
            native_sidecars_auto: false,
            revision: revision.to_string(),
            compliance_policy: compliance_policy.to_string(),
            user_templates,
            warnings,
            sources: Sources::default(),
        })
    }
}

fn type_error(path: &str, e: crate::config_types::TypeError) -> ConfigError {
    invalid(path, &e.field, &e.value, e.reason)
}

/// Type and value checks of the values keys the injector reads: their types as Istio's `Values` proto
/// decodes them (`config_types::VALUES`), then the values that reach `istio-init` arguments get the same
/// validation as the corresponding pod annotations.
fn validate_values(path: &str, v: &Value) -> Result<(), ConfigError> {
    use sidecar_core::validate;
    crate::config_types::check(&crate::config_types::VALUES, v, "")
        .map_err(|e| type_error(path, e))?;
    type Check = fn(&str) -> Result<(), String>;
    let string_checks: &[(&str, Check)] = &[
        (
            "global.proxy.includeIPRanges",
            validate::validate_include_ip_ranges,
        ),
        (
            "global.proxy.excludeIPRanges",
            validate::validate_exclude_ip_ranges,
        ),
        ("global.proxy.includeInboundPorts", |s| {
            if s == "*" {
                Ok(())
            } else {
                validate::validate_port_list(s)
            }
        }),
        (
            "global.proxy.excludeInboundPorts",
            validate::validate_port_list,
        ),
        (
            "global.proxy.includeOutboundPorts",
            validate::validate_port_list,
        ),
        (
            "global.proxy.excludeOutboundPorts",
            validate::validate_port_list,
        ),
        ("global.logging.level", validate::validate_log_level),
        ("global.imagePullPolicy", |s| match s {
            "" | "Always" | "IfNotPresent" | "Never" => Ok(()),
            _ => Err("expected Always, IfNotPresent or Never".to_string()),
        }),
    ];
    for (key, check) in string_checks {
        match fields::path(v, key.split('.')) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                check(s).map_err(|r| invalid(path, key, &Value::String(s.clone()), r))?
            }
            Some(other) => return Err(invalid(path, key, other, "expected a string")),
        }
    }
    if let Some(r) = fields::path(v, ["global", "proxy", "resources"]) {
        if !r.is_null() {
            expect_object(path, "global.proxy.resources", r)?;
            for kind in ["limits", "requests"] {
                if let Some(Value::Object(m)) = r.field(kind) {
                    for (res, q) in m {
                        let key = format!("global.proxy.resources.{kind}.{res}");
                        let ok = match q {
                            Value::String(s) => validate::validate_quantity(s).is_ok(),
                            Value::Number(_) | Value::Null => true,
                            _ => false,
                        };
                        if !ok {
                            return Err(invalid(path, &key, q, "expected a Kubernetes quantity"));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The mesh config's types as Istio decodes a MeshConfig (`config_types::MESH_CONFIG`, the
/// `defaultConfig` included), then the values the injector reads.
fn validate_mesh(path: &str, m: &Value) -> Result<(), ConfigError> {
    crate::config_types::check(&crate::config_types::MESH_CONFIG, m, "")
        .map_err(|e| type_error(path, e))?;
    if let Some(dc) = m.field("defaultConfig") {
        expect_object(path, "defaultConfig", dc)?;
        let mut pc = crate::defaults::builtin_proxy_config();
        crate::effective_proxy_config::apply_overlay(&mut pc, dc);
        crate::effective_proxy_config::validate(&pc)
            .map_err(|r| invalid(path, "defaultConfig", dc, r))?;
    }
    Ok(())
}

/// The list at `key` (absent or null: empty), each item read by `item`; `what` says what the list holds.
fn list<T>(
    path: &str,
    key: &str,
    v: Option<&Value>,
    what: &str,
    item: impl Fn(&Value) -> Result<T, String>,
) -> Result<Vec<T>, ConfigError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, x)| item(x).map_err(|r| invalid(path, &format!("{key}[{i}]"), x, r)))
            .collect(),
        Some(other) => Err(invalid(
            path,
            key,
            other,
            format!("expected a list of {what}"),
        )),
    }
}

fn selectors(path: &str, key: &str, v: Option<&Value>) -> Result<Vec<LabelSelector>, ConfigError> {
    list(path, key, v, "label selectors", |s| {
        LabelSelector::from_json(s).map_err(|e| e.0)
    })
}

fn string_map(
    path: &str,
    key: &str,
    v: Option<&Value>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    match v {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, val)| match val {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(invalid(
                    path,
                    &format!("{key}.{k}"),
                    other,
                    "expected a string",
                )),
            })
            .collect(),
        Some(other) => Err(invalid(path, key, other, "expected a mapping of strings")),
    }
}

fn string_list(path: &str, key: &str, v: Option<&Value>) -> Result<Vec<String>, ConfigError> {
    list(path, key, v, "strings", |x| {
        x.as_str()
            .map(str::to_string)
            .ok_or_else(|| "expected a string".to_string())
    })
}

fn parse_injector_config(
    path: &str,
    c: &Value,
    warnings: &mut Vec<String>,
) -> Result<InjectorConfig, ConfigError> {
    expect_object(path, "(document)", c)?;
    let policy = match c.field("policy") {
        None | Some(Value::Null) => {
            warnings.push(format!(
                "{path}: no `policy`: Istio treats an empty policy as \"never inject\""
            ));
            Policy::Other(String::new())
        }
        Some(Value::String(s)) => {
            let p = Policy::parse(s);
            if let Policy::Other(o) = &p {
                warnings.push(format!(
                    "{path}: policy {o:?} is neither \"enabled\" nor \"disabled\": no pod will be injected"
                ));
            }
            p
        }
        Some(other) => {
            return Err(invalid(
                path,
                "policy",
                other,
                "expected \"enabled\" or \"disabled\"",
            ))
        }
    };
    let mut default_templates = string_list(path, "defaultTemplates", c.field("defaultTemplates"))?;
    if default_templates.is_empty() {
        default_templates.push("sidecar".to_string());
    }
    let aliases = match c.field("aliases") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                Ok((
                    k.clone(),
                    string_list(path, &format!("aliases.{k}"), Some(v))?,
                ))
            })
            .collect::<Result<_, ConfigError>>()?,
        Some(other) => {
            return Err(invalid(
                path,
                "aliases",
                other,
                "expected a mapping of name lists",
            ))
        }
    };
    Ok(InjectorConfig {
        policy,
        always_inject_selector: selectors(
            path,
            "alwaysInjectSelector",
            c.field("alwaysInjectSelector"),
        )?,
        never_inject_selector: selectors(
            path,
            "neverInjectSelector",
            c.field("neverInjectSelector"),
        )?,
        injected_annotations: string_map(
            path,
            "injectedAnnotations",
            c.field("injectedAnnotations"),
        )?,
        default_templates,
        aliases,
    })
}

/// Without a `config` document, derive it from the values as Istio's chart does.
fn injector_config_from_values(
    values: &Value,
    warnings: &mut Vec<String>,
) -> Result<InjectorConfig, ConfigError> {
    let path = "values";
    let w = values.field("sidecarInjectorWebhook");
    let policy = fields::path(values, ["global", "proxy", "autoInject"])
        .and_then(Value::as_str)
        .map(Policy::parse)
        .unwrap_or(Policy::Enabled);
    if let Policy::Other(o) = &policy {
        warnings.push(format!(
            "values: global.proxy.autoInject {o:?} is neither \"enabled\" nor \"disabled\": no pod will be injected"
        ));
    }
    let mut default_templates = string_list(
        path,
        "sidecarInjectorWebhook.defaultTemplates",
        w.and_then(|w| w.field("defaultTemplates")),
    )?;
    if default_templates.is_empty() {
        default_templates.push("sidecar".to_string());
    }
    Ok(InjectorConfig {
        policy,
        always_inject_selector: selectors(
            path,
            "sidecarInjectorWebhook.alwaysInjectSelector",
            w.and_then(|w| w.field("alwaysInjectSelector")),
        )?,
        never_inject_selector: selectors(
            path,
            "sidecarInjectorWebhook.neverInjectSelector",
            w.and_then(|w| w.field("neverInjectSelector")),
        )?,
        injected_annotations: string_map(
            path,
            "sidecarInjectorWebhook.injectedAnnotations",
            w.and_then(|w| w.field("injectedAnnotations")),
        )?,
        default_templates,
        aliases: BTreeMap::new(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A file of Istio's injection test data (`testdata/istio/inject`).
    fn testdata(name: &str) -> PathBuf {
        test_support::corpus::inject_dir().join(name)
    }

    #[test]
    fn base_documents_only_spell_out_the_defaults() {
        let base_values = read_doc("--values", &testdata("base-values.json")).unwrap();
        let mut merged = builtin_values().clone();
        deep_merge(&mut merged, &base_values);
        // Only hub and tag (the test registry) differ from the chart defaults.
        let mut expect = builtin_values().clone();
        expect["global"]["hub"] = json!("registry.istio.io/testing");
        expect["global"]["tag"] = json!("latest");
        assert_eq!(merged, expect);
        let base_mesh = read_doc("--mesh-config", &testdata("base-mesh.yaml")).unwrap();
        let mut merged = builtin_mesh().clone();
        deep_merge(&mut merged, &base_mesh);
        assert_eq!(&merged, builtin_mesh());
    }

    #[test]
    fn load_files_and_errors_name_file_key_value() {
        let dir = std::env::temp_dir().join(format!("inj-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("values"),
            "global:\n  proxy:\n    statusPort: 123\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("config"),
            "policy: disabled\ntemplates:\n  waypoint: x\n",
        )
        .unwrap();
        std::fs::write(dir.join("mesh"), "defaultConfig:\n  drainDuration: 23s\n").unwrap();
        let args = ConfigArgs {
            config_dir: Some(dir.clone()),
            revision: "default".into(),
            ..Default::default()
        };
        let s = Settings::load(&args).unwrap();
        assert_eq!(s.values["global"]["proxy"]["statusPort"], json!(123));
        assert_eq!(s.values["global"]["proxy"]["logLevel"], json!("warning"));
        assert_eq!(s.injector.policy, Policy::Disabled);
        assert_eq!(s.injector.default_templates, vec!["sidecar".to_string()]);
        assert!(s.warnings.iter().any(|w| w.contains("templates")));
        assert_eq!(s.mesh["defaultConfig"]["drainDuration"], json!("23s"));
        assert_eq!(s.mesh["defaultConfig"]["statusPort"], json!(15020));
        assert_eq!(s.revision, "");

        std::fs::write(
            dir.join("values"),
            "global:\n  proxy:\n    excludeIPRanges: '*'\n",
        )
        .unwrap();
        let err = Settings::load(&args).unwrap_err().to_string();
        assert!(
            err.contains("values")
                && err.contains("global.proxy.excludeIPRanges")
                && err.contains("\"*\""),
            "{err}"
        );
        std::fs::write(dir.join("values"), "global: [").unwrap();
        assert!(Settings::load(&args)
            .unwrap_err()
            .to_string()
            .contains("values"));
        std::fs::write(dir.join("values"), "{}").unwrap();
        std::fs::write(dir.join("config"), "policy: enabled\nneverInjectSelector:\n- matchExpressions:\n  - key: a\n    operator: Bogus\n").unwrap();
        let err = Settings::load(&args).unwrap_err().to_string();
        assert!(
            err.contains("neverInjectSelector[0]") && err.contains("Bogus"),
            "{err}"
        );
        std::fs::write(dir.join("config"), "policy: enabled\n").unwrap();
        std::fs::write(
            dir.join("mesh"),
            "defaultConfig:\n  drainDuration: forever\n",
        )
        .unwrap();
        let err = Settings::load(&args).unwrap_err().to_string();
        assert!(
            err.contains("defaultConfig") && err.contains("forever"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn type_errors_are_refused_naming_file_field_and_value() {
        let load = |values: Value, mesh: Value| {
            Settings::from_documents(
                Some(("values.yaml", &values)),
                Some(("mesh.yaml", &mesh)),
                None,
                true,
                "",
                "",
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        for (mesh, expect) in [
            (
                json!({"trustDomain": {"a": 1}}),
                r#"mesh.yaml: key trustDomain: invalid value {"a":1}: expected a string"#,
            ),
            (
                json!({"defaultConfig": {"proxyMetadata": {"A\tB": "1"}}}),
                r#"mesh.yaml: key defaultConfig.proxyMetadata: invalid value "A\tB": is not a valid environment variable name"#,
            ),
            (
                json!({"defaultConfig": {"proxyMetadata": {"A=B": "1"}}}),
                r#"invalid value "A=B""#,
            ),
            (
                json!({"defaultConfig": {"proxyMetadata": {"": "1"}}}),
                r#"invalid value """#,
            ),
            (
                json!({"rootNamespace": 7}),
                "mesh.yaml: key rootNamespace: invalid value 7: expected a string",
            ),
            (
                json!({"enablePrometheusMerge": "no"}),
                r#"mesh.yaml: key enablePrometheusMerge: invalid value "no": expected a boolean"#,
            ),
        ] {
            let e = load(json!({}), mesh.clone()).unwrap_err();
            assert!(e.contains(expect), "{mesh}: {e}");
        }
        let e = load(
            json!({"global": {"proxy": {"seccompProfile": "str"}}}),
            json!({}),
        )
        .unwrap_err();
        assert!(
            e.starts_with(r#"values.yaml: key global.proxy.seccompProfile: invalid value "str": expected a mapping"#),
            "{e}"
        );
        let e = load(
            json!({"global": {"proxy": {"readinessPeriodSeconds": "15"}}}),
            json!({}),
        )
        .unwrap_err();
        assert!(
            e.contains("key global.proxy.readinessPeriodSeconds: invalid value \"15\""),
            "{e}"
        );
        load(
            json!({"global": {"proxy": {"seccompProfile": {"type": "RuntimeDefault"}}}}),
            json!({"trustDomain": "td", "defaultConfig": {"proxyMetadata": {"A_B.c-d": "1"}}}),
        )
        .unwrap();
    }

    #[test]
    fn resources_block_replaces_the_default() {
        let v = json!({"global": {"proxy": {"resources": {"limits": {"memory": "500Mi"}, "requests": {"cpu": null, "memory": "150Mi"}}}}});
        let s = Settings::from_documents(Some(("v", &v)), None, None, true, "", "").unwrap();
        assert_eq!(
            s.values["global"]["proxy"]["resources"],
            json!({"limits": {"memory": "500Mi"}, "requests": {"memory": "150Mi"}})
        );
    }

    #[test]
    fn injector_config_defaults_from_values() {
        let v = json!({"global": {"proxy": {"autoInject": "disabled"}},
                       "sidecarInjectorWebhook": {"injectedAnnotations": {"a": "b"},
                       "neverInjectSelector": [{"matchLabels": {"x": "y"}}]}});
        let s = Settings::from_documents(Some(("v", &v)), None, None, true, "", "").unwrap();
        assert_eq!(s.injector.policy, Policy::Disabled);
        assert_eq!(
            s.injector.injected_annotations.get("a").map(String::as_str),
            Some("b")
        );
        assert_eq!(s.injector.never_inject_selector.len(), 1);
    }
}
