//! A module's function symbols as a compact address index: 16 bytes per
//! symbol (start, size and flags, name offset), sorted by address. The
//! symbol and string tables themselves are never kept: they are streamed
//! once from the file to build the index, and a name is read from its
//! string table (from the file, a few hundred bytes) only when a lookup
//! needs it. PyTorch's libtorch_cpu.so has some 450,000 function symbols
//! with 150 MB of mostly C++ names; a table of every name, copied and
//! demangled, is what made one `dump --native` take hundreds of MB.
//! [`ModuleSymbols`] is a module's symbol state: the index, built on first
//! use from the module's file (and its MiniDebugInfo and debug file), and
//! the names and addresses asked of it, cached.

use std::collections::HashMap;
use std::sync::Arc;

use object::elf;
use object::read::elf::{FileHeader, SectionHeader};
use object::LittleEndian as LE;
use object::{Object, ObjectSection};

use super::backing::{unxz, Backing};
use super::cache::BoundedMap;
use super::file::ModuleFile;

/// Bits of [`Sym::size_flags`]: the symbol is in `.dynsym` and not local.
const EXPORTED: u32 = 1 << 31;
/// A PLT stub: its name is the called function's, shown with `@plt`.
const PLT: u32 = 1 << 30;
const SIZE_MASK: u32 = PLT - 1;
/// Symbol table bytes read per chunk while indexing.
const CHUNK: u64 = 24 << 16;
/// Longest name read (real C++ names are rarely over a few KB).
const NAME_MAX: u64 = 64 << 10;
/// Bound on symbols indexed per module (libtorch_cpu: 453,871, counting
/// `.dynsym`'s copies): 16 bytes each.
const SYMS_MAX: usize = 8 << 20;
/// Bound on the aliases at one address compared for the best name.
const ALIASES_MAX: usize = 64;
/// How far past an unsized symbol an address may still be named after it.
pub(crate) const UNSIZED_SYMBOL_SPAN: u64 = 4096;

#[derive(Clone, Copy)]
struct Sym {
    start: u64,
    /// Size (clamped to 2^30 - 1) and the [`EXPORTED`] and [`PLT`] bits.
    size_flags: u32,
    /// Offset in the concatenation of the module's string tables.
    name: u32,
}

impl Sym {
    fn size(&self) -> u64 {
        u64::from(self.size_flags & SIZE_MASK)
    }
}

/// One string table: where its bytes are, and its offset in the
/// concatenation the symbols' name offsets index.
struct StrTable {
    base: u32,
    data: Arc<Backing>,
    off: u64,
    len: u64,
}

/// The function (and PLT stub) symbols of a module, its debug file and
/// MiniDebugInfo, sorted by address.
#[derive(Default)]
pub(crate) struct SymbolIndex {
    syms: Vec<Sym>,
    tables: Vec<StrTable>,
    next_base: u64,
}

/// The symbol found for an address: its start, the largest size any alias
/// declares, and the aliases (indexes into the index) to pick a name from.
pub(crate) struct Found {
    pub(crate) start: u64,
    aliases: std::ops::Range<usize>,
}

/// A section header's (type, link, file offset, size, address, entsize).
#[derive(Clone, Copy)]
struct Sec {
    kind: u32,
    link: u32,
    off: u64,
    size: u64,
    addr: u64,
}

fn sections(data: &[u8]) -> Option<Vec<Sec>> {
    let h = elf::FileHeader64::<LE>::parse(data).ok()?;
    let table = h.sections(LE, data).ok()?;
    Some(
        table
            .iter()
            .map(|s| Sec {
                kind: s.sh_type(LE),
                link: s.sh_link(LE),
                off: s.sh_offset(LE),
                size: if s.sh_type(LE) == elf::SHT_NOBITS {
                    0
                } else {
                    s.sh_size(LE)
                },
                addr: s.sh_addr(LE),
            })
            .collect(),
    )
}

/// The file bytes at `off..off + len`: borrowed when they were read with
/// the file, else read into `buf` (one buffer reused for every chunk of a
/// table, rather than a fresh allocation, zeroed and faulted in, per chunk).
fn chunk<'a>(data: &'a Backing, off: u64, len: u64, buf: &'a mut Vec<u8>) -> Option<&'a [u8]> {
    if data.has(off, len) {
        return data.get(usize::try_from(off).ok()?..usize::try_from(off + len).ok()?);
    }
    buf.resize(usize::try_from(len).ok()?, 0);
    data.read_into(off, buf)?;
    Some(buf)
}

/// One Elf64_Sym: (st_name, st_info, st_shndx, st_value, st_size).
fn parse_sym(b: &[u8]) -> (u32, u8, u16, u64, u64) {
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default());
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    (
        u32_at(0),
        b[4],
        u16::from_le_bytes([b[6], b[7]]),
        u64_at(8),
        u64_at(16),
    )
}

impl SymbolIndex {
    /// Register a string table; its base in the concatenation, or None
    /// when that would pass 4 GB.
    fn add_strtab(&mut self, data: &Arc<Backing>, s: Sec) -> Option<u32> {
        let base = u32::try_from(self.next_base).ok()?;
        let end = self.next_base.checked_add(s.size)?;
        if end > u64::from(u32::MAX) || s.off.checked_add(s.size)? > data.len() as u64 {
            return None;
        }
        self.next_base = end;
        self.tables.push(StrTable {
            base,
            data: data.clone(),
            off: s.off,
            len: s.size,
        });
        Some(base)
    }

