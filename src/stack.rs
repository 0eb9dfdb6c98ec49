//! The one stack model that every output (text, JSON, flame graph,
//! speedscope, Chrome trace, pprof, top) is built from.

use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ProcessStacks {
    pub(crate) pid: i32,
    pub(crate) command_line: String,
    pub(crate) python_version: String,
    pub(crate) executable: String,
    /// Whether the garbage collector was running when the stacks were read
    /// (3.7+; null where the version does not say).
    pub(crate) gc_collecting: Option<bool>,
    pub(crate) threads: Vec<ThreadStack>,
    /// Errors met while reading that did not stop the dump (torn reads in
    /// --nonblocking mode, an unreadable thread): shown, never hidden.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) warnings: Vec<String>,
    /// The parent's pid when this process was found through --subprocesses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parent_pid: Option<i32>,
    /// A core's crash: the thread a fatal signal stopped (listed first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) crash: Option<CrashReport>,
    /// A core: the facts a live dump shows that a core does not record
    /// ([`NOT_IN_A_CORE`]), so that their absence is not read as "none".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) not_recorded: Vec<&'static str>,
}

/// What `dump --pid` shows that a core file cannot hold: each fd's
/// description (a core keeps no fd table: fds are named by number), the
/// scheduler state (a thread interrupted asleep in a system call reads as
/// S; one that ran or was stopped has none), a blocked thread's kernel
/// function and stack, and the kernel's names of threads `threading` does
/// not name.
pub(crate) const NOT_IN_A_CORE: &[&str] = &[
    "fd descriptions",
    "scheduler states",
    "wchan and kernel stacks",
    "OS thread names",
];

/// How a core's process crashed, as `dump --core` reports it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CrashReport {
    /// The crashed thread's OS id.
    pub(crate) thread: u32,
    /// SIGSEGV, SIGABRT…
    pub(crate) signal: String,
    /// The faulting address (hex), for the signals of a fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) address: Option<String>,
    /// Where the thread was: `module+0xOFFSET` of its instruction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) location: Option<String>,
    /// Its innermost Python frame: `function (file:line)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) python: Option<String>,
}

impl CrashReport {
    /// "crashed with SIGSEGV at 0x10 in libfoo.so+0x1234, called from
    /// model.forward (model.py:42)".
    pub(crate) fn line(&self) -> String {
        let mut s = format!("crashed with {}", self.signal);
        if let Some(a) = &self.address {
            s.push_str(&format!(" at {a}"));
        }
        if let Some(l) = &self.location {
            s.push_str(&format!(" in {l}"));
        }
        if let Some(p) = &self.python {
            s.push_str(&format!(", called from {p}"));
        }
        s
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadStatus {
    Active,
    Idle,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThreadStack {
    /// Python's ident (`threading.get_ident()`, the pthread_t).
    pub thread_id: u64,
    pub os_thread_id: Option<u32>,
    pub name: Option<String>,
    /// Where `name` comes from: the `threading` module, or the OS (the
    /// kernel's thread name, for threads `threading` does not know).
    pub name_source: Option<NameSource>,
    /// Interpreter id; 0 is the main interpreter.
    pub interpreter: i64,
    pub status: ThreadStatus,
    pub holds_gil: bool,
    /// Innermost first.
    pub frames: Vec<Frame>,
    /// Why the stack is incomplete, when it is (a torn read, a bound hit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
    /// Native entry point this thread is inside (with --native).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native_entry: Option<String>,
    /// Kernel state and what the thread waits for (dump; top and record
    /// in wall/offcpu modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<crate::wait::Wait>,
    /// The asyncio tasks of the event loop this thread runs (`tasks`,
    /// `tasks_left_out` in JSON).
    #[serde(flatten)]
    pub asyncio: Option<ThreadTasks>,
}

/// The tasks of one event loop, as a forest by awaiter.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ThreadTasks {
    pub(crate) tasks: Vec<Task>,
    /// Tasks read but not shown (beyond the limit).
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) tasks_left_out: u64,
    /// The queues of the event loops this thread runs (asyncio's own
    /// loops; uvloop's are not Python objects).
    #[serde(rename = "event_loops", skip_serializing_if = "Vec::is_empty")]
    pub(crate) loops: Vec<LoopQueues>,
    /// The greenlets (gevent, eventlet) of this thread: the running one
    /// first, then the suspended ones, then those not started or dead.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) greenlets: Vec<Greenlet>,
    /// Greenlets read but not shown (beyond the limit).
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) greenlets_left_out: u64,
    /// The tasks of the `trio.run` this thread runs, as a forest by
    /// nursery (a task's `awaited_by` is the task that opened its nursery).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) trio_tasks: Vec<Task>,
    /// Trio tasks read but not shown (beyond the limit).
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) trio_tasks_left_out: u64,
}

