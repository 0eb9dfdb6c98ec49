//! The sampling loop shared by `record` and `top`: a randomised schedule
//! against an absolute clock, the processes followed (the root and, with
//! `subprocesses`, its descendants), and one read of each per tick.
//!
//! Per tick and process the cost is: one `pread` of each Python thread's
//! syscall file (kept open; its stat file too when it is in a new call),
//! the ptrace pause of the Python threads only
//! (unless `nonblocking`), and the reader's snapshot, whose code-object and
//! name caches live as long as the process is followed.

use crate::error::Error;
use crate::memory::Memory;
use crate::native_unwind::NativeFrame;
use crate::pause::{self, PauseGuard};
use crate::procfs;
use crate::python::asyncio::{self, AsyncRead, AsyncioReader};
use crate::python::native::{MergeCounts, NativeStacks};
use crate::python::process::PythonProcess;
use crate::python::reader::{ReadOptions, Reader};
use crate::stack::{escape_controls, ThreadStack, ThreadStatus};
use crate::target::{LiveProcess, SourceKind, TargetSource};
use crate::wait::{self, GilWait, LockWait, WaitDetail, WaitReader};
// Keys are tids and fds: the fast hasher (seeded per process) serves.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use rand::Rng;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a just-launched program gets to bring its interpreter up.
const STARTUP_WAIT: Duration = Duration::from_secs(5);
const STARTUP_RETRY: Duration = Duration::from_millis(10);
/// How long a just-launched program may run one executable with no Python
/// in it before it is taken for a program that is not Python (the dynamic
/// loader maps libpython within milliseconds of exec).
const NOT_PYTHON_WAIT: Duration = Duration::from_secs(2);
/// Descendants are looked for at most this often (a scan reads all of /proc).
const RESCAN_EVERY: Duration = Duration::from_millis(200);
/// Behind schedule by more than this many mean intervals and more than
/// [`MAX_BEHIND_TIME`], the missed ticks are skipped (and counted) instead of
/// being sampled back to back. Below it a late tick is caught up: on a busy
/// machine the sampler is often kept off a CPU for a few milliseconds, which
/// at 10 kHz is dozens of ticks that would otherwise be lost. A longer
/// backlog is not caught up: samples taken back to back all see one moment
/// of the target, and at 1 kHz on a loaded machine catching up 20 ms biased
/// the sampled shares by several points (tests/record.rs's accuracy test).
const MAX_BEHIND_INTERVALS: u32 = 10;
const MAX_BEHIND_TIME: Duration = Duration::from_millis(10);
/// A tick due sooner than this is taken at once: a sleep that short costs
/// more (a context switch) than it waits, and oversleeps anyway.
const MIN_SLEEP: Duration = Duration::from_micros(10);
/// Share of the asked rate below which the rate counts as not held.
const HELD_SHARE: f64 = 0.95;
/// Longest single sleep, so that Ctrl-C is seen promptly at low rates.
const SLEEP_SLICE: Duration = Duration::from_millis(50);
/// How long a kernel thread name is trusted before it is read again.
const OS_NAME_TTL: Duration = Duration::from_secs(1);
/// How often, and how far apart, an identity check looks again at a leader
/// without memory before taking it for an exit (see `check_identity`).
const LEADER_GONE_LOOKS: u32 = 5;
const LEADER_GONE_WAIT: Duration = Duration::from_millis(2);

/// What a sampler is told: when to sample, whether it may pause, which
/// threads it keeps, and what it reads of each.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    pub schedule: Schedule,
    pub pause: PausePolicy,
    pub filter: Filters,
    pub read: ReadConfig,
}

/// When samples are taken, and of which processes.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Samples per second (mean of the randomised schedule).
    pub rate: f64,
    /// Wall-clock limit; None runs until the processes exit or Ctrl-C.
    pub duration: Option<Duration>,
    /// Follow children and grandchildren, picking up new ones.
    pub subprocesses: bool,
}

/// Whether the threads read are paused.
#[derive(Debug, Clone)]
pub struct PausePolicy {
    /// Read without pausing threads (stacks may be torn).
    pub nonblocking: bool,
}

/// Which threads a sample keeps.
#[derive(Debug, Clone)]
pub struct Filters {
    /// Keep only the thread holding the GIL.
    pub gil_only: bool,
    /// Keep idle threads (waiting in the kernel, not holding the GIL). With
    /// it (or `gil_only`) kernel states are not read, and a thread's status
    /// is Active only while it holds the GIL.
    pub include_idle: bool,
}

/// What is read of each thread kept.
#[derive(Debug, Clone)]
pub struct ReadConfig {
    /// Merge native frames (needs pausing).
    pub native: bool,
    /// With `native`: interpreter plumbing frames and non-Python threads too.
    pub native_all: bool,
    /// With `native`: DWARF from separate debug files too.
    pub native_debug_info: bool,
    /// With `native`: name native frames by their whole signature rather
    /// than short (`--full-names`; JSON carries both either way).
    pub full_names: bool,
    /// Report co_firstlineno instead of the current line (record -F).
    pub function_lines: bool,
    /// Arguments and locals of each frame (dump --locals): 0 for none, n
    /// for values of up to n × 128 characters.
    pub locals: u8,
    /// Read kernel states for every thread's status even when no thread is
    /// dropped for being idle (dump and top show the status).
    pub statuses: bool,
    /// Put a `[GC]` frame on top of the thread running a garbage collection
    /// (record, top).
    pub gc_frames: bool,
    /// Give Python frames their columns and end lines (dump).
    pub positions: bool,
    /// What to learn about what each thread waits for.
    pub waits: WaitDetail,
    /// asyncio tasks: shown under their loop's thread, or stitched into the stacks.
    pub asyncio: AsyncMode,
    /// Each asyncio loop thread's turn ([`ProcessSample::loop_turns`]): watch.
    pub loop_turns: bool,
}

/// What is done with the asyncio tasks of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncMode {
    Off,
    /// Read and attach them to their loop's thread (`dump`); `forced` reads
    /// registries of any size (up to [`crate::python::asyncio::MAX_TASKS`]).
    Tree {
        forced: bool,
        limit: usize,
    },
    /// Samples attributed to tasks (`record`/`top --async`): the running
    /// task's stack continues with its awaiters'; with `all`, every waiting
    /// task adds its own stack (weighted, like every sample, by wall time).
    Stitch {
        all: bool,
    },
}

/// One process's threads at one tick (after filtering).
pub(crate) struct ProcessSample {
    pub(crate) pid: i32,
    pub(crate) cmdline: Arc<str>,
    pub(crate) python_version: String,
    pub(crate) threads: Vec<ThreadStack>,
    /// Since the sampler started, when its frames were read: later than the
    /// tick's timestamp by what came first (kernel states, waits, the
    /// pause), by much more when a loaded machine held the sampler up
    /// in between.
    pub(crate) read_at: Duration,
    /// With `loop_turns`: (OS thread id, how many callbacks the asyncio loop
    /// it runs has begun), for the threads inside a loop's `_run_once`
    /// (see [`asyncio::LoopTurns`]).
    pub(crate) loop_turns: Vec<(u32, u64)>,
}

