//! What the CNI specification fixes for a plugin: the versions it speaks, the error codes and the error
//! JSON, the results it passes on (SPEC.md 1.1.0, "Result Types" and "Error").

use serde_json::{json, Map, Value};

/// The spec version this plugin implements, given in `VERSION`'s answer.
pub const IMPLEMENTED: &str = "1.1.0";

/// The configuration versions this plugin accepts. Istio's plugin (`version.All`) also lists 0.1.0 and
/// 0.2.0, whose results have no `interfaces` or `ips` list to pass on; a chained plugin of those versions
/// cannot exist, since chaining came with 0.3.0.
pub const SUPPORTED: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The well-known error codes of the spec ("Error" section), and ours from 100 up.
pub mod code {
    /// Incompatible CNI version.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Unsupported field in the network configuration.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// Invalid necessary environment variables (`CNI_COMMAND`, `CNI_NETNS`, ...).
    pub const INVALID_ENVIRONMENT: u32 = 4;
    /// I/O failure (reading the configuration, the namespace).
    pub const IO_FAILURE: u32 = 5;
    /// Failed to decode content (the configuration or `prevResult` is not what the spec says).
    pub const DECODING_FAILURE: u32 = 6;
    /// Invalid network configuration (a value of ours out of range).
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    /// Try again later: the API server or the agent's kubeconfig is not there yet.
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin cannot serve ADD requests.
    pub const NOT_AVAILABLE: u32 = 50;
    /// The pod's traffic annotations are invalid (Istio's `NewRedirect` error).
    pub const INVALID_ANNOTATION: u32 = 100;
    /// The rules could not be applied in the pod's network namespace; nothing of them stays.
    pub const APPLY_FAILED: u32 = 101;
    /// The API server refused the pod's read (a 4xx other than 408 and 429: RBAC, a pod that is gone),
    /// or the request could not be made: not retried, as another attempt would be refused alike.
    pub const API_REFUSED: u32 = 102;
}

/// Every code the plugin answers with, and when: docs/reference/exit-codes.md is generated from
/// it (`cargo run -p xtask -- docs`).
pub const CODES: &[(u32, &str)] = &[
    (
        code::INCOMPATIBLE_VERSION,
        "a `cniVersion` outside 0.3.0–1.1.0; `CHECK` below 0.4.0, `STATUS`/`GC` below 1.1.0",
    ),
    (
        code::UNSUPPORTED_FIELD,
        "`ambient_enabled: true` (this plugin programs sidecar pods; an ambient pod left alone would bypass the mesh in silence)",
    ),
    (
        code::INVALID_ENVIRONMENT,
        "a required `CNI_*` variable missing, an unknown `CNI_COMMAND`, a bad `CNI_ARGS` pair; `CNI_NETNS` that is not a network namespace (a FIFO, a file, another namespace type) or is the node's own (the plugin's, pid 1's); a `K8S_POD_NAME` or `K8S_POD_NAMESPACE` Kubernetes would not accept (`p?watch=true`): each refused at once, before the API server is asked",
    ),
    (
        code::IO_FAILURE,
        "`CNI_NETNS` cannot be opened, the network configuration cannot be read, the API client cannot start",
    ),
    (
        code::DECODING_FAILURE,
        "the network configuration or `prevResult` does not decode, or one of its keys has the wrong type (`native_nftables: \"yes\"`); the API server's answer is not a pod",
    ),
    (
        code::INVALID_NETWORK_CONFIG,
        "a value of ours out of range (`pod_fetch_timeout_ms` over 60000), an unknown `plugin_log_level`, no `type`, a network configuration over 1 MiB",
    ),
    (
        code::TRY_AGAIN_LATER,
        "the node agent's kubeconfig is not there yet, or the API server did not answer within `pod_fetch_timeout_ms` (or `pod_fetch_attempts`)",
    ),
    (
        code::NOT_AVAILABLE,
        "`STATUS`: the plugin cannot serve `ADD` yet (no usable kubeconfig)",
    ),
    (
        code::INVALID_ANNOTATION,
        "a traffic annotation Istio's `NewRedirect` refuses (`sidecar.istio.io/interceptionMode: NONE`, a bad port or CIDR) or iptables-init would refuse (`\" 80 , 81 \"`), refused before anything is applied",
    ),
    (
        code::APPLY_FAILED,
        "the rules could not be applied in the pod's network namespace (the apply is atomic)",
    ),
    (
        code::API_REFUSED,
        "the API server refused the pod's read (a 4xx other than 408 and 429: RBAC, a pod that is gone): not retried",
    ),
];

/// An error the plugin reports to the runtime: printed as the spec's error JSON on standard output, with
/// a non-zero exit status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct CniError {
    /// The spec's code (see [`code`]).
    pub code: u32,
    /// A short message naming what failed, with the field and value.
    pub msg: String,
    /// The longer story, when there is one.
    pub details: String,
}

impl CniError {
    /// An error with a code and a message.
    pub fn new(code: u32, msg: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// The same error with details.
    pub fn with_details(mut self, details: impl Into<String>) -> CniError {
        self.details = details.into();
        self
    }

    /// The error JSON of the spec, in the configuration's version (or ours when it is unknown).
    pub fn to_json(&self, cni_version: &str) -> Value {
        let mut out = json!({ "cniVersion": cni_version, "code": self.code, "msg": self.msg });
        if !self.details.is_empty() {
            out["details"] = Value::String(self.details.clone());
        }
        out
    }
}

/// A version `major.minor.patch`, ordered.
pub fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next().map_or(Some(0), |p| p.parse().ok())?;
    if parts.next().is_some() {
        return None;
    }
    Some((major, minor, patch))
}

