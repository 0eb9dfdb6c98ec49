//! One snapshot's read, step by step: from the registries and lists to
//! each thread's tasks, with the sample cache that lets `record`/`top
//! --async` read only the running tasks and their awaiters.

use super::loops::{queues_by_thread, LoopScan};
use super::registry::{c_module, tasks_module_dict, Found, TasksModule};
use super::state::{
    AsyncRead, AsyncioReader, RawTask, SampleCache, TasksByThread, MAX_CHAIN, MAX_TASKS,
    NO_ASYNCIO_RECHECK,
};
use crate::cpython_layouts::asyncio::{AsyncioLayout, GenFrame};
use crate::elf;
use crate::python::objects::ObjReader;
use crate::python::pagecache::PageCache;
use crate::python::reader::{Reader, ThreadSnapshot};
use crate::stack::ThreadTasks;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// `record`/`top --async`: how long the tasks read by one sample, and who
/// awaits whom, serve the next ones, which then read only the running
/// tasks, the tasks awaiting them and those whose frames are on a thread's
/// stack. A sample whose running task is not among them reads all again.
const SAMPLE_CACHE_TTL: Duration = Duration::from_millis(250);

/// One interpreter of the snapshot, as the steps of a read see it.
struct Interp<'s> {
    addr: u64,
    /// `asyncio.tasks`' dict.
    tasks_dict: u64,
    snaps: &'s [ThreadSnapshot],
    /// Its threads: indexes into `snaps`.
    threads: Vec<usize>,
}

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
        // Only processes that imported asyncio are looked at further. The
        // look is a scan of sys.modules' keys: an interpreter found without
        // asyncio is looked at again only once NO_ASYNCIO_RECHECK old.
        let mut modules: HashMap<u64, Option<u64>> = HashMap::new();
        for s in snaps {
            if modules.contains_key(&s.interp) {
                continue;
            }
            let known_without = self
                .no_asyncio
                .get(&s.interp)
                .is_some_and(|t| t.elapsed() < NO_ASYNCIO_RECHECK);
            let m = if known_without {
                None
            } else {
                tasks_module_dict(&objr, s.interp)
            };
            match m {
                None if !known_without => {
                    self.no_asyncio.insert(s.interp, Instant::now());
                }
                Some(_) => {
                    self.no_asyncio.remove(&s.interp);
                }
                None => {}
            }
            modules.insert(s.interp, m);
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
        let mut seen_interp = HashSet::new();
        for s in snaps {
            if !seen_interp.insert(s.interp) {
                continue;
            }
            let Some(tasks_dict) = modules.get(&s.interp).copied().flatten() else {
                continue;
            };
            let it = Interp {
                addr: s.interp,
                tasks_dict,
                snaps,
                threads: (0..snaps.len())
                    .filter(|i| snaps[*i].interp == s.interp)
                    .collect(),
            };
            out.extend(self.read_interp(reader, &objr, mem, layout, &it, want));
        }
        out
    }

    /// One interpreter's tasks: found, read (or recalled from an earlier
    /// sample), put under the threads that run their loops, and shown per
    /// thread.
    fn read_interp(
        &mut self,
        reader: &mut Reader,
        objr: &ObjReader,
        mem: &PageCache,
        layout: &AsyncioLayout,
        it: &Interp,
        want: AsyncRead,
    ) -> Vec<(usize, ThreadTasks)> {
        let Some(mut found) = self.find_tasks(objr, mem, layout, it, want) else {
            return Vec::new();
        };
        if let Some(n) = found.too_many {
            self.note(format!(
                "more than {n} asyncio tasks: not all were read (--async reads up to {MAX_TASKS})"
            ));
        }
        if found.addrs.is_empty() {
            return Vec::new();
        }
        let mut scans: HashMap<u64, LoopScan> = HashMap::new();
        let (tasks, parents) = if found.cached {
            self.tasks_from_sample_cache(objr, layout, &found.running, it.snaps, &it.threads)
        } else {
            self.fresh_tasks(mem, objr, layout, it.addr, &found, want, &mut scans)
        };
        if tasks.is_empty() {
            return Vec::new();
        }
        let by_thread =
            self.tasks_by_thread(objr, layout, &tasks, &mut found, it.snaps, &it.threads);
        let (mut queues, mut sleeps) = queues_by_thread(scans, &found.loop_thread);
        let running_tasks: HashSet<u64> = found.running.values().copied().collect();
        let mut out = Vec::with_capacity(by_thread.len());
        for (th, ks) in by_thread {
            let tt = self.thread_tasks(
                reader,
                objr,
                layout,
                &tasks,
                &ks,
                &parents,
                &running_tasks,
                &it.snaps[th],
                &mut sleeps,
                want.limit,
                want.running_only,
                queues.remove(&th).unwrap_or_default(),
            );
            out.push((th, tt));
        }
        out
    }

    /// The tasks an interpreter's registries and lists name, and which
    /// loop runs which; `None` when only the running tasks are wanted and
    /// none runs (an idle loop, most samples: nothing else is read). Where
    /// the running tasks are among an earlier sample's, the registries and
    /// lists are not read (`found.cached`).
    fn find_tasks(
        &mut self,
        objr: &ObjReader,
        mem: &PageCache,
        layout: &AsyncioLayout,
        it: &Interp,
        want: AsyncRead,
    ) -> Option<Found> {
        let module = TasksModule::read(objr, it.tasks_dict);
        let current = module.current_tasks(objr);
        let on_threads = self.thread_loops(objr, it.snaps, &it.threads);
        // Attributing samples needs a running task: without one (an idle
        // loop, most samples) nothing else is read.
        if want.running_only
            && current.is_empty()
            && on_threads
                .as_ref()
                .is_none_or(|ts| ts.iter().all(|t| t.task == 0))
        {
            return None;
        }
        let c_module = c_module(objr, it.addr);
        let on_threads = on_threads.filter(|_| layout.awaited_by.is_some());
        let mut found = Found::new(want.max_tasks.min(MAX_TASKS));
        // The running tasks first: are they among an earlier sample's tasks?
        found.running.extend(current.iter().copied());
        for t in on_threads.iter().flatten() {
            if t.loop_ != 0 && t.task != 0 {
                found.running.insert(t.loop_, t.task);
            }
        }
        found.cached = want.running_only && self.recalls(it.addr, &found.running);
        if !found.cached {
            self.registered_tasks(mem, objr, layout, &module, c_module, &mut found);
        }
        for &(lp, t) in &current {
            found.running.insert(lp, t);
            found.add(t);
        }
        self.listed_tasks(
            objr,
            layout,
            it.addr,
            on_threads.as_deref(),
            c_module,
            &mut found,
        );
        Some(found)
    }

    /// Whether an earlier sample's tasks serve this one (see
    /// `SAMPLE_CACHE_TTL`): the same interpreter, recent, and every running
    /// task among them.
    fn recalls(&self, interp: u64, running: &HashMap<u64, u64>) -> bool {
        self.sample_cache.as_ref().is_some_and(|c| {
            c.interp == interp
                && c.at.elapsed() < SAMPLE_CACHE_TTL
                && running.values().all(|t| c.index.contains_key(t))
        })
    }

    /// The tasks found, read afresh, with (unless only the running ones are
    /// wanted) those that only their loops' queues hold, the loops' scans
    /// kept in `scans`; and who awaits whom. When only the running ones are
    /// wanted, kept for the next samples.
    #[allow(clippy::too_many_arguments)]
    fn fresh_tasks(
        &mut self,
        mem: &PageCache,
        objr: &ObjReader,
        layout: &AsyncioLayout,
        interp: u64,
        found: &Found,
        want: AsyncRead,
        scans: &mut HashMap<u64, LoopScan>,
    ) -> (Vec<RawTask>, Vec<Vec<usize>>) {
        // One batched read for every task's struct.
        mem.prefetch(found.addrs.iter().map(|a| (*a, layout.task_size as usize)));
        let mut tasks = self.read_tasks(objr, layout, &found.addrs);
        if !want.running_only {
            let room = want.max_tasks.min(MAX_TASKS).saturating_sub(tasks.len());
            let queued = self.queued_tasks(objr, layout, &tasks, &found.running, scans, room);
            tasks.extend(queued);
        }
        let index: HashMap<u64, usize> =
            tasks.iter().enumerate().map(|(k, t)| (t.addr, k)).collect();
        let parents = self.parents(objr, layout, &tasks, &index);
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
