//! The CLI edge: parse arguments, run a command, turn errors into one line.

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use pyinspect::output::OutputFormat;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "pyinspect",
    version,
    about = "Read the Python call stacks of a running CPython process from the outside",
    infer_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// With a file capability (setcap) and a non-root user: also inspect
    /// processes of other users (by default only the invoking user's own).
    #[arg(long, global = true)]
    allow_any_user: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print every thread's Python stack of a running process, once.
    Dump(DumpArgs),
    /// Sample a process into a profile (its formats are listed by `cli`, from --format's values).
    Record(RecordArgs),
    /// A live, top-like view of the functions a process spends its time in.
    Top(TopArgs),
    /// Print a shell completion script (its shells are listed by `cli`).
    Completions(CompletionsArgs),
    /// Compare two recordings: a differential flame graph and the functions whose share changed most.
    Diff(DiffArgs),
    /// Watch a process and write an incident when its event loop blocks, a
    /// thread holds the GIL, a thread is stuck, or the process freezes.
    Watch(WatchArgs),
    /// A census of a process's Python objects by type (count and bytes,
    /// largest first), or with --diff the types that grew between two.
    Heap(HeapArgs),
}

#[derive(Args, Debug)]
struct HeapArgs {
    #[command(flatten)]
    pid: PidArg,
    #[command(flatten)]
    core: CoreTargetArgs,
    /// Count without pausing the target: for services that cannot stop;
    /// the census may be torn, and says so.
    #[arg(long, conflicts_with = "core")]
    nonblocking: bool,
    /// Write the census as one JSON object (a snapshot --diff reads).
    #[arg(short, long)]
    json: bool,
    /// Write to this file (atomically) instead of standard output.
    #[arg(short, long, value_name = "FILE", default_value = "-")]
    output: std::path::PathBuf,
    /// Types listed in the table (0: all).
    #[arg(long, value_name = "N", default_value = "30")]
    top: usize,
    /// Compare two --json snapshots: the types that grew, by bytes and count
    /// (instead of reading a process).
    #[arg(long, num_args = 2, value_names = ["BEFORE", "AFTER"], conflicts_with_all = ["pid", "core", "nonblocking"])]
    diff: Option<Vec<std::path::PathBuf>>,
    /// Take a census every DURATION (30s, 500ms, 2m; plain numbers are
    /// seconds) and print what grew since the last one, until Ctrl-C or
    /// the target exits.
    #[arg(long, value_name = "DURATION", value_parser = parse_interval, conflicts_with_all = ["core", "diff", "output"])]
    every: Option<Duration>,
}

/// `--core` and the files it names: heap (dump defines its own, with its
/// rules against --subprocesses and --nonblocking).
#[derive(Args, Debug)]
struct CoreTargetArgs {
    /// Read a core file (a `gcore` snapshot, or the kernel's core of a
    /// crash) instead of a running process.
    #[arg(long, value_name = "CORE")]
    core: Option<std::path::PathBuf>,
    /// With --core: the program the core was taken from, when it is not at
    /// the path the core recorded.
    #[arg(long, value_name = "PATH")]
    executable: Option<std::path::PathBuf>,
    /// With --core: the target's root directory on this machine (a
    /// container's or another machine's sysroot); the files the core names
    /// are looked up under it.
    #[arg(long, value_name = "DIR")]
    root: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
struct WatchArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    read: ReadArgs,
    #[command(flatten)]
    rate: RateArg,
    #[command(flatten)]
    engine: EngineArg,
    /// Event loop blocked: one callback (task step) running longer than this
    /// ("100ms", "0.5s", or seconds).
    #[arg(long, value_name = "TIME", default_value = "100ms", value_parser = parse_threshold)]
    loop_threshold: Duration,
    /// GIL held: one thread holding the GIL, in the same place, longer than
    /// this while other threads wait for it.
    #[arg(long, value_name = "TIME", default_value = "100ms", value_parser = parse_threshold)]
    gil_threshold: Duration,
    /// Thread stuck: a thread in the same wait with the same stack longer than this.
    #[arg(long, value_name = "TIME", default_value = "1s", value_parser = parse_threshold)]
    stuck_threshold: Duration,
    /// Process frozen: no Python stack of the process changing for longer than this.
    #[arg(long, value_name = "TIME", default_value = "1s", value_parser = parse_threshold)]
    frozen_threshold: Duration,
    /// Incidents as JSON, one object per line, on standard output.
    #[arg(short, long)]
    json: bool,
    /// Append each incident to this file as one JSON line (instead of
    /// standard output).
    #[arg(short, long, value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// Write a flame graph of each incident's samples into this directory.
    #[arg(long, value_name = "DIR")]
    incident_dir: Option<std::path::PathBuf>,
    /// Most incidents written per minute (the others are counted in the summary).
    #[arg(long, default_value = "10", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_incidents_per_minute: u32,
    /// Wall-clock seconds to watch, or "unlimited" (default: until Ctrl-C or the program exits).
    #[arg(short, long, allow_negative_numbers = true, value_parser = parse_duration)]
    duration: Option<Duration>,
}

