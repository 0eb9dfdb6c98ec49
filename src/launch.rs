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
use std::process::{Child, Command, ExitStatus};
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

pub struct Launched {
    child: Child,
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
    pub fn spawn(argv: &[String]) -> Result<Launched, Error> {
        let (prog, args) = argv
            .split_first()
            .ok_or_else(|| Error::Other("no command to launch".into()))?;
        let child = Command::new(prog)
            .args(args)
            .spawn()
            .map_err(|e| Error::Other(format!("cannot launch '{prog}': {e}")))?;
        CHILD_PID.store(child.id() as i32, Ordering::SeqCst);
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
        Ok(Launched { child })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Wait for the child to exit, up to `grace` (None: as long as it
    /// runs, until a stop signal arrives, then 3 s more); then end it
    /// (SIGTERM, and SIGKILL 2 s later) so that no launched program outlives
    /// the recording unseen. Returns its exit status.
    pub fn finish(mut self, grace: Option<Duration>) -> std::io::Result<ExitStatus> {
        let mut deadline = grace.map(|g| Instant::now() + g);
        let mut termed = false;
        let status = loop {
            if let Some(st) = self.child.try_wait()? {
                break st;
            }
            if deadline.is_none() && crate::pause::interrupted() {
                deadline = Some(Instant::now() + Duration::from_secs(3));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if termed {
                    let _ = self.child.kill();
                    break self.child.wait()?;
                }
                let _ = kill(Pid::from_raw(self.pid()), Signal::SIGTERM);
                termed = true;
                deadline = Some(Instant::now() + Duration::from_secs(2));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        CHILD_PID.store(0, Ordering::SeqCst);
        Ok(status)
    }
}

/// The exit code a shell would report for `st` (128 + signal when killed).
pub fn exit_code(st: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}
