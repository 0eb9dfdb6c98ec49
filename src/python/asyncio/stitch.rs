//! A sample's stacks joined with its asyncio tasks (`record`/`top
//! --async`): the running task's awaiters below its frames, and a stack of
//! its own for each waiting task.

use super::state::MAX_CHAIN;
use crate::stack::{Frame, Task, TaskState};
use std::collections::{HashMap, HashSet};

/// Attribute a thread's sample to its tasks (`record`/`top --async`): the
/// running task's frames, then its awaiter's suspended stack, and so on to
/// the outermost awaiter, replacing the event loop's own frames below the
/// running task. With `all`, each waiting task that awaits no other task
/// adds a stack of its own (named after the task), the same way, as does
/// each waiting Trio task (its own frames: Trio's tasks await no task). Returns
/// those added stacks; the thread's tasks are dropped from the sample.
pub(crate) fn stitch(
    t: &mut crate::stack::ThreadStack,
    all: bool,
) -> Vec<crate::stack::ThreadStack> {
    use crate::stack::FrameKind;
    let Some(tt) = t.asyncio.take() else {
        return Vec::new();
    };
    let by_id: HashMap<u64, &Task> = tt.tasks.iter().map(|k| (k.id, k)).collect();
    // Frames of the awaiters of `task`, innermost first, cycles cut.
    let awaiters = |task: &Task| -> Vec<Frame> {
        let mut out = Vec::new();
        let mut seen = HashSet::from([task.id]);
        let mut cur = task;
        while let Some(p) = cur.awaited_by.iter().find_map(|a| by_id.get(a)) {
            if !seen.insert(p.id) || seen.len() > MAX_CHAIN {
                break;
            }
            out.extend(p.frames.iter().cloned());
            cur = p;
        }
        out
    };
    // The running tasks, innermost first (an eager task's first step runs
    // inside its creator's): together their frames are the innermost Python
    // frames of the thread; below the outermost one go its awaiters.
    let runners: Vec<&Task> = tt
        .tasks
        .iter()
        .filter(|k| k.state == TaskState::Running)
        .collect();
    if let Some(outer) = runners.last() {
        let n: usize = runners.iter().map(|r| r.frames.len()).sum();
        let mut python = 0;
        let cut = t.frames.iter().position(|f| {
            python += (f.kind == FrameKind::Python) as usize;
            python == n
        });
        if let (Some(cut), true) = (cut, n > 0) {
            t.frames.truncate(cut + 1);
            t.frames.extend(awaiters(outer));
        }
    }
    if !all {
        return Vec::new();
    }
    let parents: HashSet<u64> = tt
        .tasks
        .iter()
        .flat_map(|k| k.awaited_by.iter().copied())
        .collect();
    // Trio's waiting tasks: each stack is the task's own (a parent does
    // not await its children's frames).
    let trio = tt
        .trio_tasks
        .iter()
        .filter(|k| k.state == TaskState::Pending && !k.frames.is_empty())
        .map(|k| (k, Vec::new()));
    tt.tasks
        .iter()
        .filter(|k| matches!(k.state, TaskState::Pending | TaskState::Cancelling))
        .filter(|k| !parents.contains(&k.id) && !k.frames.is_empty())
        .map(|k| (k, awaiters(k)))
        .chain(trio)
        .map(|(k, outer)| {
            let mut s = t.clone();
            // A stack of its own: its own ident (the task's id), so outputs
            // keyed by thread do not take it for the thread (nor rename the
            // thread after it); and not the thread's call, which the task
            // is not in.
            s.thread_id = k.id;
            s.wait = None;
            s.name = Some(format!("task {}", k.name));
            s.status = crate::stack::ThreadStatus::Idle;
            s.holds_gil = false;
            s.native_entry = None;
            s.truncated = None;
            s.frames = k.frames.clone();
            s.frames.extend(outer);
            s
        })
        .collect()
}
