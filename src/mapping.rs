//! One mapping of a target's address space, whatever the target source:
//! `procfs` reads them from /proc/PID/maps, `core` from a core file's
//! segments and file notes; discovery, ELF reading and the native unwinder
//! use them without knowing which.

/// One mapping: a line of /proc/PID/maps, or what a core file says of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(crate) executable: bool,
    /// File offset of `start`.
    pub(crate) offset: u64,
    pub(crate) inode: u64,
    /// The path, or a pseudo name such as `[stack]`, `[vdso]`; empty for
    /// anonymous memory.
    pub(crate) path: String,
}

impl MapEntry {
    pub(crate) fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end
    }
    /// Backed by a file (as opposed to `[heap]`, `[vdso]`, anonymous memory).
    pub(crate) fn is_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/')
    }
    /// The path as it names a file; a mapping whose file was deleted keeps
    /// its old path with a " (deleted)" suffix.
    pub(crate) fn file_path(&self) -> &str {
        self.path.strip_suffix(" (deleted)").unwrap_or(&self.path)
    }
}
