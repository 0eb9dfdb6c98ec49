//! The threads of a target around a pause: their kernel states, what they
//! wait for, which must stand still, and the names the kernel gives them.

use super::{Early, Pass, Target};
use crate::error::Error;
use crate::pause::PauseGuard;
use crate::sampler::config::TargetConfig;
use crate::sampler::live::{read_ran, read_thread_state};
use crate::stack::ThreadStack;
use crate::wait::{self, GilWait, LockWait, WaitDetail};
use foldhash::{HashMap, HashSet, HashSetExt};
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
        // The syscall file (cheaper for the kernel to write than the stat
        // line, and the waits read it anyway): a thread on a CPU says so
        // there, and one still in the call its state was read in keeps it.
        // A thread off its CPU at the last pass has its CPU counts read
        // first: unchanged, it has not run since, and the file is not read
        // again (see `WaitReader::probe`).
        let before = if self.waits.wants_counts(tid) {
            read_ran(&mut self.sched_files, pid, tid)
        } else {
            None
        };
        let probe = self.waits.probe(tid, now, before);
        if self.waits.seen_off_cpu(tid) {
            // Read with the thread seen off its CPU (before the file that
            // showed it so, or else after): if the counts are the same at
            // the next pass (which sees it off its CPU again first), it was
            // on no CPU in between, so its stack has not changed. Every way
            // back onto a CPU raises the count of times on one, and leaving
            // one adds to the time.
            let ran = match self.waits.quiet_counts(tid) {
                Some(r) => Some(r),
                None => read_ran(&mut self.sched_files, pid, tid),
            };
            if let Some(r) = ran {
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
    pub(super) fn to_pause(&self, cfg: &TargetConfig) -> Result<Vec<i32>, Error> {
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
    fn must_stop(&self, cfg: &TargetConfig, tid: i32, gil: bool) -> bool {
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
        let hit = t.local_refs.iter().find(|l| {
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
                .local_refs
                .iter()
                .find(|l| l.frame == hit.frame && l.kind == "Condition" && l.name == "self")
            {
                kind = "threading.Condition".into();
                named = t
                    .local_refs
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
    /// The threads the latest pause stopped are most often the ones to
    /// stop now (the busy ones, the GIL holder): when each of them still
    /// must stand still by its state read now, they are interrupted at
    /// once, and the other threads' states and waits are read while they
    /// come to a stop (a stop takes tens of microseconds to arrive from
    /// another CPU). The seizes are still made in one loop. If the reads
    /// show another thread to stop, this pause is let go whole and a new
    /// one made, in one loop again (see `stop`).
    pub(super) fn stop_predicted(
        &mut self,
        cfg: &TargetConfig,
        pass: &Pass,
    ) -> Result<Option<Early>, Error> {
        if !(pass.pausing
            && pass.reuse_list
            && pass.read_kernel_states
            && !cfg.read.native_all
            && !pass.unstopped)
        {
            return Ok(None);
        }
        let now = Instant::now();
        let listed: HashSet<i32> = self.threads.iter().map(|(t, _)| *t).collect();
        let mut predicted = std::mem::take(&mut self.last_paused);
        predicted.retain(|t| listed.contains(t));
        predicted.sort_unstable();
        self.begin_states();
        for &tid in &predicted {
            self.read_state(tid, now);
        }
        // Each must be on a CPU or waiting for one: one asleep need not
        // stop, and a GIL holder found asleep means the listing is
        // stale, and a new one is walked before anything is stopped.
        let running = predicted
            .iter()
            .all(|t| !matches!(self.states.get(t), Some('S' | 'I' | 'D')));
        let guard = if running && !predicted.is_empty() {
            Some(PauseGuard::interrupted(self.pid, &predicted)?)
        } else {
            None
        };
        Ok(Some(Early {
            guard,
            read: predicted,
        }))
    }

    /// The states of the threads `early` did not read (a core's, as far as
    /// it recorded them). A GIL holder found asleep on a reused list means
    /// the GIL moved: the early pause is let go, and the list walked and
    /// its states read afresh.
    pub(super) fn read_states_before_stop(
        &mut self,
        pass: &Pass,
        early: &mut Option<Early>,
    ) -> Result<(), Error> {
        if !pass.live {
            // A core's states, as far as it recorded them.
            self.states = self
                .threads
                .iter()
                .filter_map(|&(tid, _)| Some((tid, self.source.thread_state(tid)?)))
                .collect();
        } else if pass.read_kernel_states {
            match early {
                Some(e) => {
                    let now = Instant::now();
                    for i in 0..self.threads.len() {
                        let tid = self.threads[i].0;
                        if e.read.binary_search(&tid).is_err() {
                            self.read_state(tid, now);
                        }
                    }
                }
                None => self.read_states(),
            }
            let holder_asleep = self
                .threads
                .iter()
                .any(|(t, gil)| *gil && matches!(self.states.get(t), Some('S' | 'I')));
            if pass.reuse_list && holder_asleep {
                // Who holds the GIL now decides who must stand still: the
                // threads stopped early are let go before the new listing.
                if let Some(e) = early.as_mut() {
                    e.guard = None;
                }
                self.list_threads(pass.started)?;
                self.read_states();
            }
        } else {
            self.states.clear();
        }
        Ok(())
    }

    /// The waits of the Python threads, into `pending`: only threads that
    /// are not running have a call to read, and it must be read before any
    /// of them is stopped.
    pub(super) fn read_waits_before_stop(&mut self, pass: &Pass) {
        self.pending.clear();
        self.foreign_waits.clear();
        if pass.want_waits {
            if self.foreign_seen.is_empty() {
                self.waits.begin_pass(&self.threads);
            } else {
                let mut all = self.threads.clone();
                all.extend_from_slice(&self.foreign_seen);
                self.waits.begin_pass(&all);
            }
            self.read_waits();
        }
    }

    /// Threads Python does not know (--native-all) among those to `pause`:
    /// their states, and their waits (a pool worker's futex), read before
    /// they are stopped.
    pub(super) fn read_foreign_before_stop(
        &mut self,
        pass: &Pass,
        pause: &[i32],
    ) -> HashMap<i32, char> {
        let foreign_states: HashMap<i32, char> = pause
            .iter()
            .filter(|tid| !self.threads.iter().any(|(t, _)| t == *tid))
            .filter_map(|&tid| Some((tid, self.source.thread_state(tid)?)))
            .collect();
        if pass.want_waits && pass.live {
            for (&tid, &state) in &foreign_states {
                let line = if state == 'R' {
                    None
                } else {
                    self.waits.syscall(tid)
                };
                let (w, _) = self.waits.read(tid, state, line, &*self.source);
                self.foreign_waits.insert(tid, w);
            }
        }
        self.foreign_seen = foreign_states.keys().map(|&t| (t, false)).collect();
        foreign_states
    }

    /// A core's threads Python does not know: the calls their registers
    /// recorded.
    pub(super) fn attach_recorded_waits(&mut self, foreign: &mut [ThreadStack]) {
        for t in foreign.iter_mut() {
            let Some(tid) = t.os_thread_id.map(|v| v as i32) else {
                continue;
            };
            let state = self.source.thread_state(tid);
            t.wait = self.recorded_wait(tid, state).map(|r| r.0);
        }
    }
}
