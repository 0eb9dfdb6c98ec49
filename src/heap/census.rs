//! The census: every object the collector tracks, plus what the built-in
//! containers among them (list, tuple, dict, set, frozenset) hold directly
//! (a dict: its keys and values), each object counted once, by type, with
//! its size as `sys.getsizeof` reports it.

use crate::cpython_layouts::gc::GcLayout;
use crate::cpython_layouts::{DictKeysLayout, DictLayout, Layout, LongFormat, StringLayout};
use crate::memory::{le_u64, Memory, MemoryExt};
use crate::python::gc::Tracked;
use crate::python::objects::ObjReader;
use crate::python::pagecache::PageCache;
use crate::python::strings::parse_state;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

/// `tp_flags` bits (the same 3.8–3.15).
const HEAPTYPE: u64 = 1 << 9;
const HAVE_GC: u64 = 1 << 14;
const LONG_SUBCLASS: u64 = 1 << 24;
const UNICODE_SUBCLASS: u64 = 1 << 28;
const TYPE_SUBCLASS: u64 = 1 << 31;

/// Items read from one container, at most.
const MAX_ITEMS: u64 = 1 << 24;
/// Objects handled through one page cache before a fresh one.
const OBJECTS_PER_CACHE: usize = 4096;
/// Module globals' containers kept for sorting, at most.
const MAX_WATCHED: usize = 1 << 16;
/// A type name, at most (bytes).
const MAX_NAME: usize = 256;

/// One type's line of the census.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TypeRow {
    /// `module.Name` for classes, `tp_name` for built-in types.
    pub name: String,
    pub count: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Census {
    /// Largest first (bytes, then count, then name).
    pub types: Vec<TypeRow>,
    pub objects: u64,
    pub bytes: u64,
    /// Of `objects`, those on the collector's lists.
    pub gc_tracked: u64,
    pub interpreters: usize,
    /// Why the census is partial (or racy); empty when whole.
    pub partial: Vec<String>,
    /// What is approximate in it (objects counted, sizes not exact).
    pub notes: Vec<String>,
    /// The largest containers, largest first (holders not named yet).
    pub containers: Vec<super::holders::Container>,
    /// The containers among `watched` (module globals' values), largest
    /// first, at most [`super::holders::TOP_GLOBALS`] (holders not named yet).
    pub globals: Vec<super::holders::Container>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    List,
    Tuple,
    Dict,
    Set,
    Str,
    Int,
    Type,
    /// `bytearray`: its buffer's allocated bytes too.
    ByteArray,
    /// `numpy.ndarray`: its shape and strides, and the data it owns.
    NdArray,
    Other,
}

impl Kind {
    fn container(self) -> bool {
        matches!(self, Kind::List | Kind::Tuple | Kind::Dict | Kind::Set)
    }
}

struct TypeFacts {
    row: usize,
    kind: Kind,
    flags: u64,
    basicsize: u64,
    itemsize: u64,
}

struct Counter<'a> {
    layout: &'a Layout,
    gc: &'a GcLayout,
    types: HashMap<u64, TypeFacts>,
    largest: super::holders::Largest,
    watched: &'a HashSet<u64>,
    /// (address, row, length, bytes) of the watched containers counted.
    globals: Vec<(u64, usize, u64, u64)>,
    rows: Vec<TypeRow>,
    by_name: HashMap<String, usize>,
    errors: u64,
    first_error: Option<String>,
    /// Containers whose items were not all read (or changed meanwhile).
    truncated: u64,
    /// Objects counted at their type's basic size, their own unreadable.
    approximated: u64,
    first_approximated: Option<String>,
}

