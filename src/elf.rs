//! Just enough ELF for finding the interpreter: a few symbols, a few
//! sections, and where the file is loaded in the target.

use crate::error::{Error, Result};
use crate::mapping::MapEntry;
use crate::zeroed::Zeroed;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Range {
    pub(crate) addr: u64,
    pub(crate) size: u64,
}

#[derive(Debug, Default)]
pub(crate) struct BinaryInfo {
    /// Runtime addresses of the wanted symbols (a local static can occur more than once).
    pub(crate) symbols: HashMap<String, Vec<Range>>,
    pub(crate) pyruntime: Option<Range>,
    pub(crate) bss: Option<Range>,
    pub(crate) data: Option<Range>,
    /// `_asyncio`'s `AsyncioDebug` section (3.14+): its offsets for the remote reader.
    pub(crate) asyncio_debug: Option<Range>,
}

impl BinaryInfo {
    pub(crate) fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols
            .get(name)
            .and_then(|v| v.first())
            .map(|r| r.addr)
    }
}

/// Parse `file` (opened as the target sees it) that is mapped by `maps`
/// (all entries of that file), keeping only the symbols named in `wanted`.
pub(crate) fn load(file: &Path, maps: &[&MapEntry], wanted: &[&str]) -> Result<BinaryInfo> {
    let bytes = read_symbols_only(file)
        .map_err(|e| Error::Io(format!("reading {}: {e}", file.display())))?;
    let obj = object::File::parse(&*bytes)
        .map_err(|e| Error::Io(format!("parsing {}: {e}", file.display())))?;

    // The code mapping when there is one: it is the one whose segment is
    // told apart by permissions for certain.
    let load_bias = maps
        .iter()
        .find(|m| m.executable)
        .or_else(|| maps.iter().min_by_key(|m| m.offset))
        .and_then(|m| load_bias(&obj, m.start, m.offset, m.executable))
        .unwrap_or(0);
    let mut info = BinaryInfo::default();
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

/// `file`'s headers and symbol tables; its code and data (most of a big
/// libpython) are not read, and their pages of the zeroed buffer are never
/// touched. Small files, and files whose section headers cannot tell, are
/// read whole.
fn read_symbols_only(path: &Path) -> std::io::Result<Zeroed> {
    let f = std::fs::File::open(path)?;
    let wanted = |name: &[u8], kind: u32, flags: u64| {
        !name.starts_with(b".debug_")
            && (flags & u64::from(object::elf::SHF_ALLOC) == 0
                || matches!(
                    kind,
                    object::elf::SHT_DYNSYM | object::elf::SHT_STRTAB | object::elf::SHT_NOTE
                ))
    };
    match read_sections(&f, 1 << 20, wanted)? {
        Some((data, _)) => Ok(data),
        None => read_file(path).map(Zeroed::from),
    }
}

/// A file's bytes with only some ranges read, and those ranges (sorted).
pub(crate) type SparseFile = (Zeroed, Vec<std::ops::Range<u64>>);

/// An ELF64 little-endian file's ELF header, program and section headers,
/// section names and the sections `wanted(name, sh_type, sh_flags)` picks,
/// in a zeroed buffer as long as the file (unread pages are never touched,
/// so cost no memory), with the file ranges read, sorted. None when the file
/// is shorter than `min_len` (reading it whole is cheaper), larger than
/// [`MAX_FILE`], not ELF64 LE, or its headers do not fit in it.
pub(crate) fn read_sections(
    file: &std::fs::File,
    min_len: u64,
    wanted: impl Fn(&[u8], u32, u64) -> bool,
) -> std::io::Result<Option<SparseFile>> {
    use std::ops::Range;
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    if !(min_len..=MAX_FILE).contains(&len) {
        return Ok(None);
    }
    let mut hdr = [0u8; 64];
    file.read_exact_at(&mut hdr, 0)?;
    if hdr[..4] != *b"\x7fELF" || hdr[4] != 2 || hdr[5] != 1 {
        return Ok(None);
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as u64;
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |b: &[u8], o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(a)
    };
    let (phoff, shoff) = (u64_at(&hdr, 0x20), u64_at(&hdr, 0x28));
    let (phentsize, phnum) = (u16_at(&hdr, 0x36), u16_at(&hdr, 0x38));
    let (shentsize, shnum, shstrndx) = (u16_at(&hdr, 0x3a), u16_at(&hdr, 0x3c), u16_at(&hdr, 0x3e));
    // Extended numbering (shnum 0, or an escaped shstrndx) is for files with
    // 65,280+ sections: those are read whole.
    if shentsize != 64 || shnum == 0 || shstrndx >= shnum {
        return Ok(None);
    }
    let within = |off: u64, n: u64| off.checked_add(n).filter(|&e| e <= len).map(|e| off..e);
    let (Some(ph), Some(sh)) = (within(phoff, phentsize * phnum), within(shoff, 64 * shnum)) else {
        return Ok(None);
    };
    let Some(mut data) = usize::try_from(len).ok().and_then(Zeroed::new) else {
        return Ok(None);
    };
    let mut filled: Vec<Range<u64>> = Vec::new();
    let mut fill = |data: &mut Zeroed, r: Range<u64>| -> std::io::Result<()> {
        if !r.is_empty() {
            file.read_exact_at(&mut data[r.start as usize..r.end as usize], r.start)?;
            filled.push(r);
        }
        Ok(())
    };
    fill(&mut data, 0..64)?;
    fill(&mut data, ph)?;
    fill(&mut data, sh.clone())?;
    // (name offset, type, flags, file range) of each section.
    let sections: Vec<(u32, u32, u64, Option<Range<u64>>)> = (0..shnum)
        .map(|i| {
            let h = &data[(sh.start + 64 * i) as usize..(sh.start + 64 * (i + 1)) as usize];
            let r = (u32_at(h, 4) != object::elf::SHT_NOBITS)
                .then(|| within(u64_at(h, 24), u64_at(h, 32)))
                .flatten();
            (u32_at(h, 0), u32_at(h, 4), u64_at(h, 8), r)
        })
        .collect();
    let Some(names) = sections[shstrndx as usize].3.clone() else {
        return Ok(None);
    };
    fill(&mut data, names.clone())?;
    let mut picked = Vec::new();
    for (name, kind, flags, range) in &sections {
        let Some(range) = range.clone() else { continue };
        let b = &data[names.start as usize..names.end as usize];
        let b = b.get(*name as usize..).unwrap_or(&[]);
        let name = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
        if wanted(name, *kind, *flags) {
            picked.push(range);
        }
    }
    for r in picked {
        fill(&mut data, r)?;
    }
    filled.sort_by_key(|r| r.start);
    Ok(Some((data, filled)))
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

/// avma − svma (runtime address = link-time address + bias) of the file
/// whose mapping at `map_start` maps file offset `map_offset`, from the
/// loadable segment that mapping maps. The loader maps each segment from its
/// file offset rounded down to a page, so two segments can share the page a
/// mapping starts at (lld's default layout, and what patchelf/auditwheel
/// leave behind: a read-only segment ending at 0x52c, the code segment
/// starting at file offset 0x52c but address 0x152c). The segment is then
/// told by its permissions (`executable`: whether the mapping is); failing
/// an exact page match (a segment split in two mappings by RELRO), the
/// latest-starting segment whose file range holds the offset.
pub(crate) fn load_bias(
    obj: &object::File,
    map_start: u64,
    map_offset: u64,
    executable: bool,
) -> Option<u64> {
    const PAGE: u64 = 0x1000;
    let mut best: Option<(u64, bool, bool, u64)> = None;
    for seg in obj.segments() {
        let (off, size) = seg.file_range();
        let page_off = off & !(PAGE - 1);
        let Some(end) = off.checked_add(size.max(1)) else {
            continue;
        };
        if !(page_off <= map_offset && map_offset < end) {
            continue;
        }
        let is_x = match seg.flags() {
            object::SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_X != 0,
            _ => false,
        };
        let bias = map_start
            .wrapping_add(off)
            .wrapping_sub(seg.address())
            .wrapping_sub(map_offset);
        // Rank: permissions match, then starts at the mapped page, then the
        // latest start.
        let key = (is_x == executable, page_off == map_offset, page_off);
        if best.is_none_or(|(_, a, b, c)| key > (a, b, c)) {
            best = Some((bias, key.0, key.1, key.2));
        }
    }
    best.map(|b| b.0)
}