pub(crate) struct Tick {
    /// Since the sampler started, when the sample was taken.
    pub(crate) timestamp: Duration,
    /// Real time this sample stands for: until the next sample is due.
    pub(crate) weight: Duration,
    /// How far behind schedule this sample was taken.
    pub(crate) late: Duration,
    /// Ticks skipped since the previous one because sampling fell far
    /// behind (each is a late sample that was never taken).
    pub(crate) missed: u64,
    pub(crate) processes: Vec<ProcessSample>,
    /// Per-sample read errors (counted; summaries show the most common
    /// [`Error::kind`]).
    pub(crate) errors: Vec<Error>,
    /// Processes no longer followed for a reason worth telling (pid reused,
    /// exec'd another program), once each.
    pub(crate) ended: Vec<Error>,
}

/// Whether the asked rate was held, and if not, why.
#[derive(Debug, Clone)]
pub(crate) struct RateHealth {
    pub(crate) asked: f64,
    /// Ticks taken per second of recording.
    pub(crate) delivered: f64,
    /// `None` while the rate is held (at least 95% of it delivered).
    pub(crate) reason: Option<String>,
}

impl RateHealth {
    pub(crate) fn share(&self) -> f64 {
        self.delivered / self.asked
    }
}

/// Sampler-side bookkeeping behind [`RateHealth`].
struct RateStats {
    taken: u64,
    /// Time spent inside reads (from the tick being due to the sample taken).
    reading: Duration,
    threads: u64,
    frames: u64,
    cpu_at_start: Duration,
    wait_at_start: Option<Duration>,
}

/// CPU time (user + system) this process has used so far.
fn own_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we pass.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Fine-grained sleeps: the kernel's default 50 µs timer slack would add up
/// to half an interval to every sleep at 10 kHz.
fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only
    // the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10_000.0 {
        format!("{:.0} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

/// A rate for people: `850 Hz`, `9.6 kHz`.
pub(crate) fn format_rate(hz: f64) -> String {
    if hz >= 1000.0 {
        format!("{:.1} kHz", hz / 1000.0)
    } else {
        format!("{hz:.0} Hz")
    }
}

/// A thread's CPU time (ns) and number of times put on a CPU, from its
/// schedstat file (kept open in `files`). None where the kernel keeps no
/// such counts.
fn read_ran(files: &mut HashMap<i32, File>, pid: i32, tid: i32) -> Option<(u64, u64)> {
    let f = match files.entry(tid) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(File::open(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?)
        }
    };
    let mut buf = [0u8; 96];
    let n = f.read_at(&mut buf, 0).ok()?;
    procfs::parse_schedstat(buf.get(..n)?)
}

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
    tasks: Option<AsyncioReader>,
    turns: asyncio::LoopTurns,
    /// The latest sample's loop turns, taken by the sampler.
    loop_turns: Vec<(u32, u64)>,
    /// When the latest sample's frames were read (its threads stopped, or
    /// read as they ran).
    read_at: Instant,
    /// Greenlets (gevent, eventlet) for dump.
    greenlets: crate::python::greenlet::GreenletReader,
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

/// `/proc/PID/stat`, kept open: re-read every pass to notice the process
/// ending, its pid being reused, or an exec.
struct Liveness {
    /// The cheap check made first (see [`procfs::SameMemory`]); the stat
    /// line is read only when it fails, or could not be opened.
    same: Option<procfs::SameMemory>,
    stat: procfs::StatFile,
    identity: procfs::Identity,
    /// The process's thread count at the latest identity check.
    num_threads: u64,
    /// When the Python thread list was last walked before a pause, and the
    /// thread count then (see [`Target::sample`]).
    listed: Option<(Instant, u64)>,
}

/// Stack bytes copied per thread at its first pause, the margin added when
/// an unwind read beyond the copy, and the most ever copied.
const STACK_COPY_FIRST: usize = 64 << 10;
const STACK_COPY_MARGIN: usize = 16 << 10;
const STACK_COPY_MAX: usize = 1 << 20;
/// Below the stack pointer a leaf function may keep data (the red zone).
const RED_ZONE: u64 = 128;

/// Copy up to `want` bytes of stack from `sp` (from the start of its page,
/// which covers the red zone: the unwinder reads the stack in whole pages),
/// stopping at the end of the mapping. Returns the copy's start and bytes.
fn copy_stack(mem: &dyn Memory, sp: u64, want: usize) -> (u64, Vec<u8>) {
    const PAGE: usize = 4096;
    const CHUNK: usize = 16 * PAGE;
    let base = sp.saturating_sub(RED_ZONE) & !(PAGE as u64 - 1);
    let len = (sp - base) as usize + want;
    let len = len.div_ceil(PAGE) * PAGE;
    let mut bytes = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let n = CHUNK.min(len - got);
        if mem
            .read(base + got as u64, &mut bytes[got..got + n])
            .is_ok()
        {
            got += n;
            continue;
        }
        // The end of the mapping is in this chunk: take its pages one by one.
        while got < len
            && mem
                .read(base + got as u64, &mut bytes[got..got + PAGE])
                .is_ok()
        {
            got += PAGE;
        }
        break;
    }
    bytes.truncate(got);
    (base, bytes)
}

/// A thread's stack as copied while it was stopped, over the live memory
/// (code, and anything beyond the copy). Records how deep reads went.
struct StackCopy<'a> {
    base: u64,
    bytes: Vec<u8>,
    live: &'a dyn Memory,
    beyond: std::cell::Cell<u64>,
}

impl Memory for StackCopy<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), crate::error::MemError> {
        let end = addr.saturating_add(buf.len() as u64);
        let copy_end = self.base + self.bytes.len() as u64;
        if addr >= self.base && end <= copy_end {
            let o = (addr - self.base) as usize;
            buf.copy_from_slice(&self.bytes[o..o + buf.len()]);
            return Ok(());
        }
        if addr >= self.base && addr < copy_end.saturating_add(STACK_COPY_MAX as u64) {
            // A stack read past the copy: the next copy goes deeper.
            self.beyond.set(self.beyond.get().max(end));
        }
        self.live.read(addr, buf)
    }
}

impl Target {
    /// Whether a garbage collection was running at the latest sample.
    pub(crate) fn gc_collecting(&self) -> Option<bool> {
        self.reader.gc_collecting
    }

    /// Open a live process.
    pub(crate) fn open(pid: i32, cfg: &SamplerConfig) -> Result<Target, Error> {
        let stat = procfs::StatFile::open(pid)?;
        let (identity, num_threads) = stat.read().ok_or_else(|| procfs::absent(pid))?;
        crate::privilege::check_target(pid)?;
        let live = Liveness {
            same: None,
            stat,
            identity,
            num_threads,
            listed: None,
        };
        Target::open_with(Rc::new(LiveProcess::new(pid)), cfg, Some(live))
    }

