//! Compact JSON output of a `serde_json::Value`, byte for byte what `serde_json::to_writer` writes, for
//! the webhook's hot path (the patch), with the JSON text of values already written before reused.
//!
//! Why not serde_json: the render memo (`memo`) keeps the JSON text of each container and volume a
//! template rendered, and an injected pod's patch mostly adds exactly those items. [`write_value_known`]
//! writes such an item's stored text instead of serialising it again, after checking that the item is
//! still identical to the one the text was made from (key order included): serialising a `hello`
//! pod's patch values cost ~70 k instructions (callgrind), a fifth of an injection, and the check a
//! fraction of that. The writer itself also reserves once per string and checks eight bytes at a time
//! for anything that needs escaping (most strings in a pod need none).
//!
//! Numbers are rare in pods and their formatting (itoa/ryu) must match serde_json exactly, so they are
//! written by serde_json itself.

use serde_json::Value;

use crate::fields::Fields;

/// A value whose JSON text is already known (from [`write_value`]).
#[derive(Debug, Clone, Copy)]
pub struct Known<'a> {
    pub value: &'a Value,
    pub text: &'a str,
}

/// Where [`write_value_known`] wrote a stored text: the index of the [`Known`] value in the slice it was
/// given, and the value it stood for. The pointer only identifies that value (`std::ptr::eq`) while the
/// caller still holds it unchanged; it is never dereferenced.
#[derive(Debug, Clone, Copy)]
pub struct Reuse {
    pub known: usize,
    pub at: *const Value,
}

/// Appends the compact JSON text of `v` to `out`.
pub fn write_value(out: &mut Vec<u8>, v: &Value) {
    write_value_known(out, v, &[], &mut Vec::new());
}

/// [`write_value`], writing the stored text of an object that is identical to a [`Known`] value, key
/// order included: `v` itself or an item of a list in `v` (containers and volumes are list items; an
/// object's fields, such as a container's env entries, are not looked up). Only objects with a string
/// `name` are looked up, by that name first. Each use of a stored text is recorded in `reused`.
pub fn write_value_known(
    out: &mut Vec<u8>,
    v: &Value,
    known: &[Known<'_>],
    reused: &mut Vec<Reuse>,
) {
    if let (false, Value::Object(map)) = (known.is_empty(), v) {
        if let Some(Value::String(name)) = map.field("name") {
            let found = known.iter().enumerate().find(|(_, k)| {
                k.value.field("name").and_then(Value::as_str) == Some(name.as_str())
                    && identical(k.value, v)
            });
            if let Some((i, k)) = found {
                out.extend_from_slice(k.text.as_bytes());
                reused.push(Reuse { known: i, at: v });
                return;
            }
        }
    }
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            // Writing a number into a Vec cannot fail (serde_json only fails on I/O and on map keys that
            // are not strings); an error would leave `out` as it was.
            let _ = serde_json::to_writer(&mut *out, n);
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            let mut first = true;
            for item in items {
                if !first {
                    out.push(b',');
                }
                first = false;
                write_value_known(out, item, known, reused);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            let mut first = true;
            for (k, item) in map {
                if !first {
                    out.push(b',');
                }
                first = false;
                write_str(out, k);
                out.push(b':');
                write_value_known(out, item, &[], reused);
            }
            out.push(b'}');
        }
    }
}

/// Appends `s` as a JSON string literal, escaped as serde_json escapes: `"` and `\` with a backslash,
/// `\b \f \n \r \t` by name, other control characters as `\u00XX`; everything else (including `/`, DEL
/// and non-ASCII) as is.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0; // bytes[start..i] are pending, none needs escaping
    let mut i = 0;
    while i + 8 <= bytes.len() {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[i..i + 8]);
        if !needs_escape(u64::from_le_bytes(word)) {
            i += 8;
            continue;
        }
        for &b in &bytes[i..i + 8] {
            if escaped(b) {
                out.extend_from_slice(&bytes[start..i]);
                write_escape(out, b);
                start = i + 1;
            }
            i += 1;
        }
    }
    // The last 0-7 bytes: one word test too, padded with a byte that needs no escaping (most strings
    // in a pod are short keys and values, so this is the common case).
    let rest = &bytes[i..];
    let mut word = [b'a'; 8];
    word[..rest.len()].copy_from_slice(rest);
    if needs_escape(u64::from_le_bytes(word)) {
        for &b in rest {
            if escaped(b) {
                out.extend_from_slice(&bytes[start..i]);
                write_escape(out, b);
                start = i + 1;
            }
            i += 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Equality including the order of object keys (what makes two values' JSON texts equal).
pub fn identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => bytes_eq(x.as_bytes(), y.as_bytes()),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| identical(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|((ka, va), (kb, vb))| {
                    bytes_eq(ka.as_bytes(), kb.as_bytes()) && identical(va, vb)
                })
        }
        _ => a == b,
    }
}

