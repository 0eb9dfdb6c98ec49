//! What the kernel says about each sampled thread: scheduler state, CPU use
//! and context switches per second, from `/proc/PID/task/TID/{stat,status}`
//! as `procfs` reads and parses them.
//!
//! Read once per refresh; rates are deltas over the real time between two
//! reads of the same thread, so a late refresh does not inflate them.

use std::collections::HashMap;
use std::time::Instant;

/// Cumulative counters of one thread at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Reading {
    pub(crate) state: char,
    /// utime + stime, in clock ticks.
    pub(crate) cpu_ticks: u64,
    pub(crate) voluntary: u64,
    pub(crate) involuntary: u64,
}

/// Rates of one thread over the last refresh interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ThreadRates {
    pub(crate) state: char,
    /// Share of one core, in percent; `None` on the first reading.
    pub(crate) cpu_pct: Option<f64>,
    pub(crate) voluntary_per_s: Option<f64>,
    pub(crate) involuntary_per_s: Option<f64>,
}

/// The state (field 3) and utime + stime (fields 14 and 15) of a stat line,
/// through the one stat parser (`procfs`).
pub(crate) fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let state = crate::procfs::parse_stat_state(stat)?;
    let utime = crate::procfs::stat_field(stat, 14)?;
    let stime = crate::procfs::stat_field(stat, 15)?;
    Some((state, utime.saturating_add(stime)))
}

fn read(pid: i32, tid: u32) -> Option<Reading> {
    let (stat, status) = crate::procfs::thread_stat_and_status(pid, tid)?;
    let (state, cpu_ticks) = parse_stat(&stat)?;
    let (voluntary, involuntary) = crate::procfs::ctxt_switches(&status)?;
    Some(Reading {
        state,
        cpu_ticks,
        voluntary,
        involuntary,
    })
}

/// Rates between two readings `secs` apart.
pub(crate) fn rates(
    prev: Option<&Reading>,
    now: &Reading,
    secs: f64,
    clock_ticks: f64,
) -> ThreadRates {
    let per_s = |a: u64, b: u64| (secs > 0.0).then(|| b.saturating_sub(a) as f64 / secs);
    ThreadRates {
        state: now.state,
        cpu_pct: prev
            .and_then(|p| per_s(p.cpu_ticks, now.cpu_ticks))
            .map(|t| 100.0 * t / clock_ticks),
        voluntary_per_s: prev.and_then(|p| per_s(p.voluntary, now.voluntary)),
        involuntary_per_s: prev.and_then(|p| per_s(p.involuntary, now.involuntary)),
    }
}

pub(crate) struct ThreadMonitor {
    clock_ticks: f64,
    previous: HashMap<(i32, u32), (Instant, Reading)>,
}

impl Default for ThreadMonitor {
    fn default() -> Self {
        Self::new()
    }
}

impl ThreadMonitor {
    pub(crate) fn new() -> ThreadMonitor {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        ThreadMonitor {
            // Linux has reported 100 to user space for decades; only a
            // failing sysconf falls back to it.
            clock_ticks: if hz > 0 { hz as f64 } else { 100.0 },
            previous: HashMap::new(),
        }
    }

    /// Read each (pid, tid) and return its rates; threads that are gone are
    /// missing from the answer and forgotten.
    pub(crate) fn refresh(&mut self, threads: &[(i32, u32)]) -> HashMap<(i32, u32), ThreadRates> {
        let now = Instant::now();
        let mut out = HashMap::with_capacity(threads.len());
        let mut next = HashMap::with_capacity(threads.len());
        for &key in threads {
            let Some(r) = read(key.0, key.1) else {
                continue;
            };
            let prev = self.previous.get(&key);
            let secs = prev.map_or(0.0, |(t, _)| now.duration_since(*t).as_secs_f64());
            out.insert(key, rates(prev.map(|p| &p.1), &r, secs, self.clock_ticks));
            next.insert(key, (now, r));
        }
        self.previous = next;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_odd_comm() {
        let line = "4242 (we (ird) n) R 1 2 3 4 5 6 7 8 9 10 150 25 0 0 20 0 3 0";
        assert_eq!(parse_stat(line), Some(('R', 175)));
        assert_eq!(parse_stat("4242 (x) S 1 2"), None);
        assert_eq!(parse_stat("no paren"), None);
    }

    #[test]
    fn rates_over_interval() {
        let a = Reading {
            state: 'R',
            cpu_ticks: 100,
            voluntary: 10,
            involuntary: 0,
        };
        let b = Reading {
            state: 'S',
            cpu_ticks: 150,
            voluntary: 30,
            involuntary: 500,
        };
        let r = rates(Some(&a), &b, 0.5, 100.0);
        assert_eq!(r.state, 'S');
        assert_eq!(r.cpu_pct, Some(100.0));
        assert_eq!(r.voluntary_per_s, Some(40.0));
        assert_eq!(r.involuntary_per_s, Some(1000.0));
        let first = rates(None, &b, 0.0, 100.0);
        assert_eq!(first.cpu_pct, None);
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id() as i32;
        let tid = unsafe { libc::gettid() } as u32;
        let mut m = ThreadMonitor::new();
        let r = m.refresh(&[(pid, tid), (pid, u32::MAX)]);
        assert_eq!(r.len(), 1);
        assert_eq!(r[&(pid, tid)].state, 'R');
        let start = Instant::now();
        while start.elapsed().as_millis() < 100 {
            std::hint::black_box(0);
        }
        let r = m.refresh(&[(pid, tid)]);
        let cpu = r[&(pid, tid)].cpu_pct.unwrap();
        assert!((0.0..=200.0).contains(&cpu), "{cpu}");
    }
}
