//! CPython 3.11 (x86-64): the 3.10 table and what 3.11 changed, proven by
//! tests/layouts.rs against the 3.11 headers.

use super::*;

pub(crate) const TABLE: Layout = Layout {
    minor: 11,
    runtime: RuntimeLayout {
        interpreters_head: Some(40),
        interpreters_main: Some(48),
        gil: GilLocation::RuntimeTstateCurrent(576),
        ..super::v3_10::TABLE.runtime
    },
    interp: InterpLayout {
        tstate_head: 16,
        id: Some(48),
        modules: 888,
        gc_collecting: Some(848),
        ..super::v3_10::TABLE.interp
    },
    thread: ThreadLayout {
        size: 304,
        current_frame: CurrentFrame::ViaCFrame {
            cframe: 56,
            current_frame: 8,
            previous: 16,
        },
        thread_id: 152,
        native_thread_id: Some(160),
        datastack_chunk: Some(296),
        ..super::v3_10::TABLE.thread
    },
    frame: FrameLayout {
        size: 80,
        previous: 48,
        position: InstrPosition::InstrPointer(56),
        localsplus: 72,
        entry: EntryMarker::IsEntry(68),
        stack_chunk: Some(StackChunkLayout {
            previous: 0,
            size: 8,
            top: 16,
            data: 24,
        }),
        ..super::v3_10::TABLE.frame
    },
    code: CodeLayout {
        size: 192,
        argcount: 56,
        posonlyargcount: Some(60),
        kwonlyargcount: Some(64),
        nlocals: 80,
        flags: 48,
        firstlineno: 72,
        varnames: 96,
        localspluskinds: Some(104),
        filename: 112,
        name: 120,
        qualname: Some(128),
        linetable: 136,
        linetable_format: LineTableFormat::Locations311,
        code_adaptive: Some(184),
        ..super::v3_10::TABLE.code
    },
    object: ObjectLayout {
        ht_cached_keys: Some(872),
        instance_dict: InstanceDict::Managed311 {
            flag: 1 << 4,
            dict: -24,
            values: -32,
        },
        ..super::v3_10::TABLE.object
    },
    dict: DictLayout::Compact {
        ma_keys: 32,
        ma_values: 40,
        keys: DictKeysLayout::Log2 {
            dk_log2_size: 8,
            dk_log2_index_bytes: 9,
            dk_kind: 10,
            dk_nentries: 24,
            dk_indices: 32,
        },
        values_array: 0,
    },
    gil_sync: Some(GilSync::Runtime {
        start: 392,
        end: 568,
    }),
    ..super::v3_10::TABLE
};

pub(crate) static LAYOUT: Layout = TABLE;
