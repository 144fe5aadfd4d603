//! The parser: Go's `text/template/parse` `parse.go` grammar for the supported subset, with the checks Go
//! makes at parse time (undefined variables, unknown functions, `break` outside `range`) and the refusals
//! of constructs outside the subset.

use super::error::ParseError;
use super::funcs::{self, Func};
use super::lex::{self, parse_number, Num, Tok, Token};
use super::limits::MAX_PARSE_DEPTH;

/// A node of the template tree.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    Text(String),
    Action {
        line: usize,
        pipe: Pipe,
    },
    If {
        line: usize,
        pipe: Pipe,
        then: Vec<Node>,
        els: Vec<Node>,
    },
    With {
        line: usize,
        pipe: Pipe,
        then: Vec<Node>,
        els: Vec<Node>,
    },
    Range {
        line: usize,
        pipe: Pipe,
        body: Vec<Node>,
        els: Vec<Node>,
    },
    /// `{{template "name" pipeline}}` (and the call half of `{{block}}`): the named template, run with
    /// the pipeline's value (nil without one) as dot and `$`, resolved when executed as Go does.
    Template {
        line: usize,
        name: String,
        pipe: Option<Pipe>,
    },
    Break,
    Continue,
}

/// A parsed text: its main tree and the trees its `{{define}}`s and `{{block}}`s name (Go's
/// `parse.Parse` returns them as a map of trees; a later definition replaces an earlier one unless it is
/// empty, as `text/template` `associate` does).
#[derive(Debug, Clone, Default)]
pub(crate) struct Parsed {
    pub root: Vec<Node>,
    pub defines: std::collections::BTreeMap<String, Vec<Node>>,
}

/// A pipeline: optional declaration, then commands joined by `|`.
#[derive(Debug, Clone)]
pub(crate) struct Pipe {
    pub line: usize,
    pub decl: Vec<String>,
    pub assign: bool,
    pub cmds: Vec<Cmd>,
}

/// A command: a function and its arguments, or a single operand.
#[derive(Debug, Clone)]
pub(crate) struct Cmd {
    pub args: Vec<Arg>,
}

/// An operand.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Dot,
    /// `.a.b` from dot.
    Field(Vec<String>),
    /// `$x.a.b` (`$` is the root).
    Var(String, Vec<String>),
    /// `(pipeline).a.b`.
    Chain(Box<Pipe>, Vec<String>),
    /// A function of the supported subset, resolved when parsed.
    Func(&'static Func),
    Str(String),
    Num(Num),
    Bool(bool),
    Nil,
}

/// Parses a whole template text.
pub(crate) fn parse(name: &str, text: &str) -> Result<Parsed, ParseError> {
    let toks = lex::lex(text).map_err(|(line, message)| ParseError::Syntax {
        template: name.to_string(),
        line,
        message,
    })?;
    let mut p = Parser {
        name,
        toks,
        pos: 0,
        vars: vec!["$".to_string()],
        depth: 0,
        range_depth: 0,
        defines: Default::default(),
        top: true,
    };
    let (nodes, end) = p.list()?;
    match end {
        ListEnd::Eof => Ok(Parsed {
            root: nodes,
            defines: p.defines,
        }),
        ListEnd::Close(line) => Err(p.syntax(line, "unexpected {{end}}")),
        ListEnd::Else(line, _) => Err(p.syntax(line, "unexpected {{else}}")),
    }
}

enum ListEnd {
    Eof,
    Close(usize),
    /// `{{else}}`, or `{{else if …}}` / `{{else with …}}` (the keyword, its pipeline still unread).
    Else(usize, Option<&'static str>),
}

struct Parser<'n> {
    name: &'n str,
    toks: Vec<Token>,
    pos: usize,
    vars: Vec<String>,
    depth: usize,
    range_depth: usize,
    defines: std::collections::BTreeMap<String, Vec<Node>>,
    /// True while parsing the top-level list, the only place Go accepts `{{define}}`.
    top: bool,
}