/// Refuses a configuration version this plugin does not speak, as the CNI library's `skel` does.
pub fn check_supported(v: &str) -> Result<(), CniError> {
    if SUPPORTED.contains(&v) {
        return Ok(());
    }
    Err(
        CniError::new(code::INCOMPATIBLE_VERSION, "incompatible CNI versions")
            .with_details(format!("config is {v:?}, plugin supports {SUPPORTED:?}")),
    )
}

/// Whether `v` is at least `min` (both already known to parse).
pub fn at_least(v: &str, min: (u32, u32, u32)) -> bool {
    parse_version(v).is_some_and(|have| have >= min)
}

/// `VERSION`'s answer.
pub fn version_info() -> Value {
    json!({ "cniVersion": IMPLEMENTED, "supportedVersions": SUPPORTED })
}

/// The result a chained plugin prints: `prevResult` passed through in the configuration's version, or an
/// empty result when there was none (Istio's `pluginResponse`). Converting between the 0.3/0.4 and the
/// 1.x shapes touches only what the spec changed: 1.0 dropped each IP's `version`.
pub fn pass_through(prev: Option<&Value>, cni_version: &str) -> Result<Value, CniError> {
    let Some(prev) = prev else {
        return Ok(json!({ "cniVersion": cni_version, "dns": {} }));
    };
    let Value::Object(prev) = prev else {
        return Err(CniError::new(
            code::DECODING_FAILURE,
            "could not parse prevResult: not a JSON object",
        ));
    };
    if prev.contains_key("ip4") || prev.contains_key("ip6") {
        return Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            "could not parse prevResult: a 0.1/0.2 result (ip4/ip6) cannot be chained",
        ));
    }
    let mut out: Map<String, Value> = prev.clone();
    out.insert("cniVersion".into(), Value::String(cni_version.to_string()));
    let modern = at_least(cni_version, (1, 0, 0));
    if let Some(ips) = out.get_mut("ips") {
        let Value::Array(ips) = ips else {
            return Err(CniError::new(
                code::DECODING_FAILURE,
                "could not parse prevResult: ips is not a list",
            ));
        };
        for (i, ip) in ips.iter_mut().enumerate() {
            let Value::Object(ip) = ip else {
                return Err(CniError::new(
                    code::DECODING_FAILURE,
                    format!("could not parse prevResult: ips[{i}] is not an object"),
                ));
            };
            if modern {
                ip.remove("version");
            } else if !ip.contains_key("version") {
                let address = ip.get("address").and_then(Value::as_str).unwrap_or("");
                let family = if address.contains(':') { "6" } else { "4" };
                ip.insert("version".into(), Value::String(family.into()));
            }
        }
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_code_table_lists_each_code_once_in_order() {
        let codes: Vec<u32> = CODES.iter().map(|(c, _)| *c).collect();
        assert!(codes.windows(2).all(|w| w[0] < w[1]), "{codes:?}");
        assert!(CODES.iter().all(|(_, when)| !when.is_empty()));
    }

    #[test]
    fn versions_outside_the_list_are_refused_with_code_1() {
        for v in SUPPORTED {
            check_supported(v).unwrap();
        }
        for v in ["0.2.0", "0.1.0", "1.2.0", "", "1.0"] {
            let e = check_supported(v).unwrap_err();
            assert_eq!(e.code, code::INCOMPATIBLE_VERSION, "{v}");
            assert!(e.details.contains(&format!("{v:?}")), "{e:?}");
        }
    }

    #[test]
    fn a_result_is_passed_through_in_the_configurations_version() {
        let prev = json!({"cniVersion": "0.4.0", "interfaces": [{"name": "eth0"}],
            "ips": [{"version": "4", "address": "10.0.0.2/24", "interface": 0}], "dns": {}});
        let up = pass_through(Some(&prev), "1.0.0").unwrap();
        assert_eq!(up["cniVersion"], "1.0.0");
        assert!(up["ips"][0].get("version").is_none());
        assert_eq!(up["interfaces"], prev["interfaces"]);
        let down = pass_through(Some(&up), "0.3.1").unwrap();
        assert_eq!(down["ips"][0]["version"], "4");
        let v6 = pass_through(Some(&json!({"ips": [{"address": "fd00::2/64"}]})), "0.3.0").unwrap();
        assert_eq!(v6["ips"][0]["version"], "6");
        assert_eq!(
            pass_through(None, "0.3.1").unwrap(),
            json!({"cniVersion": "0.3.1", "dns": {}})
        );
        assert_eq!(
            pass_through(Some(&json!({"ip4": {}})), "0.3.1")
                .unwrap_err()
                .code,
            code::INCOMPATIBLE_VERSION
        );
        assert_eq!(
            pass_through(Some(&json!({"ips": {}})), "1.0.0")
                .unwrap_err()
                .code,
            code::DECODING_FAILURE
        );
    }

    #[test]
    fn error_json_has_the_spec_fields() {
        let e = CniError::new(7, "bad").with_details("more");
        assert_eq!(
            e.to_json("1.1.0"),
            json!({"cniVersion": "1.1.0", "code": 7, "msg": "bad", "details": "more"})
        );
        assert!(CniError::new(7, "bad")
            .to_json("1.0.0")
            .get("details")
            .is_none());
    }
}
