//! Go's `encoding/json` (for `toJson`, `toJSON`, `structToJSON` and, through JSON, `toYaml`): the JSON
//! Go would marshal for a template value or typed data, and its text.

use std::fmt::Write as _;

use serde_json::{Map, Number, Value as Json};

use super::super::schema::Ty;
use super::super::state::{unsupported, Exec, E, R};
use super::super::value::Val;
use super::strconv::{digits, fmt_f, format_float, quote_into, u_escape};
use crate::fields::Fields;

/// The JSON Go's `encoding/json` would marshal for a value (`toJson`, `toYaml`); proto messages, whose
/// Go encoding differs from their proto JSON, are refused.
pub(crate) fn to_json<'a>(
    ex: &mut Exec<'a, '_>,
    v: &Val<'a>,
    depth: usize,
    ordered: bool,
) -> R<Json> {
    ex.descend(depth)?;
    Ok(match v {
        Val::NoValue | Val::Nil => Json::Null,
        Val::Bool(b) => Json::Bool(*b),
        Val::Int(i, _) | Val::Enum(i, _) => Json::from(*i),
        Val::Float(f) => match Number::from_f64(*f) {
            Some(n) => Json::Number(n),
            None => {
                return Err(E::Eval(format!(
                    "json: unsupported value: {}",
                    format_float(*f, 'g', None, false)?
                )))
            }
        },
        Val::Str(s) => {
            ex.check_size(s.len())?;
            ex.charge(s.len())?;
            ex.touched(s.len());
            Json::String(s.to_string())
        }
        Val::List(l) => {
            ex.step(l.len())?;
            let mut a = Vec::with_capacity(l.len());
            for e in l.iter() {
                a.push(to_json(ex, e, depth + 1, ordered)?);
            }
            Json::Array(a)
        }
        Val::Dict(d) => {
            ex.step(d.len())?;
            let mut m = Map::new();
            for (k, e) in d.iter() {
                ex.charge(k.len())?;
                ex.touched(k.len());
                m.insert(k.to_string(), to_json(ex, e, depth + 1, ordered)?);
            }
            Json::Object(m)
        }
        Val::StrDict(d) => {
            ex.step(d.len())?;
            let bytes: usize = d.iter().map(|(k, v)| k.len() + v.len()).sum();
            ex.charge(bytes)?;
            ex.touched(bytes);
            Json::Object(
                d.iter()
                    .map(|(k, e)| (k.to_string(), Json::String(e.to_string())))
                    .collect(),
            )
        }
        Val::Data(j, ty) => typed_json(ex, j, ty, depth, ordered)?,
    })
}

