//! One followed Python process and what is kept between its samples, and
//! its read, step by step (see [`Target::sample`]): list the threads, read
//! their states and waits, stop the ones that must stand still, read the
//! Python frames, let them go, then keep, name and order the threads.
//! The steps around the threads' states, waits and names are in
//! `threads.rs`; the native stacks (copy, unwind, merge) in `native.rs`;
//! asyncio tasks, greenlets and loop turns in `tasks.rs`.

mod native;
mod tasks;
mod threads;

pub(crate) use tasks::TaskReaders;

use super::config::{AsyncMode, TargetConfig};
use super::live::Liveness;
use crate::error::Error;
use crate::pause::{self, PauseGuard};
use crate::python::asyncio;
use crate::python::native::{MergeCounts, NativeStacks};
use crate::python::process::PythonProcess;
use crate::python::reader::{LocalObjects, ReadOptions, Reader, ThreadSnapshot};
use crate::stack::{escape_controls, ThreadStack, ThreadStatus};
use crate::target::{LiveProcess, SourceKind, TargetSource};
use crate::wait::{self, WaitDetail, WaitReader};
use foldhash::{HashMap, HashMapExt};
use std::fs::File;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One followed Python process and what is kept between its samples. `dump`
/// reads through this too, once: one read path for every command.
pub(crate) struct Target {
    pub(crate) pid: i32,
    pub(crate) exe: String,
    pub(crate) cmdline: Arc<str>,
    pub(crate) version: String,
    /// A live process, or a core file (read once, nothing paused).
    source: Rc<dyn TargetSource>,
    reader: Reader,
    native: Option<NativeStacks>,
    /// Open `/proc/PID/task/TID/stat` of each Python thread, read with
    /// pread each tick rather than reopened.
    stat_files: HashMap<i32, File>,
    /// Open `/proc/PID/task/TID/schedstat` of each Python thread, and what
    /// it said this pass for the threads seen off their CPU just before:
    /// the reader keeps the stacks of threads whose counts do not move.
    sched_files: HashMap<i32, File>,
    ran: HashMap<i32, (u64, u64)>,
    /// Python threads' kernel tids as of the latest read, and which holds the GIL.
    threads: Vec<(i32, bool)>,
    states: HashMap<i32, char>,
    /// A live process's identity checks; None for a core.
    live: Option<Liveness>,
    /// Bytes of each thread's stack to copy at the next pause (--native).
    stack_copy: HashMap<i32, usize>,
    pause_notes: Vec<Error>,
    waits: WaitReader,
    /// The waits of the threads that are not running, read before pausing
    /// (a pause interrupts a call, and the kernel may rewrite its arguments).
    pending: HashMap<i32, (wait::Wait, Option<wait::CallArgs>)>,
    /// The waits of threads Python does not know (--native-all: pool
    /// workers), read before pausing like `pending`; and those threads as
    /// of the latest read, whose syscall files the wait reader keeps open.
    foreign_waits: HashMap<i32, wait::Wait>,
    foreign_seen: Vec<(i32, bool)>,
    /// Asyncio's and Trio's tasks, greenlets.
    tasks: tasks::TaskReaders,
    turns: asyncio::LoopTurns,
    /// The latest sample's loop turns, taken by the sampler.
    pub(super) loop_turns: Vec<(u32, u64)>,
    /// When the latest sample's frames were read (its threads stopped, or
    /// read as they ran).
    pub(super) read_at: Instant,
    /// Kernel names of threads `threading` does not name, and when read.
    os_names: HashMap<i32, (Option<String>, Instant)>,
    /// Threads that did not stop within the budget at the latest sample,
    /// or whose unwind read beyond the stack copied during the pause.
    late_threads: usize,
    /// The threads the latest pause stopped: most often those the next
    /// must stop (see [`Target::sample`]).
    last_paused: Vec<i32>,
    /// Whether a pause has held threads of this process yet: the first read
    /// always stops them (so that another tracer is found at once).
    stopped_once: bool,
    /// Reads to make stopped before a read without a stop is tried again,
    /// and how many that was after the latest failed try (see `sample`).
    stop_first: u32,
    stop_backoff: u32,
}

/// What one sample does, decided at its start (see [`Target::sample`]).
struct Pass {
    started: Instant,
    /// A live process (a core is read once, nothing paused).
    live: bool,
    /// Threads are stopped for the read (a live process, not `nonblocking`).
    pausing: bool,
    /// The list the latest paused read found is current enough to pause
    /// from (see `begin_sample`).
    reuse_list: bool,
    read_kernel_states: bool,
    want_waits: bool,
    /// Read first without a stop, checked by a second read.
    unstopped: bool,
}

