//! The project's own evaluator for the subset of Go's `text/template` (with the sprig and Istio functions)
//! that user injection templates use — Istio renders entries of the injector config's `templates` with
//! `template.New(name).Funcs(InjectionFuncmap()).Parse(text)` (Istio's `inject.go` `RunTemplate`, funcmap
//! from Istio's `template.go` `InjectionFuncmap` over sprig v3 `TxtFuncMap`).
//!
//! A text is parsed once per configuration by [`Template::parse`]; anything outside the subset is refused
//! there with the template name, the line and the construct ([`ParseError`]), so nothing is ever silently
//! ignored. [`Template::execute`] evaluates it over a JSON data root with Go's output semantics, bounded by
//! [`Limits`]; a template that exceeds a bound stops with [`ExecError::Limit`].
//!
//! # Supported subset
//!
//! **Text and lexical rules** (as Go's `text/template/parse` `lex.go`): text outside `{{ … }}` is copied
//! verbatim (a lone `}}` is text); trim markers `{{- ` and ` -}}` (the `-` must be followed, resp. preceded,
//! by a space, tab, CR or LF) remove all white space before, resp. after, the action; comments
//! `{{/* … */}}` and `{{- /* … */ -}}` (possibly spanning lines; the comment must start right after the
//! delimiter and end right before it); newlines inside actions; literals: `"…"` strings with Go escapes,
//! `` `raw` `` strings, character constants, integers (decimal, `0x`, `0o`, `0b`, leading-`0` octal, `_`
//! separators), floats, `true`, `false`, `nil` (as an argument only).
//!
//! **Actions**: `{{ pipeline }}`; pipelines of commands joined by `|` (the piped value becomes the *last*
//! argument); parenthesised pipelines with field chains (`(index .X 0).Name`); variables `$x := …`,
//! `$x = …`, `$` (the root); `{{ if }}`, `{{ else if }}`, `{{ else }}`, `{{ with }}`, `{{ else with }}`,
//! `{{ range }}` over lists, maps (sorted key order) and integers, with `$v :=` or `$i, $v :=`, its
//! `{{ else }}`, `{{ break }}` and `{{ continue }}`; declarations in `if`/`with`/`range` pipelines.
//!
//! **Fields and methods**: Go field names of Istio's `SidecarTemplateData` (see [`Template::execute`] for the
//! data root), map keys written as fields (`.Values.global.hub`, `.ObjectMeta.Labels.app`), the proto
//! getters `GetX` of the ProxyConfig/MeshConfig fields listed below, `.String` on
//! `.ProxyConfig.InterceptionMode` and `.GetValue`/`.Value` on wrapper fields (`.ProxyConfig.Concurrency`).
//! Missing map keys give "no value" (printed `<no value>`), chains through them stay "no value", a chain
//! through an explicit JSON `null` or a nil pointer is an error, absent struct fields give their Go zero
//! value (`""`, `0`, `false`, nil pointer `<nil>`, nil slice `[]`, nil map `map[]`).
//!
//! **Go built-in functions**: `and or not eq ne lt le gt ge len index print printf println` (with Go's
//! comparison rules: int vs float is an error, "no value" compares unequal; `printf` implements the verbs
//! `%v %s %d %q %t %x %X %o %O %b %c %U %e %E %f %F %g %G %T %%` with flags, width and precision, and Go's
//! `%!verb(type=value)` / `%!verb(MISSING)` / `%!(EXTRA …)` diagnostics).
//!
//! **Istio functions**: `toYaml` (JSON then YAML, trailing newline kept), `indent` (every line but the
//! first), `isset`, `annotation`, `valueOrDefault`, `toLower`, `contains` (needle first), `toJSON`,
//! `fromJSON` (the string `{}` on invalid JSON), `structToJSON` (compact JSON in Go's field order),
//! `omit`, `strdict`, `env KEY DEFAULT` (the injector's environment, as Istio reads istiod's).
//!
//! **sprig functions**: `default empty coalesce ternary quote squote nindent join list append dict get
//! hasKey toJson toString int int64 float64 lower upper trim trimAll trimPrefix trimSuffix hasPrefix
//! hasSuffix replace split repeat trunc fail`.
//!
//! **Modelled Go fields** (absent JSON keys are the Go zero value; other fields of these types fail the
//! request as unsupported rather than being guessed):
//!
//! | type | fields |
//! | --- | --- |
//! | root | `TypeMeta DeploymentMeta ObjectMeta Spec ProxyConfig MeshConfig Values Revision NativeSidecars ProxyImage ProxyInitImage ProxyUID ProxyGID InboundTrafficPolicyMode CompliancePolicy` |
//! | `TypeMeta` | `Kind APIVersion` |
//! | `DeploymentMeta` | `Name Namespace` |
//! | `ObjectMeta` | `Name GenerateName Namespace UID ResourceVersion Generation CreationTimestamp DeletionTimestamp Labels Annotations OwnerReferences (APIVersion Kind Name UID Controller BlockOwnerDeletion) Finalizers` |
//! | `Spec` (PodSpec) | `Volumes (Name) InitContainers Containers RestartPolicy TerminationGracePeriodSeconds DNSPolicy NodeSelector ServiceAccountName AutomountServiceAccountToken NodeName HostNetwork HostPID HostIPC ShareProcessNamespace SecurityContext (RunAsUser RunAsGroup RunAsNonRoot SupplementalGroups FSGroup) ImagePullSecrets (Name) Hostname Subdomain Affinity SchedulerName Tolerations PriorityClassName Priority DNSConfig RuntimeClassName EnableServiceLinks` |
//! | Container | `Name Image Command Args WorkingDir Ports (Name HostPort ContainerPort Protocol HostIP) EnvFrom Env (Name Value ValueFrom) Resources (Limits Requests) RestartPolicy VolumeMounts (Name ReadOnly RecursiveReadOnly MountPath SubPath MountPropagation SubPathExpr) LivenessProbe ReadinessProbe StartupProbe Lifecycle TerminationMessagePath TerminationMessagePolicy ImagePullPolicy SecurityContext (Capabilities Privileged RunAsUser RunAsGroup RunAsNonRoot ReadOnlyRootFilesystem AllowPrivilegeEscalation) Stdin StdinOnce TTY` |
//! | `ProxyConfig` | `ConfigPath BinaryPath ServiceCluster DrainDuration DiscoveryAddress StatNameLength ProxyAdminPort ControlPlaneAuthPolicy CustomConfigFile Concurrency InterceptionMode Tracing ProxyMetadata StatusPort HoldApplicationUntilProxyStarts Image (ImageType) TerminationDrainDuration ClusterName`, each also as `GetX` |
//! | `MeshConfig` | `ProxyListenPort ProxyInboundListenPort ProxyHttpPort ConnectTimeout IngressClass IngressService EnableTracing AccessLogFile AccessLogFormat DefaultConfig EnablePrometheusMerge RootNamespace TrustDomain TrustDomainAliases`, each also as `GetX` |
//!
//! Probes, lifecycle hooks, tolerations, affinity, volume sources, durations and tracing settings can be
//! tested (`if`, `with`) and written with `toYaml`, but not walked field by field.
//!
//! # Refused at parse time ([`ParseError`])
//!
//! `{{ define }}`, `{{ template }}`, `{{ block }}`; every function not listed above — among them Helm's
//! `include`, `tpl`, `required`, `fromYaml`, `lookup`, sprig's `keys` (random order) and `set` (mutates a
//! shared map), Go's `call`, `slice`, `html`, `js`, `urlquery`, and Istio's other helpers (`protoToJSON`,
//! `formatDuration`, `excludeInboundPort`, `applicationPorts`, …); `nil` as a command; arguments given to
//! a literal or a field that is not a function; complex and hexadecimal-float numbers; nesting deeper than
//! [`MAX_PARSE_DEPTH`].
//!
//! # Refused at execution time ([`ExecError::Unsupported`])
//!
//! Go values this evaluator does not model exactly, which fail the request instead of producing output Go
//! would not produce: printing a Kubernetes struct, a non-nil pointer to one, a proto message or a
//! `resource.Quantity` with `%v` (Go prints struct internals; use `toYaml`); a nil pointer with a `printf`
//! verb other than `%v` (Go prints an address); Kubernetes struct fields the schema does not list;
//! `toYaml`/`toJson` of a proto message (`.ProxyConfig`, `.MeshConfig`) or of the data root; `toJson` of a
//! struct holding a field the schema does not list (its position in Go's output is unknown; `toYaml` sorts
//! keys and takes it); the `printf` forms `%#v`, `%p`, `%[n]d`, `*` widths, `%x` of floats; comparing
//! composite values with `eq`.
//!
//! # Differences from Go that do not change the rendered YAML
//!
//! `toYaml` quotes strings wherever YAML 1.1 could read them as another type (go-yaml quotes fewer, e.g.
//! `1.0.0`) and uses double quotes where go-yaml may use single quotes; a `resource.Quantity` outside a
//! container's `resources` (a volume's `sizeLimit`, a `divisor`) is written as the pod gives it where Go
//! writes the canonical string (those inside `resources` are canonical, `0.5` as `500m`).
//!
//! # Bounds ([`Limits`])
//!
//! Nesting depth (control-structure nesting and data recursion: printing, `toYaml`, `toJson`, `fromJSON`,
//! and lists and maps the template builds; default 64), total `range` iterations (default 100 000), output
//! size and every intermediate string (default 4 MiB), and **work** (default [`DEFAULT_MAX_WORK`] = 32 Mi
//! units). Exceeding any returns [`ExecError::Limit`]; `printf` widths and precisions are checked against the
//! output bound before anything is allocated, and a range over an integer counts without materialising its
//! elements.
//!
//! The work unit: every primitive charges **one unit per byte it reads or writes** — string comparisons
//! (`eq`, `ne`, `lt`, … charge the shorter string), searches (`contains`: text and needle; `hasPrefix`,
//! `trimPrefix`, …: the prefix), `replace`, `trimAll`, `trim`, `split`, `upper`/`lower`, `int`/`float64`
//! parsing, `quote`, `printf`/`print` (the format and every byte written), `toJson`/`toYaml`/`toJSON`
//! (every string and key copied, every byte of text written), `fromJSON` (the text parsed), map lookups by
//! key (the key's bytes, times log2 of the size for the sorted maps a template builds), sorting a map's keys
//! for `range` or printing (the keys' bytes times log2 of their count), output written, strings copied
//! into new values — and [`WORK_PER_STEP`] (16) units per evaluation step: a node, a command, a call, a
//! variable declared, a field, a list element or map entry visited or copied, and one unit per variable
//! passed when a variable is looked up. Strings read from the data or the template text are borrowed, and
//! `range`, `index` and field access take the data's list elements in place, so those cost O(1) however
//! long the string or the list: a template over n containers costs O(n). A primitive's charge is made
//! before its work where its size is known, otherwise right after it (a scalar printed, a `toYaml`
//! text), so one primitive overshoots the budget by at most the output bound. [`Template::execute_metered`]
//! also reports the bytes the primitives measured as read and written; the property tests and the fuzz
//! target (`injector/fuzz`, target `template`) hold the evaluation to the budget with it and with time.

