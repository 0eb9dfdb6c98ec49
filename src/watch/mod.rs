//! `pyinspect watch`: triggers that turn a stream of samples into
//! incidents (a loop blocked, the GIL held, a thread stuck, the process
//! frozen), each with what stalled, for how long, and the stacks that
//! explain it.
//!
//! Everything here is pure: the samples come in from the sampler (the same
//! one `record` and `top` use), one [`ProcessWatch::observe`] per process
//! per tick, and the events it returns are turned into output by
//! [`incident`]. Memory is bounded: a few streaks per thread, each with a
//! bounded aggregation of the stacks seen during it.

pub(crate) mod incident;
mod stacks;
mod streak;
mod triggers;
mod window;

pub(crate) use stacks::at_rest;
pub use streak::Thresholds;
pub(crate) use streak::{Event, Streak, Trigger};

use crate::stack::ThreadStack;
use foldhash::{HashMap, HashMapExt};
use std::time::Duration;
use streak::During;
use triggers::{Obs, View};
use window::{Intervals, Track};

/// A loop callback is dated back into the gap before it by at least this
/// much (or the usual interval, if longer) when that gap allows.
const MIN_DATE_BACK: Duration = Duration::from_millis(10);

/// Which triggers hold the others back this tick (see
/// [`ProcessWatch::precedence`]).
struct Precedence {
    /// The threads whose loop is blocked.
    loop_on: Vec<u32>,
    gil_on: bool,
    frozen_open: bool,
}

/// The state of one watched process.
pub(crate) struct ProcessWatch {
    thresholds: Thresholds,
    last: Option<Duration>,
    /// The latest intervals between samples.
    intervals: Intervals,
    tracks: HashMap<u32, Track>,
    pub(crate) streaks: Vec<Streak>,
}

impl ProcessWatch {
    pub(crate) fn new(thresholds: Thresholds) -> ProcessWatch {
        ProcessWatch {
            thresholds,
            last: None,
            intervals: Intervals::default(),
            tracks: HashMap::new(),
            streaks: Vec::new(),
        }
    }

    fn slot_of(s: &Streak) -> (Trigger, u32) {
        match s.trigger {
            Trigger::LoopBlocked | Trigger::ThreadStuck => (s.trigger, s.tid),
            Trigger::GilHeld | Trigger::ProcessFrozen => (s.trigger, 0),
        }
    }

    /// Take one tick's threads of this process (sampled at `ts`), with the
    /// turns of the asyncio loops they run (OS thread id, callbacks begun:
    /// see [`crate::python::asyncio::LoopTurns`]); returns the incidents
    /// that opened and closed.
    pub(crate) fn observe(
        &mut self,
        ts: Duration,
        threads: &[ThreadStack],
        turns: &[(u32, u64)],
    ) -> Vec<Event> {
        let views = triggers::views(threads);
        self.follow_tracks(ts, &views);
        let obs = self.observations(&views, turns);
        let mut events = Vec::new();
        self.match_streaks(ts, &views, obs, &mut events);
        if let Some(l) = self.last {
            self.intervals.push(ts.saturating_sub(l));
        }
        self.last = Some(ts);
        let p = self.precedence();
        self.open_passed(ts, &p, &mut events);
        events
    }

    /// The full read an incident opened with (at `ts`), as one more sample
    /// of loop streak `i`: when it finds the same callback still running
    /// (its task's frame, and the loop's turn), the streak lasted until
    /// then at least. The steady sampling waits for that read, which takes
    /// a while on a loaded machine: without it, a step that ended during
    /// the read was dated half that wait early. Its Python frames only
    /// (with `--native` it has native ones among them).
    pub(crate) fn seen_in_full_read(
        &mut self,
        i: usize,
        ts: Duration,
        threads: &[ThreadStack],
        turns: &[(u32, u64)],
    ) {
        let Some(s) = self.streaks.get(i) else {
            return;
        };
        if s.trigger != Trigger::LoopBlocked || ts <= s.last {
            return;
        }
        let Some(t) = threads.iter().find(|t| t.os_thread_id == Some(s.tid)) else {
            return;
        };
        let python = ThreadStack {
            frames: t
                .frames
                .iter()
                .filter(|f| f.kind == crate::stack::FrameKind::Python)
                .cloned()
                .collect(),
            ..t.clone()
        };
        let views = triggers::views(std::slice::from_ref(&python));
        let same = triggers::loop_blocked(&views, turns)
            .iter()
            .any(|o| o.key == s.key && (s.turn.is_none() || o.turn.is_none() || o.turn == s.turn));
        if same {
            self.streaks[i].last = ts;
        }
    }

