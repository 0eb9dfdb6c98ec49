//! The event loops: which thread runs each, their queues (ready handles
//! and timers, and the tasks only they hold), and [`LoopTurns`], the count
//! of callbacks each loop has begun.

use super::objects::{deque_items, instance_attrs};
use super::registry::Found;
use super::state::{AsyncioReader, Kind, RawTask, MAX_TASKS};
use crate::cpython_layouts::asyncio::{AsyncioLayout, GenFrame};
use crate::memory::{le_u64, MemoryExt};
use crate::python::objects::slot_offset;
use crate::python::objects::ObjReader;
use crate::python::reader::ThreadSnapshot;
use crate::stack::{Frame, LoopQueues};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Most event loops whose queues are read per interpreter.
pub(super) const MAX_LOOPS: usize = 64;
/// Most tasks taken from the loops' queues (those no registry lists).
const MAX_QUEUE_TASKS: usize = 4096;
/// Most handles of a loop's ready queue looked at.
const MAX_READY: u64 = 1 << 16;
/// A queue longer than this is no real one (a corrupt or racing object):
/// its length is not reported and its items are not read.
const QUEUE_LEN_SANE: u64 = 1 << 32;

/// A loop's timers: future → (deadline on the loop's clock, is a sleep).
pub(super) type Timers = HashMap<u64, (f64, bool)>;

/// One event loop's queues as one snapshot read them.
pub(super) struct LoopScan {
    queues: LoopQueues,
    pub(super) timers: Timers,
    /// The tasks a queued handle's callback runs, and in which queue.
    runs: Vec<(u64, &'static str)>,
}

impl AsyncioReader {
    /// Which thread runs each task's loop (`found.loop_thread` holds those
    /// known, and gains the others): per thread, its tasks (indexes into
    /// `tasks`). A loop no thread claims runs on the interpreter's main
    /// thread.
    pub(super) fn tasks_by_thread(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        tasks: &[RawTask],
        found: &mut Found,
        snaps: &[ThreadSnapshot],
        threads: &[usize],
    ) -> HashMap<usize, Vec<usize>> {
        let (running, loop_thread) = (&found.running, &mut found.loop_thread);
        let main_thread = *threads.last().unwrap_or(&0);
        let by_addr: HashMap<u64, &RawTask> = tasks.iter().map(|t| (t.addr, t)).collect();
        // A loop without `_thread_id` (uvloop's) that runs a task: the
        // thread whose stack holds that task's coroutine frame.
        let running_on = |lp: u64| -> Option<usize> {
            let t = by_addr.get(running.get(&lp)?)?;
            let frame = match l.gen_frame {
                GenFrame::Pointer(o) => objr.mem.read_u64(t.coro.wrapping_add(o)).ok()?,
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
                        .loop_thread(objr, t.loop_, snaps, threads)
                        .or_else(|| running_on(t.loop_))
                        .unwrap_or(main_thread);
                    loop_thread.insert(t.loop_, th);
                    th
                }
            };
            by_thread.entry(th).or_default().push(k);
        }
        by_thread
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

