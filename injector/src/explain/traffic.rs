//! The traffic stage: each `--connection` walked through the rule model of the pod's `istio-init`
//! arguments by iptables-init's library (placeholder until the library's API lands).

use serde_json::Value;

/// A parsed `--connection` spec.
pub type Connection = String;
/// One connection's verdict.
pub type Verdict = Value;

/// Parses the `--connection` specs.
pub fn parse(specs: &[String]) -> Result<Vec<Connection>, String> {
    match specs.first() {
        Some(s) => Err(format!(
            "--connection {s:?}: the connection walk is not available yet"
        )),
        None => Ok(Vec::new()),
    }
}

/// Walks `connections` through the rules of `init_args` (the init container's args, leading
/// `istio-iptables` word included).
pub fn walk(_init_args: &[String], _connections: &[Connection]) -> Result<Vec<Verdict>, String> {
    Ok(Vec::new())
}

/// One verdict as a text line.
pub fn text(v: &Verdict) -> String {
    v.to_string()
}