    /// Each thread's stack: since when it has been the same.
    fn follow_tracks(&mut self, ts: Duration, views: &[View]) {
        let mut tracks = HashMap::with_capacity(views.len());
        for v in views {
            let prev = self.tracks.get(&v.tid).filter(|tr| tr.hash == v.hash);
            let (since, before) = match prev {
                Some(tr) => (tr.since, tr.before),
                None => (ts, self.last),
            };
            let held = match (v.t.holds_gil, prev.and_then(|tr| tr.held)) {
                (false, _) => None,
                (true, Some(h)) => Some(h),
                (true, None) => Some((ts, self.last)),
            };
            tracks.insert(
                v.tid,
                Track {
                    hash: v.hash,
                    since,
                    before,
                    held,
                },
            );
        }
        self.tracks = tracks;
    }

    /// What each trigger sees of this tick.
    fn observations(&self, views: &[View], turns: &[(u32, u64)]) -> Vec<Obs> {
        let mut obs = triggers::loop_blocked(views, turns);
        let loop_busy: Vec<u32> = obs.iter().map(|o| o.tid).collect();
        obs.extend(triggers::gil_held(views, &self.streaks));
        obs.extend(triggers::thread_stuck(views, &loop_busy));
        obs.extend(triggers::process_frozen(views, &self.tracks));
        obs
    }

    /// Match the tick's observations to the streaks: a streak seen again
    /// goes on, one not seen ends (an open one with a [`Event::Closed`]),
    /// and an observation that matched none starts a streak.
    fn match_streaks(
        &mut self,
        ts: Duration,
        views: &[View],
        obs: Vec<Obs>,
        events: &mut Vec<Event>,
    ) {
        let mut kept = Vec::with_capacity(self.streaks.len());
        let mut taken = vec![false; obs.len()];
        for mut s in std::mem::take(&mut self.streaks) {
            match self.seen_again(ts, &s, &obs, &taken) {
                Some(i) => {
                    let o = &obs[i];
                    taken[i] = true;
                    s.turn = s.turn.or(o.turn);
                    s.waited += u64::from(!o.waiters.is_empty());
                    s.last = ts;
                    s.samples += 1;
                    if let Some(v) = views.iter().find(|v| v.tid == s.tid) {
                        s.during.add(v.shape, &v.t.frames);
                    }
                    kept.push(s);
                }
                None => {
                    s.after = Some(ts);
                    if s.opened {
                        events.push(Event::Closed(Box::new(s)));
                    }
                }
            }
        }
        for (o, _) in obs.into_iter().zip(taken).filter(|(_, t)| !t) {
            if let Some(s) = self.start_streak(ts, views, o) {
                kept.push(s);
            }
        }
        self.streaks = kept;
    }

    /// The observation (not yet `taken`) that streak `s` goes on with.
    fn seen_again(&self, ts: Duration, s: &Streak, obs: &[Obs], taken: &[bool]) -> Option<usize> {
        let slot = Self::slot_of(s);
        // Samples further apart than half the threshold cannot tell a
        // still process from one that moved and came back (the sampler
        // was held up, and a thread's loop shows the same stack at each
        // sample): a frozen streak not yet open starts again after one.
        // Only the frozen trigger needs it: the others' identities (a
        // coroutine's frame, a holder in one place, one call on one fd)
        // rarely repeat across a gap by chance.
        let gap_ok = s.opened
            || s.trigger != Trigger::ProcessFrozen
            || ts.saturating_sub(s.last) <= self.thresholds.of(s.trigger) / 2;
        obs.iter()
            .enumerate()
            .find(|(i, o)| {
                gap_ok
                    && !taken[*i]
                    && (o.trigger, o.slot) == slot
                    && o.key == s.key
                    && (s.turn.is_none() || o.turn.is_none() || o.turn == s.turn)
            })
            .map(|(i, _)| i)
    }

