//! The pods the policy injects, as one table: each rule is a `matchCondition` of the policy (its CEL,
//! evaluated by the API server) and the same condition in Rust (evaluated by `injector explain` and the
//! differential). A pod outside the subset is left untouched by the policy, for the webhook.
//!
//! The two spellings of a rule are kept from drifting by the differential through the API server: for
//! every generated pod, the policy injected it exactly when [`first_unmet`] found no rule unmet.

use serde_json::Value;

use super::cel::MARKER_ANNOTATION;
use super::params::ParamsSpec;
use super::params::{
    EXCLUDE_INBOUND_PORTS_ANNOTATION, EXCLUDE_INTERFACES_ANNOTATION,
    EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION, EXCLUDE_OUTBOUND_PORTS_ANNOTATION,
    INCLUDE_INBOUND_PORTS_ANNOTATION, INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION,
    INCLUDE_OUTBOUND_PORTS_ANNOTATION, KUBEVIRT_INTERFACES_ANNOTATION,
    REROUTE_VIRTUAL_INTERFACES_ANNOTATION, SCRAPE_TARGETS_ANNOTATION,
};
use inject::decision::Decision;
use inject::pod::{
    self, AGENT_LOG_LEVEL_ANNOTATION, COMPONENT_LOG_LEVEL_ANNOTATION, CORE_DUMP_CONTAINER,
    INIT_CONTAINER, INJECT_KEY, INTERCEPTION_MODE_ANNOTATION, LOG_LEVEL_ANNOTATION,
    MERGE_METRICS_ANNOTATION, NATIVE_SIDECAR_ANNOTATION, NETWORK_LABEL, PROXY_CONTAINER,
    PROXY_CPU_ANNOTATION, PROXY_CPU_LIMIT_ANNOTATION, PROXY_IMAGE_ANNOTATION,
    PROXY_MEMORY_ANNOTATION, PROXY_MEMORY_LIMIT_ANNOTATION, REWRITE_PROBES_ANNOTATION,
    STATUS_ANNOTATION, VALIDATION_CONTAINER,
};
use sidecar_core::fields::{self, Fields};

/// What a rule looks at: the pod as the API server hands it to admission (its namespace set), the
/// params, and the engine's webhook-mode decision for it.
pub struct Facts<'a> {
    pub pod: &'a Value,
    pub params: &'a ParamsSpec,
    pub decision: &'a Decision,
}

/// One condition of the subset.
pub struct Rule {
    /// The `matchConditions` entry's name.
    pub name: &'static str,
    /// Why a pod failing it goes to the webhook (explain prints it).
    pub why: &'static str,
    /// The condition in CEL (variables `object`, `params`).
    pub cel: String,
    /// The condition in Rust.
    pub holds: fn(&Facts<'_>) -> bool,
}

/// What a handled annotation's value must be for the policy to render it as the webhook does: at least
/// what the webhook accepts (`annotations::validate`, `render::init_args`' shapes), sometimes less
/// (IPv4 only, no spaces, no leading zeros), so that the CEL's regular expression and the Rust check
/// here are the same simple language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Any string (the value is copied verbatim).
    Any,
    /// `REDIRECT`, `TPROXY` or `NONE`.
    Mode,
    /// Go's `ParseBool` spellings.
    Bool,
    /// Ports `p[,p]*` (each at most 65535), or empty.
    Ports,
    /// [`Shape::Ports`] or `*`.
    PortsOrStar,
    /// IPv4 CIDRs `a.b.c.d/n[,...]`, or empty.
    Cidrs,
    /// [`Shape::Cidrs`] or `*`.
    CidrsOrStar,
    /// Interface names (a letter, then letters, digits, `_.-`; at most 15), comma separated, or empty.
    Interfaces,
    /// A log level `level` or `scope:level[,scope:level]`.
    LogLevel,
    /// A quantity: digits, a fraction, a suffix (`m`, `k`, `M`, `Ki`, `Mi`, …).
    Quantity,
}

const OCTET: &str = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

