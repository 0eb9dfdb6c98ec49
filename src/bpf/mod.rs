//! The eBPF sampling engine (`--engine bpf`): samples are taken in the
//! kernel, not by waking up pyinspect.
//!
//! A per-CPU software clock (`cpu-clock`, one perf event per CPU at the asked
//! period) runs `bpf/pyinspect.bpf.c` on every tick. When the interrupted
//! task is a thread of the target, the program looks up the thread's
//! `PyThreadState` (a map kept here from the interpreter's own thread list),
//! walks the frame chain with `bpf_probe_read_user` — at the moment the
//! thread was interrupted, so the chain is never torn — and writes each
//! frame's code object and instruction position to a ring buffer. Here the
//! ring buffer is drained every [`DRAIN_EVERY`], each code object resolved
//! through the reader (cached, checked once per batch), and each sample
//! handed on as a [`Tick`] of one thread: `record`'s outputs take it as they
//! take the ptrace engine's.
//!
//! What it samples is the `cpu` mode: threads on a CPU. With `--mode
//! offcpu`, `wall` or `--idle`, a second program on the scheduler's
//! `sched_switch` tracepoint takes the stack of a target thread as it leaves
//! its CPU, with its state and the system call its saved registers hold,
//! and notes when it comes back: the stack stands for the whole interval,
//! measured, not sampled (a [`Tick`] of that weight, counting as that many
//! periods). Threads already asleep when recording starts are read here
//! once, and counted from the start. The offsets the
//! program walks with come from the layout tables (3.13+ from the target's
//! `_Py_DebugOffsets`), given to it in a map: nothing in the program knows a
//! Python version. The kernel tid of each thread comes from the thread
//! state (3.11+) or from glibc's `struct pthread` (before), as for the ptrace
//! engine.

use crate::error::Error;
use crate::python::process::PythonProcess;
use crate::python::reader::bpf::{CodeMemo, ThreadEntry, WalkOffsets, NAME_SOURCE};
use crate::python::reader::Reader;
use crate::sampler::{ProcessSample, RateHealth, Sampler, SamplerConfig, Tick};
use crate::stack::{ThreadStack, ThreadStatus};
use crate::target::LiveProcess;
use crate::wait::WaitReader;
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::perf_event::{
    PerfEvent, PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent,
};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The compiled program (built by `bpf/build.sh`, checked by `.ci/run`).
static PROGRAM: &[u8] = aya::include_bytes_aligned!("../../bpf/pyinspect.bpf.o");

/// Which engine takes the samples (`--engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Engine {
    /// Wake up per sample and read the target from user space (pausing
    /// threads unless --nonblocking): every mode and option.
    #[default]
    Ptrace,
    /// Sample in the kernel with an eBPF program (root or CAP_BPF and
    /// CAP_PERFMON; Python frames: --mode cpu, and wall, offcpu and --idle
    /// from the scheduler's own switches).
    Bpf,
}

/// Set (to anything but empty or "0") to act as if the kernel had no
/// perf_event eBPF programs: what tests use to see the refusal.
pub(crate) const UNAVAILABLE_ENV: &str = "PYINSPECT_BPF_UNAVAILABLE";

/// How often the ring buffer is drained: each wake-up costs some 20 µs
/// before any work on this machine, so rarely. The ring buffer (4 MiB)
/// holds more than a second of 10 kHz samples on a few CPUs.
const DRAIN_EVERY: Duration = Duration::from_millis(100);
/// How often the thread-state map is brought up to date (and sooner when a
/// sample names a thread it does not hold, at the next drain).
const REFRESH_EVERY: Duration = Duration::from_millis(100);
/// How long a just-launched program gets to bring its interpreter up.
const STARTUP_WAIT: Duration = Duration::from_secs(5);
/// Most samples kept waiting to be handed on (the ring buffer holds the rest).
const MAX_PENDING: usize = 1 << 16;
/// Threads remembered as running no Python (the map holds 16384 entries).
const MAX_NOT_PYTHON: usize = 4096;
/// Frames a sample holds at most (the program's MAX_FRAMES).
const MAX_FRAMES: usize = 128;

