//! An incident as it is written: one JSON object per line, or text; the
//! lines shown on the terminal as it opens and closes; the summary by
//! culprit at exit; and the rate limit that keeps a service that is always
//! slow from flooding the output.

use super::stacks::frame_label;
use super::streak::{Streak, Trigger};
use crate::stack::{Frame, ProcessStacks, ThreadStack, ThreadTasks};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Stacks of the stall window shown in text (JSON has them all).
const TEXT_DURING: usize = 5;
/// Distinct culprits in the summary (the rest are counted together).
const MAX_CULPRITS: usize = 1000;

/// The thread an incident is about.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ThreadRef {
    pub(crate) os_thread_id: u32,
    pub(crate) thread_id: u64,
    pub(crate) name: Option<String>,
}

impl ThreadRef {
    pub(crate) fn of(t: &ThreadStack) -> ThreadRef {
        ThreadRef {
            os_thread_id: t.os_thread_id.unwrap_or(0),
            thread_id: t.thread_id,
            name: t.name.clone(),
        }
    }

    fn text(&self) -> String {
        match &self.name {
            Some(n) => format!("thread {} \"{n}\"", self.os_thread_id),
            None => format!("thread {}", self.os_thread_id),
        }
    }
}

/// What the incident names as its cause.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CulpritOut {
    pub(crate) function: Option<String>,
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u32>,
    /// Loop blocked: the running task's name, when the tasks were read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<String>,
    /// Stuck, frozen: what the thread waits for (short form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wait: Option<String>,
    /// Stuck, frozen: the wait in full, as `dump` says it (the lock and
    /// the local that refers to it, the socket's peer...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wait_detail: Option<String>,
}

impl CulpritOut {
    /// `handler (app.py:42)`, with the task or the wait.
    pub(crate) fn text(&self) -> String {
        let mut s = match (&self.function, &self.file, self.line) {
            (Some(f), Some(file), Some(l)) => format!("{f} ({file}:{l})"),
            (Some(f), _, _) => f.clone(),
            _ => "?".into(),
        };
        if let Some(t) = &self.task {
            s = format!("task \"{t}\" {s}");
        }
        if let Some(w) = self.wait_detail.as_ref().or(self.wait.as_ref()) {
            s.push_str(&format!(", waiting in {w}"));
        }
        s
    }

    /// The summary's key: the trigger and where, without the changing parts.
    fn key(&self, trigger: Trigger) -> String {
        let place = match (&self.function, &self.file, self.line) {
            (Some(f), Some(file), Some(l)) => format!("{f} ({file}:{l})"),
            (Some(f), _, _) => f.clone(),
            _ => "?".into(),
        };
        format!("{}: {place}", trigger.describe())
    }
}

/// One aggregated stack of the stall window.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DuringStack {
    pub(crate) samples: u64,
    /// Innermost first, `function (file:line)`.
    pub(crate) frames: Vec<String>,
}

/// An incident, as written.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Incident {
    /// Numbered from 1 in the order they opened.
    pub(crate) id: u64,
    pub(crate) trigger: Trigger,
    pub(crate) pid: i32,
    pub(crate) thread: ThreadRef,
    /// Wall clock, RFC 3339 (UTC), and as Unix seconds.
    pub(crate) start: String,
    pub(crate) start_unix: f64,
    pub(crate) duration_ms: f64,
    /// The watch ended (or the process did) while it went on.
    pub(crate) ongoing: bool,
    /// How far the start and the end may be off: half the gap between the
    /// samples on either side of each (the duration is within their sum).
    pub(crate) uncertainty_ms: f64,
    /// The threshold it passed.
    pub(crate) threshold_ms: f64,
    /// Samples of the stall.
    pub(crate) samples: u64,
    pub(crate) culprit: CulpritOut,
    /// The culprit thread's stack at the stall's first sample.
    pub(crate) stack: Vec<Frame>,
    /// The culprit thread's samples during the stall, by stack, most first.
    pub(crate) during: Vec<DuringStack>,
    /// Samples whose stacks were beyond the distinct stacks kept.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) during_other: u64,
    /// GIL held: the threads waiting for it at the first sample.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) waiters: Vec<ThreadRef>,
    /// Every thread's stack and wait as read (with full wait detail, the
    /// asyncio tasks and, with --native, native frames) when the incident
    /// opened, one threshold after its start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) threads: Option<Vec<ThreadStack>>,
    /// Loop blocked: the loop's asyncio tasks at that moment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tasks: Option<ThreadTasks>,
    /// Why the threads could not be read when it opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) threads_error: Option<String>,
    /// --incident-dir: the flame graph of the stall's samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) flamegraph: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the command learned when an incident opened.
#[derive(Debug, Default)]
pub(crate) struct Opening {
    pub(crate) process: Option<ProcessStacks>,
    pub(crate) error: Option<String>,
    /// Written at all (the rate limit let it through).
    pub(crate) shown: bool,
}

