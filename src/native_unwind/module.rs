//! One loaded ELF module of the target: its file bytes, load bias, unwind
//! tables, symbols, and (lazily) its separate debug file and DWARF line info.
//! Everything here is computed once per module and cached.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use gimli::{EndianSlice, LittleEndian};

use super::backing::{dwarf_section, unxz, Backing};
use super::callsites::{self, CallSite, CallTarget, UnitCallSites};
use super::cfi::{Cfi, CfiSections, SectionData};
use super::symbols::SymbolIndex;
use object::{Object, ObjectSection, ObjectSegment};

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

type Slice = EndianSlice<'static, LittleEndian>;

/// DWARF of one module, with the borrowed slices pointing into `owned` and
/// `file`, which live exactly as long as the context (declared first, so it
/// is dropped first).
struct DwarfCtx {
    ctx: addr2line::Context<Slice>,
    /// The same sections, for what addr2line does not read: call sites.
    dwarf: Arc<gimli::Dwarf<Slice>>,
    _owned: Vec<Box<[u8]>>,
    _file: Arc<Backing>,
}

impl DwarfCtx {
    fn load(file: Arc<Backing>) -> Option<DwarfCtx> {
        let obj = object::File::parse(&**file).ok()?;
        obj.section_by_name(".debug_info")?;
        let mut owned: Vec<Box<[u8]>> = Vec::new();
        let dwarf = gimli::Dwarf::load(|id| -> Result<_, gimli::Error> {
            // Location lists and macros name no function or line: not read
            // (in pyenv's libpython, .debug_loclists is a fifth of its DWARF).
            if matches!(
                id,
                gimli::SectionId::DebugLoc
                    | gimli::SectionId::DebugLocLists
                    | gimli::SectionId::DebugMacinfo
                    | gimli::SectionId::DebugMacro
                    | gimli::SectionId::DebugPubNames
                    | gimli::SectionId::DebugPubTypes
            ) {
                return Ok(EndianSlice::new(&[], LittleEndian));
            }
            let s: &[u8] = match obj
                .section_by_name(id.name())
                .and_then(|s| dwarf_section(&file, &s))
            {
                Some(Cow::Borrowed(b)) => b,
                Some(Cow::Owned(v)) => {
                    owned.push(v.into_boxed_slice());
                    owned.last().map(|b| &b[..]).unwrap_or(&[])
                }
                None => &[],
            };
            // SAFETY: `s` points into `file` (an Arc'd mapping that never
            // moves) or into a boxed slice in `owned` (moving the Vec does not
            // move the box's contents); both are stored in the returned
            // DwarfCtx next to the context, which is dropped first.
            let s: &'static [u8] = unsafe { std::slice::from_raw_parts(s.as_ptr(), s.len()) };
            Ok(EndianSlice::new(s, LittleEndian))
        })
        .ok()?;
        let dwarf = Arc::new(dwarf);
        let ctx = addr2line::Context::from_arc_dwarf(dwarf.clone()).ok()?;
        Some(DwarfCtx {
            ctx,
            dwarf,
            _owned: owned,
            _file: file,
        })
    }
}

/// One line of DWARF symbolization: a function (innermost first when inlined).
#[derive(Clone)]
pub(crate) struct LineFrame {
    pub(crate) function: Option<String>,
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u32>,
    pub(crate) inlined: bool,
}

pub(crate) struct LoadedModule {
    bytes: Arc<Backing>,
    /// avma = svma + bias.
    pub(crate) bias: u64,
    /// Loadable segments' file bytes: (svma start, svma end, file offset).
    segments: Vec<(u64, u64, u64)>,
    cfi: Cfi,
    cfi_cache: HashMap<u64, bool>,
    /// Addresses whose CFA rule is known not to be an expression.
    expr_cache: HashMap<u64, bool>,
    /// Paths tried for a separate debug file (computed at load, opened lazily).
    debug_candidates: Vec<(String, Option<Vec<u8>>)>,
    has_symtab: bool,
    has_dwarf: bool,
    debug: Option<Option<Arc<Backing>>>,
    symbols: Option<SymbolIndex>,
    names: HashMap<u64, Option<(Arc<str>, bool)>>,
    dwarf: Option<Option<DwarfCtx>>,
    lines: HashMap<u64, Arc<[LineFrame]>>,
    /// Call sites per compilation unit (by its `.debug_info` offset).
    call_sites: HashMap<u64, Arc<UnitCallSites>>,
    /// Call targets in other units than their call sites', by DIE offset.
    die_targets: HashMap<u64, Option<CallTarget>>,
    /// Where each unit starts in `.debug_info` (sorted), for those.
    unit_starts: Option<Vec<u64>>,
    /// Function symbols by exact name (None: several addresses).
    by_name: Option<HashMap<Box<str>, Option<u64>>>,
}

