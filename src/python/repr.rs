//! A bounded repr() of any object in the target, for `--locals`: nested
//! containers while they fit in the characters given, cycles as `[...]`,
//! numpy scalars by value, and floats laid out as Python prints them. It
//! reads through [`ObjReader`]; what it renders is text, never a pointer.

use super::objects::{ObjReader, R};
use super::strings;
use crate::cpython_layouts::StringLayout;
use crate::memory::MemoryExt;

impl ObjReader<'_> {
    /// A bounded, repr()-like rendering of any object, at most `max_chars`
    /// characters with its `...`: nested containers in full while they fit,
    /// then `...` and the closing brackets; recursive containers as
    /// `[...]`/`{...}`, like `repr`; numpy scalars by value.
    pub(crate) fn repr(&self, obj: u64, max_chars: usize) -> Repr {
        let mut st = ReprState {
            out: String::new(),
            max: max_chars,
            tail: 0,
            full: false,
            bare: false,
            stack: Vec::new(),
        };
        let left_out = self.repr_into(obj, &mut st);
        let mut text = st.out;
        // Only a value that is not a container (a huge int) or containers
        // nested deeper than their closing brackets fit get here.
        if text.chars().count() > max_chars {
            let keep = max_chars.saturating_sub(3);
            text = text.chars().take(keep).collect::<String>() + "...";
        }
        Repr { text, left_out }
    }

    /// Render `obj` into `st`; returns how many items (or characters) of
    /// it were left out, when any were.
    fn repr_into(&self, obj: u64, st: &mut ReprState) -> Option<u64> {
        let Ok(tn) = self.type_name(obj) else {
            st.out.push_str(&invalid(obj));
            return None;
        };
        let mark = st.out.len();
        let depth = st.stack.len();
        match self.repr_known(obj, &tn, st) {
            Ok(left) => left,
            Err(_) => {
                // Half-rendered: start again at the mark, and say what it is.
                st.out.truncate(mark);
                st.stack.truncate(depth);
                st.out.push_str(&invalid(obj));
                None
            }
        }
    }

    fn repr_known(&self, obj: u64, tn: &str, st: &mut ReprState) -> R<Option<u64>> {
        let o = &self.layout.object;
        let py2 = o.int_value.is_some();
        let room = st.room();
        match tn {
            "NoneType" => st.out.push_str("None"),
            "bool" => st.out.push_str(if self.int_u64(obj)? != 0 {
                "True"
            } else {
                "False"
            }),
            "int" | "long" => {
                st.out.push_str(&self.int_repr(obj)?);
                if py2 && tn == "long" {
                    st.out.push('L');
                }
            }
            "float" => {
                let v = f64::from_bits(self.mem.read_u64(obj.wrapping_add(o.float_value))?);
                st.out.push_str(&float_repr(v));
            }
            "str" if !py2 => {
                let (s, _) = self.string(obj, room as u64 + 1)?;
                let (r, used) = strings::repr_str_counted(&s, room);
                st.out.push_str(&r);
                return Ok(st.cut(self.chars_left_out(obj, used), used));
            }
            "str" | "bytes" => {
                let (b, _) = self.bytes(obj, room as u64 + 1)?;
                // Python 2's str drops the `b` prefix the rendering counts.
                let limit = if py2 { room + 1 } else { room };
                let (r, used) = strings::repr_bytes_counted(&b, limit);
                st.out.push_str(if py2 { &r[1..] } else { &r });
                let len = self.ob_size(obj)?.max(0) as u64;
                return Ok(st.cut((used < len).then(|| len - used), used));
            }
            "unicode" => {
                let (s, _) = self.string(obj, room as u64 + 1)?;
                st.out.push('u');
                let (r, used) = strings::repr_str_counted(&s, room.saturating_sub(1));
                st.out.push_str(&r);
                return Ok(st.cut(self.chars_left_out(obj, used), used));
            }
            "list" | "tuple" => {
                let (open, close) = if tn == "list" { ("[", "]") } else { ("(", ")") };
                if st.stack.contains(&obj) || st.stack.len() >= MAX_REPR_DEPTH {
                    st.out.push_str(&format!("{open}...{close}"));
                    return Ok(None);
                }
                let want = items_wanted(room);
                let (items, total) = if tn == "list" {
                    self.list_items(obj, want)?
                } else {
                    self.tuple_items(obj, want)?
                };
                st.out.push_str(open);
                st.open(obj, close.len());
                let shown = self.seq_into(&items, st);
                st.close(close.len());
                let left = total.saturating_sub(shown);
                if left > 0 {
                    st.out.push_str(if shown > 0 { ", ..." } else { "..." });
                } else if tn == "tuple" && total == 1 {
                    st.out.push(',');
                }
                st.out.push_str(close);
                return Ok((left > 0).then_some(left));
            }
            "set" | "frozenset" => {
                let frozen = tn == "frozenset";
                let (items, total) = self.set_items_counted(obj, items_wanted(room))?;
                if total == 0 {
                    st.out
                        .push_str(if frozen { "frozenset()" } else { "set()" });
                    return Ok(None);
                }
                st.out.push_str(if frozen { "frozenset({" } else { "{" });
                // Members are hashable, so a set never contains itself.
                let close = if frozen { 2 } else { 1 };
                st.open(obj, close);
                let shown = self.seq_into(&items, st);
                st.close(close);
                let left = total.saturating_sub(shown);
                if left > 0 {
                    st.out.push_str(if shown > 0 { ", ..." } else { "..." });
                }
                st.out.push_str(if frozen { "})" } else { "}" });
                return Ok((left > 0).then_some(left));
            }
            "dict" => {
                if st.stack.contains(&obj) || st.stack.len() >= MAX_REPR_DEPTH {
                    st.out.push_str("{...}");
                    return Ok(None);
                }
                let (items, total) = self.dict_items_counted(obj, items_wanted(room) / 2 + 1)?;
                st.out.push('{');
                st.open(obj, 1);
                let mut shown = 0u64;
                for (k, v) in &items {
                    if st.full {
                        break;
                    }
                    let mark = st.out.len();
                    if shown > 0 {
                        st.out.push_str(", ");
                    }
                    self.repr_into(*k, st);
                    st.out.push_str(": ");
                    self.repr_into(*v, st);
                    if !st.fits(mark) {
                        break;
                    }
                    shown += 1;
                }
                st.close(1);
                let left = total.saturating_sub(shown);
                if left > 0 {
                    st.out.push_str(if shown > 0 { ", ..." } else { "..." });
                }
                st.out.push('}');
                return Ok((left > 0).then_some(left));
            }
            _ => match self.numpy_scalar(obj, tn)? {
                Some(v) => st.out.push_str(&v),
                None => st.out.push_str(&format!("<{tn} at 0x{obj:x}>")),
            },
        }
        Ok(None)
    }

    /// Characters of a `str` left out when `used` of them were shown.
    fn chars_left_out(&self, obj: u64, used: u64) -> Option<u64> {
        let len = match &self.layout.string {
            StringLayout::Pep393 { length, .. } => self.mem.read_u64(obj.wrapping_add(*length)),
            StringLayout::Py2 { unicode_length, .. } => {
                self.mem.read_u64(obj.wrapping_add(*unicode_length))
            }
        }
        .ok()? as i64;
        let len = len.max(0) as u64;
        (used < len).then(|| len - used)
    }

    /// Items rendered one after another while they fit; how many were.
    fn seq_into(&self, items: &[u64], st: &mut ReprState) -> u64 {
        let mut shown = 0;
        for it in items {
            if st.full {
                break;
            }
            let mark = st.out.len();
            if shown > 0 {
                st.out.push_str(", ");
            }
            self.repr_into(*it, st);
            if !st.fits(mark) {
                break;
            }
            shown += 1;
        }
        shown
    }

    /// The value of a numpy scalar (`np.int8(2)` shows as `2`), read from
    /// the scalar object's layout: the C value right after the object
    /// header, in a type whose basic size is just that. None for any other
    /// type, or a type whose size says the layout is not the expected one.
    fn numpy_scalar(&self, obj: u64, tn: &str) -> R<Option<String>> {
        #[derive(Clone, Copy)]
        enum Kind {
            Bool,
            Int,
            Uint,
            Float,
        }
        let Some(name) = tn.strip_prefix("numpy.") else {
            return Ok(None);
        };
        let (width, kind) = match name {
            "bool_" | "bool" => (1, Kind::Bool),
            "int8" | "byte" => (1, Kind::Int),
            "uint8" | "ubyte" => (1, Kind::Uint),
            "int16" | "short" => (2, Kind::Int),
            "uint16" | "ushort" => (2, Kind::Uint),
            "int32" | "intc" => (4, Kind::Int),
            "uint32" | "uintc" => (4, Kind::Uint),
            "int64" | "longlong" => (8, Kind::Int),
            "uint64" | "ulonglong" => (8, Kind::Uint),
            "float32" | "single" => (4, Kind::Float),
            "float64" | "double" => (8, Kind::Float),
            _ => return Ok(None),
        };
        let o = &self.layout.object;
        // PyObject's header ends with ob_type.
        let head = o.ob_type + 8;
        let t = self.type_of(obj)?;
        let basic = self.mem.read_u64(t.wrapping_add(o.tp_basicsize))?;
        if basic < head + width || basic > (head + width + 7) & !7 {
            return Ok(None);
        }
        let mut b = [0u8; 8];
        self.mem
            .read(obj.wrapping_add(head), &mut b[..width as usize])?;
        let raw = u64::from_le_bytes(b);
        Ok(Some(match (kind, width) {
            (Kind::Bool, _) => if raw != 0 { "True" } else { "False" }.to_string(),
            (Kind::Uint, _) => raw.to_string(),
            (Kind::Int, w) => {
                // Sign-extend from the value's width.
                let shift = 64 - 8 * w as u32;
                (((raw << shift) as i64) >> shift).to_string()
            }
            (Kind::Float, 4) => float32_repr(f32::from_bits(raw as u32)),
            (Kind::Float, _) => float_repr(f64::from_bits(raw)),
        }))
    }
}

