//! Validation of a pod's annotations before rendering, as Istio's `validate.go` `AnnotationValidation`
//! table (run by `validateAnnotations` in `inject.go` `RunTemplate`) does it, plus the values that reach
//! `istio-init` arguments which Istio leaves unchecked (`includeOutboundPorts`, `agentLogLevel`): nothing
//! unvalidated reaches the init container's arguments. The names are `pod`'s, the checks `validate`'s.

use serde_json::{Map, Value};

use crate::pod::{
    AGENT_LOG_LEVEL_ANNOTATION, MERGE_METRICS_ANNOTATION, PROXY_CONFIG_ANNOTATION,
    PROXY_CPU_ANNOTATION, PROXY_CPU_LIMIT_ANNOTATION, PROXY_MEMORY_ANNOTATION,
    PROXY_MEMORY_LIMIT_ANNOTATION, READINESS_FAILURE_THRESHOLD_ANNOTATION,
    READINESS_INITIAL_DELAY_ANNOTATION, READINESS_PERIOD_ANNOTATION, STATUS_PORT_ANNOTATION,
};
use crate::traffic::{Validator, TRAFFIC};
use sidecar_core::fields::Fields;
use sidecar_core::validate::{parse_port, validate_log_level, validate_quantity};

/// One invalid annotation value, Istio's wording: `invalid value 'V' for annotation 'K': reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value '{value}' for annotation '{annotation}': {reason}")]
pub struct InvalidAnnotation {
    pub annotation: String,
    pub value: String,
    pub reason: String,
}

/// Every invalid annotation of a pod (Istio aggregates them; any one aborts injection).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", format_all(.0))]
pub struct ValidationError(pub Vec<InvalidAnnotation>);

fn format_all(errs: &[InvalidAnnotation]) -> String {
    if errs.len() == 1 {
        return format!("1 error occurred:\n\t* {}\n\n", errs[0]);
    }
    let mut s = format!("{} errors occurred:", errs.len());
    for e in errs {
        s.push_str(&format!("\n\t* {e}"));
    }
    s.push_str("\n\n");
    s
}

/// The validated annotations and their rules (Istio's `AnnotationValidation`, plus the init-argument
/// value Istio does not check); the traffic annotations' are their rows in `traffic`.
const VALIDATORS: &[(&str, Validator)] = &[
    (PROXY_CONFIG_ANNOTATION, validate_proxy_config),
    (STATUS_PORT_ANNOTATION, validate_status_port),
    (READINESS_INITIAL_DELAY_ANNOTATION, validate_u32),
    (READINESS_PERIOD_ANNOTATION, validate_u32),
    (READINESS_FAILURE_THRESHOLD_ANNOTATION, validate_u32),
    (PROXY_CPU_ANNOTATION, validate_quantity),
    (PROXY_MEMORY_ANNOTATION, validate_quantity),
    (PROXY_CPU_LIMIT_ANNOTATION, validate_quantity),
    (PROXY_MEMORY_LIMIT_ANNOTATION, validate_quantity),
    (MERGE_METRICS_ANNOTATION, validate_bool),
    (AGENT_LOG_LEVEL_ANNOTATION, validate_log_level),
];

/// Every rule: the table above, then the traffic rows'.
fn validators() -> impl Iterator<Item = (&'static str, Validator)> {
    VALIDATORS
        .iter()
        .copied()
        .chain(TRAFFIC.iter().map(|t| (t.annotation.name, t.validate)))
}

/// The annotations [`validate`] checks, in its order: docs/reference/annotations.md lists them
/// (`cargo run -p xtask -- docs`).
pub fn validated() -> impl Iterator<Item = &'static str> {
    validators().map(|(name, _)| name)
}

/// Validates every present annotation that has a rule; all failures are reported together.
pub fn validate(annotations: Option<&Map<String, Value>>) -> Result<(), ValidationError> {
    let Some(annotations) = annotations else {
        return Ok(());
    };
    let mut errs = Vec::new();
    for (name, check) in validators() {
        let Some(v) = annotations.field(name) else {
            continue;
        };
        let value = match v {
            Value::String(s) => s.as_str(),
            // Kubernetes annotations are strings; anything else is rejected by the API server already,
            // but kube-inject input is not: report it rather than guess.
            other => {
                errs.push(InvalidAnnotation {
                    annotation: name.to_string(),
                    value: other.to_string(),
                    reason: "annotation values must be strings".to_string(),
                });
                continue;
            }
        };
        if let Err(reason) = check(value) {
            errs.push(InvalidAnnotation {
                annotation: name.to_string(),
                value: value.to_string(),
                reason,
            });
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ValidationError(errs))
    }
}

