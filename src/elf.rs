//! Just enough ELF for finding the interpreter: a few symbols, a few
//! sections, and where the file is loaded in the target.

use crate::error::{Error, Result};
use crate::procfs::MapEntry;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub addr: u64,
    pub size: u64,
}

#[derive(Debug, Default)]
pub struct BinaryInfo {
    /// Runtime address = link-time address + load_bias.
    pub load_bias: u64,
    /// Runtime addresses of the wanted symbols (a local static can occur more than once).
    pub symbols: HashMap<String, Vec<Range>>,
    pub pyruntime: Option<Range>,
    pub bss: Option<Range>,
    pub data: Option<Range>,
    /// `_asyncio`'s `AsyncioDebug` section (3.14+): its offsets for the remote reader.
    pub asyncio_debug: Option<Range>,
}

impl BinaryInfo {
    pub fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols
            .get(name)
            .and_then(|v| v.first())
            .map(|r| r.addr)
    }
}

/// Parse `file` (opened as the target sees it) that is mapped by `maps`
/// (all entries of that file), keeping only the symbols named in `wanted`.
pub fn load(file: &Path, maps: &[&MapEntry], wanted: &[&str]) -> Result<BinaryInfo> {
    let f = std::fs::File::open(file)
        .map_err(|e| Error::Io(format!("opening {}: {e}", file.display())))?;
    // SAFETY: the mapping is read-only and private; a file truncated under us
    // could fault, which is the accepted risk of every ELF reader that maps.
    let mmap = unsafe { memmap2::Mmap::map(&f) }
        .map_err(|e| Error::Io(format!("mapping {}: {e}", file.display())))?;
    let obj = object::File::parse(&*mmap)
        .map_err(|e| Error::Io(format!("parsing {}: {e}", file.display())))?;

    let load_bias = load_bias(&obj, maps).unwrap_or(0);
    let mut info = BinaryInfo {
        load_bias,
        ..Default::default()
    };
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if wanted.contains(&name) {
            let r = Range {
                addr: sym.address().wrapping_add(load_bias),
                size: sym.size(),
            };
            let v = info.symbols.entry(name.to_string()).or_default();
            if !v.iter().any(|x| x.addr == r.addr) {
                v.push(r);
            }
        }
    }
    for sec in obj.sections() {
        let r = Range {
            addr: sec.address().wrapping_add(load_bias),
            size: sec.size(),
        };
        match sec.name() {
            Ok(".PyRuntime") => info.pyruntime = Some(r),
            Ok(".bss") => info.bss = Some(r),
            Ok(".data") => info.data = Some(r),
            Ok("AsyncioDebug" | ".AsyncioDebug") => info.asyncio_debug = Some(r),
            _ => {}
        }
    }
    Ok(info)
}

/// The difference between where the file's segments are mapped and where
/// they were linked to, from the mapping of the lowest file offset.
fn load_bias(obj: &object::File, maps: &[&MapEntry]) -> Option<u64> {
    let first = maps.iter().min_by_key(|m| m.offset)?;
    for seg in obj.segments() {
        let (off, size) = seg.file_range();
        if first.offset >= off && first.offset < off.saturating_add(size.max(1)) {
            let linked = seg.address().wrapping_sub(off).wrapping_add(first.offset);
            return Some(first.start.wrapping_sub(linked));
        }
    }
    None
}
