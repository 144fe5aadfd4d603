//! How values print: Go's `fmt` (`%v` and the `printf` verbs, `strconv` float and quote formatting),
//! `encoding/json` (for `toJson`/`toJSON`/`toYaml`) and the YAML that sigs.k8s.io/yaml writes.

use std::fmt::Write as _;

use serde_json::{Map, Number, Value as Json};

use super::schema::{IntK, Ty};
use super::state::{unsupported, Exec, E, R};
use super::value::Val;
use crate::fields::Fields;

/// `{{ X }}`: Go's `printValue` (a missing value prints `<no value>`).
pub(crate) fn print_value<'a>(ex: &mut Exec<'a, '_>, v: &Val<'a>) -> R<String> {
    if matches!(v, Val::NoValue) {
        return Ok("<no value>".to_string());
    }
    let mut out = String::new();
    fmt_value(ex, v, &Spec::plain('v'), &mut out, 0)?;
    Ok(out)
}

/// A parsed `printf` directive.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Spec {
    minus: bool,
    plus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    width: Option<usize>,
    prec: Option<usize>,
    verb: char,
}

impl Spec {
    pub fn plain(verb: char) -> Spec {
        Spec {
            verb,
            ..Spec::default()
        }
    }
}

fn pad(spec: &Spec, s: &str, numeric: bool, out: &mut String) {
    let n = s.chars().count();
    let w = spec.width.unwrap_or(0);
    if n >= w {
        out.push_str(s);
        return;
    }
    let fill = w - n;
    if spec.minus {
        out.push_str(s);
        out.extend(std::iter::repeat_n(' ', fill));
    } else if spec.zero {
        let (sign, rest) =
            if numeric && (s.starts_with('-') || s.starts_with('+') || s.starts_with(' ')) {
                s.split_at(1)
            } else {
                ("", s)
            };
        out.push_str(sign);
        out.extend(std::iter::repeat_n('0', fill));
        out.push_str(rest);
    } else {
        out.extend(std::iter::repeat_n(' ', fill));
        out.push_str(s);
    }
}

fn bad_verb<'a>(
    ex: &mut Exec<'a, '_>,
    spec: &Spec,
    v: &Val<'a>,
    out: &mut String,
    depth: usize,
) -> R<()> {
    out.push_str("%!");
    out.push(spec.verb);
    out.push('(');
    typed_operand(ex, v, out, depth + 1)?;
    out.push(')');
    Ok(())
}

/// An operand as Go's `fmt` shows a wrong or extra one: `<nil>`, or its type, `=` and its `%v`.
fn typed_operand<'a>(ex: &mut Exec<'a, '_>, v: &Val<'a>, out: &mut String, depth: usize) -> R<()> {
    match v {
        Val::Nil | Val::NoValue => out.push_str("<nil>"),
        other => {
            out.push_str(&other.type_name());
            out.push('=');
            fmt_value(ex, other, &Spec::plain('v'), out, depth)?;
        }
    }
    Ok(())
}

/// Formats one operand with a verb, as Go's `fmt` `printArg`/`printValue` do.
pub(crate) fn fmt_value<'a>(
    ex: &mut Exec<'a, '_>,
    v: &Val<'a>,
    spec: &Spec,
    out: &mut String,
    depth: usize,
) -> R<()> {
    ex.descend(depth)?;
    if out.len() > ex.limits.max_output_bytes {
        return Err(E::Limit("output bytes", ex.limits.max_output_bytes));
    }
    if spec.sharp && spec.verb == 'v' {
        return unsupported("the %#v verb");
    }
    if let Val::List(_) | Val::Dict(_) | Val::StrDict(_) | Val::Data(..) = v {
        return fmt_composite(ex, v, spec, out, depth);
    }
    // A scalar: the bytes it writes are charged once written (a width or a precision was checked against
    // the output bound before, so one scalar writes at most that bound).
    let start = out.len();
    fmt_scalar(ex, v, spec, out, depth)?;
    let wrote = out.len().saturating_sub(start);
    ex.charge(wrote)?;
    ex.touched(wrote);
    Ok(())
}

