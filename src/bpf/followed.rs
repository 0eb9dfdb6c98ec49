//! One process the eBPF engine follows: its interpreter's reader, its
//! Python threads (kept in the program's thread-state map), and how the
//! program's records of it become stacks.

use super::records::{RawNative, F_READ_ERROR, F_TRUNCATED, MAX_FRAMES, MAX_STEPS, STACK_MAX};
use crate::error::Error;
use crate::native_unwind::StackCopy;
use crate::python::asyncio;
use crate::python::native::{MergeCounts, NativeStacks};
use crate::python::process::PythonProcess;
use crate::python::reader::bpf::{CodeMemo, ThreadEntry, WalkOffsets, NAME_SOURCE};
use crate::python::reader::Reader;
use crate::sampler::{AsyncMode, SamplerConfig, TaskReaders};
use crate::stack::{FrameMark, ThreadStack, ThreadStatus};
use crate::target::LiveProcess;
use crate::wait::{SyscallLine, WaitReader};
use aya::maps::{HashMap as BpfHashMap, MapData};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the thread-state map is brought up to date (and sooner when a
/// sample names a thread it does not hold, at the next drain).
const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// Threads remembered as running no Python (the map holds 16384 entries).
const MAX_NOT_PYTHON: usize = 4096;
/// With --native: stack bytes the program copies at first, and the margin
/// added when an unwind read past a copy (the program's STACK_MAX at most).
const STACK_COPY_FIRST: u32 = 16 << 10;
const STACK_COPY_MARGIN: u32 = 4 << 10;
/// With --async: distinct stacks whose task attribution a batch keeps.
const MAX_STITCHED: usize = 4096;

/// The program's map of thread states (kernel tid → `PyThreadState *`, or
/// 0 for a thread known to run no Python).
pub(super) type TstateMap = BpfHashMap<MapData, u32, u64>;

pub(super) struct Followed {
    pub(super) pid: i32,
    /// Its entry in the program's layouts map, and what is there.
    pub(super) slot: u32,
    pub(super) layout: super::records::LayoutC,
    /// Its command line, as outputs label it (host-wide: with its cgroup).
    pub(super) label: Arc<str>,
    pub(super) version: String,
    source: LiveProcess,
    reader: Reader,
    /// The Python threads as of the latest refresh, by kernel tid.
    threads: HashMap<i32, ThreadEntry>,
    refreshed: Instant,
    /// A sample named a thread the map did not hold.
    refresh_soon: bool,
    /// Threads a sample named that the thread list still lacked after a
    /// refresh (threads running no Python: a pool of BLAS, a C library's):
    /// the map holds 0 for them, which the program passes over silently.
    not_python: HashSet<i32>,
    /// Threads named by samples since the latest refresh, not in the map.
    unknown_tids: HashSet<i32>,
    /// What off-CPU threads wait for, when the mode names it.
    waits: Option<WaitReader>,
    /// Code objects resolved in the current batch.
    memo: CodeMemo,
    function_lines: bool,
    /// Samples of threads not (yet) in the map.
    pub(super) unknown_thread: u64,
    /// With --native: the unwinder and merger of its samples' native stacks.
    native: Option<NativeStacks>,
    /// With --native: the stack bytes the program is to copy (grown when
    /// an unwind reads past a copy), and whether that changed.
    pub(super) stack_bytes: u32,
    pub(super) stack_bytes_grew: bool,
    /// Every Python frame is the first of its eval-loop call (up to 3.10).
    every_frame_entry: bool,
    /// With --async: the readers of its tasks (and greenlets).
    tasks: Option<TaskReaders>,
    /// With --async, for the current batch: by a sample's frame addresses
    /// (innermost first), how many of its frames stay and the awaiters'
    /// frames that follow them. A thread's samples in one task share the
    /// answer; the tasks are read once for each.
    stitched: HashMap<Vec<u64>, (usize, Vec<crate::stack::Frame>)>,
    /// For watch: where the GIL's holder and lock flag are (looked up
    /// once), the loop each asyncio thread runs (from its latest sample
    /// with frame addresses), and their turns' reader.
    gil: Option<Option<(u64, u64)>>,
    loops: HashMap<i32, u64>,
    turns: asyncio::LoopTurns,
}

impl Followed {
    /// Open `pid` (its interpreter found, its threads listed), as the
    /// program's layout slot `slot`. Errors as [`PythonProcess::open`].
    pub(super) fn open(
        pid: i32,
        slot: u32,
        cfg: &SamplerConfig,
        with_cgroup: bool,
    ) -> Result<(Followed, Vec<ThreadEntry>), Error> {
        let source = LiveProcess::new(pid);
        let process = PythonProcess::open(&source)?;
        let mut reader = Reader::new(process);
        let threads = reader.thread_entries(&source)?;
        let mut label = crate::stack::escape_controls(&reader.process.cmdline).into_owned();
        if with_cgroup {
            if let Some(g) = crate::procfs::cgroup_name(pid) {
                let g = crate::stack::escape_controls(&g);
                label = format!("{label} [cgroup {g}]");
            }
        }
        let native = if cfg.target.read.native {
            let src: std::rc::Rc<dyn crate::target::TargetSource> =
                std::rc::Rc::new(LiveProcess::new(pid));
            Some(NativeStacks::new(
                src,
                cfg.target.read.native_all,
                cfg.target.read.native_debug_info,
                cfg.target.read.full_names,
            )?)
        } else {
            None
        };
        let every_frame_entry = reader.walk_offsets().is_some_and(|w| w.every_frame_entry);
        let tasks = (cfg.target.read.asyncio != AsyncMode::Off).then(TaskReaders::default);
        let f = Followed {
            pid,
            slot,
            layout: Default::default(),
            label: Arc::from(label),
            version: reader.process.version.to_string(),
            source,
            reader,
            threads: HashMap::new(),
            refreshed: Instant::now(),
            refresh_soon: false,
            not_python: HashSet::new(),
            unknown_tids: HashSet::new(),
            waits: (cfg.target.read.waits != crate::wait::WaitDetail::Off)
                .then(|| WaitReader::new(pid, cfg.target.read.waits)),
            memo: CodeMemo::new(),
            function_lines: cfg.target.read.function_lines,
            unknown_thread: 0,
            stack_bytes: if native.is_some() {
                STACK_COPY_FIRST
            } else {
                0
            },
            stack_bytes_grew: false,
            native,
            every_frame_entry,
            tasks,
            stitched: HashMap::new(),
            gil: None,
            loops: HashMap::new(),
            turns: Default::default(),
        };
        Ok((f, threads))
    }

    pub(super) fn offsets(&self) -> Option<WalkOffsets> {
        self.reader.walk_offsets()
    }

    /// Where the program tells the GIL's holder (see `Reader::gil_words`).
    pub(super) fn gil_words(&self) -> Option<(u64, u64)> {
        self.reader.gil_words(&self.source)
    }

    /// The kernel tids of its Python threads, as of the latest refresh.
    pub(super) fn thread_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.threads.keys().map(|t| *t as u32)
    }

    /// Whether its thread list is due to be read again.
    pub(super) fn due(&self) -> bool {
        self.refresh_soon || self.refreshed.elapsed() >= REFRESH_EVERY
    }

    /// A sample named `tid`, which the map did not hold.
    pub(super) fn unknown(&mut self, tid: i32) {
        self.unknown_thread += 1;
        self.unknown_tids.insert(tid);
        self.refresh_soon = true;
    }

    /// A new batch of records: code objects are checked again.
    pub(super) fn new_batch(&mut self) {
        self.memo.clear();
        self.stitched.clear();
    }

    /// Bring the program's thread-state map in line with `threads`; the
    /// threads no longer there.
    pub(super) fn set_threads(
        &mut self,
        tstates: &mut TstateMap,
        threads: Vec<ThreadEntry>,
    ) -> Vec<u32> {
        let mut gone = Vec::new();
        let now: HashMap<i32, ThreadEntry> = threads.into_iter().map(|t| (t.tid, t)).collect();
        for (tid, t) in &now {
            if self.threads.get(tid).map(|o| o.tstate) != Some(t.tstate) {
                let _ = tstates.insert(*tid as u32, t.tstate, 0);
            }
        }
        for tid in self.threads.keys() {
            if !now.contains_key(tid) {
                let _ = tstates.remove(&(*tid as u32));
                gone.push(*tid as u32);
            }
        }
        self.threads = now;
        // Threads that were not Python and now are, or are gone.
        let threads = &self.threads;
        let pid = self.pid;
        self.not_python.retain(|tid| {
            let keep = !threads.contains_key(tid) && crate::procfs::is_task(pid, *tid);
            if !keep && !threads.contains_key(tid) {
                let _ = tstates.remove(&(*tid as u32));
            }
            keep
        });
        // Named by a sample, still not listed: not a Python thread.
        for tid in std::mem::take(&mut self.unknown_tids) {
            if self.threads.contains_key(&tid) || self.not_python.len() >= MAX_NOT_PYTHON {
                continue;
            }
            if tstates.insert(tid as u32, 0u64, 0).is_ok() {
                self.not_python.insert(tid);
            }
        }
        gone
    }

    /// Read the thread list again: the threads gone since; Err when the
    /// process has ended.
    pub(super) fn refresh(&mut self, tstates: &mut TstateMap) -> Result<Vec<u32>, Error> {
        self.refreshed = Instant::now();
        self.refresh_soon = false;
        match self.reader.thread_entries(&self.source) {
            Ok(t) => Ok(self.set_threads(tstates, t)),
            Err(e @ Error::ProcessExited { .. }) => Err(e),
            Err(_) if !self.alive() => Err(Error::ProcessExited { pid: self.pid }),
            // A list read while threads come and go: the next refresh.
            Err(_) => Ok(Vec::new()),
        }
    }

    /// Take its threads out of the program's map (it is no longer
    /// followed): the Python threads it had.
    pub(super) fn forget(&mut self, tstates: &mut TstateMap) -> Vec<u32> {
        for tid in self.threads.keys().chain(self.not_python.iter()) {
            let _ = tstates.remove(&(*tid as u32));
        }
        self.not_python.clear();
        self.threads.drain().map(|(t, _)| t as u32).collect()
    }

    fn alive(&self) -> bool {
        !matches!(
            crate::procfs::thread_state(self.pid, self.pid),
            None | Some('Z' | 'X')
        )
    }

    /// Its threads asleep now (S or D) among those `among` picks, each with
    /// its stack, read from here (asleep, a stack holds still) and its wait.
    pub(super) fn asleep_now(&mut self, among: impl Fn(u32) -> bool) -> Vec<(u32, ThreadStack)> {
        let asleep: Vec<(i32, u64, char)> = self
            .threads
            .iter()
            .filter(|(tid, _)| among(**tid as u32))
            .filter_map(
                |(tid, t)| match crate::procfs::thread_state(self.pid, *tid) {
                    Some(c @ ('S' | 'D')) => Some((*tid, t.tstate, c)),
                    _ => None,
                },
            )
            .collect();
        let mut out = Vec::new();
        for (tid, tstate, c) in asleep {
            let call = self.waits.as_mut().and_then(|w| w.syscall(tid));
            let walk = self.walk_here(&self.source, tstate);
            if let Some(stack) = self.stack_from_walk(tid, walk) {
                out.push((tid as u32, self.off_stack(stack, tid, c, call)));
            }
        }
        out
    }

    /// The stack of thread `tid` from a walk of its frames from here
    /// (`walk_here`), its frames marked with their addresses.
    fn stack_from_walk(&mut self, tid: i32, walk: Vec<(u64, u64, u64)>) -> Option<ThreadStack> {
        let (frames, marks): (Vec<_>, Vec<_>) = walk
            .into_iter()
            .map(|(code, pos, at)| ((code, pos), (at, false, 0)))
            .unzip();
        self.stack_of(tid as u32, 0, frames, &marks, &mut Vec::new())
    }

    /// The frame chain of a thread state, walked from here as the program
    /// walks it (for a thread asleep: its stack does not move): each
    /// frame's code object, instruction position and address.
    /// Read through `mem`: the process, or a page cache over it.
    fn walk_here(&self, mem: &dyn crate::memory::Memory, tstate: u64) -> Vec<(u64, u64, u64)> {
        let Some(w) = self.reader.walk_offsets() else {
            return Vec::new();
        };
        let word = |addr: u64| -> Option<u64> {
            let mut b = [0u8; 8];
            mem.read(addr, &mut b).ok()?;
            Some(u64::from_le_bytes(b))
        };
        let mut out = Vec::new();
        let Some(mut f) = word(tstate.wrapping_add(u64::from(w.tstate_frame))) else {
            return out;
        };
        if w.via_cframe && f != 0 {
            f = word(f.wrapping_add(u64::from(w.cframe_current))).unwrap_or(0);
        }
        for _ in 0..MAX_STEPS {
            if f == 0 || out.len() >= MAX_FRAMES {
                break;
            }
            let at = |off: u32| word(f.wrapping_add(u64::from(off)));
            let (Some(code), Some(pos), Some(prev)) =
                (at(w.frame_code), at(w.frame_pos), at(w.frame_previous))
            else {
                break;
            };
            let shim = w.owner.is_some_and(|(o, shim_from)| {
                let mut b = [0u8; 1];
                mem.read(f.wrapping_add(u64::from(o)), &mut b).is_ok() && b[0] >= shim_from
            });
            if !shim && code != 0 {
                out.push((code, pos, f));
            }
            f = prev;
        }
        out
    }

    /// A stack that left its CPU in state `c`, in system call `call`: off
    /// CPU, with its wait when the mode names waits.
    pub(super) fn off_stack(
        &mut self,
        mut stack: ThreadStack,
        tid: i32,
        c: char,
        call: Option<SyscallLine>,
    ) -> ThreadStack {
        stack.status = ThreadStatus::Idle;
        stack.wait = Some(match self.waits.as_mut() {
            Some(w) => {
                let (mut w, args) = w.read(tid, c, call, &self.source);
                // A futex in the GIL's lock: a GIL wait (who holds it is
                // not known here).
                let gil = self.threads.get(&tid).map(|t| t.gil_sync.clone());
                if let (Some(f), Some(gil)) = (args.and_then(|a| a.futex), gil) {
                    if gil.iter().any(|(a, b)| f >= *a && f < *b) {
                        w.gil = Some(crate::wait::GilWait {
                            holder: None,
                            holder_name: None,
                        });
                    }
                }
                w
            }
            None => crate::wait::Wait {
                state: c.to_string(),
                ..Default::default()
            },
        });
        stack
    }

    /// The stack of thread `tid` from the code-object and position words
    /// of its frames; None for a thread not listed (yet).
    /// With `marks` (from a native record, one per frame), each frame's
    /// address and whether it is an entry frame, for the native merge.
    pub(super) fn stack_of(
        &mut self,
        tid: u32,
        flags: u32,
        frames: Vec<(u64, u64)>,
        marks: &[(u64, bool, u64)],
        errors: &mut Vec<Error>,
    ) -> Option<ThreadStack> {
        let t = self.threads.get(&(tid as i32))?;
        let mut stack = ThreadStack {
            thread_id: t.thread_id,
            os_thread_id: Some(tid),
            name: t.name.clone(),
            name_source: t.name.as_ref().map(|_| NAME_SOURCE),
            interpreter: t.interpreter,
            status: ThreadStatus::Active,
            holds_gil: false,
            frames: Vec::with_capacity(frames.len()),
            truncated: None,
            native_entry: None,
            wait: None,
            asyncio: None,
        };
        for (i, (code, pos)) in frames.into_iter().enumerate() {
            match self.reader.frame_from_words(
                &self.source,
                &mut self.memo,
                code,
                pos,
                self.function_lines,
            ) {
                Ok(Some(mut f)) => {
                    if let Some(&(addr, entry, _)) = marks.get(i) {
                        f.mark = Some(FrameMark {
                            addr,
                            is_entry: entry || self.every_frame_entry,
                            instr: pos,
                        });
                    }
                    stack.frames.push(f)
                }
                Ok(None) => {}
                Err(e) => {
                    stack.truncated.get_or_insert_with(|| {
                        format!("code object at 0x{code:x} unreadable: {e}")
                    });
                    stack
                        .frames
                        .push(crate::stack::Frame::python("<unknown>", "<unknown>", 0));
                    errors.push(Error::Memory(e));
                }
            }
        }
        if flags & F_TRUNCATED != 0 {
            stack.truncated = Some(format!("more than {MAX_FRAMES} frames"));
        } else if flags & F_READ_ERROR != 0 {
            stack
                .truncated
                .get_or_insert_with(|| "a frame could not be read".into());
        }
        Some(stack)
    }

    /// With --native: `stack` (a sample's, its frames marked from `n`)
    /// with the native frames unwound from the registers and stack bytes
    /// the program copied, merged. Without a native record (the ring
    /// buffer had no room for it), the Python frames alone, said so.
    pub(super) fn with_native(
        &mut self,
        stack: ThreadStack,
        n: Option<RawNative>,
        errors: &mut Vec<Error>,
    ) -> ThreadStack {
        let Some(native) = self.native.as_mut() else {
            return stack;
        };
        let Some(n) = n else {
            let mut stack = stack;
            stack
                .truncated
                .get_or_insert_with(|| "no native stack: the ring buffer had no room".into());
            return stack;
        };
        let tid = n.tid as i32;
        let copy = StackCopy::new(n.base, &n.stack, &self.source);
        let frames = native.unwind_regs(tid, n.regs, &copy);
        // The next copies go as deep as this unwind read, and a margin.
        let needed = copy.read_beyond().saturating_sub(n.base);
        if needed > u64::from(self.stack_bytes) && self.stack_bytes < STACK_MAX {
            self.stack_bytes = (needed.min(u64::from(STACK_MAX)) as u32)
                .saturating_add(STACK_COPY_MARGIN)
                .min(STACK_MAX);
            self.stack_bytes_grew = true;
        }
        let mut anchors: Vec<(u64, u64)> = n
            .frames
            .iter()
            .filter(|(_, _, shim)| *shim != 0)
            .map(|&(addr, _, shim)| (shim, addr))
            .collect();
        // 3.11 (no shim frames): each eval-loop call's `_PyCFrame` on the
        // C stack, chained from the one the program read, over its copy.
        if let (true, Some(w)) = (
            anchors.is_empty() && n.cframe != 0,
            self.reader.walk_offsets(),
        ) {
            anchors = crate::python::reader::cframe_chain(
                &copy,
                n.cframe,
                u64::from(w.cframe_current),
                u64::from(w.cframe_previous),
                MAX_FRAMES,
            );
        }
        let mut snap = snapshot(stack, anchors, 0, 0);
        native.merge(&mut snap, &frames);
        errors.extend(native.take_notes());
        snap.stack
    }

    /// With `--async-mode all`: the stacks of its waiting asyncio and Trio
    /// tasks and suspended greenlets, read now from here, each thread's
    /// frames walked as they are (not stopped: what waits holds still, and
    /// what runs is the samples' part, left out here).
    pub(super) fn waiting_stacks(&mut self) -> Vec<ThreadStack> {
        let threads: Vec<(i32, u64, u64)> = self
            .threads
            .iter()
            .map(|(tid, t)| (*tid, t.tstate, t.interp))
            .collect();
        // Every thread's frames walked through one page cache: a frame's
        // words share pages with its neighbours' (a word a system call
        // was 3 a frame).
        let walks: Vec<_> = {
            let cache = crate::python::pagecache::PageCache::new(&self.source);
            threads
                .into_iter()
                .map(|(tid, tstate, interp)| (tid, tstate, interp, self.walk_here(&cache, tstate)))
                .collect()
        };
        let mut snaps = Vec::with_capacity(walks.len());
        for (tid, tstate, interp, walk) in walks {
            if let Some(stack) = self.stack_from_walk(tid, walk) {
                snaps.push(snapshot(stack, Vec::new(), tstate, interp));
            }
        }
        let Some(r) = self.tasks.as_mut() else {
            return Vec::new();
        };
        let all = AsyncMode::Stitch { all: true };
        let mut by = r.read(&mut self.reader, &self.source, 0.0, all, &snaps, None);
        let mut out = Vec::new();
        for (i, s) in snaps.into_iter().enumerate() {
            let mut t = s.stack;
            t.asyncio = by.remove(&i);
            out.extend(crate::python::greenlet::waiting_stacks(&mut t));
            out.extend(asyncio::stitch(&mut t, true));
        }
        // Greenlets' and tasks' names come from the target.
        for t in &mut out {
            t.escape_names();
        }
        out
    }

    /// Samples merged by each method since the last call.
    pub(super) fn take_merge_counts(&mut self) -> MergeCounts {
        self.native
            .as_mut()
            .map(|n| n.take_merge_counts())
            .unwrap_or_default()
    }

    /// With --async: `stack` (a sample's, its frames marked with their
    /// addresses) attributed to the asyncio task it runs, found by its
    /// coroutine's frame among them: the task's awaiters' frames replace
    /// the event loop's below it (`asyncio::stitch`, as the ptrace engine
    /// does). The tasks are read now, after the sample: the running task
    /// is the one the sample ran (its coroutine frame is where it was), its
    /// awaiters as they are now.
    pub(super) fn with_tasks(&mut self, mut stack: ThreadStack) -> ThreadStack {
        let Some(r) = self.tasks.as_mut() else {
            return stack;
        };
        let key: Vec<u64> = stack
            .frames
            .iter()
            .map(|f| f.mark.map_or(0, |m| m.addr))
            .collect();
        if let Some((keep, tail)) = self.stitched.get(&key) {
            stack.frames.truncate(*keep);
            stack.frames.extend(tail.iter().cloned());
            return stack;
        }
        let Some(t) = stack
            .os_thread_id
            .and_then(|tid| self.threads.get(&(tid as i32)))
        else {
            return stack;
        };
        let snaps = [snapshot(stack, Vec::new(), t.tstate, t.interp)];
        let running = AsyncMode::Stitch { all: false };
        let mut by = r.read(&mut self.reader, &self.source, 0.0, running, &snaps, None);
        let [snap] = snaps;
        let mut stack = snap.stack;
        let before = stack.frames.clone();
        stack.asyncio = by.remove(&0);
        asyncio::stitch(&mut stack, false);
        // What stitching kept of the sample's frames, and what it added.
        let keep = before
            .iter()
            .zip(&stack.frames)
            .take_while(|(a, b)| {
                a.function == b.function
                    && a.file == b.file
                    && a.line == b.line
                    && a.mark.map(|m| m.addr) == b.mark.map(|m| m.addr)
            })
            .count();
        if self.stitched.len() < MAX_STITCHED {
            self.stitched
                .insert(key, (keep, stack.frames[keep..].to_vec()));
        }
        stack
    }
}

