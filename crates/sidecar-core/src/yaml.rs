//! YAML helpers: splitting a multi-document stream the way Kubernetes' YAML reader does, parsing one
//! document into a JSON value with YAML 1.1 scalars (as `kubectl` and Istio read manifests), and emitting
//! a value as YAML that reads back to the same value.

use crate::fields::Fields;
use serde_json::{Map, Value};

/// A YAML document could not be parsed or a value could not be emitted.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// The text is not valid YAML (or not representable as JSON, e.g. a non-string map key).
    #[error("invalid YAML: {0}")]
    Parse(String),
    /// The value could not be written as YAML.
    #[error("cannot write YAML: {0}")]
    Emit(String),
}

/// Splits a stream into documents like Kubernetes' `YAMLReader`: a line that starts with `---` followed
/// only by whitespace or a comment ends the current document if it has content; a separator seen while the
/// buffer is empty stays part of the next document; documents consisting only of whitespace are dropped.
/// Each returned slice keeps its original bytes (so unknown kinds can be echoed unchanged).
pub fn split_documents(input: &str) -> Vec<&str> {
    documents(input).into_iter().map(|d| d.text).collect()
}

/// One document of a stream, as [`split_documents`] cuts it, and where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Document<'a> {
    /// The document's bytes, unchanged.
    pub text: &'a str,
    /// The line of the stream its text starts on, from 1: [`parse_at`] reports errors in the stream's
    /// lines, not the document's.
    pub line: usize,
}

/// [`split_documents`] with each document's first line in the stream.
pub fn documents(input: &str) -> Vec<Document<'_>> {
    let mut docs = Vec::new();
    let (mut start, mut start_line) = (0usize, 1usize);
    let (mut pos, mut line_no) = (0usize, 1usize);
    let bytes = input.as_bytes();
    while pos < bytes.len() {
        let end = match input[pos..].find('\n') {
            Some(i) => pos + i + 1,
            None => input.len(),
        };
        let line = &input[pos..end];
        if is_separator(line) && !input[start..pos].trim().is_empty() {
            docs.push(Document {
                text: &input[start..pos],
                line: start_line,
            });
            start = end;
            start_line = line_no + 1;
        } else if is_separator(line) && input[start..pos].trim().is_empty() {
            // Kubernetes keeps a leading separator as part of the next document; it is harmless for
            // parsing, and keeping it preserves the original bytes.
        }
        pos = end;
        line_no += 1;
    }
    if start < input.len() && !input[start..].trim().is_empty() {
        docs.push(Document {
            text: &input[start..],
            line: start_line,
        });
    }
    docs
}

fn is_separator(line: &str) -> bool {
    match line.strip_prefix("---") {
        Some(rest) => {
            let rest = rest.trim();
            rest.is_empty() || rest.starts_with('#')
        }
        None => false,
    }
}

/// True when a document holds no YAML content (only separators, comments and whitespace).
pub fn is_blank_document(doc: &str) -> bool {
    doc.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || is_separator(l)
    })
}

fn parse_options() -> serde_saphyr::Options {
    let mut o = serde_saphyr::Options::default();
    // YAML 1.1 (go-yaml v2, as sigs.k8s.io/yaml reads manifests): `0755` is octal.
    o.legacy_octal_numbers = true;
    o
}

/// Parses one YAML (or JSON) document into a JSON value. An empty document is `null`.
pub fn parse(text: &str) -> Result<Value, YamlError> {
    if is_blank_document(text) {
        return Ok(Value::Null);
    }
    serde_saphyr::from_str_with_options::<Value>(text, parse_options())
        .map_err(|e| YamlError::Parse(e.to_string()))
}

/// Parses a template's output as Istio's `inject.go` `applyOverlayYAML` reads it (sigs.k8s.io/yaml over
/// go-yaml v2): as [`parse`], except that a key repeated in one mapping keeps its last value instead of
/// being an error. Istio's own texts write such mappings: `- name: "{{ $index }}"` followed by a
/// `sidecar.istio.io/userVolume` entry's own `name`.
///
/// The block YAML that templates print is read by [`crate::yaml_block`] when it is in that reader's
/// subset, else by the full parser; both give the same value.
pub fn parse_last_key_wins(text: &str) -> Result<Value, YamlError> {
    match crate::yaml_block::parse(text) {
        Some(v) => Ok(v),
        None => parse_last_key_wins_full(text),
    }
}