// Tests read what they check with serde_json's own accessors (`get`, `pointer`), which clippy.toml keeps
// out of production code: a check that does not go through `fields` cannot share a bug with it.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// The vocabulary the evaluator stands on, imported at the root so that its modules name it `crate::fields`.
use sidecar_core::{fields, gotypes};
#[cfg(test)]
use sidecar_core::yaml;

mod exec;
mod funcs;
mod lex;
mod parse;
mod print;
mod schema;
mod state;
#[cfg(test)]
mod tests;
mod value;

use std::fmt;

pub use exec::Cost;

/// The work units one evaluation step costs (a node, a command, a call, a variable, a field, a list
/// element or map entry visited); a byte read or written costs one.
pub const WORK_PER_STEP: usize = state::STEP;

/// The default budget of [`Limits::max_work`].
pub const DEFAULT_MAX_WORK: usize = 32 << 20;

/// Deepest nesting of control structures and parenthesised pipelines [`Template::parse`] accepts.
pub const MAX_PARSE_DEPTH: usize = 100;

/// A template text was refused when it was loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The text is not valid Go template syntax (the message is Go's wording where Go has one).
    #[error("template {template:?}: line {line}: {message}")]
    Syntax {
        /// The template's name.
        template: String,
        /// 1-based line of the offending construct.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A Go template action outside the supported subset (`define`, `template`, `block`).
    #[error("template {template:?}: line {line}: unsupported action {action:?}")]
    UnsupportedAction {
        /// The template's name.
        template: String,
        /// 1-based line of the action.
        line: usize,
        /// The action keyword.
        action: String,
    },
    /// A function that is not in the supported subset (Go would call it, or fail with "not defined").
    #[error("template {template:?}: line {line}: unsupported function {function:?}")]
    UnsupportedFunction {
        /// The template's name.
        template: String,
        /// 1-based line of the call.
        line: usize,
        /// The function name.
        function: String,
    },
    /// Control structures or parentheses nested deeper than [`MAX_PARSE_DEPTH`].
    #[error("template {template:?}: line {line}: nesting deeper than {limit}")]
    TooDeep {
        /// The template's name.
        template: String,
        /// 1-based line where the bound was crossed.
        line: usize,
        /// The bound.
        limit: usize,
    },
}

