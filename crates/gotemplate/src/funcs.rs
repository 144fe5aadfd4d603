//! The functions: Go's built-ins (`text/template` `funcs.go`), the sprig v3 functions of the subset and
//! Istio's `InjectionFuncmap` entries (Istio's `template.go`), which replace sprig's of the same name.

use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value as Json;

use super::print::{self, Spec};
use super::schema::{IntK, Ty};
use super::state::{eval_err, new_str, unsupported, Exec, E, P, R};
use super::value::Val;
use crate::fields::Fields;

/// A function's parameters: fixed, then an optional variadic tail.
pub(crate) struct Sig {
    pub fixed: &'static [P],
    pub variadic: Option<P>,
}

const fn sig(fixed: &'static [P], variadic: Option<P>) -> Sig {
    Sig { fixed, variadic }
}

use P::{Any, Bool, Int, MapAny, MapStr, Meta, Raw, Str};

/// The parameters of function `name`, or None outside the subset.
pub(crate) fn signature(name: &str) -> Option<Sig> {
    Some(match name {
        "and" | "or" => sig(&[Raw], Some(Raw)),
        "not" | "len" => sig(&[Raw], None),
        "index" => sig(&[Raw], Some(Raw)),
        "eq" => sig(&[Raw], Some(Raw)),
        "ne" | "lt" | "le" | "gt" | "ge" => sig(&[Raw, Raw], None),
        "print" | "println" => sig(&[], Some(Any)),
        "printf" => sig(&[Str], Some(Any)),
        "default" => sig(&[Any], Some(Any)),
        "empty" | "toYaml" | "toJson" | "structToJSON" | "toString" | "int" | "int64"
        | "float64" => sig(&[Any], None),
        "coalesce" | "list" | "dict" | "quote" | "squote" => sig(&[], Some(Any)),
        "ternary" => sig(&[Any, Any, Bool], None),
        "toJSON" => sig(&[MapStr], None),
        "fromJSON" | "toLower" | "lower" | "upper" | "trim" | "fail" => sig(&[Str], None),
        "indent" | "nindent" | "repeat" | "trunc" => sig(&[Int, Str], None),
        "isset" => sig(&[MapStr, Str], None),
        "annotation" => sig(&[Meta, Str, Any], None),
        "valueOrDefault" | "append" => sig(&[Any, Any], None),
        "contains" | "trimAll" | "trimPrefix" | "trimSuffix" | "hasPrefix" | "hasSuffix"
        | "env" => sig(&[Str, Str], None),
        "replace" => sig(&[Str, Str, Str], None),
        "split" => sig(&[Str, Str], None),
        "join" => sig(&[Str, Any], None),
        "get" | "hasKey" => sig(&[MapAny, Str], None),
        "omit" => sig(&[MapStr], Some(Str)),
        "strdict" => sig(&[], Some(Str)),
        _ => return None,
    })
}

/// True when `name` is a function of the supported subset.
pub(crate) fn is_supported(name: &str) -> bool {
    signature(name).is_some()
}

fn s<'v>(v: &'v Val<'_>) -> &'v str {
    match v {
        Val::Str(s) => s,
        _ => "",
    }
}

fn i(v: &Val<'_>) -> i64 {
    match v {
        Val::Int(i, _) => *i,
        _ => 0,
    }
}

/// sprig's `strval`: strings as they are, everything else with `%v`.
fn strval<'a>(ex: &mut Exec<'a, '_>, v: &Val<'a>) -> R<String> {
    match v {
        Val::Str(s) => {
            ex.check_size(s.len())?;
            ex.touched(s.len());
            Ok(s.to_string())
        }
        other => {
            let mut out = String::new();
            print::fmt_value(ex, other, &Spec::plain('v'), &mut out, 0)?;
            Ok(out)
        }
    }
}

