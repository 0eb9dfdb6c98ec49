//! The sampling loop shared by `record`, `top` and `watch`: a randomised
//! schedule against an absolute clock, the processes followed (the root
//! and, with `subprocesses`, its descendants), and one read of each per
//! tick. Only live processes are followed.

use super::config::SamplerConfig;
use super::live::is_zombie;
use super::rate::{RateHealth, RateStats};
use super::read::Target;
use crate::error::Error;
use crate::pause;
use crate::procfs;
use crate::python::native::MergeCounts;
use crate::stack::ThreadStack;
use foldhash::{HashMap, HashMapExt};
use rand::Rng;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a just-launched program gets to bring its interpreter up.
const STARTUP_WAIT: Duration = Duration::from_secs(5);
const STARTUP_RETRY: Duration = Duration::from_millis(10);
/// How long a just-launched program may run one executable with no Python
/// in it before it is taken for a program that is not Python (the dynamic
/// loader maps libpython within milliseconds of exec).
const NOT_PYTHON_WAIT: Duration = Duration::from_secs(2);
/// Descendants are looked for at most this often (a scan reads all of /proc).
const RESCAN_EVERY: Duration = Duration::from_millis(200);
/// Behind schedule by more than this many mean intervals and more than
/// [`MAX_BEHIND_TIME`], the missed ticks are skipped (and counted) instead of
/// being sampled back to back. Below it a late tick is caught up: on a busy
/// machine the sampler is often kept off a CPU for a few milliseconds, which
/// at 10 kHz is dozens of ticks that would otherwise be lost. A longer
/// backlog is not caught up: samples taken back to back all see one moment
/// of the target, and at 1 kHz on a loaded machine catching up 20 ms biased
/// the sampled shares by several points (tests/record.rs's accuracy test).
const MAX_BEHIND_INTERVALS: u32 = 10;
const MAX_BEHIND_TIME: Duration = Duration::from_millis(10);
/// A tick due sooner than this is taken at once: a sleep that short costs
/// more (a context switch) than it waits, and oversleeps anyway.
const MIN_SLEEP: Duration = Duration::from_micros(10);
/// Longest single sleep, so that Ctrl-C is seen promptly at low rates.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

/// One process's threads at one tick (after filtering).
pub(crate) struct ProcessSample {
    pub(crate) pid: i32,
    pub(crate) cmdline: Arc<str>,
    pub(crate) python_version: String,
    pub(crate) threads: Vec<ThreadStack>,
    /// Since the sampler started, when its frames were read: later than the
    /// tick's timestamp by what came first (kernel states, waits, the
    /// pause), by much more when a loaded machine held the sampler up
    /// in between.
    pub(crate) read_at: Duration,
    /// With `loop_turns`: (OS thread id, how many callbacks the asyncio loop
    /// it runs has begun), for the threads inside a loop's `_run_once`
    /// (see [`asyncio::LoopTurns`]).
    pub(crate) loop_turns: Vec<(u32, u64)>,
}

pub(crate) struct Tick {
    /// Since the sampler started, when the sample was taken.
    pub(crate) timestamp: Duration,
    /// Real time this sample stands for: until the next sample is due.
    pub(crate) weight: Duration,
    /// How many samples at the asked rate each of its stacks counts as: 1,
    /// but for an interval measured whole (the eBPF engine's off-CPU
    /// time), `weight` in periods.
    pub(crate) samples: u64,
    /// How far behind schedule this sample was taken.
    pub(crate) late: Duration,
    /// Ticks skipped since the previous one because sampling fell far
    /// behind (each is a late sample that was never taken).
    pub(crate) missed: u64,
    pub(crate) processes: Vec<ProcessSample>,
    /// Per-sample read errors (counted; summaries show the most common
    /// [`Error::kind`]).
    pub(crate) errors: Vec<Error>,
    /// Processes no longer followed for a reason worth telling (pid reused,
    /// exec'd another program), once each.
    pub(crate) ended: Vec<Error>,
}

/// Fine-grained sleeps: the kernel's default 50 µs timer slack would add up
/// to half an interval to every sleep at 10 kHz.
fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only
    // the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

pub(crate) struct Sampler {
    cfg: SamplerConfig,
    root: i32,
    targets: Vec<Target>,
    /// Descendants that are not Python, with the executable they had: not
    /// retried unless they exec something else.
    not_python: HashMap<i32, String>,
    last_scan: Instant,
    start: Instant,
    /// When the next sample is due, since `start`.
    due: Duration,
    mean: Duration,
    rng: rand::rngs::ThreadRng,
    /// How native merges were made, over all targets (record's summary).
    merges: MergeCounts,
    stats: RateStats,
}

fn is_transient(e: &Error) -> bool {
    // What a program shows before its interpreter is up (still our own
    // image before exec, libpython not mapped, no interpreter state yet).
    matches!(
        e,
        Error::NotPython { .. }
            | Error::NotInitialized { .. }
            | Error::NoInterpreter { .. }
            | Error::UnknownVersion { .. }
            | Error::Memory(_)
    )
}

