//! Decoding of Python string payloads copied out of the target, and their
//! `repr()`-style rendering for `--locals`.
//!
//! The bytes come from another process and may be garbage (a stale pointer,
//! a string freed mid-read), so nothing here panics: impossible code points
//! become U+FFFD and only an inconsistent header is an error.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    #[error("invalid PEP 393 string kind {0} (expected 1, 2 or 4)")]
    BadKind(u8),
    #[error("string payload of {len} bytes is not a whole number of {kind}-byte characters")]
    BadLength { len: usize, kind: u8 },
    #[error("string flagged ASCII has kind {0}, not 1")]
    AsciiNotKind1(u8),
}

/// PEP 393: `kind` 1/2/4 (bytes per char), `ascii` flag, `data` = the copied
/// payload (length*kind bytes). Kind 1 is latin-1 (with the `ascii` flag a
/// byte ≥ 0x80 cannot be right and becomes U+FFFD), kind 2 is UCS-2, kind 4
/// UCS-4, little-endian. Kind 2 is decoded unit by unit rather than as UTF-16
/// because CPython stores code points, not UTF-16: a surrogate there is a lone
/// surrogate code point even when two happen to be adjacent, and a Rust
/// string cannot hold one, so it becomes U+FFFD, as do values above U+10FFFF
/// in kind 4.
pub(crate) fn decode_pep393(kind: u8, ascii: bool, data: &[u8]) -> Result<String, DecodeError> {
    if ascii && kind != 1 {
        return Err(DecodeError::AsciiNotKind1(kind));
    }
    match kind {
        1 if ascii => Ok(data
            .iter()
            .map(|&b| {
                if b.is_ascii() {
                    char::from(b)
                } else {
                    char::REPLACEMENT_CHARACTER
                }
            })
            .collect()),
        1 => Ok(data.iter().map(|&b| char::from(b)).collect()),
        2 => {
            check_whole(data, kind)?;
            Ok(data
                .chunks_exact(2)
                .map(|u| code_point(u32::from(u16::from_le_bytes([u[0], u[1]]))))
                .collect())
        }
        4 => {
            check_whole(data, kind)?;
            Ok(decode_ucs4(data))
        }
        _ => Err(DecodeError::BadKind(kind)),
    }
}

fn check_whole(data: &[u8], kind: u8) -> Result<(), DecodeError> {
    if data.len().is_multiple_of(usize::from(kind)) {
        Ok(())
    } else {
        Err(DecodeError::BadLength {
            len: data.len(),
            kind,
        })
    }
}

fn code_point(cp: u32) -> char {
    char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// Little-endian UCS-4; a trailing partial unit becomes one U+FFFD.
fn decode_ucs4(data: &[u8]) -> String {
    let units = data.chunks_exact(4);
    let partial = !units.remainder().is_empty();
    let mut s: String = units
        .map(|u| code_point(u32::from_le_bytes([u[0], u[1], u[2], u[3]])))
        .collect();
    if partial {
        s.push(char::REPLACEMENT_CHARACTER);
    }
    s
}

/// The `state` word of PyASCIIObject → (kind, compact, ascii). Bit layout:
/// interned 2 bits, kind 3 bits, compact 1 bit, ascii 1 bit (same 3.3–3.13;
/// GCC allocates bit-fields from the least significant bit on x86-64).
pub(crate) fn parse_state(state: u32) -> (u8, bool, bool) {
    let kind = ((state >> 2) & 7) as u8;
    let compact = (state >> 5) & 1 != 0;
    let ascii = (state >> 6) & 1 != 0;
    (kind, compact, ascii)
}

/// Python 2 `unicode` payload of a UCS-4 build (`sys.maxunicode == 0x10FFFF`,
/// as pyenv builds it): 4 bytes per code point, little-endian.
pub(crate) fn decode_py2_unicode_ucs4(data: &[u8]) -> String {
    decode_ucs4(data)
}

/// Python 2 `str` is bytes with no declared encoding: shown as UTF-8 when it
/// is valid UTF-8 (the common case for source text), else as latin-1 so every
/// byte still shows as one character.
pub(crate) fn decode_py2_str(data: &[u8]) -> String {
    match std::str::from_utf8(data) {
        Ok(s) => s.to_owned(),
        Err(_) => data.iter().map(|&b| char::from(b)).collect(),
    }
}

#[cfg(test)]
/// repr-style rendering used by --locals, following CPython 3's `repr(str)`:
/// single quotes unless the text has a `'` and no `"`; `\\`, the chosen
/// quote, `\t`, `\n`, `\r` escaped; other ASCII controls and non-printable
/// characters as `\xNN`, `\uNNNN` or `\UNNNNNNNN`; printable non-ASCII kept.
/// When the rendering is longer than `max_chars` characters it is cut, at an
/// escape boundary, to at most `max_chars` and "..." is appended.
pub(crate) fn repr_str(s: &str, max_chars: usize) -> String {
    repr_str_counted(s, max_chars).0
}

/// [`repr_str`], and how many characters of `s` made it in.
pub(crate) fn repr_str_counted(s: &str, max_chars: usize) -> (String, u64) {
    let mut used = 0;
    let quote = choose_quote(s.contains('\''), s.contains('"'));
    let mut out = Limited::new(max_chars);
    out.push_char(quote);
    for c in s.chars() {
        let fits = match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => out.push_str(&format!("\\{c}")),
            c if c < ' ' || c == '\x7f' => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if c.is_ascii() || is_printable(c) => out.push_char(c),
            c => {
                let cp = u32::from(c);
                if cp <= 0xff {
                    out.push_str(&format!("\\x{cp:02x}"))
                } else if cp <= 0xffff {
                    out.push_str(&format!("\\u{cp:04x}"))
                } else {
                    out.push_str(&format!("\\U{cp:08x}"))
                }
            }
        };
        if !fits {
            return (out.finish(), used);
        }
        used += 1;
    }
    out.push_char(quote);
    (out.finish(), used)
}

