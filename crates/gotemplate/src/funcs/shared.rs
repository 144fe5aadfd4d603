//! What the functions of more than one origin share: reading their arguments, charging a map lookup,
//! case mapping, indenting lines and marshalling to JSON or YAML.

use super::super::print;
use super::super::state::{new_str, Exec, E, R};
use super::super::value::Val;

/// A string argument (its parameter type is `string`).
pub(super) fn s<'v>(v: &'v Val<'_>) -> &'v str {
    match v {
        Val::Str(s) => s,
        _ => "",
    }
}

/// An integer argument (its parameter type is `int`).
pub(super) fn i(v: &Val<'_>) -> i64 {
    match v {
        Val::Int(i, _) => *i,
        _ => 0,
    }
}

/// Charges a map lookup of a key of `len` bytes: hashed once in the data's maps, compared about log2(n)
/// times in the template's sorted maps.
pub(super) fn charge_lookup(ex: &mut Exec<'_, '_>, map: &Val<'_>, len: usize) -> R<()> {
    let n = match map {
        Val::Dict(d) => d.len(),
        Val::StrDict(d) => d.len(),
        _ => 1,
    };
    let log = (usize::BITS - n.leading_zeros()) as usize;
    ex.read(len.saturating_mul(log.max(1)))
}

/// `strings.ToLower`: Istio's `toLower` and sprig's `lower`.
pub(super) fn lower<'a>(ex: &mut Exec<'a, '_>, a: Vec<Val<'a>>) -> R<Val<'a>> {
    map_case(ex, s(&a[0]), str::to_lowercase)
}

/// Case mapping reads every byte and may write up to three bytes per byte read.
pub(super) fn map_case<'a>(
    ex: &mut Exec<'a, '_>,
    text: &str,
    map: fn(&str) -> String,
) -> R<Val<'a>> {
    ex.check_size(text.len())?;
    ex.read(text.len())?;
    new_str(ex, map(text))
}

/// Istio's `indent` (every line but the first padded with `n` spaces) or, with `nindent`, sprig's
/// `nindent` (a newline, then every line padded).
pub(super) fn indent<'a>(ex: &mut Exec<'a, '_>, n: i64, text: &str, nindent: bool) -> R<Val<'a>> {
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
    if nindent {
        out.push('\n');
    }
    for (idx, line) in text.split('\n').enumerate() {
        if idx > 0 {
            out.push('\n');
        }
        if idx > 0 || nindent {
            out.push_str(&pad);
        }
        out.push_str(line);
    }
    new_str(ex, out)
}

/// The text Go's `json.Marshal` (or, with `yaml`, sigs.k8s.io/yaml's `Marshal`) writes for a value, or
/// None where Go's encoder fails: only on NaN and infinities (Istio's `toYaml` and sprig's `toJson` then
/// give "", Istio's `structToJSON` "{}").
pub(super) fn marshal<'a>(ex: &mut Exec<'a, '_>, v: &Val<'a>, yaml: bool) -> R<Option<String>> {
    let j = match print::to_json(ex, v, 0, !yaml) {
        Ok(j) => j,
        Err(E::Eval(_)) => return Ok(None),
        Err(other) => return Err(other),
    };
    let out = if yaml {
        print::to_yaml(&j)
    } else {
        let mut out = String::new();
        print::write_json(&j, &mut out);
        out
    };
    // The text written (then copied by new_str).
    ex.check_size(out.len())?;
    ex.touched(out.len());
    Ok(Some(out))
}
