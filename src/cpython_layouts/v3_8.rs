//! CPython 3.8 (x86-64): the 3.7 table and what 3.8 changed, proven by
//! tests/layouts.rs against the 3.8 headers.

use super::*;

pub(crate) const TABLE: Layout = Layout {
    minor: 8,
    runtime: RuntimeLayout {
        interpreters_head: Some(32),
        interpreters_main: Some(40),
        gc_collecting: Some(544),
        gil: GilLocation::RuntimeTstateCurrent(1368),
    },
    interp: InterpLayout {
        modules: 56,
        ..super::v3_7::TABLE.interp
    },
    code: CodeLayout {
        size: 128,
        posonlyargcount: Some(20),
        kwonlyargcount: Some(24),
        nlocals: 28,
        flags: 36,
        firstlineno: 40,
        varnames: 72,
        filename: 104,
        name: 112,
        linetable: 120,
        ..super::v3_7::TABLE.code
    },
    gil_sync: Some(GilSync::Runtime {
        start: 1184,
        end: 1360,
    }),
    ..super::v3_7::TABLE
};

pub(crate) static LAYOUT: Layout = TABLE;
