//! Where the tasks are listed: `asyncio.tasks`' registries (WeakSets and
//! sets), `_asyncio`'s module state (3.14+) and the `AsyncioDebug` section
//! that gives the offsets of 3.14's per-thread task lists.

use super::state::{AsyncioReader, Lists};
use crate::cpython_layouts::asyncio::{AsyncioLayout, ModuleState};
use crate::elf;
use crate::memory::{le_u64, Memory, MemoryExt};
use crate::python::objects::ObjReader;
use crate::python::pagecache::PageCache;
use crate::python::reader::ThreadSnapshot;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How often a missing `AsyncioDebug` section is looked for again.
const DEBUG_RESCAN: Duration = Duration::from_secs(1);

/// `AsyncioDebug`: 13 `uint64_t` (3.14).
const DEBUG_WORDS: usize = 13;

/// `sys.modules[name]` of an interpreter.
fn sys_module(objr: &ObjReader, interp: u64, name: &str) -> Option<u64> {
    objr.mem
        .read_u64(interp.wrapping_add(objr.layout.interp.modules))
        .ok()
        .filter(|m| *m != 0)
        .and_then(|m| objr.dict_get(m, name).ok().flatten())
}

/// The dict of `asyncio.tasks`, where its registries are: `None` in an
/// interpreter that has not imported asyncio (nothing more is looked at).
pub(super) fn tasks_module_dict(objr: &ObjReader, interp: u64) -> Option<u64> {
    sys_module(objr, interp, "asyncio.tasks").and_then(|m| {
        objr.mem
            .read_u64(m.wrapping_add(objr.layout.object.module_dict))
            .ok()
    })
}

/// The C accelerator `_asyncio`, unless blocked (`sys.modules["_asyncio"] = None`).
pub(super) fn c_module(objr: &ObjReader, interp: u64) -> Option<u64> {
    sys_module(objr, interp, "_asyncio").filter(|m| objr.type_name(*m).is_ok_and(|t| t == "module"))
}

/// `asyncio.tasks`' dict, its items read once.
pub(super) struct TasksModule {
    items: Vec<(u64, u64)>,
}

impl TasksModule {
    pub(super) fn read(objr: &ObjReader, dict: u64) -> TasksModule {
        TasksModule {
            items: objr.dict_items(dict, 1 << 16).unwrap_or_default(),
        }
    }

    fn named(&self, objr: &ObjReader, name: &str) -> Option<u64> {
        self.items.iter().find_map(|(k, v)| {
            matches!(objr.string(*k, 64), Ok((s, false)) if s == name).then_some(*v)
        })
    }

    /// `_current_tasks`: each running loop and its task.
    pub(super) fn current_tasks(&self, objr: &ObjReader) -> Vec<(u64, u64)> {
        self.named(objr, "_current_tasks")
            .map(|cur| objr.dict_items(cur, 4096).unwrap_or_default())
            .unwrap_or_default()
    }
}

/// 3.14+: what a thread's state says of asyncio (0 where unread).
#[derive(Clone, Copy)]
pub(super) struct ThreadLoop {
    /// Index into the snapshot's threads.
    pub(super) thread: usize,
    tstate: u64,
    /// The loop running on the thread, and its running task.
    pub(super) loop_: u64,
    pub(super) task: u64,
}

/// The tasks that one interpreter's registries and lists name, each once,
/// in the order found, at most `cap`.
pub(super) struct Found {
    pub(super) addrs: Vec<u64>,
    seen: HashSet<u64>,
    cap: usize,
    /// Loop → the task it runs.
    pub(super) running: HashMap<u64, u64>,
    /// Loop → the thread that runs it, where 3.14's thread states say.
    pub(super) loop_thread: HashMap<u64, usize>,
    /// How many tasks a registry or list held that held too many.
    pub(super) too_many: Option<usize>,
    /// An earlier sample's tasks serve this one: the registries and lists
    /// are not read.
    pub(super) cached: bool,
}