/// Evaluation of a parsed template failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// An error Go's `text/template` also raises (the message is Go's wording where it matters).
    #[error("template {template:?}: line {line}: {message}")]
    Eval {
        /// The template's name.
        template: String,
        /// 1-based line of the action.
        line: usize,
        /// What failed.
        message: String,
    },
    /// A value or operation whose Go result this evaluator does not reproduce exactly.
    #[error("template {template:?}: line {line}: unsupported: {message}")]
    Unsupported {
        /// The template's name.
        template: String,
        /// 1-based line of the action.
        line: usize,
        /// What is not supported.
        message: String,
    },
    /// A bound of [`Limits`] was exceeded.
    #[error("template {template:?}: line {line}: {what} limit {limit} exceeded")]
    Limit {
        /// The template's name.
        template: String,
        /// 1-based line of the action that crossed the bound.
        line: usize,
        /// Which bound: `depth`, `iterations`, `output bytes` or `work`.
        what: &'static str,
        /// The bound's value.
        limit: usize,
    },
    /// sprig's `fail` was called.
    #[error("template {template:?}: line {line}: fail: {message}")]
    Fail {
        /// The template's name.
        template: String,
        /// 1-based line of the call.
        line: usize,
        /// The message given to `fail`.
        message: String,
    },
}

