//! What a sampler is told: when to sample ([`Schedule`]), and for each read
//! of a process ([`TargetConfig`]) whether it may pause, which threads it
//! keeps, and what it reads of each.

use crate::wait::WaitDetail;
use std::time::Duration;

/// What a sampler is told: when to sample, and what each read of a
/// followed process does.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    pub schedule: Schedule,
    pub target: TargetConfig,
}

/// What one read of a process is told (`dump` reads once with this alone,
/// no schedule): whether it may pause, which threads it keeps, and what it
/// reads of each.
#[derive(Debug, Clone)]
pub struct TargetConfig {
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
    /// Every Python process on the host, new ones too (`--all`; the eBPF
    /// engine only).
    pub all: bool,
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
    /// Each asyncio loop thread's turn ([`ProcessSample::loop_turns`](super::ProcessSample::loop_turns)): watch.
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