#[derive(Args, Debug)]
struct DiffArgs {
    /// The earlier recording (collapsed stacks, ours or py-spy's or flamegraph.pl's, or pprof).
    before: std::path::PathBuf,
    /// The later recording, in either format.
    after: std::path::PathBuf,
    /// The differential flame graph SVG to write.
    #[arg(short, long, default_value = "diff.svg")]
    output: std::path::PathBuf,
    /// Draw the before profile's shape (frames that went away stay visible); colours still mean after vs before.
    #[arg(long)]
    negate: bool,
    /// Rows in the table of functions whose share changed most (0 for none).
    #[arg(long, default_value = "20")]
    top: usize,
    #[command(flatten)]
    names: NamesArg,
}

#[derive(Args, Debug)]
struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

// The options shared by dump, record and top, each defined once here and
// flattened into the commands that take it; the rules between them are
// checked once each, in `check` below (src/options.rs).

/// `--pid`: dump, record and top.
#[derive(Args, Debug)]
struct PidArg {
    /// Process id of the Python process (decimal, or hex with 0x).
    #[arg(short, long, allow_negative_numbers = true, value_parser = parse_pid)]
    pid: Option<i32>,
}

/// The process record and top follow: `--pid`, or a command after `--`.
#[derive(Args, Debug)]
struct TargetArgs {
    #[command(flatten)]
    pid: PidArg,
    /// The program to launch and follow (instead of --pid).
    #[arg(last = true)]
    command: Vec<String>,
}

/// `--all`: record and top.
#[derive(Args, Debug)]
struct AllArg {
    /// Sample every Python process on the host (and in its containers),
    /// new ones too, each under its own root frame (pid, command line,
    /// cgroup): the bpf engine, which --all implies.
    #[arg(long, conflicts_with_all = ["pid", "command"])]
    all: bool,
}

impl AllArg {
    /// The engine asked, else the one --all needs, else the default.
    fn engine(&self, asked: Option<pyinspect::bpf::Engine>) -> pyinspect::bpf::Engine {
        match asked {
            Some(e) => e,
            None if self.all => pyinspect::bpf::Engine::Bpf,
            None => pyinspect::bpf::Engine::default(),
        }
    }
}

/// `--full-names`: dump, record, top and diff.
#[derive(Args, Debug)]
struct NamesArg {
    /// Show native (C++, Rust) frames by their whole demangled signature
    /// (return type, template and function arguments) rather than short
    /// (`at::native::add_out`, `std::vector<…>::push_back`); JSON carries both.
    #[arg(long)]
    full_names: bool,
}

/// How the threads are read: dump, record and top.
#[derive(Args, Debug)]
struct ReadArgs {
    /// Read without pausing the target (stacks may be torn).
    #[arg(long)]
    nonblocking: bool,
    /// Merge native (C, C++, Rust, CUDA-library) frames into each stack;
    /// needs the threads paused, so not with --nonblocking.
    #[arg(short, long)]
    native: bool,
    /// Also read the Python processes among the target's descendants
    /// (while sampling, new ones too).
    #[arg(short, long)]
    subprocesses: bool,
    #[command(flatten)]
    names: NamesArg,
}

