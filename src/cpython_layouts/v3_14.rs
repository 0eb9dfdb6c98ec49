//! CPython 3.14 (x86-64): the 3.13 table and what 3.14 changed, proven by
//! tests/layouts.rs against the 3.14 headers.

use super::*;

pub(crate) const TABLE: Layout = Layout {
    minor: 14,
    runtime: RuntimeLayout {
        interpreters_head: Some(808),
        interpreters_main: Some(816),
        ..super::v3_13::TABLE.runtime
    },
    interp: InterpLayout {
        next: 7272,
        id: Some(7280),
        modules: 7688,
        ..super::v3_13::TABLE.interp
    },
    frame: FrameLayout {
        size: 88,
        localsplus: 80,
        entry: EntryMarker::OwnerShim {
            owner: 74,
            shim_from: 3,
        },
        pointer_tag_bits: 3,
        ..super::v3_13::TABLE.frame
    },
    code: CodeLayout {
        size: 216,
        code_adaptive: Some(208),
        ..super::v3_13::TABLE.code
    },
    object: ObjectLayout {
        tuple_items: 32,
        ..super::v3_13::TABLE.object
    },
    ..super::v3_13::TABLE
};

pub(crate) static LAYOUT: Layout = TABLE;
