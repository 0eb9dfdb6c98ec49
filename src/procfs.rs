//! What the kernel says about a process: maps, threads, command line, children.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

// What /proc/PID/maps is parsed into (core.rs still names it from here).
pub(crate) use crate::mapping::MapEntry;

fn proc_path(pid: i32, rest: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{rest}"))
}

fn io_err(pid: i32, e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => absent(pid),
        std::io::ErrorKind::PermissionDenied => Error::Permission { pid },
        _ => Error::Io(format!("reading /proc/{pid}: {e}")),
    }
}

/// What to say when a file of /proc/PID is missing: the process may still
/// be there as a kernel thread (no executable, no maps) or a zombie.
pub(crate) fn absent(pid: i32) -> Error {
    let Ok(stat) = std::fs::read_to_string(proc_path(pid, "stat")) else {
        return Error::NoSuchProcess(pid);
    };
    if matches!(parse_stat_state(&stat), Some('Z' | 'X')) {
        return Error::Zombie(pid);
    }
    // Field 9, the task flags: PF_KTHREAD.
    const PF_KTHREAD: u64 = 0x0020_0000;
    if stat_field(&stat, 9).is_some_and(|f| f & PF_KTHREAD != 0) {
        return Error::KernelThread(pid);
    }
    Error::NoSuchProcess(pid)
}

/// The fields of a line of /proc/PID[/task/TID]/stat after the command
/// name (field 2), which may hold spaces and parentheses: they start after
/// its last ')'. The one stat parser: [`stat_field`] and
/// [`parse_stat_state`] are built on it.
fn stat_fields(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat.get(stat.rfind(')')? + 1..)?.split_whitespace())
}

/// Numeric field `n` (1-based, as proc(5) counts) of a stat line.
pub fn stat_field(stat: &str, n: usize) -> Option<u64> {
    // Field 3 (the state) is the first after the command name.
    stat_fields(stat)?.nth(n.checked_sub(3)?)?.parse().ok()
}

/// The scheduler state letter (field 3: R, S, D, T, t, Z…) of a stat line.
pub fn parse_stat_state(stat: &str) -> Option<char> {
    stat_fields(stat)?.next()?.chars().next()
}

/// What tells one run of a program from another under the same pid: the
/// start time (a reused pid), and where the code and stack of its memory
/// are (a new program after exec, ASLR placing them anew).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) start_time: u64,
    pub(crate) start_code: u64,
    pub(crate) start_stack: u64,
}

impl Identity {
    pub(crate) fn parse(stat: &str) -> Option<Identity> {
        Some(parse_live_stat(stat)?.0)
    }

    /// Whether the leader still has its memory: the kernel writes 0 for
    /// the code and stack addresses of a task without one, which is a
    /// leader that exited (the whole process, or only the main thread), or
    /// the moment of an exec from another thread, before that thread takes
    /// the leader's place. Neither is a new program yet.
    pub(crate) fn has_memory(&self) -> bool {
        self.start_code != 0 || self.start_stack != 0
    }
}

/// The identity, and field 20 (the process's number of threads), of a stat
/// line. Read every sampling pass, so one pass over the fields after the
/// command name, parsing only the wanted ones.
fn parse_live_stat(stat: &str) -> Option<(Identity, u64)> {
    // Fields wanted (1-based, as proc(5) counts); field 3 follows the ')'.
    // The kernel separates fields with one space and ends the line with a
    // newline.
    const WANT: [usize; 4] = [20, 22, 26, 28];
    let b = stat.get(stat.rfind(')')? + 2..)?.as_bytes();
    let (mut i, mut field) = (0, 3);
    let mut got = [0u64; 4];
    for (k, &want) in WANT.iter().enumerate() {
        while field < want {
            i += b.get(i..)?.iter().position(|&c| c == b' ')? + 1;
            field += 1;
        }
        let len = b[i..]
            .iter()
            .position(|&c| c == b' ' || c == b'\n')
            .unwrap_or(b.len() - i);
        // Only the wanted fields must be numbers.
        got[k] = std::str::from_utf8(&b[i..i + len]).ok()?.parse().ok()?;
    }
    let id = Identity {
        start_time: got[1],
        start_code: got[2],
        start_stack: got[3],
    };
    Some((id, got[0]))
}

/// The leader thread's `/proc/PID/task/PID/stat`, kept open and re-read
/// each pass: once the process is gone the open file fails rather than
/// showing a later owner of the pid. The thread's file, not the process's:
/// it has the same identity fields and thread count, and the kernel writes
/// it without summing the counters of every thread of the process.
pub(crate) struct StatFile {
    file: std::fs::File,
}

impl StatFile {
    pub(crate) fn open(pid: i32) -> Result<StatFile> {
        let file = std::fs::File::open(proc_path(pid, &format!("task/{pid}/stat")))
            .map_err(|e| io_err(pid, e))?;
        Ok(StatFile { file })
    }

    /// None when the process is gone.
    pub(crate) fn identity(&self) -> Option<Identity> {
        Some(self.read()?.0)
    }

    /// The identity and the process's thread count; None when it is gone.
    pub(crate) fn read(&self) -> Option<(Identity, u64)> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 1024];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        parse_live_stat(std::str::from_utf8(&buf[..n]).ok()?)
    }
}

/// A per-pass check, lighter for the kernel than a stat line, that a
/// process is still the one opened. Its `/proc/PID/mem`, opened once, reads
/// the memory the process had then: once that memory is gone (the process
/// exited, exec'd another program, or its pid went to another process) a
/// read through it returns nothing. The thread count comes from the link
/// count the kernel gives `/proc/PID/task`: two plus the number of threads.
pub(crate) struct SameMemory {
    mem: std::fs::File,
    tasks: std::fs::File,
    /// An address mapped for the life of the program.
    addr: u64,
}

