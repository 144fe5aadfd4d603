//! Go's `fmt`: `%v` and the `printf` verbs over template values (`printArg`, `printValue`, `Sprintf`,
//! `Sprint`), with the diagnostics Go writes for a wrong, missing or extra operand.

use std::fmt::Write as _;
use std::iter::Peekable;
use std::str::CharIndices;

use super::super::schema::Ty;
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

/// Formats one operand with a verb onto `out`, as Go's `fmt` `printArg`/`printValue` do; `depth` is how
/// deep inside lists and maps the operand is.
pub(crate) fn fmt_value<'a>(
    ex: &mut Exec<'a, '_>,
    v: &Val<'a>,
    spec: &Spec,
    out: &mut String,
    depth: usize,
) -> R<()> {
    Printer { ex, out }.value(v, spec, depth)
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

/// Go's `fmt` printer state (`pp`): the evaluation, for its bounds and budget, and the text written.
struct Printer<'p, 'a, 'l> {
    ex: &'p mut Exec<'a, 'l>,
    out: &'p mut String,
}

impl<'a> Printer<'_, 'a, '_> {
    fn pad(&mut self, spec: &Spec, s: &str, numeric: bool) {
        let out = &mut *self.out;
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

    fn bad_verb(&mut self, v: &Val<'a>, spec: &Spec, depth: usize) -> R<()> {
        self.out.push_str("%!");
        self.out.push(spec.verb);
        self.out.push('(');
        self.typed_operand(v, depth + 1)?;
        self.out.push(')');
        Ok(())
    }

    /// An operand as Go's `fmt` shows a wrong or extra one: `<nil>`, or its type, `=` and its `%v`.
    fn typed_operand(&mut self, v: &Val<'a>, depth: usize) -> R<()> {
        match v {
            Val::Nil | Val::NoValue => self.out.push_str("<nil>"),
            other => {
                self.out.push_str(&other.type_name());
                self.out.push('=');
                self.value(other, &Spec::plain('v'), depth)?;
            }
        }
        Ok(())
    }

    fn value(&mut self, v: &Val<'a>, spec: &Spec, depth: usize) -> R<()> {
        self.ex.descend(depth)?;
        let bound = self.ex.limits.max_output_bytes;
        if self.out.len() > bound {
            return Err(E::Limit("output bytes", bound));
        }
        if spec.sharp && spec.verb == 'v' {
            return unsupported("the %#v verb");
        }
        if let Val::List(_) | Val::Dict(_) | Val::StrDict(_) | Val::Data(..) = v {
            return self.composite(v, spec, depth);
        }
        // A scalar: the bytes it writes are charged once written (a width or a precision was checked
        // against the output bound before, so one scalar writes at most that bound).
        let start = self.out.len();
        self.scalar(v, spec, depth)?;
        let wrote = self.out.len().saturating_sub(start);
        self.ex.charge(wrote)?;
        self.ex.touched(wrote);
        Ok(())
    }

    fn scalar(&mut self, v: &Val<'a>, spec: &Spec, depth: usize) -> R<()> {
        match v {
            // Inside a list or map a nil interface prints <nil> whatever the verb (Go's printValue).
            Val::NoValue | Val::Nil if spec.verb == 'v' || depth > 0 => {
                self.pad(spec, "<nil>", false)
            }
            Val::NoValue | Val::Nil => self.bad_verb(v, spec, depth)?,
            Val::Bool(b) => match spec.verb {
                'v' | 't' => self.pad(spec, if *b { "true" } else { "false" }, false),
                _ => self.bad_verb(v, spec, depth)?,
            },
            Val::Int(i, _) => self.int(*i, v, spec, depth)?,
            // Go calls String() on a Stringer for the verbs v, s, q, x and X.
            Val::Enum(i, e) => match spec.verb {
                'v' | 's' | 'q' | 'x' | 'X' => {
                    let name = e
                        .names
                        .get(*i as usize)
                        .map_or_else(|| i.to_string(), |n| (*n).to_string());
                    self.str(&name, v, spec, depth)?
                }
                _ => self.int(*i, v, spec, depth)?,
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
                    self.pad(spec, &s, f.is_finite())
                }
                'x' | 'X' | 'b' => {
                    return unsupported(format!("the %{} verb on floats", spec.verb))
                }
                _ => self.bad_verb(v, spec, depth)?,
            },
            Val::Str(s) => self.str(s, v, spec, depth)?,
            Val::List(_) | Val::Dict(_) | Val::StrDict(_) | Val::Data(..) => {
                self.composite(v, spec, depth)?
            }
        }
        Ok(())
    }

