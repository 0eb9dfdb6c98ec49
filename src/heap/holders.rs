//! The largest containers of a census, the containers module globals
//! hold, and those globals' names, `module.name` (`app.cache`).

use crate::cpython_layouts::Layout;
use crate::memory::{Memory, MemoryExt};
use crate::python::bounds::MAX_INTERPRETERS;
use crate::python::objects::ObjReader;
use crate::python::reader::{LocalObjects, ReadOptions, Reader};
use crate::target::TargetSource;
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

/// Every module global of every interpreter's `sys.modules`, and every
/// attribute of the classes those globals are (bounded): the object it
/// refers to → its `module.name`s and `module.Class.name`s (at most 8
/// each, sorted). Interpreter plumbing (`__builtins__`, dunders) is left
/// out, a module listed under two names is named by its first, a class
/// by the first global found naming it; what cannot be read is skipped.
/// `tp_dict` is where a type keeps its dict (the collector's table).
pub(crate) fn module_globals(
    mem: &dyn Memory,
    layout: &Layout,
    tp_dict: u64,
    interp_head_ptr: u64,
) -> HashMap<u64, Vec<String>> {
    let reader = ObjReader::new(mem, layout).with_max_entries(MAX_GLOBALS);
    let mut found: HashMap<u64, Vec<String>> = HashMap::new();
    let mut seen = HashSet::new();
    let mut modules_seen = HashSet::new();
    let mut classes_seen = HashSet::new();
    let mut total = 0usize;
    let mut add = |found: &mut HashMap<u64, Vec<String>>, value: u64, full: String| {
        if total >= MAX_ALL_GLOBALS {
            return;
        }
        let names = found.entry(value).or_default();
        if !names.contains(&full) && names.len() < 8 {
            names.push(full);
            total += 1;
        }
    };
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
                    let Ok((k, _)) = reader.string(key, MAX_NAME) else {
                        continue;
                    };
                    if is_dunder(&k) {
                        continue;
                    }
                    add(&mut found, value, format!("{m}.{k}"));
                    // A class defined in Python: its attributes too.
                    if !is_heap_class(&reader, value) || !classes_seen.insert(value) {
                        continue;
                    }
                    let Ok(attrs) = mem.read_u64(value.wrapping_add(tp_dict)) else {
                        continue;
                    };
                    if attrs == 0 {
                        continue;
                    }
                    for (key, value) in reader.dict_items(attrs, MAX_GLOBALS).unwrap_or_default() {
                        let Ok((a, _)) = reader.string(key, MAX_NAME) else {
                            continue;
                        };
                        if !is_dunder(&a) {
                            add(&mut found, value, format!("{m}.{k}.{a}"));
                        }
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

fn is_dunder(name: &str) -> bool {
    name.starts_with("__") && name.ends_with("__")
}

/// Whether `obj` is a class made by a `class` statement (or `type()`): a
/// type (its type's flags say `Py_TPFLAGS_TYPE_SUBCLASS`) that is a heap
/// type (`Py_TPFLAGS_HEAPTYPE`).
fn is_heap_class(reader: &ObjReader, obj: u64) -> bool {
    const HEAPTYPE: u64 = 1 << 9;
    const TYPE_SUBCLASS: u64 = 1 << 31;
    let flags = |t: u64| {
        reader
            .mem
            .read_u64(t.wrapping_add(reader.layout.object.tp_flags))
            .unwrap_or(0)
    };
    reader
        .type_of(obj)
        .is_ok_and(|t| flags(t) & TYPE_SUBCLASS != 0 && flags(obj) & HEAPTYPE != 0)
}

/// Give `containers` the names of the holders (globals, class attributes,
/// locals) that refer to them, after those they have.
pub(crate) fn name_holders(holders: &HashMap<u64, Vec<String>>, containers: &mut [Container]) {
    for c in containers.iter_mut() {
        if let Some(names) = holders.get(&c.address) {
            for n in names {
                if !c.holders.contains(n) && c.holders.len() < 8 {
                    c.holders.push(n.clone());
                }
            }
        }
    }
}

/// Every local of every thread's Python frames (as many as the reader
/// walks): the object it refers to → `local NAME in FUNCTION (FILE:LINE)`
/// (at most 8 each, sorted; the file by its last component). Nothing when
/// the threads cannot be read.
pub(crate) fn frame_locals(
    source: &dyn TargetSource,
    reader: &mut Reader,
) -> HashMap<u64, Vec<String>> {
    let opts = ReadOptions {
        local_objects: LocalObjects::All,
        ..Default::default()
    };
    let (states, ran) = (foldhash::HashMap::default(), foldhash::HashMap::default());
    let Ok(threads) = reader.snapshot(source, opts, &states, &ran) else {
        return HashMap::new();
    };
    let mut found: HashMap<u64, Vec<String>> = HashMap::new();
    for t in &threads {
        for l in &t.local_refs {
            let Some(f) = t.stack.frames.get(l.frame) else {
                continue;
            };
            let file = f.file.as_deref().unwrap_or("?");
            let file = file.rsplit('/').next().unwrap_or(file);
            let line = f.line.unwrap_or(0);
            let name = format!("local {} in {} ({file}:{line})", l.name, f.function);
            let names = found.entry(l.obj).or_default();
            if !names.contains(&name) && names.len() < 8 {
                names.push(name);
            }
        }
    }
    for names in found.values_mut() {
        names.sort();
    }
    found
}