// The program's sample flags.
const F_TRUNCATED: u32 = 1;
const F_READ_ERROR: u32 = 2;
const F_NO_TSTATE: u32 = 4;

// The program's record kinds.
const K_SAMPLE: u32 = 0;
const K_OFF: u32 = 1;
const K_ON: u32 = 2;

/// Bytes before a record's frames (`struct sample` up to `frames`).
const HEADER: usize = 88;
/// Frame-chain steps the program takes at most (its MAX_STEPS).
const MAX_STEPS: usize = 160;

/// The program's `struct layout`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct LayoutC {
    tstate_frame: u32,
    via_cframe: u32,
    cframe_current: u32,
    frame_previous: u32,
    frame_code: u32,
    frame_pos: u32,
    owner: u32,
    shim_from: u32,
    switches: u32,
}

// SAFETY: plain u32 fields, no padding.
unsafe impl aya::Pod for LayoutC {}

impl From<WalkOffsets> for LayoutC {
    fn from(w: WalkOffsets) -> LayoutC {
        LayoutC {
            tstate_frame: w.tstate_frame,
            via_cframe: u32::from(w.via_cframe),
            cframe_current: w.cframe_current,
            frame_previous: w.frame_previous,
            frame_code: w.frame_code,
            frame_pos: w.frame_pos,
            owner: w.owner.map_or(u32::MAX, |(o, _)| o),
            shim_from: w.owner.map_or(u32::MAX, |(_, s)| u32::from(s)),
            switches: 0,
        }
    }
}

/// Why the eBPF engine cannot run here, checked before anything is loaded;
/// None when it may (the kernel can still refuse the program).
pub(crate) fn unavailable() -> Option<String> {
    if std::env::var_os(UNAVAILABLE_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        return Some(format!(
            "this kernel does not run perf_event eBPF programs (simulated by {UNAVAILABLE_ENV})"
        ));
    }
    // The program sees the initial PID namespace's ids; ours must be the
    // same for the targets map and the thread ids to match. That namespace
    // has a fixed inode number (PROC_PID_INIT_INO).
    const INIT_PID_NS_INO: u64 = 0xEFFF_FFFC;
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::metadata("/proc/self/ns/pid") {
        if m.ino() != INIT_PID_NS_INO {
            return Some(
                "pyinspect runs in a PID namespace of its own, whose ids the program \
                 does not see (run it in the host's)"
                    .into(),
            );
        }
    }
    // SAFETY: plain id getter.
    if unsafe { libc::geteuid() } == 0 {
        return None;
    }
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    let caps = crate::procfs::effective_caps(std::process::id() as i32).unwrap_or(0);
    if caps & CAP_SYS_ADMIN != 0 || caps & (CAP_BPF | CAP_PERFMON) == CAP_BPF | CAP_PERFMON {
        return None;
    }
    Some("it needs root, or CAP_BPF and CAP_PERFMON".into())
}

/// What the engine cannot do yet, from the options asked.
fn unsupported(cfg: &SamplerConfig) -> Option<&'static str> {
    if cfg.target.read.native {
        Some("--native")
    } else if cfg.schedule.subprocesses {
        Some("--subprocesses")
    } else if cfg.target.filter.gil_only {
        Some("--gil / --mode gil")
    } else if cfg.target.read.asyncio != crate::sampler::AsyncMode::Off {
        Some("--async")
    } else {
        None
    }
}

/// The sampler of either engine, as `record` drives it.
pub(crate) enum AnySampler {
    Ptrace(Box<Sampler>),
    Bpf(Box<BpfSampler>),
}