impl Found {
    pub(super) fn new(cap: usize) -> Found {
        Found {
            addrs: Vec::new(),
            seen: HashSet::new(),
            cap,
            running: HashMap::new(),
            loop_thread: HashMap::new(),
            too_many: None,
            cached: false,
        }
    }

    pub(super) fn add(&mut self, a: u64) {
        if a != 0 && self.addrs.len() < self.cap && self.seen.insert(a) {
            self.addrs.push(a);
        }
    }
}

impl AsyncioReader {
    /// Check `AsyncioDebug` (3.14+) in the sections `sections` finds (the
    /// command layer looks in the target's mapped files), at most once a second
    /// until one is found.
    pub(super) fn find_lists(
        &mut self,
        mem: &dyn Memory,
        sections: &dyn Fn() -> Vec<(String, elf::Range)>,
    ) {
        let Some(l) = self.layout else { return };
        let Some(ab) = l.awaited_by else { return };
        if self.lists.is_some()
            || self
                .last_debug_scan
                .is_some_and(|t| t.elapsed() < DEBUG_RESCAN)
        {
            return;
        }
        self.last_debug_scan = Some(Instant::now());
        for (file, sec) in sections() {
            let mut buf = [0u8; DEBUG_WORDS * 8];
            if sec.size < buf.len() as u64 || mem.read(sec.addr, &mut buf).is_err() {
                continue;
            }
            let w: Vec<u64> = (0..DEBUG_WORDS)
                .map(|i| le_u64(&buf, i as u64 * 8))
                .collect();
            match check_debug(l, &ab, &w) {
                Ok(lists) => self.lists = Some(lists),
                Err(e) => self.note(format!("{file}: {e}")),
            }
            return;
        }
    }

    /// 3.14+, once `AsyncioDebug` is found: each thread's running loop and
    /// task.
    pub(super) fn thread_loops(
        &self,
        objr: &ObjReader,
        snaps: &[ThreadSnapshot],
        threads: &[usize],
    ) -> Option<Vec<ThreadLoop>> {
        let lists = self.lists?;
        let loops = threads.iter().map(|&i| {
            let tstate = snaps[i].tstate;
            let word = |off: u64| objr.mem.read_u64(tstate.wrapping_add(off)).unwrap_or(0);
            ThreadLoop {
                thread: i,
                tstate,
                loop_: word(lists.ts_running_loop),
                task: word(lists.ts_running_task),
            }
        });
        Some(loops.collect())
    }

    /// The tasks in `asyncio.tasks`' registries (`_all_tasks` ≤3.11,
    /// `_scheduled_tasks` and `_eager_tasks` 3.12+) and, 3.14+, in
    /// `_asyncio`'s module state (`c_module`'s).
    pub(super) fn registered_tasks(
        &mut self,
        cache: &PageCache,
        objr: &ObjReader,
        l: &AsyncioLayout,
        module: &TasksModule,
        c_module: Option<u64>,
        found: &mut Found,
    ) {
        let limit = found.cap as u64 + 1;
        for ws in ["_all_tasks", "_scheduled_tasks"] {
            let Some(w) = module.named(objr, ws) else {
                continue;
            };
            match weakset_members(cache, objr, l, w, limit) {
                Ok(objs) => {
                    if objs.len() as u64 >= limit {
                        found.too_many = Some(objs.len());
                    }
                    for o in objs {
                        found.add(o);
                    }
                }
                Err(e) => self.note(format!("asyncio.tasks.{ws} unreadable: {e}")),
            }
        }
        if let Some(eager) = module.named(objr, "_eager_tasks") {
            for t in objr.set_items(eager, 1 << 16).unwrap_or_default() {
                found.add(t);
            }
        }
        // 3.14+: the tasks that are no C tasks, in `_asyncio`'s state.
        if let (Some(ms), Some(module)) = (l.module_state, c_module) {
            let (objs, full) = self.module_state_tasks(cache, objr, l, &ms, module, limit);
            if full {
                found.too_many = Some(objs.len());
            }
            for o in objs {
                found.add(o);
            }
        }
    }

