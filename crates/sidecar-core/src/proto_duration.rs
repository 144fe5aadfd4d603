//! Protobuf JSON durations (`google.protobuf.Duration` as `"23s"`, `"1.500s"`), as Istio's config and
//! `protomarshal` print and read them.

/// Protobuf JSON duration text of `nanos` (the inverse of [`parse_duration_nanos`]): whole seconds as
/// `"23s"`, else 3, 6 or 9 fraction digits, a negative one with the sign in front of the magnitude.
pub fn format_duration_nanos(nanos: i128) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let abs = nanos.unsigned_abs();
    let (s, n) = (abs / 1_000_000_000, abs % 1_000_000_000);
    if n == 0 {
        format!("{sign}{s}s")
    } else if n % 1_000_000 == 0 {
        format!("{sign}{s}.{:03}s", n / 1_000_000)
    } else if n % 1_000 == 0 {
        format!("{sign}{s}.{:06}s", n / 1_000)
    } else {
        format!("{sign}{s}.{n:09}s")
    }
}

/// Parses a protobuf JSON duration (`<seconds>[.<fraction>]s`) into nanoseconds.
pub fn parse_duration_nanos(s: &str) -> Option<i128> {
    let body = s.strip_suffix('s')?;
    let (neg, body) = match body.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, body),
    };
    let (whole, frac) = match body.split_once('.') {
        Some((w, f)) => (w, f),
        None => (body, ""),
    };
    if whole.is_empty() && frac.is_empty() {
        return None;
    }
    if !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > 9
    {
        return None;
    }
    let secs: i128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos_str = frac.to_string();
    while nanos_str.len() < 9 {
        nanos_str.push('0');
    }
    let nanos: i128 = nanos_str.parse().ok()?;
    let total = secs.checked_mul(1_000_000_000)? + nanos;
    Some(if neg { -total } else { total })
}