/// The threads stopped before the other threads' states are read (see
/// `stop_predicted`).
struct Early {
    /// Their pause; none when one of them need not stop, or when the
    /// states read after it showed the GIL gone to another thread.
    guard: Option<PauseGuard>,
    /// The threads whose states were read first (sorted).
    read: Vec<i32>,
}

impl Target {
    /// Whether a garbage collection was running at the latest sample.
    pub(crate) fn gc_collecting(&self) -> Option<bool> {
        self.reader.gc_collecting
    }

    /// Open a live process.
    pub(crate) fn open(pid: i32, cfg: &TargetConfig) -> Result<Target, Error> {
        let live = Liveness::open(pid)?;
        crate::privilege::check_target(pid)?;
        Target::open_with(Rc::new(LiveProcess::new(pid)), cfg, Some(live))
    }

    /// Open a target that is not a live process (a core file): its samples
    /// pause nothing and take each thread's registers from the source.
    pub(crate) fn open_source(
        source: Box<dyn TargetSource>,
        cfg: &TargetConfig,
    ) -> Result<Target, Error> {
        let source: Rc<dyn TargetSource> = Rc::from(source);
        if source.kind() == SourceKind::Live {
            return Target::open(source.pid(), cfg);
        }
        Target::open_with(source, cfg, None)
    }

    fn open_with(
        source: Rc<dyn TargetSource>,
        cfg: &TargetConfig,
        mut live: Option<Liveness>,
    ) -> Result<Target, Error> {
        let pid = source.pid();
        let process = PythonProcess::open(&*source)?;
        let mut reader = Reader::new(process);
        // Opened very early, interpreter discovery can settle on a wrong
        // candidate; its thread ids then are not threads of the process.
        // One thread that is not (any more) is churn, or a target writing
        // other ids into its thread states: those are never paused. A list
        // read while threads come and go can be torn: read it again.
        let mut attempts = 0;
        let threads = loop {
            // Fails while the interpreter is not up yet (NotInitialized).
            let threads = reader.python_threads(&*source)?;
            let tasks = source.threads()?;
            if threads.is_empty() || threads.iter().any(|(t, _)| tasks.contains(t)) {
                break threads;
            }
            attempts += 1;
            if attempts >= 5 {
                return Err(Error::NotInitialized { pid });
            }
        };
        if !cfg.pause.nonblocking && live.is_some() {
            // Another tracer: say who, before any pause fails on it.
            super::live::check_not_traced(pid, &threads)?;
        }
        let native = if cfg.read.native {
            Some(NativeStacks::new(
                source.clone(),
                cfg.read.native_all,
                cfg.read.native_debug_info,
                cfg.read.full_names,
            )?)
        } else {
            None
        };
        // An exec while we opened it (a program just launched): its
        // identity is that of the old image; open it again. The memory the
        // cheap check reads is opened first, so that it is this image's.
        if let Some(l) = live.as_mut() {
            l.watch_memory(pid, reader.process.interp_head_ptr)?;
        }
        // A core's calls come from its registers, decoded the same way;
        // its deadlines are counted from when it was written.
        let waits = if live.is_some() {
            WaitReader::new(pid, cfg.read.waits)
        } else {
            let age = source
                .recorded_at()
                .and_then(|at| at.elapsed().ok())
                .map_or(0.0, |d| d.as_secs_f64());
            WaitReader::recorded(pid, cfg.read.waits, age)
        };
        let p = &reader.process;
        let mut t = Target {
            pid,
            exe: p.exe.clone(),
            cmdline: Arc::from(escape_controls(&p.cmdline).as_ref()),
            version: p.version.to_string(),
            source,
            reader,
            native,
            stat_files: HashMap::new(),
            sched_files: HashMap::new(),
            ran: HashMap::new(),
            last_paused: Vec::new(),
            stopped_once: false,
            stop_first: 0,
            stop_backoff: 0,
            threads,
            states: HashMap::new(),
            tasks: Default::default(),
            turns: Default::default(),
            loop_turns: Vec::new(),
            read_at: Instant::now(),
            waits,
            pending: HashMap::new(),
            foreign_waits: HashMap::new(),
            foreign_seen: Vec::new(),
            os_names: HashMap::new(),
            live,
            stack_copy: HashMap::new(),
            pause_notes: Vec::new(),
            late_threads: 0,
        };
        // One read without pausing fills the code-object and name caches,
        // so that the first paused read is as short as the later ones
        // (what it finds is thrown away: it may be torn).
        let opts = ReadOptions {
            locals: cfg.read.locals,
            names: true,
            function_lines: cfg.read.function_lines,
            positions: cfg.read.positions,
            gil_sync: false,
            local_objects: LocalObjects::None,
        };
        let _ = t.reader.snapshot(&*t.source, opts, &t.states, &t.ran);
        Ok(t)
    }