/// One greenlet, as read from the target's greenlet objects.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Greenlet {
    /// The greenlet object's address (Python's `id()`).
    pub(crate) id: u64,
    /// gevent's `Greenlet.name` when one was given, else the function it
    /// was spawned with; `main` for a thread's main greenlet.
    pub(crate) name: Option<String>,
    /// Its Python type's name (`greenlet`, `Greenlet`, `Hub`, ...).
    pub(crate) type_name: String,
    /// `running`, `suspended`, `not started` or `dead`.
    pub(crate) state: &'static str,
    /// The parent greenlet's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parent: Option<u64>,
    /// gevent's hub (its type is, or derives from, `gevent.hub.Hub`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) hub: bool,
    /// The thread's main greenlet.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) main: bool,
    /// Its Python frames, innermost first: a suspended greenlet's saved
    /// frames; the running one's are the thread's own.
    pub(crate) frames: Vec<Frame>,
    /// Why the frames are incomplete, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) truncated: Option<String>,
    /// What a suspended greenlet waits on, where its innermost frame tells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wait: Option<ObjectWait>,
}

/// What a suspended greenlet or a waiting Trio task waits on: an object
/// its innermost frames' locals refer to (directly, or through a socket
/// wrapper's `_sock`) whose type derives from one waited on: a socket, a
/// timer (gevent's, eventlet's), an event, queue, lock or greenlet of
/// gevent, eventlet or Trio (see `python::waits`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ObjectWait {
    /// `socket`, `timer`, `event` (any `AbstractLinkable`), `queue`,
    /// `lock` (an `RLock`) or `greenlet`.
    pub(crate) kind: &'static str,
    /// The object's Python type.
    #[serde(rename = "type")]
    pub(crate) type_name: String,
    /// The object's address (Python's `id()`).
    pub(crate) object: u64,
    /// The local that refers to it (`self._sock` for a gevent socket's).
    pub(crate) local: String,
    /// The function whose local it is (the greenlet's innermost).
    pub(crate) function: String,
    /// A socket's fd, described as a thread's wait describes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fd: Option<crate::wait::FdDesc>,
    /// A timer's deadline on the monotonic clock (libev's), as read.
    #[serde(skip)]
    pub(crate) deadline: Option<f64>,
    /// A started timer's seconds left when read (a live process only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) seconds_left: Option<f64>,
    /// A timer's whole length, where the code that set it keeps it (the
    /// `seconds` of gevent's or Trio's `sleep`, an eventlet `Timer`'s):
    /// its deadline less this is when the wait began.
    #[serde(skip)]
    pub(crate) duration: Option<f64>,
    /// Seconds since the wait began, when read (a live process only; a
    /// timer whose length is known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) waited_s: Option<f64>,
}

impl ObjectWait {
    /// When the wait began, on the clock of its deadline (the monotonic
    /// one): a timer's deadline less its length.
    pub(crate) fn began(&self) -> Option<f64> {
        let b = self.deadline? - self.duration?;
        b.is_finite().then_some(b)
    }
}