/// Count `tracked` and what its containers hold, reading `mem`.
pub(crate) fn census(
    mem: &dyn Memory,
    layout: &Layout,
    gc: &GcLayout,
    tracked: Tracked,
    max_objects: usize,
    watched: &HashSet<u64>,
) -> Census {
    let mut c = Counter {
        layout,
        gc,
        types: HashMap::new(),
        largest: Default::default(),
        watched,
        globals: Vec::new(),
        rows: Vec::new(),
        by_name: HashMap::new(),
        errors: 0,
        first_error: None,
        approximated: 0,
        first_approximated: None,
        truncated: 0,
    };
    let mut partial = tracked.partial;
    let gc_tracked = tracked.objects.len() as u64;
    let mut seen: HashSet<u64> = HashSet::with_capacity(tracked.objects.len() * 2);
    for (o, _) in &tracked.objects {
        seen.insert(*o);
    }
    // What the containers hold that the lists do not: found first, while
    // the containers are read, then counted like the rest.
    let mut held: Vec<u64> = Vec::new();
    let mut capped = false;
    for chunk in tracked.objects.chunks(OBJECTS_PER_CACHE) {
        let cache = PageCache::new(mem);
        let reader = ObjReader::new(&cache, layout).with_max_entries(MAX_ITEMS);
        for &(obj, ty) in chunk {
            let kind = c.facts(&cache, &reader, ty).map(|f| f.kind);
            if let Some(kind) = kind.filter(|k| k.container()) {
                match items(&reader, kind, obj) {
                    Ok((refs, whole)) => {
                        if !whole {
                            c.truncated += 1;
                        }
                        let length = if kind == Kind::Dict {
                            refs.len() as u64 / 2
                        } else {
                            refs.len() as u64
                        };
                        c.count(&cache, &reader, obj, ty, Some(length));
                        for r in refs {
                            if r != 0 && seen.len() < max_objects && seen.insert(r) {
                                held.push(r);
                            } else if seen.len() >= max_objects {
                                capped = true;
                            }
                        }
                    }
                    Err(e) => {
                        c.error(format!("reading the items of 0x{obj:x}: {e}"));
                        c.count(&cache, &reader, obj, ty, None);
                    }
                }
            } else {
                c.count(&cache, &reader, obj, ty, None);
            }
        }
    }
    for chunk in held.chunks(OBJECTS_PER_CACHE) {
        let cache = PageCache::new(mem);
        let reader = ObjReader::new(&cache, layout);
        for &obj in chunk {
            match reader.type_of(obj) {
                Ok(ty) => {
                    // A global's container off the collector's lists (a
                    // dict of atoms): its length, for the globals' list;
                    // what it holds is not counted (the semantics').
                    let kind = if watched.contains(&obj) {
                        c.facts(&cache, &reader, ty).map(|f| f.kind)
                    } else {
                        None
                    };
                    let length = kind
                        .filter(|k| k.container())
                        .and_then(|k| items(&reader, k, obj).ok())
                        .map(|(refs, _)| {
                            if kind == Some(Kind::Dict) {
                                refs.len() as u64 / 2
                            } else {
                                refs.len() as u64
                            }
                        });
                    c.count(&cache, &reader, obj, ty, length)
                }
                Err(e) => c.error(format!("reading the type of 0x{obj:x}: {e}")),
            }
        }
    }
    if capped {
        partial.push(format!("stopped at {max_objects} objects (the limit)"));
    }
    if c.truncated > 0 {
        partial.push(format!(
            "{} containers were not read whole (more than {MAX_ITEMS} items, or changing)",
            c.truncated
        ));
    }
    if c.errors > 0 {
        partial.push(format!(
            "{} objects or types could not be read whole (first: {})",
            c.errors,
            c.first_error.as_deref().unwrap_or("?")
        ));
    }
    let mut notes = Vec::new();
    if c.approximated > 0 {
        notes.push(format!(
            "{} objects counted at their type's basic size, their own size unreadable (first: {})",
            c.approximated,
            c.first_approximated.as_deref().unwrap_or("?")
        ));
    }
    let mut containers = std::mem::take(&mut c.largest).into_sorted();
    for k in &mut containers {
        k.type_name = c.rows[k.row].name.clone();
    }
    c.globals
        .sort_by(|a, b| b.3.cmp(&a.3).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
    c.globals.truncate(super::holders::TOP_GLOBALS);
    let globals = c
        .globals
        .iter()
        .map(|&(address, row, length, bytes)| super::holders::Container {
            address,
            row,
            type_name: c.rows[row].name.clone(),
            length,
            bytes,
            holders: Vec::new(),
        })
        .collect();
    let mut types = c.rows;
    types.retain(|r| r.count > 0);
    types.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.count.cmp(&a.count))
            .then(a.name.cmp(&b.name))
    });
    Census {
        objects: types.iter().map(|r| r.count).sum(),
        bytes: types.iter().map(|r| r.bytes).sum(),
        types,
        gc_tracked,
        interpreters: tracked.interpreters,
        partial,
        notes,
        containers,
        globals,
    }
}

