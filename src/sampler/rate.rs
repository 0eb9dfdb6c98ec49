//! Whether the asked rate was held, and if not, why; and a rate for people.

use crate::procfs;
use std::time::Duration;

/// Share of the asked rate below which the rate counts as not held.
const HELD_SHARE: f64 = 0.95;

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

impl RateStats {
    /// Nothing counted yet (see [`RateStats::start`]).
    pub(super) fn new() -> RateStats {
        RateStats {
            taken: 0,
            reading: Duration::ZERO,
            threads: 0,
            frames: 0,
            cpu_at_start: Duration::ZERO,
            wait_at_start: None,
        }
    }

    /// The schedule starts: our CPU time and CPU wait are counted from now.
    pub(super) fn start(&mut self) {
        self.cpu_at_start = own_cpu_time();
        self.wait_at_start = procfs::own_run_delay();
    }

    /// Whether `asked` samples a second (one every `mean` on average) were
    /// held over the `elapsed` time and, if not, the likely cause: the
    /// machine (time spent waiting for a CPU), the target (reads as long as
    /// the interval), or our own CPU.
    pub(super) fn health(&self, asked: f64, mean: Duration, elapsed: Duration) -> RateHealth {
        let secs = elapsed.as_secs_f64();
        let delivered = if secs > 0.0 {
            self.taken as f64 / secs
        } else {
            asked
        };
        let mut health = RateHealth {
            asked,
            delivered,
            reason: None,
        };
        // Too early to judge: the first ticks are taken at once.
        if secs < 0.5 || self.taken == 0 || delivered >= HELD_SHARE * asked {
            return health;
        }
        let mut why = Vec::new();
        let waited = match (procfs::own_run_delay(), self.wait_at_start) {
            (Some(now), Some(then)) => now.saturating_sub(then).as_secs_f64() / secs,
            _ => 0.0,
        };
        if waited > 0.05 {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            let load = procfs::load_average()
                .map(|l| format!(", load average {l:.1} on {cpus} CPUs"))
                .unwrap_or_default();
            why.push(format!(
                "machine load: pyinspect waited for a CPU {:.0}% of the time{load}",
                waited * 100.0
            ));
        }
        let per_read = self.reading / self.taken.max(1) as u32;
        if per_read.as_secs_f64() * asked > 0.5 {
            why.push(format!(
                "target size: a read of {:.0} threads and {:.0} frames takes {}, against \
                 {} between samples",
                self.threads as f64 / self.taken as f64,
                self.frames as f64 / self.taken as f64,
                micros(per_read),
                micros(mean)
            ));
        }
        let cpu = own_cpu_time()
            .saturating_sub(self.cpu_at_start)
            .as_secs_f64()
            / secs;
        if cpu > 0.8 {
            why.push(format!("CPU: pyinspect used {:.0}% of a core", cpu * 100.0));
        }
        if why.is_empty() {
            why.push(format!(
                "the schedule: sleeps overran (pyinspect used {:.0}% of a core)",
                cpu * 100.0
            ));
        }
        health.reason = Some(why.join("; "));
        health
    }
}

/// CPU time (user + system) this process has used so far.
fn own_cpu_time() -> Duration {
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

fn micros(d: Duration) -> String {
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
