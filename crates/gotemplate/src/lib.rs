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
//! `{{ else }}`, `{{ break }}` and `{{ continue }}`; declarations in `if`/`with`/`range` pipelines;
//! `{{ define "name" }}` at the top level, `{{ template "name" pipeline }}` (the named body with the
//! pipeline's value as dot and `$`, nothing else in scope, one level of depth per call) and
//! `{{ block }}`, as Istio's own texts use them (`{{ template "resources" . }}`).
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
//! `omit`, `strdict`, `env KEY DEFAULT` (the injector's environment, as Istio reads istiod's),
//! `protoToJSON` (of the ProxyConfig, Istio's defaults cleared), `omitNil`, `excludeInboundPort`,
//! `appendMultusNetwork`, `directory`, `otelResourceAttributes`: every function the built-in texts of
//! Istio 1.29, 1.30 and 1.31 call.
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
//! `{{ define }}` inside another action; every function not listed above — among them Helm's
//! `include`, `tpl`, `required`, `fromYaml`, `lookup`, sprig's `keys` (random order) and `set` (mutates a
//! shared map), Go's `call`, `slice`, `html`, `js`, `urlquery`, and Istio's helpers no built-in text
//! calls any more (`formatDuration`, `applicationPorts`, …); `nil` as a command; arguments given to
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
//! target (`crates/injector/fuzz`, target `template`) hold the evaluation to the budget with it and with time.

// Tests read what they check with serde_json's own accessors (`get`, `pointer`), which clippy.toml keeps
// out of production code: a check that does not go through `fields` cannot share a bug with it.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// The vocabulary the evaluator stands on, imported at the root so that its modules name it `crate::fields`.
#[cfg(test)]
use sidecar_core::yaml;
use sidecar_core::{fields, gotypes};

mod error;
mod exec;
mod funcs;
mod lex;
mod limits;
mod parse;
mod print;
mod schema;
mod state;
mod template;
#[cfg(test)]
mod tests;
mod value;

pub use error::{ExecError, ParseError};
pub use exec::Cost;
pub use limits::{Limits, DEFAULT_MAX_WORK, MAX_PARSE_DEPTH, WORK_PER_STEP};
pub use template::Template;