fn fmt_scalar<'a>(
    ex: &mut Exec<'a, '_>,
    v: &Val<'a>,
    spec: &Spec,
    out: &mut String,
    depth: usize,
) -> R<()> {
    match v {
        // Inside a list or map a nil interface prints <nil> whatever the verb (Go's printValue).
        Val::NoValue | Val::Nil if spec.verb == 'v' || depth > 0 => pad(spec, "<nil>", false, out),
        Val::NoValue | Val::Nil => bad_verb(ex, spec, v, out, depth)?,
        Val::Bool(b) => match spec.verb {
            'v' | 't' => pad(spec, if *b { "true" } else { "false" }, false, out),
            _ => bad_verb(ex, spec, v, out, depth)?,
        },
        Val::Int(i, k) => fmt_int(ex, *i, *k, spec, v, out, depth)?,
        // Go calls String() on a Stringer for the verbs v, s, q, x and X.
        Val::Enum(i, e) => match spec.verb {
            'v' | 's' | 'q' | 'x' | 'X' => {
                let name = e
                    .names
                    .get(*i as usize)
                    .map_or_else(|| i.to_string(), |n| (*n).to_string());
                fmt_str(spec, &name, v, ex, out, depth)?
            }
            _ => fmt_int(ex, *i, IntK::Int32, spec, v, out, depth)?,
        },
        Val::Float(f) => match spec.verb {
            'v' | 'g' | 'G' | 'e' | 'E' | 'f' | 'F' => {
                let verb = if spec.verb == 'v' { 'g' } else { spec.verb };
                // Go's %e and %f default to precision 6; %g and %v to the shortest form.
                let prec = if matches!(verb, 'e' | 'E' | 'f' | 'F') {
                    spec.prec.or(Some(6))
                } else {
                    spec.prec
                };
                let mut s = format_float(*f, verb, prec, spec.sharp)?;
                if !s.starts_with('-') && !s.starts_with('+') {
                    if spec.plus {
                        s.insert(0, '+');
                    } else if spec.space {
                        s.insert(0, ' ');
                    }
                }
                let numeric = f.is_finite();
                pad(spec, &s, numeric, out)
            }
            'x' | 'X' | 'b' => return unsupported(format!("the %{} verb on floats", spec.verb)),
            _ => bad_verb(ex, spec, v, out, depth)?,
        },
        Val::Str(s) => fmt_str(spec, s, v, ex, out, depth)?,
        Val::List(_) | Val::Dict(_) | Val::StrDict(_) | Val::Data(..) => {
            fmt_composite(ex, v, spec, out, depth)?
        }
    }
    Ok(())
}

fn fmt_str<'a>(
    spec: &Spec,
    s: &str,
    v: &Val<'a>,
    ex: &mut Exec<'a, '_>,
    out: &mut String,
    depth: usize,
) -> R<()> {
    // Reading the text (padding counts its characters); a precision reads only its prefix.
    ex.read(match spec.prec {
        Some(p) => s.len().min(p.saturating_mul(4)),
        None => s.len(),
    })?;
    let s: &str = match spec.prec {
        Some(p) if matches!(spec.verb, 'v' | 's' | 'q' | 'x' | 'X') => {
            match s.char_indices().nth(p) {
                Some((i, _)) => &s[..i],
                None => s,
            }
        }
        _ => s,
    };
    match spec.verb {
        'v' | 's' => pad(spec, s, false, out),
        'q' => {
            if spec.sharp || spec.plus {
                return unsupported("the %#q and %+q verbs");
            }
            pad(spec, &go_quote(s), false, out)
        }
        'x' | 'X' => {
            if spec.sharp || spec.space {
                return unsupported("flags # and space with %x on strings");
            }
            let mut h = String::with_capacity(s.len() * 2);
            for b in s.bytes() {
                let _ = if spec.verb == 'x' {
                    write!(h, "{b:02x}")
                } else {
                    write!(h, "{b:02X}")
                };
            }
            pad(spec, &h, false, out)
        }
        _ => bad_verb(ex, spec, v, out, depth)?,
    }
    Ok(())
}

