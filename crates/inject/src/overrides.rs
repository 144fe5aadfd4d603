//! The `proxy.istio.io/overrides` annotation: the user's settings on containers the template also
//! defines, saved at the first injection (as Go prints a typed container) so that a later injection,
//! which sees the template's version of those containers, can re-apply them.

use serde_json::{Map, Value};

use crate::pod::OVERRIDES_ANNOTATION;
use sidecar_core::fields::Fields;

/// The annotation is not the JSON Istio writes. (The message carries no prefix: callers add Istio's.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidOverrides(pub String);

/// The saved containers: `(containers, initContainers)`.
pub fn parse(text: &str) -> Result<(Vec<Value>, Vec<Value>), InvalidOverrides> {
    let v: Value = serde_json::from_str(text).map_err(|e| InvalidOverrides(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| InvalidOverrides(format!("{OVERRIDES_ANNOTATION} is not a JSON object")))?;
    let list = |k: &str| -> Result<Vec<Value>, InvalidOverrides> {
        match obj.field(k) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) if a.iter().all(Value::is_object) => Ok(a.clone()),
            Some(other) => Err(InvalidOverrides(format!(
                "{OVERRIDES_ANNOTATION}: {k} must be a list of containers, got {other}"
            ))),
        }
    };
    Ok((list("containers")?, list("initContainers")?))
}

/// The annotation's value for the re-applied containers; `None` when there are none (no annotation).
pub fn build(containers: Vec<Value>, init_containers: Vec<Value>) -> Option<String> {
    if containers.is_empty() && init_containers.is_empty() {
        return None;
    }
    let mut saved = Map::new();
    if !containers.is_empty() {
        saved.insert("containers".to_string(), Value::Array(containers));
    }
    if !init_containers.is_empty() {
        saved.insert("initContainers".to_string(), Value::Array(init_containers));
    }
    Some(Value::Object(saved).to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn build_then_parse_round_trips_and_empty_lists_are_left_out() {
        assert_eq!(build(Vec::new(), Vec::new()), None);
        let text = build(Vec::new(), vec![json!({"name": "istio-proxy"})]).unwrap();
        assert_eq!(text, r#"{"initContainers":[{"name":"istio-proxy"}]}"#);
        let (containers, inits) = parse(&text).unwrap();
        assert!(containers.is_empty());
        assert_eq!(inits, [json!({"name": "istio-proxy"})]);
    }

    #[test]
    fn errors_name_the_annotation() {
        assert!(parse("{nope").is_err());
        let err = parse("[]").unwrap_err().to_string();
        assert_eq!(err, "proxy.istio.io/overrides is not a JSON object");
        let err = parse(r#"{"containers": [1]}"#).unwrap_err().to_string();
        assert!(
            err.contains("containers must be a list of containers"),
            "{err}"
        );
    }
}
