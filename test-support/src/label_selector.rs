//! A Kubernetes `LabelSelector` (`metav1.LabelSelector`) evaluated the way the API server evaluates a
//! webhook's `namespaceSelector` and `objectSelector`: apimachinery's `LabelSelectorAsSelector` and
//! `labels.Selector.Matches`.
//!
//! Read from the selector's JSON form (`serde_json::to_value` of a typed selector, or parsed YAML), so
//! the tests check the generated configurations without sharing a line of code with the generator.
//! Selectors the API server refuses (an unknown operator, `In` without values, `Exists` with values, an
//! invalid key or value) are errors here, never a silent "no match".

use std::collections::BTreeMap;

use serde_json::Value;

/// The operator of one `matchExpressions` requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// The label is present and its value is one of the values.
    In,
    /// The label is absent, or present with a value that is none of the values.
    NotIn,
    /// The label is present (any value).
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

/// A parsed selector: every `matchLabels` pair and every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Requirement>,
}

/// Why a selector is not one the API server accepts; each names the offending field and value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    /// The selector, or one of its parts, has the wrong JSON type.
    #[error("{field}: expected {expected}, got {value}")]
    Type {
        field: String,
        expected: &'static str,
        value: String,
    },
    /// A field the selector type does not have (a misspelling would otherwise match everything).
    #[error("unknown field `{field}` in a label selector")]
    UnknownField { field: String },
    /// `operator` is not `In`, `NotIn`, `Exists` or `DoesNotExist`.
    #[error("{field}: {value:?} is not a valid label selector operator")]
    Operator { field: String, value: String },
    /// `In`/`NotIn` without values, or `Exists`/`DoesNotExist` with values.
    #[error("{field}: operator {operator:?} {problem}")]
    Values {
        field: String,
        operator: Operator,
        problem: &'static str,
    },
    /// A key that is not a qualified name (`[prefix/]name`).
    #[error("{field}: {value:?} is not a valid label key")]
    Key { field: String, value: String },
    /// A value that is not a valid label value.
    #[error("{field}: {value:?} is not a valid label value")]
    Value { field: String, value: String },
}

/// Whether `s` is a valid label value: at most 63 characters, alphanumerics, `-`, `_` and `.`, starting
/// and ending with an alphanumeric; the empty string is valid.
pub fn valid_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() {
        return true;
    }
    b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Whether `s` is a DNS-1123 subdomain (the prefix of a qualified label key).
fn valid_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
                && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Whether `s` is a valid label key: a qualified name, `[DNS-subdomain/]name` with a non-empty name.
pub fn valid_label_key(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(valid_dns_subdomain) && !name.is_empty() && valid_label_value(name)
}

fn type_error(field: &str, expected: &'static str, value: &Value) -> SelectorError {
    SelectorError::Type {
        field: field.to_string(),
        expected,
        value: value.to_string(),
    }
}

fn string<'a>(v: &'a Value, field: &str) -> Result<&'a str, SelectorError> {
    v.as_str().ok_or_else(|| type_error(field, "a string", v))
}

fn key(v: &Value, field: &str) -> Result<String, SelectorError> {
    valid_string(v, field, valid_label_key, |field, value| {
        SelectorError::Key { field, value }
    })
}

fn value(v: &Value, field: &str) -> Result<String, SelectorError> {
    valid_string(v, field, valid_label_value, |field, value| {
        SelectorError::Value { field, value }
    })
}

/// The string at `field`, or the error `invalid` makes of the field and the string when `valid` refuses it.
fn valid_string(
    v: &Value,
    field: &str,
    valid: fn(&str) -> bool,
    invalid: fn(String, String) -> SelectorError,
) -> Result<String, SelectorError> {
    let s = string(v, field)?;
    if !valid(s) {
        return Err(invalid(field.to_string(), s.to_string()));
    }
    Ok(s.to_string())
}

