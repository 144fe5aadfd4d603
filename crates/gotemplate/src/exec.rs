//! The evaluator: Go's `text/template` `exec.go` semantics (variables, control structures, field chains,
//! pipelines, argument conversion) over [`Val`], with every bound of [`Limits`] checked.

use serde_json::Value as Json;

use super::error::ExecError;
use super::funcs::{Call, Func};
use super::lex::Num;
use super::limits::Limits;
use super::parse::{Arg, Cmd, Node, Parsed, Pipe};
use super::print;
use super::schema::{self, IntK, Ty, ROOT};
use super::state::{eval_err, unsupported, validate, Exec, E, P, R};
use super::value::{Val, NULL};
use crate::fields::Fields;

/// What a walk over a list of nodes ended with.
enum Flow {
    Normal,
    Break,
    Continue,
}

/// What one evaluation cost: work units charged and bytes the primitives actually touched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Work units charged against [`Limits::max_work`].
    pub work: usize,
    /// Bytes read and written, as measured inside the primitives.
    pub meter: usize,
}

/// Evaluates the tree `root` of the template `name` over `data`, within `limits`.
pub(crate) fn execute_metered<'a>(
    name: &str,
    parsed: &'a Parsed,
    data: &'a Json,
    limits: &Limits,
) -> (Result<String, ExecError>, Cost) {
    let root = &parsed.root;
    let mut ex = Exec {
        defines: &parsed.defines,
        limits,
        out: String::new(),
        vars: Vec::new(),
        work: 0,
        meter: 0,
        iterations: 0,
        depth: 0,
        line: 1,
    };
    let dot = Val::Data(data, &ROOT);
    ex.vars.push(("$", dot.clone()));
    let res = ex.walk(&dot, root);
    let cost = Cost {
        work: ex.work,
        meter: ex.meter,
    };
    (finish(name, ex.line, res.map(|_| ex.out)), cost)
}

fn finish(name: &str, line: usize, res: R<String>) -> Result<String, ExecError> {
    let template = name.to_string();
    match res {
        Ok(out) => Ok(out),
        Err(E::Eval(message)) => Err(ExecError::Eval {
            template,
            line,
            message,
        }),
        Err(E::Unsupported(message)) => Err(ExecError::Unsupported {
            template,
            line,
            message,
        }),
        Err(E::Limit(what, limit)) => Err(ExecError::Limit {
            template,
            line,
            what,
            limit,
        }),
        Err(E::Fail(message)) => Err(ExecError::Fail {
            template,
            line,
            message,
        }),
    }
}

