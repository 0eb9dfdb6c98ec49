//! The threads of a target around a pause: their kernel states, what they
//! wait for, which must stand still, and the names the kernel gives them.

use super::Target;
use crate::error::Error;
use crate::sampler::config::SamplerConfig;
use crate::sampler::live::{read_ran, read_thread_state};
use crate::stack::ThreadStack;
use crate::wait::{self, GilWait, LockWait, WaitDetail};
use foldhash::{HashSet, HashSetExt};
use std::time::{Duration, Instant};

/// How long a kernel thread name is trusted before it is read again.
const OS_NAME_TTL: Duration = Duration::from_secs(1);

impl Target {
    /// Walk the Python thread list (and who holds the GIL) before a pause.
    pub(super) fn list_threads(&mut self, now: Instant) -> Result<(), Error> {
        self.threads = self.reader.python_threads(&*self.source)?;
        if let Some(l) = self.live.as_mut() {
            l.listed = Some((now, l.num_threads));
        }
        Ok(())
    }

    /// Scheduler state of each known Python thread, before any pausing
    /// (a thread we stop would read as stopped).
    pub(super) fn read_states(&mut self) {
        self.begin_states();
        let now = Instant::now();
        for i in 0..self.threads.len() {
            self.read_state(self.threads[i].0, now);
        }
    }

    /// A new pass of states: files of threads that are gone are closed
    /// (new ones are opened as they are read), and nothing is read yet.
    pub(super) fn begin_states(&mut self) {
        // A set, not a scan of the list per file: up to MAX_THREADS of each.
        let mut live = HashSet::with_capacity(self.threads.len());
        live.extend(self.threads.iter().map(|(t, _)| *t));
        self.stat_files.retain(|tid, _| live.contains(tid));
        self.sched_files.retain(|tid, _| live.contains(tid));
        self.waits.keep_threads(&self.threads);
        self.states.clear();
        self.ran.clear();
    }

    /// The scheduler state of one Python thread, into `states` (and `ran`).
    pub(super) fn read_state(&mut self, tid: i32, now: Instant) {
        let pid = self.pid;
        // The syscall file first (cheaper for the kernel to write, and
        // the waits read it anyway): a thread on a CPU says so there,
        // and one still in the call its state was read in keeps it.
        let probe = self.waits.probe(tid, now);
        if self.waits.seen_off_cpu(tid) {
            // Read after the thread was seen off its CPU: if the counts
            // are the same at the next pass (which sees it off its CPU
            // again first), it was on no CPU in between, so its stack
            // has not changed. Every way back onto a CPU raises the
            // count of times on one, and leaving one adds to the time.
            if let Some(r) = read_ran(&mut self.sched_files, pid, tid) {
                self.ran.insert(tid, r);
            }
        }
        match probe {
            wait::CallProbe::Running => {
                self.states.insert(tid, 'R');
                return;
            }
            wait::CallProbe::Same(s) => {
                self.states.insert(tid, s);
                return;
            }
            wait::CallProbe::Read => {}
        }
        if let Some(s) = read_thread_state(&mut self.stat_files, pid, tid) {
            self.states.insert(tid, s);
            self.waits.set_state(tid, s, now);
        }
    }

    /// The waits of the threads that are not running (for a core, the
    /// calls its registers recorded), into `pending`.
    pub(super) fn read_waits(&mut self) {
        let live = self.live.is_some();
        // Taken for the loop (which reads the other fields), not copied.
        let threads = std::mem::take(&mut self.threads);
        for &(tid, _) in &threads {
            if !live {
                let state = self.states.get(&tid).copied();
                if let Some(read) = self.recorded_wait(tid, state) {
                    self.pending.insert(tid, read);
                }
                continue;
            }
            let Some(&state) = self.states.get(&tid) else {
                continue;
            };
            let line = if state == 'R' {
                None
            } else {
                self.waits.syscall(tid)
            };
            let read = self.waits.read(tid, state, line, &*self.source);
            self.pending.insert(tid, read);
        }
        self.threads = threads;
    }

    /// A core's thread's wait: the call its registers say (one decoder,
    /// two sources of the call and its arguments), in state S when they
    /// show it asleep, else in no known state.
    pub(super) fn recorded_wait(
        &mut self,
        tid: i32,
        state: Option<char>,
    ) -> Option<(wait::Wait, Option<wait::CallArgs>)> {
        let line = self.source.saved_call(tid)?;
        let mut read = self
            .waits
            .read(tid, state.unwrap_or('?'), Some(line), &*self.source);
        if state.is_none() {
            read.0.state.clear();
        }
        Some(read)
    }

    /// The threads that must stand still for a consistent read. Python
    /// frames only change under the GIL, so a sleeping thread that does not
    /// hold it cannot move them: pausing it would only wake it (and make it
    /// look busy at the next sample). Native stacks need every thread's
    /// registers, so then all of them are paused.
    ///
    /// A thread in uninterruptible sleep (D: a vfork parent, NFS, a frozen
    /// cgroup) cannot stop until it wakes; it is read without pausing.
    pub(super) fn to_pause(&self, cfg: &SamplerConfig) -> Result<Vec<i32>, Error> {
        if cfg.read.native_all {
            return Ok(self
                .source
                .threads()?
                .into_iter()
                .filter(|&t| self.source.thread_state(t) != Some('D'))
                .collect());
        }
        Ok(self
            .threads
            .iter()
            .filter(|&&(tid, gil)| self.must_stop(cfg, tid, gil))
            .map(|(tid, _)| *tid)
            .collect())
    }