    /// When the latest sample read its frames, and the turns of the asyncio
    /// loops it read (with `loop_turns`): what a caller that reads a target
    /// outside a [`crate::sampler::Sampler`] dates and matches it by.
    pub(crate) fn latest_read(&self) -> (Instant, &[(u32, u64)]) {
        (self.read_at, &self.loop_turns)
    }

    /// Still the process we opened: not exited, not another process under a
    /// reused pid, not another program after an exec.
    fn check_identity(&mut self) -> Result<(), Error> {
        match self.live.as_mut() {
            Some(live) => live.check(self.pid),
            None => Ok(()),
        }
    }

    /// Native unwinds that failed and merges that fell back since the last
    /// call: the samples were kept, but the summary counts them.
    pub(crate) fn take_merge_counts(&mut self) -> MergeCounts {
        self.native
            .as_mut()
            .map(|n| n.take_merge_counts())
            .unwrap_or_default()
    }

    pub(crate) fn take_notes(&mut self) -> Vec<Error> {
        let mut notes = std::mem::take(&mut self.pause_notes);
        if let Some(n) = self.native.as_mut() {
            notes.extend(n.take_notes());
        }
        notes
    }

    /// What went wrong without stopping the read (shown once by dump).
    pub(crate) fn warnings(&mut self) -> Vec<String> {
        let mut w = self.reader.process.warnings.clone();
        w.extend(self.tasks.notes().cloned());
        if let Some(n) = self.native.as_mut() {
            w.extend(n.warnings());
        }
        w
    }

    /// One sample in which every thread to pause stopped, and every native
    /// unwind found its stack in the copy, if a few tries can get one
    /// (dump): a thread that a busy machine leaves without CPU misses the
    /// stop budget now and then, and a first copy may be too shallow (the
    /// next try copies as deep as the unwind went). Each try holds no thread
    /// longer than the budget; the last try's sample is taken as it is.
    pub(crate) fn sample_whole(&mut self, cfg: &TargetConfig) -> Result<Vec<ThreadStack>, Error> {
        let mut tries = 0;
        loop {
            let r = self.sample(cfg);
            tries += 1;
            if self.late_threads == 0 || tries >= 10 || r.is_err() {
                return r;
            }
            pause::release_lingering(Duration::from_millis(200));
        }
    }

    /// One read of the process: its threads' states and waits (before any
    /// is stopped: a thread we stop would read as stopped), the pause of
    /// those that must stand still, their Python frames (and native
    /// registers and stack copies, asyncio tasks, greenlets, loop turns)
    /// while they do, and after they are let go the native unwinds, the
    /// merge, and the threads kept, named and ordered.
    pub(crate) fn sample(&mut self, cfg: &TargetConfig) -> Result<Vec<ThreadStack>, Error> {
        self.check_identity()?;
        let r = self.sample_checked(cfg);
        if r.is_err() {
            // Failed reads of a process that ended (or exec'd) say so.
            if let Some(live) = self.live.as_mut() {
                live.recheck(self.pid)?;
            }
        }
        r
    }