impl Sampler {
    /// Start following `root_pid`. When we launched it (see [`crate::launch`]),
    /// wait up to a few seconds for its interpreter to come up; otherwise a
    /// process that cannot be read fails at once.
    pub(crate) fn new(root_pid: i32, cfg: SamplerConfig) -> Result<Sampler, Error> {
        let rate = cfg.schedule.rate;
        // Launched by us: our child, or the child of our launch keeper.
        let me = Some(std::process::id() as i32);
        let parent = procfs::ppid(root_pid);
        let launched = parent == me || parent.and_then(procfs::ppid) == me;
        let began = Instant::now();
        let mut s = Sampler {
            mean: Duration::from_secs_f64(1.0 / rate),
            cfg,
            root: root_pid,
            targets: Vec::new(),
            not_python: HashMap::new(),
            last_scan: began,
            start: began,
            due: Duration::ZERO,
            rng: rand::rng(),
            merges: MergeCounts::default(),
            stats: RateStats::new(),
        };
        // Since when the root has run this executable without Python in it.
        let mut not_python_since: Option<(String, Instant)> = None;
        loop {
            let root_err = match Target::open(root_pid, &s.cfg.target) {
                Ok(t) => {
                    s.targets.push(t);
                    None
                }
                Err(e) => Some(e),
            };
            if s.cfg.schedule.subprocesses {
                s.scan_descendants(!launched);
            }
            if !s.targets.is_empty() {
                if let Some(Error::NotPython { exe, .. }) = root_err {
                    s.not_python.insert(root_pid, exe);
                }
                break;
            }
            let e = root_err.unwrap_or(Error::NotPython {
                pid: root_pid,
                exe: String::new(),
            });
            let root_gone = matches!(e, Error::NoSuchProcess(_) | Error::ProcessExited { .. })
                || is_zombie(root_pid);
            if root_gone {
                return Err(Error::ProcessExited { pid: root_pid });
            }
            // A program that stays without Python is not Python: decided by
            // what its memory shows over time, not by its name.
            let settled_not_python = match &e {
                Error::NotPython { exe, .. } => {
                    let since = match &not_python_since {
                        Some((x, t)) if x == exe => *t,
                        _ => {
                            not_python_since = Some((exe.clone(), Instant::now()));
                            Instant::now()
                        }
                    };
                    !launched || since.elapsed() >= NOT_PYTHON_WAIT
                }
                _ => false,
            };
            if settled_not_python && s.cfg.schedule.subprocesses {
                // A shell or launcher that starts Python later: follow its
                // descendants as they appear.
                if let Error::NotPython { exe, .. } = e {
                    s.not_python.insert(root_pid, exe);
                }
                break;
            }
            let keep_waiting = !settled_not_python
                && (launched && is_transient(&e) || matches!(e, Error::NotInitialized { .. }));
            let limit = if launched {
                STARTUP_WAIT
            } else {
                Duration::from_millis(500)
            };
            if !keep_waiting || began.elapsed() >= limit || pause::interrupted() {
                return Err(e);
            }
            std::thread::sleep(STARTUP_RETRY);
        }
        tighten_timer_slack();
        s.start = Instant::now();
        s.last_scan = s.start;
        s.stats.start();
        Ok(s)
    }

    /// Open the Python processes among the descendants not followed yet.
    /// `remember` records the ones that are not Python so they are skipped
    /// until they exec something else.
    fn scan_descendants(&mut self, remember: bool) {
        self.last_scan = Instant::now();
        let mut pids = procfs::descendants(self.root);
        if !self.targets.iter().any(|t| t.pid == self.root) {
            pids.insert(0, self.root);
        }
        // A process that exec'd is another program now: read it afresh.
        self.targets
            .retain(|t| procfs::exe(t.pid).is_ok_and(|e| e == t.exe));
        self.not_python.retain(|p, _| pids.contains(p));
        for pid in pids {
            if self.targets.iter().any(|t| t.pid == pid) {
                continue;
            }
            if let Some(exe) = self.not_python.get(&pid) {
                if procfs::exe(pid).is_ok_and(|e| &e == exe) {
                    continue;
                }
            }
            match Target::open(pid, &self.cfg.target) {
                Ok(t) => {
                    self.not_python.remove(&pid);
                    self.targets.push(t);
                }
                Err(Error::NotPython { exe, .. }) if remember => {
                    self.not_python.insert(pid, exe);
                }
                // Starting up, or gone: looked at again at the next scan.
                Err(_) => {}
            }
        }
    }

    fn draw_interval(&mut self) -> Duration {
        // Exponential intervals (a Poisson process): no aliasing with
        // periodic work in the target. Bounded so one draw cannot stall.
        let u: f64 = self.rng.random();
        let x = -(1.0 - u).ln();
        self.mean.mul_f64(x.min(20.0))
    }