impl Shape {
    /// The CEL condition on the string `v`.
    fn cel(self, v: &str) -> String {
        let cidr = format!("{OCTET}\\.{OCTET}\\.{OCTET}\\.{OCTET}/(3[0-2]|[12][0-9]|[0-9])");
        let iface = "[a-zA-Z][a-zA-Z0-9_.-]{0,14}";
        let level = "[a-zA-Z0-9:_.][a-zA-Z0-9:_.-]*";
        let ports = format!(
            "({v}.matches('^([0-9]{{1,5}}(,[0-9]{{1,5}})*)?$') && ({v} == '' || {v}.split(',').all(p, int(p) <= 65535)))"
        );
        match self {
            Shape::Any => "true".to_string(),
            Shape::Mode => format!("{v} in ['REDIRECT', 'TPROXY', 'NONE']"),
            Shape::Bool => format!("{v} in ['1', 't', 'T', 'TRUE', 'true', 'True', '0', 'f', 'F', 'FALSE', 'false', 'False']"),
            Shape::Ports => ports,
            Shape::PortsOrStar => format!("({v} == '*' || {ports})"),
            Shape::Cidrs => format!("{v}.matches(r'^({cidr}(,{cidr})*)?$')"),
            Shape::CidrsOrStar => format!("({v} == '*' || {v}.matches(r'^({cidr}(,{cidr})*)?$'))"),
            Shape::Interfaces => format!("{v}.matches('^({iface}(,{iface})*)?$')"),
            Shape::LogLevel => format!("{v}.matches('^{level}(,{level})*$')"),
            Shape::Quantity => format!("{v}.matches(r'^[0-9]+(\\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$')"),
        }
    }

    /// The same condition in Rust.
    pub fn holds(self, v: &str) -> bool {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let list = |v: &str, item: &dyn Fn(&str) -> bool| v.is_empty() || v.split(',').all(item);
        let port =
            |p: &str| digits(p) && p.len() <= 5 && p.parse::<u32>().is_ok_and(|n| n <= 65535);
        let decimal = |s: &str, max: u32| {
            digits(s)
                && (s.len() == 1 || !s.starts_with('0'))
                && s.parse::<u32>().is_ok_and(|n| n <= max)
        };
        let cidr = |c: &str| {
            c.split_once('/').is_some_and(|(addr, bits)| {
                let octets: Vec<&str> = addr.split('.').collect();
                octets.len() == 4
                    && octets.iter().all(|o| o.len() <= 3 && decimal(o, 255))
                    && bits.len() <= 2
                    && decimal(bits, 32)
            })
        };
        let iface = |n: &str| {
            let b = n.as_bytes();
            !b.is_empty()
                && b.len() <= 15
                && b[0].is_ascii_alphabetic()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
        };
        let level = |e: &str| {
            let b = e.as_bytes();
            !b.is_empty()
                && b[0] != b'-'
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b':' | b'_' | b'.' | b'-'))
        };
        match self {
            Shape::Any => true,
            Shape::Mode => matches!(v, "REDIRECT" | "TPROXY" | "NONE"),
            Shape::Bool => sidecar_core::goconv::parse_bool(v).is_some(),
            Shape::Ports => list(v, &port),
            Shape::PortsOrStar => v == "*" || list(v, &port),
            Shape::Cidrs => list(v, &cidr),
            Shape::CidrsOrStar => v == "*" || list(v, &cidr),
            Shape::Interfaces => list(v, &iface),
            Shape::LogLevel => !v.is_empty() && v.split(',').all(level),
            Shape::Quantity => {
                const SUFFIXES: [&str; 14] = [
                    "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "",
                ];
                let end = v
                    .find(|c: char| !c.is_ascii_digit() && c != '.')
                    .unwrap_or(v.len());
                let (number, suffix) = v.split_at(end);
                let mut parts = number.splitn(2, '.');
                let whole = parts.next().unwrap_or("");
                let fraction = parts.next();
                digits(whole) && fraction.is_none_or(digits) && SUFFIXES.contains(&suffix)
            }
        }
    }
}

