//! The evaluation state shared by the walker, the functions and the printers: bounds accounting, the
//! internal error type and Go's conversion of argument values to parameter types (`validateType`).

use super::limits::{Limits, WORK_PER_STEP};
use super::schema::{self, IntK, Ty};
use super::value::{Val, NULL};

/// An evaluation error before the template name and line are attached.
#[derive(Debug)]
pub(crate) enum E {
    Eval(String),
    Unsupported(String),
    Limit(&'static str, usize),
    Fail(String),
}

pub(crate) type R<T> = Result<T, E>;

pub(crate) fn eval_err<T>(m: impl Into<String>) -> R<T> {
    Err(E::Eval(m.into()))
}

pub(crate) fn unsupported<T>(m: impl Into<String>) -> R<T> {
    Err(E::Unsupported(m.into()))
}

/// The evaluation state.
pub(crate) struct Exec<'a, 'l> {
    /// The trees the text's `{{define}}`s and `{{block}}`s name, for `{{template}}`.
    pub defines: &'a std::collections::BTreeMap<String, Vec<super::parse::Node>>,
    pub limits: &'l Limits,
    pub out: String,
    pub vars: Vec<(&'a str, Val<'a>)>,
    /// Work units charged so far against [`Limits::max_work`].
    pub work: usize,
    /// Bytes the primitives actually read and wrote, summed after the fact where they do it (the property
    /// tests check it against `work`: a primitive that works without charging shows here).
    pub meter: usize,
    pub iterations: usize,
    pub depth: usize,
    pub line: usize,
}

impl<'a> Exec<'a, '_> {
    /// Charges `units` work units: refused past the budget.
    pub fn charge(&mut self, units: usize) -> R<()> {
        self.work = self.work.saturating_add(units);
        if self.work > self.limits.max_work {
            return Err(E::Limit("work", self.limits.max_work));
        }
        Ok(())
    }

    /// Counts `n` evaluation steps.
    pub fn step(&mut self, n: usize) -> R<()> {
        self.charge(n.saturating_mul(WORK_PER_STEP))
    }

    /// Records `n` bytes actually read or written (the meter, not the budget).
    pub fn touched(&mut self, n: usize) {
        self.meter = self.meter.saturating_add(n);
    }

    /// Charges reading `n` bytes (a comparison, a search, a parse), and meters them.
    pub fn read(&mut self, n: usize) -> R<()> {
        self.charge(n)?;
        self.touched(n);
        Ok(())
    }

    /// Checks that a string of `len` bytes may be produced, and charges writing it.
    pub fn check_size(&mut self, len: usize) -> R<()> {
        if len > self.limits.max_output_bytes {
            return Err(E::Limit("output bytes", self.limits.max_output_bytes));
        }
        self.charge(len)
    }

    pub fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > self.limits.max_depth {
            return Err(E::Limit("depth", self.limits.max_depth));
        }
        Ok(())
    }

    pub fn leave(&mut self) {
        self.depth -= 1;
    }

    /// Refuses a new list or map whose elements nest template-built lists and maps deeper than the depth
    /// bound (printing or dropping it would recurse that deep).
    pub fn check_nesting(&mut self, items: &[Val<'a>]) -> R<()> {
        for v in items {
            self.nesting(v, 1)?;
        }
        Ok(())
    }

    fn nesting(&mut self, v: &Val<'a>, depth: usize) -> R<()> {
        if depth >= self.limits.max_depth {
            return Err(E::Limit("depth", self.limits.max_depth));
        }
        match v {
            Val::List(l) => {
                self.step(l.len())?;
                l.iter().try_for_each(|e| self.nesting(e, depth + 1))
            }
            Val::Dict(d) => {
                self.step(d.len())?;
                d.values().try_for_each(|e| self.nesting(e, depth + 1))
            }
            _ => Ok(()),
        }
    }

    /// The data depth left for recursive walks (printing, `toYaml`).
    pub fn depth_left(&self) -> usize {
        self.limits.max_depth.saturating_sub(self.depth)
    }

    /// Enters one level `depth` deep of a recursive walk over data: refused past the depth limit,
    /// counted as one step.
    pub fn descend(&mut self, depth: usize) -> R<()> {
        if depth >= self.depth_left() {
            return Err(E::Limit("depth", self.limits.max_depth));
        }
        self.step(1)
    }
}

/// Converts an already evaluated value to a parameter's Go type (Go's `validateType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum P {
    /// `interface{}`: "no value" arrives as nil.
    Any,
    Str,
    Int,
    Bool,
    MapStr,
    MapAny,
    /// `metav1.ObjectMeta`.
    Meta,
    /// `reflect.Value` (Go's built-ins): passed as is.
    Raw,
}

impl P {
    pub fn go(self) -> &'static str {
        match self {
            P::Any => "interface {}",
            P::Str => "string",
            P::Int => "int",
            P::Bool => "bool",
            P::MapStr => "map[string]string",
            P::MapAny => "map[string]interface {}",
            P::Meta => "v1.ObjectMeta",
            P::Raw => "reflect.Value",
        }
    }
}

pub(crate) fn validate<'a>(v: Val<'a>, p: P) -> R<Val<'a>> {
    let wrong = |v: &Val<'a>| {
        eval_err(format!(
            "wrong type for value; expected {}; got {}",
            p.go(),
            v.type_name()
        ))
    };
    match (p, &v) {
        (P::Raw, _) => Ok(v),
        (P::Any, Val::NoValue) => Ok(Val::Nil),
        (P::Any, _) => Ok(v),
        (P::MapStr, Val::NoValue | Val::Nil) => Ok(Val::Data(&NULL, &schema::MAP_STR)),
        (P::MapAny, Val::NoValue | Val::Nil) => Ok(Val::Data(&NULL, &schema::MAP_ANY)),
        (_, Val::NoValue | Val::Nil) => eval_err(format!("invalid value; expected {}", p.go())),
        (P::Str, Val::Str(_)) | (P::Bool, Val::Bool(_)) | (P::Int, Val::Int(_, IntK::Int)) => Ok(v),
        (P::MapStr, Val::StrDict(_) | Val::Data(_, Ty::MapStr)) => Ok(v),
        (P::MapAny, Val::Dict(_) | Val::Data(_, Ty::MapAny)) => Ok(v),
        (P::Meta, Val::Data(_, Ty::Struct(s))) if std::ptr::eq(*s, &schema::OBJECT_META_STRUCT) => {
            Ok(v)
        }
        _ => wrong(&v),
    }
}

/// A new string value (copied into shared storage), counted against the size bound and the budget.
pub(crate) fn new_str<'a>(ex: &mut Exec<'a, '_>, s: String) -> R<Val<'a>> {
    ex.check_size(s.len())?;
    ex.touched(s.len());
    Ok(Val::string(s))
}
