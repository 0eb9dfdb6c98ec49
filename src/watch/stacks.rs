//! What one thread's stack says on its own: where an event loop is in it,
//! whether the thread is at rest, the identities that tell a stack that
//! moved from one that did not, and how a frame is named. Pure functions of
//! a stack; a leaf that imports none of its siblings.

use crate::python::asyncio::is_run_once;
use crate::stack::{Frame, ThreadStack};
use std::hash::{Hash, Hasher};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LoopState {
    /// In its selector, waiting for events: not blocked.
    Selecting,
    /// Between callbacks (the loop's own bookkeeping).
    Between,
    /// Running a callback whose outermost own frame is `frames[i]`.
    Running(usize),
}

/// asyncio's (and uvloop's) own frames between the loop and a callback's code (with
/// `format_helpers.py`, where debug mode records where each handle and task
/// was made: a callback made only of asyncio's own code, such as the timer
/// that wakes `asyncio.sleep`, is the loop's bookkeeping, and is not named
/// after the helper; many of them in a row, each too short to be seen
/// apart, read as one long `extract_stack`).
fn asyncio_internal(f: &Frame) -> bool {
    [
        "asyncio/events.py",
        "asyncio/tasks.py",
        "asyncio/futures.py",
        "asyncio/base_events.py",
        "asyncio/format_helpers.py",
        // uvloop.run's wrapper coroutine, which awaits the program's own.
        "uvloop/__init__.py",
    ]
    .iter()
    .any(|s| f.file_ends_with(s))
}

/// Where an event loop's thread is, from its Python frames (innermost
/// first): in asyncio's `_run_once`, either in the selector or in a
/// callback. uvloop's loop has no Python frames of its own: a thread inside
/// `run_until_complete`/`run_forever`/`asyncio.run` without `_run_once` is
/// taken to be in a uvloop callback when any frame of its own is above it.
pub(super) fn loop_state(frames: &[Frame]) -> Option<LoopState> {
    let run_once = frames.iter().position(is_run_once);
    let (r, uv) = match run_once {
        Some(r) => (r, false),
        None => {
            let r = frames.iter().position(|f| {
                f.function.ends_with("run_until_complete")
                    || f.function.ends_with("run_forever")
                    || (f.function.ends_with("run") && f.file_ends_with("asyncio/runners.py"))
            })?;
            (r, true)
        }
    };
    if r == 0 {
        return Some(if uv {
            LoopState::Selecting
        } else {
            LoopState::Between
        });
    }
    let inner = &frames[..r];
    if inner
        .last()
        .is_some_and(|f| f.function.ends_with("select") && f.file_ends_with("selectors.py"))
    {
        return Some(LoopState::Selecting);
    }
    match inner.iter().rposition(|f| !asyncio_internal(f)) {
        Some(i) => Some(LoopState::Running(i)),
        None => Some(LoopState::Between),
    }
}

/// Waits that are a thread's normal rest rather than a stall: an event
/// loop's selector, a pool worker or consumer waiting for work, a thread
/// waiting for others to finish, a sleep, a listening socket. These never
/// make a stuck thread, and a process whose threads are all in them is idle,
/// not frozen.
pub(super) fn idle(t: &ThreadStack) -> bool {
    const SITES: &[(&str, &str)] = &[
        ("selectors.py", "select"),
        ("threading.py", "wait"),
        ("threading.py", "join"),
        ("threading.py", "_wait_for_tstate_lock"),
        ("queue.py", "get"),
        ("socketserver.py", "serve_forever"),
        ("concurrent/futures/thread.py", "_worker"),
    ];
    if t.frames.is_empty() {
        return true;
    }
    let at_site = t.frames.iter().any(|f| {
        SITES
            .iter()
            .any(|(file, func)| f.file_ends_with(file) && f.function.ends_with(func))
    });
    if at_site {
        return true;
    }
    if let Some(w) = &t.wait {
        if !w.off_cpu() {
            return false;
        }
        const RESTING: &[&str] = &[
            "nanosleep",
            "clock_nanosleep",
            "accept",
            "accept4",
            "epoll_wait",
            "epoll_pwait",
            "epoll_pwait2",
            "pause",
            "rt_sigsuspend",
        ];
        if w.syscall.as_deref().is_some_and(|s| RESTING.contains(&s)) {
            return true;
        }
    }
    false
}

