//! Whether the asked rate was held, and if not, why; and a rate for people.

use std::time::Duration;

/// Share of the asked rate below which the rate counts as not held.
pub(super) const HELD_SHARE: f64 = 0.95;

/// Whether the asked rate was held, and if not, why.
#[derive(Debug, Clone)]
pub(crate) struct RateHealth {
    pub(crate) asked: f64,
    /// Ticks taken per second of recording.
    pub(crate) delivered: f64,
    /// `None` while the rate is held (at least 95% of it delivered).
    pub(crate) reason: Option<String>,
}

impl RateHealth {
    pub(crate) fn share(&self) -> f64 {
        self.delivered / self.asked
    }
}

/// Sampler-side bookkeeping behind [`RateHealth`].
pub(super) struct RateStats {
    pub(super) taken: u64,
    /// Time spent inside reads (from the tick being due to the sample taken).
    pub(super) reading: Duration,
    pub(super) threads: u64,
    pub(super) frames: u64,
    pub(super) cpu_at_start: Duration,
    pub(super) wait_at_start: Option<Duration>,
}

/// CPU time (user + system) this process has used so far.
pub(super) fn own_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we pass.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

pub(super) fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10_000.0 {
        format!("{:.0} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

/// A rate for people: `850 Hz`, `9.6 kHz`.
pub(crate) fn format_rate(hz: f64) -> String {
    if hz >= 1000.0 {
        format!("{:.1} kHz", hz / 1000.0)
    } else {
        format!("{hz:.0} Hz")
    }
}
