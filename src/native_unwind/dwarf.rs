//! A module's DWARF: its context (from the module itself or its separate
//! debug file, loaded on first use), file:line and inlined frames per
//! address, and the call-site records that rebuild tail calls, kept as
//! [`ModuleLines`] beside the module's file and symbols.

use std::borrow::Cow;
use std::sync::Arc;

use gimli::{EndianSlice, LittleEndian};
use object::{Object, ObjectSection};

use super::backing::{dwarf_section, Backing};
use super::cache::BoundedMap;
use super::callsites::{self, CallSite, CallTarget, UnitCallSites};
use super::file::ModuleFile;
use crate::zeroed::Zeroed;

type Slice = EndianSlice<'static, LittleEndian>;

/// DWARF of one module, with the borrowed slices pointing into `owned`,
/// `shared` and `file`, which live exactly as long as the context (declared
/// first, so it is dropped first).
pub(super) struct DwarfCtx {
    pub(super) ctx: addr2line::Context<Slice>,
    /// The same sections, for what addr2line does not read: call sites.
    pub(super) dwarf: Arc<gimli::Dwarf<Slice>>,
    _owned: Vec<Zeroed>,
    _shared: Option<Arc<Shared>>,
    _file: Arc<Backing>,
}

/// Sections that name no function or line: never read (in pyenv's
/// libpython, `.debug_loclists` is a fifth of its DWARF).
fn unread(id: gimli::SectionId) -> bool {
    matches!(
        id,
        gimli::SectionId::DebugLoc
            | gimli::SectionId::DebugLocLists
            | gimli::SectionId::DebugMacinfo
            | gimli::SectionId::DebugMacro
            | gimli::SectionId::DebugPubNames
            | gimli::SectionId::DebugPubTypes
    )
}

/// A slice as `'static`.
///
/// SAFETY (for callers): `s` must point into a `Backing` or a boxed slice
/// that the [`DwarfCtx`] built from it keeps alive (an Arc'd buffer that
/// never moves, a box whose contents do not move with the Vec holding it);
/// the context, declared first, is dropped first.
unsafe fn extend(s: &[u8]) -> Slice {
    let s: &'static [u8] = unsafe { std::slice::from_raw_parts(s.as_ptr(), s.len()) };
    EndianSlice::new(s, LittleEndian)
}

impl DwarfCtx {
    pub(super) fn load(file: Arc<Backing>) -> Option<DwarfCtx> {
        let obj = object::File::parse(&**file).ok()?;
        obj.section_by_name(".debug_info")?;
        let mut owned: Vec<Zeroed> = Vec::new();
        let dwarf = gimli::Dwarf::load(|id| -> Result<_, gimli::Error> {
            if unread(id) {
                return Ok(EndianSlice::new(&[], LittleEndian));
            }
            let s: &[u8] = match obj
                .section_by_name(id.name())
                .and_then(|s| dwarf_section(&file, &s))
            {
                Some(Cow::Borrowed(b)) => b,
                Some(Cow::Owned(v)) => {
                    owned.push(Zeroed::from(v));
                    owned.last().map(|b| &b[..]).unwrap_or(&[])
                }
                None => &[],
            };
            // SAFETY: `s` is in `file` or in `owned`, kept with the context.
            Ok(unsafe { extend(s) })
        })
        .ok()?;
        DwarfCtx::new(dwarf, owned, None, file)
    }

    /// The context over `dwarf`, whose sections borrow from `owned`,
    /// `shared` and `file`, kept with it.
    fn new(
        dwarf: gimli::Dwarf<Slice>,
        owned: Vec<Zeroed>,
        shared: Option<Arc<Shared>>,
        file: Arc<Backing>,
    ) -> Option<DwarfCtx> {
        let dwarf = Arc::new(dwarf);
        let ctx = addr2line::Context::from_arc_dwarf(dwarf.clone()).ok()?;
        Some(DwarfCtx {
            ctx,
            dwarf,
            _owned: owned,
            _shared: shared,
            _file: file,
        })
    }
}

