//! The network configuration the runtime gives the plugin on standard input: the spec's keys and those
//! of Istio's plugin (`cni/pkg/plugin/plugin.go` `Config`), read field by field so that a wrong type is
//! refused with the field's name and value.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use super::spec::{code, CniError};

/// Istio's default for `cni_agent_run_dir` (`cni/pkg/constants` `CNIAgentRunDir`).
pub const DEFAULT_RUN_DIR: &str = "/var/run/istio-cni";
/// The kubeconfig the node agent writes into the run dir (Istio's `CNIPluginKubeconfName`).
pub const KUBECONFIG_NAME: &str = "istio-cni-kubeconfig";
/// The plugin's log file in the run dir, which the node agent follows into its own log.
pub const LOG_NAME: &str = "istio-cni.log";

/// The default deadline of the pod's read from the API server: Istio's 30 attempts a second apart.
pub const DEFAULT_POD_FETCH_TIMEOUT_MS: u64 = 30_000;
/// The largest `pod_fetch_timeout_ms`, half the kubelet's 2-minute runtime-request timeout.
pub const MAX_POD_FETCH_TIMEOUT_MS: u64 = 60_000;

/// Largest configuration read from standard input; a real one is a few KiB.
pub const MAX_CONF_BYTES: u64 = 1 << 20;

/// Istio's keys of the plugin's configuration (`plugin.go` `Config`) that the node agent writes into the
/// node's chain (`agent::cni_config`) and the plugin reads back: one type for both, serialised by the
/// agent and filled by [`parse`] field by field, so that a wrong type is refused naming the field.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PluginEntry {
    /// `cni_agent_run_dir`: where the node agent put the kubeconfig, and where the plugin logs.
    #[serde(rename = "cni_agent_run_dir", serialize_with = "lossy")]
    pub run_dir: PathBuf,
    /// `plugin_log_level`: `debug`, `info` (default), `warn`, `error` or `none`.
    #[serde(rename = "plugin_log_level")]
    pub log_level: String,
    /// `exclude_namespaces`: pods of these namespaces are never programmed.
    pub exclude_namespaces: Vec<String>,
    /// `pod_namespace`: the node agent's own namespace (its pods are let through without the API).
    pub pod_namespace: String,
    /// `native_nftables`: program nftables over netlink instead of iptables.
    pub native_nftables: bool,
}

/// A path as the agent writes it, lossily as UTF-8 (serde refuses a path that is not).
fn lossy<S: serde::Serializer>(path: &std::path::Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

/// The plugin's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConf {
    /// `cniVersion`.
    pub cni_version: String,
    /// `name`, the network's name.
    pub name: String,
    /// `prevResult`, the result of the plugins before this one in the list.
    pub prev_result: Option<Value>,
    /// Istio's keys, as the node agent wrote them.
    pub entry: PluginEntry,
    /// Ours: how many times the pod is asked for (Istio: 30, fixed).
    pub pod_fetch_attempts: u32,
    /// Ours: the wait between those attempts (Istio: 1 s, fixed).
    pub pod_fetch_interval: Duration,
    /// Ours: the deadline of the whole read, attempts and waits included (Istio has none: its 30
    /// attempts can take 3 minutes against a silent API server).
    pub pod_fetch_timeout: Duration,
}

impl PluginConf {
    /// The kubeconfig the node agent wrote.
    pub fn kubeconfig(&self) -> PathBuf {
        self.entry.run_dir.join(KUBECONFIG_NAME)
    }
}

fn invalid(field: &str, value: &Value, want: &str) -> CniError {
    CniError::new(
        code::DECODING_FAILURE,
        format!("network configuration: {field} is {value}, expected {want}"),
    )
}

fn string(obj: &Map<String, Value>, field: &str) -> Result<Option<String>, CniError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(invalid(field, v, "a string")),
    }
}

fn boolean(obj: &Map<String, Value>, field: &str) -> Result<bool, CniError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(invalid(field, v, "a boolean")),
    }
}

fn number(
    obj: &Map<String, Value>,
    field: &str,
    range: (u64, u64),
) -> Result<Option<u64>, CniError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if (range.0..=range.1).contains(&n) => Ok(Some(n)),
            _ => Err(CniError::new(
                code::INVALID_NETWORK_CONFIG,
                format!(
                    "network configuration: {field} is {v}, expected an integer from {} to {}",
                    range.0, range.1
                ),
            )),
        },
    }
}

/// The `cniVersion` of a configuration that may not parse as a whole.
pub fn version_of(bytes: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Version {
        #[serde(rename = "cniVersion")]
        cni_version: String,
    }
    serde_json::from_slice::<Version>(bytes)
        .ok()
        .map(|v| v.cni_version)
}