fn fmt_int<'a>(
    ex: &mut Exec<'a, '_>,
    i: i64,
    k: IntK,
    spec: &Spec,
    v: &Val<'a>,
    out: &mut String,
    depth: usize,
) -> R<()> {
    let mag = i.unsigned_abs();
    let mut digits = match spec.verb {
        'v' | 'd' => mag.to_string(),
        'x' => format!("{mag:x}"),
        'X' => format!("{mag:X}"),
        'o' | 'O' => format!("{mag:o}"),
        'b' => format!("{mag:b}"),
        'c' => {
            let c = u32::try_from(i)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or('\u{FFFD}');
            pad(spec, &c.to_string(), false, out);
            return Ok(());
        }
        'U' if i >= 0 && !spec.sharp => {
            pad(spec, &format!("U+{i:04X}"), false, out);
            return Ok(());
        }
        'U' => return unsupported("%U of a negative number or with #"),
        'q' => {
            let c = u32::try_from(i)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or('\u{FFFD}');
            let q = match c {
                '\'' => "'\\''".to_string(),
                '"' => "'\"'".to_string(),
                c => {
                    let inner = go_quote(&c.to_string());
                    format!("'{}'", &inner[1..inner.len() - 1])
                }
            };
            pad(spec, &q, false, out);
            return Ok(());
        }
        _ => return bad_verb(ex, spec, v, out, depth),
    };
    let _ = k;
    if let Some(p) = spec.prec {
        if digits.len() < p {
            digits.insert_str(0, &"0".repeat(p - digits.len()));
        }
        if p == 0 && i == 0 {
            digits.clear();
        }
    }
    if spec.sharp {
        match spec.verb {
            'x' => digits.insert_str(0, "0x"),
            'X' => digits.insert_str(0, "0X"),
            'o' if !digits.starts_with('0') => digits.insert(0, '0'),
            'b' => digits.insert_str(0, "0b"),
            _ => {}
        }
    }
    if spec.verb == 'O' {
        digits.insert_str(0, "0o");
    }
    if i < 0 {
        digits.insert(0, '-');
    } else if spec.plus {
        digits.insert(0, '+');
    } else if spec.space {
        digits.insert(0, ' ');
    }
    // Go ignores the zero flag when a precision is given for integers.
    let spec = if spec.prec.is_some() {
        Spec {
            zero: false,
            ..*spec
        }
    } else {
        *spec
    };
    pad(&spec, &digits, true, out);
    Ok(())
}

/// True for the k8s.io/api types whose generated `String` method handles a nil receiver by returning
/// `"nil"` (`func (this *SecurityContext) String() string { if this == nil { return "nil" } …`): Go's
/// `fmt` calls it for `%v` (and sprig's `strval` for `quote`, `toString`), so a nil pointer to one prints
/// `nil`, not `<nil>` (found by the template differential: `.Spec.SecurityContext | quote`). `v1.Time`
/// is excluded: its `String` comes from the embedded `time.Time` and panics on nil, which `fmt` prints
/// as `<nil>`.
fn kubernetes_stringer(ty: &Ty) -> bool {
    let name = match ty {
        Ty::Struct(st) => st.go,
        Ty::Opaque(name) => name,
        _ => return false,
    };
    name.starts_with("v1.") && name != "v1.Time"
}

