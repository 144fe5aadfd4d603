//! Go's built-in functions (`text/template` `funcs.go` `builtins`), with Go's comparison rules.

use super::super::print;
use super::super::schema::{IntK, Ty};
use super::super::state::{eval_err, new_str, unsupported, Exec, E, P, R};
use super::super::value::Val;
use super::func::Func;
use super::shared::{charge_lookup, s};

use P::{Any, Raw, Str};

/// Go's built-ins of the subset, in alphabetical order.
pub(super) const FUNCS: &[Func] = &[
    Func::short_circuit("and", false),
    Func::new("eq", &[Raw], Some(Raw), eq),
    Func::new("ge", &[Raw, Raw], None, ge),
    Func::new("gt", &[Raw, Raw], None, gt),
    Func::new("index", &[Raw], Some(Raw), index),
    Func::new("le", &[Raw, Raw], None, le),
    Func::new("len", &[Raw], None, len),
    Func::new("lt", &[Raw, Raw], None, lt),
    Func::new("ne", &[Raw, Raw], None, ne),
    Func::new("not", &[Raw], None, not),
    Func::short_circuit("or", true),
    Func::new("print", &[], Some(Any), sprint),
    Func::new("printf", &[Str], Some(Any), sprintf),
    Func::new("println", &[], Some(Any), sprintln),
];

fn not<'a>(_: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    Ok(Val::Bool(!a[0].truth()))
}

fn len<'a>(_: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    match &a[0] {
        Val::Data(j, Ty::Ptr(_)) if j.is_null() => eval_err("len of nil pointer"),
        Val::NoValue | Val::Nil => eval_err("len of nil pointer"),
        v => match v.len() {
            Some(n) => Ok(Val::int(n as i64)),
            None => eval_err(format!("len of type {}", v.type_name())),
        },
    }
}

fn index<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let mut item = a[0].clone();
    for k in &a[1..] {
        item = index1(ex, item, k)?;
    }
    Ok(item)
}

fn eq<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    if a.len() < 2 {
        return eval_err("missing argument for comparison");
    }
    for other in &a[1..] {
        charge_cmp(ex, &a[0], other)?;
        if eq2(&a[0], other)? {
            return Ok(Val::Bool(true));
        }
    }
    Ok(Val::Bool(false))
}

fn ne<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    compare(ex, &a, |x, y| Ok(!eq2(x, y)?))
}

fn lt<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    compare(ex, &a, less)
}

fn le<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    compare(ex, &a, |x, y| Ok(less(x, y)? || eq2(x, y)?))
}

fn gt<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    compare(ex, &a, |x, y| Ok(!(less(x, y)? || eq2(x, y)?)))
}

fn ge<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    compare(ex, &a, |x, y| Ok(!less(x, y)?))
}

/// A two-operand comparison, charged as two: `le` and `gt` may compare twice.
fn compare<'a>(
    ex: &mut Exec<'a, '_>,
    a: &[Val<'a>],
    op: impl Fn(&Val<'a>, &Val<'a>) -> R<bool>,
) -> R<Val<'a>> {
    charge_cmp(ex, &a[0], &a[1])?;
    charge_cmp(ex, &a[0], &a[1])?;
    Ok(Val::Bool(op(&a[0], &a[1])?))
}

/// `fmt.Sprint`.
fn sprint<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let out = print::sprint(ex, &a, false)?;
    new_str(ex, out)
}

/// `fmt.Sprintln`.
fn sprintln<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let out = print::sprint(ex, &a, true)?;
    new_str(ex, out)
}

/// `fmt.Sprintf`.
fn sprintf<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let out = print::sprintf(ex, s(&a[0]), &a[1..])?;
    new_str(ex, out)
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Kind {
    Invalid,
    Bool,
    Int,
    Uint,
    Float,
    Str,
    Other,
}

fn basic_kind(v: &Val<'_>) -> Kind {
    match v {
        Val::NoValue | Val::Nil => Kind::Invalid,
        Val::Bool(_) => Kind::Bool,
        Val::Int(_, IntK::Uint8) => Kind::Uint,
        Val::Int(..) | Val::Enum(..) => Kind::Int,
        Val::Float(_) => Kind::Float,
        Val::Str(_) => Kind::Str,
        _ => Kind::Other,
    }
}

const BAD_COMPARISON: &str = "incompatible types for comparison";
const BAD_COMPARISON_TYPE: &str = "invalid type for comparison";

/// Charges comparing two values: the bytes of the shorter string (str equality compares lengths first).
fn charge_cmp(ex: &mut Exec<'_, '_>, a: &Val<'_>, b: &Val<'_>) -> R<()> {
    if let (Val::Str(x), Val::Str(y)) = (a, b) {
        ex.read(x.len().min(y.len()))?;
    }
    Ok(())
}