/// Bounds on one evaluation; a template that crosses one stops with [`ExecError::Limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of control structures during evaluation and of data walked by printing, `toYaml`,
    /// `toJson` and `fromJSON` (default 64).
    pub max_depth: usize,
    /// Total `range` iterations over the whole evaluation, nested ranges included (default 100 000).
    pub max_iterations: usize,
    /// Bytes of output, and of every intermediate string (default 4 MiB).
    pub max_output_bytes: usize,
    /// Work units (see the module documentation, "Bounds"): one per byte a primitive reads or writes,
    /// [`WORK_PER_STEP`] per evaluation step (default [`DEFAULT_MAX_WORK`]).
    pub max_work: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 64,
            max_iterations: 100_000,
            max_output_bytes: 4 << 20,
            max_work: DEFAULT_MAX_WORK,
        }
    }
}

/// A parsed template, ready to be executed any number of times.
#[derive(Debug, Clone)]
pub struct Template {
    name: String,
    root: Vec<parse::Node>,
    static_text: Option<String>,
}

impl Template {
    /// Parses `text` (the template named `name`) into a tree, refusing anything outside the supported
    /// subset (see the module documentation) with the name, the line and the construct.
    pub fn parse(name: &str, text: &str) -> Result<Template, ParseError> {
        let root = parse::parse(name, text)?;
        let static_text = root
            .iter()
            .map(|n| match n {
                parse::Node::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect::<Option<String>>();
        Ok(Template {
            name: name.to_string(),
            root,
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
        exec::execute(self, data, limits)
    }

    /// [`Template::execute`], also telling what the evaluation cost: the work units charged and the bytes
    /// the primitives measured as read and written.
    pub fn execute_metered(
        &self,
        data: &serde_json::Value,
        limits: &Limits,
    ) -> (Result<String, ExecError>, Cost) {
        exec::execute_metered(self, data, limits)
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "template {:?}", self.name)
    }
}