impl SameMemory {
    pub(crate) fn open(pid: i32, addr: u64) -> Option<SameMemory> {
        let mem = std::fs::File::open(proc_path(pid, "mem")).ok()?;
        let tasks = std::fs::File::open(proc_path(pid, "task")).ok()?;
        let same = SameMemory { mem, tasks, addr };
        same.threads().map(|_| same)
    }

    /// The process's thread count, while its memory is the one opened;
    /// None once it is not, or no thread is left.
    pub(crate) fn threads(&self) -> Option<u64> {
        if !self.memory_same() {
            return None;
        }
        self.thread_count()
    }

    /// Whether the memory read through the file opened is still there.
    pub(crate) fn memory_same(&self) -> bool {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 1];
        self.mem.read_at(&mut b, self.addr).is_ok_and(|n| n == 1)
    }

    /// The thread count of the process the task directory opened belongs
    /// to (cheaper than the memory check); None when no thread is left.
    pub(crate) fn thread_count(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let links = self.tasks.metadata().ok()?.nlink();
        links.checked_sub(2).filter(|&n| n > 0)
    }
}

/// Every process's pid, from the numbered entries of /proc (none when
/// /proc cannot be read).
pub(crate) fn pids() -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .collect()
}

/// The last part of the cgroup `pid` is in, when it is not the root: what
/// names a container or a service (`docker-3f2a….scope`, `nginx.service`),
/// as the kernel writes it (the caller makes it printable).
/// The unified hierarchy's path when there is one, else the first v1
/// controller's that is not the root.
pub(crate) fn cgroup_name(pid: i32) -> Option<String> {
    let text = std::fs::read_to_string(proc_path(pid, "cgroup")).ok()?;
    parse_cgroup_name(&text)
}

pub(crate) fn parse_cgroup_name(text: &str) -> Option<String> {
    let paths: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let (id, _controllers, path) = (it.next()?, it.next()?, it.next()?);
            Some((id, path.trim()))
        })
        .collect();
    let unified = paths.iter().find(|(id, _)| *id == "0").map(|(_, p)| *p);
    let path = unified
        .filter(|p| *p != "/")
        .or_else(|| paths.iter().map(|(_, p)| *p).find(|p| *p != "/"))?;
    let last = path.trim_end_matches('/').rsplit('/').next()?;
    (!last.is_empty()).then(|| last.to_string())
}

/// The identity of `pid` now, read afresh.
pub(crate) fn identity(pid: i32) -> Option<Identity> {
    Identity::parse(&std::fs::read_to_string(proc_path(pid, "stat")).ok()?)
}

/// Whether `tid` is a thread of process `pid` (and not of some other process).
/// Asked of the kernel with `tgkill(pid, tid, 0)`, which sends nothing and
/// fails with ESRCH unless `tid` is in thread group `pid` (EPERM: it is, but
/// ours to signal it is not): what `/proc/PID/task/TID` existing says, without
/// a path walk (it is asked twice per paused thread per sample).
pub(crate) fn is_task(pid: i32, tid: i32) -> bool {
    if tid <= 0 || pid <= 0 {
        return false;
    }
    // SAFETY: tgkill with signal 0 only checks; it takes no pointers.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The target's view of the file system (`/proc/PID/root`), so paths the
/// target names resolve inside its container.
pub(crate) fn root(pid: i32) -> PathBuf {
    proc_path(pid, "root")
}

/// The `stat` and `status` text of thread `tid` of `pid`, read together
/// (`top`'s per-thread CPU and context switches); None when gone.
pub(crate) fn thread_stat_and_status(pid: i32, tid: u32) -> Option<(String, String)> {
    let stat = std::fs::read_to_string(proc_path(pid, &format!("task/{tid}/stat"))).ok()?;
    let status = std::fs::read_to_string(proc_path(pid, &format!("task/{tid}/status"))).ok()?;
    Some((stat, status))
}

/// (voluntary, involuntary) context switches from a status file.
pub(crate) fn ctxt_switches(status: &str) -> Option<(u64, u64)> {
    let vol = status_field(status, "voluntary_ctxt_switches:")?
        .parse()
        .ok()?;
    let invol = status_field(status, "nonvoluntary_ctxt_switches:")?
        .parse()
        .ok()?;
    Some((vol, invol))
}

/// The `TracerPid` of thread `tid` of `pid` (0: not traced); None when gone.
pub(crate) fn tracer_pid(pid: i32, tid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(proc_path(pid, &format!("task/{tid}/status"))).ok()?;
    status_field(&s, "TracerPid:")?.parse().ok()
}

/// Real, effective, saved and filesystem uids of `pid`.
pub(crate) fn uids(pid: i32) -> Option<[u32; 4]> {
    let s = std::fs::read_to_string(proc_path(pid, "status")).ok()?;
    let line = s.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let v: Vec<u32> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    v.try_into().ok()
}

/// The effective capability set of `pid` (`CapEff`).
pub(crate) fn effective_caps(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(proc_path(pid, "status")).ok()?;
    u64::from_str_radix(status_field(&s, "CapEff:")?, 16).ok()
}

fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()
}

pub(crate) fn maps(pid: i32) -> Result<Vec<MapEntry>> {
    let text = std::fs::read_to_string(proc_path(pid, "maps")).map_err(|e| io_err(pid, e))?;
    Ok(parse_maps(&text))
}

/// Parse the text of /proc/PID/maps. Malformed lines are skipped: a parse
/// problem in one line must not cost the whole map.
pub(crate) fn parse_maps(text: &str) -> Vec<MapEntry> {
    text.lines().filter_map(parse_map_line).collect()
}

