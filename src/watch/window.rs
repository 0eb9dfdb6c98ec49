//! What a process's watch remembers between ticks besides its streaks:
//! each thread's stack identity and since when it has held, and the latest
//! intervals between samples (a ring) that tell the usual one. A leaf that
//! imports none of its siblings.

use std::time::Duration;

/// Intervals between samples kept to tell the usual one.
pub(super) const INTERVALS_KEPT: usize = 31;

/// One thread's stack identity over time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Track {
    pub(super) hash: u64,
    /// The first sample with this stack, and the sample before it.
    pub(super) since: Duration,
    pub(super) before: Option<Duration>,
    /// While it holds the GIL with this stack: the first sample of that
    /// run of samples, and the sample before it. A thread's stack stays
    /// the same while it waits for the GIL and when it then takes it (a
    /// thread woken in `Condition.wait` holds the GIL, still on the same
    /// line, once the previous holder lets go): a hold counts from when it
    /// was first seen holding, not from when the stack last changed.
    pub(super) held: Option<(Duration, Option<Duration>)>,
}