fn fmt_composite<'a>(
    ex: &mut Exec<'a, '_>,
    v: &Val<'a>,
    spec: &Spec,
    out: &mut String,
    depth: usize,
) -> R<()> {
    if let Val::Data(j, ty) = v {
        match ty {
            Ty::Ptr(inner) | Ty::Wrapper(inner, _) => {
                if j.is_null() {
                    if spec.verb == 'v' {
                        let text = if matches!(ty, Ty::Ptr(_)) && kubernetes_stringer(inner) {
                            "nil"
                        } else {
                            "<nil>"
                        };
                        pad(spec, text, false, out);
                        return Ok(());
                    }
                    // Go formats a nil pointer with other verbs as an address.
                    return unsupported(format!(
                        "printing a nil {} with %{}",
                        v.type_name(),
                        spec.verb
                    ));
                }
                if depth == 0
                    && spec.verb == 'v'
                    && matches!(ty, Ty::Ptr(_))
                    && matches!(inner, Ty::Str | Ty::Int(_) | Ty::Bool)
                {
                    let inner_v = Val::typed(Some(j), inner).map_err(E::Unsupported)?;
                    return fmt_value(ex, &inner_v, spec, out, depth);
                }
                return unsupported(format!(
                    "printing a value of type {} with %{}",
                    v.type_name(),
                    spec.verb
                ));
            }
            Ty::Struct(s) => {
                return unsupported(format!(
                    "printing a {} struct with %{} (Go prints its fields positionally; use toYaml)",
                    s.go, spec.verb
                ))
            }
            Ty::Opaque(n) => {
                return unsupported(format!("printing a value of type {n} with %{}", spec.verb));
            }
            Ty::MapOpaque(n) if !j.is_null() => {
                return unsupported(format!("printing a value of type {n} with %{}", spec.verb));
            }
            _ => {}
        }
    }
    if let Some(n) = v.list_len() {
        ex.step(n)?;
        let items = v.list_items().unwrap_or(Ok(Vec::new()));
        let items = items.map_err(E::Unsupported)?;
        out.push('[');
        for (i, it) in items.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            fmt_value(ex, it, spec, out, depth + 1)?;
        }
        out.push(']');
        return Ok(());
    }
    if v.is_map() {
        ex.step(v.len().unwrap_or(0))?;
    }
    if let Some(entries) = v.map_entries() {
        let entries = entries.map_err(E::Unsupported)?;
        ex.charge_sorted(entries.iter().map(|(k, _)| k.len()))?;
        out.push_str("map[");
        for (i, (k, e)) in entries.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            fmt_value(ex, &Val::Str(k.clone()), spec, out, depth + 1)?;
            out.push(':');
            fmt_value(ex, e, spec, out, depth + 1)?;
        }
        out.push(']');
        return Ok(());
    }
    unsupported(format!("printing a value of type {}", v.type_name()))
}

/// Go's `fmt.Sprintf`.
pub(crate) fn sprintf<'a>(ex: &mut Exec<'a, '_>, format: &str, args: &[Val<'a>]) -> R<String> {
    ex.read(format.len())?;
    let mut out = String::new();
    let mut argi = 0;
    let mut chars = format.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        if out.len() > ex.limits.max_output_bytes {
            return Err(E::Limit("output bytes", ex.limits.max_output_bytes));
        }
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = Spec::default();
        while let Some(&(_, f)) = chars.peek() {
            match f {
                '-' => spec.minus = true,
                '+' => spec.plus = true,
                '#' => spec.sharp = true,
                ' ' => spec.space = true,
                '0' => spec.zero = !spec.minus,
                _ => break,
            }
            chars.next();
        }
        // Go's `fmt` `parsenum`: a digit met while the number is already above 1e6 ends the parse with
        // the rest of the format consumed (so the directive has no verb: `%!(NOVERB)`, and the arguments
        // left are `%!(EXTRA …)`); found by the template differential (`printf "%999999999d"`).
        let read_num = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| -> Result<Option<usize>, ()> {
            let mut n: Option<usize> = None;
            while let Some(&(_, d)) = chars.peek() {
                let Some(dv) = d.to_digit(10) else { break };
                if n.is_some_and(|n| n > 1_000_000) {
                    chars.by_ref().for_each(drop);
                    return Err(());
                }
                n = Some(n.unwrap_or(0) * 10 + dv as usize);
                chars.next();
            }
            Ok(n)
        };
        if matches!(chars.peek(), Some((_, '*' | '['))) {
            return unsupported("printf argument indexes and * widths");
        }
        spec.width = read_num(&mut chars).unwrap_or(None);
        // A `.` starts a precision only when something follows it (Go: `i+1 < end`).
        let mut ahead = chars.clone();
        if matches!(ahead.next(), Some((_, '.'))) && ahead.peek().is_some() {
            chars.next();
            if matches!(chars.peek(), Some((_, '*' | '['))) {
                return unsupported("printf argument indexes and * precisions");
            }
            spec.prec = Some(read_num(&mut chars).unwrap_or(None).unwrap_or(0));
        }
        if spec.minus {
            spec.zero = false;
        }
        let bound = ex.limits.max_output_bytes;
        if spec.width.is_some_and(|w| w > bound) || spec.prec.is_some_and(|p| p > bound) {
            return Err(E::Limit("output bytes", bound));
        }
        let Some((_, verb)) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        spec.verb = verb;
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(argi) else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        argi += 1;
        match verb {
            'T' => pad(&spec, &arg.type_name(), false, &mut out),
            'p' => return unsupported("the %p verb"),
            _ => fmt_value(ex, arg, &spec, &mut out, 0)?,
        }
    }
    if argi < args.len() {
        out.push_str("%!(EXTRA ");
        for (i, a) in args[argi..].iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            typed_operand(ex, a, &mut out, 0)?;
        }
        out.push(')');
    }
    ex.check_size(out.len())?;
    Ok(out)
}