/// Whether a thread read in full detail is at rest: [`idle`], or asleep in
/// a `select`/`poll` that watches no fd (`time.sleep` before 3.11).
pub(crate) fn at_rest(t: &ThreadStack) -> bool {
    let sleeping = t.wait.as_ref().is_some_and(|w| {
        matches!(
            w.syscall.as_deref(),
            Some("select" | "pselect6" | "poll" | "ppoll")
        ) && w.fd.is_none()
            && w.fds.is_empty()
    });
    sleeping || idle(t)
}

fn frame_hash<H: Hasher>(f: &Frame, h: &mut H) {
    f.function.hash(h);
    f.file.hash(h);
    f.line.hash(h);
}

/// A hasher for the identities compared from one tick to the next (stacks,
/// streak keys): fast, and the same within one run, which is all they need.
fn hasher() -> impl Hasher {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x5eed_1dea_7ab1_e5e5).build_hasher()
}

pub(super) fn stack_hash(frames: &[Frame]) -> u64 {
    let mut h = hasher();
    for f in frames {
        frame_hash(f, &mut h);
    }
    h.finish()
}

/// [`stack_hash`] with each Python frame's instruction: a loop on one line
/// (`while True: n += 1`) moves, a call that does not return (a regex in C,
/// a lock's acquire) does not.
pub(super) fn motion_hash(shape: u64, frames: &[Frame]) -> u64 {
    let mut h = hasher();
    shape.hash(&mut h);
    for f in frames {
        f.mark.map(|m| m.instr).hash(&mut h);
    }
    h.finish()
}

pub(super) fn hash_of(v: impl Hash) -> u64 {
    let mut h = hasher();
    v.hash(&mut h);
    h.finish()
}

/// The innermost Python frame.
pub(super) fn innermost_python(frames: &[Frame]) -> Option<&Frame> {
    frames
        .iter()
        .find(|f| f.kind == crate::stack::FrameKind::Python)
}

/// `function (file:line)` of a frame.
pub(crate) fn frame_label(f: &Frame) -> String {
    match (&f.file, f.line) {
        (Some(file), Some(line)) => format!("{} ({}:{})", f.function, file, line),
        (Some(file), None) => format!("{} ({})", f.function, file),
        _ => f.function.to_string(),
    }
}

/// Shared names of a frame, for building stacks in tests.
#[cfg(test)]
pub(super) fn py(function: &str, file: &str, line: u32) -> Frame {
    Frame::python(function, file, line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_states() {
        let run_once = py("BaseEventLoop._run_once", "/x/asyncio/base_events.py", 1);
        let select = py("EpollSelector.select", "/x/selectors.py", 2);
        let handle_run = || py("Handle._run", "/x/asyncio/events.py", 3);
        let handle = handle_run();
        let coro = py("handler", "app.py", 42);
        assert_eq!(
            loop_state(&[select, run_once.clone()]),
            Some(LoopState::Selecting)
        );
        assert_eq!(
            loop_state(&[coro, handle.clone(), run_once.clone()]),
            Some(LoopState::Running(0))
        );
        assert_eq!(
            loop_state(&[handle, run_once.clone()]),
            Some(LoopState::Between)
        );
        assert_eq!(loop_state(&[py("f", "a.py", 1)]), None);
        // A timer waking asyncio.sleep in debug mode: asyncio's own code
        // down to where debug mode records the new handle's origin.
        let helper = py("extract_stack", "/x/asyncio/format_helpers.py", 75);
        let init = py("Handle.__init__", "/x/asyncio/events.py", 40);
        let wake = py("_set_result_unless_cancelled", "/x/asyncio/futures.py", 9);
        assert_eq!(
            loop_state(&[helper, init, wake, handle_run(), run_once.clone()]),
            Some(LoopState::Between)
        );
    }
}
