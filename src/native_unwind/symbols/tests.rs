//! Tests of the symbol index against `object`'s reading of real libraries.

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
    let libpython = crate::native_unwind::backing::pyenv_libpython311();
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
        let (Some(da), Some(db)) = (DwarfCtx::load(sparse.clone()), DwarfCtx::load(whole)) else {
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
