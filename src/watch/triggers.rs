//! The four triggers' view of one tick: each thread as the triggers see
//! it, and what each trigger observed of a stall (its slot, identity and
//! where its culprit is), before the streaks are matched.

use super::stacks::{innermost_python, LoopState};
use super::streak::{Culprit, Trigger};
use crate::stack::ThreadStack;

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
