//! Go's `strconv` as the printers need it: float formatting (`FormatFloat`) and quoting (`Quote`, and
//! the double-quoted strings of `encoding/json` and go-yaml).

use std::fmt::Write as _;

use super::super::state::{unsupported, R};

/// Decimal digits of a finite float: digits without leading or trailing zeros (at least "0"), and the
/// position of the decimal point relative to them (Go's `decimalSlice` `d`, `dp`).
pub(super) fn digits(f: f64, sig: Option<usize>) -> (bool, Vec<u8>, i32) {
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
pub(super) fn format_float(f: f64, verb: char, prec: Option<usize>, sharp: bool) -> R<String> {
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

pub(super) fn fmt_f(out: &mut String, d: &[u8], dp: i32, frac: usize) {
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

pub(super) fn is_go_printable(c: char) -> bool {
    !(c.is_control()
        || matches!(c as u32,
            0x00A0 | 0x00AD | 0x1680 | 0x2000..=0x200F | 0x2028..=0x202F | 0x205F..=0x206F | 0x3000 | 0xFEFF
            | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF))
}

/// Writes `s` in double quotes: `"`, `\`, newline, carriage return and tab escaped with a backslash,
/// as every quoting here (Go's `strconv.Quote`, `encoding/json`, go-yaml) does; `other` writes the rest.
pub(super) fn quote_into(s: &str, out: &mut String, other: impl Fn(char, &mut String)) {
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

pub(super) fn u_escape(c: char, out: &mut String) {
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
