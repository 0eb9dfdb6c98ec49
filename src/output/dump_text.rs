//! `dump`'s text: one process's threads, each with its header (state,
//! wait, name), its frames and its asyncio tasks or greenlets, then the
//! summary of the waits. `dump` writes it, and `watch` writes it into an
//! incident for the other threads at the same moment.

use crate::stack::{FrameKind, LoopQueues, ProcessStacks, Task, ThreadStatus, ThreadTasks};
use std::collections::{HashMap, HashSet};
use std::io::Write;

/// The text rendering of one process; `positions` adds the column to each
/// Python frame's line where the version records it (1-based, as editors count).
pub(crate) fn write_text(
    out: &mut dyn Write,
    p: &ProcessStacks,
    positions: bool,
) -> std::io::Result<()> {
    match p.parent_pid {
        Some(pp) => writeln!(
            out,
            "\nProcess {} (child of {}): {}",
            p.pid, pp, p.command_line
        )?,
        None => writeln!(out, "Process {}: {}", p.pid, p.command_line)?,
    }
    writeln!(out, "Python v{} ({})", p.python_version, p.executable)?;
    if p.gc_collecting == Some(true) {
        writeln!(out, "Garbage collection running")?;
    }
    for w in &p.warnings {
        writeln!(out, "warning: {w}")?;
    }
    if !p.not_recorded.is_empty() {
        writeln!(out, "Not recorded in a core: {}", p.not_recorded.join(", "))?;
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
        if let Some(w) = t.wait.as_ref().filter(|w| !w.state.is_empty()) {
            status.push_str(", ");
            status.push_str(&w.state);
        }
        if t.interpreter < 0 {
            status.push_str(", not a Python thread");
        } else if several {
            status.push_str(&format!(", interpreter {}", t.interpreter));
        }
        // The header, built whole: the wait's text gets the room its words leave.
        let mut head = format!("Thread {id}");
        if let Some(n) = &t.name {
            head += &format!(" \"{n}\"");
            if t.name_source == Some(crate::stack::NameSource::Os) && t.interpreter >= 0 {
                head += " (OS name)";
            }
        }
        head += &format!(" ({status})");
        if let Some(e) = &t.native_entry {
            head += &format!(" in {e}");
        }
        if let Some(w) = &t.wait {
            let room = crate::wait::header_room(head.chars().count() + 2);
            let long = w.long_within(room);
            if !long.is_empty() {
                head += &format!(": {long}");
            }
        }
        writeln!(out, "\n{head}")?;
        if let Some(c) = p
            .crash
            .as_ref()
            .filter(|c| Some(c.thread) == t.os_thread_id)
        {
            writeln!(out, "    {}", c.line())?;
        }
        if let Some(w) = &t.wait {
            if !w.kernel_stack.is_empty() {
                writeln!(out, "    kernel: {}", w.kernel_stack.join(" ← "))?;
            }
        }
        for f in &t.frames {
            match f.kind {
                FrameKind::Python => {
                    let column = match f.position.and_then(|p| p.column) {
                        Some(c) if positions => format!(":{}", c + 1),
                        _ => String::new(),
                    };
                    writeln!(
                        out,
                        "    {} ({}:{}{column})",
                        f.function,
                        f.file.as_deref().unwrap_or("?"),
                        f.line.unwrap_or(0)
                    )?
                }
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
                    } else if f.tail_call == Some(true) {
                        " (tail call)"
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
        if let Some(tt) = &t.asyncio {
            // A thread with greenlets or Trio tasks but no asyncio event
            // loop has no asyncio task list.
            let others = !tt.greenlets.is_empty() || !tt.trio_tasks.is_empty();
            let none = tt.tasks.is_empty() && tt.loops.is_empty() && tt.tasks_left_out == 0;
            if !(none && others) {
                write_task_forest(
                    out,
                    "asyncio tasks",
                    &tt.tasks,
                    tt.tasks_left_out,
                    &tt.loops,
                )?;
            }
            if !tt.trio_tasks.is_empty() {
                write_task_forest(
                    out,
                    "trio tasks",
                    &tt.trio_tasks,
                    tt.trio_tasks_left_out,
                    &[],
                )?;
            }
            write_greenlets(out, tt)?;
        }
    }
    let waits: Vec<(u32, Option<&str>, &crate::wait::Wait)> = p
        .threads
        .iter()
        .filter_map(|t| Some((t.os_thread_id?, t.name.as_deref(), t.wait.as_ref()?)))
        .collect();
    let summary = crate::wait::summary(&waits);
    if !summary.is_empty() {
        writeln!(out)?;
        for line in summary {
            writeln!(out, "Summary: {line}")?;
        }
    }
    Ok(())
}

/// A thread's greenlets: the running one first, each with its stack
/// innermost first (the running one's is the thread's, above).
fn write_greenlets(out: &mut dyn Write, tt: &ThreadTasks) -> std::io::Result<()> {
    if tt.greenlets.is_empty() {
        return Ok(());
    }
    let n = tt.greenlets.len() as u64 + tt.greenlets_left_out;
    write!(out, "    greenlets ({n}")?;
    if tt.greenlets_left_out > 0 {
        write!(out, ", {} not shown", tt.greenlets_left_out)?;
    }
    writeln!(out, "):")?;
    for g in &tt.greenlets {
        write!(out, "      Greenlet")?;
        if let Some(n) = &g.name {
            write!(out, " \"{n}\"")?;
        }
        write!(out, " 0x{:x} ({}", g.id, g.type_name)?;
        if g.hub {
            write!(out, ", hub")?;
        }
        write!(out, ", {})", g.state)?;
        if let Some(p) = g.parent {
            write!(out, " parent 0x{p:x}")?;
        }
        if g.state == "running" {
            write!(out, ": the thread's stack above")?;
        } else if let Some(w) = &g.wait {
            write!(out, ": {}", object_wait(w))?;
        }
        writeln!(out)?;
        if g.state != "running" {
            for f in &g.frames {
                writeln!(
                    out,
                    "          {} ({}:{})",
                    f.function,
                    f.file.as_deref().unwrap_or("?"),
                    f.line.unwrap_or(0)
                )?;
            }
        }
        if let Some(why) = &g.truncated {
            writeln!(out, "          ... stack incomplete: {why}")?;
        }
    }
    Ok(())
}

/// What a suspended greenlet or waiting Trio task waits on, in words
/// (`waiting 2.0s on a timer, 8.0s left`): for how long where told, then a
/// socket's fd as a thread's wait names it, a timer's seconds left, else
/// the object and the local that refers to it.
fn object_wait(w: &crate::stack::ObjectWait) -> String {
    /// Most characters of one path or peer in the line.
    const ITEM: usize = 60;
    let on = match w.waited_s {
        Some(s) => format!("waiting {s:.1}s on"),
        None => "waiting on".to_string(),
    };
    let what = match (w.kind, &w.fd, w.seconds_left) {
        ("socket", Some(fd), _) => fd.long(ITEM),
        ("timer", _, Some(left)) if left > 0.0 => format!("a timer, {left:.1}s left"),
        ("timer", _, Some(_)) => "a timer, due".to_string(),
        ("timer", _, None) => "a timer".to_string(),
        _ => format!(
            "{} 0x{:x} (local {} in {})",
            w.type_name, w.object, w.local, w.function
        ),
    };
    format!("{on} {what}")
}

/// Tasks as a forest by awaiter (an asyncio loop's, with its queues) or by
/// nursery (Trio's): each task under the tasks that await it, its
/// coroutine stack innermost first; a task reached twice is named again but
/// not repeated, and a cycle is cut where it closes.
fn write_task_forest(
    out: &mut dyn Write,
    title: &str,
    tasks: &[Task],
    left_out: u64,
    loops: &[LoopQueues],
) -> std::io::Result<()> {
    let n = tasks.len() as u64 + left_out;
    write!(out, "    {title} ({n}")?;
    if left_out > 0 {
        write!(out, ", {left_out} not shown")?;
    }
    writeln!(out, "):")?;
    for lp in loops {
        let count = |n: Option<u64>, what: &str| match n {
            Some(1) => format!("1 {what}"),
            Some(n) => format!("{n} {what}s"),
            None => format!("? {what}s (unreadable)"),
        };
        write!(
            out,
            "      event loop 0x{:x} ({}): {}, {}",
            lp.id,
            lp.type_name,
            count(lp.ready, "ready callback"),
            count(lp.timers, "timer")
        )?;
        match lp.next_timer_seconds {
            Some(s) if s >= 0.0 => write!(out, ", next in {s:.3} s")?,
            Some(s) => write!(out, ", next {:.3} s overdue", -s)?,
            None => {}
        }
        writeln!(out)?;
    }
    let by_id: HashMap<u64, &Task> = tasks.iter().map(|t| (t.id, t)).collect();
    let mut children: HashMap<u64, Vec<&Task>> = HashMap::new();
    for t in tasks {
        for p in &t.awaited_by {
            if by_id.contains_key(p) {
                children.entry(*p).or_default().push(t);
            }
        }
    }
    let mut printed: HashSet<u64> = HashSet::new();
    let roots: Vec<&Task> = tasks
        .iter()
        .filter(|t| !t.awaited_by.iter().any(|p| by_id.contains_key(p)))
        .collect();
    let mut path = Vec::new();
    for r in roots {
        write_task(out, r, 0, &children, &mut printed, &mut path)?;
    }
    // Tasks only reachable through a cycle (each awaits another).
    for t in tasks {
        if !printed.contains(&t.id) {
            write_task(out, t, 0, &children, &mut printed, &mut path)?;
        }
    }
    Ok(())
}

fn write_task(
    out: &mut dyn Write,
    t: &Task,
    depth: usize,
    children: &HashMap<u64, Vec<&Task>>,
    printed: &mut HashSet<u64>,
    path: &mut Vec<u64>,
) -> std::io::Result<()> {
    let pad = "  ".repeat(depth.min(32) + 3);
    write!(
        out,
        "{pad}Task \"{}\" 0x{:x} ({})",
        t.name,
        t.id,
        t.state.as_str()
    )?;
    match t.found_in {
        Some("ready") => write!(out, " [in no registry: found in the loop's ready queue]")?,
        Some(_) => write!(out, " [in no registry: found through the loop's timers]")?,
        None => {}
    }
    if path.contains(&t.id) {
        return writeln!(out, " (awaits a task above: cycle)");
    }
    if !printed.insert(t.id) {
        return writeln!(out, " (shown above)");
    }
    if let Some(a) = &t.awaiting {
        write!(out, " awaiting {}", a.kind)?;
        match (a.kind.as_str(), a.task, a.seconds, &a.type_name) {
            (_, Some(id), _, _) => write!(out, " 0x{id:x}")?,
            (_, _, Some(s), _) if s >= 0.0 => write!(out, " ({s:.3} s left)")?,
            (_, _, Some(s), _) => write!(out, " ({:.3} s overdue)", -s)?,
            ("future", _, _, Some(ty)) => write!(out, " ({ty})")?,
            (_, _, _, Some(ty)) if ty != &a.kind => write!(out, " ({ty})")?,
            _ => {}
        }
    }
    if let Some(w) = &t.wait {
        write!(out, " {}", object_wait(w))?;
    }
    writeln!(out)?;
    for f in &t.frames {
        writeln!(
            out,
            "{pad}    {} ({}:{})",
            f.function,
            f.file.as_deref().unwrap_or("?"),
            f.line.unwrap_or(0)
        )?;
    }
    path.push(t.id);
    if let Some(cs) = children.get(&t.id) {
        for c in cs {
            write_task(out, c, depth + 1, children, printed, path)?;
        }
    }
    path.pop();
    Ok(())
}