    /// Open a target that is not a live process (a core file): its samples
    /// pause nothing and take each thread's registers from the source.
    pub(crate) fn open_source(
        source: Box<dyn TargetSource>,
        cfg: &SamplerConfig,
    ) -> Result<Target, Error> {
        let source: Rc<dyn TargetSource> = Rc::from(source);
        if source.kind() == SourceKind::Live {
            return Target::open(source.pid(), cfg);
        }
        Target::open_with(source, cfg, None)
    }

    fn open_with(
        source: Rc<dyn TargetSource>,
        cfg: &SamplerConfig,
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
            let me = std::process::id() as i32;
            for &(tid, _) in &threads {
                match procfs::tracer_pid(pid, tid) {
                    Some(tp) if tp != 0 && tp != me => {
                        return Err(Error::Traced {
                            pid,
                            tracer: tp,
                            tracer_command: procfs::comm(tp, tp).unwrap_or_else(|| "?".into()),
                        })
                    }
                    _ => {}
                }
            }
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
            l.same = procfs::SameMemory::open(pid, reader.process.interp_head_ptr);
            if l.stat.identity() != Some(l.identity) {
                return Err(Error::NotInitialized { pid });
            }
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
            tasks: None,
            turns: Default::default(),
            loop_turns: Vec::new(),
            read_at: Instant::now(),
            greenlets: Default::default(),
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
            lock_locals: false,
        };
        let _ = t.reader.snapshot(&*t.source, opts, &t.states, &t.ran);
        Ok(t)
    }

    /// Still the process we opened: not exited, not another process under a
    /// reused pid, not another program after an exec.
    fn check_identity(&mut self) -> Result<(), Error> {
        let Some(live) = self.live.as_mut() else {
            return Ok(());
        };
        if let Some(n) = live.same.as_ref().and_then(|s| s.threads()) {
            live.num_threads = n;
            return Ok(());
        }
        let mut now = live.stat.read().map(|(id, n)| {
            live.num_threads = n;
            id
        });
        // A leader without memory: an exit, or an exec from another thread
        // that has yet to take the leader's place. Look again a few times
        // before calling it an exit (the exec's new program has memory).
        for _ in 0..LEADER_GONE_LOOKS {
            if now.is_none_or(|id| id.has_memory()) {
                break;
            }
            std::thread::sleep(LEADER_GONE_WAIT);
            now = live.stat.read().map(|(id, _)| id);
        }
        if now.is_some_and(|id| !id.has_memory()) {
            return Err(Error::ProcessExited { pid: self.pid });
        }
        match now {
            None => {
                // The open file fails once its task is gone: the process
                // exited (whatever now holds the pid), or a thread other than
                // the leader exec'd and took the leader's place.
                match procfs::identity(self.pid) {
                    Some(id) if id.start_time != live.identity.start_time => {
                        Err(Error::PidReused { pid: self.pid })
                    }
                    Some(id) if !id.has_memory() => Err(Error::ProcessExited { pid: self.pid }),
                    Some(id) if id != live.identity => Err(Error::Execed { pid: self.pid }),
                    Some(_) => {
                        // The same process and program: follow it through
                        // a new file.
                        live.stat = procfs::StatFile::open(self.pid)?;
                        Ok(())
                    }
                    None => Err(Error::ProcessExited { pid: self.pid }),
                }
            }
            Some(id) if id.start_time != live.identity.start_time => {
                Err(Error::PidReused { pid: self.pid })
            }
            Some(id) if id != live.identity => Err(Error::Execed { pid: self.pid }),
            Some(_) => Ok(()),
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
        if let Some(t) = &self.tasks {
            w.extend(t.notes.iter().cloned());
        }
        w.extend(self.greenlets.notes.iter().cloned());
        if let Some(n) = self.native.as_mut() {
            w.extend(n.warnings());
        }
        w
    }

    /// Walk the Python thread list (and who holds the GIL) before a pause.
    fn list_threads(&mut self, now: Instant) -> Result<(), Error> {
        self.threads = self.reader.python_threads(&*self.source)?;
        if let Some(l) = self.live.as_mut() {
            l.listed = Some((now, l.num_threads));
        }
        Ok(())
    }

    /// Scheduler state of each known Python thread, before any pausing
    /// (a thread we stop would read as stopped).
    fn read_states(&mut self) {
        self.begin_states();
        let now = Instant::now();
        for i in 0..self.threads.len() {
            self.read_state(self.threads[i].0, now);
        }
    }

    /// A new pass of states: files of threads that are gone are closed
    /// (new ones are opened as they are read), and nothing is read yet.
    fn begin_states(&mut self) {
        // A set, not a scan of the list per file: up to MAX_THREADS of each.
        let mut live = HashSet::with_capacity(self.threads.len());
        live.extend(self.threads.iter().map(|(t, _)| *t));
        self.stat_files.retain(|tid, _| live.contains(tid));
        self.sched_files.retain(|tid, _| live.contains(tid));
        self.waits.keep_threads(&self.threads);
        self.states.clear();
        self.ran.clear();
    }

    /// The scheduler state of one Python thread, into `states` (and `ran`).
    fn read_state(&mut self, tid: i32, now: Instant) {
        let pid = self.pid;
        let mut buf = [0u8; 512];
        // The syscall file first (cheaper for the kernel to write, and
        // the waits read it anyway): a thread on a CPU says so there,
        // and one still in the call its state was read in keeps it.
        let probe = self.waits.probe(tid, now);
        if self.waits.seen_off_cpu(tid) {
            // Read after the thread was seen off its CPU: if the counts
            // are the same at the next pass (which sees it off its CPU
            // again first), it was on no CPU in between, so its stack
            // has not changed. Every way back onto a CPU raises the
            // count of times on one, and leaving one adds to the time.
            if let Some(r) = read_ran(&mut self.sched_files, pid, tid) {
                self.ran.insert(tid, r);
            }
        }
        match probe {
            wait::CallProbe::Running => {
                self.states.insert(tid, 'R');
                return;
            }
            wait::CallProbe::Same(s) => {
                self.states.insert(tid, s);
                return;
            }
            wait::CallProbe::Read => {}
        }
        let f = match self.stat_files.entry(tid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                match File::open(format!("/proc/{pid}/task/{tid}/stat")) {
                    Ok(f) => e.insert(f),
                    Err(_) => return,
                }
            }
        };
        let Ok(n) = f.read_at(&mut buf, 0) else {
            return;
        };
        if let Some(s) = std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(procfs::parse_stat_state)
        {
            self.states.insert(tid, s);
            self.waits.set_state(tid, s, now);
        }
    }

    /// The waits of the threads that are not running (for a core, the
    /// calls its registers recorded), into `pending`.
    fn read_waits(&mut self) {
        let live = self.live.is_some();
        // Taken for the loop (which reads the other fields), not copied.
        let threads = std::mem::take(&mut self.threads);
        for &(tid, _) in &threads {
            if !live {
                let state = self.states.get(&tid).copied();
                if let Some(read) = self.recorded_wait(tid, state) {
                    self.pending.insert(tid, read);
                }
                continue;
            }
            let Some(&state) = self.states.get(&tid) else {
                continue;
            };
            let line = if state == 'R' {
                None
            } else {
                self.waits.syscall(tid)
            };
            let read = self.waits.read(tid, state, line, &*self.source);
            self.pending.insert(tid, read);
        }
        self.threads = threads;
    }

    /// A core's thread's wait: the call its registers say (one decoder,
    /// two sources of the call and its arguments), in state S when they
    /// show it asleep, else in no known state.
    fn recorded_wait(
        &mut self,
        tid: i32,
        state: Option<char>,
    ) -> Option<(wait::Wait, Option<wait::CallArgs>)> {
        let line = self.source.saved_call(tid)?;
        let mut read = self
            .waits
            .read(tid, state.unwrap_or('?'), Some(line), &*self.source);
        if state.is_none() {
            read.0.state.clear();
        }
        Some(read)
    }

    /// The threads that must stand still for a consistent read. Python
    /// frames only change under the GIL, so a sleeping thread that does not
    /// hold it cannot move them: pausing it would only wake it (and make it
    /// look busy at the next sample). Native stacks need every thread's
    /// registers, so then all of them are paused.
    ///
    /// A thread in uninterruptible sleep (D: a vfork parent, NFS, a frozen
    /// cgroup) cannot stop until it wakes; it is read without pausing.
    fn to_pause(&self, cfg: &SamplerConfig) -> Result<Vec<i32>, Error> {
        if cfg.read.native_all {
            return Ok(self
                .source
                .threads()?
                .into_iter()
                .filter(|&t| self.source.thread_state(t) != Some('D'))
                .collect());
        }
        Ok(self
            .threads
            .iter()
            .filter(|&&(tid, gil)| self.must_stop(cfg, tid, gil))
            .map(|(tid, _)| *tid)
            .collect())
    }

    /// Whether the Python thread `tid` must stand still (see `to_pause`),
    /// by the state read for it this pass.
    fn must_stop(&self, cfg: &SamplerConfig, tid: i32, gil: bool) -> bool {
        let state = self.states.get(&tid);
        if state == Some(&'D') {
            return false;
        }
        // Idle threads that will be dropped need no registers either.
        let native_wanted = cfg.read.native && cfg.filter.include_idle;
        native_wanted || gil || !matches!(state, Some('S' | 'I'))
    }

    /// Threads `threading` does not name (started from C, or by
    /// `_thread.start_new_thread`, or not running Python code yet) are
    /// named by the kernel: what the program, or Python 3.14+ itself, set
    /// with `pthread_setname_np`. Cached briefly, as names rarely change.
    fn name_from_os(&mut self, threads: &mut [ThreadStack]) {
        let now = Instant::now();
        if self.os_names.len() > crate::python::reader::MAX_THREADS {
            self.os_names.clear();
        }
        for t in threads.iter_mut().filter(|t| t.name.is_none()) {
            let Some(tid) = t.os_thread_id.map(|v| v as i32) else {
                continue;
            };
            let source = &self.source;
            let entry = self
                .os_names
                .entry(tid)
                .and_modify(|e| {
                    if now.duration_since(e.1) > OS_NAME_TTL {
                        *e = (source.thread_name(tid), now);
                    }
                })
                .or_insert_with(|| (source.thread_name(tid), now));
            if let Some(n) = &entry.0 {
                t.name = Some(n.clone());
                t.name_source = Some(crate::stack::NameSource::Os);
            }
        }
    }

    /// Each thread's wait, from the calls read before the pause; futexes
    /// in the GIL's lock objects are GIL waits, and (in full detail) those
    /// on a lock a frame's local refers to name that local.
    fn attach_waits(&mut self, snap: &mut [crate::python::reader::ThreadSnapshot]) {
        let holders: Vec<(i64, u32, Option<String>)> = snap
            .iter()
            .filter(|t| t.stack.holds_gil)
            .filter_map(|t| {
                Some((
                    t.stack.interpreter,
                    t.stack.os_thread_id?,
                    t.stack.name.clone(),
                ))
            })
            .collect();
        let full = self.waits.detail() == WaitDetail::Full;
        for t in snap.iter_mut() {
            let Some(tid) = t.stack.os_thread_id.map(|v| v as i32) else {
                continue;
            };
            let Some((mut w, call)) = self.pending.remove(&tid) else {
                continue;
            };
            if let Some(f) = call.and_then(|c| c.futex) {
                if t.gil_sync.iter().any(|(a, b)| f >= *a && f < *b) {
                    let holder = holders
                        .iter()
                        .find(|(i, h, _)| *i == t.stack.interpreter && *h != tid as u32);
                    w.gil = Some(GilWait {
                        holder: holder.map(|h| h.1),
                        holder_name: holder.and_then(|h| h.2.clone()),
                    });
                } else if full {
                    w.lock = self.lock_of(f, t);
                }
            }
            t.stack.wait = Some(w);
        }
    }

    /// The lock (named by the local that refers to it) a futex wait is on.
    fn lock_of(&self, futex: u64, t: &crate::python::reader::ThreadSnapshot) -> Option<LockWait> {
        let mut before = [0u8; 32];
        let words: Vec<u64> = match self.source.read(futex.wrapping_sub(32), &mut before) {
            Ok(()) => (0..4)
                .map(|i| crate::memory::le_u64(&before, i * 8))
                .collect(),
            Err(_) => Vec::new(),
        };
        let hit = t.locks.iter().find(|l| {
            l.kind != "Condition" && wait::futex_is_lock(futex, l.inner, l.inner_addr, &words)
        })?;
        let mut named = hit;
        let mut kind = wait::lock_kind(&hit.kind).to_string();
        let frame = t.stack.frames.get(hit.frame)?;
        // Condition.wait sleeps on a fresh `waiter` lock: name the
        // Condition instead, by the outer local that refers to it.
        let in_condition_wait = hit.name == "waiter"
            && frame.function.ends_with("wait")
            && frame
                .file
                .as_deref()
                .is_some_and(|f| f.ends_with("threading.py"));
        if in_condition_wait {
            if let Some(cond) = t
                .locks
                .iter()
                .find(|l| l.frame == hit.frame && l.kind == "Condition" && l.name == "self")
            {
                kind = "threading.Condition".into();
                named = t
                    .locks
                    .iter()
                    .find(|l| l.frame > hit.frame && l.obj == cond.obj)
                    .unwrap_or(cond);
            }
        }
        let f = t.stack.frames.get(named.frame)?;
        Some(LockWait {
            name: named.name.clone(),
            kind,
            address: format!("0x{:x}", named.obj),
            function: f.function.to_string(),
            file: f.file.as_deref().unwrap_or_default().to_string(),
            line: f.line.unwrap_or(0),
        })
    }

    /// One sample in which every thread to pause stopped, and every native
    /// unwind found its stack in the copy, if a few tries can get one
    /// (dump): a thread that a busy machine leaves without CPU misses the
    /// stop budget now and then, and a first copy may be too shallow (the
    /// next try copies as deep as the unwind went). Each try holds no thread
    /// longer than the budget; the last try's sample is taken as it is.
    pub(crate) fn sample_whole(&mut self, cfg: &SamplerConfig) -> Result<Vec<ThreadStack>, Error> {
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

    pub(crate) fn sample(&mut self, cfg: &SamplerConfig) -> Result<Vec<ThreadStack>, Error> {
        self.check_identity()?;
        // The set to pause must be current: a thread missed here would be
        // read running. The list the latest paused read found is current
        // enough while the process has as many threads as when the list was
        // last walked, for SAME_CALL_TTL at most, and while its GIL holder
        // has not gone to sleep (then the GIL moved; see below).
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
        // The threads the latest pause stopped are most often the ones to
        // stop now (the busy ones, the GIL holder): when each of them still
        // must stand still by its state read now, they are interrupted at
        // once, and the other threads' states and waits are read while they
        // come to a stop (a stop takes tens of microseconds to arrive from
        // another CPU). The seizes are still made in one loop. If the reads
        // show another thread to stop, this pause is let go whole and a new
        // one made, in one loop again.
        let mut early: Option<PauseGuard> = None;
        // The threads whose states that path read already (sorted).
        let mut read_first: Option<Vec<i32>> = None;
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
        if pausing && reuse_list && read_kernel_states && !cfg.read.native_all && !unstopped {
            let now = Instant::now();
            let listed: HashSet<i32> = self.threads.iter().map(|(t, _)| *t).collect();
            let mut predicted = std::mem::take(&mut self.last_paused);
            predicted.retain(|t| listed.contains(t));
            predicted.sort_unstable();
            self.begin_states();
            for &tid in &predicted {
                self.read_state(tid, now);
            }
            // Each must be on a CPU or waiting for one: one asleep need not
            // stop, and a GIL holder found asleep means the listing is
            // stale, and a new one is walked before anything is stopped.
            let running = predicted
                .iter()
                .all(|t| !matches!(self.states.get(t), Some('S' | 'I' | 'D')));
            if running && !predicted.is_empty() {
                early = Some(PauseGuard::interrupted(self.pid, &predicted)?);
            }
            read_first = Some(predicted);
        }
        if !live {
            // A core's states, as far as it recorded them.
            self.states = self
                .threads
                .iter()
                .filter_map(|&(tid, _)| Some((tid, self.source.thread_state(tid)?)))
                .collect();
        } else if read_kernel_states {
            match &read_first {
                Some(done) => {
                    let now = Instant::now();
                    for i in 0..self.threads.len() {
                        let tid = self.threads[i].0;
                        if done.binary_search(&tid).is_err() {
                            self.read_state(tid, now);
                        }
                    }
                }
                None => self.read_states(),
            }
            let holder_asleep = self
                .threads
                .iter()
                .any(|(t, gil)| *gil && matches!(self.states.get(t), Some('S' | 'I')));
            if reuse_list && holder_asleep {
                // Who holds the GIL now decides who must stand still: the
                // threads stopped early are let go before the new listing.
                early = None;
                self.list_threads(started)?;
                self.read_states();
            }
        } else {
            self.states.clear();
        }
        self.pending.clear();
        self.foreign_waits.clear();
        if want_waits {
            // Only threads that are not running have a call to read, and it
            // must be read before any of them is stopped.
            if self.foreign_seen.is_empty() {
                self.waits.begin_pass(&self.threads);
            } else {
                let mut all = self.threads.clone();
                all.extend_from_slice(&self.foreign_seen);
                self.waits.begin_pass(&all);
            }
            self.read_waits();
        }
        let pause = if pausing {
            self.to_pause(cfg)?
        } else {
            Vec::new()
        };
        // Threads Python does not know (--native-all): their states too
        // must be read before they are stopped.
        let foreign_states: HashMap<i32, char> = pause
            .iter()
            .filter(|tid| !self.threads.iter().any(|(t, _)| t == *tid))
            .filter_map(|&tid| Some((tid, self.source.thread_state(tid)?)))
            .collect();
        // And their waits (a pool worker's futex), before they are stopped.
        if want_waits && live {
            for (&tid, &state) in &foreign_states {
                let line = if state == 'R' {
                    None
                } else {
                    self.waits.syscall(tid)
                };
                let (w, _) = self.waits.read(tid, state, line, &*self.source);
                self.foreign_waits.insert(tid, w);
            }
        }
        self.foreign_seen = foreign_states.keys().map(|&t| (t, false)).collect();
        let stopping = read_first.as_deref().unwrap_or_default();
        let mut guard = match early {
            Some(mut g) if pause.iter().all(|t| stopping.binary_search(t).is_ok()) => {
                g.wait_stops();
                Some(g)
            }
            Some(g) => {
                // Another thread must stop too: this pause goes first.
                drop(g);
                Some(PauseGuard::new(self.pid, &pause)?)
            }
            None if pausing && (!unstopped || pause.is_empty()) => {
                Some(PauseGuard::new(self.pid, &pause)?)
            }
            None => None,
        };
        if pausing {
            self.last_paused.clone_from(&pause);
        }
        let opts = ReadOptions {
            locals: cfg.read.locals,
            names: true,
            function_lines: cfg.read.function_lines,
            positions: cfg.read.positions,
            gil_sync: want_waits,
            lock_locals: cfg.read.waits == WaitDetail::Full,
        };
        self.read_at = Instant::now();
        let mut snap = self
            .reader
            .snapshot(&*self.source, opts, &self.states, &self.ran);
        if pausing && guard.is_none() && !pause.is_empty() {
            if snap.is_ok() && self.reader.stood_still(&*self.source) {
                self.stop_backoff = 0;
            } else {
                self.stop_backoff = (self.stop_backoff * 2).clamp(1, 64);
                self.stop_first = self.stop_backoff;
                guard = Some(PauseGuard::new(self.pid, &pause)?);
                self.read_at = Instant::now();
                snap = self
                    .reader
                    .snapshot(&*self.source, opts, &self.states, &self.ran);
            }
        }
        if guard.as_ref().is_some_and(|g| g.tids().next().is_some()) {
            self.stopped_once = true;
        }
        // Native stacks: only the registers and a copy of the stack are
        // taken while the threads are stopped; the unwind runs from the
        // copy after they are let go (a cold unwind takes far longer than
        // the pause budget).
        let mut copies = Vec::new();
        if let (Some(_), Some(g)) = (self.native.as_ref(), guard.as_ref()) {
            for tid in g.tids() {
                match g.registers(tid) {
                    Ok((ip, sp, bp)) => {
                        let want = self
                            .stack_copy
                            .get(&tid)
                            .copied()
                            .unwrap_or(STACK_COPY_FIRST);
                        let (base, bytes) = copy_stack(&*self.source, sp, want);
                        copies.push((tid, ip, sp, bp, base, bytes, want));
                    }
                    Err(e) => self.pause_notes.push(Error::NativeUnwind(Box::new(e))),
                }
            }
        }
        if self.native.is_some() && !live {
            // A core: its threads stand still, with their registers saved;
            // the unwind reads the stack from the source itself (an empty
            // copy), and never asks for a deeper one.
            let tids: Vec<i32> = if cfg.read.native_all {
                self.source.threads().unwrap_or_default()
            } else {
                self.threads.iter().map(|(t, _)| *t).collect()
            };
            for tid in tids {
                match self.source.saved_registers(tid) {
                    Some(r) => copies.push((tid, r.ip, r.sp, r.bp, 0, Vec::new(), usize::MAX)),
                    None => self.pause_notes.push(Error::NativeUnwind(Box::new(
                        Error::NoSavedRegisters { tid },
                    ))),
                }
            }
        }
        self.late_threads = guard.as_ref().map_or(0, |g| g.not_stopped().len());
        if self.late_threads > 0 {
            // Read with a thread running that should have stood still: the
            // list it finds may be torn, so the next pause walks it afresh.
            if let Some(l) = self.live.as_mut() {
                l.listed = None;
            }
        }
        // Tasks are read while the threads still stand still.
        let mut tasks = match (&snap, cfg.read.asyncio) {
            (Ok(s), mode) if mode != AsyncMode::Off => {
                let want = match mode {
                    AsyncMode::Tree { forced, limit } => AsyncRead {
                        limit,
                        max_tasks: if forced {
                            asyncio::MAX_TASKS
                        } else {
                            asyncio::AUTO_MAX_TASKS
                        },
                        running_only: false,
                    },
                    AsyncMode::Stitch { all } => AsyncRead {
                        limit: asyncio::MAX_TASKS,
                        max_tasks: asyncio::MAX_TASKS,
                        running_only: !all,
                    },
                    // Not read when off.
                    AsyncMode::Off => AsyncRead {
                        limit: 0,
                        max_tasks: 0,
                        running_only: true,
                    },
                };
                let v = &self.reader.process.version;
                let (major, minor) = (v.major, v.minor);
                let age = self.waits.age();
                let r = self
                    .tasks
                    .get_or_insert_with(|| AsyncioReader::new(major, minor).with_age(age));
                let cache = crate::python::pagecache::PageCache::new(&*self.source);
                let source = &*self.source;
                r.read(&mut self.reader, &cache, s, want, &|| {
                    asyncio_debug_sections(source)
                })
            }
            _ => std::collections::HashMap::new(),
        };
        // Greenlets (dump), beside the tasks, while the threads stand still.
        if let (Ok(s), AsyncMode::Tree { limit, .. }) = (&snap, cfg.read.asyncio) {
            let cache = crate::python::pagecache::PageCache::new(&*self.source);
            self.greenlets
                .read(&mut self.reader, &cache, s, limit, &mut tasks);
        }
        self.loop_turns.clear();
        if let (Ok(s), true) = (&snap, cfg.read.loop_turns) {
            let pl = &self.reader.process.layout;
            let objr = crate::python::objects::ObjReader::new(&*self.source, pl);
            for t in s {
                let (Some(tid), Some(m)) = (
                    t.stack.os_thread_id,
                    crate::watch::run_once_frame(&t.stack.frames).and_then(|f| f.mark),
                ) else {
                    continue;
                };
                if let Some(turn) = self.turns.read(&objr, &pl.frame, m.addr) {
                    self.loop_turns.push((tid, turn));
                }
            }
        }
        drop(guard);
        let mut unwound: HashMap<i32, Vec<NativeFrame>> = HashMap::new();
        if let Some(n) = self.native.as_mut() {
            let mut depths = HashMap::new();
            for (tid, ip, sp, bp, base, bytes, want) in copies {
                let copy = StackCopy {
                    base,
                    bytes,
                    live: &*self.source,
                    beyond: std::cell::Cell::new(0),
                };
                unwound.insert(tid, n.unwind_regs(tid, (ip, sp, bp), &copy));
                // Next time copy as deep as this unwind read, and a margin.
                let needed = copy.beyond.get().saturating_sub(sp) as usize;
                if needed > want {
                    self.late_threads += 1;
                }
                let next = if needed > want {
                    (needed + STACK_COPY_MARGIN).min(STACK_COPY_MAX)
                } else {
                    want
                };
                depths.insert(tid, next);
            }
            self.stack_copy = depths;
        }
        let mut snap = snap?;
        for (i, t) in snap.iter_mut().enumerate() {
            t.stack.asyncio = tasks.remove(&i);
        }
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
        if want_waits {
            self.attach_waits(&mut snap);
        }
        let mut foreign = Vec::new();
        if let Some(n) = self.native.as_mut() {
            for t in snap.iter_mut() {
                if let Some(frames) = t
                    .stack
                    .os_thread_id
                    .and_then(|tid| unwound.get(&(tid as i32)))
                {
                    n.merge(t, frames);
                }
            }
            for (tid, frames) in &unwound {
                if !self.threads.iter().any(|(t, _)| t == tid) {
                    let state = foreign_states.get(tid).copied();
                    let mut t = n.foreign_thread(&*self.source, *tid, state, frames);
                    t.wait = self.foreign_waits.remove(tid);
                    foreign.push(t);
                }
            }
            foreign.sort_by_key(|t| t.os_thread_id);
        }
        if want_waits && !live {
            // A core's threads Python does not know: the calls their
            // registers recorded.
            for t in foreign.iter_mut() {
                let Some(tid) = t.os_thread_id.map(|v| v as i32) else {
                    continue;
                };
                let state = self.source.thread_state(tid);
                t.wait = self.recorded_wait(tid, state).map(|r| r.0);
            }
        }
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
        Ok(threads)
    }
}

