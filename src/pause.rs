//! Pausing threads of the target with ptrace, and always letting them go.
//!
//! Only the threads we must read consistently are stopped (the ones that run
//! Python), never the whole process: driver, BLAS and NCCL threads keep
//! running. This is the one ptrace pauser of pyinspect; its rules:
//!
//! - Only a task of the target is ever seized: every tid (which may come from
//!   the target's own, untrusted memory) is checked to be under
//!   `/proc/PID/task/` before the seize and again after it.
//! - Every wait for a stop is bounded ([`STOP_BUDGET`]), polled with
//!   `WNOHANG` for all threads at once. A thread that does not stop in time
//!   (uninterruptible sleep, a frozen cgroup, an exec in progress) is left out
//!   of the pause: it is read without its registers, and nobody waits for it.
//!   Such a thread is still seized with an interrupt pending, so it is
//!   watched ([`reap_lingering`]) and let go as soon as it stops or exits.
//! - A signal-delivery stop during the pause is answered at once by resuming
//!   the thread *with* that signal, so the signal is delivered exactly once
//!   (real-time signals included: the raw status is decoded here, since nix's
//!   `Signal` has no real-time signals). Signals that arrive once the thread
//!   sits in its interrupt stop stay queued by the kernel and are delivered
//!   after the detach. Nothing is kept to be "re-injected" at detach, which
//!   the kernel ignores from an interrupt stop.
//! - Threads that die while seized (an exec in another thread kills them) are
//!   reaped, so the exec waiting for them proceeds. Also while we are
//!   ourselves inside a seize: the exec holds the target's
//!   `cred_guard_mutex` until its dead threads are reaped, and a seize waits
//!   for that mutex (restarting after any signal), so neither would ever
//!   finish. A watchdog thread ([`seize`]) reaps the target's dead threads
//!   when a seize takes longer than [`SEIZE_STUCK`].
//! - Every stopped thread is detached when the guard drops, on every path;
//!   should we die outright, the kernel detaches the tracees itself.

use crate::error::{Error, Result};
use crate::procfs;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest wait for the threads of one pause to stop. Together with the read
/// that follows it this keeps every pause well under 20 ms.
pub(crate) const STOP_BUDGET: Duration = Duration::from_millis(10);
/// Signal-delivery stops answered per thread and pause before giving up on
/// it (under a signal storm the interrupt stop comes first after one).
const MAX_SIGNAL_STOPS: u32 = 32;
/// How long to poll for the stops before sleeping until they come. A running
/// thread stops within about 20 us of its interrupt (p99 of 2,000 pauses of
/// a busy Python thread here); sleeping instead costs a wake-up, which on a
/// virtual machine is about as much CPU as the whole rest of a sample, and
/// doubles the time the thread is held.
const STOP_SPIN: Duration = Duration::from_micros(50);
/// Polling pays only after this long without a pause: a CPU that worked
/// or slept only briefly wakes cheaply, and sleeping for the stop then costs
/// less than polling for it (at 10 kHz here: 45.4 us a tick sleeping against
/// 48.4 polling; at 1 kHz 63.8 polling against 67.4 sleeping).
const SPIN_AFTER: Duration = Duration::from_micros(500);
/// A pause that held its threads longer than this (from the first interrupt
/// to the last release) was likely descheduled: the pauses of the next
/// [`SLOW_PAUSE_MEMORY`] take the real-time class from their start.
const SLOW_PAUSE: Duration = Duration::from_millis(1);
const SLOW_PAUSE_MEMORY: Duration = Duration::from_secs(2);

thread_local! {
    /// Threads seized by this (tracer) thread that did not stop in time:
    /// (process, thread). Each still has an interrupt pending.
    static LINGERING: RefCell<Vec<(i32, i32)>> = const { RefCell::new(Vec::new()) };

}