    /// [`Target::sample`] once the identity is checked.
    fn sample_checked(&mut self, cfg: &TargetConfig) -> Result<Vec<ThreadStack>, Error> {
        let pass = self.begin_sample(cfg)?;
        let mut early = self.stop_predicted(cfg, &pass)?;
        self.read_states_before_stop(&pass, &mut early)?;
        self.read_waits_before_stop(&pass);
        let pause = if pass.pausing {
            self.to_pause(cfg)?
        } else {
            Vec::new()
        };
        let foreign_states = self.read_foreign_before_stop(&pass, &pause);
        let mut guard = self.stop(&pass, &pause, early)?;
        let opts = ReadOptions {
            locals: cfg.read.locals,
            names: true,
            function_lines: cfg.read.function_lines,
            positions: cfg.read.positions,
            gil_sync: pass.want_waits,
            local_objects: if cfg.read.waits == WaitDetail::Full {
                LocalObjects::Locks
            } else {
                LocalObjects::None
            },
        };
        let mut snap = self.read_frames(opts);
        if pass.pausing && guard.is_none() && !pause.is_empty() {
            guard = self.confirm_unstopped(opts, &pause, &mut snap)?;
        }
        if guard.as_ref().is_some_and(|g| g.tids().next().is_some()) {
            self.stopped_once = true;
        }
        let copies = self.copy_stacks(cfg, guard.as_ref());
        self.note_late(guard.as_ref());
        // Tasks are read while the threads still stand still.
        let mut tasks = self.read_tasks(cfg, snap.as_deref().ok());
        self.read_loop_turns(cfg, snap.as_deref().ok());
        drop(guard);
        let unwound = self.unwind(copies);
        let mut snap = snap?;
        for (i, t) in snap.iter_mut().enumerate() {
            t.stack.asyncio = tasks.remove(&i);
        }
        self.keep_thread_list(cfg, &snap);
        if pass.want_waits {
            self.attach_waits(&mut snap);
        }
        let mut foreign = self.merge_native(&mut snap, &unwound, &foreign_states);
        if pass.want_waits && !pass.live {
            self.attach_recorded_waits(&mut foreign);
        }
        Ok(self.keep_and_order(cfg, snap, foreign))
    }

    /// What this sample does, decided at its start; the Python thread list
    /// walked afresh when the latest is not current enough to pause from.
    fn begin_sample(&mut self, cfg: &TargetConfig) -> Result<Pass, Error> {
        // The set to pause must be current: a thread missed here would be
        // read running. The list the latest paused read found is current
        // enough while the process has as many threads as when the list was
        // last walked, for SAME_CALL_TTL at most, and while its GIL holder
        // has not gone to sleep (then the GIL moved; see
        // `read_states_before_stop`).
        let started = Instant::now();
        let reuse_list = !cfg.pause.nonblocking
            && self.live.as_ref().is_some_and(|l| {
                l.listed.is_some_and(|(at, n)| {
                    n == l.num_threads
                        && started.saturating_duration_since(at) < wait::SAME_CALL_TTL
                })
            });
        if !cfg.pause.nonblocking && !reuse_list {
            self.list_threads(started)?;
        }
        // Kernel states decide what to pause and which threads are idle:
        // reading them (the kernel formats a whole stat line per thread) is
        // skipped when neither is needed.
        let filter_idle = !cfg.filter.include_idle && !cfg.filter.gil_only;
        let live = self.live.is_some();
        let want_waits = cfg.read.waits != WaitDetail::Off;
        let pausing = live && !cfg.pause.nonblocking;
        // Each thread's state and wait is read before it is seized (a
        // thread we stop would read as stopped), and the seizes of one pause
        // are made in one loop, with nothing read between them: a seize
        // blocks while an exec in the target holds its credentials, and that
        // exec waits for any thread of ours it killed to be reaped. Seizing
        // one thread after another was stopped and killed would wait forever
        // (it did, 1 run in about 20 of the exec test, when the seizes were
        // spread around these reads).
        let read_kernel_states =
            live && (filter_idle || cfg.read.statuses || want_waits || pausing);
        // A read without a stop, checked by a second read of the frames it
        // walked: kept when every chain and the GIL holder are as they were,
        // else the threads are stopped and read again. Not for what only a
        // stop gives (registers, locals, lock objects, asyncio's objects),
        // nor for the first read. After a failed check, reads stop at once
        // for a while (1, 2, 4 ... 64 reads), so code whose frames move all
        // the time pays little for the tries.
        let unstopped = pausing
            && self.stopped_once
            && self.native.is_none()
            && !cfg.read.native_all
            && cfg.read.locals == 0
            && cfg.read.waits != WaitDetail::Full
            && matches!(cfg.read.asyncio, AsyncMode::Off)
            && self.stop_first == 0;
        self.stop_first = self.stop_first.saturating_sub(1);
        Ok(Pass {
            started,
            live,
            pausing,
            reuse_list,
            read_kernel_states,
            want_waits,
            unstopped,
        })
    }

    /// The pause of this sample: the early one when it stops every thread
    /// to pause (its stops are waited for now), else a new one made in one
    /// loop (the early one let go first); none for a read without a stop.
    fn stop(
        &mut self,
        pass: &Pass,
        pause: &[i32],
        early: Option<Early>,
    ) -> Result<Option<PauseGuard>, Error> {
        let (early, stopping) = match early {
            Some(e) => (e.guard, e.read),
            None => (None, Vec::new()),
        };
        let guard = match early {
            Some(mut g) if pause.iter().all(|t| stopping.binary_search(t).is_ok()) => {
                g.wait_stops();
                Some(g)
            }
            Some(g) => {
                // Another thread must stop too: this pause goes first.
                drop(g);
                Some(PauseGuard::new(self.pid, pause)?)
            }
            None if pass.pausing && (!pass.unstopped || pause.is_empty()) => {
                Some(PauseGuard::new(self.pid, pause)?)
            }
            None => None,
        };
        if pass.pausing {
            self.last_paused.clear();
            self.last_paused.extend_from_slice(pause);
        }
        Ok(guard)
    }

