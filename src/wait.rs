//! What a thread is waiting for: the one wait model behind dump's text and
//! JSON, top's wait column and record's off-CPU leaf frames.
//!
//! Everything here is pure: the kernel's text (`/proc/PID/task/TID/syscall`,
//! `/proc/PID/net/*`, fdinfo, fd link targets, wchan, kernel stacks) comes in
//! as strings read by [`crate::procfs`], and pointer arguments are read
//! through [`Memory`], bounded. A thread that changes state between the reads
//! is shown as what was read.

use crate::memory::{le_u64, Memory, MemoryExt};
use serde::Serialize;

/// Most fds listed from a select/poll set or an epoll set (select's own
/// limit, `FD_SETSIZE`); the rest are counted, not listed.
pub(crate) const MAX_SET_FDS: usize = 1024;
/// Most characters of a wait's text form in a dump's thread header, with
/// the thread's own words before it: a set of fds grows with the target,
/// and past this it is summarised (JSON keeps every fd).
pub(crate) const HEADER_MAX: usize = 200;
/// Least room a wait's text is given, however long the words before it.
const WAIT_TEXT_MIN: usize = 80;
/// Most peers of a pipe or socket named in a text form.
const TEXT_PEERS: usize = 2;
/// Most examples a summarised group of fds names.
const SUMMARY_EXAMPLES: usize = 3;
/// Longest path or address a summarised text form shows (clipped in the middle).
const TEXT_ITEM_MAX: usize = 48;
/// Longest path read from a syscall's string argument.
const MAX_PATH_ARG: usize = 4096;
/// Most kernel stack lines kept.
const MAX_KSTACK: usize = 32;

/// What a thread is doing in the kernel, as read at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Wait {
    /// Scheduler state letter (R, S, D, T, t, Z, I); empty (and left out
    /// of JSON) for a core's thread that its registers show in a call but
    /// not asleep in it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) state: String,
    /// The system call it is blocked in, by name ("syscall_N" when the
    /// number is not one pyinspect names); absent while running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) syscall: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) syscall_nr: Option<i64>,
    /// The fd the call is on (read, recv, accept, epoll_wait's epoll fd…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fd: Option<FdDesc>,
    /// The fds of a select/poll set, or those an epoll set watches.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) fds: Vec<FdDesc>,
    /// How many more fds the set holds than `fds` lists (past [`MAX_SET_FDS`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) fds_unlisted: usize,
    /// A path argument (openat, stat, execve…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<Timeout>,
    /// The futex word's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) futex: Option<String>,
    /// Waiting for the GIL (a futex inside the GIL's mutex or condition variable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) gil: Option<GilWait>,
    /// Waiting for a lock that a Python frame's local refers to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lock: Option<LockWait>,
    /// wait4/waitid: the child waited for (-1: any child).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) child: Option<i64>,
    /// Kernel function the thread sleeps in (shown for D state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wchan: Option<String>,
    /// Kernel stack, innermost first (D state, when readable: root only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) kernel_stack: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(crate) enum Timeout {
    /// No timeout: waits until woken.
    None,
    /// A relative timeout as asked, in seconds.
    Relative { seconds: f64 },
    /// An absolute deadline, given as the seconds left when read.
    Deadline { seconds_left: f64 },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct GilWait {
    /// Kernel tid of the thread holding the GIL, when one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LockWait {
    /// The local's name, and the frame it is a local of.
    pub(crate) name: String,
    /// Python type of the object (`_thread.lock`, `_thread.RLock`), or
    /// `threading.Condition` for the waiter lock of `Condition.wait`.
    pub(crate) kind: String,
    pub(crate) address: String,
    pub(crate) function: String,
    pub(crate) file: String,
    pub(crate) line: u32,
}

/// One file descriptor, described.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct FdDesc {
    pub(crate) fd: i32,
    /// file, fifo, pipe, tcp, tcp6, udp, udp6, unix, socket, eventfd, epoll,
    /// timerfd, signalfd, anon, other, or closed; `unrecorded` for an fd of
    /// a core, which keeps no fd table.
    pub(crate) kind: String,
    /// The link target (`socket:[123]`, `pipe:[45]`, a path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) local: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) remote: Option<String>,
    /// TCP state (ESTABLISHED, LISTEN…); for unix sockets, the socket type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) state: Option<String>,
    /// Who holds the other end of a pipe or FIFO (`pid 12 "name" fd 4`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) peers: Vec<String>,
    /// An epoll set: the fds it watches.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) watches: Vec<i32>,
    /// How many more fds it watches than `watches` lists.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) watches_unlisted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

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

/// The kind of an fd that a core names in a call's arguments: a core keeps
/// no fd table, so what it was is not known.
pub(crate) const UNRECORDED: &str = "unrecorded";

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
fn short_name(name: &str) -> &str {
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

/// One socket from `/proc/PID/net/{tcp,tcp6,udp,udp6}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InetSocket {
    pub(crate) inode: u64,
    pub(crate) local: String,
    pub(crate) remote: String,
    pub(crate) state: String,
}

/// One socket from `/proc/PID/net/unix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnixSocket {
    pub(crate) inode: u64,
    pub(crate) kind: &'static str,
    pub(crate) path: Option<String>,
}

fn tcp_state(code: u8) -> &'static str {
    match code {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        12 => "NEW_SYN_RECV",
        _ => "UNKNOWN",
    }
}

/// `0100007F:1F90` (IPv4) or 32 hex digits + port (IPv6), as the kernel
/// prints them: each 32-bit word in host (little-endian) order.
fn parse_inet_addr(s: &str) -> Option<String> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    match words.len() {
        1 => {
            let ip = std::net::Ipv4Addr::from(words[0].to_le_bytes());
            Some(format!("{ip}:{port}"))
        }
        4 => {
            let mut b = [0u8; 16];
            for (i, w) in words.iter().enumerate() {
                b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
            }
            let ip = std::net::Ipv6Addr::from(b);
            match ip.to_ipv4_mapped() {
                Some(v4) => Some(format!("{v4}:{port}")),
                None => Some(format!("[{ip}]:{port}")),
            }
        }
        _ => None,
    }
}

/// The sockets of one `/proc/PID/net/{tcp,tcp6,udp,udp6}` table.
pub(crate) fn parse_inet_table(text: &str, tcp: bool) -> Vec<InetSocket> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = parse_inet_addr(f.get(1)?)?;
            let remote = parse_inet_addr(f.get(2)?)?;
            let st = u8::from_str_radix(f.get(3)?, 16).ok()?;
            let inode: u64 = f.get(9)?.parse().ok()?;
            let state = if tcp {
                tcp_state(st).to_string()
            } else if st == 1 {
                "ESTABLISHED".to_string()
            } else {
                "UNCONN".to_string()
            };
            Some(InetSocket {
                inode,
                local,
                remote,
                state,
            })
        })
        .collect()
}

/// The sockets of `/proc/PID/net/unix`.
pub(crate) fn parse_unix_table(text: &str) -> Vec<UnixSocket> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.splitn(8, char::is_whitespace).collect();
            // Num RefCount Protocol Flags Type St Inode [Path]
            let f: Vec<&str> = f.into_iter().filter(|s| !s.is_empty()).collect();
            let kind = match u32::from_str_radix(f.get(4)?, 16).ok()? {
                1 => "stream",
                2 => "dgram",
                5 => "seqpacket",
                _ => "unix",
            };
            let inode: u64 = f.get(6)?.parse().ok()?;
            let path = line
                .split_whitespace()
                .nth(7)
                .map(str::to_string)
                .filter(|p| !p.is_empty());
            Some(UnixSocket { inode, kind, path })
        })
        .collect()
}

/// The fds an epoll set watches, from its `/proc/PID/fdinfo/FD` (as
/// bounded as that text): the lowest [`MAX_SET_FDS`] in order (the kernel
/// lists them in its own), and how many more it lists.
pub(crate) fn parse_epoll_fdinfo(text: &str) -> (Vec<i32>, usize) {
    let mut fds: Vec<i32> = text
        .lines()
        .filter_map(|l| l.strip_prefix("tfd:"))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    fds.sort_unstable();
    let more = fds.len().saturating_sub(MAX_SET_FDS);
    fds.truncate(MAX_SET_FDS);
    (fds, more)
}