    /// Whether no Python process is followed yet (a root that is not Python,
    /// with `subprocesses`, waiting for its Python descendants).
    pub(crate) fn waiting_for_python(&self) -> bool {
        self.targets.is_empty()
    }

    /// Whether sampling ended because the duration was over.
    pub(crate) fn duration_over(&self) -> bool {
        self.cfg.schedule.duration.is_some_and(|d| self.due >= d)
    }

    /// Whether there is nothing left to follow: every followed process has
    /// exited, and (with `subprocesses`) so has the root, whose future
    /// descendants would be followed.
    fn all_gone(&self) -> bool {
        self.targets.is_empty() && (!self.cfg.schedule.subprocesses || is_zombie(self.root))
    }

    /// Sleep until the next sample is due and take it. None when every
    /// followed process has exited, the duration is over, or a signal
    /// asked to stop.
    pub(crate) fn next_tick(&mut self) -> Option<Tick> {
        let mut missed = 0u64;
        loop {
            if pause::interrupted() || self.all_gone() {
                return None;
            }
            if let Some(d) = self.cfg.schedule.duration {
                if self.due >= d {
                    return None;
                }
            }
            let now = self.start.elapsed();
            if now + MIN_SLEEP >= self.due {
                break;
            }
            // A thread that did not stop in time is let go the moment it stops.
            pause::reap_lingering();
            let slice = if pause::has_lingering() {
                Duration::from_millis(1)
            } else {
                SLEEP_SLICE
            };
            std::thread::sleep((self.due - now).min(slice));
        }
        let mut timestamp = self.start.elapsed();
        let behind = timestamp.saturating_sub(self.due);
        if behind > (self.mean * MAX_BEHIND_INTERVALS).max(MAX_BEHIND_TIME) {
            // Far behind (a stall, a loaded machine): do not burst through
            // the backlog; start the schedule again from now.
            missed = (behind.as_secs_f64() / self.mean.as_secs_f64()) as u64;
            self.due = timestamp;
        }
        let late = timestamp.saturating_sub(self.due);
        if let Some(d) = self.cfg.schedule.duration {
            timestamp = timestamp.min(d);
        }

        if self.cfg.schedule.subprocesses && self.last_scan.elapsed() >= RESCAN_EVERY {
            self.scan_descendants(true);
        }
        let read_started = Instant::now();
        let mut processes = Vec::with_capacity(self.targets.len());
        let mut errors = Vec::new();
        let mut ended = Vec::new();
        let cfg = &self.cfg.target;
        let start = self.start;
        let merges = &mut self.merges;
        self.targets.retain_mut(|t| match t.sample(cfg) {
            Ok(threads) => {
                errors.extend(t.take_notes());
                let m = t.take_merge_counts();
                merges.address += m.address;
                merges.name += m.name;
                merges.fallback += m.fallback;
                processes.push(ProcessSample {
                    pid: t.pid,
                    cmdline: t.cmdline.clone(),
                    python_version: t.version.clone(),
                    threads,
                    loop_turns: std::mem::take(&mut t.loop_turns),
                    read_at: t.read_at.saturating_duration_since(start),
                });
                true
            }
            Err(Error::ProcessExited { .. }) | Err(Error::NoSuchProcess(_)) => false,
            Err(e @ (Error::PidReused { .. } | Error::Execed { .. })) => {
                ended.push(e);
                false
            }
            Err(e) => {
                if is_zombie(t.pid) {
                    return false;
                }
                errors.push(e);
                true
            }
        });

        self.stats.taken += 1;
        self.stats.reading += read_started.elapsed();
        for p in &processes {
            self.stats.threads += p.threads.len() as u64;
            self.stats.frames += p.threads.iter().map(|t| t.frames.len() as u64).sum::<u64>();
        }
        let step = self.draw_interval();
        self.due += step;
        let end = self.start.elapsed().max(self.due);
        let end = match self.cfg.schedule.duration {
            Some(d) => end.min(d.max(timestamp)),
            None => end,
        };
        Some(Tick {
            timestamp,
            weight: end.saturating_sub(timestamp),
            samples: 1,
            late,
            missed,
            processes,
            errors,
            ended,
        })
    }

    /// When sampling started: what tick timestamps count from.
    pub(crate) fn started(&self) -> Instant {
        self.start
    }

    /// Whether the asked rate has been held so far and, if not, the likely
    /// cause (see [`RateStats::health`]).
    pub(crate) fn rate_health(&self) -> RateHealth {
        self.stats
            .health(self.cfg.schedule.rate, self.mean, self.start.elapsed())
    }

    /// Samples whose native and Python frames were merged by stack address,
    /// by eval-loop names, or fell back (see `--native`).
    pub(crate) fn merge_counts(&self) -> MergeCounts {
        self.merges
    }

    /// Whether a sample this late counts as late in summaries: more than one
    /// mean interval behind.
    pub(crate) fn is_late(&self, late: Duration) -> bool {
        late > self.mean
    }
}
