//! Pausing one thread with ptrace so its registers and stack hold still.

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::error::Error;

/// A thread stopped with PTRACE_SEIZE + PTRACE_INTERRUPT; detached on drop,
/// on every path, so the target never stays stopped because of us.
pub struct PausedThread {
    tid: Pid,
    /// A signal that arrived while we stopped the thread: handed back on detach.
    pending: Option<Signal>,
}

impl PausedThread {
    pub fn pause(tid: i32) -> Result<PausedThread, Error> {
        let pid = Pid::from_raw(tid);
        ptrace::seize(pid, ptrace::Options::empty()).map_err(|e| match e {
            nix::errno::Errno::EPERM => Error::Permission { pid: tid },
            nix::errno::Errno::ESRCH => Error::NoSuchProcess(tid),
            errno => Error::Ptrace {
                op: "PTRACE_SEIZE of",
                tid,
                errno,
            },
        })?;
        // From here on, Drop detaches.
        let mut t = PausedThread {
            tid: pid,
            pending: None,
        };
        ptrace::interrupt(pid).map_err(|errno| Error::Ptrace {
            op: "PTRACE_INTERRUPT of",
            tid,
            errno,
        })?;
        loop {
            match waitpid(pid, Some(WaitPidFlag::__WALL)) {
                Ok(WaitStatus::PtraceEvent(..)) => return Ok(t),
                // A signal reached the thread first: it is stopped too; keep
                // the signal to re-inject it when we let go.
                Ok(WaitStatus::Stopped(_, sig)) => {
                    t.pending = Some(sig);
                    return Ok(t);
                }
                Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) => {
                    return Err(Error::ProcessExited { pid: tid })
                }
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(errno) => {
                    return Err(Error::Ptrace {
                        op: "waiting for",
                        tid,
                        errno,
                    })
                }
            }
        }
    }

    pub fn tid(&self) -> i32 {
        self.tid.as_raw()
    }
}

impl Drop for PausedThread {
    fn drop(&mut self) {
        // Fails only when the thread is gone, and then there is nothing to undo.
        let _ = ptrace::detach(self.tid, self.pending);
    }
}
