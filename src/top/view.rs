//! What the screen shows and how keys change it. Drawing is in `ui`; this
//! holds the state so key handling can be tested without a terminal.

use super::aggregate::{Aggregator, Grouping, Row, WindowStats};
use super::threads::ThreadRates;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SortBy {
    OwnPct,
    TotalPct,
    OwnTime,
    TotalTime,
}

/// What a key asks the driver to do beyond redrawing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Nothing,
    Redraw,
    /// The view changed (grouping, filter, unpause): rebuild the snapshot.
    Rebuild,
    Reset,
    Quit,
}

/// How the target is doing, for the status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TargetState {
    Sampling,
    /// Sampling ended: the process exited (or sampling failed); the last
    /// data stays on screen.
    Ended(String),
}

/// One row of the threads panel.
#[derive(Debug, Clone)]
pub(crate) struct ThreadRow {
    pub(crate) index: u32,
    pub(crate) pid: i32,
    pub(crate) thread_id: u64,
    pub(crate) os_tid: Option<u32>,
    pub(crate) name: Option<String>,
    pub(crate) rates: Option<ThreadRates>,
    pub(crate) gil_pct: f64,
    pub(crate) current: Option<String>,
    /// What the thread waits for (short form), empty while running.
    pub(crate) wait: Option<String>,
}

/// Header numbers, frozen with the tables while paused.
#[derive(Debug, Clone, Default)]
pub(crate) struct Totals {
    pub(crate) ticks: u64,
    pub(crate) thread_samples: u64,
    pub(crate) errors: u64,
    pub(crate) last_error: Option<String>,
    pub(crate) late: u64,
    pub(crate) max_late: Duration,
    pub(crate) window: WindowStats,
}

/// What the last refresh computed; what is drawn.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// Sorted by the current key.
    pub(crate) rows: Vec<Row>,
    pub(crate) threads: Vec<ThreadRow>,
    pub(crate) totals: Totals,
}

pub(crate) struct View {
    pub(crate) sort: SortBy,
    pub(crate) grouping: Grouping,
    pub(crate) show_threads: bool,
    pub(crate) show_help: bool,
    pub(crate) paused: bool,
    /// Selected row of the threads panel.
    pub(crate) selected: usize,
    /// Thread (aggregator index) the function table is limited to.
    pub(crate) filter: Option<u32>,
    /// First function-table row shown.
    pub(crate) scroll: usize,
    pub(crate) rate: f64,
    pub(crate) root_pid: i32,
    pub(crate) cmdline: String,
    pub(crate) python_version: String,
    pub(crate) processes: usize,
    pub(crate) state: TargetState,
    pub(crate) snapshot: Snapshot,
}

impl View {
    pub(crate) fn new(root_pid: i32, cmdline: String, rate: f64) -> View {
        View {
            sort: SortBy::OwnPct,
            grouping: Grouping::Line,
            show_threads: true,
            show_help: false,
            paused: false,
            selected: 0,
            filter: None,
            scroll: 0,
            rate,
            root_pid,
            cmdline,
            python_version: String::new(),
            processes: 0,
            state: TargetState::Sampling,
            snapshot: Snapshot::default(),
        }
    }

