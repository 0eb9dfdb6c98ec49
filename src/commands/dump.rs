//! `pyinspect dump`: every thread's stack, once.

use crate::core::CoreFile;
use crate::error::Error;
use crate::pause;
use crate::procfs;
use crate::sampler::{Target, TargetConfig};
use crate::stack::{CrashReport, FrameKind, ProcessStacks};
use crate::target::TargetSource;
use std::io::Write;

/// `dump --core`: the core and where to find the files it names.
pub struct CoreArgs {
    pub path: std::path::PathBuf,
    pub options: crate::core::CoreOptions,
}

pub struct DumpOptions {
    pub pid: i32,
    /// Read this core file rather than process `pid`.
    pub core: Option<CoreArgs>,
    pub json: bool,
    /// 0: none; n: arguments and locals, each value up to n × 128 characters.
    pub locals: u8,
    pub nonblocking: bool,
    pub subprocesses: bool,
    pub native: bool,
    pub native_all: bool,
    pub native_debug_info: bool,
    /// Native frames by their whole signature (`--full-names`).
    pub full_names: bool,
    /// Text output: `file:line:column` where the location table has columns.
    pub positions: bool,
    /// asyncio tasks under their loop's thread (default: on, bounded).
    pub asyncio: crate::sampler::AsyncMode,
}

/// What one dump reads.
fn config(opts: &DumpOptions) -> TargetConfig {
    TargetConfig {
        pause: crate::sampler::PausePolicy {
            nonblocking: opts.nonblocking,
        },
        filter: crate::sampler::Filters {
            gil_only: false,
            include_idle: true,
        },
        read: crate::sampler::ReadConfig {
            native: opts.native,
            native_all: opts.native_all,
            native_debug_info: opts.native_debug_info,
            loop_turns: false,
            full_names: opts.full_names,
            function_lines: false,
            locals: opts.locals,
            statuses: true,
            gc_frames: false,
            positions: true,
            waits: crate::wait::WaitDetail::Full,
            asyncio: opts.asyncio,
        },
    }
}

/// Read one process once, through the same path as the samplers.
pub(crate) fn read_process(pid: i32, opts: &DumpOptions) -> Result<ProcessStacks, Error> {
    let cfg = config(opts);
    let mut target = Target::open(pid, &cfg)?;
    let threads = target.sample_whole(&cfg);
    // A thread that stopped after the budget is let go now, not at exit.
    pause::release_lingering(std::time::Duration::from_millis(200));
    let threads = threads?;
    let warnings = target.warnings();
    Ok(stacks(pid, &mut target, threads, warnings, None))
}

/// What one read of `target` found, as every output takes it (names from
/// the target escaped).
fn stacks(
    pid: i32,
    target: &mut Target,
    threads: Vec<crate::stack::ThreadStack>,
    warnings: Vec<String>,
    crash: Option<CrashReport>,
) -> ProcessStacks {
    ProcessStacks {
        pid,
        command_line: target.cmdline.to_string(),
        python_version: target.version.clone(),
        executable: crate::stack::escape_controls(&target.exe).into_owned(),
        gc_collecting: target.gc_collecting(),
        threads,
        warnings: warnings
            .iter()
            .map(|w| crate::stack::escape_controls(w).into_owned())
            .collect(),
        parent_pid: None,
        crash,
        not_recorded: Vec::new(),
    }
}

/// Read a core file once, through the samplers' path on a core source:
/// nothing is paused, registers are the core's, and the thread that
/// crashed comes first.
pub(crate) fn read_core(core: &CoreArgs, opts: &DumpOptions) -> Result<ProcessStacks, Error> {
    let source = CoreFile::open(&core.path, &core.options)?;
    let crash = source.crash();
    let location = crash.as_ref().and_then(|c| source.place(c.ip));
    let mut warnings: Vec<String> = source.warnings().to_vec();
    let pid = source.pid();
    let cfg = config(opts);
    let mut target = Target::open_source(Box::new(source), &cfg)?;
    let mut threads = target.sample(&cfg)?;
    let crash = crash.map(|c| {
        let tid = c.tid as u32;
        let python = threads
            .iter()
            .find(|t| t.os_thread_id == Some(tid))
            .and_then(|t| t.frames.iter().find(|f| f.kind == FrameKind::Python))
            .map(|f| {
                format!(
                    "{} ({}:{})",
                    f.function,
                    f.file.as_deref().unwrap_or("?"),
                    f.line.unwrap_or(0)
                )
            });
        CrashReport {
            thread: tid,
            signal: c.signal_name(),
            address: c.addr.map(|a| format!("0x{a:x}")),
            location,
            python,
        }
    });
    if let Some(c) = &crash {
        if let Some(i) = threads
            .iter()
            .position(|t| t.os_thread_id == Some(c.thread))
        {
            let t = threads.remove(i);
            threads.insert(0, t);
        }
    }
    warnings.extend(target.warnings());
    let mut p = stacks(pid, &mut target, threads, warnings, crash);
    p.not_recorded = crate::stack::NOT_IN_A_CORE.to_vec();
    Ok(p)
}

pub fn run(opts: &DumpOptions) -> anyhow::Result<()> {
    if let Some(core) = &opts.core {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let p = read_core(core, opts)?;
        emit(&mut out, &p, opts)?;
        out.flush()?;
        return Ok(());
    }
    pause::install_signal_flag();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let root = read_process(opts.pid, opts)?;
    emit(&mut out, &root, opts)?;
    if opts.subprocesses {
        for child in procfs::descendants(opts.pid) {
            if pause::interrupted() {
                break;
            }
            match read_process(child, opts) {
                Ok(mut p) => {
                    p.parent_pid = procfs::ppid(child);
                    emit(&mut out, &p, opts)?;
                }
                // Not every descendant runs Python; those are simply not shown.
                Err(Error::NotPython { .. }) | Err(Error::NoSuchProcess(_)) => {}
                Err(e) => eprintln!("pyinspect: subprocess {child}: {e}"),
            }
        }
    }
    out.flush()?;
    if pause::interrupted() {
        anyhow::bail!("interrupted");
    }
    Ok(())
}

fn emit(out: &mut dyn Write, p: &ProcessStacks, opts: &DumpOptions) -> std::io::Result<()> {
    if opts.json {
        serde_json::to_writer(&mut *out, p)?;
        writeln!(out)
    } else {
        crate::output::write_dump_text(out, p, opts.positions)
    }
}
