//! The pods the policy injects, as one table: each rule is a `matchCondition` of the policy (its CEL,
//! evaluated by the API server) and the same condition in Rust (evaluated by `injector explain` and the
//! differential). A pod outside the subset is left untouched by the policy, for the webhook.
//!
//! The two spellings of a rule are kept from drifting by the differential through the API server: for
//! every generated pod, the policy injected it exactly when [`first_unmet`] found no rule unmet.

use serde_json::Value;

use super::cel::MARKER_ANNOTATION;
use super::params::ParamsSpec;
use inject::decision::Decision;
use inject::pod::{
    self, CORE_DUMP_CONTAINER, INIT_CONTAINER, INJECT_KEY, NETWORK_LABEL, PROXY_CONTAINER,
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

/// Annotations of Istio's the policy renders itself.
pub const HANDLED_ANNOTATIONS: &[&str] = &[INJECT_KEY];

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
            why: "it has an annotation the policy does not render (an Istio annotation other than sidecar.istio.io/inject, a Prometheus key spelled otherwise, or one of Datadog's, OpenTelemetry's or Multus')",
            cel: format!(
                "object.metadata.?annotations.orValue({{}}).all(k, \
                   (!k.contains('istio.io/') || k in {handled}) && \
                   (!k.matches('{PROMETHEUS_LIKE_CEL}') || k in {prom}) && \
                   !(k in {other}) && !k.startsWith('{OTEL_PREFIX}'))",
                handled = cel_list(HANDLED_ANNOTATIONS),
                prom = cel_list(&PROMETHEUS_KEYS),
                other = cel_list(OTHER_READ_ANNOTATIONS),
            ),
            holds: |f| {
                annotations(f.pod).all(|(k, _)| {
                    (!k.contains("istio.io/") || HANDLED_ANNOTATIONS.contains(&k.as_str()))
                        && (!prometheus_like(k) || PROMETHEUS_KEYS.contains(&k.as_str()))
                        && !OTHER_READ_ANNOTATIONS.contains(&k.as_str())
                        && !k.starts_with(OTEL_PREFIX)
                })
            },
        },
        Rule {
            name: "prometheus",
            why: "its Prometheus annotations hold a quote, a backslash or a control character, or a port the agent cannot scrape",
            cel: format!(
                "{prom}.all(k, !(k in object.metadata.?annotations.orValue({{}})) || {safe}) && \
                 (!('prometheus.io/port' in object.metadata.?annotations.orValue({{}})) || \
                  object.metadata.annotations['prometheus.io/port'] == string(params.spec.statusPort) || \
                  (object.metadata.annotations['prometheus.io/port'].matches('^[1-9][0-9]{{0,4}}$') && \
                   int(object.metadata.annotations['prometheus.io/port']) <= 65535 && \
                   !(int(object.metadata.annotations['prometheus.io/port']) in {reserved})))",
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
fn decision_cel() -> String {
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