/// Go's `fmt.Sprint` (`println`: `fmt.Sprintln`).
pub(crate) fn sprint<'a>(ex: &mut Exec<'a, '_>, args: &[Val<'a>], ln: bool) -> R<String> {
    let mut out = String::new();
    let mut prev_string = false;
    for (i, a) in args.iter().enumerate() {
        let is_string = matches!(a, Val::Str(_));
        if i > 0 && (ln || (!is_string && !prev_string)) {
            out.push(' ');
        }
        fmt_value(ex, a, &Spec::plain('v'), &mut out, 0)?;
        prev_string = is_string;
    }
    if ln {
        out.push('\n');
    }
    ex.check_size(out.len())?;
    Ok(out)
}

/// Decimal digits of a finite float: digits without leading or trailing zeros (at least "0"), and the
/// position of the decimal point relative to them (Go's `decimalSlice` `d`, `dp`).
fn digits(f: f64, sig: Option<usize>) -> (bool, Vec<u8>, i32) {
    let s = match sig {
        None => format!("{:e}", f.abs()),
        Some(n) => format!("{:.*e}", n.saturating_sub(1), f.abs()),
    };
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut d: Vec<u8> = mant.bytes().filter(u8::is_ascii_digit).collect();
    while d.len() > 1 && d.last() == Some(&b'0') {
        d.pop();
    }
    if d == b"0" {
        return (f.is_sign_negative(), Vec::new(), 0);
    }
    (f.is_sign_negative(), d, exp + 1)
}

fn exp_suffix(out: &mut String, e: char, exp: i32) {
    out.push(e);
    out.push(if exp < 0 { '-' } else { '+' });
    let a = exp.unsigned_abs();
    if a < 10 {
        out.push('0');
    }
    let _ = write!(out, "{a}");
}

/// Go's `strconv.FormatFloat(f, verb, prec, 64)` for the verbs e, E, f, F, g, G (`prec` None = shortest).
pub(crate) fn format_float(f: f64, verb: char, prec: Option<usize>, sharp: bool) -> R<String> {
    if f.is_nan() {
        return Ok("NaN".into());
    }
    if f.is_infinite() {
        return Ok(if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        });
    }
    if sharp {
        return unsupported("the # flag with float verbs");
    }
    let neg = f.is_sign_negative();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    match verb {
        'e' | 'E' => {
            let (_, d, dp) = match prec {
                None => digits(f, None),
                Some(p) => digits(f, Some(p + 1)),
            };
            let shown = prec.map_or(d.len().saturating_sub(1), |p| p);
            fmt_e(&mut out, &d, dp, shown, verb);
        }
        'f' | 'F' => match prec {
            Some(p) => {
                let s = format!("{:.*}", p, f.abs());
                out.push_str(&s);
            }
            None => {
                let (_, d, dp) = digits(f, None);
                fmt_f(&mut out, &d, dp, (d.len() as i32 - dp).max(0) as usize);
            }
        },
        _ => {
            let shortest = prec.is_none();
            let p = match prec {
                Some(0) => 1,
                Some(p) => p,
                None => 0,
            };
            let (_, d, dp) = if shortest {
                digits(f, None)
            } else {
                digits(f, Some(p))
            };
            let nd = d.len() as i32;
            let mut eprec = if shortest { 6 } else { p as i32 };
            if !shortest && eprec > nd && nd >= dp {
                eprec = nd;
            }
            let exp = if d.is_empty() { 0 } else { dp - 1 };
            let e = if verb == 'G' { 'E' } else { 'e' };
            if exp < -4 || exp >= eprec {
                fmt_e(&mut out, &d, dp, (nd - 1).max(0) as usize, e);
            } else {
                fmt_f(&mut out, &d, dp, (nd - dp).max(0) as usize);
            }
        }
    }
    Ok(out)
}

