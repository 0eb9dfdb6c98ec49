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
use super::names::demangle;

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

/// A module's symbol state: its index (built on first use), and the
/// names, exported functions and name-to-address table asked of it.
#[derive(Default)]
pub(super) struct ModuleSymbols {
    index: Option<SymbolIndex>,
    /// (demangled name, exported) by function start.
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
        // Cached by the function's start, so that every address met in one
        // function shares one name (a long record meets many).
        let start = self.index(file).lookup(svma)?.start;
        if let Some(n) = self.names.get(&start) {
            return n.clone();
        }
        let syms = self.index(file);
        let r = syms
            .lookup(start)
            .and_then(|f| syms.name(&f))
            .map(|(n, exported)| (Arc::<str>::from(demangle(&n)), exported));
        self.names.insert(start, r.clone());
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
mod tests;
