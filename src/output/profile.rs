//! The aggregation model every `record` format is written from.

use foldhash::{HashMap, HashMapExt};
use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{filenames, ProfileOptions};
use crate::stack::{Frame, FrameKind, NameSource, ThreadStack, ThreadStatus};

/// Values stored once and referred to by a dense `u32` id. `Arc` lets the
/// map key and the id-indexed list share one allocation.
pub(super) struct Interner<T: ?Sized> {
    map: HashMap<Arc<T>, u32>,
    list: Vec<Arc<T>>,
}

impl<T: ?Sized + Hash + Eq> Interner<T>
where
    for<'a> Arc<T>: From<&'a T>,
{
    fn new() -> Self {
        Interner {
            map: HashMap::new(),
            list: Vec::new(),
        }
    }

    /// Allocates only the first time a value is seen.
    fn intern(&mut self, value: &T) -> u32 {
        if let Some(&id) = self.map.get(value) {
            return id;
        }
        let id = self.list.len() as u32;
        let shared: Arc<T> = Arc::from(value);
        self.list.push(shared.clone());
        self.map.insert(shared, id);
        id
    }

    pub(super) fn get(&self, id: u32) -> &T {
        self.list[id as usize].borrow()
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }
}

/// What makes two frames the same frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum FrameKey {
    Python {
        function: u32,
        file: Option<u32>,
        /// 0 with `--nolineno`, so lines of one function merge.
        line: u32,
    },
    Native {
        function: u32,
        module: Option<u32>,
        offset: Option<u32>,
    },
    /// Process and thread roots, the truncation marker: the label is all
    /// there is to them.
    Synthetic { label: u32 },
}

/// One distinct frame, as the writers need it. All fields are string ids.
pub(super) struct FrameInfo {
    /// `function (short_file:line)`: what flame graphs and traces show.
    pub(crate) label: u32,
    /// The bare function name (pprof keeps name and line apart).
    pub(crate) function: u32,
    /// The file name as the target reported it.
    pub(crate) file: Option<u32>,
    /// 0 when unknown or left out.
    pub(crate) line: u32,
    /// A native frame's library (full path as mapped), when known.
    pub(crate) module: Option<u32>,
    pub(crate) kind: FrameClass,
}

/// What a frame stands for, as the writers that colour by it need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FrameClass {
    Python,
    Native,
    /// Process and thread roots, the truncation marker.
    Synthetic,
}

pub(super) struct ProcessInfo {
    pub(crate) pid: i32,
    pub(crate) cmdline: u32,
    /// (command line it was made for, frame id) of the `process` root.
    root: Option<(u32, u32)>,
}

pub(super) struct ThreadInfo {
    pub(crate) pid: i32,
    /// Python's thread ident (pthread_t).
    pub(crate) ident: u64,
    pub(crate) os_tid: Option<u32>,
    /// The latest name seen: threads are often named after they start.
    /// One from `threading` outranks the kernel's, which a thread shows
    /// before `threading` registers it and after it leaves.
    pub(crate) name: Option<u32>,
    /// The name is the kernel's (see [`crate::stack::NameSource`]).
    name_from_os: bool,
    /// (name it was made for, whether that was the kernel's, frame id) of
    /// the `thread` root.
    root: Option<(Option<u32>, bool, u32)>,
    /// Index in `runs` of this thread's latest run.
    last_run: Option<usize>,
    last_end_ns: u64,
}

impl ThreadInfo {
    /// The id people see: the OS thread id when known (it matches `top`,
    /// `ps -L`), else Python's ident.
    pub(super) fn display_id(&self) -> String {
        match self.os_tid {
            Some(t) => t.to_string(),
            None => format!("0x{:x}", self.ident),
        }
    }
}

/// Consecutive samples of one thread with the same stack.
pub(super) struct Run {
    pub(crate) start_ns: u64,
    pub(crate) dur_ns: u64,
    pub(crate) thread: u32,
    pub(crate) stack: u32,
    /// The thread went unsampled (idle, filtered out) right before this run.
    pub(crate) after_gap: bool,
    /// Samples merged into this run.
    pub(crate) count: u32,
    /// The thread was idle (waiting, not holding the GIL) in these samples.
    pub(crate) idle: bool,
}

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Totals {
    pub(crate) count: u64,
    pub(crate) ns: u64,
}