/// Parses the configuration. The spec's `cniVersion` and `type` must be there; Istio's keys default as in
/// Istio; other keys are ignored, as Go's `json.Unmarshal` does. `ambient_enabled: true` is refused: this
/// plugin programs sidecar pods only, and an ambient pod left unprogrammed would bypass the mesh in silence.
pub fn parse(bytes: &[u8]) -> Result<PluginConf, CniError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        CniError::new(
            code::DECODING_FAILURE,
            format!("failed to parse network configuration: {e}"),
        )
    })?;
    let Value::Object(obj) = value else {
        return Err(invalid("the configuration", &value, "a JSON object"));
    };
    let cni_version = string(&obj, "cniVersion")?.unwrap_or_default();
    let kind = string(&obj, "type")?.unwrap_or_default();
    if kind.is_empty() {
        return Err(CniError::new(
            code::INVALID_NETWORK_CONFIG,
            "network configuration: type is missing",
        ));
    }
    if boolean(&obj, "ambient_enabled")? {
        return Err(CniError::new(
            code::UNSUPPORTED_FIELD,
            "network configuration: ambient_enabled is true, but this plugin programs sidecar pods only",
        ));
    }
    let log_level = string(&obj, "plugin_log_level")?.unwrap_or_else(|| "info".to_string());
    if !["debug", "info", "warn", "error", "none"].contains(&log_level.as_str()) {
        return Err(CniError::new(
            code::INVALID_NETWORK_CONFIG,
            format!(
                "network configuration: plugin_log_level is {log_level:?}, expected debug, info, warn, error or none"
            ),
        ));
    }
    let exclude_namespaces = match obj.get("exclude_namespaces") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                _ => Err(invalid(&format!("exclude_namespaces[{i}]"), v, "a string")),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => Err(invalid("exclude_namespaces", v, "a list of strings"))?,
    };
    let prev_result = match obj.get("prevResult") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(v) => return Err(invalid("prevResult", v, "an object")),
    };
    Ok(PluginConf {
        cni_version,
        name: string(&obj, "name")?.unwrap_or_default(),
        prev_result,
        entry: PluginEntry {
            run_dir: PathBuf::from(
                string(&obj, "cni_agent_run_dir")?
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| DEFAULT_RUN_DIR.to_string()),
            ),
            log_level,
            exclude_namespaces,
            pod_namespace: string(&obj, "pod_namespace")?.unwrap_or_default(),
            native_nftables: boolean(&obj, "native_nftables")?,
        },
        pod_fetch_attempts: number(&obj, "pod_fetch_attempts", (1, 120))?.unwrap_or(30) as u32,
        pod_fetch_interval: Duration::from_millis(
            number(&obj, "pod_fetch_interval_ms", (0, 10_000))?.unwrap_or(1000),
        ),
        // At most 60 s, half the kubelet's 2-minute runtime-request timeout: the apply and the rest of
        // the sandbox's creation must fit in the other half.
        pod_fetch_timeout: Duration::from_millis(
            number(
                &obj,
                "pod_fetch_timeout_ms",
                (100, MAX_POD_FETCH_TIMEOUT_MS),
            )?
            .unwrap_or(DEFAULT_POD_FETCH_TIMEOUT_MS),
        ),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn istio_s_keys_are_read_with_istio_s_defaults() {
        let c = parse(br#"{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"istio-cni"}"#)
            .unwrap();
        assert_eq!(c.entry.run_dir, PathBuf::from(DEFAULT_RUN_DIR));
        assert_eq!(c.pod_fetch_attempts, 30);
        assert_eq!(c.pod_fetch_interval, Duration::from_secs(1));
        assert_eq!(c.pod_fetch_timeout, Duration::from_secs(30));
        assert!(!c.entry.native_nftables);
        let c = parse(
            br#"{"cniVersion":"0.3.1","type":"istio-cni","cni_agent_run_dir":"/run/x",
                "exclude_namespaces":["kube-system"],"native_nftables":true,"pod_namespace":"istio-system",
                "plugin_log_level":"debug","unknown":{"kept":"ignored"}}"#,
        )
        .unwrap();
        assert_eq!(c.kubeconfig(), PathBuf::from("/run/x/istio-cni-kubeconfig"));
        assert_eq!(c.entry.exclude_namespaces, ["kube-system"]);
        assert!(c.entry.native_nftables);
    }

    #[test]
    fn a_wrong_type_names_the_field_and_the_value() {
        let e = parse(br#"{"cniVersion":"1.0.0","type":"istio-cni","native_nftables":"yes"}"#)
            .unwrap_err();
        assert_eq!(e.code, code::DECODING_FAILURE);
        assert!(e.msg.contains("native_nftables is \"yes\""), "{e}");
        let e = parse(br#"{"cniVersion":"1.0.0","type":"istio-cni","exclude_namespaces":["a",1]}"#)
            .unwrap_err();
        assert!(e.msg.contains("exclude_namespaces[1] is 1"), "{e}");
        let e = parse(br#"{"cniVersion":"1.0.0","type":"istio-cni","pod_fetch_attempts":0}"#)
            .unwrap_err();
        assert_eq!(e.code, code::INVALID_NETWORK_CONFIG);
        let e =
            parse(br#"{"cniVersion":"1.0.0","type":"istio-cni","pod_fetch_timeout_ms":120000}"#)
                .unwrap_err();
        assert_eq!(e.code, code::INVALID_NETWORK_CONFIG);
        assert!(e.msg.contains("pod_fetch_timeout_ms is 120000"), "{e}");
        let e = parse(br#"{"cniVersion":"1.0.0"}"#).unwrap_err();
        assert!(e.msg.contains("type is missing"), "{e}");
        let e = parse(br#"{"cniVersion":"1.0.0","type":"istio-cni","ambient_enabled":true}"#)
            .unwrap_err();
        assert_eq!(e.code, code::UNSUPPORTED_FIELD);
        assert_eq!(parse(b"{").unwrap_err().code, code::DECODING_FAILURE);
    }
}
