//! The target's memory map, from /proc/PID/maps.

use crate::error::Error;

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub executable: bool,
    /// File offset of `start`.
    pub offset: u64,
    pub inode: u64,
    /// The path, or a pseudo name such as `[stack]`, `[vdso]`; empty for anonymous memory.
    pub path: String,
}

impl Mapping {
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
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

/// Parse the text of /proc/PID/maps. Malformed lines are skipped: a parse
/// problem in one line must not cost the whole map.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?;
    let offset = u64::from_str_radix(it.next()?, 16).ok()?;
    let _dev = it.next()?;
    let inode = it.next()?.parse().ok()?;
    let path = it.next().unwrap_or("").trim_start().to_string();
    let (s, e) = range.split_once('-')?;
    let start = u64::from_str_radix(s, 16).ok()?;
    let end = u64::from_str_radix(e, 16).ok()?;
    if end <= start {
        return None;
    }
    let p = perms.as_bytes();
    Some(Mapping {
        start,
        end,
        readable: p.first() == Some(&b'r'),
        executable: p.get(2) == Some(&b'x'),
        offset,
        inode,
        path,
    })
}

pub fn read_maps(pid: i32) -> Result<Vec<Mapping>, Error> {
    match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(t) => Ok(parse_maps(&t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::NoSuchProcess(pid)),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(Error::Permission { pid })
        }
        Err(e) => Err(Error::Io(format!("reading /proc/{pid}/maps: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_anon_and_deleted_lines() {
        let text = "\
55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1234 /usr/bin/prog
7f0000001000-7f0000002000 r-xp 00001000 08:01 99 /tmp/libx.so (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
7f0000003000-7f0000004000 rw-p 00000000 00:00 0
garbage line
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 4);
        assert!(m[0].is_file() && !m[0].executable);
        assert!(m[1].executable && m[1].file_path() == "/tmp/libx.so" && m[1].offset == 0x1000);
        assert_eq!(m[2].path, "[stack]");
        assert!(!m[2].is_file());
        assert_eq!(m[3].path, "");
        assert!(m[1].contains(0x7f0000001fff) && !m[1].contains(0x7f0000002000));
    }
}