/// [`parse_last_key_wins`] by the full parser only.
pub fn parse_last_key_wins_full(text: &str) -> Result<Value, YamlError> {
    if is_blank_document(text) {
        return Ok(Value::Null);
    }
    let mut o = parse_options();
    o.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::LastWins;
    serde_saphyr::from_str_with_options::<Value>(text, o)
        .map_err(|e| YamlError::Parse(e.to_string()))
}

/// Parses one document of a stream (see [`documents`]) as [`parse`] does; an error's line numbers, and
/// the lines its excerpt shows, count from the start of the stream.
pub fn parse_at(doc: Document<'_>) -> Result<Value, YamlError> {
    parse(doc.text).map_err(|e| {
        if doc.line <= 1 {
            return e;
        }
        // The parser counts from the start of the text it is given, and takes no starting line. Only
        // on this error path, parse again behind as many empty lines as precede the document (empty
        // lines change no YAML), so that the same error carries the stream's line numbers.
        let mut padded = "\n".repeat(doc.line - 1);
        padded.push_str(doc.text);
        match parse(&padded) {
            Err(shifted) => shifted,
            Ok(_) => e,
        }
    })
}

/// Parses a configuration document that may be JSON or YAML: JSON first (exact numbers and strings), then
/// YAML.
pub fn parse_json_or_yaml(text: &str) -> Result<Value, YamlError> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Ok(v),
        Err(_) => parse(text),
    }
}

/// Returns `v` with every mapping's keys sorted (as Kubernetes' YAML output), recursively.
pub fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = Map::with_capacity(m.len());
            for k in keys {
                if let Some(val) = m.field(k) {
                    out.insert(k.clone(), sorted(val));
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// Emits `v` as one YAML document with sorted keys. Strings that would read back as another type
/// (`"yes"`, `"on"`, `"15020"`, `"true"`, `""`) are quoted, so the output reads back identically.
pub fn to_string(v: &Value) -> Result<String, YamlError> {
    let mut opts = serde_saphyr::SerializerOptions::default();
    // Multi-line strings (PROXY_CONFIG, pod ports) as block scalars, like Kubernetes' output.
    opts.prefer_block_scalars = true;
    serde_saphyr::to_string_with_options(&sorted(v), opts)
        .map_err(|e| YamlError::Emit(e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn splits_like_kubernetes() {
        let s = "---\na: 1\n---\n\n--- # c\nb: 2\n---\n";
        let docs = split_documents(s);
        assert_eq!(docs.len(), 2, "{docs:?}");
        assert_eq!(parse(docs[0]).unwrap(), json!({"a": 1}));
        assert_eq!(parse(docs[1]).unwrap(), json!({"b": 2}));
        // `---foo` is content, not a separator.
        assert_eq!(split_documents("a: |\n  ---foo\n").len(), 1);
    }

    #[test]
    fn documents_know_their_first_line_and_errors_count_from_the_stream_start() {
        let s = "---\na: 1\n---\n\n--- # c\nb: 2\n---\nc: [\n";
        let docs = documents(s);
        let lines: Vec<usize> = docs.iter().map(|d| d.line).collect();
        assert_eq!(lines, [1, 4, 8], "{docs:?}");
        assert_eq!(parse_at(docs[1]).unwrap(), json!({"b": 2}));
        // The third document's `[` is on line 8 of the stream (line 1 of the document).
        let err = parse_at(docs[2]).unwrap_err().to_string();
        assert!(err.contains("line 8 column 4"), "{err}");
        assert!(err.contains("8 | c: ["), "{err}");
        assert!(!err.contains("line 1 "), "{err}");
    }

    #[test]
    fn yaml11_scalars() {
        let v =
            parse("a: yes\nb: on\nc: '15020'\nd: 15020\ne: 0755\nf: 2020-01-01\ng: ~\n").unwrap();
        assert_eq!(
            v,
            json!({"a": true, "b": true, "c": "15020", "d": 15020, "e": 493, "f": "2020-01-01", "g": null})
        );
    }

    #[test]
    fn emits_strings_that_read_back_identically() {
        let v = json!({
            "s": ["yes", "on", "no", "off", "y", "n", "true", "15020", "", "~", "null", "1e3", "0755", "*",
                  "{\"a\":1}", "line1\nline2\n", "line1\nline2", " lead", "trail ", "a: b", "- x", "#c",
                  "1:20", "0x1F", "2020-01-01", "a'b\"c", "tab\tx", "\u{1}"],
            "n": [1, -2, 1.5, true, null],
            "nested": {"z": 1, "a": {"b": []}, "m": {}}
        });
        let text = to_string(&v).unwrap();
        assert_eq!(parse(&text).unwrap(), v, "{text}");
    }
}
