//! For `watch`: every thread of the processes followed at once, at each
//! tick, as the program's records left them. A thread on its CPU is what
//! its latest sample showed; one that left its CPU, the stack and wait it
//! left with (the sched_switch program's record), until it is back. Its
//! triggers need every thread at every tick, which the program, sampling
//! the threads on a CPU, does not give by itself.

use crate::stack::{ThreadStack, ThreadStatus};
use foldhash::{HashMap, HashMapExt};
use std::time::{Duration, Instant};

/// Threads kept at most (beyond it, new ones are not watched).
const MAX_THREADS: usize = 16384;

pub(super) struct Latest {
    /// By kernel tid: its process, its latest stack, and as of when (the
    /// program's clock): a record older than what a thread's state came
    /// from (a read of a thread asleep, newer than records drained later)
    /// changes nothing.
    threads: HashMap<u32, Known>,
    every: Duration,
    next: Instant,
}

struct Known {
    pid: i32,
    at: u64,
    stack: ThreadStack,
}

impl Latest {
    /// Ticks at `rate` a second from now.
    pub(super) fn new(rate: f64) -> Latest {
        let every = Duration::from_secs_f64(1.0 / rate);
        Latest {
            threads: HashMap::new(),
            every,
            next: Instant::now() + every,
        }
    }

    /// How long until the next tick is due (zero when it is).
    pub(super) fn until_next(&self) -> Duration {
        self.next.saturating_duration_since(Instant::now())
    }

    /// The tick due is taken: the next one is a period later (or a period
    /// from now, when the sampler fell behind by more than one).
    pub(super) fn ticked(&mut self) {
        let now = Instant::now();
        self.next += self.every;
        if self.next < now {
            self.next = now + self.every;
        }
    }

    /// Thread `tid` of `pid` as it was at `at`.
    pub(super) fn set(&mut self, pid: i32, tid: u32, at: u64, stack: ThreadStack) {
        if self.threads.get(&tid).is_some_and(|k| k.at > at) {
            return;
        }
        if self.threads.len() < MAX_THREADS || self.threads.contains_key(&tid) {
            self.threads.insert(tid, Known { pid, at, stack });
        }
    }

    /// Thread `tid` is back on a CPU at `at`: running, what it waited for
    /// over, its stack the one it left with until a sample shows another.
    pub(super) fn back(&mut self, tid: u32, at: u64) {
        if let Some(k) = self.threads.get_mut(&tid).filter(|k| k.at <= at) {
            k.at = at;
            k.stack.status = ThreadStatus::Active;
            k.stack.wait = None;
        }
    }

    /// A record of thread `tid` at `at` without its stack (the thread was
    /// not listed yet when the program took it): what was known of it
    /// before is no more (it is read again, if asleep, at the tick).
    pub(super) fn unknown(&mut self, tid: u32, at: u64) {
        if self.threads.get(&tid).is_some_and(|k| k.at <= at) {
            self.threads.remove(&tid);
        }
    }

    /// Whether anything is known of thread `tid`.
    pub(super) fn has(&self, tid: u32) -> bool {
        self.threads.contains_key(&tid)
    }

    pub(super) fn forget(&mut self, tid: u32) {
        self.threads.remove(&tid);
    }

    pub(super) fn forget_process(&mut self, pid: i32) {
        self.threads.retain(|_, k| k.pid != pid);
    }

    /// Every thread of `pid` known, by kernel tid.
    pub(super) fn of(&self, pid: i32) -> Vec<ThreadStack> {
        let mut v: Vec<(u32, &ThreadStack)> = self
            .threads
            .iter()
            .filter(|(_, k)| k.pid == pid)
            .map(|(tid, k)| (*tid, &k.stack))
            .collect();
        v.sort_unstable_by_key(|(tid, _)| *tid);
        v.into_iter().map(|(_, s)| s.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(tid: u32) -> ThreadStack {
        ThreadStack {
            thread_id: u64::from(tid),
            os_thread_id: Some(tid),
            name: None,
            name_source: None,
            interpreter: 0,
            status: ThreadStatus::Idle,
            holds_gil: false,
            frames: Vec::new(),
            truncated: None,
            native_entry: None,
            wait: Some(crate::wait::Wait {
                state: "S".into(),
                ..Default::default()
            }),
            asyncio: None,
        }
    }

    #[test]
    fn a_thread_back_on_its_cpu_waits_no_more() {
        let mut l = Latest::new(100.0);
        l.set(7, 12, 5, stack(12));
        l.set(7, 11, 5, stack(11));
        l.set(8, 20, 5, stack(20));
        l.back(12, 6);
        // Older than what is known: nothing changes.
        l.back(11, 4);
        l.set(
            7,
            11,
            3,
            ThreadStack {
                frames: vec![crate::stack::Frame::python("f", "x.py", 1)],
                ..stack(11)
            },
        );
        let of7 = l.of(7);
        assert_eq!(
            of7.iter().map(|s| s.os_thread_id).collect::<Vec<_>>(),
            [Some(11), Some(12)]
        );
        assert!(of7[0].wait.is_some() && of7[0].status == ThreadStatus::Idle);
        assert!(of7[1].wait.is_none() && of7[1].status == ThreadStatus::Active);
        assert!(of7[0].frames.is_empty());
        // A newer record without a stack: forgotten, to be read again.
        l.unknown(11, 4);
        assert_eq!(l.of(7).len(), 2);
        l.unknown(11, 9);
        assert_eq!(l.of(7).len(), 1);
        l.forget_process(7);
        assert!(l.of(7).is_empty());
        assert_eq!(l.of(8).len(), 1);
    }

    #[test]
    fn ticks_do_not_pile_up_behind() {
        let mut l = Latest::new(1000.0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(l.until_next(), Duration::ZERO);
        l.ticked();
        assert!(l.until_next() > Duration::ZERO);
    }
}
