//! A blocked system call decoded: its name, the fd or path it is on, its
//! timeout, the fds of a select/poll set, from `/proc/PID/task/TID/syscall`'s
//! text or a core's saved registers. Pointer arguments are read through
//! [`Memory`], bounded. Pure: nothing here reads /proc.

use super::Timeout;
use crate::memory::{le_u64, Memory, MemoryExt};

/// Most fds listed from a select/poll set or an epoll set (select's own
/// limit, `FD_SETSIZE`); the rest are counted, not listed.
pub(crate) const MAX_SET_FDS: usize = 1024;
/// Longest path read from a syscall's string argument.
const MAX_PATH_ARG: usize = 4096;
/// Most kernel stack lines kept.
const MAX_KSTACK: usize = 32;

/// `/proc/PID/task/TID/syscall`, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyscallLine {
    Running,
    /// Blocked, but not in a system call (e.g. a page fault).
    NotInSyscall,
    Blocked {
        nr: i64,
        args: [u64; 6],
    },
}

impl SyscallLine {
    /// Whether the thread was off its CPU when the line was written: the
    /// kernel writes a call (or that there is none) only for a thread that
    /// has left its CPU, and "running" for one on a CPU or waiting for one.
    pub(crate) fn off_cpu(self) -> bool {
        !matches!(self, SyscallLine::Running)
    }
}

pub(crate) fn parse_syscall(text: &str) -> Option<SyscallLine> {
    let text = text.trim();
    if text == "running" {
        return Some(SyscallLine::Running);
    }
    let mut it = text.split_whitespace();
    let nr: i64 = it.next()?.parse().ok()?;
    if nr < 0 {
        return Some(SyscallLine::NotInSyscall);
    }
    let mut args = [0u64; 6];
    for a in args.iter_mut() {
        let s = it.next()?;
        *a = u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()?;
    }
    Some(SyscallLine::Blocked { nr, args })
}

/// The system call a thread was in, from its saved registers (a core's
/// `NT_PRSTATUS`): `orig_rax` is the call's number (-1 when the thread was
/// in none), rdi, rsi, rdx, r10, r8, r9 its arguments. As with
/// `/proc/PID/task/TID/syscall` of a stopped thread, a thread stopped in
/// the kernel with a call's number is in that call, whether it still
/// sleeps in it or was stopped on its way out ([`asleep_in_call`] tells).
pub(crate) fn call_from_registers(orig_rax: u64, args: [u64; 6]) -> SyscallLine {
    let nr = orig_rax as i64;
    if nr < 0 {
        return SyscallLine::NotInSyscall;
    }
    SyscallLine::Blocked { nr, args }
}

/// Whether a call whose return value so far is `rax` was asleep when a
/// signal stopped or killed its thread (gdb's attach, a SIGSTOP, the
/// kernel's dump): it returned one of the restart codes (or EINTR) and
/// waits to be restarted, or its timeout ran out while the thread stood
/// stopped (ETIMEDOUT: gdb lets a stopped process go on for a moment as it
/// attaches). Any other value: the call was done (woken, or it never
/// slept), and whether the thread slept is not known.
pub(crate) fn asleep_in_call(rax: u64) -> bool {
    // EINTR, ETIMEDOUT; ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND,
    // ERESTART_RESTARTBLOCK (the kernel's restart codes).
    matches!(-(rax as i64), 4 | 110 | 512 | 513 | 514 | 516)
}

/// Whether rax is what the kernel leaves when it restarts a call that was
/// interrupted asleep, before the call is entered again: the call's own
/// number back in rax, or `restart_syscall`'s (219) for a call that goes on
/// with its time left. The ip is then back on the `syscall` instruction,
/// which the caller checks: a call that returned that number is past it.
pub(crate) fn restart_pending(orig_rax: u64, rax: u64) -> bool {
    const RESTART_SYSCALL: u64 = 219;
    orig_rax != u64::MAX && (rax == orig_rax || rax == RESTART_SYSCALL)
}

