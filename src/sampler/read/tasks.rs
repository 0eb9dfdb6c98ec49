//! What a sample reads beside the frames while the threads stand still:
//! asyncio tasks, greenlets and each asyncio loop's turn; and where 3.14's
//! `_asyncio` keeps its `AsyncioDebug` section in the target. The readers of
//! tasks and greenlets ([`TaskReaders`]) serve the eBPF engine too.

use super::Target;
use crate::python::asyncio::{self, AsyncRead, AsyncioReader, TasksByThread};
use crate::python::greenlet::{GreenletRead, GreenletReader, SocketQuiet};
use crate::python::pagecache::{PageCache, PageStore};
use crate::python::reader::{Reader, ThreadSnapshot};
use crate::sampler::config::{AsyncMode, TargetConfig};
use crate::target::TargetSource;
use std::time::Duration;

/// `--async-mode all`: most greenlets of a thread whose stacks a sample adds.
const SAMPLED_GREENLETS: usize = 10_000;
/// `--async-mode all`: how long the greenlets found by a walk of the
/// collector's lists are used before the next walk (new greenlets show up
/// after at most this long; each sample reads those found).
const GREENLETS_FOUND_FOR: Duration = Duration::from_secs(1);

/// The readers of what runs beside a thread's frames: asyncio's and Trio's
/// tasks (made on first use), greenlets; what they learn of the target
/// (types, lists, names) kept from one read to the next, and the pages the
/// latest read used: the next one reads them again in one batch at its
/// start. So a read of a process that is not stopped (the eBPF engine's)
/// sees most of what it reads as of one moment, however long it then takes
/// to make sense of it (it was torn by every switch of greenlets in the
/// time it took), and a sampled one costs a few reads a tick.
#[derive(Default)]
pub(crate) struct TaskReaders {
    tasks: Option<AsyncioReader>,
    greenlets: GreenletReader,
    pages: PageStore,
}

impl TaskReaders {
    /// What `mode` reads of the tasks and greenlets of the threads in
    /// `snaps` (read as they are, stopped or not), by thread index; `age`:
    /// how long ago the target's moment was (a core's). Trio's tasks and
    /// greenlets for dump and for `--async-mode all`.
    pub(crate) fn read(
        &mut self,
        reader: &mut Reader,
        source: &dyn TargetSource,
        age: f64,
        mode: AsyncMode,
        snaps: &[ThreadSnapshot],
        quiet: Option<SocketQuiet>,
    ) -> TasksByThread {
        let cache = PageCache::resume(source, std::mem::take(&mut self.pages));
        let mut tasks = match async_read(mode) {
            Some(want) => self
                .asyncio(reader, age)
                .read(reader, &cache, snaps, want, &|| {
                    asyncio::debug_sections(source)
                }),
            None => TasksByThread::default(),
        };
        // Trio's tasks, through the runner trio.run's frame holds.
        let trio_limit = match mode {
            AsyncMode::Tree { limit, .. } => Some(limit),
            AsyncMode::Stitch { all: true } => Some(asyncio::MAX_TASKS),
            _ => None,
        };
        if let Some(limit) = trio_limit {
            let waits = matches!(mode, AsyncMode::Tree { .. });
            self.asyncio(reader, age)
                .read_trio(reader, &cache, snaps, limit, waits, &mut tasks);
        }
        if let Some(how) = greenlet_read(mode) {
            self.greenlets
                .read(reader, &cache, snaps, how, quiet, &mut tasks);
        }
        self.pages = cache.into_store();
        tasks
    }

    /// The asyncio task reader, made on first use; `age` as in `read`.
    fn asyncio(&mut self, reader: &Reader, age: f64) -> &mut AsyncioReader {
        let v = &reader.process.version;
        let (major, minor) = (v.major, v.minor);
        self.tasks
            .get_or_insert_with(|| AsyncioReader::new(major, minor).with_age(age))
    }

    /// What went wrong without stopping the reads (shown once by dump).
    pub(crate) fn notes(&self) -> impl Iterator<Item = &String> {
        let tasks = self.tasks.iter().flat_map(|t| t.notes.iter());
        tasks.chain(self.greenlets.notes.iter())
    }
}