impl Followed {
    /// For watch: the threads' latest stacks as one tick sees them, read
    /// now: the GIL's holder marked (and named to its waiters), and the
    /// turn of each asyncio loop a thread runs (the loop found from its
    /// `_run_once` frame's address, and remembered for a stack that comes
    /// without addresses: a record whose native record the ring buffer
    /// had no room for).
    pub(super) fn at_tick(
        &mut self,
        mut threads: Vec<ThreadStack>,
    ) -> (Vec<ThreadStack>, Vec<(u32, u64)>) {
        use crate::memory::{Memory, MemoryExt};
        let words = *self
            .gil
            .get_or_insert_with(|| self.reader.gil_words(&self.source));
        let holder = words.and_then(|(holder, locked)| {
            let mut l = [0u8; 4];
            if locked != 0 && self.source.read(locked, &mut l).is_err() {
                return None;
            }
            let h = self.source.read_u64(holder).ok()?;
            (locked == 0 || u32::from_le_bytes(l) != 0).then_some(h)
        });
        let holder = holder.and_then(|h| {
            self.threads
                .iter()
                .find(|(_, t)| t.tstate == h && h != 0)
                .map(|(tid, t)| (*tid as u32, t.name.clone()))
        });
        for t in &mut threads {
            t.holds_gil = holder.as_ref().is_some_and(|h| t.os_thread_id == Some(h.0));
            if let Some(g) = t.wait.as_mut().and_then(|w| w.gil.as_mut()) {
                let other = holder.as_ref().filter(|h| t.os_thread_id != Some(h.0));
                g.holder = other.map(|h| h.0);
                g.holder_name = other.and_then(|h| h.1.clone());
            }
        }
        // The loops of threads gone, or no longer running one, forgotten.
        self.loops
            .retain(|tid, _| threads.iter().any(|t| t.os_thread_id == Some(*tid as u32)));
        let pl = &self.reader.process.layout;
        let objr = crate::python::objects::ObjReader::new(&self.source, pl);
        let mut turns = Vec::new();
        for t in &threads {
            let Some(tid) = t.os_thread_id else { continue };
            let Some((f, kind)) = crate::python::asyncio::loop_frame(&t.frames) else {
                self.loops.remove(&(tid as i32));
                continue;
            };
            if let Some(m) = f.mark {
                if let Some(lp) = self.turns.loop_of(&objr, &pl.frame, m.addr, kind) {
                    self.loops.insert(tid as i32, lp);
                }
            }
            let Some(&lp) = self.loops.get(&(tid as i32)) else {
                continue;
            };
            if let Some(turn) = self.turns.turn_of(&objr, lp) {
                turns.push((tid, turn));
            }
        }
        (threads, turns)
    }
}

/// A sample as the reader's snapshot of a thread, for what takes one (the
/// native merge, the asyncio task reader): its stack (frames marked), the
/// eval loop's anchors on the C stack, its thread state and interpreter.
fn snapshot(
    stack: ThreadStack,
    anchors: Vec<(u64, u64)>,
    tstate: u64,
    interp: u64,
) -> crate::python::reader::ThreadSnapshot {
    crate::python::reader::ThreadSnapshot {
        stack,
        anchors,
        in_gc: false,
        gil_sync: Vec::new(),
        local_refs: Vec::new(),
        tstate,
        interp,
    }
}