/// Which threads a sample counts, and how frames are named: record and top.
#[derive(Args, Debug)]
struct SampleArgs {
    #[command(flatten)]
    rate: RateArg,
    /// Include idle threads (for record, py-spy's: every thread's Python
    /// stack, no leaf naming the wait; --mode wall adds that leaf).
    #[arg(short, long)]
    idle: bool,
    /// Only count the thread holding the GIL (for record, the same as
    /// --mode gil, with --idle too, as py-spy takes both).
    #[arg(short, long)]
    gil: bool,
    /// Show full file names rather than package-relative ones.
    #[arg(long)]
    full_filenames: bool,
    #[command(flatten)]
    asyncio: SampleAsyncArgs,
    #[command(flatten)]
    engine: EngineArg,
}

/// `--engine`: record, top and watch.
#[derive(Args, Debug)]
struct EngineArg {
    /// Sampling engine: ptrace (default), or bpf (in the kernel: see README).
    #[arg(long, value_enum)]
    engine: Option<pyinspect::bpf::Engine>,
}

/// `--rate`: record, top and watch (each with its default).
#[derive(Args, Debug)]
struct RateArg {
    // Its help names the defaults and the limit from their constants.
    #[arg(short, long, allow_negative_numbers = true, value_parser = pyinspect::options::parse_rate,
          help = format!("Samples per second: 100, 2.5k, 10khz (default {} for record and top, {} for watch; at most {}k)",
                         pyinspect::options::DEFAULT_RATE, pyinspect::options::WATCH_DEFAULT_RATE,
                         pyinspect::options::MAX_RATE / 1000.0))]
    rate: Option<f64>,
}

impl RateArg {
    /// The rate asked for, or record's and top's default.
    fn or_default(&self) -> f64 {
        self.rate.unwrap_or(pyinspect::options::DEFAULT_RATE)
    }
}

#[derive(Args, Debug)]
struct DumpArgs {
    #[command(flatten)]
    pid: PidArg,
    #[command(flatten)]
    read: ReadArgs,
    /// Read a core file (a `gcore` snapshot, or the kernel's core of a
    /// crash) instead of a running process.
    #[arg(long, value_name = "CORE", conflicts_with_all = ["subprocesses", "nonblocking"])]
    core: Option<std::path::PathBuf>,
    /// With --core: the program the core was taken from, when it is not at
    /// the path the core recorded.
    #[arg(long, value_name = "PATH")]
    executable: Option<std::path::PathBuf>,
    /// With --core: the target's root directory on this machine (a
    /// container's or another machine's sysroot); the files the core names
    /// are looked up under it.
    #[arg(long, value_name = "DIR")]
    root: Option<std::path::PathBuf>,
    /// One JSON object per process per line (JSON Lines).
    #[arg(short, long)]
    json: bool,
    /// Show arguments and local variables of each Python frame (repeat, -ll,
    /// for longer values).
    #[arg(short, long, action = clap::ArgAction::Count)]
    locals: u8,
    /// With --native: also interpreter plumbing frames and threads Python does not know.
    #[arg(long)]
    native_all: bool,
    /// With --native: file:line and inlined frames from separate debug files
    /// too (libc6-dbg, python3.X-dbg), as gdb shows them; costs about 0.15 s
    /// and 70 MB more for libc's.
    #[arg(long)]
    native_debug_info: bool,
    /// Show each Python frame as file:line:column where the interpreter
    /// records columns (3.11+; 1-based). JSON always carries them.
    #[arg(long)]
    positions: bool,
    #[command(flatten)]
    asyncio: DumpAsyncArgs,
}

impl DumpArgs {
    /// --native-all and --native-debug-info imply --native.
    fn native(&self) -> bool {
        self.read.native || self.native_all || self.native_debug_info
    }
}

/// dump's asyncio task trees.
#[derive(Args, Debug)]
struct DumpAsyncArgs {
    /// Show each event loop's asyncio tasks however many there are (by
    /// default they are shown when the registry holds at most 100,000).
    #[arg(long = "async", conflicts_with = "no_async")]
    async_tasks: bool,
    /// Do not read asyncio tasks (nor greenlets, nor Trio tasks).
    #[arg(long)]
    no_async: bool,
    /// Most tasks shown per event loop, and greenlets and Trio tasks per
    /// thread (the others are counted).
    #[arg(long, default_value = "100", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    async_limit: u32,
}

