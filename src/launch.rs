//! Launching the program to profile (`pyinspect record -- python app.py`).
//!
//! The child inherits stdin, stdout and stderr and stays in our process
//! group, so a terminal's Ctrl-C reaches it directly. A signal sent to
//! pyinspect alone (`kill -INT`, `kill -TERM`) is forwarded to the child
//! from the signal handler, then handed on to the handler that tells the
//! sampling loop to stop.

use crate::error::Error;
use nix::sys::signal::{kill, sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::Pid;
use std::process::Command;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static CHILD_PID: AtomicI32 = AtomicI32::new(0);
/// The handler installed before ours (pause's stop flag), per signal.
static PREVIOUS: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];
const FORWARDED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

pub(crate) struct Launched {
    /// Our direct child, which runs the program and passes on its exit status.
    keeper: Pid,
    /// The program itself.
    pid: i32,
}

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // si_code > 0 means the kernel raised it (a terminal's Ctrl-C goes to the
    // whole foreground group, child included); <= 0 means someone sent it to
    // us alone with kill/tgkill/sigqueue.
    let pid = CHILD_PID.load(Ordering::SeqCst);
    if code <= 0 && pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(pid, sig);
        }
    }
    if let Some(i) = FORWARDED.iter().position(|s| *s as libc::c_int == sig) {
        let prev = PREVIOUS[i].load(Ordering::SeqCst);
        if prev != 0 {
            // SAFETY: stored from a SigHandler::Handler fn pointer below.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev) };
            f(sig);
        }
    }
}

impl Launched {
    /// Start `argv` (program and arguments). Call after
    /// [`crate::pause::install_signal_flag`]: forwarding chains to it.
    ///
    /// The program runs under a small keeper process of ours rather than as
    /// our own child: pausing a thread waits on it with `waitpid`, which
    /// would reap our own child's exit status should it exit meanwhile. The
    /// keeper reaps the program and exits with its status.
    pub(crate) fn spawn(argv: &[String]) -> Result<Launched, Error> {
        let (prog, args) = argv.split_first().ok_or(Error::NoTarget)?;
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::Io(format!("pipe: {e}")))?;
        // SAFETY: pyinspect has started no threads yet, so the child may do
        // anything the parent could.
        match unsafe { nix::unistd::fork() }.map_err(|e| Error::Io(format!("fork: {e}")))? {
            nix::unistd::ForkResult::Child => {
                drop(r);
                keeper(prog, args, std::fs::File::from(w))
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop(w);
                let mut msg = String::new();
                let _ = std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut msg);
                let pid = match msg.strip_prefix("pid ").and_then(|p| p.parse::<i32>().ok()) {
                    Some(p) => p,
                    None => {
                        let _ = nix::sys::wait::waitpid(child, None);
                        return Err(Error::Launch {
                            prog: prog.clone(),
                            why: msg,
                        });
                    }
                };
                CHILD_PID.store(pid, Ordering::SeqCst);
                install_forwarding();
                Ok(Launched { keeper: child, pid })
            }
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// Wait for the program to exit, or end it, as `how` says; a program
    /// that does not exit when asked gets SIGTERM, then SIGKILL, so that no
    /// launched program outlives the recording unseen.
    pub(crate) fn finish(self, how: Stop) -> Result<Finished, Error> {
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        let pid = Pid::from_raw(self.pid);
        let mut sent = Vec::new();
        let mut deadline = match how {
            Stop::Wait => None,
            Stop::Signalled { grace } => Some(Instant::now() + grace),
            Stop::Interrupt { grace } => {
                signal_tree(pid, Signal::SIGINT);
                sent.push(Signal::SIGINT);
                Some(Instant::now() + grace)
            }
        };
        let code = loop {
            // A thread of the program that did not stop within a pause is
            // still attached: once the program exits, it is a zombie that
            // its parent cannot reap until we, its tracer, have.
            crate::pause::reap_lingering();
            match waitpid(self.keeper, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, c)) => break c,
                Ok(WaitStatus::Signaled(_, s, _)) => break 128 + s as i32,
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(Error::Io(format!("waiting for the program: {e}"))),
            }
            if deadline.is_none() && crate::pause::interrupted() {
                // The program got the signal too (the terminal's group, or forwarded).
                deadline = Some(Instant::now() + SIGNALLED_GRACE);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                let sig = if sent.contains(&Signal::SIGTERM) {
                    Signal::SIGKILL
                } else {
                    Signal::SIGTERM
                };
                signal_tree(pid, sig);
                sent.push(sig);
                deadline = Some(Instant::now() + TERM_GRACE);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        CHILD_PID.store(0, Ordering::SeqCst);
        Ok(Finished {
            pid: self.pid,
            code,
            sent,
        })
    }
}

/// Signal the program and every process it started, as a terminal's Ctrl-C
/// reaches the whole foreground group (pyinspect is in that group too, so
/// the group itself cannot be signalled): a shell script's Python children
/// must not outlive it. Children first, so a parent cannot reap and
/// replace one in between.
fn signal_tree(pid: Pid, sig: Signal) {
    for d in crate::procfs::descendants(pid.as_raw()).iter().rev() {
        let _ = kill(Pid::from_raw(*d), sig);
    }
    let _ = kill(pid, sig);
}

