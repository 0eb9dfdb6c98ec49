//! Pausing threads of the target with ptrace, and always letting them go.
//!
//! Only the threads we must read consistently are stopped (the ones that run
//! Python), never the whole process: driver, BLAS and NCCL threads keep
//! running. Every stopped thread is detached when the guard drops, on every
//! path including a panic of ours; and should we die outright, the kernel
//! detaches and restarts the tracees itself (they are never in group-stop).

use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::sync::atomic::{AtomicBool, Ordering};

pub struct PauseGuard {
    /// Stopped threads, with a signal to hand back when one arrived while we held it.
    stopped: Vec<(Pid, Option<Signal>)>,
}

impl PauseGuard {
    /// Stop each of `tids` of process `pid`. Threads that exit meanwhile are
    /// skipped; a permission failure is an error (and stops nothing).
    pub fn new(pid: i32, tids: &[i32]) -> Result<PauseGuard> {
        let mut g = PauseGuard {
            stopped: Vec::with_capacity(tids.len()),
        };
        // Interrupt every thread first and only then wait for the stops, so
        // the threads stop in parallel rather than one scheduling delay each.
        let mut interrupted = Vec::with_capacity(tids.len());
        for &tid in tids {
            let t = Pid::from_raw(tid);
            match ptrace::seize(t, ptrace::Options::empty()) {
                Ok(()) => {}
                Err(Errno::ESRCH) => continue,
                Err(Errno::EPERM) => {
                    if interrupted.is_empty() {
                        return Err(Error::Permission { pid });
                    }
                    // Already traced by someone else (a debugger): read it running.
                    continue;
                }
                Err(e) => {
                    // Let go of the ones already seized before reporting.
                    for t in interrupted {
                        g.stopped.push((t, wait_stopped(t).flatten()));
                    }
                    return Err(Error::Io(format!("ptrace seize of thread {tid}: {e}")));
                }
            }
            if ptrace::interrupt(t).is_err() {
                let _ = ptrace::detach(t, None);
                continue;
            }
            interrupted.push(t);
        }
        for t in interrupted {
            // None: the thread exited while we waited, nothing to detach.
            if let Some(sig) = wait_stopped(t) {
                g.stopped.push((t, sig));
            }
        }
        Ok(g)
    }

    pub fn tids(&self) -> impl Iterator<Item = i32> + '_ {
        self.stopped.iter().map(|(p, _)| p.as_raw())
    }
}

/// Wait for the interrupt stop. Returns the signal to re-inject (if a signal
/// stop came first), or None when the thread is gone.
fn wait_stopped(t: Pid) -> Option<Option<Signal>> {
    let mut pending = None;
    // A thread reports at most a few stops before our interrupt lands; bound it.
    for _ in 0..16 {
        match waitpid(t, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::PtraceEvent(..)) => return Some(pending),
            Ok(WaitStatus::Stopped(_, sig)) => {
                // A signal-delivery stop: keep the signal for detach, and
                // wait for our interrupt, which is still to come.
                pending = Some(sig);
                if ptrace::cont(t, None).is_err() || ptrace::interrupt(t).is_err() {
                    return None;
                }
            }
            Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) => return None,
            Ok(_) => return Some(pending),
            Err(Errno::EINTR) => continue,
            Err(_) => return None,
        }
    }
    Some(pending)
}

impl Drop for PauseGuard {
    fn drop(&mut self) {
        for (t, sig) in self.stopped.drain(..) {
            let _ = ptrace::detach(t, sig);
        }
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Route SIGINT, SIGTERM and SIGHUP to a flag, so that Ctrl-C never lands
/// while threads are stopped: the command finishes its read, lets the
/// threads go, and then looks at [`interrupted`].
pub fn install_signal_flag() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            let _ = sigaction(s, &act);
        }
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
