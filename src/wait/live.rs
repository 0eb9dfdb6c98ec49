//! The live reader: the one part of the wait room that reads the kernel's
//! view of a process's threads (through [`crate::procfs`]), caching what
//! stays the same between passes; and, for a core, the same decoding of
//! the calls its registers recorded, with nothing read from /proc.

use super::fd::{
    describe_fd, fdinfo_access, link_inode, parse_epoll_fdinfo, FdDesc, SocketTables, UNRECORDED,
};
use super::syscall::{
    decode_call, parse_kernel_stack, parse_syscall, parse_wchan, resumed_call, CallArgs,
    SyscallLine, RESTART_SYSCALL,
};
use super::{Timeout, Wait, WaitDetail};
use crate::memory::Memory;

/// Reads the kernel's view of a process's blocked threads, through
/// [`crate::procfs`]. Fd descriptions are cached: per pass when `Full`,
/// across passes (by link target, which names the inode) when `Short`.
pub(crate) struct WaitReader {
    pid: i32,
    detail: WaitDetail,
    tables: Option<std::rc::Rc<SocketTables>>,
    /// Full detail: each TCP socket's milliseconds since its last data, by
    /// inode, read once a pass when a TCP socket is first described.
    tcp_quiet: Option<std::collections::HashMap<u64, u32>>,
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
    /// The thread's CPU counts (time on a CPU, times put on one) as read
    /// just before `text`, when `text` found it off its CPU: while the
    /// counts stay these, the thread has not run since, so `text` and its
    /// state still hold and need no read (see [`WaitReader::probe`]).
    quiet: Option<(u64, u64)>,
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

impl WaitReader {
    pub(crate) fn new(pid: i32, detail: WaitDetail) -> WaitReader {
        WaitReader {
            pid,
            detail,
            tables: None,
            tcp_quiet: None,
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

    /// Whether the target is a live process (not a core).
    pub(crate) fn live(&self) -> bool {
        self.recorded.is_none()
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
        self.tcp_quiet = None;
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
            quiet: None,
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
                c.quiet = None;
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
    ///
    /// `counts` are the thread's CPU counts read just now, before the
    /// file (see [`WaitReader::wants_counts`]). When they are the counts
    /// read before the text kept, and that text found the thread off its
    /// CPU, the thread has not run since: no instruction of it ran, so it
    /// is in the same call, in the same state, and the file is not read
    /// again (within the state's time to live). Leaving a CPU adds to the
    /// time on one and coming back adds to the times put on one, so equal
    /// counts on both sides of the text prove it.
    pub(crate) fn probe(
        &mut self,
        tid: i32,
        now: std::time::Instant,
        counts: Option<(u64, u64)>,
    ) -> CallProbe {
        if let Some(c) = self.calls.get_mut(&tid) {
            if let (Some(q), Some((s, at))) = (c.quiet, c.state) {
                if counts == Some(q)
                    && c.line.is_some_and(|l| l.off_cpu())
                    && now.saturating_duration_since(at) < SAME_CALL_TTL
                {
                    c.fresh = true;
                    return CallProbe::Same(s);
                }
            }
        }
        let Some((c, same)) = self.read_call(tid) else {
            return CallProbe::Read;
        };
        c.fresh = true;
        c.quiet = counts.filter(|_| c.line.is_some_and(|l| l.off_cpu()));
        match (c.line, c.state) {
            (Some(SyscallLine::Running), _) => CallProbe::Running,
            (_, Some((s, at))) if same && now.saturating_duration_since(at) < SAME_CALL_TTL => {
                CallProbe::Same(s)
            }
            _ => CallProbe::Read,
        }
    }

    /// Whether the next [`WaitReader::probe`] of `tid` can use its CPU
    /// counts: it was off its CPU at the latest one (a thread seen on a
    /// CPU is read as it is, without counts).
    pub(crate) fn wants_counts(&self, tid: i32) -> bool {
        self.calls
            .get(&tid)
            .is_some_and(|c| c.line.is_some_and(|l| l.off_cpu()))
    }

    /// Whether the latest probe of `tid` found it off its CPU: the kernel
    /// writes a thread's call (or that it is in none) only once the thread
    /// has left its CPU, and "running" while it is on one or waits for one.
    pub(crate) fn seen_off_cpu(&self, tid: i32) -> bool {
        self.calls
            .get(&tid)
            .is_some_and(|c| c.fresh && c.line.is_some_and(|l| l.off_cpu()))
    }

    /// The CPU counts read before the latest probe's text of `tid`, when
    /// that text found it off its CPU (see [`WaitReader::probe`]).
    pub(crate) fn quiet_counts(&self, tid: i32) -> Option<(u64, u64)> {
        self.calls.get(&tid).and_then(|c| c.quiet)
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

    /// One fd of the target, described as a call's fd is (a greenlet's
    /// socket, say).
    pub(crate) fn describe(&mut self, fd: i32) -> FdDesc {
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
        // Full detail: how long a TCP socket has carried no data, asked of
        // our own network namespace's kernel (only when it is the
        // target's), once a pass.
        if self.detail == WaitDetail::Full && d.kind.starts_with("tcp") {
            let quiet =
                self.tcp_quiet.get_or_insert_with(|| {
                    match crate::procfs::same_net_namespace(pid) {
                        true => crate::procfs::tcp_quiet(),
                        false => Default::default(),
                    }
                });
            let inode = target.as_deref().and_then(|t| link_inode(t, "socket"));
            d.quiet_s = inode
                .and_then(|i| quiet.get(&i))
                .map(|ms| f64::from(*ms) / 1000.0);
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