fn parse_map_line(line: &str) -> Option<MapEntry> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?.as_bytes();
    let offset = u64::from_str_radix(it.next()?, 16).ok()?;
    let _dev = it.next()?;
    let inode = it.next()?.parse().ok()?;
    let path = it.next().unwrap_or("").trim_start().to_string();
    let (s, e) = range.split_once('-')?;
    let (start, end) = (
        u64::from_str_radix(s, 16).ok()?,
        u64::from_str_radix(e, 16).ok()?,
    );
    if end <= start {
        return None;
    }
    Some(MapEntry {
        start,
        end,
        readable: perms.first() == Some(&b'r'),
        writable: perms.get(1) == Some(&b'w'),
        executable: perms.get(2) == Some(&b'x'),
        offset,
        inode,
        path,
    })
}

/// The command line, arguments joined by spaces.
pub(crate) fn cmdline(pid: i32) -> Result<String> {
    let raw = std::fs::read(proc_path(pid, "cmdline")).map_err(|e| io_err(pid, e))?;
    let parts: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    Ok(parts.join(" "))
}

/// The executable as the target sees it (may end in " (deleted)").
pub(crate) fn exe(pid: i32) -> Result<String> {
    let p = std::fs::read_link(proc_path(pid, "exe")).map_err(|e| io_err(pid, e))?;
    Ok(p.to_string_lossy().into_owned())
}

/// The short name of the process (from /proc/PID/comm).
pub(crate) fn comm(pid: i32, tid: i32) -> Option<String> {
    std::fs::read_to_string(proc_path(pid, &format!("task/{tid}/comm")))
        .ok()
        .map(|s| s.trim_end().to_string())
}

pub(crate) fn tasks(pid: i32) -> Result<Vec<i32>> {
    let rd = std::fs::read_dir(proc_path(pid, "task")).map_err(|e| io_err(pid, e))?;
    let mut v: Vec<i32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// Kernel scheduler state letter of a thread (R, S, D, T, t, Z…), from its stat file.
/// A schedstat line, "cpu_ns wait_ns timeslices": the time on a CPU and the
/// number of times put on one. None for a kernel that keeps no counts
/// (it writes zeros) or for text that is not such a line.
pub(crate) fn parse_schedstat(text: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut it = text.split_ascii_whitespace();
    let cpu = it.next()?.parse::<u64>().ok()?;
    let _wait = it.next()?.parse::<u64>().ok()?;
    let slices = it.next()?.parse::<u64>().ok()?;
    (it.next().is_none() && slices != 0).then_some((cpu, slices))
}

pub fn thread_state(pid: i32, tid: i32) -> Option<char> {
    use std::io::Read;
    // One read into a stack buffer: the state is near the start, and
    // read_to_string would stat the file first.
    let mut f = std::fs::File::open(proc_path(pid, &format!("task/{tid}/stat"))).ok()?;
    let mut buf = [0u8; 512];
    let n = f.read(&mut buf).ok()?;
    parse_stat_state(&String::from_utf8_lossy(&buf[..n]))
}

/// Whether a thread in scheduler state `state` has died and waits to be
/// reaped (zombie `Z`, or dead `X`), and is not the leader (a leader stays
/// a zombie while its group lives, and its exit belongs to its parent).
pub(crate) fn is_dead_thread(pid: i32, tid: i32, state: char) -> bool {
    tid != pid && matches!(state, 'Z' | 'X')
}

/// The threads of `pid` other than its leader that have died and wait to
/// be reaped. Bounded by what the kernel lists under `/proc/PID/task/`.
pub(crate) fn dead_threads(pid: i32) -> Vec<i32> {
    tasks(pid)
        .unwrap_or_default()
        .into_iter()
        .filter(|&tid| thread_state(pid, tid).is_some_and(|s| is_dead_thread(pid, tid, s)))
        .collect()
}

/// How long the calling thread has waited on a run queue for a CPU since it
/// started (the second field of /proc/thread-self/schedstat): time a busy
/// machine kept it from running.
pub(crate) fn own_run_delay() -> Option<std::time::Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(std::time::Duration::from_nanos(ns))
}

/// The one-minute load average (/proc/loadavg).
/// The running kernel's release (`6.1.0-18-amd64`).
pub(crate) fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string())
}

pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// When the target lives in another pid namespace (a container), the tids
/// it records for itself differ from ours: map its view to ours, from the
/// `NSpid` line of each thread's status. None when the namespace is ours.
pub(crate) fn namespaced_tids(pid: i32) -> Option<std::collections::HashMap<u32, u32>> {
    let ours = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let theirs = std::fs::read_link(proc_path(pid, "ns/pid")).ok()?;
    if ours == theirs {
        return None;
    }
    let mut map = std::collections::HashMap::new();
    for tid in tasks(pid).ok()? {
        let Ok(status) = std::fs::read_to_string(proc_path(pid, &format!("task/{tid}/status")))
        else {
            continue;
        };
        if let Some(inner) = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|ids| ids.split_whitespace().last())
            .and_then(|v| v.parse::<u32>().ok())
        {
            map.insert(inner, tid as u32);
        }
    }
    Some(map)
}

/// A small /proc text file, bounded (the files read here are a few KiB; a
/// net table of a busy namespace can be larger, hence the cap).
fn read_small(path: PathBuf, cap: u64) -> Option<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    let mut buf = Vec::new();
    f.take(cap).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// `/proc/PID/task/TID/syscall` opened, to be read again with `pread` at
/// each sample (samplers keep it open rather than reopen it).
pub(crate) fn open_thread_syscall(pid: i32, tid: i32) -> Option<std::fs::File> {
    std::fs::File::open(proc_path(pid, &format!("task/{tid}/syscall"))).ok()
}

