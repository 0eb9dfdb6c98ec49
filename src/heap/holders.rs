//! The largest containers of a census, the containers module globals
//! hold, and those globals' names, `module.name` (`app.cache`).

use crate::cpython_layouts::Layout;
use crate::memory::{Memory, MemoryExt};
use crate::python::bounds::MAX_INTERPRETERS;
use crate::python::objects::ObjReader;
use std::collections::{BinaryHeap, HashMap, HashSet};

/// Containers listed, at most.
pub(crate) const TOP_CONTAINERS: usize = 10;
/// Containers held by module globals listed, at most.
pub(crate) const TOP_GLOBALS: usize = 50;
/// Module globals read in all, at most.
const MAX_ALL_GLOBALS: usize = 1 << 20;
/// Modules, and globals of one module, looked through at most.
const MAX_MODULES: u64 = 1 << 14;
const MAX_GLOBALS: u64 = 1 << 16;
/// A holder's name, at most (characters).
const MAX_NAME: u64 = 200;

/// One of the largest containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Container {
    pub address: u64,
    /// Row of its type in the census, and the type's name.
    pub(crate) row: usize,
    pub type_name: String,
    /// Items (a dict: entries).
    pub length: u64,
    /// Its own `sys.getsizeof`.
    pub bytes: u64,
    /// `module.global` names that refer to it.
    pub holders: Vec<String>,
}

/// The `TOP_CONTAINERS` largest containers seen, by bytes.
#[derive(Default)]
pub(crate) struct Largest {
    heap: BinaryHeap<std::cmp::Reverse<(u64, u64, u64, usize)>>,
}

impl Largest {
    pub(crate) fn offer(&mut self, address: u64, row: usize, length: u64, bytes: u64) {
        self.heap
            .push(std::cmp::Reverse((bytes, length, address, row)));
        if self.heap.len() > TOP_CONTAINERS {
            self.heap.pop();
        }
    }

    /// Largest first.
    pub(crate) fn into_sorted(self) -> Vec<Container> {
        let mut v: Vec<Container> = self
            .heap
            .into_iter()
            .map(
                |std::cmp::Reverse((bytes, length, address, row))| Container {
                    address,
                    row,
                    type_name: String::new(),
                    length,
                    bytes,
                    holders: Vec::new(),
                },
            )
            .collect();
        v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.address.cmp(&b.address)));
        v
    }
}

/// Every module global of every interpreter's `sys.modules` (bounded):
/// the object it refers to → its `module.name`s (at most 8 each, sorted).
/// Interpreter plumbing (`__builtins__`, dunders) is left out, a module
/// listed under two names is named by its first; what cannot be read is
/// skipped.
pub(crate) fn module_globals(
    mem: &dyn Memory,
    layout: &Layout,
    interp_head_ptr: u64,
) -> HashMap<u64, Vec<String>> {
    let reader = ObjReader::new(mem, layout).with_max_entries(MAX_GLOBALS);
    let mut found: HashMap<u64, Vec<String>> = HashMap::new();
    let mut seen = HashSet::new();
    let mut modules_seen = HashSet::new();
    let mut total = 0usize;
    let mut interp = mem.read_u64(interp_head_ptr).unwrap_or(0);
    while interp != 0 && seen.len() < MAX_INTERPRETERS && seen.insert(interp) {
        let modules = mem
            .read_u64(interp.wrapping_add(layout.interp.modules))
            .unwrap_or(0);
        if modules != 0 {
            for (name, module) in reader.dict_items(modules, MAX_MODULES).unwrap_or_default() {
                let Ok(globals) = mem.read_u64(module.wrapping_add(layout.object.module_dict))
                else {
                    continue;
                };
                if globals == 0 || reader.type_name(module).ok().as_deref() != Some("module") {
                    continue;
                }
                // A module under a second name (uvicorn's `__mp_main__`
                // for `__main__`): named once, by its first.
                if !modules_seen.insert(module) {
                    continue;
                }
                let Ok((m, _)) = reader.string(name, MAX_NAME) else {
                    continue;
                };
                for (key, value) in reader.dict_items(globals, MAX_GLOBALS).unwrap_or_default() {
                    if total >= MAX_ALL_GLOBALS {
                        break;
                    }
                    let Ok((k, _)) = reader.string(key, MAX_NAME) else {
                        continue;
                    };
                    if k.starts_with("__") && k.ends_with("__") {
                        continue;
                    }
                    let names = found.entry(value).or_default();
                    let full = format!("{m}.{k}");
                    if !names.contains(&full) && names.len() < 8 {
                        names.push(full);
                        total += 1;
                    }
                }
            }
        }
        interp = mem
            .read_u64(interp.wrapping_add(layout.interp.next))
            .unwrap_or(0);
    }
    for names in found.values_mut() {
        names.sort();
    }
    found
}

/// Give `containers` the names of the globals that refer to them.
pub(crate) fn name_holders(globals: &HashMap<u64, Vec<String>>, containers: &mut [Container]) {
    for c in containers.iter_mut() {
        if let Some(names) = globals.get(&c.address) {
            c.holders = names.clone();
        }
    }
}
