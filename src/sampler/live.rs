//! What only a live process has: its /proc files, kept open and read
//! again at every pass (its identity, its threads' states and CPU counts),
//! and whether a process has ended. A core goes without all of it.

use crate::error::Error;
use crate::procfs;
use foldhash::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// How often, and how far apart, an identity check looks again at a leader
/// without memory before taking it for an exit (see [`Liveness::check`]).
const LEADER_GONE_LOOKS: u32 = 5;
const LEADER_GONE_WAIT: Duration = Duration::from_millis(2);
/// How long a memory check holds: the passes in between count threads
/// only. A process that exits fails the reads of the pass, which check
/// again at once; a pid is only reused after the kernel's whole pid range
/// has gone round; an exec's new image is seen this much later at most.
const MEMORY_CHECK_EVERY: Duration = Duration::from_millis(50);

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
    /// thread count then (see `Target::sample`).
    pub(super) listed: Option<(Instant, u64)>,
    /// When the memory was last found to be the one opened.
    memory_checked: Option<Instant>,
}

impl Liveness {
    /// The process `pid` as it is now: its stat file opened and read.
    pub(super) fn open(pid: i32) -> Result<Liveness, Error> {
        let stat = procfs::StatFile::open(pid)?;
        let (identity, num_threads) = stat.read().ok_or_else(|| procfs::absent(pid))?;
        Ok(Liveness {
            same: None,
            stat,
            identity,
            num_threads,
            listed: None,
            memory_checked: None,
        })
    }

    /// Open the memory the cheap check reads (at the interpreter list's
    /// head, `head`) once the interpreter is found. An exec while the
    /// target was opened (a program just launched) leaves the identity of
    /// the old image: then the target is opened again.
    pub(super) fn watch_memory(&mut self, pid: i32, head: u64) -> Result<(), Error> {
        self.same = procfs::SameMemory::open(pid, head);
        if self.stat.identity() != Some(self.identity) {
            return Err(Error::NotInitialized { pid });
        }
        Ok(())
    }

    /// Still the process opened: not exited, not another process under a
    /// reused pid, not another program after an exec.
    ///
    /// The memory is looked at once per [`MEMORY_CHECK_EVERY`]; the passes
    /// in between only count the threads (see [`Liveness::recheck`]).
    pub(super) fn check(&mut self, pid: i32) -> Result<(), Error> {
        if let Some(s) = self.same.as_ref() {
            let now = Instant::now();
            let recent = self
                .memory_checked
                .is_some_and(|at| now.saturating_duration_since(at) < MEMORY_CHECK_EVERY);
            if recent {
                if let Some(n) = s.thread_count() {
                    self.num_threads = n;
                    return Ok(());
                }
            } else if let Some(n) = s.threads() {
                self.num_threads = n;
                self.memory_checked = Some(now);
                return Ok(());
            }
        }
        self.memory_checked = None;
        let mut now = self.stat.read().map(|(id, n)| {
            self.num_threads = n;
            id
        });
        // A leader without memory: an exit, or an exec from another thread
        // that has yet to take the leader's place. Look again a few times
        // before calling it an exit (the exec's new program has memory).
        for _ in 0..LEADER_GONE_LOOKS {
            if now.is_none_or(|id| id.has_memory()) {
                break;
            }
            std::thread::sleep(LEADER_GONE_WAIT);
            now = self.stat.read().map(|(id, _)| id);
        }
        if now.is_some_and(|id| !id.has_memory()) {
            return Err(Error::ProcessExited { pid });
        }
        match now {
            None => {
                // The open file fails once its task is gone: the process
                // exited (whatever now holds the pid), or a thread other than
                // the leader exec'd and took the leader's place.
                match procfs::identity(pid) {
                    Some(id) if id.start_time != self.identity.start_time => {
                        Err(Error::PidReused { pid })
                    }
                    Some(id) if !id.has_memory() => Err(Error::ProcessExited { pid }),
                    Some(id) if id != self.identity => Err(Error::Execed { pid }),
                    Some(_) => {
                        // The same process and program: follow it through
                        // a new file.
                        self.stat = procfs::StatFile::open(pid)?;
                        Ok(())
                    }
                    None => Err(Error::ProcessExited { pid }),
                }
            }
            Some(id) if id.start_time != self.identity.start_time => Err(Error::PidReused { pid }),
            Some(id) if id != self.identity => Err(Error::Execed { pid }),
            Some(_) => Ok(()),
        }
    }

    /// [`Liveness::check`] with the memory looked at now: after a pass
    /// that failed, so that a process that ended says so.
    pub(super) fn recheck(&mut self, pid: i32) -> Result<(), Error> {
        self.memory_checked = None;
        self.check(pid)
    }
}

/// Another tracer of a thread of `pid` (not us): say who, before any pause
/// fails on it.
pub(super) fn check_not_traced(pid: i32, threads: &[(i32, bool)]) -> Result<(), Error> {
    threads
        .iter()
        .find_map(|&(tid, _)| crate::pause::other_tracer(pid, tid))
        .map_or(Ok(()), Err)
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

/// A thread's scheduler state, from its stat file (kept open in `files`).
pub(super) fn read_thread_state(
    files: &mut HashMap<i32, File>,
    pid: i32,
    tid: i32,
) -> Option<char> {
    let mut buf = [0u8; 512];
    let f = match files.entry(tid) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(File::open(format!("/proc/{pid}/task/{tid}/stat")).ok()?)
        }
    };
    let n = f.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(procfs::parse_stat_state)
}