fn requirement(v: &Value, field: &str) -> Result<Requirement, SelectorError> {
    let m = v.as_object().ok_or_else(|| type_error(field, "a map", v))?;
    if let Some(unknown) = m
        .keys()
        .find(|k| !matches!(k.as_str(), "key" | "operator" | "values"))
    {
        return Err(SelectorError::UnknownField {
            field: format!("{field}.{unknown}"),
        });
    }
    let key_field = format!("{field}.key");
    let key = key(m.get("key").unwrap_or(&Value::Null), &key_field)?;
    let op_field = format!("{field}.operator");
    let op = string(m.get("operator").unwrap_or(&Value::Null), &op_field)?;
    let operator = match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => {
            return Err(SelectorError::Operator {
                field: op_field,
                value: other.to_string(),
            })
        }
    };
    let values_field = format!("{field}.values");
    let values = match m.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| value(v, &format!("{values_field}[{i}]")))
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(type_error(&values_field, "a list", other)),
    };
    let problem = match operator {
        Operator::In | Operator::NotIn if values.is_empty() => Some("needs at least one value"),
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => Some("takes no values"),
        _ => None,
    };
    if let Some(problem) = problem {
        return Err(SelectorError::Values {
            field: values_field,
            operator,
            problem,
        });
    }
    Ok(Requirement {
        key,
        operator,
        values,
    })
}