    /// Index the function symbols of `data`'s `.dynsym` and, when
    /// `want_static`, `.symtab`, and its PLT stubs when `plt`.
    pub(crate) fn add_file(&mut self, data: &Arc<Backing>, want_static: bool, plt: bool) {
        let Some(secs) = sections(data) else { return };
        let mut dynsym = None;
        for (i, s) in secs.iter().enumerate() {
            let is_dyn = s.kind == elf::SHT_DYNSYM;
            if !(is_dyn || (want_static && s.kind == elf::SHT_SYMTAB)) {
                continue;
            }
            let Some(&strtab) = secs.get(s.link as usize) else {
                continue;
            };
            let Some(base) = self.add_strtab(data, strtab) else {
                continue;
            };
            if is_dyn {
                dynsym = Some((i, *s, base));
            }
            self.add_symbols(data, *s, base, strtab.size, is_dyn);
        }
        if plt {
            if let Some(d) = dynsym {
                self.add_plt(data, &secs, d);
            }
        }
    }

    fn add_symbols(&mut self, data: &Backing, s: Sec, base: u32, strsize: u64, dynamic: bool) {
        let n = s.size / 24;
        let mut i = 0;
        let mut buf = Vec::new();
        while i < n && self.syms.len() < SYMS_MAX {
            let count = (n - i).min(CHUNK / 24);
            let Some(bytes) = chunk(data, s.off + i * 24, count * 24, &mut buf) else {
                return;
            };
            for e in bytes.chunks_exact(24) {
                let (name, info, shndx, value, size) = parse_sym(e);
                let (bind, kind) = (info >> 4, info & 0xf);
                // As `object` has it: a defined STT_FUNC with a name.
                let defined = shndx != elf::SHN_UNDEF
                    && (shndx < elf::SHN_LORESERVE || shndx == elf::SHN_XINDEX);
                if kind != elf::STT_FUNC || !defined || name == 0 || u64::from(name) >= strsize {
                    continue;
                }
                let mut flags = u32::try_from(size).unwrap_or(SIZE_MASK).min(SIZE_MASK);
                if dynamic && bind != elf::STB_LOCAL {
                    flags |= EXPORTED;
                }
                self.syms.push(Sym {
                    start: value,
                    size_flags: flags,
                    name: base + name,
                });
            }
            i += count;
        }
    }