/// sprig's `empty`.
fn is_empty(v: &Val<'_>) -> bool {
    match v {
        Val::Data(j, Ty::Ptr(_) | Ty::Wrapper(..) | Ty::Opaque(_)) => j.is_null(),
        Val::Data(_, Ty::Struct(_)) => false,
        other => !other.truth(),
    }
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

/// Go's `lt`.
fn lt(a: &Val<'_>, b: &Val<'_>) -> R<bool> {
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

/// Charges a map lookup of a key of `len` bytes: hashed once in the data's maps, compared about log2(n)
/// times in the template's sorted maps.
fn charge_lookup(ex: &mut Exec<'_, '_>, map: &Val<'_>, len: usize) -> R<()> {
    let n = match map {
        Val::Dict(d) => d.len(),
        Val::StrDict(d) => d.len(),
        _ => 1,
    };
    let log = (usize::BITS - n.leading_zeros()) as usize;
    ex.read(len.saturating_mul(log.max(1)))
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

/// cast's `ToInt64` as sprig's `int` uses it: floats truncate, strings parse with Go's base prefixes,
/// everything unparseable is 0.
fn to_int(v: &Val<'_>) -> i64 {
    match v {
        Val::Int(i, _) | Val::Enum(i, _) => *i,
        Val::Float(f) => *f as i64,
        Val::Bool(b) => i64::from(*b),
        Val::Str(s) => {
            let t = match s.find('.') {
                // cast's trimZeroDecimal: "1.00" is 1, but "1." is not a number.
                Some(p) if s.len() > p + 1 && s[p + 1..].bytes().all(|b| b == b'0') => &s[..p],
                _ => s,
            };
            super::lex::parse_number(t)
                .ok()
                .filter(|n| !n.float_text && !t.is_empty())
                .and_then(|n| n.int)
                .unwrap_or(0)
        }
        _ => 0,
    }
}

fn to_float(v: &Val<'_>) -> f64 {
    match v {
        Val::Int(i, _) | Val::Enum(i, _) => *i as f64,
        Val::Float(f) => *f,
        Val::Bool(b) => f64::from(u8::from(*b)),
        Val::Str(s) => s.parse().unwrap_or(0.0),
        _ => 0.0,
    }
}

/// A copy of a map's string entries, charged per entry and per byte copied.
fn str_map<'a>(ex: &mut Exec<'a, '_>, v: &Val<'a>) -> R<BTreeMap<Rc<str>, Rc<str>>> {
    let mut m = BTreeMap::new();
    if let Some(entries) = v.map_entries() {
        let entries = entries.map_err(E::Unsupported)?;
        ex.charge_sorted(entries.iter().map(|(k, _)| k.len()))?;
        for (k, e) in entries {
            if let Val::Str(s) = e {
                ex.check_size(k.len() + s.len())?;
                ex.touched(k.len() + s.len());
                m.insert(Rc::from(&*k), Rc::from(&*s));
            }
        }
    }
    Ok(m)
}

/// A key for a map the template builds, charged as the bytes it copies.
fn key_of(ex: &mut Exec<'_, '_>, s: &str) -> R<Rc<str>> {
    ex.check_size(s.len())?;
    ex.touched(s.len());
    Ok(Rc::from(s))
}

/// Converts decoded JSON to template values (`fromJSON`).
fn from_json<'a>(ex: &mut Exec<'a, '_>, j: Json, depth: usize) -> R<Val<'a>> {
    ex.descend(depth)?;
    // A node parsed, then rebuilt as a template value (allocations, a sorted-map insert): measured at
    // about four steps' time.
    ex.step(3)?;
    Ok(match j {
        Json::Null => Val::Nil,
        Json::Bool(b) => Val::Bool(b),
        Json::Number(n) => Val::Float(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Val::string(s),
        Json::Array(a) => Val::List(Rc::new(
            a.into_iter()
                .map(|e| from_json(ex, e, depth + 1))
                .collect::<R<_>>()?,
        )),
        Json::Object(o) => {
            let mut m = BTreeMap::new();
            for (k, e) in o {
                let v = from_json(ex, e, depth + 1)?;
                m.insert(Rc::from(k), v);
            }
            Val::Dict(Rc::new(m))
        }
    })
}

/// Applies function `name` to arguments already converted to its parameter types.
pub(crate) fn apply<'a>(ex: &mut Exec<'a, '_>, name: &str, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let b = |v: bool| Ok(Val::Bool(v));
    match name {
        "not" => b(!a[0].truth()),
        "len" => match &a[0] {
            Val::Data(j, Ty::Ptr(_)) if j.is_null() => eval_err("len of nil pointer"),
            Val::NoValue | Val::Nil => eval_err("len of nil pointer"),
            v => match v.len() {
                Some(n) => Ok(Val::int(n as i64)),
                None => eval_err(format!("len of type {}", v.type_name())),
            },
        },
        "index" => {
            let mut item = a[0].clone();
            for k in &a[1..] {
                item = index1(ex, item, k)?;
            }
            Ok(item)
        }
        "eq" => {
            if a.len() < 2 {
                return eval_err("missing argument for comparison");
            }
            for other in &a[1..] {
                charge_cmp(ex, &a[0], other)?;
                if eq2(&a[0], other)? {
                    return b(true);
                }
            }
            b(false)
        }
        "ne" | "lt" | "le" | "gt" | "ge" => {
            // `le` and `gt` may compare twice.
            charge_cmp(ex, &a[0], &a[1])?;
            charge_cmp(ex, &a[0], &a[1])?;
            match name {
                "ne" => b(!eq2(&a[0], &a[1])?),
                "lt" => b(lt(&a[0], &a[1])?),
                "le" => b(lt(&a[0], &a[1])? || eq2(&a[0], &a[1])?),
                "gt" => b(!(lt(&a[0], &a[1])? || eq2(&a[0], &a[1])?)),
                _ => b(!lt(&a[0], &a[1])?),
            }
        }
        "print" => {
            let out = print::sprint(ex, &a, false)?;
            new_str(ex, out)
        }
        "println" => {
            let out = print::sprint(ex, &a, true)?;
            new_str(ex, out)
        }
        "printf" => {
            let out = print::sprintf(ex, s(&a[0]), &a[1..])?;
            new_str(ex, out)
        }
        "default" => Ok(match a.get(1) {
            Some(v) if !is_empty(v) => v.clone(),
            _ => a[0].clone(),
        }),
        "empty" => b(is_empty(&a[0])),
        "coalesce" => Ok(a.iter().find(|v| !is_empty(v)).cloned().unwrap_or(Val::Nil)),
        "ternary" => Ok(if a[2].truth() {
            a[0].clone()
        } else {
            a[1].clone()
        }),
        "quote" | "squote" => {
            let mut parts = Vec::new();
            for v in a.iter().filter(|v| !matches!(v, Val::Nil)) {
                if name == "quote" {
                    let sv = strval(ex, v)?;
                    let q = print::go_quote(&sv);
                    ex.check_size(q.len())?;
                    ex.touched(q.len());
                    parts.push(q);
                } else {
                    let mut out = String::from("'");
                    print::fmt_value(ex, v, &Spec::plain('v'), &mut out, 0)?;
                    out.push('\'');
                    ex.check_size(out.len())?;
                    parts.push(out);
                }
            }
            let total = parts.iter().map(String::len).sum::<usize>() + parts.len();
            ex.check_size(total)?;
            new_str(ex, parts.join(" "))
        }
        // Go's encoders fail only on NaN and infinities; Istio's toYaml and sprig's toJson then give "",
        // Istio's structToJSON "{}".
        "toYaml" | "toJson" | "structToJSON" => {
            if name == "structToJSON" && matches!(a[0], Val::Nil) {
                return new_str(ex, "{}".to_string());
            }
            let j = match print::to_json(ex, &a[0], 0, name != "toYaml") {
                Ok(j) => j,
                Err(E::Eval(_)) => {
                    return Ok(Val::str(if name == "structToJSON" { "{}" } else { "" }));
                }
                Err(other) => return Err(other),
            };
            let out = if name == "toYaml" {
                print::to_yaml(&j)
            } else {
                let mut out = String::new();
                print::write_json(&j, &mut out);
                out
            };
            // The text written (then copied by new_str).
            ex.check_size(out.len())?;
            ex.touched(out.len());
            new_str(ex, out)
        }
        "toJSON" => {
            let m = str_map(ex, &a[0])?;
            let j = Json::Object(
                m.into_iter()
                    .map(|(k, v)| (k.to_string(), Json::String(v.to_string())))
                    .collect(),
            );
            let mut out = String::new();
            print::write_json(&j, &mut out);
            ex.check_size(out.len())?;
            ex.touched(out.len());
            new_str(ex, out)
        }
        "fromJSON" => {
            let text = s(&a[0]);
            ex.check_size(text.len())?;
            ex.touched(text.len());
            match serde_json::from_str::<Json>(text) {
                Ok(j) => from_json(ex, j, 0),
                Err(_) => Ok(Val::str("{}")),
            }
        }
        "indent" | "nindent" => {
            let n = i(&a[0]);
            if name == "nindent" && n < 0 {
                return eval_err("strings: negative Repeat count");
            }
            let text = s(&a[1]);
            let pad_len = n.unsigned_abs() as usize;
            let lines = text.split('\n').count();
            ex.check_size(
                text.len()
                    .saturating_add(pad_len.saturating_mul(lines))
                    .saturating_add(1),
            )?;
            ex.read(text.len())?;
            let pad = " ".repeat(pad_len);
            let mut out = String::new();
            if name == "nindent" {
                out.push('\n');
            }
            for (idx, line) in text.split('\n').enumerate() {
                if idx > 0 {
                    out.push('\n');
                }
                // Istio's indent skips the first line; sprig's (behind nindent) pads every line.
                if idx > 0 || name == "nindent" {
                    out.push_str(&pad);
                }
                out.push_str(line);
            }
            new_str(ex, out)
        }
        "isset" => {
            let key = s(&a[1]);
            charge_lookup(ex, &a[0], key.len())?;
            b(a[0].map_get(key).is_some_and(|r| matches!(r, Ok(Some(_)))))
        }
        "annotation" => {
            let name = s(&a[1]);
            ex.read(name.len())?;
            let Val::Data(j, _) = &a[0] else {
                return eval_err("annotation needs an ObjectMeta");
            };
            match j.field("annotations").and_then(|m| m.field(name)) {
                Some(Json::String(v)) => Ok(Val::borrowed(v)),
                _ => {
                    let out = print::sprint(ex, &a[2..3], false)?;
                    new_str(ex, out)
                }
            }
        }
        "valueOrDefault" => Ok(match &a[0] {
            Val::Nil | Val::NoValue => a[1].clone(),
            Val::Str(v) if v.is_empty() => a[1].clone(),
            v => v.clone(),
        }),
        "toLower" | "lower" | "upper" => {
            // Case mapping reads every byte and may write up to three bytes per byte read.
            let text = s(&a[0]);
            ex.check_size(text.len())?;
            ex.read(text.len())?;
            let out = if name == "upper" {
                text.to_uppercase()
            } else {
                text.to_lowercase()
            };
            new_str(ex, out)
        }
        "trim" => {
            ex.read(s(&a[0]).len())?;
            new_str(ex, s(&a[0]).trim_matches(char::is_whitespace).to_string())
        }
        // Two-way string search: linear in the text and the needle.
        "contains" => {
            ex.read(s(&a[1]).len().saturating_add(s(&a[0]).len()))?;
            b(s(&a[1]).contains(s(&a[0])))
        }
        "trimAll" => {
            // The cut set as a sorted set: linear in the text, not text × set.
            let cutset = s(&a[0]);
            let text = s(&a[1]);
            ex.read(cutset.len().saturating_add(text.len()))?;
            let cut: std::collections::BTreeSet<char> = cutset.chars().collect();
            ex.read(
                text.len()
                    .saturating_mul(cut.len().max(1).ilog2() as usize + 1),
            )?;
            new_str(ex, text.trim_matches(|c| cut.contains(&c)).to_string())
        }
        "trimPrefix" | "trimSuffix" => {
            let strip = if name == "trimPrefix" {
                str::strip_prefix::<&str>
            } else {
                str::strip_suffix::<&str>
            };
            ex.read(s(&a[0]).len().min(s(&a[1]).len()))?;
            let kept = strip(s(&a[1]), s(&a[0])).unwrap_or(s(&a[1]));
            ex.check_size(kept.len())?;
            new_str(ex, kept.to_string())
        }
        "hasPrefix" | "hasSuffix" => {
            ex.read(s(&a[0]).len().min(s(&a[1]).len()))?;
            b(if name == "hasPrefix" {
                s(&a[1]).starts_with(s(&a[0]))
            } else {
                s(&a[1]).ends_with(s(&a[0]))
            })
        }
        "replace" => {
            let (old, new, src) = (s(&a[0]), s(&a[1]), s(&a[2]));
            // Counting the matches reads the text once, replacing reads it again.
            ex.read(src.len().saturating_add(old.len()).saturating_mul(2))?;
            let count = if old.is_empty() {
                src.chars().count() + 1
            } else {
                src.matches(old).count()
            };
            ex.check_size(src.len().saturating_add(count.saturating_mul(new.len())))?;
            new_str(ex, src.replace(old, new))
        }
        "repeat" => {
            let n = i(&a[0]);
            if n < 0 {
                return eval_err("strings: negative Repeat count");
            }
            let text = s(&a[1]);
            ex.check_size(text.len().saturating_mul(n as usize))?;
            // An empty text repeated still loops n times.
            ex.charge((n as usize) / 64)?;
            new_str(ex, text.repeat(n as usize))
        }
        "trunc" => {
            let (c, text) = (i(&a[0]), s(&a[1]));
            let len = text.len() as i64;
            let cut = if c < 0 && len + c > 0 {
                (len + c) as usize..text.len()
            } else if c >= 0 && len > c {
                0..c as usize
            } else {
                0..text.len()
            };
            match text.get(cut) {
                Some(t) => {
                    ex.check_size(t.len())?;
                    new_str(ex, t.to_string())
                }
                None => unsupported("trunc in the middle of a UTF-8 character"),
            }
        }
        "split" => {
            // sprig's split: a map from "_0", "_1", … to the parts (strings.Split).
            let (sep, text) = (s(&a[0]), s(&a[1]));
            ex.read(text.len().saturating_add(sep.len()))?;
            let parts: Vec<&str> = if sep.is_empty() {
                text.char_indices()
                    .map(|(i, c)| &text[i..i + c.len_utf8()])
                    .collect()
            } else {
                text.split(sep).collect()
            };
            // Each part is a new key and a new string in a sorted map.
            ex.step(parts.len().saturating_mul(2))?;
            ex.charge(text.len())?;
            ex.touched(text.len());
            let m: BTreeMap<Rc<str>, Val<'a>> = parts
                .into_iter()
                .enumerate()
                .map(|(i, p)| (Rc::from(format!("_{i}")), Val::str(p)))
                .collect();
            Ok(Val::Dict(Rc::new(m)))
        }
        "fail" => Err(E::Fail(s(&a[0]).to_string())),
        "join" => {
            let sep = s(&a[0]).to_string();
            let parts: Vec<Val<'a>> = match &a[1] {
                Val::Nil => Vec::new(),
                v => match v.list_items() {
                    Some(items) => {
                        ex.step(v.list_len().unwrap_or(0))?;
                        items.map_err(E::Unsupported)?
                    }
                    None => vec![v.clone()],
                },
            };
            let mut strs = Vec::with_capacity(parts.len());
            for p in parts.iter().filter(|p| !matches!(p, Val::Nil)) {
                strs.push(strval(ex, p)?);
            }
            let total: usize =
                strs.iter().map(String::len).sum::<usize>() + sep.len().saturating_mul(strs.len());
            ex.check_size(total)?;
            ex.touched(total);
            new_str(ex, strs.join(&sep))
        }
        "list" => {
            ex.step(a.len())?;
            ex.check_nesting(&a)?;
            Ok(Val::List(Rc::new(a)))
        }
        "append" => match a[0].list_items() {
            Some(items) => {
                ex.step(a[0].list_len().unwrap_or(0) + 1)?;
                let mut items = items.map_err(E::Unsupported)?;
                ex.check_nesting(&a[1..2])?;
                items.push(a[1].clone());
                Ok(Val::List(Rc::new(items)))
            }
            None => eval_err(format!("Cannot push on type {}", a[0].type_name())),
        },
        "dict" => {
            let mut m = BTreeMap::new();
            let mut it = a.iter();
            while let Some(k) = it.next() {
                let key = strval(ex, k)?;
                let v = it.next().cloned().unwrap_or_else(|| Val::borrowed(""));
                // Inserting compares the key about log2(n) times.
                ex.read(
                    key.len()
                        .saturating_mul(m.len().max(1).ilog2() as usize + 1),
                )?;
                m.insert(Rc::from(key), v);
            }
            ex.step(m.len())?;
            let values: Vec<Val<'a>> = m.values().cloned().collect();
            ex.check_nesting(&values)?;
            Ok(Val::Dict(Rc::new(m)))
        }
        "get" => {
            charge_lookup(ex, &a[0], s(&a[1]).len())?;
            Ok(match a[0].map_get(s(&a[1])) {
                Some(Ok(Some(v))) => v,
                Some(Err(m)) => return unsupported(m),
                _ => Val::borrowed(""),
            })
        }
        "hasKey" => {
            charge_lookup(ex, &a[0], s(&a[1]).len())?;
            b(matches!(a[0].map_get(s(&a[1])), Some(Ok(Some(_)))))
        }
        "toString" => {
            let out = strval(ex, &a[0])?;
            new_str(ex, out)
        }
        "int" | "int64" | "float64" => {
            // Parsing a string reads it (twice for int: the decimal point, then the digits).
            if let Val::Str(t) = &a[0] {
                ex.read(t.len().saturating_mul(2))?;
            }
            Ok(match name {
                "int" => Val::Int(to_int(&a[0]), IntK::Int),
                "int64" => Val::Int(to_int(&a[0]), IntK::Int64),
                _ => Val::Float(to_float(&a[0])),
            })
        }
        "omit" => {
            let mut m = str_map(ex, &a[0])?;
            for k in &a[1..] {
                ex.read(
                    s(k).len()
                        .saturating_mul(m.len().max(1).ilog2() as usize + 1),
                )?;
                m.remove(s(k));
            }
            ex.step(m.len())?;
            Ok(Val::StrDict(Rc::new(m)))
        }
        "strdict" => {
            let mut m = BTreeMap::new();
            for pair in a.chunks(2) {
                let v = key_of(ex, pair.get(1).map_or("", |v| s(v)))?;
                let k = key_of(ex, s(&pair[0]))?;
                m.insert(k, v);
            }
            ex.step(m.len())?;
            Ok(Val::StrDict(Rc::new(m)))
        }
        "env" => {
            // Istio reads istiod's environment; the injector is istiod's stand-in here.
            ex.read(s(&a[0]).len())?;
            let v = std::env::var(s(&a[0])).unwrap_or_default();
            Ok(if v.is_empty() {
                a[1].clone()
            } else {
                new_str(ex, v)?
            })
        }
        other => unsupported(format!("function {other:?}")),
    }
}