/// `<invalid object at 0x…>`: what an object we cannot read shows as.
fn invalid(obj: u64) -> String {
    format!("<invalid object at 0x{obj:x}>")
}

/// Deepest nesting rendered; deeper containers show as `[...]`.
const MAX_REPR_DEPTH: usize = 64;
/// Most items read from one container for its repr.
const MAX_REPR_ITEMS: u64 = 4096;

/// How many items of a container could fit in `room` characters (each
/// takes at least one character and a separator), plus one to see a cut.
fn items_wanted(room: usize) -> u64 {
    (room as u64 / 3 + 2).min(MAX_REPR_ITEMS)
}

/// A rendered value and, when the outermost value was cut, how many of
/// its items (or characters, for strings) were left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Repr {
    pub(crate) text: String,
    pub(crate) left_out: Option<u64>,
}

struct ReprState {
    out: String,
    /// The most characters of the whole rendering, its `...` included.
    max: usize,
    /// Characters kept for the containers open now to end cut short: each
    /// its `, ...` and its closing bracket.
    tail: usize,
    /// An item did not fit: every open container ends here.
    full: bool,
    /// The string just rendered had no room for any of its characters.
    bare: bool,
    /// Containers being rendered, outermost first: one met again is a cycle.
    stack: Vec<u64>,
}

