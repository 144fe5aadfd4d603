//! What a template is rendered from: the template input ([`TemplateData`], Istio's
//! `SidecarTemplateData`) and the lookups every context builder shares ([`Inputs`]), with Go's printing of
//! a value (`sprint`).

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::error::RenderError;
use crate::pod::{
    self, AGENT_LOG_LEVEL_ANNOTATION, INTERCEPTION_MODE_ANNOTATION, NATIVE_SIDECAR_ANNOTATION,
    STATUS_PORT_ANNOTATION,
};
use sidecar_core::fields::{self, Fields};
use sidecar_core::goconv::template_truthy;

/// The template input (Istio's `SidecarTemplateData`). All documents are JSON as Istio serialises them.
#[derive(Debug, Clone, Copy)]
pub struct TemplateData<'a> {
    /// Workload `kind` / `apiVersion` (webhook: from owner references; kube-inject: the object's own).
    pub kind: &'a str,
    pub api_version: &'a str,
    /// Workload name and namespace.
    pub deploy_name: &'a str,
    pub deploy_namespace: &'a str,
    /// The pod as the template sees it: previous injection stripped, saved overrides re-inserted.
    pub pod: &'a Value,
    /// Effective ProxyConfig (proto JSON names, camelCase).
    pub proxy_config: &'a Value,
    /// MeshConfig (proto JSON names).
    pub mesh: &'a Value,
    /// The `values` document (defaults merged).
    pub values: &'a Value,
    /// Webhook revision; empty for the default revision.
    pub revision: &'a str,
    /// The global native-sidecar decision (Istio's `DetectNativeSidecar`). The template applies the pod's
    /// `sidecar.istio.io/nativeSidecar` annotation itself, with the template's rule (non-empty value
    /// `!= "false"` means native); passing the Go rule's per-pod result here gives the same outcome.
    pub native_sidecars: bool,
    pub proxy_uid: i64,
    pub proxy_gid: i64,
    /// `COMPLIANCE_POLICY` of the injector process.
    pub compliance_policy: &'a str,
    /// The `PROXY_CONFIG` env text of `proxy_config` (see [`proxy_config_env`]) when the caller has it
    /// precomputed (the engine does, once per configuration, for pods without `proxy.istio.io/config`);
    /// `None`: computed here.
    pub proxy_config_env: Option<&'a str>,
}

/// Lookups shared by the context builders, with the per-pod decisions every part needs computed once.
pub(crate) struct Inputs<'a> {
    pub data: &'a TemplateData<'a>,
    pub annotations: Option<&'a Map<String, Value>>,
    pub labels: Option<&'a Map<String, Value>>,
    pub values: &'a Value,
    pub mesh: &'a Value,
    pub proxy_config: &'a Value,
    /// Effective interception mode: annotation, else ProxyConfig (`REDIRECT` when unset).
    pub interception_mode: &'a str,
    pub tproxy: bool,
    /// `values.pilot.cni.enabled`.
    pub cni: bool,
    pub native: bool,
    pub proxy_uid: i64,
    pub proxy_gid: i64,
    /// Status port text: annotation `status.sidecar.istio.io/port`, else `values.global.proxy.statusPort`.
    status_port: Cow<'a, str>,
    /// `values.global` and `values.global.proxy`, looked up once: most settings live there.
    values_global: Option<&'a Value>,
    values_global_proxy: Option<&'a Value>,
}

