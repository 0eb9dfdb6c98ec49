//! Line-number tables: co_lnotab (≤3.9), the 3.10 co_linetable, the 3.11+ location table.
//!
//! Each format is decoded once into a sorted list of contiguous byte ranges,
//! each with a line (or "no line"), mirroring what CPython's own
//! `PyCode_Addr2Line` walks. The table bytes come from the target, so every
//! decoder is total: it reads only inside the slice, does work linear in its
//! length, and treats malformed input as whatever the bytes say rather than
//! failing. On well-formed tables the answers equal CPython's, which the unit
//! tests check against vectors dumped from each interpreter by
//! `python_fixtures/gen_linetable_vectors.py`.

use crate::cpython_layouts::LineTableFormat;

#[cfg(test)]
/// Line executing at `byte_offset` (offset of the instruction in the bytecode, in bytes) of a code
/// object whose first line is `firstlineno` and whose line table bytes are `table`. `None` when the
/// table says "no line" at that point. Never panics, never loops unboundedly, on any input bytes.
pub(crate) fn line_for(
    format: LineTableFormat,
    table: &[u8],
    firstlineno: i32,
    byte_offset: u64,
) -> Option<u32> {
    LineTable::parse(format, table, firstlineno).line_at(byte_offset)
}

/// A decoded line table, cheap to keep per code object and to query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineTable {
    /// Range starts, strictly increasing, the first at 0. A range ends where
    /// the next begins; adjacent ranges never share a line (they are merged).
    entries: Vec<Entry>,
    /// Where the last range ends; `None` when it runs on forever (co_lnotab,
    /// where every offset past the table keeps the last line).
    end: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    start: u64,
    line: Option<u32>,
}

impl LineTable {
    /// Decode `table`. Work and memory are linear in `table.len()`.
    pub(crate) fn parse(format: LineTableFormat, table: &[u8], firstlineno: i32) -> LineTable {
        let mut builder = Builder::default();
        let end = match format {
            LineTableFormat::Lnotab { signed_lines } => {
                parse_lnotab(&mut builder, table, firstlineno, signed_lines);
                None
            }
            LineTableFormat::Linetable310 => Some(parse_310(&mut builder, table, firstlineno)),
            LineTableFormat::Locations311 => Some(parse_311(&mut builder, table, firstlineno)),
        };
        LineTable {
            entries: builder.entries,
            end,
        }
    }

    /// The line at `byte_offset`, as `PyCode_Addr2Line` would answer.
    pub(crate) fn line_at(&self, byte_offset: u64) -> Option<u32> {
        if self.end.is_some_and(|end| byte_offset >= end) {
            return None;
        }
        let idx = self.entries.partition_point(|e| e.start <= byte_offset);
        idx.checked_sub(1).and_then(|i| self.entries[i].line)
    }
}

#[derive(Default)]
struct Builder {
    entries: Vec<Entry>,
}

impl Builder {
    /// Record that offsets from `start` on have `line` (until the next push).
    /// `start` never decreases.
    fn push(&mut self, start: u64, line: i64) {
        // CPython's C functions return an int; a negative one is not a line.
        let line = u32::try_from(line).ok();
        self.push_line(start, line);
    }

    fn push_line(&mut self, start: u64, line: Option<u32>) {
        // A range that became empty is superseded by this one.
        if self.entries.last().is_some_and(|e| e.start == start) {
            self.entries.pop();
        }
        if self.entries.last().is_some_and(|e| e.line == line) {
            return;
        }
        self.entries.push(Entry { start, line });
    }
}

/// co_lnotab: (address delta, line delta) byte pairs. `PyCode_Addr2Line`
/// adds the deltas of every pair whose cumulative address is ≤ the query, so
/// the line set by a pair holds from its address on, with no end. A trailing
/// odd byte is ignored, as in C (`size = len / 2`).
fn parse_lnotab(b: &mut Builder, table: &[u8], firstlineno: i32, signed_lines: bool) {
    let mut addr: u64 = 0;
    let mut line = i64::from(firstlineno);
    b.push(0, line);
    for pair in table.chunks_exact(2) {
        addr += u64::from(pair[0]);
        line += if signed_lines {
            i64::from(pair[1] as i8)
        } else {
            i64::from(pair[1])
        };
        b.push(addr, line);
    }
}

