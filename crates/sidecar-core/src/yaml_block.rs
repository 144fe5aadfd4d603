//! A reader for the block YAML that injection templates print, as a fast path in front of the full YAML
//! parser: reading the output of Istio's texts with serde-saphyr was most of an evaluated injection's
//! time (`bench/README.md`).
//!
//! It reads a strict subset and answers `None` for anything outside it, so the caller falls back to the
//! full parser (`yaml::parse_last_key_wins`); where it answers `Some`, the value is the one
//! serde-saphyr gives for the same text with the options `yaml` uses (YAML 1.1 octals, the last of a
//! repeated key). The subset:
//!
//! - block mappings and block sequences (a sequence may sit at its key's indentation), `- key: value`
//!   items, nesting by indentation with spaces;
//! - plain scalars whose reading is not in doubt: `true`, `false`, `null`, `~`, decimal integers without
//!   leading zeros, and strings that start with a letter (not one of YAML 1.1's boolean or null words),
//!   with `/`, `$`, or `-` and a letter, or with a digit and hold a character no number has (`1024Mi`);
//! - double-quoted scalars on one line with the common escapes, single-quoted scalars on one line;
//! - literal block scalars (`|`, `|-`, `|+`) without an indentation indicator;
//! - flow mappings of scalars (`{a: "b", c: d,}`, over several lines) and flow sequences of scalars on one
//!   line, and the empty `{}` and `[]`;
//! - blank lines and whole-line comments.
//!
//! Everything else (anchors, tags, folded scalars, multi-line plain or quoted scalars, complex keys, tabs,
//! several documents, a scalar whose reading is in doubt) is left to the full parser.

use serde_json::{Map, Number, Value};

/// The document's value, or None when the text is outside the subset (parse it with the full parser).
pub fn parse(text: &str) -> Option<Value> {
    // Tabs, carriage returns and characters YAML does not allow unescaped are the full parser's.
    if text.chars().any(|c| !(c == '\n' || printable(c))) {
        return None;
    }
    // The lines; a final line break ends the last line rather than starting an empty one.
    let mut lines: Vec<Line<'_>> = text.split('\n').map(Line::new).collect();
    if text.ends_with('\n') {
        lines.pop();
    }
    let mut r = Reader { lines, at: 0 };
    let Some(first) = r.next_significant() else {
        return Some(Value::Null);
    };
    if r.lines[first].indent != 0 || r.lines[first].text.starts_with("---") {
        return None;
    }
    let v = r.node(0)?;
    // Nothing may follow the document's top node.
    match r.next_significant() {
        None => Some(v),
        Some(_) => None,
    }
}

/// YAML's printable characters (`c-printable`), without the tab and the line breaks.
fn printable(c: char) -> bool {
    matches!(c, '\u{20}'..='\u{7E}' | '\u{85}' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
        || c >= '\u{10000}'
}

#[derive(Clone, Copy)]
struct Line<'a> {
    indent: usize,
    /// The line after its indentation.
    text: &'a str,
}

impl<'a> Line<'a> {
    fn new(raw: &'a str) -> Line<'a> {
        let text = raw.trim_start_matches(' ');
        Line {
            indent: raw.len() - text.len(),
            text,
        }
    }

    fn is_blank_or_comment(&self) -> bool {
        let t = self.text.trim_end_matches(' ');
        t.is_empty() || t.starts_with('#')
    }
}

struct Reader<'a> {
    lines: Vec<Line<'a>>,
    at: usize,
}

impl<'a> Reader<'a> {
    /// Moves to the next line that is not blank or a comment; its index, or None at the end.
    fn next_significant(&mut self) -> Option<usize> {
        while self.at < self.lines.len() {
            if !self.lines[self.at].is_blank_or_comment() {
                return Some(self.at);
            }
            self.at += 1;
        }
        None
    }

    /// The next significant line of a block at `indent`: `Some(Some)` at that indentation, `Some(None)`
    /// when the block has ended (the text, or a line less indented), None when a line is indented
    /// deeper (outside the subset).
    fn next_in_block(&mut self, indent: usize) -> Option<Option<(usize, Line<'a>)>> {
        let Some(i) = self.next_significant() else {
            return Some(None);
        };
        let line = self.lines[i];
        match line.indent.cmp(&indent) {
            std::cmp::Ordering::Less => Some(None),
            std::cmp::Ordering::Equal => Some(Some((i, line))),
            std::cmp::Ordering::Greater => None,
        }
    }

