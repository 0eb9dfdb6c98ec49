//! Trio's tasks (`dump`): every task of each `trio.run` or guest run, as
//! a tree by nursery, each with its coroutine stack.
//!
//! A thread that runs Trio has `trio.run`'s frame on its stack, whose
//! locals hold the run's `Runner` (an object whose type is, or derives
//! from, `trio._core._run.Runner`, found in the target's modules). The
//! runner's `tasks` set holds every live task; a task's `_parent_nursery`
//! is the nursery that runs it, whose `_parent_task` is the task that opened
//! it: the task's parent in the tree. Each task's stack follows what its
//! coroutine awaits, as an asyncio task's does; the running one's comes
//! from the thread's stack.
//!
//! A guest run (`trio.lowlevel.start_guest_run`) has no `trio.run`
//! frame: its runner is found through its `GuestState` on a stack (see
//! `find_trio_guests`), and kept under its host loop's thread.
//!
//! A task in `trio.sleep` waits on no object: `sleep_until`'s frame holds
//! its deadline (the `deadline` local), on Trio's clock. The default clock,
//! `SystemClock`, reads `perf_counter()` (`CLOCK_MONOTONIC` on Linux) plus
//! its `offset`: the deadline less the offset is on the monotonic clock,
//! where a gevent timer's is. Another clock's time is not known here.

use super::loops::{is_run_once, ready_callbacks};
use super::state::{
    AsyncioReader, GuestFacts, TasksByThread, MAX_CHAIN, MAX_TASKS, NO_ASYNCIO_RECHECK,
};
use crate::cpython_layouts::asyncio::AsyncioLayout;
use crate::memory::MemoryExt;
use crate::python::objects::ObjReader;
use crate::python::pagecache::PageCache;
use crate::python::reader::{LocalRef, Reader, ThreadSnapshot};
use crate::python::waits::{seconds_local, WaitReader, WaitTypes};
use crate::stack::{Frame, ObjectWait, Task, TaskState};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

/// How many of a waiting task's innermost frames are looked at for what
/// it waits on (a lock's `acquire` is below Trio's parking lot).
const WAIT_FRAMES: usize = 4;
/// Trio's run loop module, where its types are.
const RUN_MODULE: &str = "trio._core._run";
/// The most of a thread's outermost frames looked through for the runner.
const RUNNER_FRAMES: usize = 16;
/// Where `sleep_until` is, and the function whose frame holds a sleep's deadline.
const TIMEOUTS_MODULE: &str = "trio._timeouts";
const SLEEP_UNTIL: &str = "sleep_until";
/// A guest run's tick (a `GuestState` method), and the module and method
/// of Trio's worker threads, one of which waits for a guest's I/O.
const GUEST_TICK: &str = "guest_tick";
const THREAD_CACHE_MODULE: &str = "trio._core._thread_cache";
const HANDLE_JOB: &str = "_handle_job";
/// The most cells of a closure looked through for a `GuestState`.
const MAX_CELLS: u64 = 16;

/// What tells a sleeping task's deadline, from the target's modules: Trio's
/// `SystemClock` type, and the file of `sleep_until`'s module (its code's
/// `co_filename`).
struct SleepFacts {
    system_clock: Option<u64>,
    timeouts_file: Option<String>,
}

