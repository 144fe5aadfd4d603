//! The lexer: Go's `text/template/parse` `lex.go` rules for delimiters, trim markers, comments and the
//! tokens inside actions.

/// One token and the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub kind: Tok,
    pub line: usize,
}

/// Token kinds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// Literal text outside actions, already trimmed by neighbouring trim markers.
    Text(String),
    LeftDelim,
    RightDelim,
    Space,
    Ident(String),
    /// `.name` (the name without the dot).
    Field(String),
    /// `$name` or `$` (with the dollar).
    Variable(String),
    Dot,
    Str(String),
    /// A number literal as written (character constants are turned into their code point).
    Number(String),
    Char(char),
    Bool(bool),
    Nil,
    Pipe,
    LParen,
    RParen,
    Declare,
    Assign,
    Comma,
    Keyword(&'static str),
}

/// A lexical error: line and message.
pub(crate) type LexError = (usize, String);

const KEYWORDS: &[&str] = &[
    "if", "else", "end", "range", "with", "define", "template", "block", "break", "continue",
];

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_alnum(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

struct Lexer<'s> {
    src: &'s str,
    pos: usize,
    line: usize,
    out: Vec<Token>,
    paren_depth: usize,
}

/// Splits `src` into tokens.
pub(crate) fn lex(src: &str) -> Result<Vec<Token>, LexError> {
    let mut l = Lexer {
        src,
        pos: 0,
        line: 1,
        out: Vec::new(),
        paren_depth: 0,
    };
    l.run()?;
    Ok(l.out)
}