/// `a == b` for byte strings, without a call to `memcmp` up to 16 bytes: most keys and values in a pod
/// are that short, and the call costs more than the comparison (the identity checks of the memo key
/// and of the stored texts compare a few hundred such strings per injection).
fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(w)
    };
    match n {
        // Two overlapping words cover every byte.
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        0..=7 => a.iter().zip(b).all(|(x, y)| x == y),
        _ => a == b,
    }
}

fn escaped(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Whether any of the eight bytes of `w` is below 0x20, `"` or `\` (exact: the classic "has a zero byte"
/// and "has a byte less than n" tests are exact about whether such a byte exists).
fn needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let q = w ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q & HIGH;
    let bs = w ^ (ONES * u64::from(b'\\'));
    let backslash = bs.wrapping_sub(ONES) & !bs & HIGH;
    (below_space | quote | backslash) != 0
}

fn write_escape(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\x08' => out.extend_from_slice(b"\\b"),
        b'\x0c' => out.extend_from_slice(b"\\f"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
        ]),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn ours(v: &Value) -> String {
        let mut out = Vec::new();
        write_value(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn same_bytes_as_serde_json() {
        let every_byte: String = (0u8..=127).map(char::from).collect();
        for v in [
            json!(null),
            json!(true),
            json!([]),
            json!({}),
            json!(""),
            json!({"a": [1, -2, 3.5, 1e300, 0.1, u64::MAX, i64::MIN], "b": {"c": null, "d": false}}),
            json!("12345678\"12345678\\x\u{1f}\u{7f}/é✓𝄞"),
            json!(every_byte),
            json!({"k\"ey\n": "\t\r\u{8}\u{c}\u{0}"}),
            json!([
                "exactly8",
                "sixteen-bytes-ok",
                "seven77",
                "\"2345678",
                "1234567\""
            ]),
        ] {
            assert_eq!(ours(&v), serde_json::to_string(&v).unwrap(), "{v}");
        }
    }

    #[test]
    fn known_text_is_used_only_for_identical_values() {
        let c = json!({"name": "istio-proxy", "image": "p"});
        let other = json!({"name": "other", "image": "o"});
        let known = [
            Known {
                value: &other,
                text: "OTHER",
            },
            Known {
                value: &c,
                text: "KNOWN",
            },
        ];
        let v = json!([
            c.clone(),
            {"name": "istio-proxy", "image": "q"},
            {"image": "p", "name": "istio-proxy"},
            {"x": c.clone()},
            [c.clone()],
            {"name": "other", "image": "p"}
        ]);
        let mut whole = Vec::new();
        let mut reused = Vec::new();
        write_value_known(&mut whole, &c, &known, &mut reused);
        assert_eq!(whole, b"KNOWN");
        assert_eq!(reused.len(), 1);
        assert!(reused[0].known == 1 && std::ptr::eq(reused[0].at, &c));
        let mut out = Vec::new();
        let mut reused = Vec::new();
        write_value_known(&mut out, &v, &known, &mut reused);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"[KNOWN,{"name":"istio-proxy","image":"q"},{"image":"p","name":"istio-proxy"},{"x":{"name":"istio-proxy","image":"p"}},[KNOWN],{"name":"other","image":"p"}]"#
        );
        // Exactly the two uses are recorded, each with the value it stood for.
        assert_eq!(reused.len(), 2);
        assert!(reused.iter().all(|r| r.known == 1));
        assert!(std::ptr::eq(reused[0].at, &v[0]));
        assert!(std::ptr::eq(reused[1].at, &v[4][0]));
    }

    #[test]
    fn bytes_eq_is_slice_equality() {
        let base: Vec<u8> = (0u8..40).collect();
        for n in 0..40 {
            let a = &base[..n];
            assert!(bytes_eq(a, &base[..n]));
            assert!(!bytes_eq(a, &base[..n + 1]));
            for i in 0..n {
                let mut b = a.to_vec();
                b[i] ^= 0x80;
                assert!(!bytes_eq(a, &b), "length {n}, byte {i}");
            }
        }
    }

    #[test]
    fn word_test_matches_the_byte_test() {
        for b in 0u8..=255 {
            for pos in 0..8 {
                let mut w = *b"abcdefgh";
                w[pos] = b;
                assert_eq!(
                    needs_escape(u64::from_le_bytes(w)),
                    escaped(b),
                    "byte {b:#x} at {pos}"
                );
            }
        }
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            any::<String>().prop_map(Value::String),
            "[ -~\\x00-\\x1f\"\\\\]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec(("[a-z\"\\\\/~\\x00-\\x1f]{0,12}", inner), 0..8)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_value_same_bytes_as_serde_json(v in arb_value()) {
            prop_assert_eq!(ours(&v), serde_json::to_string(&v).unwrap());
        }
    }
}
