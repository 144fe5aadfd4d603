//! Standard base64 (RFC 4648 §4, with padding) for the AdmissionReview's `patch` field.
//!
//! The patch is the bulk of a success response (5 KiB for the `hello` pod, 6.8 KiB encoded), and the
//! general-purpose encoder of the `base64` crate spent ~7% of a `hello` injection on it (callgrind: ~7
//! instructions per input byte, one table lookup per output character). This one looks up two output
//! characters at a time in a 4096-entry table of pairs, six input bytes per step: about half the
//! instructions. The `base64` crate stays the reference in the tests.

/// The standard alphabet.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Every 12-bit value as its two base64 characters, first character in the low byte.
static PAIRS: [u16; 4096] = pairs();

const fn pairs() -> [u16; 4096] {
    let mut t = [0u16; 4096];
    let mut i = 0;
    while i < 4096 {
        t[i] = ALPHABET[i >> 6] as u16 | (ALPHABET[i & 63] as u16) << 8;
        i += 1;
    }
    t
}

/// The two characters of the 12 bits of `n` above bit `shift`, as a `u64` in the low 16 bits.
fn pair(n: u64, shift: u32) -> u64 {
    u64::from(PAIRS[(n >> shift) as usize & 0xfff])
}

/// How many bytes [`encode_into`] appends for `len` input bytes.
pub const fn encoded_len(len: usize) -> usize {
    len.div_ceil(3) * 4
}

/// Appends the padded standard base64 encoding of `input` to `out`.
pub fn encode_into(input: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(input.len()));
    // Six input bytes (four 12-bit pairs) per step, read as one big-endian word of eight (so the loop
    // stops while at least eight are left), written as one little-endian word of eight characters.
    let mut i = 0;
    while let Some(word) = input.get(i..i + 8) {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            break;
        };
        let n = u64::from_be_bytes(word);
        let w = pair(n, 52) | pair(n, 40) << 16 | pair(n, 28) << 32 | pair(n, 16) << 48;
        out.extend_from_slice(&w.to_le_bytes());
        i += 6;
    }
    // The last 2-7 bytes: whole groups of three, then one or two with padding.
    for g in input[i..].chunks(3) {
        let b = [
            g[0],
            g.get(1).copied().unwrap_or(0),
            g.get(2).copied().unwrap_or(0),
        ];
        let n = u64::from(b[0]) << 16 | u64::from(b[1]) << 8 | u64::from(b[2]);
        let mut quad = (pair(n, 12) | pair(n, 0) << 16).to_le_bytes();
        if g.len() < 3 {
            quad[3] = b'=';
        }
        if g.len() < 2 {
            quad[2] = b'=';
        }
        out.extend_from_slice(&quad[..4]);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ::base64::Engine as _;
    use proptest::prelude::*;

    fn encode(input: &[u8]) -> String {
        let mut out = b"prefix:".to_vec();
        encode_into(input, &mut out);
        let s = String::from_utf8(out).unwrap();
        s.strip_prefix("prefix:").unwrap().to_string()
    }

    #[test]
    fn rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
            ("foobarb", "Zm9vYmFyYg=="),
        ] {
            assert_eq!(encode(input.as_bytes()), want, "{input:?}");
        }
    }

    #[test]
    fn every_byte_value_in_every_position() {
        let input: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for skip in 0..6 {
            let input = &input[skip..];
            assert_eq!(
                encode(input),
                ::base64::engine::general_purpose::STANDARD.encode(input)
            );
        }
    }

    proptest! {
        #[test]
        fn same_as_the_base64_crate(input in proptest::collection::vec(any::<u8>(), 0..200)) {
            prop_assert_eq!(encode(&input), ::base64::engine::general_purpose::STANDARD.encode(&input));
            prop_assert_eq!(encode(&input).len(), encoded_len(input.len()));
        }
    }
}
