//! `pyinspect dump`: every thread's stack, once.

use crate::error::Error;
use crate::pause;
use crate::procfs;
use crate::sampler::{SamplerConfig, Target};
use crate::stack::{FrameKind, ProcessStacks, ThreadStatus};
use std::io::Write;

pub struct DumpOptions {
    pub pid: i32,
    pub json: bool,
    /// 0: none; n: arguments and locals, each value up to n × 128 characters.
    pub locals: u8,
    pub nonblocking: bool,
    pub subprocesses: bool,
    pub native: bool,
    pub native_all: bool,
}

/// Read one process once, through the same path as the samplers.
pub fn read_process(pid: i32, opts: &DumpOptions) -> Result<ProcessStacks, Error> {
    let cfg = SamplerConfig {
        rate: 1.0,
        duration: None,
        subprocesses: false,
        nonblocking: opts.nonblocking,
        native: opts.native,
        native_all: opts.native_all,
        gil_only: false,
        include_idle: true,
        function_lines: false,
        locals: opts.locals,
        statuses: true,
    };
    let mut target = Target::open(pid, &cfg)?;
    let threads = target.sample_whole(&cfg);
    // A thread that stopped after the budget is let go now, not at exit.
    pause::release_lingering(std::time::Duration::from_millis(200));
    let threads = threads?;
    Ok(ProcessStacks {
        pid,
        command_line: target.cmdline.to_string(),
        python_version: target.version.clone(),
        executable: crate::stack::escape_controls(&target.exe).into_owned(),
        threads,
        warnings: target
            .warnings()
            .iter()
            .map(|w| crate::stack::escape_controls(w).into_owned())
            .collect(),
        parent_pid: None,
    })
}

pub fn run(opts: &DumpOptions) -> anyhow::Result<()> {
    if opts.native && opts.nonblocking {
        anyhow::bail!(
            "--native needs the threads paused to read their registers; it cannot be used with --nonblocking"
        );
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
        write_text(out, p)
    }
}

pub fn write_text(out: &mut dyn Write, p: &ProcessStacks) -> std::io::Result<()> {
    match p.parent_pid {
        Some(pp) => writeln!(
            out,
            "\nProcess {} (child of {}): {}",
            p.pid, pp, p.command_line
        )?,
        None => writeln!(out, "Process {}: {}", p.pid, p.command_line)?,
    }
    writeln!(out, "Python v{} ({})", p.python_version, p.executable)?;
    for w in &p.warnings {
        writeln!(out, "warning: {w}")?;
    }
    // Threads Python does not know (--native-all) carry interpreter -1.
    let mut interps: Vec<i64> = p
        .threads
        .iter()
        .map(|t| t.interpreter)
        .filter(|i| *i >= 0)
        .collect();
    interps.dedup();
    let several = interps.len() > 1;
    for t in &p.threads {
        let id = match t.os_thread_id {
            Some(tid) => tid.to_string(),
            None => format!("0x{:x}", t.thread_id),
        };
        let mut status = match t.status {
            ThreadStatus::Active => "active".to_string(),
            ThreadStatus::Idle => "idle".to_string(),
        };
        if t.holds_gil {
            status.push_str(", gil");
        }
        if t.interpreter < 0 {
            status.push_str(", not a Python thread");
        } else if several {
            status.push_str(&format!(", interpreter {}", t.interpreter));
        }
        write!(out, "\nThread {id}")?;
        if let Some(n) = &t.name {
            write!(out, " \"{n}\"")?;
        }
        write!(out, " ({status})")?;
        if let Some(e) = &t.native_entry {
            write!(out, " in {e}")?;
        }
        writeln!(out)?;
        for f in &t.frames {
            match f.kind {
                FrameKind::Python => writeln!(
                    out,
                    "    {} ({}:{})",
                    f.function,
                    f.file.as_deref().unwrap_or("?"),
                    f.line.unwrap_or(0)
                )?,
                FrameKind::Native => {
                    let module = f.module.as_deref().unwrap_or("");
                    let place = match (&f.file, f.line) {
                        (Some(file), Some(line)) => format!(" ({file}:{line}) [{module}]"),
                        // An unnamed frame's name already is module+offset.
                        _ if f.function.starts_with(module) => String::new(),
                        _ => format!(" ({module})"),
                    };
                    let inl = if f.inlined == Some(true) {
                        " (inlined)"
                    } else {
                        ""
                    };
                    writeln!(out, "    {}{}{}", f.function, place, inl)?
                }
            }
            if let Some(locals) = &f.locals {
                let (args, rest): (Vec<_>, Vec<_>) = locals.iter().partition(|l| l.is_arg);
                for (title, group) in [("Arguments", args), ("Locals", rest)] {
                    if !group.is_empty() {
                        writeln!(out, "        {title}:")?;
                        for l in group {
                            writeln!(out, "            {} = {}", l.name, l.repr)?;
                        }
                    }
                }
            }
        }
        if let Some(why) = &t.truncated {
            writeln!(out, "    ... stack incomplete: {why}")?;
        }
    }
    Ok(())
}
