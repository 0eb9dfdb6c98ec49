//! The sampling loop shared by `record` and `top`: a randomised schedule
//! against an absolute clock, the processes followed (the root and, with
//! `subprocesses`, its descendants), and one read of each per tick.
//!
//! Per tick and process the cost is: one `pread` of each Python thread's
//! kernel stat file (kept open), the ptrace pause of the Python threads only
//! (unless `nonblocking`), and the reader's snapshot, whose code-object and
//! name caches live as long as the process is followed.

use crate::error::Error;
use crate::memory::ProcessMemory;
use crate::native_unwind::NativeFrame;
use crate::pause::{self, PauseGuard};
use crate::procfs;
use crate::python::native::{MergeCounts, NativeStacks};
use crate::python::process::PythonProcess;
use crate::python::reader::{ReadOptions, Reader};
use crate::stack::{ThreadStack, ThreadStatus};
use rand::Rng;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Highest rate accepted: beyond it the schedule is finer than a read takes.
pub const MAX_RATE: f64 = 10_000.0;
/// How long a just-launched program gets to bring its interpreter up.
const STARTUP_WAIT: Duration = Duration::from_secs(5);
const STARTUP_RETRY: Duration = Duration::from_millis(10);
/// Descendants are looked for at most this often (a scan reads all of /proc).
const RESCAN_EVERY: Duration = Duration::from_millis(200);
/// Behind schedule by more than this many mean intervals, the missed ticks
/// are skipped (and counted) instead of being sampled back to back.
const MAX_BEHIND_INTERVALS: u32 = 10;
/// Longest single sleep, so that Ctrl-C is seen promptly at low rates.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Samples per second (mean of the randomised schedule).
    pub rate: f64,
    /// Wall-clock limit; None runs until the processes exit or Ctrl-C.
    pub duration: Option<Duration>,
    /// Follow children and grandchildren, picking up new ones.
    pub subprocesses: bool,
    /// Read without pausing threads (stacks may be torn).
    pub nonblocking: bool,
    /// Merge native frames (needs pausing).
    pub native: bool,
    /// With `native`: interpreter plumbing frames and non-Python threads too.
    pub native_all: bool,
    /// With `native`: DWARF from separate debug files too.
    pub native_debug_info: bool,
    /// Keep only the thread holding the GIL.
    pub gil_only: bool,
    /// Keep idle threads (waiting in the kernel, not holding the GIL). With
    /// it (or `gil_only`) kernel states are not read, and a thread's status
    /// is Active only while it holds the GIL.
    pub include_idle: bool,
    /// Report co_firstlineno instead of the current line (record -F).
    pub function_lines: bool,
    /// Arguments and locals of each frame (dump --locals): 0 for none, n
    /// for values of up to n × 128 characters.
    pub locals: u8,
    /// Read kernel states for every thread's status even when no thread is
    /// dropped for being idle (dump and top show the status).
    pub statuses: bool,
}

/// One process's threads at one tick (after filtering).
pub struct ProcessSample {
    pub pid: i32,
    pub cmdline: Arc<str>,
    pub python_version: String,
    pub threads: Vec<ThreadStack>,
}

pub struct Tick {
    /// Since the sampler started, when the sample was taken.
    pub timestamp: Duration,
    /// Real time this sample stands for: until the next sample is due.
    pub weight: Duration,
    /// How far behind schedule this sample was taken.
    pub late: Duration,
    /// Ticks skipped since the previous one because sampling fell far
    /// behind (each is a late sample that was never taken).
    pub missed: u64,
    pub processes: Vec<ProcessSample>,
    /// Per-sample read errors (counted; summaries show the most common).
    pub errors: Vec<String>,
}

/// Parse a sampling rate in Hz: finite, above 0, at most [`MAX_RATE`].
pub fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= MAX_RATE => Ok(r),
        Ok(r) if r.is_finite() && r > MAX_RATE => Err(format!(
            "rate {s} is too high: at most {MAX_RATE} samples per second"
        )),
        _ => Err(format!(
            "'{s}' is not a sampling rate (samples per second, above 0, at most {MAX_RATE})"
        )),
    }
}

