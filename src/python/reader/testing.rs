//! Test doubles shared by the reader's rooms: a `PythonProcess` of a given
//! layout, and recorded memory built from words.

use crate::memory::SliceMemory;
use crate::python::process::{GilSource, GilSyncSource, PythonProcess, Version};

pub(super) fn process(layout: &crate::cpython_layouts::Layout, head: u64) -> PythonProcess {
    PythonProcess {
        pid: std::process::id() as i32,
        exe: "python".into(),
        cmdline: String::new(),
        version: Version {
            major: layout.major,
            minor: layout.minor,
            patch: Some(0),
            suffix: String::new(),
        },
        layout: layout.clone(),
        interp_head_ptr: head,
        gil: GilSource::TstatePtr(head + 8),
        gil_sync: GilSyncSource::Unknown,
        warnings: Vec::new(),
        obmalloc_statics: None,
        tracemalloc_globals: None,
    }
}

/// Recorded memory of `len` bytes from 0x1000, zero but for `words`
/// (address, little-endian u64).
pub(super) fn memory_of_words(len: usize, words: &[(u64, u64)]) -> crate::target::Recorded {
    let mut region = vec![0u8; len];
    for &(addr, v) in words {
        let o = (addr - 0x1000) as usize;
        region[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }
    let mut mem = SliceMemory::new();
    mem.add(0x1000, region);
    crate::target::Recorded::new(mem)
}
