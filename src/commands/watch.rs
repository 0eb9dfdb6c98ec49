//! `pyinspect watch`: sample at low cost and, when a trigger fires, write an
//! incident (src/watch), then keep watching.

use crate::bpf::{AnySampler, Engine};
use crate::error::Error;
use crate::launch::{Launched, Stop, CHILD_GRACE_AT_END};
use crate::output::sink::OutputFile;
use crate::output::{OutputFormat, Profile, ProfileOptions};
use crate::pause;
use crate::sampler::{AsyncMode, ProcessSample, SamplerConfig, Target, TargetConfig};
use crate::stack::ProcessStacks;
use crate::watch::incident::{self, Incident, Opening, RateLimit, Summary};
use crate::watch::{Event, ProcessWatch, Streak, Thresholds, Trigger};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

pub struct WatchOptions {
    pub pid: Option<i32>,
    pub command: Vec<String>,
    pub rate: f64,
    pub duration: Option<Duration>,
    pub subprocesses: bool,
    pub nonblocking: bool,
    /// Native frames in the incidents' thread reads (never in the steady sampling).
    pub native: bool,
    /// Native frames by their whole signature (`--full-names`).
    pub full_names: bool,
    pub thresholds: Thresholds,
    /// Incidents as JSON lines on standard output rather than text.
    pub json: bool,
    /// Append each incident as one JSON line to this file.
    pub output: Option<PathBuf>,
    /// Write a flame graph of each incident's samples here.
    pub incident_dir: Option<PathBuf>,
    pub max_per_minute: u32,
    /// What samples steadily: the ptrace engine, or the eBPF one (the
    /// full reads when an incident opens are the ptrace engine's either way).
    pub engine: Engine,
}

/// What the steady sampling reads: every thread, the call each waits in
/// (short detail: the GIL's waiters, the fd), nothing costly.
fn steady_config(o: &WatchOptions) -> SamplerConfig {
    SamplerConfig {
        schedule: crate::sampler::Schedule {
            rate: o.rate,
            duration: o.duration,
            subprocesses: o.subprocesses,
            all: false,
        },
        target: crate::sampler::TargetConfig {
            pause: crate::sampler::PausePolicy {
                nonblocking: o.nonblocking,
            },
            filter: crate::sampler::Filters {
                gil_only: false,
                include_idle: true,
            },
            read: crate::sampler::ReadConfig {
                native: false,
                native_all: false,
                native_debug_info: false,
                function_lines: false,
                locals: 0,
                statuses: false,
                gc_frames: false,
                positions: false,
                waits: crate::wait::WaitDetail::Short,
                asyncio: AsyncMode::Off,
                loop_turns: true,
                full_names: o.full_names,
            },
        },
    }
}

/// What is read once when an incident opens: what `dump` reads.
fn detail_config(o: &WatchOptions) -> TargetConfig {
    let mut cfg = steady_config(o).target;
    cfg.read.native = o.native;
    cfg.read.statuses = true;
    cfg.read.positions = true;
    cfg.read.waits = crate::wait::WaitDetail::Full;
    cfg.read.asyncio = AsyncMode::Tree {
        forced: false,
        limit: 100,
    };
    cfg
}

/// Where incidents go.
struct Sinks {
    json: bool,
    file: Option<std::fs::File>,
    dir: Option<PathBuf>,
    rate: f64,
    summary: Summary,
    written: u64,
    failed: Option<String>,
}

impl Sinks {
    fn emit(&mut self, mut i: Incident, process: Option<ProcessStacks>, s: &Streak, cmdline: &str) {
        if let Some(dir) = &self.dir {
            let path = dir.join(format!("incident-{}-{}.svg", i.pid, i.id));
            match write_flamegraph(&path, s, i.pid, cmdline, self.rate, &i) {
                Ok(()) => i.flamegraph = Some(path.display().to_string()),
                Err(e) => eprintln!("pyinspect: {e}"),
            }
        }
        let line = serde_json::to_string(&i).unwrap_or_default() + "\n";
        if let Some(f) = &mut self.file {
            // One write per incident: a reader never sees half a line.
            if let Err(e) = f.write_all(line.as_bytes()) {
                self.failed.get_or_insert(e.to_string());
            }
        } else {
            let mut out = std::io::stdout().lock();
            let r = if self.json {
                out.write_all(line.as_bytes())
            } else {
                let mut buf = Vec::new();
                incident::write_text(&mut buf, &i, process.as_ref())
                    .and_then(|()| out.write_all(&buf))
            };
            if let Err(e) = r.and_then(|()| out.flush()) {
                self.failed.get_or_insert(e.to_string());
            }
        }
        self.written += 1;
        eprintln!("{}", incident::closed_line(&i));
    }
}

