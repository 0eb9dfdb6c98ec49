//! Where the cyclic collector keeps its lists, and the struct sizes that
//! `sys.getsizeof` adds up, per CPython version (x86-64, default GIL
//! build), as data for `pyinspect heap` (src/python/gc.rs, src/heap/).
//!
//! Each value was read with `offsetof`/`sizeof` from that version's own
//! headers (`Include/internal/pycore_gc.h`, `pycore_interp_structs.h` on
//! 3.14+, `Include/cpython/object.h`); `tests/heap.rs` proves the table
//! against the headers of every installed interpreter, and the census
//! against each interpreter's own `gc.get_objects()`.
//!
//! The collector's state (`struct _gc_runtime_state`) is not located here:
//! the per-version tables (and on 3.13+ the target's `_Py_DebugOffsets`)
//! give where its `collecting` field is, in `_PyRuntime` (3.8) or in each
//! interpreter (3.9+); this table gives where the lists are relative to
//! that field, so one proven offset finds them all.

/// A version's collector lists and object-size facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcLayout {
    pub major: u8,
    pub minor: u8,
    /// The collector's state is `_PyRuntime.gc` (3.8) rather than each
    /// interpreter's `interp->gc`.
    pub in_runtime: bool,
    /// `offsetof(struct _gc_runtime_state, collecting)`.
    pub collecting: u64,
    /// The list heads (`PyGC_Head`s of `struct gc_generation`), from the
    /// start of `struct _gc_runtime_state`: `generations[0..3]` (3.14's
    /// free-threaded `young`/`old[2]` are the same three slots) then
    /// `permanent_generation`. Where a version's patch releases differ,
    /// each candidate is listed: the walker takes the one whose heads the
    /// target's own links confirm (3.13.0 aligns `PyGC_Head` to 8 bytes,
    /// later 3.13 releases to 4, which moves the three generations).
    pub lists: &'static [&'static [u64]],
    /// `sizeof(PyGC_Head)`: the object follows its header.
    pub gc_head_size: u64,
    /// `offsetof(PyTypeObject, tp_dict)` (heap types: their `__module__`).
    pub tp_dict: u64,
    /// `offsetof(PyTypeObject, tp_itemsize)`.
    pub tp_itemsize: u64,
    /// `sizeof(PyTypeObject)`: `type.__sizeof__` of a static type.
    pub type_size: u64,
    /// `sizeof(PyHeapTypeObject)`: `type.__sizeof__` of a heap type, plus
    /// its cached keys at `ht_cached_keys`.
    pub heap_type_size: u64,
    pub ht_cached_keys: u64,
    /// `offsetof(PyListObject, allocated)`.
    pub list_allocated: u64,
    /// `offsetof(PySetObject, smalltable)`: a table elsewhere is the set's own.
    pub set_smalltable: u64,
    /// `tp_flags` bits that give an object two words before its GC header
    /// (`Py_TPFLAGS_PREHEADER`, 3.11+), which `sys.getsizeof` counts.
    pub preheader_flags: u64,
    /// `int.__sizeof__` counts at least this many digits (0 ≤ 3.10, 1 after).
    pub int_min_digits: u64,
    /// `offsetof(PyCompactUnicodeObject, utf8_length)` and `utf8`.
    pub utf8_length: u64,
    pub utf8: u64,
    /// What `bytearray.__sizeof__` adds to a non-empty buffer's allocated
    /// bytes: 0 where the buffer is a bare allocation; 3.15 keeps it in a
    /// `bytes` object (`ob_bytes_object`) and counts that object's header
    /// and trailing NUL too (`offsetof(PyBytesObject, ob_sval) + 1`).
    pub bytearray_buffer_header: u64,
}

const GENERATIONS_THEN_GENERATION0: &[&[u64]] = &[&[24, 48, 72, 104]];
/// 3.13: `PyGC_Head` aligned to 8 (3.13.0) or to 4 bytes (later releases,
/// `_PyObject_ALIGNMENT_SHIFT` 2), right after the three ints.
const LISTS_313: &[&[u64]] = &[&[24, 48, 72, 104], &[20, 44, 68, 104]];

macro_rules! table {
    ($minor:expr, $in_runtime:expr, $collecting:expr, $lists:expr, $type_size:expr,
     $heap_type_size:expr, $cached:expr, $preheader:expr, $min_digits:expr, $utf8:expr,
     $bytearray_buffer_header:expr) => {
        GcLayout {
            major: 3,
            minor: $minor,
            in_runtime: $in_runtime,
            collecting: $collecting,
            lists: $lists,
            gc_head_size: 16,
            tp_dict: 264,
            tp_itemsize: 40,
            type_size: $type_size,
            heap_type_size: $heap_type_size,
            ht_cached_keys: $cached,
            list_allocated: 32,
            set_smalltable: 64,
            preheader_flags: $preheader,
            int_min_digits: $min_digits,
            utf8_length: $utf8,
            utf8: $utf8 + 8,
            bytearray_buffer_header: $bytearray_buffer_header,
        }
    };
}

/// 3.11: `Py_TPFLAGS_MANAGED_DICT`; 3.12+: that and `Py_TPFLAGS_MANAGED_WEAKREF`.
const PREHEADER_311: u64 = 1 << 4;
const PREHEADER_312: u64 = (1 << 4) | (1 << 3);

/// Every table, oldest first.
pub(crate) static ALL: &[GcLayout] = &[
    table!(
        8,
        true,
        200,
        GENERATIONS_THEN_GENERATION0,
        416,
        880,
        872,
        0,
        0,
        48,
        0
    ),
    table!(
        9,
        false,
        200,
        GENERATIONS_THEN_GENERATION0,
        408,
        880,
        864,
        0,
        0,
        48,
        0
    ),
    table!(
        10,
        false,
        200,
        GENERATIONS_THEN_GENERATION0,
        408,
        888,
        872,
        0,
        0,
        48,
        0
    ),
    table!(
        11,
        false,
        200,
        GENERATIONS_THEN_GENERATION0,
        408,
        904,
        872,
        PREHEADER_311,
        1,
        48,
        0
    ),
    table!(
        12,
        false,
        200,
        GENERATIONS_THEN_GENERATION0,
        416,
        920,
        880,
        PREHEADER_312,
        1,
        40,
        0
    ),
    table!(
        13,
        false,
        200,
        LISTS_313,
        416,
        928,
        880,
        PREHEADER_312,
        1,
        40,
        0
    ),
    // 3.14 moved `generation0` to the end of the struct:
    // `permanent_generation` follows the three lists.
    table!(
        14,
        false,
        192,
        &[&[24, 48, 72, 96]],
        416,
        936,
        880,
        PREHEADER_312,
        1,
        40,
        0
    ),
    // 3.15 dropped `trash_delete_later`/`trash_delete_nesting` too.
    table!(
        15,
        false,
        112,
        &[&[8, 32, 56, 80]],
        424,
        944,
        888,
        PREHEADER_312,
        1,
        40,
        33
    ),
];

/// The table for a minor version: None before 3.8 (whose `PyGC_Head` is
/// another shape) and past the newest table.
pub fn for_version(major: u8, minor: u8) -> Option<&'static GcLayout> {
    ALL.iter().find(|l| l.major == major && l.minor == minor)
}