/// Annotations of Istio's the policy renders itself, with the shape of the values it renders.
pub const HANDLED_ANNOTATIONS: &[(&str, Shape)] = &[
    (INJECT_KEY, Shape::Any),
    (INTERCEPTION_MODE_ANNOTATION, Shape::Mode),
    (NATIVE_SIDECAR_ANNOTATION, Shape::Any),
    (REWRITE_PROBES_ANNOTATION, Shape::Any),
    (MERGE_METRICS_ANNOTATION, Shape::Bool),
    (LOG_LEVEL_ANNOTATION, Shape::Any),
    (COMPONENT_LOG_LEVEL_ANNOTATION, Shape::Any),
    (AGENT_LOG_LEVEL_ANNOTATION, Shape::LogLevel),
    (PROXY_IMAGE_ANNOTATION, Shape::Any),
    (PROXY_CPU_ANNOTATION, Shape::Quantity),
    (PROXY_MEMORY_ANNOTATION, Shape::Quantity),
    (PROXY_CPU_LIMIT_ANNOTATION, Shape::Quantity),
    (PROXY_MEMORY_LIMIT_ANNOTATION, Shape::Quantity),
    (INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION, Shape::CidrsOrStar),
    (EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION, Shape::Cidrs),
    (INCLUDE_INBOUND_PORTS_ANNOTATION, Shape::PortsOrStar),
    (EXCLUDE_INBOUND_PORTS_ANNOTATION, Shape::Ports),
    (INCLUDE_OUTBOUND_PORTS_ANNOTATION, Shape::Ports),
    (EXCLUDE_OUTBOUND_PORTS_ANNOTATION, Shape::Ports),
    (KUBEVIRT_INTERFACES_ANNOTATION, Shape::Interfaces),
    (REROUTE_VIRTUAL_INTERFACES_ANNOTATION, Shape::Interfaces),
    (EXCLUDE_INTERFACES_ANNOTATION, Shape::Interfaces),
    // Its value is checked by the `prometheus` rule.
    (SCRAPE_TARGETS_ANNOTATION, Shape::Any),
];

/// The traffic annotations, which CNI echoes onto the pod (`render::context::cni_annotations`): with
/// CNI a pod with one is left to the webhook.
const TRAFFIC_ANNOTATIONS: [&str; 9] = [
    INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION,
    EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION,
    INCLUDE_INBOUND_PORTS_ANNOTATION,
    EXCLUDE_INBOUND_PORTS_ANNOTATION,
    INCLUDE_OUTBOUND_PORTS_ANNOTATION,
    EXCLUDE_OUTBOUND_PORTS_ANNOTATION,
    KUBEVIRT_INTERFACES_ANNOTATION,
    REROUTE_VIRTUAL_INTERFACES_ANNOTATION,
    EXCLUDE_INTERFACES_ANNOTATION,
];

fn handled(k: &str) -> bool {
    HANDLED_ANNOTATIONS.iter().any(|(h, _)| *h == k)
}

/// Annotations outside `istio.io` that the webhook's templates read, each only in some configurations
/// (Datadog's and OpenTelemetry's, Multus'); a pod with one is left to the webhook.
const OTHER_READ_ANNOTATIONS: &[&str] = &["apm.datadoghq.com/env", "k8s.v1.cni.cncf.io/networks"];
const OTEL_PREFIX: &str = "resource.opentelemetry.io/";

/// The Prometheus annotations the policy merges (exactly these keys).
const PROMETHEUS_KEYS: [&str; 3] = [
    "prometheus.io/scrape",
    "prometheus.io/port",
    "prometheus.io/path",
];

/// The Prometheus keys a pod in the subset may carry (any other spelling `postprocess` would read is
/// left to the webhook).
const PROMETHEUS_SUBSET_KEYS: [&str; 4] = [
    "prometheus.io/scrape",
    "prometheus.io/port",
    "prometheus.io/path",
    SCRAPE_TARGETS_ANNOTATION,
];

