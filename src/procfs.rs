//! What the kernel says about a process: maps, threads, command line, children.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub writable: bool,
    pub executable: bool,
    /// File offset of `start`.
    pub offset: u64,
    pub inode: u64,
    /// The path, or a pseudo name such as `[stack]`, `[vdso]`; empty for
    /// anonymous memory.
    pub path: String,
}

impl MapEntry {
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end
    }
    /// Backed by a file (as opposed to `[heap]`, `[vdso]`, anonymous memory).
    pub fn is_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/')
    }
    /// The path as it names a file; a mapping whose file was deleted keeps
    /// its old path with a " (deleted)" suffix.
    pub fn file_path(&self) -> &str {
        self.path.strip_suffix(" (deleted)").unwrap_or(&self.path)
    }
}

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
pub fn absent(pid: i32) -> Error {
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

/// Numeric field `n` (1-based, as proc(5) counts) of a stat line.
pub fn stat_field(stat: &str, n: usize) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 (the state) is the first after the command name.
    rest.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

/// What tells one run of a program from another under the same pid: the
/// start time (a reused pid), and where the code and stack of its memory
/// are (a new program after exec, ASLR placing them anew).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub start_time: u64,
    pub start_code: u64,
    pub start_stack: u64,
}

impl Identity {
    pub fn parse(stat: &str) -> Option<Identity> {
        Some(Identity {
            start_time: stat_field(stat, 22)?,
            start_code: stat_field(stat, 26)?,
            start_stack: stat_field(stat, 28)?,
        })
    }
}

/// `/proc/PID/stat`, kept open and re-read each pass: once the process is
/// gone the open file fails rather than showing a later owner of the pid.
pub struct StatFile {
    file: std::fs::File,
}

impl StatFile {
    pub fn open(pid: i32) -> Result<StatFile> {
        let file = std::fs::File::open(proc_path(pid, "stat")).map_err(|e| io_err(pid, e))?;
        Ok(StatFile { file })
    }

    /// None when the process is gone.
    pub fn identity(&self) -> Option<Identity> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 1024];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        Identity::parse(std::str::from_utf8(&buf[..n]).ok()?)
    }
}

/// The identity of `pid` now, read afresh.
pub fn identity(pid: i32) -> Option<Identity> {
    Identity::parse(&std::fs::read_to_string(proc_path(pid, "stat")).ok()?)
}

/// Whether `tid` is a thread of process `pid` (and not of some other process).
pub fn is_task(pid: i32, tid: i32) -> bool {
    tid > 0 && proc_path(pid, &format!("task/{tid}")).exists()
}

/// The `TracerPid` of thread `tid` of `pid` (0: not traced); None when gone.
pub fn tracer_pid(pid: i32, tid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(proc_path(pid, &format!("task/{tid}/status"))).ok()?;
    status_field(&s, "TracerPid:")?.parse().ok()
}

/// Real, effective, saved and filesystem uids of `pid`.
pub fn uids(pid: i32) -> Option<[u32; 4]> {
    let s = std::fs::read_to_string(proc_path(pid, "status")).ok()?;
    let line = s.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let v: Vec<u32> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    v.try_into().ok()
}

/// The effective capability set of `pid` (`CapEff`).
pub fn effective_caps(pid: i32) -> Option<u64> {
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

pub fn exists(pid: i32) -> bool {
    proc_path(pid, "stat").exists()
}

pub fn maps(pid: i32) -> Result<Vec<MapEntry>> {
    let text = std::fs::read_to_string(proc_path(pid, "maps")).map_err(|e| io_err(pid, e))?;
    Ok(parse_maps(&text))
}

/// Parse the text of /proc/PID/maps. Malformed lines are skipped: a parse
/// problem in one line must not cost the whole map.
pub fn parse_maps(text: &str) -> Vec<MapEntry> {
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
pub fn cmdline(pid: i32) -> Result<String> {
    let raw = std::fs::read(proc_path(pid, "cmdline")).map_err(|e| io_err(pid, e))?;
    let parts: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    Ok(parts.join(" "))
}

/// The executable as the target sees it (may end in " (deleted)").
pub fn exe(pid: i32) -> Result<String> {
    let p = std::fs::read_link(proc_path(pid, "exe")).map_err(|e| io_err(pid, e))?;
    Ok(p.to_string_lossy().into_owned())
}

/// The short name of the process (from /proc/PID/comm).
pub fn comm(pid: i32, tid: i32) -> Option<String> {
    std::fs::read_to_string(proc_path(pid, &format!("task/{tid}/comm")))
        .ok()
        .map(|s| s.trim_end().to_string())
}

pub fn tasks(pid: i32) -> Result<Vec<i32>> {
    let rd = std::fs::read_dir(proc_path(pid, "task")).map_err(|e| io_err(pid, e))?;
    let mut v: Vec<i32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// Kernel scheduler state letter of a thread (R, S, D, T, t, Z…), from its stat file.
pub fn thread_state(pid: i32, tid: i32) -> Option<char> {
    use std::io::Read;
    // One read into a stack buffer: the state is near the start, and
    // read_to_string would stat the file first.
    let mut f = std::fs::File::open(proc_path(pid, &format!("task/{tid}/stat"))).ok()?;
    let mut buf = [0u8; 512];
    let n = f.read(&mut buf).ok()?;
    parse_stat_state(&String::from_utf8_lossy(&buf[..n]))
}

pub fn parse_stat_state(stat: &str) -> Option<char> {
    // The command name may contain spaces and parentheses: the state follows the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

/// When the target lives in another pid namespace (a container), the tids
/// it records for itself differ from ours: map its view to ours, from the
/// `NSpid` line of each thread's status. None when the namespace is ours.
pub fn namespaced_tids(pid: i32) -> Option<std::collections::HashMap<u32, u32>> {
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

/// Parent pid from /proc/PID/stat.
pub fn ppid(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(proc_path(pid, "stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every descendant of `pid` (children, grandchildren…), parents before children.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut parent_of = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
                if let Some(pp) = ppid(p) {
                    parent_of.push((p, pp));
                }
            }
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
pub fn target_file(pid: i32, map: &MapEntry) -> Option<PathBuf> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn stat_state_after_odd_comm() {
        assert_eq!(parse_stat_state("12 (a) b)) S 1 2"), Some('S'));
        assert_eq!(parse_stat_state("garbage"), None);
    }
}
