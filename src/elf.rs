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
    let bytes =
        read_tables(file).map_err(|e| Error::Io(format!("reading {}: {e}", file.display())))?;
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

/// What [`load`] reads of a 64-bit little-endian ELF file: its headers,
/// section headers, symbol and string tables, each at its offset in a
/// zeroed buffer as long as the file, the rest left unread (a libpython
/// with debug info is some 30 MB, its tables 1 MB: the whole file's read
/// was most of the start-up cost). Untouched pages of the buffer are never
/// faulted in. Any other file is read whole.
fn read_tables(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    const SHT_SYMTAB: u32 = 2;
    const SHT_STRTAB: u32 = 3;
    const SHT_DYNSYM: u32 = 11;
    const SHT_SYMTAB_SHNDX: u32 = 18;
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut head = [0u8; 64];
    let elf64_le = len >= 64
        && f.read_exact_at(&mut head, 0).is_ok()
        && head[..4] == *b"\x7fELF"
        && head[4] == 2
        && head[5] == 1;
    if !elf64_le || len > MAX_FILE {
        drop(f);
        return read_file(path);
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as u64;
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let (phoff, shoff) = (u64_at(&head, 32), u64_at(&head, 40));
    let (phentsize, phnum) = (u16_at(&head, 54), u16_at(&head, 56));
    let (shentsize, shnum) = (u16_at(&head, 58), u16_at(&head, 60));
    if shnum == 0 && shoff != 0 {
        // Extended section numbering (the count is in section 0).
        drop(f);
        return read_file(path);
    }
    let mut bytes = vec![0u8; len as usize];
    // Within the file, or not read (the parser then finds what is wrong).
    let fill = |bytes: &mut [u8], off: u64, size: u64| -> std::io::Result<()> {
        match off.checked_add(size) {
            Some(end) if end <= len && size > 0 => {
                f.read_exact_at(&mut bytes[off as usize..end as usize], off)
            }
            _ => Ok(()),
        }
    };
    fill(&mut bytes, 0, 64)?;
    fill(&mut bytes, phoff, phentsize * phnum)?;
    fill(&mut bytes, shoff, shentsize * shnum)?;
    if shentsize >= 64 {
        let end = shoff.saturating_add(shentsize * shnum);
        if end <= len {
            for i in 0..shnum {
                let h = (shoff + i * shentsize) as usize;
                let kind = u32_at(&bytes, h + 4);
                if matches!(
                    kind,
                    SHT_SYMTAB | SHT_STRTAB | SHT_DYNSYM | SHT_SYMTAB_SHNDX
                ) {
                    let (off, size) = (u64_at(&bytes, h + 24), u64_at(&bytes, h + 32));
                    fill(&mut bytes, off, size)?;
                }
            }
        }
    }
    Ok(bytes)
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