impl Parser<'_> {
    fn syntax(&self, line: usize, message: impl Into<String>) -> ParseError {
        ParseError::Syntax {
            template: self.name.to_string(),
            line,
            message: message.into(),
        }
    }

    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .map_or(1, |t| t.line)
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.kind)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|t| t.kind.clone());
        self.pos += 1;
        t
    }

    fn skip_space(&mut self) {
        while self.peek() == Some(&Tok::Space) {
            self.pos += 1;
        }
    }

    fn peek_non_space(&mut self) -> Option<&Tok> {
        self.skip_space();
        self.peek()
    }

    fn expect_right_delim(&mut self, context: &str) -> Result<(), ParseError> {
        let line = self.line();
        match self.peek_non_space() {
            Some(Tok::RightDelim) => {
                self.pos += 1;
                Ok(())
            }
            other => {
                let found = describe(other);
                Err(self.syntax(line, format!("unexpected {found} in {context}")))
            }
        }
    }

    fn enter(&mut self, line: usize) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_PARSE_DEPTH {
            return Err(ParseError::TooDeep {
                template: self.name.to_string(),
                line,
                limit: MAX_PARSE_DEPTH,
            });
        }
        Ok(())
    }

    /// Parses nodes up to `{{end}}`, `{{else}}` or the end of the text.
    fn list(&mut self) -> Result<(Vec<Node>, ListEnd), ParseError> {
        let mut nodes = Vec::new();
        loop {
            match self.next() {
                None => return Ok((nodes, ListEnd::Eof)),
                Some(Tok::Text(t)) => nodes.push(Node::Text(t)),
                Some(Tok::LeftDelim) => {
                    let line = self.line();
                    match self.peek_non_space().cloned() {
                        Some(Tok::Keyword(k)) => {
                            self.pos += 1;
                            match k {
                                "end" => {
                                    self.expect_right_delim("end")?;
                                    return Ok((nodes, ListEnd::Close(line)));
                                }
                                "else" => {
                                    let kw = match self.peek_non_space() {
                                        Some(Tok::Keyword(k @ ("if" | "with"))) => Some(*k),
                                        _ => None,
                                    };
                                    if kw.is_some() {
                                        self.pos += 1;
                                    } else {
                                        self.expect_right_delim("else")?;
                                    }
                                    return Ok((nodes, ListEnd::Else(line, kw)));
                                }
                                "if" | "with" | "range" => {
                                    let top = std::mem::replace(&mut self.top, false);
                                    let node = self.control(k, line);
                                    self.top = top;
                                    nodes.push(node?);
                                }
                                "define" if self.top => self.define(line)?,
                                "template" => nodes.push(self.template_call(line)?),
                                "block" => {
                                    let call = self.template_call(line)?;
                                    if let Node::Template { name, .. } = &call {
                                        let name = name.clone();
                                        self.define_body(line, name)?;
                                    }
                                    nodes.push(call);
                                }
                                "break" | "continue" => {
                                    if self.range_depth == 0 {
                                        return Err(self.syntax(
                                            line,
                                            format!("{{{{{k}}}}} outside {{{{range}}}}"),
                                        ));
                                    }
                                    self.expect_right_delim(k)?;
                                    nodes.push(if k == "break" {
                                        Node::Break
                                    } else {
                                        Node::Continue
                                    });
                                }
                                other => {
                                    return Err(ParseError::UnsupportedAction {
                                        template: self.name.to_string(),
                                        line,
                                        action: other.to_string(),
                                    })
                                }
                            }
                        }
                        _ => {
                            let pipe = self.pipeline("command", false)?;
                            nodes.push(Node::Action { line, pipe });
                        }
                    }
                }
                Some(other) => {
                    return Err(self.syntax(
                        self.line(),
                        format!("unexpected {}", describe(Some(&other))),
                    ))
                }
            }
        }
    }

    /// The quoted name after `define`, `template` or `block`.
    fn template_name(&mut self, line: usize, context: &str) -> Result<String, ParseError> {
        match self.peek_non_space().cloned() {
            Some(Tok::Str(name)) => {
                self.pos += 1;
                Ok(name)
            }
            other => {
                let found = describe(other.as_ref());
                Err(self.syntax(line, format!("unexpected {found} in {context} clause")))
            }
        }
    }

    /// `{{define "name"}}…{{end}}`, after the keyword (Go's `parse.go` `parseDefinition`).
    fn define(&mut self, line: usize) -> Result<(), ParseError> {
        let name = self.template_name(line, "define")?;
        self.expect_right_delim("define clause")?;
        self.define_body(line, name)
    }

    /// The body of a `define` or `block` up to its `{{end}}`, in a scope of its own: only `$` is
    /// defined there, as in a separate template.
    fn define_body(&mut self, line: usize, name: String) -> Result<(), ParseError> {
        self.enter(line)?;
        let vars = std::mem::replace(&mut self.vars, vec!["$".to_string()]);
        let (range_depth, top) = (self.range_depth, self.top);
        self.range_depth = 0;
        self.top = false;
        let body = self.list();
        self.vars = vars;
        self.range_depth = range_depth;
        self.top = top;
        self.depth -= 1;
        let (body, end) = body?;
        match end {
            ListEnd::Close(_) => {}
            ListEnd::Else(l, _) => return Err(self.syntax(l, "unexpected {{else}} in define")),
            ListEnd::Eof => return Err(self.syntax(line, "unexpected EOF in define")),
        }
        // `text/template` `associate`: an empty redefinition keeps the earlier body.
        let empty = body
            .iter()
            .all(|n| matches!(n, Node::Text(t) if t.trim().is_empty()));
        if !(empty && self.defines.contains_key(&name)) {
            self.defines.insert(name, body);
        }
        Ok(())
    }

    /// `{{template "name"}}` or `{{template "name" pipeline}}`, after the keyword (Go's `templateControl`).
    fn template_call(&mut self, line: usize) -> Result<Node, ParseError> {
        let name = self.template_name(line, "template")?;
        let pipe = match self.peek_non_space() {
            Some(Tok::RightDelim) => {
                self.pos += 1;
                None
            }
            _ => Some(self.pipeline("template clause", false)?),
        };
        Ok(Node::Template { line, name, pipe })
    }

    /// `if`, `with` or `range`, after the keyword; also the nested control of `else if` / `else with`.
    fn control(&mut self, kind: &'static str, line: usize) -> Result<Node, ParseError> {
        self.enter(line)?;
        let saved_vars = self.vars.len();
        let pipe = self.pipeline(kind, kind == "range")?;
        if kind == "range" {
            self.range_depth += 1;
        }
        let (then, end) = self.list()?;
        if kind == "range" {
            self.range_depth -= 1;
        }
        let els = match end {
            ListEnd::Eof => {
                return Err(self.syntax(self.line(), format!("unexpected EOF in {kind}")))
            }
            ListEnd::Close(_) => Vec::new(),
            ListEnd::Else(eline, None) => {
                let (els, end) = self.list()?;
                match end {
                    ListEnd::Close(_) => els,
                    ListEnd::Else(l, _) => {
                        return Err(
                            self.syntax(l, format!("expected end; found {{{{else}}}} in {kind}"))
                        )
                    }
                    ListEnd::Eof => {
                        return Err(self.syntax(eline, format!("unexpected EOF in {kind}")))
                    }
                }
            }
            ListEnd::Else(eline, Some(k)) => {
                if kind == "range" || k != kind {
                    return Err(
                        self.syntax(eline, format!("unexpected {{{{else {k}}}}} in {kind}"))
                    );
                }
                // `{{else if p}}…{{end}}` is `{{else}}{{if p}}…{{end}}{{end}}` sharing the last end.
                vec![self.control(k, eline)?]
            }
        };
        self.vars.truncate(saved_vars);
        self.depth -= 1;
        Ok(match kind {
            "if" => Node::If {
                line,
                pipe,
                then,
                els,
            },
            "with" => Node::With {
                line,
                pipe,
                then,
                els,
            },
            _ => Node::Range {
                line,
                pipe,
                body: then,
                els,
            },
        })
    }

    /// A pipeline up to `}}` (or `)` when `paren`): declarations, then commands.
    fn pipeline(&mut self, context: &str, is_range: bool) -> Result<Pipe, ParseError> {
        self.pipeline_to(context, is_range, false)
    }

    fn pipeline_to(
        &mut self,
        context: &str,
        is_range: bool,
        paren: bool,
    ) -> Result<Pipe, ParseError> {
        let line = self.line();
        let mut pipe = Pipe {
            line,
            decl: Vec::new(),
            assign: false,
            cmds: Vec::new(),
        };
        self.declarations(&mut pipe, context, is_range)?;
        loop {
            match self.peek_non_space() {
                Some(Tok::RightDelim) if !paren => {
                    self.pos += 1;
                    break;
                }
                Some(Tok::RParen) if paren => {
                    self.pos += 1;
                    break;
                }
                Some(Tok::RightDelim) | Some(Tok::RParen) | None => {
                    let found = describe(self.peek());
                    return Err(
                        self.syntax(self.line(), format!("unexpected {found} in {context}"))
                    );
                }
                _ => {
                    let cmd = self.command()?;
                    pipe.cmds.push(cmd);
                }
            }
        }
        if pipe.cmds.is_empty() {
            return Err(self.syntax(line, format!("missing value for {context}")));
        }
        for (i, c) in pipe.cmds.iter().enumerate() {
            match c.args.first() {
                Some(Arg::Nil) if c.args.len() == 1 && i == 0 => {
                    return Err(self.syntax(line, "nil is not a command"));
                }
                Some(Arg::Func(_)) => {}
                Some(_) if i > 0 => {
                    return Err(self.syntax(
                        line,
                        format!("non executable command in pipeline stage {}", i + 1),
                    ));
                }
                Some(first) if c.args.len() > 1 => {
                    let what = match first {
                        Arg::Field(f) | Arg::Var(_, f) | Arg::Chain(_, f) if !f.is_empty() => {
                            format!(
                                "arguments to field or method .{} are not supported",
                                f.join(".")
                            )
                        }
                        _ => "can't give argument to non-function".to_string(),
                    };
                    return Err(self.syntax(line, what));
                }
                _ => {}
            }
        }
        Ok(pipe)
    }

    fn declarations(
        &mut self,
        pipe: &mut Pipe,
        context: &str,
        is_range: bool,
    ) -> Result<(), ParseError> {
        let start = self.pos;
        let Some(Tok::Variable(v)) = self.peek_non_space().cloned() else {
            return Ok(());
        };
        self.pos += 1;
        match self.peek_non_space() {
            Some(Tok::Declare) | Some(Tok::Assign) => {
                let assign = self.peek() == Some(&Tok::Assign);
                self.pos += 1;
                if assign && !self.vars.contains(&v) {
                    return Err(self.syntax(pipe.line, format!("undefined variable {v:?}")));
                }
                pipe.assign = assign;
                pipe.decl.push(v);
            }
            Some(Tok::Comma) if is_range => {
                self.pos += 1;
                let Some(Tok::Variable(v2)) = self.peek_non_space().cloned() else {
                    return Err(self.syntax(pipe.line, "range can only initialize variables"));
                };
                self.pos += 1;
                match self.peek_non_space() {
                    Some(Tok::Declare) | Some(Tok::Assign) => {
                        let assign = self.peek() == Some(&Tok::Assign);
                        self.pos += 1;
                        for name in [&v, &v2] {
                            if assign && !self.vars.contains(name) {
                                return Err(
                                    self.syntax(pipe.line, format!("undefined variable {name:?}"))
                                );
                            }
                        }
                        pipe.assign = assign;
                        pipe.decl.push(v);
                        pipe.decl.push(v2);
                    }
                    _ => {
                        return Err(
                            self.syntax(pipe.line, format!("too many declarations in {context}"))
                        )
                    }
                }
            }
            Some(Tok::Comma) => {
                return Err(self.syntax(pipe.line, format!("too many declarations in {context}")))
            }
            _ => {
                self.pos = start;
                return Ok(());
            }
        }
        if !pipe.assign {
            self.vars.extend(pipe.decl.iter().cloned());
        }
        Ok(())
    }

    fn command(&mut self) -> Result<Cmd, ParseError> {
        let mut args = Vec::new();
        loop {
            self.skip_space();
            let arg = self.operand()?;
            match arg {
                Some(a) => args.push(a),
                None => {
                    let found = describe(self.peek());
                    return Err(self.syntax(self.line(), format!("unexpected {found} in operand")));
                }
            }
            match self.peek() {
                Some(Tok::Space) => {
                    self.skip_space();
                    match self.peek() {
                        Some(Tok::RightDelim) | Some(Tok::RParen) => break,
                        Some(Tok::Pipe) => {
                            self.pos += 1;
                            break;
                        }
                        _ => continue,
                    }
                }
                Some(Tok::RightDelim) | Some(Tok::RParen) => break,
                Some(Tok::Pipe) => {
                    self.pos += 1;
                    break;
                }
                other => {
                    let found = describe(other);
                    return Err(self.syntax(self.line(), format!("unexpected {found} in operand")));
                }
            }
        }
        Ok(Cmd { args })
    }

    fn operand(&mut self) -> Result<Option<Arg>, ParseError> {
        let line = self.line();
        let Some(term) = self.term()? else {
            return Ok(None);
        };
        let mut chain = Vec::new();
        while let Some(Tok::Field(f)) = self.peek() {
            chain.push(f.clone());
            self.pos += 1;
        }
        if chain.is_empty() {
            return Ok(Some(term));
        }
        Ok(Some(match term {
            Arg::Field(mut f) => {
                f.extend(chain);
                Arg::Field(f)
            }
            Arg::Var(v, mut f) => {
                f.extend(chain);
                Arg::Var(v, f)
            }
            Arg::Chain(p, mut f) => {
                f.extend(chain);
                Arg::Chain(p, f)
            }
            Arg::Func(f) => {
                let name = f.name;
                return Err(self.syntax(line, format!("unexpected . after term {name:?}")));
            }
            _ => return Err(self.syntax(line, "unexpected . after term")),
        }))
    }

    fn term(&mut self) -> Result<Option<Arg>, ParseError> {
        let line = self.line();
        let Some(tok) = self.peek().cloned() else {
            return Ok(None);
        };
        let arg = match tok {
            Tok::Ident(name) => match funcs::lookup(&name) {
                Some(f) => Arg::Func(f),
                None => {
                    return Err(ParseError::UnsupportedFunction {
                        template: self.name.to_string(),
                        line,
                        function: name,
                    })
                }
            },
            Tok::Dot => Arg::Dot,
            Tok::Nil => Arg::Nil,
            Tok::Variable(v) => {
                if !self.vars.contains(&v) {
                    return Err(self.syntax(line, format!("undefined variable {v:?}")));
                }
                Arg::Var(v, Vec::new())
            }
            Tok::Field(f) => Arg::Field(vec![f]),
            Tok::Bool(b) => Arg::Bool(b),
            Tok::Str(s) => Arg::Str(s),
            Tok::Char(c) => Arg::Num(Num {
                int: Some(i64::from(u32::from(c))),
                float: Some(f64::from(u32::from(c))),
                float_text: false,
            }),
            Tok::Number(text) => Arg::Num(parse_number(&text).map_err(|m| self.syntax(line, m))?),
            Tok::LParen => {
                self.pos += 1;
                self.enter(line)?;
                let pipe = self.pipeline_to("parenthesized pipeline", false, true)?;
                self.depth -= 1;
                return Ok(Some(Arg::Chain(Box::new(pipe), Vec::new())));
            }
            _ => return Ok(None),
        };
        self.pos += 1;
        Ok(Some(arg))
    }
}

fn describe(t: Option<&Tok>) -> String {
    match t {
        None => "EOF".to_string(),
        Some(Tok::RightDelim) => "\"}}\"".to_string(),
        Some(Tok::RParen) => "\")\"".to_string(),
        Some(Tok::LParen) => "\"(\"".to_string(),
        Some(Tok::Pipe) => "\"|\"".to_string(),
        Some(Tok::Comma) => "\",\"".to_string(),
        Some(Tok::Declare) => "\":=\"".to_string(),
        Some(Tok::Assign) => "\"=\"".to_string(),
        Some(Tok::Keyword(k)) => format!("<{k}>"),
        Some(Tok::Text(_)) => "text".to_string(),
        Some(other) => format!("{other:?}"),
    }
}