impl ReprState {
    fn chars(&self) -> usize {
        self.out.chars().count()
    }

    /// Characters a string here may show before its own `...`.
    fn room(&self) -> usize {
        self.max.saturating_sub(self.chars() + self.tail + 3)
    }

    /// A string cut to the room left fills the rendering: the containers
    /// around it end after it (or instead, when none of it was shown).
    fn cut(&mut self, left_out: Option<u64>, used: u64) -> Option<u64> {
        self.full |= left_out.is_some();
        self.bare = left_out.is_some() && used == 0;
        left_out
    }

    fn open(&mut self, obj: u64, close: usize) {
        self.stack.push(obj);
        self.tail += ", ...".len() + close;
    }

    fn close(&mut self, close: usize) {
        self.stack.pop();
        self.tail -= ", ...".len() + close;
    }

    /// Whether the item rendered since `mark` (a byte offset of `out`)
    /// leaves room for the open containers to end; if not, it is taken
    /// back and the rendering is full: no further item is tried.
    fn fits(&mut self, mark: usize) -> bool {
        if !self.bare && self.chars() + self.tail <= self.max {
            return true;
        }
        self.out.truncate(mark);
        self.full = true;
        self.bare = false;
        false
    }
}

/// Python's repr() of a float: shortest round-trip digits, exponent outside [1e-4, 1e16).
fn float_repr(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    float_text(&format!("{v:e}"))
}

