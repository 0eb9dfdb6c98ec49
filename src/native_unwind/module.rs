//! One loaded ELF module of the target: its file bytes, load bias, where
//! its separate debug file may be, and the per-module state of its unwind
//! tables ([`super::cfi`]), symbols ([`super::symbols`]) and DWARF
//! ([`super::dwarf`]), each computed once, on first use, and cached.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::backing::Backing;
use super::callsites::{CallTarget, UnitCallSites};
use super::cfi::{Cfi, CfiSections, SectionData};
use super::dwarf::{LineFrame, ModuleDwarf};
use super::symbols::SymbolIndex;
use object::{Object, ObjectSection, ObjectSegment};

/// A module of the target, loaded (see [`LoadedModule::load`]).
pub(crate) struct LoadedModule {
    pub(super) bytes: Arc<Backing>,
    /// avma = svma + bias.
    pub(crate) bias: u64,
    /// Loadable segments' file bytes: (svma start, svma end, file offset).
    pub(super) segments: Vec<(u64, u64, u64)>,
    pub(super) cfi: Cfi,
    pub(super) cfi_cache: HashMap<u64, bool>,
    /// Addresses whose CFA rule is known not to be an expression.
    pub(super) expr_cache: HashMap<u64, bool>,
    /// Paths tried for a separate debug file (computed at load, opened lazily).
    pub(super) debug_candidates: Vec<(String, Option<Vec<u8>>)>,
    pub(super) has_symtab: bool,
    pub(super) has_dwarf: bool,
    pub(super) debug: Option<Option<Arc<Backing>>>,
    pub(super) symbols: Option<SymbolIndex>,
    pub(super) names: HashMap<u64, Option<(Arc<str>, bool)>>,
    pub(super) dwarf: Option<Option<ModuleDwarf>>,
    pub(super) lines: HashMap<u64, Arc<[LineFrame]>>,
    /// Call sites per compilation unit (by its `.debug_info` offset).
    pub(super) call_sites: HashMap<u64, Arc<UnitCallSites>>,
    /// Call targets in other units than their call sites', by DIE offset.
    pub(super) die_targets: HashMap<u64, Option<CallTarget>>,
    /// Function symbols by exact name (None: several addresses).
    pub(super) by_name: Option<HashMap<Box<str>, Option<u64>>>,
    /// Exported functions by name, as the hash table found them.
    pub(super) exported: HashMap<Box<str>, Option<u64>>,
}

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
        let debug_candidates = if has_symtab && has_dwarf {
            Vec::new()
        } else {
            debug_candidates(&obj, root, file_dir)
        };
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
                by_name: None,
                exported: HashMap::new(),
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

    pub(super) fn debug_file(&mut self) -> Option<Arc<Backing>> {
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
}

/// Where a separate debug file for `obj` may be, with the build id it must
/// have: by build id under `/usr/lib/debug` (in `root`, then here) and in
/// the debuginfod clients' caches, and by `.gnu_debuglink` beside the file.
fn debug_candidates(
    obj: &object::File,
    root: &str,
    file_dir: &str,
) -> Vec<(String, Option<Vec<u8>>)> {
    let mut debug_candidates = Vec::new();
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
    debug_candidates
}
