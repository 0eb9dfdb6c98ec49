//! `pyinspect watch`: triggers that turn a stream of samples into
//! incidents (a loop blocked, the GIL held, a thread stuck, the process
//! frozen), each with what stalled, for how long, and the stacks that
//! explain it.
//!
//! Everything here is pure: the samples come in from the sampler (the same
//! one `record` and `top` use), one [`ProcessWatch::observe`] per process
//! per tick, and the events it returns are turned into output by
//! [`incident`]. Memory is bounded: a few streaks per thread, each with a
//! bounded aggregation of the stacks seen during it.

pub(crate) mod incident;

use crate::stack::{Frame, ThreadStack};
use foldhash::{HashMap, HashMapExt};
use serde::Serialize;
use std::hash::{Hash, Hasher};
use std::time::Duration;

/// What fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Trigger {
    /// An asyncio loop ran one callback (a task step) longer than the threshold.
    LoopBlocked,
    /// One thread held the GIL longer than the threshold while others waited for it.
    GilHeld,
    /// A thread sat in the same wait, with the same stack, longer than the threshold.
    ThreadStuck,
    /// No Python stack of the process changed for longer than the threshold.
    ProcessFrozen,
}

impl Trigger {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Trigger::LoopBlocked => "event loop blocked",
            Trigger::GilHeld => "GIL held",
            Trigger::ThreadStuck => "thread stuck",
            Trigger::ProcessFrozen => "process frozen",
        }
    }
}

/// How long each stall must last to make an incident.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    pub loop_blocked: Duration,
    pub gil_held: Duration,
    pub thread_stuck: Duration,
    pub process_frozen: Duration,
}

impl Thresholds {
    pub(crate) fn of(&self, t: Trigger) -> Duration {
        match t {
            Trigger::LoopBlocked => self.loop_blocked,
            Trigger::GilHeld => self.gil_held,
            Trigger::ThreadStuck => self.thread_stuck,
            Trigger::ProcessFrozen => self.process_frozen,
        }
    }
}

/// Distinct stacks kept per streak; the samples of any other are counted
/// as "other".
pub(crate) const MAX_DURING_STACKS: usize = 64;
/// Intervals between samples kept to tell the usual one.
const INTERVALS_KEPT: usize = 31;
/// A loop callback is dated back into the gap before it by at least this
/// much (or the usual interval, if longer) when that gap allows.
const MIN_DATE_BACK: Duration = Duration::from_millis(10);
/// Threads followed per process (beyond it, new threads are not watched).
const MAX_THREADS: usize = 4096;

/// The samples of the culprit thread during a stall, aggregated by stack.
#[derive(Debug, Clone, Default)]
pub(crate) struct During {
    /// Each distinct stack (innermost first) and how many samples had it.
    pub(crate) stacks: Vec<(Vec<Frame>, u64)>,
    index: HashMap<u64, usize>,
    pub(crate) other: u64,
}

impl During {
    fn add(&mut self, hash: u64, frames: &[Frame]) {
        if let Some(&i) = self.index.get(&hash) {
            self.stacks[i].1 += 1;
        } else if self.stacks.len() < MAX_DURING_STACKS {
            self.index.insert(hash, self.stacks.len());
            self.stacks.push((frames.to_vec(), 1));
        } else {
            self.other += 1;
        }
    }
}

/// Who and what a stall is about.
#[derive(Debug, Clone)]
pub(crate) struct Culprit {
    /// The frame named as the culprit: the loop callback's coroutine (the
    /// task's outermost frame), the GIL holder's or stuck thread's
    /// innermost Python frame.
    pub(crate) frame: Option<Frame>,
    /// The thread's wait, short form (stuck, frozen).
    pub(crate) wait: Option<String>,
}

/// A stall being followed: from its first sample until a sample shows it over.
#[derive(Debug)]
pub(crate) struct Streak {
    pub(crate) trigger: Trigger,
    /// The thread it is about (for a frozen process, the thread stuck longest).
    pub(crate) tid: u32,
    key: u64,
    /// Loop blocked: the loop's turn (callbacks begun) while it lasts, once
    /// read: a streak goes on only while the loop runs the same callback.
    turn: Option<u64>,
    /// The last sample before the stall was seen, and its first and last.
    pub(crate) before: Option<Duration>,
    pub(crate) first: Duration,
    /// The sample that first saw it (later than `first` for a GIL hold,
    /// which is dated back to when its holder was first seen holding).
    seen: Duration,
    pub(crate) last: Duration,
    /// The first sample that no longer showed it.
    pub(crate) after: Option<Duration>,
    pub(crate) samples: u64,
    /// The culprit thread as the first sample saw it.
    pub(crate) start: ThreadStack,
    pub(crate) culprit: Culprit,
    pub(crate) during: During,
    /// The GIL's waiters at the first sample (GIL held).
    pub(crate) waiters: Vec<u32>,
    /// Samples in which some thread waited for the GIL (GIL held).
    waited: u64,
    /// Set once the threshold was passed: the incident is open.
    pub(crate) opened: bool,
    /// Found at rest when it was to open (see [`ProcessWatch::veto`]): it
    /// does not open, however long it lasts.
    vetoed: bool,
    /// The command's state of an open incident (detail read, rate limit).
    pub(crate) id: u64,
}

