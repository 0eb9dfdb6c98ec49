//! The CLI edge: parse arguments, run a command, turn errors into one line.

use clap::{Args, Parser, Subcommand};
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
    /// Sample a process into a profile (flame graph, speedscope, Chrome trace, raw, pprof).
    Record(RecordArgs),
    /// A live, top-like view of the functions a process spends its time in.
    Top(TopArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Compare two recordings: a differential flame graph and the functions whose share changed most.
    Diff(DiffArgs),
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
}

#[derive(Args, Debug)]
struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
struct DumpArgs {
    /// Process id of the Python process.
    #[arg(short, long, value_parser = parse_pid, required_unless_present = "core", conflicts_with = "core")]
    pid: Option<i32>,
    /// Read a core file (a `gcore` snapshot, or the kernel's core of a
    /// crash) instead of a running process.
    #[arg(long, value_name = "CORE", conflicts_with_all = ["subprocesses", "nonblocking"])]
    core: Option<std::path::PathBuf>,
    /// With --core: the program the core was taken from, when it is not at
    /// the path the core recorded.
    #[arg(long, value_name = "PATH", requires = "core")]
    executable: Option<std::path::PathBuf>,
    /// With --core: the target's root directory on this machine (a
    /// container's or another machine's sysroot); the files the core names
    /// are looked up under it.
    #[arg(long, value_name = "DIR", requires = "core")]
    root: Option<std::path::PathBuf>,
    /// One JSON object per process per line (JSON Lines).
    #[arg(short, long)]
    json: bool,
    /// Show arguments and local variables of each Python frame (repeat, -ll,
    /// for longer values).
    #[arg(short, long, action = clap::ArgAction::Count)]
    locals: u8,
    /// Read without pausing the target (may show torn stacks).
    #[arg(long)]
    nonblocking: bool,
    /// Also dump the Python processes among the target's descendants.
    #[arg(short, long)]
    subprocesses: bool,
    /// Merge native (C, C++, Rust, CUDA-library) frames into each stack.
    #[arg(short, long)]
    native: bool,
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

/// dump's asyncio task trees.
#[derive(Args, Debug)]
struct DumpAsyncArgs {
    /// Show each event loop's asyncio tasks however many there are (by
    /// default they are shown when the registry holds at most 100,000).
    #[arg(long = "async", conflicts_with = "no_async")]
    async_tasks: bool,
    /// Do not read asyncio tasks.
    #[arg(long)]
    no_async: bool,
    /// Most tasks shown per event loop (the others are counted).
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
    /// "all" adds every waiting task's stack, weighted by wall time.
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
    /// Process id to sample (or give a command after --).
    #[arg(short, long, value_parser = parse_pid)]
    pid: Option<i32>,
    /// Output file (default: derived from the program name and the time).
    #[arg(short, long)]
    output: Option<std::path::PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "flamegraph")]
    format: OutputFormat,
    #[command(flatten)]
    rate: RateArg,
    /// Wall-clock seconds to record, or "unlimited" (default: until Ctrl-C or the program exits).
    #[arg(short, long, allow_negative_numbers = true, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Follow child processes (and their children).
    #[arg(short, long)]
    subprocesses: bool,
    /// What a sample counts: cpu (threads on the CPU), wall (every thread;
    /// waits end in a leaf frame naming them), offcpu (only waiting threads,
    /// with that leaf), gil (only the GIL holder).
    #[arg(short, long, value_enum)]
    mode: Option<pyinspect::commands::record::RecordMode>,
    /// Include idle threads: the same as --mode wall.
    #[arg(short, long, conflicts_with = "mode")]
    idle: bool,
    /// Only sample the thread holding the GIL: the same as --mode gil
    /// (with --idle too, as py-spy takes both).
    #[arg(short, long, conflicts_with = "mode")]
    gil: bool,
    /// Add a root frame per thread.
    #[arg(short, long)]
    threads: bool,
    /// Aggregate by function (first line) rather than by line.
    #[arg(short = 'F', long, conflicts_with = "nolineno")]
    function: bool,
    /// Leave line numbers out of frame names.
    #[arg(long)]
    nolineno: bool,
    /// Show full file names rather than package-relative ones.
    #[arg(long)]
    full_filenames: bool,
    /// Read without pausing the target.
    #[arg(long)]
    nonblocking: bool,
    /// Merge native frames.
    #[arg(short, long)]
    native: bool,
    #[command(flatten)]
    asyncio: SampleAsyncArgs,
    /// The program to launch and profile.
    #[arg(last = true)]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct TopArgs {
    /// Process id to watch (or give a command after --).
    #[arg(short, long, value_parser = parse_pid)]
    pid: Option<i32>,
    #[command(flatten)]
    rate: RateArg,
    /// Follow child processes.
    #[arg(short, long)]
    subprocesses: bool,
    /// Include idle threads.
    #[arg(short, long)]
    idle: bool,
    /// Only count the thread holding the GIL.
    #[arg(short, long)]
    gil: bool,
    /// Read without pausing the target.
    #[arg(long)]
    nonblocking: bool,
    /// Merge native frames.
    #[arg(short, long)]
    native: bool,
    /// Seconds between refreshes of the display.
    #[arg(long, default_value = "1", value_parser = parse_delay, allow_hyphen_values = true)]
    delay: Duration,
    /// Show full file names rather than package-relative ones.
    #[arg(long)]
    full_filenames: bool,
    #[command(flatten)]
    asyncio: SampleAsyncArgs,
    /// The program to launch and watch.
    #[arg(last = true)]
    command: Vec<String>,
}