/// While threads are held, or interrupted threads are still on their way
/// to a stop, the pausing thread runs under SCHED_FIFO (where it may): a
/// profiler descheduled by a busy machine would otherwise leave the target's
/// threads stopped for a whole scheduling period. Pauses are bounded and the
/// thread sleeps while it waits, so the real-time class is held briefly.
/// Counted per thread; the normal class comes back when the last one drops.
///
/// Taken only where it can matter (two system calls a pause otherwise): for
/// a pause that must sleep until its threads stop (a sleeping thread waits
/// for a CPU to wake on), and for every pause while pauses have lately been
/// slow (see [`SLOW_PAUSE`]). A pause whose threads stop while we spin
/// holds them for tens of microseconds, too short to be descheduled in.
struct Boost;

/// Set once the real-time class was refused (no CAP_SYS_NICE, no
/// RLIMIT_RTPRIO): not asked for again, at two system calls a pause.
static BOOST_REFUSED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static BOOSTS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// When the latest pause that held threads let them go.
    static LAST_RELEASE: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
    /// Until when pauses take the real-time class from their start (a
    /// recent pause was slow).
    static BOOST_UNTIL: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
    /// Held while LINGERING is not empty (for a second at most: a thread
    /// that takes longer sleeps in the kernel, and will not be quick to stop).
    static LINGER_BOOST: RefCell<Option<(Option<Boost>, Instant)>> = const { RefCell::new(None) };
}

impl Boost {
    fn new() -> Boost {
        if BOOSTS.with(|b| b.replace(b.get() + 1)) == 0 && !BOOST_REFUSED.load(Ordering::Relaxed) {
            let param = libc::sched_param { sched_priority: 1 };
            // SAFETY: sets the calling thread's policy; a valid sched_param.
            // Refused without the right: then nothing changes.
            let r = unsafe {
                libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
            };
            if r != 0 && errno() == libc::EPERM {
                BOOST_REFUSED.store(true, Ordering::Relaxed);
            }
        }
        Boost
    }
}

impl Drop for Boost {
    fn drop(&mut self) {
        if BOOSTS.with(|b| b.replace(b.get().saturating_sub(1))) == 1
            && !BOOST_REFUSED.load(Ordering::Relaxed)
        {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: as above, back to the normal class.
            unsafe {
                libc::sched_setscheduler(0, libc::SCHED_OTHER, &param);
            }
        }
    }
}

/// Keep the boost while threads linger; give it back once none does.
fn update_linger_boost() {
    let lingering = LINGERING.with(|l| !l.borrow().is_empty());
    LINGER_BOOST.with(|b| {
        let mut b = b.borrow_mut();
        match (lingering, b.as_mut()) {
            (false, _) => *b = None,
            (true, None) => *b = Some((Some(Boost::new()), Instant::now())),
            (true, Some((boost, since))) => {
                if since.elapsed() > Duration::from_secs(1) {
                    boost.take();
                }
            }
        }
    });
}

pub struct PauseGuard {
    pid: i32,
    /// Threads stopped in their interrupt (or group) stop.
    stopped: Vec<i32>,
    /// Threads interrupted and not yet waited for (see [`PauseGuard::wait`]).
    waiting: Vec<(i32, u32)>,
    /// Threads asked to stop that did not stop within the budget.
    not_stopped: Vec<i32>,
    /// Dropped after the threads are let go; none when nothing was to stop,
    /// or when every thread stopped while we spun (see [`Boost`]).
    _boost: Option<Boost>,
    /// When the first thread was interrupted.
    begun: Option<Instant>,
}

/// Whether pauses have lately been slow, so that this one takes the
/// real-time class from its start.
fn recently_slow(now: Instant) -> bool {
    BOOST_UNTIL.with(|b| b.get().is_some_and(|until| now < until))
}

enum Polled {
    /// In an interrupt or group stop: ours to read and detach.
    Stopped,
    /// Still running (or delivering a signal we just passed on).
    Waiting,
    /// Exited (and reaped), or no longer our tracee.
    Gone,
}