fn write_flamegraph(
    path: &std::path::Path,
    s: &Streak,
    pid: i32,
    cmdline: &str,
    rate: f64,
    i: &Incident,
) -> Result<(), String> {
    let mut profile = Profile::new(ProfileOptions {
        threads: false,
        nolineno: false,
        full_filenames: false,
        subprocesses: false,
        rate,
        timeline: false,
    });
    let weight = Duration::from_secs_f64(1.0 / rate);
    let mut t = s.start.clone();
    for (frames, n) in &s.during.stacks {
        t.frames.clone_from(frames);
        for _ in 0..*n {
            profile.add(pid, cmdline, &t, Duration::ZERO, weight);
        }
    }
    let title = format!(
        "incident {}: {} for {:.0} ms",
        i.id,
        i.trigger.describe(),
        i.duration_ms
    );
    let out = OutputFile::create(path).map_err(|e| e.to_string())?;
    out.write_with(|w| OutputFormat::Flamegraph.write(&profile, w, &title))
}

/// Every thread of `pid` once, as dump reads it, through a target kept
/// for the incidents (its caches, and native symbols, are loaded once).
/// A full read of a process: its threads, when their frames were read,
/// and the turns of its asyncio loops then.
#[derive(Clone)]
struct FullRead {
    process: ProcessStacks,
    read_at: Instant,
    turns: Vec<(u32, u64)>,
}

fn read_detail(
    details: &mut HashMap<i32, Target>,
    pid: i32,
    cfg: &TargetConfig,
) -> Result<FullRead, Error> {
    let t = match details.entry(pid) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(Target::open(pid, cfg)?),
    };
    let r = t.sample(cfg);
    if r.is_err() {
        details.remove(&pid);
    }
    let threads = r?;
    let t = details.get_mut(&pid).ok_or(Error::ProcessExited { pid })?;
    let (read_at, turns) = t.latest_read();
    Ok(FullRead {
        read_at,
        turns: turns.to_vec(),
        process: ProcessStacks {
            pid,
            command_line: t.cmdline.to_string(),
            python_version: t.version.clone(),
            executable: crate::stack::escape_controls(&t.exe).into_owned(),
            gc_collecting: t.gc_collecting(),
            threads,
            warnings: Vec::new(),
            parent_pid: None,
            crash: None,
            not_recorded: Vec::new(),
        },
    })
}

/// A stuck thread, or a frozen process, whose threads the full read finds
/// at rest (a sleep that the steady read cannot tell from a wait on fds).
fn at_rest(s: &Streak, p: Option<&ProcessStacks>) -> bool {
    let Some(p) = p else {
        return false;
    };
    match s.trigger {
        Trigger::ThreadStuck => {
            // A select or poll is a wait on fds only if the full read
            // shows them.
            let select = s.start.wait.as_ref().is_some_and(|w| {
                matches!(
                    w.syscall.as_deref(),
                    Some("select" | "pselect6" | "poll" | "ppoll")
                )
            });
            match p.threads.iter().find(|t| t.os_thread_id == Some(s.tid)) {
                Some(t) => {
                    let on_fds = t
                        .wait
                        .as_ref()
                        .is_some_and(|w| w.fd.is_some() || !w.fds.is_empty());
                    crate::watch::at_rest(t) || (select && !on_fds)
                }
                None => select,
            }
        }
        Trigger::ProcessFrozen => p.threads.iter().all(crate::watch::at_rest),
        _ => false,
    }
}

fn ms(d: Duration) -> String {
    incident::human(d)
}

/// Open the outputs before anything starts, so that a bad path fails
/// first: the incidents file (appended to), and the incidents folder.
fn open_outputs(opts: &WatchOptions) -> anyhow::Result<Option<std::fs::File>> {
    let file = match &opts.output {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", p.display()))?,
        ),
        None => None,
    };
    if let Some(d) = &opts.incident_dir {
        std::fs::create_dir_all(d)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", d.display()))?;
    }
    Ok(file)
}