/// `/proc/PID/task/TID/wchan`: the kernel function a thread sleeps in.
pub(crate) fn thread_wchan(pid: i32, tid: i32) -> Option<String> {
    read_small(proc_path(pid, &format!("task/{tid}/wchan")), 256)
}

/// `/proc/PID/task/TID/stack`: the kernel stack (root only).
pub(crate) fn thread_kernel_stack(pid: i32, tid: i32) -> Option<String> {
    read_small(proc_path(pid, &format!("task/{tid}/stack")), 16 << 10)
}

/// What the target's fd links to (`socket:[123]`, `pipe:[4]`, a path).
pub(crate) fn fd_target(pid: i32, fd: i32) -> Option<String> {
    std::fs::read_link(proc_path(pid, &format!("fd/{fd}")))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Whether the target's fd is a FIFO (a named pipe: its link is a path).
pub(crate) fn fd_is_fifo(pid: i32, fd: i32) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(proc_path(pid, &format!("fd/{fd}"))).is_ok_and(|m| m.file_type().is_fifo())
}

/// `/proc/PID/fdinfo/FD` (an epoll set lists the fds it watches, ~80
/// bytes each: 1 MiB counts some 13,000).
pub(crate) fn fdinfo(pid: i32, fd: i32) -> Option<String> {
    read_small(proc_path(pid, &format!("fdinfo/{fd}")), 1 << 20)
}

/// `/proc/PID/net/NAME` (tcp, tcp6, udp, udp6, unix): the target's own
/// network namespace's table.
pub(crate) fn net_table(pid: i32, name: &str) -> Option<String> {
    read_small(proc_path(pid, &format!("net/{name}")), 16 << 20)
}

/// Every fd of every process that links to `target` (e.g. `pipe:[123]`),
/// as (pid, fd), bounded: what holds the other end of a pipe or FIFO.
pub(crate) fn fd_holders(targets: &[String], limit: usize) -> Vec<(i32, i32, String)> {
    let mut out = Vec::new();
    // A set: a select or epoll set's pipes are looked for in one scan.
    let wanted: std::collections::HashSet<&str> = targets.iter().map(String::as_str).collect();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc_path(pid, "fd")) else {
            continue;
        };
        for f in fds.flatten() {
            if let Ok(t) = std::fs::read_link(f.path()) {
                let t = t.to_string_lossy();
                if wanted.contains(t.as_ref()) {
                    if let Some(fd) = f.file_name().to_str().and_then(|s| s.parse().ok()) {
                        out.push((pid, fd, t.into_owned()));
                        if out.len() >= limit {
                            return out;
                        }
                    }
                }
            }
        }
    }
    out
}

/// Whether `pid` lives in our network namespace (sock_diag answers for ours only).
pub(crate) fn same_net_namespace(pid: i32) -> bool {
    let ours = std::fs::read_link("/proc/self/ns/net").ok();
    ours.is_some() && ours == std::fs::read_link(proc_path(pid, "ns/net")).ok()
}

/// sock_diag's message type (`SOCK_DIAG_BY_FAMILY`), in requests and answers.
const SOCK_DIAG_BY_FAMILY: u16 = 20;

/// A sock_diag netlink socket (what `ss` asks), its request `req` sent
/// (`req` is the message after the 16-byte header; `dump`: all that match,
/// in parts): None when the kernel has none. Answers never hang: the
/// kernel answers at once, and a receive times out after 200 ms.
fn sock_diag_ask(req: &[u8], dump: bool) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    const NETLINK_SOCK_DIAG: libc::c_int = 4;
    // SAFETY: plain socket(2); the fd is closed by OwnedFd.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` is a socket we just opened and own.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 200_000,
    };
    // SAFETY: setsockopt with a timeval we own and its size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as u32,
        );
    }
    let flags = libc::NLM_F_REQUEST | if dump { libc::NLM_F_DUMP } else { 0 };
    let mut msg = Vec::with_capacity(16 + req.len());
    msg.extend_from_slice(&(16 + req.len() as u32).to_ne_bytes());
    msg.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    msg.extend_from_slice(&(flags as u16).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes()); // seq
    msg.extend_from_slice(&0u32.to_ne_bytes()); // pid
    msg.extend_from_slice(req);
    // SAFETY: a zeroed sockaddr_nl addresses the kernel.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: sendto with our buffer and a valid sockaddr_nl.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            msg.as_ptr() as *const libc::c_void,
            msg.len(),
            0,
            &kernel as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    (sent == msg.len() as isize).then_some(fd)
}

/// One datagram of sock_diag's answer into `buf`: its length (None: no
/// more, or an error).
fn sock_diag_recv(fd: &std::os::fd::OwnedFd, buf: &mut [u8]) -> Option<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: recv into a buffer we own.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            0,
        )
    };
    usize::try_from(n).ok().filter(|n| *n > 0)
}