    /// PLT stubs as `func@plt`, as gdb names them: each stub's
    /// `jmp *GOT(%rip)` names its GOT slot, whose dynamic relocation names
    /// the function; a lazy-binding stub without one (`push index`) is
    /// named by its index into the jump-slot relocations. Only the
    /// relocations of the stubs' slots are kept while reading.
    fn add_plt(
        &mut self,
        data: &Backing,
        secs: &[Sec],
        (dyn_idx, dynsym, base): (usize, Sec, u32),
    ) {
        let Some(names) = (|| {
            let h = elf::FileHeader64::<LE>::parse(&**data).ok()?;
            let table = h.sections(LE, &**data).ok()?;
            Some(
                table
                    .iter()
                    .map(|s| table.section_name(LE, s).unwrap_or(&[]).to_vec())
                    .collect::<Vec<_>>(),
            )
        })() else {
            return;
        };
        // (stub address, size, GOT slot or jump-slot index)
        enum Via {
            Slot(u64),
            Index(usize),
        }
        let mut stubs: Vec<(u64, u64, Via)> = Vec::new();
        for (sec_name, s) in names.iter().zip(secs) {
            let sec_name = sec_name.as_slice();
            if !matches!(sec_name, b".plt" | b".plt.sec" | b".plt.got") || s.size > 64 << 20 {
                continue;
            }
            let Some(bytes) = data.range(s.off, s.size) else {
                continue;
            };
            let ibt = bytes.starts_with(&[0xF3, 0x0F, 0x1E, 0xFA]);
            let entsize = if sec_name == b".plt.got" && !ibt {
                8
            } else {
                16
            };
            for (i, entry) in bytes.chunks_exact(entsize).enumerate().take(1 << 20) {
                // The lazy PLT's header (`push GOT+8; jmp *GOT+16`): no
                // relocation names its slot, so looking for one would read
                // every relocation table (libtorch_cpu's `.rela.dyn`: 8 MB).
                if i == 0
                    && sec_name == b".plt"
                    && entry
                        .get(..8)
                        .is_some_and(|h| h.windows(2).any(|w| w == [0xFF, 0x35]))
                {
                    continue;
                }
                let at = s.addr + (i * entsize) as u64;
                let jmp = entry.windows(2).position(|w| w == [0xFF, 0x25]);
                let via = match jmp {
                    Some(p) if p + 6 <= entry.len() => {
                        let disp =
                            i32::from_le_bytes(entry[p + 2..p + 6].try_into().unwrap_or_default());
                        Via::Slot(
                            at.wrapping_add((p + 6) as u64)
                                .wrapping_add(disp as i64 as u64),
                        )
                    }
                    _ => match entry.iter().position(|&b| b == 0x68) {
                        Some(p) if p + 5 <= entry.len() => Via::Index(u32::from_le_bytes(
                            entry[p + 1..p + 5].try_into().unwrap_or_default(),
                        )
                            as usize),
                        _ => continue,
                    },
                };
                stubs.push((at, entsize as u64, via));
            }
        }
        if stubs.is_empty() {
            return;
        }
        let wanted_slots: std::collections::HashSet<u64> = stubs
            .iter()
            .filter_map(|s| match s.2 {
                Via::Slot(a) => Some(a),
                Via::Index(_) => None,
            })
            .collect();
        let mut wanted_index: Vec<usize> = stubs
            .iter()
            .filter_map(|s| match s.2 {
                Via::Index(i) => Some(i),
                Via::Slot(_) => None,
            })
            .collect();
        wanted_index.sort_unstable();
        wanted_index.dedup();
        // Dynamic relocations with a symbol: the slot's symbol index, and
        // the n-th jump slot's.
        let mut by_slot: HashMap<u64, u32> = HashMap::new();
        let mut by_index: HashMap<usize, u32> = HashMap::new();
        let mut jump_slots = 0usize;
        let mut seen = 0usize;
        // A slot relocated twice is named by the later relocation. Stubs
        // named by index need every jump slot counted, in order; stubs named
        // by slot only need the slots, so the tables are read from the last
        // (`.rela.plt`, the stubs' own) back, until every slot is named:
        // a large library's `.rela.dyn` (8 MB in libtorch_cpu.so) is then
        // never read.
        let mut rela: Vec<&Sec> = secs
            .iter()
            .filter(|s| s.kind == elf::SHT_RELA && s.link as usize == dyn_idx)
            .collect();
        let backwards = wanted_index.is_empty();
        let mut buf = Vec::new();
        if backwards {
            rela.reverse();
        }
        for s in rela {
            if backwards && by_slot.len() == wanted_slots.len() {
                break;
            }
            // Named by a later table: kept.
            let named_later: std::collections::HashSet<u64> = if backwards {
                by_slot.keys().copied().collect()
            } else {
                Default::default()
            };
            let n = s.size / 24;
            let mut i = 0;
            while i < n && seen < 1 << 20 {
                let count = (n - i).min(CHUNK / 24);
                let Some(bytes) = chunk(data, s.off + i * 24, count * 24, &mut buf) else {
                    break;
                };
                for r in bytes.chunks_exact(24) {
                    seen += 1;
                    let off = u64::from_le_bytes(r[0..8].try_into().unwrap_or_default());
                    let info = u64::from_le_bytes(r[8..16].try_into().unwrap_or_default());
                    let (sym, kind) = ((info >> 32) as u32, info as u32);
                    if sym == 0 {
                        continue;
                    }
                    if kind == elf::R_X86_64_JUMP_SLOT {
                        if wanted_index.binary_search(&jump_slots).is_ok() {
                            by_index.insert(jump_slots, sym);
                        }
                        jump_slots += 1;
                    }
                    if wanted_slots.contains(&off) && !named_later.contains(&off) {
                        by_slot.insert(off, sym);
                    }
                }
                i += count;
            }
        }
        // The stubs' `.dynsym` entries, read in order, a chunk at a time
        // (libtorch_cpu.so has 30,000 stubs: one read each was 30,000 reads).
        let mut wanted: Vec<(u32, u64, u64)> = stubs
            .into_iter()
            .filter_map(|(at, size, via)| {
                let sym = match via {
                    Via::Slot(a) => by_slot.get(&a),
                    Via::Index(i) => by_index.get(&i),
                };
                Some((*sym?, at, size))
            })
            .collect();
        wanted.sort_unstable();
        let mut chunk: Option<(u64, std::borrow::Cow<'_, [u8]>)> = None;
        for (sym, at, size) in wanted {
            let Some(o) = u64::from(sym)
                .checked_mul(24)
                .filter(|&o| o + 24 <= dynsym.size)
            else {
                continue;
            };
            if !chunk
                .as_ref()
                .is_some_and(|(c, b)| *c <= o && o + 24 <= *c + b.len() as u64)
            {
                let len = (dynsym.size - o).min(CHUNK / 24 * 24);
                chunk = data.range(dynsym.off + o, len).map(|b| (o, b));
            }
            let Some((c, b)) = &chunk else { continue };
            let Some(e) = b.get((o - c) as usize..(o - c) as usize + 24) else {
                continue;
            };
            let name = parse_sym(e).0;
            if name == 0 || self.syms.len() >= SYMS_MAX {
                continue;
            }
            self.syms.push(Sym {
                start: at,
                size_flags: size as u32 | PLT,
                name: base + name,
            });
        }
    }

    /// Sort by address, aliases kept in the order the tables list them
    /// (which breaks ties between equally good names, as gdb's order does);
    /// drop spare capacity.
    pub(crate) fn finish(&mut self) {
        self.syms.sort_by_key(|s| s.start);
        self.syms.shrink_to_fit();
    }

    /// The function containing `svma`. A symbol without a size only counts
    /// when it is the nearest one below and nothing else intervenes; a sized
    /// symbol must contain the address, so that a stripped static function
    /// is shown as module+offset rather than as its exported neighbour.
    /// Among aliases (symbols at one address) the largest size counts.
    pub(crate) fn lookup(&self, svma: u64) -> Option<Found> {
        let end = self.syms.partition_point(|s| s.start <= svma);
        let last = end.checked_sub(1)?;
        let start = self.syms[last].start;
        let first = self.syms[..end].partition_point(|s| s.start < start);
        let size = self.syms[first..end]
            .iter()
            .map(Sym::size)
            .max()
            .unwrap_or(0);
        if size != 0 && svma >= start.saturating_add(size) {
            return None;
        }
        // An unsized marker such as `_init` would otherwise swallow the PLT
        // and everything up to the next symbol: cover a page at most.
        if size == 0 && svma - start >= UNSIZED_SYMBOL_SPAN {
            return None;
        }
        Some(Found {
            start,
            aliases: first..end,
        })
    }

    /// The raw bytes of the name at `name` (an offset in the concatenation).
    fn name_bytes(&self, name: u32) -> Option<Vec<u8>> {
        let t = self
            .tables
            .partition_point(|t| t.base <= name)
            .checked_sub(1)?;
        let t = &self.tables[t];
        let mut at = u64::from(name - t.base);
        let end = t.len.min(at.saturating_add(NAME_MAX));
        let mut out = Vec::new();
        while at < end {
            let n = (end - at).min(256);
            let b = t.data.range(t.off + at, n)?;
            match b.iter().position(|&c| c == 0) {
                Some(p) => {
                    out.extend_from_slice(&b[..p]);
                    return Some(out);
                }
                None => out.extend_from_slice(&b),
            }
            at += n;
        }
        None
    }

    /// The name of a symbol as the tables have it (`func@plt` for a stub).
    fn name_of(&self, s: &Sym) -> Option<String> {
        let b = self.name_bytes(s.name)?;
        let n = String::from_utf8(b).ok()?;
        if n.is_empty() {
            return None;
        }
        if s.size_flags & PLT != 0 {
            let n = n.split('@').next().unwrap_or(&n);
            return Some(format!("{n}@plt"));
        }
        Some(n)
    }

    /// The best name among the aliases found, and whether it is exported:
    /// exported first (the public name of an aliased function), then
    /// fewer leading underscores (`read` over `__libc_read`), then a known
    /// size; ties go to the first listed.
    pub(crate) fn name(&self, found: &Found) -> Option<(String, bool)> {
        let mut best: Option<((bool, usize, bool), String, bool)> = None;
        for s in self.syms[found.aliases.clone()].iter().take(ALIASES_MAX) {
            let Some(n) = self.name_of(s) else { continue };
            let exported = s.size_flags & EXPORTED != 0;
            let underscores = n.bytes().take_while(|&b| b == b'_').count();
            let key = (!exported, underscores, s.size() == 0);
            if best.as_ref().is_none_or(|b| key < b.0) {
                best = Some((key, n, exported));
            }
        }
        best.map(|(_, n, e)| (n, e))
    }

    /// Every function symbol's address by exact name (None: several
    /// addresses), PLT stubs left out. Reads every name: for the tail-call
    /// search only, which runs where DWARF is read anyway.
    pub(crate) fn by_name(&self) -> HashMap<Box<str>, Option<u64>> {
        let mut map: HashMap<Box<str>, Option<u64>> = HashMap::new();
        for s in &self.syms {
            if s.size_flags & PLT != 0 || s.start == 0 {
                continue;
            }
            let Some(n) = self.name_of(s) else { continue };
            map.entry(n.into())
                .and_modify(|v| {
                    if *v != Some(s.start) {
                        *v = None
                    }
                })
                .or_insert(Some(s.start));
        }
        map
    }

    /// The shown name at one address (the best alias), for tests.
    #[cfg(test)]
    pub(crate) fn at(&self, svma: u64) -> Option<(u64, u64, String)> {
        let f = self.lookup(svma)?;
        let size = self.syms[f.aliases.clone()]
            .iter()
            .map(Sym::size)
            .max()
            .unwrap_or(0);
        Some((f.start, size, self.name(&f)?.0))
    }

    /// Distinct symbol addresses, for tests.
    #[cfg(test)]
    pub(crate) fn starts(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.syms.iter().map(|s| s.start).collect();
        v.dedup();
        v
    }
}

/// Demangle C++ (Itanium) and Rust names; C names come back unchanged.
pub(crate) fn demangle(name: &str) -> String {
    let (base, suffix) = match name.find('.') {
        Some(i) if i > 0 => name.split_at(i),
        _ => (name, ""),
    };
    if base.starts_with("_R") || is_legacy_rust(base) {
        if let Ok(d) = rustc_demangle::try_demangle(base) {
            return format!("{d:#}{suffix}");
        }
    }
    if base.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(base) {
            let opts = cpp_demangle::DemangleOptions::new().no_return_type();
            if let Ok(d) = sym.demangle_with_options(&opts) {
                return format!("{d}{suffix}");
            }
        }
    }
    name.to_string()
}

