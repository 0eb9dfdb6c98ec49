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
        std::io::ErrorKind::NotFound => Error::NoSuchProcess(pid),
        std::io::ErrorKind::PermissionDenied => Error::Permission { pid },
        _ => Error::Io(format!("reading /proc/{pid}: {e}")),
    }
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

/// How long the calling thread has waited on a run queue for a CPU since it
/// started (the second field of /proc/thread-self/schedstat): time a busy
/// machine kept it from running.
pub fn own_run_delay() -> Option<std::time::Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(std::time::Duration::from_nanos(ns))
}

/// The one-minute load average (/proc/loadavg).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
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
    fn stat_state_after_odd_comm() {
        assert_eq!(parse_stat_state("12 (a) b)) S 1 2"), Some('S'));
        assert_eq!(parse_stat_state("garbage"), None);
    }
}