impl<'a> Exec<'a, '_> {
    fn write(&mut self, s: &str) -> R<()> {
        if self.out.len() + s.len() > self.limits.max_output_bytes {
            return Err(E::Limit("output bytes", self.limits.max_output_bytes));
        }
        self.charge(s.len())?;
        self.touched(s.len());
        self.out.push_str(s);
        Ok(())
    }

    fn walk(&mut self, dot: &Val<'a>, nodes: &'a [Node]) -> R<Flow> {
        for node in nodes {
            self.step(1)?;
            match node {
                Node::Text(t) => self.write(t)?,
                Node::Action { line, pipe } => {
                    self.line = *line;
                    let v = self.pipeline(dot, pipe)?;
                    if pipe.decl.is_empty() {
                        let s = print::print_value(self, &v)?;
                        self.write(&s)?;
                    }
                }
                Node::If {
                    line,
                    pipe,
                    then,
                    els,
                }
                | Node::With {
                    line,
                    pipe,
                    then,
                    els,
                } => {
                    let flow = self.block(*line, |ex| {
                        let v = ex.pipeline(dot, pipe)?;
                        if !v.truth() {
                            ex.walk(dot, els)
                        } else if matches!(node, Node::With { .. }) {
                            ex.walk(&v, then)
                        } else {
                            ex.walk(dot, then)
                        }
                    })?;
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
                Node::Range {
                    line,
                    pipe,
                    body,
                    els,
                } => {
                    let flow = self.block(*line, |ex| ex.range(dot, pipe, body, els))?;
                    if !matches!(flow, Flow::Normal) {
                        return Ok(flow);
                    }
                }
                Node::Template { line, name, pipe } => {
                    self.call_template(dot, *line, name, pipe.as_ref())?;
                }
                Node::Break => return Ok(Flow::Break),
                Node::Continue => return Ok(Flow::Continue),
            }
        }
        Ok(Flow::Normal)
    }

    /// `{{template "name" pipe}}`: the named tree with the pipeline's value as dot and as `$`, and no
    /// other variable (Go's `exec.go` `walkTemplate` runs it in a new state whose only variable is `$`).
    /// It counts as a level of depth, which bounds recursion.
    fn call_template(
        &mut self,
        dot: &Val<'a>,
        line: usize,
        name: &str,
        pipe: Option<&'a Pipe>,
    ) -> R<()> {
        self.line = line;
        let Some(body) = self.defines.get(name) else {
            return eval_err(format!("template {name:?} not defined"));
        };
        let new_dot = match pipe {
            Some(p) => self.pipeline(dot, p)?,
            // Go's `evalPipeline` of no pipeline is the invalid value, printed `<no value>`.
            None => Val::NoValue,
        };
        self.enter()?;
        let vars = std::mem::replace(&mut self.vars, vec![("$", new_dot.clone())]);
        let flow = self.walk(&new_dot, body);
        self.vars = vars;
        self.leave();
        flow.map(|_| ())
    }

    /// Runs `f` as a control structure on `line`: one level deeper, and the variables it declares gone
    /// after it (Go's `walkIfOrWith` and `walkRange` pop them with `s.pop(mark)`).
    fn block(&mut self, line: usize, f: impl FnOnce(&mut Self) -> R<Flow>) -> R<Flow> {
        self.line = line;
        self.enter()?;
        let mark = self.vars.len();
        let flow = f(self)?;
        self.vars.truncate(mark);
        self.leave();
        Ok(flow)
    }

    /// A range; its flow is `Continue` only for a `{{continue}}` in its else list, which continues an
    /// enclosing range (Go's walkRange recovers `break` there but not `continue`).
    fn range(
        &mut self,
        dot: &Val<'a>,
        pipe: &'a Pipe,
        body: &'a [Node],
        els: &'a [Node],
    ) -> R<Flow> {
        let v = self.commands(dot, &pipe.cmds)?;
        // Go's walkRange pushes the declared variables first, then sets them per iteration.
        if !pipe.assign {
            for name in &pipe.decl {
                self.vars.push((name.as_str(), v.clone()));
            }
        }
        // A range over an integer counts without materialising its elements.
        let (count, items): (usize, Vec<(Val<'a>, Val<'a>)>) = match &v {
            Val::NoValue | Val::Nil => (0, Vec::new()),
            Val::Int(n, _) => {
                if pipe.decl.len() > 1 {
                    return eval_err(format!(
                        "can't use {n} to iterate over more than one variable"
                    ));
                }
                (
                    usize::try_from((*n).max(0)).unwrap_or(usize::MAX),
                    Vec::new(),
                )
            }
            // A list is walked in place: each element is taken when its iteration starts, in O(1).
            other if other.list_len().is_some() => (other.list_len().unwrap_or(0), Vec::new()),
            other => {
                let items: Vec<(Val<'a>, Val<'a>)> = if let Some(entries) = other.map_entries() {
                    let entries = entries.map_err(E::Unsupported)?;
                    self.charge_sorted(entries.iter().map(|(k, _)| k.len()))?;
                    entries.into_iter().map(|(k, e)| (Val::Str(k), e)).collect()
                } else if let Val::Data(j, Ty::Ptr(_)) = other {
                    if j.is_null() {
                        return eval_err("range can't iterate over <nil>");
                    }
                    return eval_err(format!("range can't iterate over {}", other.type_name()));
                } else {
                    let shown =
                        print::print_value(self, other).unwrap_or_else(|_| other.type_name());
                    return eval_err(format!("range can't iterate over {shown}"));
                };
                (items.len(), items)
            }
        };
        if count == 0 {
            return Ok(match self.walk(dot, els)? {
                Flow::Continue => Flow::Continue,
                _ => Flow::Normal,
            });
        }
        let int_kind = match &v {
            Val::Int(_, k) => Some(*k),
            _ => None,
        };
        let is_list = v.list_len().is_some();
        let mut items = items.into_iter();
        for n in 0..count {
            let (key, elem) = match int_kind {
                Some(k) => (Val::Int(n as i64, k), Val::Int(n as i64, k)),
                None if is_list => (
                    Val::int(n as i64),
                    match v.list_get(n) {
                        Some(e) => e.map_err(E::Unsupported)?,
                        None => Val::NoValue,
                    },
                ),
                None => items.next().unwrap_or((Val::NoValue, Val::NoValue)),
            };
            self.iterations += 1;
            if self.iterations > self.limits.max_iterations {
                return Err(E::Limit("iterations", self.limits.max_iterations));
            }
            let mark = self.vars.len();
            match pipe.decl.as_slice() {
                [] => {}
                [v] => self.set_var(v, elem.clone(), pipe.assign, true)?,
                [k, v] => {
                    self.set_var(k, key, pipe.assign, false)?;
                    self.set_var(v, elem.clone(), pipe.assign, true)?;
                }
                _ => return eval_err("too many declarations in range"),
            }
            let flow = self.walk(&elem, body)?;
            self.vars.truncate(mark);
            if matches!(flow, Flow::Break) {
                break;
            }
        }
        Ok(Flow::Normal)
    }

    /// Sets a range variable: the top-most declared (`:=`) or an existing one (`=`).
    fn set_var(&mut self, name: &str, v: Val<'a>, assign: bool, last: bool) -> R<()> {
        if assign {
            return self.assign_var(name, v);
        }
        // The range pushed its variables in declaration order; the element is on top.
        let n = self.vars.len();
        let idx = if last { n - 1 } else { n - 2 };
        let _ = name;
        self.vars[idx].1 = v;
        Ok(())
    }

    /// Charges sorting entries whose keys have these lengths: each key is compared about log2(n) times.
    pub fn charge_sorted(&mut self, key_lens: impl Iterator<Item = usize>) -> R<()> {
        let (mut n, mut bytes) = (0usize, 0usize);
        for l in key_lens {
            n += 1;
            bytes = bytes.saturating_add(l);
        }
        let log = (usize::BITS - n.leading_zeros()) as usize;
        self.step(n)?;
        self.read(bytes.saturating_mul(log.max(1)))
    }

    /// The index of the innermost variable `name`; the scan is charged (one unit per variable passed).
    fn find_var(&mut self, name: &str) -> R<usize> {
        let found = self.vars.iter().rev().position(|(n, _)| *n == name);
        let scanned = found.map_or(self.vars.len(), |p| p + 1);
        self.charge(scanned.saturating_add(name.len()))?;
        match found {
            Some(p) => Ok(self.vars.len() - 1 - p),
            None => eval_err(format!("undefined variable: {name}")),
        }
    }

    fn assign_var(&mut self, name: &str, v: Val<'a>) -> R<()> {
        let i = self.find_var(name)?;
        self.vars[i].1 = v;
        Ok(())
    }

    fn var(&mut self, name: &str) -> R<Val<'a>> {
        let i = self.find_var(name)?;
        Ok(self.vars[i].1.clone())
    }

    /// A pipeline with its declarations.
    pub fn pipeline(&mut self, dot: &Val<'a>, pipe: &'a Pipe) -> R<Val<'a>> {
        let v = self.commands(dot, &pipe.cmds)?;
        for name in &pipe.decl {
            if pipe.assign {
                self.assign_var(name, v.clone())?;
            } else {
                self.step(1)?;
                self.vars.push((name.as_str(), v.clone()));
            }
        }
        Ok(v)
    }

    fn commands(&mut self, dot: &Val<'a>, cmds: &'a [Cmd]) -> R<Val<'a>> {
        let mut value: Option<Val<'a>> = None;
        for cmd in cmds {
            self.step(1)?;
            let v = self.command(dot, cmd, value.take())?;
            // Go digs into an interface{} after each command: a nil interface becomes "no value".
            value = Some(if matches!(v, Val::Nil) {
                Val::NoValue
            } else {
                v
            });
        }
        Ok(value.unwrap_or(Val::NoValue))
    }

    fn command(&mut self, dot: &Val<'a>, cmd: &'a Cmd, fin: Option<Val<'a>>) -> R<Val<'a>> {
        match cmd.args.first() {
            Some(Arg::Func(f)) => call(self, dot, f, &cmd.args[1..], fin),
            Some(Arg::Nil) => eval_err("nil is not a command"),
            Some(a) => self.operand(dot, a),
            None => eval_err("empty command"),
        }
    }

    /// An operand evaluated without a parameter type (a command's value, or a built-in's argument).
    pub fn operand(&mut self, dot: &Val<'a>, arg: &'a Arg) -> R<Val<'a>> {
        match arg {
            Arg::Dot => Ok(dot.clone()),
            Arg::Field(names) => self.chain(dot.clone(), names),
            Arg::Var(name, names) => {
                let v = self.var(name)?;
                self.chain(v, names)
            }
            Arg::Chain(pipe, names) => {
                self.enter()?;
                let v = self.pipeline(dot, pipe);
                self.leave();
                let v = v?;
                self.chain(v, names)
            }
            Arg::Func(f) => {
                let v = call(self, dot, f, &[], None)?;
                Ok(v)
            }
            Arg::Str(s) => Ok(Val::borrowed(s)),
            Arg::Num(n) => ideal_constant(n),
            Arg::Bool(b) => Ok(Val::Bool(*b)),
            Arg::Nil => eval_err("cannot assign nil to reflect.Value"),
        }
    }

    fn chain(&mut self, mut v: Val<'a>, names: &[String]) -> R<Val<'a>> {
        for name in names {
            // One step, and the name's bytes hashed or compared by the lookup.
            self.step(1)?;
            self.read(name.len())?;
            v = field(v, name)?;
        }
        Ok(v)
    }
}