/// numpy's str() of a float32: the shortest digits that round-trip as a
/// float32, laid out like Python's float repr.
fn float32_repr(v: f32) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    float_text(&format!("{v:e}"))
}

/// Python's float layout for shortest digits in Rust's `{:e}` form.
fn float_text(e: &str) -> String {
    // e.g. "-1.2345e-7", shortest round-trip digits
    let (mant, exp) = e.split_once('e').unwrap_or((e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mant) = mant.strip_prefix('-').map_or(("", mant), |m| ("-", m));
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let s = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if point as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{s}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        format!(
            "{sign}{m}e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpython_layouts::ALL;
    use crate::memory::SliceMemory;

    /// Objects of every container type whose lengths and pointers are
    /// corrupt: huge, negative, or near the top of the address space.
    #[test]
    fn corrupt_objects_render_without_panicking() {
        const BASE: u64 = 0x10_0000;
        for layout in ALL {
            let o = &layout.object;
            let mut mem = SliceMemory::new();
            let mut region = vec![0u8; 0x4000];
            fn put(region: &mut [u8], at: u64, v: u64) {
                let at = at as usize;
                region[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            let names = [
                "list", "tuple", "dict", "set", "str", "int", "bytes", "unicode",
            ];
            for (i, name) in names.iter().enumerate() {
                let ty = 0x1000 + i as u64 * 0x100;
                put(&mut region, ty + o.tp_name, BASE + ty + 0x80);
                let nb = (ty + 0x80) as usize;
                region[nb..nb + name.len()].copy_from_slice(name.as_bytes());
                for (j, bad) in [i64::MAX as u64, u64::MAX, u64::MAX - 7, 1 << 40]
                    .iter()
                    .enumerate()
                {
                    let obj = 0x2000 + (i * 4 + j) as u64 * 0x80;
                    put(&mut region, obj + o.ob_type, BASE + ty);
                    // Every other word of the object holds the corrupt value.
                    for w in (0..0x80).step_by(8) {
                        if w != o.ob_type {
                            put(&mut region, obj + w, *bad);
                        }
                    }
                }
            }
            mem.add(BASE, region);
            let r = ObjReader::new(&mem, layout);
            for obj in (0x2000..0x2000 + 32 * 0x80).step_by(0x80) {
                let _ = r.repr(BASE + obj, 128);
                let _ = r.instance_attr(BASE + obj, "x");
            }
            for obj in [0, u64::MAX, u64::MAX - 7, BASE + 0x3ff8] {
                let _ = r.repr(obj, 128);
                let _ = r.dict_items(obj, 16);
                let _ = r.full_string(obj);
            }
        }
    }

    #[test]
    fn floats_like_python() {
        assert_eq!(float_repr(1.5), "1.5");
        assert_eq!(float_repr(2.0), "2.0");
        assert_eq!(float_repr(-0.0), "-0.0");
        assert_eq!(float_repr(1e16), "1e+16");
        assert_eq!(float_repr(1.25e-5), "1.25e-05");
        assert_eq!(float_repr(0.0001), "0.0001");
        assert_eq!(float_repr(123456789012345.6), "123456789012345.6");
        assert_eq!(float_repr(0.1), "0.1");
        assert_eq!(float_repr(f64::NAN), "nan");
        assert_eq!(float32_repr(0.1), "0.1");
        assert_eq!(float32_repr(0.5), "0.5");
        assert_eq!(float32_repr(1e16), "1e+16");
        assert_eq!(float32_repr(-3.0), "-3.0");
    }
}
