//! `pyinspect record`: sample a running or launched process into a profile.

use crate::bpf::{AnySampler, Engine};
use crate::launch::{Launched, Stop, CHILD_GRACE_AT_END};
use crate::output::sink::OutputFile;
use crate::output::{OutputFormat, Profile, ProfileOptions};
use crate::pause;
use crate::sampler::{format_rate, RateHealth, SamplerConfig, TargetConfig};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a sample counts (`--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RecordMode {
    /// Threads on the CPU (or holding the GIL): py-spy's default.
    #[default]
    Cpu,
    /// Every thread, running or not; off-CPU samples end in a leaf frame
    /// naming the wait (py-spy's --idle, plus the leaf).
    Wall,
    /// Every thread, running or not, each sample its Python stack alone:
    /// py-spy's --idle (no `--mode` value: the flag's own).
    #[value(skip)]
    Idle,
    /// Only threads off the CPU, each sample ending in its wait: an
    /// off-CPU flame graph.
    Offcpu,
    /// Only the thread holding the GIL (py-spy's --gil).
    Gil,
}

impl RecordMode {
    /// The sampler settings this mode needs, on top of `cfg`.
    pub fn configure(self, cfg: &mut TargetConfig) {
        match self {
            RecordMode::Cpu => {}
            RecordMode::Gil => cfg.filter.gil_only = true,
            RecordMode::Idle => cfg.filter.include_idle = true,
            RecordMode::Wall | RecordMode::Offcpu => {
                cfg.filter.include_idle = true;
                cfg.read.waits = crate::wait::WaitDetail::Short;
            }
        }
    }

    /// Whether this mode keeps the sample of `t`, which it turns into the
    /// stack to add: with a leaf naming the wait of an off-CPU thread
    /// (wall, offcpu); false when the mode leaves the sample out (offcpu:
    /// a thread on the CPU). The leaf goes into the tick's own stack, which
    /// is not used after: no copy per sample. `leaves` keeps the leaf of each
    /// wait seen, so that a sample shares its name rather than making one.
    fn sample(self, t: &mut crate::stack::ThreadStack, leaves: &mut Leaves) -> bool {
        if !matches!(self, RecordMode::Wall | RecordMode::Offcpu) {
            return true;
        }
        let off_cpu = t.wait.as_ref().filter(|w| w.off_cpu());
        // A thread waiting for the GPU (--native), spinning or asleep in
        // the driver: its leaf names the CUDA call it waits in.
        let gpu = cuda_sync_call(&t.frames)
            .filter(|_| self == RecordMode::Wall || off_cpu.is_some())
            .map(|call| format!("GPU wait: {call}"));
        let short = match (gpu, off_cpu) {
            (Some(g), _) => g,
            (None, Some(w)) => w.short(),
            (None, None) => return self == RecordMode::Wall,
        };
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        let leaf = leaves
            .entry(short)
            .or_insert_with_key(|short| crate::stack::Frame::label(format!("[{short}]")));
        t.frames.insert(0, leaf.clone());
        true
    }
}

/// The CUDA synchronisation a sample's native frames are in
/// (`cudaStreamSynchronize`), if any.
fn cuda_sync_call(frames: &[crate::stack::Frame]) -> Option<&str> {
    use crate::stack::FrameKind;
    let i = crate::native_unwind::pools::cuda_sync(frames, |f| {
        if f.kind == FrameKind::Native {
            (Some(f.function.as_ref()), f.module.as_deref().unwrap_or(""))
        } else {
            (None, "")
        }
    })?;
    Some(&frames[i].function)
}

/// The leaf frame of each wait, by its short form.
type Leaves = foldhash::HashMap<String, crate::stack::Frame>;

/// Distinct waits remembered (paths and peers can be many).
const MAX_LEAVES: usize = 4096;

pub struct RecordOptions {
    pub pid: Option<i32>,
    pub command: Vec<String>,
    pub output: Option<PathBuf>,
    pub format: OutputFormat,
    pub sampler: SamplerConfig,
    pub threads: bool,
    pub nolineno: bool,
    pub full_filenames: bool,
    pub mode: RecordMode,
    pub engine: Engine,
}

/// How often the progress line is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// `<program or pid>-<YYYYmmddTHHMMSS>.<ext>`, in the current directory.
fn default_output(opts: &RecordOptions) -> PathBuf {
    let stem = match opts.pid {
        Some(pid) => pid.to_string(),
        None if opts.sampler.schedule.all => "all".into(),
        None => program_name(&opts.command),
    };
    PathBuf::from(format!(
        "{stem}-{}.{}",
        local_timestamp(),
        opts.format.extension()
    ))
}

/// The program's short name; for `python app.py` the script's name, which
/// says more than "python".
fn program_name(argv: &[String]) -> String {
    let base = |s: &str| {
        Path::new(s)
            .file_stem()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "profile".into())
    };
    let Some(first) = argv.first() else {
        return "profile".into();
    };
    let prog = base(first);
    if prog.starts_with("python") {
        if let Some(script) = argv[1..].iter().find(|a| !a.starts_with('-')) {
            return base(script);
        }
    }
    prog
}

fn local_timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as libc::time_t)
        .unwrap_or(0);
    // SAFETY: localtime_r writes only into the tm we pass.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe {
        libc::localtime_r(&now, &mut tm);
    }
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

struct Stats {
    ticks: u64,
    late: u64,
    errors: u64,
    /// Errors by kind ([`crate::error::Error::kind`]): addresses and ids
    /// differ between occurrences of one cause.
    causes: HashMap<&'static str, u64>,
}

fn progress(stats: &Stats, profile: &Profile, elapsed: Duration, health: &RateHealth) {
    let mut line = format!(
        "pyinspect: {:.1} s, {} samples, {} errors, {} late",
        elapsed.as_secs_f64(),
        profile.samples(),
        stats.errors,
        stats.late
    );
    if let Some(why) = &health.reason {
        line.push_str(&format!(
            ", {} of {} asked ({why})",
            format_rate(health.delivered),
            format_rate(health.asked)
        ));
    }
    // One terminal line: a long reason is cut rather than wrapped (a
    // wrapped line would not be redrawn in place).
    let width = terminal_columns().saturating_sub(1).max(40);
    if line.chars().count() > width {
        line = line
            .chars()
            .take(width.saturating_sub(1))
            .collect::<String>()
            + "…";
    }
    eprint!("\r\x1b[K{line}");
}

/// Width of the terminal on stderr (80 when it cannot be asked).
fn terminal_columns() -> usize {
    // SAFETY: TIOCGWINSZ only fills the winsize we pass.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        ws.ws_col as usize
    } else {
        80
    }
}

/// Record; returns the exit code for pyinspect.
pub fn run(opts: RecordOptions) -> anyhow::Result<i32> {
    pause::install_signal_flag();
    let path = opts.output.clone().unwrap_or_else(|| default_output(&opts));
    // Opened before sampling, so that an unwritable path fails at once.
    let out = OutputFile::create(&path)?;

    let launched = if opts.command.is_empty() {
        None
    } else {
        match Launched::spawn(&opts.command) {
            Ok(l) => Some(l),
            Err(e) => {
                out.abandon();
                return Err(e.into());
            }
        }
    };
    let root = match (&launched, opts.pid) {
        (Some(l), _) => l.pid(),
        (None, Some(p)) => p,
        // --all: no one process (0 is never a process's pid).
        (None, None) if opts.sampler.schedule.all => 0,
        (None, None) => unreachable!("checked at the CLI edge (options::check_target)"),
    };
    let mut sampler = match AnySampler::new(opts.engine, root, opts.sampler.clone()) {
        Ok(s) => s,
        Err(e) => {
            out.abandon();
            if let Some(l) = launched {
                // Nothing to record: say why, and do not leave the program
                // running unprofiled (with -s it would have been followed).
                eprintln!("pyinspect: {e}");
                let hint = if matches!(e, crate::error::Error::NotPython { .. }) {
                    " (record -s follows the Python processes it starts)"
                } else {
                    ""
                };
                let grace = CHILD_GRACE_AT_END;
                let done = l.finish(Stop::Interrupt { grace })?;
                eprintln!("pyinspect: nothing to record{hint}: {}", done.describe());
                return Ok(1);
            }
            return Err(e.into());
        }
    };

    let mut profile = Profile::new(ProfileOptions {
        threads: opts.threads,
        nolineno: opts.nolineno,
        full_filenames: opts.full_filenames,
        subprocesses: opts.sampler.schedule.subprocesses || opts.sampler.schedule.all,
        rate: opts.sampler.schedule.rate,
        timeline: opts.format.needs_timeline(),
    });
    let mut stats = Stats {
        ticks: 0,
        late: 0,
        errors: 0,
        causes: HashMap::new(),
    };
    if sampler.waiting_for_python() {
        eprintln!(
            "pyinspect: process {root} ({}) is not Python: following the Python processes it starts",
            crate::procfs::exe(root).unwrap_or_default()
        );
    }
    let show_progress = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut last_progress = started;
    let mut saw_python = !sampler.waiting_for_python();
    let mut leaves = Leaves::default();
    while let Some(mut tick) = sampler.next_tick() {
        saw_python |= !tick.processes.is_empty();
        stats.ticks += 1 + tick.missed;
        stats.late += tick.missed + u64::from(sampler.is_late(tick.late));
        for p in &mut tick.processes {
            for t in p.threads.iter_mut() {
                if opts.mode.sample(t, &mut leaves) {
                    profile.add_samples(
                        p.pid,
                        &p.cmdline,
                        t,
                        tick.timestamp,
                        tick.weight,
                        tick.samples,
                    );
                }
            }
        }
        for e in &tick.ended {
            eprintln!(
                "{}pyinspect: {e}",
                if show_progress { "\r\x1b[K" } else { "" }
            );
        }
        for e in tick.errors {
            stats.errors += 1;
            *stats.causes.entry(e.kind()).or_default() += 1;
        }
        if show_progress && last_progress.elapsed() >= PROGRESS_EVERY {
            last_progress = Instant::now();
            progress(&stats, &profile, started.elapsed(), &sampler.rate_health());
        }
    }
    let health = sampler.rate_health();
    let elapsed = started.elapsed();
    if show_progress {
        eprint!("\r\x1b[K");
    }
    let stopped = pause::interrupted();
    let by_duration = !stopped && sampler.duration_over();
    let m = sampler.merge_counts();
    let engine_cost = sampler.cost_line();
    drop(sampler);
    // Threads that stopped after a pause's budget are let go now.
    pause::release_lingering(std::time::Duration::from_millis(200));

    // Write before waiting for the child: the profile is what was asked for.
    let title = match &launched {
        Some(_) => opts.command.join(" "),
        None => crate::procfs::cmdline(root).unwrap_or_else(|_| format!("pid {root}")),
    };
    let title = crate::stack::escape_controls(&title).into_owned();
    let shown = out.shown().to_string();
    let written = out.write_with(|w| opts.format.write(&profile, w, &title));
    summary(&stats, &profile, elapsed, &health);
    if let Some(cost) = engine_cost {
        eprintln!("{cost}");
    }
    if m.address + m.name + m.fallback > 0 {
        eprintln!(
            "pyinspect: native merges: {} by stack address, {} by eval-loop names, {} fell back",
            m.address, m.name, m.fallback
        );
    }
    if !saw_python {
        eprintln!("pyinspect: no Python process appeared among process {root} and its descendants");
    }
    let mut code = 0;
    match written {
        Ok(()) => eprintln!(
            "pyinspect: wrote {} profile to {shown}",
            format_name(opts.format),
        ),
        Err(e) => {
            eprintln!("pyinspect: {e}");
            code = 1;
        }
    }
    match launched {
        Some(l) => Ok(l.end_sampling(stopped, by_duration, code)?),
        None => Ok(code),
    }
}

fn format_name(f: OutputFormat) -> &'static str {
    match f {
        OutputFormat::Flamegraph => "flame graph",
        OutputFormat::Speedscope => "speedscope",
        OutputFormat::Chrometrace => "Chrome trace",
        OutputFormat::Raw => "collapsed stacks",
        OutputFormat::Pprof => "pprof",
        OutputFormat::Gecko => "Firefox Profiler",
        OutputFormat::Html => "HTML",
        OutputFormat::Heatmap => "line heatmap",
    }
}

fn summary(stats: &Stats, profile: &Profile, elapsed: Duration, health: &RateHealth) {
    let mut line = format!(
        "pyinspect: {} samples of {} threads over {:.1} s",
        profile.samples(),
        profile.threads_seen(),
        elapsed.as_secs_f64()
    );
    if stats.ticks > 0 {
        line.push_str(&format!(
            ", {:.1}% late",
            100.0 * stats.late as f64 / stats.ticks as f64
        ));
    }
    if stats.errors > 0 {
        let (cause, n) = stats
            .causes
            .iter()
            .max_by_key(|(c, n)| (**n, std::cmp::Reverse(**c)))
            .map(|(c, n)| (*c, *n))
            .unwrap_or(("", 0));
        line.push_str(&format!(
            ", {} errors (most common, {n}: {cause})",
            stats.errors
        ));
    }
    eprintln!("{line}");
    if let Some(why) = &health.reason {
        eprintln!(
            "pyinspect: the asked rate was not held: {} of {} ({:.0}%), because of {why}",
            format_rate(health.delivered),
            format_rate(health.asked),
            health.share() * 100.0
        );
    } else if stats.ticks > 10 && stats.late * 10 > stats.ticks {
        eprintln!(
            "pyinspect: sampling fell behind often; the results may be skewed: try a lower --rate"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_group_by_kind_not_by_address() {
        use crate::error::{Error, MemError};
        let unmapped = |addr| Error::Memory(MemError::Unmapped { addr, len: 8 });
        assert_eq!(unmapped(0x7f00).kind(), unmapped(0x7f88).kind());
        let os = Error::Memory(MemError::Os {
            addr: 0x7f00,
            errno: 14,
        });
        assert_ne!(unmapped(0x7f00).kind(), os.kind());
        let regs = |tid| {
            Error::NativeUnwind(Box::new(Error::Registers {
                tid,
                errno: nix::errno::Errno::ESRCH,
            }))
        };
        assert_eq!(regs(1).kind(), regs(2).kind());
        assert!(!regs(1).kind().chars().any(|c| c.is_ascii_digit()));
        assert_ne!(regs(1).kind(), Error::MergeMismatch.kind());
    }

    /// A recorded stack of a Python thread in `torch.cuda.synchronize()`
    /// (frames as `--native` gives them, innermost first): wall mode ends
    /// it in the CUDA call it waits in, spinning on the CPU or asleep;
    /// off-CPU mode only when asleep; CPU mode leaves it alone.
    #[test]
    fn gpu_waits_are_wall_leaves() {
        use crate::stack::{Frame, ThreadStack};
        let native = |f: &str, m: &str| Frame {
            module: Some(m.to_string()),
            ..Frame::label(f)
        };
        let stack = |state: &str| ThreadStack {
            frames: vec![
                native("libcuda.so.1+0x2a1f0", "libcuda.so.1"),
                native("cuStreamSynchronize", "libcuda.so.1"),
                native("cudaStreamSynchronize", "libcudart.so.12"),
                native("c10::cuda::stream_synchronize", "libc10_cuda.so"),
                Frame::python("synchronize", "torch/cuda/__init__.py", 985),
                Frame::python("main", "train.py", 12),
            ],
            wait: Some(crate::wait::Wait {
                state: state.to_string(),
                ..Default::default()
            }),
            thread_id: 1,
            os_thread_id: Some(4242),
            name: None,
            name_source: None,
            interpreter: 0,
            status: crate::stack::ThreadStatus::Idle,
            holds_gil: false,
            truncated: None,
            native_entry: None,
            asyncio: None,
        };
        let leaf = |mode: RecordMode, state: &str| {
            let mut t = stack(state);
            let kept = mode.sample(&mut t, &mut Leaves::default());
            (kept, t.frames[0].function.to_string())
        };
        let gpu = "[GPU wait: cudaStreamSynchronize]".to_string();
        assert_eq!(leaf(RecordMode::Wall, "R"), (true, gpu.clone()));
        assert_eq!(leaf(RecordMode::Wall, "S"), (true, gpu.clone()));
        assert_eq!(leaf(RecordMode::Offcpu, "S"), (true, gpu));
        assert!(!leaf(RecordMode::Offcpu, "R").0);
        assert_eq!(
            leaf(RecordMode::Cpu, "R"),
            (true, "libcuda.so.1+0x2a1f0".to_string())
        );
        // Another thread asleep: its wait, as before.
        let mut t = stack("S");
        t.frames.drain(..4);
        t.wait.as_mut().unwrap().syscall = Some("futex".into());
        assert!(RecordMode::Wall.sample(&mut t, &mut Leaves::default()));
        assert_eq!(&*t.frames[0].function, "[futex]");
    }

    #[test]
    fn program_names() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(program_name(&v(&["python3", "-u", "app.py"])), "app");
        assert_eq!(program_name(&v(&["/usr/bin/myprog", "x"])), "myprog");
        assert_eq!(program_name(&v(&[])), "profile");
    }
}
