//! CPython 3.7 (x86-64): the 3.6 table and what 3.7 changed, proven by
//! tests/layouts.rs against the 3.7 headers.

use super::*;

pub(crate) const TABLE: Layout = Layout {
    minor: 7,
    runtime: RuntimeLayout {
        interpreters_head: Some(24),
        interpreters_main: Some(32),
        gc_collecting: Some(632),
        gil: GilLocation::RuntimeTstateCurrent(1480),
    },
    interp: InterpLayout {
        id: Some(16),
        modules: 40,
        ..super::v3_6::TABLE.interp
    },
    thread: ThreadLayout {
        size: 184,
        thread_id: 176,
        ..super::v3_6::TABLE.thread
    },
    frame: FrameLayout {
        size: 360,
        position: InstrPosition::LastiBytes(104),
        localsplus: 360,
        ..super::v3_6::TABLE.frame
    },
    gil_sync: Some(GilSync::Runtime {
        start: 1296,
        end: 1472,
    }),
    ..super::v3_6::TABLE
};

pub(crate) static LAYOUT: Layout = TABLE;
