//! Reading Python objects out of the target: strings, ints, containers,
//! dicts and instance attributes. The bounded repr() that `--locals`
//! shows them with is in [`super::repr`].

use super::strings;
use crate::cpython_layouts::asyncio::{AsyncioLayout, MEMBER_DEF_OFFSET};
use crate::cpython_layouts::{
    DictKeysLayout, DictLayout, InstanceDict, Layout, LongFormat, StringLayout,
};
use crate::error::MemError;
use crate::memory::{le_u32, le_u64, Memory, MemoryExt};
use std::cell::RefCell;
use std::collections::HashMap;

/// Longest string we copy (names, file names, values); longer is an error or truncated.
pub(crate) const MAX_STR_CHARS: u64 = 1 << 16;
/// Largest dict we walk.
const MAX_DICT_ENTRIES: u64 = 1 << 17;
/// Most digits of an int we render exactly (about 90,000 decimal digits).
const MAX_INT_DIGITS: u64 = 10_000;

pub(crate) struct ObjReader<'a> {
    pub(crate) mem: &'a dyn Memory,
    pub(crate) layout: &'a Layout,
    type_names: RefCell<HashMap<u64, String>>,
    /// Entries of a dict or set read at most, and the bytes of one
    /// container's items (see [`ObjReader::with_max_entries`]).
    max_entries: u64,
}

pub(super) type R<T> = Result<T, MemError>;

fn bad(addr: u64) -> MemError {
    MemError::Unmapped { addr, len: 0 }
}

impl<'a> ObjReader<'a> {
    pub(crate) fn new(mem: &'a dyn Memory, layout: &'a Layout) -> Self {
        ObjReader {
            mem,
            layout,
            type_names: RefCell::new(HashMap::new()),
            max_entries: MAX_DICT_ENTRIES,
        }
    }

    /// A reader that walks containers of up to `n` entries (`heap`'s
    /// census reads whole ones; a repr reads only its first few).
    pub(crate) fn with_max_entries(mut self, n: u64) -> Self {
        self.max_entries = n.max(MAX_DICT_ENTRIES);
        self
    }

    /// `len` bytes of a container's items or entries at `addr`, at most
    /// `8 bytes × max_entries` (at least 8 MiB), read in pieces under
    /// [`crate::memory::MAX_READ`].
    fn container_bytes(&self, addr: u64, len: u64, entry: u64) -> R<Vec<u8>> {
        let cap = (self.max_entries * entry).max(8 << 20);
        if len > cap {
            return Err(MemError::TooLarge {
                addr,
                len: len as usize,
            });
        }
        const PIECE: u64 = 8 << 20;
        let mut out = vec![0u8; len as usize];
        for (i, chunk) in out.chunks_mut(PIECE as usize).enumerate() {
            self.mem.read(addr.wrapping_add(i as u64 * PIECE), chunk)?;
        }
        Ok(out)
    }

    fn ptr(&self, addr: u64) -> R<u64> {
        self.mem.read_u64(addr)
    }

    pub(crate) fn type_of(&self, obj: u64) -> R<u64> {
        if obj == 0 {
            return Err(bad(obj));
        }
        self.ptr(obj.wrapping_add(self.layout.object.ob_type))
    }

    /// `tp_name` of the object's type, cached per type.
    pub(crate) fn type_name(&self, obj: u64) -> R<String> {
        let t = self.type_of(obj)?;
        if let Some(n) = self.type_names.borrow().get(&t) {
            return Ok(n.clone());
        }
        let p = self.ptr(t.wrapping_add(self.layout.object.tp_name))?;
        let name = self.c_string(p, 128)?;
        self.type_names.borrow_mut().insert(t, name.clone());
        Ok(name)
    }