/// The inode of the peer of unix socket `inode`, asked of the kernel's
/// sock_diag netlink interface (what `ss -x` uses; /proc/net/unix does not
/// say). None when the kernel has no unix_diag, or the socket is gone.
pub(crate) fn unix_socket_peer(inode: u64) -> Option<u64> {
    const UDIAG_SHOW_PEER: u32 = 4;
    const UNIX_DIAG_PEER: u16 = 2;
    let ino = u32::try_from(inode).ok()?;
    // unix_diag_req (24 bytes).
    let mut req = Vec::with_capacity(24);
    req.push(libc::AF_UNIX as u8); // sdiag_family
    req.push(0); // sdiag_protocol
    req.extend_from_slice(&0u16.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // udiag_states: all
    req.extend_from_slice(&ino.to_ne_bytes());
    req.extend_from_slice(&UDIAG_SHOW_PEER.to_ne_bytes());
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // no cookie
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    let fd = sock_diag_ask(&req, false)?;
    let mut buf = [0u8; 4096];
    let n = sock_diag_recv(&fd, &mut buf)?;
    parse_unix_diag_peer(&buf[..n], UNIX_DIAG_PEER)
}

/// The peer inode attribute of a sock_diag answer (one message).
fn parse_unix_diag_peer(msg: &[u8], attr_type: u16) -> Option<u64> {
    let u16_at = |o: usize| Some(u16::from_ne_bytes(msg.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_ne_bytes(msg.get(o..o + 4)?.try_into().ok()?));
    let len = (u32_at(0)? as usize).min(msg.len());
    if u16_at(4)? != 20 {
        return None; // NLMSG_ERROR or anything but the answer
    }
    // nlmsghdr (16) + unix_diag_msg (16), then 4-byte aligned attributes.
    let mut at = 32;
    while at + 4 <= len {
        let alen = u16_at(at)? as usize;
        if alen < 4 {
            return None;
        }
        if u16_at(at + 2)? == attr_type && alen >= 8 {
            return u32_at(at + 4).map(u64::from);
        }
        at += (alen + 3) & !3;
    }
    None
}

/// The most TCP sockets [`tcp_quiet`] reads.
const MAX_TCP_SOCKETS: usize = 1_000_000;

/// Every TCP socket of this process's network namespace (IPv4 and IPv6,
/// but listening and TIME_WAIT ones), by inode: how many milliseconds ago
/// it last carried data either way (the least of the kernel's `tcp_info`
/// `last_data_sent` and `last_data_recv`), as sock_diag tells (`ss -ti`).
/// Empty when the kernel has no inet_diag.
pub(crate) fn tcp_quiet() -> std::collections::HashMap<u64, u32> {
    const INET_DIAG_INFO: u8 = 2;
    const LISTEN: u32 = 10;
    const TIME_WAIT: u32 = 6;
    let mut out = std::collections::HashMap::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        // inet_diag_req_v2 (56 bytes): family, protocol, extensions, pad,
        // states, then a socket id (48 bytes) that a dump leaves unset.
        let mut req = vec![0u8; 56];
        req[0] = family as u8;
        req[1] = libc::IPPROTO_TCP as u8;
        req[2] = 1 << (INET_DIAG_INFO - 1);
        let states = 0xfff & !(1u32 << LISTEN) & !(1u32 << TIME_WAIT);
        req[4..8].copy_from_slice(&states.to_ne_bytes());
        let Some(fd) = sock_diag_ask(&req, true) else {
            continue;
        };
        let mut buf = vec![0u8; 64 * 1024];
        'parts: while out.len() < MAX_TCP_SOCKETS {
            let Some(n) = sock_diag_recv(&fd, &mut buf) else {
                break;
            };
            for m in netlink_messages(&buf[..n]) {
                match parse_tcp_quiet(m) {
                    TcpDiag::Socket(inode, ms) => {
                        out.insert(inode, ms);
                    }
                    TcpDiag::Other => {}
                    TcpDiag::Done => break 'parts,
                }
            }
        }
    }
    out
}

/// The messages of one netlink datagram (each with its header).
fn netlink_messages(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let len = u32::from_ne_bytes(buf.get(at..at + 4)?.try_into().ok()?) as usize;
        if len < 16 {
            return None;
        }
        let m = buf.get(at..at + len)?;
        at += (len + 3) & !3;
        Some(m)
    })
}

/// One message of an inet_diag answer.
#[derive(Debug, PartialEq)]
enum TcpDiag {
    /// A socket's inode and its milliseconds since its last data.
    Socket(u64, u32),
    /// A socket without `tcp_info`, or a message of no interest.
    Other,
    /// The end of the answer (or an error).
    Done,
}

