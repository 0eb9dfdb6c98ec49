//! asyncio tasks: which task awaits what, read from the target's memory.
//!
//! Where the tasks are:
//! - `asyncio.tasks._all_tasks` (≤3.11) or `_scheduled_tasks` (3.12+),
//!   WeakSets, and `_eager_tasks` (3.12+), a set: found through
//!   `sys.modules`, for C and Python tasks alike;
//! - 3.14+: C tasks are on per-thread lists (`tstate->asyncio_tasks_head`,
//!   and the interpreter's for threads that ended), whose offsets come from
//!   the `_asyncio` module's `AsyncioDebug` section, checked against the table.
//!
//! Each task is a C `TaskObj` (offsets from [`crate::cpython_layouts::asyncio`])
//! or a Python-level `Task` (attributes in its `__dict__`), told apart by the
//! type's MRO. Who awaits whom: a task awaiting a task has it as its
//! `fut_waiter`; 3.14's tasks record their awaiters (`task_awaited_by`);
//! before, a task's done-callbacks lead (through closures, bound methods,
//! `functools.partial`, instance dicts and deques, a bounded search) to the
//! future its awaiter waits on (`gather`, `shield`, `wait_for`,
//! `as_completed`) or to the `TaskGroup` whose `_parent_task` awaits it.
//!
//! Everything read is bounded; a racing target gives fewer tasks or
//! frames, never a panic or an unbounded walk.

use super::objects::ObjReader;
use super::pagecache::PageCache;
use super::reader::{Reader, ThreadSnapshot};
use crate::cpython_layouts::asyncio::{
    for_version, AsyncioLayout, GenFrame, ModuleState, StackTop, DEQUE_BLOCK_LEN, MEMBER_DEF_OFFSET,
};
use crate::elf;
use crate::memory::{le_u64, le_u8, Memory, MemoryExt};
use crate::stack::{Awaiting, Frame, LoopQueues, Task, TaskState, ThreadTasks};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Most tasks read from one process per snapshot.
pub(crate) const MAX_TASKS: usize = 1_000_000;
/// Default on (`dump` without `--async`): a registry larger than this is
/// not read, and the dump says so.
pub(crate) const AUTO_MAX_TASKS: usize = 100_000;
/// Longest coroutine chain followed (`await` nesting).
const MAX_CHAIN: usize = 256;
/// The reference search from a task's callbacks to its awaiter.
const SEARCH_DEPTH: u32 = 4;
const SEARCH_NODES: usize = 48;
/// Items looked at per container during that search.
const SEARCH_ITEMS: u64 = 16;
/// Most callbacks looked at per future.
const MAX_CALLBACKS: u64 = 64;
/// How often a missing `AsyncioDebug` section is looked for again.
const DEBUG_RESCAN: Duration = Duration::from_secs(1);

/// `record`/`top --async`: how long the tasks read by one sample, and who
/// awaits whom, serve the next ones, which then read only the running
/// tasks, the tasks awaiting them and those whose frames are on a thread's
/// stack. A sample whose running task is not among them reads all again.
const SAMPLE_CACHE_TTL: Duration = Duration::from_millis(250);

/// Most event loops whose queues are read per interpreter.
const MAX_LOOPS: usize = 64;
/// Most tasks taken from the loops' queues (those no registry lists).
const MAX_QUEUE_TASKS: usize = 4096;
/// Most handles of a loop's ready queue looked at.
const MAX_READY: u64 = 1 << 16;
/// A queue longer than this is no real one (a corrupt or racing object):
/// its length is not reported and its items are not read.
const QUEUE_LEN_SANE: u64 = 1 << 32;

/// `AsyncioDebug`: 13 `uint64_t` (3.14).
const DEBUG_WORDS: usize = 13;

#[derive(Debug, Clone, Copy)]
struct Lists {
    ts_running_loop: u64,
    ts_running_task: u64,
    ts_tasks_head: u64,
    interp_tasks_head: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    CTask,
    CFuture,
    /// A Python-level Task or Future (attributes in `__dict__`).
    PyTask,
    PyFuture,
    Other,
}

/// What one read of the tasks wants.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AsyncRead {
    /// Most tasks shown per thread (the rest are counted).
    pub(crate) limit: usize,
    /// Registries holding more tasks than this are not read.
    pub(crate) max_tasks: usize,
    /// Only the running tasks and their awaiters are wanted (`record`/`top
    /// --async`): the others' stacks are not read.
    pub(crate) running_only: bool,
}

#[derive(Clone)]
struct RawTask {
    addr: u64,
    loop_: u64,
    state: u8,
    log_tb: bool,
    cancelling: bool,
    name: u64,
    coro: u64,
    waiter: u64,
    callbacks: Vec<u64>,
    /// 3.14+: the awaiters the task recorded.
    awaited_by: Option<Vec<u64>>,
    /// Found through a handle in its loop's queues, not in a registry.
    via: Option<&'static str>,
}

/// The tasks of one interpreter as a sample read them (see `SAMPLE_CACHE_TTL`).
struct SampleCache {
    at: Instant,
    interp: u64,
    tasks: Vec<RawTask>,
    parents: Vec<Vec<usize>>,
    index: HashMap<u64, usize>,
    /// Coroutine frame (3.11+, inside the coroutine) → task.
    frames: HashMap<u64, usize>,
}

pub(crate) struct AsyncioReader {
    layout: Option<&'static AsyncioLayout>,
    sample_cache: Option<SampleCache>,
    lists: Option<Lists>,
    last_debug_scan: Option<Instant>,
    /// Said once: why some tasks cannot be read.
    pub(crate) notes: Vec<String>,
    kinds: HashMap<u64, Kind>,
    mro_names: HashMap<u64, Vec<String>>,
    slots: HashMap<(u64, &'static str), Option<u64>>,
    /// How long ago the target's moment was (a core: when it was written),
    /// in seconds: its loops' clock then read `monotonic() - age`.
    age: f64,
}

/// The search's findings, kept for one snapshot.
#[derive(Default)]
struct Memo {
    /// Callback → the tasks found from it.
    starts: HashMap<u64, Vec<usize>>,
    /// Object → (tasks it names, objects it refers to).
    nodes: HashMap<u64, (Vec<usize>, Vec<u64>)>,
}

/// A loop's timers: future → (deadline on the loop's clock, is a sleep).
type Timers = HashMap<u64, (f64, bool)>;

/// One event loop's queues as one snapshot read them.
struct LoopScan {
    queues: LoopQueues,
    timers: Timers,
    /// The tasks a queued handle's callback runs, and in which queue.
    runs: Vec<(u64, &'static str)>,
}

/// Result for one process: per thread index of the snapshot, its tasks.
pub(crate) type TasksByThread = HashMap<usize, ThreadTasks>;

impl AsyncioReader {
    pub(crate) fn new(major: u8, minor: u8) -> AsyncioReader {
        AsyncioReader {
            layout: for_version(major, minor),
            sample_cache: None,
            lists: None,
            last_debug_scan: None,
            notes: Vec::new(),
            kinds: HashMap::new(),
            mro_names: HashMap::new(),
            slots: HashMap::new(),
            age: 0.0,
        }
    }

    /// Deadlines counted from a moment `age` seconds ago (a core's), not
    /// from now.
    pub(crate) fn with_age(mut self, age: f64) -> AsyncioReader {
        self.age = age.max(0.0);
        self
    }

    /// The loops' clock at the target's moment.
    fn loop_now(&self) -> f64 {
        monotonic() - self.age
    }

    fn note(&mut self, s: String) {
        if !self.notes.contains(&s) && self.notes.len() < 16 {
            self.notes.push(s);
        }
    }