impl DumpAsyncArgs {
    fn mode(&self) -> pyinspect::sampler::AsyncMode {
        if self.no_async {
            pyinspect::sampler::AsyncMode::Off
        } else {
            pyinspect::sampler::AsyncMode::Tree {
                forced: self.async_tasks,
                limit: self.async_limit as usize,
            }
        }
    }
}

/// record's and top's asyncio attribution.
#[derive(Args, Debug)]
struct SampleAsyncArgs {
    /// Attribute samples to asyncio tasks: the running task's stack goes on
    /// with the stacks of the tasks awaiting it.
    #[arg(long = "async")]
    async_tasks: bool,
    /// With --async: "running" (the default) counts the running task only;
    /// "all" adds every waiting task's and suspended greenlet's stack,
    /// weighted by wall time.
    #[arg(long, value_enum, requires = "async_tasks")]
    async_mode: Option<AsyncSampleMode>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum AsyncSampleMode {
    Running,
    All,
}

impl SampleAsyncArgs {
    fn mode(&self) -> pyinspect::sampler::AsyncMode {
        if self.async_tasks {
            pyinspect::sampler::AsyncMode::Stitch {
                all: self.async_mode == Some(AsyncSampleMode::All),
            }
        } else {
            pyinspect::sampler::AsyncMode::Off
        }
    }
}

#[derive(Args, Debug)]
struct RecordArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    all: AllArg,
    #[command(flatten)]
    read: ReadArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// Output file (default: derived from the program name and the time).
    #[arg(short, long)]
    output: Option<std::path::PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "flamegraph")]
    format: OutputFormat,
    /// Wall-clock seconds to record, or "unlimited" (default: until Ctrl-C or the program exits).
    #[arg(short, long, allow_negative_numbers = true, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// What a sample counts (default cpu; --idle is wall, --gil is gil).
    #[arg(short, long, value_enum, conflicts_with_all = ["idle", "gil"])]
    mode: Option<pyinspect::commands::record::RecordMode>,
    /// Add a root frame per thread.
    #[arg(short, long)]
    threads: bool,
    /// Aggregate by function (first line) rather than by line.
    #[arg(short = 'F', long, conflicts_with = "nolineno")]
    function: bool,
    /// Leave line numbers out of frame names.
    #[arg(long)]
    nolineno: bool,
}

#[derive(Args, Debug)]
struct TopArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    all: AllArg,
    #[command(flatten)]
    read: ReadArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// Seconds between refreshes of the display.
    #[arg(long, default_value = "1", value_parser = parse_delay, allow_hyphen_values = true)]
    delay: Duration,
}

/// The names a value enum's variants take on the command line.
fn value_names<T: ValueEnum>() -> Vec<String> {
    T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect()
}

/// "a, b or c".
fn or_list(names: &[String]) -> String {
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The command line's definition, with the texts that name a value enum's
/// values made from that enum: a format or shell added is listed everywhere.
fn cli() -> clap::Command {
    let formats = or_list(&value_names::<OutputFormat>());
    let shells = or_list(&value_names::<clap_complete::Shell>());
    Cli::command()
        .mut_subcommand("record", |c| {
            c.about(format!("Sample a process into a profile: {formats}"))
        })
        .mut_subcommand("completions", |c| {
            c.about(format!("Print a shell completion script: {shells}"))
        })
}

/// The rules between options, one check each (src/options.rs), before
/// anything is opened, launched or drawn.
fn check(command: &Command) -> Result<(), pyinspect::error::Error> {
    use pyinspect::options::{check_dump_target, check_read, check_target};
    match command {
        Command::Dump(a) => {
            check_dump_target(
                a.pid.pid,
                a.core.is_some(),
                a.executable.is_some() || a.root.is_some(),
            )?;
            check_read(a.native(), a.read.nonblocking)
        }
        Command::Record(RecordArgs {
            target, read, all, ..
        }) => {
            if !all.all {
                check_target(target.pid.pid, &target.command)?;
            }
            check_read(read.native, read.nonblocking)
        }
        Command::Top(TopArgs {
            target, read, all, ..
        }) => {
            if !all.all {
                check_target(target.pid.pid, &target.command)?;
            }
            check_read(read.native, read.nonblocking)
        }
        Command::Watch(WatchArgs { target, read, .. }) => {
            check_target(target.pid.pid, &target.command)?;
            check_read(read.native, read.nonblocking)
        }
        Command::Heap(a) if a.diff.is_some() => Ok(()),
        Command::Heap(a) => check_dump_target(
            a.pid.pid,
            a.core.core.is_some(),
            a.core.executable.is_some() || a.core.root.is_some(),
        ),
        Command::Completions(_) | Command::Diff(_) => Ok(()),
    }
}

fn parse_pid(s: &str) -> Result<i32, String> {
    let v = if let Some(h) = s.strip_prefix("0x") {
        i64::from_str_radix(h, 16)
    } else {
        s.parse::<i64>()
    };
    match v {
        Ok(p) if p > 0 && p <= i32::MAX as i64 => Ok(p as i32),
        _ => Err(format!("'{s}' is not a process id (a positive integer)")),
    }
}

/// A positive duration: seconds, or a number with `ms`, `s`, `m` or `h`.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (n, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    match n.trim().parse::<f64>().map(|v| v * scale) {
        Ok(v) if (0.001..1e9).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!(
            "'{s}' is not a duration (e.g. 30s, 500ms, 2m; at least 1ms)"
        )),
    }
}

