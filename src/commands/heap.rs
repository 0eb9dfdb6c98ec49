//! `pyinspect heap`: a census of a process's Python objects by type (live,
//! or from a core file), and `--diff` of two JSON snapshots.

use crate::core::CoreFile;
use crate::cpython_layouts::gc;
use crate::error::Error;
use crate::heap::census::census;
use crate::heap::diff;
use crate::heap::output::{write_text, Snapshot};
use crate::pause::{self, PauseGuard};
use crate::python::gc::{tracked_objects, GcWhere};
use crate::python::process::PythonProcess;
use crate::target::{LiveProcess, SourceKind, TargetSource};
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Objects one census reads at most (the lists and what their containers
/// hold): about 40 bytes of pyinspect's memory each.
pub const MAX_OBJECTS: usize = 20_000_000;

/// tracemalloc's allocation sites a snapshot keeps, largest first.
const TRACEMALLOC_SITES: usize = 100;

pub struct HeapOptions {
    pub pid: i32,
    /// Read this core file rather than process `pid`.
    pub core: Option<super::dump::CoreArgs>,
    /// Compare two snapshots instead of reading a process.
    pub diff: Option<(PathBuf, PathBuf)>,
    pub json: bool,
    pub nonblocking: bool,
    /// Types shown in the text table (0: all).
    pub top: usize,
    /// Where the output goes ("-": standard output), written atomically.
    pub output: PathBuf,
    /// Take a census this often and print what grew since the last one,
    /// until interrupted or the target exits (a live process).
    pub every: Option<std::time::Duration>,
}

pub fn run(opts: &HeapOptions) -> anyhow::Result<i32> {
    if let Some((before, after)) = &opts.diff {
        return run_diff(opts, before, after);
    }
    if let Some(every) = opts.every {
        return run_every(opts, every);
    }
    let snapshot = match &opts.core {
        Some(core) => {
            let source = CoreFile::open(&core.path, &core.options)?;
            read(&source, false)?
        }
        None => {
            crate::privilege::check_target(opts.pid)?;
            let source = LiveProcess::new(opts.pid);
            let s = read(&source, opts.nonblocking);
            pause::release_lingering(std::time::Duration::from_millis(200));
            s?
        }
    };
    emit(opts, |w| {
        if opts.json {
            serde_json::to_writer(&mut *w, &snapshot)?;
            writeln!(w)?;
            Ok(())
        } else {
            write_text(&snapshot, opts.top, w).map_err(Into::into)
        }
    })?;
    Ok(0)
}

fn emit(
    opts: &HeapOptions,
    f: impl FnOnce(&mut dyn std::io::Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let out = crate::output::sink::OutputFile::create(&opts.output)?;
    out.write_with(|w| f(w).map_err(|e| format!("{e:#}")))
        .map_err(|e| anyhow::anyhow!(e))
}

/// One census of `source`, paused (a live process, unless `nonblocking`)
/// while the collector's lists and the objects are read.
fn read(source: &dyn TargetSource, nonblocking: bool) -> Result<Snapshot, Error> {
    let pid = source.pid();
    let process = PythonProcess::open(source)?;
    let version = process.version.clone();
    let Some(gc_layout) = gc::for_version(version.major, version.minor) else {
        let newest = gc::ALL.last().map(|l| format!("{}.{}", l.major, l.minor));
        return Err(Error::HeapVersion {
            pid,
            version: version.to_string(),
            newest: newest.unwrap_or_default(),
        });
    };
    let at = GcWhere {
        layout: &process.layout,
        gc: gc_layout,
        interp_head_ptr: process.interp_head_ptr,
    };
    let live = source.kind() == SourceKind::Live;
    let (guard, begun) = if live && !nonblocking {
        let (g, at) = pause_all(source)?;
        (Some(g), at)
    } else {
        (None, Instant::now())
    };
    let globals = crate::heap::holders::module_globals(
        source,
        &process.layout,
        gc_layout.tp_dict,
        process.interp_head_ptr,
    );
    let watched: foldhash::HashSet<u64> = globals.keys().copied().collect();
    let tracked = tracked_objects(source, &at, MAX_OBJECTS);
    let mut c = census(
        source,
        &process.layout,
        gc_layout,
        tracked,
        MAX_OBJECTS,
        &watched,
    );
    crate::heap::holders::name_holders(&globals, &mut c.containers);
    crate::heap::holders::name_holders(&globals, &mut c.globals);
    let mut reader = crate::python::reader::Reader::new(process);
    let locals = crate::heap::holders::frame_locals(source, &mut reader);
    crate::heap::holders::name_holders(&locals, &mut c.containers);
    let process = &reader.process;
    let memory = crate::heap::memsplit::split(source, process);
    let traces = crate::python::tracemalloc::read(source, process, TRACEMALLOC_SITES);
    let paused_ms = match &guard {
        Some(g) => {
            if !g.not_stopped().is_empty() {
                c.partial.push(format!(
                    "threads {:?} did not stop in time and ran during the census",
                    g.not_stopped()
                ));
            }
            begun.elapsed().as_secs_f64() * 1000.0
        }
        None => 0.0,
    };
    drop(guard);
    if live && nonblocking {
        c.partial
            .push("read without pausing (--nonblocking): counts may be torn".into());
    }
    let mut snapshot = Snapshot::new(pid, version.to_string(), paused_ms, live && nonblocking, c);
    snapshot.memory = Some(memory);
    match traces {
        Ok(t) => snapshot.tracemalloc = Some(t),
        Err(why) => snapshot.tracemalloc_unread = Some(why),
    }
    Ok(snapshot)
}

/// Attempts at a pause in which every thread stopped.
const PAUSE_ATTEMPTS: usize = 5;

/// Stop every thread of the process, and when it began. The pauser gives
/// each pause a few milliseconds for the threads to stop (right for a
/// stack sample); a census pauses for far longer anyway, so a pause that
/// left a thread running (a loaded machine) is let go and tried again.
fn pause_all(source: &dyn TargetSource) -> Result<(PauseGuard, Instant), Error> {
    let pid = source.pid();
    let mut attempt = 1;
    loop {
        let begun = Instant::now();
        let guard = PauseGuard::new(pid, &source.threads()?)?;
        if guard.not_stopped().is_empty() || attempt == PAUSE_ATTEMPTS {
            return Ok((guard, begun));
        }
        drop(guard);
        pause::release_lingering(std::time::Duration::from_millis(200));
        attempt += 1;
    }
}

fn load(path: &Path) -> anyhow::Result<Snapshot> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    match serde_json::from_slice(&bytes) {
        Ok(s) => Ok(s),
        Err(e) => bail!(
            "{} is not a `pyinspect heap --json` snapshot: {e}",
            path.display()
        ),
    }
}

fn run_diff(opts: &HeapOptions, before: &Path, after: &Path) -> anyhow::Result<i32> {
    let b = load(before)?;
    let a = load(after)?;
    let r = diff::report(&b, &a);
    emit(opts, |w| {
        if opts.json {
            serde_json::to_writer(&mut *w, &r)?;
            writeln!(w)?;
            Ok(())
        } else {
            diff::write_text(&b, &a, &r, opts.top, w).map_err(Into::into)
        }
    })?;
    Ok(0)
}

/// `--every`: a census now, then one each `every`, each followed by what
/// grew since the one before (`--diff`'s report), on standard output, until
/// Ctrl-C or the target's exit. With `--json`, one object a line: first
/// `{"elapsed_s": 0, "baseline": {…}}`, then `{"elapsed_s", "report"}`.
fn run_every(opts: &HeapOptions, every: std::time::Duration) -> anyhow::Result<i32> {
    use std::io::Write;
    crate::privilege::check_target(opts.pid)?;
    pause::install_signal_flag();
    let source = LiveProcess::new(opts.pid);
    let identity = crate::procfs::identity(opts.pid);
    let take = || -> anyhow::Result<Snapshot> {
        let s = read(&source, opts.nonblocking);
        pause::release_lingering(std::time::Duration::from_millis(200));
        Ok(s?)
    };
    let gone = || identity.is_none() || crate::procfs::identity(opts.pid) != identity;
    let started = Instant::now();
    let mut before = take()?;
    let stdout = std::io::stdout();
    if opts.json {
        let mut w = stdout.lock();
        let line = serde_json::json!({
            "elapsed_s": 0.0,
            "baseline": {"pid": before.pid, "python": before.python,
                         "objects": before.objects, "bytes": before.bytes},
        });
        serde_json::to_writer(&mut w, &line)?;
        writeln!(w)?;
        w.flush()?;
    } else {
        let mut w = stdout.lock();
        writeln!(
            w,
            "Process {} (Python {}): {} objects, {}; a census every {:.3?} (Ctrl-C stops)",
            before.pid,
            before.python,
            before.objects,
            crate::heap::output::human_bytes(before.bytes),
            every
        )?;
        w.flush()?;
    }
    let mut next = Instant::now() + every;
    loop {
        while Instant::now() < next {
            if pause::interrupted() {
                return Ok(0);
            }
            if gone() {
                eprintln!("pyinspect: process {} exited", opts.pid);
                return Ok(0);
            }
            std::thread::sleep(
                next.saturating_duration_since(Instant::now())
                    .min(std::time::Duration::from_millis(50)),
            );
        }
        next += every;
        let after = match take() {
            Ok(a) => a,
            Err(_) if gone() => {
                eprintln!("pyinspect: process {} exited", opts.pid);
                return Ok(0);
            }
            Err(e) => return Err(e),
        };
        let r = diff::report(&before, &after);
        let mut w = stdout.lock();
        let at = started.elapsed().as_secs_f64();
        if opts.json {
            let line = serde_json::json!({"elapsed_s": at, "report": r});
            serde_json::to_writer(&mut w, &line)?;
            writeln!(w)?;
        } else {
            writeln!(w)?;
            writeln!(w, "+{at:.1}s:")?;
            diff::write_text(&before, &after, &r, opts.top, &mut w)?;
        }
        w.flush()?;
        before = after;
    }
}