    /// A new streak from an observation that matched none.
    fn start_streak(&self, ts: Duration, views: &[View], o: Obs) -> Option<Streak> {
        let v = views.iter().find(|v| v.tid == o.tid)?;
        let mut during = During::default();
        during.add(v.shape, &v.t.frames);
        // The GIL is held from when its holder was first seen holding
        // it where it holds it (the waiters may take a while to be seen
        // waiting).
        let (before, first) = match (o.trigger, self.tracks.get(&o.tid).and_then(|t| t.held)) {
            (Trigger::GilHeld, Some((since, before))) => (before, since),
            _ => (self.last, ts),
        };
        Some(Streak {
            trigger: o.trigger,
            tid: o.tid,
            key: o.key,
            turn: o.turn,
            before,
            first,
            seen: ts,
            last: ts,
            after: None,
            samples: 1,
            start: v.t.clone(),
            culprit: o.culprit.culprit(v.t),
            during,
            waited: u64::from(!o.waiters.is_empty()),
            waiters: o.waiters,
            opened: false,
            vetoed: false,
            id: 0,
        })
    }

    /// The triggers' precedence: a loop blocked explains its thread's GIL
    /// and its process's stillness; a GIL held explains the stillness of
    /// the threads waiting for it; a thread is stuck only while other
    /// threads of its process go on (else the process is frozen). Drops
    /// and vetoes the streaks that another explains.
    fn precedence(&mut self) -> Precedence {
        let loop_on: Vec<u32> = self
            .streaks
            .iter()
            .filter(|s| s.trigger == Trigger::LoopBlocked)
            .map(|s| s.tid)
            .collect();
        let gil_on = self.streaks.iter().any(|s| s.trigger == Trigger::GilHeld);
        if gil_on || !loop_on.is_empty() {
            // What the GIL or a loop holds up is not a frozen process: a
            // stillness counts from when they let go.
            self.streaks
                .retain(|s| s.trigger != Trigger::ProcessFrozen || s.opened);
        }
        let frozen_open = self
            .streaks
            .iter()
            .any(|s| s.trigger == Trigger::ProcessFrozen && s.opened);
        if frozen_open {
            // The threads stuck in a frozen process are the freeze's: not
            // reported again as it thaws (however long they go on).
            for s in &mut self.streaks {
                if s.trigger == Trigger::ThreadStuck && !s.opened {
                    s.vetoed = true;
                }
            }
        }
        Precedence {
            loop_on,
            gil_on,
            frozen_open,
        }
    }

    /// Open the streaks that pass their threshold now and that
    /// [`ProcessWatch::may_open`] lets open.
    fn open_passed(&mut self, ts: Duration, p: &Precedence, events: &mut Vec<Event>) {
        for i in 0..self.streaks.len() {
            let s = &self.streaks[i];
            if s.opened || s.vetoed || self.seen_for(s) < self.thresholds.of(s.trigger) {
                continue;
            }
            if self.may_open(ts, s, p) {
                self.streaks[i].opened = true;
                events.push(Event::Opened(i));
            }
        }
    }

    /// How long a streak has been seen, as its threshold is measured.
    fn seen_for(&self, s: &Streak) -> Duration {
        match s.trigger {
            // A GIL hold opens once it has been seen, with waiters, for the
            // threshold: a pure-Python holder that other threads wake to
            // wait for now and then (they get the GIL within a switch
            // interval) would otherwise be dated back past it at its first
            // waiter and open at once, on one sample.
            Trigger::GilHeld => s.last.saturating_sub(s.seen),
            // A callback is dated back into the gap before its first
            // sample by one usual sampling interval at most: after a
            // long gap (the sampler held up on a loaded machine) half
            // that gap would make a short callback read as a long one.
            // (Its duration, once open, still counts the half gaps,
            // with their uncertainty.)
            Trigger::LoopBlocked => {
                let back = s
                    .before
                    .map_or(Duration::ZERO, |b| s.first.saturating_sub(b) / 2)
                    .min(self.intervals.usual().max(MIN_DATE_BACK));
                s.last.saturating_sub(s.first.saturating_sub(back))
            }
            _ => s.so_far(),
        }
    }

