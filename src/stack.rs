//! The one stack model that every output (text, JSON, flame graph,
//! speedscope, Chrome trace, pprof, top) is built from.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct ProcessStacks {
    pub pid: i32,
    pub command_line: String,
    pub python_version: String,
    pub executable: String,
    pub threads: Vec<ThreadStack>,
    /// Errors met while reading that did not stop the dump (torn reads in
    /// --nonblocking mode, an unreadable thread): shown, never hidden.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The parent's pid when this process was found through --subprocesses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_pid: Option<i32>,
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
    /// The asyncio tasks of the event loop this thread runs (`tasks`,
    /// `tasks_left_out` in JSON).
    #[serde(flatten)]
    pub asyncio: Option<ThreadTasks>,
}

/// The tasks of one event loop, as a forest by awaiter.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ThreadTasks {
    pub tasks: Vec<Task>,
    /// Tasks read but not shown (beyond the limit).
    #[serde(skip_serializing_if = "is_zero")]
    pub tasks_left_out: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Pending,
    Running,
    Cancelling,
    Cancelled,
    Done,
    /// Finished with an exception (or cancelled) that nobody retrieved.
    DoneNotRetrieved,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
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
pub struct Task {
    /// The task object's address (Python's `id(task)`).
    pub id: u64,
    pub name: String,
    pub state: TaskState,
    /// Ids of the tasks that await this one.
    pub awaited_by: Vec<u64>,
    /// What this task is suspended on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub awaiting: Option<Awaiting>,
    /// Its coroutine stack, innermost first.
    pub frames: Vec<Frame>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Awaiting {
    /// "task", "gather", "sleep", "queue", "lock", "event", "semaphore",
    /// "condition", "barrier" or "future".
    pub kind: String,
    /// The awaited task's id (kind "task").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<u64>,
    /// The awaited object's (or the future's) type name.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_name: Option<String>,
    /// The awaited object's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<u64>,
    /// Seconds until a sleep ends (negative: overdue).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
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
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Native frames: the library's file name and the module-relative offset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inlined: Option<bool>,
    /// "cuda" for frames in CUDA libraries (native frames only; null otherwise).
    #[serde(skip_serializing_if = "skip_tag")]
    pub tag: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locals: Option<Vec<Local>>,
}

fn skip_tag(t: &Option<Option<String>>) -> bool {
    t.is_none()
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Local {
    pub name: String,
    pub repr: String,
    pub is_arg: bool,
}

impl Frame {
    pub fn python(function: String, file: String, line: u32) -> Frame {
        Frame {
            kind: FrameKind::Python,
            function,
            file: Some(file),
            line: Some(line),
            module: None,
            offset: None,
            inlined: None,
            tag: None,
            locals: None,
        }
    }
}