    /// The tasks that no registry lists but that a handle in one of their
    /// loops' queues will run: a handle's callback that is a task's step
    /// or wake-up, or a timer whose future wakes a task when it resolves
    /// (a sleep). Each loop of `tasks` (and of the running tasks) is read
    /// once, its scan kept in `scans`; at most `room` tasks are returned.
    pub(super) fn queued_tasks(
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
    pub(super) fn scan_loop(
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
    pub(super) fn slot(
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

/// Each loop's queues under the thread that runs it, and each loop's
/// timers (what a sleeping task awaits).
pub(super) fn queues_by_thread(
    scans: HashMap<u64, LoopScan>,
    loop_thread: &HashMap<u64, usize>,
) -> (
    HashMap<usize, Vec<LoopQueues>>,
    HashMap<u64, Option<Timers>>,
) {
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
    (queues, sleeps)
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
/// uvloop's loop does the same with its own `_ready` deque (each idle turn
/// pops the callbacks queued so far, one by one), kept in a C field of
/// the Cython object rather than in a `__dict__`.
///
/// The loop comes from the `self` of asyncio's `_run_once` frame, or (a
/// loop with no Python frames of its own: uvloop's) from the `_loop` of
/// the `asyncio.Runner` whose `run` frame is on the thread's stack. Its
/// ready deque is found once (checked by type), then each read is one copy
/// of the deque's header, checked by its type pointer.
#[derive(Default)]
pub(crate) struct LoopTurns {
    /// Loop → its ready deque and that deque's type, or when it was last
    /// looked for in vain (looked for again after [`TURN_RETRY`]: a read
    /// that raced the loop's own writes must not leave it without turns).
    ready: HashMap<u64, Result<(u64, u64), Instant>>,
    /// `asyncio.Runner` → its `_loop`, looked up once (a dict scan), not
    /// at every sample; forgotten with its loop's deque.
    runners: HashMap<u64, u64>,
}

/// How long a loop whose ready queue was not found waits for another look.
const TURN_RETRY: Duration = Duration::from_secs(1);
/// How much of a loop object without a `__dict__` (uvloop's, whose C
/// struct runs to 250 KB with its buffers) is searched for its ready
/// deque: its object fields come first.
const C_LOOP_FIELDS_SEARCHED: u64 = 1024;

/// The frame a thread's event loop is found from (innermost first): the
/// sampler reads the loop's turn through it (`ReadConfig::loop_turns`).
/// asyncio's `BaseEventLoop._run_once`, whose `self` is the loop; else,
/// for a loop with no Python frames of its own (uvloop's), the
/// `asyncio.Runner.run` (3.11+) that runs it.
pub(crate) fn loop_frame(frames: &[Frame]) -> Option<(&Frame, LoopFrame)> {
    frames
        .iter()
        .find(|f| is_run_once(f))
        .map(|f| (f, LoopFrame::RunOnce))
        .or_else(|| {
            frames
                .iter()
                .find(|f| is_runner_run(f))
                .map(|f| (f, LoopFrame::Runner))
        })
}

/// asyncio's `BaseEventLoop._run_once`: told by its name and its file.
pub(crate) fn is_run_once(f: &Frame) -> bool {
    f.function.ends_with("_run_once") && f.file_ends_with("asyncio/base_events.py")
}

fn is_runner_run(f: &Frame) -> bool {
    &*f.function == "Runner.run" && f.file_ends_with("asyncio/runners.py")
}

/// The first local (a method's `self`) of the frame at `frame`; None when
/// unset.
fn frame_self(
    objr: &ObjReader,
    fl: &crate::cpython_layouts::FrameLayout,
    frame: u64,
) -> Option<u64> {
    let this = objr.mem.read_u64(frame.wrapping_add(fl.localsplus)).ok()? & !fl.pointer_tag_bits;
    (this != 0).then_some(this)
}

/// The callbacks waiting in the ready queue of the asyncio loop that
/// `_run_once`'s frame at `frame` runs (its `self`): each handle's
/// `_callback`, at most [`MAX_READY`].
pub(super) fn ready_callbacks(
    reader: &mut AsyncioReader,
    objr: &ObjReader,
    l: &AsyncioLayout,
    frame: u64,
) -> Vec<u64> {
    let Some(dq) = frame_self(objr, &objr.layout.frame, frame).and_then(|lp| ready_deque(objr, lp))
    else {
        return Vec::new();
    };
    deque_items(objr, l, dq, MAX_READY)
        .into_iter()
        .filter_map(|h| reader.slot(objr, l, h, "_callback"))
        .collect()
}

/// Where the loop whose turns are read comes from, in a thread's stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoopFrame {
    /// asyncio's `BaseEventLoop._run_once`: its `self` is the loop.
    RunOnce,
    /// `asyncio.Runner.run` (3.11+): its `self._loop` is the loop.
    Runner,
}

impl LoopTurns {
    /// The turn of the loop that the frame at `frame` (of kind `kind`)
    /// runs.
    pub(crate) fn read(
        &mut self,
        objr: &ObjReader,
        fl: &crate::cpython_layouts::FrameLayout,
        frame: u64,
        kind: LoopFrame,
    ) -> Option<u64> {
        let lp = self.loop_of(objr, fl, frame, kind)?;
        self.turn_of(objr, lp)
    }

    /// The loop that the frame at `frame` (of kind `kind`) runs.
    pub(crate) fn loop_of(
        &mut self,
        objr: &ObjReader,
        fl: &crate::cpython_layouts::FrameLayout,
        frame: u64,
        kind: LoopFrame,
    ) -> Option<u64> {
        let this = frame_self(objr, fl, frame)?;
        let lp = match kind {
            LoopFrame::RunOnce => this,
            LoopFrame::Runner => match self.runners.get(&this) {
                Some(&lp) => lp,
                None => {
                    let lp = instance_attrs(objr, this, &["_loop"]).first()?.1;
                    if self.runners.len() >= MAX_TURN_LOOPS {
                        self.runners.clear();
                    }
                    self.runners.insert(this, lp);
                    lp
                }
            },
        };
        (lp != 0).then_some(lp)
    }

    /// The turn of loop `lp` (as [`LoopTurns::loop_of`] found it): how
    /// many callbacks it has begun.
    pub(crate) fn turn_of(&mut self, objr: &ObjReader, lp: u64) -> Option<u64> {
        let look = match self.ready.get(&lp) {
            Some(Ok(_)) => false,
            Some(Err(at)) => at.elapsed() >= TURN_RETRY,
            None => true,
        };
        if look {
            if self.ready.len() >= MAX_TURN_LOOPS {
                self.ready.clear();
            }
            let found = ready_deque(objr, lp).and_then(|d| Some((d, objr.type_of(d).ok()?)));
            if found.is_none() {
                // A runner read mid-change may have named no loop: asked again.
                self.runners.retain(|_, l| *l != lp);
            }
            self.ready.insert(lp, found.ok_or_else(Instant::now));
        }
        let (dq, ty) = (*self.ready.get(&lp)?).ok()?;
        let o = &objr.layout.object;
        let state_at = o.ob_size + DEQUE_STATE_AFTER_SIZE;
        let mut buf = [0u8; 96];
        let len = (state_at + 8).min(buf.len() as u64) as usize;
        if state_at + 8 > len as u64 {
            return None;
        }
        if objr.mem.read(dq, &mut buf[..len]).is_err() {
            // Unmapped: the loop is gone; its runner is asked again.
            self.ready.remove(&lp);
            self.runners.retain(|_, l| *l != lp);
            return None;
        }
        if le_u64(&buf, o.ob_type) != ty {
            // Freed, or something else now: found again next time (and
            // the runner that led here looked at again).
            self.ready.remove(&lp);
            self.runners.retain(|_, l| *l != lp);
            return None;
        }
        let size = le_u64(&buf, o.ob_size);
        let state = le_u64(&buf, state_at);
        Some(state.wrapping_sub(size))
    }
}

fn is_deque(objr: &ObjReader, obj: u64) -> bool {
    objr.type_name(obj).is_ok_and(|t| t == "collections.deque")
}

/// A loop's ready deque: its `_ready` attribute (asyncio's loops), else the
/// one deque among the first object fields of a loop without a `__dict__`
/// (uvloop's Cython `Loop`, whose only deque is `_ready`). Every word there
/// is taken for a possible object and its type checked by name: a word
/// that is no pointer fails the read, or names no deque.
fn ready_deque(objr: &ObjReader, lp: u64) -> Option<u64> {
    let attr = instance_attrs(objr, lp, &["_ready"])
        .first()
        .map(|(_, v)| *v);
    if let Some(d) = attr {
        return is_deque(objr, d).then_some(d);
    }
    let o = &objr.layout.object;
    let ty = objr.type_of(lp).ok()?;
    let basic = objr.mem.read_u64(ty.wrapping_add(o.tp_basicsize)).ok()?;
    let n = basic.min(C_LOOP_FIELDS_SEARCHED) as usize;
    let header = (o.ob_type + 8) as usize;
    if n <= header {
        return None;
    }
    let mut buf = vec![0u8; n];
    objr.mem.read(lp, &mut buf).ok()?;
    (header..n - 7)
        .step_by(8)
        .map(|at| le_u64(&buf, at as u64))
        .filter(|&p| p != 0 && p % 8 == 0 && p != lp)
        .find(|&p| is_deque(objr, p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpython_layouts::asyncio::DEQUE_BLOCK_LEN;
    use crate::memory::SliceMemory;
    use crate::python::pagecache::PageCache;

    const BASE: u64 = 0x10_0000;

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
}