/// An event loop's own queues: `loop._ready` (callbacks due now) and
/// `loop._scheduled` (timers).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct LoopQueues {
    /// The loop object's address.
    pub(crate) id: u64,
    #[serde(rename = "type")]
    pub(crate) type_name: String,
    /// `len(loop._ready)`; `None` (null) when unreadable or implausible.
    pub(crate) ready: Option<u64>,
    /// `len(loop._scheduled)` (cancelled timers included, as asyncio keeps
    /// them); `None` (null) when unreadable or implausible.
    pub(crate) timers: Option<u64>,
    /// Seconds until the earliest timer not cancelled (negative: overdue).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) next_timer_seconds: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum TaskState {
    Pending,
    Running,
    Cancelling,
    Cancelled,
    Done,
    /// Finished with an exception (or cancelled) that nobody retrieved.
    DoneNotRetrieved,
}

impl TaskState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Cancelling => "cancelling",
            TaskState::Cancelled => "cancelled",
            TaskState::Done => "done",
            TaskState::DoneNotRetrieved => "done-not-retrieved",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Task {
    /// The task object's address (Python's `id(task)`).
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) state: TaskState,
    /// Ids of the tasks that await this one.
    pub(crate) awaited_by: Vec<u64>,
    /// What this task is suspended on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) awaiting: Option<Awaiting>,
    /// Its coroutine stack, innermost first.
    pub(crate) frames: Vec<Frame>,
    /// Set when no registry lists the task and it was found through a
    /// handle in its loop's queues: "ready" or "timers".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) found_in: Option<&'static str>,
    /// What a waiting Trio task waits on, where its innermost frames tell
    /// (asyncio's tasks say it in `awaiting`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wait: Option<ObjectWait>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Awaiting {
    /// "task", "gather", "sleep", "queue", "lock", "event", "semaphore",
    /// "condition", "barrier" or "future".
    pub(crate) kind: String,
    /// The awaited task's id (kind "task").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<u64>,
    /// The awaited object's (or the future's) type name.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub(crate) type_name: Option<String>,
    /// The awaited object's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) object: Option<u64>,
    /// Seconds until a sleep ends (negative: overdue).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) seconds: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NameSource {
    /// `threading.Thread.name`.
    Threading,
    /// `/proc/PID/task/TID/comm`: what the program (or, on 3.14+, Python
    /// itself) set with `pthread_setname_np`, else the process's name.
    Os,
    /// The thread pool whose worker loop the native stack starts in
    /// (`OpenMP worker (libgomp)`), for a thread Python does not know whose
    /// OS name is only the process's.
    Stack,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    Python,
    Native,
}

#[derive(Debug, Clone, Serialize)]
pub struct Frame {
    pub kind: FrameKind,
    /// Shared with the reader's code-object cache: a sample copies no name.
    pub function: Arc<str>,
    pub file: Option<Arc<str>>,
    pub line: Option<u32>,
    /// Native frames: the library's file name and the module-relative offset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    /// Native frames: the symbol as the library has it, when `function`
    /// shows it without a compiler suffix (`.constprop.0`, `.cold`...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// Native frames with a symbol: the whole demangled name (return type,
    /// template and function arguments, qualifiers) that `function` shows
    /// short (`at::native::add_out`); see `native_unwind::short_name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<Arc<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inlined: Option<bool>,
    /// Native frames: a function that tail-called the frame before it, so
    /// that it has no stack frame; rebuilt from DWARF call-site records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_call: Option<bool>,
    /// "cuda" for frames in CUDA libraries (native frames only; null otherwise).
    #[serde(skip_serializing_if = "skip_tag")]
    pub tag: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locals: Option<Vec<Local>>,
    /// Python frames: `end_line`, `column`, `end_column` of the instruction
    /// (3.11+ location tables; each null where the version has none).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
    /// Python frames read from the target: where, and how it was entered
    /// (for the native merge and asyncio). Never printed.
    #[serde(skip)]
    pub(crate) mark: Option<FrameMark>,
}