/// Whether `v` is a `prometheus.istio.io/scrape-targets` value the CEL splits exactly as the webhook
/// does: comma-separated `port[:path]` entries with no spaces or empty entries, each port a number
/// without leading zeros, each path of `[A-Za-z0-9/_.~-]` (JSON-safe, no second colon). Its ports are
/// checked by the `prometheus` rule.
fn simple_scrape_targets(v: &str) -> bool {
    v.split(',').all(|e| {
        let (port, path) = e.split_once(':').unwrap_or((e, ""));
        (1..=5).contains(&port.len())
            && port.bytes().all(|b| b.is_ascii_digit())
            && !port.starts_with('0')
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/_.~-".contains(&b))
    })
}
const SIMPLE_SCRAPE_TARGETS_CEL: &str =
    "^[1-9][0-9]{0,4}(:[A-Za-z0-9/_.~-]*)?(,[1-9][0-9]{0,4}(:[A-Za-z0-9/_.~-]*)?)*$";

/// The ports of a simple `prometheus.istio.io/scrape-targets` value.
fn scrape_target_ports(v: &str) -> impl Iterator<Item = &str> {
    v.split(',')
        .map(|e| e.split_once(':').map_or(e, |(p, _)| p))
}

/// The ports of the agent and Envoy (`postprocess`'s reserved ports): a scrape target there is an error.
const RESERVED_PORTS: [u16; 9] = [
    15000, 15001, 15004, 15006, 15008, 15020, 15021, 15053, 15090,
];

/// The container names the injection owns (a pod's own would be merged with or moved).
const RESERVED_CONTAINERS: [&str; 4] = [
    PROXY_CONTAINER,
    INIT_CONTAINER,
    VALIDATION_CONTAINER,
    CORE_DUMP_CONTAINER,
];

/// Whether `k` is a key `postprocess` reads as a Prometheus annotation (its sanitising maps every
/// character outside `[A-Za-z0-9_]` to `_`): `prometheus_io_{scrape,port,path}` and
/// `prometheus_istio_io_{scrape_targets,secure_port}` after sanitising.
fn prometheus_like(k: &str) -> bool {
    let sep = |c: char| !c.is_ascii_alphanumeric();
    let parts: Vec<&str> = k.split(sep).collect();
    // Each separator is one character, so the parts with their count are the sanitised words.
    matches!(
        parts.as_slice(),
        ["prometheus", "io", "scrape" | "port" | "path"]
            | ["prometheus", "istio", "io", "scrape", "targets"]
            | ["prometheus", "istio", "io", "secure", "port"]
    )
}
const PROMETHEUS_LIKE_CEL: &str = "^prometheus[^a-zA-Z0-9]io[^a-zA-Z0-9](scrape|port|path)$|^prometheus[^a-zA-Z0-9]istio[^a-zA-Z0-9]io[^a-zA-Z0-9](scrape[^a-zA-Z0-9]targets|secure[^a-zA-Z0-9]port)$";

/// A string the CEL may put into JSON text without escaping.
fn safe(s: &str) -> bool {
    s.chars()
        .all(|c| c != '"' && c != '\\' && u32::from(c) >= 0x20)
}
const UNSAFE_CEL: &str = r#"r'["\\\x00-\x1f]'"#;

fn cel_safe(s: &str) -> String {
    format!("!{s}.matches({UNSAFE_CEL})")
}

fn annotations(pod: &Value) -> impl Iterator<Item = (&String, &str)> {
    pod::annotations(pod)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k, v.as_str().unwrap_or("")))
}

fn list<'a>(pod: &'a Value, name: &str) -> &'a [Value] {
    pod::containers(pod, name)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    fields::path(v, path).and_then(Value::as_str).unwrap_or("")
}