impl AsyncioReader {
    /// The Trio tasks of every thread of `snaps` that runs `trio.run`,
    /// into `out` (by snapshot index), at most `limit` per thread: the
    /// running one first.
    pub(crate) fn read_trio(
        &mut self,
        reader: &mut Reader,
        mem: &PageCache,
        snaps: &[ThreadSnapshot],
        limit: usize,
        waits: bool,
        out: &mut TasksByThread,
    ) {
        let Some(l) = self.layout else {
            return;
        };
        let pl = reader.process.layout.clone();
        let objr = ObjReader::new(mem, &pl);
        // What waiting tasks wait on (dump): the types, from the first
        // runner's interpreter's modules, looked up once a runner is found.
        let mut wait_types: Option<WaitTypes> = None;
        let mut sleeps: Option<SleepFacts> = None;
        // Guest runs first: each is kept under its host loop's thread,
        // where the loop below finds it as it finds trio.run's.
        self.find_trio_guests(reader, &objr, l, snaps);
        for (i, snap) in snaps.iter().enumerate() {
            let Some(runner_type) = self.trio_runner_type(&objr, snap.interp) else {
                continue;
            };
            // trio.run's frame is among the thread's outermost: its runner
            // is kept per thread while it stays one.
            let kept = self
                .trio_runners
                .get(&snap.tstate)
                .copied()
                .filter(|r| is_a(&objr, l, *r, runner_type));
            let runner = kept.or_else(|| {
                snap.stack
                    .frames
                    .iter()
                    .rev()
                    .filter_map(|f| f.mark)
                    .take(RUNNER_FRAMES)
                    .find_map(|m| {
                        reader
                            .frame_locals_at(mem, m.addr)
                            .into_iter()
                            .find(|lr| is_a(&objr, l, lr.obj, runner_type))
                            .map(|lr| lr.obj)
                    })
            });
            let Some(runner) = runner else {
                self.trio_runners.remove(&snap.tstate);
                continue;
            };
            if self.trio_runners.len() > 4096 {
                self.trio_runners.clear();
            }
            self.trio_runners.insert(snap.tstate, runner);
            if waits && wait_types.is_none() {
                wait_types = Some(WaitTypes::find(&|m: &str, n: &str| {
                    module_attr(&objr, snap.interp, m, n)
                }));
                sleeps = Some(SleepFacts {
                    system_clock: module_attr(&objr, snap.interp, RUN_MODULE, "SystemClock"),
                    timeouts_file: module_attr(&objr, snap.interp, TIMEOUTS_MODULE, "__file__")
                        .and_then(|f| objr.string(f, 4096).ok())
                        .filter(|(_, cut)| !cut)
                        .map(|(f, _)| crate::stack::escape_controls(&f).into_owned()),
                });
            }
            let mut wr = wait_types
                .as_ref()
                .map(|types| WaitReader::new(&objr, l, None, types));
            let sleep = sleeps.as_ref().map(|facts| Sleep {
                file: facts.timeouts_file.as_deref(),
                offset: self.clock_offset(&objr, l, runner, facts.system_clock),
            });
            let (tasks, left_out) = self.trio_tasks(
                reader,
                &objr,
                l,
                runner,
                snap,
                limit,
                wr.as_mut().zip(sleep.as_ref()),
            );
            if tasks.is_empty() && left_out == 0 {
                // A run that ended: the thread's next run is looked for.
                self.trio_runners.remove(&snap.tstate);
                continue;
            }
            let tt = out.entry(i).or_default();
            tt.trio_tasks = tasks;
            tt.trio_tasks_left_out = left_out;
        }
    }

    /// Trio's `Runner` type in interpreter `interp`: looked up (a scan of
    /// sys.modules) again only once a second while Trio is not imported; a
    /// type, once found, stays.
    fn trio_runner_type(&mut self, objr: &ObjReader, interp: u64) -> Option<u64> {
        match self.trio_types.get(&interp) {
            Some((Some(t), _)) => Some(*t),
            Some((None, at)) if at.elapsed() < NO_ASYNCIO_RECHECK => None,
            _ => {
                let t = module_attr(objr, interp, RUN_MODULE, "Runner");
                self.trio_types.insert(interp, (t, Instant::now()));
                t
            }
        }
    }