/// Longest a launched program gets to exit after Ctrl-C before it is ended.
pub(crate) const CHILD_GRACE_ON_STOP: Duration = Duration::from_secs(3);
/// When sampling ends (its duration is over, or the program is not
/// Python): how long the launched program gets after SIGINT before SIGTERM.
pub(crate) const CHILD_GRACE_AT_END: Duration = Duration::from_secs(2);

impl Launched {
    /// End a program launched to be sampled once the sampling is over:
    /// `stopped` when a stop signal reached pyinspect (and the program),
    /// `by_duration` when the duration ran out (the program does not
    /// outlive it); otherwise it runs to its own end. Returns the exit code
    /// to report: `code` where it already says a failure or the program was
    /// ended by us (then how is said), else the program's own.
    pub(crate) fn end_sampling(
        self,
        stopped: bool,
        by_duration: bool,
        code: i32,
    ) -> Result<i32, Error> {
        let how = if stopped {
            Stop::Signalled {
                grace: CHILD_GRACE_ON_STOP,
            }
        } else if by_duration {
            Stop::Interrupt {
                grace: CHILD_GRACE_AT_END,
            }
        } else {
            Stop::Wait
        };
        let done = self.finish(how)?;
        if stopped || by_duration {
            eprintln!("pyinspect: {}", done.describe());
            Ok(code)
        } else if code == 0 {
            Ok(done.code)
        } else {
            Ok(code)
        }
    }
}

/// How [`Launched::finish`] ends the program.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop {
    /// Let it run to its end (until a stop signal reaches pyinspect, which
    /// the program gets too: then as [`Stop::Signalled`]).
    Wait,
    /// It has been sent a stop signal already: give it `grace` to exit.
    Signalled { grace: Duration },
    /// Send it SIGINT (Python's KeyboardInterrupt, so `finally` blocks and
    /// atexit handlers run) and give it `grace` to exit.
    Interrupt { grace: Duration },
}

/// Longest a program that got pyinspect's stop signal has before SIGTERM.
const SIGNALLED_GRACE: Duration = Duration::from_secs(3);
/// Between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// How a launched program ended.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub(crate) pid: i32,
    /// The exit code a shell would report (128 + signal when killed).
    pub(crate) code: i32,
    /// The signals pyinspect sent it to end it, in order.
    pub(crate) sent: Vec<Signal>,
}

impl Finished {
    /// One line for the summary: what was sent and how it ended.
    pub(crate) fn describe(&self) -> String {
        let how = if self.code > 128 && self.code < 128 + 65 {
            let name = Signal::try_from(self.code - 128)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {}", self.code - 128));
            format!("was ended by {name} (exit status {})", self.code)
        } else {
            format!("exited with status {}", self.code)
        };
        if self.sent.is_empty() {
            format!("the program (pid {}) {how}", self.pid)
        } else {
            let sent: Vec<&str> = self.sent.iter().map(|s| s.as_str()).collect();
            format!(
                "sent {} to the program (pid {}); it {how}",
                sent.join(", then "),
                self.pid
            )
        }
    }
}

fn install_forwarding() {
    let act = SigAction::new(
        SigHandler::SigAction(forward),
        SaFlags::SA_SIGINFO | SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for (i, s) in FORWARDED.iter().enumerate() {
        // SAFETY: the handler only calls async-signal-safe functions and
        // the previous handler, which stores to an atomic.
        if let Ok(old) = unsafe { sigaction(*s, &act) } {
            if let SigHandler::Handler(f) = old.handler() {
                PREVIOUS[i].store(f as usize, Ordering::SeqCst);
            }
        }
    }
}

/// The keeper: start the program, tell the parent its pid (or why it could
/// not start), wait for it and exit with its status. Never returns.
fn keeper(prog: &str, args: &[String], mut report: std::fs::File) -> ! {
    use std::io::Write;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    // The program gets the invoking user's rights, never pyinspect's
    // capabilities or set-uid (first: a change of ids clears the death signal).
    crate::privilege::drop_all();
    // Die with pyinspect rather than linger; the program itself runs on.
    // SAFETY: plain prctl call.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let mut cmd = Command::new(prog);
    cmd.args(args);
    // SAFETY: only resets signal dispositions (async-signal-safe) between
    // fork and exec; the program must not inherit the keeper's.
    unsafe {
        cmd.pre_exec(|| {
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(s, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    // The terminal's Ctrl-C reaches the whole group: the keeper outlives it
    // to pass on the program's status; pyinspect forwards what it gets.
    for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: setting a disposition to SIG_IGN.
        unsafe {
            libc::signal(s, libc::SIG_IGN);
        }
    }
    let code = match cmd.spawn() {
        Ok(mut child) => {
            let _ = write!(report, "pid {}", child.id());
            drop(report);
            match child.wait() {
                Ok(st) => match (st.code(), st.signal()) {
                    (Some(c), _) => c,
                    (None, Some(s)) => 128 + s,
                    _ => 1,
                },
                Err(_) => 1,
            }
        }
        Err(e) => {
            let _ = write!(report, "{e}");
            127
        }
    };
    // SAFETY: ends the keeper without running the parent's atexit handlers.
    unsafe { libc::_exit(code) }
}