/// Our own pid, asked of the kernel once (it is asked at every pause).
fn own_pid() -> i32 {
    static PID: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *PID.get_or_init(|| std::process::id() as i32)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn ptrace_req(req: libc::c_uint, tid: i32, data: usize) -> std::result::Result<(), i32> {
    // SAFETY: PTRACE_SEIZE/INTERRUPT/CONT/DETACH take no pointers from us
    // (addr is 0, data is an option mask or a signal number).
    let r = unsafe {
        libc::ptrace(
            req,
            tid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            data as *mut libc::c_void,
        )
    };
    if r == -1 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// A seize that has not returned after this long may be waiting for an
/// exec of the target, which waits for its dead threads to be reaped.
const SEIZE_STUCK: Duration = Duration::from_millis(5);
/// How often the watchdog looks while seizes happen; it sleeps for good
/// (until the next seize) once none happened for [`WATCHDOG_IDLE`].
const WATCHDOG_TICK: Duration = Duration::from_millis(20);
const WATCHDOG_IDLE: Duration = Duration::from_secs(1);

/// The seizes in progress, for the watchdog, lock-free: a pausing thread
/// may run under SCHED_FIFO with threads held, and must never wait for the
/// watchdog. One slot per seize in progress (claimed for the seize: one
/// beyond [`SEIZE_SLOTS`] at once is not watched): the process being seized
/// (0: free, -1: being claimed) and when the seize began (nanoseconds since
/// [`epoch`]).
const SEIZE_SLOTS: usize = 64;
struct Slot {
    pid: std::sync::atomic::AtomicI32,
    since: std::sync::atomic::AtomicU64,
}
static SLOTS: [Slot; SEIZE_SLOTS] = [const {
    Slot {
        pid: std::sync::atomic::AtomicI32::new(0),
        since: std::sync::atomic::AtomicU64::new(0),
    }
}; SEIZE_SLOTS];
/// When the last seize ended (nanoseconds since [`epoch`]).
static LAST_SEIZE_END: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// The watchdog is parked (or about to): the next seize unparks it.
static WATCHDOG_PARKED: AtomicBool = AtomicBool::new(false);

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos_now() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// PTRACE_SEIZE of thread `tid` of process `pid`, watched: should it block
/// (on an exec of the target that waits for threads only their tracer can
/// reap: us), the watchdog reaps the target's dead threads so that the exec,
/// and then the seize, finish.
fn seize(pid: i32, tid: i32) -> std::result::Result<(), i32> {
    static WATCHDOG: std::sync::OnceLock<Option<std::thread::Thread>> = std::sync::OnceLock::new();
    let watchdog = WATCHDOG.get_or_init(|| {
        epoch();
        std::thread::Builder::new()
            .name("pause-watchdog".into())
            .spawn(watchdog)
            .ok()
            .map(|h| h.thread().clone())
    });
    let slot = SLOTS.iter().find(|s| {
        s.pid
            .compare_exchange(0, -1, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    });
    if let Some(slot) = slot {
        slot.since.store(nanos_now(), Ordering::SeqCst);
        slot.pid.store(pid, Ordering::SeqCst);
        if WATCHDOG_PARKED.swap(false, Ordering::SeqCst) {
            if let Some(w) = watchdog {
                w.unpark();
            }
        }
    }
    let r = ptrace_req(libc::PTRACE_SEIZE, tid, 0);
    if let Some(slot) = slot {
        slot.pid.store(0, Ordering::SeqCst);
        LAST_SEIZE_END.store(nanos_now(), Ordering::SeqCst);
    }
    r
}

/// The processes whose seizes have run for longer than [`SEIZE_STUCK`], and
/// whether any seize is running.
fn stuck_seizes() -> (Vec<i32>, bool) {
    let now = nanos_now();
    let stuck_ns = SEIZE_STUCK.as_nanos() as u64;
    let mut stuck = Vec::new();
    let mut any = false;
    for s in &SLOTS {
        let pid = s.pid.load(Ordering::SeqCst);
        if pid == 0 {
            continue;
        }
        any = true;
        if pid < 0 {
            continue;
        }
        if now.saturating_sub(s.since.load(Ordering::SeqCst)) >= stuck_ns && !stuck.contains(&pid) {
            stuck.push(pid);
        }
    }
    (stuck, any)
}

fn watchdog() {
    let idle_ns = WATCHDOG_IDLE.as_nanos() as u64;
    loop {
        let (stuck, any) = stuck_seizes();
        let idle = nanos_now().saturating_sub(LAST_SEIZE_END.load(Ordering::SeqCst)) > idle_ns;
        if !any && idle {
            WATCHDOG_PARKED.store(true, Ordering::SeqCst);
            // A seize that began before the flag was set did not unpark us.
            if stuck_seizes().1 {
                WATCHDOG_PARKED.store(false, Ordering::SeqCst);
            } else {
                // Unparked by the next seize (or spuriously: look again).
                std::thread::park();
            }
            continue;
        }
        for pid in stuck {
            reap_dead_threads(pid);
        }
        std::thread::sleep(WATCHDOG_TICK);
    }
}

/// Reap the dead (zombie) threads of `pid` that we trace. Only dead threads
/// are waited for: a wait on a live tracee would take the stop that its
/// pauser waits for. Any thread of ours may reap: a wait looks at the
/// tracees of every thread of the waiting thread group (without
/// `__WNOTHREAD`). A dead thread that is not our tracee gives ECHILD.
fn reap_dead_threads(pid: i32) {
    for tid in procfs::dead_threads(pid) {
        let mut status = 0;
        // SAFETY: waitpid writes only into `status`.
        unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
    }
}

/// Look at one seized thread and move it along: a signal-delivery stop is
/// resumed with its signal. `block`: wait for its next state change, until
/// the armed [`Deadline`] interrupts the wait (then `Waiting`).
fn poll(tid: i32, signal_stops: &mut u32, block: Option<&Deadline>) -> Polled {
    loop {
        let mut status = 0;
        let flags = libc::__WALL | if block.is_some() { 0 } else { libc::WNOHANG };
        // SAFETY: waitpid writes only into `status`.
        let r = unsafe { libc::waitpid(tid, &mut status, flags) };
        if r == 0 {
            return Polled::Waiting;
        }
        if r < 0 {
            match errno() {
                libc::EINTR => match block {
                    Some(d) if d.passed() => return Polled::Waiting,
                    _ => continue,
                },
                // ECHILD: not our tracee any more (gone, or renamed by an exec).
                _ => return Polled::Gone,
            }
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return Polled::Gone;
        }
        if !libc::WIFSTOPPED(status) {
            continue;
        }
        let sig = libc::WSTOPSIG(status);
        let event = (status >> 16) & 0xff;
        if event != 0 {
            // PTRACE_EVENT_STOP: our interrupt, or a group stop (SIGSTOP
            // and friends; the kernel restores it when we detach).
            return Polled::Stopped;
        }
        // A signal-delivery stop: the signal was on its way to the thread
        // before our interrupt. Deliver it now, once; our interrupt, still
        // pending, stops the thread right after.
        *signal_stops += 1;
        if ptrace_req(libc::PTRACE_CONT, tid, sig as usize).is_err() {
            return Polled::Gone;
        }
        if *signal_stops > MAX_SIGNAL_STOPS {
            return Polled::Waiting;
        }
        if block.is_none() {
            return Polled::Waiting;
        }
    }
}

/// One look at each of `waiting` without blocking: those stopped move to
/// `stopped`, those gone are dropped, the others stay.
fn collect_stops(waiting: &mut Vec<(i32, u32)>, stopped: &mut Vec<i32>) {
    waiting.retain_mut(|(tid, n)| match poll(*tid, n, None) {
        Polled::Stopped => {
            stopped.push(*tid);
            false
        }
        Polled::Gone => false,
        Polled::Waiting => true,
    });
}

/// A per-thread timer that interrupts a blocking `waitpid` at the end of the
/// stop budget (and every millisecond after, so a wait entered just after
/// the first expiry is interrupted too). Its signal has an empty handler
/// installed without `SA_RESTART`.
struct Deadline {
    at: Instant,
}

thread_local! {
    static TIMER: std::cell::Cell<Option<libc::timer_t>> = const { std::cell::Cell::new(None) };
}

fn timer_signal() -> libc::c_int {
    libc::SIGRTMIN() + 3
}

extern "C" fn on_timer(_: libc::c_int) {}

fn set_timer(after: Option<Duration>) -> bool {
    static HANDLER: std::sync::Once = std::sync::Once::new();
    HANDLER.call_once(|| {
        // SAFETY: installing an empty handler; no SA_RESTART, so that the
        // blocking waitpid returns EINTR.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_timer as *const () as usize;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(timer_signal(), &act, std::ptr::null_mut());
        }
    });
    TIMER.with(|t| {
        let timer = match t.get() {
            Some(timer) => timer,
            None => {
                // SAFETY: timer_create fills `timer`; the sigevent names this thread.
                let timer = unsafe {
                    let mut sev: libc::sigevent = std::mem::zeroed();
                    sev.sigev_notify = libc::SIGEV_THREAD_ID;
                    sev.sigev_signo = timer_signal();
                    sev.sigev_notify_thread_id = libc::gettid();
                    let mut timer: libc::timer_t = std::mem::zeroed();
                    if libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer) != 0 {
                        return false;
                    }
                    timer
                };
                t.set(Some(timer));
                timer
            }
        };
        let ts = |d: Duration| libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_value: ts(after.unwrap_or(Duration::ZERO)),
            it_interval: ts(if after.is_some() {
                Duration::from_millis(1)
            } else {
                Duration::ZERO
            }),
        };
        // SAFETY: a timer of ours, a valid itimerspec.
        unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) == 0 }
    })
}