fn fmt_e(out: &mut String, d: &[u8], dp: i32, frac: usize, e: char) {
    out.push(*d.first().unwrap_or(&b'0') as char);
    if frac > 0 {
        out.push('.');
        for i in 1..=frac {
            out.push(*d.get(i).unwrap_or(&b'0') as char);
        }
    }
    let exp = if d.is_empty() { 0 } else { dp - 1 };
    exp_suffix(out, e, exp);
}

fn fmt_f(out: &mut String, d: &[u8], dp: i32, frac: usize) {
    if dp > 0 {
        for i in 0..dp as usize {
            out.push(*d.get(i).unwrap_or(&b'0') as char);
        }
    } else {
        out.push('0');
    }
    if frac > 0 {
        out.push('.');
        for i in 0..frac as i32 {
            let idx = dp + i;
            let c = if idx < 0 {
                b'0'
            } else {
                *d.get(idx as usize).unwrap_or(&b'0')
            };
            out.push(c as char);
        }
    }
}

fn is_go_printable(c: char) -> bool {
    !(c.is_control()
        || matches!(c as u32,
            0x00A0 | 0x00AD | 0x1680 | 0x2000..=0x200F | 0x2028..=0x202F | 0x205F..=0x206F | 0x3000 | 0xFEFF
            | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF))
}

/// Writes `s` in double quotes: `"`, `\`, newline, carriage return and tab escaped with a backslash,
/// as every quoting here (Go's `strconv.Quote`, `encoding/json`, go-yaml) does; `other` writes the rest.
fn quote_into(s: &str, out: &mut String, other: impl Fn(char, &mut String)) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => other(c, out),
        }
    }
    out.push('"');
}

fn u_escape(c: char, out: &mut String) {
    let _ = write!(out, "\\u{:04x}", c as u32);
}

/// Go's `strconv.Quote`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    quote_into(s, &mut out, |c, out| match c {
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\u{b}' => out.push_str("\\v"),
        c if is_go_printable(c) => out.push(c),
        c if (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if (c as u32) < 0x10000 => u_escape(c, out),
        c => {
            let _ = write!(out, "\\U{:08x}", c as u32);
        }
    });
    out
}

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