impl<'s> Lexer<'s> {
    fn rest(&self) -> &'s str {
        &self.src[self.pos..]
    }

    fn advance(&mut self, n: usize) {
        let taken = &self.src[self.pos..self.pos + n];
        self.line += taken.bytes().filter(|&b| b == b'\n').count();
        self.pos += n;
    }

    fn push(&mut self, kind: Tok, line: usize) {
        self.out.push(Token { kind, line });
    }

    fn run(&mut self) -> Result<(), LexError> {
        loop {
            let rest = self.rest();
            let Some(idx) = rest.find("{{") else {
                if !rest.is_empty() {
                    let line = self.line;
                    self.push(Tok::Text(rest.to_string()), line);
                    self.advance(rest.len());
                }
                return Ok(());
            };
            let after = &rest[idx + 2..];
            let trim_left =
                after.len() >= 2 && after.as_bytes()[0] == b'-' && is_space(after.as_bytes()[1]);
            let mut text = &rest[..idx];
            if trim_left {
                text = text.trim_end_matches([' ', '\t', '\r', '\n']);
            }
            if !text.is_empty() {
                let line = self.line;
                self.push(Tok::Text(text.to_string()), line);
            }
            self.advance(idx + 2);
            let marker = if trim_left { 2 } else { 0 };
            if self.rest()[marker..].starts_with("/*") {
                self.advance(marker);
                self.comment()?;
                continue;
            }
            let line = self.line;
            self.push(Tok::LeftDelim, line);
            self.advance(marker);
            self.inside_action()?;
        }
    }

    /// At a right delimiter: returns (length to skip, whether it trims).
    fn at_right_delim(&self) -> Option<(usize, bool)> {
        let r = self.rest().as_bytes();
        if r.len() >= 4 && is_space(r[0]) && r[1] == b'-' && r[2] == b'}' && r[3] == b'}' {
            return Some((4, true));
        }
        if r.starts_with(b"}}") {
            return Some((2, false));
        }
        None
    }

    fn after_right_delim(&mut self, len: usize, trim: bool) {
        self.advance(len);
        if trim {
            let n = self.rest().len()
                - self
                    .rest()
                    .trim_start_matches([' ', '\t', '\r', '\n'])
                    .len();
            self.advance(n);
        }
    }

    fn comment(&mut self) -> Result<(), LexError> {
        let start_line = self.line;
        let Some(end) = self.rest().find("*/") else {
            return Err((start_line, "unclosed comment".to_string()));
        };
        self.advance(end + 2);
        match self.at_right_delim() {
            Some((len, trim)) => {
                self.after_right_delim(len, trim);
                Ok(())
            }
            None => Err((
                self.line,
                "comment ends before closing delimiter".to_string(),
            )),
        }
    }

    fn inside_action(&mut self) -> Result<(), LexError> {
        loop {
            if let Some((len, trim)) = self.at_right_delim() {
                if self.paren_depth > 0 {
                    return Err((self.line, "unclosed left paren".to_string()));
                }
                let line = self.line;
                self.push(Tok::RightDelim, line);
                self.after_right_delim(len, trim);
                return Ok(());
            }
            let line = self.line;
            let rest = self.rest();
            let Some(c) = rest.chars().next() else {
                return Err((line, "unclosed action".to_string()));
            };
            let b = rest.as_bytes();
            match c {
                ' ' | '\t' | '\r' | '\n' => {
                    let mut n = 0;
                    while n < b.len() && is_space(b[n]) {
                        // A space followed by "-}}" belongs to the trimming right delimiter.
                        if b[n + 1..].starts_with(b"-}}") {
                            break;
                        }
                        n += 1;
                    }
                    if n == 0 {
                        n = 1;
                    }
                    self.advance(n);
                    self.push(Tok::Space, line);
                }
                '=' => {
                    self.advance(1);
                    self.push(Tok::Assign, line);
                }
                ':' => {
                    if !rest.starts_with(":=") {
                        return Err((line, "expected :=".to_string()));
                    }
                    self.advance(2);
                    self.push(Tok::Declare, line);
                }
                '|' => {
                    self.advance(1);
                    self.push(Tok::Pipe, line);
                }
                ',' => {
                    self.advance(1);
                    self.push(Tok::Comma, line);
                }
                '(' => {
                    self.advance(1);
                    self.paren_depth += 1;
                    self.push(Tok::LParen, line);
                }
                ')' => {
                    if self.paren_depth == 0 {
                        return Err((line, "unexpected right paren".to_string()));
                    }
                    self.paren_depth -= 1;
                    self.advance(1);
                    self.push(Tok::RParen, line);
                }
                '"' => self.quoted(line, b'"', "quoted string", |s| unquote(s).map(Tok::Str))?,
                '`' => {
                    let Some(end) = rest[1..].find('`') else {
                        return Err((line, "unterminated raw quoted string".to_string()));
                    };
                    let s = rest[1..1 + end].replace('\r', "");
                    self.advance(end + 2);
                    self.push(Tok::Str(s), line);
                }
                '\'' => self.quoted(line, b'\'', "character constant", |s| {
                    unquote_char(s).map(Tok::Char)
                })?,
                '$' => {
                    let n = 1 + rest[1..]
                        .find(|c: char| !is_alnum(c))
                        .unwrap_or(rest.len() - 1);
                    let name = rest[..n].to_string();
                    self.advance(n);
                    self.check_terminator(line)?;
                    self.push(Tok::Variable(name), line);
                }
                '.' => {
                    let next = rest[1..].chars().next();
                    if next.is_some_and(|c| c.is_ascii_digit()) {
                        self.number(line)?;
                    } else if next.is_some_and(is_alnum) {
                        let n = 1 + rest[1..]
                            .find(|c: char| !is_alnum(c))
                            .unwrap_or(rest.len() - 1);
                        let name = rest[1..n].to_string();
                        self.advance(n);
                        self.check_terminator(line)?;
                        self.push(Tok::Field(name), line);
                    } else {
                        self.advance(1);
                        self.push(Tok::Dot, line);
                    }
                }
                '+' | '-' | '0'..='9' => self.number(line)?,
                c if is_alnum(c) => {
                    let n = rest.find(|c: char| !is_alnum(c)).unwrap_or(rest.len());
                    let word = &rest[..n];
                    let kind = match word {
                        "true" => Tok::Bool(true),
                        "false" => Tok::Bool(false),
                        "nil" => Tok::Nil,
                        w => match KEYWORDS.iter().find(|k| **k == w) {
                            Some(k) => Tok::Keyword(k),
                            None => Tok::Ident(w.to_string()),
                        },
                    };
                    self.advance(n);
                    self.check_terminator(line)?;
                    self.push(kind, line);
                }
                other => {
                    return Err((line, format!("unrecognized character in action: {other:?}")))
                }
            }
        }
    }

    /// Go requires identifiers, fields and variables to be followed by a terminator.
    /// A quoted string or character constant opened at the current position: the text up to the closing
    /// `quote` (backslash escapes skipped, no newline), made a token by `token`.
    fn quoted(
        &mut self,
        line: usize,
        quote: u8,
        what: &str,
        token: impl Fn(&str) -> Result<Tok, String>,
    ) -> Result<(), LexError> {
        let rest = self.rest();
        let b = rest.as_bytes();
        let mut i = 1;
        loop {
            match b.get(i) {
                None | Some(b'\n') => return Err((line, format!("unterminated {what}"))),
                Some(b'\\') => i += 2,
                Some(&c) if c == quote => break,
                Some(_) => i += 1,
            }
        }
        let tok = token(&rest[1..i]).map_err(|m| (line, m))?;
        self.advance(i + 1);
        self.push(tok, line);
        Ok(())
    }

    fn check_terminator(&self, line: usize) -> Result<(), LexError> {
        match self.rest().chars().next() {
            None => Ok(()),
            Some(c) if c.is_ascii_whitespace() || ".,|:()=".contains(c) => Ok(()),
            Some('}') if self.rest().starts_with("}}") => Ok(()),
            Some(c) => Err((line, format!("bad character {c:?}"))),
        }
    }

    fn number(&mut self, line: usize) -> Result<(), LexError> {
        let rest = self.rest();
        let b = rest.as_bytes();
        let mut i = 0;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let mut digits: &[u8] = b"0123456789_";
        if b[i..].len() >= 2 && b[i] == b'0' {
            match b[i + 1] {
                b'x' | b'X' => {
                    i += 2;
                    digits = b"0123456789abcdefABCDEF_";
                }
                b'o' | b'O' => {
                    i += 2;
                    digits = b"01234567_";
                }
                b'b' | b'B' => {
                    i += 2;
                    digits = b"01_";
                }
                _ => {}
            }
        }
        while i < b.len() && digits.contains(&b[i]) {
            i += 1;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            while i < b.len() && digits.contains(&b[i]) {
                i += 1;
            }
        }
        let exp: &[u8] = if digits.len() == 23 { b"pP" } else { b"eE" };
        if i < b.len() && exp.contains(&b[i]) {
            i += 1;
            if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
                i += 1;
            }
            while i < b.len() && b"0123456789_".contains(&b[i]) {
                i += 1;
            }
        }
        if i < b.len() && b[i] == b'i' {
            i += 1;
        }
        let text = &rest[..i];
        if rest[i..].chars().next().is_some_and(is_alnum)
            || text.is_empty()
            || text == "+"
            || text == "-"
        {
            let end = rest[i..]
                .find(|c: char| !is_alnum(c))
                .map_or(rest.len(), |e| i + e);
            return Err((
                line,
                format!("bad number syntax: {:?}", &rest[..end.max(1)]),
            ));
        }
        let text = text.to_string();
        self.advance(i);
        self.push(Tok::Number(text), line);
        Ok(())
    }
}

