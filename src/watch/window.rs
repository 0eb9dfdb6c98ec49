//! What a process's watch remembers between ticks besides its streaks:
//! each thread's stack identity and since when it has held, and the latest
//! intervals between samples (a ring) that tell the usual one. A leaf that
//! imports none of its siblings.

use std::time::Duration;

/// Intervals between samples kept to tell the usual one.
const INTERVALS_KEPT: usize = 31;

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

/// The latest intervals between samples (a ring of [`INTERVALS_KEPT`]).
#[derive(Debug, Default)]
pub(super) struct Intervals {
    kept: Vec<Duration>,
    next: usize,
}

impl Intervals {
    pub(super) fn push(&mut self, gap: Duration) {
        if self.kept.len() < INTERVALS_KEPT {
            self.kept.push(gap);
        } else {
            let i = self.next % INTERVALS_KEPT;
            self.kept[i] = gap;
        }
        self.next = self.next.wrapping_add(1);
    }

    /// The median of the latest intervals between samples: what the
    /// sampler keeps to when nothing holds it up.
    pub(super) fn usual(&self) -> Duration {
        let mut v = self.kept.clone();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_interval_is_the_median_of_the_latest() {
        let ms = Duration::from_millis;
        let mut r = Intervals::default();
        assert_eq!(r.usual(), Duration::ZERO);
        for _ in 0..INTERVALS_KEPT {
            r.push(ms(100));
        }
        // The ring forgets the oldest: a run of short intervals takes over.
        for _ in 0..=INTERVALS_KEPT / 2 {
            r.push(ms(5));
        }
        assert_eq!(r.kept.len(), INTERVALS_KEPT);
        assert_eq!(r.usual(), ms(5));
    }
}
