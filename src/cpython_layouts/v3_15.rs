//! CPython 3.15 (x86-64): the 3.14 table and what 3.15 changed, proven by
//! tests/layouts.rs against the 3.15 headers.

use super::*;

pub(crate) const TABLE: Layout = Layout {
    minor: 15,
    runtime: RuntimeLayout {
        interpreters_head: Some(936),
        interpreters_main: Some(944),
        ..super::v3_14::TABLE.runtime
    },
    interp: InterpLayout {
        next: 7264,
        tstate_head: 7336,
        id: Some(7272),
        gc_collecting: Some(7512),
        modules: 7592,
    },
    thread: ThreadLayout {
        size: 264,
        thread_id: 176,
        native_thread_id: Some(184),
        datastack_chunk: Some(256),
        ..super::v3_14::TABLE.thread
    },
    object: ObjectLayout {
        ht_cached_keys: Some(888),
        ..super::v3_14::TABLE.object
    },
    ..super::v3_14::TABLE
};

pub(crate) static LAYOUT: Layout = TABLE;