/// Go's `idealConstant`: the value a number literal has where any type is accepted.
pub(crate) fn ideal_constant<'a>(n: &Num) -> R<Val<'a>> {
    match (n.float_text, n.int, n.float) {
        (true, _, Some(f)) => Ok(Val::Float(f)),
        (false, Some(i), _) => Ok(Val::Int(i, IntK::Int)),
        _ => eval_err("number overflows int"),
    }
}

/// Go's `evalField` for one name.
pub(crate) fn field<'a>(recv: Val<'a>, name: &str) -> R<Val<'a>> {
    match &recv {
        Val::NoValue => Ok(Val::NoValue),
        Val::Nil => eval_err(format!("nil pointer evaluating interface {{}}.{name}")),
        Val::Enum(i, e) if name == "String" => Ok(match e.names.get(*i as usize) {
            Some(n) => Val::borrowed(n),
            None => Val::string(i.to_string()),
        }),
        Val::Data(j, ty) => data_field(j, ty, name),
        other if other.is_map() => match other.map_get(name) {
            Some(Ok(Some(v))) => Ok(v),
            Some(Ok(None)) => Ok(Val::NoValue),
            Some(Err(m)) => unsupported(m),
            None => Ok(Val::NoValue),
        },
        other => eval_err(format!(
            "can't evaluate field {name} in type {}",
            other.type_name()
        )),
    }
}

