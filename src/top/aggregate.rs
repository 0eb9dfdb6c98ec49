//! Incremental aggregation of sampled stacks for `top`.
//!
//! Every thread sample bumps a few counters keyed by (thread, location); no
//! stack is kept. Locations are interned once (a hit costs two string-keyed
//! map lookups and no allocation), and both groupings (by line, by function)
//! are counted as samples arrive, because recursion must be de-duplicated
//! per grouping: a function recursing through different lines is one
//! location by function but several by line.
//!
//! Percentages cover a *window* (the samples since the previous refresh) and
//! are shares of thread samples, not of ticks, so with many busy threads a
//! function still tops out at 100%. Times are cumulative since the start
//! (or the last reset). When a window ends empty (the target exited, or
//! stalled) the previous one is kept, so the view keeps its last data.

use crate::stack::{Frame, ThreadStack, ThreadStatus};
use std::collections::HashMap;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grouping {
    Line,
    Function,
}

impl Grouping {
    fn index(self) -> usize {
        match self {
            Grouping::Line => 0,
            Grouping::Function => 1,
        }
    }
}

/// Which thread samples count into the function table. Thread statistics
/// (GIL share, current function) always see every sample.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CountFilter {
    /// Count idle threads too (`--idle`).
    pub(crate) idle: bool,
    /// Count only the thread holding the GIL (`--gil`).
    pub(crate) gil_only: bool,
}

/// A place in the code: `function (file:line)`, or `function (file)` when
/// grouped by function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) function: String,
    pub(crate) file: String,
    pub(crate) line: Option<u32>,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "{} ({}:{})", self.function, self.file, l),
            None => write!(f, "{} ({})", self.function, self.file),
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    own: u64,
    total: u64,
    own_time: Duration,
    total_time: Duration,
}

#[derive(Debug, Default, Clone, Copy)]
struct WindowCounts {
    own: u64,
    total: u64,
}

/// Per-function interning: file → function → (function-level id, line → id).
#[derive(Default)]
struct FunctionIds {
    by_function: u32,
    by_line: HashMap<u32, u32>,
}

#[derive(Default)]
struct Table {
    cumulative: HashMap<(u32, u32), Counts>,
    window: HashMap<(u32, u32), WindowCounts>,
    last_window: HashMap<(u32, u32), WindowCounts>,
    /// Per location: the serial of the last sample that counted its total,
    /// so a recursive function adds to %Total once per sample.
    seen: Vec<u64>,
}

impl Table {
    fn add(&mut self, thread: u32, locs: &[u32], serial: u64, weight: Duration) {
        for (depth, &loc) in locs.iter().enumerate() {
            let i = loc as usize;
            if self.seen.len() <= i {
                self.seen.resize(i + 1, 0);
            }
            let own = depth == 0;
            let first = self.seen[i] != serial;
            if !own && !first {
                continue;
            }
            self.seen[i] = serial;
            let c = self.cumulative.entry((thread, loc)).or_default();
            let w = self.window.entry((thread, loc)).or_default();
            if own {
                c.own += 1;
                c.own_time += weight;
                w.own += 1;
            }
            if first {
                c.total += 1;
                c.total_time += weight;
                w.total += 1;
            }
        }
    }
}

/// Counters of one window, for the header.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowStats {
    pub(crate) ticks: u64,
    /// Ticks where some thread held the GIL.
    pub(crate) gil_ticks: u64,
    /// Ticks where some thread was running (not idle).
    pub(crate) active_ticks: u64,
}

impl WindowStats {
    pub(crate) fn gil_pct(&self) -> f64 {
        pct(self.gil_ticks, self.ticks)
    }
    pub(crate) fn active_pct(&self) -> f64 {
        pct(self.active_ticks, self.ticks)
    }
}

/// What the aggregator knows of one thread.
#[derive(Debug, Clone, Default)]
pub(crate) struct ThreadInfo {
    pub(crate) pid: i32,
    pub(crate) thread_id: u64,
    pub(crate) os_tid: Option<u32>,
    pub(crate) name: Option<String>,
    /// Location (by line) of the innermost frame of its latest sample.
    pub(crate) current: Option<u32>,
    /// What it waited for at its latest sample (the short form; None while running).
    pub(crate) wait: Option<String>,
    pub(crate) samples: u64,
    pub(crate) gil_samples: u64,
    window_samples: u64,
    window_gil: u64,
    last_window_samples: u64,
    last_window_gil: u64,
    /// Samples that counted into the function table, in the window.
    window_counted: u64,
    last_window_counted: u64,
}

