//! What a thread is waiting for: the one wait model behind dump's text and
//! JSON, top's wait column and record's off-CPU leaf frames.
//!
//! The room holds, by concern:
//! - this file: the model ([`Wait`] and its parts) and its text forms;
//! - [`syscall`]: a blocked call decoded from `/proc/PID/task/TID/syscall`'s
//!   text or a core's saved registers, its pointer arguments read through
//!   [`Memory`], bounded;
//! - [`fd`]: an fd described from its link target and the socket tables;
//! - [`locks`]: whether a futex wait is on a lock a Python local refers to;
//! - [`live`]: [`WaitReader`], the only part that reads the kernel's state,
//!   through [`crate::procfs`].
//!
//! Everything but `live` is pure: the kernel's text (`/proc/PID/task/TID/syscall`,
//! `/proc/PID/net/*`, fdinfo, fd link targets, wchan, kernel stacks) comes in
//! as strings, and memory through [`Memory`] (the clock is read for a
//! deadline's time left). A thread that changes state between the reads is
//! shown as what was read.

mod fd;
mod live;
mod locks;
mod syscall;
#[cfg(test)]
mod tests;

use serde::Serialize;

use fd::{clip, is_any, set_summary, SUMMARY_EXAMPLES, TEXT_ITEM_MAX};
use syscall::short_name;

pub(crate) use fd::FdDesc;
pub(crate) use live::{CallProbe, WaitReader, SAME_CALL_TTL};
pub(crate) use locks::{futex_is_lock, lock_kind};
pub(crate) use syscall::SyscallLine;
pub(crate) use syscall::{
    asleep_in_call, call_from_registers, clock_now, restart_pending, resumable, resumed_call,
    CallArgs, RESTART_SYSCALL,
};

/// Most characters of a wait's text form in a dump's thread header, with
/// the thread's own words before it: a set of fds grows with the target,
/// and past this it is summarised (JSON keeps every fd).
pub(crate) const HEADER_MAX: usize = 200;
/// Least room a wait's text is given, however long the words before it.
const WAIT_TEXT_MIN: usize = 80;

/// What a thread is doing in the kernel, as read at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Wait {
    /// Scheduler state letter (R, S, D, T, t, Z, I); empty (and left out
    /// of JSON) for a core's thread that its registers show in a call but
    /// not asleep in it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) state: String,
    /// The system call it is blocked in, by name ("syscall_N" when the
    /// number is not one pyinspect names); absent while running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) syscall: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) syscall_nr: Option<i64>,
    /// The fd the call is on (read, recv, accept, epoll_wait's epoll fd…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fd: Option<FdDesc>,
    /// The fds of a select/poll set, or those an epoll set watches.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) fds: Vec<FdDesc>,
    /// How many more fds the set holds than `fds` lists (past [`MAX_SET_FDS`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) fds_unlisted: usize,
    /// A path argument (openat, stat, execve…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<Timeout>,
    /// The futex word's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) futex: Option<String>,
    /// Waiting for the GIL (a futex inside the GIL's mutex or condition variable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) gil: Option<GilWait>,
    /// Waiting for a lock that a Python frame's local refers to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lock: Option<LockWait>,
    /// wait4/waitid: the child waited for (-1: any child).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) child: Option<i64>,
    /// Kernel function the thread sleeps in (shown for D state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wchan: Option<String>,
    /// Kernel stack, innermost first (D state, when readable: root only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) kernel_stack: Vec<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(crate) enum Timeout {
    /// No timeout: waits until woken.
    None,
    /// A relative timeout as asked, in seconds.
    Relative { seconds: f64 },
    /// An absolute deadline, given as the seconds left when read.
    Deadline { seconds_left: f64 },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct GilWait {
    /// Kernel tid of the thread holding the GIL, when one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LockWait {
    /// The local's name, and the frame it is a local of.
    pub(crate) name: String,
    /// Python type of the object (`_thread.lock`, `_thread.RLock`), or
    /// `threading.Condition` for the waiter lock of `Condition.wait`.
    pub(crate) kind: String,
    pub(crate) address: String,
    pub(crate) function: String,
    pub(crate) file: String,
    pub(crate) line: u32,
}

impl Wait {
    /// Whether the thread is off the CPU (sleeping, in D state, stopped).
    /// A tracing stop ('t') is not: while sampling it is our own pause (or
    /// one that outlived its budget) of a thread that was running.
    pub(crate) fn off_cpu(&self) -> bool {
        !matches!(self.state.as_str(), "R" | "t" | "")
    }