    /// 3.14+: the tasks on each thread's list and on the interpreter's
    /// (those of threads that ended), unless `found.cached`; and each
    /// thread's running loop and task (`on_threads`), which run on that
    /// thread.
    pub(super) fn listed_tasks(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        interp: u64,
        on_threads: Option<&[ThreadLoop]>,
        c_module: Option<u64>,
        found: &mut Found,
    ) {
        let (Some(lists), Some(ab), Some(on_threads)) = (self.lists, l.awaited_by, on_threads)
        else {
            if l.awaited_by.is_some() && c_module.is_some() {
                // (Without `_asyncio`, the C accelerator blocked, every
                // task is a Python one, in the registries.)
                self.note(
                    "no AsyncioDebug section found in the target's _asyncio module: only the \
                     tasks in asyncio.tasks' registries are shown"
                        .into(),
                );
            }
            return;
        };
        let heads = on_threads
            .iter()
            .map(|t| (t.tstate.wrapping_add(lists.ts_tasks_head), Some(t)))
            .chain([(interp.wrapping_add(lists.interp_tasks_head), None)]);
        for (head, thread) in heads {
            let mut node = if found.cached {
                0
            } else {
                objr.mem.read_u64(head).unwrap_or(0)
            };
            let mut steps = 0;
            while node != 0 && node != head && steps < found.cap {
                steps += 1;
                found.add(node.wrapping_sub(ab.node));
                node = objr.mem.read_u64(node).unwrap_or(0);
            }
            if steps >= found.cap {
                found.too_many = Some(steps);
            }
            if let Some(t) = thread.filter(|t| t.loop_ != 0) {
                found.loop_thread.insert(t.loop_, t.thread);
                if t.task != 0 {
                    found.running.insert(t.loop_, t.task);
                    found.add(t.task);
                }
            }
        }
    }

    /// 3.14+: the members of `_asyncio`'s `non_asyncio_tasks` (a WeakSet)
    /// and `non_asyncio_eager_tasks` (a set), where Python-level Task
    /// implementations register through `asyncio._register_task`. The
    /// module, its state and both containers are checked by type before
    /// anything in them is read; what fails is noted, and the rest is kept.
    /// Also says whether `limit` was reached.
    pub(super) fn module_state_tasks(
        &mut self,
        cache: &PageCache,
        objr: &ObjReader,
        l: &AsyncioLayout,
        ms: &ModuleState,
        module: u64,
        limit: u64,
    ) -> (Vec<u64>, bool) {
        let mut out = Vec::new();
        if !objr.type_name(module).is_ok_and(|t| t == "module") {
            return (out, false);
        }
        let state = match objr.mem.read_u64(module.wrapping_add(ms.md_state)) {
            Ok(s) if s != 0 && s % 8 == 0 => s,
            _ => {
                self.note(
                    "_asyncio's module state unreadable: its Python-level tasks are not shown"
                        .into(),
                );
                return (out, false);
            }
        };
        let word = |off: u64| objr.mem.read_u64(state.wrapping_add(off)).unwrap_or(0);
        let is_type = |p: u64, name: &str| {
            objr.type_name(p).is_ok_and(|t| t == "type")
                && objr
                    .mem
                    .read_u64(p.wrapping_add(objr.layout.object.tp_name))
                    .and_then(|n| objr.c_string(n, 64))
                    .is_ok_and(|n| n == name)
        };
        if !is_type(word(ms.future_type), "_asyncio.Future")
            || !is_type(word(ms.task_type), "_asyncio.Task")
        {
            self.note(
                "_asyncio's module state is unlike the table's (no _asyncio.Future and \
                 _asyncio.Task where expected): its Python-level tasks are not shown"
                    .into(),
            );
            return (out, false);
        }
        let mut full = false;
        for (addr, ty, what) in [
            (word(ms.tasks), "WeakSet", "registry of Python-level tasks"),
            (
                word(ms.eager_tasks),
                "set",
                "registry of eager Python-level tasks",
            ),
        ] {
            if !objr.type_name(addr).is_ok_and(|t| t == ty) {
                self.note(format!("_asyncio's {what} is no {ty}: not read"));
                continue;
            }
            let items = if ty == "WeakSet" {
                weakset_members(cache, objr, l, addr, limit)
            } else {
                objr.set_items(addr, limit)
            };
            match items {
                Ok(objs) => {
                    full |= objs.len() as u64 >= limit;
                    out.extend(objs);
                }
                Err(e) => self.note(format!("_asyncio's {what} unreadable: {e}")),
            }
        }
        (out, full)
    }
}