    /// Guest runs (`trio.lowlevel.start_guest_run`): no `trio.run` frame
    /// holds their runner. A guest run lives in its `GuestState`, which
    /// the host loop's callbacks and Trio's I/O thread hold; on a stack,
    /// it is `guest_tick`'s `self` on the host's thread while the guest
    /// runs, and, while it waits for I/O, a closure cell of the job
    /// (`fn`, `deliver`) that `_handle_job`'s frame of a Trio worker
    /// thread runs; between two ticks, in a handle of an asyncio host
    /// loop's ready queue. Each run found is kept under its host's thread
    /// (see [`Self::guest_host`]) in `trio_runners`.
    fn find_trio_guests(
        &mut self,
        reader: &mut Reader,
        objr: &ObjReader,
        l: &AsyncioLayout,
        snaps: &[ThreadSnapshot],
    ) {
        for (i, snap) in snaps.iter().enumerate() {
            let Some(runner_type) = self.trio_runner_type(objr, snap.interp) else {
                continue;
            };
            let facts = self
                .trio_guest_facts
                .entry(snap.interp)
                .or_insert_with(|| GuestFacts::find(objr, snap.interp).map(Arc::new))
                .clone();
            let Some(facts) = facts else {
                continue;
            };
            // Each GuestState found on this thread, and whether it is
            // `guest_tick`'s own (the guest runs on this thread).
            let mut states: Vec<(u64, bool)> = Vec::new();
            for f in &snap.stack.frames {
                let Some(m) = f.mark else {
                    continue;
                };
                let (ticking, names): (bool, &[&str]) = if facts.is_guest_tick(f) {
                    (true, &["self"])
                } else if facts.is_handle_job(f) {
                    (false, &["fn", "deliver"])
                } else {
                    continue;
                };
                let locals = reader.frame_locals_at(objr.mem, m.addr);
                let state = locals
                    .iter()
                    .filter(|lr| names.contains(&lr.name.as_str()))
                    .find_map(|lr| facts.guest_state_in(objr, l, lr.obj, ticking));
                states.extend(state.map(|gs| (gs, ticking)));
            }
            // Between two ticks the next one waits in the host loop's ready
            // queue (asyncio's): a handle whose callback is `guest_tick`,
            // bound to the GuestState, or the closure that holds it (the
            // one `deliver` queues once the guest's I/O wait ends). No
            // stack holds the run then: a host stuck in a callback keeps
            // it so. Not read for a thread whose run is kept (a sampler's
            // every read would go through the whole queue).
            let kept = self
                .trio_runners
                .get(&snap.tstate)
                .is_some_and(|r| is_a(objr, l, *r, runner_type));
            let run_once = snap.stack.frames.iter().find(|f| is_run_once(f));
            if let Some(m) = run_once.and_then(|f| f.mark).filter(|_| !kept) {
                for cb in ready_callbacks(self, objr, l, m.addr) {
                    let bound = (objr.type_name(cb).ok().as_deref() == Some("method"))
                        .then(|| objr.mem.read_u64(cb.wrapping_add(l.method_self)).ok())
                        .flatten();
                    let state = match bound {
                        Some(me) => facts.guest_state_in(objr, l, me, true),
                        None => facts.guest_state_in(objr, l, cb, false),
                    };
                    // Queued on this thread's loop: the host is this thread.
                    states.extend(state.map(|gs| (gs, true)));
                }
            }
            for (gs, here) in states {
                let Some(runner) = self
                    .slot(objr, l, gs, "runner")
                    .filter(|r| is_a(objr, l, *r, runner_type))
                else {
                    continue;
                };
                if self.trio_runners.values().any(|r| *r == runner) {
                    continue;
                }
                let host = self
                    .guest_host(objr, l, gs, snaps, snap.interp)
                    .or(here.then_some(i));
                if let Some(h) = host {
                    if self.trio_runners.len() > 4096 {
                        self.trio_runners.clear();
                    }
                    self.trio_runners.insert(snaps[h].tstate, runner);
                }
            }
        }
    }

    /// The thread of a guest run's host loop: the loop whose bound method
    /// Trio was given as `run_sync_soon_threadsafe` (asyncio's
    /// `call_soon_threadsafe`), by the `_thread_id` a Python loop keeps
    /// while it runs. Trio itself keeps no thread.
    fn guest_host(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        state: u64,
        snaps: &[ThreadSnapshot],
        interp: u64,
    ) -> Option<usize> {
        let call = self.slot(objr, l, state, "run_sync_soon_threadsafe")?;
        if objr.type_name(call).ok()? != "method" {
            return None;
        }
        let lp = objr.mem.read_u64(call.wrapping_add(l.method_self)).ok()?;
        let id = objr.instance_attr(lp, "_thread_id").ok().flatten()?;
        let ident = objr.int_u64(id).ok()?;
        snaps
            .iter()
            .position(|s| s.interp == interp && s.stack.thread_id == ident)
    }