/// Where the target may carry `_asyncio`'s `AsyncioDebug` section: the
/// `_asyncio` extension module, or the interpreter's binary when the module
/// is built in; each as (file, section's address in the target).
fn asyncio_debug_sections(source: &dyn TargetSource) -> Vec<(String, crate::elf::Range)> {
    let Ok(maps) = source.maps() else {
        return Vec::new();
    };
    let mut paths: Vec<&str> = Vec::new();
    for m in &maps {
        let name = m.path.rsplit('/').next().unwrap_or("");
        let candidate = name.starts_with("_asyncio")
            || name.starts_with("libpython3")
            || name.starts_with("python3");
        if m.is_file() && candidate && !paths.contains(&m.path.as_str()) {
            paths.push(&m.path);
        }
    }
    let mut out = Vec::new();
    for p in paths {
        let file_maps: Vec<&crate::mapping::MapEntry> =
            maps.iter().filter(|m| m.path == p).collect();
        let Some(first) = file_maps.iter().min_by_key(|m| m.offset) else {
            continue;
        };
        let Some(file) = source.mapped_file(first) else {
            continue;
        };
        if let Some(sec) = crate::elf::load(&file, &file_maps, &[])
            .ok()
            .and_then(|i| i.asyncio_debug)
        {
            out.push((p.to_string(), sec));
        }
    }
    out
}

