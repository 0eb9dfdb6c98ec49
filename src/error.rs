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

#[derive(Debug, Error)]
pub enum Error {
    #[error("no process with pid {0}")]
    NoSuchProcess(i32),
    #[error("process {pid} exited while it was being read")]
    ProcessExited { pid: i32 },
    #[error(
        "permission denied attaching to process {pid}: run as root or give pyinspect \
         CAP_SYS_PTRACE (sudo setcap cap_sys_ptrace+ep $(which pyinspect)); if \
         /proc/sys/kernel/yama/ptrace_scope is above 0, set it to 0 or run as root; in Docker \
         add --cap-add SYS_PTRACE"
    )]
    Permission { pid: i32 },
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