pub(crate) fn culprit_of(s: &Streak, opening: &Opening) -> CulpritOut {
    let f = s.culprit.frame.as_ref();
    let thread = opening
        .process
        .as_ref()
        .and_then(|p| p.threads.iter().find(|t| t.os_thread_id == Some(s.tid)));
    // The running task, when it runs the culprit's coroutine: the full read
    // comes after the samples that opened the incident (later still on a
    // loaded machine), and by then the loop may run another task.
    let runs_culprit = |t: &crate::stack::Task| {
        f.is_some_and(|f| {
            t.frames.iter().any(|tf| {
                tf.function == f.function
                    && tf.file == f.file
                    && match (tf.mark, f.mark) {
                        (Some(a), Some(b)) => a.addr == b.addr,
                        _ => true,
                    }
            })
        })
    };
    let task = match s.trigger {
        Trigger::LoopBlocked => thread
            .and_then(|t| t.asyncio.as_ref())
            .and_then(|a| {
                a.tasks
                    .iter()
                    .find(|t| t.state == crate::stack::TaskState::Running && runs_culprit(t))
            })
            .map(|t| t.name.clone()),
        _ => None,
    };
    // The full wait only while it is still the same call.
    let wait_detail = match s.trigger {
        Trigger::ThreadStuck | Trigger::ProcessFrozen => thread
            .and_then(|t| t.wait.as_ref())
            .filter(|w| Some(w.short()) == s.culprit.wait)
            .map(|w| w.long_within(usize::MAX))
            .filter(|l| !l.is_empty()),
        _ => None,
    };
    CulpritOut {
        function: f.map(|f| f.function.to_string()),
        file: f.and_then(|f| f.file.as_deref().map(str::to_string)),
        line: f.and_then(|f| f.line),
        task,
        wait: s.culprit.wait.clone(),
        wait_detail,
    }
}

