//! Decoding of Python string payloads copied out of the target.
//! (Interim version; the tested decoders replace it.)

#[derive(Debug, thiserror::Error)]
#[error("bad string payload")]
pub struct DecodeError;

pub fn parse_state(state: u32) -> (u8, bool, bool) {
    (((state >> 2) & 7) as u8, state & (1 << 5) != 0, state & (1 << 6) != 0)
}

pub fn decode_pep393(kind: u8, _ascii: bool, data: &[u8]) -> Result<String, DecodeError> {
    match kind {
        1 => Ok(data.iter().map(|&b| b as char).collect()),
        2 => Ok(String::from_utf16_lossy(
            &data.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect::<Vec<_>>(),
        )),
        4 => Ok(decode_py2_unicode_ucs4(data)),
        _ => Err(DecodeError),
    }
}

pub fn decode_py2_unicode_ucs4(data: &[u8]) -> String {
    data.chunks_exact(4)
        .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('\u{fffd}'))
        .collect()
}

pub fn decode_py2_str(data: &[u8]) -> String {
    String::from_utf8(data.to_vec()).unwrap_or_else(|_| data.iter().map(|&b| b as char).collect())
}

pub fn repr_str(s: &str, max_chars: usize) -> String {
    let mut out: String = format!("{s:?}").replace('"', "'");
    if out.chars().count() > max_chars {
        out = out.chars().take(max_chars).collect::<String>() + "...";
    }
    out
}

pub fn repr_bytes(b: &[u8], max_chars: usize) -> String {
    let mut out = String::from("b'");
    for &c in b {
        match c {
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            0x20..=0x7e => out.push(c as char),
            _ => out.push_str(&format!("\\x{c:02x}")),
        }
    }
    out.push('\'');
    if out.len() > max_chars {
        out.truncate(max_chars);
        out.push_str("...");
    }
    out
}