    /// The node that starts at the current (significant) line, whose indentation is `indent`.
    fn node(&mut self, indent: usize) -> Option<Value> {
        let line = self.lines[self.at];
        if line.indent != indent {
            return None;
        }
        if is_dash(line.text) {
            self.sequence(indent)
        } else if key_of(line.text).is_some() {
            self.mapping(indent)
        } else {
            None
        }
    }

    fn sequence(&mut self, indent: usize) -> Option<Value> {
        let mut items = Vec::new();
        while let Some((i, line)) = self.next_in_block(indent)? {
            if !is_dash(line.text) {
                // A key at this indentation: the sequence sat at its key's indentation and has ended.
                break;
            }
            let rest = line.text[1..].trim_start_matches(' ');
            if rest.is_empty() || rest.starts_with('#') {
                // `-` alone: the item is the block below, or null.
                self.at += 1;
                items.push(self.child(indent, false)?);
                continue;
            }
            // The item's content as a line of its own at the column it starts in.
            let column = indent + (line.text.len() - rest.len());
            self.lines[i] = Line {
                indent: column,
                text: rest,
            };
            if is_dash(rest) || key_of(rest).is_some() {
                items.push(self.node(column)?);
            } else {
                // A block scalar's content here is indented more than the dash.
                self.at += 1;
                items.push(self.inline_value(rest, indent)?);
            }
        }
        Some(Value::Array(items))
    }

    fn mapping(&mut self, indent: usize) -> Option<Value> {
        let mut map = Map::new();
        while let Some((_, line)) = self.next_in_block(indent)? {
            if is_dash(line.text) {
                // A sequence at this indentation belongs to the key before it (handled there).
                break;
            }
            let (key, rest) = key_of(line.text)?;
            self.at += 1;
            let rest = rest.trim_start_matches(' ');
            let value = if rest.is_empty() || rest.starts_with('#') {
                self.child(indent, true)?
            } else {
                self.inline_value(rest, indent)?
            };
            // The last of a repeated key wins, as go-yaml v2 reads a template's output.
            map.insert(key, value);
        }
        Some(Value::Object(map))
    }

    /// The value of a key or `-` with nothing after it on its line: the block below (more indented, or a
    /// sequence at the key's own indentation), else null.
    fn child(&mut self, indent: usize, compact_sequence: bool) -> Option<Value> {
        let Some(i) = self.next_significant() else {
            return Some(Value::Null);
        };
        let line = self.lines[i];
        if line.indent > indent {
            self.node(line.indent)
        } else if compact_sequence && line.indent == indent && is_dash(line.text) {
            self.sequence(indent)
        } else {
            Some(Value::Null)
        }
    }

    /// A value that starts on the current line after a key or a dash (`text`), the line already consumed;
    /// `indent` is the indentation of the key or item that owns it.
    fn inline_value(&mut self, text: &'a str, indent: usize) -> Option<Value> {
        let text = text.trim_end_matches(' ');
        match text.as_bytes().first()? {
            b'|' => self.literal(&text[1..], indent),
            b'{' if text == "{}" => Some(Value::Object(Map::new())),
            b'[' if text == "[]" => Some(Value::Array(Vec::new())),
            b'{' => self.flow_mapping(text),
            b'[' => flow_sequence(text),
            b'"' | b'\'' => {
                let (v, rest) = quoted(text)?;
                rest.trim_start_matches(' ').is_empty().then_some(v)
            }
            _ => plain(text),
        }
    }

    /// A literal block scalar after its `|`: the lines below that are more indented than `indent`.
    fn literal(&mut self, header: &str, indent: usize) -> Option<Value> {
        let chomp = match header {
            "" => Chomp::Clip,
            "-" => Chomp::Strip,
            "+" => Chomp::Keep,
            _ => return None,
        };
        // The content's indentation is the first non-blank line's.
        let mut content_indent = None;
        let mut end = self.at;
        while end < self.lines.len() {
            let l = self.lines[end];
            if l.text.is_empty() {
                end += 1;
                continue;
            }
            if l.indent <= indent {
                break;
            }
            match content_indent {
                None => content_indent = Some(l.indent),
                Some(c) if l.indent < c => break,
                Some(_) => {}
            }
            end += 1;
        }
        let Some(c) = content_indent else {
            // No content: only blank lines (or none) before the next node.
            return None;
        };
        let mut out = String::new();
        for l in &self.lines[self.at..end] {
            if l.text.is_empty() {
                // A blank line inside or after the content; one with more spaces than the content's
                // indentation would be content.
                if l.indent > c {
                    return None;
                }
                out.push('\n');
            } else {
                out.push_str(&" ".repeat(l.indent - c));
                out.push_str(l.text);
                out.push('\n');
            }
        }
        self.at = end;
        let body = out.trim_end_matches('\n');
        let trailing = out.len() - body.len();
        let s = match chomp {
            Chomp::Strip => body.to_string(),
            Chomp::Clip if body.is_empty() => String::new(),
            Chomp::Clip => format!("{body}\n"),
            Chomp::Keep => format!("{body}{}", "\n".repeat(trailing)),
        };
        Some(Value::String(s))
    }

