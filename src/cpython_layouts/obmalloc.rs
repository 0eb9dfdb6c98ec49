//! Where CPython's object allocator (obmalloc) keeps its arena table, per
//! version (x86-64, default GIL build), for the memory split of
//! `pyinspect heap` (src/python/obmalloc.rs reads it).
//!
//! 3.8–3.11 keep the table in statics of `Objects/obmalloc.c` (`arenas`,
//! `maxarenas`, `narenas_currently_allocated`): found by name in the
//! interpreter's symbol table, so a stripped build cannot be read. 3.12
//! moved them into each interpreter's `obmalloc.mgmt` (embedded in
//! `PyInterpreterState`), 3.13+ into a `struct _obmalloc_state` that
//! `interp->obmalloc` points to. Values read with `offsetof`/`sizeof` from
//! each version's `Include/internal/pycore_obmalloc.h` and
//! `pycore_interp.h` (release and `Py_DEBUG` builds); `tests/heap.rs`
//! proves them against the installed headers, and the figures against
//! `sys._debugmallocstats()`.

/// How a version's arena table is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArenaTable {
    /// The statics `arenas`, `maxarenas`, `narenas_currently_allocated`.
    Statics,
    /// `struct _obmalloc_state` embedded in the interpreter at one of
    /// these offsets (release, debug build).
    InInterp(&'static [u64]),
    /// A pointer to it at one of these offsets of the interpreter.
    InterpPointer(&'static [u64]),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObmallocLayout {
    pub major: u8,
    pub minor: u8,
    pub table: ArenaTable,
    /// `ARENA_SIZE`, `POOL_SIZE`.
    pub arena_size: u64,
    pub pool_size: u64,
    /// `offsetof(struct _obmalloc_state, mgmt)` (3.12+).
    pub mgmt: u64,
    /// `struct _obmalloc_mgmt`: `arenas`, `maxarenas`,
    /// `narenas_currently_allocated` (3.12+).
    pub mgmt_arenas: u64,
    pub mgmt_maxarenas: u64,
    pub mgmt_narenas: u64,
    /// `sizeof(struct arena_object)`, and its `address`, `nfreepools`,
    /// `ntotalpools` (the same 3.8–3.15).
    pub arena_object_size: u64,
    pub ao_address: u64,
    pub ao_nfreepools: u64,
    pub ao_ntotalpools: u64,
}

const fn layout(minor: u8, table: ArenaTable, large: bool) -> ObmallocLayout {
    ObmallocLayout {
        major: 3,
        minor,
        table,
        // USE_LARGE_ARENAS / USE_LARGE_POOLS on 64-bit from 3.10.
        arena_size: if large { 1 << 20 } else { 1 << 18 },
        pool_size: if large { 1 << 14 } else { 1 << 12 },
        mgmt: 512,
        mgmt_arenas: 0,
        mgmt_maxarenas: 8,
        mgmt_narenas: 552,
        arena_object_size: 48,
        ao_address: 0,
        ao_nfreepools: 16,
        ao_ntotalpools: 20,
    }
}

pub(crate) static ALL: &[ObmallocLayout] = &[
    layout(8, ArenaTable::Statics, false),
    layout(9, ArenaTable::Statics, false),
    layout(10, ArenaTable::Statics, true),
    layout(11, ArenaTable::Statics, true),
    layout(12, ArenaTable::InInterp(&[3960]), true),
    layout(13, ArenaTable::InterpPointer(&[10800, 10808]), true),
    layout(14, ArenaTable::InterpPointer(&[10904, 10912]), true),
    layout(15, ArenaTable::InterpPointer(&[10880, 10888]), true),
];

pub fn for_version(major: u8, minor: u8) -> Option<&'static ObmallocLayout> {
    ALL.iter().find(|l| l.major == major && l.minor == minor)
}