    /// Whether a streak past its threshold opens, by the triggers'
    /// precedence.
    fn may_open(&self, ts: Duration, s: &Streak, p: &Precedence) -> bool {
        match s.trigger {
            Trigger::LoopBlocked => true,
            // Waiters seen in a quarter of the samples at least: a
            // hold that others contend for.
            Trigger::GilHeld => !p.loop_on.contains(&s.tid) && s.waited * 4 >= s.samples,
            Trigger::ThreadStuck => {
                // Another thread moved since this one stopped, and
                // lately (within half the frozen threshold): else the
                // whole process may be still, which is the frozen
                // trigger's to report.
                let lately = ts.saturating_sub(self.thresholds.process_frozen / 2);
                !p.frozen_open
                    && self
                        .tracks
                        .iter()
                        .any(|(tid, t)| *tid != s.tid && t.since > s.first && t.since >= lately)
            }
            Trigger::ProcessFrozen => p.loop_on.is_empty() && !p.gil_on,
        }
    }

    /// The streak `i` that just opened is not a stall after all (the
    /// thread read in full detail is at rest: a sleep that older versions
    /// make with `select`): it is closed without an incident, and does not
    /// open again while it lasts.
    pub(crate) fn veto(&mut self, i: usize) {
        if let Some(s) = self.streaks.get_mut(i) {
            s.opened = false;
            s.vetoed = true;
        }
    }