pub(crate) struct Sampler {
    cfg: SamplerConfig,
    root: i32,
    targets: Vec<Target>,
    /// Descendants that are not Python, with the executable they had: not
    /// retried unless they exec something else.
    not_python: HashMap<i32, String>,
    last_scan: Instant,
    start: Instant,
    /// When the next sample is due, since `start`.
    due: Duration,
    mean: Duration,
    rng: rand::rngs::ThreadRng,
    /// How native merges were made, over all targets (record's summary).
    merges: MergeCounts,
    stats: RateStats,
}

fn is_transient(e: &Error) -> bool {
    // What a program shows before its interpreter is up (still our own
    // image before exec, libpython not mapped, no interpreter state yet).
    matches!(
        e,
        Error::NotPython { .. }
            | Error::NotInitialized { .. }
            | Error::NoInterpreter { .. }
            | Error::UnknownVersion { .. }
            | Error::Memory(_)
    )
}

fn is_zombie(pid: i32) -> bool {
    match procfs::thread_state(pid, pid) {
        None => true,
        // A zombie leader with other threads alive has not ended: it called
        // pthread_exit, or a worker thread is exec'ing and is about to take
        // its place (meanwhile it cannot be seized, and a sample fails):
        // the next identity check tells an exec from an exit.
        Some('Z' | 'X') => procfs::tasks(pid).map_or(true, |t| t.iter().all(|&tid| tid == pid)),
        Some(_) => false,
    }
}

