//! The YAML that sigs.k8s.io/yaml `Marshal` writes (go-yaml v2), for `toYaml`.

use std::fmt::Write as _;

use serde_json::{Map, Value as Json};

use super::json::{sorted_entries, write_integer};
use super::strconv::{format_float, is_go_printable, quote_into, u_escape};

/// YAML as sigs.k8s.io/yaml `Marshal` writes it (go-yaml v2 block style, keys sorted, sequences not
/// indented under their key, trailing newline). Scalars are quoted wherever YAML 1.1 would read them as
/// anything but the same string, so the text reads back to the same value.
pub(crate) fn to_yaml(j: &Json) -> String {
    let mut out = String::new();
    match j {
        Json::Object(o) if !o.is_empty() => yaml_map(o, 0, false, &mut out),
        Json::Array(a) if !a.is_empty() => yaml_seq(a, 0, false, &mut out),
        Json::String(s) if s.contains('\n') && literal_ok(s) => yaml_literal(s, 2, &mut out),
        other => {
            yaml_scalar(other, &mut out);
            out.push('\n');
        }
    }
    out
}

fn indent_to(n: usize, out: &mut String) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn yaml_map(o: &Map<String, Json>, indent: usize, first_inline: bool, out: &mut String) {
    for (i, (k, v)) in sorted_entries(o).into_iter().enumerate() {
        if i > 0 || !first_inline {
            indent_to(indent, out);
        }
        yaml_str(k, out);
        out.push(':');
        match v {
            Json::Object(m) if !m.is_empty() => {
                out.push('\n');
                yaml_map(m, indent + 2, false, out);
            }
            Json::Array(a) if !a.is_empty() => {
                out.push('\n');
                yaml_seq(a, indent, false, out);
            }
            Json::String(s) if s.contains('\n') && literal_ok(s) => {
                out.push(' ');
                yaml_literal(s, indent + 2, out);
            }
            other => {
                out.push(' ');
                yaml_scalar(other, out);
                out.push('\n');
            }
        }
    }
}

fn yaml_seq(a: &[Json], indent: usize, first_inline: bool, out: &mut String) {
    for (i, v) in a.iter().enumerate() {
        if i > 0 || !first_inline {
            indent_to(indent, out);
        }
        out.push_str("- ");
        match v {
            Json::Object(m) if !m.is_empty() => yaml_map(m, indent + 2, true, out),
            Json::Array(s) if !s.is_empty() => yaml_seq(s, indent + 2, true, out),
            Json::String(s) if s.contains('\n') && literal_ok(s) => {
                yaml_literal(s, indent + 2, out)
            }
            other => {
                yaml_scalar(other, out);
                out.push('\n');
            }
        }
    }
}

/// A literal block keeps the text exactly when its first line does not start with white space and it has
/// no control characters other than newlines and tabs.
fn literal_ok(s: &str) -> bool {
    !s.starts_with([' ', '\t', '\n'])
        && !s.ends_with("\n\n")
        && !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
        && !s.contains(['\u{85}', '\u{2028}', '\u{2029}', '\u{feff}'])
}

fn yaml_literal(s: &str, indent: usize, out: &mut String) {
    let (body, chomp) = match s.strip_suffix('\n') {
        Some(b) => (b, "|"),
        None => (s, "|-"),
    };
    out.push_str(chomp);
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            indent_to(indent, out);
            out.push_str(line);
        }
        out.push('\n');
    }
}

fn yaml_scalar(j: &Json, out: &mut String) {
    match j {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => {
            let Some(f) = write_integer(n, out) else {
                return;
            };
            if f.fract() == 0.0 && f.abs() < 1e21 {
                let _ = write!(
                    out,
                    "{}",
                    f.abs() as u128 as i128 * if f < 0.0 { -1 } else { 1 }
                );
            } else {
                out.push_str(&format_float(f, 'g', None, false).unwrap_or_default());
            }
        }
        Json::String(s) => yaml_str(s, out),
        Json::Array(_) => out.push_str("[]"),
        Json::Object(_) => out.push_str("{}"),
    }
}

const YAML11_WORDS: &[&str] = &[
    "y", "n", "yes", "no", "true", "false", "on", "off", "null", "~", "<<", "=", ".inf", "-.inf",
    "+.inf", ".nan",
];

/// Could YAML 1.1 read the text as a number or a timestamp (ints in any base, floats, sexagesimals, dates)?
fn numberish(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() || b"+-._:xXoOtTzZ ".contains(&b))
}

fn plain_ok(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if s.starts_with([' ', '\t']) || s.ends_with([' ', '\t', ':']) {
        return false;
    }
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) || numberish(s) {
        return false;
    }
    if YAML11_WORDS.contains(&s.to_ascii_lowercase().as_str()) {
        return false;
    }
    if s.contains(": ") || s.contains(" #") || s.contains(['\n', '\r']) {
        return false;
    }
    !s.chars().any(|c| {
        c.is_control() || !is_go_printable(c) || matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}')
    })
}

fn yaml_str(s: &str, out: &mut String) {
    if plain_ok(s) {
        out.push_str(s);
        return;
    }
    quote_into(s, out, |c, out| match c {
        c if c.is_control() || !is_go_printable(c) => u_escape(c, out),
        c => out.push(c),
    });
}