/// Go's `eq` for two values.
fn eq2(a: &Val<'_>, b: &Val<'_>) -> R<bool> {
    let (ka, kb) = (basic_kind(a), basic_kind(b));
    if ka == Kind::Other || kb == Kind::Other {
        if ka == Kind::Invalid || kb == Kind::Invalid {
            return unsupported("comparing a composite value with a missing value");
        }
        return unsupported(format!(
            "comparing values of types {} and {}",
            a.type_name(),
            b.type_name()
        ));
    }
    if ka != kb {
        if matches!((ka, kb), (Kind::Int, Kind::Uint) | (Kind::Uint, Kind::Int)) {
            return Ok(int_of(a) == int_of(b));
        }
        if ka != Kind::Invalid && kb != Kind::Invalid {
            return eval_err(BAD_COMPARISON);
        }
        return Ok(false);
    }
    Ok(match (a, b) {
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Float(x), Val::Float(y)) => x == y,
        (Val::Str(x), Val::Str(y)) => x == y,
        // Both invalid: Go's `isNil` holds for each, so `eq` is true (`eq nil .Values.missing`).
        (Val::NoValue | Val::Nil, Val::NoValue | Val::Nil) => true,
        (Val::NoValue | Val::Nil, _) => false,
        _ => int_of(a) == int_of(b),
    })
}

fn int_of(v: &Val<'_>) -> i64 {
    match v {
        Val::Int(i, _) | Val::Enum(i, _) => *i,
        _ => 0,
    }
}

/// Go's `lt` for two values.
fn less(a: &Val<'_>, b: &Val<'_>) -> R<bool> {
    let (ka, kb) = (basic_kind(a), basic_kind(b));
    if matches!(ka, Kind::Invalid | Kind::Other) || matches!(kb, Kind::Invalid | Kind::Other) {
        return eval_err(BAD_COMPARISON_TYPE);
    }
    if ka != kb {
        if matches!((ka, kb), (Kind::Int, Kind::Uint) | (Kind::Uint, Kind::Int)) {
            return Ok(int_of(a) < int_of(b));
        }
        return eval_err(BAD_COMPARISON);
    }
    match (a, b) {
        (Val::Bool(_), _) => eval_err(BAD_COMPARISON_TYPE),
        (Val::Float(x), Val::Float(y)) => Ok(x < y),
        (Val::Str(x), Val::Str(y)) => Ok(x < y),
        _ => Ok(int_of(a) < int_of(b)),
    }
}

/// Go's `index` for one key: O(1) for lists and strings, one hashed or compared key for maps.
fn index1<'a>(ex: &mut Exec<'a, '_>, item: Val<'a>, key: &Val<'a>) -> R<Val<'a>> {
    ex.step(1)?;
    match &item {
        Val::NoValue | Val::Nil => return eval_err("index of untyped nil"),
        Val::Data(j, Ty::Ptr(_)) if j.is_null() => return eval_err("index of nil pointer"),
        _ => {}
    }
    if let Val::Str(s) = &item {
        let x = index_arg(key, s.len())?;
        return Ok(Val::Int(i64::from(s.as_bytes()[x]), IntK::Uint8));
    }
    if let Some(len) = item.list_len() {
        let x = index_arg(key, len)?;
        return match item.list_get(x) {
            Some(v) => v.map_err(E::Unsupported),
            None => eval_err(format!("index out of range: {x}")),
        };
    }
    if item.is_map() {
        let k = match key {
            Val::Str(k) => {
                charge_lookup(ex, &item, k.len())?;
                k.clone()
            }
            Val::NoValue | Val::Nil => return eval_err("value is nil; should be of type string"),
            other => {
                return eval_err(format!(
                    "value has type {}; should be string",
                    other.type_name()
                ))
            }
        };
        return match item.map_get(&k) {
            Some(Ok(Some(v))) => Ok(v),
            Some(Err(m)) => unsupported(m),
            _ => Ok(item.map_zero()),
        };
    }
    eval_err(format!("can't index item of type {}", item.type_name()))
}

fn index_arg(key: &Val<'_>, len: usize) -> R<usize> {
    let x = match key {
        Val::Int(i, _) => *i,
        Val::NoValue | Val::Nil => return eval_err("cannot index slice/array with nil"),
        other => {
            return eval_err(format!(
                "cannot index slice/array with type {}",
                other.type_name()
            ))
        }
    };
    if x < 0 || x as u64 >= len as u64 {
        return eval_err(format!("index out of range: {x}"));
    }
    Ok(x as usize)
}