impl Sampler {
    /// Start following `root_pid`. When we launched it (see [`crate::launch`]),
    /// wait up to a few seconds for its interpreter to come up; otherwise a
    /// process that cannot be read fails at once.
    pub(crate) fn new(root_pid: i32, cfg: SamplerConfig) -> Result<Sampler, Error> {
        let rate = cfg.schedule.rate;
        // Launched by us: our child, or the child of our launch keeper.
        let me = Some(std::process::id() as i32);
        let parent = procfs::ppid(root_pid);
        let launched = parent == me || parent.and_then(procfs::ppid) == me;
        let began = Instant::now();
        let mut s = Sampler {
            mean: Duration::from_secs_f64(1.0 / rate),
            cfg,
            root: root_pid,
            targets: Vec::new(),
            not_python: HashMap::new(),
            last_scan: began,
            start: began,
            due: Duration::ZERO,
            rng: rand::rng(),
            merges: MergeCounts::default(),
            stats: RateStats {
                taken: 0,
                reading: Duration::ZERO,
                threads: 0,
                frames: 0,
                cpu_at_start: Duration::ZERO,
                wait_at_start: None,
            },
        };
        // Since when the root has run this executable without Python in it.
        let mut not_python_since: Option<(String, Instant)> = None;
        loop {
            let root_err = match Target::open(root_pid, &s.cfg) {
                Ok(t) => {
                    s.targets.push(t);
                    None
                }
                Err(e) => Some(e),
            };
            if s.cfg.schedule.subprocesses {
                s.scan_descendants(!launched);
            }
            if !s.targets.is_empty() {
                if let Some(Error::NotPython { exe, .. }) = root_err {
                    s.not_python.insert(root_pid, exe);
                }
                break;
            }
            let e = root_err.unwrap_or(Error::NotPython {
                pid: root_pid,
                exe: String::new(),
            });
            let root_gone = matches!(e, Error::NoSuchProcess(_) | Error::ProcessExited { .. })
                || is_zombie(root_pid);
            if root_gone {
                return Err(Error::ProcessExited { pid: root_pid });
            }
            // A program that stays without Python is not Python: decided by
            // what its memory shows over time, not by its name.
            let settled_not_python = match &e {
                Error::NotPython { exe, .. } => {
                    let since = match &not_python_since {
                        Some((x, t)) if x == exe => *t,
                        _ => {
                            not_python_since = Some((exe.clone(), Instant::now()));
                            Instant::now()
                        }
                    };
                    !launched || since.elapsed() >= NOT_PYTHON_WAIT
                }
                _ => false,
            };
            if settled_not_python && s.cfg.schedule.subprocesses {
                // A shell or launcher that starts Python later: follow its
                // descendants as they appear.
                if let Error::NotPython { exe, .. } = e {
                    s.not_python.insert(root_pid, exe);
                }
                break;
            }
            let keep_waiting = !settled_not_python
                && (launched && is_transient(&e) || matches!(e, Error::NotInitialized { .. }));
            let limit = if launched {
                STARTUP_WAIT
            } else {
                Duration::from_millis(500)
            };
            if !keep_waiting || began.elapsed() >= limit || pause::interrupted() {
                return Err(e);
            }
            std::thread::sleep(STARTUP_RETRY);
        }
        tighten_timer_slack();
        s.start = Instant::now();
        s.last_scan = s.start;
        s.stats.cpu_at_start = own_cpu_time();
        s.stats.wait_at_start = procfs::own_run_delay();
        Ok(s)
    }