fn sorted_entries(o: &Map<String, Json>) -> Vec<(&String, &Json)> {
    let mut v: Vec<_> = o.iter().collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

/// Go's `encoding/json` number text.
fn json_number(n: &Number, out: &mut String) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else {
        let f = n.as_f64().unwrap_or(0.0);
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

/// YAML as sigs.k8s.io/yaml `Marshal` writes it (go-yaml v2 block style, keys sorted, sequences not
/// indented under their key, trailing newline). Scalars are quoted wherever YAML 1.1 would read them as
/// anything but the same string, so the text reads back to the same value.
pub(crate) fn to_yaml(j: &Json) -> String {
    let mut out = String::new();
    match j {
        Json::Object(o) if !o.is_empty() => yaml_map(o, 0, false, &mut out),
        Json::Array(a) if !a.is_empty() => yaml_seq(a, 0, false, &mut out),
        Json::String(s) if s.contains('\n') && literal_ok(s) => yaml_literal(s, 2, &mut out),
        other => {
            yaml_scalar(other, &mut out);
            out.push('\n');
        }
    }
    out
}

fn indent_to(n: usize, out: &mut String) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn yaml_map(o: &Map<String, Json>, indent: usize, first_inline: bool, out: &mut String) {
    for (i, (k, v)) in sorted_entries(o).into_iter().enumerate() {
        if i > 0 || !first_inline {
            indent_to(indent, out);
        }
        yaml_str(k, out);
        out.push(':');
        match v {
            Json::Object(m) if !m.is_empty() => {
                out.push('\n');
                yaml_map(m, indent + 2, false, out);
            }
            Json::Array(a) if !a.is_empty() => {
                out.push('\n');
                yaml_seq(a, indent, false, out);
            }
            Json::String(s) if s.contains('\n') && literal_ok(s) => {
                out.push(' ');
                yaml_literal(s, indent + 2, out);
            }
            other => {
                out.push(' ');
                yaml_scalar(other, out);
                out.push('\n');
            }
        }
    }
}

fn yaml_seq(a: &[Json], indent: usize, first_inline: bool, out: &mut String) {
    for (i, v) in a.iter().enumerate() {
        if i > 0 || !first_inline {
            indent_to(indent, out);
        }
        out.push_str("- ");
        match v {
            Json::Object(m) if !m.is_empty() => yaml_map(m, indent + 2, true, out),
            Json::Array(s) if !s.is_empty() => yaml_seq(s, indent + 2, true, out),
            Json::String(s) if s.contains('\n') && literal_ok(s) => {
                yaml_literal(s, indent + 2, out)
            }
            other => {
                yaml_scalar(other, out);
                out.push('\n');
            }
        }
    }
}

/// A literal block keeps the text exactly when its first line does not start with white space and it has
/// no control characters other than newlines and tabs.
fn literal_ok(s: &str) -> bool {
    !s.starts_with([' ', '\t', '\n'])
        && !s.ends_with("\n\n")
        && !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
        && !s.contains(['\u{85}', '\u{2028}', '\u{2029}', '\u{feff}'])
}

fn yaml_literal(s: &str, indent: usize, out: &mut String) {
    let (body, chomp) = match s.strip_suffix('\n') {
        Some(b) => (b, "|"),
        None => (s, "|-"),
    };
    out.push_str(chomp);
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            indent_to(indent, out);
            out.push_str(line);
        }
        out.push('\n');
    }
}

fn yaml_scalar(j: &Json, out: &mut String) {
    match j {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 1e21 {
                    let _ = write!(
                        out,
                        "{}",
                        f.abs() as u128 as i128 * if f < 0.0 { -1 } else { 1 }
                    );
                } else {
                    out.push_str(&format_float(f, 'g', None, false).unwrap_or_default());
                }
            }
        }
        Json::String(s) => yaml_str(s, out),
        Json::Array(_) => out.push_str("[]"),
        Json::Object(_) => out.push_str("{}"),
    }
}

const YAML11_WORDS: &[&str] = &[
    "y", "n", "yes", "no", "true", "false", "on", "off", "null", "~", "<<", "=", ".inf", "-.inf",
    "+.inf", ".nan",
];

/// Could YAML 1.1 read the text as a number or a timestamp (ints in any base, floats, sexagesimals, dates)?
fn numberish(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() || b"+-._:xXoOtTzZ ".contains(&b))
}

fn plain_ok(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if s.starts_with([' ', '\t']) || s.ends_with([' ', '\t', ':']) {
        return false;
    }
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) || numberish(s) {
        return false;
    }
    if YAML11_WORDS.contains(&s.to_ascii_lowercase().as_str()) {
        return false;
    }
    if s.contains(": ") || s.contains(" #") || s.contains(['\n', '\r']) {
        return false;
    }
    !s.chars().any(|c| {
        c.is_control() || !is_go_printable(c) || matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}')
    })
}

fn yaml_str(s: &str, out: &mut String) {
    if plain_ok(s) {
        out.push_str(s);
        return;
    }
    quote_into(s, out, |c, out| match c {
        c if c.is_control() || !is_go_printable(c) => u_escape(c, out),
        c => out.push(c),
    });
}