impl AnySampler {
    pub(crate) fn new(engine: Engine, root: i32, cfg: SamplerConfig) -> Result<AnySampler, Error> {
        match engine {
            Engine::Ptrace => Sampler::new(root, cfg).map(|s| AnySampler::Ptrace(Box::new(s))),
            Engine::Bpf => {
                if let Some(why) = unavailable() {
                    return Err(Error::BpfUnavailable(why));
                }
                if let Some(opt) = unsupported(&cfg) {
                    return Err(Error::BpfUnavailable(format!(
                        "it does not take {opt} yet (the ptrace engine does)"
                    )));
                }
                BpfSampler::new(root, cfg).map(|s| AnySampler::Bpf(Box::new(s)))
            }
        }
    }

    pub(crate) fn next_tick(&mut self) -> Option<Tick> {
        match self {
            AnySampler::Ptrace(s) => s.next_tick(),
            AnySampler::Bpf(s) => s.next_tick(),
        }
    }

    pub(crate) fn waiting_for_python(&self) -> bool {
        match self {
            AnySampler::Ptrace(s) => s.waiting_for_python(),
            AnySampler::Bpf(_) => false,
        }
    }

    pub(crate) fn duration_over(&self) -> bool {
        match self {
            AnySampler::Ptrace(s) => s.duration_over(),
            AnySampler::Bpf(s) => s.duration_over(),
        }
    }

    pub(crate) fn rate_health(&self) -> RateHealth {
        match self {
            AnySampler::Ptrace(s) => s.rate_health(),
            AnySampler::Bpf(s) => s.rate_health(),
        }
    }

    pub(crate) fn merge_counts(&self) -> crate::python::native::MergeCounts {
        match self {
            AnySampler::Ptrace(s) => s.merge_counts(),
            AnySampler::Bpf(_) => Default::default(),
        }
    }

    pub(crate) fn is_late(&self, late: Duration) -> bool {
        match self {
            AnySampler::Ptrace(s) => s.is_late(late),
            AnySampler::Bpf(_) => false,
        }
    }

    /// A line on what the engine cost, when the kernel counts it
    /// (`sysctl kernel.bpf_stats_enabled=1`).
    pub(crate) fn cost_line(&self) -> Option<String> {
        match self {
            AnySampler::Ptrace(_) => None,
            AnySampler::Bpf(s) => s.cost_line(),
        }
    }
}

/// The eBPF engine following one process.
pub(crate) struct BpfSampler {
    /// Holds the program and its perf events: dropped, all is detached.
    ebpf: aya::Ebpf,
    ring: RingBuf<MapData>,
    tstates: BpfHashMap<MapData, u32, u64>,
    counters: PerCpuArray<MapData, u64>,
    pid: i32,
    cmdline: Arc<str>,
    version: String,
    source: LiveProcess,
    reader: Reader,
    /// The Python threads as of the latest refresh, by kernel tid.
    threads: HashMap<i32, ThreadEntry>,
    refreshed: Instant,
    /// A sample named a thread the map did not hold.
    refresh_soon: bool,
    memo: CodeMemo,
    pending: VecDeque<Tick>,
    function_lines: bool,
    rate: f64,
    weight: Duration,
    duration: Option<Duration>,
    started: Instant,
    /// CLOCK_MONOTONIC (the program's `bpf_ktime_get_ns`) at the start.
    start_ns: u64,
    /// The process ended (said once, then sampling stops).
    ended: Option<Error>,
    /// No more samples: the end was said, or sampling was asked to stop.
    done: bool,
    taken: u64,
    /// Samples of threads not (yet) in the map.
    unknown_thread: u64,
    /// Threads a sample named that the thread list still lacked after a
    /// refresh (threads running no Python: a pool of BLAS, a C library's):
    /// the map holds 0 for them, which the program passes over silently.
    not_python: HashSet<i32>,
    /// Threads named by samples since the latest refresh, not in the map.
    unknown_tids: HashSet<i32>,
    /// Off-CPU intervals are taken (--idle, --mode wall or offcpu).
    switches: bool,
    /// What off-CPU threads wait for, when the mode names it.
    waits: Option<WaitReader>,
    /// Threads off their CPU: since when (the program's clock), and the
    /// stack they left with, until they come back.
    off: HashMap<u32, (u64, ThreadStack)>,
}