#[cfg(test)]
/// repr-style rendering of bytes, following CPython 3's `repr(bytes)`:
/// `b'...'` (or `b"..."` when there is a `'` and no `"`), printable ASCII
/// kept, `\t` `\n` `\r` `\\` and the quote escaped, everything else `\xNN`.
/// Cut like [`repr_str`].
pub(crate) fn repr_bytes(b: &[u8], max_chars: usize) -> String {
    repr_bytes_counted(b, max_chars).0
}

/// [`repr_bytes`], and how many bytes of `b` made it in.
pub(crate) fn repr_bytes_counted(b: &[u8], max_chars: usize) -> (String, u64) {
    let mut used = 0;
    let quote = choose_quote(b.contains(&b'\''), b.contains(&b'"'));
    let mut out = Limited::new(max_chars);
    out.push_char('b');
    out.push_char(quote);
    for &byte in b {
        let c = char::from(byte);
        let fits = match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => out.push_str(&format!("\\{c}")),
            ' '..='~' => out.push_char(c),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        };
        if !fits {
            return (out.finish(), used);
        }
        used += 1;
    }
    out.push_char(quote);
    (out.finish(), used)
}

fn choose_quote(has_single: bool, has_double: bool) -> char {
    if has_single && !has_double {
        '"'
    } else {
        '\''
    }
}

/// CPython's `str.isprintable()` for one character: false for categories
/// Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs other than the space. Rust's
/// `escape_debug` escapes exactly those categories too (core's
/// `unicode::printable` is generated from the same rule), plus grapheme
/// extenders when they come first; placing the character second avoids that.
/// The two agree on every code point assigned in Python 3.12's Unicode 15;
/// they can differ only on characters assigned by a later Unicode version.
fn is_printable(c: char) -> bool {
    let mut buf = [0u8; 5];
    buf[0] = b'a';
    let len = 1 + c.encode_utf8(&mut buf[1..]).len();
    match std::str::from_utf8(&buf[..len]) {
        Ok(pair) => pair.escape_debug().nth(1) != Some('\\'),
        Err(_) => false,
    }
}

/// An output string that stops growing once `max` characters are used and
/// then ends with "...".
struct Limited {
    out: String,
    used: usize,
    max: usize,
    cut: bool,
}

impl Limited {
    fn new(max: usize) -> Limited {
        Limited {
            out: String::new(),
            used: 0,
            max,
            cut: false,
        }
    }

    /// Append `piece` (ASCII) whole, or cut here. Returns whether it fit.
    fn push_str(&mut self, piece: &str) -> bool {
        if self.reserve(piece.len()) {
            self.out.push_str(piece);
            true
        } else {
            false
        }
    }

    fn push_char(&mut self, c: char) -> bool {
        if self.reserve(1) {
            self.out.push(c);
            true
        } else {
            false
        }
    }

