//! A parsed template: the tree [`parse`](super::parse) built from a text, and its evaluation by
//! [`exec`](super::exec).

use std::fmt;

use super::error::{ExecError, ParseError};
use super::exec::{self, Cost};
use super::limits::Limits;
use super::parse;

/// A parsed template, ready to be executed any number of times.
#[derive(Debug, Clone)]
pub struct Template {
    name: String,
    parsed: parse::Parsed,
    static_text: Option<String>,
}

impl Template {
    /// Parses `text` (the template named `name`) into a tree, refusing anything outside the supported
    /// subset (see the `gotemplate` module documentation) with the name, the line and the construct.
    pub fn parse(name: &str, text: &str) -> Result<Template, ParseError> {
        let parsed = parse::parse(name, text)?;
        let static_text = parsed
            .root
            .iter()
            .map(|n| match n {
                parse::Node::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect::<Option<String>>();
        Ok(Template {
            name: name.to_string(),
            parsed,
            static_text,
        })
    }

    /// True when the text has no template action (comments aside), so it renders to itself: a static
    /// overlay that can be parsed as YAML once.
    #[cfg(test)]
    pub fn is_static(&self) -> bool {
        self.static_text.is_some()
    }

    /// The text a static template renders to for every pod (comments and trim markers applied), or None
    /// when the template has actions.
    pub fn static_text(&self) -> Option<&str> {
        self.static_text.as_deref()
    }

    /// Evaluates the template over `data` with Go's semantics, within `limits`.
    ///
    /// `data` is the JSON form of Istio's `SidecarTemplateData` (Istio's `inject.go`), an object whose keys
    /// are the **Go field names** the caller must supply:
    ///
    /// | key | value |
    /// | --- | --- |
    /// | `TypeMeta` | `{kind, apiVersion}` of the pod |
    /// | `DeploymentMeta` | `{name, namespace}` of the workload (`Name`/`Namespace` accepted too) |
    /// | `ObjectMeta` | the pod's `metadata` as Kubernetes JSON (stripped of a previous injection) |
    /// | `Spec` | the pod's `spec` as Kubernetes JSON |
    /// | `ProxyConfig` | the effective ProxyConfig as proto JSON (`discoveryAddress`, `proxyMetadata`, …) |
    /// | `MeshConfig` | the mesh config as proto JSON |
    /// | `Values` | the injector `values` document |
    /// | `Revision`, `ProxyImage`, `ProxyInitImage`, `InboundTrafficPolicyMode`, `CompliancePolicy` | strings |
    /// | `NativeSidecars` | bool |
    /// | `ProxyUID`, `ProxyGID` | integers |
    ///
    /// Inside `ObjectMeta`, `Spec`, `ProxyConfig` and `MeshConfig` the JSON keys are the usual JSON names;
    /// templates name them by their Go names (`.Spec.Containers`, `.ObjectMeta.Annotations`), mapped by the
    /// evaluator's schema. An absent key means the Go zero value. `Values` is a JSON-decoded
    /// `map[string]any` (numbers are float64 there, as in Go).
    pub fn execute(&self, data: &serde_json::Value, limits: &Limits) -> Result<String, ExecError> {
        self.execute_metered(data, limits).0
    }

    /// [`Template::execute`], also telling what the evaluation cost: the work units charged and the bytes
    /// the primitives measured as read and written.
    pub fn execute_metered(
        &self,
        data: &serde_json::Value,
        limits: &Limits,
    ) -> (Result<String, ExecError>, Cost) {
        exec::execute_metered(&self.name, &self.parsed, data, limits)
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "template {:?}", self.name)
    }
}
