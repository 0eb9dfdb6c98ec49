//! CPython 3.12 (x86-64): the 3.11 table and what 3.12 changed, proven by
//! tests/layouts.rs against the 3.12 headers.

use super::*;

pub(crate) const TABLE: Layout = Layout {
    minor: 12,
    runtime: RuntimeLayout {
        gil: GilLocation::InterpGil {
            ceval_gil: 384,
            last_holder: 8,
            locked: 16,
        },
        ..super::v3_11::TABLE.runtime
    },
    interp: InterpLayout {
        tstate_head: 72,
        id: Some(8),
        modules: 944,
        gc_collecting: Some(312),
        ..super::v3_11::TABLE.interp
    },
    thread: ThreadLayout {
        size: 240,
        current_frame: CurrentFrame::ViaCFrame {
            cframe: 56,
            current_frame: 0,
            previous: 8,
        },
        thread_id: 136,
        native_thread_id: Some(144),
        datastack_chunk: Some(232),
        ..super::v3_11::TABLE.thread
    },
    frame: FrameLayout {
        previous: 8,
        code: 0,
        entry: EntryMarker::OwnerShim {
            owner: 70,
            shim_from: 3,
        },
        ..super::v3_11::TABLE.frame
    },
    code: CodeLayout {
        size: 200,
        argcount: 52,
        posonlyargcount: Some(56),
        kwonlyargcount: Some(60),
        firstlineno: 68,
        code_adaptive: Some(192),
        framesize: Some(76),
        ..super::v3_11::TABLE.code
    },
    object: ObjectLayout {
        ht_cached_keys: Some(880),
        long: LongFormat::LvTag {
            tag: 16,
            digits: 24,
        },
        instance_dict: InstanceDict::Managed312 {
            flag: 1 << 4,
            dict_or_values: -24,
        },
        ..super::v3_11::TABLE.object
    },
    string: StringLayout::Pep393 {
        length: 16,
        state: 32,
        ascii_size: 40,
        compact_size: 56,
        data_ptr: 56,
    },
    gil_sync: Some(GilSync::InterpGil {
        start: 32,
        end: 208,
    }),
    ..super::v3_11::TABLE
};

pub(crate) static LAYOUT: Layout = TABLE;