impl Streak {
    /// When it began: halfway between the last sample without it and the
    /// first with it (the first sample, when there was none before).
    pub(crate) fn began(&self) -> Duration {
        match self.before {
            Some(b) => b + (self.first.saturating_sub(b)) / 2,
            None => self.first,
        }
    }

    /// When it ended, the same way; the last sample while it goes on.
    pub(crate) fn ended(&self) -> Duration {
        match self.after {
            Some(a) => self.last + (a.saturating_sub(self.last)) / 2,
            None => self.last,
        }
    }

    pub(crate) fn duration(&self) -> Duration {
        self.ended().saturating_sub(self.began())
    }

    /// How long it has lasted so far, by its samples.
    fn so_far(&self) -> Duration {
        self.last.saturating_sub(self.began())
    }
}

/// What one tick did to the streaks of a process.
#[derive(Debug)]
pub(crate) enum Event {
    /// A streak passed its threshold (index into [`ProcessWatch::streaks`]).
    Opened(usize),
    /// An open streak ended (or the watch did, with `after` None).
    Closed(Box<Streak>),
}

/// One thread's stack identity over time.
#[derive(Debug, Clone, Copy)]
struct Track {
    hash: u64,
    /// The first sample with this stack, and the sample before it.
    since: Duration,
    before: Option<Duration>,
    /// While it holds the GIL with this stack: the first sample of that
    /// run of samples, and the sample before it. A thread's stack stays
    /// the same while it waits for the GIL and when it then takes it (a
    /// thread woken in `Condition.wait` holds the GIL, still on the same
    /// line, once the previous holder lets go): a hold counts from when it
    /// was first seen holding, not from when the stack last changed.
    held: Option<(Duration, Option<Duration>)>,
}

/// The state of one watched process.
pub(crate) struct ProcessWatch {
    thresholds: Thresholds,
    last: Option<Duration>,
    /// The latest intervals between samples (a ring), for
    /// [`ProcessWatch::usual_interval`].
    intervals: Vec<Duration>,
    intervals_next: usize,
    tracks: HashMap<u32, Track>,
    pub(crate) streaks: Vec<Streak>,
}

/// The part of a thread a tick's triggers look at.
struct View<'a> {
    t: &'a ThreadStack,
    tid: u32,
    /// Its stack and where each frame is in its code: what tells a thread
    /// that moved from one that did not.
    hash: u64,
    /// Its stack as shown (functions, files, lines): how the samples of a
    /// stall are aggregated.
    shape: u64,
    idle: bool,
    in_loop: Option<LoopState>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoopState {
    /// In its selector, waiting for events: not blocked.
    Selecting,
    /// Between callbacks (the loop's own bookkeeping).
    Between,
    /// Running a callback whose outermost own frame is `frames[i]`.
    Running(usize),
}

fn file_ends(f: &Frame, suffix: &str) -> bool {
    f.file.as_deref().is_some_and(|x| x.ends_with(suffix))
}

/// asyncio's own frames between the loop and a callback's code (with
/// `format_helpers.py`, where debug mode records where each handle and task
/// was made: a callback made only of asyncio's own code, such as the timer
/// that wakes `asyncio.sleep`, is the loop's bookkeeping, and is not named
/// after the helper; many of them in a row, each too short to be seen
/// apart, read as one long `extract_stack`).
fn asyncio_internal(f: &Frame) -> bool {
    [
        "asyncio/events.py",
        "asyncio/tasks.py",
        "asyncio/futures.py",
        "asyncio/base_events.py",
        "asyncio/format_helpers.py",
    ]
    .iter()
    .any(|s| file_ends(f, s))
}

fn is_run_once(f: &Frame) -> bool {
    f.function.ends_with("_run_once") && file_ends(f, "asyncio/base_events.py")
}

/// The frame of asyncio's `BaseEventLoop._run_once` in a thread's stack
/// (innermost first), whose `self` is the loop: the sampler reads the
/// loop's turn from it (`ReadConfig::loop_turns`).
pub(crate) fn run_once_frame(frames: &[Frame]) -> Option<&Frame> {
    frames.iter().find(|f| is_run_once(f))
}

/// Where an event loop's thread is, from its Python frames (innermost
/// first): in asyncio's `_run_once`, either in the selector or in a
/// callback. uvloop's loop has no Python frames of its own: a thread inside
/// `run_until_complete`/`run_forever`/`asyncio.run` without `_run_once` is
/// taken to be in a uvloop callback when any frame of its own is above it.
fn loop_state(frames: &[Frame]) -> Option<LoopState> {
    let run_once = frames.iter().position(is_run_once);
    let (r, uv) = match run_once {
        Some(r) => (r, false),
        None => {
            let r = frames.iter().position(|f| {
                f.function.ends_with("run_until_complete")
                    || f.function.ends_with("run_forever")
                    || (f.function.ends_with("run") && file_ends(f, "asyncio/runners.py"))
            })?;
            (r, true)
        }
    };
    if r == 0 {
        return Some(if uv {
            LoopState::Selecting
        } else {
            LoopState::Between
        });
    }
    let inner = &frames[..r];
    if inner
        .last()
        .is_some_and(|f| f.function.ends_with("select") && file_ends(f, "selectors.py"))
    {
        return Some(LoopState::Selecting);
    }
    match inner.iter().rposition(|f| !asyncio_internal(f)) {
        Some(i) => Some(LoopState::Running(i)),
        None => Some(LoopState::Between),
    }
}