    /// The process is gone, or the watch is over: every open incident
    /// closes as it stands (still going on).
    pub(crate) fn finish(&mut self) -> Vec<Streak> {
        std::mem::take(&mut self.streaks)
            .into_iter()
            .filter(|s| s.opened)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::Frame;
    use stacks::py;

    fn thread(tid: u32, frames: Vec<Frame>) -> ThreadStack {
        ThreadStack {
            thread_id: tid as u64,
            os_thread_id: Some(tid),
            name: None,
            name_source: None,
            interpreter: 0,
            status: crate::stack::ThreadStatus::Active,
            holds_gil: true,
            frames,
            truncated: None,
            native_entry: None,
            wait: None,
            asyncio: None,
        }
    }

    /// Loop incidents only (100 ms), and thread 7 of an asyncio loop: in
    /// its selector, and running the callback whose frame is `callback`.
    fn loop_thread(callback: Frame) -> (Thresholds, ThreadStack, ThreadStack) {
        let th = Thresholds {
            loop_blocked: Duration::from_millis(100),
            gil_held: Duration::from_secs(10),
            thread_stuck: Duration::from_secs(10),
            process_frozen: Duration::from_secs(10),
        };
        let run_once = py("BaseEventLoop._run_once", "/x/asyncio/base_events.py", 1);
        let select = py("EpollSelector.select", "/x/selectors.py", 2);
        let idle = thread(7, vec![select, run_once.clone()]);
        let busy = thread(7, vec![callback, run_once]);
        (th, idle, busy)
    }

    #[test]
    fn a_blocked_loop_opens_once_and_closes_with_its_duration() {
        let (th, idle, busy) = loop_thread(py("handler", "app.py", 42));
        let mut w = ProcessWatch::new(th);
        let ms = Duration::from_millis;
        let mut opened = 0;
        let mut closed = Vec::new();
        for i in 0..60u64 {
            let t = if (10..40).contains(&i) { &busy } else { &idle };
            for e in w.observe(ms(i * 10), std::slice::from_ref(t), &[]) {
                match e {
                    Event::Opened(_) => opened += 1,
                    Event::Closed(s) => closed.push(*s),
                }
            }
        }
        assert_eq!(opened, 1);
        assert_eq!(closed.len(), 1);
        // From 95 ms to 395 ms.
        assert_eq!(closed[0].duration(), ms(300));
        assert_eq!(closed[0].trigger, Trigger::LoopBlocked);
        assert_eq!(
            closed[0].culprit.frame.as_ref().map(|f| &*f.function),
            Some("handler")
        );
    }
    /// An incident's full read holds the steady sampling up (here from
    /// 200 ms to 400 ms). When it finds the same step still running (at
    /// 350 ms), the step ends between it and the next sample; when it
    /// finds the loop at another turn, between the sample before it and
    /// the next one, as before.
    #[test]
    fn the_full_read_dates_the_end_of_a_step_it_finds_running() {
        let (th, idle, busy) = loop_thread(py("handler", "app.py", 42));
        let ms = Duration::from_millis;
        for (read_turn, want) in [(2, 280), (4, 205)] {
            let mut w = ProcessWatch::new(th);
            let mut closed = Vec::new();
            for i in 0..=20u64 {
                let t = if i >= 10 { &busy } else { &idle };
                let turns = [(7, if i >= 10 { 2 } else { 0 })];
                for e in w.observe(ms(i * 10), std::slice::from_ref(t), &turns) {
                    if let Event::Opened(k) = e {
                        let full = [(7, read_turn)];
                        w.seen_in_full_read(k, ms(350), std::slice::from_ref(&busy), &full);
                    }
                }
            }
            for e in w.observe(ms(400), std::slice::from_ref(&idle), &[(7, 4)]) {
                if let Event::Closed(s) = e {
                    closed.push(*s);
                }
            }
            assert_eq!(closed.len(), 1, "turn {read_turn}");
            assert_eq!(closed[0].duration(), ms(want), "turn {read_turn}");
        }
    }

    /// Steps of one task, each 50 ms and one after another with no sample
    /// in the selector between them: the same coroutine frame at every
    /// sample, but the loop's turn moves at each step. No incident; and
    /// without the turns (uvloop's loop), one long span, as before.
    #[test]
    fn consecutive_steps_of_one_task_are_not_one_long_block() {
        let (th, idle, busy) = loop_thread(py("run_asgi", "h11_impl.py", 403));
        let ms = Duration::from_millis;
        for with_turns in [true, false] {
            let mut w = ProcessWatch::new(th);
            let mut opened = 0;
            for i in 0..60u64 {
                let t = if (10..40).contains(&i) { &busy } else { &idle };
                // A new step every 5 samples.
                let turns = [(7, 2 * (i / 5))];
                let turns: &[(u32, u64)] = if with_turns { &turns } else { &[] };
                for e in w.observe(ms(i * 10), std::slice::from_ref(t), turns) {
                    if let Event::Opened(_) = e {
                        opened += 1;
                    }
                }
            }
            assert_eq!(opened, usize::from(!with_turns), "with turns: {with_turns}");
        }
    }

    /// A thread in a one-line loop (`while True: n += 1`) shows the same
    /// stack at every sample, but not the same instruction: with the main
    /// thread blocked on a lock for good, the process is not frozen.
    #[test]
    fn a_one_line_loop_is_not_a_frozen_process() {
        let th = Thresholds {
            loop_blocked: Duration::from_secs(10),
            gil_held: Duration::from_secs(10),
            thread_stuck: Duration::from_secs(10),
            process_frozen: Duration::from_millis(100),
        };
        let mut w = ProcessWatch::new(th);
        let mut main = thread(1, vec![py("main", "threads.py", 49)]);
        main.holds_gil = false;
        main.wait = Some(crate::wait::Wait {
            state: "S".into(),
            syscall: Some("futex".into()),
            futex: Some("0x1000".into()),
            ..Default::default()
        });
        let ms = Duration::from_millis;
        for i in 0..100u64 {
            let mut f = py("busy", "threads.py", 16);
            f.mark = Some(crate::stack::FrameMark {
                addr: 0x2000,
                is_entry: true,
                instr: 0x3000 + 2 * (i % 7),
            });
            let busy = thread(2, vec![f]);
            let events = w.observe(ms(i * 10), &[main.clone(), busy], &[]);
            assert!(events.is_empty(), "at {} ms: {events:?}", i * 10);
        }
    }

    /// A pure-Python thread that holds the GIL in one place, with another
    /// thread waking to wait for it once a second (it gets the GIL within a
    /// switch interval): no incident.
    #[test]
    fn a_busy_thread_that_lets_waiters_in_is_not_a_gil_hold() {
        let th = Thresholds {
            loop_blocked: Duration::from_secs(10),
            gil_held: Duration::from_millis(100),
            thread_stuck: Duration::from_secs(10),
            process_frozen: Duration::from_secs(10),
        };
        let mut w = ProcessWatch::new(th);
        let busy = thread(1, vec![py("busy", "threads.py", 16)]);
        let mut sleeper = thread(2, vec![py("sleeper", "threads.py", 21)]);
        sleeper.holds_gil = false;
        let mut waiter = sleeper.clone();
        waiter.wait = Some(crate::wait::Wait {
            state: "S".into(),
            syscall: Some("futex".into()),
            gil: Some(crate::wait::GilWait {
                holder: Some(1),
                holder_name: None,
            }),
            ..Default::default()
        });
        let ms = Duration::from_millis;
        for i in 0..500u64 {
            let other = if i % 100 == 50 { &waiter } else { &sleeper };
            let events = w.observe(ms(i * 10), &[busy.clone(), other.clone()], &[]);
            assert!(events.is_empty(), "at {} ms: {events:?}", i * 10);
        }
    }

    /// A thread woken while another holds the GIL waits for the GIL on the
    /// line it woke on, then takes it on that same line: its hold counts
    /// from then, not from when it came to that line (CI on 3.13.0: the
    /// main thread woken in `Condition.wait` during the regex's hold).
    #[test]
    fn a_waiter_that_takes_the_gil_on_the_line_it_waited_on_is_not_a_long_hold() {
        let th = Thresholds {
            loop_blocked: Duration::from_secs(10),
            gil_held: Duration::from_millis(100),
            thread_stuck: Duration::from_secs(10),
            process_frozen: Duration::from_secs(10),
        };
        let mut w = ProcessWatch::new(th);
        let waiting = |mut t: ThreadStack| {
            t.holds_gil = false;
            t.wait = Some(crate::wait::Wait {
                state: "S".into(),
                syscall: Some("futex".into()),
                gil: Some(crate::wait::GilWait {
                    holder: None,
                    holder_name: None,
                }),
                ..Default::default()
            });
            t
        };
        let resting = |mut t: ThreadStack| {
            t.holds_gil = false;
            t
        };
        let main = vec![py("Condition.wait", "/x/threading.py", 359)];
        let regex = vec![py("regex_worker", "stalls.py", 87)];
        let beat = vec![py("heartbeat", "stalls.py", 60)];
        let ms = Duration::from_millis;
        let mut opened = Vec::new();
        let mut closed = Vec::new();
        for i in 0..120u64 {
            let threads = if i < 10 {
                // Before: the main thread waits in Condition.wait (GIL released).
                vec![
                    resting(thread(1, main.clone())),
                    resting(thread(3, beat.clone())),
                ]
            } else if i < 90 {
                // The regex holds the GIL; the main thread, woken, waits for it.
                vec![
                    waiting(thread(1, main.clone())),
                    thread(2, regex.clone()),
                    waiting(thread(3, beat.clone())),
                ]
            } else if i < 92 {
                // The main thread takes it, still on its line; others wait.
                vec![thread(1, main.clone()), waiting(thread(3, beat.clone()))]
            } else {
                vec![
                    thread(1, vec![py("run", "stalls.py", 110)]),
                    resting(thread(3, beat.clone())),
                ]
            };
            for e in w.observe(ms(i * 10), &threads, &[]) {
                match e {
                    Event::Opened(i) => opened.push(w.streaks[i].tid),
                    Event::Closed(s) => closed.push(*s),
                }
            }
        }
        assert_eq!(opened, vec![2]);
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].tid, 2);
        assert_eq!(closed[0].duration(), ms(800));
    }
}