    pub(crate) fn handle_key(&mut self, key: KeyEvent) -> Action {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('c') if ctrl => Action::Quit,
            KeyCode::Char('q') | KeyCode::Char('Q') => Action::Quit,
            KeyCode::Esc if self.show_help => {
                self.show_help = false;
                Action::Redraw
            }
            KeyCode::Esc if self.filter.is_some() => {
                self.filter = None;
                Action::Rebuild
            }
            KeyCode::Esc => Action::Quit,
            KeyCode::Char('?') | KeyCode::Char('h') => {
                self.show_help = !self.show_help;
                Action::Redraw
            }
            KeyCode::Char('x') | KeyCode::Char('X') if self.show_help => {
                self.show_help = false;
                Action::Redraw
            }
            KeyCode::Char(c @ '1'..='4') => {
                self.sort = match c {
                    '1' => SortBy::OwnPct,
                    '2' => SortBy::TotalPct,
                    '3' => SortBy::OwnTime,
                    _ => SortBy::TotalTime,
                };
                self.sort_rows();
                self.scroll = 0;
                Action::Redraw
            }
            KeyCode::Char('l') | KeyCode::Char('L') => {
                self.grouping = match self.grouping {
                    Grouping::Line => Grouping::Function,
                    Grouping::Function => Grouping::Line,
                };
                self.scroll = 0;
                Action::Rebuild
            }
            KeyCode::Char('r') | KeyCode::Char('R') => {
                self.scroll = 0;
                Action::Reset
            }
            KeyCode::Char(' ') | KeyCode::Char('p') => {
                self.paused = !self.paused;
                if self.paused {
                    Action::Redraw
                } else {
                    Action::Rebuild
                }
            }
            KeyCode::Char('t') | KeyCode::Char('T') => {
                self.show_threads = !self.show_threads;
                Action::Redraw
            }
            KeyCode::Up if self.show_threads => {
                self.selected = self.selected.saturating_sub(1);
                Action::Redraw
            }
            KeyCode::Down if self.show_threads => {
                let last = self.snapshot.threads.len().saturating_sub(1);
                self.selected = (self.selected + 1).min(last);
                Action::Redraw
            }
            KeyCode::Enter if self.show_threads => {
                let chosen = self.snapshot.threads.get(self.selected).map(|t| t.index);
                self.filter = if self.filter.is_some() { None } else { chosen };
                self.scroll = 0;
                Action::Rebuild
            }
            KeyCode::PageDown | KeyCode::Down => {
                let step = if key.code == KeyCode::Down { 1 } else { 10 };
                let last = self.snapshot.rows.len().saturating_sub(1);
                self.scroll = (self.scroll + step).min(last);
                Action::Redraw
            }
            KeyCode::PageUp | KeyCode::Up => {
                let step = if key.code == KeyCode::Up { 1 } else { 10 };
                self.scroll = self.scroll.saturating_sub(step);
                Action::Redraw
            }
            KeyCode::Home => {
                self.scroll = 0;
                Action::Redraw
            }
            _ => Action::Nothing,
        }
    }

    /// Rebuild what is drawn from the aggregator and the latest kernel
    /// readings (at a refresh, or after the view changed).
    pub(crate) fn rebuild(&mut self, agg: &Aggregator, rates: &HashMap<(i32, u32), ThreadRates>) {
        self.snapshot.rows = agg.rows(self.grouping, self.filter);
        self.sort_rows();
        // Idle threads are not in every tick (the sampler drops them unless
        // --idle): a thread is listed while its kernel thread lives, and
        // while it is in the latest tick (its tid may be unknown).
        let latest = agg.latest_threads();
        self.snapshot.threads = agg
            .threads()
            .filter_map(|(i, t)| {
                let r = t.os_tid.and_then(|tid| rates.get(&(t.pid, tid)).copied());
                if r.is_none() && !latest.contains(&i) {
                    return None;
                }
                Some(ThreadRow {
                    index: i,
                    pid: t.pid,
                    thread_id: t.thread_id,
                    os_tid: t.os_tid,
                    name: t.name.clone(),
                    rates: r,
                    gil_pct: t.gil_pct(),
                    current: t.current.map(|l| agg.location(l).to_string()),
                    wait: t.wait.clone(),
                })
            })
            .collect::<Vec<_>>();
        // Stable rows: by process, then kernel tid (the main thread first),
        // not by when the sampler first saw each thread active.
        self.snapshot
            .threads
            .sort_by_key(|t| (t.pid, t.os_tid.unwrap_or(u32::MAX), t.index));
        // A filtered thread that has exited stays selectable by Esc only.
        self.selected = self
            .selected
            .min(self.snapshot.threads.len().saturating_sub(1));
        self.snapshot.totals = Totals {
            ticks: agg.ticks,
            thread_samples: agg.thread_samples,
            errors: agg.errors,
            last_error: agg.last_error.clone(),
            late: agg.late,
            max_late: agg.max_late,
            window: agg.last_window(),
        };
    }

    fn sort_rows(&mut self) {
        let key = |r: &Row| -> (f64, f64) {
            let secs = |d: Duration| d.as_secs_f64();
            match self.sort {
                SortBy::OwnPct => (r.own_pct, secs(r.own_time)),
                SortBy::TotalPct => (r.total_pct, secs(r.total_time)),
                SortBy::OwnTime => (secs(r.own_time), r.own_pct),
                SortBy::TotalTime => (secs(r.total_time), r.total_pct),
            }
        };
        // Descending, with the location id as a stable tie-break so equal
        // rows do not swap places between refreshes.
        self.snapshot.rows.sort_by(|a, b| {
            let (ka, kb) = (key(a), key(b));
            kb.0.partial_cmp(&ka.0)
                .unwrap_or(Ordering::Equal)
                .then(kb.1.partial_cmp(&ka.1).unwrap_or(Ordering::Equal))
                .then(a.location.cmp(&b.location))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::{Frame, ThreadStack, ThreadStatus};
    use crate::top::aggregate::CountFilter;

    fn press(v: &mut View, code: KeyCode) -> Action {
        v.handle_key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn stack(tid: u64, frames: &[&str]) -> ThreadStack {
        ThreadStack {
            thread_id: tid,
            os_thread_id: None,
            name: None,
            interpreter: 0,
            status: ThreadStatus::Active,
            holds_gil: false,
            frames: frames
                .iter()
                .map(|f| Frame::python(f.to_string(), "a.py", 1))
                .collect(),
            truncated: None,
            native_entry: None,
            name_source: None,
            wait: None,
            asyncio: None,
        }
    }

    fn sample() -> Aggregator {
        let mut a = Aggregator::new(CountFilter::default());
        let ten = Duration::from_millis(10);
        for i in 0..4 {
            a.begin_tick(0, Duration::ZERO, &[]);
            let mut t = vec![stack(1, &["hot", "main"])];
            if i == 0 {
                t.push(stack(2, &["cold", "run"]));
            }
            a.add_threads(t.iter().map(|s| (7, s)), ten, &mut |f| f.to_string());
        }
        a.roll_window();
        a
    }

    #[test]
    fn keys_sort_filter_and_quit() {
        let a = sample();
        let rates = HashMap::new();
        let mut v = View::new(7, "python a.py".into(), 100.0);
        v.rebuild(&a, &rates);
        let name = |v: &View, i: usize| a.location(v.snapshot.rows[i].location).function.clone();
        assert_eq!(name(&v, 0), "hot");
        assert_eq!(
            v.snapshot.threads.len(),
            1,
            "thread 2 was not in the latest tick"
        );
        assert_eq!(press(&mut v, KeyCode::Char('2')), Action::Redraw);
        assert_eq!(v.sort, SortBy::TotalPct);
        // hot and main tie on %Total and time; the older location wins.
        assert_eq!(name(&v, 0), "hot");
        assert_eq!(press(&mut v, KeyCode::Enter), Action::Rebuild);
        assert_eq!(v.filter, Some(0));
        assert_eq!(press(&mut v, KeyCode::Esc), Action::Rebuild);
        assert_eq!(v.filter, None);
        assert_eq!(press(&mut v, KeyCode::Char('l')), Action::Rebuild);
        assert_eq!(v.grouping, Grouping::Function);
        assert_eq!(press(&mut v, KeyCode::Char(' ')), Action::Redraw);
        assert!(v.paused);
        assert_eq!(press(&mut v, KeyCode::Char(' ')), Action::Rebuild);
        assert_eq!(press(&mut v, KeyCode::Char('?')), Action::Redraw);
        assert_eq!(press(&mut v, KeyCode::Esc), Action::Redraw);
        assert!(!v.show_help);
        assert_eq!(press(&mut v, KeyCode::Char('r')), Action::Reset);
        assert_eq!(press(&mut v, KeyCode::Esc), Action::Quit);
        assert_eq!(press(&mut v, KeyCode::Char('q')), Action::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(v.handle_key(ctrl_c), Action::Quit);
    }
}