    /// One run's tasks, the running one first; and how many were left out.
    /// With `waits`, what each waiting task shown waits on.
    #[allow(clippy::too_many_arguments)]
    fn trio_tasks(
        &mut self,
        reader: &mut Reader,
        objr: &ObjReader,
        l: &AsyncioLayout,
        runner: u64,
        snap: &ThreadSnapshot,
        limit: usize,
        mut waits: Option<(&mut WaitReader, &Sleep)>,
    ) -> (Vec<Task>, u64) {
        let Some(set) = self.slot(objr, l, runner, "tasks") else {
            return (Vec::new(), 0);
        };
        let Ok((ids, total)) = objr.set_items_counted(set, MAX_TASKS as u64) else {
            return (Vec::new(), 0);
        };
        let none = HashSet::new();
        let mut tasks: Vec<(Task, Vec<u64>)> = Vec::with_capacity(ids.len());
        for id in ids {
            let name = self
                .slot(objr, l, id, "name")
                .and_then(|n| objr.string(n, 256).ok())
                .map_or_else(|| "?".to_string(), |(s, _)| s);
            let parent = self
                .slot(objr, l, id, "_parent_nursery")
                .and_then(|n| objr.instance_attr(n, "_parent_task").ok().flatten())
                .filter(|p| *p != id);
            let (frames, running, addrs) = match self.slot(objr, l, id, "coro") {
                Some(coro) => {
                    let (f, running, _, addrs) = self.chain(reader, objr, l, coro, snap, &none);
                    (f, running, addrs)
                }
                None => (Vec::new(), false, Vec::new()),
            };
            let task = Task {
                id,
                name,
                state: if running {
                    TaskState::Running
                } else {
                    TaskState::Pending
                },
                awaited_by: parent.into_iter().collect(),
                awaiting: None,
                frames,
                found_in: None,
                wait: None,
            };
            tasks.push((task, addrs));
        }
        tasks.sort_by_key(|(t, _)| t.state != TaskState::Running);
        let left_out = total.saturating_sub(tasks.len().min(limit) as u64);
        tasks.truncate(limit);
        // What each waiting task shown waits on: the first of its innermost
        // frames whose locals tell (Trio's own frames, `wait_task_rescheduled`
        // and the trap below it, tell nothing); a sleep's, its deadline.
        if let Some((w, sleep)) = waits.as_mut() {
            for (t, addrs) in &mut tasks {
                for (k, (f, addr)) in t
                    .frames
                    .iter()
                    .zip(addrs.iter())
                    .enumerate()
                    .take(WAIT_FRAMES)
                {
                    let locals = reader.frame_locals_at(objr.mem, *addr);
                    if sleep.is_sleep_until(f) {
                        t.wait = sleep.wait(objr, &f.function, &locals);
                        // `trio.sleep(seconds)` above it: the sleep's length.
                        if let (Some(w), Some(up), Some(up_addr)) =
                            (t.wait.as_mut(), t.frames.get(k + 1), addrs.get(k + 1))
                        {
                            if sleep.is_sleep(up) {
                                let locals = reader.frame_locals_at(objr.mem, *up_addr);
                                w.duration = seconds_local(objr, &locals);
                            }
                        }
                        break;
                    }
                    t.wait = w.wait_of(t.id, &f.function, &locals);
                    if t.wait.is_some() {
                        break;
                    }
                }
            }
        }
        (tasks.into_iter().map(|(t, _)| t).collect(), left_out)
    }

    /// The offset of the runner's clock when it is Trio's `SystemClock`
    /// (its time is then the monotonic clock's plus the offset); `None` for
    /// another clock, whose time is not known here.
    fn clock_offset(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        runner: u64,
        system_clock: Option<u64>,
    ) -> Option<f64> {
        let clock = self.slot(objr, l, runner, "clock")?;
        // Exactly Trio's: a subclass may keep another time.
        if objr.type_of(clock).ok()? != system_clock? {
            return None;
        }
        let offset = self.slot(objr, l, clock, "offset")?;
        objr.float(offset)
    }
}

impl GuestFacts {
    fn find(objr: &ObjReader, interp: u64) -> Option<GuestFacts> {
        let file = |module: &str| {
            module_attr(objr, interp, module, "__file__")
                .and_then(|f| objr.string(f, 4096).ok())
                .filter(|(_, cut)| !cut)
                .map(|(f, _)| crate::stack::escape_controls(&f).into_owned())
        };
        Some(GuestFacts {
            guest_state: module_attr(objr, interp, RUN_MODULE, "GuestState")?,
            run_file: file(RUN_MODULE)?,
            cache_file: file(THREAD_CACHE_MODULE)?,
        })
    }

    fn is_guest_tick(&self, f: &Frame) -> bool {
        named(f, GUEST_TICK) && f.file.as_deref() == Some(&*self.run_file)
    }

    fn is_handle_job(&self, f: &Frame) -> bool {
        named(f, HANDLE_JOB) && f.file.as_deref() == Some(&*self.cache_file)
    }