    /// Open the Python processes among the descendants not followed yet.
    /// `remember` records the ones that are not Python so they are skipped
    /// until they exec something else.
    fn scan_descendants(&mut self, remember: bool) {
        self.last_scan = Instant::now();
        let mut pids = procfs::descendants(self.root);
        if !self.targets.iter().any(|t| t.pid == self.root) {
            pids.insert(0, self.root);
        }
        // A process that exec'd is another program now: read it afresh.
        self.targets
            .retain(|t| procfs::exe(t.pid).is_ok_and(|e| e == t.exe));
        self.not_python.retain(|p, _| pids.contains(p));
        for pid in pids {
            if self.targets.iter().any(|t| t.pid == pid) {
                continue;
            }
            if let Some(exe) = self.not_python.get(&pid) {
                if procfs::exe(pid).is_ok_and(|e| &e == exe) {
                    continue;
                }
            }
            match Target::open(pid, &self.cfg) {
                Ok(t) => {
                    self.not_python.remove(&pid);
                    self.targets.push(t);
                }
                Err(Error::NotPython { exe, .. }) if remember => {
                    self.not_python.insert(pid, exe);
                }
                // Starting up, or gone: looked at again at the next scan.
                Err(_) => {}
            }
        }
    }

    fn draw_interval(&mut self) -> Duration {
        // Exponential intervals (a Poisson process): no aliasing with
        // periodic work in the target. Bounded so one draw cannot stall.
        let u: f64 = self.rng.random();
        let x = -(1.0 - u).ln();
        self.mean.mul_f64(x.min(20.0))
    }

