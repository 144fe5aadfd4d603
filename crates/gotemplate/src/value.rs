//! Template values: Go's `reflect.Value` cases the evaluator distinguishes, over the caller's JSON.

use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value as Json;

use super::schema::{self, EnumTy, IntK, Ty};
use crate::fields::Fields;

pub(crate) static NULL: Json = Json::Null;
pub(crate) static SLICE_ANY: Ty = Ty::Slice(&schema::ANY, "[]interface {}");

/// A string value: borrowed from the data or the template text (field access and literals copy nothing),
/// or built by the evaluation and shared.
#[derive(Debug, Clone)]
pub(crate) enum S<'a> {
    B(&'a str),
    O(Rc<str>),
}

impl std::ops::Deref for S<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            S::B(s) => s,
            S::O(s) => s,
        }
    }
}

impl PartialEq for S<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl PartialOrd for S<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some((**self).cmp(&**other))
    }
}

/// A value during evaluation.
#[derive(Debug, Clone)]
pub(crate) enum Val<'a> {
    /// Go's invalid `reflect.Value`: a missing map key ("no value").
    NoValue,
    /// A nil `interface{}` (JSON `null` where Go holds `any`).
    Nil,
    Bool(bool),
    Int(i64, IntK),
    Float(f64),
    Str(S<'a>),
    Enum(i64, &'static EnumTy),
    /// A composite view into the caller's JSON with its Go type; `Null` JSON is a nil map, slice or pointer.
    Data(&'a Json, &'static Ty),
    /// `[]interface{}` built by the template.
    List(Rc<Vec<Val<'a>>>),
    /// `map[string]interface{}` built by the template.
    Dict(Rc<BTreeMap<Rc<str>, Val<'a>>>),
    /// `map[string]string` built by the template.
    StrDict(Rc<BTreeMap<Rc<str>, Rc<str>>>),
}

impl<'a> Val<'a> {
    /// A string copied into a new shared value (for short texts the evaluator makes).
    pub fn str(s: &str) -> Val<'a> {
        Val::Str(S::O(Rc::from(s)))
    }

    /// A string borrowed from the data or the template: O(1) whatever its length.
    pub fn borrowed(s: &'a str) -> Val<'a> {
        Val::Str(S::B(s))
    }

    /// A string the evaluation built.
    pub fn string(s: String) -> Val<'a> {
        Val::Str(S::O(Rc::from(s)))
    }

    pub fn int(i: i64) -> Val<'a> {
        Val::Int(i, IntK::Int)
    }

    /// The value of JSON `j` (absent: `None`) seen as Go type `ty`; a JSON shape that does not fit the
    /// type is an error message.
    pub fn typed(j: Option<&'a Json>, ty: &'static Ty) -> Result<Val<'a>, String> {
        let mismatch = |j: &Json| {
            format!(
                "data of Go type {} holds JSON {}",
                schema::go_name(ty),
                kind(j)
            )
        };
        let j = j.unwrap_or(&NULL);
        Ok(match ty {
            Ty::Str => match j {
                Json::Null => Val::borrowed(""),
                Json::String(s) => Val::borrowed(s),
                other => return Err(mismatch(other)),
            },
            Ty::Int(k) => match j {
                Json::Null => Val::Int(0, *k),
                Json::Number(n) => match n.as_i64() {
                    Some(i) => Val::Int(i, *k),
                    None => match n.as_f64() {
                        Some(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Val::Int(f as i64, *k),
                        _ => return Err(mismatch(j)),
                    },
                },
                other => return Err(mismatch(other)),
            },
            Ty::Bool => match j {
                Json::Null => Val::Bool(false),
                Json::Bool(b) => Val::Bool(*b),
                other => return Err(mismatch(other)),
            },
            Ty::Any => match j {
                Json::Null => Val::Nil,
                Json::Bool(b) => Val::Bool(*b),
                Json::Number(n) => Val::Float(n.as_f64().unwrap_or(0.0)),
                Json::String(s) => Val::borrowed(s),
                Json::Array(_) => Val::Data(j, &SLICE_ANY),
                Json::Object(_) => Val::Data(j, &schema::MAP_ANY),
            },
            Ty::Enum(e) => match j {
                Json::Null => Val::Enum(0, e),
                Json::Number(n) => Val::Enum(n.as_i64().ok_or_else(|| mismatch(j))?, e),
                Json::String(s) => match e.names.iter().position(|n| n == s) {
                    Some(i) => Val::Enum(i as i64, e),
                    None => return Err(format!("{s:?} is not a value of {}", e.go)),
                },
                other => return Err(mismatch(other)),
            },
            Ty::MapAny | Ty::MapStr | Ty::MapOpaque(_) | Ty::Struct(_) => match j {
                Json::Null | Json::Object(_) => Val::Data(j, ty),
                other => return Err(mismatch(other)),
            },
            Ty::Slice(..) => match j {
                Json::Null | Json::Array(_) => Val::Data(j, ty),
                other => return Err(mismatch(other)),
            },
            Ty::Ptr(_) | Ty::Wrapper(..) | Ty::Opaque(_) => Val::Data(j, ty),
        })
    }

    /// Go's type name of the value (for `printf` diagnostics and errors).
    pub fn type_name(&self) -> String {
        match self {
            Val::NoValue | Val::Nil => "<nil>".into(),
            Val::Bool(_) => "bool".into(),
            Val::Int(_, k) => k.go_name().into(),
            Val::Float(_) => "float64".into(),
            Val::Str(_) => "string".into(),
            Val::Enum(_, e) => e.go.into(),
            Val::Data(_, ty) => schema::go_name(ty),
            Val::List(_) => "[]interface {}".into(),
            Val::Dict(_) => "map[string]interface {}".into(),
            Val::StrDict(_) => "map[string]string".into(),
        }
    }

    /// Go's `text/template` truth (`isTrue`).
    pub fn truth(&self) -> bool {
        match self {
            Val::NoValue | Val::Nil => false,
            Val::Bool(b) => *b,
            Val::Int(i, _) | Val::Enum(i, _) => *i != 0,
            Val::Float(f) => *f != 0.0,
            Val::Str(s) => !s.is_empty(),
            Val::List(l) => !l.is_empty(),
            Val::Dict(d) => !d.is_empty(),
            Val::StrDict(d) => !d.is_empty(),
            Val::Data(j, ty) => match ty {
                Ty::Struct(_) => true,
                Ty::Ptr(_) | Ty::Wrapper(..) | Ty::Opaque(_) => !j.is_null(),
                _ => match j {
                    Json::Array(a) => !a.is_empty(),
                    Json::Object(o) => !o.is_empty(),
                    _ => false,
                },
            },
        }
    }

    /// Go's `len`, or None where Go's `len` fails.
    pub fn len(&self) -> Option<usize> {
        match self {
            Val::Str(s) => Some(s.len()),
            Val::List(l) => Some(l.len()),
            Val::Dict(d) => Some(d.len()),
            Val::StrDict(d) => Some(d.len()),
            Val::Data(j, Ty::Slice(..) | Ty::MapAny | Ty::MapStr | Ty::MapOpaque(_)) => match j {
                Json::Array(a) => Some(a.len()),
                Json::Object(o) => Some(o.len()),
                _ => Some(0),
            },
            Val::Data(j, Ty::Ptr(inner)) if !j.is_null() => Val::Data(j, inner).len(),
            _ => None,
        }
    }

    /// A map's entries in sorted key order (None when not a map); keys of the data are borrowed, keys of
    /// maps the template built are shared.
    pub fn map_entries(&self) -> Option<Result<Vec<(S<'a>, Val<'a>)>, String>> {
        match self {
            Val::Dict(d) => Some(Ok(d
                .iter()
                .map(|(k, v)| (S::O(k.clone()), v.clone()))
                .collect())),
            Val::StrDict(d) => Some(Ok(d
                .iter()
                .map(|(k, v)| (S::O(k.clone()), Val::Str(S::O(v.clone()))))
                .collect())),
            Val::Data(j, ty @ (Ty::MapAny | Ty::MapStr | Ty::MapOpaque(_))) => {
                let elem = elem_ty(ty);
                let Json::Object(o) = j else {
                    return Some(Ok(Vec::new()));
                };
                let mut entries: Vec<(&'a String, &'a Json)> = o.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Some(
                    entries
                        .into_iter()
                        .map(|(k, v)| Ok((S::B(k.as_str()), Val::typed(Some(v), elem)?)))
                        .collect(),
                )
            }
            _ => None,
        }
    }

    /// A list's elements (None when not a list).
    pub fn list_items(&self) -> Option<Result<Vec<Val<'a>>, String>> {
        match self {
            Val::List(l) => Some(Ok(l.as_ref().clone())),
            Val::Data(j, Ty::Slice(elem, _)) => match j {
                Json::Array(a) => Some(a.iter().map(|e| Val::typed(Some(e), elem)).collect()),
                _ => Some(Ok(Vec::new())),
            },
            _ => None,
        }
    }

    /// The number of elements of a list without materialising them (None when not a list).
    pub fn list_len(&self) -> Option<usize> {
        match self {
            Val::List(l) => Some(l.len()),
            Val::Data(j, Ty::Slice(..)) => Some(j.as_array().map_or(0, Vec::len)),
            _ => None,
        }
    }

    /// Element `i` of a list (`i` < `list_len`), in O(1).
    pub fn list_get(&self, i: usize) -> Option<Result<Val<'a>, String>> {
        match self {
            Val::List(l) => l.get(i).cloned().map(Ok),
            Val::Data(j, Ty::Slice(elem, _)) => j
                .as_array()
                .and_then(|a| a.get(i))
                .map(|e| Val::typed(Some(e), elem)),
            _ => None,
        }
    }

    /// Map lookup; `Ok(None)` for an absent key, `None` when not a map.
    pub fn map_get(&self, key: &str) -> Option<Result<Option<Val<'a>>, String>> {
        match self {
            Val::Dict(d) => Some(Ok(d.get(key).cloned())),
            Val::StrDict(d) => Some(Ok(d.get(key).map(|s| Val::Str(S::O(s.clone()))))),
            Val::Data(j, ty @ (Ty::MapAny | Ty::MapStr | Ty::MapOpaque(_))) => {
                let elem = elem_ty(ty);
                Some(match j.field(key) {
                    None => Ok(None),
                    Some(v) => Val::typed(Some(v), elem).map(Some),
                })
            }
            _ => None,
        }
    }

    /// The zero value of a map's element type (what `index` gives for an absent key).
    pub fn map_zero(&self) -> Val<'a> {
        match self {
            Val::StrDict(_) | Val::Data(_, Ty::MapStr) => Val::borrowed(""),
            Val::Data(_, Ty::MapOpaque(_)) => Val::Data(&NULL, &QUANTITY),
            _ => Val::Nil,
        }
    }

    pub fn is_map(&self) -> bool {
        matches!(
            self,
            Val::Dict(_)
                | Val::StrDict(_)
                | Val::Data(_, Ty::MapAny | Ty::MapStr | Ty::MapOpaque(_))
        )
    }
}

static QUANTITY: Ty = Ty::Opaque("resource.Quantity");

fn elem_ty(ty: &'static Ty) -> &'static Ty {
    match ty {
        Ty::MapStr => &schema::STR,
        Ty::MapOpaque(_) => &QUANTITY,
        _ => &schema::ANY,
    }
}

fn kind(j: &Json) -> &'static str {
    match j {
        Json::Null => "null",
        Json::Bool(_) => "bool",
        Json::Number(_) => "number",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}