/// Bound on indexed units kept (a large library has thousands).
const UNITS_MAX: usize = 1024;

/// Bound on per-address caches, so a long `record` over code that keeps
/// moving cannot grow them without limit.
pub(crate) const CACHE_MAX: usize = 1 << 16;

impl LoadedModule {
    /// Parse `bytes` (the module's file) mapped with file offset `map_offset`
    /// at `map_start` in an executable mapping. Returns the module and its
    /// framehop module.
    pub(crate) fn load(
        bytes: Arc<Backing>,
        name: &str,
        avma_range: Range<u64>,
        map_start: u64,
        map_offset: u64,
        root: &str,
        file_dir: &str,
    ) -> Result<(LoadedModule, framehop::Module<SectionData>), String> {
        let obj =
            object::File::parse(&**bytes).map_err(|e| format!("not a usable ELF file: {e}"))?;
        let bias = crate::elf::load_bias(&obj, map_start, map_offset, true)
            .ok_or_else(|| "no loadable segment matches its mapping".to_string())?;
        let file_range = |n: &str| -> Option<(u64, Range<u64>)> {
            let s = obj.section_by_name(n)?;
            let (off, len) = s.file_range()?;
            Some((s.address(), off..off.checked_add(len)?))
        };
        let sections = CfiSections {
            eh: file_range(".eh_frame"),
            hdr: file_range(".eh_frame_hdr"),
            debug_frame: file_range(".debug_frame"),
        };
        let text_svma = obj
            .section_by_name(".text")
            .map(|s| s.address()..s.address() + s.size());
        let got_svma = obj
            .section_by_name(".got")
            .map(|s| s.address()..s.address() + s.size());
        let (cfi, [eh, hdr, debug_frame]) = Cfi::load(&bytes, &sections);
        let info = framehop::ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma,
            got_svma,
            eh_frame_svma: eh.as_ref().map(|(a, _)| a.clone()),
            eh_frame: eh.map(|(_, d)| d),
            eh_frame_hdr_svma: hdr.as_ref().map(|(a, _)| a.clone()),
            eh_frame_hdr: hdr.map(|(_, d)| d),
            debug_frame: debug_frame.map(|(_, d)| d),
            text: None,
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        };
        let fh = framehop::Module::new(name.to_string(), avma_range, bias, info);
        let segments = obj
            .segments()
            .filter_map(|seg| {
                let (off, len) = seg.file_range();
                Some((seg.address(), seg.address().checked_add(len)?, off))
            })
            .take(64)
            .collect();
        let has_symtab = obj.section_by_name(".symtab").is_some();
        let has_dwarf = obj.section_by_name(".debug_info").is_some();
        let mut debug_candidates = Vec::new();
        if !has_symtab || !has_dwarf {
            let build_id = obj.build_id().ok().flatten().map(|b| b.to_vec());
            if let Some(id) = &build_id {
                if id.len() >= 2 {
                    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
                    for r in [root, ""] {
                        debug_candidates.push((
                            format!(
                                "{r}/usr/lib/debug/.build-id/{}/{}.debug",
                                &hex[..2],
                                &hex[2..]
                            ),
                            build_id.clone(),
                        ));
                    }
                    // What debuginfod clients (gdb, elfutils) have fetched.
                    let caches = [
                        std::env::var("DEBUGINFOD_CACHE_PATH").ok(),
                        std::env::var("HOME")
                            .ok()
                            .map(|h| format!("{h}/.cache/debuginfod_client")),
                    ];
                    for c in caches.into_iter().flatten().filter(|c| !c.is_empty()) {
                        debug_candidates.push((format!("{c}/{hex}/debuginfo"), build_id.clone()));
                    }
                }
            }
            if let Ok(Some((link, _crc))) = obj.gnu_debuglink() {
                if let Ok(link) = std::str::from_utf8(link) {
                    if !link.contains('/') {
                        for r in [root, ""] {
                            for d in [
                                format!("{r}{file_dir}"),
                                format!("{r}{file_dir}/.debug"),
                                format!("{r}/usr/lib/debug{file_dir}"),
                            ] {
                                debug_candidates.push((format!("{d}/{link}"), build_id.clone()));
                            }
                        }
                    }
                }
            }
        }
        Ok((
            LoadedModule {
                bytes,
                bias,
                segments,
                cfi,
                cfi_cache: HashMap::new(),
                expr_cache: HashMap::new(),
                debug_candidates,
                has_symtab,
                has_dwarf,
                debug: None,
                symbols: None,
                names: HashMap::new(),
                dwarf: None,
                lines: HashMap::new(),
                call_sites: HashMap::new(),
                die_targets: HashMap::new(),
                unit_starts: None,
                by_name: None,
            },
            fh,
        ))
    }

    /// Whether CFI (the one framehop will use) covers `svma`; cached.
    pub(crate) fn has_cfi(&mut self, svma: u64) -> bool {
        if let Some(&c) = self.cfi_cache.get(&svma) {
            return c;
        }
        let c = self.cfi.covers(svma);
        if self.cfi_cache.len() >= CACHE_MAX {
            self.cfi_cache.clear();
        }
        self.cfi_cache.insert(svma, c);
        c
    }

    /// Read the `.eh_frame` entries framehop parses to unwind at `svma`.
    pub(crate) fn prepare_cfi(&self, svma: u64) {
        self.cfi.prepare(svma);
    }

    /// Start (svma) of the CFI range (FDE) covering `svma`: what names code
    /// without a symbol, so that samples in one stripped function aggregate.
    pub(crate) fn cfi_start(&mut self, svma: u64) -> Option<u64> {
        self.cfi.fde_range(svma).map(|r| r.0)
    }

    /// [`Cfi::expression_step`], remembering the addresses whose CFA rule
    /// is no expression.
    pub(crate) fn expression_step(
        &mut self,
        svma: u64,
        sp: u64,
        bp: u64,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Option<Option<(u64, u64, u64)>> {
        if self.expr_cache.get(&svma) == Some(&false) || !matches!(self.cfi, Cfi::Hdr { .. }) {
            return None;
        }
        let r = self.cfi.expression_step(svma, sp, bp, read);
        if r.is_none() {
            if self.expr_cache.len() >= CACHE_MAX {
                self.expr_cache.clear();
            }
            self.expr_cache.insert(svma, false);
        }
        r
    }

    fn debug_file(&mut self) -> Option<Arc<Backing>> {
        if let Some(d) = &self.debug {
            return d.clone();
        }
        let found = self.debug_candidates.iter().find_map(|(path, want_id)| {
            let b = Backing::open(std::path::Path::new(path)).ok()?;
            let obj = object::File::parse(&*b).ok()?;
            if let Some(want) = want_id {
                if obj.build_id().ok().flatten() != Some(want.as_slice()) {
                    return None;
                }
            }
            Some(Arc::new(b))
        });
        self.debug = Some(found.clone());
        found
    }

    /// The module's symbol index, built on first use: its own `.dynsym`,
    /// `.symtab` and PLT; without `.symtab`, MiniDebugInfo's and the
    /// separate debug file's `.symtab` too.
    fn symbols(&mut self) -> &SymbolIndex {
        if self.symbols.is_none() {
            let mut s = SymbolIndex::default();
            s.add_file(&self.bytes, true, true);
            if !self.has_symtab {
                // MiniDebugInfo: an xz-compressed ELF file holding the
                // static function symbols that stripping removed (Fedora,
                // RHEL, some wheels' bundled libraries).
                let minidebug = object::File::parse(&**self.bytes).ok().and_then(|obj| {
                    let sec = obj.section_by_name(".gnu_debugdata")?;
                    let (off, len) = sec.file_range()?;
                    self.bytes.range(off, len).and_then(|b| unxz(&b))
                });
                if let Some(bytes) = minidebug {
                    s.add_file(&Arc::new(Backing::Owned(bytes)), true, false);
                }
                if let Some(d) = self.debug_file() {
                    s.add_file(&d, true, false);
                }
            }
            s.finish();
            self.symbols = Some(s);
        }
        self.symbols.get_or_insert_with(SymbolIndex::default)
    }

    /// Start (svma) of the sized or nearest function symbol covering `svma`.
    pub(crate) fn function_start(&mut self, svma: u64) -> Option<u64> {
        self.symbols().lookup(svma).map(|f| f.start)
    }

    /// (demangled name, exported) of the function containing `svma`; cached.
    /// The name is read from the file and demangled here, on the first
    /// lookup of the address: only frames that are unwound ask.
    pub(crate) fn symbol(&mut self, svma: u64) -> Option<(Arc<str>, bool)> {
        if let Some(n) = self.names.get(&svma) {
            return n.clone();
        }
        let syms = self.symbols();
        let r = syms
            .lookup(svma)
            .and_then(|f| syms.name(&f))
            .map(|(n, exported)| (Arc::<str>::from(demangle(&n)), exported));
        if self.names.len() >= CACHE_MAX {
            self.names.clear();
        }
        self.names.insert(svma, r.clone());
        r
    }

    /// Whether DWARF may be found for this module: its own, or with
    /// `debug_files`, a separate debug file's (not opened here).
    pub(crate) fn may_have_lines(&self, debug_files: bool) -> bool {
        self.has_dwarf || (debug_files && !self.debug_candidates.is_empty())
    }

    /// Drop DWARF state so the next lookup decides afresh where DWARF comes from.
    pub(crate) fn forget_lines(&mut self) {
        self.dwarf = None;
        self.lines.clear();
        self.call_sites.clear();
        self.die_targets.clear();
        self.unit_starts = None;
    }

    /// The module's DWARF: loaded on first use, from the module itself or,
    /// when `debug_files` allows, from its separate debug file.
    fn dwarf_ctx(&mut self, debug_files: bool) -> Option<&DwarfCtx> {
        if self.dwarf.is_none() {
            let ctx = DwarfCtx::load(self.bytes.clone()).or_else(|| {
                debug_files
                    .then(|| self.debug_file())
                    .flatten()
                    .and_then(DwarfCtx::load)
            });
            self.dwarf = Some(ctx);
        }
        self.dwarf.as_ref().and_then(Option::as_ref)
    }

    /// The call sites of the compilation unit holding `svma`, indexed on
    /// first use (one pass over the unit's DIEs) and cached per unit.
    fn unit_call_sites(&mut self, svma: u64, debug_files: bool) -> Option<Arc<UnitCallSites>> {
        self.dwarf_ctx(debug_files)?;
        let d = self.dwarf.as_ref()?.as_ref()?;
        let u = d.ctx.find_dwarf_and_unit(svma).skip_all_loads()?;
        let (dwarf, unit) = (u.dwarf, u.unit);
        let key = unit.header.offset().as_debug_info_offset()?.0 as u64;
        if let Some(u) = self.call_sites.get(&key) {
            return Some(u.clone());
        }
        let sites = Arc::new(callsites::index_unit(dwarf, unit));
        if self.call_sites.len() >= UNITS_MAX {
            self.call_sites.clear();
        }
        self.call_sites.insert(key, sites.clone());
        Some(sites)
    }

    /// The call site whose return address is `ret` (svma); None without
    /// DWARF or without a record there.
    pub(crate) fn call_site(&mut self, ret: u64, debug_files: bool) -> Option<CallSite> {
        // The call instruction, not what follows it, is in the caller's unit.
        let u = self.unit_call_sites(ret.checked_sub(1)?, debug_files)?;
        u.by_ret.get(&ret).cloned()
    }

    /// The tail-call sites of the function entered at `entry` (svma).
    fn tail_sites(&mut self, entry: u64, debug_files: bool) -> Option<Arc<[CallSite]>> {
        let u = self.unit_call_sites(entry, debug_files)?;
        Some(
            u.tails
                .get(&entry)
                .cloned()
                .unwrap_or_else(|| Arc::from(Vec::new())),
        )
    }

    /// A target DIE in another unit than its call site's, read on use.
    fn foreign_die_target(&mut self, off: u64, debug_files: bool) -> Option<CallTarget> {
        if let Some(t) = self.die_targets.get(&off) {
            return t.clone();
        }
        let dwarf = self.dwarf_ctx(debug_files)?.dwarf.clone();
        if self.unit_starts.is_none() {
            let mut starts = Vec::new();
            let mut it = dwarf.units();
            while let Ok(Some(h)) = it.next() {
                if let Some(o) = h.offset().as_debug_info_offset() {
                    starts.push(o.0 as u64);
                }
            }
            self.unit_starts = Some(starts);
        }
        let starts = self.unit_starts.as_deref().unwrap_or(&[]);
        let i = starts.partition_point(|&s| s <= off).checked_sub(1);
        let t = i.and_then(|i| {
            let start = gimli::DebugInfoOffset(usize::try_from(starts[i]).ok()?);
            let header = dwarf.debug_info.header_from_offset(start).ok()?;
            let unit = dwarf.unit(header).ok()?;
            let o =
                gimli::DebugInfoOffset(usize::try_from(off).ok()?).to_unit_offset(&unit.header)?;
            callsites::die_target(&dwarf, &unit, o)
        });
        if self.die_targets.len() >= CACHE_MAX {
            self.die_targets.clear();
        }
        self.die_targets.insert(off, t.clone());
        t
    }

    /// The entry (svma) of the function a call target stands for, in this
    /// module.
    pub(crate) fn resolve_target(&mut self, t: &CallTarget, debug_files: bool) -> Option<u64> {
        match t {
            CallTarget::Addr(a) => Some(*a),
            CallTarget::Name(n) => self.function_by_name(n),
            CallTarget::Die(off) => match self.foreign_die_target(*off, debug_files)? {
                CallTarget::Die(_) => None,
                t => self.resolve_target(&t, debug_files),
            },
        }
    }

    /// The name a call target has, for a declaration (found in another
    /// module's symbols when this one does not define it).
    pub(crate) fn target_name(&mut self, t: &CallTarget, debug_files: bool) -> Option<Arc<str>> {
        match t {
            CallTarget::Name(n) => Some(n.clone()),
            CallTarget::Die(off) => match self.foreign_die_target(*off, debug_files)? {
                CallTarget::Name(n) => Some(n),
                _ => None,
            },
            CallTarget::Addr(_) => None,
        }
    }

    /// The target (svma) of a direct `call rel32` ending at `ret`, decoded
    /// from the file's bytes (5 of them, read on demand). A byte that only
    /// looks like the opcode gives a wrong target: callers use it only to
    /// skip work, never to show a frame.
    pub(crate) fn direct_call_target(&self, ret: u64) -> Option<u64> {
        let at = ret.checked_sub(5)?;
        let &(start, _, off) = self
            .segments
            .iter()
            .find(|&&(start, end, _)| start <= at && ret <= end)?;
        let b = self.bytes.range(off.checked_add(at - start)?, 5)?;
        if b.first() != Some(&0xE8) {
            return None;
        }
        let rel = i32::from_le_bytes(b.get(1..5)?.try_into().ok()?);
        Some(ret.wrapping_add(rel as i64 as u64))
    }

    /// The address of the function symbol named `name`, exactly as the
    /// symbol tables have it (every alias counts); None when no function,
    /// or several at different addresses, have that name. The table is
    /// built on first use (only the tail-call search asks).
    pub(crate) fn function_by_name(&mut self, name: &str) -> Option<u64> {
        if self.by_name.is_none() {
            let map = self.symbols().by_name();
            self.by_name = Some(map);
        }
        self.by_name.as_ref()?.get(name).copied().flatten()
    }

    /// The tail-call sites (return addresses, svma, outermost first) by
    /// which the function entered at `g` reached the one entered at `h`,
    /// when the DWARF call-site records allow exactly one such chain.
    pub(crate) fn tail_chain(&mut self, g: u64, h: u64, debug_files: bool) -> Option<Vec<u64>> {
        struct Info<'a>(&'a mut LoadedModule, bool);
        impl callsites::TailCallInfo for Info<'_> {
            fn tail_sites(&mut self, entry: u64) -> Option<Arc<[CallSite]>> {
                self.0.tail_sites(entry, self.1)
            }
            fn resolve(&mut self, t: &CallTarget) -> Option<u64> {
                self.0.resolve_target(t, self.1)
            }
        }
        callsites::find_chain(&mut Info(self, debug_files), g, h)
    }

    /// DWARF frames for `svma`, innermost (most inlined) first; empty when
    /// there is no DWARF for it. Loaded on first use, from the module itself
    /// or, when `debug_files` allows, from its separate debug file.
    pub(crate) fn lines(&mut self, svma: u64, debug_files: bool) -> Arc<[LineFrame]> {
        if let Some(l) = self.lines.get(&svma) {
            return l.clone();
        }
        let mut out = Vec::new();
        if let Some(d) = self.dwarf_ctx(debug_files) {
            // File names relative to the unit's compilation directory, as
            // the build saw them (`Objects/abstract.c`).
            let comp_dir = d
                .ctx
                .find_dwarf_and_unit(svma)
                .skip_all_loads()
                .and_then(|u| u.comp_dir.map(|c| c.to_string_lossy().into_owned()));
            let relative = |f: &str| -> String {
                let f = comp_dir
                    .as_deref()
                    .and_then(|c| f.strip_prefix(c.trim_end_matches('/')))
                    .and_then(|r| r.strip_prefix('/'))
                    .unwrap_or(f);
                f.strip_prefix("./").unwrap_or(f).to_string()
            };
            if let Ok(mut it) = d.ctx.find_frames(svma).skip_all_loads() {
                while let Ok(Some(f)) = it.next() {
                    out.push(LineFrame {
                        function: f
                            .function
                            .as_ref()
                            .and_then(|n| n.demangle().ok())
                            .map(|n| n.into_owned()),
                        file: f.location.as_ref().and_then(|l| l.file).map(relative),
                        line: f.location.as_ref().and_then(|l| l.line),
                        inlined: true,
                    });
                    // Bound the inline chain; real ones are a handful deep.
                    if out.len() >= 64 {
                        break;
                    }
                }
            }
        }
        if let Some(last) = out.last_mut() {
            last.inlined = false;
        }
        let out: Arc<[LineFrame]> = out.into();
        if self.lines.len() >= CACHE_MAX {
            self.lines.clear();
        }
        self.lines.insert(svma, out.clone());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::symbols::UNSIZED_SYMBOL_SPAN;
    use super::*;
    use object::{ObjectSymbol, ObjectSymbolTable, SymbolKind};

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

    /// `python_fixtures/native/tailcall.c` built with `gcc -O2 -g` (with
    /// `-gdwarf-4` too: the GNU call-site form, `DW_TAG_GNU_call_site`)
    /// and loaded as a module at its own addresses; and the address of each
    /// `tc_` function.
    fn tailcall_fixture(extra: &[&str]) -> (LoadedModule, HashMap<String, u64>, String) {
        let dir = tempfile::tempdir().unwrap().keep();
        let lib = dir.join("libtailcall.so");
        let src = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/python_fixtures/native/tailcall.c"
        );
        let out = std::process::Command::new("gcc")
            .args(["-O2", "-g", "-shared", "-fPIC", "-o"])
            .arg(&lib)
            .args(extra)
            .arg(src)
            .output()
            .expect("run gcc");
        assert!(
            out.status.success(),
            "gcc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&lib).unwrap();
        let obj = object::File::parse(&bytes[..]).unwrap();
        let exec = obj
            .segments()
            .find(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
            .unwrap();
        let funcs: HashMap<String, u64> = obj
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text)
            .filter_map(|s| Some((s.name().ok()?.to_string(), s.address())))
            .filter(|(n, _)| n.starts_with("tc_"))
            .collect();
        let (lm, _) = LoadedModule::load(
            Arc::new(Backing::Owned(bytes.clone())),
            "libtailcall.so",
            0..1 << 20,
            exec.address(),
            exec.file_range().0,
            "",
            dir.to_str().unwrap(),
        )
        .unwrap();
        assert_eq!(lm.bias, 0);
        (lm, funcs, lib.to_str().unwrap().to_string())
    }

    /// The last instruction before `ret` (svma), as objdump disassembles it.
    fn instruction_before(lib: &str, funcs: &HashMap<String, u64>, ret: u64) -> String {
        let start = funcs.values().filter(|&&a| a < ret).max().unwrap();
        let out = std::process::Command::new("objdump")
            .args(["-d", "--no-show-raw-insn"])
            .arg(format!("--start-address={start:#x}"))
            .arg(format!("--stop-address={ret:#x}"))
            .arg(lib)
            .output()
            .expect("run objdump");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .rev()
            .find(|l| {
                l.trim_start()
                    .split(':')
                    .next()
                    .is_some_and(|a| u64::from_str_radix(a.trim(), 16).is_ok())
            })
            .unwrap_or("")
            .to_string()
    }

    #[test]
    fn tail_call_chains_from_gcc_call_site_records() {
        for extra in [&[][..], &["-gdwarf-4"][..]] {
            let (mut lm, f, lib) = tailcall_fixture(extra);
            let at = |n: &str| *f.get(n).unwrap_or_else(|| panic!("{n} in {f:?}"));
            let name = |lm: &mut LoadedModule, a: u64| lm.symbol(a - 1).map(|s| s.0.to_string());
            // The call in each entry point: its return address, by the call
            // site record whose target is the helper.
            let call_in = |lm: &mut LoadedModule, entry: &str, helper: &str| -> CallSite {
                let u = lm.unit_call_sites(at(entry), false).expect("DWARF");
                let site = u
                    .by_ret
                    .values()
                    .filter(|s| !s.tail && s.ret > at(entry))
                    .min_by_key(|s| s.ret)
                    .cloned()
                    .unwrap_or_else(|| panic!("{extra:?}: no call in {entry}"));
                let target = site.target.clone().expect("a direct call");
                assert_eq!(
                    lm.resolve_target(&target, false),
                    Some(at(helper)),
                    "{extra:?}"
                );
                assert_eq!(lm.call_site(site.ret, false), Some(site.clone()));
                site
            };

            // One chain: tc_mid1 jumps to tc_mid2, which jumps to tc_leaf.
            call_in(&mut lm, "tc_chain", "tc_mid1");
            let chain = lm
                .tail_chain(at("tc_mid1"), at("tc_leaf"), false)
                .unwrap_or_else(|| panic!("{extra:?}: no chain"));
            let names: Vec<_> = chain.iter().map(|&r| name(&mut lm, r)).collect();
            assert_eq!(
                names,
                [Some("tc_mid1".to_string()), Some("tc_mid2".to_string())],
                "{extra:?}"
            );
            for &r in &chain {
                let insn = instruction_before(&lib, &f, r);
                assert!(insn.contains("jmp"), "{extra:?}: {insn:?} before {r:#x}");
            }
            // From inside the chain, the rest of it.
            let rest = lm.tail_chain(at("tc_mid2"), at("tc_leaf"), false);
            assert_eq!(rest.as_deref(), Some(&chain[1..]), "{extra:?}");
            // A function reaching itself, or not reaching H at all.
            assert_eq!(lm.tail_chain(at("tc_leaf"), at("tc_leaf"), false), None);
            assert_eq!(lm.tail_chain(at("tc_mid1"), at("tc_leaf2"), false), None);

            // Two chains (through tc_left and through tc_right): nothing.
            call_in(&mut lm, "tc_fork", "tc_split");
            for side in ["tc_left", "tc_right"] {
                let c = lm.tail_chain(at(side), at("tc_leaf2"), false);
                assert_eq!(c.map(|c| c.len()), Some(1), "{extra:?}: from {side}");
            }
            assert_eq!(
                lm.tail_chain(at("tc_split"), at("tc_leaf2"), false),
                None,
                "{extra:?}"
            );

            // An indirect jump on the way could reach tc_leaf as well: nothing.
            call_in(&mut lm, "tc_indirect", "tc_maybe");
            assert_eq!(
                lm.tail_chain(at("tc_maybe"), at("tc_leaf"), false),
                None,
                "{extra:?}"
            );
            assert_eq!(
                lm.tail_chain(at("tc_maybe"), at("tc_leaf2"), false),
                None,
                "{extra:?}"
            );
        }
    }
}