/// Go's `strconv.Unquote` for the inside of a double-quoted string.
pub(crate) fn unquote(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(
            unescape(&mut chars, '"').ok_or_else(|| format!("invalid syntax in string \"{s}\""))?,
        );
    }
    Ok(out)
}

fn unquote_char(s: &str) -> Result<char, String> {
    let bad = || format!("malformed character constant: '{s}'");
    let mut chars = s.chars().peekable();
    let c = match chars.next() {
        Some('\\') => unescape(&mut chars, '\'').ok_or_else(bad)?,
        Some(c) => c,
        None => return Err(bad()),
    };
    if chars.next().is_some() {
        return Err(bad());
    }
    Ok(c)
}

fn unescape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, quote: char) -> Option<char> {
    let hex = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>, n: usize| -> Option<u32> {
        let mut v = 0u32;
        for _ in 0..n {
            v = v * 16 + chars.next()?.to_digit(16)?;
        }
        Some(v)
    };
    Some(match chars.next()? {
        'a' => '\u{7}',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'v' => '\u{b}',
        '\\' => '\\',
        c if c == quote => c,
        // A `\x` or octal escape is one byte in Go; above 0x7f it would not be valid UTF-8 on its own.
        'x' => char::from_u32(hex(chars, 2)?.min(0x80)).filter(|c| c.is_ascii())?,
        'u' => char::from_u32(hex(chars, 4)?)?,
        'U' => char::from_u32(hex(chars, 8)?)?,
        c @ '0'..='7' => {
            let mut v = c.to_digit(8)?;
            for _ in 0..2 {
                v = v * 8 + chars.next()?.to_digit(8)?;
            }
            if v > 0x7f {
                return None;
            }
            char::from_u32(v)?
        }
        _ => return None,
    })
}

/// A number literal with the interpretations Go's `NumberNode` gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Num {
    pub int: Option<i64>,
    pub float: Option<f64>,
    /// Written as a float (`1.0`, `1e3`): an `any` argument receives a float64.
    pub float_text: bool,
}

/// Go's `parse.NumberNode` interpretation of a number literal.
pub(crate) fn parse_number(text: &str) -> Result<Num, String> {
    let bad = || format!("illegal number syntax: {text:?}");
    if text.ends_with('i') {
        return Err(format!("complex number {text:?} is not supported"));
    }
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1
        && lower.starts_with('0')
        && lower.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if radix == 16 && (digits.contains('.') || digits.contains('p')) {
        return Err(format!("hexadecimal float {text:?} is not supported"));
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
        return Err(bad());
    }
    if let Ok(u) = u64::from_str_radix(&clean, radix) {
        let int = if neg {
            0i64.checked_sub_unsigned(u)
        } else {
            i64::try_from(u).ok()
        };
        let mag = u as f64;
        return Ok(Num {
            int,
            float: Some(if neg { -mag } else { mag }),
            float_text: false,
        });
    }
    // Go's `parse.newNumber`: a literal that parses as a float but has none of `.eEpP` is an integer too
    // large for 64 bits, refused (found by the template differential: `99999999999999999999999`).
    let decimal_digits = !clean.is_empty() && clean.bytes().all(|b| b.is_ascii_digit());
    if (radix == 10 || (radix == 8 && !lower.starts_with("0o"))) && decimal_digits {
        return Err(format!("integer overflow: {text:?}"));
    }
    if radix != 10 {
        return Err(bad());
    }
    let f: f64 = clean.parse().map_err(|_| bad())?;
    if !f.is_finite() {
        return Err(bad());
    }
    let f = if neg { -f } else { f };
    let int = if f.fract() == 0.0 && f.abs() < 9.2e18 {
        Some(f as i64)
    } else {
        None
    };
    Ok(Num {
        int,
        float: Some(f),
        float_text: true,
    })
}