    /// The short form used by top's wait column and record's leaf frames:
    /// `recv 127.0.0.1:443`, `GIL wait`, `futex`, `read /data/x.bin`,
    /// `D: wchan`. Empty for a running thread.
    pub(crate) fn short(&self) -> String {
        if self.state == "D" {
            if let Some(w) = &self.wchan {
                return format!("D: {w}");
            }
        }
        if self.gil.is_some() {
            return "GIL wait".into();
        }
        if let Some(l) = &self.lock {
            return format!("lock {}", l.name);
        }
        let Some(name) = &self.syscall else {
            return match self.state.as_str() {
                "R" | "" => String::new(),
                "D" => "D".into(),
                s => s.to_string(),
            };
        };
        let short = short_name(name);
        if let Some(fd) = &self.fd {
            if !fd.watches.is_empty() || self.fds.is_empty() {
                return format!("{short} {}", fd.short());
            }
        }
        if let Some(first) = self.fds.first() {
            let more = if self.fds.len() > 1 {
                format!(" +{}", self.fds.len() - 1)
            } else {
                String::new()
            };
            return format!("{short} {}{more}", first.short());
        }
        if let Some(p) = &self.path {
            return format!("{short} {p}");
        }
        if let Some(c) = self.child {
            return if c < 0 {
                format!("{short} any child")
            } else {
                format!("{short} {c}")
            };
        }
        short.to_string()
    }

    /// The long form in at most [`HEADER_MAX`] characters.
    #[cfg(test)]
    pub(crate) fn long(&self) -> String {
        self.long_within(HEADER_MAX)
    }

    /// The long form of dump's header: everything known, decoded, in at
    /// most `room` characters. What fits is shown whole; a set of fds that
    /// does not is summarised (how many of each kind, the listening
    /// sockets, the first few peers), then paths are clipped, and the
    /// text itself last. JSON keeps everything.
    pub(crate) fn long_within(&self, room: usize) -> String {
        let room = room.max(WAIT_TEXT_MIN);
        let set = !self.fds.is_empty() || self.fds_unlisted > 0;
        let mut tries: Vec<(Option<(usize, usize)>, usize)> = vec![(None, usize::MAX)];
        if set {
            for examples in (0..=SUMMARY_EXAMPLES).rev() {
                tries.push((Some((examples, usize::MAX)), TEXT_ITEM_MAX));
            }
            for groups in (0..4).rev() {
                tries.push((Some((0, groups)), TEXT_ITEM_MAX / 2));
            }
        } else {
            tries.push((None, TEXT_ITEM_MAX));
            tries.push((None, TEXT_ITEM_MAX / 2));
        }
        let mut text = String::new();
        for (summary, item) in tries {
            text = self.long_form(summary, item);
            if text.chars().count() <= room {
                return text;
            }
        }
        clip_end(&text, room)
    }

    /// The long form with the set of fds listed whole (`summary` None) or
    /// summarised, naming (examples, groups) at most; paths and peers
    /// clipped to `item` characters.
    fn long_form(&self, summary: Option<(usize, usize)>, item: usize) -> String {
        let mut s = String::new();
        if let Some(name) = &self.syscall {
            s += name;
            let mut args = Vec::new();
            let epoll = self.fd.as_ref().filter(|fd| fd.kind == "epoll");
            let set = if self.fds.is_empty() && self.fds_unlisted == 0 {
                None
            } else {
                Some(match summary {
                    None => {
                        let fds: Vec<String> = self.fds.iter().map(|f| f.long(item)).collect();
                        let mut all = fds.join("; ");
                        if self.fds_unlisted > 0 {
                            all += &format!("; {} not listed", self.fds_unlisted);
                        }
                        format!("{{{all}}}")
                    }
                    Some((examples, groups)) => {
                        if groups == 0 && epoll.is_some() {
                            String::new()
                        } else if groups == 0 {
                            format!("{{{} fds}}", self.fds.len() + self.fds_unlisted)
                        } else {
                            let sum = set_summary(
                                &self.fds,
                                self.fds_unlisted,
                                epoll.is_none(),
                                examples,
                                groups,
                                item,
                            );
                            format!("{{{sum}}}")
                        }
                    }
                })
            };
            match (&self.fd, set) {
                // The set an epoll fd watches follows it.
                (Some(fd), Some(set)) if epoll.is_some() => {
                    let mut fd = fd.clone();
                    fd.watches.clear();
                    fd.watches_unlisted = 0;
                    let watched = self.fds.len() + self.fds_unlisted;
                    let head = format!("{} watching {watched} fds", fd.long(item));
                    args.push(if set.is_empty() {
                        head
                    } else {
                        format!("{head} {set}")
                    });
                }
                (fd, set) => {
                    if let Some(fd) = fd {
                        args.push(fd.long(item));
                    }
                    args.extend(set);
                }
            }
            if let Some(p) = &self.path {
                args.push(clip(p, item));
            }
            if let Some(c) = self.child {
                args.push(if c < 0 {
                    "any child".into()
                } else {
                    format!("child {c}")
                });
            }
            if let Some(f) = &self.futex {
                args.push(f.clone());
            }
            match &self.timeout {
                Some(Timeout::None) => args.push("no timeout".into()),
                Some(Timeout::Relative { seconds }) => {
                    args.push(format!("timeout {}", secs(*seconds)))
                }
                Some(Timeout::Deadline { seconds_left }) => {
                    args.push(format!("deadline in {}", secs(*seconds_left)))
                }
                None => {}
            }
            s += &format!("({})", args.join(", "));
        }
        if let Some(g) = &self.gil {
            s += " waiting for the GIL";
            match (g.holder, &g.holder_name) {
                (Some(h), Some(n)) => s += &format!(" (held by thread {h} \"{}\")", clip(n, item)),
                (Some(h), None) => s += &format!(" (held by thread {h})"),
                _ => s += " (no holder seen)",
            }
        }
        if let Some(l) = &self.lock {
            s += &format!(
                " waiting for {} '{}' at {} (local of {}, {}:{})",
                l.kind,
                clip(&l.name, item),
                l.address,
                clip(&l.function, item),
                clip(&l.file, item),
                l.line
            );
        }
        if self.state == "D" {
            if !s.is_empty() {
                s += ", ";
            }
            s += &format!(
                "uninterruptible in {}",
                self.wchan.as_deref().unwrap_or("?")
            );
        }
        s
    }
}

