//! What a sample reads beside the frames while the threads stand still:
//! asyncio tasks, greenlets and each asyncio loop's turn; and where 3.14's
//! `_asyncio` keeps its `AsyncioDebug` section in the target.

use super::Target;
use crate::python::asyncio::{self, AsyncRead, AsyncioReader, TasksByThread};
use crate::python::greenlet::GreenletRead;
use std::time::Duration;

/// `--async-mode all`: most greenlets of a thread whose stacks a sample adds.
const SAMPLED_GREENLETS: usize = 10_000;
/// `--async-mode all`: how long the greenlets found by a walk of the
/// collector's lists are used before the next walk (new greenlets show up
/// after at most this long; each sample reads those found).
const GREENLETS_FOUND_FOR: Duration = Duration::from_secs(1);
use crate::python::pagecache::PageCache;
use crate::python::reader::ThreadSnapshot;
use crate::sampler::config::{AsyncMode, TargetConfig};

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
        let mut tasks = match async_read(cfg.read.asyncio) {
            Some(want) => {
                let r = tasks_reader(&mut self.tasks, &self.reader, self.waits.age());
                let cache = PageCache::new(&*self.source);
                let source = &*self.source;
                r.read(&mut self.reader, &cache, s, want, &|| {
                    asyncio::debug_sections(source)
                })
            }
            None => TasksByThread::default(),
        };
        // Trio's tasks, through the runner trio.run's frame holds: for dump,
        // and for every sample with `--async-mode all`.
        let trio_limit = match cfg.read.asyncio {
            AsyncMode::Tree { limit, .. } => Some(limit),
            AsyncMode::Stitch { all: true } => Some(asyncio::MAX_TASKS),
            _ => None,
        };
        if let Some(limit) = trio_limit {
            let r = tasks_reader(&mut self.tasks, &self.reader, self.waits.age());
            let cache = PageCache::new(&*self.source);
            let waits = matches!(cfg.read.asyncio, AsyncMode::Tree { .. });
            r.read_trio(&mut self.reader, &cache, s, limit, waits, &mut tasks);
        }
        // Greenlets, beside the tasks, while the threads stand still: for
        // dump, and for every sample with `--async-mode all`.
        let how = match cfg.read.asyncio {
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
        };
        if let Some(how) = how {
            let cache = PageCache::new(&*self.source);
            self.greenlets
                .read(&mut self.reader, &cache, s, how, &mut tasks);
            if how.waits {
                self.describe_greenlet_waits(&mut tasks);
            }
        }
        tasks
    }

    /// The greenlets' waits completed from the kernel's side: a socket's
    /// fd described (its peer), a timer's seconds left (a live process:
    /// its deadline is on this host's monotonic clock).
    fn describe_greenlet_waits(&mut self, tasks: &mut TasksByThread) {
        let now = self
            .waits
            .live()
            .then(|| crate::wait::clock_now(libc::CLOCK_MONOTONIC))
            .flatten();
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
                let Some((m, kind)) = crate::watch::loop_frame(&t.stack.frames)
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

/// The target's task reader (asyncio's, Trio's), made on first use; `age`:
/// how long ago the target's moment was (a core's).
fn tasks_reader<'a>(
    tasks: &'a mut Option<AsyncioReader>,
    reader: &crate::python::reader::Reader,
    age: f64,
) -> &'a mut AsyncioReader {
    let v = &reader.process.version;
    let (major, minor) = (v.major, v.minor);
    tasks.get_or_insert_with(|| AsyncioReader::new(major, minor).with_age(age))
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
