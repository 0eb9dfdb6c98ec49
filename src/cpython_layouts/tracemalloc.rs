//! Where CPython's tracemalloc keeps its traces, per version (x86-64,
//! default GIL build), for `pyinspect heap`'s allocation sites
//! (src/python/tracemalloc.rs reads them).
//!
//! 3.9–3.11 keep the state in globals of `Modules/_tracemalloc.c`: the
//! exported `_Py_tracemalloc_config` and the statics `tracemalloc_traces`
//! and `tracemalloc_domains`, found by name in the interpreter's symbol
//! table (a stripped build cannot be read). 3.12 moved them into
//! `_PyRuntime.tracemalloc` (`struct _tracemalloc_runtime_state`), at an
//! offset that moves with the runtime's other fields from release to
//! release and in `Py_DEBUG` builds: each version lists the offsets its
//! releases put it at, and the reader takes the one where the state reads
//! as one. 3.9 gave the traces today's hash table (key and value pointers
//! in each entry), trace (`size`, `traceback`) and traceback (`hash`,
//! `nframe`, `total_nframe`, packed 12-byte frames of `filename`,
//! `lineno`; 3.15's `filename` a C string, not a `str`); 3.8's inline
//! entries are not read. Values read with
//! `offsetof`/`sizeof` from each version's `pycore_hashtable.h`,
//! `pycore_pymem.h` (3.9–3.11) and `pycore_tracemalloc.h` (3.12+);
//! `tests/heap.rs` proves them against the installed headers, and the
//! sites against `tracemalloc`'s own statistics.

/// Where a version's tracemalloc state is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TracemallocState {
    /// The globals `_Py_tracemalloc_config`, `tracemalloc_traces`,
    /// `tracemalloc_domains` (3.9–3.11).
    Globals,
    /// `struct _tracemalloc_runtime_state` in `_PyRuntime`, at one of these
    /// offsets (3.12+).
    InRuntime(&'static [u64]),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracemallocLayout {
    pub major: u8,
    pub minor: u8,
    pub state: TracemallocState,
    /// In the config (`struct _PyTraceMalloc_Config`, first in the runtime
    /// state): `tracing`, `max_nframe` (`initialized` at 0).
    pub config_tracing: u64,
    pub config_max_nframe: u64,
    /// In the runtime state (3.12+): `traced_memory` (and
    /// `peak_traced_memory` after it), `traces`, `domains`.
    pub state_traced_memory: u64,
    pub state_traces: u64,
    pub state_domains: u64,
    /// `_Py_hashtable_t`: `nentries`, `nbuckets`, `buckets`.
    pub ht_nentries: u64,
    pub ht_nbuckets: u64,
    pub ht_buckets: u64,
    /// `_Py_hashtable_entry_t`: its list link at 0, `key`, `value`.
    pub entry_key: u64,
    pub entry_value: u64,
    /// `trace_t` (a `.c` file's own): `size` at 0, `traceback` at 8.
    pub trace_traceback: u64,
    /// `traceback_t`: `nframe`, `total_nframe` (u16 each), `frames`.
    pub tb_nframe: u64,
    pub tb_total_nframe: u64,
    pub tb_frames: u64,
    /// `frame_t` (packed): its size, `lineno` (u32; `filename` at 0).
    pub frame_size: u64,
    pub frame_lineno: u64,
    /// What a frame's `filename` points at: a `str` object (to 3.14), or
    /// an interned NUL-terminated UTF-8 string (3.15).
    pub filename: FilenameKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilenameKind {
    Object,
    CString,
}

const fn layout(minor: u8, state: TracemallocState, filename: FilenameKind) -> TracemallocLayout {
    TracemallocLayout {
        major: 3,
        minor,
        state,
        config_tracing: 4,
        config_max_nframe: 8,
        state_traced_memory: 144,
        state_traces: 184,
        state_domains: 192,
        ht_nentries: 0,
        ht_nbuckets: 8,
        ht_buckets: 16,
        entry_key: 16,
        entry_value: 24,
        trace_traceback: 8,
        tb_nframe: 8,
        tb_total_nframe: 10,
        tb_frames: 12,
        frame_size: 12,
        frame_lineno: 8,
        filename,
    }
}

pub(crate) static ALL: &[TracemallocLayout] = &[
    layout(9, TracemallocState::Globals, FilenameKind::Object),
    layout(10, TracemallocState::Globals, FilenameKind::Object),
    layout(11, TracemallocState::Globals, FilenameKind::Object),
    // 3.12.1.
    layout(
        12,
        TracemallocState::InRuntime(&[2768]),
        FilenameKind::Object,
    ),
    // 3.13.0, 3.13.18; 3.13.18 with Py_DEBUG.
    layout(
        13,
        TracemallocState::InRuntime(&[10080, 10104, 26096]),
        FilenameKind::Object,
    ),
    // 3.14.10; with Py_DEBUG.
    layout(
        14,
        TracemallocState::InRuntime(&[10296, 26288]),
        FilenameKind::Object,
    ),
    // 3.15.2; with Py_DEBUG.
    layout(
        15,
        TracemallocState::InRuntime(&[10432, 26432]),
        FilenameKind::CString,
    ),
];

/// The table for Python `major.minor`, if there is one.
pub fn for_version(major: u8, minor: u8) -> Option<&'static TracemallocLayout> {
    ALL.iter().find(|l| l.major == major && l.minor == minor)
}
