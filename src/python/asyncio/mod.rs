//! asyncio tasks: which task awaits what, read from the target's memory.
//!
//! Where the tasks are:
//! - `asyncio.tasks._all_tasks` (≤3.11) or `_scheduled_tasks` (3.12+),
//!   WeakSets, and `_eager_tasks` (3.12+), a set: found through
//!   `sys.modules`, for C and Python tasks alike;
//! - 3.14+: C tasks are on per-thread lists (`tstate->asyncio_tasks_head`,
//!   and the interpreter's for threads that ended), whose offsets come from
//!   the `_asyncio` module's `AsyncioDebug` section, checked against the table.
//!
//! Each task is a C `TaskObj` (offsets from [`crate::cpython_layouts::asyncio`])
//! or a Python-level `Task` (attributes in its `__dict__`), told apart by the
//! type's MRO. Who awaits whom: a task awaiting a task has it as its
//! `fut_waiter`; 3.14's tasks record their awaiters (`task_awaited_by`);
//! before, a task's done-callbacks lead (through closures, bound methods,
//! `functools.partial`, instance dicts and deques, a bounded search) to the
//! future its awaiter waits on (`gather`, `shield`, `wait_for`,
//! `as_completed`) or to the `TaskGroup` whose `_parent_task` awaits it.
//!
//! Everything read is bounded; a racing target gives fewer tasks or
//! frames, never a panic or an unbounded walk.
//!
//! The rooms: [`registry`] finds the tasks (the registries, `_asyncio`'s
//! module state, 3.14's per-thread lists); [`read`] is one snapshot's read,
//! step by step; [`tasks`] reads a task's struct or `__dict__`; [`awaiters`]
//! finds who awaits whom and what each task awaits; [`chain`] builds a
//! thread's tasks with their coroutine stacks; [`loops`] reads the event
//! loops' queues (and counts their turns); [`objects`] holds the generic
//! object readers; [`stitch`] joins a sample's tasks into its stacks.
//! [`state`] holds the reader itself, what it keeps between snapshots, and
//! the types and limits the other rooms share.

mod awaiters;
mod chain;
mod loops;
mod objects;
mod read;
mod registry;
mod state;
mod stitch;
mod tasks;
#[cfg(test)]
mod tests;
mod trio;

pub(crate) use loops::{is_run_once, loop_frame, LoopTurns};
pub(crate) use state::{AsyncRead, AsyncioReader, TasksByThread, AUTO_MAX_TASKS, MAX_TASKS};
pub(crate) use stitch::stitch;

/// Where the target may carry `_asyncio`'s `AsyncioDebug` section: the
/// `_asyncio` extension module, or the interpreter's binary when the module
/// is built in; each as (file, section's address in the target).
pub(crate) fn debug_sections(
    source: &dyn crate::target::TargetSource,
) -> Vec<(String, crate::elf::Range)> {
    let Ok(maps) = source.maps() else {
        return Vec::new();
    };
    let mut paths: Vec<&str> = Vec::new();
    for m in &maps {
        let name = m.path.rsplit('/').next().unwrap_or("");
        let candidate = name.starts_with("_asyncio")
            || name.starts_with("libpython3")
            || name.starts_with("python3");
        if m.is_file() && candidate && !paths.contains(&m.path.as_str()) {
            paths.push(&m.path);
        }
    }
    let mut out = Vec::new();
    for p in paths {
        let file_maps: Vec<&crate::mapping::MapEntry> =
            maps.iter().filter(|m| m.path == p).collect();
        let Some(first) = file_maps.iter().min_by_key(|m| m.offset) else {
            continue;
        };
        let Some(file) = source.mapped_file(first) else {
            continue;
        };
        if let Some(sec) = crate::elf::load(&file, &file_maps, &[])
            .ok()
            .and_then(|i| i.asyncio_debug)
        {
            out.push((p.to_string(), sec));
        }
    }
    out
}