impl LabelSelector {
    /// Reads a selector from its JSON form. `null` is the empty selector, as the API server defaults an
    /// absent webhook selector to `{}`.
    pub fn from_json(v: &Value) -> Result<LabelSelector, SelectorError> {
        let m = match v {
            Value::Null => return Ok(LabelSelector::default()),
            Value::Object(m) => m,
            other => return Err(type_error("selector", "a map", other)),
        };
        if let Some(unknown) = m
            .keys()
            .find(|k| !matches!(k.as_str(), "matchLabels" | "matchExpressions"))
        {
            return Err(SelectorError::UnknownField {
                field: unknown.clone(),
            });
        }
        let mut sel = LabelSelector::default();
        match m.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, v) in labels {
                    let field = format!("matchLabels.{k}");
                    sel.match_labels
                        .insert(key(&Value::String(k.clone()), &field)?, value(v, &field)?);
                }
            }
            Some(other) => return Err(type_error("matchLabels", "a map", other)),
        }
        match m.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for (i, e) in exprs.iter().enumerate() {
                    sel.match_expressions
                        .push(requirement(e, &format!("matchExpressions[{i}]"))?);
                }
            }
            Some(other) => return Err(type_error("matchExpressions", "a list", other)),
        }
        Ok(sel)
    }

    /// Whether the selector selects an object with `labels`. The empty selector selects everything.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl Requirement {
    /// Whether this one requirement holds for `labels`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let have = labels.get(&self.key);
        match self.operator {
            Operator::In => have.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => have.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => have.is_some(),
            Operator::DoesNotExist => have.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::string_map;
    use serde_json::json;

    fn sel(v: Value) -> LabelSelector {
        LabelSelector::from_json(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelector {
        sel(json!({"matchExpressions": [{"key": key, "operator": op, "values": values}]}))
    }

    #[test]
    fn empty_and_null_selectors_select_everything() {
        for s in [
            sel(json!(null)),
            sel(json!({})),
            sel(json!({"matchLabels": {}})),
        ] {
            assert!(s.matches(&string_map(&[])));
            assert!(s.matches(&string_map(&[("a", "b")])));
        }
    }

    #[test]
    fn match_labels_need_every_pair() {
        let s = sel(json!({"matchLabels": {"app": "web", "tier": "front"}}));
        assert!(s.matches(&string_map(&[
            ("app", "web"),
            ("tier", "front"),
            ("x", "y")
        ])));
        assert!(!s.matches(&string_map(&[("app", "web")])));
        assert!(!s.matches(&string_map(&[("app", "web"), ("tier", "back")])));
        // An empty value is a value: it needs the label present and empty.
        let e = sel(json!({"matchLabels": {"app": ""}}));
        assert!(e.matches(&string_map(&[("app", "")])));
        assert!(!e.matches(&string_map(&[])));
    }

    #[test]
    fn in_needs_the_label_present_with_a_listed_value() {
        let s = expr("env", "In", &["prod", "stage"]);
        assert!(s.matches(&string_map(&[("env", "prod")])));
        assert!(s.matches(&string_map(&[("env", "stage")])));
        assert!(!s.matches(&string_map(&[("env", "dev")])));
        assert!(!s.matches(&string_map(&[])));
        // Values compare exactly: no case folding.
        assert!(!s.matches(&string_map(&[("env", "Prod")])));
    }

    #[test]
    fn not_in_matches_an_absent_label() {
        let s = expr("sidecar.istio.io/inject", "NotIn", &["false"]);
        assert!(s.matches(&string_map(&[])));
        assert!(s.matches(&string_map(&[("sidecar.istio.io/inject", "true")])));
        assert!(s.matches(&string_map(&[("sidecar.istio.io/inject", "")])));
        assert!(!s.matches(&string_map(&[("sidecar.istio.io/inject", "false")])));
    }

    #[test]
    fn exists_and_does_not_exist_ignore_the_value() {
        let s = sel(json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]}));
        assert!(s.matches(&string_map(&[("a", "")])));
        assert!(s.matches(&string_map(&[("a", "x")])));
        assert!(!s.matches(&string_map(&[("b", "x")])));
        let s = sel(json!({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}));
        assert!(!s.matches(&string_map(&[("a", "")])));
        assert!(s.matches(&string_map(&[("b", "x")])));
        // `values: []` is the same as no values.
        assert!(expr("a", "DoesNotExist", &[]).matches(&string_map(&[])));
    }

    #[test]
    fn requirements_and_labels_are_anded() {
        let s = sel(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "istio.io/rev", "operator": "In", "values": ["canary"]},
                {"key": "istio-injection", "operator": "DoesNotExist"},
            ]
        }));
        assert!(s.matches(&string_map(&[("app", "web"), ("istio.io/rev", "canary")])));
        assert!(!s.matches(&string_map(&[("istio.io/rev", "canary")])));
        assert!(!s.matches(&string_map(&[
            ("app", "web"),
            ("istio.io/rev", "canary"),
            ("istio-injection", "enabled")
        ])));
        assert_eq!(s.match_expressions.len(), 2);
    }

    #[test]
    fn selectors_the_api_server_refuses_are_errors() {
        let bad = |v: Value| LabelSelector::from_json(&v).expect_err(&v.to_string());
        assert_eq!(
            bad(json!({"matchExpressions": [{"key": "a", "operator": "in", "values": ["x"]}]})),
            SelectorError::Operator {
                field: "matchExpressions[0].operator".into(),
                value: "in".into()
            }
        );
        assert!(matches!(
            bad(json!({"matchExpressions": [{"key": "a", "operator": "In"}]})),
            SelectorError::Values {
                operator: Operator::In,
                ..
            }
        ));
        assert!(matches!(
            bad(json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]})),
            SelectorError::Values {
                operator: Operator::NotIn,
                ..
            }
        ));
        assert!(matches!(
            bad(json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]})),
            SelectorError::Values {
                operator: Operator::Exists,
                ..
            }
        ));
        assert_eq!(
            bad(json!({"matchExpression": []})),
            SelectorError::UnknownField {
                field: "matchExpression".into()
            }
        );
        assert!(matches!(
            bad(
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"], "value": "y"}]})
            ),
            SelectorError::UnknownField { .. }
        ));
        assert!(matches!(
            bad(json!({"matchExpressions": [{"key": "Bad_Prefix/a", "operator": "Exists"}]})),
            SelectorError::Key { .. }
        ));
        assert!(matches!(
            bad(json!({"matchLabels": {"a": "-x"}})),
            SelectorError::Value { .. }
        ));
        assert!(matches!(
            bad(json!({"matchLabels": {"a": true}})),
            SelectorError::Type { .. }
        ));
        assert!(matches!(bad(json!([])), SelectorError::Type { .. }));
        assert!(matches!(
            bad(json!({"matchExpressions": [{"operator": "Exists"}]})),
            SelectorError::Type { .. }
        ));
    }

    #[test]
    fn label_keys_and_values() {
        for ok in [
            "app",
            "istio.io/rev",
            "sidecar.istio.io/inject",
            "kubernetes.io/metadata.name",
            "a_b.c-d",
        ] {
            assert!(valid_label_key(ok), "{ok}");
        }
        for bad in [
            "",
            "/a",
            "a/",
            "Istio.io/rev",
            "-a",
            "a/b/c",
            &"x".repeat(64),
        ] {
            assert!(!valid_label_key(bad), "{bad}");
        }
        for ok in ["", "enabled", "1.27", "a-b_c.d", &"x".repeat(63)] {
            assert!(valid_label_value(ok), "{ok}");
        }
        for bad in ["-a", "a-", "a b", "a/b", &"x".repeat(64)] {
            assert!(!valid_label_value(bad), "{bad}");
        }
    }
}