/// 3.10 co_linetable: (address delta, signed line delta) byte pairs, each
/// describing the range after the previous one; a line delta of -128 marks
/// the range as having no line without moving the running line. Empty ranges
/// only carry line deltas. Past the last range there is no line.
fn parse_310(b: &mut Builder, table: &[u8], firstlineno: i32) -> u64 {
    let mut end: u64 = 0;
    let mut computed = i64::from(firstlineno);
    for pair in table.chunks_exact(2) {
        let start = end;
        end += u64::from(pair[0]);
        let delta = pair[1] as i8;
        let line = if delta == -128 {
            None
        } else {
            computed += i64::from(delta);
            u32::try_from(computed).ok()
        };
        if end > start {
            b.push_line(start, line);
        }
    }
    end
}

/// Entry kinds of the 3.11+ location table (Objects/locations.md).
const KIND_NO_COLUMNS: u8 = 13;
const KIND_LONG: u8 = 14;
const KIND_ONE_LINE0: u8 = 10;
const KIND_ONE_LINE2: u8 = 12;

/// 3.11+ location table. Each entry starts with a byte whose top bit is set:
/// bits 3–6 are the kind, bits 0–2 the length in code units minus one. Only
/// the line is decoded; column data is skipped by resynchronising on the next
/// byte with the top bit set, exactly as CPython's `advance()` does.
fn parse_311(b: &mut Builder, table: &[u8], firstlineno: i32) -> u64 {
    let mut end: u64 = 0;
    let mut computed = i64::from(firstlineno);
    let mut pos = 0;
    while pos < table.len() {
        let first = table[pos];
        let kind = (first >> 3) & 15;
        let delta: i64 = match kind {
            KIND_NO_COLUMNS | KIND_LONG => i64::from(signed_varint(&table[pos + 1..])),
            KIND_ONE_LINE0..=KIND_ONE_LINE2 => i64::from(kind - KIND_ONE_LINE0),
            _ => 0,
        };
        computed = computed.saturating_add(delta);
        // `(b >> 3) == 0x1f`: kind 15 with the top bit set means "no location".
        let line = if first >> 3 == 0x1f {
            None
        } else {
            u32::try_from(computed).ok()
        };
        let start = end;
        end += (u64::from(first & 7) + 1) * 2;
        b.push_line(start, line);
        pos += 1;
        while pos < table.len() && table[pos] & 0x80 == 0 {
            pos += 1;
        }
    }
    end
}

pub(crate) use crate::stack::Position;

/// The decoded positions of a 3.11+ location table: sorted, contiguous
/// ranges of bytecode, each with its position.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Positions {
    /// (start offset in bytes, position); a range ends where the next begins.
    entries: Vec<(u64, Position)>,
    end: u64,
}