impl<'a> Inputs<'a> {
    pub(super) fn new(data: &'a TemplateData<'a>) -> Result<Inputs<'a>, RenderError> {
        let annotations = pod::annotations(data.pod);
        let labels = pod::labels(data.pod);
        let ann = |k: &str| annotations.and_then(|a| a.field(k)).and_then(Value::as_str);
        let interception_mode = match ann(INTERCEPTION_MODE_ANNOTATION) {
            Some(m) => m,
            None => proxy_config_interception_mode(data.proxy_config),
        };
        if !matches!(interception_mode, "REDIRECT" | "TPROXY" | "NONE") {
            return Err(match ann(INTERCEPTION_MODE_ANNOTATION) {
                Some(v) => RenderError::InvalidAnnotation {
                    annotation: INTERCEPTION_MODE_ANNOTATION,
                    value: v.to_string(),
                    reason: "must be one of REDIRECT, TPROXY, NONE".to_string(),
                },
                None => RenderError::InvalidSetting {
                    key: "ProxyConfig interceptionMode",
                    value: data.proxy_config["interceptionMode"].to_string(),
                    reason: "must be one of REDIRECT, TPROXY, NONE",
                },
            });
        }
        let mut inputs = Inputs {
            data,
            annotations,
            labels,
            values: data.values,
            mesh: data.mesh,
            proxy_config: data.proxy_config,
            interception_mode,
            tproxy: interception_mode == "TPROXY",
            cni: false,
            // The template's own rule (`injection-template.yaml`, unlike `RunTemplate`'s): a non-empty
            // annotation decides, and anything but "false" means native.
            native: match ann(NATIVE_SIDECAR_ANNOTATION).filter(|v| !v.is_empty()) {
                Some(v) => v != "false",
                None => data.native_sidecars,
            },
            proxy_uid: data.proxy_uid,
            proxy_gid: data.proxy_gid,
            status_port: Cow::Borrowed(""),
            values_global: None,
            values_global_proxy: None,
        };
        inputs.values_global = data.values.field("global");
        inputs.values_global_proxy = inputs.values_global.and_then(|g| g.field("proxy"));
        inputs.cni = template_truthy(inputs.values_at("pilot.cni.enabled"));
        inputs.status_port = match ann(STATUS_PORT_ANNOTATION) {
            Some(p) => Cow::Borrowed(p),
            None => sprint(inputs.values_at("global.proxy.statusPort")),
        };
        Ok(inputs)
    }

    /// The annotation's value when present (non-string values are not annotations and count as absent).
    pub fn ann(&self, key: &str) -> Option<&'a str> {
        self.annotations
            .and_then(|a| a.field(key))
            .and_then(Value::as_str)
    }

    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.labels
            .and_then(|l| l.field(key))
            .and_then(Value::as_str)
    }

    /// `values` at a dotted path.
    pub fn values_at(&self, path: &str) -> Option<&'a Value> {
        let (start, rest) = if let Some(rest) = path.strip_prefix("global.proxy.") {
            (self.values_global_proxy, rest)
        } else if let Some(rest) = path.strip_prefix("global.") {
            (self.values_global, rest)
        } else {
            (Some(self.values), path)
        };
        fields::path(start?, rest.split('.'))
    }

    /// A values string ("" when absent or not a string).
    pub fn values_str(&self, path: &str) -> &'a str {
        self.values_at(path).and_then(Value::as_str).unwrap_or("")
    }

    /// Go-template truthiness of a values entry.
    pub fn values_true(&self, path: &str) -> bool {
        template_truthy(self.values_at(path))
    }

    pub fn status_port(&self) -> &str {
        &self.status_port
    }

    /// `annotation .ObjectMeta KEY DEFAULT`: the annotation when present (even empty), else `fmt.Sprint` of
    /// the values entry (`<nil>` when absent).
    pub fn ann_or_values(&self, key: &str, values_path: &str) -> Cow<'a, str> {
        match self.ann(key) {
            Some(v) => Cow::Borrowed(v),
            None => sprint(self.values_at(values_path)),
        }
    }

    /// `--log_output_level` of both containers.
    pub fn agent_log_level(&self) -> (Cow<'a, str>, Source) {
        match self.ann(AGENT_LOG_LEVEL_ANNOTATION) {
            Some(v) => (
                Cow::Borrowed(v),
                Source::Annotation(AGENT_LOG_LEVEL_ANNOTATION),
            ),
            None => (
                sprint(self.values_at("global.logging.level")),
                Source::Values("global.logging.level"),
            ),
        }
    }

    /// Whether the ProxyConfig's `proxyMetadata` sets `key` to the string `"true"` (the template's
    /// `eq (index .ProxyConfig.ProxyMetadata KEY) "true"`).
    pub fn proxy_metadata_is_true(&self, key: &str) -> bool {
        self.proxy_config
            .field("proxyMetadata")
            .and_then(|m| m.field(key))
            .and_then(Value::as_str)
            == Some("true")
    }

    /// ProxyConfig `proxyMetadata` entries, sorted by key (values printed as Go prints them).
    pub fn proxy_metadata(&self) -> Vec<(&'a str, Cow<'a, str>)> {
        let Some(m) = self
            .proxy_config
            .field("proxyMetadata")
            .and_then(Value::as_object)
        else {
            return Vec::new();
        };
        let mut out: Vec<(&'a str, Cow<'a, str>)> = m
            .iter()
            .map(|(k, v)| (k.as_str(), sprint(Some(v))))
            .collect();
        out.sort_by(|a, b| a.0.cmp(b.0));
        out
    }
}

/// The ProxyConfig's interception mode by name (`REDIRECT` when unset; "" when it is no known mode).
pub(crate) fn proxy_config_interception_mode(proxy_config: &Value) -> &str {
    match proxy_config.field("interceptionMode") {
        None | Some(Value::Null) => "REDIRECT",
        Some(Value::String(s)) => s.as_str(),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(0) => "REDIRECT",
            Some(1) => "TPROXY",
            Some(2) => "NONE",
            _ => "",
        },
        Some(_) => "",
    }
}

/// Go's `fmt.Sprint` of a value decoded from JSON (numbers are float64 there): `<nil>` for absent/null.
pub fn sprint(v: Option<&Value>) -> Cow<'_, str> {
    match v {
        None | Some(Value::Null) => Cow::Borrowed("<nil>"),
        Some(Value::String(s)) => Cow::Borrowed(s),
        Some(Value::Bool(true)) => Cow::Borrowed("true"),
        Some(Value::Bool(false)) => Cow::Borrowed("false"),
        Some(Value::Number(n)) => Cow::Owned(go_float(n.as_f64().unwrap_or(0.0))),
        Some(Value::Array(a)) => {
            let items: Vec<Cow<'_, str>> = a.iter().map(|v| sprint(Some(v))).collect();
            Cow::Owned(format!("[{}]", items.join(" ")))
        }
        Some(Value::Object(o)) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", sprint(o.field(k))))
                .collect();
            Cow::Owned(format!("map[{}]", items.join(" ")))
        }
    }
}

/// `%v` of a float64, as strconv's `'g'` with shortest precision: plain digits, exponent form when the
/// decimal exponent is < -4 or >= 6 (`1e+06`).
fn go_float(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    // Common case (ports, thresholds): an integer below the exponent threshold prints as its digits.
    if f.fract() == 0.0 && f.abs() < 1e6 {
        return (f as i64).to_string();
    }
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        format!("{f}")
    }
}

/// Where a setting came from, for error messages.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Source {
    Annotation(&'static str),
    Values(&'static str),
    Mesh(&'static str),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Annotation(k) => write!(f, "annotation '{k}'"),
            Source::Values(k) => write!(f, "values key '{k}'"),
            Source::Mesh(k) => write!(f, "mesh config key '{k}'"),
        }
    }
}