    /// The Python frames, as they are now (stopped or not).
    fn read_frames(&mut self, opts: ReadOptions) -> Result<Vec<ThreadSnapshot>, Error> {
        self.read_at = Instant::now();
        self.reader
            .snapshot(&*self.source, opts, &self.states, &self.ran)
    }

    /// A read without a stop is kept when a second look finds every chain
    /// and the GIL holder as they were; else the threads in `pause` are
    /// stopped and `snap` is read again (and the next reads stop at once,
    /// twice as many as after the previous failed try, up to 64).
    fn confirm_unstopped(
        &mut self,
        opts: ReadOptions,
        pause: &[i32],
        snap: &mut Result<Vec<ThreadSnapshot>, Error>,
    ) -> Result<Option<PauseGuard>, Error> {
        if snap.is_ok() && self.reader.stood_still(&*self.source) {
            self.stop_backoff = 0;
            return Ok(None);
        }
        self.stop_backoff = (self.stop_backoff * 2).clamp(1, 64);
        self.stop_first = self.stop_backoff;
        let guard = PauseGuard::new(self.pid, pause)?;
        *snap = self.read_frames(opts);
        Ok(Some(guard))
    }

    /// Threads that did not stop in time are counted.
    fn note_late(&mut self, guard: Option<&PauseGuard>) {
        self.late_threads = guard.map_or(0, |g| g.not_stopped().len());
        if self.late_threads > 0 {
            // Read with a thread running that should have stood still: the
            // list it finds may be torn, so the next pause walks it afresh.
            if let Some(l) = self.live.as_mut() {
                l.listed = None;
            }
        }
    }

    /// The Python thread list the next sample starts from: what this read
    /// found.
    fn keep_thread_list(&mut self, cfg: &TargetConfig, snap: &[ThreadSnapshot]) {
        if cfg.pause.nonblocking || self.live.is_some() {
            // Non-blocking: no pause needs the list up front, the next tick
            // reads the states of the threads this one saw. Pausing: what
            // this read found (with the GIL holder stopped) is the list the
            // next tick may pause from.
            self.threads = snap
                .iter()
                .filter_map(|t| Some((t.stack.os_thread_id? as i32, t.stack.holds_gil)))
                .collect();
        }
    }

    /// The threads a sample gives: `snap`'s with a `[GC]` frame where
    /// asked, asyncio's stitched, the idle ones dropped unless kept, named,
    /// oldest interpreter and thread first, then `foreign`, every name
    /// escaped.
    fn keep_and_order(
        &mut self,
        cfg: &TargetConfig,
        snap: Vec<ThreadSnapshot>,
        mut foreign: Vec<ThreadStack>,
    ) -> Vec<ThreadStack> {
        let mut threads: Vec<ThreadStack> = snap
            .into_iter()
            .map(|mut t| {
                if t.in_gc && cfg.read.gc_frames {
                    t.stack.frames.insert(0, crate::stack::Frame::gc_marker());
                }
                t.stack
            })
            .collect();
        let mut waiting = Vec::new();
        if let AsyncMode::Stitch { all } = cfg.read.asyncio {
            for t in threads.iter_mut() {
                if all {
                    waiting.extend(crate::python::greenlet::waiting_stacks(t));
                }
                waiting.extend(asyncio::stitch(t, all));
            }
        }
        if cfg.filter.gil_only {
            threads.retain(|t| t.holds_gil);
        } else if !cfg.filter.include_idle {
            threads.retain(|t| t.status != ThreadStatus::Idle);
            foreign.retain(|t| t.status != ThreadStatus::Idle);
        }
        // Only the threads that are kept: a name costs a read of /proc.
        self.name_from_os(&mut threads);
        threads.extend(waiting);
        // Oldest interpreter and thread first, as dump shows them (the
        // interpreter's lists are newest first).
        threads.reverse();
        threads.sort_by_key(|t| t.interpreter);
        threads.extend(foreign);
        // Names come from the target: none may reach a terminal or a
        // document with control characters in it.
        for t in &mut threads {
            t.escape_names();
        }
        threads
    }
}
