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
    #[error("what is at 0x{addr:x} does not read as {what}")]
    NotA { addr: u64, what: &'static str },
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
    /// `--engine bpf` cannot run: why (privilege, kernel, option, layout).
    #[error("the bpf engine cannot be used: {0}")]
    BpfUnavailable(String),
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
    /// Not a `source`: the message already says the memory error, and
    /// `{:#}` at the edge would say it twice.
    #[error("reading the target failed: {0}")]
    Memory(MemError),
    // The rules the options of dump, record and top follow (src/options.rs):
    // one variant, and so one message, per rule, whichever command broke it.
    #[error(
        "--native needs the threads paused to read their registers; it cannot be used with \
         --nonblocking"
    )]
    NativeNeedsPause,
    #[error("give either --pid or a command after --, not both")]
    PidAndCommand,
    #[error(
        "give a process: --pid PID, or for record and top a command to launch after --, or \
         for dump a core file with --core CORE"
    )]
    NoTarget,
    #[error("give either --pid or --core, not both")]
    PidAndCore,
    #[error(
        "--executable and --root say where a core's files are: give the core with --core CORE"
    )]
    CoreFilesWithoutCore,
    /// `max`: the highest rate, in samples per second.
    #[error(
        "'{given}' is not a sampling rate (samples per second above 0, like 100, 2.5k or \
         10khz; at most {}k)", .max / 1000.0
    )]
    NotARate { given: String, max: f64 },
    #[error("rate {given} is too high: at most {}k samples per second", .max / 1000.0)]
    RateTooHigh { given: String, max: f64 },
    /// `_Py_DebugOffsets` that cannot be used: no cookie, an unexpected
    /// version, a member missing or implausible (`why` says which).
    #[error("{why}")]
    BadDebugOffsets { why: String },
    /// A layout read through an unproven `_Py_DebugOffsets` that did not
    /// hold on the live interpreter (`why` says what did not).
    #[error("{why}")]
    ChainNotValid { why: String },
    #[error("no built-in layout table")]
    NoLayoutTable,
    #[error("thread {tid} is not stopped under ptrace by us (or it exited)")]
    NotStoppedByUs { tid: i32 },
    #[error("reading the registers of thread {tid}: {errno}")]
    Registers { tid: i32, errno: nix::errno::Errno },
    /// A core that holds no registers for a thread it lists.
    #[error("no registers of thread {tid} in the core")]
    NoSavedRegisters { tid: i32 },
    /// A ptrace request or wait for a thread that failed: `op` names it.
    #[error("{op} thread {tid}: {errno}")]
    Ptrace {
        op: &'static str,
        tid: i32,
        errno: nix::errno::Errno,
    },
    /// A sample whose native frames could not be unwound.
    #[error("native unwind failed: {0}")]
    NativeUnwind(Box<Error>),
    /// A sample whose native and Python frames did not match.
    #[error("native and Python frames did not match: showed the Python frames whole")]
    MergeMismatch,
    #[error("cannot launch '{prog}': {why}")]
    Launch { prog: String, why: String },
    /// A core file that cannot be read as one (`dump --core`).
    #[error("{path}: {problem}")]
    BadCore { path: String, problem: CoreProblem },
    /// `heap` on a version whose collector lists it has no table for.
    #[error("process {pid} runs Python {version}; pyinspect heap reads Python 3.8 to {newest} (older collectors keep their lists in another shape)")]
    HeapVersion {
        pid: i32,
        version: String,
        newest: String,
    },
    #[error("{0}")]
    Io(String),
}

impl Error {
    /// What went wrong, without the numbers (addresses, pids, thread ids,
    /// counts) that differ between occurrences: summaries count errors by
    /// it. One description per variant (and per memory error).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Error::NoSuchProcess(_) => "no such process",
            Error::ProcessExited { .. } => "the process exited while it was being read",
            Error::Permission { .. } => "permission denied",
            Error::Traced { .. } => "the process is traced by another tracer",
            Error::KernelThread(_) => "a kernel thread",
            Error::Zombie(_) => "the process has exited (a zombie)",
            Error::PidReused { .. } => "the pid was taken by another process",
            Error::Execed { .. } => "the process exec'd another program",
            Error::OtherUser { .. } => "a process of another user",
            Error::NotPython { .. } => "not a Python process",
            Error::BpfUnavailable(_) => "the bpf engine cannot be used",
            Error::UnsupportedVersion { .. } => "an unsupported Python version",
            Error::UnprovenLayout { .. } => "a Python version whose layout could not be proven",
            Error::UnknownVersion { .. } => "the Python version could not be determined",
            Error::NoInterpreter { .. } => "no interpreter state found",
            Error::NotInitialized { .. } => "the interpreter is starting or shutting down",
            Error::Memory(m) => match m {
                MemError::Unmapped { .. } => "reading the target failed: an address not readable",
                MemError::TooLarge { .. } => "reading the target failed: an object too large",
                MemError::Gone => "reading the target failed: the process exited",
                MemError::Permission => "reading the target failed: permission denied",
                MemError::Os { .. } => "reading the target failed: an OS error",
                MemError::NotA { .. } => "reading the target failed: an object of another shape",
            },
            Error::NativeNeedsPause => "--native with --nonblocking",
            Error::PidAndCommand => "both --pid and a command",
            Error::NoTarget => "no process given",
            Error::PidAndCore => "both --pid and --core",
            Error::BadCore { .. } => "a file that cannot be read as a core",
            Error::CoreFilesWithoutCore => "--executable or --root without --core",
            Error::NotARate { .. } => "not a sampling rate",
            Error::RateTooHigh { .. } => "a sampling rate too high",
            Error::BadDebugOffsets { .. } => "unusable _Py_DebugOffsets",
            Error::ChainNotValid { .. } => "a layout that did not hold on the interpreter",
            Error::NoLayoutTable => "no built-in layout table",
            Error::NotStoppedByUs { .. } => "a thread not stopped by us",
            Error::Registers { .. } => "reading a thread's registers failed",
            Error::NoSavedRegisters { .. } => "a thread without registers in the core",
            Error::Ptrace { .. } => "a ptrace request failed",
            Error::NativeUnwind(e) => match **e {
                Error::NotStoppedByUs { .. } => "native unwind failed: a thread not stopped by us",
                Error::Registers { .. } => {
                    "native unwind failed: reading a thread's registers failed"
                }
                _ => "native unwind failed",
            },
            Error::MergeMismatch => {
                "native and Python frames did not match: showed the Python frames whole"
            }
            Error::Launch { .. } => "a program could not be launched",
            Error::Io(_) => "an I/O error",
            Error::HeapVersion { .. } => "a Python version pyinspect heap does not read",
        }
    }

    /// Map a memory error seen while reading `pid` to what the user should hear.
    pub(crate) fn from_mem(pid: i32, e: MemError) -> Error {
        match e {
            MemError::Gone => Error::ProcessExited { pid },
            MemError::Permission => Error::Permission { pid },
            e => Error::Memory(e),
        }
    }
}

impl From<MemError> for Error {
    fn from(e: MemError) -> Error {
        Error::Memory(e)
    }
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chained_messages_do_not_repeat_the_cause() {
        let e: anyhow::Error = Error::Memory(MemError::Gone).into();
        assert_eq!(
            format!("{e:#}"),
            "reading the target failed: the process exited"
        );
        let e: anyhow::Error =
            Error::NativeUnwind(Box::new(Error::NotStoppedByUs { tid: 7 })).into();
        assert_eq!(
            format!("{e:#}"),
            "native unwind failed: thread 7 is not stopped under ptrace by us (or it exited)"
        );
    }
}