    /// The `GuestState` that `obj` is (`direct`), or that one of its
    /// closure's cells holds (a function).
    fn guest_state_in(
        &self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        obj: u64,
        direct: bool,
    ) -> Option<u64> {
        let is_state = |o: u64| objr.type_of(o).is_ok_and(|t| t == self.guest_state);
        if direct {
            return is_state(obj).then_some(obj);
        }
        if objr.type_name(obj).ok()? != "function" {
            return None;
        }
        let closure = objr
            .mem
            .read_u64(obj.wrapping_add(l.func_closure))
            .ok()
            .filter(|c| *c != 0)?;
        let (cells, _) = objr.tuple_items(closure, MAX_CELLS).ok()?;
        cells
            .into_iter()
            .filter(|c| objr.type_name(*c).is_ok_and(|t| t == "cell"))
            .filter_map(|c| {
                objr.mem
                    .read_u64(c.wrapping_add(objr.layout.object.cell_ref))
                    .ok()
            })
            .find(|o| *o != 0 && is_state(*o))
    }
}

/// Whether `f` is a function or method of this name (3.11+ show a
/// method's qualified name).
fn named(f: &Frame, name: &str) -> bool {
    let n = &*f.function;
    n == name
        || n.strip_suffix(name)
            .is_some_and(|p| p.ends_with('.') && !p.ends_with(">."))
}

/// How a sleeping task's deadline is told, for one runner.
struct Sleep<'a> {
    /// The file of `sleep_until`'s module.
    file: Option<&'a str>,
    /// The runner's clock's offset from the monotonic clock (a `SystemClock`).
    offset: Option<f64>,
}

impl Sleep<'_> {
    /// Whether `f` is `trio.sleep_until`'s frame: its name, in its module's file.
    fn is_sleep_until(&self, f: &Frame) -> bool {
        &*f.function == SLEEP_UNTIL && self.in_module(f)
    }

    /// Whether `f` is `trio.sleep`'s frame (which calls `sleep_until`).
    fn is_sleep(&self, f: &Frame) -> bool {
        &*f.function == "sleep" && self.in_module(f)
    }

    fn in_module(&self, f: &Frame) -> bool {
        self.file.is_some_and(|m| f.file.as_deref() == Some(m))
    }

    /// A sleep's wait, from `sleep_until`'s locals: a timer whose deadline
    /// on the monotonic clock is its `deadline` local less the clock's
    /// offset (none where the clock is not a `SystemClock`); no wait for a
    /// sleep without end (`trio.sleep(math.inf)`), which waits as
    /// `sleep_forever` does, on nothing.
    fn wait(&self, objr: &ObjReader, function: &str, locals: &[LocalRef]) -> Option<ObjectWait> {
        let local = locals.iter().find(|l| l.name == "deadline")?;
        let at = objr.float(local.obj).filter(|v| v.is_finite())?;
        Some(ObjectWait {
            kind: "timer",
            type_name: local.kind.clone(),
            object: local.obj,
            local: local.name.clone(),
            function: function.to_string(),
            fd: None,
            deadline: self.offset.map(|o| at - o).filter(|v| v.is_finite()),
            seconds_left: None,
            duration: None,
            waited_s: None,
        })
    }
}

/// `module.name` in interpreter `interp`'s `sys.modules`.
fn module_attr(objr: &ObjReader, interp: u64, module: &str, name: &str) -> Option<u64> {
    let modules = objr
        .mem
        .read_u64(interp.wrapping_add(objr.layout.interp.modules))
        .ok()
        .filter(|m| *m != 0)?;
    let m = objr.dict_get(modules, module).ok().flatten()?;
    let d = objr
        .mem
        .read_u64(m.wrapping_add(objr.layout.object.module_dict))
        .ok()?;
    objr.dict_get(d, name).ok().flatten()
}

/// Whether `obj`'s type is `ty` or derives from it (its `__mro__`).
fn is_a(objr: &ObjReader, l: &AsyncioLayout, obj: u64, ty: u64) -> bool {
    let Ok(t) = objr.type_of(obj) else {
        return false;
    };
    if t == ty {
        return true;
    }
    let Ok(mro) = objr.mem.read_u64(t.wrapping_add(l.type_mro)) else {
        return false;
    };
    objr.tuple_items(mro, MAX_CHAIN as u64)
        .is_ok_and(|(items, _)| items.contains(&ty))
}