/// The small DWARF sections every unit uses (abbreviations, strings, range
/// lists, addresses, `.debug_aranges`), read whole once per module.
pub(super) struct Shared {
    sections: Vec<(gimli::SectionId, Box<[u8]>)>,
}

impl Shared {
    fn get(&self, id: gimli::SectionId) -> &[u8] {
        self.sections
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, b)| &b[..])
            .unwrap_or(&[])
    }
}

/// Bound on the address ranges taken from `.debug_aranges`.
const ARANGES_MAX: usize = 1 << 20;

/// DWARF read by compilation unit: `.debug_aranges` says which unit covers
/// an address, and only that unit's `.debug_info` and its line program in
/// `.debug_line` are read (pyenv's libpython: 14 MB and 3 MB in all, a few
/// hundred KB for the units a stack needs). Each unit gets its own context
/// over sections of the full size whose other bytes are zero pages never
/// touched: offsets stay those of the file, and a filler unit header at 0
/// makes addr2line step over the unread units to the real one.
pub(super) struct UnitDwarf {
    file: Arc<Backing>,
    shared: Arc<Shared>,
    /// File ranges of `.debug_info` and `.debug_line`.
    info: (u64, u64),
    line: (u64, u64),
    /// (begin, end, unit offset), sorted by begin.
    ranges: Vec<(u64, u64, u64)>,
    /// Unit offsets named by `.debug_aranges`, sorted.
    starts: Vec<u64>,
    /// Offset in the shared `.debug_abbrev` of the filler unit's table.
    filler_abbrev: u32,
    units: BoundedMap<u64, Option<DwarfCtx>, UNIT_CTX_MAX>,
}

/// A module's DWARF: by unit where it can be (see [`UnitDwarf`]), else
/// every section read whole for one context.
pub(super) enum ModuleDwarf {
    Units(UnitDwarf),
    Whole {
        ctx: DwarfCtx,
        /// Where each unit starts in `.debug_info` (sorted), on first use.
        starts: Option<Vec<u64>>,
    },
}

/// Bound on the per-unit contexts kept (a large library has thousands).
const UNIT_CTX_MAX: usize = 256;

impl UnitDwarf {
    /// None unless `file` is read sparsely and has `.debug_aranges` and
    /// uncompressed `.debug_info` and `.debug_line`.
    fn load(file: &Arc<Backing>) -> Option<UnitDwarf> {
        if !file.is_sparse() {
            return None;
        }
        let obj = object::File::parse(&file[..]).ok()?;
        let plain = |name: &str| -> Option<(u64, u64)> {
            let s = obj.section_by_name(name)?;
            let object::SectionFlags::Elf { sh_flags } = s.flags() else {
                return None;
            };
            if sh_flags & u64::from(object::elf::SHF_COMPRESSED) != 0 {
                return None;
            }
            s.file_range()
        };
        let info = plain(".debug_info")?;
        let line = plain(".debug_line").unwrap_or((0, 0));
        obj.section_by_name(".debug_aranges")?;
        let mut sections = Vec::new();
        let mut filler_abbrev = u32::MAX;
        for id in [
            gimli::SectionId::DebugAbbrev,
            gimli::SectionId::DebugAddr,
            gimli::SectionId::DebugAranges,
            gimli::SectionId::DebugLineStr,
            gimli::SectionId::DebugRanges,
            gimli::SectionId::DebugRngLists,
            gimli::SectionId::DebugStr,
            gimli::SectionId::DebugStrOffsets,
        ] {
            if let Some(s) = obj.section_by_name(id.name()) {
                let mut b = dwarf_section(file, &s)?.into_owned();
                if id == gimli::SectionId::DebugAbbrev {
                    // The filler unit's table: code 1, a partial unit
                    // without children or attributes.
                    filler_abbrev = u32::try_from(b.len()).ok()?;
                    b.extend_from_slice(&[1, gimli::DW_TAG_partial_unit.0 as u8, 0, 0, 0, 0]);
                }
                sections.push((id, b.into_boxed_slice()));
            }
        }
        if filler_abbrev == u32::MAX {
            return None;
        }
        let shared = Shared { sections };
        let mut ranges = Vec::new();
        let mut starts = Vec::new();
        let aranges =
            gimli::DebugAranges::new(shared.get(gimli::SectionId::DebugAranges), LittleEndian);
        let mut headers = aranges.headers();
        while let Ok(Some(h)) = headers.next() {
            let unit = h.debug_info_offset().0 as u64;
            starts.push(unit);
            let mut entries = h.entries();
            while let Ok(Some(e)) = entries.next() {
                let r = e.range();
                if r.end > r.begin && ranges.len() < ARANGES_MAX {
                    ranges.push((r.begin, r.end, unit));
                }
            }
        }
        if ranges.is_empty() {
            return None;
        }
        ranges.sort_unstable();
        starts.sort_unstable();
        starts.dedup();
        Some(UnitDwarf {
            file: file.clone(),
            shared: Arc::new(shared),
            info,
            line,
            ranges,
            starts,
            filler_abbrev,
            units: BoundedMap::default(),
        })
    }