    /// Check `AsyncioDebug` (3.14+) in the sections `sections` finds (the
    /// command layer looks in the target's mapped files), at most once a second
    /// until one is found.
    fn find_lists(&mut self, mem: &dyn Memory, sections: &dyn Fn() -> Vec<(String, elf::Range)>) {
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

    /// Read the tasks of every event loop of the snapshot's threads.
    pub(crate) fn read(
        &mut self,
        reader: &mut Reader,
        mem: &PageCache,
        snaps: &[ThreadSnapshot],
        want: AsyncRead,
        sections: &dyn Fn() -> Vec<(String, elf::Range)>,
    ) -> TasksByThread {
        let pl = reader.process.layout.clone();
        let objr = ObjReader::new(mem, &pl);
        let mut out = HashMap::new();
        // `sys.modules[name]` of an interpreter.
        let sys_module = |interp: u64, name: &str| {
            mem.read_u64(interp.wrapping_add(pl.interp.modules))
                .ok()
                .filter(|m| *m != 0)
                .and_then(|m| objr.dict_get(m, name).ok().flatten())
        };
        // Only processes that imported asyncio are looked at further.
        let tasks_module = |interp: u64| {
            sys_module(interp, "asyncio.tasks")
                .and_then(|m| mem.read_u64(m.wrapping_add(pl.object.module_dict)).ok())
        };
        let mut modules: HashMap<u64, Option<u64>> = HashMap::new();
        for s in snaps {
            modules
                .entry(s.interp)
                .or_insert_with(|| tasks_module(s.interp));
        }
        if modules.values().all(|m| m.is_none()) {
            return out;
        }
        let Some(layout) = self.layout else {
            let v = &reader.process.version;
            self.note(format!(
                "asyncio tasks of Python {}.{} cannot be read: no asyncio offset table for it",
                v.major, v.minor
            ));
            return out;
        };
        self.find_lists(mem, sections);

        let mut interps: Vec<u64> = snaps.iter().map(|s| s.interp).collect();
        interps.dedup();
        let mut seen_interp = HashSet::new();
        for interp in interps {
            if !seen_interp.insert(interp) {
                continue;
            }
            let threads: Vec<usize> = (0..snaps.len())
                .filter(|i| snaps[*i].interp == interp)
                .collect();
            let mut addrs: Vec<u64> = Vec::new();
            let mut seen: HashSet<u64> = HashSet::new();
            let mut running: HashMap<u64, u64> = HashMap::new(); // loop → task
            let mut loop_thread: HashMap<u64, usize> = HashMap::new();
            let mut too_many = None;
            let mut add = |a: u64, addrs: &mut Vec<u64>| {
                if a != 0 && addrs.len() < want.max_tasks.min(MAX_TASKS) && seen.insert(a) {
                    addrs.push(a);
                }
            };
            // The Python-level registries.
            let Some(md) = modules.get(&interp).copied().flatten() else {
                continue;
            };
            // The C accelerator, unless blocked (`sys.modules["_asyncio"] = None`):
            // looked up once the loop is known not to be idle.
            let c_module;
            let cached;
            {
                let items = objr.dict_items(md, 1 << 16).unwrap_or_default();
                let named = |want_name: &str| -> Option<u64> {
                    items.iter().find_map(|(k, v)| {
                        matches!(objr.string(*k, 64), Ok((s, false)) if s == want_name)
                            .then_some(*v)
                    })
                };
                // Attributing samples needs a running task: without one
                // (an idle loop, most samples) nothing else is read.
                if want.running_only {
                    let idle = match named("_current_tasks") {
                        Some(cur) => objr.dict_items(cur, 4096).unwrap_or_default().is_empty(),
                        None => true,
                    };
                    let idle_lists = match self.lists {
                        Some(lists) => threads.iter().all(|&i| {
                            mem.read_u64(snaps[i].tstate.wrapping_add(lists.ts_running_task))
                                .map_or(true, |t| t == 0)
                        }),
                        None => true,
                    };
                    if idle && idle_lists {
                        continue;
                    }
                }
                c_module = sys_module(interp, "_asyncio")
                    .filter(|m| objr.type_name(*m).is_ok_and(|t| t == "module"));
                // The running tasks first: are they among an earlier
                // sample's tasks (`SAMPLE_CACHE_TTL`)?
                if let Some(cur) = named("_current_tasks") {
                    for (lp, t) in objr.dict_items(cur, 4096).unwrap_or_default() {
                        running.insert(lp, t);
                    }
                }
                if let (Some(lists), true) = (self.lists, layout.awaited_by.is_some()) {
                    for &i in &threads {
                        let ts = snaps[i].tstate;
                        let lp = mem
                            .read_u64(ts.wrapping_add(lists.ts_running_loop))
                            .unwrap_or(0);
                        let rt = mem
                            .read_u64(ts.wrapping_add(lists.ts_running_task))
                            .unwrap_or(0);
                        if lp != 0 && rt != 0 {
                            running.insert(lp, rt);
                        }
                    }
                }
                cached = want.running_only
                    && self.sample_cache.as_ref().is_some_and(|c| {
                        c.interp == interp
                            && c.at.elapsed() < SAMPLE_CACHE_TTL
                            && running.values().all(|t| c.index.contains_key(t))
                    });
                let limit = want.max_tasks.min(MAX_TASKS) as u64 + 1;
                for ws in ["_all_tasks", "_scheduled_tasks"] {
                    if cached {
                        break;
                    }
                    let Some(w) = named(ws) else { continue };
                    match weakset_members(mem, &objr, layout, w, limit) {
                        Ok(objs) => {
                            if objs.len() as u64 >= limit {
                                too_many = Some(objs.len());
                            }
                            for o in objs {
                                add(o, &mut addrs);
                            }
                        }
                        Err(e) => self.note(format!("asyncio.tasks.{ws} unreadable: {e}")),
                    }
                }
                if let Some(eager) = named("_eager_tasks").filter(|_| !cached) {
                    for t in objr.set_items(eager, 1 << 16).unwrap_or_default() {
                        add(t, &mut addrs);
                    }
                }
                // 3.14+: the tasks that are no C tasks, in `_asyncio`'s state.
                if let (Some(ms), Some(module), false) = (layout.module_state, c_module, cached) {
                    let (objs, full) =
                        self.module_state_tasks(mem, &objr, layout, &ms, module, limit);
                    if full {
                        too_many = Some(objs.len());
                    }
                    for o in objs {
                        add(o, &mut addrs);
                    }
                }
                if let Some(cur) = named("_current_tasks") {
                    for (lp, t) in objr.dict_items(cur, 4096).unwrap_or_default() {
                        running.insert(lp, t);
                        add(t, &mut addrs);
                    }
                }
            }
            // 3.14+: the per-thread lists.
            if let (Some(lists), Some(ab)) = (self.lists, layout.awaited_by) {
                let mut heads: Vec<(u64, Option<usize>)> = threads
                    .iter()
                    .map(|&i| (snaps[i].tstate.wrapping_add(lists.ts_tasks_head), Some(i)))
                    .collect();
                heads.push((interp.wrapping_add(lists.interp_tasks_head), None));
                for (head, thread) in heads {
                    let mut node = if cached {
                        0
                    } else {
                        mem.read_u64(head).unwrap_or(0)
                    };
                    let mut steps = 0;
                    while node != 0 && node != head && steps < want.max_tasks.min(MAX_TASKS) {
                        steps += 1;
                        let task = node.wrapping_sub(ab.node);
                        add(task, &mut addrs);
                        node = mem.read_u64(node).unwrap_or(0);
                    }
                    if steps >= want.max_tasks.min(MAX_TASKS) {
                        too_many = Some(steps);
                    }
                    if let Some(i) = thread {
                        let ts = snaps[i].tstate;
                        let lp = mem
                            .read_u64(ts.wrapping_add(lists.ts_running_loop))
                            .unwrap_or(0);
                        let rt = mem
                            .read_u64(ts.wrapping_add(lists.ts_running_task))
                            .unwrap_or(0);
                        if lp != 0 {
                            loop_thread.insert(lp, i);
                            if rt != 0 {
                                running.insert(lp, rt);
                                add(rt, &mut addrs);
                            }
                        }
                    }
                }
            } else if layout.awaited_by.is_some() && c_module.is_some() {
                // (Without `_asyncio`, the C accelerator blocked, every
                // task is a Python one, in the registries.)
                self.note(
                    "no AsyncioDebug section found in the target's _asyncio module: only the \
                     tasks in asyncio.tasks' registries are shown"
                        .into(),
                );
            }
            if let Some(n) = too_many {
                self.note(format!(
                    "more than {n} asyncio tasks: not all were read (--async reads up to {MAX_TASKS})"
                ));
            }
            if addrs.is_empty() {
                continue;
            }
            let mut scans: HashMap<u64, LoopScan> = HashMap::new();
            let (tasks, parents) = if cached {
                self.tasks_from_sample_cache(&objr, layout, &running, snaps, &threads)
            } else {
                // One batched read for every task's struct.
                mem.prefetch(addrs.iter().map(|a| (*a, layout.task_size as usize)));
                let mut tasks = self.read_tasks(&objr, layout, &addrs);
                if !want.running_only {
                    let room = want.max_tasks.min(MAX_TASKS).saturating_sub(tasks.len());
                    let queued =
                        self.queued_tasks(&objr, layout, &tasks, &running, &mut scans, room);
                    tasks.extend(queued);
                }
                let index: HashMap<u64, usize> =
                    tasks.iter().enumerate().map(|(k, t)| (t.addr, k)).collect();
                let parents = self.parents(&objr, layout, &tasks, &index);
                if want.running_only {
                    let frames = match layout.gen_frame {
                        GenFrame::Embedded(o) => tasks
                            .iter()
                            .enumerate()
                            .filter(|(_, t)| t.coro != 0)
                            .map(|(k, t)| (t.coro.wrapping_add(o), k))
                            .collect(),
                        GenFrame::Pointer(_) => HashMap::new(),
                    };
                    self.sample_cache = Some(SampleCache {
                        at: Instant::now(),
                        interp,
                        tasks: tasks.clone(),
                        parents: parents.clone(),
                        index,
                        frames,
                    });
                }
                (tasks, parents)
            };
            if tasks.is_empty() {
                continue;
            }
            // Which thread runs each loop.
            let main_thread = *threads.last().unwrap_or(&0);
            let running_tasks: HashSet<u64> = running.values().copied().collect();
            let by_addr: HashMap<u64, &RawTask> = tasks.iter().map(|t| (t.addr, t)).collect();
            // A loop without `_thread_id` (uvloop's) that runs a task: the
            // thread whose stack holds that task's coroutine frame.
            let running_on = |lp: u64| -> Option<usize> {
                let t = by_addr.get(running.get(&lp)?)?;
                let frame = match layout.gen_frame {
                    GenFrame::Pointer(o) => mem.read_u64(t.coro.wrapping_add(o)).ok()?,
                    GenFrame::Embedded(o) => t.coro.wrapping_add(o),
                };
                threads
                    .iter()
                    .copied()
                    .find(|&i| frame != 0 && snaps[i].frame_index(frame).is_some())
            };
            let mut by_thread: HashMap<usize, Vec<usize>> = HashMap::new();
            for (k, t) in tasks.iter().enumerate() {
                let th = match loop_thread.get(&t.loop_) {
                    Some(th) => *th,
                    None => {
                        let th = self
                            .loop_thread(&objr, t.loop_, snaps, &threads)
                            .or_else(|| running_on(t.loop_))
                            .unwrap_or(main_thread);
                        loop_thread.insert(t.loop_, th);
                        th
                    }
                };
                by_thread.entry(th).or_default().push(k);
            }
            // Each loop's queues under the thread that runs it.
            let mut queues: HashMap<usize, Vec<LoopQueues>> = HashMap::new();
            let mut sleeps: HashMap<u64, Option<Timers>> = HashMap::new();
            let mut scanned: Vec<(u64, LoopScan)> = scans.into_iter().collect();
            scanned.sort_by_key(|(lp, _)| *lp);
            for (lp, scan) in scanned {
                if let Some(&th) = loop_thread.get(&lp) {
                    queues.entry(th).or_default().push(scan.queues);
                }
                sleeps.insert(lp, Some(scan.timers));
            }
            for (th, ks) in by_thread {
                let tt = self.thread_tasks(
                    reader,
                    &objr,
                    layout,
                    &tasks,
                    &ks,
                    &parents,
                    &running_tasks,
                    &snaps[th],
                    &mut sleeps,
                    want.limit,
                    want.running_only,
                    queues.remove(&th).unwrap_or_default(),
                );
                out.insert(th, tt);
            }
        }
        out
    }

    /// 3.14+: the members of `_asyncio`'s `non_asyncio_tasks` (a WeakSet)
    /// and `non_asyncio_eager_tasks` (a set), where Python-level Task
    /// implementations register through `asyncio._register_task`. The
    /// module, its state and both containers are checked by type before
    /// anything in them is read; what fails is noted, and the rest is kept.
    /// Also says whether `limit` was reached.
    fn module_state_tasks(
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

    /// From an earlier sample's tasks: the running ones, those whose
    /// coroutine frames are on a thread's stack (eager tasks in their first
    /// step) and their awaiters, each read again; who awaits whom as that
    /// sample found it.
    fn tasks_from_sample_cache(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        running: &HashMap<u64, u64>,
        snaps: &[ThreadSnapshot],
        threads: &[usize],
    ) -> (Vec<RawTask>, Vec<Vec<usize>>) {
        let Some(c) = self.sample_cache.as_ref() else {
            return (Vec::new(), Vec::new());
        };
        let mut queue: Vec<usize> = running
            .values()
            .filter_map(|a| c.index.get(a).copied())
            .collect();
        for &i in threads {
            queue.extend(
                snaps[i]
                    .stack
                    .frames
                    .iter()
                    .filter_map(|f| c.frames.get(&f.mark?.addr)),
            );
        }
        let mut picked: Vec<usize> = Vec::new();
        let mut inset: HashSet<usize> = HashSet::new();
        while let Some(k) = queue.pop() {
            if picked.len() >= MAX_CHAIN * 4 {
                break;
            }
            if k < c.tasks.len() && inset.insert(k) {
                picked.push(k);
                queue.extend(c.parents.get(k).into_iter().flatten().copied());
            }
        }
        let addrs: Vec<u64> = picked.iter().map(|k| c.tasks[*k].addr).collect();
        let awaiters: HashMap<u64, Vec<u64>> = picked
            .iter()
            .map(|&k| {
                let ps = c.parents[k].iter().map(|p| c.tasks[*p].addr).collect();
                (c.tasks[k].addr, ps)
            })
            .collect();
        let tasks = self.read_tasks(objr, l, &addrs);
        let index: HashMap<u64, usize> =
            tasks.iter().enumerate().map(|(k, t)| (t.addr, k)).collect();
        let parents = tasks
            .iter()
            .map(|t| {
                awaiters
                    .get(&t.addr)
                    .into_iter()
                    .flatten()
                    .filter_map(|a| index.get(a).copied())
                    .collect()
            })
            .collect();
        (tasks, parents)
    }

    /// The type's MRO as type names, cached per type.
    fn mro(&mut self, objr: &ObjReader, ty: u64, l: &AsyncioLayout) -> Vec<String> {
        if let Some(v) = self.mro_names.get(&ty) {
            return v.clone();
        }
        let mut names = Vec::new();
        if let Ok(mro) = objr.mem.read_u64(ty.wrapping_add(l.type_mro)) {
            if let Ok((types, _)) = objr.tuple_items(mro, 32) {
                for t in types {
                    let n = objr
                        .mem
                        .read_u64(t.wrapping_add(objr.layout.object.tp_name))
                        .and_then(|p| objr.c_string(p, 128));
                    if let Ok(n) = n {
                        names.push(n);
                    }
                }
            }
        }
        if self.mro_names.len() > 4096 {
            self.mro_names.clear();
        }
        self.mro_names.insert(ty, names.clone());
        names
    }

    fn kind(&mut self, objr: &ObjReader, obj: u64, l: &AsyncioLayout) -> Kind {
        let Ok(ty) = objr.type_of(obj) else {
            return Kind::Other;
        };
        if let Some(k) = self.kinds.get(&ty) {
            return *k;
        }
        let mro = self.mro(objr, ty, l);
        let has = |n: &str| mro.iter().any(|m| m == n);
        let k = if has("_asyncio.Task") {
            Kind::CTask
        } else if has("_asyncio.Future") {
            Kind::CFuture
        } else if has("Task") && objr.instance_attr(obj, "_coro").is_ok_and(|v| v.is_some()) {
            Kind::PyTask
        } else if has("Future") && py_attr(objr, l, obj, "_state").is_some() {
            // A pending Python future's `_state` is its class's default.
            Kind::PyFuture
        } else {
            Kind::Other
        };
        if self.kinds.len() > 4096 {
            self.kinds.clear();
        }
        self.kinds.insert(ty, k);
        k
    }

    fn read_tasks(&mut self, objr: &ObjReader, l: &AsyncioLayout, addrs: &[u64]) -> Vec<RawTask> {
        let mut out = Vec::with_capacity(addrs.len());
        let mut buf = vec![0u8; l.task_size as usize];
        for &a in addrs {
            match self.kind(objr, a, l) {
                Kind::CTask => {
                    if objr.mem.read(a, &mut buf).is_err() {
                        continue;
                    }
                    let flag = |f: crate::cpython_layouts::asyncio::Flag| {
                        le_u8(&buf, f.offset) & f.mask != 0
                    };
                    let cancels = l
                        .task_num_cancels_requested
                        .map_or(0, |o| crate::memory::le_u32(&buf, o));
                    let mut callbacks = Vec::new();
                    let cb0 = le_u64(&buf, l.fut_callback0);
                    if cb0 != 0 {
                        callbacks.push(cb0);
                    }
                    let list = le_u64(&buf, l.fut_callbacks);
                    if list != 0 {
                        callbacks.extend(callback_list(objr, list));
                    }
                    let awaited_by = l.awaited_by.map(|ab| {
                        let v = le_u64(&buf, ab.awaited_by);
                        if v == 0 {
                            Vec::new()
                        } else if le_u8(&buf, ab.is_set) != 0 {
                            objr.set_items(v, 4096).unwrap_or_default()
                        } else {
                            vec![v]
                        }
                    });
                    out.push(RawTask {
                        addr: a,
                        loop_: le_u64(&buf, l.fut_loop),
                        state: crate::memory::le_u32(&buf, l.fut_state).min(255) as u8,
                        log_tb: flag(l.fut_log_tb),
                        cancelling: cancels > 0 || flag(l.task_must_cancel),
                        name: l.task_name.map_or(0, |o| le_u64(&buf, o)),
                        coro: le_u64(&buf, l.task_coro),
                        waiter: le_u64(&buf, l.task_fut_waiter),
                        callbacks,
                        awaited_by,
                        via: None,
                    });
                }
                Kind::PyTask => {
                    let attr = |n: &str| py_attr(objr, l, a, n).unwrap_or(0);
                    let state = match py_state(objr, attr("_state")) {
                        Some(s) => s,
                        None => continue,
                    };
                    let truthy = |v: u64| v != 0 && objr.int_u64(v).is_ok_and(|n| n != 0);
                    let none = |v: u64| v != 0 && objr.type_name(v).is_ok_and(|t| t == "NoneType");
                    let waiter = attr("_fut_waiter");
                    let cbs = attr("_callbacks");
                    out.push(RawTask {
                        addr: a,
                        loop_: attr("_loop"),
                        state,
                        // `self.__log_traceback`, name-mangled by Future.
                        log_tb: truthy(attr("_Future__log_traceback")),
                        cancelling: truthy(attr("_must_cancel"))
                            || truthy(attr("_num_cancels_requested")),
                        name: attr("_name"),
                        coro: attr("_coro"),
                        waiter: if none(waiter) { 0 } else { waiter },
                        callbacks: if cbs != 0 && !none(cbs) {
                            callback_list(objr, cbs)
                        } else {
                            Vec::new()
                        },
                        awaited_by: None,
                        via: None,
                    });
                }
                _ => {}
            }
        }
        out
    }

    /// The thread whose loop this is: `loop._thread_id` (Python loops), else
    /// the thread whose stack shows one of its running coroutines.
    fn loop_thread(
        &mut self,
        objr: &ObjReader,
        lp: u64,
        snaps: &[ThreadSnapshot],
        threads: &[usize],
    ) -> Option<usize> {
        let id = objr.instance_attr(lp, "_thread_id").ok().flatten()?;
        let ident = objr.int_u64(id).ok()?;
        threads
            .iter()
            .copied()
            .find(|&i| snaps[i].stack.thread_id == ident)
    }

    /// Each task's awaiters (indexes into `tasks`).
    fn parents(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        tasks: &[RawTask],
        index: &HashMap<u64, usize>,
    ) -> Vec<Vec<usize>> {
        let mut waiting_on: HashMap<u64, Vec<usize>> = HashMap::new();
        for (k, t) in tasks.iter().enumerate() {
            if t.waiter != 0 {
                waiting_on.entry(t.waiter).or_default().push(k);
            }
        }
        let mut out = vec![Vec::new(); tasks.len()];
        let mut memo = Memo::default();
        for (k, t) in tasks.iter().enumerate() {
            let mut ps: Vec<usize> = Vec::new();
            let push = |p: usize, ps: &mut Vec<usize>| {
                if p != k && !ps.contains(&p) {
                    ps.push(p);
                }
            };
            if let Some(ab) = &t.awaited_by {
                // 3.14+: the task's own record.
                for a in ab {
                    if let Some(&p) = index.get(a) {
                        push(p, &mut ps);
                    }
                }
            } else {
                if let Some(ws) = waiting_on.get(&t.addr) {
                    for &p in ws {
                        push(p, &mut ps);
                    }
                }
                if !t.callbacks.is_empty() {
                    for p in self.search(objr, l, &t.callbacks, index, &waiting_on, &mut memo) {
                        push(p, &mut ps);
                    }
                }
            }
            out[k] = ps;
        }
        out
    }

    /// From a task's done-callbacks, the tasks that wait for it: those whose
    /// awaited future is reachable, and a `TaskGroup`'s parent task. Each
    /// callback's result is kept for the snapshot (a gather's children share
    /// one callback), and each object is looked into once.
    fn search(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        callbacks: &[u64],
        index: &HashMap<u64, usize>,
        waiting_on: &HashMap<u64, Vec<usize>>,
        memo: &mut Memo,
    ) -> Vec<usize> {
        let mut found = Vec::new();
        for &cb in callbacks {
            if let Some(f) = memo.starts.get(&cb) {
                found.extend(f.iter().copied());
                continue;
            }
            let mut from_cb = Vec::new();
            let mut seen: HashSet<u64> = HashSet::new();
            let mut queue: Vec<(u64, u32)> = vec![(cb, 0)];
            let mut qi = 0;
            while qi < queue.len() && seen.len() < SEARCH_NODES {
                let (obj, depth) = queue[qi];
                qi += 1;
                if obj == 0 || !seen.insert(obj) {
                    continue;
                }
                if let Some(ws) = waiting_on.get(&obj) {
                    from_cb.extend(ws.iter().copied());
                }
                if depth >= SEARCH_DEPTH {
                    continue;
                }
                if !memo.nodes.contains_key(&obj) {
                    let node = self.look_into(objr, l, obj, index);
                    if memo.nodes.len() < 1 << 20 {
                        memo.nodes.insert(obj, node);
                    } else {
                        break;
                    }
                }
                let (direct, next) = &memo.nodes[&obj];
                from_cb.extend(direct.iter().copied());
                for n in next {
                    if queue.len() < SEARCH_NODES * 4 {
                        queue.push((*n, depth + 1));
                    }
                }
            }
            found.extend(from_cb.iter().copied());
            memo.starts.insert(cb, from_cb);
        }
        found
    }

    /// What one object of the search leads to: tasks it names directly (a
    /// wake-up callback's task, a TaskGroup's parent) and the objects it refers to.
    fn look_into(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        obj: u64,
        index: &HashMap<u64, usize>,
    ) -> (Vec<usize>, Vec<u64>) {
        let mem = objr.mem;
        let mut found = Vec::new();
        let mut next: Vec<u64> = Vec::new();
        let Ok(tn) = objr.type_name(obj) else {
            return (found, next);
        };
        match tn.as_str() {
            "TaskWakeupMethWrapper" | "builtin_function_or_method" => {
                if let Ok(t) = mem.read_u64(obj.wrapping_add(l.wakeup_task)) {
                    if let Some(&p) = index.get(&t) {
                        found.push(p);
                    }
                }
            }
            "method" => next.extend(mem.read_u64(obj.wrapping_add(l.method_self)).ok()),
            "function" => {
                if let Ok(cl) = mem.read_u64(obj.wrapping_add(l.func_closure)) {
                    if cl != 0 {
                        for cell in objr.tuple_items(cl, SEARCH_ITEMS).unwrap_or_default().0 {
                            next.extend(
                                mem.read_u64(cell.wrapping_add(objr.layout.object.cell_ref))
                                    .ok(),
                            );
                        }
                    }
                }
            }
            "functools.partial" => {
                next.extend(mem.read_u64(obj.wrapping_add(l.partial_fn)).ok());
                if let Ok(args) = mem.read_u64(obj.wrapping_add(l.partial_args)) {
                    next.extend(objr.tuple_items(args, SEARCH_ITEMS).unwrap_or_default().0);
                }
            }
            "collections.deque" => next.extend(deque_items(objr, l, obj, SEARCH_ITEMS)),
            "list" => next.extend(objr.list_items(obj, SEARCH_ITEMS).unwrap_or_default().0),
            "tuple" => next.extend(objr.tuple_items(obj, SEARCH_ITEMS).unwrap_or_default().0),
            // Plain values lead nowhere.
            "int" | "bool" | "float" | "str" | "bytes" | "NoneType" | "dict" | "set"
            | "frozenset" | "type" | "module" | "code" | "cell" => {}
            // A task is an end (its own awaiters are other edges); a
            // future leads on through its callbacks (a gather of gathers).
            _ if self.kind(objr, obj, l) != Kind::Other => {
                if let Some(cbs) = self.future_callbacks(objr, l, obj) {
                    next.extend(cbs);
                }
            }
            _ => {
                // An instance: a TaskGroup names its parent task; other
                // objects (a queue, an iterator) lead on by their attributes.
                let attrs = instance_attrs(
                    objr,
                    obj,
                    &[
                        "_parent_task",
                        "_on_completed_fut",
                        "_done",
                        "_getters",
                        "_waiters",
                        "outer",
                    ],
                );
                for (name, v) in attrs {
                    if name == "_parent_task" {
                        if let Some(&p) = index.get(&v) {
                            found.push(p);
                        }
                    } else {
                        next.push(v);
                    }
                }
            }
        }
        (found, next)
    }

    /// The done-callbacks of a (non-task) future.
    fn future_callbacks(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        f: u64,
    ) -> Option<Vec<u64>> {
        match self.kind(objr, f, l) {
            Kind::CFuture => {
                let mut out = Vec::new();
                let cb0 = objr.mem.read_u64(f.wrapping_add(l.fut_callback0)).ok()?;
                if cb0 != 0 {
                    out.push(cb0);
                }
                let list = objr.mem.read_u64(f.wrapping_add(l.fut_callbacks)).ok()?;
                if list != 0 {
                    out.extend(callback_list(objr, list));
                }
                Some(out)
            }
            Kind::PyFuture => {
                let list = objr.instance_attr(f, "_callbacks").ok()??;
                Some(callback_list(objr, list))
            }
            _ => None,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn thread_tasks(
        &mut self,
        reader: &mut Reader,
        objr: &ObjReader,
        l: &AsyncioLayout,
        tasks: &[RawTask],
        ks: &[usize],
        parents: &[Vec<usize>],
        running: &HashSet<u64>,
        snap: &ThreadSnapshot,
        sleeps: &mut HashMap<u64, Option<Timers>>,
        limit: usize,
        running_only: bool,
        loops: Vec<LoopQueues>,
    ) -> ThreadTasks {
        // Tasks whose coroutine frame is on this thread's stack (3.11+, where
        // the frame sits inside the coroutine): the current task and, with
        // eager tasks, the tasks still in their first step around it, by
        // their place on the stack, innermost first.
        let mut stack_pos: HashMap<usize, usize> = HashMap::new();
        let mut task_frames: HashSet<u64> = HashSet::new();
        if let GenFrame::Embedded(o) = l.gen_frame {
            let at: HashMap<u64, usize> = snap
                .stack
                .frames
                .iter()
                .enumerate()
                .filter_map(|(i, f)| Some((f.mark?.addr, i)))
                .collect();
            for &k in ks {
                let f = tasks[k].coro.wrapping_add(o);
                if let Some(&i) = at.get(&f).filter(|_| tasks[k].coro != 0) {
                    stack_pos.insert(k, i);
                    task_frames.insert(f);
                }
            }
        }
        // The running tasks (innermost first) and their awaiters first,
        // then the rest by address; the forest is drawn from these.
        let mut order: Vec<usize> = Vec::with_capacity(ks.len());
        let mut placed: HashSet<usize> = HashSet::new();
        let mut sorted: Vec<usize> = ks.to_vec();
        sorted.sort_by_key(|k| tasks[*k].addr);
        let mut runners: Vec<usize> = sorted
            .iter()
            .copied()
            .filter(|k| running.contains(&tasks[*k].addr) || stack_pos.contains_key(k))
            .collect();
        runners.sort_by_key(|k| stack_pos.get(k).copied().unwrap_or(usize::MAX));
        for k in runners {
            if placed.insert(k) {
                order.push(k);
                let mut i = order.len() - 1;
                while i < order.len() && order.len() < ks.len() {
                    for &p in &parents[order[i]] {
                        if placed.insert(p) {
                            order.push(p);
                        }
                    }
                    i += 1;
                }
            }
        }
        let chain_len = order.len();
        order.extend(sorted.into_iter().filter(|k| !placed.contains(k)));
        let take = if running_only { chain_len } else { limit };
        let shown: Vec<usize> = order.iter().copied().take(take).collect();
        let left_out = order.len().saturating_sub(shown.len()) as u64;
        let mut out = Vec::with_capacity(shown.len());
        for k in shown {
            let t = &tasks[k];
            let (frames, on_stack, first_locals) =
                self.chain(reader, objr, l, t.coro, snap, &task_frames);
            let state = match t.state {
                1 if t.log_tb => TaskState::DoneNotRetrieved,
                1 => TaskState::Cancelled,
                2 if t.log_tb => TaskState::DoneNotRetrieved,
                2 => TaskState::Done,
                _ if running.contains(&t.addr) || on_stack => TaskState::Running,
                _ if t.cancelling => TaskState::Cancelling,
                _ => TaskState::Pending,
            };
            let awaiting = if t.waiter != 0 && t.state == 0 {
                Some(self.awaiting(objr, l, t, &first_locals, sleeps))
            } else {
                None
            };
            // 3.12+ C tasks name themselves lazily: a counter (an int)
            // until asked. An int read as a string can pass for one (its
            // size and digits where a string's length and state are), so
            // the type decides which it is.
            let name = match objr.type_name(t.name).as_deref() {
                Ok("int") => objr.int_repr(t.name).map(|n| format!("Task-{n}")),
                _ => objr.string(t.name, 256).map(|(s, _)| s),
            }
            .unwrap_or_else(|_| format!("Task-0x{:x}", t.addr));
            out.push(Task {
                id: t.addr,
                name,
                state,
                awaited_by: parents[k].iter().map(|p| tasks[*p].addr).collect(),
                awaiting,
                frames,
                found_in: t.via,
            });
        }
        ThreadTasks {
            tasks: out,
            tasks_left_out: left_out,
            loops,
            ..Default::default()
        }
    }

    /// A task's coroutine stack, innermost first, following what each
    /// suspended coroutine awaits; whether it is running on the thread (its
    /// frames then come from the thread's stack, up to the coroutine frame
    /// of the next task inside it, one of `task_frames`: an eager task's
    /// first step runs inside its creator's); the innermost frame's first
    /// local (`self` of `Queue.get`, `Lock.acquire`...).
    fn chain(
        &mut self,
        reader: &mut Reader,
        objr: &ObjReader,
        l: &AsyncioLayout,
        coro: u64,
        snap: &ThreadSnapshot,
        task_frames: &HashSet<u64>,
    ) -> (Vec<Frame>, bool, Vec<u64>) {
        let mem = objr.mem;
        let fl = reader.process.layout.frame.clone();
        let mut frames: Vec<Frame> = Vec::new(); // outermost first
        let mut obj = coro;
        let mut seen = HashSet::new();
        let mut first_locals = Vec::new();
        while obj != 0 && frames.len() < MAX_CHAIN && seen.insert(obj) {
            let Ok(tn) = objr.type_name(obj) else { break };
            match tn.as_str() {
                "coroutine" | "generator" | "async_generator" => {}
                "async_generator_asend" | "async_generator_athrow" => {
                    obj = mem.read_u64(obj.wrapping_add(l.asend_gen)).unwrap_or(0);
                    continue;
                }
                _ => break,
            }
            let frame = match l.gen_frame {
                GenFrame::Pointer(o) => mem.read_u64(obj.wrapping_add(o)).unwrap_or(0),
                GenFrame::Embedded(o) => {
                    let finished = l.gen_frame_state.is_some_and(|s| {
                        mem.read_u8(obj.wrapping_add(s.offset))
                            .map_or(true, |v| (v as i8) >= s.finished_from)
                    });
                    if finished {
                        0
                    } else {
                        obj.wrapping_add(o)
                    }
                }
            };
            if frame == 0 {
                break;
            }
            if let Some(i) = snap.frame_index(frame) {
                // Running: the rest is on the thread's stack, down to the
                // task running inside this one, if any.
                let start = snap.stack.frames[..i]
                    .iter()
                    .rposition(|f| f.mark.is_some_and(|m| task_frames.contains(&m.addr)))
                    .map_or(0, |j| j + 1);
                let mut inner: Vec<Frame> = snap.stack.frames[start..=i].to_vec();
                inner.retain(|f| f.kind == crate::stack::FrameKind::Python);
                inner.reverse();
                frames.extend(inner);
                frames.reverse();
                return (frames, true, Vec::new());
            }
            let Some((f, nslots)) = reader.frame_at(mem, frame) else {
                break;
            };
            frames.push(f);
            first_locals.push(
                mem.read_u64(frame.wrapping_add(fl.localsplus))
                    .map(|v| v & !fl.pointer_tag_bits)
                    .unwrap_or(0),
            );
            let locals_end = frame.wrapping_add(fl.localsplus + nslots * 8);
            let top = match l.stack_top {
                StackTop::Pointer { at, below } => {
                    let p = mem.read_u64(frame.wrapping_add(at)).unwrap_or(0);
                    let bottom = locals_end.wrapping_add(below.saturating_sub(1) * 8);
                    (p > bottom && p - bottom <= 1 << 16).then(|| p - below * 8)
                }
                StackTop::BaseDepth { base, depth } => {
                    let b = mem.read_u64(frame.wrapping_add(base)).unwrap_or(0);
                    let d = mem.read_u32(frame.wrapping_add(depth)).unwrap_or(0) as u64;
                    (b != 0 && (1..4096).contains(&d)).then(|| b + (d - 1) * 8)
                }
                StackTop::LocalsIndex(o) => {
                    let n = mem.read_u32(frame.wrapping_add(o)).unwrap_or(0) as u64;
                    (n > nslots && n < nslots + 4096)
                        .then(|| frame.wrapping_add(fl.localsplus + (n - 1) * 8))
                }
            };
            obj = top
                .and_then(|a| mem.read_u64(a).ok())
                .map_or(0, |v| v & !fl.pointer_tag_bits);
        }
        frames.reverse();
        first_locals.reverse();
        (frames, false, first_locals)
    }

    fn awaiting(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        t: &RawTask,
        first_locals: &[u64],
        sleeps: &mut HashMap<u64, Option<Timers>>,
    ) -> Awaiting {
        let w = t.waiter;
        let type_name = objr.type_name(w).ok();
        let mut a = Awaiting {
            kind: "future".into(),
            task: None,
            type_name: type_name.clone(),
            object: Some(w),
            seconds: None,
        };
        let kind = self.kind(objr, w, l);
        if matches!(kind, Kind::CTask | Kind::PyTask) {
            a.kind = "task".into();
            a.task = Some(w);
            a.object = None;
            return a;
        }
        if type_name.as_deref() == Some("_GatheringFuture") {
            a.kind = "gather".into();
            return a;
        }
        // A synchronisation primitive whose waiters hold the future: the
        // `self` of one of the innermost frames (a Python future's own
        // `__await__` frame may come first).
        for &innermost_self in first_locals.iter().take(3) {
            if innermost_self != 0 && self.kind(objr, innermost_self, l) == Kind::Other {
                if let Ok(ty) = objr.type_of(innermost_self) {
                    let mro = self.mro(objr, ty, l);
                    let prim = mro.iter().find_map(|n| {
                        Some(match n.as_str() {
                            "Queue" | "LifoQueue" | "PriorityQueue" => "queue",
                            "Lock" => "lock",
                            "Event" => "event",
                            "Semaphore" | "BoundedSemaphore" => "semaphore",
                            "Condition" => "condition",
                            "Barrier" => "barrier",
                            _ => return None,
                        })
                    });
                    if let Some(prim) = prim {
                        let holds = ["_waiters", "_getters", "_putters"].iter().any(|n| {
                            objr.instance_attr(innermost_self, n)
                                .ok()
                                .flatten()
                                .is_some_and(|d| deque_items(objr, l, d, 1 << 16).contains(&w))
                        });
                        if holds {
                            a.kind = prim.into();
                            a.type_name = mro.first().cloned();
                            a.object = Some(innermost_self);
                            return a;
                        }
                    }
                }
            }
        }
        // A sleep: a timer of the loop resolves the future.
        let loop_ = t.loop_;
        let timers = sleeps
            .entry(loop_)
            .or_insert_with(|| self.scan_loop(objr, l, loop_, false).map(|s| s.timers));
        if let Some((when, sleep)) = timers.as_ref().and_then(|m| m.get(&w)) {
            if *sleep {
                a.kind = "sleep".into();
            }
            a.seconds = Some(((when - self.loop_now()) * 1000.0).round() / 1000.0);
        }
        a
    }

    /// The tasks that no registry lists but that a handle in one of their
    /// loops' queues will run: a handle's callback that is a task's step
    /// or wake-up, or a timer whose future wakes a task when it resolves
    /// (a sleep). Each loop of `tasks` (and of the running tasks) is read
    /// once, its scan kept in `scans`; at most `room` tasks are returned.
    fn queued_tasks(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        tasks: &[RawTask],
        running: &HashMap<u64, u64>,
        scans: &mut HashMap<u64, LoopScan>,
        room: usize,
    ) -> Vec<RawTask> {
        let mut loops: Vec<u64> = tasks
            .iter()
            .map(|t| t.loop_)
            .chain(running.keys().copied())
            .filter(|lp| *lp != 0)
            .collect();
        loops.sort_unstable();
        loops.dedup();
        if loops.len() > MAX_LOOPS {
            self.note(format!(
                "{} event loops: the queues of only {MAX_LOOPS} are read",
                loops.len()
            ));
            loops.truncate(MAX_LOOPS);
        }
        // Built once a queued handle names a task (most dumps: never).
        let mut known: Option<HashSet<u64>> = None;
        let awaited: HashSet<u64> = tasks.iter().map(|t| t.waiter).collect();
        let room = room.min(MAX_QUEUE_TASKS);
        let mut found: Vec<(u64, &'static str)> = Vec::new();
        let mut taken: HashSet<u64> = HashSet::new();
        let mut take = |t: u64, via: &'static str, found: &mut Vec<(u64, &'static str)>| {
            let known = known.get_or_insert_with(|| tasks.iter().map(|t| t.addr).collect());
            if found.len() < room && !known.contains(&t) && taken.insert(t) {
                found.push((t, via));
            }
        };
        for lp in loops {
            let Some(scan) = self.scan_loop(objr, l, lp, true) else {
                continue;
            };
            for &(t, via) in &scan.runs {
                take(t, via, &mut found);
            }
            // A timer's future that no task read so far awaits: the tasks
            // its callbacks wake (a sleep of an unlisted task).
            let mut futs: Vec<u64> = scan
                .timers
                .keys()
                .copied()
                .filter(|f| !awaited.contains(f))
                .collect();
            futs.sort_unstable();
            for f in futs {
                if found.len() >= room {
                    break;
                }
                for cb in self.future_callbacks(objr, l, f).unwrap_or_default() {
                    if let Some(t) = self.callback_task(objr, l, cb) {
                        take(t, "timers", &mut found);
                    }
                }
            }
            scans.insert(lp, scan);
        }
        let addrs: Vec<u64> = found.iter().map(|(t, _)| *t).collect();
        let via: HashMap<u64, &'static str> = found.into_iter().collect();
        // Only those still to run: a finished task's stale handle shows nothing new.
        let mut out = self.read_tasks(objr, l, &addrs);
        out.retain(|t| t.state == 0);
        for t in &mut out {
            t.via = via.get(&t.addr).copied();
        }
        out
    }

    /// The task a queued callback runs: a C task's step
    /// (`TaskStepMethWrapper`, every version) or wake-up (`TaskWakeupMethWrapper` ≤3.9, a
    /// builtin method bound to the task after), or a bound method of a
    /// Python-level task (`__step`, `__wakeup`); checked to be a task.
    fn callback_task(&mut self, objr: &ObjReader, l: &AsyncioLayout, cb: u64) -> Option<u64> {
        let off = match objr.type_name(cb).ok()?.as_str() {
            // A static type up to 3.11, `_asyncio.`'s heap type after.
            "TaskStepMethWrapper" | "_asyncio.TaskStepMethWrapper" => l.step_task,
            "TaskWakeupMethWrapper" | "builtin_function_or_method" => l.wakeup_task,
            "method" => l.method_self,
            _ => return None,
        };
        let t = objr.mem.read_u64(cb.wrapping_add(off)).ok()?;
        (t != 0 && matches!(self.kind(objr, t, l), Kind::CTask | Kind::PyTask)).then_some(t)
    }

    /// An asyncio loop's queues (`_ready`, a deque of handles, only
    /// `with_ready`; `_scheduled`, a heap list of timer handles), each
    /// checked by type, at most `MAX_TASKS` handles each: their lengths,
    /// the earliest deadline of a timer not cancelled, each timer's first
    /// argument (a future) → its deadline, and the tasks the handles run.
    /// `None` for a loop without them (uvloop's, a Cython object).
    fn scan_loop(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        lp: u64,
        with_ready: bool,
    ) -> Option<LoopScan> {
        let type_name = objr.type_name(lp).ok()?;
        let attrs = instance_attrs(objr, lp, &["_ready", "_scheduled"]);
        let attr = |n: &str, ty: &str| {
            attrs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| *v)
                .filter(|v| objr.type_name(*v).is_ok_and(|t| t == ty))
        };
        let (ready, sched) = (
            attr("_ready", "collections.deque"),
            attr("_scheduled", "list"),
        );
        if ready.is_none() && sched.is_none() {
            return None;
        }
        let mut scan = LoopScan {
            queues: LoopQueues {
                id: lp,
                type_name,
                ready: None,
                timers: None,
                next_timer_seconds: None,
            },
            timers: HashMap::new(),
            runs: Vec::new(),
        };
        let length = |q: u64| {
            objr.mem
                .read_u64(q.wrapping_add(objr.layout.object.ob_size))
                .ok()
                .filter(|n| *n <= QUEUE_LEN_SANE)
        };
        if let Some(q) = ready {
            match length(q) {
                Some(n) => {
                    scan.queues.ready = Some(n);
                    if with_ready {
                        for h in deque_items(objr, l, q, MAX_READY) {
                            let cb = self.slot(objr, l, h, "_callback");
                            if let Some(t) = cb.and_then(|cb| self.callback_task(objr, l, cb)) {
                                scan.runs.push((t, "ready"));
                            }
                        }
                    }
                }
                None => self.note(format!(
                    "event loop 0x{lp:x}: its ready queue's length is implausible: not read"
                )),
            }
        }
        let Some(q) = sched else {
            return Some(scan);
        };
        let Some(n) = length(q) else {
            self.note(format!(
                "event loop 0x{lp:x}: its timer list's length is implausible: not read"
            ));
            return Some(scan);
        };
        scan.queues.timers = Some(n);
        let handles = objr
            .list_items(q, MAX_TASKS as u64)
            .map(|(h, _)| h)
            .unwrap_or_default();
        let mut next: Option<f64> = None;
        for h in handles {
            let Some(when) = self
                .slot(objr, l, h, "_when")
                .filter(|w| objr.type_name(*w).is_ok_and(|t| t == "float"))
            else {
                continue;
            };
            let Ok(bits) = objr
                .mem
                .read_u64(when.wrapping_add(objr.layout.object.float_value))
            else {
                continue;
            };
            let when = f64::from_bits(bits);
            if !when.is_finite() {
                continue;
            }
            // The heap's first timer is its earliest: a cancelled one (kept
            // until it comes due) is looked for only where it could matter.
            if next.is_none_or(|n| when < n)
                && !self
                    .slot(objr, l, h, "_cancelled")
                    .is_some_and(|c| objr.int_u64(c).is_ok_and(|v| v != 0))
            {
                next = Some(when);
            }
            let cb = self.slot(objr, l, h, "_callback").unwrap_or(0);
            let sleep = objr
                .mem
                .read_u64(cb.wrapping_add(l.func_name))
                .ok()
                .and_then(|n| objr.string(n, 64).ok())
                .is_some_and(|(n, _)| n == "_set_result_unless_cancelled");
            if !sleep {
                if let Some(t) = self.callback_task(objr, l, cb) {
                    scan.runs.push((t, "timers"));
                }
            }
            let Some(args) = self.slot(objr, l, h, "_args") else {
                continue;
            };
            let Ok((first, _)) = objr.tuple_items(args, 1) else {
                continue;
            };
            let Some(&fut) = first.first() else { continue };
            scan.timers.insert(fut, (when, sleep));
        }
        scan.queues.next_timer_seconds =
            next.map(|w| ((w - self.loop_now()) * 1000.0).round() / 1000.0);
        Some(scan)
    }

    /// A `__slots__` attribute, through the type's member descriptor.
    fn slot(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        obj: u64,
        name: &'static str,
    ) -> Option<u64> {
        let ty = objr.type_of(obj).ok()?;
        let off = match self.slots.get(&(ty, name)) {
            Some(o) => *o,
            None => {
                let o = slot_offset(objr, l, ty, name);
                if self.slots.len() > 4096 {
                    self.slots.clear();
                }
                self.slots.insert((ty, name), o);
                o
            }
        }?;
        objr.mem
            .read_u64(obj.wrapping_add(off))
            .ok()
            .filter(|v| *v != 0)
    }
}

/// The live objects of a `weakref.WeakSet` (its `data`, a set of weak
/// references), at most `limit`: each reference checked by type, a dead
/// one (pointing at `None`) left out.
fn weakset_members(
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

fn slot_offset(objr: &ObjReader, l: &AsyncioLayout, ty: u64, name: &str) -> Option<u64> {
    let mem = objr.mem;
    let mro = mem.read_u64(ty.wrapping_add(l.type_mro)).ok()?;
    let (types, _) = objr.tuple_items(mro, 32).ok()?;
    for t in types {
        let Ok(d) = mem.read_u64(t.wrapping_add(l.type_dict)) else {
            continue;
        };
        if d == 0 {
            continue;
        }
        let Ok(Some(desc)) = objr.dict_get(d, name) else {
            continue;
        };
        if !objr.type_name(desc).is_ok_and(|n| n == "member_descriptor") {
            return None;
        }
        let def = mem.read_u64(desc.wrapping_add(l.member_descr_def)).ok()?;
        let off = mem.read_u64(def.wrapping_add(MEMBER_DEF_OFFSET)).ok()?;
        return (16..1 << 16).contains(&off).then_some(off);
    }
    None
}

/// An attribute of a Python-level object: its `__dict__`'s, else its
/// class's (asyncio's Python `Future` keeps defaults such as `_state` there).
fn py_attr(objr: &ObjReader, l: &AsyncioLayout, obj: u64, name: &str) -> Option<u64> {
    if let Ok(Some(v)) = objr.instance_attr(obj, name) {
        return Some(v);
    }
    let ty = objr.type_of(obj).ok()?;
    let mro = objr.mem.read_u64(ty.wrapping_add(l.type_mro)).ok()?;
    let (types, _) = objr.tuple_items(mro, 32).ok()?;
    types.into_iter().find_map(|t| {
        let d = objr.mem.read_u64(t.wrapping_add(l.type_dict)).ok()?;
        if d == 0 {
            return None;
        }
        objr.dict_get(d, name).ok().flatten()
    })
}

/// Those of `names` an instance has in its `__dict__`, read in one pass.
fn instance_attrs(objr: &ObjReader, obj: u64, names: &[&'static str]) -> Vec<(&'static str, u64)> {
    let Ok(items) = objr.instance_items(obj) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in items {
        let Ok((key, false)) = objr.string(k, 32) else {
            continue;
        };
        if let Some(n) = names.iter().find(|n| **n == key) {
            out.push((*n, v));
        }
    }
    out
}

/// The callbacks of a list of (callback, context) tuples.
fn callback_list(objr: &ObjReader, list: u64) -> Vec<u64> {
    let Ok((items, _)) = objr.list_items(list, MAX_CALLBACKS) else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|it| match objr.type_name(it).ok()?.as_str() {
            "tuple" => objr.tuple_items(it, 1).ok()?.0.first().copied(),
            _ => Some(it),
        })
        .collect()
}

/// Items of a `collections.deque`, at most `max`.
fn deque_items(objr: &ObjReader, l: &AsyncioLayout, dq: u64, max: u64) -> Vec<u64> {
    let mem = objr.mem;
    let mut out = Vec::new();
    let Ok(len) = mem.read_u64(dq.wrapping_add(objr.layout.object.ob_size)) else {
        return out;
    };
    let n = len.min(max);
    let Ok(mut block) = mem.read_u64(dq.wrapping_add(l.deque_leftblock)) else {
        return out;
    };
    let Ok(mut idx) = mem.read_u64(dq.wrapping_add(l.deque_leftindex)) else {
        return out;
    };
    if idx >= DEQUE_BLOCK_LEN {
        return out;
    }
    let mut blocks = 0;
    while (out.len() as u64) < n && block != 0 && blocks < 1 + max / DEQUE_BLOCK_LEN + 1 {
        let Ok(raw) = mem.read_vec(block, ((DEQUE_BLOCK_LEN + 2) * 8) as usize, 1 << 12) else {
            break;
        };
        while idx < DEQUE_BLOCK_LEN && (out.len() as u64) < n {
            out.push(le_u64(&raw, 8 + idx * 8));
            idx += 1;
        }
        block = le_u64(&raw, 8 + DEQUE_BLOCK_LEN * 8);
        idx = 0;
        blocks += 1;
    }
    out
}

/// From a deque's `ob_size` to its `state`, the count of its index moves
/// (`leftblock`, `rightblock`, `leftindex`, `rightindex` before it; the ring
/// buffer's `ob_item`, `allocated`, `first_element`, `maxlen` in 3.15): 40
/// bytes on every version.
const DEQUE_STATE_AFTER_SIZE: u64 = 40;
/// Event loops whose ready queue is remembered per process.
const MAX_TURN_LOOPS: usize = 64;

/// How many callbacks each asyncio event loop has begun: what tells one
/// callback (one task step) from the next when no sample lands in the
/// selector between them.
///
/// asyncio's loop takes each callback it runs off the left end of
/// `loop._ready`, a `collections.deque`, and adds new ones on the right.
/// The deque's `state` counts both (each append and each popleft adds one)
/// and its length is appends less pops, so `state - len` is twice the
/// number of callbacks taken so far: it stays put while one callback runs,
/// whatever that callback schedules, and moves when the next one begins.
/// The loop comes from the `self` of `_run_once`'s frame; its `_ready`
/// deque is found once (checked by type), then each read is one copy of
/// the deque's header, checked by its type pointer.
#[derive(Default)]
pub(crate) struct LoopTurns {
    /// Loop → its ready deque and that deque's type, or when it was last
    /// looked for in vain (looked for again after [`TURN_RETRY`]: a read
    /// that raced the loop's own writes must not leave it without turns).
    ready: HashMap<u64, Result<(u64, u64), Instant>>,
}

/// How long a loop whose ready queue was not found waits for another look.
const TURN_RETRY: Duration = Duration::from_secs(1);

impl LoopTurns {
    /// The turn of the loop whose `_run_once` runs in the frame at `frame`.
    pub(crate) fn read(
        &mut self,
        objr: &ObjReader,
        fl: &crate::cpython_layouts::FrameLayout,
        frame: u64,
    ) -> Option<u64> {
        let lp = objr.mem.read_u64(frame.wrapping_add(fl.localsplus)).ok()? & !fl.pointer_tag_bits;
        if lp == 0 {
            return None;
        }
        let look = match self.ready.get(&lp) {
            Some(Ok(_)) => false,
            Some(Err(at)) => at.elapsed() >= TURN_RETRY,
            None => true,
        };
        if look {
            if self.ready.len() >= MAX_TURN_LOOPS {
                self.ready.clear();
            }
            let found = instance_attrs(objr, lp, &["_ready"])
                .first()
                .map(|(_, v)| *v)
                .filter(|d| objr.type_name(*d).is_ok_and(|t| t == "collections.deque"))
                .and_then(|d| Some((d, objr.type_of(d).ok()?)));
            self.ready.insert(lp, found.ok_or_else(Instant::now));
        }
        let (dq, ty) = (*self.ready.get(&lp)?).ok()?;
        let o = &objr.layout.object;
        let state_at = o.ob_size + DEQUE_STATE_AFTER_SIZE;
        let mut buf = [0u8; 96];
        let len = (state_at + 8).min(buf.len() as u64) as usize;
        if state_at + 8 > len as u64 || objr.mem.read(dq, &mut buf[..len]).is_err() {
            return None;
        }
        if le_u64(&buf, o.ob_type) != ty {
            // Freed, or something else now: found again next time.
            self.ready.remove(&lp);
            return None;
        }
        let size = le_u64(&buf, o.ob_size);
        let state = le_u64(&buf, state_at);
        Some(state.wrapping_sub(size))
    }
}

/// A Python-level future's `_state` string → the C enum's value.
fn py_state(objr: &ObjReader, s: u64) -> Option<u8> {
    match objr.string(s, 16).ok()?.0.as_str() {
        "PENDING" => Some(0),
        "CANCELLED" => Some(1),
        "FINISHED" => Some(2),
        _ => None,
    }
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

/// `time.monotonic()`, which asyncio's loops use as their clock: the same
/// clock in every process of the machine.
fn monotonic() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Attribute a thread's sample to its tasks (`record`/`top --async`): the
/// running task's frames, then its awaiter's suspended stack, and so on to
/// the outermost awaiter, replacing the event loop's own frames below the
/// running task. With `all`, each waiting task that awaits no other task
/// adds a stack of its own (named after the task), the same way. Returns
/// those added stacks; the thread's tasks are dropped from the sample.
pub(crate) fn stitch(
    t: &mut crate::stack::ThreadStack,
    all: bool,
) -> Vec<crate::stack::ThreadStack> {
    use crate::stack::FrameKind;
    let Some(tt) = t.asyncio.take() else {
        return Vec::new();
    };
    let by_id: HashMap<u64, &Task> = tt.tasks.iter().map(|k| (k.id, k)).collect();
    // Frames of the awaiters of `task`, innermost first, cycles cut.
    let awaiters = |task: &Task| -> Vec<Frame> {
        let mut out = Vec::new();
        let mut seen = HashSet::from([task.id]);
        let mut cur = task;
        while let Some(p) = cur.awaited_by.iter().find_map(|a| by_id.get(a)) {
            if !seen.insert(p.id) || seen.len() > MAX_CHAIN {
                break;
            }
            out.extend(p.frames.iter().cloned());
            cur = p;
        }
        out
    };
    // The running tasks, innermost first (an eager task's first step runs
    // inside its creator's): together their frames are the innermost Python
    // frames of the thread; below the outermost one go its awaiters.
    let runners: Vec<&Task> = tt
        .tasks
        .iter()
        .filter(|k| k.state == TaskState::Running)
        .collect();
    if let Some(outer) = runners.last() {
        let n: usize = runners.iter().map(|r| r.frames.len()).sum();
        let mut python = 0;
        let cut = t.frames.iter().position(|f| {
            python += (f.kind == FrameKind::Python) as usize;
            python == n
        });
        if let (Some(cut), true) = (cut, n > 0) {
            t.frames.truncate(cut + 1);
            t.frames.extend(awaiters(outer));
        }
    }
    if !all {
        return Vec::new();
    }
    let parents: HashSet<u64> = tt
        .tasks
        .iter()
        .flat_map(|k| k.awaited_by.iter().copied())
        .collect();
    tt.tasks
        .iter()
        .filter(|k| matches!(k.state, TaskState::Pending | TaskState::Cancelling))
        .filter(|k| !parents.contains(&k.id) && !k.frames.is_empty())
        .map(|k| {
            let mut s = t.clone();
            s.name = Some(format!("task {}", k.name));
            s.status = crate::stack::ThreadStatus::Idle;
            s.holds_gil = false;
            s.native_entry = None;
            s.truncated = None;
            s.frames = k.frames.clone();
            s.frames.extend(awaiters(k));
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SliceMemory;
    use crate::python::process::{GilSource, PythonProcess, Version};
    use crate::stack::{ThreadStack, ThreadStatus};
    use proptest::prelude::*;

    const BASE: u64 = 0x10_0000;

    fn reader_for(major: u8, minor: u8) -> Option<Reader> {
        let layout = crate::cpython_layouts::for_version(major, minor)?;
        Some(Reader::new(PythonProcess {
            pid: std::process::id() as i32,
            exe: "python".into(),
            cmdline: String::new(),
            version: Version {
                major,
                minor,
                patch: Some(0),
                suffix: String::new(),
            },
            layout: layout.clone(),
            interp_head_ptr: BASE,
            gil: GilSource::Unknown,
            gil_sync: crate::python::process::GilSyncSource::Unknown,
            warnings: Vec::new(),
            obmalloc_statics: None,
        }))
    }

    fn snapshot(tstate: u64, interp: u64, frames: Vec<u64>) -> ThreadSnapshot {
        ThreadSnapshot {
            stack: ThreadStack {
                thread_id: 1,
                os_thread_id: None,
                name: None,
                interpreter: 0,
                status: ThreadStatus::Idle,
                holds_gil: false,
                frames: frames
                    .into_iter()
                    .map(|addr| {
                        let mut f = Frame::python("f", "f.py", 1);
                        f.mark = Some(crate::stack::FrameMark {
                            addr,
                            is_entry: false,
                            instr: 0,
                        });
                        f
                    })
                    .collect(),
                truncated: None,
                native_entry: None,
                name_source: None,
                wait: None,
                asyncio: None,
            },
            anchors: Vec::new(),
            in_gc: false,
            gil_sync: Vec::new(),
            locks: Vec::new(),
            tstate,
            interp,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
        /// A corrupt or racing target: arbitrary words where tasks, futures,
        /// coroutines, frames, deques and types should be. Every table must
        /// come back with fewer tasks or frames, never a panic or a hang.
        #[test]
        fn arbitrary_memory_never_panics(words in proptest::collection::vec(any::<u64>(), 1024), seed in any::<u64>()) {
            let bytes: Vec<u8> = words
                .iter()
                .flat_map(|w| {
                    let v = match (w ^ seed) % 5 {
                        0 | 3 => BASE + ((w % 8192) & !7),
                        1 => u64::MAX - (w % 512),
                        _ => *w,
                    };
                    v.to_le_bytes()
                })
                .collect();
            let mut mem = SliceMemory::new();
            mem.add(BASE, bytes);
            for l in crate::cpython_layouts::asyncio::ALL {
                let Some(mut reader) = reader_for(l.major, l.minor) else { continue };
                let mut r = AsyncioReader::new(l.major, l.minor);
                // As if AsyncioDebug had been found, so that the lists are walked too.
                r.lists = Some(Lists {
                    ts_running_loop: 8,
                    ts_running_task: 16,
                    ts_tasks_head: 24,
                    interp_tasks_head: 32,
                });
                let snaps = vec![snapshot(BASE + 64, BASE + 128, vec![BASE + 256])];
                let want = AsyncRead { limit: 50, max_tasks: 500, running_only: false };
                let _ = r.read(&mut reader, &PageCache::new(&mem), &snaps, want, &Vec::new);
                let pl = reader.process.layout.clone();
                let objr = ObjReader::new(&mem, &pl);
                let addrs: Vec<u64> = (0..64).map(|i| BASE + i * 72).collect();
                let tasks = r.read_tasks(&objr, l, &addrs);
                let index: HashMap<u64, usize> = tasks.iter().enumerate().map(|(k, t)| (t.addr, k)).collect();
                let _ = r.parents(&objr, l, &tasks, &index);
                // Tasks naming every word as their loop: its queues read from garbage.
                let naming: Vec<RawTask> = addrs
                    .iter()
                    .map(|&a| RawTask {
                        addr: a + 8,
                        loop_: a,
                        state: 0,
                        log_tb: false,
                        cancelling: false,
                        name: 0,
                        coro: 0,
                        waiter: 0,
                        callbacks: Vec::new(),
                        awaited_by: None,
                        via: None,
                    })
                    .collect();
                let mut scans = HashMap::new();
                let found = r.queued_tasks(&objr, l, &naming, &HashMap::new(), &mut scans, 100);
                prop_assert!(found.len() <= 100 && scans.len() <= MAX_LOOPS);
                let running = HashSet::new();
                let ks: Vec<usize> = (0..tasks.len()).collect();
                let parents = vec![Vec::new(); tasks.len()];
                let mut sleeps = HashMap::new();
                let _ = r.thread_tasks(&mut reader, &objr, l, &tasks, &ks, &parents, &running, &snaps[0], &mut sleeps, 64, false, Vec::new());
                // An earlier sample's tasks over corrupt memory: read again, bounded.
                r.sample_cache = Some(SampleCache {
                    at: Instant::now(),
                    interp: BASE + 128,
                    tasks: tasks.clone(),
                    parents: (0..tasks.len()).map(|k| vec![(k + 1) % tasks.len()]).collect(),
                    index: tasks.iter().enumerate().map(|(k, t)| (t.addr, k)).collect(),
                    frames: tasks.iter().enumerate().map(|(k, t)| (t.coro, k)).collect(),
                });
                let running: HashMap<u64, u64> = tasks.first().map(|t| (t.loop_, t.addr)).into_iter().collect();
                let _ = r.tasks_from_sample_cache(&objr, l, &running, &snaps, &[0]);
                let cache = PageCache::new(&mem);
                for a in addrs {
                    if let Some(ms) = l.module_state {
                        let _ = r.module_state_tasks(&cache, &objr, l, &ms, a, 500);
                    }
                    let _ = weakset_members(&cache, &objr, l, a, 500);
                    let _ = r.chain(&mut reader, &objr, l, a, &snaps[0], &HashSet::from([a]));
                    let _ = deque_items(&objr, l, a, 1 << 16);
                    let _ = r.scan_loop(&objr, l, a, true);
                    let _ = py_attr(&objr, l, a, "_state");
                }
            }
        }
    }

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

    /// A loop's ready deque as a hostile or racing target may hold it: a
    /// length of 2**62, two blocks that link to each other (a cycle), and
    /// a left index past the block. Reading it stops at the bound asked
    /// for, going round the cycle no further; a bad index reads nothing.
    #[test]
    fn cyclic_huge_deque_is_bounded() {
        let pl = crate::cpython_layouts::for_version(3, 12).unwrap().clone();
        let l = &crate::cpython_layouts::asyncio::V3_12;
        let block_bytes = ((DEQUE_BLOCK_LEN + 2) * 8) as usize;
        let (dq, a, b) = (BASE, BASE + 0x1000, BASE + 0x2000);
        let build = |leftindex: u64| {
            let mut m = vec![0u8; 0x3000];
            let mut put =
                |at: u64, v: u64| m[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
            put(pl.object.ob_size, 1 << 62);
            put(l.deque_leftblock, a);
            put(l.deque_leftindex, leftindex);
            for (blk, other) in [(a, b), (b, a)] {
                let o = blk - BASE;
                for i in 0..DEQUE_BLOCK_LEN {
                    put(o + 8 + i * 8, blk + i);
                }
                put(o + block_bytes as u64 - 8, other);
            }
            let mut mem = SliceMemory::new();
            mem.add(BASE, m);
            mem
        };
        let mem = build(3);
        let cache = PageCache::new(&mem);
        let objr = ObjReader::new(&cache, &pl);
        for max in [1, 64, 1000, MAX_READY] {
            let items = deque_items(&objr, l, dq, max);
            assert_eq!(items.len() as u64, max);
            assert_eq!(items[0], a + 3);
            if max > 64 {
                // Round the cycle: block b follows a, then a again.
                assert_eq!(items[DEQUE_BLOCK_LEN as usize - 3], b);
                assert_eq!(items[2 * DEQUE_BLOCK_LEN as usize - 3], a);
            }
        }
        let mem = build(DEQUE_BLOCK_LEN);
        let cache = PageCache::new(&mem);
        let objr = ObjReader::new(&cache, &pl);
        assert!(deque_items(&objr, l, dq, MAX_READY).is_empty());
        // Not a loop (no instance dict): no queues, no panic.
        let mut r = AsyncioReader::new(3, 12);
        assert!(r.scan_loop(&objr, l, dq, true).is_none());
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