/// Build the incident of a streak that closed (or is still open at the end).
pub(crate) fn build(
    s: &Streak,
    opening: Opening,
    pid: i32,
    started_wall: SystemTime,
    threshold: Duration,
    ongoing: bool,
) -> Incident {
    let began = started_wall + s.began();
    let unix = began
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut during: Vec<DuringStack> = s
        .during
        .stacks
        .iter()
        .map(|(frames, n)| DuringStack {
            samples: *n,
            frames: frames.iter().map(frame_label).collect(),
        })
        .collect();
    during.sort_by_key(|d| std::cmp::Reverse(d.samples));
    let culprit = culprit_of(s, &opening);
    let thread = opening
        .process
        .as_ref()
        .and_then(|p| p.threads.iter().find(|t| t.os_thread_id == Some(s.tid)));
    let tasks = match s.trigger {
        Trigger::LoopBlocked => thread.and_then(|t| t.asyncio.clone()),
        _ => None,
    };
    let mut start = ThreadRef::of(&s.start);
    if start.name.is_none() {
        start.name = thread.and_then(|t| t.name.clone());
    }
    let waiters = s
        .waiters
        .iter()
        .map(|tid| {
            opening
                .process
                .as_ref()
                .and_then(|p| p.threads.iter().find(|t| t.os_thread_id == Some(*tid)))
                .map(ThreadRef::of)
                .unwrap_or(ThreadRef {
                    os_thread_id: *tid,
                    thread_id: 0,
                    name: None,
                })
        })
        .collect();
    Incident {
        id: s.id,
        trigger: s.trigger,
        pid,
        thread: start,
        start: rfc3339(unix),
        start_unix: (unix * 1000.0).round() / 1000.0,
        duration_ms: round_ms(s.duration()),
        ongoing,
        uncertainty_ms: round_ms(
            s.first.saturating_sub(s.before.unwrap_or(s.first)) / 2
                + s.after.unwrap_or(s.last).saturating_sub(s.last) / 2,
        ),
        threshold_ms: round_ms(threshold),
        samples: s.samples,
        culprit,
        stack: s.start.frames.clone(),
        during,
        during_other: s.during.other,
        waiters,
        threads: opening.process.map(|p| p.threads),
        tasks,
        threads_error: opening.error,
        flamegraph: None,
    }
}

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// `2026-12-02T12:00:00.123Z`.
pub(crate) fn rfc3339(unix: f64) -> String {
    let secs = unix.floor() as i64;
    let millis = ((unix - secs as f64) * 1000.0).floor() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// `412 ms`, `3.2 s`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10_000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// The terminal line when an incident opens.
pub(crate) fn opened_line(s: &Streak, culprit: &CulpritOut, pid: i32) -> String {
    format!(
        "pyinspect: incident {}: {} {} so far in {} (process {pid}, {})",
        s.id,
        s.trigger.describe(),
        human(s.last.saturating_sub(s.began())),
        culprit.text(),
        ThreadRef::of(&s.start).text()
    )
}

/// The terminal line when it closes.
pub(crate) fn closed_line(i: &Incident) -> String {
    format!(
        "pyinspect: incident {}: {} for {} in {}{}",
        i.id,
        i.trigger.describe(),
        human(Duration::from_secs_f64(i.duration_ms / 1000.0)),
        i.culprit.text(),
        if i.ongoing { " (still going on)" } else { "" }
    )
}

/// The text form of an incident.
pub(crate) fn write_text(
    out: &mut dyn Write,
    i: &Incident,
    p: Option<&ProcessStacks>,
) -> std::io::Result<()> {
    writeln!(
        out,
        "Incident {}: {} for {}{} (process {}, {})",
        i.id,
        i.trigger.describe(),
        human(Duration::from_secs_f64(i.duration_ms / 1000.0)),
        if i.ongoing { ", still going on" } else { "" },
        i.pid,
        i.thread.text()
    )?;
    writeln!(
        out,
        "  started {}, {} samples, threshold {}",
        i.start,
        i.samples,
        human(Duration::from_secs_f64(i.threshold_ms / 1000.0))
    )?;
    writeln!(out, "  culprit: {}", i.culprit.text())?;
    if !i.waiters.is_empty() {
        let w: Vec<String> = i.waiters.iter().map(ThreadRef::text).collect();
        writeln!(out, "  waiting for the GIL: {}", w.join(", "))?;
    }
    writeln!(out, "  stack at the start:")?;
    for f in &i.stack {
        writeln!(out, "    {}", frame_label(f))?;
    }
    writeln!(out, "  during the stall:")?;
    for d in i.during.iter().take(TEXT_DURING) {
        writeln!(
            out,
            "    {:>5} samples: {}",
            d.samples,
            d.frames.join(" <- ")
        )?;
    }
    let left: u64 = i
        .during
        .iter()
        .skip(TEXT_DURING)
        .map(|d| d.samples)
        .sum::<u64>()
        + i.during_other;
    if left > 0 {
        writeln!(out, "    {left:>5} samples in other stacks")?;
    }
    if let Some(f) = &i.flamegraph {
        writeln!(out, "  flame graph: {f}")?;
    }
    if let Some(e) = &i.threads_error {
        writeln!(out, "  threads not read when it opened: {e}")?;
    }
    if let Some(p) = p {
        writeln!(out, "  every thread when it opened:")?;
        let mut buf = Vec::new();
        crate::output::write_dump_text(&mut buf, p, false)?;
        for line in String::from_utf8_lossy(&buf).lines() {
            writeln!(out, "  | {line}")?;
        }
    }
    writeln!(out)
}

/// At most `per_minute` incidents written in any minute (a burst of that
/// many, then one per 60/per_minute seconds); the others are counted.
pub(crate) struct RateLimit {
    per_minute: f64,
    tokens: f64,
    at: Instant,
    pub(crate) held_back: u64,
}

impl RateLimit {
    pub(crate) fn new(per_minute: u32) -> RateLimit {
        RateLimit {
            per_minute: per_minute as f64,
            tokens: per_minute as f64,
            at: Instant::now(),
            held_back: 0,
        }
    }

    pub(crate) fn allow(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + dt * self.per_minute / 60.0).min(self.per_minute);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.held_back += 1;
            false
        }
    }
}

/// Count, total and longest by culprit, for the summary at exit.
#[derive(Default)]
pub(crate) struct Summary {
    by: BTreeMap<String, (u64, Duration, Duration)>,
    other: (u64, Duration, Duration),
}

impl Summary {
    pub(crate) fn add(&mut self, i: &Incident) {
        let key = i.culprit.key(i.trigger);
        let d = Duration::from_secs_f64(i.duration_ms / 1000.0);
        let e = if self.by.contains_key(&key) || self.by.len() < MAX_CULPRITS {
            self.by.entry(key).or_default()
        } else {
            &mut self.other
        };
        e.0 += 1;
        e.1 += d;
        e.2 = e.2.max(d);
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        let mut rows: Vec<(&String, &(u64, Duration, Duration))> = self.by.iter().collect();
        rows.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
        let mut out: Vec<String> = rows
            .into_iter()
            .map(|(k, (n, total, longest))| {
                format!(
                    "{n} × {k}: total {}, longest {}",
                    human(*total),
                    human(*longest)
                )
            })
            .collect();
        if self.other.0 > 0 {
            out.push(format!(
                "{} × other culprits: total {}, longest {}",
                self.other.0,
                human(self.other.1),
                human(self.other.2)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_times() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_700_000_000.25), "2023-11-14T22:13:20.250Z");
        assert_eq!(rfc3339(951_782_400.0), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn the_rate_limit_lets_a_burst_through_then_one_at_a_time() {
        let mut r = RateLimit::new(2);
        let t = r.at;
        assert!(r.allow(t) && r.allow(t) && !r.allow(t));
        assert!(r.allow(t + Duration::from_secs(30)));
        assert_eq!(r.held_back, 1);
    }
}