/// Stacks aggregated as they are sampled; see the module docs of `output`.
pub struct Profile {
    pub(super) opts: ProfileOptions,
    /// Wall-clock time the profile was created: the recording's start.
    pub(super) started: SystemTime,
    pub(super) strings: Interner<str>,
    frame_ids: HashMap<FrameKey, u32>,
    pub(super) frames: Vec<FrameInfo>,
    /// Frame ids, root first.
    pub(super) stacks: Interner<[u32]>,
    process_ids: HashMap<i32, u32>,
    pub(super) processes: Vec<ProcessInfo>,
    thread_ids: HashMap<(i32, u64), u32>,
    pub(super) threads: Vec<ThreadInfo>,
    /// (stack, thread) → how often and for how long it was seen.
    pub(super) totals: HashMap<(u32, u32), Totals>,
    /// In the order added; only with `opts.timeline`.
    pub(super) runs: Vec<Run>,
    /// Full file name id → shortened file name id.
    short_files: HashMap<u32, u32>,
    samples: u64,
    /// Latest sample end (timestamp + weight) seen.
    pub(super) end_ns: u64,
    /// Reused for each sample so that a known stack allocates nothing.
    scratch: Vec<u32>,
    /// Frame ids of frames whose names are shared strings (the reader's
    /// code-object names), by the names' addresses: a known frame costs one
    /// lookup of a few words instead of hashing its names. The entry holds
    /// the strings, so that an address cannot be reused while it is a key.
    shared_frames: HashMap<SharedKey, SharedFrame>,
}

/// (pid, Python frame, function name's address, file name's address or 0, line).
type SharedKey = (i32, bool, usize, usize, u32);

struct SharedFrame {
    id: u32,
    _function: Arc<str>,
    _file: Option<Arc<str>>,
}

/// Entries of `shared_frames` before it is emptied: a reader that keeps
/// making new strings for the same names (a cache cleared) cannot grow it
/// without bound.
const MAX_SHARED_FRAMES: usize = 1 << 16;