/// The live objects of a `weakref.WeakSet` (its `data`, a set of weak
/// references), at most `limit`: each reference checked by type, a dead
/// one (pointing at `None`) left out.
pub(super) fn weakset_members(
    cache: &PageCache,
    objr: &ObjReader,
    l: &AsyncioLayout,
    ws: u64,
    limit: u64,
) -> Result<Vec<u64>, crate::error::MemError> {
    let data = objr
        .instance_attr(ws, "data")?
        .ok_or(crate::error::MemError::Unmapped { addr: ws, len: 0 })?;
    if !objr.type_name(data).is_ok_and(|t| t == "set") {
        return Err(crate::error::MemError::Unmapped { addr: data, len: 0 });
    }
    let refs = objr.set_items(data, limit)?;
    cache.prefetch(refs.iter().map(|r| (r.wrapping_add(l.weakref_object), 8)));
    let mut weakref_type = None;
    let mut out = Vec::with_capacity(refs.len());
    for r in refs {
        // Every member is a `weakref.ref` (named `weakref` before 3.9):
        // its type is checked once. A dead one points at `None`, which the
        // task check leaves out.
        let Ok(ty) = objr.type_of(r) else { continue };
        if weakref_type != Some(ty) {
            if !objr
                .type_name(r)
                .is_ok_and(|n| n == "weakref.ReferenceType" || n == "weakref")
            {
                continue;
            }
            weakref_type = Some(ty);
        }
        if let Ok(o) = objr.mem.read_u64(r.wrapping_add(l.weakref_object)) {
            if o != 0 {
                out.push(o);
            }
        }
    }
    Ok(out)
}