    /// The unit covering `svma`, by `.debug_aranges`.
    fn unit_of(&self, svma: u64) -> Option<u64> {
        let i = self.ranges.partition_point(|r| r.0 <= svma);
        // Ranges rarely overlap; look back a little for one that holds it.
        self.ranges[..i]
            .iter()
            .rev()
            .take(16)
            .find(|r| svma < r.1)
            .map(|r| r.2)
    }

    /// A 32-bit length at `off` of a section at `sec` (file offset, size),
    /// and the end (section offset) of what it covers; None past the
    /// section or for 64-bit DWARF.
    fn extent(&self, sec: (u64, u64), off: u64) -> Option<u64> {
        let mut b = [0u8; 4];
        if off.checked_add(4)? > sec.1 {
            return None;
        }
        self.file.read_into(sec.0 + off, &mut b)?;
        let len = u32::from_le_bytes(b);
        if len >= 0xffff_fff0 {
            return None;
        }
        let end = off + 4 + u64::from(len);
        (end <= sec.1).then_some(end)
    }

    /// A buffer of `end` zero bytes (pages never touched cost nothing)
    /// with the section's bytes `off..end` read in.
    fn partial(&self, sec: (u64, u64), off: u64, end: u64) -> Option<Zeroed> {
        let mut buf = Zeroed::new(usize::try_from(end).ok()?)?;
        self.file
            .read_into(sec.0 + off, buf.get_mut(off as usize..end as usize)?)?;
        Some(buf)
    }

    /// The context of the unit at `unit` (a `.debug_info` offset).
    fn load_unit(&self, unit: u64) -> Option<DwarfCtx> {
        let end = self.extent(self.info, unit)?;
        // A filler unit (a DWARF 5 partial unit: a 12-byte header and a
        // one-byte DIE) must fit before the real one.
        if unit != 0 && unit < 13 {
            return None;
        }
        let mut info = self.partial(self.info, unit, end)?;
        if unit != 0 {
            let len = u32::try_from(unit - 4).ok()?;
            info[..4].copy_from_slice(&len.to_le_bytes());
            info[4..6].copy_from_slice(&5u16.to_le_bytes());
            info[6] = gimli::DW_UT_partial.0;
            info[7] = 8;
            info[8..12].copy_from_slice(&self.filler_abbrev.to_le_bytes());
            // Its DIE: no attributes and no children, so that neither
            // gimli nor addr2line look at the unread bytes after it.
            info[12] = 1;
        }
        // The unit's line program: where its DIE says.
        let abbrev =
            gimli::DebugAbbrev::new(self.shared.get(gimli::SectionId::DebugAbbrev), LittleEndian);
        let stmt = (|| {
            let header = gimli::DebugInfo::new(&info, LittleEndian)
                .header_from_offset(gimli::DebugInfoOffset(usize::try_from(unit).ok()?))
                .ok()?;
            let abbrevs = header.abbreviations(&abbrev).ok()?;
            let mut cursor = header.entries(&abbrevs);
            let (_, root) = cursor.next_dfs().ok()??;
            match root.attr_value(gimli::DW_AT_stmt_list).ok()?? {
                gimli::AttributeValue::DebugLineRef(o) => Some(o.0 as u64),
                gimli::AttributeValue::SecOffset(o) => Some(o as u64),
                _ => None,
            }
        })();
        let line = match stmt {
            Some(off) => {
                let end = self.extent(self.line, off)?;
                self.partial(self.line, off, end)?
            }
            None => Zeroed::default(),
        };
        let owned: Vec<Zeroed> = vec![info, line];
        let dwarf = gimli::Dwarf::load(|id| -> Result<_, gimli::Error> {
            let s: &[u8] = match id {
                gimli::SectionId::DebugInfo => &owned[0],
                gimli::SectionId::DebugLine => &owned[1],
                _ => self.shared.get(id),
            };
            // SAFETY: `s` is in `owned` or `shared`, kept with the context.
            Ok(unsafe { extend(s) })
        })
        .ok()?;
        DwarfCtx::new(dwarf, owned, Some(self.shared.clone()), self.file.clone())
    }

