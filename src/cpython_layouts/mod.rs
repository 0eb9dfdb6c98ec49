//! Per-version CPython memory layouts, as data.
//!
//! Each supported minor version has one `Layout` value in its own file. The
//! reader never asks "which version is this?": it asks the layout for an
//! offset, and where a version lacks a field the field is `None` and the
//! format enums say how to interpret what is there. Adding a version means
//! adding a file; `tests/layouts.rs` proves every number against the
//! interpreter's own headers with a compiled C probe.
//!
//! 3.13+ additionally carry `_Py_DebugOffsets` in the target; see
//! [`debug_offsets`], which reads it, and [`debug_offsets::overlay`], which
//! overlays those values onto the table (and is the only source of truth
//! for versions newer than the newest table).

pub mod asyncio;
pub mod debug_offsets;
pub mod gc;
pub mod greenlet;
pub mod obmalloc;
pub mod tracemalloc;
mod v2_7;
mod v3_10;
mod v3_11;
mod v3_12;
mod v3_13;
mod v3_14;
mod v3_15;
mod v3_6;
mod v3_7;
mod v3_8;
mod v3_9;

/// All offsets are byte offsets from the start of the named C struct (x86-64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub major: u8,
    pub minor: u8,
    pub runtime: RuntimeLayout,
    pub interp: InterpLayout,
    pub thread: ThreadLayout,
    pub frame: FrameLayout,
    pub code: CodeLayout,
    pub object: ObjectLayout,
    pub string: StringLayout,
    pub dict: DictLayout,
    /// The `threading.Thread` attribute holding its name (`_Thread__name`
    /// on 2.7, where `self.__name` is name-mangled).
    pub thread_name_attr: &'static str,
    /// Where the GIL's own mutex and condition variables are, so that a
    /// thread blocked in a futex inside them is known to wait for the GIL.
    pub gil_sync: Option<GilSync>,
}

/// The GIL's synchronisation objects: a futex address in them is a GIL wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GilSync {
    /// 2.7: the static `symbol` points at the lock, a `sem_t` of `size` bytes.
    LockPointer { symbol: &'static str, size: u64 },
    /// 3.6: the GIL's condition variables and mutexes are statics of
    /// ceval.c (their sizes come from the symbol table).
    Statics(&'static [&'static str]),
    /// 3.7–3.11: `[start, end)` of `_PyRuntime` holds `ceval.gil`'s
    /// `cond`, `mutex`, `switch_cond` and `switch_mutex`.
    Runtime { start: u64, end: u64 },
    /// 3.12+: `[start, end)` of the `_gil_runtime_state` that
    /// `interp->ceval.gil` points at (see [`GilLocation::InterpGil`]).
    InterpGil { start: u64, end: u64 },
}

/// `_PyRuntimeState` (3.7+). Older versions keep these in globals found by symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeLayout {
    /// `interpreters.head`; `None` means use the `interp_head` symbol (2.7, 3.6).
    pub interpreters_head: Option<u64>,
    /// `interpreters.main`.
    pub interpreters_main: Option<u64>,
    /// `gc.collecting` (3.7, 3.8, where the collector's state is runtime-wide):
    /// non-zero while a collection runs. Later versions keep it per interpreter.
    pub gc_collecting: Option<u64>,
    /// Where the GIL holder is recorded.
    pub gil: GilLocation,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GilLocation {
    /// The `_PyThreadState_Current` global holds the running tstate (2.7, 3.6).
    CurrentSymbol,
    /// `_PyRuntime.gilstate.tstate_current` at this offset (3.7–3.11).
    RuntimeTstateCurrent(u64),
    /// `interp->ceval.gil` points at a `_gil_runtime_state`; it is held by
    /// `last_holder` when `locked` is non-zero (3.12+, per interpreter).
    InterpGil {
        ceval_gil: u64,
        last_holder: u64,
        locked: u64,
    },
}

/// `PyInterpreterState`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterpLayout {
    pub next: u64,
    /// `tstate_head`, or `threads.head` on 3.11+.
    pub tstate_head: u64,
    /// `id` (3.7+).
    pub id: Option<u64>,
    /// `modules` (`imports.modules` on 3.12+): the interpreter's `sys.modules`.
    pub modules: u64,
    /// `gc.collecting` (3.9+): non-zero while this interpreter's collector runs.
    pub gc_collecting: Option<u64>,
}

/// `PyThreadState`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadLayout {
    /// Bytes to copy to cover every field below.
    pub size: u64,
    pub next: u64,
    pub interp: u64,
    pub current_frame: CurrentFrame,
    /// `thread_id`: the `pthread_t`, which is also `threading.get_ident()`.
    pub thread_id: u64,
    /// `native_thread_id` (3.11+): the kernel tid.
    pub native_thread_id: Option<u64>,
    /// `datastack_chunk` (3.11+): where interpreter frames live.
    pub datastack_chunk: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CurrentFrame {
    /// The innermost frame pointer is a field of the thread state
    /// (`frame` up to 3.10, `current_frame` on 3.13+).
    Direct(u64),
    /// `tstate->cframe->current_frame` (3.11, 3.12); `previous` chains the
    /// `_PyCFrame`s, one per eval-loop call, each a local of that call's C
    /// frame (what the native merge anchors 3.11 on).
    ViaCFrame {
        cframe: u64,
        current_frame: u64,
        previous: u64,
    },
}