impl Positions {
    /// Decode a 3.11+ location table (Objects/locations.md), as CPython's
    /// `advance_with_locations` does. Total on any bytes, linear in length.
    pub(crate) fn parse(table: &[u8], firstlineno: i32) -> Positions {
        let mut entries: Vec<(u64, Position)> = Vec::new();
        let mut end: u64 = 0;
        let mut line = i64::from(firstlineno);
        let mut pos = 0;
        while pos < table.len() {
            let first = table[pos];
            let kind = (first >> 3) & 15;
            // This entry's bytes: up to the next byte with the top bit set.
            let entry_end = table[pos + 1..]
                .iter()
                .position(|b| b & 0x80 != 0)
                .map_or(table.len(), |i| pos + 1 + i);
            let rest = &table[pos + 1..entry_end];
            let byte = |i: usize| rest.get(i).copied();
            let p = match kind {
                15 => Position::default(),
                KIND_LONG => {
                    // Four varints: line delta, end line delta, column + 1, end column + 1.
                    let mut at = 0;
                    let mut next = |signed: bool| {
                        let (v, n) = varint_len(&rest[at.min(rest.len())..]);
                        at += n;
                        if signed {
                            i64::from(signed_of(v))
                        } else {
                            i64::from(v)
                        }
                    };
                    line = line.saturating_add(next(true));
                    let end_line = line.saturating_add(next(false));
                    let c = next(false) - 1;
                    let ec = next(false) - 1;
                    Position {
                        end_line: u32::try_from(end_line).ok(),
                        column: u32::try_from(c).ok(),
                        end_column: u32::try_from(ec).ok(),
                    }
                }
                KIND_NO_COLUMNS => {
                    line = line.saturating_add(i64::from(signed_varint(rest)));
                    Position {
                        end_line: u32::try_from(line).ok(),
                        ..Position::default()
                    }
                }
                KIND_ONE_LINE0..=KIND_ONE_LINE2 => {
                    line = line.saturating_add(i64::from(kind - KIND_ONE_LINE0));
                    Position {
                        end_line: u32::try_from(line).ok(),
                        column: byte(0).map(u32::from),
                        end_column: byte(1).map(u32::from),
                    }
                }
                _ => {
                    // Short form: one more byte, column high bits in the kind.
                    let second = byte(0).unwrap_or(0);
                    let c = u32::from(kind) << 3 | u32::from(second >> 4);
                    Position {
                        end_line: u32::try_from(line).ok(),
                        column: Some(c),
                        end_column: Some(c + u32::from(second & 15)),
                    }
                }
            };
            let start = end;
            end += (u64::from(first & 7) + 1) * 2;
            if entries.last().is_some_and(|e| e.0 == start) {
                entries.pop();
            }
            if entries.last().is_none_or(|e| e.1 != p) {
                entries.push((start, p));
            }
            pos = entry_end;
        }
        Positions { entries, end }
    }

    /// The position of the instruction at `byte_offset`.
    pub(crate) fn at(&self, byte_offset: u64) -> Position {
        if byte_offset >= self.end {
            return Position::default();
        }
        let idx = self.entries.partition_point(|e| e.0 <= byte_offset);
        idx.checked_sub(1)
            .map(|i| self.entries[i].1)
            .unwrap_or_default()
    }
}

/// Unsigned varint: 6-bit little-endian groups, 0x40 = more follow. CPython
/// decodes into a 32-bit unsigned int; groups past 32 bits (only in malformed
/// tables) are dropped, which also caps the scan at six bytes so a run of
/// continuation bytes cannot make parsing quadratic.
fn varint(bytes: &[u8]) -> u32 {
    let mut val: u32 = 0;
    for (i, &byte) in bytes.iter().take(6).enumerate() {
        val |= u32::from(byte & 63) << (6 * i);
        if byte & 64 == 0 {
            break;
        }
    }
    val
}

/// [`varint`], and how many bytes it took (at least one; the whole run of
/// continuation bytes, so that the next varint starts after it).
fn varint_len(bytes: &[u8]) -> (u32, usize) {
    let n = bytes
        .iter()
        .position(|b| b & 64 == 0)
        .map_or(bytes.len(), |i| i + 1);
    (varint(bytes), n.max(1))
}

/// Signed varint: the sign is in bit 0 of the unsigned value.
fn signed_varint(bytes: &[u8]) -> i32 {
    signed_of(varint(bytes))
}