/// What the reader knows of a Python frame beyond what is printed. Only
/// the reader sets it, on frames whose names it has escaped already (see
/// `ThreadStack::escape_names`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameMark {
    /// Address of its `_PyInterpreterFrame` or `PyFrameObject`.
    pub(crate) addr: u64,
    /// First Python frame run by its own C eval-loop call (see
    /// `native_unwind::merge`).
    pub(crate) is_entry: bool,
    /// Where in its code it is (the instruction pointer or offset the line
    /// is read from): a loop on one line is at another instruction from
    /// one sample to the next, a call that does not return is not.
    pub(crate) instr: u64,
}

/// Where an instruction's source is, beyond its line: what 3.11+ location
/// tables add (`co_positions()`). Columns are 0-based UTF-8 byte offsets
/// into the line, as CPython counts them; None where there are none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Position {
    pub(crate) end_line: Option<u32>,
    pub(crate) column: Option<u32>,
    pub(crate) end_column: Option<u32>,
}

fn skip_tag(t: &Option<Option<String>>) -> bool {
    t.is_none()
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Local {
    pub(crate) name: String,
    pub(crate) repr: String,
    pub(crate) is_arg: bool,
    /// When the value was cut to the length limit: how many of its items
    /// (or characters, for a string) were left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) left_out: Option<u64>,
}

impl Frame {
    /// Its file's path ends with `suffix` (`asyncio/base_events.py`).
    pub(crate) fn file_ends_with(&self, suffix: &str) -> bool {
        self.file.as_deref().is_some_and(|x| x.ends_with(suffix))
    }

    /// The frame a sample taken during a garbage collection gets on top of
    /// the thread running it (record, top).
    pub(crate) fn gc_marker() -> Frame {
        Frame::label("[GC]")
    }

    /// A frame that is only a name: what a sample was doing beyond its
    /// stack (the collector, the wait of an off-CPU thread).
    pub(crate) fn label(name: impl Into<Arc<str>>) -> Frame {
        Frame {
            kind: FrameKind::Native,
            function: name.into(),
            symbol: None,
            signature: None,
            file: None,
            line: None,
            module: None,
            offset: None,
            inlined: None,
            tail_call: None,
            tag: None,
            locals: None,
            position: None,
            mark: None,
        }
    }

    pub fn python(function: impl Into<Arc<str>>, file: impl Into<Arc<str>>, line: u32) -> Frame {
        Frame {
            kind: FrameKind::Python,
            function: function.into(),
            file: Some(file.into()),
            line: Some(line),
            module: None,
            offset: None,
            symbol: None,
            signature: None,
            inlined: None,
            tail_call: None,
            tag: None,
            locals: None,
            position: Some(Position::default()),
            mark: None,
        }
    }
}

/// Whether a character of a target-controlled name must not reach a terminal
/// or a document raw: C0 and C1 controls (NUL, BEL, ESC…), DEL, and the two
/// noncharacters XML does not allow.
fn needs_escape(c: char) -> bool {
    c.is_control() || c == '\u{fffe}' || c == '\u{ffff}'
}

/// Whether every byte is printable ASCII (0x20..=0x7e), eight at a time.
fn plain_ascii(b: &[u8]) -> bool {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES * 0x80;
    // A byte below 0x20, or one that is 0x7f, or one with its top bit set.
    let bad = |x: u64| {
        let below = x.wrapping_sub(ONES * 0x20) & !x;
        let del = x ^ (ONES * 0x7f);
        let del = del.wrapping_sub(ONES) & !del;
        (below | del | x) & HIGH != 0
    };
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        if bad(u64::from_le_bytes(w)) {
            return false;
        }
    }
    chunks.remainder().iter().all(|c| (0x20..0x7f).contains(c))
}

