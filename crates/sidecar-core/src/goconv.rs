//! How Istio's Go code reads a string or a JSON-decoded value as a boolean or an integer. The two boolean
//! readings disagree on purpose: a Go template tests a value's emptiness (`"false"` is a non-empty
//! string, so true), Go code parses it (`strconv.ParseBool("false")` is false).

use serde_json::Value;

/// Go's `strconv.ParseBool`: `None` for anything but its twelve spellings.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A boolean setting as Go code reads a JSON value: a bool as is, a string through [`parse_bool`]
/// (unparseable is false), anything else false.
pub fn parse_bool_value(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => parse_bool(s) == Some(true),
        _ => false,
    }
}

/// Go-template truthiness (`{{ if }}`): false, 0, nil and empty strings/lists/maps are false; every other
/// value, the string `"false"` included, is true.
pub fn template_truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// An integer from a JSON number (or an integral float, as Go decodes every number to float64) or a
/// numeric string (spaces trimmed).
pub fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            let f = n.as_f64()?;
            (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parse_bool_takes_go_spellings_only() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        for other in ["", "yes", "on", "tRUE", " true"] {
            assert_eq!(parse_bool(other), None, "{other:?}");
        }
    }

    #[test]
    fn the_two_readings_of_false_disagree() {
        let f = json!("false");
        assert!(template_truthy(Some(&f)));
        assert!(!parse_bool_value(Some(&f)));
        assert!(parse_bool_value(Some(&json!("T"))));
        assert!(!parse_bool_value(Some(&json!(1))));
        assert!(template_truthy(Some(&json!(1))));
        for empty in [
            json!(null),
            json!(""),
            json!(0),
            json!([]),
            json!({}),
            json!(false),
        ] {
            assert!(!template_truthy(Some(&empty)), "{empty}");
        }
        assert!(!template_truthy(None));
    }

    #[test]
    fn integers_from_numbers_floats_and_strings() {
        assert_eq!(as_i64(&json!(7)), Some(7));
        assert_eq!(as_i64(&json!(7.0)), Some(7));
        assert_eq!(as_i64(&json!(7.5)), None);
        assert_eq!(as_i64(&json!(" 12 ")), Some(12));
        assert_eq!(as_i64(&json!("x")), None);
        assert_eq!(as_i64(&json!(true)), None);
    }
}
