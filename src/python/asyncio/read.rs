//! One snapshot's read: from the registries and lists to each thread's
//! tasks, with the sample cache that lets `record`/`top --async` read only
//! the running tasks and their awaiters.

use super::loops::{LoopScan, Timers};
use super::registry::weakset_members;
use super::state::{
    AsyncRead, AsyncioReader, RawTask, SampleCache, TasksByThread, MAX_CHAIN, MAX_TASKS,
};
use crate::cpython_layouts::asyncio::{AsyncioLayout, GenFrame};
use crate::elf;
use crate::memory::MemoryExt;
use crate::python::objects::ObjReader;
use crate::python::pagecache::PageCache;
use crate::python::reader::{Reader, ThreadSnapshot};
use crate::stack::LoopQueues;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// `record`/`top --async`: how long the tasks read by one sample, and who
/// awaits whom, serve the next ones, which then read only the running
/// tasks, the tasks awaiting them and those whose frames are on a thread's
/// stack. A sample whose running task is not among them reads all again.
const SAMPLE_CACHE_TTL: Duration = Duration::from_millis(250);

impl AsyncioReader {
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

    /// From an earlier sample's tasks: the running ones, those whose
    /// coroutine frames are on a thread's stack (eager tasks in their first
    /// step) and their awaiters, each read again; who awaits whom as that
    /// sample found it.
    pub(super) fn tasks_from_sample_cache(
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
}
