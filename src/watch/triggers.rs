//! The four triggers (loop blocked, GIL held, thread stuck, process
//! frozen) applied to one tick: each thread as the triggers see it, and
//! each trigger's check, which says what it observed of a stall (its slot,
//! identity and where its culprit is) before the streaks are matched.

use super::stacks::{
    hash_of, idle, innermost_python, loop_state, motion_hash, stack_hash, LoopState,
};
use super::streak::{Culprit, Streak, Trigger};
use super::window::Track;
use crate::stack::ThreadStack;
use foldhash::HashMap;

/// The part of a thread a tick's triggers look at.
pub(super) struct View<'a> {
    pub(super) t: &'a ThreadStack,
    pub(super) tid: u32,
    /// Its stack and where each frame is in its code: what tells a thread
    /// that moved from one that did not.
    pub(super) hash: u64,
    /// Its stack as shown (functions, files, lines): how the samples of a
    /// stall are aggregated.
    pub(super) shape: u64,
    pub(super) idle: bool,
    pub(super) in_loop: Option<LoopState>,
}

/// One tick's observation of a stall: which slot, its identity, and the culprit.
pub(super) struct Obs {
    pub(super) trigger: Trigger,
    /// The thread the slot is keyed by (0 for the process-wide triggers).
    pub(super) slot: u32,
    pub(super) key: u64,
    /// Loop blocked: the loop's turn, when read (see [`Streak::turn`]).
    pub(super) turn: Option<u64>,
    /// Where its culprit is, made into a [`Culprit`] only when a streak
    /// starts (most ticks go on with a streak, and need none).
    pub(super) culprit: CulpritAt,
    pub(super) tid: u32,
    pub(super) waiters: Vec<u32>,
}

/// Where a tick's culprit is in its thread's view.
#[derive(Debug, Clone, Copy)]
pub(super) enum CulpritAt {
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
    pub(super) fn culprit(self, t: &ThreadStack) -> Culprit {
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

/// Threads followed per process (beyond it, new threads are not watched).
const MAX_THREADS: usize = 4096;

/// Each thread of a tick (those with an OS thread id, up to
/// [`MAX_THREADS`]) as the triggers see it.
pub(super) fn views(threads: &[ThreadStack]) -> Vec<View<'_>> {
    threads
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
        .collect()
}

/// Event loop blocked: a loop thread inside a callback.
pub(super) fn loop_blocked(views: &[View], turns: &[(u32, u64)]) -> Vec<Obs> {
    let mut obs = Vec::new();
    for v in views {
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
    obs
}

/// GIL held: one holder, unchanged stack, while others wait for it.
pub(super) fn gil_held(views: &[View], streaks: &[Streak]) -> Option<Obs> {
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
        streaks
            .iter()
            .any(|s| s.trigger == Trigger::GilHeld && s.key == key)
    };
    let h = holder.filter(|h| !waiters.is_empty() || holding(h))?;
    Some(Obs {
        trigger: Trigger::GilHeld,
        slot: 0,
        key: hash_of((h.tid, h.hash)),
        turn: None,
        culprit: CulpritAt::Innermost,
        tid: h.tid,
        waiters,
    })
}

/// Thread stuck: the same wait and stack, in a wait that is not rest (a
/// thread running a loop's callback, `loop_busy`, is the loop's).
pub(super) fn thread_stuck(views: &[View], loop_busy: &[u32]) -> Vec<Obs> {
    let mut obs = Vec::new();
    for v in views {
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
    obs
}

/// Process frozen: no stack changed, and some thread neither at rest nor
/// merely waiting for a CPU: one in a wait that is not rest (a lock, a
/// socket), or one holding the GIL (a stuck C call). A thread that is
/// runnable without the GIL, with its stack unchanged, is one a busy
/// machine keeps off a CPU: not a freeze of the process. `tracks` are this
/// tick's.
pub(super) fn process_frozen(views: &[View], tracks: &HashMap<u32, Track>) -> Option<Obs> {
    let stalled =
        |v: &View| !v.idle && (v.t.holds_gil || v.t.wait.as_ref().is_some_and(|w| w.off_cpu()));
    if !views.iter().any(stalled) {
        return None;
    }
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
    let c = views
        .iter()
        .filter(|v| stalled(v))
        .min_by_key(|v| (maybe_asleep(v), tracks.get(&v.tid).map(|t| t.since), v.tid))?;
    Some(Obs {
        trigger: Trigger::ProcessFrozen,
        slot: 0,
        key,
        turn: None,
        culprit: CulpritAt::Frozen,
        tid: c.tid,
        waiters: Vec::new(),
    })
}