/// `AsyncioDebug` checked against the table: sizes and offsets in range,
/// and the members the table also has must agree (they prove the rest of
/// the table describes this build).
fn check_debug(
    l: &AsyncioLayout,
    ab: &crate::cpython_layouts::asyncio::AwaitedBy,
    w: &[u64],
) -> Result<Lists, String> {
    let (task_size, name, awaited_by, is_task, is_set, coro, node) =
        (w[0], w[1], w[2], w[3], w[4], w[5], w[6]);
    let (interp_size, interp_head) = (w[7], w[8]);
    let (ts_size, ts_loop, ts_task, ts_head) = (w[9], w[10], w[11], w[12]);
    let expected = (
        l.task_size,
        l.task_name.unwrap_or(0),
        ab.awaited_by,
        ab.is_task,
        ab.is_set,
        l.task_coro,
        ab.node,
    );
    if (task_size, name, awaited_by, is_task, is_set, coro, node) != expected {
        return Err(format!(
            "AsyncioDebug describes a TaskObj unlike Python {}.{}'s table (size {task_size}, \
             name {name}, coro {coro}, node {node}): tasks are read from the registries only",
            l.major, l.minor
        ));
    }
    let inside = |off: u64, size: u64| size > 0 && size <= 1 << 20 && off + 8 <= size;
    if !inside(interp_head, interp_size)
        || !inside(ts_loop, ts_size)
        || !inside(ts_task, ts_size)
        || !inside(ts_head, ts_size)
    {
        return Err("AsyncioDebug offsets lie outside their structs".into());
    }
    Ok(Lists {
        ts_running_loop: ts_loop,
        ts_running_task: ts_task,
        ts_tasks_head: ts_head,
        interp_tasks_head: interp_head,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SliceMemory;

    const BASE: u64 = 0x10_0000;

    /// `_asyncio`'s module state laid out by hand (3.14): its registries are
    /// read only when the state's types and the containers' types are
    /// right; a corrupt one gives a note and what else could be read.
    #[test]
    fn module_state_registries_are_checked() {
        let pl = crate::cpython_layouts::for_version(3, 14).unwrap().clone();
        let l = &crate::cpython_layouts::asyncio::V3_14;
        let ms = l.module_state.unwrap();
        let o = &pl.object;
        let build = |future_name: &str, set_mask: u64| {
            let mut b = vec![0u8; 0x8000];
            let mut put =
                |at: u64, v: u64| b[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
            let names = [
                "type",
                "module",
                future_name,
                "_asyncio.Task",
                "WeakSet",
                "set",
            ];
            // Types at 0x1000 + 0x200 * i, named by strings at 0x100 + 0x40 * i;
            // the first is `type` itself.
            for (i, _) in names.iter().enumerate() {
                let t = 0x1000 + 0x200 * i as u64;
                put(t + o.ob_type, BASE + 0x1000);
                put(t + o.tp_name, BASE + 0x100 + 0x40 * i as u64);
            }
            let ty = |i: u64| BASE + 0x1000 + 0x200 * i;
            put(0x2000 + o.ob_type, ty(1)); // the module
            put(0x2000 + ms.md_state, BASE + 0x3000);
            put(0x3000 + ms.future_type, ty(2));
            put(0x3000 + ms.task_type, ty(3));
            put(0x3000 + ms.tasks, BASE + 0x4000);
            put(0x3000 + ms.eager_tasks, BASE + 0x5000);
            put(0x4000 + o.ob_type, ty(4)); // a WeakSet without a readable dict
            put(0x5000 + o.ob_type, ty(5)); // the eager set: two members
            put(0x5000 + o.set_mask, set_mask);
            put(0x5000 + o.set_table, BASE + 0x6000);
            put(0x6000 + o.set_entry_key, BASE + 0x7000);
            put(0x6000 + o.set_entry_size + o.set_entry_key, BASE + 0x7100);
            for (i, n) in names.iter().enumerate() {
                let at = 0x100 + 0x40 * i;
                b[at..at + n.len()].copy_from_slice(n.as_bytes());
            }
            let mut mem = SliceMemory::new();
            mem.add(BASE, b);
            mem
        };
        let read = |mem: &SliceMemory| {
            let cache = PageCache::new(mem);
            let objr = ObjReader::new(&cache, &pl);
            let mut r = AsyncioReader::new(3, 14);
            let (found, full) = r.module_state_tasks(&cache, &objr, l, &ms, BASE + 0x2000, 100);
            (found, full, r.notes)
        };
        let (found, full, notes) = read(&build("_asyncio.Future", 3));
        assert_eq!(found, vec![BASE + 0x7000, BASE + 0x7100]);
        assert!(!full);
        assert!(
            notes.iter().any(|n| n.contains("Python-level tasks")),
            "{notes:?}"
        );
        // A corrupt table size: a note, nothing read, no panic.
        let (found, _, notes) = read(&build("_asyncio.Future", u64::MAX / 2));
        assert!(found.is_empty());
        assert!(notes.iter().any(|n| n.contains("eager")), "{notes:?}");
        // Not the state the table describes: nothing in it is read.
        let (found, _, notes) = read(&build("something.Else", 3));
        assert!(found.is_empty());
        assert!(
            notes.iter().any(|n| n.contains("unlike the table")),
            "{notes:?}"
        );
    }

    #[test]
    fn asyncio_debug_is_checked() {
        let l = &crate::cpython_layouts::asyncio::V3_14;
        let ab = l.awaited_by.unwrap();
        // What sid's 3.14 carries.
        let good = [
            168, 136, 96, 108, 109, 128, 152, 225864, 10880, 936, 864, 872, 880,
        ];
        let lists = check_debug(l, &ab, &good).unwrap();
        assert_eq!(lists.ts_tasks_head, 880);
        let mut other_task = good;
        other_task[5] = 120;
        assert!(check_debug(l, &ab, &other_task).is_err());
        let mut outside = good;
        outside[12] = 936;
        assert!(check_debug(l, &ab, &outside).is_err());
    }
}