    /// A flow mapping of scalars, `{` on the current line (already consumed) up to its `}`, which may be
    /// on a later line; the lines in between are consumed.
    fn flow_mapping(&mut self, first: &'a str) -> Option<Value> {
        let mut body = String::from(&first[1..]);
        if !body.contains('}') {
            loop {
                let l = self.lines.get(self.at)?;
                self.at += 1;
                body.push('\n');
                body.push_str(l.text);
                if l.text.contains('}') {
                    break;
                }
            }
        }
        let close = body.rfind('}')?;
        if !body[close + 1..].trim_matches([' ', '\n']).is_empty() {
            return None;
        }
        let mut map = Map::new();
        let entries = split_flow(&body[..close])?;
        let last = entries.len().saturating_sub(1);
        for (n, entry) in entries.iter().enumerate() {
            let entry = entry.trim_matches([' ', '\n']);
            if entry.is_empty() {
                // Only after the last comma: `{a: b,}`.
                if n == last {
                    continue;
                }
                return None;
            }
            let (key, value) = key_of(entry)?;
            let value = value.trim_matches([' ', '\n']);
            if value.contains('\n') {
                return None;
            }
            let value = if value.is_empty() {
                Value::Null
            } else {
                flow_scalar(value)?
            };
            map.insert(key, value);
        }
        Some(Value::Object(map))
    }
}

#[derive(Clone, Copy)]
enum Chomp {
    Clip,
    Strip,
    Keep,
}

/// A block sequence entry: `-` alone or followed by a space.
fn is_dash(text: &str) -> bool {
    text == "-" || text.starts_with("- ") || text.trim_end_matches(' ') == "-"
}

/// A mapping entry `key: rest` or `key:` with its key read; None when the line is not one the subset
/// reads as a mapping entry.
fn key_of(text: &str) -> Option<(String, &str)> {
    if text.starts_with(['"', '\'']) {
        let (k, rest) = quoted(text)?;
        let rest = rest.strip_prefix(':')?;
        if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\n')) {
            return None;
        }
        return match k {
            Value::String(s) => Some((s, rest)),
            _ => None,
        };
    }
    let colon = text.find(": ").or_else(|| {
        let t = text.trim_end_matches(' ');
        t.ends_with(':').then(|| t.len() - 1)
    })?;
    let key = &text[..colon];
    // A plain key that reads as a string: starts with a letter and is no special word.
    if !plain_string(key) || key.contains(" #") || key.ends_with(' ') {
        return None;
    }
    Some((key.to_string(), &text[colon + 1..]))
}

/// Splits a flow collection's body on the commas outside quotes; None on nested collections.
fn split_flow(body: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quote: Option<u8> = None;
    let bytes = body.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(b'"') if b == b'\\' => i += 1,
            Some(q) if b == q => {
                // `''` inside a single-quoted scalar is an escaped quote.
                if q == b'\'' && bytes.get(i + 1) == Some(&b'\'') {
                    i += 1;
                } else {
                    quote = None;
                }
            }
            Some(_) => {}
            None => match b {
                b'"' | b'\'' => quote = Some(b),
                b',' => {
                    out.push(&body[start..i]);
                    start = i + 1;
                }
                b'{' | b'}' | b'[' | b']' | b'#' | b'&' | b'*' | b'!' => return None,
                _ => {}
            },
        }
        i += 1;
    }
    if quote.is_some() {
        return None;
    }
    out.push(&body[start..]);
    Some(out)
}

/// A flow sequence of scalars on one line, `[a, "b"]`.
fn flow_sequence(text: &str) -> Option<Value> {
    let inner = text.strip_prefix('[')?.strip_suffix(']')?;
    let mut items = Vec::new();
    for item in split_flow(inner)? {
        let item = item.trim_matches(' ');
        if item.is_empty() {
            return None;
        }
        items.push(flow_scalar(item)?);
    }
    Some(Value::Array(items))
}