/// x86-64 system call names, for the calls a thread is seen blocked in.
pub(crate) fn syscall_name(nr: i64) -> Option<&'static str> {
    Some(match nr {
        0 => "read",
        1 => "write",
        2 => "open",
        3 => "close",
        4 => "stat",
        5 => "fstat",
        6 => "lstat",
        7 => "poll",
        8 => "lseek",
        9 => "mmap",
        16 => "ioctl",
        17 => "pread64",
        18 => "pwrite64",
        19 => "readv",
        20 => "writev",
        21 => "access",
        23 => "select",
        24 => "sched_yield",
        34 => "pause",
        35 => "nanosleep",
        40 => "sendfile",
        42 => "connect",
        43 => "accept",
        44 => "sendto",
        45 => "recvfrom",
        46 => "sendmsg",
        47 => "recvmsg",
        48 => "shutdown",
        56 => "clone",
        57 => "fork",
        58 => "vfork",
        59 => "execve",
        61 => "wait4",
        72 => "fcntl",
        73 => "flock",
        74 => "fsync",
        75 => "fdatasync",
        76 => "truncate",
        77 => "ftruncate",
        87 => "unlink",
        89 => "readlink",
        128 => "rt_sigtimedwait",
        130 => "rt_sigsuspend",
        202 => "futex",
        208 => "io_getevents",
        217 => "getdents64",
        230 => "clock_nanosleep",
        232 => "epoll_wait",
        247 => "waitid",
        257 => "openat",
        262 => "newfstatat",
        270 => "pselect6",
        271 => "ppoll",
        275 => "splice",
        281 => "epoll_pwait",
        285 => "fallocate",
        288 => "accept4",
        295 => "preadv",
        296 => "pwritev",
        299 => "recvmmsg",
        307 => "sendmmsg",
        332 => "statx",
        426 => "io_uring_enter",
        435 => "clone3",
        439 => "faccessat2",
        441 => "epoll_pwait2",
        449 => "futex_waitv",
        _ => return None,
    })
}

/// Which argument of a call is the fd it blocks on.
fn fd_arg(name: &str) -> Option<usize> {
    match name {
        "read" | "write" | "pread64" | "pwrite64" | "readv" | "writev" | "preadv" | "pwritev"
        | "connect" | "accept" | "accept4" | "sendto" | "recvfrom" | "sendmsg" | "recvmsg"
        | "recvmmsg" | "sendmmsg" | "fsync" | "fdatasync" | "flock" | "fcntl" | "ioctl"
        | "shutdown" | "ftruncate" | "fallocate" | "getdents64" | "epoll_wait" | "epoll_pwait"
        | "epoll_pwait2" | "io_uring_enter" | "splice" | "lseek" | "fstat" => Some(0),
        "sendfile" => Some(1),
        _ => None,
    }
}

/// Which argument of a call is a path string.
fn path_arg(name: &str) -> Option<usize> {
    match name {
        "open" | "stat" | "lstat" | "unlink" | "readlink" | "execve" | "access" | "truncate" => {
            Some(0)
        }
        "openat" | "newfstatat" | "statx" | "faccessat2" => Some(1),
        _ => None,
    }
}

/// The names a short form uses: the family rather than the variant.
pub(super) fn short_name(name: &str) -> &str {
    match name {
        "recvfrom" | "recvmsg" | "recvmmsg" => "recv",
        "sendto" | "sendmsg" | "sendmmsg" => "send",
        "pread64" | "readv" | "preadv" => "read",
        "pwrite64" | "writev" | "pwritev" => "write",
        "accept4" => "accept",
        "nanosleep" | "clock_nanosleep" => "sleep",
        "pselect6" => "select",
        "ppoll" => "poll",
        "epoll_pwait" | "epoll_pwait2" => "epoll_wait",
        "waitid" => "wait4",
        n => n,
    }
}

/// Seconds of a `struct timespec` (or `timeval` with `nanos = false`) at `addr`.
fn read_time(mem: &dyn Memory, addr: u64, nanos: bool) -> Option<f64> {
    let mut b = [0u8; 16];
    mem.read(addr, &mut b).ok()?;
    let sec = le_u64(&b, 0) as i64;
    let frac = le_u64(&b, 8) as i64;
    if sec < 0 || frac < 0 {
        return None;
    }
    let div = if nanos { 1e9 } else { 1e6 };
    Some(sec as f64 + frac as f64 / div)
}