/// Legacy Rust mangling is Itanium-shaped; its tell is the `17h<16 hex>E` hash.
fn is_legacy_rust(s: &str) -> bool {
    s.starts_with("_ZN")
        && s.len() > 20
        && s.ends_with('E')
        && s[..s.len() - 1]
            .rsplit_once("17h")
            .is_some_and(|(_, h)| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A module's symbol state: its index (built on first use), and the
/// names, exported functions and name-to-address table asked of it.
#[derive(Default)]
pub(super) struct ModuleSymbols {
    index: Option<SymbolIndex>,
    /// (demangled name, exported) by address.
    names: BoundedMap<u64, Option<(Arc<str>, bool)>>,
    /// Function symbols by exact name (None: several addresses).
    by_name: Option<HashMap<Box<str>, Option<u64>>>,
    /// Exported functions by name, as the hash table found them.
    exported: BoundedMap<Box<str>, Option<u64>>,
}

impl ModuleSymbols {
    /// The module's symbol index, built on first use: its own `.dynsym`,
    /// `.symtab` and PLT; without `.symtab`, MiniDebugInfo's and the
    /// separate debug file's `.symtab` too.
    fn index(&mut self, file: &mut ModuleFile) -> &SymbolIndex {
        self.index.get_or_insert_with(|| {
            let mut s = SymbolIndex::default();
            s.add_file(&file.bytes, true, true);
            if !file.has_symtab {
                // MiniDebugInfo: an xz-compressed ELF file holding the
                // static function symbols that stripping removed (Fedora,
                // RHEL, some wheels' bundled libraries).
                let minidebug = object::File::parse(&**file.bytes).ok().and_then(|obj| {
                    let sec = obj.section_by_name(".gnu_debugdata")?;
                    let (off, len) = sec.file_range()?;
                    file.bytes.range(off, len).and_then(|b| unxz(&b))
                });
                if let Some(bytes) = minidebug {
                    s.add_file(&Arc::new(Backing::Owned(bytes)), true, false);
                }
                if let Some(d) = file.debug_file() {
                    s.add_file(&d, true, false);
                }
            }
            s.finish();
            s
        })
    }

    /// Start (svma) of the sized or nearest function symbol covering `svma`.
    pub(super) fn function_start(&mut self, file: &mut ModuleFile, svma: u64) -> Option<u64> {
        self.index(file).lookup(svma).map(|f| f.start)
    }

    /// (demangled name, exported) of the function containing `svma`; cached.
    /// The name is read from the file and demangled here, on the first
    /// lookup of the address: only frames that are unwound ask.
    pub(super) fn symbol(&mut self, file: &mut ModuleFile, svma: u64) -> Option<(Arc<str>, bool)> {
        if let Some(n) = self.names.get(&svma) {
            return n.clone();
        }
        let syms = self.index(file);
        let r = syms
            .lookup(svma)
            .and_then(|f| syms.name(&f))
            .map(|(n, exported)| (Arc::<str>::from(demangle(&n)), exported));
        self.names.insert(svma, r.clone());
        r
    }

    /// The address of the exported function `name` (in `.dynsym`, any
    /// version), found as the dynamic linker finds it: through the
    /// module's `.gnu.hash` (or SysV `.hash`) table, reading a few buckets,
    /// chain words and names; None when no defined function, or several
    /// at different addresses, have that name. What a call from another
    /// module (a PLT stub, a declaration) binds to. Without a hash table,
    /// [`Self::function_by_name`]. Cached per name.
    pub(super) fn exported_function(&mut self, file: &mut ModuleFile, name: &str) -> Option<u64> {
        if let Some(r) = self.exported.get(name) {
            return *r;
        }
        let r = match dyn_hash_lookup(&file.bytes, name) {
            Some(r) => r,
            None => self.function_by_name(file, name),
        };
        self.exported.insert(name.into(), r);
        r
    }

    /// The address of the function symbol named `name`, exactly as the
    /// symbol tables have it (every alias counts); None when no function,
    /// or several at different addresses, have that name. The table is
    /// built on first use (only the tail-call search asks).
    pub(super) fn function_by_name(&mut self, file: &mut ModuleFile, name: &str) -> Option<u64> {
        if self.by_name.is_none() {
            let map = self.index(file).by_name();
            self.by_name = Some(map);
        }
        self.by_name.as_ref()?.get(name).copied().flatten()
    }
}

/// The address (svma) of the data object named `name` of exactly `size`
/// bytes, from `data`'s `.symtab` or `.dynsym`, local symbols included:
/// for well-known variables a debugger finds by name, such as gdb's JIT
/// interface descriptor. The tables are streamed in chunks; only the
/// names of objects of that size are read, so a large library costs one
/// pass over its symbol table and a handful of name reads.
pub(super) fn object_symbol(data: &Backing, name: &str, size: u64) -> Option<u64> {
    let secs = sections(data)?;
    let mut buf = Vec::new();
    let mut name_buf = vec![0u8; name.len() + 1];
    for s in secs
        .iter()
        .filter(|s| s.kind == elf::SHT_SYMTAB || s.kind == elf::SHT_DYNSYM)
    {
        let Some(strtab) = secs.get(s.link as usize) else {
            continue;
        };
        let n = s.size / 24;
        let mut i = 0;
        while i < n {
            let count = (n - i).min(CHUNK / 24);
            let bytes = chunk(data, s.off + i * 24, count * 24, &mut buf)?;
            for e in bytes.chunks_exact(24) {
                let (st_name, info, shndx, value, st_size) = parse_sym(e);
                if info & 0xf != elf::STT_OBJECT
                    || st_size != size
                    || shndx == elf::SHN_UNDEF
                    || u64::from(st_name) + name_buf.len() as u64 > strtab.size
                {
                    continue;
                }
                if data
                    .read_into(strtab.off + u64::from(st_name), &mut name_buf)
                    .is_some()
                    && name_buf.last() == Some(&0)
                    && &name_buf[..name.len()] == name.as_bytes()
                {
                    return Some(value);
                }
            }
            i += count;
        }
    }
    None
}

/// Bound on the symbols one hash chain may make us look at.
const CHAIN_MAX: u32 = 1 << 16;

/// [`ModuleSymbols::exported_function`] through `data`'s dynamic symbol hash
/// table: Some(answer) when the module has one, None when it has none (or
/// it cannot be read). Every index and offset comes from the file and is
/// bounded by the sections it points into.
fn dyn_hash_lookup(data: &Backing, name: &str) -> Option<Option<u64>> {
    let secs = sections(data)?;
    let (gnu, table) = match secs.iter().find(|s| s.kind == elf::SHT_GNU_HASH) {
        Some(t) => (true, *t),
        None => (false, *secs.iter().find(|s| s.kind == elf::SHT_HASH)?),
    };
    let dynsym = *secs.get(table.link as usize)?;
    if dynsym.kind != elf::SHT_DYNSYM {
        return None;
    }
    let dynstr = *secs.get(dynsym.link as usize)?;
    let nsyms = dynsym.size / 24;
    let u32_at = |off: u64| -> Option<u32> {
        if off.checked_add(4)? > table.size {
            return None;
        }
        let b = data.range(table.off + off, 4)?;
        Some(u32::from_le_bytes(b[..4].try_into().ok()?))
    };
    let want = name.as_bytes();
    let mut found: Option<u64> = None;
    let mut ambiguous = false;
    // Whether symbol `i` is a defined function named `name`; its address.
    let mut check = |i: u32| -> Option<()> {
        if u64::from(i) >= nsyms {
            return None;
        }
        let e = data.range(dynsym.off + u64::from(i) * 24, 24)?;
        let (st_name, info, shndx, value, _) = parse_sym(&e);
        let defined =
            shndx != elf::SHN_UNDEF && (shndx < elf::SHN_LORESERVE || shndx == elf::SHN_XINDEX);
        if info & 0xf != elf::STT_FUNC || !defined || u64::from(st_name) >= dynstr.size {
            return None;
        }
        let at = dynstr.off + u64::from(st_name);
        let len = (want.len() as u64 + 1).min(dynstr.size - u64::from(st_name));
        let b = data.range(at, len)?;
        if b.len() == want.len() + 1 && &b[..want.len()] == want && b[want.len()] == 0 {
            match found {
                Some(a) if a != value => ambiguous = true,
                _ => found = Some(value),
            }
        }
        Some(())
    };
    if gnu {
        let nbuckets = u32_at(0)?;
        let symoffset = u32_at(4)?;
        let bloom_size = u32_at(8)?;
        if nbuckets == 0 {
            return Some(None);
        }
        let h = want.iter().fold(5381u32, |h, &c| {
            h.wrapping_mul(33).wrapping_add(u32::from(c))
        });
        let buckets = 16 + u64::from(bloom_size) * 8;
        let mut i = u32_at(buckets + u64::from(h % nbuckets) * 4)?;
        if i < symoffset {
            return Some(None);
        }
        let chain = buckets + u64::from(nbuckets) * 4;
        for _ in 0..CHAIN_MAX {
            let c = u32_at(chain + u64::from(i - symoffset) * 4)?;
            if c | 1 == h | 1 {
                check(i);
            }
            if c & 1 != 0 {
                break;
            }
            i = i.checked_add(1)?;
        }
    } else {
        let nbucket = u32_at(0)?;
        let nchain = u32_at(4)?;
        if nbucket == 0 {
            return Some(None);
        }
        let h = want.iter().fold(0u32, |h, &c| {
            let h = (h << 4).wrapping_add(u32::from(c));
            let g = h & 0xf000_0000;
            (h ^ (g >> 24)) & !g
        });
        let mut i = u32_at(8 + u64::from(h % nbucket) * 4)?;
        let mut steps = 0;
        while i != 0 && i < nchain && steps < CHAIN_MAX {
            check(i);
            i = u32_at(8 + (u64::from(nbucket) + u64::from(i)) * 4)?;
            steps += 1;
        }
    }
    Some(if ambiguous { None } else { found })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native_unwind::dwarf::{DwarfCtx, ModuleDwarf};
    use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, SymbolKind};
    use std::ops::Range;

    // The symbol table as it was built before the lean index: every name
    // copied into an arena, sorted, the best alias kept per address. The
    // reference the index is checked against.
    struct Sym {
        start: u64,
        size: u64,
        name: Range<u32>,
        exported: bool,
    }

    /// Function symbols of `.symtab` and `.dynsym` (and the debug file's `.symtab`),
    /// sorted by address; names live in one arena.
    #[derive(Default)]
    struct Symbols {
        syms: Vec<Sym>,
        names: String,
    }

    impl Symbols {
        fn add_from(&mut self, file: &object::File, want_static: bool) {
            let mut push = |sym: object::Symbol, exported: bool| {
                if !matches!(sym.kind(), SymbolKind::Text) || !sym.is_definition() {
                    return;
                }
                let Ok(name) = sym.name() else { return };
                if name.is_empty() || self.names.len() + name.len() > u32::MAX as usize {
                    return;
                }
                let start = self.names.len() as u32;
                self.names.push_str(name);
                self.syms.push(Sym {
                    start: sym.address(),
                    size: sym.size(),
                    name: start..self.names.len() as u32,
                    exported,
                });
            };
            for s in file.dynamic_symbols() {
                let exported = s.is_global() || s.is_weak();
                push(s, exported);
            }
            if want_static {
                for s in file.symbols() {
                    push(s, false);
                }
            }
        }

        fn push_named(&mut self, start: u64, size: u64, name: &str) {
            if name.is_empty() || self.names.len() + name.len() > u32::MAX as usize {
                return;
            }
            let b = self.names.len() as u32;
            self.names.push_str(name);
            self.syms.push(Sym {
                start,
                size,
                name: b..self.names.len() as u32,
                exported: false,
            });
        }

        /// PLT stubs as `func@plt`, as gdb names them: each stub's
        /// `jmp *GOT(%rip)` names its GOT slot, whose dynamic relocation names
        /// the function; a lazy-binding stub without one (`push index`) is named
        /// by its index into `.rela.plt`.
        fn add_plt(&mut self, file: &object::File) {
            let Some(dynsyms) = file.dynamic_symbol_table() else {
                return;
            };
            let mut by_slot: HashMap<u64, String> = HashMap::new();
            let mut jump_slots: Vec<String> = Vec::new();
            if let Some(relocs) = file.dynamic_relocations() {
                for (offset, r) in relocs.take(1 << 20) {
                    let object::RelocationTarget::Symbol(idx) = r.target() else {
                        continue;
                    };
                    let Some(name) = dynsyms
                        .symbol_by_index(idx)
                        .ok()
                        .and_then(|s| s.name().ok().map(str::to_string))
                    else {
                        continue;
                    };
                    if matches!(
                        r.flags(),
                        object::RelocationFlags::Elf {
                            r_type: object::elf::R_X86_64_JUMP_SLOT
                        }
                    ) {
                        jump_slots.push(name.clone());
                    }
                    by_slot.insert(offset, name);
                }
            }
            if by_slot.is_empty() {
                return;
            }
            for sec_name in [".plt", ".plt.sec", ".plt.got"] {
                let Some(sec) = file.section_by_name(sec_name) else {
                    continue;
                };
                let Ok(data) = sec.data() else { continue };
                let base = sec.address();
                let ibt = data.starts_with(&[0xF3, 0x0F, 0x1E, 0xFA]);
                let entsize = if sec_name == ".plt.got" && !ibt {
                    8
                } else {
                    16
                };
                for (i, entry) in data.chunks_exact(entsize).enumerate().take(1 << 20) {
                    let at = base + (i * entsize) as u64;
                    let jmp = entry.windows(2).position(|w| w == [0xFF, 0x25]);
                    let name = match jmp {
                        Some(p) if p + 6 <= entry.len() => {
                            let disp = i32::from_le_bytes([
                                entry[p + 2],
                                entry[p + 3],
                                entry[p + 4],
                                entry[p + 5],
                            ]) as i64;
                            let slot = at.wrapping_add((p + 6) as u64).wrapping_add(disp as u64);
                            by_slot.get(&slot).cloned()
                        }
                        _ => entry
                            .iter()
                            .position(|&b| b == 0x68)
                            .filter(|&p| p + 5 <= entry.len())
                            .and_then(|p| {
                                let n = u32::from_le_bytes([
                                    entry[p + 1],
                                    entry[p + 2],
                                    entry[p + 3],
                                    entry[p + 4],
                                ]) as usize;
                                jump_slots.get(n).cloned()
                            }),
                    };
                    if let Some(n) = name {
                        let n = n.split('@').next().unwrap_or(&n).to_string();
                        self.push_named(at, entsize as u64, &format!("{n}@plt"));
                    }
                }
            }
        }

        /// Sort so that, among symbols at one address, the best name comes first:
        /// exported (the public name of an aliased function), then fewer leading
        /// underscores (`read` over `__libc_read`), then a known size.
        fn finish(&mut self) {
            let names = &self.names;
            self.syms.sort_by_cached_key(|s| {
                let n = &names[s.name.start as usize..s.name.end as usize];
                let underscores = n.bytes().take_while(|&b| b == b'_').count();
                (s.start, !s.exported, underscores, s.size == 0)
            });
            // Keep the best name per address, with the largest size any alias
            // declares (they all describe the same function).
            let mut out: Vec<Sym> = Vec::with_capacity(self.syms.len());
            for s in self.syms.drain(..) {
                match out.last_mut() {
                    Some(l) if l.start == s.start => l.size = l.size.max(s.size),
                    _ => out.push(s),
                }
            }
            self.syms = out;
        }

        /// The function containing `svma`. A symbol without a size only counts
        /// when it is the nearest one below and nothing else intervenes; a sized
        /// symbol must contain the address, so that a stripped static function
        /// is shown as module+offset rather than as its exported neighbour.
        fn lookup(&self, svma: u64) -> Option<&Sym> {
            let i = self
                .syms
                .partition_point(|s| s.start <= svma)
                .checked_sub(1)?;
            let s = &self.syms[i];
            if s.size != 0 && svma >= s.start.saturating_add(s.size) {
                return None;
            }
            // An unsized marker such as `_init` would otherwise swallow the PLT
            // and everything up to the next symbol: cover a page at most.
            if s.size == 0 && svma - s.start >= UNSIZED_SYMBOL_SPAN {
                return None;
            }
            Some(s)
        }

        fn name(&self, s: &Sym) -> &str {
            &self.names[s.name.start as usize..s.name.end as usize]
        }
    }

    #[test]
    fn demangles_cpp_rust_and_keeps_c() {
        assert_eq!(demangle("read"), "read");
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("_ZN3foo3barEv.cold"), "foo::bar().cold");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_RNvCs1234_5krate4func"), "krate::func");
    }

    #[test]
    fn plt_stubs_are_named_like_objdump_names_them() {
        // A system library with a lazy-binding .plt (Debian's zlib), checked
        // against objdump's own `name@plt` labels.
        let path = "/lib/x86_64-linux-gnu/libz.so.1";
        let bytes = Arc::new(Backing::Owned(
            std::fs::read(path).expect("zlib is installed"),
        ));
        let mut s = SymbolIndex::default();
        s.add_file(&bytes, false, true);
        s.finish();
        let out = std::process::Command::new("objdump")
            .args(["-d", "-j", ".plt", path])
            .output()
            .expect("objdump");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut checked = 0;
        for l in text.lines().filter(|l| l.ends_with("@plt>:")) {
            let (addr, rest) = l.split_once(' ').unwrap();
            let addr = u64::from_str_radix(addr, 16).unwrap();
            let want = rest.trim_start_matches('<').trim_end_matches(">:");
            let got = s.at(addr + 4).map(|x| x.2);
            assert_eq!(got.as_deref(), Some(want), "at 0x{addr:x}");
            checked += 1;
        }
        assert!(checked > 10, "only {checked} stubs checked");
    }

    /// The hash-table lookup of exported functions finds what a scan of
    /// `.dynsym` finds, for every exported function of libc (`.gnu.hash`)
    /// and zlib, and nothing for names that are not there.
    #[test]
    fn exported_functions_found_through_the_hash_table() {
        for path in [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/x86_64-linux-gnu/libz.so.1",
        ] {
            let whole = std::fs::read(path).unwrap();
            let obj = object::File::parse(&whole[..]).unwrap();
            let mut want: HashMap<String, Option<u64>> = HashMap::new();
            for s in obj.dynamic_symbols() {
                let object::SymbolFlags::Elf { st_info, .. } = s.flags() else {
                    continue;
                };
                if st_info & 0xf != elf::STT_FUNC || !s.is_definition() {
                    continue;
                }
                let Ok(n) = s.name() else { continue };
                want.entry(n.to_string())
                    .and_modify(|v| {
                        if *v != Some(s.address()) {
                            *v = None
                        }
                    })
                    .or_insert(Some(s.address()));
            }
            assert!(want.len() > 50, "{path}");
            let sparse = Backing::open(std::path::Path::new(path)).unwrap();
            for (n, a) in &want {
                assert_eq!(dyn_hash_lookup(&sparse, n), Some(*a), "{path}: {n}");
            }
            for n in ["no_such_function_here", "", "read@plt"] {
                assert_eq!(dyn_hash_lookup(&sparse, n), Some(None), "{path}: {n}");
            }
        }
    }

    #[test]
    fn display_names_drop_compiler_suffixes() {
        use crate::native_unwind::display_name;
        assert_eq!(display_name("time_sleep.lto_priv.0"), "time_sleep");
        assert_eq!(display_name("f.constprop.0.isra.0"), "f");
        assert_eq!(display_name("g.part.3.cold"), "g");
        assert_eq!(display_name("h.cold"), "h");
        assert_eq!(
            display_name("core::fmt::write.llvm.123456"),
            "core::fmt::write"
        );
        assert_eq!(display_name("plain"), "plain");
        assert_eq!(display_name(".cold"), ".cold");
        assert_eq!(display_name("v1.2"), "v1.2");
    }

    /// What a sparse read gives equals what a whole read gives: every
    /// function symbol, and DWARF names and lines (read lazily, and
    /// inflated where the debug file's sections are compressed).
    #[test]
    fn sparse_reads_name_and_line_like_whole_reads() {
        let libc = "/lib/x86_64-linux-gnu/libc.so.6";
        let bytes = std::fs::read(libc).expect("libc");
        let id = object::File::parse(&bytes[..])
            .unwrap()
            .build_id()
            .unwrap()
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        let libc_dbg = format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]);
        let libpython = std::fs::read_dir(format!(
            "{}/.pyenv/versions",
            std::env::var("HOME").unwrap()
        ))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("lib/libpython3.11.so.1.0"))
        .find(|p| p.exists())
        .expect("pyenv's 3.11 (libpython with its own symbols and DWARF)");
        for path in [libpython.to_str().unwrap(), libc, &libc_dbg] {
            let sparse = Arc::new(Backing::open(std::path::Path::new(path)).unwrap());
            assert!(matches!(*sparse, Backing::Sparse { .. }), "{path}");
            let whole = Arc::new(Backing::Owned(std::fs::read(path).unwrap()));
            // The reference: every name copied, from the whole file.
            let mut b = Symbols::default();
            let obj = object::File::parse(&whole[..]).unwrap();
            b.add_from(&obj, true);
            b.add_plt(&obj);
            b.finish();
            // The index, from the sparse read (tables streamed, names read
            // on lookup).
            let mut a = SymbolIndex::default();
            a.add_file(&sparse, true, true);
            a.finish();
            assert!(b.syms.len() > 1000, "{path}: {} symbols", b.syms.len());
            let starts: Vec<u64> = b.syms.iter().map(|x| x.start).collect();
            assert_eq!(a.starts(), starts, "{path}");
            for y in &b.syms {
                let want = |at: u64| {
                    b.lookup(at)
                        .map(|z| (z.start, z.size, b.name(z).to_string()))
                };
                for at in [y.start, y.start + y.size / 2, y.start + y.size] {
                    assert_eq!(a.at(at), want(at), "{path} at {at:#x}");
                }
            }
            let (Some(da), Some(db)) = (DwarfCtx::load(sparse.clone()), DwarfCtx::load(whole))
            else {
                assert_eq!(path, libc, "only libc itself has no DWARF");
                continue;
            };
            // By unit (libpython: `.debug_aranges`, uncompressed), as whole.
            let mut units = ModuleDwarf::load(sparse.clone()).unwrap();
            let by_unit = matches!(units, ModuleDwarf::Units(_));
            assert_eq!(by_unit, path != libc_dbg, "{path}");
            let mut lines = 0;
            for s in b.syms.iter().step_by(97) {
                let frames = |d: &DwarfCtx| {
                    let mut v = Vec::new();
                    if let Ok(mut it) = d.ctx.find_frames(s.start + 1).skip_all_loads() {
                        while let Ok(Some(f)) = it.next() {
                            let loc = f.location.map(|l| (l.file.map(str::to_string), l.line));
                            v.push((f.function.map(|n| n.raw_name().unwrap().into_owned()), loc));
                        }
                    }
                    v
                };
                let fa = frames(&da);
                lines += fa
                    .iter()
                    .filter(|f| f.1.as_ref().is_some_and(|l| l.1.is_some()))
                    .count();
                assert_eq!(fa, frames(&db), "{path} at {:#x}", s.start);
                let fu = units.ctx(s.start + 1).map(frames).unwrap_or_default();
                assert_eq!(fu, fa, "{path} at {:#x}, by unit", s.start);
            }
            assert!(lines > 20, "{path}: {lines} lines");
        }
    }

    #[test]
    fn symbol_lookup_respects_sizes() {
        let mut s = Symbols::default();
        for (start, size, name, exported) in [
            (0x1000u64, 0x10u64, "exported_fn", true),
            (0x1000, 0x10, "__internal_alias", false),
            (0x1100, 0, "asm_label", false),
        ] {
            let b = s.names.len() as u32;
            s.names.push_str(name);
            s.syms.push(Sym {
                start,
                size,
                name: b..s.names.len() as u32,
                exported,
            });
        }
        s.finish();
        let name = |a| s.lookup(a).map(|x| (s.name(x), x.exported));
        assert_eq!(name(0x1008), Some(("exported_fn", true)));
        // Past the end of a sized symbol: a stripped static function.
        assert_eq!(name(0x1080), None);
        assert_eq!(name(0x1104).map(|x| x.0), Some("asm_label"));
        assert_eq!(name(0xfff), None);
    }
}