    /// Whether no Python process is followed yet (a root that is not Python,
    /// with `subprocesses`, waiting for its Python descendants).
    pub(crate) fn waiting_for_python(&self) -> bool {
        self.targets.is_empty()
    }

    /// Whether sampling ended because the duration was over.
    pub(crate) fn duration_over(&self) -> bool {
        self.cfg.schedule.duration.is_some_and(|d| self.due >= d)
    }

    /// Whether there is nothing left to follow: every followed process has
    /// exited, and (with `subprocesses`) so has the root, whose future
    /// descendants would be followed.
    fn all_gone(&self) -> bool {
        self.targets.is_empty() && (!self.cfg.schedule.subprocesses || is_zombie(self.root))
    }

    /// Sleep until the next sample is due and take it. None when every
    /// followed process has exited, the duration is over, or a signal
    /// asked to stop.
    pub(crate) fn next_tick(&mut self) -> Option<Tick> {
        let mut missed = 0u64;
        loop {
            if pause::interrupted() || self.all_gone() {
                return None;
            }
            if let Some(d) = self.cfg.schedule.duration {
                if self.due >= d {
                    return None;
                }
            }
            let now = self.start.elapsed();
            if now + MIN_SLEEP >= self.due {
                break;
            }
            // A thread that did not stop in time is let go the moment it stops.
            pause::reap_lingering();
            let slice = if pause::has_lingering() {
                Duration::from_millis(1)
            } else {
                SLEEP_SLICE
            };
            std::thread::sleep((self.due - now).min(slice));
        }
        let mut timestamp = self.start.elapsed();
        let behind = timestamp.saturating_sub(self.due);
        if behind > (self.mean * MAX_BEHIND_INTERVALS).max(MAX_BEHIND_TIME) {
            // Far behind (a stall, a loaded machine): do not burst through
            // the backlog; start the schedule again from now.
            missed = (behind.as_secs_f64() / self.mean.as_secs_f64()) as u64;
            self.due = timestamp;
        }
        let late = timestamp.saturating_sub(self.due);
        if let Some(d) = self.cfg.schedule.duration {
            timestamp = timestamp.min(d);
        }

        if self.cfg.schedule.subprocesses && self.last_scan.elapsed() >= RESCAN_EVERY {
            self.scan_descendants(true);
        }
        let read_started = Instant::now();
        let mut processes = Vec::with_capacity(self.targets.len());
        let mut errors = Vec::new();
        let mut ended = Vec::new();
        let cfg = &self.cfg;
        let start = self.start;
        let merges = &mut self.merges;
        self.targets.retain_mut(|t| match t.sample(cfg) {
            Ok(threads) => {
                errors.extend(t.take_notes());
                let m = t.take_merge_counts();
                merges.address += m.address;
                merges.name += m.name;
                merges.fallback += m.fallback;
                processes.push(ProcessSample {
                    pid: t.pid,
                    cmdline: t.cmdline.clone(),
                    python_version: t.version.clone(),
                    threads,
                    loop_turns: std::mem::take(&mut t.loop_turns),
                    read_at: t.read_at.saturating_duration_since(start),
                });
                true
            }
            Err(Error::ProcessExited { .. }) | Err(Error::NoSuchProcess(_)) => false,
            Err(e @ (Error::PidReused { .. } | Error::Execed { .. })) => {
                ended.push(e);
                false
            }
            Err(e) => {
                if is_zombie(t.pid) {
                    return false;
                }
                errors.push(e);
                true
            }
        });

        self.stats.taken += 1;
        self.stats.reading += read_started.elapsed();
        for p in &processes {
            self.stats.threads += p.threads.len() as u64;
            self.stats.frames += p.threads.iter().map(|t| t.frames.len() as u64).sum::<u64>();
        }
        let step = self.draw_interval();
        self.due += step;
        let end = self.start.elapsed().max(self.due);
        let end = match self.cfg.schedule.duration {
            Some(d) => end.min(d.max(timestamp)),
            None => end,
        };
        Some(Tick {
            timestamp,
            weight: end.saturating_sub(timestamp),
            late,
            missed,
            processes,
            errors,
            ended,
        })
    }

    /// Whether the asked rate has been held so far and, if not, the likely
    /// cause: the machine (time spent waiting for a CPU), the target (reads
    /// as long as the interval), or our own CPU.
    pub(crate) fn rate_health(&self) -> RateHealth {
        let asked = self.cfg.schedule.rate;
        let elapsed = self.start.elapsed();
        let secs = elapsed.as_secs_f64();
        let st = &self.stats;
        let delivered = if secs > 0.0 {
            st.taken as f64 / secs
        } else {
            asked
        };
        let mut health = RateHealth {
            asked,
            delivered,
            reason: None,
        };
        // Too early to judge: the first ticks are taken at once.
        if secs < 0.5 || st.taken == 0 || delivered >= HELD_SHARE * asked {
            return health;
        }
        let mut why = Vec::new();
        let waited = match (procfs::own_run_delay(), st.wait_at_start) {
            (Some(now), Some(then)) => now.saturating_sub(then).as_secs_f64() / secs,
            _ => 0.0,
        };
        if waited > 0.05 {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            let load = procfs::load_average()
                .map(|l| format!(", load average {l:.1} on {cpus} CPUs"))
                .unwrap_or_default();
            why.push(format!(
                "machine load: pyinspect waited for a CPU {:.0}% of the time{load}",
                waited * 100.0
            ));
        }
        let per_read = st.reading / st.taken.max(1) as u32;
        if per_read.as_secs_f64() * asked > 0.5 {
            why.push(format!(
                "target size: a read of {:.0} threads and {:.0} frames takes {}, against \
                 {} between samples",
                st.threads as f64 / st.taken as f64,
                st.frames as f64 / st.taken as f64,
                micros(per_read),
                micros(self.mean)
            ));
        }
        let cpu = own_cpu_time().saturating_sub(st.cpu_at_start).as_secs_f64() / secs;
        if cpu > 0.8 {
            why.push(format!("CPU: pyinspect used {:.0}% of a core", cpu * 100.0));
        }
        if why.is_empty() {
            why.push(format!(
                "the schedule: sleeps overran (pyinspect used {:.0}% of a core)",
                cpu * 100.0
            ));
        }
        health.reason = Some(why.join("; "));
        health
    }

    /// Samples whose native and Python frames were merged by stack address,
    /// by eval-loop names, or fell back (see `--native`).
    pub(crate) fn merge_counts(&self) -> MergeCounts {
        self.merges
    }

    /// Whether a sample this late counts as late in summaries: more than one
    /// mean interval behind.
    pub(crate) fn is_late(&self, late: Duration) -> bool {
        late > self.mean
    }
}