/// `--rate`, shared by record and top.
#[derive(Args, Debug)]
struct RateArg {
    /// Samples per second: 100, 2.5k, 10khz (at most 100k).
    #[arg(short, long, default_value = "100", allow_negative_numbers = true, value_parser = pyinspect::sampler::parse_rate)]
    rate: f64,
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
    let mode = match (a.mode, a.idle, a.gil) {
        (Some(m), _, _) => m,
        (None, _, true) => RecordMode::Gil,
        (None, true, _) => RecordMode::Wall,
        _ => RecordMode::Cpu,
    };
    let mut sampler = pyinspect::sampler::SamplerConfig {
        rate: a.rate.rate,
        duration: a.duration.filter(|d| *d != Duration::MAX),
        subprocesses: a.subprocesses,
        nonblocking: a.nonblocking,
        native: a.native,
        native_all: false,
        native_debug_info: false,
        gil_only: false,
        include_idle: false,
        function_lines: a.function,
        locals: 0,
        statuses: false,
        gc_frames: true,
        positions: false,
        waits: pyinspect::wait::WaitDetail::Off,
        asyncio: a.asyncio.mode(),
    };
    mode.configure(&mut sampler);
    record::run(record::RecordOptions {
        pid: a.pid,
        command: a.command,
        output: a.output,
        format: a.format,
        sampler,
        threads: a.threads,
        nolineno: a.nolineno,
        full_filenames: a.full_filenames,
        mode,
    })
}

fn top(a: TopArgs) -> anyhow::Result<()> {
    use pyinspect::commands::top;
    top::run(top::TopOptions {
        pid: a.pid,
        asyncio: a.asyncio.mode(),
        command: a.command,
        rate: a.rate.rate,
        subprocesses: a.subprocesses,
        nonblocking: a.nonblocking,
        native: a.native,
        idle: a.idle,
        gil: a.gil,
        refresh: a.delay,
        full_filenames: a.full_filenames,
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
    use clap::CommandFactory;
    use std::io::Write;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "pyinspect", &mut script);
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("writing the completion script failed: {e}"))
        }
        _ => Ok(0),
    }
}

fn main() {
    let cli = match Cli::try_parse() {
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
    pyinspect::privilege::set_allow_any_user(cli.allow_any_user);
    let result = match cli.command {
        Command::Dump(a) => {
            // clap's `requires` is not enforced beside `required_unless_present`.
            if a.core.is_none() && (a.executable.is_some() || a.root.is_some()) {
                eprintln!(
                    "pyinspect: --executable and --root say where a core's files are: \
                     give the core with --core CORE (see pyinspect --help)"
                );
                std::process::exit(2);
            }
            pyinspect::commands::dump::run(&pyinspect::commands::dump::DumpOptions {
                pid: a.pid.unwrap_or(0),
                core: a.core.map(|path| pyinspect::commands::dump::CoreArgs {
                    path,
                    options: pyinspect::core::CoreOptions {
                        executable: a.executable,
                        root: a.root,
                    },
                }),
                json: a.json,
                locals: a.locals,
                nonblocking: a.nonblocking,
                subprocesses: a.subprocesses,
                native: a.native || a.native_all || a.native_debug_info,
                native_all: a.native_all,
                native_debug_info: a.native_debug_info,
                positions: a.positions,
                asyncio: a.asyncio.mode(),
            })
            .map(|()| 0)
        }
        Command::Record(a) => record(a),
        Command::Top(a) => top(a).map(|()| 0),
        Command::Completions(a) => completions(a.shell),
        Command::Diff(a) => {
            pyinspect::commands::diff::run(pyinspect::commands::diff::DiffOptions {
                before: a.before,
                after: a.after,
                output: Some(a.output),
                negate: a.negate,
                top: a.top,
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
