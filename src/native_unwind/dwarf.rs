//! A module's DWARF: its context (from the module itself or its separate
//! debug file, loaded on first use), file:line and inlined frames per
//! address, and the call-site records that rebuild tail calls.

use std::borrow::Cow;
use std::sync::Arc;

use gimli::{EndianSlice, LittleEndian};
use object::Object;

use super::backing::{dwarf_section, Backing};
use super::callsites::{self, CallSite, CallTarget, UnitCallSites};
use super::module::{LoadedModule, CACHE_MAX};

type Slice = EndianSlice<'static, LittleEndian>;

/// DWARF of one module, with the borrowed slices pointing into `owned` and
/// `file`, which live exactly as long as the context (declared first, so it
/// is dropped first).
pub(super) struct DwarfCtx {
    pub(super) ctx: addr2line::Context<Slice>,
    /// The same sections, for what addr2line does not read: call sites.
    pub(super) dwarf: Arc<gimli::Dwarf<Slice>>,
    _owned: Vec<Box<[u8]>>,
    _file: Arc<Backing>,
}

impl DwarfCtx {
    pub(super) fn load(file: Arc<Backing>) -> Option<DwarfCtx> {
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

/// Bound on indexed units kept (a large library has thousands).
const UNITS_MAX: usize = 1024;

impl LoadedModule {
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
    use super::*;
    use object::{ObjectSegment, ObjectSymbol, SymbolKind};
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
