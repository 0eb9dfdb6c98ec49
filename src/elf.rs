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
    let bytes =
        read_file(file).map_err(|e| Error::Io(format!("reading {}: {e}", file.display())))?;
    let obj = object::File::parse(&*bytes)
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
            _ => {}
        }
    }
    Ok(info)
}

/// Largest file read whole (ELF files and their debug files).
const MAX_FILE: u64 = 4 << 30;

/// A file of the target, read into memory we own. Never mapped: a library
/// that a deployment truncates or rewrites under a mapping would kill us with
/// SIGBUS; a read of a shrinking file just comes back short.
pub(crate) fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    if len > MAX_FILE {
        return Err(std::io::Error::other(format!(
            "{len} bytes is larger than any ELF file pyinspect reads"
        )));
    }
    let mut v = Vec::with_capacity(len as usize);
    f.take(MAX_FILE).read_to_end(&mut v)?;
    Ok(v)
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