/// The address of a shared string's bytes.
fn addr_of(s: &Arc<str>) -> usize {
    s.as_ptr() as usize
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Profile {
    /// Make the profile when sampling starts: its wall-clock creation time
    /// becomes the profile's start time (pprof's `time_nanos`).
    pub fn new(opts: ProfileOptions) -> Self {
        Profile {
            opts,
            started: SystemTime::now(),
            strings: Interner::new(),
            frame_ids: HashMap::new(),
            frames: Vec::new(),
            stacks: Interner::new(),
            process_ids: HashMap::new(),
            processes: Vec::new(),
            thread_ids: HashMap::new(),
            threads: Vec::new(),
            totals: HashMap::new(),
            runs: Vec::new(),
            short_files: HashMap::new(),
            samples: 0,
            end_ns: 0,
            scratch: Vec::new(),
            shared_frames: HashMap::new(),
        }
    }

    /// Add one thread's stack sampled at `timestamp` (since the recording
    /// started), standing for `weight` of real time (the interval to the
    /// next sample).
    pub fn add(
        &mut self,
        pid: i32,
        cmdline: &str,
        thread: &ThreadStack,
        timestamp: Duration,
        weight: Duration,
    ) {
        self.add_samples(pid, cmdline, thread, timestamp, weight, 1);
    }

    /// As [`Profile::add`], for a stack that stands for `count` samples at
    /// the recording's rate: an interval measured whole (the eBPF engine's
    /// off-CPU time, from the scheduler's own switches), not sampled.
    pub fn add_samples(
        &mut self,
        pid: i32,
        cmdline: &str,
        thread: &ThreadStack,
        timestamp: Duration,
        weight: Duration,
        count: u64,
    ) {
        self.samples += count;
        let start_ns = nanos(timestamp);
        let weight_ns = nanos(weight);
        let end_ns = start_ns.saturating_add(weight_ns);
        self.end_ns = self.end_ns.max(end_ns);

        let process = self.process(pid, cmdline);
        let t = self.thread(pid, thread);

        let mut stack = std::mem::take(&mut self.scratch);
        stack.clear();
        if self.opts.subprocesses {
            stack.push(self.process_root(process));
        }
        if self.opts.threads {
            stack.push(self.thread_root(t));
        }
        if thread.truncated.is_some() {
            // The outer frames are missing: keep the partial stack apart
            // rather than merging it into whatever its top frame is.
            let label = self.strings.intern("[truncated]");
            stack.push(self.synthetic_frame(label));
        }
        for frame in thread.frames.iter().rev() {
            stack.push(self.frame(pid, frame));
        }
        let stack_id = self.stacks.intern(&stack);
        self.scratch = stack;

        let totals = self.totals.entry((stack_id, t)).or_default();
        totals.count += count;
        totals.ns = totals.ns.saturating_add(weight_ns);

        if self.opts.timeline {
            let idle = thread.status == ThreadStatus::Idle;
            self.extend_timeline(t, stack_id, start_ns, weight_ns, idle);
        }
    }

    /// Thread stacks added (one per thread per tick), as py-spy counts them.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    pub fn threads_seen(&self) -> usize {
        self.threads.len()
    }

    /// Whether it keeps the timeline ([`ProfileOptions::timeline`]).
    pub(super) fn keeps_timeline(&self) -> bool {
        self.opts.timeline
    }

    pub(super) fn label(&self, frame: u32) -> &str {
        self.strings.get(self.frames[frame as usize].label)
    }

    fn extend_timeline(&mut self, t: u32, stack: u32, start_ns: u64, weight_ns: u64, idle: bool) {
        let info = &mut self.threads[t as usize];
        let end_ns = start_ns.saturating_add(weight_ns);
        // A sample more than half an interval after the thread's previous
        // one means the thread was skipped in between (idle, --gil).
        let after_gap =
            info.last_run.is_some() && start_ns > info.last_end_ns.saturating_add(weight_ns / 2);
        match info.last_run {
            Some(i)
                if !after_gap
                    && self.runs[i].stack == stack
                    && self.runs[i].idle == idle
                    && self.runs[i].count < u32::MAX =>
            {
                let run = &mut self.runs[i];
                run.dur_ns = end_ns.saturating_sub(run.start_ns);
                run.count += 1;
            }
            _ => {
                info.last_run = Some(self.runs.len());
                self.runs.push(Run {
                    start_ns,
                    dur_ns: weight_ns,
                    thread: t,
                    stack,
                    after_gap,
                    count: 1,
                    idle,
                });
            }
        }
        info.last_end_ns = end_ns;
    }

    fn process(&mut self, pid: i32, cmdline: &str) -> u32 {
        if let Some(&p) = self.process_ids.get(&pid) {
            // The same command line as last time (nearly always): compared,
            // not hashed.
            if self.strings.get(self.processes[p as usize].cmdline) == cmdline {
                return p;
            }
        }
        let cmdline = self.strings.intern(cmdline);
        if let Some(&p) = self.process_ids.get(&pid) {
            // A process may exec: keep the latest command line.
            self.processes[p as usize].cmdline = cmdline;
            return p;
        }
        let p = self.processes.len() as u32;
        self.processes.push(ProcessInfo {
            pid,
            cmdline,
            root: None,
        });
        self.process_ids.insert(pid, p);
        p
    }

    fn thread(&mut self, pid: i32, thread: &ThreadStack) -> u32 {
        let t = match self.thread_ids.get(&(pid, thread.thread_id)) {
            Some(&t) => t,
            None => {
                let t = self.threads.len() as u32;
                self.threads.push(ThreadInfo {
                    pid,
                    ident: thread.thread_id,
                    os_tid: None,
                    name: None,
                    name_from_os: false,
                    root: None,
                    last_run: None,
                    last_end_ns: 0,
                });
                self.thread_ids.insert((pid, thread.thread_id), t);
                t
            }
        };
        let info = &mut self.threads[t as usize];
        if let Some(tid) = thread.os_thread_id {
            if info.os_tid.is_some_and(|old| old != tid) {
                // Another thread with the ident of one that ended: its name
                // and root are its own.
                info.name = None;
                info.name_from_os = false;
                info.root = None;
            }
            info.os_tid = Some(tid);
        }
        if let Some(n) = thread.name.as_deref() {
            let from_os = thread.name_source == Some(NameSource::Os);
            let outranked = from_os && info.name.is_some() && !info.name_from_os;
            // Interned only when it changed: names are compared, not hashed.
            if !outranked
                && (info.name_from_os != from_os
                    || info.name.is_none_or(|id| self.strings.get(id) != n))
            {
                let id = self.strings.intern(n);
                let info = &mut self.threads[t as usize];
                info.name = Some(id);
                info.name_from_os = from_os;
            }
        }
        t
    }

    fn process_root(&mut self, p: u32) -> u32 {
        let info = &self.processes[p as usize];
        if let Some((cmdline, frame)) = info.root {
            if cmdline == info.cmdline {
                return frame;
            }
        }
        let cmdline = info.cmdline;
        let label = format!("process {}: \"{}\"", info.pid, self.strings.get(cmdline));
        let label = self.strings.intern(&label);
        let frame = self.synthetic_frame(label);
        self.processes[p as usize].root = Some((cmdline, frame));
        frame
    }

    /// The root frame of thread `t`'s stacks, labelled with its name. A
    /// thread first seen nameless or under the kernel's name keeps one root
    /// when `threading` names it: the root takes the name, for the samples
    /// before too (the thread is one thread, as `dump` shows it). Renamed
    /// by `threading`, its later samples go under a root of the new name.
    fn thread_root(&mut self, t: u32) -> u32 {
        let info = &self.threads[t as usize];
        let (name, from_os) = (info.name, info.name_from_os);
        if let Some((made_for, _, frame)) = info.root {
            if made_for == name {
                return frame;
            }
        }
        let label = match name {
            Some(n) => format!("thread {} \"{}\"", info.display_id(), self.strings.get(n)),
            None => format!("thread {}", info.display_id()),
        };
        let label = self.strings.intern(&label);
        let frame = match info.root {
            Some((made_for, made_from_os, frame)) if made_for.is_none() || made_from_os => {
                let old = self.frames[frame as usize].label;
                self.frame_ids.remove(&FrameKey::Synthetic { label: old });
                self.frame_ids
                    .entry(FrameKey::Synthetic { label })
                    .or_insert(frame);
                let f = &mut self.frames[frame as usize];
                f.label = label;
                f.function = label;
                frame
            }
            _ => self.synthetic_frame(label),
        };
        self.threads[t as usize].root = Some((name, from_os, frame));
        frame
    }

    fn synthetic_frame(&mut self, label: u32) -> u32 {
        self.intern_frame(0, FrameKey::Synthetic { label })
    }

    fn frame(&mut self, pid: i32, frame: &Frame) -> u32 {
        // Frames with nothing but names and a line: by the names' addresses.
        if frame.module.is_none() && frame.offset.is_none() {
            let line = match (frame.kind, self.opts.nolineno) {
                (FrameKind::Python, true) => 0,
                _ => frame.line.unwrap_or(0),
            };
            let key = (
                pid,
                frame.kind == FrameKind::Python,
                addr_of(&frame.function),
                frame.file.as_ref().map_or(0, addr_of),
                line,
            );
            if let Some(f) = self.shared_frames.get(&key) {
                return f.id;
            }
            let id = self.frame_by_names(pid, frame);
            if self.shared_frames.len() >= MAX_SHARED_FRAMES {
                self.shared_frames.clear();
            }
            self.shared_frames.insert(
                key,
                SharedFrame {
                    id,
                    _function: frame.function.clone(),
                    _file: frame.file.clone(),
                },
            );
            return id;
        }
        self.frame_by_names(pid, frame)
    }

    fn frame_by_names(&mut self, pid: i32, frame: &Frame) -> u32 {
        let function = self.strings.intern(&frame.function);
        let key = match frame.kind {
            FrameKind::Python => FrameKey::Python {
                function,
                file: frame.file.as_deref().map(|f| self.strings.intern(f)),
                line: if self.opts.nolineno {
                    0
                } else {
                    frame.line.unwrap_or(0)
                },
            },
            FrameKind::Native => FrameKey::Native {
                function,
                module: frame.module.as_deref().map(|m| self.strings.intern(m)),
                // Without a symbol the offset is all that tells frames apart.
                offset: match frame.function.is_empty() {
                    true => frame.offset.as_deref().map(|o| self.strings.intern(o)),
                    false => None,
                },
            },
        };
        self.intern_frame(pid, key)
    }

    /// The frame id for `key`, making its label the first time.
    fn intern_frame(&mut self, pid: i32, key: FrameKey) -> u32 {
        if let Some(&id) = self.frame_ids.get(&key) {
            return id;
        }
        let info = match key {
            FrameKey::Python {
                function,
                file,
                line,
            } => {
                let short = file.map(|f| self.short_file(pid, f));
                let name = self.strings.get(function);
                let label = match (short, line) {
                    (None, _) => name.to_string(),
                    (Some(s), 0) => format!("{name} ({})", self.strings.get(s)),
                    (Some(s), l) => format!("{name} ({}:{l})", self.strings.get(s)),
                };
                FrameInfo {
                    label: self.strings.intern(&label),
                    function,
                    file,
                    line,
                    module: None,
                    kind: FrameClass::Python,
                }
            }
            FrameKey::Native {
                function,
                module,
                offset,
            } => {
                let name = self.strings.get(function);
                let module_path = module;
                let module = module.map(|m| {
                    let m = self.strings.get(m);
                    m.rsplit('/').next().unwrap_or(m)
                });
                let label = match (name.is_empty(), module) {
                    (false, Some(m)) => format!("{name} ({m})"),
                    (false, None) => name.to_string(),
                    (true, m) => format!(
                        "{}+{}",
                        m.unwrap_or("?"),
                        offset.map_or("?", |o| self.strings.get(o))
                    ),
                };
                FrameInfo {
                    label: self.strings.intern(&label),
                    function,
                    file: None,
                    line: 0,
                    module: module_path,
                    kind: FrameClass::Native,
                }
            }
            FrameKey::Synthetic { label } => FrameInfo {
                label,
                function: label,
                file: None,
                line: 0,
                module: None,
                kind: FrameClass::Synthetic,
            },
        };
        let id = self.frames.len() as u32;
        self.frames.push(info);
        self.frame_ids.insert(key, id);
        id
    }

    fn short_file(&mut self, pid: i32, file: u32) -> u32 {
        if self.opts.full_filenames {
            return file;
        }
        if let Some(&s) = self.short_files.get(&file) {
            return s;
        }
        let short = filenames::shorten(self.strings.get(file), pid);
        let s = self.strings.intern(&short);
        self.short_files.insert(file, s);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ProfileOptions {
        ProfileOptions {
            threads: false,
            nolineno: false,
            full_filenames: false,
            subprocesses: false,
            rate: 100.0,
            timeline: false,
        }
    }

    fn thread(ident: u64, frames: Vec<Frame>) -> ThreadStack {
        ThreadStack {
            thread_id: ident,
            os_thread_id: Some(ident as u32),
            name: None,
            interpreter: 0,
            status: ThreadStatus::Active,
            holds_gil: true,
            frames,
            truncated: None,
            native_entry: None,
            name_source: None,
            wait: None,
            asyncio: None,
        }
    }

    fn py(function: &str, line: u32) -> Frame {
        Frame::python(function, "/nonexistent/pkg/app.py", line)
    }

    fn labels(p: &Profile, stack: u32) -> Vec<&str> {
        p.stacks.get(stack).iter().map(|&f| p.label(f)).collect()
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn frame_labels_follow_the_options() {
        let stack = thread(7, vec![py("leaf", 12), py("<module>", 3)]);
        let mut p = Profile::new(opts());
        p.add(1, "python app.py", &stack, Duration::ZERO, MS);
        assert_eq!(labels(&p, 0), ["<module> (app.py:3)", "leaf (app.py:12)"]);

        let mut p = Profile::new(ProfileOptions {
            nolineno: true,
            full_filenames: true,
            ..opts()
        });
        p.add(1, "python app.py", &stack, Duration::ZERO, MS);
        let mut other_line = stack.clone();
        other_line.frames[0].line = Some(99);
        p.add(1, "python app.py", &other_line, MS, MS);
        // Without line numbers both samples are one stack.
        assert_eq!(p.stacks.len(), 1);
        assert_eq!(
            labels(&p, 0),
            [
                "<module> (/nonexistent/pkg/app.py)",
                "leaf (/nonexistent/pkg/app.py)"
            ]
        );
    }

    #[test]
    fn root_frames_and_native_frames() {
        let mut p = Profile::new(ProfileOptions {
            threads: true,
            subprocesses: true,
            ..opts()
        });
        let mut t = thread(42, vec![py("f", 1)]);
        let mut native = py("memcpy", 0);
        native.kind = FrameKind::Native;
        native.file = None;
        native.module = Some("/lib/x86_64-linux-gnu/libc.so.6".into());
        let mut unknown = native.clone();
        unknown.function = "".into();
        unknown.offset = Some("0x1234".into());
        t.frames.insert(0, native);
        t.frames.insert(0, unknown);
        p.add(9, "python -c 'x'", &t, Duration::ZERO, MS);
        assert_eq!(
            labels(&p, 0),
            [
                "process 9: \"python -c 'x'\"",
                "thread 42",
                "f (app.py:1)",
                "memcpy (libc.so.6)",
                "libc.so.6+0x1234"
            ]
        );
        t.name = Some("Wörker".into());
        t.name_source = Some(NameSource::Threading);
        t.truncated = Some("too deep".into());
        p.add(9, "python -c 'x'", &t, MS, MS);
        // The thread got its name later: its one root takes it, for the
        // first sample too; the truncated stack is kept apart.
        assert_eq!(labels(&p, 0)[1], "thread 42 \"Wörker\"");
        assert_eq!(labels(&p, 1)[1..3], ["thread 42 \"Wörker\"", "[truncated]"]);
        assert_eq!(p.threads_seen(), 1);
        assert_eq!(p.samples(), 2);
    }

    #[test]
    fn a_thread_keeps_one_root_named_by_threading_over_the_kernel() {
        let mut p = Profile::new(ProfileOptions {
            threads: true,
            ..opts()
        });
        let named = |name: &str, source: NameSource, frames: Vec<Frame>| {
            let mut t = thread(5, frames);
            t.name = Some(name.into());
            t.name_source = Some(source);
            t
        };
        let os = NameSource::Os;
        let py_name = NameSource::Threading;
        // The kernel's name first, threading's once it registers the
        // thread, the kernel's again once it left: one root, threading's name.
        p.add(
            1,
            "python",
            &named("python3", os, vec![py("boot", 1)]),
            MS,
            MS,
        );
        p.add(
            1,
            "python",
            &named("worker", py_name, vec![py("run", 2)]),
            MS,
            MS,
        );
        p.add(
            1,
            "python",
            &named("python3", os, vec![py("end", 3)]),
            MS,
            MS,
        );
        for s in 0..3 {
            assert_eq!(labels(&p, s)[0], "thread 5 \"worker\"");
        }
        // Renamed by threading: later samples under the new name, earlier
        // ones keep theirs.
        p.add(
            1,
            "python",
            &named("renamed", py_name, vec![py("run", 2)]),
            MS,
            MS,
        );
        assert_eq!(labels(&p, 3)[0], "thread 5 \"renamed\"");
        assert_eq!(labels(&p, 1)[0], "thread 5 \"worker\"");
        // The ident taken up by another kernel thread: a thread of its own.
        let mut other = named("python3", os, vec![py("other", 4)]);
        other.os_thread_id = Some(6);
        p.add(1, "python", &other, MS, MS);
        assert_eq!(labels(&p, 4)[0], "thread 6 \"python3\"");
        assert_eq!(labels(&p, 3)[0], "thread 5 \"renamed\"");
    }

    #[test]
    fn timeline_merges_runs_and_marks_gaps() {
        let mut p = Profile::new(ProfileOptions {
            timeline: true,
            ..opts()
        });
        let a = thread(1, vec![py("a", 1)]);
        let b = thread(1, vec![py("b", 1)]);
        for (tick, t) in [(0, &a), (1, &a), (2, &b), (5, &b), (6, &a)] {
            p.add(1, "py", t, MS * tick * 10, MS * 10);
        }
        let runs: Vec<_> = p
            .runs
            .iter()
            .map(|r| (r.start_ns / 1_000_000, r.dur_ns / 1_000_000, r.after_gap))
            .collect();
        assert_eq!(
            runs,
            [
                (0, 20, false),
                (20, 10, false),
                (50, 10, true),
                (60, 10, false)
            ]
        );
        assert_eq!(p.end_ns, 70_000_000);
    }

    /// Recording for hours must not grow with the number of samples.
    #[test]
    fn memory_stays_bounded() {
        let stacks: Vec<ThreadStack> = (0..10)
            .map(|i| {
                let mut frames: Vec<Frame> = (0..5).map(|d| py(&format!("f{d}"), 10 + d)).collect();
                frames.insert(0, py(&format!("leaf{i}"), i));
                thread(3, frames)
            })
            .collect();
        let mut p = Profile::new(opts());
        for i in 0..1_000_000u32 {
            let t = &stacks[i as usize % 10];
            p.add(5, "python app.py", t, MS * i, MS);
        }
        assert_eq!(p.samples(), 1_000_000);
        assert_eq!(p.stacks.len(), 10);
        assert_eq!(p.frames.len(), 15);
        assert_eq!(p.totals.len(), 10);
        assert!(p.runs.is_empty());
        // 15 function names, 15 labels, the file, its short form, the command line.
        assert_eq!(p.strings.len(), 33);
        assert_eq!(p.totals.values().map(|t| t.count).sum::<u64>(), 1_000_000);

        // With the timeline, a steady stack is one run however long it lasts.
        let mut p = Profile::new(ProfileOptions {
            timeline: true,
            ..opts()
        });
        for i in 0..100_000u32 {
            p.add(5, "python app.py", &stacks[0], MS * i, MS);
        }
        assert_eq!(p.runs.len(), 1);
    }

    #[test]
    fn frames_by_shared_names_are_frames_by_their_text() {
        // The same names in strings of their own, and in one shared string:
        // one frame either way; another line is another frame.
        let shared = py("work", 7);
        let same = [shared.clone(), py("work", 7), shared.clone()];
        let mut p = Profile::new(opts());
        for f in &same {
            p.add(5, "python app.py", &thread(3, vec![f.clone()]), MS, MS);
        }
        assert_eq!(p.frames.len(), 1);
        assert_eq!(p.stacks.len(), 1);
        p.add(5, "python app.py", &thread(3, vec![py("work", 8)]), MS, MS);
        assert_eq!(p.frames.len(), 2);
        // Another process's frame with the same names is the same frame.
        p.add(6, "python app.py", &thread(3, vec![shared.clone()]), MS, MS);
        assert_eq!(p.frames.len(), 2);
        // Without line numbers, lines of a function are one frame.
        let mut p = Profile::new(ProfileOptions {
            nolineno: true,
            ..opts()
        });
        for line in [1, 2, 3] {
            p.add(
                5,
                "python app.py",
                &thread(3, vec![py("work", line)]),
                MS,
                MS,
            );
        }
        assert_eq!(p.frames.len(), 1);
        assert_eq!(p.label(0), "work (app.py)");
    }
}