/// What `mode` reads of the greenlets: for dump, and for every sample with
/// `--async-mode all`.
fn greenlet_read(mode: AsyncMode) -> Option<GreenletRead> {
    match mode {
        AsyncMode::Tree { limit, .. } => Some(GreenletRead {
            limit,
            found_for: None,
            waits: true,
        }),
        AsyncMode::Stitch { all: true } => Some(GreenletRead {
            limit: SAMPLED_GREENLETS,
            found_for: Some(GREENLETS_FOUND_FOR),
            waits: false,
        }),
        _ => None,
    }
}

impl Target {
    /// The asyncio tasks (and for dump the greenlets) of the threads in
    /// `snap`, by thread index, read while the threads stand still.
    pub(super) fn read_tasks(
        &mut self,
        cfg: &TargetConfig,
        snap: Option<&[ThreadSnapshot]>,
    ) -> TasksByThread {
        let Some(s) = snap else {
            return TasksByThread::default();
        };
        let mode = cfg.read.asyncio;
        let age = self.waits.age();
        let now = self
            .waits
            .live()
            .then(|| crate::wait::clock_now(libc::CLOCK_MONOTONIC))
            .flatten();
        let tree = matches!(mode, AsyncMode::Tree { .. });
        // dump: when a socket a greenlet waits on last carried data.
        let waits = &mut self.waits;
        let mut quiet = |fd: i32| Some(now? - waits.describe(fd).quiet_s?);
        let quiet: Option<SocketQuiet> = match tree {
            true => Some(&mut quiet),
            false => None,
        };
        let mut tasks = self
            .tasks
            .read(&mut self.reader, &*self.source, age, mode, s, quiet);
        if tree {
            self.describe_greenlet_waits(&mut tasks, now);
        }
        tasks
    }

    /// The greenlets' waits completed from the kernel's side: a socket's
    /// fd described (its peer, its last data), a timer's seconds left and
    /// how long it has run (a live process, `now` on this host's monotonic
    /// clock, which its deadline is on).
    fn describe_greenlet_waits(&mut self, tasks: &mut TasksByThread, now: Option<f64>) {
        for tt in tasks.values_mut() {
            let greenlets = tt.greenlets.iter_mut().filter_map(|g| g.wait.as_mut());
            let trio = tt.trio_tasks.iter_mut().filter_map(|t| t.wait.as_mut());
            for w in greenlets.chain(trio) {
                if let Some(fd) = &mut w.fd {
                    *fd = self.waits.describe(fd.fd);
                }
                if let (Some(at), Some(now)) = (w.deadline, now) {
                    w.seconds_left = Some(((at - now) * 1000.0).round() / 1000.0);
                }
                if let (Some(began), Some(now)) = (w.began(), now) {
                    w.waited_s = Some(((now - began) * 1000.0).round() / 1000.0);
                }
            }
        }
    }

    /// With `loop_turns`: each asyncio loop thread's turn, into
    /// `loop_turns` (emptied first).
    pub(super) fn read_loop_turns(&mut self, cfg: &TargetConfig, snap: Option<&[ThreadSnapshot]>) {
        self.loop_turns.clear();
        if let (Some(s), true) = (snap, cfg.read.loop_turns) {
            let pl = &self.reader.process.layout;
            let objr = crate::python::objects::ObjReader::new(&*self.source, pl);
            for t in s {
                let Some(tid) = t.stack.os_thread_id else {
                    continue;
                };
                let Some((m, kind)) = crate::python::asyncio::loop_frame(&t.stack.frames)
                    .and_then(|(f, kind)| Some((f.mark?, kind)))
                else {
                    continue;
                };
                if let Some(turn) = self.turns.read(&objr, &pl.frame, m.addr, kind) {
                    self.loop_turns.push((tid, turn));
                }
            }
        }
    }
}

/// What to read of the asyncio tasks in `mode`; None when off.
fn async_read(mode: AsyncMode) -> Option<AsyncRead> {
    match mode {
        AsyncMode::Off => None,
        AsyncMode::Tree { forced, limit } => Some(AsyncRead {
            limit,
            max_tasks: if forced {
                asyncio::MAX_TASKS
            } else {
                asyncio::AUTO_MAX_TASKS
            },
            running_only: false,
        }),
        AsyncMode::Stitch { all } => Some(AsyncRead {
            limit: asyncio::MAX_TASKS,
            max_tasks: asyncio::MAX_TASKS,
            running_only: !all,
        }),
    }
}
