//! Names for code the target compiled at run time, read as gdb reads them:
//! through gdb's JIT interface. A JIT that wants its code named in a
//! debugger (LLVM's, so XLA's kernels under JAX, numba's, and others)
//! keeps a `__jit_debug_descriptor` variable whose list of entries each
//! point at a small ELF object in the target's memory describing code it
//! placed in an anonymous mapping. We find the descriptor by name in the
//! symbol tables of the modules already loaded for unwinding (the JIT's own
//! library is on the stack of any thread running its code), walk its list
//! and take the function symbols of each object. Only frames outside every
//! file ask, so a process without JIT code pays nothing. Every pointer,
//! count and size comes from the target and is bounded.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use object::{Object, ObjectKind, ObjectSection, ObjectSymbol, SymbolKind};

use super::names::demangle;
use crate::memory::{le_u32, le_u64, Memory, MemoryExt};

/// The descriptor's symbol, and its size: `{ u32 version; u32 action;
/// entry *relevant; entry *first; }`.
pub(super) const DESCRIPTOR: &str = "__jit_debug_descriptor";
pub(super) const DESCRIPTOR_SIZE: u64 = 24;
/// Entries walked per descriptor: `{ next, prev, symfile_addr, symfile_size }`.
const MAX_ENTRIES: usize = 1 << 14;
/// Largest in-memory object read.
const MAX_OBJECT: u64 = 16 << 20;
/// Bound on the object bytes read in one walk of the lists.
const MAX_WALK_BYTES: u64 = 256 << 20;
/// Bound on the functions kept from every object together.
const MAX_FUNCS: usize = 1 << 20;
/// Bound on the pages remembered as outside every JIT object.
const MAX_MISSES: usize = 1 << 16;

/// One function of JIT code: its address range and demangled name.
#[derive(Clone)]
struct JitFunc {
    start: u64,
    end: u64,
    name: Arc<str>,
}

/// What is known of the target's JIT code (see the module's doc).
#[derive(Default)]
pub(super) struct JitCode {
    /// Modules whose symbol tables were searched, by (load address, inode).
    searched: HashSet<(u64, u64)>,
    /// Descriptor addresses found.
    descriptors: Vec<u64>,
    /// Each object read, by (address, size), with its functions.
    objects: HashMap<(u64, u64), Arc<[JitFunc]>>,
    /// The functions of the objects listed at the last walk, by start.
    funcs: Vec<JitFunc>,
    /// Pages no listed object covered at the last walk.
    misses: HashSet<u64>,
}

impl JitCode {
    /// Whether the module at `key` still has to be searched for a descriptor.
    pub(super) fn wants_module(&self, key: (u64, u64)) -> bool {
        !self.searched.contains(&key)
    }

    /// The module at `key` was searched; `descriptor` is what it holds.
    pub(super) fn searched_module(&mut self, key: (u64, u64), descriptor: Option<u64>) {
        self.searched.insert(key);
        if let Some(d) = descriptor.filter(|d| !self.descriptors.contains(d)) {
            self.descriptors.push(d);
            self.misses.clear();
        }
    }

    /// The name of the JIT function containing `addr`, re-reading the
    /// descriptors' lists when no function known covers it.
    pub(super) fn name(&mut self, mem: &dyn Memory, addr: u64) -> Option<Arc<str>> {
        if let Some(n) = self.lookup(addr) {
            return Some(n);
        }
        let page = addr >> 12;
        if self.descriptors.is_empty() || self.misses.contains(&page) {
            return None;
        }
        self.walk(mem);
        let found = self.lookup(addr);
        if found.is_none() {
            if self.misses.len() >= MAX_MISSES {
                self.misses.clear();
            }
            self.misses.insert(page);
        }
        found
    }

    fn lookup(&self, addr: u64) -> Option<Arc<str>> {
        let i = self
            .funcs
            .partition_point(|f| f.start <= addr)
            .checked_sub(1)?;
        let f = &self.funcs[i];
        (addr < f.end).then(|| f.name.clone())
    }