    /// The text `s` of the operand `v` (a string, or an enum's name).
    fn str(&mut self, s: &str, v: &Val<'a>, spec: &Spec, depth: usize) -> R<()> {
        // Reading the text (padding counts its characters); a precision reads only its prefix.
        self.ex.read(match spec.prec {
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
            'v' | 's' => self.pad(spec, s, false),
            'q' => {
                if spec.sharp || spec.plus {
                    return unsupported("the %#q and %+q verbs");
                }
                self.pad(spec, &go_quote(s), false)
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
                self.pad(spec, &h, false)
            }
            _ => self.bad_verb(v, spec, depth)?,
        }
        Ok(())
    }

    /// The integer `i` of the operand `v` (an integer, or an enum's number).
    fn int(&mut self, i: i64, v: &Val<'a>, spec: &Spec, depth: usize) -> R<()> {
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
                self.pad(spec, &c.to_string(), false);
                return Ok(());
            }
            'U' if i >= 0 && !spec.sharp => {
                self.pad(spec, &format!("U+{i:04X}"), false);
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
                self.pad(spec, &q, false);
                return Ok(());
            }
            _ => return self.bad_verb(v, spec, depth),
        };
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
        self.pad(&spec, &digits, true);
        Ok(())
    }

    fn composite(&mut self, v: &Val<'a>, spec: &Spec, depth: usize) -> R<()> {
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
                            self.pad(spec, text, false);
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
                        return self.value(&inner_v, spec, depth);
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
                    return unsupported(format!(
                        "printing a value of type {n} with %{}",
                        spec.verb
                    ));
                }
                Ty::MapOpaque(n) if !j.is_null() => {
                    return unsupported(format!(
                        "printing a value of type {n} with %{}",
                        spec.verb
                    ));
                }
                _ => {}
            }
        }
        if let Some(n) = v.list_len() {
            self.ex.step(n)?;
            let items = v.list_items().unwrap_or(Ok(Vec::new()));
            let items = items.map_err(E::Unsupported)?;
            self.out.push('[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    self.out.push(' ');
                }
                self.value(it, spec, depth + 1)?;
            }
            self.out.push(']');
            return Ok(());
        }
        if v.is_map() {
            self.ex.step(v.len().unwrap_or(0))?;
        }
        if let Some(entries) = v.map_entries() {
            let entries = entries.map_err(E::Unsupported)?;
            self.ex
                .charge_sorted(entries.iter().map(|(k, _)| k.len()))?;
            self.out.push_str("map[");
            for (i, (k, e)) in entries.iter().enumerate() {
                if i > 0 {
                    self.out.push(' ');
                }
                self.value(&Val::Str(k.clone()), spec, depth + 1)?;
                self.out.push(':');
                self.value(e, spec, depth + 1)?;
            }
            self.out.push(']');
            return Ok(());
        }
        unsupported(format!("printing a value of type {}", v.type_name()))
    }
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

/// Go's `fmt.Sprintf`.
pub(crate) fn sprintf<'a>(ex: &mut Exec<'a, '_>, format: &str, args: &[Val<'a>]) -> R<String> {
    ex.read(format.len())?;
    let mut out = String::new();
    let mut p = Printer { ex, out: &mut out };
    let mut argi = 0;
    let mut chars = format.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        let bound = p.ex.limits.max_output_bytes;
        if p.out.len() > bound {
            return Err(E::Limit("output bytes", bound));
        }
        if c != '%' {
            p.out.push(c);
            continue;
        }
        let mut spec = directive(&mut chars, bound)?;
        let Some((_, verb)) = chars.next() else {
            p.out.push_str("%!(NOVERB)");
            break;
        };
        spec.verb = verb;
        if verb == '%' {
            p.out.push('%');
            continue;
        }
        let Some(arg) = args.get(argi) else {
            let _ = write!(p.out, "%!{verb}(MISSING)");
            continue;
        };
        argi += 1;
        match verb {
            'T' => p.pad(&spec, &arg.type_name(), false),
            'p' => return unsupported("the %p verb"),
            _ => p.value(arg, &spec, 0)?,
        }
    }
    if argi < args.len() {
        p.out.push_str("%!(EXTRA ");
        for (i, a) in args[argi..].iter().enumerate() {
            if i > 0 {
                p.out.push_str(", ");
            }
            p.typed_operand(a, 0)?;
        }
        p.out.push(')');
    }
    let len = p.out.len();
    p.ex.check_size(len)?;
    Ok(out)
}

/// A directive's flags, width and precision, after its `%` (Go's `doPrintf`); the verb is the caller's
/// to read. A width or precision above the output bound is refused before anything is padded.
fn directive(chars: &mut Peekable<CharIndices<'_>>, bound: usize) -> R<Spec> {
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
    let read_num = |chars: &mut Peekable<CharIndices<'_>>| -> Result<Option<usize>, ()> {
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
    spec.width = read_num(chars).unwrap_or(None);
    // A `.` starts a precision only when something follows it (Go: `i+1 < end`).
    let mut ahead = chars.clone();
    if matches!(ahead.next(), Some((_, '.'))) && ahead.peek().is_some() {
        chars.next();
        if matches!(chars.peek(), Some((_, '*' | '['))) {
            return unsupported("printf argument indexes and * precisions");
        }
        spec.prec = Some(read_num(chars).unwrap_or(None).unwrap_or(0));
    }
    if spec.minus {
        spec.zero = false;
    }
    if spec.width.is_some_and(|w| w > bound) || spec.prec.is_some_and(|p| p > bound) {
        return Err(E::Limit("output bytes", bound));
    }
    Ok(spec)
}

/// Go's `fmt.Sprint` (`println`: `fmt.Sprintln`).
pub(crate) fn sprint<'a>(ex: &mut Exec<'a, '_>, args: &[Val<'a>], ln: bool) -> R<String> {
    let mut out = String::new();
    let mut p = Printer { ex, out: &mut out };
    let mut prev_string = false;
    for (i, a) in args.iter().enumerate() {
        let is_string = matches!(a, Val::Str(_));
        if i > 0 && (ln || (!is_string && !prev_string)) {
            p.out.push(' ');
        }
        p.value(a, &Spec::plain('v'), 0)?;
        prev_string = is_string;
    }
    if ln {
        p.out.push('\n');
    }
    let len = p.out.len();
    p.ex.check_size(len)?;
    Ok(out)
}