/// One followed Python process and what is kept between its samples. `dump`
/// reads through this too, once: one read path for every command.
pub struct Target {
    pub pid: i32,
    pub exe: String,
    pub cmdline: Arc<str>,
    pub version: String,
    mem: ProcessMemory,
    reader: Reader,
    native: Option<NativeStacks>,
    /// Open `/proc/PID/task/TID/stat` of each Python thread, read with
    /// pread each tick rather than reopened.
    stat_files: HashMap<i32, File>,
    /// Python threads' kernel tids as of the latest read, and which holds the GIL.
    threads: Vec<(i32, bool)>,
    states: HashMap<i32, char>,
}

impl Target {
    pub fn open(pid: i32, cfg: &SamplerConfig) -> Result<Target, Error> {
        let mem = ProcessMemory::new(pid);
        let process = PythonProcess::open(pid, &mem)?;
        let mut reader = Reader::new(process);
        // Fails while the interpreter is not up yet (NotInitialized).
        let threads = reader.python_threads(&mem)?;
        // Opened very early, interpreter discovery can settle on a wrong
        // candidate; its thread ids then are not threads of the process.
        let tasks = procfs::tasks(pid)?;
        if threads.iter().any(|(t, _)| !tasks.contains(t)) {
            return Err(Error::NotInitialized { pid });
        }
        let native = if cfg.native {
            Some(NativeStacks::new(
                pid,
                cfg.native_all,
                cfg.native_debug_info,
            )?)
        } else {
            None
        };
        let p = &reader.process;
        Ok(Target {
            pid,
            exe: p.exe.clone(),
            cmdline: Arc::from(p.cmdline.as_str()),
            version: p.version.to_string(),
            mem,
            reader,
            native,
            stat_files: HashMap::new(),
            threads,
            states: HashMap::new(),
        })
    }

    /// Native unwinds that failed and merges that fell back since the last
    /// call: the samples were kept, but the summary counts them.
    pub fn take_merge_counts(&mut self) -> MergeCounts {
        self.native
            .as_mut()
            .map(|n| n.take_merge_counts())
            .unwrap_or_default()
    }

    pub fn take_notes(&mut self) -> Vec<String> {
        self.native
            .as_mut()
            .map(|n| n.take_notes())
            .unwrap_or_default()
    }

    /// What went wrong without stopping the read (shown once by dump).
    pub fn warnings(&mut self) -> Vec<String> {
        let mut w = self.reader.process.warnings.clone();
        if let Some(n) = self.native.as_mut() {
            w.extend(n.warnings());
        }
        w
    }

