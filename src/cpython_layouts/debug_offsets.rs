//! `_Py_DebugOffsets` (3.13+): the interpreter's own description of its layout.
//! (Placeholder until the reader of the real struct lands.)

use super::Layout;
use crate::error::{Error, Result};
use crate::memory::Memory;

pub struct DebugOffsets;

pub fn read(_mem: &dyn Memory, _runtime_addr: u64) -> Result<DebugOffsets> {
    Err(Error::Other("_Py_DebugOffsets reader not built yet".into()))
}

pub fn layout(_d: &DebugOffsets) -> Result<(Layout, Vec<String>)> {
    Err(Error::Other("_Py_DebugOffsets reader not built yet".into()))
}