/// Go's `encoding/json` of typed data: numbers under `interface{}` are float64, map keys sorted, struct
/// fields in declaration order, and fields without `omitempty` (or non-pointer structs) written even when
/// the JSON lacks them. With `ordered` (the text is JSON, where field order shows) a struct field this
/// evaluator does not model is refused, since its position in Go's output is unknown.
fn typed_json(
    ex: &mut Exec<'_, '_>,
    j: &Json,
    ty: &'static Ty,
    depth: usize,
    ordered: bool,
) -> R<Json> {
    ex.descend(depth)?;
    let proto = |n: &str| {
        unsupported(format!(
            "JSON of the proto message {n} (Go's encoding differs from proto JSON)"
        ))
    };
    match ty {
        Ty::MapAny | Ty::Any | Ty::Slice(Ty::Any, _) => any_json(ex, j, depth),
        Ty::MapStr => plain_json(ex, j, depth),
        // `v1.ResourceList`, Istio's typed pod: each `resource.Quantity` is written canonical.
        Ty::MapOpaque(_) => {
            let copy = plain_json(ex, j, depth)?;
            Ok(match copy {
                Json::Object(m) => Json::Object(
                    m.into_iter()
                        .map(|(k, v)| (k, crate::gotypes::canonical_quantity_value(&v)))
                        .collect(),
                ),
                other => other,
            })
        }
        // The zero `resource.Quantity` (`index` of an absent resource) is written "0".
        Ty::Opaque("resource.Quantity") if j.is_null() => Ok(Json::String("0".into())),
        Ty::Opaque("resource.Quantity") => Ok(crate::gotypes::canonical_quantity_value(
            &plain_json(ex, j, depth)?,
        )),
        Ty::Struct(s) if s.proto => proto(s.go),
        Ty::Struct(s) if s.go.starts_with("inject.") => unsupported(format!(
            "JSON of {} (its Go fields carry no JSON names)",
            s.go
        )),
        Ty::Wrapper(_, n) => proto(n),
        Ty::Opaque(n) if n.contains("pb.") || n.starts_with("v1alpha1.") => proto(n),
        Ty::Opaque(n) if ordered && j.is_object() => unsupported(format!(
            "toJson of a {n} (its field order in Go's output is not modelled; use toYaml)"
        )),
        Ty::Ptr(inner) if !j.is_null() => typed_json(ex, j, inner, depth, ordered),
        Ty::Str | Ty::Int(_) | Ty::Bool => match Val::typed(Some(j), ty).map_err(E::Unsupported)? {
            Val::Int(i, _) => Ok(Json::from(i)),
            _ => {
                let n = j.as_str().map_or(0, str::len);
                ex.charge(n)?;
                ex.touched(n);
                Ok(j.clone())
            }
        },
        Ty::Struct(s) => {
            let empty = Map::new();
            let o = j.as_object().unwrap_or(&empty);
            // types.NamespacedName has no JSON tags: Go writes its Go field names.
            let go_names = s.go == "types.NamespacedName";
            let mut m = Map::new();
            for f in s.fields {
                let key = if go_names { f.go } else { f.json };
                match o.field(f.json).or_else(|| o.field(f.go)) {
                    // `omitempty` drops a zero scalar, an empty list or map, and a nil pointer.
                    Some(v) if !f.always && omitted_zero(v, f.ty) => {}
                    Some(v) => {
                        let v = typed_json(ex, v, f.ty, depth + 1, ordered)?;
                        m.insert(key.to_string(), v);
                    }
                    None if f.always => {
                        let zero = match f.ty {
                            Ty::Str => Json::String(String::new()),
                            Ty::Int(_) => Json::from(0),
                            Ty::Bool => Json::Bool(false),
                            Ty::Struct(_) => typed_json(ex, &Json::Null, f.ty, depth + 1, ordered)?,
                            _ => Json::Null,
                        };
                        m.insert(key.to_string(), zero);
                    }
                    None => {}
                }
            }
            ex.step(o.len())?;
            for (k, v) in o {
                if !s
                    .fields
                    .iter()
                    .any(|f| f.json == k.as_str() || f.go == k.as_str())
                {
                    if ordered {
                        return unsupported(format!(
                            "toJson of a {} with field {k:?} (its position in Go's output is not modelled; use toYaml)",
                            s.go
                        ));
                    }
                    let v = plain_json(ex, v, depth + 1)?;
                    m.insert(k.clone(), v);
                }
            }
            Ok(Json::Object(m))
        }
        Ty::Slice(elem, _) => match j {
            Json::Array(a) => {
                ex.step(a.len())?;
                Ok(Json::Array(
                    a.iter()
                        .map(|e| typed_json(ex, e, elem, depth + 1, ordered))
                        .collect::<R<_>>()?,
                ))
            }
            other => plain_json(ex, other, depth),
        },
        _ => plain_json(ex, j, depth),
    }
}

/// True when Go's `encoding/json` leaves out a field of type `ty` holding `v` under `omitempty`.
fn omitted_zero(v: &Json, ty: &Ty) -> bool {
    match (ty, v) {
        (_, Json::Null) => true,
        (Ty::Str, Json::String(s)) => s.is_empty(),
        (Ty::Int(_), Json::Number(n)) => n.as_f64() == Some(0.0),
        (Ty::Bool, Json::Bool(b)) => !b,
        (Ty::Slice(..), Json::Array(a)) => a.is_empty(),
        (Ty::MapAny | Ty::MapStr | Ty::MapOpaque(_), Json::Object(o)) => o.is_empty(),
        _ => false,
    }
}

/// A copy of JSON data whose Go type keeps the JSON as it is (objects are Go maps: keys sorted).
fn plain_json(ex: &mut Exec<'_, '_>, j: &Json, depth: usize) -> R<Json> {
    let (nodes, bytes) = json_size(j, ex.depth_left().saturating_sub(depth))
        .ok_or(E::Limit("depth", ex.limits.max_depth))?;
    // Walking the nodes, copying the strings and keys, sorting the keys (about log2 compares each).
    ex.step(nodes)?;
    ex.charge(bytes.saturating_mul(2))?;
    ex.touched(bytes);
    Ok(sorted_json(j))
}