impl Deadline {
    /// Arm the timer; None when no timer could be made (then waits poll).
    fn arm(budget: Duration) -> Option<Deadline> {
        let at = Instant::now() + budget;
        set_timer(Some(budget)).then_some(Deadline { at })
    }
    fn passed(&self) -> bool {
        Instant::now() >= self.at
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        set_timer(None);
    }
}

/// Let go of a stopped thread; one that died meanwhile is reaped instead (or
/// watched until it can be).
fn release(pid: i32, tid: i32) {
    if ptrace_req(libc::PTRACE_DETACH, tid, 0).is_ok() {
        return;
    }
    let mut n = 0;
    match poll(tid, &mut n, None) {
        Polled::Gone => {}
        Polled::Stopped => {
            let _ = ptrace_req(libc::PTRACE_DETACH, tid, 0);
        }
        Polled::Waiting => LINGERING.with(|l| l.borrow_mut().push((pid, tid))),
    }
}

/// Let go of the threads that did not stop in time and have stopped (or
/// exited) since. Cheap when there are none; the samplers call it while they
/// sleep, so a late stop is released within a millisecond or so.
pub(crate) fn reap_lingering() {
    reap();
    update_linger_boost();
}

fn reap() {
    LINGERING.with(|l| {
        let mut l = l.borrow_mut();
        if l.is_empty() {
            return;
        }
        let me = own_pid();
        let mut renamed = Vec::new();
        l.retain(|&(pid, tid)| {
            let mut n = 0;
            match poll(tid, &mut n, None) {
                Polled::Waiting => true,
                Polled::Stopped => {
                    let _ = ptrace_req(libc::PTRACE_DETACH, tid, 0);
                    false
                }
                Polled::Gone => {
                    // A thread that exec'd took its leader's tid and is
                    // still ours, with our interrupt pending.
                    if tid != pid && procfs::tracer_pid(pid, pid) == Some(me) {
                        renamed.push((pid, pid));
                    }
                    false
                }
            }
        });
        for r in renamed {
            if !l.contains(&r) {
                l.push(r);
            }
        }
    });
}