    /// Read every descriptor's list afresh: objects seen before come from
    /// the cache, new ones are read, unlisted ones are forgotten.
    fn walk(&mut self, mem: &dyn Memory) {
        let mut listed = HashSet::new();
        for &d in &self.descriptors {
            let mut desc = [0u8; DESCRIPTOR_SIZE as usize];
            if mem.read(d, &mut desc).is_err() || le_u32(&desc, 0) != 1 {
                continue;
            }
            let mut entry = le_u64(&desc, 16);
            let mut seen = HashSet::new();
            while entry != 0 && seen.len() < MAX_ENTRIES && seen.insert(entry) {
                let mut e = [0u8; 32];
                if mem.read(entry, &mut e).is_err() {
                    break;
                }
                listed.insert((le_u64(&e, 16), le_u64(&e, 24)));
                entry = le_u64(&e, 0);
            }
        }
        self.objects.retain(|k, _| listed.contains(k));
        let mut total: usize = self.objects.values().map(|f| f.len()).sum();
        let mut budget = MAX_WALK_BYTES;
        for key in listed {
            if total >= MAX_FUNCS {
                break;
            }
            if self.objects.contains_key(&key) {
                continue;
            }
            // A corrupt list of many large objects is not read whole.
            if key.1 > budget.min(MAX_OBJECT) {
                continue;
            }
            budget -= key.1;
            let funcs: Arc<[JitFunc]> = read_object(mem, key.0, key.1)
                .map(|mut f| {
                    f.truncate(MAX_FUNCS - total);
                    f.into()
                })
                .unwrap_or_else(|| Arc::from(Vec::new()));
            total += funcs.len();
            self.objects.insert(key, funcs);
        }
        let mut funcs: Vec<JitFunc> = self
            .objects
            .values()
            .flat_map(|f| f.iter().cloned())
            .collect();
        funcs.sort_by_key(|f| f.start);
        self.funcs = funcs;
        self.misses.clear();
    }
}

/// The function symbols of the ELF object of `size` bytes at `addr`, at
/// the addresses the JIT placed them: a relocatable object's symbols are
/// offsets into sections whose addresses the JIT set to where the code
/// went; a linked one's are addresses already.
fn read_object(mem: &dyn Memory, addr: u64, size: u64) -> Option<Vec<JitFunc>> {
    if size > MAX_OBJECT {
        return None;
    }
    let bytes = mem
        .read_vec(addr, usize::try_from(size).ok()?, MAX_OBJECT as usize)
        .ok()?;
    functions(&bytes)
}