    /// The context of the unit at `unit`, loaded on first use.
    fn unit(&mut self, unit: u64) -> Option<&DwarfCtx> {
        if self.units.get(&unit).is_none() {
            let c = self.load_unit(unit);
            self.units.insert(unit, c);
        }
        self.units.get(&unit)?.as_ref()
    }
}

impl ModuleDwarf {
    pub(super) fn load(file: Arc<Backing>) -> Option<ModuleDwarf> {
        if let Some(u) = UnitDwarf::load(&file) {
            return Some(ModuleDwarf::Units(u));
        }
        Some(ModuleDwarf::Whole {
            ctx: DwarfCtx::load(file)?,
            starts: None,
        })
    }

    /// The context for `svma`, loading its unit on first use.
    pub(super) fn ctx(&mut self, svma: u64) -> Option<&DwarfCtx> {
        match self {
            ModuleDwarf::Units(u) => {
                let unit = u.unit_of(svma)?;
                u.unit(unit)
            }
            ModuleDwarf::Whole { ctx, .. } => Some(ctx),
        }
    }

    /// The context for `svma`, when loaded.
    fn loaded(&self, svma: u64) -> Option<&DwarfCtx> {
        match self {
            ModuleDwarf::Units(u) => u.units.get(&u.unit_of(svma)?)?.as_ref(),
            ModuleDwarf::Whole { ctx, .. } => Some(ctx),
        }
    }