/// One record of the program's, copied out of the ring buffer.
struct RawRecord {
    kind: u32,
    tid: u32,
    time: u64,
    flags: u32,
    state: u32,
    call: u64,
    args: [u64; 6],
    frames: Vec<(u64, u64)>,
}

impl RawRecord {
    fn parse(b: &[u8]) -> Option<RawRecord> {
        if b.len() < HEADER {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let n = (u32_at(16) as usize)
            .min(MAX_FRAMES)
            .min((b.len() - HEADER) / 16);
        Some(RawRecord {
            tid: u32_at(4),
            time: u64_at(8),
            flags: u32_at(20),
            kind: u32_at(24),
            state: u32_at(28),
            call: u64_at(32),
            args: std::array::from_fn(|i| u64_at(40 + 8 * i)),
            frames: (0..n)
                .map(|i| (u64_at(HEADER + 16 * i), u64_at(HEADER + 8 + 16 * i)))
                .collect(),
        })
    }
}

/// Whether a kernel release string (`6.1.0-18-amd64`) is at least `want`.
fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut it = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = it.next().and_then(|v| v.parse::<u32>().ok());
    let minor = it.next().and_then(|v| v.parse::<u32>().ok());
    match (major, minor) {
        (Some(a), Some(b)) => (a, b) >= want,
        // Unreadable: let the kernel's own checks decide.
        _ => true,
    }
}

/// The scheduler state a thread left its CPU in, as /proc writes it:
/// `prev_state` of sched_switch (0 when it was preempted, runnable).
fn state_char(state: u32) -> char {
    if state & 2 != 0 {
        'D'
    } else if state & 1 != 0 {
        'S'
    } else if state & 4 != 0 {
        'T'
    } else if state & 8 != 0 {
        't'
    } else if state == 0 {
        'R'
    } else {
        'S'
    }
}

fn monotonic_ns() -> u64 {
    // SAFETY: clock_gettime fills the timespec we pass.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

fn load_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::BpfUnavailable(format!("{what}: {e}"))
}

impl BpfSampler {
    fn new(pid: i32, cfg: SamplerConfig) -> Result<BpfSampler, Error> {
        crate::privilege::check_target(pid)?;
        let source = LiveProcess::new(pid);
        // A program just launched may not have its interpreter up yet.
        let deadline = Instant::now() + STARTUP_WAIT;
        let (reader, threads) = loop {
            let attempt = PythonProcess::open(&source).and_then(|p| {
                let mut r = Reader::new(p);
                let t = r.thread_entries(&source)?;
                Ok((r, t))
            });
            match attempt {
                Ok(ok) => break ok,
                Err(Error::NotInitialized { .. } | Error::NoInterpreter { .. })
                    if Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        };
        let offsets = reader.walk_offsets().ok_or_else(|| {
            Error::BpfUnavailable(format!(
                "Python {} has a frame layout the eBPF program cannot walk",
                reader.process.version
            ))
        })?;

        let mut ebpf =
            aya::Ebpf::load(PROGRAM).map_err(|e| load_error("loading the program", e))?;
        let mut layouts: Array<_, LayoutC> = Array::try_from(
            ebpf.map_mut("layouts")
                .ok_or_else(|| load_error("the program", "no layouts map"))?,
        )
        .map_err(|e| load_error("the layouts map", e))?;
        let mut layout = LayoutC::from(offsets);
        layout.switches = u32::from(cfg.target.filter.include_idle);
        layouts
            .set(0, layout, 0)
            .map_err(|e| load_error("the layouts map", e))?;
        let mut targets: BpfHashMap<_, u32, u32> = BpfHashMap::try_from(
            ebpf.map_mut("targets")
                .ok_or_else(|| load_error("the program", "no targets map"))?,
        )
        .map_err(|e| load_error("the targets map", e))?;
        targets
            .insert(pid as u32, 0u32, 0)
            .map_err(|e| load_error("the targets map", e))?;
        let take = |ebpf: &mut aya::Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| load_error("the program", format!("no {name} map")))
        };
        let tstates = BpfHashMap::try_from(take(&mut ebpf, "tstates")?)
            .map_err(|e| load_error("the tstates map", e))?;
        let ring = RingBuf::try_from(take(&mut ebpf, "samples")?)
            .map_err(|e| load_error("the samples ring buffer", e))?;
        let counters = PerCpuArray::try_from(take(&mut ebpf, "counters")?)
            .map_err(|e| load_error("the counters map", e))?;