    fn reserve(&mut self, chars: usize) -> bool {
        if self.cut {
            return false;
        }
        if self.used + chars > self.max {
            self.cut = true;
            self.out.push_str("...");
            return false;
        }
        self.used += chars;
        true
    }

    fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BIG: usize = usize::MAX / 2;

    fn utf16le(units: &[u16]) -> Vec<u8> {
        units.iter().flat_map(|u| u.to_le_bytes()).collect()
    }

    fn ucs4le(cps: &[u32]) -> Vec<u8> {
        cps.iter().flat_map(|u| u.to_le_bytes()).collect()
    }

    #[test]
    fn pep393_kinds() {
        assert_eq!(decode_pep393(1, true, b"hello").unwrap(), "hello");
        assert_eq!(decode_pep393(1, false, b"caf\xe9").unwrap(), "café");
        assert_eq!(decode_pep393(1, true, b"caf\xe9").unwrap(), "caf\u{fffd}");
        assert_eq!(
            decode_pep393(2, false, &utf16le(&[0x4e2d, 0x6587])).unwrap(),
            "中文"
        );
        assert_eq!(
            decode_pep393(4, false, &ucs4le(&[0x1f600, 0x61])).unwrap(),
            "😀a"
        );
        assert_eq!(decode_pep393(1, false, b"").unwrap(), "");
    }

    #[test]
    fn pep393_lone_surrogates_and_bad_code_points() {
        // Two adjacent surrogates are two code points in CPython, not a pair.
        assert_eq!(
            decode_pep393(2, false, &utf16le(&[0xd83d, 0xde00, 0x41])).unwrap(),
            "\u{fffd}\u{fffd}A"
        );
        assert_eq!(
            decode_pep393(4, false, &ucs4le(&[0xd800, 0x110000, u32::MAX, 0x10ffff])).unwrap(),
            "\u{fffd}\u{fffd}\u{fffd}\u{10ffff}"
        );
    }

    #[test]
    fn pep393_errors() {
        assert_eq!(
            decode_pep393(3, false, b"abc"),
            Err(DecodeError::BadKind(3))
        );
        assert_eq!(decode_pep393(0, false, b""), Err(DecodeError::BadKind(0)));
        assert_eq!(
            decode_pep393(2, false, b"abc"),
            Err(DecodeError::BadLength { len: 3, kind: 2 })
        );
        assert_eq!(
            decode_pep393(4, false, b"abcdef"),
            Err(DecodeError::BadLength { len: 6, kind: 4 })
        );
        assert_eq!(
            decode_pep393(2, true, b"ab"),
            Err(DecodeError::AsciiNotKind1(2))
        );
    }

    /// State words read with ctypes from live strings; above the bit-fields
    /// the word holds padding that is not zero, so it must be masked.
    #[test]
    fn state_bits() {
        // 3.8 'hello': interned, kind 1, compact, ascii, ready.
        assert_eq!(parse_state(0b1110_0101), (1, true, true));
        // 3.12 'caf\xe9\xe9': compact kind 1, not ASCII.
        assert_eq!(
            parse_state(0b1100_0101_0000_1111_1010_1100_0010_0100),
            (1, true, false)
        );
        // 3.12 '中文1': compact kind 2.
        assert_eq!(
            parse_state(0b100_0010_0010_1001_1101_1110_0010_1000),
            (2, true, false)
        );
        // 3.13 '😀2': compact kind 4.
        assert_eq!(
            parse_state(0b110_0101_1001_0000_0100_0111_0011_0000),
            (4, true, false)
        );
        // Legacy (non-compact) UCS-4.
        assert_eq!(parse_state(0b0001_0000), (4, false, false));
        assert_eq!(parse_state(u32::MAX), (7, true, true));
    }

    #[test]
    fn py2() {
        assert_eq!(
            decode_py2_unicode_ucs4(&ucs4le(&[0xe9, 0x4e2d, 0x1f600])),
            "é中😀"
        );
        assert_eq!(decode_py2_unicode_ucs4(&[0x41, 0, 0, 0, 0x42]), "A\u{fffd}");
        assert_eq!(decode_py2_unicode_ucs4(&ucs4le(&[0xdc00])), "\u{fffd}");
        assert_eq!(decode_py2_str("中文 é".as_bytes()), "中文 é");
        assert_eq!(decode_py2_str(b"caf\xe9"), "café");
        assert_eq!(decode_py2_str(b"\xff\x00"), "ÿ\0");
    }