/// Seconds (fractions allowed) or "unlimited", which is like leaving it out.
fn parse_duration(s: &str) -> Result<Duration, String> {
    if s == "unlimited" {
        return Ok(Duration::MAX);
    }
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!(
            "'{s}' is not a duration (seconds above 0, or \"unlimited\")"
        )),
    }
}

fn record(a: RecordArgs) -> anyhow::Result<i32> {
    use pyinspect::commands::record::{self, RecordMode};
    let mode = match (a.mode, a.sample.idle, a.sample.gil) {
        (Some(m), _, _) => m,
        (None, _, true) => RecordMode::Gil,
        (None, true, _) => RecordMode::Idle,
        _ => RecordMode::Cpu,
    };
    let mut sampler = pyinspect::sampler::SamplerConfig {
        schedule: pyinspect::sampler::Schedule {
            rate: a.sample.rate.or_default(),
            duration: a.duration.filter(|d| *d != Duration::MAX),
            subprocesses: a.read.subprocesses,
            all: a.all.all,
        },
        target: pyinspect::sampler::TargetConfig {
            pause: pyinspect::sampler::PausePolicy {
                nonblocking: a.read.nonblocking,
            },
            filter: pyinspect::sampler::Filters {
                gil_only: false,
                include_idle: false,
            },
            read: pyinspect::sampler::ReadConfig {
                native: a.read.native,
                native_all: false,
                native_debug_info: false,
                loop_turns: false,
                full_names: a.read.names.full_names,
                function_lines: a.function,
                locals: 0,
                statuses: false,
                gc_frames: true,
                positions: false,
                waits: pyinspect::wait::WaitDetail::Off,
                asyncio: a.sample.asyncio.mode(),
            },
        },
    };
    mode.configure(&mut sampler.target);
    record::run(record::RecordOptions {
        pid: a.target.pid.pid,
        command: a.target.command,
        output: a.output,
        format: a.format,
        sampler,
        threads: a.threads,
        nolineno: a.nolineno,
        full_filenames: a.sample.full_filenames,
        mode,
        engine: a.all.engine(a.sample.engine.engine),
    })
}

fn top(a: TopArgs) -> anyhow::Result<()> {
    use pyinspect::commands::top;
    top::run(top::TopOptions {
        pid: a.target.pid.pid,
        asyncio: a.sample.asyncio.mode(),
        command: a.target.command,
        rate: a.sample.rate.or_default(),
        subprocesses: a.read.subprocesses,
        nonblocking: a.read.nonblocking,
        native: a.read.native,
        idle: a.sample.idle,
        gil: a.sample.gil,
        refresh: a.delay,
        full_filenames: a.sample.full_filenames,
        full_names: a.read.names.full_names,
        engine: a.all.engine(a.sample.engine.engine),
        all: a.all.all,
    })
}

/// A trigger's threshold: "250ms", "1.5s", or plain seconds; 1 ms to an hour.
fn parse_threshold(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let v = if let Some(ms) = t.strip_suffix("ms") {
        ms.trim().parse::<f64>().map(|v| v / 1000.0)
    } else {
        t.strip_suffix('s').unwrap_or(t).trim().parse::<f64>()
    };
    match v {
        Ok(v) if (0.001..=3600.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!(
            "'{s}' is not a threshold (\"250ms\", \"1.5s\" or seconds, 1 ms to an hour)"
        )),
    }
}

