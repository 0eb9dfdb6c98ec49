//! CPython 3.13 (x86-64): the 3.12 table and what 3.13 changed, proven by
//! tests/layouts.rs against the 3.13 headers.

use super::*;

pub(crate) const TABLE: Layout = Layout {
    minor: 13,
    runtime: RuntimeLayout {
        interpreters_head: Some(632),
        interpreters_main: Some(640),
        gil: GilLocation::InterpGil {
            ceval_gil: 16,
            last_holder: 8,
            locked: 16,
        },
        ..super::v3_12::TABLE.runtime
    },
    interp: InterpLayout {
        next: 7264,
        tstate_head: 7344,
        id: Some(7272),
        modules: 7656,
        gc_collecting: Some(7600),
    },
    thread: ThreadLayout {
        current_frame: CurrentFrame::Direct(72),
        thread_id: 152,
        native_thread_id: Some(160),
        ..super::v3_12::TABLE.thread
    },
    code: CodeLayout {
        size: 208,
        code_adaptive: Some(200),
        ..super::v3_12::TABLE.code
    },
    object: ObjectLayout {
        instance_dict: InstanceDict::Inline313 {
            flag: 1 << 4,
            inline_flag: 1 << 2,
            dict: -24,
        },
        ..super::v3_12::TABLE.object
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
        values_array: 8,
    },
    ..super::v3_12::TABLE
};

pub(crate) static LAYOUT: Layout = TABLE;
