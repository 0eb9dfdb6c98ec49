//! Recognising return addresses: an address is a plausible return address
//! only if the bytes just before it decode as an x86-64 `call`. This is what
//! makes the stack scan (for code without unwind information) trustworthy
//! enough: a random stack word that happens to point into code almost never
//! follows a call instruction.

/// How many bytes before a candidate return address [`follows_call`] needs.
pub(crate) const CALL_WINDOW: usize = 7;

/// `before` holds the bytes that end right at the candidate return address
/// (its last byte is the one at `ret - 1`); up to [`CALL_WINDOW`] are looked at.
pub(crate) fn follows_call(before: &[u8]) -> bool {
    let n = before.len();
    let at = |len: usize| -> Option<&[u8]> { n.checked_sub(len).map(|s| &before[s..]) };
    // call rel32: E8 xx xx xx xx
    if at(5).is_some_and(|b| b[0] == 0xE8) {
        return true;
    }
    // call r/m64: FF /2, with every ModRM/SIB/displacement length it can have.
    [2usize, 3, 4, 6, 7].into_iter().any(|len| {
        at(len).is_some_and(|b| {
            b[0] == 0xFF && ff2_len(b[1], b.get(2).copied().unwrap_or(0)) == Some(len)
        })
    })
}

/// Length of an `FF /2` instruction from its ModRM (and SIB) byte, or None when
/// the ModRM does not encode `/2`.
fn ff2_len(modrm: u8, sib: u8) -> Option<usize> {
    if (modrm >> 3) & 7 != 2 {
        return None;
    }
    let md = modrm >> 6;
    let rm = modrm & 7;
    Some(match (md, rm) {
        (3, _) => 2,
        (0, 4) if sib & 7 == 5 => 7,
        (0, 4) => 3,
        (0, 5) => 6,
        (0, _) => 2,
        (1, 4) => 4,
        (1, _) => 3,
        (2, 4) => 7,
        _ => 6,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends_with_call(code: &[u8]) -> bool {
        // Pad in front the way real code would have other instructions there.
        let mut v = vec![0x90u8; 8];
        v.extend_from_slice(code);
        follows_call(&v[v.len() - CALL_WINDOW..])
    }

    #[test]
    fn recognises_call_forms() {
        assert!(ends_with_call(&[0xE8, 1, 2, 3, 4])); // call rel32
        assert!(ends_with_call(&[0xFF, 0xD0])); // call rax
        assert!(ends_with_call(&[0x41, 0xFF, 0xD3])); // call r11
        assert!(ends_with_call(&[0xFF, 0x15, 1, 2, 3, 4])); // call [rip+disp32]
        assert!(ends_with_call(&[0xFF, 0x10])); // call [rax]
        assert!(ends_with_call(&[0xFF, 0x50, 0x08])); // call [rax+8]
        assert!(ends_with_call(&[0xFF, 0x54, 0x24, 0x08])); // call [rsp+8]
        assert!(ends_with_call(&[0xFF, 0x90, 1, 2, 3, 4])); // call [rax+disp32]
        assert!(ends_with_call(&[0xFF, 0x14, 0x24])); // call [rsp]
        assert!(ends_with_call(&[0xFF, 0x14, 0xC5, 1, 2, 3, 4])); // call [rax*8+disp32]
    }

    #[test]
    fn rejects_non_calls() {
        assert!(!ends_with_call(&[0x90, 0x90, 0x90, 0x90, 0x90]));
        assert!(!ends_with_call(&[0xFF, 0xE0])); // jmp rax (FF /4)
        assert!(!ends_with_call(&[0xE9, 1, 2, 3, 4])); // jmp rel32
        assert!(!follows_call(&[0xE8, 0, 0])); // too short to hold the call
        assert!(!follows_call(&[]));
    }
}
