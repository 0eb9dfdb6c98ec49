//! `pyinspect dump`: every thread's stack, once.

use crate::error::Error;
use crate::memory::ProcessMemory;
use crate::native_unwind::NativeFrame;
use crate::pause::{self, PauseGuard};
use crate::procfs;
use crate::python::native::NativeStacks;
use crate::python::process::PythonProcess;
use crate::python::reader::{ReadOptions, Reader};
use crate::stack::{FrameKind, ProcessStacks, ThreadStatus};
use std::collections::HashMap;
use std::io::Write;

pub struct DumpOptions {
    pub pid: i32,
    pub json: bool,
    pub locals: bool,
    pub nonblocking: bool,
    pub subprocesses: bool,
    pub native: bool,
    pub native_all: bool,
}

/// Read one process: pause its Python threads (unless nonblocking), read,
/// let them go.
pub fn read_process(pid: i32, opts: &DumpOptions) -> Result<ProcessStacks, Error> {
    let mem = ProcessMemory::new(pid);
    let process = PythonProcess::open(pid, &mem)?;
    let mut reader = Reader::new(process);
    let python_tids = reader.python_tids(&mem)?;
    let mut tids = python_tids.clone();
    if opts.native_all {
        tids = procfs::tasks(pid)?;
    }
    let mut native = if opts.native {
        Some(NativeStacks::new(pid, opts.native_all)?)
    } else {
        None
    };
    // Scheduler states first: a thread we have stopped would read as stopped.
    let states: HashMap<i32, char> = tids
        .iter()
        .filter_map(|&t| Some((t, procfs::thread_state(pid, t)?)))
        .collect();
    let guard = if opts.nonblocking {
        None
    } else {
        Some(PauseGuard::new(pid, &tids)?)
    };
    let read_opts = ReadOptions {
        locals: opts.locals,
        names: true,
        function_lines: false,
    };
    let snap = reader.snapshot(&mem, read_opts, &states);
    // Native stacks must be read while the threads are still stopped.
    let mut unwound: HashMap<i32, Vec<NativeFrame>> = HashMap::new();
    if let (Some(n), Some(g)) = (native.as_mut(), guard.as_ref()) {
        for tid in g.tids() {
            unwound.insert(tid, n.unwind(tid, &mem));
        }
    }
    drop(guard);
    let mut snap = snap?;
    let mut warnings = reader.process.warnings.clone();
    let mut foreign = Vec::new();
    if let Some(n) = native.as_mut() {
        for t in snap.iter_mut() {
            if let Some(frames) = t
                .stack
                .os_thread_id
                .and_then(|tid| unwound.get(&(tid as i32)))
            {
                n.merge(t, frames);
            }
        }
        for tid in tids.iter().filter(|t| !python_tids.contains(t)) {
            if let Some(frames) = unwound.get(tid) {
                foreign.push(n.foreign_thread(pid, *tid, states.get(tid).copied(), frames));
            }
        }
        warnings.extend(n.warnings());
    }
    // Oldest interpreter and oldest thread first (the lists are newest first).
    snap.reverse();
    snap.sort_by_key(|t| t.stack.interpreter);
    let p = &reader.process;
    Ok(ProcessStacks {
        pid,
        command_line: p.cmdline.clone(),
        python_version: p.version.to_string(),
        executable: p.exe.clone(),
        threads: snap.into_iter().map(|t| t.stack).chain(foreign).collect(),
        warnings,
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
    let several = p
        .threads
        .iter()
        .any(|t| t.interpreter != p.threads[0].interpreter);
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
        if several {
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