/// Whether threads that did not stop in time are still watched.
pub(crate) fn has_lingering() -> bool {
    LINGERING.with(|l| !l.borrow().is_empty())
}

/// Watch the lingering threads for up to `limit` (at the end of a command).
pub fn release_lingering(limit: Duration) {
    let end = Instant::now() + limit;
    while has_lingering() && Instant::now() < end {
        reap_lingering();
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn is_lingering(tid: i32) -> bool {
    LINGERING.with(|l| l.borrow().iter().any(|&(_, t)| t == tid))
}

/// Another tracer of thread `tid` of `pid` (not us): the error that names
/// it. The one check, before a pause and when a seize is refused.
pub(crate) fn other_tracer(pid: i32, tid: i32) -> Option<Error> {
    let me = std::process::id() as i32;
    match procfs::tracer_pid(pid, tid) {
        Some(tp) if tp > 0 && tp != me => Some(Error::Traced {
            pid,
            tracer: tp,
            tracer_command: procfs::comm(tp, tp).unwrap_or_else(|| "?".into()),
        }),
        _ => None,
    }
}

/// Why a seize was refused: another tracer (named), or permission.
fn seize_refused(pid: i32, tid: i32) -> Error {
    other_tracer(pid, tid).unwrap_or(Error::Permission { pid })
}

impl PauseGuard {
    /// Stop each of `tids` of process `pid`, within [`STOP_BUDGET`]. Threads
    /// that are not tasks of `pid`, exit meanwhile, or do not stop in time
    /// are left running (see [`not_stopped`](Self::not_stopped)). Another
    /// tracer or a permission failure is an error (and stops nothing).
    pub fn new(pid: i32, tids: &[i32]) -> Result<PauseGuard> {
        let mut g = PauseGuard::begin(pid);
        g.interrupt(tids)?;
        g.wait();
        Ok(g)
    }

    /// Seize and interrupt `tids` as [`PauseGuard::new`] does, and return
    /// before they stop: the caller works while the stops arrive, and then
    /// calls [`PauseGuard::wait_stops`] (or drops the guard, which waits
    /// for them and lets them go).
    pub(crate) fn interrupted(pid: i32, tids: &[i32]) -> Result<PauseGuard> {
        let mut g = PauseGuard::begin(pid);
        g.interrupt(tids)?;
        Ok(g)
    }

    /// Wait for the threads of [`PauseGuard::interrupted`] to stop, within
    /// the budget counted from their interrupts.
    pub(crate) fn wait_stops(&mut self) {
        self.wait();
    }

    /// A pause of process `pid` that holds nothing yet (see [`PauseGuard::new`]).
    fn begin(pid: i32) -> PauseGuard {
        reap_lingering();
        PauseGuard {
            pid,
            stopped: Vec::new(),
            waiting: Vec::new(),
            not_stopped: Vec::new(),
            _boost: None,
            begun: None,
        }
    }

    /// Seize and interrupt each of `tids` (checked to be tasks of the
    /// process), without waiting for them to stop. Another tracer or a
    /// permission failure is an error; the threads interrupted before it
    /// are let go when the guard drops.
    fn interrupt(&mut self, tids: &[i32]) -> Result<()> {
        let pid = self.pid;
        if !tids.is_empty() && self.begun.is_none() {
            let now = Instant::now();
            self.begun = Some(now);
            if recently_slow(now) {
                self._boost = Some(Boost::new());
            }
        }
        let me = own_pid();
        // Every thread is interrupted before any stop is waited for, so the
        // threads stop in parallel rather than one scheduling delay each.
        for &tid in tids {
            if tid <= 0 || !procfs::is_task(pid, tid) {
                continue;
            }
            if is_lingering(tid) {
                // Still on its way to an earlier stop: not paused this time.
                if !self.not_stopped.contains(&tid) {
                    self.not_stopped.push(tid);
                }
                continue;
            }
            if self.waiting.iter().any(|(t, _)| *t == tid) || self.stopped.contains(&tid) {
                continue;
            }
            match seize(pid, tid) {
                Ok(()) => {}
                Err(libc::ESRCH) => continue,
                Err(libc::EPERM) => {
                    if procfs::tracer_pid(pid, tid) == Some(me) {
                        continue;
                    }
                    return Err(seize_refused(pid, tid));
                }
                Err(e) => {
                    return Err(Error::Io(format!(
                        "ptrace seize of thread {tid} of process {pid}: {}",
                        std::io::Error::from_raw_os_error(e)
                    )));
                }
            }
            let foreign = !procfs::is_task(pid, tid);
            if ptrace_req(libc::PTRACE_INTERRUPT, tid, 0).is_err() {
                continue;
            }
            if foreign {
                // The tid went to another process between the two checks:
                // let go of it as soon as it stops, read nothing of it.
                LINGERING.with(|l| l.borrow_mut().push((pid, tid)));
                continue;
            }
            self.waiting.push((tid, 0));
        }
        Ok(())
    }

    /// Wait for the interrupted threads to stop, within [`STOP_BUDGET`] of
    /// the first interrupt; those that do not are left out of the pause.
    fn wait(&mut self) {
        let mut waiting = std::mem::take(&mut self.waiting);
        let begun = self.begun.unwrap_or_else(Instant::now);
        // Poll first: most threads stop sooner than a sleep and its wake-up
        // (unless the previous pause was just now, see SPIN_AFTER).
        let spin = match LAST_RELEASE.with(|l| l.get()) {
            Some(at) if begun.saturating_duration_since(at) < SPIN_AFTER => Duration::ZERO,
            _ => STOP_SPIN,
        };
        while !waiting.is_empty() && begun.elapsed() < spin {
            collect_stops(&mut waiting, &mut self.stopped);
        }
        if !waiting.is_empty() && self._boost.is_none() {
            self._boost = Some(Boost::new());
        }
        if !waiting.is_empty() {
            // Block on each thread in turn under one deadline: a thread
            // that stopped while we waited for another is collected at once.
            let left = STOP_BUDGET.saturating_sub(begun.elapsed());
            let deadline = (!left.is_zero()).then(|| Deadline::arm(left)).flatten();
            let mut i = 0;
            while i < waiting.len() {
                let (tid, n) = &mut waiting[i];
                let timed_out = deadline.as_ref().is_none_or(|d| d.passed());
                let block = if timed_out { None } else { deadline.as_ref() };
                match poll(*tid, n, block) {
                    Polled::Stopped => {
                        self.stopped.push(*tid);
                        waiting.swap_remove(i);
                    }
                    Polled::Gone => {
                        waiting.swap_remove(i);
                    }
                    Polled::Waiting if *n > MAX_SIGNAL_STOPS || block.is_some() => i += 1,
                    // No timer: poll until the budget is spent.
                    Polled::Waiting if begun.elapsed() < STOP_BUDGET => {
                        std::thread::sleep(Duration::from_micros(20))
                    }
                    Polled::Waiting => i += 1,
                }
            }
            drop(deadline);
            // Those left may have stopped since their turn came.
            collect_stops(&mut waiting, &mut self.stopped);
        }
        for (tid, _) in waiting {
            self.not_stopped.push(tid);
            LINGERING.with(|l| l.borrow_mut().push((self.pid, tid)));
        }
    }

    /// The threads stopped now: only these may have their registers read.
    pub fn tids(&self) -> impl Iterator<Item = i32> + '_ {
        self.stopped.iter().copied()
    }

    /// Instruction, stack and frame pointer of a thread stopped by this guard.
    pub(crate) fn registers(&self, tid: i32) -> Result<(u64, u64, u64)> {
        if !self.stopped.contains(&tid) {
            return Err(Error::NotStoppedByUs { tid });
        }
        let r = nix::sys::ptrace::getregs(nix::unistd::Pid::from_raw(tid))
            .map_err(|errno| Error::Registers { tid, errno })?;
        Ok((r.rip, r.rsp, r.rbp))
    }

    /// Threads asked to stop that did not within the budget: read running.
    pub(crate) fn not_stopped(&self) -> &[i32] {
        &self.not_stopped
    }
}

impl Drop for PauseGuard {
    fn drop(&mut self) {
        // Interrupted and never waited for (an error came first): wait as
        // a pause would, so that those that stop are let go now.
        if !self.waiting.is_empty() {
            self.wait();
        }
        let held = !self.stopped.is_empty();
        for tid in self.stopped.drain(..) {
            release(self.pid, tid);
        }
        if let (true, Some(begun)) = (held, self.begun) {
            let now = Instant::now();
            LAST_RELEASE.with(|l| l.set(Some(now)));
            if now.saturating_duration_since(begun) > SLOW_PAUSE {
                BOOST_UNTIL.with(|b| b.set(Some(now + SLOW_PAUSE_MEMORY)));
            }
        }
        reap();
        update_linger_boost();
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Route SIGINT, SIGTERM and SIGHUP to a flag, so that Ctrl-C never lands
/// while threads are stopped: the command finishes its read, lets the
/// threads go, and then looks at [`interrupted`].
pub(crate) fn install_signal_flag() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
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

pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Write};
    use std::process::{Command, Stdio};

    /// The exec-versus-seize deadlock, made to happen: a thread of the
    /// target that we hold is killed by an exec in another thread; the exec
    /// waits for us to reap it while holding the target's cred_guard_mutex,
    /// and our next seize waits for that mutex. The watchdog must reap the
    /// dead thread (and only dead threads) so that both go on.
    #[test]
    fn a_seize_blocked_by_an_exec_returns() {
        let script = r#"
import os, sys, threading, time
def spin():
    while True:
        time.sleep(0.001)
a = threading.Thread(target=spin, daemon=True)
a.start()
ids = []
def b():
    ids.append(threading.get_native_id())
    sys.stdin.readline()
    os.execv("/bin/sleep", ["sleep", "30"])
threading.Thread(target=b, daemon=True).start()
while not ids:
    time.sleep(0.01)
print(a.native_id, ids[0], flush=True)
while True:
    time.sleep(1)
"#;
        let mut child = Command::new("/usr/bin/python3")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ids: Vec<i32> = line
            .split_whitespace()
            .map(|t| t.parse().unwrap())
            .collect();
        let a = ids[0];

        // The reaper leaves a live tracee's stop to its pauser.
        let mut g = PauseGuard::interrupted(pid, &[a]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        reap_dead_threads(pid);
        g.wait_stops();
        assert_eq!(g.tids().collect::<Vec<_>>(), vec![a], "the stop was taken");

        // The other thread execs while we hold a: a dies and waits for us.
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        while procfs::thread_state(pid, a) != Some('Z') {
            assert!(Instant::now() < end, "the exec never started");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(seize(pid, pid));
        });
        let done = rx.recv_timeout(Duration::from_secs(5));
        // SAFETY: kill(2) of our own child (which also ends a stuck exec).
        unsafe { libc::kill(pid, libc::SIGKILL) };
        drop(g);
        let _ = child.wait();
        assert!(done.is_ok(), "the seize stayed blocked behind the exec");
    }
}