/// The sampler on `root`; when it cannot start on a program we launched,
/// that program is ended and `Err` carries the exit code.
fn start_sampler(
    engine: Engine,
    root: i32,
    steady: SamplerConfig,
    launched: &mut Option<Launched>,
) -> anyhow::Result<Result<AnySampler, i32>> {
    match AnySampler::for_watch(engine, root, steady) {
        Ok(s) => Ok(Ok(s)),
        Err(e) => {
            if let Some(l) = launched.take() {
                eprintln!("pyinspect: {e}");
                let done = l.finish(Stop::Interrupt {
                    grace: CHILD_GRACE_AT_END,
                })?;
                eprintln!("pyinspect: nothing to watch: {}", done.describe());
                return Ok(Err(1));
            }
            Err(e.into())
        }
    }
}

/// What the watch keeps while it runs: where incidents go, the rate
/// limit, the incidents open, and the targets kept for full reads.
struct Incidents {
    sinks: Sinks,
    limit: RateLimit,
    thresholds: Thresholds,
    detail: TargetConfig,
    started_wall: SystemTime,
    /// When the sampler started: what tick timestamps count from.
    started: Instant,
    openings: HashMap<u64, Opening>,
    details: HashMap<i32, Target>,
    next_id: u64,
    counted: u64,
}

impl Incidents {
    /// One tick of process `p`, through its watch `w`: the incidents that
    /// open and close.
    fn observe(&mut self, w: &mut ProcessWatch, p: &ProcessSample) {
        let mut tick_read: Option<Result<FullRead, String>> = None;
        // Dated by when its frames were read, not when the tick began:
        // on a loaded machine the sampler can be held up in between
        // (a stall of the sampler read as one of the target).
        for e in w.observe(p.read_at, &p.threads, &p.loop_turns) {
            match e {
                Event::Opened(i) => self.opened(w, i, p.pid, &mut tick_read),
                Event::Closed(s) => self.close(*s, p.pid, false, &p.cmdline),
            }
        }
    }

    /// Streak `i` of `w` passed its threshold: read its process in full
    /// (once per tick, `tick_read`), let it go if that read finds it at
    /// rest, else give it an id and say it opened (rate limit allowing).
    fn opened(
        &mut self,
        w: &mut ProcessWatch,
        i: usize,
        pid: i32,
        tick_read: &mut Option<Result<FullRead, String>>,
    ) {
        // One full read per process per tick, shared by
        // the incidents that open together.
        let tid = w.streaks[i].tid;
        let lacks = |r: &Result<FullRead, String>| {
            r.as_ref().is_ok_and(|f| {
                !f.process
                    .threads
                    .iter()
                    .any(|t| t.os_thread_id == Some(tid))
            })
        };
        if tick_read.as_ref().is_none_or(lacks) {
            let mut r =
                read_detail(&mut self.details, pid, &self.detail).map_err(|e| e.to_string());
            if lacks(&r) {
                // A kept target's thread list can lag behind
                // threads that just started: a fresh one.
                self.details.remove(&pid);
                r = read_detail(&mut self.details, pid, &self.detail).map_err(|e| e.to_string());
            }
            *tick_read = Some(r);
        }
        let Some(read) = tick_read.as_ref() else {
            return;
        };
        let mut opening = Opening::default();
        match read {
            Ok(f) => {
                let ts = f.read_at.saturating_duration_since(self.started);
                w.seen_in_full_read(i, ts, &f.process.threads, &f.turns);
                opening.process = Some(f.process.clone());
            }
            Err(e) => opening.error = Some(e.clone()),
        }
        if at_rest(&w.streaks[i], opening.process.as_ref()) {
            w.veto(i);
            return;
        }
        let s = &mut w.streaks[i];
        s.id = self.next_id;
        self.next_id += 1;
        opening.shown = self.limit.allow(Instant::now());
        if opening.shown {
            let c = incident::culprit_of(s, &opening);
            eprintln!("{}", incident::opened_line(s, &c, pid));
        } else {
            opening.process = None;
        }
        self.openings.insert(s.id, opening);
    }

    /// Streak `s` of `pid` ended (or, `ongoing`, the watch did): count it,
    /// and write its incident if it was shown when it opened.
    fn close(&mut self, s: Streak, pid: i32, ongoing: bool, cmdline: &str) {
        let opening = self.openings.remove(&s.id).unwrap_or_default();
        let shown = opening.shown;
        let process = if shown && !self.sinks.json && self.sinks.file.is_none() {
            opening.process.clone()
        } else {
            None
        };
        let th = self.thresholds.of(s.trigger);
        let i = incident::build(&s, opening, pid, self.started_wall, th, ongoing);
        self.sinks.summary.add(&i);
        self.counted += 1;
        if shown {
            self.sinks.emit(i, process, &s, cmdline);
        }
    }

