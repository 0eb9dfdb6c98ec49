//! CPython 3.9 (x86-64): the 3.8 table and what 3.9 changed, proven by
//! tests/layouts.rs against the 3.9 headers.

use super::*;

pub(crate) const TABLE: Layout = Layout {
    minor: 9,
    runtime: RuntimeLayout {
        gc_collecting: None,
        gil: GilLocation::RuntimeTstateCurrent(568),
        ..super::v3_8::TABLE.runtime
    },
    interp: InterpLayout {
        id: Some(24),
        modules: 856,
        gc_collecting: Some(816),
        ..super::v3_8::TABLE.interp
    },
    gil_sync: Some(GilSync::Runtime {
        start: 384,
        end: 560,
    }),
    ..super::v3_8::TABLE
};

pub(crate) static LAYOUT: Layout = TABLE;