    /// Scheduler state of each known Python thread, before any pausing
    /// (a thread we stop would read as stopped).
    fn read_states(&mut self) {
        let pid = self.pid;
        // Files of threads that are gone are closed; new ones are opened.
        let threads = &self.threads;
        self.stat_files
            .retain(|tid, _| threads.iter().any(|(t, _)| t == tid));
        self.states.clear();
        let mut buf = [0u8; 512];
        for &(tid, _) in &self.threads {
            let f = match self.stat_files.entry(tid) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    match File::open(format!("/proc/{pid}/task/{tid}/stat")) {
                        Ok(f) => e.insert(f),
                        Err(_) => continue,
                    }
                }
            };
            let Ok(n) = f.read_at(&mut buf, 0) else {
                continue;
            };
            if let Some(s) = std::str::from_utf8(&buf[..n])
                .ok()
                .and_then(procfs::parse_stat_state)
            {
                self.states.insert(tid, s);
            }
        }
    }

    /// The threads that must stand still for a consistent read. Python
    /// frames only change under the GIL, so a sleeping thread that does not
    /// hold it cannot move them: pausing it would only wake it (and make it
    /// look busy at the next sample). Native stacks need every thread's
    /// registers, so then all of them are paused.
    fn to_pause(&self, cfg: &SamplerConfig) -> Result<Vec<i32>, Error> {
        if cfg.native_all {
            return procfs::tasks(self.pid);
        }
        Ok(self
            .threads
            .iter()
            .filter(|(tid, gil)| {
                // Idle threads that will be dropped need no registers either.
                let native_wanted = cfg.native && cfg.include_idle;
                native_wanted || *gil || !matches!(self.states.get(tid), Some('S' | 'D' | 'I'))
            })
            .map(|(tid, _)| *tid)
            .collect())
    }

    pub fn sample(&mut self, cfg: &SamplerConfig) -> Result<Vec<ThreadStack>, Error> {
        if !cfg.nonblocking {
            // The set to pause must be current: a thread missed here would be read running.
            self.threads = self.reader.python_threads(&self.mem)?;
        }
        // Kernel states decide what to pause and which threads are idle:
        // reading them (the kernel formats a whole stat line per thread) is
        // skipped when neither is needed.
        let filter_idle = !cfg.include_idle && !cfg.gil_only;
        let pause_all = cfg.native && cfg.include_idle;
        if filter_idle || cfg.statuses || (!cfg.nonblocking && !pause_all) {
            self.read_states();
        } else {
            self.states.clear();
        }
        let pause = if cfg.nonblocking {
            Vec::new()
        } else {
            self.to_pause(cfg)?
        };
        // Threads Python does not know (--native-all): their states too
        // must be read before they are stopped.
        let foreign_states: HashMap<i32, char> = pause
            .iter()
            .filter(|tid| !self.threads.iter().any(|(t, _)| t == *tid))
            .filter_map(|&tid| Some((tid, procfs::thread_state(self.pid, tid)?)))
            .collect();
        let guard = if cfg.nonblocking {
            None
        } else {
            Some(PauseGuard::new(self.pid, &pause)?)
        };
        let opts = ReadOptions {
            locals: cfg.locals,
            names: true,
            function_lines: cfg.function_lines,
        };
        let snap = self.reader.snapshot(&self.mem, opts, &self.states);
        // Registers and stack bytes are taken while the threads are stopped;
        // the unwinding itself runs once they are running again.
        let mut captured = Vec::new();
        if let (Some(n), Some(g)) = (self.native.as_mut(), guard.as_ref()) {
            for tid in g.tids() {
                captured.push((tid, n.capture(tid, &self.mem)));
            }
        }
        drop(guard);
        let mut unwound: HashMap<i32, Vec<NativeFrame>> = HashMap::new();
        if let Some(n) = self.native.as_mut() {
            for (tid, c) in captured {
                let frames = c.map(|c| n.unwind(tid, &c, &self.mem)).unwrap_or_default();
                unwound.insert(tid, frames);
            }
        }
        let mut snap = snap?;
        if cfg.nonblocking {
            // No pause needs the list up front: the next tick reads the
            // states of the threads this one saw.
            self.threads = snap
                .iter()
                .filter_map(|t| Some((t.stack.os_thread_id? as i32, t.stack.holds_gil)))
                .collect();
        }
        let mut foreign = Vec::new();
        if let Some(n) = self.native.as_mut() {
            for t in snap.iter_mut() {
                if let Some(frames) = t
                    .stack
                    .os_thread_id
                    .and_then(|tid| unwound.get(&(tid as i32)))
                {
                    n.merge(t, frames);
                }
            }
            for (tid, frames) in &unwound {
                if !self.threads.iter().any(|(t, _)| t == tid) {
                    let state = foreign_states.get(tid).copied();
                    foreign.push(n.foreign_thread(self.pid, *tid, state, frames));
                }
            }
            foreign.sort_by_key(|t| t.os_thread_id);
        }
        let mut threads: Vec<ThreadStack> = snap.into_iter().map(|t| t.stack).collect();
        if cfg.gil_only {
            threads.retain(|t| t.holds_gil);
        } else if !cfg.include_idle {
            threads.retain(|t| t.status != ThreadStatus::Idle);
            foreign.retain(|t| t.status != ThreadStatus::Idle);
        }
        // Oldest interpreter and thread first, as dump shows them (the
        // interpreter's lists are newest first).
        threads.reverse();
        threads.sort_by_key(|t| t.interpreter);
        threads.extend(foreign);
        Ok(threads)
    }
}