fn parse_tcp_quiet(m: &[u8]) -> TcpDiag {
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    let u16_at = |o: usize| Some(u16::from_ne_bytes(m.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_ne_bytes(m.get(o..o + 4)?.try_into().ok()?));
    match u16_at(4) {
        Some(SOCK_DIAG_BY_FAMILY) => {}
        Some(NLMSG_ERROR | NLMSG_DONE) | None => return TcpDiag::Done,
        Some(_) => return TcpDiag::Other,
    }
    // nlmsghdr (16) + inet_diag_msg (72: its inode at 68), then 4-byte
    // aligned attributes; INET_DIAG_INFO's is a tcp_info, whose
    // last_data_sent is at 44 and last_data_recv at 52.
    let Some(inode) = u32_at(16 + 68) else {
        return TcpDiag::Other;
    };
    let mut at = 16 + 72;
    while let (Some(alen), Some(ty)) = (u16_at(at), u16_at(at + 2)) {
        let alen = alen as usize;
        if alen < 4 {
            break;
        }
        if ty == 2 {
            if let (Some(sent), Some(recv)) = (u32_at(at + 4 + 44), u32_at(at + 4 + 52)) {
                if 4 + 56 <= alen {
                    return TcpDiag::Socket(u64::from(inode), sent.min(recv));
                }
            }
        }
        at += (alen + 3) & !3;
    }
    TcpDiag::Other
}

/// Parent pid from /proc/PID/stat.
pub(crate) fn ppid(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(proc_path(pid, "stat")).ok()?;
    stat_field(&s, 4)?.try_into().ok()
}

/// Every descendant of `pid` (children, grandchildren…), parents before children.
pub(crate) fn descendants(pid: i32) -> Vec<i32> {
    let mut parent_of = Vec::new();
    for p in pids() {
        if let Some(pp) = ppid(p) {
            parent_of.push((p, pp));
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    // Bounded by the number of processes: each is visited at most once.
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &parent_of {
            if pp == p && !out.contains(&c) && c != pid {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

/// Open a file the target has mapped, as the target sees it: through
/// /proc/PID/map_files (works for deleted files) or /proc/PID/root (containers).
pub(crate) fn target_file(pid: i32, map: &MapEntry) -> Option<PathBuf> {
    let by_range = proc_path(pid, &format!("map_files/{:x}-{:x}", map.start, map.end));
    if std::fs::metadata(&by_range).is_ok() {
        return Some(by_range);
    }
    if !map.is_file() {
        return None;
    }
    let path = map.file_path();
    let rooted = proc_path(pid, "root").join(Path::new(path).strip_prefix("/").ok()?);
    if rooted.exists() {
        return Some(rooted);
    }
    Some(PathBuf::from(path)).filter(|p| p.exists())
}

/// One mapping of /proc/PID/smaps: its line of maps and what of it is
/// resident, swapped out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SmapsEntry {
    pub(crate) map: MapEntry,
    /// `Rss`, bytes.
    pub(crate) rss: u64,
    /// `Swap`, bytes.
    pub(crate) swap: u64,
}

/// /proc/PID/smaps, read once.
pub(crate) fn smaps(pid: i32) -> Result<Vec<SmapsEntry>> {
    let text = std::fs::read_to_string(proc_path(pid, "smaps")).map_err(|e| io_err(pid, e))?;
    Ok(parse_smaps(&text))
}

/// Parse the text of /proc/PID/smaps: a maps line, then `Key: N kB`
/// lines. A malformed header line drops its entry, not the rest.
pub(crate) fn parse_smaps(text: &str) -> Vec<SmapsEntry> {
    let mut out: Vec<SmapsEntry> = Vec::new();
    let mut current: Option<SmapsEntry> = None;
    for line in text.lines() {
        let kb = |rest: &str| -> Option<u64> {
            let n: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
            n.checked_mul(1024)
        };
        if let Some(rest) = line.strip_prefix("Rss:") {
            if let (Some(e), Some(b)) = (current.as_mut(), kb(rest)) {
                e.rss = b;
            }
        } else if let Some(rest) = line.strip_prefix("Swap:") {
            if let (Some(e), Some(b)) = (current.as_mut(), kb(rest)) {
                e.swap = b;
            }
        } else if line
            .split_once(' ')
            .is_some_and(|(range, _)| range.contains('-') && !range.ends_with(':'))
        {
            out.extend(current.take());
            current = parse_map_line(line).map(|map| SmapsEntry {
                map,
                rss: 0,
                swap: 0,
            });
        }
    }
    out.extend(current);
    out
}

/// Pages of /proc/PID/pagemap read at most by one [`resident_bytes`]
/// call (128 MB of it: 64 GB of address space).
pub(crate) const MAX_PAGEMAP_PAGES: u64 = 1 << 24;

/// The bytes of `[start, end)` that are resident (in memory, not swapped),
/// from /proc/PID/pagemap; None when it cannot be read, or the range is
/// larger than [`MAX_PAGEMAP_PAGES`].
pub(crate) fn resident_bytes(pagemap: &std::fs::File, start: u64, end: u64) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    const PAGE: u64 = 4096;
    const PRESENT: u64 = 1 << 63;
    let first = start / PAGE;
    let last = end.checked_add(PAGE - 1)? / PAGE;
    if last <= first {
        return Some(0);
    }
    if last - first > MAX_PAGEMAP_PAGES {
        return None;
    }
    let mut resident = 0u64;
    let mut buf = vec![0u8; 8 * 8192];
    let mut page = first;
    while page < last {
        let n = (last - page).min(8192) as usize;
        let chunk = &mut buf[..n * 8];
        let got = pagemap.read_at(chunk, page.checked_mul(8)?).ok()?;
        if got != n * 8 {
            return None;
        }
        resident += chunk
            .chunks_exact(8)
            .filter(|e| u64::from_le_bytes((*e).try_into().unwrap_or([0; 8])) & PRESENT != 0)
            .count() as u64;
        page += n as u64;
    }
    Some(resident * PAGE)
}

/// /proc/PID/pagemap opened (for [`resident_bytes`]).
pub(crate) fn open_pagemap(pid: i32) -> Option<std::fs::File> {
    std::fs::File::open(proc_path(pid, "pagemap")).ok()
}

/// A stopped or blocked thread's stack pointer, from
/// /proc/PID/task/TID/syscall (`NR args… SP PC`, or `-1 SP PC`); None
/// while it runs.
pub(crate) fn thread_stack_pointer(pid: i32, tid: i32) -> Option<u64> {
    let text = read_small(proc_path(pid, &format!("task/{tid}/syscall")), 512)?;
    parse_syscall_sp(&text)
}

fn parse_syscall_sp(text: &str) -> Option<u64> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() < 3 {
        return None;
    }
    let sp = fields[fields.len() - 2];
    u64::from_str_radix(sp.strip_prefix("0x").unwrap_or(sp), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_switches_from_a_status_file() {
        let s = "Name:\tpython\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(ctxt_switches(s), Some((12, 3)));
        assert_eq!(ctxt_switches("Name: x\n"), None);
    }

    #[test]
    fn smaps_entries_with_rss_and_swap() {
        let text = "\
55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
Rss:                  12 kB
Swap:                  0 kB
VmFlags: rd wr mr mw me ac
7f0000000000-7f0000100000 rw-p 00000000 00:00 0 
Size:               1024 kB
Rss:                 256 kB
Swap:                 8 kB
7f1000000000-7f1000001000 r--p 00000000 08:01 1234                       /usr/lib/libx.so
Rss:                   4 kB
";
        let e = parse_smaps(text);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].map.path, "[heap]");
        assert_eq!((e[0].rss, e[0].swap), (12 << 10, 0));
        assert_eq!(e[1].map.path, "");
        assert_eq!((e[1].rss, e[1].swap), (256 << 10, 8 << 10));
        assert!(e[2].map.is_file());
        assert_eq!(e[2].rss, 4 << 10);
    }

    #[test]
    fn stack_pointer_of_a_syscall_line() {
        assert_eq!(
            parse_syscall_sp("202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd1000 0x7f00aa\n"),
            Some(0x7ffd1000)
        );
        assert_eq!(
            parse_syscall_sp("-1 0x7ffd2000 0x7f00aa\n"),
            Some(0x7ffd2000)
        );
        assert_eq!(parse_syscall_sp("running\n"), None);
    }

    #[test]
    fn own_stack_is_resident() {
        let x = [1u8; 64];
        let addr = x.as_ptr() as u64;
        let pm = open_pagemap(std::process::id() as i32).unwrap();
        assert_eq!(resident_bytes(&pm, addr, addr + 1), Some(4096));
    }

    #[test]
    fn only_dead_non_leaders_are_dead_threads() {
        for s in ['R', 'S', 'D', 'T', 't', 'I', 'W', 'P'] {
            assert!(!is_dead_thread(10, 11, s), "{s}");
        }
        assert!(is_dead_thread(10, 11, 'Z'));
        assert!(is_dead_thread(10, 11, 'X'));
        assert!(!is_dead_thread(10, 10, 'Z'), "the leader is never reaped");
        // A live process of ours has no dead threads.
        assert!(dead_threads(std::process::id() as i32).is_empty());
    }

    #[test]
    fn schedstat_lines() {
        assert_eq!(
            parse_schedstat(b"60128896 54361004 1416\n"),
            Some((60128896, 1416))
        );
        // A kernel that keeps no counts writes zeros: nothing to compare.
        assert_eq!(parse_schedstat(b"0 0 0\n"), None);
        for bad in [
            &b""[..],
            b"1 2",
            b"1 2 3 4",
            b"x 2 3",
            b"1 2 -3",
            b"\xff 1 2",
        ] {
            assert_eq!(parse_schedstat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parses_file_anon_and_deleted_lines() {
        let text = "\
55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1234 /usr/bin/prog
7f0000001000-7f0000002000 r-xp 00001000 08:01 99 /tmp/lib x.so (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
7f0000003000-7f0000004000 rw-p 00000000 00:00 0
garbage line
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 4);
        assert!(m[0].is_file() && !m[0].executable && !m[0].writable);
        assert!(m[1].executable && m[1].file_path() == "/tmp/lib x.so" && m[1].offset == 0x1000);
        assert_eq!(m[2].path, "[stack]");
        assert!(!m[2].is_file() && m[2].writable);
        assert_eq!(m[3].path, "");
        assert!(m[1].contains(0x7f0000001fff) && !m[1].contains(0x7f0000002000));
    }

    #[test]
    fn stat_fields_after_odd_comm() {
        let line = "7 (a) b) S 1 7 7 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 4242 100 5 \
                    18446744073709551615 4194304 4196000 140730000000000 0 0";
        assert_eq!(stat_field(line, 4), Some(1));
        assert_eq!(stat_field(line, 9), Some(4194560));
        let id = Identity::parse(line).unwrap();
        assert_eq!(id.start_time, 4242);
        assert_eq!(id.start_code, 4194304);
        assert_eq!(id.start_stack, 140730000000000);
        assert_eq!(parse_live_stat(line).unwrap().1, 1);
        // Cut short, or a wanted field not a number: no identity.
        assert_eq!(Identity::parse(&line[..line.len() - 20]), None);
        assert_eq!(Identity::parse(&line.replace(" 4242 ", " 42x2 ")), None);
        assert_eq!(Identity::parse(&line.replace(" 4242 ", " -4242 ")), None);
        // Other fields may hold anything, and a real line of ours parses as
        // the field-by-field reading does.
        assert!(Identity::parse(&line.replace(" -1 ", " x ")).is_some());
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        let (id, threads) = parse_live_stat(&own).unwrap();
        assert_eq!(Some(id.start_time), stat_field(&own, 22));
        assert_eq!(Some(id.start_code), stat_field(&own, 26));
        assert_eq!(Some(id.start_stack), stat_field(&own, 28));
        assert_eq!(Some(threads), stat_field(&own, 20));
        assert!(id.has_memory());
    }

    #[test]
    fn a_leader_that_exited_has_no_memory() {
        // The stat line of a process whose main thread called pthread_exit
        // while a second thread runs on (seen on 6.x kernels): the leader is
        // a zombie, and its code and stack addresses read 0.
        let line = "25557 (python) Z 1 25557 25557 0 -1 4194380 0 0 0 0 0 0 0 0 20 0 2 0 \
                    538101 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let (id, threads) = parse_live_stat(line).unwrap();
        assert_eq!((id.start_time, threads), (538101, 2));
        assert!(!id.has_memory());
    }

    #[test]
    fn tcp_diag_answer_parsed() {
        // nlmsghdr (type 20), inet_diag_msg (inode 4242), an attribute of
        // another type (6 bytes, padded to 8), then INET_DIAG_INFO.
        let mut m = vec![0u8; 16 + 72];
        m[4..6].copy_from_slice(&20u16.to_ne_bytes());
        m[16 + 68..16 + 72].copy_from_slice(&4242u32.to_ne_bytes());
        m.extend_from_slice(&6u16.to_ne_bytes());
        m.extend_from_slice(&1u16.to_ne_bytes());
        m.extend_from_slice(&[7, 7, 0, 0]);
        let mut info = vec![0u8; 232];
        info[44..48].copy_from_slice(&900u32.to_ne_bytes());
        info[52..56].copy_from_slice(&300u32.to_ne_bytes());
        m.extend_from_slice(&(4 + info.len() as u16).to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes());
        m.extend_from_slice(&info);
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        assert_eq!(parse_tcp_quiet(&m), TcpDiag::Socket(4242, 300));
        // Cut inside its tcp_info, or without it: no time.
        assert_eq!(parse_tcp_quiet(&m[..16 + 72 + 8 + 4 + 40]), TcpDiag::Other);
        assert_eq!(parse_tcp_quiet(&m[..16 + 72]), TcpDiag::Other);
        // The end, an error, nothing: the answer ends.
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&3u16.to_ne_bytes());
        assert_eq!(parse_tcp_quiet(&done), TcpDiag::Done);
        done[4..6].copy_from_slice(&2u16.to_ne_bytes());
        assert_eq!(parse_tcp_quiet(&done), TcpDiag::Done);
        assert_eq!(parse_tcp_quiet(&[]), TcpDiag::Done);
        // One datagram, two messages (the first padded to 4 bytes): both
        // found; a length under a header's, or past the end, stops.
        let mut two = m.clone();
        two.extend_from_slice(&done);
        assert_eq!(netlink_messages(&two).count(), 2);
        let mut bad = m.clone();
        bad[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert_eq!(netlink_messages(&bad).count(), 0);
        bad[0..4].copy_from_slice(&(len + 1).to_ne_bytes());
        assert_eq!(netlink_messages(&bad).count(), 0);
    }

    #[test]
    fn tcp_quiet_of_a_live_connection() {
        use std::io::{Read, Write};
        use std::os::unix::fs::MetadataExt;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        // A socket fd's inode is the socket's.
        let inode = |fd: i32| {
            std::fs::metadata(format!("/proc/self/fd/{fd}"))
                .unwrap()
                .ino()
        };
        use std::os::fd::AsRawFd;
        let q = tcp_quiet();
        // `c` received a byte 300 ms ago and never sent one; `s` sent it.
        for sock in [c.as_raw_fd(), s.as_raw_fd()] {
            let ms = q.get(&inode(sock)).copied();
            assert!(ms.is_some_and(|ms| (250..5000).contains(&ms)), "{ms:?} ms");
        }
    }

    #[test]
    fn unix_diag_answer_parsed() {
        // nlmsghdr (type 20), unix_diag_msg, then a NAME and a PEER attribute.
        let mut m = Vec::new();
        m.extend_from_slice(&48u32.to_ne_bytes());
        m.extend_from_slice(&20u16.to_ne_bytes());
        m.extend_from_slice(&[0u8; 10]);
        m.extend_from_slice(&[1, 1, 1, 0, 0x39, 0x30, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        m.extend_from_slice(&6u16.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&[b'a', 0, 0, 0]);
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes());
        m.extend_from_slice(&12346u32.to_ne_bytes());
        assert_eq!(parse_unix_diag_peer(&m, 2), Some(12346));
        assert_eq!(parse_unix_diag_peer(&m[..40], 2), None);
        let mut err = m.clone();
        err[4] = 2;
        assert_eq!(parse_unix_diag_peer(&err, 2), None);
        assert_eq!(parse_unix_diag_peer(&[], 2), None);
    }

    #[test]
    fn unix_socketpair_peer_from_the_kernel() {
        use std::os::unix::fs::MetadataExt;
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let ino = |s: &std::os::unix::net::UnixStream| {
            use std::os::fd::AsRawFd;
            std::fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd()))
                .unwrap()
                .ino()
        };
        // Kernels without unix_diag answer nothing; with it, the other end.
        if let Some(peer) = unix_socket_peer(ino(&a)) {
            assert_eq!(peer, ino(&b));
        }
    }

    #[test]
    fn stat_state_after_odd_comm() {
        assert_eq!(parse_stat_state("12 (a) b)) S 1 2"), Some('S'));
        assert_eq!(parse_stat_state("garbage"), None);
        assert_eq!(parse_stat_state("12 (a)"), None);
        assert_eq!(stat_field("1 (x) S 9", 4), Some(9));
        assert_eq!(stat_field("1 (x) S", 4), None);
        assert_eq!(stat_field("1 (x) S 9", 2), None);
    }

    #[test]
    fn cgroup_names() {
        // cgroup v2 alone, a container's scope.
        let v2 = "0::/system.slice/docker-3f2a.scope\n";
        assert_eq!(parse_cgroup_name(v2).as_deref(), Some("docker-3f2a.scope"));
        // Hybrid, unified at the root: the first v1 path that is not.
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/5550\n0::/\n";
        assert_eq!(parse_cgroup_name(hybrid).as_deref(), Some("5550"));
        // Everything at the root, or nothing readable: no name.
        assert_eq!(parse_cgroup_name("0::/\n1:cpu:/\n"), None);
        assert_eq!(parse_cgroup_name("garbage"), None);
        assert_eq!(parse_cgroup_name(""), None);
    }

    #[test]
    fn tasks_are_told_from_other_processes_threads() {
        let me = std::process::id() as i32;
        // SAFETY: gettid takes nothing.
        let tid = unsafe { libc::gettid() };
        assert!(is_task(me, me));
        assert!(is_task(me, tid));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let other = child.id() as i32;
        assert!(!is_task(me, other));
        assert!(!is_task(other, me));
        assert!(is_task(other, other));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_task(other, other), "a reaped process has no tasks");
        assert!(!is_task(me, 0) && !is_task(me, -1) && !is_task(0, me));
    }
}
