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
//! ring buffer is drained every 100 ms, each code object resolved
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
//!
//! With `--native` the program copies the sampled thread's user registers
//! and the top of its stack, and notes where each Python frame and each
//! eval-loop call's shim frame lies: the unwind and the merge run here, on
//! that copy, as the ptrace engine's run on the copy it takes while a
//! thread is paused.
//!
//! With `--async` the program notes each frame's address: pyinspect finds
//! the asyncio task a sample ran by its coroutine's frame, among the tasks
//! it reads at the drain, and stitches its awaiters below it.
//!
//! With `--all` it follows every Python process on the host, each in its
//! own slot of the program's maps, and looks for new ones every second.
//!
//! For `watch` both programs run, with the frames' addresses, and the ring
//! buffer is drained at every tick: each thread's latest record (a sample,
//! or the stack and wait it left its CPU with) stands for it, and a tick is
//! every thread at once, the GIL's holder and the loops' turns read then
//! (`latest.rs`).

mod followed;
mod latest;
mod records;
mod sampler;

use crate::error::Error;
use crate::sampler::{RateHealth, Sampler, SamplerConfig, Tick};
pub(crate) use sampler::BpfSampler;
use std::time::Duration;

/// Which engine takes the samples (`--engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Engine {
    /// Wake up per sample and read the target from user space (pausing
    /// threads unless --nonblocking): every mode and option.
    #[default]
    Ptrace,
    /// Sample in the kernel with an eBPF program (root or CAP_BPF and
    /// CAP_PERFMON; Python frames: --mode cpu, and wall, offcpu and --idle
    /// from the scheduler's own switches; --mode gil; --async, the running
    /// asyncio task's; --native from the stack's top, copied in the kernel
    /// and unwound here).
    Bpf,
}

/// Set (to anything but empty or "0") to act as if the kernel had no
/// perf_event eBPF programs: what tests use to see the refusal.
pub(crate) const UNAVAILABLE_ENV: &str = "PYINSPECT_BPF_UNAVAILABLE";

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

/// The sampler of either engine, as `record` drives it.
pub(crate) enum AnySampler {
    Ptrace(Box<Sampler>),
    Bpf(Box<BpfSampler>),
}

impl AnySampler {
    pub(crate) fn new(engine: Engine, root: i32, cfg: SamplerConfig) -> Result<AnySampler, Error> {
        AnySampler::open(engine, root, cfg, false)
    }

    /// The sampler `watch` drives: each tick every thread of each process
    /// (the ptrace engine reads them all; the eBPF engine keeps each
    /// thread's latest state from its records).
    pub(crate) fn for_watch(
        engine: Engine,
        root: i32,
        cfg: SamplerConfig,
    ) -> Result<AnySampler, Error> {
        AnySampler::open(engine, root, cfg, true)
    }

    fn open(
        engine: Engine,
        root: i32,
        cfg: SamplerConfig,
        watch: bool,
    ) -> Result<AnySampler, Error> {
        match engine {
            Engine::Ptrace if cfg.schedule.all => Err(Error::BpfUnavailable(
                "--all samples the whole host with the bpf engine only (not --engine ptrace)"
                    .into(),
            )),
            Engine::Ptrace => Sampler::new(root, cfg).map(|s| AnySampler::Ptrace(Box::new(s))),
            Engine::Bpf => {
                if let Some(why) = unavailable() {
                    return Err(Error::BpfUnavailable(why));
                }
                let all = cfg.schedule.all;
                BpfSampler::new(root, cfg, all, watch).map(|s| AnySampler::Bpf(Box::new(s)))
            }
        }
    }

    pub(crate) fn next_tick(&mut self) -> Option<Tick> {
        match self {
            AnySampler::Ptrace(s) => s.next_tick(),
            AnySampler::Bpf(s) => s.next_tick(),
        }
    }

    /// When the ticks' timestamps count from.
    pub(crate) fn started(&self) -> std::time::Instant {
        match self {
            AnySampler::Ptrace(s) => s.started(),
            AnySampler::Bpf(s) => s.started(),
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
            AnySampler::Bpf(s) => s.merge_counts(),
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