fn data_field<'a>(j: &'a Json, ty: &'static Ty, name: &str) -> R<Val<'a>> {
    let typed = |j: Option<&'a Json>, t: &'static Ty| Val::typed(j, t).map_err(E::Unsupported);
    match ty {
        Ty::Ptr(inner) => {
            if j.is_null() {
                if let Ty::Struct(s) = inner {
                    if s.proto {
                        if let Some(f) = name.strip_prefix("Get").and_then(|n| s.field(n)) {
                            return typed(None, f.ty);
                        }
                    }
                }
                return eval_err(format!(
                    "nil pointer evaluating {}.{name}",
                    schema::go_name(ty)
                ));
            }
            data_field(j, inner, name)
        }
        Ty::Struct(s) => {
            let f = s.field(name).or_else(|| {
                if s.proto {
                    name.strip_prefix("Get").and_then(|n| s.field(n))
                } else {
                    None
                }
            });
            match f {
                Some(f) => typed(j.field(f.json).or_else(|| j.field(f.go)), f.ty),
                None if s.complete => {
                    eval_err(format!("can't evaluate field {name} in type {}", s.go))
                }
                None => unsupported(format!(
                    "field {name} of type {} is not modelled by this evaluator",
                    s.go
                )),
            }
        }
        Ty::MapAny | Ty::MapStr | Ty::MapOpaque(_) => match Val::Data(j, ty).map_get(name) {
            Some(Ok(Some(v))) => Ok(v),
            Some(Err(m)) => unsupported(m),
            _ => Ok(Val::NoValue),
        },
        Ty::Wrapper(inner, go) => match name {
            "GetValue" => typed(Some(j), inner),
            "Value" if j.is_null() => eval_err(format!("nil pointer evaluating *{go}.Value")),
            "Value" => typed(Some(j), inner),
            _ => unsupported(format!(
                "field {name} of type *{go} is not modelled by this evaluator"
            )),
        },
        Ty::Opaque(go) => {
            if j.is_null() {
                return eval_err(format!("nil pointer evaluating *{go}.{name}"));
            }
            unsupported(format!(
                "fields of type {go} are not modelled by this evaluator (field {name})"
            ))
        }
        other => eval_err(format!(
            "can't evaluate field {name} in type {}",
            schema::go_name(other)
        )),
    }
}