/// What a built-in container holds directly (a dict: its keys and
/// values), and whether that is all of it.
fn items(
    reader: &ObjReader,
    kind: Kind,
    obj: u64,
) -> Result<(Vec<u64>, bool), crate::error::MemError> {
    Ok(match kind {
        Kind::List => {
            let (items, len) = reader.list_items(obj, MAX_ITEMS)?;
            let whole = items.len() as u64 == len;
            (items, whole)
        }
        Kind::Tuple => {
            let (items, len) = reader.tuple_items(obj, MAX_ITEMS)?;
            let whole = items.len() as u64 == len;
            (items, whole)
        }
        Kind::Set => {
            let (items, len) = reader.set_items_counted(obj, MAX_ITEMS)?;
            let whole = items.len() as u64 == len;
            (items, whole)
        }
        Kind::Dict => {
            let (pairs, _) = reader.dict_items_counted(obj, MAX_ITEMS)?;
            // `ma_used` is where a var object's size is.
            let used = reader
                .mem
                .read_u64(obj.wrapping_add(reader.layout.object.ob_size))?;
            let whole = pairs.len() as u64 == used;
            (pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(), whole)
        }
        _ => (Vec::new(), true),
    })
}

impl Counter<'_> {
    fn error(&mut self, why: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(why);
        }
    }

    fn row(&mut self, name: String) -> usize {
        if let Some(&i) = self.by_name.get(&name) {
            return i;
        }
        self.rows.push(TypeRow {
            name: name.clone(),
            count: 0,
            bytes: 0,
        });
        self.by_name.insert(name, self.rows.len() - 1);
        self.rows.len() - 1
    }

    /// The facts of type `ty`, read once.
    fn facts(&mut self, mem: &dyn Memory, reader: &ObjReader, ty: u64) -> Option<&TypeFacts> {
        if !self.types.contains_key(&ty) {
            match self.read_type(mem, reader, ty) {
                Ok(f) => {
                    self.types.insert(ty, f);
                }
                Err(e) => {
                    self.error(format!("reading the type at 0x{ty:x}: {e}"));
                    return None;
                }
            }
        }
        self.types.get(&ty)
    }

    fn read_type(
        &mut self,
        mem: &dyn Memory,
        reader: &ObjReader,
        ty: u64,
    ) -> Result<TypeFacts, crate::error::MemError> {
        let o = &self.layout.object;
        let flags = mem.read_u64(ty.wrapping_add(o.tp_flags))?;
        let basicsize = mem.read_u64(ty.wrapping_add(o.tp_basicsize))?;
        let itemsize = mem.read_u64(ty.wrapping_add(self.gc.tp_itemsize))?;
        if basicsize > 1 << 24 || itemsize > 1 << 16 {
            return Err(crate::error::MemError::TooLarge {
                addr: ty,
                len: basicsize as usize,
            });
        }
        let tp_name = mem.read_u64(ty.wrapping_add(o.tp_name))?;
        let tp_name = reader.c_string(tp_name, MAX_NAME)?;
        let heap = flags & HEAPTYPE != 0;
        let short = tp_name.rsplit('.').next().unwrap_or(&tp_name).to_string();
        let name = if heap {
            // A class: its `__module__`, as Python names it.
            let module = mem
                .read_u64(ty.wrapping_add(self.gc.tp_dict))
                .ok()
                .filter(|d| *d != 0)
                .and_then(|d| reader.dict_get(d, "__module__").ok().flatten())
                .and_then(|m| reader.string(m, MAX_NAME as u64).ok())
                .map(|(s, _)| s);
            match module {
                Some(m) if m != "builtins" => format!("{m}.{short}"),
                Some(_) => short,
                None => tp_name.clone(),
            }
        } else {
            tp_name.clone()
        };
        let kind = if heap {
            Kind::Other
        } else {
            match tp_name.as_str() {
                "list" => Kind::List,
                "tuple" => Kind::Tuple,
                "dict" => Kind::Dict,
                "set" | "frozenset" => Kind::Set,
                "bytearray" => Kind::ByteArray,
                "numpy.ndarray" => Kind::NdArray,
                _ => Kind::Other,
            }
        };
        let kind = match kind {
            Kind::Other if flags & LONG_SUBCLASS != 0 => Kind::Int,
            Kind::Other if flags & UNICODE_SUBCLASS != 0 => Kind::Str,
            Kind::Other if flags & TYPE_SUBCLASS != 0 => Kind::Type,
            k => k,
        };
        Ok(TypeFacts {
            row: self.row(name),
            kind,
            flags,
            basicsize,
            itemsize,
        })
    }

    /// Count one object of type `ty`; `length`: the items of a container
    /// whose items were read (a candidate for the largest).
    fn count(
        &mut self,
        mem: &dyn Memory,
        reader: &ObjReader,
        obj: u64,
        ty: u64,
        length: Option<u64>,
    ) {
        let Some(f) = self.facts(mem, reader, ty) else {
            return;
        };
        let (row, kind, flags, basic, item) = (f.row, f.kind, f.flags, f.basicsize, f.itemsize);
        // An object whose size cannot be read is still counted, at its
        // type's basic size, and the census says how many were.
        let bytes = match self.size(mem, obj, kind, flags, basic, item) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.approximated += 1;
                if self.first_approximated.is_none() {
                    let name = &self.rows[row].name;
                    self.first_approximated = Some(format!("0x{obj:x} ({name}): {e}"));
                }
                basic
            }
        };
        let r = &mut self.rows[row];
        r.count += 1;
        r.bytes += bytes;
        if let Some(length) = length {
            self.largest.offer(obj, row, length, bytes);
            if self.watched.contains(&obj) && self.globals.len() < MAX_WATCHED {
                self.globals.push((obj, row, length, bytes));
            }
        }
    }

    /// `sys.getsizeof(obj)`: the type's `__sizeof__`, plus the collector's
    /// header and the pre-header words where the object has them.
    fn size(
        &self,
        mem: &dyn Memory,
        obj: u64,
        kind: Kind,
        flags: u64,
        basic: u64,
        item: u64,
    ) -> Result<u64, crate::error::MemError> {
        let o = &self.layout.object;
        let ob_size = || -> Result<u64, crate::error::MemError> {
            Ok((mem.read_u64(obj.wrapping_add(o.ob_size))? as i64).unsigned_abs())
        };
        let own = match kind {
            Kind::List => {
                let allocated = mem.read_u64(obj.wrapping_add(self.gc.list_allocated))?;
                basic + bounded(allocated, obj)? * 8
            }
            Kind::Dict => basic + self.dict_extra(mem, obj)?,
            Kind::Set => {
                let table = mem.read_u64(obj.wrapping_add(o.set_table))?;
                if table == obj.wrapping_add(self.gc.set_smalltable) {
                    basic
                } else {
                    let mask = mem.read_u64(obj.wrapping_add(o.set_mask))?;
                    basic + bounded(mask + 1, obj)? * o.set_entry_size
                }
            }
            Kind::Int => {
                let digits = match o.long {
                    LongFormat::ObSize { .. } => ob_size()?,
                    LongFormat::LvTag { tag, .. } => mem.read_u64(obj.wrapping_add(tag))? >> 3,
                };
                basic + bounded(digits.max(self.gc.int_min_digits), obj)? * 4
            }
            Kind::Str => self.str_size(mem, obj, basic)?,
            // `ob_alloc`, the word after the variable-size header.
            Kind::ByteArray => {
                match bounded(mem.read_u64(obj.wrapping_add(o.ob_size + 8))?, obj)? {
                    0 => basic,
                    alloc => basic + alloc + self.gc.bytearray_buffer_header,
                }
            }
            Kind::NdArray => ndarray_size(mem, obj, basic, o.ob_type + 8)?,
            Kind::Type => {
                if mem.read_u64(obj.wrapping_add(o.tp_flags))? & HEAPTYPE != 0 {
                    let keys = mem.read_u64(obj.wrapping_add(self.gc.ht_cached_keys))?;
                    self.gc.heap_type_size
                        + if keys != 0 {
                            self.keys_size(mem, keys)?
                        } else {
                            0
                        }
                } else {
                    self.gc.type_size
                }
            }
            Kind::Tuple | Kind::Other => {
                if item != 0 {
                    basic + bounded(ob_size()?, obj)? * item
                } else {
                    basic
                }
            }
        };
        // `_PyObject_IS_GC`: a type object only when it is a heap type.
        let is_gc = flags & HAVE_GC != 0
            && (kind != Kind::Type || mem.read_u64(obj.wrapping_add(o.tp_flags))? & HEAPTYPE != 0);
        let mut total = own;
        if is_gc {
            total += self.gc.gc_head_size;
        }
        if flags & self.gc.preheader_flags != 0 {
            total += 16;
        }
        Ok(total)
    }

    /// A dict's `__sizeof__` beyond its struct: the values array of a split
    /// dict, and its keys when the dict alone holds them.
    fn dict_extra(&self, mem: &dyn Memory, obj: u64) -> Result<u64, crate::error::MemError> {
        let DictLayout::Compact {
            ma_keys, ma_values, ..
        } = &self.layout.dict
        else {
            return Ok(0);
        };
        let keys = mem.read_u64(obj.wrapping_add(*ma_keys))?;
        let values = mem.read_u64(obj.wrapping_add(*ma_values))?;
        let mut extra = 0;
        if values != 0 {
            let (nentries_at, usable_at) = self.keys_counts();
            let n = mem.read_u64(keys.wrapping_add(nentries_at))?;
            let usable = mem.read_u64(keys.wrapping_add(usable_at))?;
            extra += bounded(n.saturating_add(usable), obj)? * 8;
        }
        if mem.read_u64(keys)? == 1 {
            extra += self.keys_size(mem, keys)?;
        }
        Ok(extra)
    }

    /// Where `dk_nentries` and `dk_usable` (the word before it) are.
    fn keys_counts(&self) -> (u64, u64) {
        match &self.layout.dict {
            DictLayout::Compact {
                keys: DictKeysLayout::Sized { dk_nentries, .. },
                ..
            }
            | DictLayout::Compact {
                keys: DictKeysLayout::Log2 { dk_nentries, .. },
                ..
            } => (*dk_nentries, dk_nentries - 8),
            DictLayout::Py2 { .. } => (0, 0),
        }
    }

    /// `_PyDict_KeysSize`: header, index table and entries.
    fn keys_size(&self, mem: &dyn Memory, keys: u64) -> Result<u64, crate::error::MemError> {
        let DictLayout::Compact { keys: kl, .. } = &self.layout.dict else {
            return Ok(0);
        };
        let usable_fraction = |n: u64| (n << 1) / 3;
        Ok(match *kl {
            DictKeysLayout::Sized {
                dk_size,
                dk_indices,
                ..
            } => {
                let size = mem.read_u64(keys.wrapping_add(dk_size))?;
                if size > 1 << 32 || !size.is_power_of_two() {
                    return Err(too_large(keys));
                }
                let width = match size {
                    0..=0xff => 1,
                    0x100..=0xffff => 2,
                    0x10000..=0xffff_ffff => 4,
                    _ => 8,
                };
                dk_indices + width * size + usable_fraction(size) * 24
            }
            DictKeysLayout::Log2 {
                dk_log2_size,
                dk_log2_index_bytes,
                dk_kind,
                dk_indices,
                ..
            } => {
                let log2 = u64::from(mem.read_u8(keys.wrapping_add(dk_log2_size))?);
                let log2_bytes = u64::from(mem.read_u8(keys.wrapping_add(dk_log2_index_bytes))?);
                let kind = mem.read_u8(keys.wrapping_add(dk_kind))?;
                if log2 > 32 || log2_bytes > 35 {
                    return Err(too_large(keys));
                }
                let entry = if kind == 0 { 24 } else { 16 };
                dk_indices + (1 << log2_bytes) + usable_fraction(1 << log2) * entry
            }
        })
    }

    /// `str.__sizeof__`.
    fn str_size(
        &self,
        mem: &dyn Memory,
        obj: u64,
        basic: u64,
    ) -> Result<u64, crate::error::MemError> {
        let StringLayout::Pep393 {
            length,
            state,
            ascii_size,
            compact_size,
            ..
        } = self.layout.string
        else {
            return Ok(basic);
        };
        let len = bounded(mem.read_u64(obj.wrapping_add(length))?, obj)?;
        let (kind, compact, ascii) = parse_state(mem.read_u32(obj.wrapping_add(state))?);
        let kind = u64::from(kind.max(1));
        if compact && ascii {
            return Ok(ascii_size + len + 1);
        }
        let mut size = if compact {
            compact_size + (len + 1) * kind
        } else {
            basic + (len + 1) * kind
        };
        let mut utf8 = [0u8; 16];
        mem.read(obj.wrapping_add(self.gc.utf8_length), &mut utf8)?;
        let (utf8_len, utf8_ptr) = (le_u64(&utf8, 0), le_u64(&utf8, 8));
        if compact && utf8_ptr != 0 && utf8_ptr != obj.wrapping_add(compact_size) {
            size += bounded(utf8_len, obj)? + 1;
        }
        Ok(size)
    }
}

