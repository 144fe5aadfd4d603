//! Go's `fmt`: `%v` and the `printf` verbs over template values (`printArg`, `printValue`, `Sprintf`,
//! `Sprint`), with the diagnostics Go writes for a wrong, missing or extra operand.

use std::fmt::Write as _;

use super::super::schema::{IntK, Ty};
use super::super::state::{unsupported, Exec, E, R};
use super::super::value::Val;
use super::strconv::{format_float, go_quote};

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