impl ThreadInfo {
    /// Share of this thread's samples (in the last window) that held the GIL.
    pub(crate) fn gil_pct(&self) -> f64 {
        pct(self.last_window_gil, self.last_window_samples)
    }
}

/// A row of the function table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) location: u32,
    pub(crate) own_pct: f64,
    pub(crate) total_pct: f64,
    pub(crate) own_time: Duration,
    pub(crate) total_time: Duration,
}

#[derive(Default)]
pub(crate) struct Aggregator {
    filter: CountFilter,
    files: HashMap<String, HashMap<String, FunctionIds>>,
    locations: Vec<Location>,
    tables: [Table; 2],
    threads: Vec<ThreadInfo>,
    thread_ids: HashMap<(i32, u64), u32>,
    /// Threads in the latest tick that sampled anything, in sampler order.
    latest: Vec<u32>,
    serial: u64,
    pub(crate) ticks: u64,
    pub(crate) thread_samples: u64,
    pub(crate) errors: u64,
    pub(crate) last_error: Option<String>,
    pub(crate) late: u64,
    pub(crate) max_late: Duration,
    window: WindowStats,
    last_window: WindowStats,
}

fn pct(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        100.0 * n as f64 / d as f64
    }
}

impl Aggregator {
    pub(crate) fn new(filter: CountFilter) -> Aggregator {
        Aggregator {
            filter,
            ..Default::default()
        }
    }

    /// `shorten` turns a file name into what is shown; it runs once per
    /// distinct file name.
    fn intern(&mut self, frame: &Frame, shorten: &mut dyn FnMut(&str) -> String) -> (u32, u32) {
        let file = match (&frame.file, &frame.module) {
            (Some(f), _) => &**f,
            (None, Some(m)) => m.as_str(),
            (None, None) => "?",
        };
        let line = frame.line.unwrap_or(0);
        if !self.files.contains_key(file) {
            self.files.insert(file.to_string(), HashMap::new());
        }
        let locations = &mut self.locations;
        let functions = self.files.get_mut(file).expect("inserted above");
        if !functions.contains_key(&*frame.function) {
            let short = shorten(file);
            let id = locations.len() as u32;
            locations.push(Location {
                function: frame.function.to_string(),
                file: short,
                line: None,
            });
            functions.insert(
                frame.function.to_string(),
                FunctionIds {
                    by_function: id,
                    by_line: HashMap::new(),
                },
            );
        }
        let ids = functions.get_mut(&*frame.function).expect("inserted above");
        let by_function = ids.by_function;
        let by_line = *ids.by_line.entry(line).or_insert_with(|| {
            let base = &locations[by_function as usize];
            let loc = Location {
                function: base.function.clone(),
                file: base.file.clone(),
                // Native frames without DWARF lines: show the module alone.
                line: (line != 0).then_some(line),
            };
            locations.push(loc);
            (locations.len() - 1) as u32
        });
        (by_line, by_function)
    }

    pub(crate) fn location(&self, id: u32) -> &Location {
        &self.locations[id as usize]
    }

    /// Start a tick: call once per sampling interval, before its threads.
    /// `late_samples` counts this sample if it was late, plus the samples
    /// the sampler skipped because it fell behind.
    pub(crate) fn begin_tick(
        &mut self,
        late_samples: u64,
        late_by: Duration,
        errors: &[crate::error::Error],
    ) {
        self.ticks += 1;
        self.window.ticks += 1;
        if late_samples > 0 {
            self.late += late_samples;
            self.max_late = self.max_late.max(late_by);
        }
        self.errors += errors.len() as u64;
        if let Some(e) = errors.last() {
            self.last_error = Some(e.to_string());
        }
    }

