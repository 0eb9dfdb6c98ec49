//! Library errors. The CLI edge turns these into one line for the user.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MemError {
    #[error("address 0x{addr:x} (+{len}) is not readable in the target")]
    Unmapped { addr: u64, len: usize },
    #[error("refusing to read {len} bytes at 0x{addr:x}: larger than any sane object")]
    TooLarge { addr: u64, len: usize },
    #[error("the process exited")]
    Gone,
    #[error("permission denied reading the target's memory")]
    Permission,
    #[error("reading 0x{addr:x} failed: errno {errno}")]
    Os { addr: u64, errno: i32 },
}

/// What is wrong with a file given as a core.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CoreProblem {
    #[error("not an ELF file, so not a core file")]
    NotElf,
    #[error("an ELF file of type {0}, not a core file (ELF type 4, ET_CORE)")]
    NotCore(String),
    #[error("a core of another architecture ({0}); pyinspect reads x86-64 cores only")]
    WrongArchitecture(String),
    #[error("truncated: {0} (the core was cut short while it was written, or copied in part)")]
    Truncated(String),
    #[error("corrupt: {0}")]
    Corrupt(String),
    #[error(
        "the program it was taken from, {exe}, was not found{where_}; pass the executable's \
         path with --executable PATH"
    )]
    ExecutableNotFound { exe: String, where_: String },
    #[error("{0}")]
    Unreadable(String),
}

#[derive(Debug, Error)]
pub enum Error {
    #[error("no process with pid {0}")]
    NoSuchProcess(i32),
    #[error("process {pid} exited while it was being read")]
    ProcessExited { pid: i32 },
    #[error(
        "permission denied attaching to process {pid}: run as root, or as its owner with \
         kernel.yama.ptrace_scope at 0 (at 1, CAP_SYS_PTRACE is needed: see README, \
         Permissions, for its risk); in Docker add --cap-add SYS_PTRACE"
    )]
    Permission { pid: i32 },
    #[error(
        "process {pid} is already traced by process {tracer} ({tracer_command}): a thread can \
         have one tracer only; detach that debugger or tracer first, or read without pausing \
         with --nonblocking"
    )]
    Traced {
        pid: i32,
        tracer: i32,
        tracer_command: String,
    },
    #[error("process {0} is a kernel thread, not a Python process")]
    KernelThread(i32),
    #[error("process {0} has exited (a zombie waiting for its parent to reap it)")]
    Zombie(i32),
    #[error("process {pid} exited and its pid was taken by another process; stopped following it")]
    PidReused { pid: i32 },
    #[error("process {pid} exec'd another program; stopped following it")]
    Execed { pid: i32 },
    #[error(
        "process {pid} belongs to uid {owner}, and pyinspect runs with a file capability for \
         uid {uid}: it only inspects processes of its invoking user (pass --allow-any-user to \
         go further; see README, Permissions)"
    )]
    OtherUser { pid: i32, owner: u32, uid: u32 },
    #[error("process {pid} ({exe}) is not a Python process: no libpython or Python interpreter found in its memory")]
    NotPython { pid: i32, exe: String },
    #[error("process {pid} runs Python {version}, which pyinspect does not support (supported: 2.7, 3.6 to {newest}, and later versions through their _Py_DebugOffsets)")]
    UnsupportedVersion {
        pid: i32,
        version: String,
        newest: String,
    },
    /// A version newer than every table, whose `_Py_DebugOffsets` could not
    /// be read or did not validate on the live interpreter.
    #[error("process {pid} runs Python {version}, newer than pyinspect's tables (newest {newest}), and its layout could not be proven: {why}")]
    UnprovenLayout {
        pid: i32,
        version: String,
        newest: String,
        why: String,
    },
    #[error("could not determine the Python version of process {pid} ({exe})")]
    UnknownVersion { pid: i32, exe: String },
    #[error("could not find the Python interpreter state in process {pid}: {why}")]
    NoInterpreter { pid: i32, why: String },
    #[error("the interpreter of process {pid} has not started yet, or is shutting down")]
    NotInitialized { pid: i32 },
    #[error("reading the target failed: {0}")]
    Memory(#[from] MemError),
    /// A core file that cannot be read as one (`dump --core`).
    #[error("{path}: {problem}")]
    BadCore { path: String, problem: CoreProblem },
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// Map a memory error seen while reading `pid` to what the user should hear.
    pub fn from_mem(pid: i32, e: MemError) -> Error {
        match e {
            MemError::Gone => Error::ProcessExited { pid },
            MemError::Permission => Error::Permission { pid },
            e => Error::Memory(e),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