    /// The sections and start of the unit holding the DIE at `off` (a
    /// `.debug_info` offset).
    fn die_unit(&mut self, off: u64) -> Option<(Arc<gimli::Dwarf<Slice>>, u64)> {
        match self {
            ModuleDwarf::Units(u) => {
                let i = u.starts.partition_point(|&s| s <= off).checked_sub(1)?;
                let start = u.starts[i];
                let d = u.unit(start)?.dwarf.clone();
                // A unit `.debug_aranges` does not name may lie between.
                let end = u.extent(u.info, start)?;
                (off < end).then_some((d, start))
            }
            ModuleDwarf::Whole { ctx, starts } => {
                let dwarf = ctx.dwarf.clone();
                let starts = starts.get_or_insert_with(|| {
                    let mut v = Vec::new();
                    let mut it = dwarf.units();
                    while let Ok(Some(h)) = it.next() {
                        if let Some(o) = h.offset().as_debug_info_offset() {
                            v.push(o.0 as u64);
                        }
                    }
                    v
                });
                let i = starts.partition_point(|&s| s <= off).checked_sub(1)?;
                Some((dwarf, starts[i]))
            }
        }
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

/// Bound on indexed units kept (a large library has thousands).
const UNITS_MAX: usize = 1024;

/// A module's DWARF state: its DWARF (loaded on first use, from the
/// module's file or its separate debug file), and the lines, call sites and
/// call targets asked of it. Its methods take the module's file, and where a
/// call target is named, the module's lookup of a function by name.
#[derive(Default)]
pub(super) struct ModuleLines {
    dwarf: Option<Option<ModuleDwarf>>,
    lines: BoundedMap<u64, Arc<[LineFrame]>>,
    /// Call sites per compilation unit (by its `.debug_info` offset).
    call_sites: BoundedMap<u64, Arc<UnitCallSites>, UNITS_MAX>,
    /// Call targets in other units than their call sites', by DIE offset.
    die_targets: BoundedMap<u64, Option<CallTarget>>,
}

/// The address of a function by its symbol name, in the module's file.
pub(super) type ByName<'a> = &'a mut dyn FnMut(&mut ModuleFile, &str) -> Option<u64>;

impl ModuleLines {
    /// Whether DWARF may be found for `file`: its own, or with
    /// `debug_files`, a separate debug file's (not opened here).
    pub(super) fn may_have_lines(file: &ModuleFile, debug_files: bool) -> bool {
        file.has_dwarf || (debug_files && file.may_have_debug_file())
    }

    /// Drop DWARF state so the next lookup decides afresh where DWARF comes from.
    pub(super) fn forget(&mut self) {
        self.dwarf = None;
        self.lines.clear();
        self.call_sites.clear();
        self.die_targets.clear();
    }

    /// The module's DWARF for `svma`: loaded on first use, from the module
    /// itself or, when `debug_files` allows, from its separate debug file.
    fn dwarf_ctx(
        &mut self,
        file: &mut ModuleFile,
        svma: u64,
        debug_files: bool,
    ) -> Option<&DwarfCtx> {
        self.module_dwarf(file, debug_files)?.ctx(svma)
    }

    fn module_dwarf(
        &mut self,
        file: &mut ModuleFile,
        debug_files: bool,
    ) -> Option<&mut ModuleDwarf> {
        if self.dwarf.is_none() {
            let d = ModuleDwarf::load(file.bytes.clone()).or_else(|| {
                debug_files
                    .then(|| file.debug_file())
                    .flatten()
                    .and_then(ModuleDwarf::load)
            });
            self.dwarf = Some(d);
        }
        self.dwarf.as_mut().and_then(Option::as_mut)
    }

    /// The call sites of the compilation unit holding `svma`, indexed on
    /// first use (one pass over the unit's DIEs) and cached per unit.
    pub(super) fn unit_call_sites(
        &mut self,
        file: &mut ModuleFile,
        svma: u64,
        debug_files: bool,
    ) -> Option<Arc<UnitCallSites>> {
        self.dwarf_ctx(file, svma, debug_files)?;
        let d = self.dwarf.as_ref()?.as_ref()?.loaded(svma)?;
        let u = d.ctx.find_dwarf_and_unit(svma).skip_all_loads()?;
        let (dwarf, unit) = (u.dwarf, u.unit);
        let key = unit.header.offset().as_debug_info_offset()?.0 as u64;
        if let Some(u) = self.call_sites.get(&key) {
            return Some(u.clone());
        }
        let sites = Arc::new(callsites::index_unit(dwarf, unit));
        self.call_sites.insert(key, sites.clone());
        Some(sites)
    }

    /// The call site whose return address is `ret` (svma); None without
    /// DWARF or without a record there.
    pub(super) fn call_site(
        &mut self,
        file: &mut ModuleFile,
        ret: u64,
        debug_files: bool,
    ) -> Option<CallSite> {
        // The call instruction, not what follows it, is in the caller's unit.
        let u = self.unit_call_sites(file, ret.checked_sub(1)?, debug_files)?;
        u.by_ret.get(&ret).cloned()
    }

    /// The tail-call sites of the function entered at `entry` (svma).
    fn tail_sites(
        &mut self,
        file: &mut ModuleFile,
        entry: u64,
        debug_files: bool,
    ) -> Option<Arc<[CallSite]>> {
        let u = self.unit_call_sites(file, entry, debug_files)?;
        Some(
            u.tails
                .get(&entry)
                .cloned()
                .unwrap_or_else(|| Arc::from(Vec::new())),
        )
    }

    /// A target DIE in another unit than its call site's, read on use.
    fn foreign_die_target(
        &mut self,
        file: &mut ModuleFile,
        off: u64,
        debug_files: bool,
    ) -> Option<CallTarget> {
        if let Some(t) = self.die_targets.get(&off) {
            return t.clone();
        }
        let die_unit = self.module_dwarf(file, debug_files)?.die_unit(off);
        let t = die_unit.and_then(|(dwarf, start)| {
            let start = gimli::DebugInfoOffset(usize::try_from(start).ok()?);
            let header = dwarf.debug_info.header_from_offset(start).ok()?;
            let unit = dwarf.unit(header).ok()?;
            let o =
                gimli::DebugInfoOffset(usize::try_from(off).ok()?).to_unit_offset(&unit.header)?;
            callsites::die_target(&dwarf, &unit, o)
        });
        self.die_targets.insert(off, t.clone());
        t
    }

    /// The entry (svma) of the function a call target stands for, in this
    /// module; a target named by its symbol is found by `by_name`.
    pub(super) fn resolve_target(
        &mut self,
        file: &mut ModuleFile,
        t: &CallTarget,
        debug_files: bool,
        by_name: ByName,
    ) -> Option<u64> {
        match t {
            CallTarget::Addr(a) => Some(*a),
            CallTarget::Name(n) => by_name(file, n),
            CallTarget::Die(off) => match self.foreign_die_target(file, *off, debug_files)? {
                CallTarget::Die(_) => None,
                t => self.resolve_target(file, &t, debug_files, by_name),
            },
        }
    }

    /// The name a call target has, for a declaration (found in another
    /// module's symbols when this one does not define it).
    pub(super) fn target_name(
        &mut self,
        file: &mut ModuleFile,
        t: &CallTarget,
        debug_files: bool,
    ) -> Option<Arc<str>> {
        match t {
            CallTarget::Name(n) => Some(n.clone()),
            CallTarget::Die(off) => match self.foreign_die_target(file, *off, debug_files)? {
                CallTarget::Name(n) => Some(n),
                _ => None,
            },
            CallTarget::Addr(_) => None,
        }
    }

    /// The tail-call sites (return addresses, svma, outermost first) by
    /// which the function entered at `g` reached the one entered at `h`,
    /// when the DWARF call-site records allow exactly one such chain.
    pub(super) fn tail_chain(
        &mut self,
        file: &mut ModuleFile,
        g: u64,
        h: u64,
        debug_files: bool,
        by_name: ByName,
    ) -> Option<Vec<u64>> {
        struct Info<'a, 'b> {
            lines: &'a mut ModuleLines,
            file: &'a mut ModuleFile,
            debug_files: bool,
            by_name: ByName<'b>,
        }
        impl callsites::TailCallInfo for Info<'_, '_> {
            fn tail_sites(&mut self, entry: u64) -> Option<Arc<[CallSite]>> {
                self.lines.tail_sites(self.file, entry, self.debug_files)
            }
            fn resolve(&mut self, t: &CallTarget) -> Option<u64> {
                self.lines
                    .resolve_target(self.file, t, self.debug_files, &mut *self.by_name)
            }
        }
        let mut info = Info {
            lines: self,
            file,
            debug_files,
            by_name,
        };
        callsites::find_chain(&mut info, g, h)
    }

    /// DWARF frames for `svma`, innermost (most inlined) first; empty when
    /// there is no DWARF for it. Loaded on first use, from the module itself
    /// or, when `debug_files` allows, from its separate debug file.
    pub(super) fn lines(
        &mut self,
        file: &mut ModuleFile,
        svma: u64,
        debug_files: bool,
    ) -> Arc<[LineFrame]> {
        if let Some(l) = self.lines.get(&svma) {
            return l.clone();
        }
        let mut out = Vec::new();
        if let Some(d) = self.dwarf_ctx(file, svma, debug_files) {
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
        self.lines.insert(svma, out.clone());
        out
    }
}