fn functions(bytes: &[u8]) -> Option<Vec<JitFunc>> {
    let obj = object::File::parse(bytes).ok()?;
    let relocatable = obj.kind() == ObjectKind::Relocatable;
    let mut out = Vec::new();
    for sym in obj.symbols() {
        if sym.kind() != SymbolKind::Text || !sym.is_definition() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() {
            continue;
        }
        let section = sym
            .section_index()
            .and_then(|i| obj.section_by_index(i).ok());
        let base = match (&section, relocatable) {
            (Some(s), true) => s.address(),
            (None, true) => continue,
            (_, false) => 0,
        };
        let start = base.wrapping_add(sym.address());
        let end = match (sym.size(), &section) {
            (0, Some(s)) => s.address().saturating_add(s.size()),
            (n, _) => start.saturating_add(n),
        };
        if end > start {
            out.push(JitFunc {
                start,
                end,
                name: demangle(name).into(),
            });
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SliceMemory;

    /// A relocatable object with one function, as a JIT hands it over:
    /// built by the system compiler, its `.text` address then set to
    /// where the "JIT" put the code.
    fn jit_object(text_at: u64) -> Vec<u8> {
        let dir = std::env::temp_dir().join(format!("pyinspect-jit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("k.c");
        std::fs::write(
            &src,
            "int pad(int x){return x+1;}\nint kernel_fn(int x){return x*3;}\n",
        )
        .unwrap();
        let obj = dir.join("k.o");
        let ok = std::process::Command::new("cc")
            .args(["-O1", "-c", "-fno-asynchronous-unwind-tables", "-o"])
            .arg(&obj)
            .arg(&src)
            .status()
            .unwrap()
            .success();
        assert!(ok, "cc failed");
        let mut b = std::fs::read(&obj).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        // Set sh_addr of `.text` (section header table at e_shoff).
        let shoff = u64::from_le_bytes(b[0x28..0x30].try_into().unwrap()) as usize;
        let shnum = u16::from_le_bytes(b[0x3c..0x3e].try_into().unwrap()) as usize;
        let shstrndx = u16::from_le_bytes(b[0x3e..0x40].try_into().unwrap()) as usize;
        let sh = |i: usize| shoff + i * 64;
        let strs = u64::from_le_bytes(b[sh(shstrndx) + 24..sh(shstrndx) + 32].try_into().unwrap())
            as usize;
        for i in 0..shnum {
            let name = u32::from_le_bytes(b[sh(i)..sh(i) + 4].try_into().unwrap()) as usize;
            if b[strs + name..].starts_with(b".text\0") {
                b[sh(i) + 16..sh(i) + 24].copy_from_slice(&text_at.to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn jit_functions_are_named_through_the_descriptor_list() {
        let text_at = 0x7f00_0000_1000u64;
        let object = jit_object(text_at);
        let (desc, entry, obj_at) = (0x1000u64, 0x2000u64, 0x10_0000u64);
        let mut d = vec![0u8; 24];
        d[0..4].copy_from_slice(&1u32.to_le_bytes());
        d[16..24].copy_from_slice(&entry.to_le_bytes());
        let mut e = vec![0u8; 32];
        e[16..24].copy_from_slice(&obj_at.to_le_bytes());
        e[24..32].copy_from_slice(&(object.len() as u64).to_le_bytes());
        let mut mem = SliceMemory::new();
        mem.add(desc, d);
        mem.add(entry, e);
        mem.add(obj_at, object.clone());

        let funcs = functions(&object).unwrap();
        let k = funcs.iter().find(|f| &*f.name == "kernel_fn").unwrap();
        assert!(
            k.start > text_at && k.end > k.start,
            "placed at .text's address"
        );

        let mut jit = JitCode::default();
        assert!(jit.name(&mem, k.start).is_none(), "no descriptor known yet");
        jit.searched_module((0x7000, 1), Some(desc));
        assert!(!jit.wants_module((0x7000, 1)));
        assert_eq!(jit.name(&mem, k.start + 1).as_deref(), Some("kernel_fn"));
        assert!(jit.name(&mem, text_at + 0x10_0000).is_none());
    }

    #[test]
    fn a_corrupt_list_or_object_names_nothing_and_ends() {
        let mut mem = SliceMemory::new();
        // A descriptor whose list loops on itself, pointing at garbage.
        let mut d = vec![0u8; 24];
        d[0..4].copy_from_slice(&1u32.to_le_bytes());
        d[16..24].copy_from_slice(&0x2000u64.to_le_bytes());
        let mut e = vec![0u8; 32];
        e[0..8].copy_from_slice(&0x2000u64.to_le_bytes());
        e[16..24].copy_from_slice(&0x3000u64.to_le_bytes());
        e[24..32].copy_from_slice(&64u64.to_le_bytes());
        mem.add(0x1000, d);
        mem.add(0x2000, e);
        mem.add(0x3000, vec![0x7f; 64]);
        let mut jit = JitCode::default();
        jit.searched_module((0x7000, 1), Some(0x1000));
        assert!(jit.name(&mem, 0x3010).is_none());
        // A huge size is refused without reading.
        assert!(read_object(&mem, 0x3000, u64::MAX).is_none());
    }
}