fn sorted_json(j: &Json) -> Json {
    match j {
        Json::Object(o) => Json::Object(
            sorted_entries(o)
                .into_iter()
                .map(|(k, v)| (k.clone(), sorted_json(v)))
                .collect(),
        ),
        Json::Array(a) => Json::Array(a.iter().map(sorted_json).collect()),
        other => other.clone(),
    }
}

/// JSON-decoded data as Go holds it in `interface{}`: every number is a float64.
fn any_json(ex: &mut Exec<'_, '_>, j: &Json, depth: usize) -> R<Json> {
    ex.descend(depth)?;
    Ok(match j {
        Json::Number(n) => n
            .as_f64()
            .and_then(Number::from_f64)
            .map_or(Json::Null, Json::Number),
        Json::Array(a) => Json::Array(
            a.iter()
                .map(|e| any_json(ex, e, depth + 1))
                .collect::<R<_>>()?,
        ),
        Json::Object(o) => {
            ex.charge_sorted(o.keys().map(String::len))?;
            let mut m = Map::new();
            for (k, e) in sorted_entries(o) {
                m.insert(k.clone(), any_json(ex, e, depth + 1)?);
            }
            Json::Object(m)
        }
        other => {
            let n = other.as_str().map_or(0, str::len);
            ex.charge(n)?;
            ex.touched(n);
            other.clone()
        }
    })
}

/// Number of JSON nodes and bytes of strings and keys (each scaled by its sorting: about log2 of the
/// object's size compares per key), or None when nested deeper than `left`.
fn json_size(j: &Json, left: usize) -> Option<(usize, usize)> {
    if left == 0 {
        return None;
    }
    let add = |(n, b): (usize, usize), (n2, b2): (usize, usize)| {
        Some((n.saturating_add(n2), b.saturating_add(b2)))
    };
    match j {
        Json::Array(a) => a
            .iter()
            .try_fold((1usize, 0usize), |acc, e| add(acc, json_size(e, left - 1)?)),
        Json::Object(o) => {
            let log = (usize::BITS - o.len().leading_zeros()) as usize;
            o.iter().try_fold((1usize, 0usize), |acc, (k, e)| {
                let acc = add(acc, (0, k.len().saturating_mul(log.max(1))))?;
                add(acc, json_size(e, left - 1)?)
            })
        }
        Json::String(s) => Some((1, s.len())),
        _ => Some((1, 0)),
    }
}

pub(super) fn sorted_entries(o: &Map<String, Json>) -> Vec<(&String, &Json)> {
    let mut v: Vec<_> = o.iter().collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

/// Writes a number that is an integer (an int64 or a uint64, written alike by every encoder here) and
/// gives None; gives any other number as a float, for the caller's float format.
pub(super) fn write_integer(n: &Number, out: &mut String) -> Option<f64> {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else {
        return Some(n.as_f64().unwrap_or(0.0));
    }
    None
}

/// Go's `encoding/json` number text.
fn json_number(n: &Number, out: &mut String) {
    let Some(f) = write_integer(n, out) else {
        return;
    };
    let a = f.abs();
    if a != 0.0 && !(1e-6..1e21).contains(&a) {
        let mut s = format_float(f, 'e', None, false).unwrap_or_default();
        // Go writes e-7, not e-07.
        if let Some(pos) = s.find("e-0") {
            s.remove(pos + 2);
        } else if let Some(pos) = s.find("e+0") {
            s.remove(pos + 2);
        }
        out.push_str(&s);
    } else {
        let (neg, d, dp) = digits(f, None);
        if neg {
            out.push('-');
        }
        fmt_f(out, &d, dp, (d.len() as i32 - dp).max(0) as usize);
    }
}

/// Go's `json.Marshal` output (keys in the order `to_json` gave them, `<`, `>`, `&` escaped).
pub(crate) fn write_json(j: &Json, out: &mut String) {
    match j {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => json_number(n, out),
        Json::String(s) => json_string(s, out),
        Json::Array(a) => {
            out.push('[');
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(e, out);
            }
            out.push(']');
        }
        Json::Object(o) => {
            out.push('{');
            for (i, (k, e)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(k, out);
                out.push(':');
                write_json(e, out);
            }
            out.push('}');
        }
    }
}

fn json_string(s: &str, out: &mut String) {
    quote_into(s, out, |c, out| match c {
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => u_escape(c, out),
        c if (c as u32) < 0x20 => u_escape(c, out),
        c => out.push(c),
    });
}
