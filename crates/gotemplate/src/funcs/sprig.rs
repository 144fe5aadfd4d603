//! The sprig v3 functions of the subset (sprig's `TxtFuncMap`, which Istio's `inject.go`
//! `parseDryTemplate` installs under its own).

use std::collections::BTreeMap;
use std::rc::Rc;

use super::super::lex;
use super::super::print::{self, Spec};
use super::super::schema::{IntK, Ty};
use super::super::state::{eval_err, new_str, unsupported, Exec, E, P, R};
use super::super::value::Val;
use super::func::Func;
use super::shared::{self, charge_lookup, i, s};

use P::{Any, Bool, Int, MapAny, Str};

/// sprig's functions of the subset, in alphabetical order.
pub(super) const FUNCS: &[Func] = &[
    Func::new("append", &[Any, Any], None, append),
    Func::new("coalesce", &[], Some(Any), coalesce),
    Func::new("default", &[Any], Some(Any), default),
    Func::new("dict", &[], Some(Any), dict),
    Func::new("empty", &[Any], None, empty),
    Func::new("fail", &[Str], None, fail),
    Func::new("float64", &[Any], None, float64),
    Func::new("get", &[MapAny, Str], None, get),
    Func::new("hasKey", &[MapAny, Str], None, has_key),
    Func::new("hasPrefix", &[Str, Str], None, has_prefix),
    Func::new("hasSuffix", &[Str, Str], None, has_suffix),
    Func::new("int", &[Any], None, int),
    Func::new("int64", &[Any], None, int64),
    Func::new("join", &[Str, Any], None, join),
    Func::new("list", &[], Some(Any), list),
    Func::new("lower", &[Str], None, shared::lower),
    Func::new("nindent", &[Int, Str], None, nindent),
    Func::new("quote", &[], Some(Any), quote),
    Func::new("repeat", &[Int, Str], None, repeat),
    Func::new("replace", &[Str, Str, Str], None, replace),
    Func::new("split", &[Str, Str], None, split),
    Func::new("squote", &[], Some(Any), squote),
    Func::new("ternary", &[Any, Any, Bool], None, ternary),
    Func::new("toJson", &[Any], None, to_json),
    Func::new("toString", &[Any], None, to_string),
    Func::new("trim", &[Str], None, trim),
    Func::new("trimAll", &[Str, Str], None, trim_all),
    Func::new("trimPrefix", &[Str, Str], None, trim_prefix),
    Func::new("trimSuffix", &[Str, Str], None, trim_suffix),
    Func::new("trunc", &[Int, Str], None, trunc),
    Func::new("upper", &[Str], None, upper),
];

fn default<'a>(_: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    Ok(match a.get(1) {
        Some(v) if !is_empty(v) => v.clone(),
        _ => a[0].clone(),
    })
}

fn empty<'a>(_: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    Ok(Val::Bool(is_empty(&a[0])))
}

fn coalesce<'a>(_: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    Ok(a.iter().find(|v| !is_empty(v)).cloned().unwrap_or(Val::Nil))
}

fn ternary<'a>(_: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    Ok(if a[2].truth() {
        a[0].clone()
    } else {
        a[1].clone()
    })
}

fn quote<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    quoted(ex, &a, |ex, v| {
        let sv = strval(ex, v)?;
        let q = print::go_quote(&sv);
        ex.check_size(q.len())?;
        ex.touched(q.len());
        Ok(q)
    })
}

fn squote<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    quoted(ex, &a, |ex, v| {
        let mut out = String::from("'");
        print::fmt_value(ex, v, &Spec::plain('v'), &mut out, 0)?;
        out.push('\'');
        ex.check_size(out.len())?;
        Ok(out)
    })
}

/// `quote` and `squote`: each argument but nil quoted by `one`, joined with spaces.
fn quoted<'a>(
    ex: &mut Exec<'a, '_>,
    a: &[Val<'a>],
    one: impl Fn(&mut Exec<'a, '_>, &Val<'a>) -> R<String>,
) -> R<Val<'a>> {
    let mut parts = Vec::new();
    for v in a.iter().filter(|v| !matches!(v, Val::Nil)) {
        parts.push(one(ex, v)?);
    }
    let total = parts.iter().map(String::len).sum::<usize>() + parts.len();
    ex.check_size(total)?;
    new_str(ex, parts.join(" "))
}