        let mut s = BpfSampler {
            ebpf,
            ring,
            tstates,
            counters,
            pid,
            cmdline: Arc::from(crate::stack::escape_controls(&reader.process.cmdline).as_ref()),
            version: reader.process.version.to_string(),
            source,
            reader,
            threads: HashMap::new(),
            refreshed: Instant::now(),
            refresh_soon: false,
            memo: CodeMemo::new(),
            pending: VecDeque::new(),
            function_lines: cfg.target.read.function_lines,
            rate: cfg.schedule.rate,
            weight: Duration::from_secs_f64(1.0 / cfg.schedule.rate),
            duration: cfg.schedule.duration,
            started: Instant::now(),
            start_ns: 0,
            ended: None,
            done: false,
            taken: 0,
            unknown_thread: 0,
            not_python: HashSet::new(),
            unknown_tids: HashSet::new(),
            switches: cfg.target.filter.include_idle,
            waits: (cfg.target.read.waits != crate::wait::WaitDetail::Off)
                .then(|| WaitReader::new(pid, cfg.target.read.waits)),
            off: HashMap::new(),
        };
        s.set_threads(threads);

        let period = (1e9 / cfg.schedule.rate).round().max(1.0) as u64;
        let cpus = aya::util::online_cpus().map_err(|(what, e)| load_error(what, e))?;
        let prog: &mut PerfEvent = s
            .ebpf
            .program_mut("on_sample")
            .ok_or_else(|| load_error("the program", "no on_sample"))?
            .try_into()
            .map_err(|e| load_error("the program", e))?;
        prog.load()
            .map_err(|e| load_error("the kernel refused the program", e))?;
        for cpu in cpus {
            prog.attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Period(period),
                false,
            )
            .map_err(|e| load_error("attaching to the CPU clock", e))?;
        }
        s.start_ns = monotonic_ns();
        if s.switches {
            s.attach_switches()?;
        }
        s.started = Instant::now();
        s.refreshed = Instant::now();
        Ok(s)
    }

    /// Load and attach the sched_switch program, after counting the
    /// threads already asleep from now: each is read here (asleep, its
    /// stack holds still) and put in the program's map as off since now,
    /// so that its coming back ends the interval as any other's does.
    fn attach_switches(&mut self) -> Result<(), Error> {
        let release = crate::procfs::kernel_release().unwrap_or_default();
        if !kernel_at_least(&release, (5, 18)) {
            return Err(Error::BpfUnavailable(format!(
                "its off-CPU modes need Linux 5.18 or later (sched_switch passing the \
                 task's state); this kernel is {release}"
            )));
        }
        let mut off_map: BpfHashMap<_, u32, u64> = BpfHashMap::try_from(
            self.ebpf
                .map_mut("off_cpu")
                .ok_or_else(|| load_error("the program", "no off_cpu map"))?,
        )
        .map_err(|e| load_error("the off_cpu map", e))?;
        let mut asleep = Vec::new();
        for (tid, t) in &self.threads {
            let state = crate::procfs::thread_state(self.pid, *tid);
            if let Some(c @ ('S' | 'D')) = state {
                if off_map.insert(*tid as u32, self.start_ns, 0).is_ok() {
                    asleep.push((*tid, t.tstate, c));
                }
            }
        }
        for (tid, tstate, c) in asleep {
            let frames = self.walk_here(tstate);
            let call = self.waits.as_mut().and_then(|w| w.syscall(tid));
            if let Some(stack) = self.stack_of(tid as u32, 0, frames, &mut Vec::new()) {
                let stack = self.off_stack(stack, tid, c, call);
                self.off.insert(tid as u32, (self.start_ns, stack));
            }
        }
        let prog: &mut aya::programs::RawTracePoint = self
            .ebpf
            .program_mut("on_switch")
            .ok_or_else(|| load_error("the program", "no on_switch"))?
            .try_into()
            .map_err(|e| load_error("the program", e))?;
        prog.load()
            .map_err(|e| load_error("the kernel refused the sched_switch program", e))?;
        prog.attach("sched_switch")
            .map_err(|e| load_error("attaching to sched_switch", e))?;
        Ok(())
    }

    /// The frame chain of a thread state, walked from here as the program
    /// walks it (for a thread asleep: its stack does not move).
    fn walk_here(&self, tstate: u64) -> Vec<(u64, u64)> {
        use crate::memory::Memory;
        let Some(w) = self.reader.walk_offsets() else {
            return Vec::new();
        };
        let word = |addr: u64| -> Option<u64> {
            let mut b = [0u8; 8];
            self.source.read(addr, &mut b).ok()?;
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
                self.source
                    .read(f.wrapping_add(u64::from(o)), &mut b)
                    .is_ok()
                    && b[0] >= shim_from
            });
            if !shim && code != 0 {
                out.push((code, pos));
            }
            f = prev;
        }
        out
    }

    /// A stack that left its CPU in state `c`, in system call `call`: off
    /// CPU, with its wait when the mode names waits.
    fn off_stack(
        &mut self,
        mut stack: ThreadStack,
        tid: i32,
        c: char,
        call: Option<crate::wait::SyscallLine>,
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

    /// Bring the program's thread-state map in line with `threads`.
    fn set_threads(&mut self, threads: Vec<ThreadEntry>) {
        let now: HashMap<i32, ThreadEntry> = threads.into_iter().map(|t| (t.tid, t)).collect();
        for (tid, t) in &now {
            if self.threads.get(tid).map(|o| o.tstate) != Some(t.tstate) {
                let _ = self.tstates.insert(*tid as u32, t.tstate, 0);
            }
        }
        for tid in self.threads.keys() {
            if !now.contains_key(tid) {
                let _ = self.tstates.remove(&(*tid as u32));
            }
        }
        self.threads = now;
        // Threads that were not Python and now are, or are gone.
        let threads = &self.threads;
        let pid = self.pid;
        let tstates = &mut self.tstates;
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
            if self.tstates.insert(tid as u32, 0u64, 0).is_ok() {
                self.not_python.insert(tid);
            }
        }
    }

    fn refresh(&mut self) {
        self.refreshed = Instant::now();
        self.refresh_soon = false;
        match self.reader.thread_entries(&self.source) {
            Ok(t) => self.set_threads(t),
            Err(e @ Error::ProcessExited { .. }) => self.ended = Some(e),
            Err(_) if !self.alive() => self.ended = Some(Error::ProcessExited { pid: self.pid }),
            // A list read while threads come and go: the next refresh.
            Err(_) => {}
        }
    }

    fn alive(&self) -> bool {
        !matches!(
            crate::procfs::thread_state(self.pid, self.pid),
            None | Some('Z' | 'X')
        )
    }

    /// The stack of thread `tid` from the code-object and position words
    /// of its frames; None for a thread not listed (yet).
    fn stack_of(
        &mut self,
        tid: u32,
        flags: u32,
        frames: Vec<(u64, u64)>,
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
        for (code, pos) in frames {
            match self.reader.frame_from_words(
                &self.source,
                &mut self.memo,
                code,
                pos,
                self.function_lines,
            ) {
                Ok(Some(f)) => stack.frames.push(f),
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

    /// A tick of one stack of this process.
    fn tick(
        &self,
        at_ns: u64,
        weight: Duration,
        samples: u64,
        stack: ThreadStack,
        errors: Vec<Error>,
    ) -> Tick {
        let at = Duration::from_nanos(at_ns.saturating_sub(self.start_ns));
        Tick {
            timestamp: at,
            weight,
            samples,
            late: Duration::ZERO,
            missed: 0,
            processes: vec![ProcessSample {
                pid: self.pid,
                cmdline: self.cmdline.clone(),
                python_version: self.version.clone(),
                threads: vec![stack],
                loop_turns: Vec::new(),
                read_at: at,
            }],
            errors,
            ended: Vec::new(),
        }
    }

    /// The tick of an off-CPU interval from `since` to `until`: its weight
    /// the interval, counting as that many periods (at least one).
    fn interval_tick(&self, since: u64, until: u64, stack: ThreadStack) -> Tick {
        let weight = Duration::from_nanos(until.saturating_sub(since));
        let samples = ((weight.as_secs_f64() * self.rate).round() as u64).max(1);
        self.tick(since, weight, samples, stack, Vec::new())
    }

    /// The threads still off their CPU at the end: counted until `end`.
    fn close_intervals(&mut self, end: u64) {
        let mut off: Vec<_> = std::mem::take(&mut self.off).into_iter().collect();
        off.sort_by_key(|(_, (since, _))| *since);
        for (_, (since, stack)) in off {
            let t = self.interval_tick(since, end, stack);
            self.pending.push_back(t);
        }
    }

    /// Turn the ring buffer's records into ticks.
    fn drain(&mut self) {
        self.memo.clear();
        // Copied out first, as the ring buffer's items borrow it.
        let mut raw: Vec<RawRecord> = Vec::new();
        while let Some(item) = self.ring.next() {
            if let Some(r) = RawRecord::parse(&item) {
                raw.push(r);
            }
            if raw.len() >= MAX_PENDING {
                break;
            }
        }
        for r in raw {
            if r.kind == K_ON {
                // The record's `call` holds when the thread left.
                if let Some((since, stack)) = self.off.remove(&r.tid) {
                    let t = self.interval_tick(since, r.time, stack);
                    self.pending.push_back(t);
                }
                continue;
            }
            if r.flags & F_NO_TSTATE != 0 {
                self.unknown_thread += 1;
                self.unknown_tids.insert(r.tid as i32);
                self.refresh_soon = true;
                continue;
            }
            let mut errors = Vec::new();
            let Some(stack) = self.stack_of(r.tid, r.flags, r.frames, &mut errors) else {
                continue;
            };
            self.taken += 1;
            if r.kind == K_OFF {
                let c = state_char(r.state);
                let call = crate::wait::call_from_registers(r.call, r.args);
                let stack = self.off_stack(stack, r.tid as i32, c, Some(call));
                // An interval whose end was never seen (the thread was
                // asleep before the program was attached, and woke before
                // it was) is replaced.
                self.off.insert(r.tid, (r.time, stack));
                continue;
            }
            if r.kind == K_SAMPLE {
                let t = self.tick(r.time, self.weight, 1, stack, errors);
                self.pending.push_back(t);
            }
        }
    }

    fn duration_over(&self) -> bool {
        self.duration.is_some_and(|d| self.started.elapsed() >= d)
    }

    fn next_tick(&mut self) -> Option<Tick> {
        loop {
            if let Some(t) = self.pending.pop_front() {
                return Some(t);
            }
            if self.done {
                return None;
            }
            if let Some(e) = self.ended.take() {
                self.done = true;
                self.close_intervals(monotonic_ns());
                self.pending.push_back(Tick {
                    timestamp: self.started.elapsed(),
                    weight: Duration::ZERO,
                    samples: 0,
                    late: Duration::ZERO,
                    missed: 0,
                    processes: Vec::new(),
                    errors: Vec::new(),
                    ended: vec![e],
                });
                continue;
            }
            if crate::pause::interrupted() || self.duration_over() {
                // What the program wrote until now still counts.
                self.drain();
                self.close_intervals(monotonic_ns());
                self.done = true;
                continue;
            }
            std::thread::sleep(DRAIN_EVERY);
            if self.refreshed.elapsed() >= REFRESH_EVERY || self.refresh_soon {
                self.refresh();
            }
            self.drain();
            if self.ended.is_some() {
                // What the program wrote before the end still counts.
                self.drain();
            }
        }
    }

    /// Samples the program counted and the ring buffer had no room for.
    fn counts(&self) -> (u64, u64) {
        let sum = |i: u32| {
            self.counters
                .get(&i, 0)
                .map(|v| v.iter().sum::<u64>())
                .unwrap_or(0)
        };
        (sum(0), sum(1))
    }

    fn rate_health(&self) -> RateHealth {
        let secs = self.started.elapsed().as_secs_f64();
        let (_, lost) = self.counts();
        let missed = lost;
        let share = if self.taken + missed > 0 {
            self.taken as f64 / (self.taken + missed) as f64
        } else {
            1.0
        };
        let mut reason = None;
        if secs >= 0.5 && share < 0.95 {
            reason = Some(format!(
                "the eBPF engine: {lost} samples found the ring buffer full"
            ));
        }
        RateHealth {
            asked: self.rate,
            delivered: self.rate * share,
            reason,
        }
    }

    fn cost_line(&self) -> Option<String> {
        let prog: &PerfEvent = self.ebpf.program("on_sample")?.try_into().ok()?;
        let info = prog.info().ok()?;
        let (runs, time) = (info.run_count(), info.run_time());
        if runs == 0 {
            return None;
        }
        let (taken, _) = self.counts();
        Some(format!(
            "pyinspect: eBPF program: {runs} runs ({taken} in the target, {} of threads \
             not listed yet), {:.2} µs each, {:.1} ms in all",
            self.unknown_thread,
            time.as_secs_f64() * 1e6 / runs as f64,
            time.as_secs_f64() * 1e3
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{kernel_at_least, state_char, RawRecord, HEADER};

    #[test]
    fn kernel_releases() {
        assert!(kernel_at_least("6.18.44-fc-v1300", (5, 18)));
        assert!(kernel_at_least("5.18.0", (5, 18)));
        assert!(!kernel_at_least("5.15.0-91-generic", (5, 18)));
        assert!(!kernel_at_least("4.19.0-26-amd64\n", (5, 18)));
        assert!(kernel_at_least("", (5, 18)));
    }

    #[test]
    fn switch_states() {
        assert_eq!(state_char(0), 'R');
        assert_eq!(state_char(1), 'S');
        assert_eq!(state_char(2), 'D');
        assert_eq!(state_char(2 | 0x400), 'D');
        assert_eq!(state_char(4), 'T');
        assert_eq!(state_char(8), 't');
    }

    #[test]
    fn records_are_bounded_by_their_bytes() {
        let mut b = vec![0u8; HEADER + 16];
        b[4..8].copy_from_slice(&7u32.to_le_bytes());
        // It claims 1000 frames; one is there.
        b[16..20].copy_from_slice(&1000u32.to_le_bytes());
        b[24..28].copy_from_slice(&1u32.to_le_bytes());
        b[HEADER..HEADER + 8].copy_from_slice(&0xabcu64.to_le_bytes());
        let r = RawRecord::parse(&b).unwrap();
        assert_eq!((r.tid, r.kind, r.frames.len()), (7, 1, 1));
        assert_eq!(r.frames[0].0, 0xabc);
        assert!(RawRecord::parse(&b[..HEADER - 1]).is_none());
    }
}