    pub(crate) fn c_string(&self, addr: u64, max: usize) -> R<String> {
        let mut buf = vec![0u8; max];
        // The string may end near a page end: read less when the full read fails.
        let mut n = max;
        while self.mem.read(addr, &mut buf[..n]).is_err() {
            n /= 2;
            if n < 8 {
                return Err(bad(addr));
            }
        }
        let end = buf[..n].iter().position(|b| *b == 0).unwrap_or(n);
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    pub(super) fn ob_size(&self, obj: u64) -> R<i64> {
        Ok(self
            .mem
            .read_u64(obj.wrapping_add(self.layout.object.ob_size))? as i64)
    }

    /// A `str` (or 2.7 `str`/`unicode`) object's text, up to `max_chars`
    /// characters; the flag says whether it was cut.
    pub(crate) fn string(&self, obj: u64, max_chars: u64) -> R<(String, bool)> {
        match &self.layout.string {
            StringLayout::Pep393 {
                length,
                state,
                ascii_size,
                compact_size,
                data_ptr,
            } => {
                let mut hdr = [0u8; 64];
                let hdr = &mut hdr[..(*compact_size as usize).min(64)];
                self.mem.read(obj, hdr)?;
                let len = le_u64(hdr, *length) as i64;
                if len < 0 {
                    return Err(bad(obj));
                }
                let (kind, compact, ascii) = strings::parse_state(le_u32(hdr, *state));
                if !matches!(kind, 1 | 2 | 4) {
                    return Err(bad(obj));
                }
                let n = (len as u64).min(max_chars);
                let data = if compact && ascii {
                    obj.wrapping_add(*ascii_size)
                } else if compact {
                    obj.wrapping_add(*compact_size)
                } else {
                    self.ptr(obj.wrapping_add(*data_ptr))?
                };
                let bytes = self
                    .mem
                    .read_vec(data, (n * kind as u64) as usize, 4 << 20)?;
                let s = strings::decode_pep393(kind, ascii, &bytes).map_err(|_| bad(obj))?;
                Ok((s, n < len as u64))
            }
            StringLayout::Py2 {
                unicode_length,
                unicode_str,
            } => {
                if self.type_name(obj)? == "unicode" {
                    let len = self.mem.read_u64(obj.wrapping_add(*unicode_length))? as i64;
                    if len < 0 {
                        return Err(bad(obj));
                    }
                    let n = (len as u64).min(max_chars);
                    let p = self.ptr(obj.wrapping_add(*unicode_str))?;
                    let bytes = self.mem.read_vec(p, (n * 4) as usize, 4 << 20)?;
                    Ok((strings::decode_py2_unicode_ucs4(&bytes), n < len as u64))
                } else {
                    let (b, cut) = self.bytes(obj, max_chars)?;
                    Ok((strings::decode_py2_str(&b), cut))
                }
            }
        }
    }

    /// A string that must be complete (names, file names).
    pub(crate) fn full_string(&self, obj: u64) -> R<String> {
        match self.string(obj, MAX_STR_CHARS)? {
            (s, false) => Ok(s),
            (_, true) => Err(MemError::TooLarge {
                addr: obj,
                len: MAX_STR_CHARS as usize,
            }),
        }
    }

    pub(crate) fn bytes(&self, obj: u64, max: u64) -> R<(Vec<u8>, bool)> {
        let len = self.ob_size(obj)?;
        if len < 0 {
            return Err(bad(obj));
        }
        let n = (len as u64).min(max);
        let v = self.mem.read_vec(
            obj.wrapping_add(self.layout.object.bytes_data),
            n as usize,
            16 << 20,
        )?;
        Ok((v, n < len as u64))
    }

    /// Items of a tuple (or the first `max` of them) and the total count.
    pub(crate) fn tuple_items(&self, obj: u64, max: u64) -> R<(Vec<u64>, u64)> {
        let len = self.ob_size(obj)?;
        if len < 0 {
            return Err(bad(obj));
        }
        let n = (len as u64).min(max);
        let raw =
            self.container_bytes(obj.wrapping_add(self.layout.object.tuple_items), n * 8, 8)?;
        Ok((
            raw.chunks_exact(8).map(|c| le_u64(c, 0)).collect(),
            len as u64,
        ))
    }

    pub(crate) fn list_items(&self, obj: u64, max: u64) -> R<(Vec<u64>, u64)> {
        let len = self.ob_size(obj)?;
        if len < 0 {
            return Err(bad(obj));
        }
        let n = (len as u64).min(max);
        let items = self.ptr(obj.wrapping_add(self.layout.object.list_items))?;
        let raw = self.container_bytes(items, n * 8, 8)?;
        Ok((
            raw.chunks_exact(8).map(|c| le_u64(c, 0)).collect(),
            len as u64,
        ))
    }

    /// Members of a set or frozenset, at most `max`.
    pub(crate) fn set_items(&self, obj: u64, max: u64) -> R<Vec<u64>> {
        Ok(self.set_items_counted(obj, max)?.0)
    }

    /// Members of a set, at most `max`, and how many it has.
    pub(crate) fn set_items_counted(&self, obj: u64, max: u64) -> R<(Vec<u64>, u64)> {
        let o = &self.layout.object;
        let mask = self.mem.read_u64(obj.wrapping_add(o.set_mask))?;
        if mask >= self.max_entries {
            return Err(bad(obj));
        }
        let table = self.ptr(obj.wrapping_add(o.set_table))?;
        let raw = self.container_bytes(table, (mask + 1) * o.set_entry_size, o.set_entry_size)?;
        // A removed entry keeps CPython's "<dummy key>" object as its key.
        let mut dummy = None;
        let mut items = Vec::new();
        let mut total = 0;
        for k in raw
            .chunks_exact(o.set_entry_size as usize)
            .map(|e| le_u64(e, o.set_entry_key))
        {
            if k == 0 || dummy == Some(k) {
                continue;
            }
            if dummy.is_none() && self.type_name(k).is_ok_and(|n| n.contains("dummy")) {
                dummy = Some(k);
                continue;
            }
            total += 1;
            if (items.len() as u64) < max {
                items.push(k);
            }
        }
        Ok((items, total))
    }

    /// An int's sign and 30-bit digits (little end first).
    fn long_digits(&self, obj: u64) -> R<(bool, Vec<u32>)> {
        let (neg, n, digits_at) = match self.layout.object.long {
            LongFormat::ObSize { digits } => {
                let s = self.ob_size(obj)?;
                (s < 0, s.unsigned_abs(), digits)
            }
            LongFormat::LvTag { tag, digits } => {
                let t = self.mem.read_u64(obj.wrapping_add(tag))?;
                ((t & 3) == 2, t >> 3, digits)
            }
        };
        if n > MAX_INT_DIGITS {
            return Err(MemError::TooLarge {
                addr: obj,
                len: n as usize,
            });
        }
        let raw = self
            .mem
            .read_vec(obj.wrapping_add(digits_at), (n * 4) as usize, 1 << 20)?;
        Ok((
            neg,
            raw.chunks_exact(4)
                .map(|c| le_u32(c, 0) & 0x3fff_ffff)
                .collect(),
        ))
    }

    /// An int that fits in 64 bits (e.g. a thread ident).
    pub(crate) fn int_u64(&self, obj: u64) -> R<u64> {
        if let Some(ival) = self.layout.object.int_value {
            // 2.7's bool is an int subtype with the same layout.
            if matches!(self.type_name(obj)?.as_str(), "int" | "bool") {
                return self.mem.read_u64(obj.wrapping_add(ival));
            }
        }
        let (_, d) = self.long_digits(obj)?;
        if d.len() > 3 {
            return Err(bad(obj));
        }
        Ok(d.iter().rev().fold(0u64, |acc, &x| (acc << 30) | x as u64))
    }

    /// The value of a Python `float`.
    pub(crate) fn float(&self, obj: u64) -> Option<f64> {
        if self.type_name(obj).ok()? != "float" {
            return None;
        }
        let at = obj.wrapping_add(self.layout.object.float_value);
        self.mem.read_u64(at).ok().map(f64::from_bits)
    }

    /// The value of a Python `float` or `int` (a duration, say), as a
    /// float; None for anything else, or an int past 60 bits.
    pub(crate) fn number(&self, obj: u64) -> Option<f64> {
        match self.type_name(obj).ok()?.as_str() {
            "float" => self.float(obj),
            "int" => {
                if let Some(ival) = self.layout.object.int_value {
                    let v = self.mem.read_u64(obj.wrapping_add(ival)).ok()? as i64;
                    return Some(v as f64);
                }
                let (neg, d) = self.long_digits(obj).ok()?;
                if d.len() > 2 {
                    return None;
                }
                let v = d.iter().rev().fold(0u64, |acc, &x| (acc << 30) | x as u64) as f64;
                Some(if neg { -v } else { v })
            }
            _ => None,
        }
    }

    /// Decimal text of an int, exact.
    pub(crate) fn int_repr(&self, obj: u64) -> R<String> {
        if let Some(ival) = self.layout.object.int_value {
            if self.type_name(obj)? == "int" {
                return Ok((self.mem.read_u64(obj.wrapping_add(ival))? as i64).to_string());
            }
        }
        let (neg, d) = self.long_digits(obj)?;
        Ok(digits_to_decimal(neg, &d))
    }

    /// (key, value) pointers of a dict, at most `max`.
    pub(crate) fn dict_items(&self, dict: u64, max: u64) -> R<Vec<(u64, u64)>> {
        Ok(self.dict_items_counted(dict, max)?.0)
    }

    /// (key, value) pointers of a dict, at most `max`, and how many it has.
    pub(crate) fn dict_items_counted(&self, dict: u64, max: u64) -> R<(Vec<(u64, u64)>, u64)> {
        match &self.layout.dict {
            DictLayout::Py2 { mask, table } => {
                let m = self.mem.read_u64(dict.wrapping_add(*mask))?;
                if m >= MAX_DICT_ENTRIES {
                    return Err(bad(dict));
                }
                let t = self.ptr(dict.wrapping_add(*table))?;
                let raw = self.mem.read_vec(t, ((m + 1) * 24) as usize, 8 << 20)?;
                let live = raw
                    .chunks_exact(24)
                    .map(|e| (le_u64(e, 8), le_u64(e, 16)))
                    .filter(|(k, v)| *k != 0 && *v != 0);
                let total = live.clone().count() as u64;
                Ok((live.take(max as usize).collect(), total))
            }
            DictLayout::Compact {
                ma_keys,
                ma_values,
                keys,
                values_array,
            } => {
                let k = self.ptr(dict.wrapping_add(*ma_keys))?;
                let values = self.ptr(dict.wrapping_add(*ma_values))?;
                self.keys_items(
                    k,
                    (values != 0).then_some(values.wrapping_add(*values_array)),
                    *keys,
                    max,
                )
            }
        }
    }

    /// Entries of a `PyDictKeysObject`, with values from `values` when split.
    fn keys_items(
        &self,
        k: u64,
        values: Option<u64>,
        keys: DictKeysLayout,
        max: u64,
    ) -> R<(Vec<(u64, u64)>, u64)> {
        let (entries_at, n, entry_size, key_off) = match keys {
            DictKeysLayout::Sized {
                dk_size,
                dk_nentries,
                dk_indices,
            } => {
                let size = self.mem.read_u64(k.wrapping_add(dk_size))?;
                let n = self.mem.read_u64(k.wrapping_add(dk_nentries))?;
                if size > self.max_entries * 2 || !size.is_power_of_two() || n > size {
                    return Err(bad(k));
                }
                let width = match size {
                    0..=0xff => 1,
                    0x100..=0xffff => 2,
                    0x10000..=0xffff_ffff => 4,
                    _ => 8,
                };
                (k.wrapping_add(dk_indices + size * width), n, 24u64, 8u64)
            }
            DictKeysLayout::Log2 {
                dk_log2_size,
                dk_log2_index_bytes,
                dk_kind,
                dk_nentries,
                dk_indices,
            } => {
                let mut hdr = [0u8; 3];
                self.mem.read(k.wrapping_add(dk_log2_size), &mut hdr[..1])?;
                self.mem
                    .read(k.wrapping_add(dk_log2_index_bytes), &mut hdr[1..2])?;
                self.mem.read(k.wrapping_add(dk_kind), &mut hdr[2..3])?;
                let n = self.mem.read_u64(k.wrapping_add(dk_nentries))?;
                if hdr[0] > 30 || hdr[1] > 34 || n > (1u64 << hdr[0]) {
                    return Err(bad(k));
                }
                let (size, key_off) = if hdr[2] == 0 { (24, 8) } else { (16, 0) };
                (
                    k.wrapping_add(dk_indices + (1u64 << hdr[1])),
                    n,
                    size,
                    key_off,
                )
            }
        };
        let n = n.min(self.max_entries);
        let raw = self.container_bytes(entries_at, n * entry_size, entry_size)?;
        let vals = match values {
            Some(v) => Some(self.container_bytes(v, n * 8, 8)?),
            None => None,
        };
        let mut out = Vec::new();
        let mut total = 0;
        for (i, e) in raw.chunks_exact(entry_size as usize).enumerate() {
            let key = le_u64(e, key_off);
            let val = match &vals {
                Some(v) => le_u64(v, i as u64 * 8),
                None => le_u64(e, key_off + 8),
            };
            if key != 0 && val != 0 {
                total += 1;
                if (out.len() as u64) < max {
                    out.push((key, val));
                }
            }
        }
        Ok((out, total))
    }

    /// Value of the str key `name` in a dict.
    pub(crate) fn dict_get(&self, dict: u64, name: &str) -> R<Option<u64>> {
        self.find_str_key(self.dict_items(dict, MAX_DICT_ENTRIES)?, name)
    }

    fn find_str_key(&self, items: Vec<(u64, u64)>, name: &str) -> R<Option<u64>> {
        for (k, v) in items {
            if let Ok((s, false)) = self.string(k, name.len() as u64 + 1) {
                if s == name {
                    return Ok(Some(v));
                }
            }
        }
        Ok(None)
    }

    /// Attribute `name` from an instance's `__dict__` (plain, managed or inline).
    pub(crate) fn instance_attr(&self, obj: u64, name: &str) -> R<Option<u64>> {
        self.find_str_key(self.instance_items(obj)?, name)
    }

    /// (name, value) pointers of an instance's attributes, wherever its
    /// `__dict__` keeps them (plain, managed or inline); empty without one.
    pub(crate) fn instance_items(&self, obj: u64) -> R<Vec<(u64, u64)>> {
        let o = &self.layout.object;
        let t = self.type_of(obj)?;
        let flags = self.mem.read_u64(t.wrapping_add(o.tp_flags))?;
        let cached_keys =
            || -> R<u64> { self.ptr(t.wrapping_add(o.ht_cached_keys.ok_or_else(|| bad(t))?)) };
        let (keys_layout, values_array) = match &self.layout.dict {
            DictLayout::Compact {
                keys, values_array, ..
            } => (Some(*keys), *values_array),
            DictLayout::Py2 { .. } => (None, 0),
        };
        let split = |values: u64| -> R<Vec<(u64, u64)>> {
            let kl = keys_layout.ok_or_else(|| bad(obj))?;
            let (items, _) = self.keys_items(
                cached_keys()?,
                Some(values.wrapping_add(values_array)),
                kl,
                MAX_DICT_ENTRIES,
            )?;
            Ok(items)
        };
        let dict = match o.instance_dict {
            InstanceDict::Managed311 { flag, dict, values } if flags & flag != 0 => {
                let d = self.ptr(obj.wrapping_add_signed(dict))?;
                if d == 0 {
                    let v = self.ptr(obj.wrapping_add_signed(values))?;
                    return if v == 0 { Ok(Vec::new()) } else { split(v) };
                }
                d
            }
            InstanceDict::Managed312 {
                flag,
                dict_or_values,
            } if flags & flag != 0 => {
                let w = self.ptr(obj.wrapping_add_signed(dict_or_values))?;
                if w & 1 != 0 {
                    // Tagged: the word is the values pointer minus one.
                    return split(w.wrapping_add(1));
                }
                w
            }
            InstanceDict::Inline313 {
                flag,
                inline_flag,
                dict,
            } if flags & flag != 0 => {
                let d = self.ptr(obj.wrapping_add_signed(dict))?;
                if d == 0 && flags & inline_flag != 0 {
                    let basic = self.mem.read_u64(t.wrapping_add(o.tp_basicsize))?;
                    return split(obj.wrapping_add(basic));
                }
                d
            }
            _ => {
                let off = self.mem.read_u64(t.wrapping_add(o.tp_dictoffset))? as i64;
                if off <= 0 || off > 1 << 20 {
                    return Ok(Vec::new());
                }
                self.ptr(obj.wrapping_add(off as u64))?
            }
        };
        if dict == 0 {
            return Ok(Vec::new());
        }
        self.dict_items(dict, MAX_DICT_ENTRIES)
    }
}

/// Base-2^30 digits (least significant first) to decimal.
fn digits_to_decimal(neg: bool, digits: &[u32]) -> String {
    let mut d: Vec<u32> = digits.to_vec();
    while d.last() == Some(&0) {
        d.pop();
    }
    if d.is_empty() {
        return "0".into();
    }
    // Repeated division by 10^9, most significant digit first.
    let mut chunks: Vec<u32> = Vec::new();
    while !d.is_empty() {
        let mut rem: u64 = 0;
        for x in d.iter_mut().rev() {
            let cur = (rem << 30) | *x as u64;
            *x = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        chunks.push(rem as u32);
        while d.last() == Some(&0) {
            d.pop();
        }
    }
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    s.push_str(&chunks.last().unwrap_or(&0).to_string());
    for c in chunks.iter().rev().skip(1) {
        s.push_str(&format!("{c:09}"));
    }
    s
}

/// The offset of `__slots__` attribute `name` in objects of type `ty`:
/// its member descriptor's, found along the type's `__mro__`.
pub(crate) fn slot_offset(objr: &ObjReader, l: &AsyncioLayout, ty: u64, name: &str) -> Option<u64> {
    let mem = objr.mem;
    let mro = mem.read_u64(ty.wrapping_add(l.type_mro)).ok()?;
    let (types, _) = objr.tuple_items(mro, 32).ok()?;
    for t in types {
        let Ok(d) = mem.read_u64(t.wrapping_add(l.type_dict)) else {
            continue;
        };
        if d == 0 {
            continue;
        }
        let Ok(Some(desc)) = objr.dict_get(d, name) else {
            continue;
        };
        if !objr.type_name(desc).is_ok_and(|n| n == "member_descriptor") {
            return None;
        }
        let def = mem.read_u64(desc.wrapping_add(l.member_descr_def)).ok()?;
        let off = mem.read_u64(def.wrapping_add(MEMBER_DEF_OFFSET)).ok()?;
        return (16..1 << 16).contains(&off).then_some(off);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_ints_exact() {
        // 2**100 in base 2**30: 100 = 3*30 + 10
        assert_eq!(
            digits_to_decimal(false, &[0, 0, 0, 1 << 10]),
            "1267650600228229401496703205376"
        );
        assert_eq!(digits_to_decimal(true, &[5]), "-5");
        assert_eq!(digits_to_decimal(false, &[]), "0");
        assert_eq!(digits_to_decimal(false, &[0, 1]), (1u64 << 30).to_string());
    }
}