fn watch(a: WatchArgs) -> anyhow::Result<i32> {
    use pyinspect::commands::watch;
    watch::run(watch::WatchOptions {
        pid: a.target.pid.pid,
        command: a.target.command,
        rate: a
            .rate
            .rate
            .unwrap_or(pyinspect::options::WATCH_DEFAULT_RATE),
        duration: a.duration.filter(|d| *d != Duration::MAX),
        subprocesses: a.read.subprocesses,
        nonblocking: a.read.nonblocking,
        native: a.read.native,
        full_names: a.read.names.full_names,
        thresholds: pyinspect::watch::Thresholds {
            loop_blocked: a.loop_threshold,
            gil_held: a.gil_threshold,
            thread_stuck: a.stuck_threshold,
            process_frozen: a.frozen_threshold,
        },
        json: a.json,
        output: a.output,
        incident_dir: a.incident_dir,
        max_per_minute: a.max_incidents_per_minute,
        engine: a.engine.engine.unwrap_or_default(),
    })
}

/// top's refresh interval: a tenth of a second to an hour.
fn parse_delay(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=3600.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!(
            "'{s}' is not a refresh delay (seconds, 0.1 to 3600)"
        )),
    }
}

/// Print the completion script; a reader that stops early (`| head`) is not an error.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<i32> {
    use std::io::Write;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli(), "pyinspect", &mut script);
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("writing the completion script failed: {e}"))
        }
        _ => Ok(0),
    }
}

fn main() {
    let cli = match cli()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // One line, like every other error: clap's first paragraph, without its usage block.
            let text = e.render().to_string();
            let first: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(|l| l.trim().trim_start_matches("error: "))
                .collect();
            eprintln!("pyinspect: {} (see pyinspect --help)", first.join(" "));
            std::process::exit(2);
        }
    };
    if let Err(e) = check(&cli.command) {
        // A usage error, like clap's own: the same status.
        eprintln!("pyinspect: {e} (see pyinspect --help)");
        std::process::exit(2);
    }
    pyinspect::privilege::set_allow_any_user(cli.allow_any_user);
    let result = match cli.command {
        Command::Dump(a) => {
            let native = a.native();
            pyinspect::commands::dump::run(&pyinspect::commands::dump::DumpOptions {
                pid: a.pid.pid.unwrap_or(0),
                core: a.core.map(|path| pyinspect::commands::dump::CoreArgs {
                    path,
                    options: pyinspect::core::CoreOptions {
                        executable: a.executable,
                        root: a.root,
                    },
                }),
                json: a.json,
                locals: a.locals,
                nonblocking: a.read.nonblocking,
                subprocesses: a.read.subprocesses,
                native,
                native_all: a.native_all,
                native_debug_info: a.native_debug_info,
                full_names: a.read.names.full_names,
                positions: a.positions,
                asyncio: a.asyncio.mode(),
            })
            .map(|()| 0)
        }
        Command::Record(a) => record(a),
        Command::Top(a) => top(a).map(|()| 0),
        Command::Completions(a) => completions(a.shell),
        Command::Watch(a) => watch(a),
        Command::Heap(a) => {
            pyinspect::commands::heap::run(&pyinspect::commands::heap::HeapOptions {
                pid: a.pid.pid.unwrap_or(0),
                core: a.core.core.map(|path| pyinspect::commands::dump::CoreArgs {
                    path,
                    options: pyinspect::core::CoreOptions {
                        executable: a.core.executable,
                        root: a.core.root,
                    },
                }),
                diff: a.diff.map(|v| (v[0].clone(), v[1].clone())),
                json: a.json,
                nonblocking: a.nonblocking,
                top: a.top,
                output: a.output,
                every: a.every,
            })
        }
        Command::Diff(a) => {
            pyinspect::commands::diff::run(pyinspect::commands::diff::DiffOptions {
                before: a.before,
                after: a.after,
                output: Some(a.output),
                negate: a.negate,
                top: a.top,
                full_names: a.names.full_names,
            })
        }
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("pyinspect: {e:#}");
            std::process::exit(1);
        }
    }
}