/// `socket:[123]` → ("socket", 123); also `pipe:[…]`.
pub(crate) fn link_inode(target: &str, prefix: &str) -> Option<u64> {
    target
        .strip_prefix(prefix)?
        .strip_prefix(":[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The sockets of the target's network namespace, by inode (what fds link to).
#[derive(Debug, Default, Clone)]
pub(crate) struct SocketTables {
    pub(crate) inet: Vec<(&'static str, InetSocket)>,
    pub(crate) unix: Vec<UnixSocket>,
}

impl SocketTables {
    pub(crate) fn from_texts(tables: &[(&'static str, Option<String>)]) -> SocketTables {
        let mut t = SocketTables::default();
        for (name, text) in tables {
            let Some(text) = text else { continue };
            match *name {
                "unix" => t.unix.extend(parse_unix_table(text)),
                n => {
                    let tcp = n.starts_with("tcp");
                    t.inet
                        .extend(parse_inet_table(text, tcp).into_iter().map(|s| (n, s)));
                }
            }
        }
        t
    }
}

/// Describe an fd from its link target; sockets need the tables (read
/// lazily: `tables` is called at most once per socket met).
pub(crate) fn describe_fd(
    fd: i32,
    target: Option<&str>,
    tables: &mut dyn FnMut() -> Option<std::rc::Rc<SocketTables>>,
) -> FdDesc {
    let mut d = FdDesc {
        fd,
        target: target.map(str::to_string),
        ..Default::default()
    };
    let Some(t) = target else {
        d.kind = "closed".into();
        return d;
    };
    if let Some(inode) = link_inode(t, "socket") {
        d.kind = "socket".into();
        if let Some(tables) = tables() {
            if let Some((name, s)) = tables.inet.iter().find(|(_, s)| s.inode == inode) {
                d.kind = name.to_string();
                d.local = Some(s.local.clone());
                d.remote = Some(s.remote.clone());
                d.state = Some(s.state.clone());
            } else if let Some(u) = tables.unix.iter().find(|u| u.inode == inode) {
                d.kind = "unix".into();
                d.local = u.path.clone();
                d.state = Some(u.kind.to_string());
            }
        }
    } else if link_inode(t, "pipe").is_some() {
        d.kind = "pipe".into();
    } else if let Some(anon) = t.strip_prefix("anon_inode:") {
        let anon = anon.trim_start_matches('[').trim_end_matches(']');
        d.kind = match anon {
            "eventfd" => "eventfd",
            "eventpoll" => "epoll",
            "timerfd" => "timerfd",
            "signalfd" => "signalfd",
            _ => "anon",
        }
        .into();
    } else if t.starts_with('/') {
        d.kind = "file".into();
    } else {
        d.kind = "other".into();
    }
    d
}

impl FdDesc {
    /// The part of an fd a short form names: the peer of a socket, the path of a file.
    pub(crate) fn short(&self) -> String {
        match self.kind.as_str() {
            "tcp" | "tcp6" | "udp" | "udp6" => match (&self.remote, &self.local) {
                (Some(r), Some(l)) if self.state.as_deref() == Some("LISTEN") || is_any(r) => {
                    format!("listen {l}")
                }
                (Some(r), _) => r.clone(),
                _ => self.kind.clone(),
            },
            "unix" => self.local.clone().unwrap_or_else(|| "unix".into()),
            "file" | "fifo" => self.target.clone().unwrap_or_default(),
            UNRECORDED => format!("fd {}", self.fd),
            k => k.to_string(),
        }
    }

    /// The long form: `fd 3: TCP 127.0.0.1:40412 → 127.0.0.1:8080 (ESTABLISHED)`,
    /// its paths and peers clipped to `item` characters each, at most
    /// [`TEXT_PEERS`] peers named. An epoll set says how many fds it
    /// watches (and which, when few).
    pub(crate) fn long(&self, item: usize) -> String {
        let c = |t: &str| clip(t, item);
        let mut s = format!("fd {}: ", self.fd);
        match self.kind.as_str() {
            "tcp" | "tcp6" | "udp" | "udp6" => {
                s += &format!(
                    "{} {} → {}",
                    self.kind.to_uppercase(),
                    self.local.as_deref().unwrap_or("?"),
                    self.remote.as_deref().unwrap_or("?")
                );
                if let Some(st) = &self.state {
                    s += &format!(" ({st})");
                }
            }
            "unix" => {
                s += &format!(
                    "unix {} socket {}",
                    self.state.as_deref().unwrap_or(""),
                    c(self.local.as_deref().unwrap_or("(unnamed)"))
                );
                if let Some(t) = &self.target {
                    s += &format!(" {t}");
                }
            }
            "file" => s += &c(self.target.as_deref().unwrap_or("?")),
            "fifo" => s += &format!("FIFO {}", c(self.target.as_deref().unwrap_or("?"))),
            "closed" => s += "closed",
            "epoll" => s += "epoll",
            UNRECORDED => s += "not recorded in a core",
            _ => s += &c(self.target.as_deref().unwrap_or(&self.kind)),
        }
        if !self.peers.is_empty() {
            s += &format!(" (other end: {})", listed(&self.peers, TEXT_PEERS, item));
        }
        let watched = self.watches.len() + self.watches_unlisted;
        if watched > 0 {
            if watched <= SUMMARY_EXAMPLES {
                let w: Vec<String> = self.watches.iter().map(|f| f.to_string()).collect();
                s += &format!(" watching fds {}", w.join(", "));
            } else {
                s += &format!(" watching {watched} fds");
            }
        }
        s
    }
}

/// `s` in at most `max` characters: clipped in the middle, where a path
/// or an address says least.
fn clip(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let keep = max.saturating_sub(1);
    let head: String = s.chars().take(keep / 2).collect();
    let tail: String = s.chars().skip(n - (keep - keep / 2)).collect();
    format!("{head}…{tail}")
}

/// The first `most` of `items` (each clipped), then "and N more".
fn listed(items: &[String], most: usize, item: usize) -> String {
    let shown: Vec<String> = items.iter().take(most).map(|i| clip(i, item)).collect();
    let mut s = shown.join(", ");
    if items.len() > most {
        s += &format!(" and {} more", items.len() - most);
    }
    s
}

/// The fds of a set that look alike, for a summary: `28 TCP to
/// 127.0.0.1:51234, 127.0.0.1:51236 and 26 more`.
struct FdGroup {
    rank: u8,
    one: String,
    many: String,
    /// Between the count and the examples.
    sep: &'static str,
    n: usize,
    /// Distinct examples in the order met, with how many fds each names.
    examples: Vec<(String, usize)>,
}

impl FdGroup {
    fn text(&self, examples: usize, item: usize) -> String {
        let label = if self.n == 1 { &self.one } else { &self.many };
        let mut s = format!("{} {label}", self.n);
        let shown = &self.examples[..examples.min(self.examples.len())];
        if shown.is_empty() {
            return s;
        }
        let whole = shown.len() == 1 && shown[0].1 == self.n;
        let names: Vec<String> = shown
            .iter()
            .map(|(e, k)| {
                if *k > 1 && !whole {
                    format!("{} ×{k}", clip(e, item))
                } else {
                    clip(e, item)
                }
            })
            .collect();
        s += self.sep;
        s += &names.join(", ");
        let named: usize = shown.iter().map(|(_, k)| k).sum();
        if named < self.n {
            s += &format!(" and {} more", self.n - named);
        }
        s
    }
}

/// The group an fd falls in: (rank, singular, plural, separator, example).
fn fd_group(d: &FdDesc) -> (u8, String, String, &'static str, Option<String>) {
    let same = |l: &str| (l.to_string(), l.to_string());
    let plural = |l: &str| (l.to_string(), format!("{l}s"));
    let (rank, (one, many), sep, example) = match d.kind.as_str() {
        k @ ("tcp" | "tcp6" | "udp" | "udp6") => {
            let k = k.to_uppercase();
            let listening =
                d.state.as_deref() == Some("LISTEN") || d.remote.as_deref().is_some_and(is_any);
            if listening {
                let word = if k.starts_with("TCP") {
                    "listening"
                } else {
                    "bound"
                };
                (0, same(&format!("{word} {k}")), " ", d.local.clone())
            } else {
                (1, same(&k), " to ", d.remote.clone())
            }
        }
        "unix" => (2, plural("unix socket"), " ", d.local.clone()),
        "socket" => (3, plural("socket"), " ", None),
        "fifo" => (4, plural("FIFO"), " ", d.target.clone()),
        "pipe" => (5, plural("pipe"), " ", None),
        "file" => (6, plural("file"), " ", d.target.clone()),
        "closed" => (8, plural("closed fd"), " ", None),
        UNRECORDED => (
            9,
            same("not recorded in a core"),
            ": fds ",
            Some(d.fd.to_string()),
        ),
        "anon" => (7, plural("anon inode"), " ", None),
        "other" => (7, same("other"), " ", d.target.clone()),
        k => (7, plural(k), " ", None),
    };
    (rank, one, many, sep, example)
}

/// A set of fds in few words: `31 fds: 1 listening TCP 127.0.0.1:8080; 30
/// TCP to 127.0.0.1:51234, 127.0.0.1:51236 and 28 more`, naming at most
/// `examples` of each kind; `groups` limits the kinds named (the rest
/// counted as others). `count`: whether to begin with the total.
fn set_summary(
    fds: &[FdDesc],
    unlisted: usize,
    count: bool,
    examples: usize,
    groups: usize,
    item: usize,
) -> String {
    let mut all: Vec<FdGroup> = Vec::new();
    for d in fds {
        let (rank, one, many, sep, example) = fd_group(d);
        let at = match all.iter().position(|g| g.one == one) {
            Some(i) => i,
            None => {
                all.push(FdGroup {
                    rank,
                    one,
                    many,
                    sep,
                    n: 0,
                    examples: Vec::new(),
                });
                all.len() - 1
            }
        };
        let g = &mut all[at];
        g.n += 1;
        if let Some(e) = example {
            match g.examples.iter().position(|(x, _)| *x == e) {
                Some(i) => g.examples[i].1 += 1,
                // Bounded: a summary names a few of them.
                None if g.examples.len() < 64 => g.examples.push((e, 1)),
                None => {}
            }
        }
    }
    all.sort_by_key(|g| g.rank);
    let mut parts: Vec<String> = all
        .iter()
        .take(groups)
        .map(|g| g.text(examples, item))
        .collect();
    let others: usize = all.iter().skip(groups).map(|g| g.n).sum::<usize>() + unlisted;
    if others > 0 {
        let what = if unlisted > 0 && others == unlisted {
            "not listed"
        } else {
            "others"
        };
        parts.push(format!("{others} {what}"));
    }
    let body = parts.join("; ");
    if count {
        format!("{} fds: {body}", fds.len() + unlisted)
    } else {
        body
    }
}

fn is_any(addr: &str) -> bool {
    addr.starts_with("0.0.0.0:") || addr.starts_with("[::]:")
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
fn clock_now(clockid: i32) -> Option<f64> {
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

impl Wait {
    /// Whether the thread is off the CPU (sleeping, in D state, stopped).
    /// A tracing stop ('t') is not: while sampling it is our own pause (or
    /// one that outlived its budget) of a thread that was running.
    pub(crate) fn off_cpu(&self) -> bool {
        !matches!(self.state.as_str(), "R" | "t" | "")
    }

    /// The short form used by top's wait column and record's leaf frames:
    /// `recv 127.0.0.1:443`, `GIL wait`, `futex`, `read /data/x.bin`,
    /// `D: wchan`. Empty for a running thread.
    pub(crate) fn short(&self) -> String {
        if self.state == "D" {
            if let Some(w) = &self.wchan {
                return format!("D: {w}");
            }
        }
        if self.gil.is_some() {
            return "GIL wait".into();
        }
        if let Some(l) = &self.lock {
            return format!("lock {}", l.name);
        }
        let Some(name) = &self.syscall else {
            return match self.state.as_str() {
                "R" | "" => String::new(),
                "D" => "D".into(),
                s => s.to_string(),
            };
        };
        let short = short_name(name);
        if let Some(fd) = &self.fd {
            if !fd.watches.is_empty() || self.fds.is_empty() {
                return format!("{short} {}", fd.short());
            }
        }
        if let Some(first) = self.fds.first() {
            let more = if self.fds.len() > 1 {
                format!(" +{}", self.fds.len() - 1)
            } else {
                String::new()
            };
            return format!("{short} {}{more}", first.short());
        }
        if let Some(p) = &self.path {
            return format!("{short} {p}");
        }
        if let Some(c) = self.child {
            return if c < 0 {
                format!("{short} any child")
            } else {
                format!("{short} {c}")
            };
        }
        short.to_string()
    }

    /// The long form in at most [`HEADER_MAX`] characters.
    #[cfg(test)]
    pub(crate) fn long(&self) -> String {
        self.long_within(HEADER_MAX)
    }

    /// The long form of dump's header: everything known, decoded, in at
    /// most `room` characters. What fits is shown whole; a set of fds that
    /// does not is summarised (how many of each kind, the listening
    /// sockets, the first few peers), then paths are clipped, and the
    /// text itself last. JSON keeps everything.
    pub(crate) fn long_within(&self, room: usize) -> String {
        let room = room.max(WAIT_TEXT_MIN);
        let set = !self.fds.is_empty() || self.fds_unlisted > 0;
        let mut tries: Vec<(Option<(usize, usize)>, usize)> = vec![(None, usize::MAX)];
        if set {
            for examples in (0..=SUMMARY_EXAMPLES).rev() {
                tries.push((Some((examples, usize::MAX)), TEXT_ITEM_MAX));
            }
            for groups in (0..4).rev() {
                tries.push((Some((0, groups)), TEXT_ITEM_MAX / 2));
            }
        } else {
            tries.push((None, TEXT_ITEM_MAX));
            tries.push((None, TEXT_ITEM_MAX / 2));
        }
        let mut text = String::new();
        for (summary, item) in tries {
            text = self.long_form(summary, item);
            if text.chars().count() <= room {
                return text;
            }
        }
        clip_end(&text, room)
    }

    /// The long form with the set of fds listed whole (`summary` None) or
    /// summarised, naming (examples, groups) at most; paths and peers
    /// clipped to `item` characters.
    fn long_form(&self, summary: Option<(usize, usize)>, item: usize) -> String {
        let mut s = String::new();
        if let Some(name) = &self.syscall {
            s += name;
            let mut args = Vec::new();
            let epoll = self.fd.as_ref().filter(|fd| fd.kind == "epoll");
            let set = if self.fds.is_empty() && self.fds_unlisted == 0 {
                None
            } else {
                Some(match summary {
                    None => {
                        let fds: Vec<String> = self.fds.iter().map(|f| f.long(item)).collect();
                        let mut all = fds.join("; ");
                        if self.fds_unlisted > 0 {
                            all += &format!("; {} not listed", self.fds_unlisted);
                        }
                        format!("{{{all}}}")
                    }
                    Some((examples, groups)) => {
                        if groups == 0 && epoll.is_some() {
                            String::new()
                        } else if groups == 0 {
                            format!("{{{} fds}}", self.fds.len() + self.fds_unlisted)
                        } else {
                            let sum = set_summary(
                                &self.fds,
                                self.fds_unlisted,
                                epoll.is_none(),
                                examples,
                                groups,
                                item,
                            );
                            format!("{{{sum}}}")
                        }
                    }
                })
            };
            match (&self.fd, set) {
                // The set an epoll fd watches follows it.
                (Some(fd), Some(set)) if epoll.is_some() => {
                    let mut fd = fd.clone();
                    fd.watches.clear();
                    fd.watches_unlisted = 0;
                    let watched = self.fds.len() + self.fds_unlisted;
                    let head = format!("{} watching {watched} fds", fd.long(item));
                    args.push(if set.is_empty() {
                        head
                    } else {
                        format!("{head} {set}")
                    });
                }
                (fd, set) => {
                    if let Some(fd) = fd {
                        args.push(fd.long(item));
                    }
                    args.extend(set);
                }
            }
            if let Some(p) = &self.path {
                args.push(clip(p, item));
            }
            if let Some(c) = self.child {
                args.push(if c < 0 {
                    "any child".into()
                } else {
                    format!("child {c}")
                });
            }
            if let Some(f) = &self.futex {
                args.push(f.clone());
            }
            match &self.timeout {
                Some(Timeout::None) => args.push("no timeout".into()),
                Some(Timeout::Relative { seconds }) => {
                    args.push(format!("timeout {}", secs(*seconds)))
                }
                Some(Timeout::Deadline { seconds_left }) => {
                    args.push(format!("deadline in {}", secs(*seconds_left)))
                }
                None => {}
            }
            s += &format!("({})", args.join(", "));
        }
        if let Some(g) = &self.gil {
            s += " waiting for the GIL";
            match (g.holder, &g.holder_name) {
                (Some(h), Some(n)) => s += &format!(" (held by thread {h} \"{}\")", clip(n, item)),
                (Some(h), None) => s += &format!(" (held by thread {h})"),
                _ => s += " (no holder seen)",
            }
        }
        if let Some(l) = &self.lock {
            s += &format!(
                " waiting for {} '{}' at {} (local of {}, {}:{})",
                l.kind,
                clip(&l.name, item),
                l.address,
                clip(&l.function, item),
                clip(&l.file, item),
                l.line
            );
        }
        if self.state == "D" {
            if !s.is_empty() {
                s += ", ";
            }
            s += &format!(
                "uninterruptible in {}",
                self.wchan.as_deref().unwrap_or("?")
            );
        }
        s
    }
}

/// `s` in at most `max` characters, cut at the end.
fn clip_end(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The room a wait's text has in a header whose words before it take
/// `before` characters.
pub(crate) fn header_room(before: usize) -> usize {
    HEADER_MAX.saturating_sub(before).max(WAIT_TEXT_MIN)
}

/// How much a sampler learns about waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitDetail {
    /// Nothing (the default of cpu-mode sampling).
    #[default]
    Off,
    /// The call and its fd, from registers and cached fd descriptions:
    /// what top's column and record's leaf frames show.
    Short,
    /// Everything: pointer arguments, fd sets, epoll sets, pipe peers, wchan,
    /// kernel stacks (dump).
    Full,
}

/// Reads the kernel's view of a process's blocked threads, through
/// [`crate::procfs`]. Fd descriptions are cached: per pass when `Full`,
/// across passes (by link target, which names the inode) when `Short`.
pub(crate) struct WaitReader {
    pid: i32,
    detail: WaitDetail,
    tables: Option<std::rc::Rc<SocketTables>>,
    fd_cache: foldhash::HashMap<String, FdDesc>,
    /// Each thread's syscall file, kept open and read with `pread`, with
    /// what its latest read said.
    calls: foldhash::HashMap<i32, ThreadCall>,
    /// A core's calls (from its registers): no fd table, no wchan, nothing
    /// of /proc (the pid may be another process's now); deadlines counted
    /// from the moment the core was written, this many seconds ago.
    recorded: Option<f64>,
}

/// How long a thread's kernel state, and the wait decoded for it, are
/// trusted while its syscall file reads the same text (the call, its six
/// arguments, stack and instruction pointers: the same blocked call, or
/// one exactly like it). A thread that goes from S to D (or is stopped)
/// inside one call is seen so much later at most.
pub(crate) const SAME_CALL_TTL: std::time::Duration = std::time::Duration::from_millis(100);

/// Longest syscall line kept (the kernel writes at most ~180 bytes).
const CALL_TEXT_MAX: usize = 256;

/// What is kept of one thread's `/proc/PID/task/TID/syscall` between passes.
struct ThreadCall {
    /// None: it could not be opened (then the caller reads states itself).
    file: Option<std::fs::File>,
    /// The latest text read, and the call it says.
    text: Vec<u8>,
    line: Option<SyscallLine>,
    /// Read by this pass's [`WaitReader::probe`] and not yet taken.
    fresh: bool,
    /// The kernel state read while the text was `text`, and when.
    state: Option<(char, std::time::Instant)>,
    /// The wait decoded from `text` in that state (short detail only).
    wait: Option<(char, Wait, Option<CallArgs>)>,
}

/// What a thread's syscall file says at the start of a pass, for its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallProbe {
    /// On a CPU or runnable: state R, and no call to read.
    Running,
    /// The same text as when its state was read, within [`SAME_CALL_TTL`]:
    /// that state still holds.
    Same(char),
    /// A new call, an expired state, or no file: the state must be read.
    Read,
}

/// Most cached fd descriptions (a process that churns sockets cannot grow it without bound).
const MAX_FD_CACHE: usize = 4096;

fn fdinfo_access(text: &str) -> Option<&'static str> {
    let flags = text
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())?;
    Some(match flags & 3 {
        0 => "read end",
        1 => "write end",
        _ => "read-write",
    })
}

impl WaitReader {
    pub(crate) fn new(pid: i32, detail: WaitDetail) -> WaitReader {
        WaitReader {
            pid,
            detail,
            tables: None,
            fd_cache: Default::default(),
            calls: Default::default(),
            recorded: None,
        }
    }

    /// A reader of the calls a core recorded, `age` seconds after it was
    /// written: the calls come from the caller (the source's saved
    /// registers), decoded exactly as a live thread's, with fds named by
    /// number only and nothing read from /proc.
    pub(crate) fn recorded(pid: i32, detail: WaitDetail, age: f64) -> WaitReader {
        WaitReader {
            recorded: Some(age.max(0.0)),
            ..WaitReader::new(pid, detail)
        }
    }

    pub(crate) fn detail(&self) -> WaitDetail {
        self.detail
    }

    /// How long ago the calls were made: 0 for a live process, a core's age.
    pub(crate) fn age(&self) -> f64 {
        self.recorded.unwrap_or(0.0)
    }

    /// A new pass over `threads`: socket tables are read again when next
    /// needed, and the files of threads that are gone are closed.
    pub(crate) fn begin_pass(&mut self, threads: &[(i32, bool)]) {
        self.keep_threads(threads);
        self.tables = None;
        if self.detail == WaitDetail::Full || self.fd_cache.len() > MAX_FD_CACHE {
            self.fd_cache.clear();
        }
    }

    /// Close the syscall files of threads not in `threads` (gone).
    pub(crate) fn keep_threads(&mut self, threads: &[(i32, bool)]) {
        // A set, not a scan of the list per entry (thousands of threads).
        let live: foldhash::HashSet<i32> = threads.iter().map(|(t, _)| *t).collect();
        self.calls.retain(|tid, _| live.contains(tid));
    }

    /// Read thread `tid`'s syscall file into its entry (opened the first
    /// time); whether the text is the one read before. A changed text drops
    /// the state and wait kept for the old one.
    fn read_call(&mut self, tid: i32) -> Option<(&mut ThreadCall, bool)> {
        use std::os::unix::fs::FileExt;
        let pid = self.pid;
        let c = self.calls.entry(tid).or_insert_with(|| ThreadCall {
            file: crate::procfs::open_thread_syscall(pid, tid),
            text: Vec::new(),
            line: None,
            fresh: false,
            state: None,
            wait: None,
        });
        let mut buf = [0u8; CALL_TEXT_MAX];
        let n = match c.file.as_ref()?.read_at(&mut buf, 0) {
            Ok(n) => n,
            Err(_) => {
                // Gone, or not ours to read: nothing kept is trusted.
                c.text.clear();
                c.line = None;
                c.state = None;
                c.wait = None;
                return None;
            }
        };
        let same = !c.text.is_empty() && c.text[..] == buf[..n];
        if !same {
            c.text.clear();
            c.text.extend_from_slice(&buf[..n]);
            c.line = std::str::from_utf8(&buf[..n]).ok().and_then(parse_syscall);
            if let Some(SyscallLine::Blocked { nr, args }) = c.line {
                if nr == RESTART_SYSCALL {
                    // Read once per call: the text is kept while it lasts.
                    let wchan = crate::procfs::thread_wchan(pid, tid).unwrap_or_default();
                    let nr = resumed_call(&args, wchan.trim());
                    c.line = Some(SyscallLine::Blocked { nr, args });
                }
            }
            c.state = None;
            c.wait = None;
        }
        Some((c, same))
    }

    /// At the start of a pass (before any pausing): what thread `tid`'s
    /// syscall file says about its state. A thread on a CPU needs no stat
    /// read; one still in the call its state was read in keeps that state
    /// for [`SAME_CALL_TTL`]. The line read is what [`WaitReader::syscall`]
    /// gives next in this pass.
    pub(crate) fn probe(&mut self, tid: i32, now: std::time::Instant) -> CallProbe {
        let Some((c, same)) = self.read_call(tid) else {
            return CallProbe::Read;
        };
        c.fresh = true;
        match (c.line, c.state) {
            (Some(SyscallLine::Running), _) => CallProbe::Running,
            (_, Some((s, at))) if same && now.saturating_duration_since(at) < SAME_CALL_TTL => {
                CallProbe::Same(s)
            }
            _ => CallProbe::Read,
        }
    }

    /// Whether the latest probe of `tid` found it off its CPU: the kernel
    /// writes a thread's call (or that it is in none) only once the thread
    /// has left its CPU, and "running" while it is on one or waits for one.
    pub(crate) fn seen_off_cpu(&self, tid: i32) -> bool {
        self.calls.get(&tid).is_some_and(|c| {
            c.fresh
                && matches!(
                    c.line,
                    Some(SyscallLine::Blocked { .. } | SyscallLine::NotInSyscall)
                )
        })
    }

    /// The kernel state just read for `tid` after a [`CallProbe::Read`],
    /// kept with the text probed.
    pub(crate) fn set_state(&mut self, tid: i32, state: char, now: std::time::Instant) {
        if let Some(c) = self.calls.get_mut(&tid) {
            if c.fresh && !c.text.is_empty() {
                c.state = Some((state, now));
                // Decoded again with it: fd descriptions are looked at
                // again once per time to live.
                c.wait = None;
            }
        }
    }

    /// The call a thread that is not running is in (read before any
    /// pausing): the line probed in this pass, or read now.
    pub(crate) fn syscall(&mut self, tid: i32) -> Option<SyscallLine> {
        if let Some(c) = self.calls.get_mut(&tid) {
            if c.fresh {
                c.fresh = false;
                return c.line;
            }
        }
        self.read_call(tid).and_then(|(c, _)| c.line)
    }

    fn describe(&mut self, fd: i32) -> FdDesc {
        self.describe_all(&[fd]).pop().unwrap_or_default()
    }

    /// Describe fds (a call's, or a whole set's). With full detail, the
    /// holders of the other ends of their pipes, FIFOs and unix sockets are
    /// found in one scan of every process's fds, whatever the set's size.
    fn describe_all(&mut self, fds: &[i32]) -> Vec<FdDesc> {
        let mut out = Vec::with_capacity(fds.len());
        // (index in out, the link whose holders are the other end, the fd
        // itself to leave out, the link to show when nobody holds it).
        let mut wanted: Vec<(usize, String, i32, Option<String>)> = Vec::new();
        let mut fresh = Vec::new();
        for &fd in fds {
            let (d, cached) = self.describe_bare(fd);
            if !cached && self.detail == WaitDetail::Full {
                let target = d.target.clone().unwrap_or_default();
                if matches!(d.kind.as_str(), "pipe" | "fifo") {
                    wanted.push((out.len(), target.clone(), fd, None));
                }
                if d.kind == "unix" && crate::procfs::same_net_namespace(self.pid) {
                    let peer =
                        link_inode(&target, "socket").and_then(crate::procfs::unix_socket_peer);
                    if let Some(peer) = peer {
                        let link = format!("socket:[{peer}]");
                        wanted.push((out.len(), link.clone(), -1, Some(link)));
                    }
                }
            }
            if !cached {
                fresh.push(out.len());
            }
            out.push(d);
        }
        if !wanted.is_empty() {
            let mut targets: Vec<String> = wanted.iter().map(|w| w.1.clone()).collect();
            targets.sort();
            targets.dedup();
            let limit = (targets.len() * MAX_PEERS).min(MAX_HOLDERS);
            let holders = crate::procfs::fd_holders(&targets, limit);
            let mut named: foldhash::HashMap<(i32, i32), String> = Default::default();
            for (i, link, own, fallback) in wanted {
                let peers: Vec<String> = holders
                    .iter()
                    .filter(|(p, f, t)| *t == link && !(*p == self.pid && *f == own))
                    .take(MAX_PEERS)
                    .map(|(p, f, _)| {
                        named
                            .entry((*p, *f))
                            .or_insert_with(|| holder(*p, *f))
                            .clone()
                    })
                    .collect();
                out[i].peers = if peers.is_empty() {
                    fallback.into_iter().collect()
                } else {
                    peers
                };
            }
        }
        for i in fresh {
            if let Some(t) = out[i].target.clone() {
                self.fd_cache.insert(t, out[i].clone());
            }
        }
        out
    }

    /// An fd described from its link, the socket tables and (full detail)
    /// an epoll set's fdinfo, without the other ends; and whether it came
    /// from the cache (then whole, other ends included).
    fn describe_bare(&mut self, fd: i32) -> (FdDesc, bool) {
        if self.recorded.is_some() {
            let d = FdDesc {
                fd,
                kind: UNRECORDED.into(),
                ..Default::default()
            };
            return (d, true);
        }
        let pid = self.pid;
        let target = crate::procfs::fd_target(pid, fd);
        if let Some(t) = &target {
            if let Some(d) = self.fd_cache.get(t) {
                let mut d = d.clone();
                d.fd = fd;
                return (d, true);
            }
        }
        let tables = &mut self.tables;
        let mut get = || {
            if tables.is_none() {
                let names = ["tcp", "tcp6", "udp", "udp6", "unix"];
                let texts: Vec<(&'static str, Option<String>)> = names
                    .iter()
                    .map(|n| (*n, crate::procfs::net_table(pid, n)))
                    .collect();
                *tables = Some(std::rc::Rc::new(SocketTables::from_texts(&texts)));
            }
            tables.clone()
        };
        let mut d = describe_fd(fd, target.as_deref(), &mut get);
        if d.kind == "file" && crate::procfs::fd_is_fifo(pid, fd) {
            d.kind = "fifo".into();
        }
        if self.detail == WaitDetail::Full && d.kind == "epoll" {
            (d.watches, d.watches_unlisted) = crate::procfs::fdinfo(pid, fd)
                .map(|t| parse_epoll_fdinfo(&t))
                .unwrap_or_default();
        }
        (d, false)
    }
}

/// Most holders of the other end named per fd.
const MAX_PEERS: usize = 16;
/// Most holders looked for in one scan, whatever the number of fds.
const MAX_HOLDERS: usize = 16 * 1024;

/// A holder of the other end of a pipe, FIFO or socket, as dump names it:
/// `pid 12 "name" fd 4 (write end)`.
fn holder(p: i32, f: i32) -> String {
    let name = crate::procfs::comm(p, p).unwrap_or_default();
    let end = crate::procfs::fdinfo(p, f)
        .as_deref()
        .and_then(fdinfo_access)
        .map(|a| format!(" ({a})"))
        .unwrap_or_default();
    format!("pid {p} \"{name}\" fd {f}{end}")
}

impl WaitReader {
    /// What thread `tid` (in scheduler state `state`, blocked in `line`)
    /// waits for. GIL and lock attribution are added by the caller, who
    /// knows the interpreter.
    pub(crate) fn read(
        &mut self,
        tid: i32,
        state: char,
        line: Option<SyscallLine>,
        mem: &dyn Memory,
    ) -> (Wait, Option<CallArgs>) {
        let bare = || Wait {
            state: state.to_string(),
            ..Default::default()
        };
        if state == 'R' || self.detail == WaitDetail::Off {
            return (bare(), None);
        }
        // Short detail reads nothing that changes while the call's text
        // stays the same: decoded once per call (and state, within the
        // state's time to live), not at every pass.
        let cacheable = self.detail == WaitDetail::Short && line.is_some();
        if cacheable {
            if let Some(c) = self.calls.get(&tid) {
                if let Some((s, cw, args)) = &c.wait {
                    if *s == state && c.line == line && c.state.is_some() {
                        return (cw.clone(), args.clone());
                    }
                }
            }
        }
        let w = bare();
        let (w, call) = self.decode(tid, state, line, mem, w);
        if cacheable {
            if let Some(c) = self.calls.get_mut(&tid) {
                if c.line == line && c.state.is_some_and(|(s, _)| s == state) {
                    c.wait = Some((state, w.clone(), call.clone()));
                }
            }
        }
        (w, call)
    }

    fn decode(
        &mut self,
        tid: i32,
        state: char,
        line: Option<SyscallLine>,
        mem: &dyn Memory,
        mut w: Wait,
    ) -> (Wait, Option<CallArgs>) {
        let full = self.detail == WaitDetail::Full;
        let mut call = None;
        if let Some(SyscallLine::Blocked { nr, args }) = line {
            let c = decode_call(nr, &args, mem, full);
            w.syscall = Some(c.name.clone());
            w.syscall_nr = Some(nr);
            w.fd = c.fd.map(|fd| self.describe(fd));
            if let Some(epoll) = &w.fd {
                if full && !epoll.watches.is_empty() {
                    let watches = epoll.watches.clone();
                    w.fds = self.describe_all(&watches);
                    w.fds_unlisted = epoll.watches_unlisted;
                }
            }
            if !c.set.is_empty() || c.set_unlisted > 0 {
                w.fds = self.describe_all(&c.set);
                w.fds_unlisted = c.set_unlisted;
            }
            w.path = c.path.clone();
            w.child = c.child;
            w.futex = c.futex.map(|a| format!("0x{a:x}"));
            w.timeout = match (&c.timeout, self.recorded) {
                // Left when the core was written, not now.
                (Some(Timeout::Deadline { seconds_left }), Some(age)) => Some(Timeout::Deadline {
                    seconds_left: seconds_left + age,
                }),
                (t, _) => t.clone(),
            };
            call = Some(c);
        }
        if state == 'D' && self.recorded.is_none() {
            w.wchan = crate::procfs::thread_wchan(self.pid, tid).and_then(|t| parse_wchan(&t));
            if full {
                w.kernel_stack = crate::procfs::thread_kernel_stack(self.pid, tid)
                    .map(|t| parse_kernel_stack(&t))
                    .unwrap_or_default();
            }
        }
        (w, call)
    }
}

/// Whether a futex wait at `futex` is on the lock whose first word after
/// the object header is at `inner_addr` and holds `inner`. Facts checked,
/// whatever the version: up to 3.12 the word points at the lock's semaphore,
/// whose futex is inside it; from 3.13 the word is (or, for an RLock, points
/// at) a `PyMutex`, and a waiter sleeps on a semaphore in its parking-lot
/// wait entry, which records that address in a word just before it
/// (`before` holds the words preceding the futex).
pub(crate) fn futex_is_lock(futex: u64, inner: u64, inner_addr: u64, before: &[u64]) -> bool {
    const SEM_SIZE: u64 = 32;
    (inner > 0x1000 && futex >= inner && futex < inner.saturating_add(SEM_SIZE))
        || futex == inner_addr
        || before.contains(&inner_addr)
        || (inner > 0x1000 && before.contains(&inner))
}

/// A lock type's name as users know it.
pub(crate) fn lock_kind(type_name: &str) -> &str {
    match type_name {
        "thread.lock" | "_thread.lock" | "lock" => "threading.Lock",
        "_thread.RLock" | "RLock" => "threading.RLock",
        "Condition" => "threading.Condition",
        t => t,
    }
}

/// Seconds as a person reads them: `3600s`, `0.005s`, `2.5s`.
fn secs(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e12 {
        format!("{v:.0}s")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}s")
    } else {
        format!("{v:.3}s")
    }
}

/// x86-64's `restart_syscall`: what a thread runs when a stop (ours, a
/// debugger's) interrupted a timed sleep that the kernel resumes through
/// its restart block. The registers still hold the first call's arguments.
pub(crate) const RESTART_SYSCALL: i64 = 219;

/// The call a thread in `restart_syscall` resumes, from the kernel function
/// it sleeps in (`wchan`) and the arguments its registers still hold. The
/// kernel resumes only timed futex waits, poll with a timeout and the
/// relative sleeps this way; the first two say so in their wchan, a sleep's
/// may be only the system-call entry its restart is inlined into.
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
    // nanosleep(request, remain): a clock id is small, flags 0 or 1; a
    // request is a pointer.
    if args[0] < 16 && args[1] <= 1 {
        230
    } else {
        35
    }
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

/// One line that says what several threads have in common, for the end of a dump.
pub(crate) fn summary(waits: &[(u32, Option<&str>, &Wait)]) -> Vec<String> {
    use std::collections::BTreeMap;
    let mut out = Vec::new();
    // GIL waiters, by holder.
    let mut gil: BTreeMap<Option<u32>, (usize, Option<String>)> = BTreeMap::new();
    let mut d_state: BTreeMap<String, usize> = BTreeMap::new();
    let mut peers: BTreeMap<String, usize> = BTreeMap::new();
    let mut locks: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, w) in waits {
        if let Some(g) = &w.gil {
            let e = gil.entry(g.holder).or_insert((0, g.holder_name.clone()));
            e.0 += 1;
        } else if w.state == "D" {
            *d_state
                .entry(w.wchan.clone().unwrap_or_else(|| "?".into()))
                .or_default() += 1;
        } else if let Some(l) = &w.lock {
            *locks
                .entry(format!("{} '{}' ({})", l.kind, l.name, l.address))
                .or_default() += 1;
        } else if let Some(fd) = &w.fd {
            if let (Some(r), Some(st)) = (&fd.remote, &fd.state) {
                if !is_any(r) {
                    *peers.entry(format!("{r} ({st})")).or_default() += 1;
                }
            }
        }
    }
    let threads = |n: usize| {
        if n == 1 {
            "1 thread waits".to_string()
        } else {
            format!("{n} threads wait")
        }
    };
    for (holder, (n, name)) in gil {
        out.push(match (holder, name) {
            (Some(h), Some(name)) => format!("{} for the GIL held by {h} '{name}'", threads(n)),
            (Some(h), None) => format!("{} for the GIL held by {h}", threads(n)),
            (None, _) => format!("{} for the GIL", threads(n)),
        });
    }
    for (l, n) in locks.into_iter().filter(|(_, n)| *n >= 2) {
        out.push(format!("{} for {l}", threads(n)));
    }
    for (p, n) in peers.into_iter().filter(|(_, n)| *n >= 2) {
        out.push(format!("{n} threads blocked on {p}"));
    }
    for (w, n) in d_state {
        let t = if n == 1 { "thread" } else { "threads" };
        out.push(format!("{n} {t} in D state ({w})"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SliceMemory as Bytes;

    #[test]
    fn a_call_resumed_by_restart_syscall_is_named_as_the_call() {
        // As /proc showed them here after a stop: a timed Lock acquire, a
        // poll with a timeout, libc's nanosleep (clock_nanosleep on
        // CLOCK_REALTIME), a relative clock_nanosleep, a raw nanosleep.
        let futex = [0x558a28d4dd10, 0x89, 0, 0x7fff10, 0, 0xffffffff];
        assert_eq!(resumed_call(&futex, "futex_do_wait"), 202);
        let poll = [0x7fdf3ca60b70, 1, 0x36ee80, 0, 0, 0];
        assert_eq!(resumed_call(&poll, "poll_schedule_timeout.constprop.0"), 7);
        assert_eq!(resumed_call(&poll, "do_sys_poll"), 7);
        let realtime = [0, 0, 0x7fdf3c586b20, 0, 0, 0];
        assert_eq!(resumed_call(&realtime, "do_syscall_64"), 230);
        let monotonic = [1, 0, 0x7fdf3c586a20, 0, 0, 0];
        assert_eq!(resumed_call(&monotonic, "hrtimer_nanosleep_restart"), 230);
        let raw = [0x7ffd1000, 0x7ffd1010, 0, 0, 0, 0];
        assert_eq!(resumed_call(&raw, "do_nanosleep"), 35);
    }

    #[test]
    fn syscall_lines() {
        assert_eq!(parse_syscall("running\n"), Some(SyscallLine::Running));
        assert_eq!(
            parse_syscall("-1 0x7ffd5e0 0x7f01\n"),
            Some(SyscallLine::NotInSyscall)
        );
        let l = "45 0x3 0x7f2a1c000b70 0x400 0x0 0x0 0x0 0x7f2a2a7fd8f8 0x7f2a2bb2c7e2\n";
        assert_eq!(
            parse_syscall(l),
            Some(SyscallLine::Blocked {
                nr: 45,
                args: [3, 0x7f2a1c000b70, 0x400, 0, 0, 0]
            })
        );
        assert_eq!(parse_syscall("garbage"), None);
        assert_eq!(parse_syscall("45 0x3"), None);
        assert_eq!(syscall_name(202), Some("futex"));
        assert_eq!(syscall_name(9999), None);
    }

    // Recorded from a test run: a client connected to a loopback server, and the listener.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A1B3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 419514 1 0000000000000000 100 0 0 10 0
   1: 0100007F:9C5E 0100007F:A1B3 01 00000000:00000000 00:00000000 00000000     0        0 419516 1 0000000000000000 20 4 30 10 -1
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17781 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:D1C2 01 00000000:00000000 00:00000000 00000000  1000        0 5555 1 0000000000000000 20 4 30 10 -1
";
    const UNIX: &str = "Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 22466 /run/systemd/notify
0000000000000000: 00000003 00000000 00000000 0001 03 31337
0000000000000000: 00000002 00000000 00010000 0005 01 4242 @abstract
";

    #[test]
    fn inet_tables() {
        let t = parse_inet_table(TCP, true);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].local, "127.0.0.1:41395");
        assert_eq!(t[0].state, "LISTEN");
        assert_eq!(t[1].remote, "127.0.0.1:41395");
        assert_eq!(t[1].local, "127.0.0.1:40030");
        assert_eq!(t[1].state, "ESTABLISHED");
        assert_eq!(t[1].inode, 419516);
        let t6 = parse_inet_table(TCP6, true);
        assert_eq!(t6[0].local, "[::1]:22");
        assert_eq!(t6[1].local, "127.0.0.1:8080");
        assert_eq!(t6[1].remote, "127.0.0.1:53698");
        assert!(parse_inet_table("header\nnot a line\n", true).is_empty());
    }

    #[test]
    fn unix_table() {
        let u = parse_unix_table(UNIX);
        assert_eq!(u.len(), 3);
        assert_eq!(u[0].path.as_deref(), Some("/run/systemd/notify"));
        assert_eq!(u[0].kind, "stream");
        assert_eq!(u[1].path, None);
        assert_eq!(u[1].inode, 31337);
        assert_eq!(u[2].kind, "seqpacket");
        assert_eq!(u[2].path.as_deref(), Some("@abstract"));
    }

    #[test]
    fn epoll_fdinfo() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n\
                    tfd:        5 events:       19 data:                5  pos:0 ino:3e8 sdev:d\n\
                    tfd:        7 events:        1 data:                7  pos:0 ino:3e9 sdev:d\n";
        assert_eq!(parse_epoll_fdinfo(text), (vec![5, 7], 0));
        assert_eq!(parse_epoll_fdinfo("pos: 0\n"), (vec![], 0));
        let many: String = (0..MAX_SET_FDS + 5)
            .map(|fd| format!("tfd: {fd:8} events: 19 data: {fd} pos:0 ino:3e8 sdev:d\n"))
            .collect();
        let (fds, more) = parse_epoll_fdinfo(&many);
        assert_eq!((fds.len(), more), (MAX_SET_FDS, 5));
    }

    #[test]
    fn fds_described() {
        let tables = std::rc::Rc::new(SocketTables::from_texts(&[
            ("tcp", Some(TCP.to_string())),
            ("tcp6", Some(TCP6.to_string())),
            ("unix", Some(UNIX.to_string())),
        ]));
        let mut get = || Some(tables.clone());
        let d = describe_fd(3, Some("socket:[419516]"), &mut get);
        assert_eq!(d.kind, "tcp");
        assert_eq!(d.short(), "127.0.0.1:41395");
        assert_eq!(
            d.long(usize::MAX),
            "fd 3: TCP 127.0.0.1:40030 → 127.0.0.1:41395 (ESTABLISHED)"
        );
        let l = describe_fd(4, Some("socket:[419514]"), &mut get);
        assert_eq!(l.short(), "listen 127.0.0.1:41395");
        let u = describe_fd(5, Some("socket:[22466]"), &mut get);
        assert_eq!(u.kind, "unix");
        assert_eq!(u.short(), "/run/systemd/notify");
        let gone = describe_fd(6, Some("socket:[1]"), &mut get);
        assert_eq!(gone.kind, "socket");
        assert_eq!(describe_fd(7, Some("pipe:[99]"), &mut get).kind, "pipe");
        assert_eq!(
            describe_fd(8, Some("anon_inode:[eventfd]"), &mut get).kind,
            "eventfd"
        );
        assert_eq!(
            describe_fd(9, Some("anon_inode:[eventpoll]"), &mut get).kind,
            "epoll"
        );
        let f = describe_fd(10, Some("/data/x.bin"), &mut get);
        assert_eq!(f.short(), "/data/x.bin");
        assert_eq!(describe_fd(11, None, &mut get).kind, "closed");
    }

    #[test]
    fn timeouts_and_sets_from_memory() {
        let mut m = Bytes::new();
        // timespec {3600, 0} at 0x1000; timeval {1, 500000} at 0x2000.
        let mut ts = Vec::new();
        ts.extend_from_slice(&3600u64.to_le_bytes());
        ts.extend_from_slice(&0u64.to_le_bytes());
        m.add(0x1000, ts);
        let mut tv = Vec::new();
        tv.extend_from_slice(&1u64.to_le_bytes());
        tv.extend_from_slice(&500_000u64.to_le_bytes());
        m.add(0x2000, tv);
        // fd_set with fds 3 and 9.
        let mut set = vec![0u8; 128];
        set[0] = 1 << 3;
        set[1] = 1 << 1;
        m.add(0x3000, set);
        // pollfd array: fd 4, fd -1, fd 6.
        let mut p = Vec::new();
        for fd in [4i32, -1, 6] {
            p.extend_from_slice(&fd.to_le_bytes());
            p.extend_from_slice(&[1, 0, 0, 0]);
        }
        m.add(0x4000, p);
        m.add(0x5000, b"/tmp/some fifo\0".to_vec());

        let c = decode_call(35, &[0x1000, 0, 0, 0, 0, 0], &m, true);
        assert_eq!(c.name, "nanosleep");
        assert_eq!(c.timeout, Some(Timeout::Relative { seconds: 3600.0 }));
        let c = decode_call(230, &[1, 0, 0x1000, 0, 0, 0], &m, true);
        assert_eq!(c.timeout, Some(Timeout::Relative { seconds: 3600.0 }));
        // An absolute deadline far in the past of CLOCK_MONOTONIC's epoch? No:
        // 3600 s after boot is a time; the answer is only checked to be a deadline.
        let c = decode_call(230, &[1, 1, 0x1000, 0, 0, 0], &m, true);
        assert!(matches!(c.timeout, Some(Timeout::Deadline { .. })));
        let c = decode_call(23, &[10, 0x3000, 0, 0, 0x2000, 0], &m, true);
        assert_eq!(c.set, vec![3, 9]);
        assert_eq!(c.timeout, Some(Timeout::Relative { seconds: 1.5 }));
        let c = decode_call(23, &[10, 0x3000, 0, 0, 0, 0], &m, true);
        assert_eq!(c.timeout, Some(Timeout::None));
        let c = decode_call(7, &[0x4000, 3, u32::MAX as u64, 0, 0, 0], &m, true);
        assert_eq!(c.set, vec![4, 6]);
        assert_eq!(c.timeout, Some(Timeout::None));
        let c = decode_call(232, &[5, 0, 1, 250, 0, 0], &m, true);
        assert_eq!(c.fd, Some(5));
        assert_eq!(c.timeout, Some(Timeout::Relative { seconds: 0.25 }));
        let c = decode_call(257, &[u32::MAX as u64 - 99, 0x5000, 0, 0, 0, 0], &m, true);
        assert_eq!(c.path.as_deref(), Some("/tmp/some fifo"));
        let c = decode_call(61, &[1234, 0, 0, 0, 0, 0], &m, true);
        assert_eq!(c.child, Some(1234));
        let c = decode_call(61, &[u32::MAX as u64, 0, 0, 0, 0, 0], &m, true);
        assert_eq!(c.child, Some(-1));
        let c = decode_call(202, &[0xdead0, 0x189, 0, 0, 0, 0], &m, false);
        assert_eq!(c.futex, Some(0xdead0));
        // Unreadable pointers give no answer, never an error.
        let c = decode_call(35, &[0x9999000, 0, 0, 0, 0, 0], &m, true);
        assert_eq!(c.timeout, None);
        let c = decode_call(23, &[u64::MAX, 0x9999000, 0, 0, 0, 0], &m, true);
        assert!(c.set.is_empty());
        assert_eq!(decode_call(1000, &[0; 6], &m, true).name, "syscall_1000");
    }

    #[test]
    fn calls_from_saved_registers() {
        let args = [3, 0x7f00_0000_1000, 16, 0, 0, 0];
        assert_eq!(
            call_from_registers(45, args),
            SyscallLine::Blocked { nr: 45, args }
        );
        // In no call (orig_rax -1): running code, or a fault.
        assert_eq!(
            call_from_registers(u64::MAX, args),
            SyscallLine::NotInSyscall
        );
        // Asleep when the stop came: each restart code, EINTR (epoll_wait
        // after a stop), and a timed wait that ran out while stopped.
        for ret in [-4i64, -110, -512, -513, -514, -516] {
            assert!(asleep_in_call(ret as u64), "{ret}");
        }
        // A call that had returned (3 bytes read; -EAGAIN; woken, 0).
        for ret in [3i64, -11, 0, -515, -517] {
            assert!(!asleep_in_call(ret as u64), "{ret}");
        }
    }

    #[test]
    fn a_recorded_call_is_decoded_as_a_live_one_without_proc() {
        let mut m = Bytes::new();
        // An absolute CLOCK_MONOTONIC deadline an hour from now.
        let mut ts = vec![0u8; 16];
        let now = clock_now(libc::CLOCK_MONOTONIC).unwrap();
        ts[..8].copy_from_slice(&((now as u64) + 3600).to_le_bytes());
        m.add(0x1000, ts);
        // A pid no process has: nothing of /proc may be read for a core.
        let mut core = WaitReader::recorded(i32::MAX, WaitDetail::Full, 100.0);
        let mut live = WaitReader::new(i32::MAX, WaitDetail::Full);
        let sleep = Some(SyscallLine::Blocked {
            nr: 230,
            args: [1, 1, 0x1000, 0, 0, 0],
        });
        let (cw, _) = core.read(7, 'S', sleep, &m);
        let (lw, _) = live.read(7, 'S', sleep, &m);
        assert_eq!(cw.syscall.as_deref(), Some("clock_nanosleep"));
        assert_eq!(cw.syscall, lw.syscall);
        // Counted from when the core was written, 100 s ago.
        match (cw.timeout, lw.timeout) {
            (
                Some(Timeout::Deadline { seconds_left: c }),
                Some(Timeout::Deadline { seconds_left: l }),
            ) => assert!((c - l - 100.0).abs() < 1.0, "{c} {l}"),
            t => panic!("{t:?}"),
        }
        let recv = Some(SyscallLine::Blocked {
            nr: 45,
            args: [3, 0x2000, 16, 0, 0, 0],
        });
        let (w, call) = core.read(8, 'S', recv, &m);
        assert_eq!(call.unwrap().fd, Some(3));
        let fd = w.fd.clone().unwrap();
        assert_eq!((fd.fd, fd.kind.as_str(), fd.target), (3, UNRECORDED, None));
        assert_eq!(w.long(), "recvfrom(fd 3: not recorded in a core)");
        assert_eq!(w.short(), "recv fd 3");
        // A futex: the address, for the caller's GIL and lock checks.
        let futex = Some(SyscallLine::Blocked {
            nr: 202,
            args: [0x5000, 0x80, 0, 0, 0, 0],
        });
        let (w, call) = core.read(9, 'S', futex, &m);
        assert_eq!(call.unwrap().futex, Some(0x5000));
        assert_eq!(w.long(), "futex(0x5000, no timeout)");
        // A set of fds: each named by number.
        let mut set = vec![0u8; 8];
        set[0] = 1 << 4;
        m.add(0x3000, set);
        let select = Some(SyscallLine::Blocked {
            nr: 23,
            args: [5, 0x3000, 0, 0, 0, 0],
        });
        let (w, _) = core.read(10, 'S', select, &m);
        assert_eq!(
            w.long(),
            "select({fd 4: not recorded in a core}, no timeout)"
        );
        // Whatever a corrupt core's registers say: every call number with
        // wild pointers and counts decodes, bounded, without a panic.
        for nr in -1..=460 {
            for args in [[u64::MAX; 6], [0x1000, u64::MAX, 0x3000, 0x3000, 0x1000, 1]] {
                let (w, _) = core.read(11, 'S', Some(SyscallLine::Blocked { nr, args }), &m);
                assert!(w.fds.len() <= MAX_SET_FDS);
            }
        }
    }

    #[test]
    fn kernel_state_texts() {
        assert_eq!(parse_wchan("0"), None);
        assert_eq!(
            parse_wchan("nfs_wait_bit_killable"),
            Some("nfs_wait_bit_killable".into())
        );
        let stack = "[<0>] nfs_wait_bit_killable+0x1c/0x90 [nfs]\n[<0>] __wait_on_bit+0x7a/0xa0\n[<0>] do_syscall_64+0x5b/0x1b0\n";
        assert_eq!(
            parse_kernel_stack(stack),
            vec!["nfs_wait_bit_killable", "__wait_on_bit", "do_syscall_64"]
        );
        // A posix_spawn parent whose vfork child blocks opening a FIFO, as
        // recorded here: state D, wchan kernel_clone, in clone3.
        let line =
            parse_syscall("435 0x7ffd0a1b2c30 0x58 0x0 0x0 0x0 0x0 0x7f632c8c4e08 0x7f632cd2b6ab");
        let Some(SyscallLine::Blocked { nr, .. }) = line else {
            panic!("{line:?}")
        };
        let w = Wait {
            state: "D".into(),
            syscall: syscall_name(nr).map(str::to_string),
            syscall_nr: Some(nr),
            wchan: parse_wchan("kernel_clone"),
            kernel_stack: parse_kernel_stack(
                "[<0>] wait_for_vfork_done+0x2a/0x40\n[<0>] kernel_clone+0x1ba/0x3f0\n",
            ),
            ..Default::default()
        };
        assert_eq!(w.short(), "D: kernel_clone");
        assert_eq!(w.long(), "clone3(), uninterruptible in kernel_clone");
        let s = summary(&[(1, None, &w), (2, None, &w)]);
        assert_eq!(s, vec!["2 threads in D state (kernel_clone)"]);
    }

    #[test]
    fn short_and_long_forms() {
        let gil = Wait {
            state: "S".into(),
            syscall: Some("futex".into()),
            futex: Some("0x7f00".into()),
            gil: Some(GilWait {
                holder: Some(42),
                holder_name: Some("MainThread".into()),
            }),
            ..Default::default()
        };
        assert_eq!(gil.short(), "GIL wait");
        assert_eq!(
            gil.long(),
            "futex(0x7f00) waiting for the GIL (held by thread 42 \"MainThread\")"
        );
        let s = summary(&[(1, None, &gil), (2, None, &gil)]);
        assert_eq!(
            s,
            vec!["2 threads wait for the GIL held by 42 'MainThread'"]
        );
        let sleep = Wait {
            state: "S".into(),
            syscall: Some("clock_nanosleep".into()),
            timeout: Some(Timeout::Relative { seconds: 3600.0 }),
            ..Default::default()
        };
        assert_eq!(sleep.short(), "sleep");
        assert_eq!(sleep.long(), "clock_nanosleep(timeout 3600s)");
        let running = Wait {
            state: "R".into(),
            ..Default::default()
        };
        assert_eq!(running.short(), "");
        assert!(!running.off_cpu());
        let wait = Wait {
            state: "S".into(),
            syscall: Some("wait4".into()),
            child: Some(77),
            ..Default::default()
        };
        assert_eq!(wait.short(), "wait4 77");
        assert_eq!(wait.long(), "wait4(child 77)");
    }

    fn tcp(fd: i32, local: &str, remote: &str, state: &str) -> FdDesc {
        FdDesc {
            fd,
            kind: "tcp".into(),
            target: Some(format!("socket:[{}]", 1000 + fd)),
            local: Some(local.into()),
            remote: Some(remote.into()),
            state: Some(state.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_large_set_is_summarised_in_the_header_and_kept_whole() {
        let mut fds = vec![tcp(5, "127.0.0.1:8080", "0.0.0.0:0", "LISTEN")];
        for i in 0..30 {
            let port = 51000 + i;
            fds.push(tcp(
                6 + i,
                "127.0.0.1:8080",
                &format!("127.0.0.1:{port}"),
                "ESTABLISHED",
            ));
        }
        for fd in [40, 41] {
            fds.push(FdDesc {
                fd,
                kind: "pipe".into(),
                target: Some("pipe:[77]".into()),
                peers: (0..16)
                    .map(|p| format!("pid {p} \"worker\" fd 9 (write end)"))
                    .collect(),
                ..Default::default()
            });
        }
        let epoll = FdDesc {
            fd: 4,
            kind: "epoll".into(),
            target: Some("anon_inode:[eventpoll]".into()),
            watches: fds.iter().map(|d| d.fd).collect(),
            ..Default::default()
        };
        let w = Wait {
            state: "S".into(),
            syscall: Some("epoll_wait".into()),
            fd: Some(epoll),
            fds: fds.clone(),
            timeout: Some(Timeout::None),
            ..Default::default()
        };
        let text = w.long_within(200);
        assert_eq!(
            text,
            "epoll_wait(fd 4: epoll watching 33 fds {1 listening TCP 127.0.0.1:8080; \
             30 TCP to 127.0.0.1:51000, 127.0.0.1:51001, 127.0.0.1:51002 and 27 more; \
             2 pipes}, no timeout)"
        );
        // Less room: fewer examples, never more than the room.
        for room in [0, 60, 80, 100, 120, 200, 400] {
            let t = w.long_within(room);
            assert!(t.chars().count() <= room.max(WAIT_TEXT_MIN), "{room}: {t}");
            assert!(
                t.starts_with("epoll_wait(fd 4: epoll watching 33 fds"),
                "{t}"
            );
        }
        // JSON lists every fd.
        let json = serde_json::to_value(&w).unwrap();
        assert_eq!(json["fds"].as_array().unwrap().len(), 33);
        // A select set: the count first; past the bound, what was not listed.
        let select = Wait {
            state: "S".into(),
            syscall: Some("select".into()),
            fds,
            fds_unlisted: 7,
            timeout: Some(Timeout::Relative { seconds: 5.0 }),
            ..Default::default()
        };
        assert_eq!(
            select.long_within(200),
            "select({40 fds: 1 listening TCP 127.0.0.1:8080; 30 TCP to 127.0.0.1:51000, \
             127.0.0.1:51001, 127.0.0.1:51002 and 27 more; 2 pipes; 7 not listed}, timeout 5s)"
        );
        // A few fds fit whole, peers bounded.
        let few = Wait {
            state: "S".into(),
            syscall: Some("poll".into()),
            fds: select.fds[31..].to_vec(),
            ..Default::default()
        };
        assert_eq!(
            few.long_within(400),
            "poll({fd 40: pipe:[77] (other end: pid 0 \"worker\" fd 9 (write end), \
             pid 1 \"worker\" fd 9 (write end) and 14 more); fd 41: pipe:[77] (other end: \
             pid 0 \"worker\" fd 9 (write end), pid 1 \"worker\" fd 9 (write end) and 14 more)})"
        );
        assert_eq!(few.long_within(120), "poll({2 fds: 2 pipes})");
        assert!(few.long_within(120).chars().count() <= 120);
        // Many peers of one address: counted, not repeated.
        let same: Vec<FdDesc> = (0..40)
            .map(|i| {
                tcp(
                    10 + i,
                    &format!("127.0.0.1:{}", 40000 + i),
                    "10.0.0.1:5432",
                    "ESTABLISHED",
                )
            })
            .collect();
        let db = Wait {
            state: "S".into(),
            syscall: Some("poll".into()),
            fds: same,
            ..Default::default()
        };
        assert_eq!(
            db.long_within(200),
            "poll({40 fds: 40 TCP to 10.0.0.1:5432})"
        );
        // A core's fds: named by number.
        let core = Wait {
            syscall: Some("select".into()),
            fds: (3..43)
                .map(|fd| FdDesc {
                    fd,
                    kind: UNRECORDED.into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        assert_eq!(
            core.long_within(200),
            "select({40 fds: 40 not recorded in a core: fds 3, 4, 5 and 37 more})"
        );
        // A long path is clipped in the middle.
        let long_path = format!("/data/{}/x.bin", "d".repeat(4000));
        let open = Wait {
            state: "D".into(),
            syscall: Some("openat".into()),
            path: Some(long_path),
            wchan: Some("nfs_wait".into()),
            ..Default::default()
        };
        let t = open.long_within(150);
        assert!(
            t.chars().count() <= 150 && t.contains("…") && t.ends_with("nfs_wait"),
            "{t}"
        );
    }
}