pub struct Sampler {
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

fn is_zombie(pid: i32) -> bool {
    matches!(procfs::thread_state(pid, pid), Some('Z' | 'X') | None)
}

impl Sampler {
    /// Start following `root_pid`. When we launched it (see [`crate::launch`]),
    /// wait up to a few seconds for its interpreter to come up; otherwise a
    /// process that cannot be read fails at once.
    pub fn new(root_pid: i32, cfg: SamplerConfig) -> Result<Sampler, Error> {
        if cfg.native && cfg.nonblocking {
            return Err(Error::Other(
                "--native needs to pause threads to unwind them; it cannot be used with \
                 --nonblocking"
                    .into(),
            ));
        }
        let rate = cfg.rate;
        if !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE) {
            return Err(Error::Other(format!(
                "sampling rate {rate} is out of range (above 0, at most {MAX_RATE})"
            )));
        }
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
        };
        loop {
            let root_err = match Target::open(root_pid, &s.cfg) {
                Ok(t) => {
                    s.targets.push(t);
                    None
                }
                Err(e) => Some(e),
            };
            if s.cfg.subprocesses {
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
            // A root that is not Python may still start Python children.
            let keep_waiting = launched && is_transient(&e)
                || matches!(e, Error::NotInitialized { .. })
                || s.cfg.subprocesses && matches!(e, Error::NotPython { .. });
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
        s.start = Instant::now();
        s.last_scan = s.start;
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
            match Target::open(pid, &self.cfg) {
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

    /// Sleep until the next sample is due and take it. None when every
    /// followed process has exited, the duration is over, or a signal
    /// asked to stop.
    pub fn next_tick(&mut self) -> Option<Tick> {
        let mut missed = 0u64;
        loop {
            if pause::interrupted() || self.targets.is_empty() {
                return None;
            }
            if let Some(d) = self.cfg.duration {
                if self.due >= d {
                    return None;
                }
            }
            let now = self.start.elapsed();
            if now >= self.due {
                break;
            }
            std::thread::sleep((self.due - now).min(SLEEP_SLICE));
        }
        let mut timestamp = self.start.elapsed();
        let behind = timestamp.saturating_sub(self.due);
        if behind > self.mean * MAX_BEHIND_INTERVALS {
            // Far behind (a stall, a loaded machine): do not burst through
            // the backlog; start the schedule again from now.
            missed = (behind.as_secs_f64() / self.mean.as_secs_f64()) as u64;
            self.due = timestamp;
        }
        let late = timestamp.saturating_sub(self.due);
        if let Some(d) = self.cfg.duration {
            timestamp = timestamp.min(d);
        }

        if self.cfg.subprocesses && self.last_scan.elapsed() >= RESCAN_EVERY {
            self.scan_descendants(true);
        }
        let mut processes = Vec::with_capacity(self.targets.len());
        let mut errors = Vec::new();
        let cfg = &self.cfg;
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
                });
                true
            }
            Err(Error::ProcessExited { .. }) | Err(Error::NoSuchProcess(_)) => false,
            Err(e) => {
                if is_zombie(t.pid) {
                    return false;
                }
                errors.push(e.to_string());
                true
            }
        });

        let step = self.draw_interval();
        self.due += step;
        let end = self.start.elapsed().max(self.due);
        let end = match self.cfg.duration {
            Some(d) => end.min(d.max(timestamp)),
            None => end,
        };
        Some(Tick {
            timestamp,
            weight: end.saturating_sub(timestamp),
            late,
            missed,
            processes,
            errors,
        })
    }

    /// Whether a sample this late counts as late in summaries: more than one
    /// mean interval behind.
    /// Samples whose native and Python frames were merged by stack address,
    /// by eval-loop names, or fell back (see `--native`).
    pub fn merge_counts(&self) -> MergeCounts {
        self.merges
    }

    pub fn is_late(&self, late: Duration) -> bool {
        late > self.mean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100"), Ok(100.0));
        assert_eq!(parse_rate("0.5"), Ok(0.5));
        for bad in ["0", "-5", "nan", "inf", "abc", "", "1e9"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
