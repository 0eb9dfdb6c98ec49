//! The one source of facts about a target: its memory, its module map, the
//! files it maps, its threads and their registers. A live process
//! ([`LiveProcess`], through /proc and `process_vm_readv`) and a core file
//! implement it; discovery, the CPython reader, the native unwinder and the
//! samplers see only this trait, so all of them can run on recorded bytes.
//!
//! To the unwinder a paused thread and a core file are the same thing:
//! registers plus stack bytes. A live source has no registers of its own
//! (the pauser reads them while the thread is stopped); a core has them in
//! each thread's `NT_PRSTATUS`.

use crate::error::{MemError, Result};
use crate::mapping::MapEntry;
use crate::memory::{Memory, ProcessMemory};
use crate::procfs;
use crate::wait::SyscallLine;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::SystemTime;

/// A thread's registers, as far as the unwinder needs them (x86-64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Registers {
    pub(crate) ip: u64,
    pub(crate) sp: u64,
    pub(crate) bp: u64,
}

/// Why a source is what it is: a live process can be paused and its kernel
/// state read again; a core is fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Live,
    Core,
}

pub trait TargetSource: Memory {
    fn kind(&self) -> SourceKind;
    /// The process id, as this host sees it (a core: the pid it recorded).
    fn pid(&self) -> i32;
    /// The executable as the target named it (a live one may end in
    /// " (deleted)").
    fn executable(&self) -> Result<String>;
    /// The command line, arguments joined by spaces.
    fn command_line(&self) -> Result<String>;
    /// The module map, one entry per mapping, as /proc/PID/maps has it.
    fn maps(&self) -> Result<Vec<MapEntry>>;
    /// A path on this host from which the file behind `map` can be read,
    /// as the target saw it (its mount namespace, or a core's `--root`).
    fn mapped_file(&self, map: &MapEntry) -> Option<PathBuf>;
    /// Where the target's `/` is on this host: debug files
    /// (`/usr/lib/debug/...`) are looked up under it.
    fn root(&self) -> PathBuf;
    /// The threads, by tid as this host sees them, sorted.
    fn threads(&self) -> Result<Vec<i32>>;
    /// When the target's tids differ from ours (another pid namespace): its
    /// tid to ours. None when they are the same.
    fn namespaced_tids(&self) -> Option<HashMap<u32, u32>>;
    /// The kernel's name of a thread (`comm`).
    fn thread_name(&self, tid: i32) -> Option<String>;
    /// The kernel's scheduler state letter of a thread (R, S, D, t, Z…).
    fn thread_state(&self, tid: i32) -> Option<char>;
    /// Registers saved with the source (a core's `NT_PRSTATUS`); None for a
    /// live process, whose registers only a pause can give.
    fn saved_registers(&self, tid: i32) -> Option<Registers>;
    /// The system call a thread was blocked in, as the source saved it (a
    /// core: from the thread's registers, see
    /// [`crate::wait::call_from_registers`]); None for a live process, whose
    /// calls the sampler reads from /proc while they happen.
    fn saved_call(&self, tid: i32) -> Option<SyscallLine>;
    /// When the source's moment was: None for a live process (now), when
    /// the file was written for a core.
    fn recorded_at(&self) -> Option<SystemTime>;
}

/// A running process on this host.
pub struct LiveProcess {
    pid: i32,
    mem: ProcessMemory,
}

impl LiveProcess {
    pub fn new(pid: i32) -> LiveProcess {
        LiveProcess {
            pid,
            mem: ProcessMemory::new(pid),
        }
    }
}

impl Memory for LiveProcess {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.mem.read(addr, buf)
    }
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Vec<Result<(), MemError>> {
        self.mem.read_many(reqs)
    }
}

impl TargetSource for LiveProcess {
    fn kind(&self) -> SourceKind {
        SourceKind::Live
    }
    fn pid(&self) -> i32 {
        self.pid
    }
    fn executable(&self) -> Result<String> {
        procfs::exe(self.pid)
    }
    fn command_line(&self) -> Result<String> {
        procfs::cmdline(self.pid)
    }
    fn maps(&self) -> Result<Vec<MapEntry>> {
        procfs::maps(self.pid)
    }
    fn mapped_file(&self, map: &MapEntry) -> Option<PathBuf> {
        procfs::target_file(self.pid, map)
    }
    fn root(&self) -> PathBuf {
        procfs::root(self.pid)
    }
    fn threads(&self) -> Result<Vec<i32>> {
        procfs::tasks(self.pid)
    }
    fn namespaced_tids(&self) -> Option<HashMap<u32, u32>> {
        procfs::namespaced_tids(self.pid)
    }
    fn thread_name(&self, tid: i32) -> Option<String> {
        procfs::comm(self.pid, tid)
    }
    fn thread_state(&self, tid: i32) -> Option<char> {
        procfs::thread_state(self.pid, tid)
    }
    fn saved_registers(&self, _tid: i32) -> Option<Registers> {
        None
    }
    fn saved_call(&self, _tid: i32) -> Option<SyscallLine> {
        None
    }
    fn recorded_at(&self) -> Option<SystemTime> {
        None
    }
}

/// Recorded bytes as a target, for unit tests of everything above the
/// source: memory, and a module map and threads when a test gives them.
#[cfg(test)]
pub(crate) struct Recorded {
    pub(crate) mem: crate::memory::SliceMemory,
    pub(crate) maps: Vec<MapEntry>,
    pub(crate) threads: Vec<(i32, Option<Registers>)>,
}

#[cfg(test)]
impl Recorded {
    pub(crate) fn new(mem: crate::memory::SliceMemory) -> Recorded {
        Recorded {
            mem,
            maps: Vec::new(),
            threads: Vec::new(),
        }
    }
}

#[cfg(test)]
impl Memory for Recorded {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.mem.read(addr, buf)
    }
}

#[cfg(test)]
impl TargetSource for Recorded {
    fn kind(&self) -> SourceKind {
        SourceKind::Core
    }
    fn pid(&self) -> i32 {
        1
    }
    fn executable(&self) -> Result<String> {
        Ok("/usr/bin/python3".into())
    }
    fn command_line(&self) -> Result<String> {
        Ok("python3".into())
    }
    fn maps(&self) -> Result<Vec<MapEntry>> {
        Ok(self.maps.clone())
    }
    fn mapped_file(&self, _map: &MapEntry) -> Option<PathBuf> {
        None
    }
    fn root(&self) -> PathBuf {
        PathBuf::from("/nonexistent")
    }
    fn threads(&self) -> Result<Vec<i32>> {
        Ok(self.threads.iter().map(|t| t.0).collect())
    }
    fn namespaced_tids(&self) -> Option<HashMap<u32, u32>> {
        None
    }
    fn thread_name(&self, _tid: i32) -> Option<String> {
        None
    }
    fn thread_state(&self, _tid: i32) -> Option<char> {
        None
    }
    fn saved_registers(&self, tid: i32) -> Option<Registers> {
        self.threads.iter().find(|t| t.0 == tid)?.1
    }
    fn saved_call(&self, _tid: i32) -> Option<SyscallLine> {
        None
    }
    fn recorded_at(&self) -> Option<SystemTime> {
        None
    }
}