/// Seconds now on a clock the target can use (`clockid` as passed to the call).
pub(crate) fn clock_now(clockid: i32) -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own; an invalid id fails.
    let rc = unsafe { libc::clock_gettime(clockid, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}

fn relative(mem: &dyn Memory, addr: u64, nanos: bool) -> Option<Timeout> {
    if addr == 0 {
        return Some(Timeout::None);
    }
    read_time(mem, addr, nanos).map(|seconds| Timeout::Relative { seconds })
}

fn millis(v: u64) -> Timeout {
    let ms = v as u32 as i32;
    if ms < 0 {
        Timeout::None
    } else {
        Timeout::Relative {
            seconds: ms as f64 / 1000.0,
        }
    }
}

fn deadline(mem: &dyn Memory, addr: u64, clockid: i32) -> Option<Timeout> {
    if addr == 0 {
        return Some(Timeout::None);
    }
    let at = read_time(mem, addr, true)?;
    let now = clock_now(clockid)?;
    Some(Timeout::Deadline {
        seconds_left: at - now,
    })
}

/// The timeout a call asked for, reading pointer arguments from the target.
pub(crate) fn timeout_of(name: &str, a: &[u64; 6], mem: &dyn Memory) -> Option<Timeout> {
    const TIMER_ABSTIME: u64 = 1;
    match name {
        "nanosleep" => relative(mem, a[0], true),
        "clock_nanosleep" if a[1] & TIMER_ABSTIME != 0 => deadline(mem, a[2], a[0] as i32),
        "clock_nanosleep" => relative(mem, a[2], true),
        "select" => relative(mem, a[4], false),
        "pselect6" => relative(mem, a[4], true),
        "poll" => Some(millis(a[2])),
        "ppoll" => relative(mem, a[2], true),
        "epoll_wait" | "epoll_pwait" => Some(millis(a[3])),
        "epoll_pwait2" => relative(mem, a[3], true),
        "futex" => {
            let op = a[1] & 0x7f;
            let realtime = a[1] & 256 != 0;
            match op {
                0 => relative(mem, a[3], true), // FUTEX_WAIT
                9 => deadline(
                    // FUTEX_WAIT_BITSET
                    mem,
                    a[3],
                    if realtime {
                        libc::CLOCK_REALTIME
                    } else {
                        libc::CLOCK_MONOTONIC
                    },
                ),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The fds a select (three bitmaps of `nfds` bits) or poll (an array of
/// `struct pollfd`) waits on, bounded; and how many more the set holds
/// (poll entries past [`MAX_SET_FDS`], not read).
pub(crate) fn set_fds(name: &str, a: &[u64; 6], mem: &dyn Memory) -> (Vec<i32>, usize) {
    let mut fds = Vec::new();
    let mut more = 0;
    match name {
        "select" | "pselect6" => {
            // At most FD_SETSIZE (1024, MAX_SET_FDS) bits: every fd set is listed.
            let nfds = (a[0] as u32).min(1024) as usize;
            let bytes = nfds.div_ceil(64) * 8;
            let mut seen = [false; 1024];
            for set in [a[1], a[2], a[3]] {
                if set == 0 || bytes == 0 {
                    continue;
                }
                let Ok(bits) = mem.read_vec(set, bytes, 128) else {
                    continue;
                };
                for fd in 0..nfds {
                    if bits[fd / 8] & (1 << (fd % 8)) != 0 && !seen[fd] && fds.len() < MAX_SET_FDS {
                        seen[fd] = true;
                        fds.push(fd as i32);
                    }
                }
            }
            fds.sort_unstable();
        }
        "poll" | "ppoll" => {
            let asked = a[1] as u32 as usize;
            let n = asked.min(MAX_SET_FDS);
            if let Ok(raw) = mem.read_vec(a[0], n * 8, MAX_SET_FDS * 8) {
                let mut seen = foldhash::HashSet::default();
                for i in 0..n {
                    let fd = i32::from_le_bytes(raw[i * 8..i * 8 + 4].try_into().unwrap_or([0; 4]));
                    if fd >= 0 && seen.insert(fd) {
                        fds.push(fd);
                    }
                }
                more = asked - n;
            }
        }
        _ => {}
    }
    (fds, more)
}

/// A NUL-terminated string argument, bounded.
fn read_c_string(mem: &dyn Memory, addr: u64) -> Option<String> {
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < MAX_PATH_ARG {
        // Never read across a page end in one go: the next page may be unmapped.
        let room = (0x1000 - (at & 0xfff)) as usize;
        let mut chunk = vec![0u8; room.min(256)];
        // A short string near the end of what is mapped: halve the read.
        while mem.read(at, &mut chunk).is_err() {
            if chunk.len() == 1 {
                return (!out.is_empty()).then(|| String::from_utf8_lossy(&out).into_owned());
            }
            chunk.truncate(chunk.len() / 2);
        }
        if let Some(end) = chunk.iter().position(|b| *b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Some(String::from_utf8_lossy(&out).into_owned());
        }
        out.extend_from_slice(&chunk);
        at = at.wrapping_add(chunk.len() as u64);
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// What a blocked call's arguments say, before fds are described: which fd
/// (and set of fds), which path, which child, which futex, which timeout.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CallArgs {
    pub(crate) name: String,
    pub(crate) fd: Option<i32>,
    pub(crate) set: Vec<i32>,
    /// Entries of the set past [`MAX_SET_FDS`], not read.
    pub(crate) set_unlisted: usize,
    pub(crate) path: Option<String>,
    pub(crate) child: Option<i64>,
    pub(crate) futex: Option<u64>,
    pub(crate) timeout: Option<Timeout>,
}

/// Decode a blocked call. `full` also reads pointer arguments (timeouts,
/// fd sets, paths); without it only register arguments are used.
pub(crate) fn decode_call(nr: i64, a: &[u64; 6], mem: &dyn Memory, full: bool) -> CallArgs {
    let name = syscall_name(nr)
        .map(str::to_string)
        .unwrap_or_else(|| format!("syscall_{nr}"));
    let mut c = CallArgs {
        fd: fd_arg(&name).map(|i| a[i] as u32 as i32),
        ..Default::default()
    };
    match name.as_str() {
        "wait4" => c.child = Some(a[0] as u32 as i32 as i64),
        // waitid(idtype, id, …): P_ALL = 0, P_PID = 1.
        "waitid" => c.child = Some(if a[0] == 1 { a[1] as i64 } else { -1 }),
        "futex" => c.futex = Some(a[0]),
        _ => {}
    }
    if full {
        c.timeout = timeout_of(&name, a, mem);
        (c.set, c.set_unlisted) = set_fds(&name, a, mem);
        c.path = path_arg(&name).and_then(|i| read_c_string(mem, a[i]));
    }
    c.name = name;
    c
}

/// x86-64's `restart_syscall`: what a thread runs when a stop (ours, a
/// debugger's) interrupted a timed sleep that the kernel resumes through
/// its restart block. The registers still hold the first call's arguments.
pub(crate) const RESTART_SYSCALL: i64 = 219;

/// The call a thread in `restart_syscall` resumes, from the kernel function
/// it sleeps in (`wchan`, empty where none is known: a core records none)
/// and the arguments its registers still hold. The kernel resumes only
/// timed futex waits, poll with a timeout and the relative sleeps this way;
/// the first two say so in their wchan, a sleep's may be only the
/// system-call entry its restart is inlined into.
pub(crate) fn resumed_call(args: &[u64; 6], wchan: &str) -> i64 {
    if wchan.starts_with("futex") {
        return 202;
    }
    if wchan.starts_with("do_sys_poll")
        || wchan.starts_with("do_restart_poll")
        || wchan.starts_with("poll_schedule_timeout")
    {
        return 7;
    }
    // clock_nanosleep(clock id, flags, request, remain) against
    // nanosleep(request, remain): a clock id is small, flags 0 (a relative
    // sleep; an absolute one is not resumed this way); a request is a
    // pointer.
    if args[0] < 16 && args[1] <= 1 {
        return 230;
    }
    if wchan.is_empty() {
        // No wchan: the arguments' shape alone. A resumed futex wait is a
        // FUTEX_WAIT or FUTEX_WAIT_BITSET (private or not, on either
        // clock) of an aligned word, with a timeout pointer; a resumed
        // poll has a count of fds and a timeout of some milliseconds.
        let op = args[1] & !(FUTEX_PRIVATE | FUTEX_CLOCK_REALTIME);
        let word = args[0] >= PAGE && args[0].is_multiple_of(4);
        if word && matches!(op, 0 | 9) && args[3] >= PAGE {
            return 202;
        }
        if args[0] >= PAGE && (1..=MAX_POLL_FDS).contains(&args[1]) && (args[2] as i32) > 0 {
            return 7;
        }
    }
    35
}

const FUTEX_PRIVATE: u64 = 128;
const FUTEX_CLOCK_REALTIME: u64 = 256;
/// Below this an argument is a small number, not a pointer.
const PAGE: u64 = 4096;
/// More fds than one poll call is let take (RLIMIT_NOFILE's hard ceiling).
const MAX_POLL_FDS: u64 = 1 << 20;

/// Whether `nr` is one of the calls the kernel resumes through
/// `restart_syscall` (see [`resumed_call`]).
pub(crate) fn resumable(nr: i64) -> bool {
    matches!(nr, 7 | 35 | 202 | 230)
}

/// `/proc/PID/task/TID/wchan`: "0" (or empty) means none.
pub(crate) fn parse_wchan(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty() && t != "0").then(|| t.to_string())
}

/// `/proc/PID/task/TID/stack`: `[<0>] func+0x1c/0x50` lines → `func`.
pub(crate) fn parse_kernel_stack(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let f = l.split_once("] ").map(|(_, r)| r).unwrap_or(l).trim();
            let f = f.split('+').next()?.trim();
            (!f.is_empty()).then(|| f.to_string())
        })
        .take(MAX_KSTACK)
        .collect()
}
