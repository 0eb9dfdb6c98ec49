//! CPython 3.10 (x86-64): the 3.9 table and what 3.10 changed, proven by
//! tests/layouts.rs against the 3.10 headers.

use super::*;

pub(crate) const TABLE: Layout = Layout {
    minor: 10,
    frame: FrameLayout {
        size: 352,
        position: InstrPosition::LastiCodeUnits(96),
        localsplus: 352,
        ..super::v3_9::TABLE.frame
    },
    code: CodeLayout {
        linetable_format: LineTableFormat::Linetable310,
        ..super::v3_9::TABLE.code
    },
    ..super::v3_9::TABLE
};

pub(crate) static LAYOUT: Layout = TABLE;
