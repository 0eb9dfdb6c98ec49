//! The reader itself: what it keeps from one snapshot to the next (the
//! type caches, the sample cache, the notes), and the types and limits
//! that the other rooms share.

use crate::cpython_layouts::asyncio::{for_version, AsyncioLayout};
use crate::stack::ThreadTasks;
use std::collections::HashMap;
use std::time::Instant;

/// Most tasks read from one process per snapshot.
pub(crate) const MAX_TASKS: usize = 1_000_000;
/// Default on (`dump` without `--async`): a registry larger than this is
/// not read, and the dump says so.
pub(crate) const AUTO_MAX_TASKS: usize = 100_000;
/// Longest coroutine chain followed (`await` nesting).
pub(super) const MAX_CHAIN: usize = 256;

#[derive(Debug, Clone, Copy)]
pub(super) struct Lists {
    pub(super) ts_running_loop: u64,
    pub(super) ts_running_task: u64,
    pub(super) ts_tasks_head: u64,
    pub(super) interp_tasks_head: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    CTask,
    CFuture,
    /// A Python-level Task or Future (attributes in `__dict__`).
    PyTask,
    PyFuture,
    Other,
}

/// What one read of the tasks wants.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AsyncRead {
    /// Most tasks shown per thread (the rest are counted).
    pub(crate) limit: usize,
    /// Registries holding more tasks than this are not read.
    pub(crate) max_tasks: usize,
    /// Only the running tasks and their awaiters are wanted (`record`/`top
    /// --async`): the others' stacks are not read.
    pub(crate) running_only: bool,
}

#[derive(Clone)]
pub(super) struct RawTask {
    pub(super) addr: u64,
    pub(super) loop_: u64,
    pub(super) state: u8,
    pub(super) log_tb: bool,
    pub(super) cancelling: bool,
    pub(super) name: u64,
    pub(super) coro: u64,
    pub(super) waiter: u64,
    pub(super) callbacks: Vec<u64>,
    /// 3.14+: the awaiters the task recorded.
    pub(super) awaited_by: Option<Vec<u64>>,
    /// Found through a handle in its loop's queues, not in a registry.
    pub(super) via: Option<&'static str>,
}

/// The tasks of one interpreter as a sample read them (see `SAMPLE_CACHE_TTL`).
pub(super) struct SampleCache {
    pub(super) at: Instant,
    pub(super) interp: u64,
    pub(super) tasks: Vec<RawTask>,
    pub(super) parents: Vec<Vec<usize>>,
    pub(super) index: HashMap<u64, usize>,
    /// Coroutine frame (3.11+, inside the coroutine) → task.
    pub(super) frames: HashMap<u64, usize>,
}

pub(crate) struct AsyncioReader {
    pub(super) layout: Option<&'static AsyncioLayout>,
    pub(super) sample_cache: Option<SampleCache>,
    pub(super) lists: Option<Lists>,
    pub(super) last_debug_scan: Option<Instant>,
    /// Said once: why some tasks cannot be read.
    pub(crate) notes: Vec<String>,
    pub(super) kinds: HashMap<u64, Kind>,
    pub(super) mro_names: HashMap<u64, Vec<String>>,
    pub(super) slots: HashMap<(u64, &'static str), Option<u64>>,
    /// Interpreters found without `asyncio.tasks`, and when.
    pub(super) no_asyncio: HashMap<u64, Instant>,
    /// Per interpreter: Trio's `Runner` type (`None`: not imported when
    /// looked, at that instant).
    pub(super) trio_types: HashMap<u64, (Option<u64>, Instant)>,
    /// Per thread state: the runner of the `trio.run` it runs, as found;
    /// or of the guest run whose host loop it runs.
    pub(super) trio_runners: HashMap<u64, u64>,
    /// Per interpreter (once its `Runner` type is found): what tells a
    /// guest run's frames (`None`: Trio has no guest mode there).
    pub(super) trio_guest_facts: HashMap<u64, Option<std::sync::Arc<GuestFacts>>>,
    /// How long ago the target's moment was (a core: when it was written),
    /// in seconds: its loops' clock then read `monotonic() - age`.
    pub(super) age: f64,
}

/// How long an interpreter found without asyncio is taken to still be
/// without it (a sampler looks each sample: the look scans sys.modules).
pub(super) const NO_ASYNCIO_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// What tells a Trio guest run's frames, from the target's modules:
/// Trio's `GuestState` type, and the files of `guest_tick`'s module and
/// of the worker threads' (`_handle_job`). Found by `trio.rs`.
pub(super) struct GuestFacts {
    pub(super) guest_state: u64,
    pub(super) run_file: String,
    pub(super) cache_file: String,
}

/// Result for one process: per thread index of the snapshot, its tasks.
pub(crate) type TasksByThread = HashMap<usize, ThreadTasks>;

impl AsyncioReader {
    pub(crate) fn new(major: u8, minor: u8) -> AsyncioReader {
        AsyncioReader {
            layout: for_version(major, minor),
            sample_cache: None,
            lists: None,
            last_debug_scan: None,
            notes: Vec::new(),
            kinds: HashMap::new(),
            mro_names: HashMap::new(),
            slots: HashMap::new(),
            no_asyncio: HashMap::new(),
            trio_types: HashMap::new(),
            trio_runners: HashMap::new(),
            trio_guest_facts: HashMap::new(),
            age: 0.0,
        }
    }

    /// Deadlines counted from a moment `age` seconds ago (a core's), not
    /// from now.
    pub(crate) fn with_age(mut self, age: f64) -> AsyncioReader {
        self.age = age.max(0.0);
        self
    }

    /// The loops' clock at the target's moment.
    pub(super) fn loop_now(&self) -> f64 {
        monotonic() - self.age
    }

    pub(super) fn note(&mut self, s: String) {
        if !self.notes.contains(&s) && self.notes.len() < 16 {
            self.notes.push(s);
        }
    }
}

/// `time.monotonic()`, which asyncio's loops use as their clock: the same
/// clock in every process of the machine.
fn monotonic() -> f64 {
    crate::wait::clock_now(libc::CLOCK_MONOTONIC).unwrap_or(0.0)
}