/// Waits that are a thread's normal rest rather than a stall: an event
/// loop's selector, a pool worker or consumer waiting for work, a thread
/// waiting for others to finish, a sleep, a listening socket. These never
/// make a stuck thread, and a process whose threads are all in them is idle,
/// not frozen.
fn idle(t: &ThreadStack) -> bool {
    const SITES: &[(&str, &str)] = &[
        ("selectors.py", "select"),
        ("threading.py", "wait"),
        ("threading.py", "join"),
        ("threading.py", "_wait_for_tstate_lock"),
        ("queue.py", "get"),
        ("socketserver.py", "serve_forever"),
        ("concurrent/futures/thread.py", "_worker"),
    ];
    if t.frames.is_empty() {
        return true;
    }
    let at_site = t.frames.iter().any(|f| {
        SITES
            .iter()
            .any(|(file, func)| file_ends(f, file) && f.function.ends_with(func))
    });
    if at_site {
        return true;
    }
    if let Some(w) = &t.wait {
        if !w.off_cpu() {
            return false;
        }
        const RESTING: &[&str] = &[
            "nanosleep",
            "clock_nanosleep",
            "accept",
            "accept4",
            "epoll_wait",
            "epoll_pwait",
            "epoll_pwait2",
            "pause",
            "rt_sigsuspend",
        ];
        if w.syscall.as_deref().is_some_and(|s| RESTING.contains(&s)) {
            return true;
        }
    }
    false
}

/// Whether a thread read in full detail is at rest: [`idle`], or asleep in
/// a `select`/`poll` that watches no fd (`time.sleep` before 3.11).
pub(crate) fn at_rest(t: &ThreadStack) -> bool {
    let sleeping = t.wait.as_ref().is_some_and(|w| {
        matches!(
            w.syscall.as_deref(),
            Some("select" | "pselect6" | "poll" | "ppoll")
        ) && w.fd.is_none()
            && w.fds.is_empty()
    });
    sleeping || idle(t)
}

fn frame_hash<H: Hasher>(f: &Frame, h: &mut H) {
    f.function.hash(h);
    f.file.hash(h);
    f.line.hash(h);
}

/// A hasher for the identities compared from one tick to the next (stacks,
/// streak keys): fast, and the same within one run, which is all they need.
fn hasher() -> impl Hasher {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x5eed_1dea_7ab1_e5e5).build_hasher()
}

fn stack_hash(frames: &[Frame]) -> u64 {
    let mut h = hasher();
    for f in frames {
        frame_hash(f, &mut h);
    }
    h.finish()
}

/// [`stack_hash`] with each Python frame's instruction: a loop on one line
/// (`while True: n += 1`) moves, a call that does not return (a regex in C,
/// a lock's acquire) does not.
fn motion_hash(shape: u64, frames: &[Frame]) -> u64 {
    let mut h = hasher();
    shape.hash(&mut h);
    for f in frames {
        f.mark.map(|m| m.instr).hash(&mut h);
    }
    h.finish()
}

fn hash_of(v: impl Hash) -> u64 {
    let mut h = hasher();
    v.hash(&mut h);
    h.finish()
}

/// The innermost Python frame.
fn innermost_python(frames: &[Frame]) -> Option<&Frame> {
    frames
        .iter()
        .find(|f| f.kind == crate::stack::FrameKind::Python)
}

/// One tick's observation of a stall: which slot, its identity, and the culprit.
struct Obs {
    trigger: Trigger,
    /// The thread the slot is keyed by (0 for the process-wide triggers).
    slot: u32,
    key: u64,
    /// Loop blocked: the loop's turn, when read (see [`Streak::turn`]).
    turn: Option<u64>,
    /// Where its culprit is, made into a [`Culprit`] only when a streak
    /// starts (most ticks go on with a streak, and need none).
    culprit: CulpritAt,
    tid: u32,
    waiters: Vec<u32>,
}

/// Where a tick's culprit is in its thread's view.
#[derive(Debug, Clone, Copy)]
enum CulpritAt {
    /// A loop callback's outermost own frame (its index).
    Frame(usize),
    /// The innermost Python frame (a GIL holder).
    Innermost,
    /// The innermost Python frame and the wait (a stuck thread).
    Waiting,
    /// The same, an empty wait being none (a frozen process's thread).
    Frozen,
}