    /// Expected values are what `/root/.pyenv/versions/3.12.1/bin/python -c
    /// 'print(repr(...))'` printed.
    #[test]
    fn repr_str_matches_cpython() {
        let cases: &[(&str, &str)] = &[
            ("", "''"),
            ("hello", "'hello'"),
            ("it's", "\"it's\""),
            ("say \"hi\"", "'say \"hi\"'"),
            ("both ' and \"", "'both \\' and \"'"),
            ("tab\tnl\ncr\rbs\\", "'tab\\tnl\\ncr\\rbs\\\\'"),
            ("\0\x01\x1b\x7f", "'\\x00\\x01\\x1b\\x7f'"),
            ("café 中文 😀", "'café 中文 😀'"),
            ("\u{80}\u{a0}\u{ad}\u{ff}", "'\\x80\\xa0\\xadÿ'"),
            (
                "\u{2028}\u{200b}\u{3000}\u{feff}",
                "'\\u2028\\u200b\\u3000\\ufeff'",
            ),
            ("\u{e000}\u{378}", "'\\ue000\\u0378'"),
            (
                "\u{f0000}\u{e0001}\u{10ffff}",
                "'\\U000f0000\\U000e0001\\U0010ffff'",
            ),
            ("e\u{301} \u{301}x", "'e\u{301} \u{301}x'"),
            ("\u{fffd}", "'\u{fffd}'"),
        ];
        for (input, want) in cases {
            assert_eq!(repr_str(input, BIG), *want, "repr of {input:?}");
        }
    }

    /// `repr(bytes(...))` from the same interpreter.
    #[test]
    fn repr_bytes_matches_cpython() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "b''"),
            (b"abc", "b'abc'"),
            (b"it's", "b\"it's\""),
            (b"'\"", "b'\\'\"'"),
            (b"\t\n\r\\", "b'\\t\\n\\r\\\\'"),
            (b"\x00\x7f\x80\xff ~", "b'\\x00\\x7f\\x80\\xff ~'"),
            ("é".as_bytes(), "b'\\xc3\\xa9'"),
        ];
        for (input, want) in cases {
            assert_eq!(repr_bytes(input, BIG), *want, "repr of {input:?}");
        }
    }

    #[test]
    fn truncation() {
        assert_eq!(repr_str("hello world", 8), "'hello w...");
        assert_eq!(repr_str("hello", 7), "'hello'");
        assert_eq!(repr_str("hello", 6), "'hello...");
        // Never splits an escape.
        assert_eq!(repr_str("ab\ncd", 4), "'ab...");
        assert_eq!(repr_str("ab\ncd", 5), "'ab\\n...");
        assert_eq!(repr_str("中文字", 3), "'中文...");
        assert_eq!(repr_str("x", 0), "...");
        assert_eq!(repr_bytes(b"\x00\x01", 6), "b'\\x00...");
        assert_eq!(repr_bytes(b"abc", 6), "b'abc'");
        assert_eq!(repr_bytes(b"abcd", 6), "b'abcd...");
    }

    proptest! {
        #[test]
        fn decoders_never_panic(kind in any::<u8>(), ascii in any::<bool>(), data in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(s) = decode_pep393(kind, ascii, &data) {
                prop_assert!(matches!(kind, 1 | 2 | 4));
                prop_assert_eq!(s.chars().count(), data.len() / usize::from(kind));
            }
            let _ = decode_py2_unicode_ucs4(&data);
            let _ = decode_py2_str(&data);
        }

        #[test]
        fn state_never_panics(state in any::<u32>()) {
            let (kind, _, _) = parse_state(state);
            prop_assert!(kind < 8);
        }

        #[test]
        fn repr_is_bounded(s in any::<String>(), b in proptest::collection::vec(any::<u8>(), 0..128), max in 0usize..64) {
            for r in [repr_str(&s, max), repr_bytes(&b, max)] {
                let n = r.chars().count();
                if let Some(kept) = r.strip_suffix("...").filter(|_| n > max) {
                    prop_assert!(kept.chars().count() <= max);
                } else {
                    prop_assert!(n <= max);
                }
            }
            // Uncut, the rendering is quoted and every character is kept or escaped.
            let full = repr_str(&s, BIG);
            prop_assert!(full.len() >= 2);
            prop_assert!(!full.contains('\n') && !full.contains('\0'));
            let full_b = repr_bytes(&b, BIG);
            prop_assert!(full_b.is_ascii() && full_b.starts_with('b'));
        }
    }
}