/// Every string the CEL writes into JSON text (probers, ports) of one container.
fn container_strings(c: &Value) -> Vec<&str> {
    let mut out = vec![pod::name_of(c)];
    for p in c
        .field("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.extend(["name", "protocol", "hostIP"].map(|k| str_at(p, &[k])));
    }
    let mut handlers: Vec<&Value> = Vec::new();
    for f in ["readinessProbe", "livenessProbe", "startupProbe"] {
        handlers.extend(c.field(f));
    }
    for f in ["preStop", "postStart"] {
        handlers.extend(fields::path(c, ["lifecycle", f]));
    }
    for h in handlers {
        if let Some(get) = h.field("httpGet") {
            out.extend(["path", "host", "scheme"].map(|k| str_at(get, &[k])));
            for x in get
                .field("httpHeaders")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                out.extend(["name", "value"].map(|k| str_at(x, &[k])));
            }
        }
        out.push(str_at(h, &["tcpSocket", "host"]));
        out.push(str_at(h, &["grpc", "service"]));
    }
    out
}

const HANDLER_STRINGS_CEL: &str = "(has(h.httpGet) ? [h.httpGet.?path.orValue(''), h.httpGet.?host.orValue(''), h.httpGet.?scheme.orValue('')] + h.httpGet.?httpHeaders.orValue([]).map(x, [x.?name.orValue(''), x.?value.orValue('')]).flatten() : []) + [h.?tcpSocket.?host.orValue(''), h.?grpc.?service.orValue('')]";