    /// Add the threads of one tick (all processes). `weight` is the time
    /// each thread sample stands for.
    pub(crate) fn add_threads<'a>(
        &mut self,
        threads: impl IntoIterator<Item = (i32, &'a ThreadStack)>,
        weight: Duration,
        shorten: &mut dyn FnMut(&str) -> String,
    ) {
        let mut any_gil = false;
        let mut any_active = false;
        let mut latest = Vec::new();
        let mut line_ids = Vec::new();
        let mut fn_ids = Vec::new();
        for (pid, t) in threads {
            let idx = self.thread(pid, t);
            latest.push(idx);
            let active = t.status == ThreadStatus::Active;
            any_gil |= t.holds_gil;
            any_active |= active;
            self.thread_samples += 1;
            let counted = (self.filter.idle || active) && (!self.filter.gil_only || t.holds_gil);
            {
                let info = &mut self.threads[idx as usize];
                info.samples += 1;
                info.window_samples += 1;
                if t.holds_gil {
                    info.gil_samples += 1;
                    info.window_gil += 1;
                }
                if counted {
                    info.window_counted += 1;
                }
            }
            line_ids.clear();
            fn_ids.clear();
            for f in &t.frames {
                let (l, fun) = self.intern(f, shorten);
                line_ids.push(l);
                fn_ids.push(fun);
            }
            self.threads[idx as usize].current = line_ids.first().copied();
            self.threads[idx as usize].wait =
                t.wait.as_ref().map(|w| w.short()).filter(|s| !s.is_empty());
            if counted {
                self.serial += 1;
                let s = self.serial;
                self.tables[0].add(idx, &line_ids, s, weight);
                self.tables[1].add(idx, &fn_ids, s, weight);
            }
        }
        if any_gil {
            self.window.gil_ticks += 1;
        }
        if any_active {
            self.window.active_ticks += 1;
        }
        if !latest.is_empty() {
            self.latest = latest;
        }
    }

    fn thread(&mut self, pid: i32, t: &ThreadStack) -> u32 {
        let idx = match self.thread_ids.get(&(pid, t.thread_id)) {
            Some(&i) => i,
            None => {
                let i = self.threads.len() as u32;
                self.threads.push(ThreadInfo {
                    pid,
                    thread_id: t.thread_id,
                    ..Default::default()
                });
                self.thread_ids.insert((pid, t.thread_id), i);
                i
            }
        };
        let info = &mut self.threads[idx as usize];
        // A name appears once `threading` knows the thread; an ident can be
        // reused by a new thread with another name.
        if info.name.as_deref() != t.name.as_deref() && t.name.is_some() {
            info.name = t.name.clone();
        }
        if t.os_thread_id.is_some() {
            info.os_tid = t.os_thread_id;
        }
        idx
    }

    /// End the window at a refresh. An empty window (nothing sampled since
    /// the last refresh) keeps the previous one on screen.
    pub(crate) fn roll_window(&mut self) {
        // Ticks with no thread at all (the process is gone) do not replace
        // what the user was looking at.
        if self.threads.iter().all(|t| t.window_samples == 0) {
            self.window = WindowStats::default();
            return;
        }
        self.last_window = std::mem::take(&mut self.window);
        for t in &mut self.tables {
            std::mem::swap(&mut t.last_window, &mut t.window);
            t.window.clear();
        }
        for t in &mut self.threads {
            t.last_window_samples = std::mem::take(&mut t.window_samples);
            t.last_window_gil = std::mem::take(&mut t.window_gil);
            t.last_window_counted = std::mem::take(&mut t.window_counted);
        }
    }

    pub(crate) fn last_window(&self) -> WindowStats {
        self.last_window
    }

    /// Forget every count (`r`); threads and interned locations stay.
    pub(crate) fn reset(&mut self) {
        for t in &mut self.tables {
            t.cumulative.clear();
            t.window.clear();
            t.last_window.clear();
        }
        for t in &mut self.threads {
            let keep = ThreadInfo {
                pid: t.pid,
                thread_id: t.thread_id,
                os_tid: t.os_tid,
                name: t.name.take(),
                current: t.current.take(),
                ..Default::default()
            };
            *t = keep;
        }
        self.ticks = 0;
        self.thread_samples = 0;
        self.errors = 0;
        self.last_error = None;
        self.late = 0;
        self.max_late = Duration::ZERO;
        self.window = WindowStats::default();
        self.last_window = WindowStats::default();
    }

    #[cfg(test)]
    pub(crate) fn thread_info(&self, idx: u32) -> &ThreadInfo {
        &self.threads[idx as usize]
    }

    /// The threads of the latest tick that sampled any, in sampler order.
    pub(crate) fn latest_threads(&self) -> &[u32] {
        &self.latest
    }

    /// Every thread seen since the start, in the order first seen.
    pub(crate) fn threads(&self) -> impl Iterator<Item = (u32, &ThreadInfo)> {
        self.threads.iter().enumerate().map(|(i, t)| (i as u32, t))
    }