impl CulpritAt {
    fn culprit(self, t: &ThreadStack) -> Culprit {
        let inner = || innermost_python(&t.frames).cloned();
        match self {
            CulpritAt::Frame(i) => Culprit {
                frame: t.frames.get(i).cloned(),
                wait: None,
            },
            CulpritAt::Innermost => Culprit {
                frame: inner(),
                wait: None,
            },
            CulpritAt::Waiting => Culprit {
                frame: inner(),
                wait: t.wait.as_ref().map(|w| w.short()),
            },
            CulpritAt::Frozen => Culprit {
                frame: inner(),
                wait: t.wait.as_ref().map(|w| w.short()).filter(|s| !s.is_empty()),
            },
        }
    }
}

impl ProcessWatch {
    pub(crate) fn new(thresholds: Thresholds) -> ProcessWatch {
        ProcessWatch {
            thresholds,
            last: None,
            intervals: Vec::with_capacity(INTERVALS_KEPT),
            intervals_next: 0,
            tracks: HashMap::new(),
            streaks: Vec::new(),
        }
    }

    /// The median of the latest intervals between samples: what the
    /// sampler keeps to when nothing holds it up.
    fn usual_interval(&self) -> Duration {
        let mut v = self.intervals.clone();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or_default()
    }

    fn slot_of(s: &Streak) -> (Trigger, u32) {
        match s.trigger {
            Trigger::LoopBlocked | Trigger::ThreadStuck => (s.trigger, s.tid),
            Trigger::GilHeld | Trigger::ProcessFrozen => (s.trigger, 0),
        }
    }

