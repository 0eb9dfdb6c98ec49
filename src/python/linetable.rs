//! Line-number tables: co_lnotab (≤3.9), the 3.10 co_linetable, the 3.11+ location table.
//! (Interim version; the tested decoders replace it.)

use crate::cpython_layouts::LineTableFormat;

#[derive(Debug, Clone)]
pub struct LineTable {
    ranges: Vec<(u64, u64, Option<u32>)>,
}

impl LineTable {
    pub fn parse(format: LineTableFormat, t: &[u8], firstlineno: i32) -> LineTable {
        let mut ranges = Vec::new();
        let mut line = firstlineno as i64;
        let mut addr = 0u64;
        match format {
            LineTableFormat::Lnotab { signed_lines } => {
                let mut start = 0u64;
                for p in t.chunks_exact(2) {
                    if p[0] != 0 {
                        ranges.push((start, addr + p[0] as u64, Some(line as u32)));
                        start = addr + p[0] as u64;
                    }
                    addr += p[0] as u64;
                    line += if signed_lines { p[1] as i8 as i64 } else { p[1] as i64 };
                }
                ranges.push((start, u64::MAX, Some(line as u32)));
            }
            LineTableFormat::Linetable310 => {
                for p in t.chunks_exact(2) {
                    let end = addr + p[0] as u64;
                    let d = p[1] as i8;
                    if d != -128 {
                        line += d as i64;
                    }
                    ranges.push((addr, end, (d != -128).then_some(line as u32)));
                    addr = end;
                }
            }
            LineTableFormat::Locations311 => {
                let mut i = 0;
                let varint = |i: &mut usize| -> u64 {
                    let mut v = 0u64;
                    let mut shift = 0;
                    while *i < t.len() && shift < 64 {
                        let b = t[*i];
                        *i += 1;
                        v |= ((b & 63) as u64) << shift;
                        shift += 6;
                        if b & 64 == 0 {
                            break;
                        }
                    }
                    v
                };
                let svarint = |i: &mut usize| -> i64 {
                    let v = varint(i);
                    if v & 1 != 0 { -((v >> 1) as i64) } else { (v >> 1) as i64 }
                };
                while i < t.len() {
                    let b = t[i];
                    i += 1;
                    let code = (b >> 3) & 15;
                    let len = ((b & 7) as u64 + 1) * 2;
                    let l = match code {
                        15 => None,
                        14 => {
                            line += svarint(&mut i);
                            varint(&mut i);
                            varint(&mut i);
                            varint(&mut i);
                            Some(line as u32)
                        }
                        13 => {
                            line += svarint(&mut i);
                            Some(line as u32)
                        }
                        10..=12 => {
                            line += (code - 10) as i64;
                            i += 2;
                            Some(line as u32)
                        }
                        _ => {
                            i += 1;
                            Some(line as u32)
                        }
                    };
                    ranges.push((addr, addr + len, l));
                    addr += len;
                }
            }
        }
        LineTable { ranges }
    }

    pub fn line_at(&self, off: u64) -> Option<u32> {
        self.ranges.iter().find(|r| off >= r.0 && off < r.1).and_then(|r| r.2)
    }
}
