//! Istio's functions of the subset (Istio's `template.go` `InjectionFuncmap`), which replace sprig's of
//! the same name.

use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value as Json;

use super::super::print;
use super::super::state::{eval_err, new_str, Exec, E, P, R};
use super::super::value::Val;
use super::func::Func;
use super::shared::{self, charge_lookup, i, s};
use crate::fields::Fields;

use P::{Any, Int, MapStr, Meta, Str};

/// Istio's functions of the subset, in alphabetical order.
pub(super) const FUNCS: &[Func] = &[
    Func::new("annotation", &[Meta, Str, Any], None, annotation),
    Func::new("contains", &[Str, Str], None, contains),
    Func::new("env", &[Str, Str], None, env),
    Func::new("fromJSON", &[Str], None, from_json),
    Func::new("indent", &[Int, Str], None, indent),
    Func::new("isset", &[MapStr, Str], None, isset),
    Func::new("omit", &[MapStr], Some(Str), omit),
    Func::new("strdict", &[], Some(Str), strdict),
    Func::new("structToJSON", &[Any], None, struct_to_json),
    Func::new("toJSON", &[MapStr], None, to_json),
    Func::new("toLower", &[Str], None, shared::lower),
    Func::new("toYaml", &[Any], None, to_yaml),
    Func::new("valueOrDefault", &[Any, Any], None, value_or_default),
];

fn to_yaml<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    match shared::marshal(ex, &a[0], true)? {
        Some(out) => new_str(ex, out),
        None => Ok(Val::str("")),
    }
}

fn struct_to_json<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    if matches!(a[0], Val::Nil) {
        return new_str(ex, "{}".to_string());
    }
    match shared::marshal(ex, &a[0], false)? {
        Some(out) => new_str(ex, out),
        None => Ok(Val::str("{}")),
    }
}

fn to_json<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
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

/// The string `{}` on invalid JSON, as Istio's `fromJSON` returns it.
fn from_json<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let text = s(&a[0]);
    ex.check_size(text.len())?;
    ex.touched(text.len());
    match serde_json::from_str::<Json>(text) {
        Ok(j) => decoded(ex, j, 0),
        Err(_) => Ok(Val::str("{}")),
    }
}

fn indent<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    shared::indent(ex, i(&a[0]), s(&a[1]), false)
}

fn isset<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let key = s(&a[1]);
    charge_lookup(ex, &a[0], key.len())?;
    Ok(Val::Bool(
        a[0].map_get(key).is_some_and(|r| matches!(r, Ok(Some(_)))),
    ))
}

fn annotation<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
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

fn value_or_default<'a>(_: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    Ok(match &a[0] {
        Val::Nil | Val::NoValue => a[1].clone(),
        Val::Str(v) if v.is_empty() => a[1].clone(),
        v => v.clone(),
    })
}

/// Istio's `flippedContains`: the needle first. Two-way string search: linear in the text and the
/// needle.
fn contains<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    ex.read(s(&a[1]).len().saturating_add(s(&a[0]).len()))?;
    Ok(Val::Bool(s(&a[1]).contains(s(&a[0]))))
}

fn omit<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
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

fn strdict<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let mut m = BTreeMap::new();
    for pair in a.chunks(2) {
        let v = key_of(ex, pair.get(1).map_or("", |v| s(v)))?;
        let k = key_of(ex, s(&pair[0]))?;
        m.insert(k, v);
    }
    ex.step(m.len())?;
    Ok(Val::StrDict(Rc::new(m)))
}

/// Istio reads istiod's environment; the injector is istiod's stand-in here.
fn env<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    ex.read(s(&a[0]).len())?;
    let v = std::env::var(s(&a[0])).unwrap_or_default();
    Ok(if v.is_empty() {
        a[1].clone()
    } else {
        new_str(ex, v)?
    })
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
fn decoded<'a>(ex: &mut Exec<'a, '_>, j: Json, depth: usize) -> R<Val<'a>> {
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
                .map(|e| decoded(ex, e, depth + 1))
                .collect::<R<_>>()?,
        )),
        Json::Object(o) => {
            let mut m = BTreeMap::new();
            for (k, e) in o {
                let v = decoded(ex, e, depth + 1)?;
                m.insert(Rc::from(k), v);
            }
            Val::Dict(Rc::new(m))
        }
    })
}
