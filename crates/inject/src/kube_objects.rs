//! Kubernetes objects read from files as `kubectl get … -o yaml` prints them (a YAML stream or a `List`):
//! the inputs that stand in for what Istio's webhook reads from the API server (ProxyConfig resources,
//! Namespaces). Errors name the file, the object and the field.

use std::path::Path;

use serde_json::Value;

use sidecar_core::fields::{self, Fields};
use sidecar_core::yaml::{self, YamlError};

/// A file of objects that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] crate::input::FlagFileError),
    /// A document is not valid YAML.
    #[error("{path}: document {document}: {source}")]
    Parse {
        path: String,
        document: usize,
        #[source]
        source: YamlError,
    },
    /// An object is not what the file must hold, or one of its fields is invalid.
    #[error("{path}: {object}: field {field}: {reason}")]
    Invalid {
        path: String,
        /// `Kind namespace/name` (or the position in the file when the object has no name).
        object: String,
        field: String,
        reason: String,
    },
}

/// Reads the objects of `path`, which `flag` names.
pub fn read(flag: &'static str, path: &Path) -> Result<Vec<Value>, ObjectsError> {
    let text = crate::input::read_flag_file(flag, path)?;
    parse(&text, &path.display().to_string())
}

/// The objects of a stream: every document, a `List` replaced by its `items`, empty documents skipped.
/// `source` names the text in errors.
pub fn parse(text: &str, source: &str) -> Result<Vec<Value>, ObjectsError> {
    let mut out = Vec::new();
    for (document, doc) in yaml::documents(text).into_iter().enumerate() {
        let v = yaml::parse_at(doc).map_err(|e| ObjectsError::Parse {
            path: source.to_string(),
            document,
            source: e,
        })?;
        match v {
            Value::Null => {}
            Value::Object(mut o) if o.field("kind").and_then(Value::as_str) == Some("List") => {
                match o.remove("items") {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(items)) => out.extend(items),
                    Some(other) => {
                        return Err(ObjectsError::Invalid {
                            path: source.to_string(),
                            object: format!("document {document} (List)"),
                            field: "items".to_string(),
                            reason: format!("must be a list, got {other}"),
                        })
                    }
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// `Kind namespace/name` of an object for messages (`#index` stands in for a missing name).
pub fn describe(obj: &Value, index: usize) -> String {
    let s = |p: &[&str]| fields::path(obj, p).and_then(Value::as_str).unwrap_or("");
    let kind = Some(s(&["kind"]))
        .filter(|k| !k.is_empty())
        .unwrap_or("object");
    match (s(&["metadata", "namespace"]), s(&["metadata", "name"])) {
        (_, "") => format!("{kind} #{index}"),
        ("", name) => format!("{kind} {name}"),
        (ns, name) => format!("{kind} {ns}/{name}"),
    }
}

/// Parses an RFC 3339 timestamp (`metadata.creationTimestamp`, e.g. `2026-01-02T03:04:05Z`) into Unix
/// seconds; the fraction is dropped, as Kubernetes' `metav1.Time` keeps whole seconds.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let rb = rest.as_bytes();
            if rb.len() != 6 || !matches!(rb[0], b'+' | b'-') || rb[3] != b':' {
                return None;
            }
            let h: i64 = rest.get(1..3)?.parse().ok()?;
            let m: i64 = rest.get(4..6)?.parse().ok()?;
            let o = h * 3600 + m * 60;
            if rb[0] == b'-' {
                -o
            } else {
                o
            }
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + min * 60 + sec - offset)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_streams_give_the_same_objects() {
        let list = "apiVersion: v1\nkind: List\nitems:\n- kind: Namespace\n  metadata: {name: a}\n- kind: Namespace\n  metadata: {name: b}\n";
        let stream = "kind: Namespace\nmetadata: {name: a}\n---\n---\nkind: Namespace\nmetadata: {name: b}\n";
        assert_eq!(parse(list, "l").unwrap(), parse(stream, "s").unwrap());
        assert_eq!(parse(list, "l").unwrap().len(), 2);
        let e = parse("kind: List\nitems: 3\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.yaml") && e.contains("items"), "{e}");
        let e = parse("a: [\n", "g.yaml").unwrap_err().to_string();
        assert!(e.contains("g.yaml: document 0"), "{e}");
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_timestamp("2026-12-01T09:21:42Z"), Some(1_796_116_902));
        assert_eq!(
            parse_timestamp("2026-12-01T10:21:42+01:00"),
            Some(1_796_116_902)
        );
        assert_eq!(
            parse_timestamp("2026-12-01T09:21:42.999Z"),
            Some(1_796_116_902)
        );
        assert_eq!(parse_timestamp("2026-13-01T09:21:42Z"), None);
        assert_eq!(parse_timestamp("yesterday"), None);
        assert_eq!(parse_timestamp("2026-12-01T09:21:42"), None);
    }
}
