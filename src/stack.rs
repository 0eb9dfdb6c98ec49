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
    /// Native frames: the symbol as the library has it, when `function`
    /// shows it without a compiler suffix (`.constprop.0`, `.cold`...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
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
            symbol: None,
            inlined: None,
            tag: None,
            locals: None,
        }
    }
}