    /// The function table for the last window; only `thread` if given.
    /// Rows are unsorted.
    pub(crate) fn rows(&self, grouping: Grouping, thread: Option<u32>) -> Vec<Row> {
        let table = &self.tables[grouping.index()];
        let keep = |t: u32| thread.is_none_or(|f| f == t);
        let denominator: u64 = self
            .threads
            .iter()
            .enumerate()
            .filter(|(i, _)| keep(*i as u32))
            .map(|(_, t)| t.last_window_counted)
            .sum();
        let mut by_loc: HashMap<u32, Row> = HashMap::new();
        fn row(by_loc: &mut HashMap<u32, Row>, loc: u32) -> &mut Row {
            by_loc.entry(loc).or_insert(Row {
                location: loc,
                own_pct: 0.0,
                total_pct: 0.0,
                own_time: Duration::ZERO,
                total_time: Duration::ZERO,
            })
        }
        for (&(t, loc), c) in &table.cumulative {
            if keep(t) {
                let r = row(&mut by_loc, loc);
                r.own_time += c.own_time;
                r.total_time += c.total_time;
            }
        }
        let mut window: HashMap<u32, WindowCounts> = HashMap::new();
        for (&(t, loc), c) in &table.last_window {
            if keep(t) {
                let w = window.entry(loc).or_default();
                w.own += c.own;
                w.total += c.total;
            }
        }
        for (loc, w) in window {
            let r = row(&mut by_loc, loc);
            r.own_pct = pct(w.own, denominator);
            r.total_pct = pct(w.total, denominator);
        }
        by_loc.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(tid: u64, active: bool, gil: bool, frames: &[(&str, u32)]) -> ThreadStack {
        ThreadStack {
            thread_id: tid,
            os_thread_id: Some(tid as u32),
            name: Some(format!("t{tid}")),
            interpreter: 0,
            status: if active {
                ThreadStatus::Active
            } else {
                ThreadStatus::Idle
            },
            holds_gil: gil,
            frames: frames
                .iter()
                .map(|(f, l)| Frame::python(f.to_string(), "/app/x.py".to_string(), *l))
                .collect(),
            truncated: None,
            native_entry: None,
            name_source: None,
            wait: None,
            asyncio: None,
        }
    }

    const MS: Duration = Duration::from_millis(10);

    fn tick(a: &mut Aggregator, threads: &[ThreadStack]) {
        a.begin_tick(0, Duration::ZERO, &[]);
        let mut short = |f: &str| f.rsplit('/').next().unwrap().to_string();
        a.add_threads(threads.iter().map(|t| (1, t)), MS, &mut short);
    }

    fn find(a: &Aggregator, rows: &[Row], name: &str, line: Option<u32>) -> Row {
        rows.iter()
            .find(|r| {
                let l = a.location(r.location);
                l.function == name && l.line == line
            })
            .unwrap_or_else(|| panic!("no row for {name} {line:?}"))
            .clone()
    }

    #[test]
    fn percentages_are_per_thread_sample() {
        let mut a = Aggregator::new(CountFilter {
            idle: true,
            gil_only: false,
        });
        // Two busy threads in the same function: 100%, not 200%.
        for _ in 0..10 {
            tick(
                &mut a,
                &[
                    stack(1, true, true, &[("hot", 3), ("main", 9)]),
                    stack(2, true, false, &[("hot", 3), ("run", 20)]),
                ],
            );
        }
        a.roll_window();
        let rows = a.rows(Grouping::Line, None);
        let hot = find(&a, &rows, "hot", Some(3));
        assert_eq!(hot.own_pct, 100.0);
        assert_eq!(hot.total_pct, 100.0);
        assert_eq!(hot.own_time, MS * 20);
        let main = find(&a, &rows, "main", Some(9));
        assert_eq!(main.own_pct, 0.0);
        assert_eq!(main.total_pct, 50.0);
        assert_eq!(main.total_time, MS * 10);
        assert!(rows
            .iter()
            .all(|r| r.own_pct <= 100.0 && r.total_pct <= 100.0));
        assert_eq!(a.last_window().gil_pct(), 100.0);
        assert_eq!(a.thread_info(1).gil_pct(), 0.0);
        assert_eq!(a.thread_info(0).gil_pct(), 100.0);
    }

    #[test]
    fn recursion_counts_once_in_total() {
        let mut a = Aggregator::new(CountFilter::default());
        // fib calls itself from line 5; the outer call sits at line 7.
        tick(
            &mut a,
            &[stack(
                1,
                true,
                false,
                &[("fib", 5), ("fib", 5), ("fib", 7), ("main", 1)],
            )],
        );
        a.roll_window();
        let by_line = a.rows(Grouping::Line, None);
        let f5 = find(&a, &by_line, "fib", Some(5));
        assert_eq!((f5.own_pct, f5.total_pct), (100.0, 100.0));
        assert_eq!(f5.total_time, MS);
        let f7 = find(&a, &by_line, "fib", Some(7));
        assert_eq!((f7.own_pct, f7.total_pct), (0.0, 100.0));
        let by_fn = a.rows(Grouping::Function, None);
        assert_eq!(by_fn.len(), 2);
        let fib = find(&a, &by_fn, "fib", None);
        assert_eq!((fib.own_pct, fib.total_pct), (100.0, 100.0));
        assert_eq!(fib.total_time, MS);
        assert_eq!(a.location(fib.location).to_string(), "fib (x.py)");
        assert_eq!(a.location(f7.location).to_string(), "fib (x.py:7)");
    }

    #[test]
    fn by_function_merges_lines() {
        let mut a = Aggregator::new(CountFilter::default());
        tick(&mut a, &[stack(1, true, false, &[("f", 1), ("main", 1)])]);
        tick(&mut a, &[stack(1, true, false, &[("f", 2), ("main", 1)])]);
        a.roll_window();
        let by_line = a.rows(Grouping::Line, None);
        assert_eq!(find(&a, &by_line, "f", Some(1)).own_pct, 50.0);
        assert_eq!(find(&a, &by_line, "f", Some(2)).own_pct, 50.0);
        let by_fn = a.rows(Grouping::Function, None);
        let f = find(&a, &by_fn, "f", None);
        assert_eq!((f.own_pct, f.own_time), (100.0, MS * 2));
    }

    #[test]
    fn idle_and_gil_filters_and_thread_filter() {
        let busy = stack(1, true, true, &[("hot", 3)]);
        let sleeper = stack(2, false, false, &[("sleep", 8)]);
        let mut a = Aggregator::new(CountFilter::default());
        tick(&mut a, &[busy.clone(), sleeper.clone()]);
        a.roll_window();
        let rows = a.rows(Grouping::Line, None);
        assert_eq!(rows.len(), 1, "idle thread not counted without --idle");
        assert_eq!(find(&a, &rows, "hot", Some(3)).own_pct, 100.0);
        // Thread stats see every sample.
        let current = a.thread_info(1).current.map(|l| a.location(l).to_string());
        assert_eq!(current.as_deref(), Some("sleep (x.py:8)"));
        assert_eq!(a.last_window().active_pct(), 100.0);

        let mut a = Aggregator::new(CountFilter {
            idle: true,
            gil_only: false,
        });
        tick(&mut a, &[busy.clone(), sleeper.clone()]);
        a.roll_window();
        let rows = a.rows(Grouping::Line, None);
        assert_eq!(find(&a, &rows, "hot", Some(3)).own_pct, 50.0);
        assert_eq!(find(&a, &rows, "sleep", Some(8)).own_pct, 50.0);
        let only = a.rows(Grouping::Line, Some(1));
        assert_eq!(only.len(), 1);
        assert_eq!(find(&a, &only, "sleep", Some(8)).own_pct, 100.0);

        let mut a = Aggregator::new(CountFilter {
            idle: true,
            gil_only: true,
        });
        tick(&mut a, &[busy, sleeper]);
        a.roll_window();
        let rows = a.rows(Grouping::Line, None);
        assert_eq!(rows.len(), 1);
        assert_eq!(find(&a, &rows, "hot", Some(3)).own_pct, 100.0);
    }

    #[test]
    fn empty_window_keeps_last_data_and_reset_clears() {
        let mut a = Aggregator::new(CountFilter::default());
        tick(&mut a, &[stack(1, true, false, &[("hot", 3)])]);
        a.roll_window();
        // The process is gone: ticks with no threads, then refreshes.
        a.begin_tick(0, Duration::ZERO, &[crate::error::Error::NoSuchProcess(1)]);
        a.add_threads(std::iter::empty(), MS, &mut |f| f.to_string());
        a.roll_window();
        a.roll_window();
        let rows = a.rows(Grouping::Line, None);
        assert_eq!(find(&a, &rows, "hot", Some(3)).own_pct, 100.0);
        assert_eq!(a.latest_threads(), &[0]);
        assert_eq!(a.errors, 1);
        a.reset();
        a.roll_window();
        assert!(a.rows(Grouping::Line, None).is_empty());
        assert_eq!((a.ticks, a.errors), (0, 0));
        assert_eq!(a.thread_info(0).name.as_deref(), Some("t1"));
    }
}