/// A Python frame: `PyFrameObject` up to 3.10, `_PyInterpreterFrame` on 3.11+.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameLayout {
    /// Bytes to copy to cover every field below (the fixed part of the struct).
    pub size: u64,
    /// `f_back` / `previous`.
    pub previous: u64,
    /// `f_code` / `f_executable`.
    pub code: u64,
    pub position: InstrPosition,
    /// Start of `f_localsplus` / `localsplus`.
    pub localsplus: u64,
    pub entry: EntryMarker,
    /// `_PyStackChunk` (3.11+): a piece of the data stack the thread's
    /// frames are pushed on.
    pub stack_chunk: Option<StackChunkLayout>,
    /// Low bits to clear from `f_executable` and `localsplus` slots: 3.14+
    /// stores them as tagged `_PyStackRef`s; 0 before.
    pub pointer_tag_bits: u64,
}

/// `_PyStackChunk`: `size` bytes from the chunk's own address; its frames
/// lie one after another from `data` (from the second word of `data` in the
/// first chunk, whose `previous` is NULL) up to `top` words into `data` (the
/// chunk the thread state names runs to `datastack_top` instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackChunkLayout {
    pub previous: u64,
    pub size: u64,
    pub top: u64,
    pub data: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstrPosition {
    /// `f_lasti` (int): byte offset of the last instruction (≤3.9).
    LastiBytes(u64),
    /// `f_lasti` (int) counted in 2-byte code units (3.10).
    LastiCodeUnits(u64),
    /// A pointer into the code object's `co_code_adaptive` (`prev_instr` on
    /// 3.11/3.12, `instr_ptr` on 3.13+); byte offset = ptr − code − co_code_adaptive.
    InstrPointer(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryMarker {
    /// Every Python frame has its own C eval-loop call (≤3.10).
    EveryFrame,
    /// `is_entry` byte (3.11).
    IsEntry(u64),
    /// `owner` byte; values ≥ `shim_from` are shim frames that mark an eval
    /// loop entry and are not Python frames themselves (3.12+).
    OwnerShim { owner: u64, shim_from: u8 },
}

/// `PyCodeObject`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeLayout {
    /// Bytes to copy to cover every field below.
    pub size: u64,
    pub argcount: u64,
    pub posonlyargcount: Option<u64>,
    pub kwonlyargcount: Option<u64>,
    /// `co_nlocals` (int).
    pub nlocals: u64,
    pub flags: u64,
    pub firstlineno: u64,
    /// `co_varnames` (≤3.10) or `co_localsplusnames` (3.11+): names of the local slots.
    pub varnames: u64,
    /// `co_localspluskinds` (3.11+): a bytes object of per-slot kinds.
    pub localspluskinds: Option<u64>,
    pub filename: u64,
    pub name: u64,
    pub qualname: Option<u64>,
    /// `co_lnotab` or `co_linetable`: a bytes object.
    pub linetable: u64,
    pub linetable_format: LineTableFormat,
    /// `co_code_adaptive` (3.11+): the bytecode lives inline in the code object.
    pub code_adaptive: Option<u64>,
    /// `co_framesize` (int, 3.12+): the words a frame of this code takes on
    /// the data stack, so the data stack can be walked frame by frame.
    pub framesize: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineTableFormat {
    /// `co_lnotab`: (byte delta, line delta) pairs; line deltas signed on 3.x.
    Lnotab { signed_lines: bool },
    /// 3.10 `co_linetable`: (byte delta, signed line delta) pairs, -128 = no line.
    Linetable310,
    /// 3.11+ location table (Objects/locations.md).
    Locations311,
}

/// Generic object headers used by `--locals` and the thread-name lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectLayout {
    pub ob_type: u64,
    /// `PyVarObject.ob_size`.
    pub ob_size: u64,
    pub tp_name: u64,
    pub tp_basicsize: u64,
    pub tp_dictoffset: u64,
    pub tp_flags: u64,
    /// `PyHeapTypeObject.ht_cached_keys` (3.11+ managed dicts).
    pub ht_cached_keys: Option<u64>,
    pub tuple_items: u64,
    /// `PyListObject.ob_item` (a pointer to the item array).
    pub list_items: u64,
    pub float_value: u64,
    pub long: LongFormat,
    /// `PyIntObject.ob_ival` (2.7 only).
    pub int_value: Option<u64>,
    /// `ob_sval` of bytes (2.7: `str`).
    pub bytes_data: u64,
    /// `PyModuleObject.md_dict`.
    pub module_dict: u64,
    /// `PySetObject.mask` and `.table`, and the key's place in a `setentry` of `set_entry_size` bytes.
    pub set_mask: u64,
    pub set_table: u64,
    pub set_entry_key: u64,
    pub set_entry_size: u64,
    /// `PyCellObject.ob_ref`: what a closure cell holds.
    pub cell_ref: u64,
    /// How an instance finds its `__dict__`.
    pub instance_dict: InstanceDict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongFormat {
    /// Sign and digit count in `ob_size`; 30-bit digits at `digits` (≤3.11).
    ObSize { digits: u64 },
    /// `long_value.lv_tag`: bits 0–1 sign (0 +, 1 zero, 2 −), count = tag >> 3 (3.12+).
    LvTag { tag: u64, digits: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceDict {
    /// `tp_dictoffset` says where the dict pointer is (≤3.10).
    DictOffset,
    /// With `Py_TPFLAGS_MANAGED_DICT` the dict pointer is at `dict` (negative)
    /// and a values array (keys in `ht_cached_keys`) at `values`; 3.11.
    Managed311 { flag: u64, dict: i64, values: i64 },
    /// 3.12: one tagged word at `dict_or_values`; low bit set means values.
    Managed312 { flag: u64, dict_or_values: i64 },
    /// 3.13: values inline after `tp_basicsize` when `inline_flag` is set,
    /// else the managed dict pointer at `dict`.
    Inline313 {
        flag: u64,
        inline_flag: u64,
        dict: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StringLayout {
    /// PEP 393 strings (3.3+).
    Pep393 {
        length: u64,
        state: u64,
        /// `sizeof(PyASCIIObject)`: data of compact ASCII strings starts here.
        ascii_size: u64,
        /// `sizeof(PyCompactUnicodeObject)`: data of other compact strings.
        compact_size: u64,
        /// `PyUnicodeObject.data` pointer of non-compact (legacy) strings.
        data_ptr: u64,
    },
    /// 2.7: `str` is bytes (`ob_size`, `ob_sval`); `unicode` is UCS4 at `*str`.
    Py2 {
        unicode_length: u64,
        unicode_str: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DictLayout {
    /// 2.7 open-addressing table of (hash, key, value) entries.
    Py2 { mask: u64, table: u64 },
    /// 3.6+ compact dicts.
    Compact {
        ma_keys: u64,
        ma_values: u64,
        keys: DictKeysLayout,
        /// Offset of the value array inside what `ma_values` points to.
        values_array: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DictKeysLayout {
    /// 3.6–3.10: `dk_size` (entries follow `dk_size` indices of width 1/2/4/8).
    Sized {
        dk_size: u64,
        dk_nentries: u64,
        dk_indices: u64,
    },
    /// 3.11+: `dk_log2_size`, `dk_log2_index_bytes`, `dk_kind` (0 = general
    /// 24-byte entries, else 16-byte unicode entries).
    Log2 {
        dk_log2_size: u64,
        dk_log2_index_bytes: u64,
        dk_kind: u64,
        dk_nentries: u64,
        dk_indices: u64,
    },
}

/// The built-in table for a minor version.
pub fn for_version(major: u8, minor: u8) -> Option<&'static Layout> {
    tables().find(|l| l.major == major && l.minor == minor)
}

/// The newest built-in table: what a version newer than every table starts
/// from, under what its `_Py_DebugOffsets` provides.
pub(crate) fn newest() -> Option<&'static Layout> {
    tables().last()
}

/// The tables this run may use, oldest first: [`ALL`], less those newer
/// than `PYINSPECT_NEWEST_TABLE=3.X` when that is set. That variable is for
/// tests: it makes a target read as pyinspect would read it before its own
/// table existed.
fn tables() -> impl DoubleEndedIterator<Item = &'static Layout> {
    let newest = test_override("PYINSPECT_NEWEST_TABLE");
    ALL.iter()
        .copied()
        .filter(move |l| newest.is_none_or(|n| (l.major, l.minor) <= n))
}

/// `MAJOR.MINOR` from a test-only environment variable.
pub(crate) fn test_override(var: &str) -> Option<(u8, u8)> {
    let v = std::env::var(var).ok()?;
    let (a, b) = v.trim().split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Every built-in table, oldest first. From 3.7 on each version's file
/// writes its `TABLE` as the previous version's plus what it changed
/// (`..super::v3_X::TABLE`), so its file shows just what that version moved.
pub(crate) static ALL: &[&Layout] = &[
    &v2_7::LAYOUT,
    &v3_6::LAYOUT,
    &v3_7::LAYOUT,
    &v3_8::LAYOUT,
    &v3_9::LAYOUT,
    &v3_10::LAYOUT,
    &v3_11::LAYOUT,
    &v3_12::LAYOUT,
    &v3_13::LAYOUT,
    &v3_14::LAYOUT,
    &v3_15::LAYOUT,
];