fn signed_of(uval: u32) -> i32 {
    // uval >> 1 < 2^31, so both branches fit.
    let magnitude = (uval >> 1) as i32;
    if uval & 1 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    const UNSIGNED: LineTableFormat = LineTableFormat::Lnotab {
        signed_lines: false,
    };
    const SIGNED: LineTableFormat = LineTableFormat::Lnotab { signed_lines: true };

    const VECTORS: &[&str] = &[
        include_str!("testdata/linetable_2_7.json"),
        include_str!("testdata/linetable_3_6.json"),
        include_str!("testdata/linetable_3_7.json"),
        include_str!("testdata/linetable_3_8.json"),
        include_str!("testdata/linetable_3_9.json"),
        include_str!("testdata/linetable_3_10.json"),
        include_str!("testdata/linetable_3_11.json"),
        include_str!("testdata/linetable_3_12.json"),
        include_str!("testdata/linetable_3_13.json"),
    ];

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn format_named(name: &str) -> LineTableFormat {
        match name {
            "lnotab_unsigned" => UNSIGNED,
            "lnotab_signed" => SIGNED,
            "linetable310" => LineTableFormat::Linetable310,
            "locations311" => LineTableFormat::Locations311,
            other => panic!("unknown format {other}"),
        }
    }

    /// Every offset of every code object in the dumps answers what the
    /// interpreter's own PyCode_Addr2Line answered.
    #[test]
    fn matches_cpython_vectors() {
        let mut checked = 0;
        for text in VECTORS {
            let doc: Value = serde_json::from_str(text).unwrap();
            let version = doc["version"].as_str().unwrap();
            let format = format_named(doc["format"].as_str().unwrap());
            for code in doc["codes"].as_array().unwrap() {
                let name = code["name"].as_str().unwrap();
                let first = i32::try_from(code["firstlineno"].as_i64().unwrap()).unwrap();
                let table = hex(code["table"].as_str().unwrap());
                let step = code["step"].as_u64().unwrap();
                let parsed = LineTable::parse(format, &table, first);
                let mut offset = 0;
                for run in code["lines"].as_array().unwrap() {
                    let count = run[0].as_u64().unwrap();
                    let want = run[1].as_u64().map(|l| u32::try_from(l).unwrap());
                    for _ in 0..count {
                        assert_eq!(
                            parsed.line_at(offset),
                            want,
                            "{version} {name} offset {offset}"
                        );
                        assert_eq!(line_for(format, &table, first, offset), want);
                        offset += step;
                        checked += 1;
                    }
                }
                assert_eq!(
                    offset.div_ceil(step),
                    code["code_len"].as_u64().unwrap().div_ceil(step)
                );
            }
        }
        assert!(checked > 5000, "only {checked} offsets checked");
    }

    /// Every code unit of every code object answers what the interpreter's
    /// own `co_positions()` answered (python_fixtures/gen_position_vectors.py).
    #[test]
    fn positions_match_cpython_vectors() {
        let mut checked = 0;
        for text in [
            include_str!("testdata/positions_3_11.json"),
            include_str!("testdata/positions_3_12.json"),
            include_str!("testdata/positions_3_13.json"),
            include_str!("testdata/positions_3_14.json"),
        ] {
            let doc: Value = serde_json::from_str(text).unwrap();
            let version = doc["version"].as_str().unwrap();
            for code in doc["codes"].as_array().unwrap() {
                let name = code["name"].as_str().unwrap();
                let first = i32::try_from(code["firstlineno"].as_i64().unwrap()).unwrap();
                let parsed = Positions::parse(&hex(code["table"].as_str().unwrap()), first);
                let mut offset = 0;
                let opt = |v: &Value| v.as_u64().map(|x| u32::try_from(x).unwrap());
                for run in code["positions"].as_array().unwrap() {
                    let want = Position {
                        end_line: opt(&run[1]),
                        column: opt(&run[2]),
                        end_column: opt(&run[3]),
                    };
                    for _ in 0..run[0].as_u64().unwrap() {
                        assert_eq!(parsed.at(offset), want, "{version} {name} offset {offset}");
                        offset += 2;
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 5000, "only {checked} code units checked");
    }

    #[test]
    fn lnotab_keeps_last_line_past_the_table() {
        // 2 bytes at line 10, then +3 lines.
        let t = [2, 3];
        assert_eq!(line_for(UNSIGNED, &t, 10, 0), Some(10));
        assert_eq!(line_for(UNSIGNED, &t, 10, 1), Some(10));
        assert_eq!(line_for(UNSIGNED, &t, 10, 2), Some(13));
        assert_eq!(line_for(UNSIGNED, &t, 10, u64::MAX), Some(13));
        assert_eq!(line_for(UNSIGNED, &[], 7, 100), Some(7));
        // Odd trailing byte ignored.
        assert_eq!(line_for(UNSIGNED, &[2, 3, 9], 10, 50), Some(13));
    }

    #[test]
    fn lnotab_signedness() {
        let t = [4, 0xff];
        assert_eq!(line_for(SIGNED, &t, 10, 4), Some(9));
        assert_eq!(line_for(UNSIGNED, &t, 10, 4), Some(265));
        // A negative line is not a line.
        assert_eq!(line_for(SIGNED, &[0, 0x80], 1, 0), None);
    }

    #[test]
    fn lnotab_zero_address_deltas_accumulate() {
        // Line jump of 300 split as 255 + 45 at the same address.
        let t = [0, 255, 6, 45];
        let lt = LineTable::parse(UNSIGNED, &t, 1);
        assert_eq!(lt.line_at(0), Some(256));
        assert_eq!(lt.line_at(5), Some(256));
        assert_eq!(lt.line_at(6), Some(301));
    }

    #[test]
    fn linetable310_ranges_and_no_line() {
        let f = LineTableFormat::Linetable310;
        // [0,4) line 5; [4,6) no line; [6,8) line 7 (delta from 5, not from "none").
        let t = [4, 0, 2, 0x80, 2, 2];
        assert_eq!(line_for(f, &t, 5, 0), Some(5));
        assert_eq!(line_for(f, &t, 5, 3), Some(5));
        assert_eq!(line_for(f, &t, 5, 4), None);
        assert_eq!(line_for(f, &t, 5, 6), Some(7));
        assert_eq!(line_for(f, &t, 5, 8), None);
        assert_eq!(line_for(f, &[], 5, 0), None);
        // Zero-length entries carry line deltas.
        assert_eq!(line_for(f, &[0, 127, 2, 3], 1, 0), Some(131));
    }

    #[test]
    fn locations311_kinds() {
        let f = LineTableFormat::Locations311;
        let t = [
            0x80 | (14 << 3),     // long, 1 code unit
            0x02,                 // line delta +1
            0x00,                 // end line delta
            0x01,                 // col+1
            0x05,                 // end col+1
            0x80 | (11 << 3) | 1, // one-line, delta 1, 2 code units
            0x00,
            0x04,
            0x80 | (15 << 3),     // no location, 1 code unit
            0x80 | (13 << 3) | 2, // no columns, 3 units
            0x03,                 // delta -1
            0x80 | (3 << 3),      // short, same line
            0x12,
        ];
        let lt = LineTable::parse(f, &t, 100);
        assert_eq!(lt.line_at(0), Some(101));
        assert_eq!(lt.line_at(1), Some(101));
        assert_eq!(lt.line_at(2), Some(102));
        assert_eq!(lt.line_at(5), Some(102));
        assert_eq!(lt.line_at(6), None);
        assert_eq!(lt.line_at(8), Some(101));
        assert_eq!(lt.line_at(13), Some(101));
        assert_eq!(lt.line_at(14), Some(101));
        assert_eq!(lt.line_at(16), None);
    }

    #[test]
    fn varints() {
        assert_eq!(varint(&[0x3f]), 63);
        assert_eq!(varint(&[0x41, 0x01]), 1 | (1 << 6));
        assert_eq!(varint(&[0x40]), 0);
        assert_eq!(varint(&[]), 0);
        assert_eq!(signed_varint(&[0x05]), -2);
        assert_eq!(signed_varint(&[0x04]), 2);
        // Never more than 32 bits, however long the chain.
        assert_eq!(varint(&[0x7f; 100]), u32::MAX);
    }

    #[test]
    fn long_continuation_chain_is_linear() {
        // Every byte is a "no columns" entry whose varint would run to the end.
        let t = vec![0x80 | (13 << 3) | 0x40; 1 << 20];
        let start = std::time::Instant::now();
        let lt = LineTable::parse(LineTableFormat::Locations311, &t, 1);
        assert!(lt.line_at(0).is_some() || lt.line_at(0).is_none());
        assert!(start.elapsed().as_secs() < 5);
    }

    fn any_format() -> impl Strategy<Value = LineTableFormat> {
        prop_oneof![
            Just(UNSIGNED),
            Just(SIGNED),
            Just(LineTableFormat::Linetable310),
            Just(LineTableFormat::Locations311),
        ]
    }

    /// A direct port of CPython's walk (`PyCode_Addr2Line` ≤3.9, and
    /// `_PyCode_CheckLineNumber` over `PyLineTable_NextAddressRange` for
    /// 3.10+), bounded to the slice, to cross-check the range compaction.
    fn reference(format: LineTableFormat, t: &[u8], first: i32, addrq: u64) -> Option<u32> {
        let mut line = i64::from(first);
        match format {
            LineTableFormat::Lnotab { signed_lines } => {
                let mut addr = 0u64;
                for p in t.chunks_exact(2) {
                    addr += u64::from(p[0]);
                    if addr > addrq {
                        break;
                    }
                    line += if signed_lines {
                        i64::from(p[1] as i8)
                    } else {
                        i64::from(p[1])
                    };
                }
                u32::try_from(line).ok()
            }
            LineTableFormat::Linetable310 => {
                let (mut end, mut ar_line) = (0u64, None);
                let mut pairs = t.chunks_exact(2);
                while end <= addrq {
                    let start = end;
                    loop {
                        let p = pairs.next()?;
                        end += u64::from(p[0]);
                        ar_line = if p[1] as i8 == -128 {
                            None
                        } else {
                            line += i64::from(p[1] as i8);
                            u32::try_from(line).ok()
                        };
                        if end != start {
                            break;
                        }
                    }
                }
                ar_line
            }
            LineTableFormat::Locations311 => {
                let (mut end, mut ar_line, mut pos) = (0u64, None, 0);
                while end <= addrq {
                    let b = *t.get(pos)?;
                    line += match (b >> 3) & 15 {
                        13 | 14 => i64::from(signed_varint(&t[pos + 1..])),
                        k @ 10..=12 => i64::from(k - 10),
                        _ => 0,
                    };
                    ar_line = if b >> 3 == 0x1f {
                        None
                    } else {
                        u32::try_from(line).ok()
                    };
                    end += (u64::from(b & 7) + 1) * 2;
                    pos += 1;
                    while pos < t.len() && t[pos] & 0x80 == 0 {
                        pos += 1;
                    }
                }
                ar_line
            }
        }
    }

    proptest! {
        #[test]
        fn never_panics(
            format in any_format(),
            table in proptest::collection::vec(any::<u8>(), 0..4096),
            first in any::<i32>(),
            offsets in proptest::collection::vec(any::<u64>(), 0..16),
        ) {
            let lt = LineTable::parse(format, &table, first);
            // Linear size: at most one entry per byte, plus the initial one.
            prop_assert!(lt.entries.len() <= table.len() + 1);
            prop_assert!(lt.entries.windows(2).all(|w| w[0].start < w[1].start));
            for off in &offsets {
                prop_assert_eq!(lt.line_at(*off), line_for(format, &table, first, *off));
            }
            let p = Positions::parse(&table, first);
            prop_assert!(p.entries.len() <= table.len());
            prop_assert!(p.entries.windows(2).all(|w| w[0].0 < w[1].0));
            for off in offsets {
                let _ = p.at(off);
            }
        }

        #[test]
        fn agrees_with_the_c_walk(
            format in any_format(),
            table in proptest::collection::vec(any::<u8>(), 0..64),
            first in -300i32..100_000,
            offsets in proptest::collection::vec(0u64..2048, 1..32),
        ) {
            let lt = LineTable::parse(format, &table, first);
            for off in offsets {
                prop_assert_eq!(lt.line_at(off), reference(format, &table, first, off), "offset {}", off);
            }
        }
    }
}