/// `s` with control characters written as `\xNN` (or `\u{NNNN}`), so that no
/// name from the target can drive the user's terminal or break a format.
pub(crate) fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    // Printable ASCII (nearly every name) needs no decoding to be passed:
    // this runs on every string of every sample.
    if plain_ascii(s.as_bytes()) || !s.chars().any(needs_escape) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !needs_escape(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:04x}}}", c as u32));
        }
    }
    std::borrow::Cow::Owned(out)
}

fn escape_in_place(s: &mut String) {
    if let std::borrow::Cow::Owned(e) = escape_controls(s) {
        *s = e;
    }
}

/// [`escape_in_place`] for a shared name: replaced only when it must change.
fn escape_shared(s: &mut Arc<str>) {
    if let std::borrow::Cow::Owned(e) = escape_controls(s) {
        *s = e.into();
    }
}

impl ThreadStack {
    /// Escape every target-controlled string (see [`escape_controls`]).
    pub(crate) fn escape_names(&mut self) {
        let opt = |o: &mut Option<String>| {
            if let Some(s) = o.as_mut() {
                escape_in_place(s);
            }
        };
        opt(&mut self.name);
        opt(&mut self.truncated);
        opt(&mut self.native_entry);
        let frames = |frames: &mut Vec<Frame>| {
            for f in frames {
                // Python frames the reader made from a code object carry its
                // names, escaped when the code object was cached.
                if f.mark.is_none() {
                    escape_shared(&mut f.function);
                    if let Some(file) = f.file.as_mut() {
                        escape_shared(file);
                    }
                    opt(&mut f.module);
                    if let Some(sig) = f.signature.as_mut() {
                        escape_shared(sig);
                    }
                }
                for l in f.locals.iter_mut().flatten() {
                    escape_in_place(&mut l.name);
                    escape_in_place(&mut l.repr);
                }
            }
        };
        frames(&mut self.frames);
        if let Some(w) = &mut self.wait {
            // Paths, peers' commands, the GIL holder's and locks' names.
            opt(&mut w.path);
            if let Some(g) = &mut w.gil {
                opt(&mut g.holder_name);
            }
            if let Some(l) = &mut w.lock {
                escape_in_place(&mut l.name);
                escape_in_place(&mut l.function);
                escape_in_place(&mut l.file);
            }
            for d in w.fd.iter_mut().chain(w.fds.iter_mut()) {
                opt(&mut d.target);
                d.peers.iter_mut().for_each(escape_in_place);
            }
        }
        if let Some(a) = &mut self.asyncio {
            for t in &mut a.tasks {
                escape_in_place(&mut t.name);
                frames(&mut t.frames);
                if let Some(aw) = &mut t.awaiting {
                    opt(&mut aw.type_name);
                }
            }
            for lp in &mut a.loops {
                escape_in_place(&mut lp.type_name);
            }
            for k in &mut a.trio_tasks {
                escape_in_place(&mut k.name);
                frames(&mut k.frames);
            }
            for g in &mut a.greenlets {
                opt(&mut g.name);
                escape_in_place(&mut g.type_name);
                frames(&mut g.frames);
                if let Some(w) = &mut g.wait {
                    escape_in_place(&mut w.type_name);
                    escape_in_place(&mut w.local);
                    escape_in_place(&mut w.function);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped() {
        assert_eq!(escape_controls("plain ünï"), "plain ünï");
        assert_eq!(
            escape_controls("a\0b\x07\x1b[2J\u{9b}"),
            "a\\x00b\\x07\\x1b[2J\\x9b"
        );
        assert_eq!(escape_controls("\u{fffe}"), "\\u{fffe}");
    }

    #[test]
    fn plain_ascii_is_told_eight_bytes_at_a_time() {
        // Every byte value, at every position of a word and in the tail.
        for b in 0u8..=255 {
            for at in 0..20 {
                let mut v = vec![b'a'; 20];
                v[at] = b;
                assert_eq!(plain_ascii(&v), (0x20..0x7f).contains(&b), "{b:#x} at {at}");
            }
        }
        assert!(plain_ascii(b""));
        assert!(plain_ascii(b" ~ready (threads.py:52)"));
    }
}