    /// Take one tick's threads of this process (sampled at `ts`), with the
    /// turns of the asyncio loops they run (OS thread id, callbacks begun:
    /// see [`crate::python::asyncio::LoopTurns`]); returns the incidents
    /// that opened and closed.
    pub(crate) fn observe(
        &mut self,
        ts: Duration,
        threads: &[ThreadStack],
        turns: &[(u32, u64)],
    ) -> Vec<Event> {
        let views: Vec<View> = threads
            .iter()
            .filter_map(|t| {
                let tid = t.os_thread_id?;
                let shape = stack_hash(&t.frames);
                Some(View {
                    t,
                    tid,
                    hash: motion_hash(shape, &t.frames),
                    shape,
                    idle: idle(t),
                    in_loop: loop_state(&t.frames),
                })
            })
            .take(MAX_THREADS)
            .collect();
        // Each thread's stack: since when it has been the same.
        let mut tracks = HashMap::with_capacity(views.len());
        for v in &views {
            let prev = self.tracks.get(&v.tid).filter(|tr| tr.hash == v.hash);
            let (since, before) = match prev {
                Some(tr) => (tr.since, tr.before),
                None => (ts, self.last),
            };
            let held = match (v.t.holds_gil, prev.and_then(|tr| tr.held)) {
                (false, _) => None,
                (true, Some(h)) => Some(h),
                (true, None) => Some((ts, self.last)),
            };
            tracks.insert(
                v.tid,
                Track {
                    hash: v.hash,
                    since,
                    before,
                    held,
                },
            );
        }
        self.tracks = tracks;

        let mut obs: Vec<Obs> = Vec::new();
        // Event loop blocked: a loop thread inside a callback.
        for v in &views {
            if let Some(LoopState::Running(i)) = v.in_loop {
                let f = &v.t.frames[i];
                // The coroutine's frame lives in the coroutine (3.11+), so
                // its address tells two tasks of one coroutine apart. The
                // loop's turn tells one callback from the next: two steps
                // of one task, or two callbacks of one function, with no
                // sample in the selector between them, are two spans, not
                // one long one (asyncio's loop; uvloop's has no turn read,
                // and its steps of one task still read as one).
                let addr = f.mark.map(|m| m.addr).unwrap_or(0);
                // A turn read halfway through the deque's update (odd: its
                // length moved and its count not yet, or the other way) is
                // no turn.
                let turn = turns
                    .iter()
                    .find(|(t, n)| *t == v.tid && n % 2 == 0)
                    .map(|(_, n)| *n);
                obs.push(Obs {
                    trigger: Trigger::LoopBlocked,
                    slot: v.tid,
                    key: hash_of((&f.function, &f.file, addr)),
                    turn,
                    culprit: CulpritAt::Frame(i),
                    tid: v.tid,
                    waiters: Vec::new(),
                });
            }
        }
        let loop_busy: Vec<u32> = obs.iter().map(|o| o.tid).collect();
        // GIL held: one holder, unchanged stack, while others wait for it.
        let waiters: Vec<u32> = views
            .iter()
            .filter(|v| v.t.wait.as_ref().is_some_and(|w| w.gil.is_some()))
            .map(|v| v.tid)
            .collect();
        let holder = views.iter().find(|v| v.t.holds_gil);
        // A waiter is not seen in every sample (on 3.2+ it wakes every
        // switch interval to ask for the GIL again): a hold that began with
        // waiters goes on while the holder holds it in the same place.
        let holding = |h: &View| {
            let key = hash_of((h.tid, h.hash));
            self.streaks
                .iter()
                .any(|s| s.trigger == Trigger::GilHeld && s.key == key)
        };
        if let Some(h) = holder.filter(|h| !waiters.is_empty() || holding(h)) {
            obs.push(Obs {
                trigger: Trigger::GilHeld,
                slot: 0,
                key: hash_of((h.tid, h.hash)),
                turn: None,
                culprit: CulpritAt::Innermost,
                tid: h.tid,
                waiters: waiters.clone(),
            });
        }
        // Thread stuck: the same wait and stack, in a wait that is not rest.
        for v in &views {
            let Some(w) = v.t.wait.as_ref().filter(|w| w.off_cpu() && w.gil.is_none()) else {
                continue;
            };
            if v.idle || loop_busy.contains(&v.tid) {
                continue;
            }
            // The call and its fd: the fd's description may be learnt a
            // few samples into the wait.
            let call = (&w.syscall, w.fd.as_ref().map(|f| f.fd), &w.futex);
            obs.push(Obs {
                trigger: Trigger::ThreadStuck,
                slot: v.tid,
                key: hash_of((v.hash, call)),
                turn: None,
                culprit: CulpritAt::Waiting,
                tid: v.tid,
                waiters: Vec::new(),
            });
        }
        // Process frozen: no stack changed, and some thread neither at rest
        // nor merely waiting for a CPU: one in a wait that is not rest (a
        // lock, a socket), or one holding the GIL (a stuck C call). A thread
        // that is runnable without the GIL, with its stack unchanged, is
        // one a busy machine keeps off a CPU: not a freeze of the process.
        let stalled =
            |v: &View| !v.idle && (v.t.holds_gil || v.t.wait.as_ref().is_some_and(|w| w.off_cpu()));
        if views.iter().any(stalled) {
            let key = hash_of(views.iter().map(|v| (v.tid, v.hash)).collect::<Vec<_>>());
            // The culprit: the thread not at rest whose stack has stood
            // still longest.
            // A select or poll may be a sleep (before 3.11): a thread in
            // any other wait comes first.
            let maybe_asleep = |v: &View| {
                v.t.wait.as_ref().is_some_and(|w| {
                    matches!(
                        w.syscall.as_deref(),
                        Some("select" | "pselect6" | "poll" | "ppoll")
                    )
                })
            };
            let c = views.iter().filter(|v| stalled(v)).min_by_key(|v| {
                (
                    maybe_asleep(v),
                    self.tracks.get(&v.tid).map(|t| t.since),
                    v.tid,
                )
            });
            if let Some(c) = c {
                obs.push(Obs {
                    trigger: Trigger::ProcessFrozen,
                    slot: 0,
                    key,
                    turn: None,
                    culprit: CulpritAt::Frozen,
                    tid: c.tid,
                    waiters: Vec::new(),
                });
            }
        }

        let mut events = Vec::new();
        // Streaks that go on, and those that end.
        let mut kept = Vec::with_capacity(self.streaks.len());
        let mut taken = vec![false; obs.len()];
        for mut s in std::mem::take(&mut self.streaks) {
            let slot = Self::slot_of(&s);
            // Samples further apart than half the threshold cannot tell a
            // still process from one that moved and came back (the sampler
            // was held up, and a thread's loop shows the same stack at each
            // sample): a frozen streak not yet open starts again after one.
            // Only the frozen trigger needs it: the others' identities (a
            // coroutine's frame, a holder in one place, one call on one fd)
            // rarely repeat across a gap by chance.
            let gap_ok = s.opened
                || s.trigger != Trigger::ProcessFrozen
                || ts.saturating_sub(s.last) <= self.thresholds.of(s.trigger) / 2;
            let hit = obs.iter().enumerate().find(|(i, o)| {
                gap_ok
                    && !taken[*i]
                    && (o.trigger, o.slot) == slot
                    && o.key == s.key
                    && (s.turn.is_none() || o.turn.is_none() || o.turn == s.turn)
            });
            match hit {
                Some((i, o)) => {
                    taken[i] = true;
                    s.turn = s.turn.or(o.turn);
                    s.waited += u64::from(!o.waiters.is_empty());
                    s.last = ts;
                    s.samples += 1;
                    if let Some(v) = views.iter().find(|v| v.tid == s.tid) {
                        s.during.add(v.shape, &v.t.frames);
                    }
                    kept.push(s);
                }
                None => {
                    s.after = Some(ts);
                    if s.opened {
                        events.push(Event::Closed(Box::new(s)));
                    }
                }
            }
        }
        for (o, _) in obs.into_iter().zip(taken).filter(|(_, t)| !t) {
            let Some(v) = views.iter().find(|v| v.tid == o.tid) else {
                continue;
            };
            let mut during = During::default();
            during.add(v.shape, &v.t.frames);
            // The GIL is held from when its holder was first seen holding
            // it where it holds it (the waiters may take a while to be seen
            // waiting).
            let (before, first) = match (o.trigger, self.tracks.get(&o.tid).and_then(|t| t.held)) {
                (Trigger::GilHeld, Some((since, before))) => (before, since),
                _ => (self.last, ts),
            };
            kept.push(Streak {
                trigger: o.trigger,
                tid: o.tid,
                key: o.key,
                turn: o.turn,
                before,
                first,
                seen: ts,
                last: ts,
                after: None,
                samples: 1,
                start: v.t.clone(),
                culprit: o.culprit.culprit(v.t),
                during,
                waited: u64::from(!o.waiters.is_empty()),
                waiters: o.waiters,
                opened: false,
                vetoed: false,
                id: 0,
            });
        }
        self.streaks = kept;
        if let Some(l) = self.last {
            let gap = ts.saturating_sub(l);
            if self.intervals.len() < INTERVALS_KEPT {
                self.intervals.push(gap);
            } else {
                let i = self.intervals_next % INTERVALS_KEPT;
                self.intervals[i] = gap;
            }
            self.intervals_next = self.intervals_next.wrapping_add(1);
        }
        self.last = Some(ts);

        // Which pass their threshold now, in precedence: a loop blocked
        // explains its thread's GIL and its process's stillness; a GIL held
        // explains the stillness of the threads waiting for it; a thread is
        // stuck only while other threads of its process go on (else the
        // process is frozen).
        let loop_on: Vec<u32> = self
            .streaks
            .iter()
            .filter(|s| s.trigger == Trigger::LoopBlocked)
            .map(|s| s.tid)
            .collect();
        let gil_on = self.streaks.iter().any(|s| s.trigger == Trigger::GilHeld);
        if gil_on || !loop_on.is_empty() {
            // What the GIL or a loop holds up is not a frozen process: a
            // stillness counts from when they let go.
            self.streaks
                .retain(|s| s.trigger != Trigger::ProcessFrozen || s.opened);
        }
        let frozen_open = self
            .streaks
            .iter()
            .any(|s| s.trigger == Trigger::ProcessFrozen && s.opened);
        if frozen_open {
            // The threads stuck in a frozen process are the freeze's: not
            // reported again as it thaws (however long they go on).
            for s in &mut self.streaks {
                if s.trigger == Trigger::ThreadStuck && !s.opened {
                    s.vetoed = true;
                }
            }
        }
        for i in 0..self.streaks.len() {
            let s = &self.streaks[i];
            // A GIL hold opens once it has been seen, with waiters, for the
            // threshold: a pure-Python holder that other threads wake to
            // wait for now and then (they get the GIL within a switch
            // interval) would otherwise be dated back past it at its first
            // waiter and open at once, on one sample.
            let seen_for = match s.trigger {
                Trigger::GilHeld => s.last.saturating_sub(s.seen),
                // A callback is dated back into the gap before its first
                // sample by one usual sampling interval at most: after a
                // long gap (the sampler held up on a loaded machine) half
                // that gap would make a short callback read as a long one.
                // (Its duration, once open, still counts the half gaps,
                // with their uncertainty.)
                Trigger::LoopBlocked => {
                    let back = s
                        .before
                        .map_or(Duration::ZERO, |b| s.first.saturating_sub(b) / 2)
                        .min(self.usual_interval().max(MIN_DATE_BACK));
                    s.last.saturating_sub(s.first.saturating_sub(back))
                }
                _ => s.so_far(),
            };
            if s.opened || s.vetoed || seen_for < self.thresholds.of(s.trigger) {
                continue;
            }
            let allowed = match s.trigger {
                Trigger::LoopBlocked => true,
                // Waiters seen in a quarter of the samples at least: a
                // hold that others contend for.
                Trigger::GilHeld => !loop_on.contains(&s.tid) && s.waited * 4 >= s.samples,
                Trigger::ThreadStuck => {
                    // Another thread moved since this one stopped, and
                    // lately (within half the frozen threshold): else the
                    // whole process may be still, which is the frozen
                    // trigger's to report.
                    let lately = ts.saturating_sub(self.thresholds.process_frozen / 2);
                    !frozen_open
                        && self
                            .tracks
                            .iter()
                            .any(|(tid, t)| *tid != s.tid && t.since > s.first && t.since >= lately)
                }
                Trigger::ProcessFrozen => loop_on.is_empty() && !gil_on,
            };
            if allowed {
                self.streaks[i].opened = true;
                events.push(Event::Opened(i));
            }
        }
        events
    }