/// `ndarray.__sizeof__`: the struct, a shape and a stride word per
/// dimension, and the data when the array owns it (`NPY_ARRAY_OWNDATA`):
/// its element count times the element size of its dtype. `head` is where
/// an object's header ends (numpy's structs follow it). The dtype's layout
/// changed with numpy 2 (`flags` widened to 64 bits before `elsize`, now a
/// word): a numpy 2 dtype has a power-of-two alignment word where numpy 1
/// keeps its `fields` pointer (NULL, or a dict), and an element size that
/// alignment divides; otherwise numpy 1's two ints are read, and checked
/// the same way.
fn ndarray_size(
    mem: &dyn Memory,
    obj: u64,
    basic: u64,
    head: u64,
) -> Result<u64, crate::error::MemError> {
    const OWNDATA: u32 = 0x4;
    const MAX_DIMS: u64 = 64;
    let at = |off: u64| obj.wrapping_add(head + off);
    let nd = u64::from(mem.read_u32(at(8))?);
    if nd > MAX_DIMS {
        return Err(too_large(obj));
    }
    let mut size = basic + nd * 16;
    if mem.read_u32(at(48))? & OWNDATA == 0 {
        return Ok(size);
    }
    let dims = mem.read_u64(at(16))?;
    let mut count: u64 = 1;
    for i in 0..nd {
        let d = mem.read_u64(dims.wrapping_add(i * 8))? as i64;
        count = count
            .checked_mul(u64::try_from(d).map_err(|_| too_large(obj))?)
            .ok_or_else(|| too_large(obj))?;
    }
    let descr = mem.read_u64(at(40))?;
    let d = |off: u64| descr.wrapping_add(head + off);
    let aligned = |elsize: u64, align: u64| {
        align.is_power_of_two() && align <= 64 && elsize.is_multiple_of(align)
    };
    let (v2_elsize, v2_align) = (mem.read_u64(d(24))?, mem.read_u64(d(32))?);
    let elsize = if aligned(v2_elsize, v2_align) {
        v2_elsize
    } else {
        let (v1_elsize, v1_align) = (
            u64::from(mem.read_u32(d(16))?),
            u64::from(mem.read_u32(d(20))?),
        );
        if !aligned(v1_elsize, v1_align) {
            return Err(crate::error::MemError::NotA {
                addr: descr,
                what: "a numpy dtype",
            });
        }
        v1_elsize
    };
    let data = count.checked_mul(elsize).ok_or_else(|| too_large(obj))?;
    size += bounded(data, obj)?;
    Ok(size)
}

fn too_large(addr: u64) -> crate::error::MemError {
    crate::error::MemError::TooLarge { addr, len: 0 }
}

/// A count from the target that sizes something: at most 2^36.
fn bounded(n: u64, addr: u64) -> Result<u64, crate::error::MemError> {
    if n > 1 << 36 {
        Err(too_large(addr))
    } else {
        Ok(n)
    }
}