impl<'a> Exec<'a, '_> {
    /// Evaluates an argument for a parameter of type `p` (Go's `evalArg`).
    pub fn arg(&mut self, dot: &Val<'a>, arg: &'a Arg, p: P) -> R<Val<'a>> {
        self.step(1)?;
        match arg {
            Arg::Nil => match p {
                P::Any => Ok(Val::Nil),
                P::MapStr => Ok(Val::Data(&NULL, &schema::MAP_STR)),
                P::MapAny => Ok(Val::Data(&NULL, &schema::MAP_ANY)),
                // Go's `canBeNil` holds for `reflect.Value` itself, so `evalArg` passes its zero value,
                // the invalid "no value" (`or "" nil "z"` is "z").
                P::Raw => Ok(Val::NoValue),
                _ => eval_err(format!("cannot assign nil to {}", p.go())),
            },
            Arg::Str(s) => match p {
                P::Any | P::Raw | P::Str => Ok(Val::borrowed(s)),
                _ => eval_err(format!("expected {}; found {s:?}", p.go())),
            },
            Arg::Bool(b) => match p {
                P::Any | P::Raw | P::Bool => Ok(Val::Bool(*b)),
                _ => eval_err(format!("expected {}; found {b}", p.go())),
            },
            Arg::Num(n) => match p {
                P::Any | P::Raw => ideal_constant(n),
                P::Int => match n.int {
                    Some(i) => Ok(Val::int(i)),
                    None => eval_err(format!(
                        "expected integer; found {}",
                        n.float.unwrap_or(0.0)
                    )),
                },
                _ => eval_err(format!("expected {}; found a number", p.go())),
            },
            other => {
                let v = self.operand(dot, other)?;
                let v = if matches!(v, Val::Nil) && !matches!(other, Arg::Dot | Arg::Var(..)) {
                    // A nil interface from a field or pipeline reaches functions as "no value" would.
                    Val::NoValue
                } else {
                    v
                };
                validate(v, p)
            }
        }
    }
}

/// Calls function `f` with the unevaluated `args` and the piped `fin` value (Go's `evalCall`).
pub(crate) fn call<'a>(
    ex: &mut Exec<'a, '_>,
    dot: &Val<'a>,
    f: &Func,
    args: &'a [Arg],
    fin: Option<Val<'a>>,
) -> R<Val<'a>> {
    ex.step(1)?;
    let name = f.name;
    let n = args.len() + usize::from(fin.is_some());
    match f.variadic {
        Some(_) if n < f.fixed.len() => {
            return eval_err(format!(
                "wrong number of args for {name}: want at least {} got {n}",
                f.fixed.len()
            ))
        }
        None if n != f.fixed.len() => {
            return eval_err(format!(
                "wrong number of args for {name}: want {} got {n}",
                f.fixed.len()
            ))
        }
        _ => {}
    }
    let param = |i: usize| f.fixed.get(i).copied().or(f.variadic).unwrap_or(P::Raw);
    let apply = match f.call {
        Call::Args(apply) => apply,
        // `and` and `or` evaluate their arguments lazily and return one of them.
        Call::ShortCircuit { until } => {
            let mut last = Val::NoValue;
            for a in args {
                let v = ex.arg(dot, a, P::Raw)?;
                if v.truth() == until {
                    return Ok(v);
                }
                last = v;
            }
            return Ok(fin.unwrap_or(last));
        }
    };
    let mut argv = Vec::with_capacity(n);
    for (i, a) in args.iter().enumerate() {
        argv.push(ex.arg(dot, a, param(i))?);
    }
    if let Some(v) = fin {
        argv.push(validate(
            if matches!(v, Val::Nil) {
                Val::NoValue
            } else {
                v
            },
            param(args.len()),
        )?);
    }
    apply(ex, argv).map_err(|e| match e {
        E::Eval(m) => E::Eval(format!("error calling {name}: {m}")),
        other => other,
    })
}