fn validate_proxy_config(v: &str) -> Result<(), String> {
    crate::effective_proxy_config::parse_overlay(v).and_then(|overlay| {
        let mut pc = crate::defaults::builtin_proxy_config();
        crate::effective_proxy_config::apply_overlay(&mut pc, &overlay);
        crate::effective_proxy_config::validate(&pc)
    })
}

fn validate_status_port(v: &str) -> Result<(), String> {
    parse_port(v)
        .map(|_| ())
        .map_err(|e| format!("excludeInboundPorts invalid: {e}"))
}

fn validate_u32(v: &str) -> Result<(), String> {
    v.parse::<u32>()
        .map(|_| ())
        .map_err(|e| format!("strconv.ParseUint: parsing {v:?}: {e}"))
}

fn validate_bool(v: &str) -> Result<(), String> {
    sidecar_core::goconv::parse_bool(v)
        .map(|_| ())
        .ok_or_else(|| format!("strconv.ParseBool: parsing {v:?}: invalid syntax"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::pod::INTERCEPTION_MODE_ANNOTATION;
    use sidecar_core::annotations as shared;

    const INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION: &str = shared::INCLUDE_OUTBOUND_IP_RANGES.name;
    const EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION: &str = shared::EXCLUDE_OUTBOUND_IP_RANGES.name;
    const INCLUDE_INBOUND_PORTS_ANNOTATION: &str = shared::INCLUDE_INBOUND_PORTS.name;
    const EXCLUDE_INBOUND_PORTS_ANNOTATION: &str = shared::EXCLUDE_INBOUND_PORTS.name;
    const INCLUDE_OUTBOUND_PORTS_ANNOTATION: &str = shared::INCLUDE_OUTBOUND_PORTS.name;
    const EXCLUDE_OUTBOUND_PORTS_ANNOTATION: &str = shared::EXCLUDE_OUTBOUND_PORTS.name;
    const EXCLUDE_INTERFACES_ANNOTATION: &str = shared::EXCLUDE_INTERFACES.name;
    const KUBEVIRT_INTERFACES_ANNOTATION: &str = shared::KUBEVIRT_INTERFACES.name;
    const REROUTE_VIRTUAL_INTERFACES_ANNOTATION: &str = shared::REROUTE_VIRTUAL_INTERFACES.name;
    use serde_json::json;

    fn check(name: &str, good: &[&str], bad: &[&str]) {
        for g in good {
            let a = json!({ name: g });
            assert!(
                validate(a.as_object()).is_ok(),
                "{name}={g:?} should be valid"
            );
        }
        for b in bad {
            let a = json!({ name: b });
            let err =
                validate(a.as_object()).expect_err(&format!("{name}={b:?} should be invalid"));
            let text = err.to_string();
            assert!(
                text.contains(name) && text.contains(&format!("'{b}'")),
                "{text}"
            );
        }
    }

    #[test]
    fn proxy_config() {
        check(
            PROXY_CONFIG_ANNOTATION,
            &[
                "{}",
                "concurrency: 2",
                "{\"holdApplicationUntilProxyStarts\": true}",
                "drainDuration: 23s",
            ],
            &[
                "[1, 2]",
                "drainDuration: forever",
                "discoveryAddress: nohostport",
                "proxyAdminPort: 70000",
                "configPath: ''",
                "{",
            ],
        );
    }

    #[test]
    fn interception_mode() {
        check(
            INTERCEPTION_MODE_ANNOTATION,
            &["REDIRECT", "TPROXY", "NONE"],
            &["redirect", "", "FOO"],
        );
    }

    #[test]
    fn status_port() {
        check(
            STATUS_PORT_ANNOTATION,
            &["15020", " 123 ", "0"],
            &["-1", "65536", "abc", ""],
        );
    }

    #[test]
    fn readiness_u32() {
        for a in [
            READINESS_INITIAL_DELAY_ANNOTATION,
            READINESS_PERIOD_ANNOTATION,
            READINESS_FAILURE_THRESHOLD_ANNOTATION,
        ] {
            check(
                a,
                &["0", "100", "4294967295"],
                &["-1", "4294967296", "1.5", ""],
            );
        }
    }

    #[test]
    fn include_ip_ranges() {
        check(
            INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION,
            &[
                "*",
                "",
                "10.0.0.0/8",
                "127.0.0.1/24,10.96.0.1/24",
                "::1/128",
            ],
            &[
                "10.0.0.0/33",
                "10.0.0.0",
                "10.0.0.0/8,",
                "*,10.0.0.0/8",
                "10.0.0.0/8 ",
                "a/8",
                "10.0.0.0/08",
            ],
        );
        let err = validate(json!({INCLUDE_OUTBOUND_IP_RANGES_ANNOTATION: "bad"}).as_object())
            .unwrap_err();
        assert!(err.to_string().to_lowercase().contains("includeipranges"));
    }

    #[test]
    fn exclude_ip_ranges() {
        check(
            EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION,
            &["", "10.0.0.0/8,fe80::/10"],
            &["*", "10.0.0.1/40", ";rm -rf /"],
        );
        let err =
            validate(json!({EXCLUDE_OUTBOUND_IP_RANGES_ANNOTATION: "*"}).as_object()).unwrap_err();
        assert!(err.to_string().to_lowercase().contains("excludeipranges"));
    }

    #[test]
    fn include_inbound_ports() {
        check(
            INCLUDE_INBOUND_PORTS_ANNOTATION,
            &["*", "", "80", "80, 81,82"],
            &["80,", "*,80", "65536", "x"],
        );
    }

    #[test]
    fn exclude_inbound_ports() {
        check(
            EXCLUDE_INBOUND_PORTS_ANNOTATION,
            &["", "4, 5,6", "15020"],
            &["*", "80,,81", "-1", "80 81"],
        );
        let err = validate(json!({EXCLUDE_INBOUND_PORTS_ANNOTATION: "*"}).as_object()).unwrap_err();
        assert!(err
            .to_string()
            .to_lowercase()
            .contains("excludeinboundports"));
    }

    #[test]
    fn include_outbound_ports() {
        check(
            INCLUDE_OUTBOUND_PORTS_ANNOTATION,
            &["", "443,8443"],
            &["*", "443;x", "99999"],
        );
    }

    #[test]
    fn exclude_outbound_ports() {
        check(
            EXCLUDE_OUTBOUND_PORTS_ANNOTATION,
            &["", "443"],
            &["*", "a", "1,"],
        );
    }

    #[test]
    fn interfaces() {
        for a in [
            EXCLUDE_INTERFACES_ANNOTATION,
            KUBEVIRT_INTERFACES_ANNOTATION,
            REROUTE_VIRTUAL_INTERFACES_ANNOTATION,
        ] {
            check(
                a,
                &["", "eth0", "net1, net2", "a_b.c-d"],
                &["0eth", "eth0,", "averyveryverylongname", "eth0;x", "eth 0"],
            );
        }
    }

    #[test]
    fn quantities() {
        for a in [
            PROXY_CPU_ANNOTATION,
            PROXY_MEMORY_ANNOTATION,
            PROXY_CPU_LIMIT_ANNOTATION,
            PROXY_MEMORY_LIMIT_ANNOTATION,
        ] {
            check(
                a,
                &["100m", "1", "1.5", "128Mi", "1Gi", "1e3", "+2"],
                &["", "abc", "1 Gi", "1Gib", "1..2", "1\n"],
            );
        }
        assert_eq!(
            sidecar_core::validate::parse_quantity("2000m"),
            sidecar_core::validate::parse_quantity("2")
        );
        assert_eq!(
            sidecar_core::validate::parse_quantity("1024Mi"),
            sidecar_core::validate::parse_quantity("1Gi")
        );
    }

    #[test]
    fn merge_metrics() {
        check(
            MERGE_METRICS_ANNOTATION,
            &["true", "false", "1", "F", "TRUE"],
            &["yes", "on", ""],
        );
    }

    #[test]
    fn agent_log_level() {
        check(
            AGENT_LOG_LEVEL_ANNOTATION,
            &["debug", "default:info,ads:debug"],
            &["", "a b", "x\n--privileged"],
        );
    }

    #[test]
    fn errors_are_aggregated_and_unknown_annotations_ignored() {
        let a = json!({EXCLUDE_INBOUND_PORTS_ANNOTATION: "*", INTERCEPTION_MODE_ANNOTATION: "x", "foo/bar": "***"});
        let err = validate(a.as_object()).unwrap_err();
        assert_eq!(err.0.len(), 2);
        assert!(err.to_string().starts_with("2 errors occurred"));
        assert!(validate(
            json!({"readiness.status.sidecar.istio.io/applicationPorts": "x"}).as_object()
        )
        .is_ok());
    }
}