    /// Whether the Python thread `tid` must stand still (see `to_pause`),
    /// by the state read for it this pass.
    fn must_stop(&self, cfg: &SamplerConfig, tid: i32, gil: bool) -> bool {
        let state = self.states.get(&tid);
        if state == Some(&'D') {
            return false;
        }
        // Idle threads that will be dropped need no registers either.
        let native_wanted = cfg.read.native && cfg.filter.include_idle;
        native_wanted || gil || !matches!(state, Some('S' | 'I'))
    }

    /// Threads `threading` does not name (started from C, or by
    /// `_thread.start_new_thread`, or not running Python code yet) are
    /// named by the kernel: what the program, or Python 3.14+ itself, set
    /// with `pthread_setname_np`. Cached briefly, as names rarely change.
    pub(super) fn name_from_os(&mut self, threads: &mut [ThreadStack]) {
        let now = Instant::now();
        if self.os_names.len() > crate::python::reader::MAX_THREADS {
            self.os_names.clear();
        }
        for t in threads.iter_mut().filter(|t| t.name.is_none()) {
            let Some(tid) = t.os_thread_id.map(|v| v as i32) else {
                continue;
            };
            let source = &self.source;
            let entry = self
                .os_names
                .entry(tid)
                .and_modify(|e| {
                    if now.duration_since(e.1) > OS_NAME_TTL {
                        *e = (source.thread_name(tid), now);
                    }
                })
                .or_insert_with(|| (source.thread_name(tid), now));
            if let Some(n) = &entry.0 {
                t.name = Some(n.clone());
                t.name_source = Some(crate::stack::NameSource::Os);
            }
        }
    }

    /// Each thread's wait, from the calls read before the pause; futexes
    /// in the GIL's lock objects are GIL waits, and (in full detail) those
    /// on a lock a frame's local refers to name that local.
    pub(super) fn attach_waits(&mut self, snap: &mut [crate::python::reader::ThreadSnapshot]) {
        let holders: Vec<(i64, u32, Option<String>)> = snap
            .iter()
            .filter(|t| t.stack.holds_gil)
            .filter_map(|t| {
                Some((
                    t.stack.interpreter,
                    t.stack.os_thread_id?,
                    t.stack.name.clone(),
                ))
            })
            .collect();
        let full = self.waits.detail() == WaitDetail::Full;
        for t in snap.iter_mut() {
            let Some(tid) = t.stack.os_thread_id.map(|v| v as i32) else {
                continue;
            };
            let Some((mut w, call)) = self.pending.remove(&tid) else {
                continue;
            };
            if let Some(f) = call.and_then(|c| c.futex) {
                if t.gil_sync.iter().any(|(a, b)| f >= *a && f < *b) {
                    let holder = holders
                        .iter()
                        .find(|(i, h, _)| *i == t.stack.interpreter && *h != tid as u32);
                    w.gil = Some(GilWait {
                        holder: holder.map(|h| h.1),
                        holder_name: holder.and_then(|h| h.2.clone()),
                    });
                } else if full {
                    w.lock = self.lock_of(f, t);
                }
            }
            t.stack.wait = Some(w);
        }
    }

    /// The lock (named by the local that refers to it) a futex wait is on.
    fn lock_of(&self, futex: u64, t: &crate::python::reader::ThreadSnapshot) -> Option<LockWait> {
        let mut before = [0u8; 32];
        let words: Vec<u64> = match self.source.read(futex.wrapping_sub(32), &mut before) {
            Ok(()) => (0..4)
                .map(|i| crate::memory::le_u64(&before, i * 8))
                .collect(),
            Err(_) => Vec::new(),
        };
        let hit = t.locks.iter().find(|l| {
            l.kind != "Condition" && wait::futex_is_lock(futex, l.inner, l.inner_addr, &words)
        })?;
        let mut named = hit;
        let mut kind = wait::lock_kind(&hit.kind).to_string();
        let frame = t.stack.frames.get(hit.frame)?;
        // Condition.wait sleeps on a fresh `waiter` lock: name the
        // Condition instead, by the outer local that refers to it.
        let in_condition_wait = hit.name == "waiter"
            && frame.function.ends_with("wait")
            && frame
                .file
                .as_deref()
                .is_some_and(|f| f.ends_with("threading.py"));
        if in_condition_wait {
            if let Some(cond) = t
                .locks
                .iter()
                .find(|l| l.frame == hit.frame && l.kind == "Condition" && l.name == "self")
            {
                kind = "threading.Condition".into();
                named = t
                    .locks
                    .iter()
                    .find(|l| l.frame > hit.frame && l.obj == cond.obj)
                    .unwrap_or(cond);
            }
        }
        let f = t.stack.frames.get(named.frame)?;
        Some(LockWait {
            name: named.name.clone(),
            kind,
            address: format!("0x{:x}", named.obj),
            function: f.function.to_string(),
            file: f.file.as_deref().unwrap_or_default().to_string(),
            line: f.line.unwrap_or(0),
        })
    }
}