/// The subset, in the order explain reports the first unmet rule.
pub fn rules() -> Vec<Rule> {
    vec![
        Rule {
            name: "params",
            why: "the policy's params object is missing",
            cel: "params != null".to_string(),
            holds: |_| true,
        },
        Rule {
            name: "namespace",
            why: "its namespace is never injected, or ProxyConfig resources there change its injection",
            cel: "!(object.metadata.?namespace.orValue('') in params.spec.excludedNamespaces)".to_string(),
            holds: |f| {
                let ns = str_at(f.pod, &["metadata", "namespace"]);
                !f.params.excluded_namespaces.iter().any(|n| n == ns)
            },
        },
        Rule {
            name: "not-injected",
            why: "it is already injected (sidecar.istio.io/status or the policy's marker is set)",
            cel: format!(
                "!('{STATUS_ANNOTATION}' in object.metadata.?annotations.orValue({{}})) && !('{MARKER_ANNOTATION}' in object.metadata.?annotations.orValue({{}}))"
            ),
            holds: |f| {
                pod::annotations(f.pod)
                    .is_none_or(|a| !a.has_field(STATUS_ANNOTATION) && !a.has_field(MARKER_ANNOTATION))
            },
        },
        Rule {
            name: "not-host-network",
            why: "it uses the host network (the webhook does not inject it)",
            cel: "!object.spec.?hostNetwork.orValue(false)".to_string(),
            holds: |f| fields::path(f.pod, ["spec", "hostNetwork"]).and_then(Value::as_bool) != Some(true),
        },
        Rule {
            name: "injects",
            why: "the configuration's policy, selectors or the pod's sidecar.istio.io/inject do not inject it",
            cel: decision_cel(),
            holds: |f| f.decision.inject,
        },
        Rule {
            name: "labels",
            why: "it has the label topology.istio.io/network (its network moves the proxy's environment)",
            cel: format!("!('{NETWORK_LABEL}' in object.metadata.?labels.orValue({{}}))"),
            holds: |f| !pod::labels(f.pod).is_some_and(|l| l.has_field(NETWORK_LABEL)),
        },
        Rule {
            name: "annotations",
            why: "it has an annotation the policy does not render (an Istio annotation but the inject, interception, native sidecar, probe rewrite, merge-metrics, scrape-targets, log level, proxy image, resource and traffic ones; a Prometheus key spelled otherwise; or one of Datadog's, OpenTelemetry's or Multus')",
            cel: format!(
                "object.metadata.?annotations.orValue({{}}).all(k, \
                   (!k.contains('istio.io/') || k in {handled}) && \
                   (!k.matches('{PROMETHEUS_LIKE_CEL}') || k in {prom}) && \
                   !(k in {other}) && !k.startsWith('{OTEL_PREFIX}'))",
                handled = cel_list(&HANDLED_ANNOTATIONS.iter().map(|(k, _)| *k).collect::<Vec<_>>()),
                prom = cel_list(&PROMETHEUS_SUBSET_KEYS),
                other = cel_list(OTHER_READ_ANNOTATIONS),
            ),
            holds: |f| {
                annotations(f.pod).all(|(k, _)| {
                    (!k.contains("istio.io/") || handled(k))
                        && (!prometheus_like(k) || PROMETHEUS_SUBSET_KEYS.contains(&k.as_str()))
                        && !OTHER_READ_ANNOTATIONS.contains(&k.as_str())
                        && !k.starts_with(OTEL_PREFIX)
                })
            },
        },
        Rule {
            name: "annotation-values",
            why: "an annotation the policy renders has a value outside what it renders (see policy::subset::Shape)",
            cel: HANDLED_ANNOTATIONS
                .iter()
                .filter(|(_, shape)| *shape != Shape::Any)
                .map(|(k, shape)| {
                    format!(
                        "(!('{k}' in object.metadata.?annotations.orValue({{}})) || {})",
                        shape.cel(&format!("object.metadata.annotations['{k}']"))
                    )
                })
                .collect::<Vec<_>>()
                .join(" && "),
            holds: |f| {
                HANDLED_ANNOTATIONS
                    .iter()
                    .all(|(k, shape)| pod::annotation(f.pod, k).is_none_or(|v| shape.holds(v)))
            },
        },
        Rule {
            name: "cni-traffic",
            why: "with CNI, a traffic annotation is echoed onto the pod, which the policy does not render",
            cel: format!(
                "!params.spec.cni || !{}.exists(k, k in object.metadata.?annotations.orValue({{}}))",
                cel_list(&TRAFFIC_ANNOTATIONS)
            ),
            holds: |f| {
                !f.params.cni
                    || !TRAFFIC_ANNOTATIONS
                        .iter()
                        .any(|k| pod::annotations(f.pod).is_some_and(|a| a.has_field(k)))
            },
        },
        Rule {
            name: "prometheus",
            why: "its Prometheus annotations hold a quote, a backslash or a control character, or a port the agent cannot scrape, or its prometheus.istio.io/scrape-targets is not plain port[:path] entries",
            cel: format!(
                "{prom}.all(k, !(k in object.metadata.?annotations.orValue({{}})) || {safe}) && \
                 (!('prometheus.io/port' in object.metadata.?annotations.orValue({{}})) || \
                  object.metadata.annotations['prometheus.io/port'] == string(params.spec.statusPort) || \
                  (object.metadata.annotations['prometheus.io/port'].matches('^[1-9][0-9]{{0,4}}$') && \
                   int(object.metadata.annotations['prometheus.io/port']) <= 65535 && \
                   !(int(object.metadata.annotations['prometheus.io/port']) in {reserved}))) && \
                 (!('{SCRAPE_TARGETS_ANNOTATION}' in object.metadata.?annotations.orValue({{}})) || \
                  (object.metadata.annotations['{SCRAPE_TARGETS_ANNOTATION}'].matches('{SIMPLE_SCRAPE_TARGETS_CEL}') && \
                   object.metadata.annotations['{SCRAPE_TARGETS_ANNOTATION}'].split(',').all(e, \
                     int(e.split(':')[0]) <= 65535 && !(int(e.split(':')[0]) in {reserved}) && \
                     e.split(':')[0] != string(params.spec.statusPort))))",
                prom = cel_list(&PROMETHEUS_KEYS),
                safe = cel_safe("object.metadata.annotations[k]"),
                reserved = reserved_ports_cel(),
            ),
            holds: |f| {
                let ann = |k: &str| pod::annotation(f.pod, k);
                PROMETHEUS_KEYS.iter().all(|k| ann(k).is_none_or(safe))
                    && ann("prometheus.io/port").is_none_or(|p| {
                        p == f.params.status_port.to_string()
                            || (p.len() <= 5
                                && p.bytes().all(|b| b.is_ascii_digit())
                                && !p.starts_with('0')
                                && p.parse::<u32>().is_ok_and(|n| {
                                    (1..=65535).contains(&n)
                                        && !RESERVED_PORTS.iter().any(|r| u32::from(*r) == n)
                                }))
                    })
                    && ann(SCRAPE_TARGETS_ANNOTATION).is_none_or(|v| {
                        simple_scrape_targets(v)
                            && scrape_target_ports(v).all(|p| {
                                p != f.params.status_port.to_string()
                                    && p.parse::<u32>().is_ok_and(|n| {
                                        n <= 65535
                                            && !RESERVED_PORTS.iter().any(|r| u32::from(*r) == n)
                                    })
                            })
                    })
            },
        },
        Rule {
            name: "names",
            why: "a container, volume or pull secret of its own has a name the injection adds",
            cel: format!(
                "(object.spec.?initContainers.orValue([]) + object.spec.?containers.orValue([])).all(c, !(c.?name.orValue('') in {containers})) && \
                 object.spec.?volumes.orValue([]).all(v, !(v.?name.orValue('') in params.spec.volumes.map(x, x.name))) && \
                 object.spec.?imagePullSecrets.orValue([]).all(s, !(s.?name.orValue('') in params.spec.imagePullSecrets.map(x, x.name)))",
                containers = cel_list(&RESERVED_CONTAINERS),
            ),
            holds: |f| {
                let volumes = f.params.volume_names();
                let secrets = f.params.image_pull_secret_names();
                list(f.pod, "initContainers")
                    .iter()
                    .chain(list(f.pod, "containers"))
                    .all(|c| !RESERVED_CONTAINERS.contains(&pod::name_of(c)))
                    && list(f.pod, "volumes")
                        .iter()
                        .all(|v| !volumes.contains(&pod::name_of(v)))
                    && list(f.pod, "imagePullSecrets")
                        .iter()
                        .all(|s| !secrets.contains(&pod::name_of(s)))
            },
        },
        Rule {
            name: "strings",
            why: "a container name, port or probe of its own holds a quote, a backslash or a control character (the policy writes them into JSON text unescaped)",
            cel: format!(
                "(object.spec.?initContainers.orValue([]) + object.spec.?containers.orValue([])).all(c, \
                   ([c.?name.orValue('')] + c.?ports.orValue([]).map(p, [p.?name.orValue(''), p.?protocol.orValue(''), p.?hostIP.orValue('')]).flatten() + \
                    ['readinessProbe', 'livenessProbe', 'startupProbe'].filter(f, f in c).map(f, c[f]).map(h, {HANDLER_STRINGS_CEL}).flatten() + \
                    (has(c.lifecycle) ? ['preStop', 'postStart'].filter(f, f in c.lifecycle).map(f, c.lifecycle[f]).map(h, {HANDLER_STRINGS_CEL}).flatten() : [])\
                   ).all(s, {safe}))",
                safe = cel_safe("s"),
            ),
            holds: |f| {
                list(f.pod, "initContainers")
                    .iter()
                    .chain(list(f.pod, "containers"))
                    .all(|c| container_strings(c).into_iter().all(safe))
            },
        },
        Rule {
            name: "workload",
            why: "its controller's kind or name is not plain ASCII",
            cel: "object.metadata.?ownerReferences.orValue([]).all(r, r.?kind.orValue('').matches('^[A-Za-z0-9]*$') && r.?name.orValue('').matches('^[ -~]*$'))".to_string(),
            holds: |f| {
                fields::path(f.pod, ["metadata", "ownerReferences"])
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .all(|r| {
                        str_at(r, &["kind"]).bytes().all(|b| b.is_ascii_alphanumeric())
                            && str_at(r, &["name"]).bytes().all(|b| (b' '..=b'~').contains(&b))
                    })
            },
        },
    ]
}