fn to_json<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    match shared::marshal(ex, &a[0], false)? {
        Some(out) => new_str(ex, out),
        None => Ok(Val::str("")),
    }
}

fn nindent<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let n = i(&a[0]);
    if n < 0 {
        return eval_err("strings: negative Repeat count");
    }
    shared::indent(ex, n, s(&a[1]), true)
}

fn upper<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    shared::map_case(ex, s(&a[0]), str::to_uppercase)
}

fn trim<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    ex.read(s(&a[0]).len())?;
    new_str(ex, s(&a[0]).trim_matches(char::is_whitespace).to_string())
}

fn trim_all<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
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

fn trim_prefix<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    trim_affix(ex, &a, |text, prefix| text.strip_prefix(prefix))
}

fn trim_suffix<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    trim_affix(ex, &a, |text, suffix| text.strip_suffix(suffix))
}

/// `trimPrefix` and `trimSuffix`: the text (second) without the affix (first), when it has it.
fn trim_affix<'a>(
    ex: &mut Exec<'a, '_>,
    a: &[Val<'a>],
    strip: impl for<'t> Fn(&'t str, &'t str) -> Option<&'t str>,
) -> R<Val<'a>> {
    ex.read(s(&a[0]).len().min(s(&a[1]).len()))?;
    let kept = strip(s(&a[1]), s(&a[0])).unwrap_or(s(&a[1]));
    ex.check_size(kept.len())?;
    new_str(ex, kept.to_string())
}

fn has_prefix<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    ex.read(s(&a[0]).len().min(s(&a[1]).len()))?;
    Ok(Val::Bool(s(&a[1]).starts_with(s(&a[0]))))
}

fn has_suffix<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    ex.read(s(&a[0]).len().min(s(&a[1]).len()))?;
    Ok(Val::Bool(s(&a[1]).ends_with(s(&a[0]))))
}

fn replace<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
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

fn repeat<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
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

fn trunc<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
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

/// sprig's `split`: a map from "_0", "_1", … to the parts (`strings.Split`).
fn split<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
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

fn fail<'a>(_: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    Err(E::Fail(s(&a[0]).to_string()))
}

fn join<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
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

fn list<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    ex.step(a.len())?;
    ex.check_nesting(&a)?;
    Ok(Val::List(Rc::new(a)))
}

fn append<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    match a[0].list_items() {
        Some(items) => {
            ex.step(a[0].list_len().unwrap_or(0) + 1)?;
            let mut items = items.map_err(E::Unsupported)?;
            ex.check_nesting(&a[1..2])?;
            items.push(a[1].clone());
            Ok(Val::List(Rc::new(items)))
        }
        None => eval_err(format!("Cannot push on type {}", a[0].type_name())),
    }
}

fn dict<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
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

fn get<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    charge_lookup(ex, &a[0], s(&a[1]).len())?;
    Ok(match a[0].map_get(s(&a[1])) {
        Some(Ok(Some(v))) => v,
        Some(Err(m)) => return unsupported(m),
        _ => Val::borrowed(""),
    })
}

fn has_key<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    charge_lookup(ex, &a[0], s(&a[1]).len())?;
    Ok(Val::Bool(matches!(
        a[0].map_get(s(&a[1])),
        Some(Ok(Some(_)))
    )))
}

fn to_string<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    let out = strval(ex, &a[0])?;
    new_str(ex, out)
}

fn int<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    charge_parse(ex, &a[0])?;
    Ok(Val::Int(to_int(&a[0]), IntK::Int))
}

fn int64<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    charge_parse(ex, &a[0])?;
    Ok(Val::Int(to_int(&a[0]), IntK::Int64))
}

fn float64<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    charge_parse(ex, &a[0])?;
    Ok(Val::Float(to_float(&a[0])))
}

/// Parsing a string reads it (twice for int: the decimal point, then the digits).
fn charge_parse(ex: &mut Exec<'_, '_>, v: &Val<'_>) -> R<()> {
    if let Val::Str(t) = v {
        ex.read(t.len().saturating_mul(2))?;
    }
    Ok(())
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
            lex::parse_number(t)
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
