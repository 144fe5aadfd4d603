//! YAML helpers: splitting a multi-document stream the way Kubernetes' YAML reader does, parsing one
//! document into a JSON value with YAML 1.1 scalars (as `kubectl` and Istio read manifests), and emitting
//! a value as YAML that reads back to the same value.

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
    let mut docs = Vec::new();
    let mut start = 0usize;
    let mut pos = 0usize;
    let bytes = input.as_bytes();
    while pos < bytes.len() {
        let end = match input[pos..].find('\n') {
            Some(i) => pos + i + 1,
            None => input.len(),
        };
        let line = &input[pos..end];
        if is_separator(line) && !input[start..pos].trim().is_empty() {
            docs.push(&input[start..pos]);
            start = end;
        } else if is_separator(line) && input[start..pos].trim().is_empty() {
            // Kubernetes keeps a leading separator as part of the next document; it is harmless for
            // parsing, and keeping it preserves the original bytes.
        }
        pos = end;
    }
    if start < input.len() && !input[start..].trim().is_empty() {
        docs.push(&input[start..]);
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

/// Parses a configuration document that may be JSON or YAML: JSON first (exact numbers and strings), then
/// YAML.
pub fn parse_json_or_yaml(text: &str) -> Result<Value, YamlError> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Ok(v),
        Err(_) => parse(text),
    }
}

/// Parses YAML quickly when it stays within the block subset the injection templates produce, else with
/// the full parser. The subset: block mappings and sequences indented with spaces, keys that are plain
/// words or JSON strings, and values that are JSON (what askama's `|json` writes: strings, numbers, lists,
/// objects on one line) or plain words. Anything else — block scalars, anchors, tags, quotes YAML-style,
/// flow collections that are not JSON, document markers — makes the fast path give up, and the result is
/// then exactly the full parser's. The fast path exists because the webhook parses a rendered template on
/// every request: a general YAML parser costs about a millisecond there, this a few microseconds.
pub fn parse_fast(text: &str) -> Result<Value, YamlError> {
    match subset::parse(text) {
        Some(v) => Ok(v),
        None => parse(text),
    }
}

mod subset {
    use serde_json::{Map, Value};

