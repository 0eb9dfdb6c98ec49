//! What a stall is: the triggers that fire, the thresholds they must pass,
//! and the streak that follows one stall from its first sample to its last
//! (with its culprit and the stacks seen during it). A leaf: it imports
//! none of its siblings.

use crate::stack::{Frame, ThreadStack};
use foldhash::HashMap;
use serde::Serialize;
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

/// The samples of the culprit thread during a stall, aggregated by stack.
#[derive(Debug, Clone, Default)]
pub(crate) struct During {
    /// Each distinct stack (innermost first) and how many samples had it.
    pub(crate) stacks: Vec<(Vec<Frame>, u64)>,
    index: HashMap<u64, usize>,
    pub(crate) other: u64,
}

impl During {
    pub(super) fn add(&mut self, hash: u64, frames: &[Frame]) {
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
    pub(super) key: u64,
    /// Loop blocked: the loop's turn (callbacks begun) while it lasts, once
    /// read: a streak goes on only while the loop runs the same callback.
    pub(super) turn: Option<u64>,
    /// The last sample before the stall was seen, and its first and last.
    pub(crate) before: Option<Duration>,
    pub(crate) first: Duration,
    /// The sample that first saw it (later than `first` for a GIL hold,
    /// which is dated back to when its holder was first seen holding).
    pub(super) seen: Duration,
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
    pub(super) waited: u64,
    /// Set once the threshold was passed: the incident is open.
    pub(crate) opened: bool,
    /// Found at rest when it was to open (see [`ProcessWatch::veto`]): it
    /// does not open, however long it lasts.
    pub(super) vetoed: bool,
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
    pub(super) fn so_far(&self) -> Duration {
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
