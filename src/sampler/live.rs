//! What only a live process has: its /proc files, kept open and read
//! again at every pass (its identity, its threads' states and CPU counts),
//! and whether a process has ended. A core goes without all of it.

use crate::procfs;
use foldhash::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

/// A thread's CPU time (ns) and number of times put on a CPU, from its
/// schedstat file (kept open in `files`). None where the kernel keeps no
/// such counts.
pub(super) fn read_ran(files: &mut HashMap<i32, File>, pid: i32, tid: i32) -> Option<(u64, u64)> {
    let f = match files.entry(tid) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(File::open(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?)
        }
    };
    let mut buf = [0u8; 96];
    let n = f.read_at(&mut buf, 0).ok()?;
    procfs::parse_schedstat(buf.get(..n)?)
}

/// `/proc/PID/stat`, kept open: re-read every pass to notice the process
/// ending, its pid being reused, or an exec.
pub(super) struct Liveness {
    /// The cheap check made first (see [`procfs::SameMemory`]); the stat
    /// line is read only when it fails, or could not be opened.
    pub(super) same: Option<procfs::SameMemory>,
    pub(super) stat: procfs::StatFile,
    pub(super) identity: procfs::Identity,
    /// The process's thread count at the latest identity check.
    pub(super) num_threads: u64,
    /// When the Python thread list was last walked before a pause, and the
    /// thread count then (see [`Target::sample`]).
    pub(super) listed: Option<(Instant, u64)>,
}

pub(super) fn is_zombie(pid: i32) -> bool {
    match procfs::thread_state(pid, pid) {
        None => true,
        // A zombie leader with other threads alive has not ended: it called
        // pthread_exit, or a worker thread is exec'ing and is about to take
        // its place (meanwhile it cannot be seized, and a sample fails):
        // the next identity check tells an exec from an exit.
        Some('Z' | 'X') => procfs::tasks(pid).map_or(true, |t| t.iter().all(|&tid| tid == pid)),
        Some(_) => false,
    }
}