/// `s` in at most `max` characters, cut at the end.
fn clip_end(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The room a wait's text has in a header whose words before it take
/// `before` characters.
pub(crate) fn header_room(before: usize) -> usize {
    HEADER_MAX.saturating_sub(before).max(WAIT_TEXT_MIN)
}

/// How much a sampler learns about waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitDetail {
    /// Nothing (the default of cpu-mode sampling).
    #[default]
    Off,
    /// The call and its fd, from registers and cached fd descriptions:
    /// what top's column and record's leaf frames show.
    Short,
    /// Everything: pointer arguments, fd sets, epoll sets, pipe peers, wchan,
    /// kernel stacks (dump).
    Full,
}

/// Seconds as a person reads them: `3600s`, `0.005s`, `2.5s`.
fn secs(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e12 {
        format!("{v:.0}s")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}s")
    } else {
        format!("{v:.3}s")
    }
}

/// One line that says what several threads have in common, for the end of a dump.
pub(crate) fn summary(waits: &[(u32, Option<&str>, &Wait)]) -> Vec<String> {
    use std::collections::BTreeMap;
    let mut out = Vec::new();
    // GIL waiters, by holder.
    let mut gil: BTreeMap<Option<u32>, (usize, Option<String>)> = BTreeMap::new();
    let mut d_state: BTreeMap<String, usize> = BTreeMap::new();
    let mut peers: BTreeMap<String, usize> = BTreeMap::new();
    let mut locks: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, w) in waits {
        if let Some(g) = &w.gil {
            let e = gil.entry(g.holder).or_insert((0, g.holder_name.clone()));
            e.0 += 1;
        } else if w.state == "D" {
            *d_state
                .entry(w.wchan.clone().unwrap_or_else(|| "?".into()))
                .or_default() += 1;
        } else if let Some(l) = &w.lock {
            *locks
                .entry(format!("{} '{}' ({})", l.kind, l.name, l.address))
                .or_default() += 1;
        } else if let Some(fd) = &w.fd {
            if let (Some(r), Some(st)) = (&fd.remote, &fd.state) {
                if !is_any(r) {
                    *peers.entry(format!("{r} ({st})")).or_default() += 1;
                }
            }
        }
    }
    let threads = |n: usize| {
        if n == 1 {
            "1 thread waits".to_string()
        } else {
            format!("{n} threads wait")
        }
    };
    for (holder, (n, name)) in gil {
        out.push(match (holder, name) {
            (Some(h), Some(name)) => format!("{} for the GIL held by {h} '{name}'", threads(n)),
            (Some(h), None) => format!("{} for the GIL held by {h}", threads(n)),
            (None, _) => format!("{} for the GIL", threads(n)),
        });
    }
    for (l, n) in locks.into_iter().filter(|(_, n)| *n >= 2) {
        out.push(format!("{} for {l}", threads(n)));
    }
    for (p, n) in peers.into_iter().filter(|(_, n)| *n >= 2) {
        out.push(format!("{n} threads blocked on {p}"));
    }
    for (w, n) in d_state {
        let t = if n == 1 { "thread" } else { "threads" };
        out.push(format!("{n} {t} in D state ({w})"));
    }
    out
}