    struct Line<'a> {
        indent: usize,
        content: &'a str,
    }

    pub(super) fn parse(text: &str) -> Option<Value> {
        let mut lines = Vec::new();
        for raw in text.lines() {
            let content = raw.trim_start_matches(' ');
            if content.starts_with('\t')
                || raw.contains('\t') && !content.is_empty() && content.trim().is_empty()
            {
                return None;
            }
            let t = content.trim_end();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if t.starts_with("---") || t.starts_with("...") || t.starts_with('%') {
                return None;
            }
            lines.push(Line {
                indent: raw.len() - content.len(),
                content: t,
            });
        }
        if lines.is_empty() {
            return Some(Value::Null);
        }
        let mut i = 0;
        let indent = lines[0].indent;
        let v = node(&mut lines, &mut i, indent)?;
        if i != lines.len() {
            return None;
        }
        Some(v)
    }

    fn is_seq_item(c: &str) -> bool {
        c == "-" || c.starts_with("- ")
    }

    fn node(lines: &mut [Line<'_>], i: &mut usize, indent: usize) -> Option<Value> {
        if is_seq_item(lines[*i].content) {
            seq(lines, i, indent)
        } else {
            map(lines, i, indent)
        }
    }

    /// Splits `key: rest` (rest may be empty). None when the line is not a mapping entry.
    fn split_key(c: &str) -> Option<(String, &str)> {
        if c.starts_with('"') {
            let end = json_string_end(c)?;
            let key: String = serde_json::from_str(&c[..end]).ok()?;
            let rest = c[end..].strip_prefix(':')?;
            if !(rest.is_empty() || rest.starts_with(' ')) {
                return None;
            }
            return Some((key, rest.trim_start()));
        }
        let first = c.chars().next()?;
        if "'{[&*!|>%@`#?-,]}".contains(first)
            && !(first == '-' && c.len() > 1 && !c[1..].starts_with(' '))
        {
            return None;
        }
        let (key, rest) = match c.find(": ") {
            Some(p) => (&c[..p], c[p + 2..].trim_start()),
            None => (c.strip_suffix(':')?, ""),
        };
        if key.is_empty() || key.contains(" #") || key.contains(['"', '\'']) || key.ends_with(' ') {
            return None;
        }
        Some((key.to_string(), rest))
    }

    fn json_string_end(c: &str) -> Option<usize> {
        let b = c.as_bytes();
        let mut j = 1;
        while j < b.len() {
            match b[j] {
                b'\\' => j += 2,
                b'"' => return Some(j + 1),
                _ => j += 1,
            }
        }
        None
    }

    fn scalar(s: &str) -> Option<Value> {
        match s.as_bytes().first() {
            Some(b'"' | b'{' | b'[') => return serde_json::from_str(s).ok(),
            None => return Some(Value::Null),
            _ => {}
        }
        let first = s.chars().next()?;
        if "'&*!|>%@`#?,]}".contains(first)
            || s.contains(": ")
            || s.contains(" #")
            || s.ends_with(':')
        {
            return None;
        }
        match s {
            "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
            "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y" | "Y" => {
                return Some(Value::Bool(true))
            }
            "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "n"
            | "N" => return Some(Value::Bool(false)),
            _ => {}
        }
        let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            if digits.len() > 1 && digits.starts_with('0') {
                return None; // YAML 1.1 octal: leave to the full parser
            }
            return s
                .trim_start_matches('+')
                .parse::<i64>()
                .ok()
                .map(Value::from);
        }
        // Anything that could be a float, a sexagesimal or another YAML 1.1 type: full parser.
        if s.starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == '-' || c == '+') {
            if s.bytes().any(|b| b.is_ascii_digit())
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".:+-_eE".contains(&b))
            {
                if s.bytes()
                    .all(|b| b.is_ascii_digit() || b".:+-_eE".contains(&b))
                {
                    return None;
                }
            }
            if s == "."
                || s.eq_ignore_ascii_case(".nan")
                || s.to_ascii_lowercase().ends_with(".inf")
            {
                return None;
            }
        }
        Some(Value::String(s.to_string()))
    }

    fn map(lines: &mut [Line<'_>], i: &mut usize, indent: usize) -> Option<Value> {
        let mut m = Map::new();
        while *i < lines.len() {
            let line = &lines[*i];
            if line.indent < indent {
                break;
            }
            if line.indent > indent || is_seq_item(line.content) {
                return None;
            }
            let (key, rest) = split_key(line.content)?;
            *i += 1;
            let value = if rest.is_empty() {
                match lines.get(*i) {
                    Some(next) if next.indent > indent => {
                        let ind = next.indent;
                        node(lines, i, ind)?
                    }
                    Some(next) if next.indent == indent && is_seq_item(next.content) => {
                        seq(lines, i, indent)?
                    }
                    _ => Value::Null,
                }
            } else {
                scalar(rest)?
            };
            if m.insert(key, value).is_some() {
                return None; // duplicate key: let the full parser report it
            }
        }
        Some(Value::Object(m))
    }

    fn seq(lines: &mut [Line<'_>], i: &mut usize, indent: usize) -> Option<Value> {
        let mut items = Vec::new();
        while *i < lines.len() {
            let line = &lines[*i];
            if line.indent < indent || (line.indent == indent && !is_seq_item(line.content)) {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let rest = line.content[1..].trim_start_matches(' ');
            let offset = line.content.len() - rest.len();
            if rest.is_empty() {
                *i += 1;
                match lines.get(*i) {
                    Some(next) if next.indent > indent => {
                        let ind = next.indent;
                        items.push(node(lines, i, ind)?);
                    }
                    _ => items.push(Value::Null),
                }
            } else if is_seq_item(rest) {
                return None; // nested "- - x": full parser
            } else if split_key(rest).is_some() {
                // "- key: value": a mapping whose column is the content's.
                let ind = indent + offset;
                lines[*i] = Line {
                    indent: ind,
                    content: rest,
                };
                items.push(map(lines, i, ind)?);
            } else {
                items.push(scalar(rest)?);
                *i += 1;
            }
        }
        Some(Value::Array(items))
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
                if let Some(val) = m.get(k) {
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
    fn fast_subset_agrees_with_the_full_parser() {
        let docs = [
            "metadata:\n  labels:\n    a: \"x\"\n    \"k8s.io/n\": \"v, w\"\nspec:\n  initContainers:\n  - name: \"istio-init\"\n    args: [\"-p\",\"15001\"]\n    securityContext:\n      runAsUser: 0\n      capabilities:\n        drop: [\"ALL\"]\n  - name: x\n    env:\n    - name: A\n      value: \"1\"\n  volumes:\n  - name: workload-socket\n  - emptyDir:\n    name: w\n  - name: e\n    emptyDir: {\"medium\":\"Memory\"}\n",
            "a:\n- 1\n- -2\n- yes\n- off\n- ~\n- plain words\n- --log_output_level=default:info\n- $(POD_NAMESPACE).svc\nb: null\nc:\n",
            "a: {\"x\": [1, 2.5, null, \"s\"]}\nb: 0755\nc: 1.5\nd: 1:20\ne: |\n  text\n",
            "- a\n- - b\n",
            "a: 'single'\nb: &anchor x\nc: *anchor\n",
            "a: 1\na: 2\n",
            "# comment\n\na:\n  b: c # trailing\n",
        ];
        for d in docs {
            let full = parse(d);
            let fast = parse_fast(d);
            match (full, fast) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{d}"),
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{d}: full {a:?} fast {b:?}"),
            }
        }
        // The template shapes take the fast path.
        assert!(subset::parse(docs[0]).is_some());
        assert!(subset::parse(docs[1]).is_some());
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(Value::from),
            "[ -~]{0,10}".prop_map(Value::String),
            prop_oneof![
                Just("yes"),
                Just("0755"),
                Just("1:2"),
                Just("a: b"),
                Just("- x"),
                Just("#"),
                Just("")
            ]
            .prop_map(|s| Value::String(s.to_string())),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z./~ -]{1,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn fast_parser_agrees_on_emitted_yaml(v in json_value()) {
            let text = to_string(&v).unwrap();
            proptest::prop_assert_eq!(parse_fast(&text).unwrap(), parse(&text).unwrap());
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            proptest::prop_assert_eq!(parse_fast(&pretty).unwrap(), parse(&pretty).unwrap());
        }
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