/// `[15000, 15001, ...]`.
fn reserved_ports_cel() -> String {
    let ports: Vec<String> = RESERVED_PORTS.iter().map(u16::to_string).collect();
    format!("[{}]", ports.join(", "))
}

fn cel_list(items: &[&str]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|i| format!("'{i}'"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Istio's `injectRequired` past its first two steps (the `not-host-network` and `namespace` rules):
/// the inject label over the annotation, never- then always-selectors, the policy.
pub fn decision_cel() -> String {
    let value = format!(
        "('{INJECT_KEY}' in object.metadata.?labels.orValue({{}}) ? object.metadata.labels['{INJECT_KEY}'] : \
          object.metadata.?annotations.orValue({{}})[?'{INJECT_KEY}'].orValue(''))"
    );
    let matches = |list: &str| {
        format!(
            "params.spec.decision.{list}.exists(s, s.all(r, \
               r.operator == 'In' ? (r.key in object.metadata.?labels.orValue({{}}) && object.metadata.labels[r.key] in r.values) : \
               r.operator == 'NotIn' ? !(r.key in object.metadata.?labels.orValue({{}}) && object.metadata.labels[r.key] in r.values) : \
               r.operator == 'Exists' ? r.key in object.metadata.?labels.orValue({{}}) : \
               !(r.key in object.metadata.?labels.orValue({{}}))))"
        )
    };
    format!(
        "params.spec.decision.policy in ['enabled', 'disabled'] && ({value} == 'true' || \
         ({value} != 'false' && !{never} && ({always} || params.spec.decision.policy == 'enabled')))",
        never = matches("never"),
        always = matches("always"),
    )
}

/// The first rule `facts` do not meet, `None` when the policy injects the pod.
pub fn first_unmet(facts: &Facts<'_>) -> Option<Rule> {
    rules().into_iter().find(|r| !(r.holds)(facts))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_scrape_targets_are_in_the_subset() {
        for v in [
            "8080",
            "8080:/metrics,9100:/custom-metrics",
            "9100:",
            "1:/a.b_c~d-e/f",
        ] {
            assert!(simple_scrape_targets(v), "{v}");
        }
        // Spaces, empty entries or ports, leading zeros, long ports, a second colon, JSON-unsafe text:
        // Istio's parse trims, skips, ignores or errors, which the CEL's split does not reproduce.
        for v in [
            "",
            " 8080",
            "8080,",
            ",8080",
            "8080,,9100",
            ":/x",
            "08080",
            "123456",
            "8080:/a:b",
            "8080:/a b",
            "8080:/\"",
            "abc",
            "8080;9100",
        ] {
            assert!(!simple_scrape_targets(v), "{v:?}");
        }
        assert_eq!(
            scrape_target_ports("8080:/metrics,9100").collect::<Vec<_>>(),
            ["8080", "9100"]
        );
    }

    #[test]
    fn prometheus_keys_are_recognised_as_postprocess_sanitises_them() {
        for k in [
            "prometheus.io/scrape",
            "prometheus_io_port",
            "prometheus-io/path",
            "prometheus.istio.io/scrape-targets",
            "prometheus.istio.io/secure-port",
            "prometheus\u{e9}io/port",
        ] {
            assert!(prometheus_like(k), "{k}");
        }
        for k in [
            "prometheus.io/scheme",
            "prometheus.io/scrapes",
            "xprometheus.io/port",
            "prometheus..io/port",
            "prometheus.io/port/x",
        ] {
            assert!(!prometheus_like(k), "{k}");
        }
    }

    #[test]
    fn safe_strings_need_no_json_escaping() {
        for s in ["", "/healthz", "a b", "\u{7f}", "é", "/x?y=<z>&w"] {
            assert!(safe(s), "{s:?}");
            assert_eq!(
                serde_json::to_string(s).unwrap(),
                format!("\"{s}\""),
                "{s:?}"
            );
        }
        for s in ["\"", "\\", "\n", "\u{1}", "a\tb"] {
            assert!(!safe(s), "{s:?}");
        }
    }

    #[test]
    fn rule_names_are_unique_and_few_enough_for_the_api_server() {
        let rules = rules();
        // The API server takes at most 64 matchConditions.
        assert!(rules.len() <= 64);
        for (i, r) in rules.iter().enumerate() {
            assert!(!rules[..i].iter().any(|s| s.name == r.name), "{}", r.name);
        }
    }
}
