//! One loaded ELF module of the target: its load bias and segments, its
//! unwind tables ([`super::cfi`]) with their per-address caches, and the
//! parts that name its code, each its own state beside the module's file
//! ([`super::file`]): symbols ([`super::symbols`]) and DWARF
//! ([`super::dwarf`]), computed on first use and cached. The module hands
//! each part the file (and DWARF the symbols' lookup by name), so that
//! neither part knows the module.

use std::ops::Range;
use std::sync::Arc;

use super::backing::Backing;
use super::cache::BoundedMap;
use super::callsites::{CallSite, CallTarget};
use super::cfi::{Cfi, CfiSections, SectionData};
use super::dwarf::{LineFrame, ModuleLines};
use super::file::ModuleFile;
use super::symbols::ModuleSymbols;
use object::{Object, ObjectSection, ObjectSegment};

/// A module of the target, loaded (see [`LoadedModule::load`]).
pub(crate) struct LoadedModule {
    file: ModuleFile,
    /// avma = svma + bias.
    pub(crate) bias: u64,
    /// Loadable segments' file bytes: (svma start, svma end, file offset).
    segments: Vec<(u64, u64, u64)>,
    cfi: Cfi,
    cfi_cache: BoundedMap<u64, bool>,
    /// Addresses whose CFA rule is known not to be an expression.
    expr_cache: BoundedMap<u64, bool>,
    symbols: ModuleSymbols,
    lines: ModuleLines,
}

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
        let file = ModuleFile::new(bytes.clone(), &obj, root, file_dir);
        Ok((
            LoadedModule {
                file,
                bias,
                segments,
                cfi,
                cfi_cache: BoundedMap::default(),
                expr_cache: BoundedMap::default(),
                symbols: ModuleSymbols::default(),
                lines: ModuleLines::default(),
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
            self.expr_cache.insert(svma, false);
        }
        r
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
        let b = self.file.bytes.range(off.checked_add(at - start)?, 5)?;
        if b.first() != Some(&0xE8) {
            return None;
        }
        let rel = i32::from_le_bytes(b.get(1..5)?.try_into().ok()?);
        Some(ret.wrapping_add(rel as i64 as u64))
    }

    /// Start (svma) of the sized or nearest function symbol covering `svma`.
    pub(crate) fn function_start(&mut self, svma: u64) -> Option<u64> {
        self.symbols.function_start(&mut self.file, svma)
    }

    /// (demangled name, exported) of the function containing `svma`; cached.
    pub(crate) fn symbol(&mut self, svma: u64) -> Option<(Arc<str>, bool)> {
        self.symbols.symbol(&mut self.file, svma)
    }

    /// The address of the exported function `name`, as the dynamic linker
    /// binds it (see [`ModuleSymbols::exported_function`]).
    pub(crate) fn exported_function(&mut self, name: &str) -> Option<u64> {
        self.symbols.exported_function(&mut self.file, name)
    }

    /// The address (svma) of the data object `name` of `size` bytes, from
    /// the module's own symbol tables (see [`super::symbols::object_symbol`]).
    pub(crate) fn data_symbol(&self, name: &str, size: u64) -> Option<u64> {
        super::symbols::object_symbol(&self.file.bytes, name, size)
    }

    /// Whether DWARF may be found for this module: its own, or with
    /// `debug_files`, a separate debug file's (not opened here).
    pub(crate) fn may_have_lines(&self, debug_files: bool) -> bool {
        ModuleLines::may_have_lines(&self.file, debug_files)
    }

    /// Drop DWARF state so the next lookup decides afresh where DWARF comes from.
    pub(crate) fn forget_lines(&mut self) {
        self.lines.forget();
    }

    /// DWARF frames for `svma`, innermost (most inlined) first; empty when
    /// there is no DWARF for it.
    pub(crate) fn lines(&mut self, svma: u64, debug_files: bool) -> Arc<[LineFrame]> {
        self.lines.lines(&mut self.file, svma, debug_files)
    }

    /// The call site whose return address is `ret` (svma).
    pub(crate) fn call_site(&mut self, ret: u64, debug_files: bool) -> Option<CallSite> {
        self.lines.call_site(&mut self.file, ret, debug_files)
    }

    /// The entry (svma) of the function a call target stands for, in this
    /// module.
    pub(crate) fn resolve_target(&mut self, t: &CallTarget, debug_files: bool) -> Option<u64> {
        let symbols = &mut self.symbols;
        self.lines
            .resolve_target(&mut self.file, t, debug_files, &mut |f, n| {
                symbols.function_by_name(f, n)
            })
    }

    /// The name a call target has, for a declaration.
    pub(crate) fn target_name(&mut self, t: &CallTarget, debug_files: bool) -> Option<Arc<str>> {
        self.lines.target_name(&mut self.file, t, debug_files)
    }

    /// The tail-call sites (return addresses, svma, outermost first) by
    /// which the function entered at `g` reached the one entered at `h`.
    pub(crate) fn tail_chain(&mut self, g: u64, h: u64, debug_files: bool) -> Option<Vec<u64>> {
        let symbols = &mut self.symbols;
        self.lines
            .tail_chain(&mut self.file, g, h, debug_files, &mut |f, n| {
                symbols.function_by_name(f, n)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{ObjectSymbol, SymbolKind};
    use std::collections::HashMap;

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
                let u = lm
                    .lines
                    .unit_call_sites(&mut lm.file, at(entry), false)
                    .expect("DWARF");
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