    /// The streak `i` that just opened is not a stall after all (the
    /// thread read in full detail is at rest: a sleep that older versions
    /// make with `select`): it is closed without an incident, and does not
    /// open again while it lasts.
    pub(crate) fn veto(&mut self, i: usize) {
        if let Some(s) = self.streaks.get_mut(i) {
            s.opened = false;
            s.vetoed = true;
        }
    }

    /// The process is gone, or the watch is over: every open incident
    /// closes as it stands (still going on).
    pub(crate) fn finish(&mut self) -> Vec<Streak> {
        std::mem::take(&mut self.streaks)
            .into_iter()
            .filter(|s| s.opened)
            .collect()
    }
}

/// `function (file:line)` of a frame.
pub(crate) fn frame_label(f: &Frame) -> String {
    match (&f.file, f.line) {
        (Some(file), Some(line)) => format!("{} ({}:{})", f.function, file, line),
        (Some(file), None) => format!("{} ({})", f.function, file),
        _ => f.function.to_string(),
    }
}

/// Shared names of a frame, for building stacks in tests.
#[cfg(test)]
fn py(function: &str, file: &str, line: u32) -> Frame {
    Frame::python(function, file, line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_states() {
        let run_once = py("BaseEventLoop._run_once", "/x/asyncio/base_events.py", 1);
        let select = py("EpollSelector.select", "/x/selectors.py", 2);
        let handle_run = || py("Handle._run", "/x/asyncio/events.py", 3);
        let handle = handle_run();
        let coro = py("handler", "app.py", 42);
        assert_eq!(
            loop_state(&[select, run_once.clone()]),
            Some(LoopState::Selecting)
        );
        assert_eq!(
            loop_state(&[coro, handle.clone(), run_once.clone()]),
            Some(LoopState::Running(0))
        );
        assert_eq!(
            loop_state(&[handle, run_once.clone()]),
            Some(LoopState::Between)
        );
        assert_eq!(loop_state(&[py("f", "a.py", 1)]), None);
        // A timer waking asyncio.sleep in debug mode: asyncio's own code
        // down to where debug mode records the new handle's origin.
        let helper = py("extract_stack", "/x/asyncio/format_helpers.py", 75);
        let init = py("Handle.__init__", "/x/asyncio/events.py", 40);
        let wake = py("_set_result_unless_cancelled", "/x/asyncio/futures.py", 9);
        assert_eq!(
            loop_state(&[helper, init, wake, handle_run(), run_once.clone()]),
            Some(LoopState::Between)
        );
    }

    fn thread(tid: u32, frames: Vec<Frame>) -> ThreadStack {
        ThreadStack {
            thread_id: tid as u64,
            os_thread_id: Some(tid),
            name: None,
            name_source: None,
            interpreter: 0,
            status: crate::stack::ThreadStatus::Active,
            holds_gil: true,
            frames,
            truncated: None,
            native_entry: None,
            wait: None,
            asyncio: None,
        }
    }

    #[test]
    fn a_blocked_loop_opens_once_and_closes_with_its_duration() {
        let th = Thresholds {
            loop_blocked: Duration::from_millis(100),
            gil_held: Duration::from_secs(10),
            thread_stuck: Duration::from_secs(10),
            process_frozen: Duration::from_secs(10),
        };
        let mut w = ProcessWatch::new(th);
        let run_once = py("BaseEventLoop._run_once", "/x/asyncio/base_events.py", 1);
        let select = py("EpollSelector.select", "/x/selectors.py", 2);
        let idle = thread(7, vec![select, run_once.clone()]);
        let busy = thread(7, vec![py("handler", "app.py", 42), run_once]);
        let ms = Duration::from_millis;
        let mut opened = 0;
        let mut closed = Vec::new();
        for i in 0..60u64 {
            let t = if (10..40).contains(&i) { &busy } else { &idle };
            for e in w.observe(ms(i * 10), std::slice::from_ref(t), &[]) {
                match e {
                    Event::Opened(_) => opened += 1,
                    Event::Closed(s) => closed.push(*s),
                }
            }
        }
        assert_eq!(opened, 1);
        assert_eq!(closed.len(), 1);
        // From 95 ms to 395 ms.
        assert_eq!(closed[0].duration(), ms(300));
        assert_eq!(closed[0].trigger, Trigger::LoopBlocked);
        assert_eq!(
            closed[0].culprit.frame.as_ref().map(|f| &*f.function),
            Some("handler")
        );
    }
    /// Steps of one task, each 50 ms and one after another with no sample
    /// in the selector between them: the same coroutine frame at every
    /// sample, but the loop's turn moves at each step. No incident; and
    /// without the turns (uvloop's loop), one long span, as before.
    #[test]
    fn consecutive_steps_of_one_task_are_not_one_long_block() {
        let th = Thresholds {
            loop_blocked: Duration::from_millis(100),
            gil_held: Duration::from_secs(10),
            thread_stuck: Duration::from_secs(10),
            process_frozen: Duration::from_secs(10),
        };
        let run_once = py("BaseEventLoop._run_once", "/x/asyncio/base_events.py", 1);
        let select = py("EpollSelector.select", "/x/selectors.py", 2);
        let idle = thread(7, vec![select, run_once.clone()]);
        let busy = thread(7, vec![py("run_asgi", "h11_impl.py", 403), run_once]);
        let ms = Duration::from_millis;
        for with_turns in [true, false] {
            let mut w = ProcessWatch::new(th);
            let mut opened = 0;
            for i in 0..60u64 {
                let t = if (10..40).contains(&i) { &busy } else { &idle };
                // A new step every 5 samples.
                let turns = [(7, 2 * (i / 5))];
                let turns: &[(u32, u64)] = if with_turns { &turns } else { &[] };
                for e in w.observe(ms(i * 10), std::slice::from_ref(t), turns) {
                    if let Event::Opened(_) = e {
                        opened += 1;
                    }
                }
            }
            assert_eq!(opened, usize::from(!with_turns), "with turns: {with_turns}");
        }
    }

    /// A thread in a one-line loop (`while True: n += 1`) shows the same
    /// stack at every sample, but not the same instruction: with the main
    /// thread blocked on a lock for good, the process is not frozen.
    #[test]
    fn a_one_line_loop_is_not_a_frozen_process() {
        let th = Thresholds {
            loop_blocked: Duration::from_secs(10),
            gil_held: Duration::from_secs(10),
            thread_stuck: Duration::from_secs(10),
            process_frozen: Duration::from_millis(100),
        };
        let mut w = ProcessWatch::new(th);
        let mut main = thread(1, vec![py("main", "threads.py", 49)]);
        main.holds_gil = false;
        main.wait = Some(crate::wait::Wait {
            state: "S".into(),
            syscall: Some("futex".into()),
            futex: Some("0x1000".into()),
            ..Default::default()
        });
        let ms = Duration::from_millis;
        for i in 0..100u64 {
            let mut f = py("busy", "threads.py", 16);
            f.mark = Some(crate::stack::FrameMark {
                addr: 0x2000,
                is_entry: true,
                instr: 0x3000 + 2 * (i % 7),
            });
            let busy = thread(2, vec![f]);
            let events = w.observe(ms(i * 10), &[main.clone(), busy], &[]);
            assert!(events.is_empty(), "at {} ms: {events:?}", i * 10);
        }
    }

    /// A pure-Python thread that holds the GIL in one place, with another
    /// thread waking to wait for it once a second (it gets the GIL within a
    /// switch interval): no incident.
    #[test]
    fn a_busy_thread_that_lets_waiters_in_is_not_a_gil_hold() {
        let th = Thresholds {
            loop_blocked: Duration::from_secs(10),
            gil_held: Duration::from_millis(100),
            thread_stuck: Duration::from_secs(10),
            process_frozen: Duration::from_secs(10),
        };
        let mut w = ProcessWatch::new(th);
        let busy = thread(1, vec![py("busy", "threads.py", 16)]);
        let mut sleeper = thread(2, vec![py("sleeper", "threads.py", 21)]);
        sleeper.holds_gil = false;
        let mut waiter = sleeper.clone();
        waiter.wait = Some(crate::wait::Wait {
            state: "S".into(),
            syscall: Some("futex".into()),
            gil: Some(crate::wait::GilWait {
                holder: Some(1),
                holder_name: None,
            }),
            ..Default::default()
        });
        let ms = Duration::from_millis;
        for i in 0..500u64 {
            let other = if i % 100 == 50 { &waiter } else { &sleeper };
            let events = w.observe(ms(i * 10), &[busy.clone(), other.clone()], &[]);
            assert!(events.is_empty(), "at {} ms: {events:?}", i * 10);
        }
    }

    /// A thread woken while another holds the GIL waits for the GIL on the
    /// line it woke on, then takes it on that same line: its hold counts
    /// from then, not from when it came to that line (CI on 3.13.0: the
    /// main thread woken in `Condition.wait` during the regex's hold).
    #[test]
    fn a_waiter_that_takes_the_gil_on_the_line_it_waited_on_is_not_a_long_hold() {
        let th = Thresholds {
            loop_blocked: Duration::from_secs(10),
            gil_held: Duration::from_millis(100),
            thread_stuck: Duration::from_secs(10),
            process_frozen: Duration::from_secs(10),
        };
        let mut w = ProcessWatch::new(th);
        let waiting = |mut t: ThreadStack| {
            t.holds_gil = false;
            t.wait = Some(crate::wait::Wait {
                state: "S".into(),
                syscall: Some("futex".into()),
                gil: Some(crate::wait::GilWait {
                    holder: None,
                    holder_name: None,
                }),
                ..Default::default()
            });
            t
        };
        let resting = |mut t: ThreadStack| {
            t.holds_gil = false;
            t
        };
        let main = vec![py("Condition.wait", "/x/threading.py", 359)];
        let regex = vec![py("regex_worker", "stalls.py", 87)];
        let beat = vec![py("heartbeat", "stalls.py", 60)];
        let ms = Duration::from_millis;
        let mut opened = Vec::new();
        let mut closed = Vec::new();
        for i in 0..120u64 {
            let threads = if i < 10 {
                // Before: the main thread waits in Condition.wait (GIL released).
                vec![
                    resting(thread(1, main.clone())),
                    resting(thread(3, beat.clone())),
                ]
            } else if i < 90 {
                // The regex holds the GIL; the main thread, woken, waits for it.
                vec![
                    waiting(thread(1, main.clone())),
                    thread(2, regex.clone()),
                    waiting(thread(3, beat.clone())),
                ]
            } else if i < 92 {
                // The main thread takes it, still on its line; others wait.
                vec![thread(1, main.clone()), waiting(thread(3, beat.clone()))]
            } else {
                vec![
                    thread(1, vec![py("run", "stalls.py", 110)]),
                    resting(thread(3, beat.clone())),
                ]
            };
            for e in w.observe(ms(i * 10), &threads, &[]) {
                match e {
                    Event::Opened(i) => opened.push(w.streaks[i].tid),
                    Event::Closed(s) => closed.push(*s),
                }
            }
        }
        assert_eq!(opened, vec![2]);
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].tid, 2);
        assert_eq!(closed[0].duration(), ms(800));
    }
}