/// A scalar inside a flow collection: quoted, or plain without the flow indicators.
fn flow_scalar(text: &str) -> Option<Value> {
    match text.as_bytes().first()? {
        b'"' | b'\'' => {
            let (v, rest) = quoted(text)?;
            rest.trim_matches(' ').is_empty().then_some(v)
        }
        _ if text.contains(['{', '}', '[', ']', ',']) => None,
        _ => plain(text),
    }
}

/// A quoted scalar at the start of `text`, and what follows it on the line.
fn quoted(text: &str) -> Option<(Value, &str)> {
    let (q, body) = text.split_at(1);
    if q == "'" {
        let mut out = String::new();
        let mut rest = body;
        loop {
            let end = rest.find('\'')?;
            out.push_str(&rest[..end]);
            rest = &rest[end + 1..];
            match rest.strip_prefix('\'') {
                Some(r) => {
                    out.push('\'');
                    rest = r;
                }
                None => return (!out.contains('\n')).then_some((Value::String(out), rest)),
            }
        }
    }
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((Value::String(out), &body[i + 1..])),
            '\n' => return None,
            '\\' => {
                let (_, e) = chars.next()?;
                let simple = match e {
                    '0' => Some('\0'),
                    'a' => Some('\u{07}'),
                    'b' => Some('\u{08}'),
                    't' => Some('\t'),
                    'n' => Some('\n'),
                    'v' => Some('\u{0B}'),
                    'f' => Some('\u{0C}'),
                    'r' => Some('\r'),
                    'e' => Some('\u{1B}'),
                    ' ' => Some(' '),
                    '"' => Some('"'),
                    '/' => Some('/'),
                    '\\' => Some('\\'),
                    'N' => Some('\u{85}'),
                    '_' => Some('\u{A0}'),
                    'L' => Some('\u{2028}'),
                    'P' => Some('\u{2029}'),
                    _ => None,
                };
                if let Some(s) = simple {
                    out.push(s);
                    continue;
                }
                let digits = match e {
                    'x' => 2,
                    'u' => 4,
                    'U' => 8,
                    _ => return None,
                };
                let mut code = 0u32;
                for _ in 0..digits {
                    let (_, h) = chars.next()?;
                    code = code * 16 + h.to_digit(16)?;
                }
                out.push(char::from_u32(code)?);
            }
            c => out.push(c),
        }
    }
    None
}

/// A plain scalar whose reading is not in doubt, read as serde-saphyr reads it; None otherwise.
fn plain(text: &str) -> Option<Value> {
    if text.contains(": ") || text.contains(" #") || text.ends_with(':') {
        return None;
    }
    match text {
        "true" => return Some(Value::Bool(true)),
        "false" => return Some(Value::Bool(false)),
        "null" | "~" => return Some(Value::Null),
        _ => {}
    }
    if let Some(n) = decimal(text) {
        return Some(Value::Number(n));
    }
    plain_string(text).then(|| Value::String(text.to_string()))
}

/// A decimal integer without sign or leading zeros (or `-` and one), that fits an i64.
fn decimal(text: &str) -> Option<Number> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let ok = !digits.is_empty()
        && digits.len() <= 18
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && text != "-0";
    ok.then(|| text.parse::<i64>().ok().map(Number::from))?
}

/// The YAML 1.1 words serde-saphyr reads as booleans, nulls or special floats, in lower case.
const WORDS: [&str; 13] = [
    "y", "n", "yes", "no", "on", "off", "true", "false", "null", "inf", "infinity", "nan", "nil",
];

/// True when a plain scalar is certainly a string: it starts with a letter and is no special word, or
/// with `/`, `$`, `-` and a letter or `-`, or with a digit and holds a character no number has.
fn plain_string(text: &str) -> bool {
    let bytes = text.as_bytes();
    let Some(&first) = bytes.first() else {
        return false;
    };
    if text.ends_with(' ') {
        return false;
    }
    match first {
        b'a'..=b'z' | b'A'..=b'Z' => !WORDS.contains(&text.to_ascii_lowercase().as_str()),
        b'/' | b'$' => true,
        b'-' => matches!(bytes.get(1), Some(b'a'..=b'z' | b'A'..=b'Z' | b'-')),
        b'0'..=b'9' => text
            .bytes()
            .any(|b| !(b.is_ascii_hexdigit() || b"xXoO+-._:".contains(&b))),
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