    /// The closing summary on stderr; the exit code (1 when writing an
    /// incident failed).
    fn report(&self, started: Instant, max_per_minute: u32) -> i32 {
        eprintln!(
            "pyinspect: {} incidents in {:.1} s{}",
            self.counted,
            started.elapsed().as_secs_f64(),
            if self.limit.held_back > 0 {
                format!(
                    ", {} not written (more than {} a minute)",
                    self.limit.held_back, max_per_minute
                )
            } else {
                String::new()
            }
        );
        for line in self.sinks.summary.lines() {
            eprintln!("pyinspect:   {line}");
        }
        let mut code = 0;
        if let Some(e) = &self.sinks.failed {
            eprintln!("pyinspect: writing incidents failed: {e}");
            code = 1;
        }
        code
    }
}

pub fn run(opts: WatchOptions) -> anyhow::Result<i32> {
    pause::install_signal_flag();
    crate::options::check_target(opts.pid, &opts.command)?;
    crate::options::check_read(opts.native, opts.nonblocking)?;
    // Outputs first, so that a bad path fails before anything starts.
    let file = open_outputs(&opts)?;
    let mut launched = if opts.command.is_empty() {
        None
    } else {
        Some(Launched::spawn(&opts.command)?)
    };
    let root = match (&launched, opts.pid) {
        (Some(l), _) => l.pid(),
        (None, Some(p)) => p,
        (None, None) => unreachable!("checked above"),
    };
    let mut sampler = match start_sampler(opts.engine, root, steady_config(&opts), &mut launched)? {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    // Tick timestamps count from the sampler's start, which is now.
    let started_wall = SystemTime::now();
    let started = Instant::now();
    let th = opts.thresholds;
    eprintln!(
        "pyinspect: watching process {root} at {} (loop blocked > {}, GIL held > {}, thread stuck > {}, process frozen > {})",
        crate::sampler::format_rate(opts.rate),
        ms(th.loop_blocked),
        ms(th.gil_held),
        ms(th.thread_stuck),
        ms(th.process_frozen)
    );
    let mut incidents = Incidents {
        sinks: Sinks {
            json: opts.json,
            file,
            dir: opts.incident_dir.clone(),
            rate: opts.rate,
            summary: Summary::default(),
            written: 0,
            failed: None,
        },
        limit: RateLimit::new(opts.max_per_minute),
        thresholds: th,
        detail: detail_config(&opts),
        started_wall,
        started: sampler.started(),
        openings: HashMap::new(),
        details: HashMap::new(),
        next_id: 1,
        counted: 0,
    };
    let mut watches: HashMap<i32, ProcessWatch> = HashMap::new();
    let mut cmdlines: HashMap<i32, std::sync::Arc<str>> = HashMap::new();
    while let Some(tick) = sampler.next_tick() {
        for p in &tick.processes {
            cmdlines.entry(p.pid).or_insert_with(|| p.cmdline.clone());
            let w = watches
                .entry(p.pid)
                .or_insert_with(|| ProcessWatch::new(th));
            incidents.observe(w, p);
        }
        for e in &tick.ended {
            eprintln!("pyinspect: {e}");
        }
    }
    let stopped = pause::interrupted();
    let by_duration = !stopped && sampler.duration_over();
    // The eBPF engine's program runs and time, as record's summary says them.
    if let Some(line) = sampler.cost_line() {
        eprintln!("{line}");
    }
    drop(sampler);
    incidents.details.clear();
    pause::release_lingering(Duration::from_millis(200));
    let mut pids: Vec<i32> = watches.keys().copied().collect();
    pids.sort_unstable();
    for pid in pids {
        let cmdline = cmdlines.get(&pid).cloned().unwrap_or_default();
        if let Some(w) = watches.get_mut(&pid) {
            for s in w.finish() {
                incidents.close(s, pid, true, &cmdline);
            }
        }
    }
    let code = incidents.report(started, opts.max_per_minute);
    match launched {
        Some(l) => Ok(l.end_sampling(stopped, by_duration, code)?),
        None => Ok(code),
    }
}
