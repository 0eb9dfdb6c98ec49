//! Snapshots of every thread of every interpreter: the one public face of
//! the reader, and `snapshot`, which puts together what its rooms read:
//! `threads` (interpreters, thread states, tids, GIL, names), `frames` (each
//! thread's frame walk), `code` (code objects, lines, locals), over the
//! shared vocabulary in `types`.

use crate::error::{MemError, Result};
use crate::memory::MemoryExt;
use crate::python::pagecache::PageCache;
use crate::stack::{Frame, NameSource, ThreadStack, ThreadStatus};
use crate::target::TargetSource;
use foldhash::HashMap as FastMap;
use foldhash::HashMapExt;
use std::sync::Arc;
use types::{Chain, CodeInfo, Kept, RawThread};

// What the eBPF engine (src/bpf/) asks of the reader.
pub(crate) mod bpf;
mod code;
mod frames;
#[cfg(test)]
mod testing;
mod threads;
mod types;

pub(crate) use super::bounds::MAX_THREADS;
pub(crate) use frames::cframe_chain;
pub(crate) use types::{LocalObjects, LocalRef, ReadOptions, Reader, ThreadSnapshot};

/// The longest repr of a local, its `...` included, per `-l` given: 80, as
/// pystack cuts them; `-ll` 160, and so on.
const LOCAL_REPR_CHARS: usize = 80;

impl Reader {
    /// Read every thread's stack. `states` maps kernel tids to their
    /// scheduler state letter, read before any pausing.
    pub(crate) fn snapshot(
        &mut self,
        src: &dyn TargetSource,
        opts: ReadOptions,
        states: &FastMap<i32, char>,
        ran: &FastMap<i32, (u64, u64)>,
    ) -> Result<Vec<ThreadSnapshot>> {
        let cache = PageCache::resume(src, std::mem::take(&mut self.snapshot_pages));
        let mut raw = self.threads(src, &cache)?;
        // Locals can be written by other threads; only plain stacks are kept.
        let keep = opts.locals == 0 && opts.local_objects == LocalObjects::None;
        self.walk_threads(&cache, &mut raw, keep, ran);
        let gil_by_interp = self.gil_holders(&cache, &raw);
        let gc_by_interp = self.read_collectors(&cache, &raw, &gil_by_interp);
        if opts.names {
            self.refresh_names(&cache, &raw);
        }
        let mut resolved: FastMap<u64, Result<Option<Arc<CodeInfo>>, MemError>> = FastMap::new();
        let mut gil_sync_by_interp: FastMap<u64, Vec<(u64, u64)>> = FastMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for mut t in raw {
            // A thread state no thread has taken up yet: from 3.12 `threading`
            // makes a new thread's state before the thread runs, which binds
            // it (thread_id 0 until then). No thread, no stack: not listed,
            // so a profile has no nameless "thread 0x0" beside the real one.
            if t.thread_id == 0 && t.native_tid.is_none() && t.frames.is_empty() && !t.kept {
                continue;
            }
            let holds_gil = gil_by_interp
                .get(&t.interp)
                .copied()
                .flatten()
                .is_some_and(|h| h == t.tstate);
            let kernel_active = t
                .native_tid
                .and_then(|tid| states.get(&(tid as i32)))
                .map(|s| matches!(s, 'R' | 'D'));
            let status = if holds_gil || kernel_active == Some(true) {
                ThreadStatus::Active
            } else {
                ThreadStatus::Idle
            };
            let mut frames = Vec::with_capacity(t.frames.len());
            let mut truncated = t.truncated.take();
            if let Some(k) = self.kept.get(&t.tstate).filter(|_| t.kept) {
                frames.clone_from(&k.frames);
                truncated.clone_from(&k.truncated);
                t.anchors.clone_from(&k.anchors);
            }
            let local_refs =
                self.python_frames(&cache, &t, opts, &mut resolved, &mut frames, &mut truncated);
            let name = self.names.get(&(t.interp, t.thread_id)).cloned();
            out.push(ThreadSnapshot {
                stack: ThreadStack {
                    thread_id: t.thread_id,
                    os_thread_id: t.native_tid,
                    name: name.clone(),
                    interpreter: t.interp_id,
                    status,
                    holds_gil,
                    frames,
                    truncated,
                    native_entry: None,
                    name_source: name.is_some().then_some(NameSource::Threading),
                    wait: None,
                    asyncio: None,
                },
                anchors: std::mem::take(&mut t.anchors),
                in_gc: holds_gil && gc_by_interp.get(&t.interp) == Some(&Some(true)),
                gil_sync: if opts.gil_sync {
                    gil_sync_by_interp
                        .entry(t.interp)
                        .or_insert_with(|| self.gil_sync_ranges(&cache, t.interp))
                        .clone()
                } else {
                    Vec::new()
                },
                local_refs,
                tstate: t.tstate,
                interp: t.interp,
            });
        }
        self.snapshot_pages = cache.into_store();
        self.keep_stacks(&out, keep, ran);
        Ok(out)
    }

    /// Walk the frames of each thread that has run since its stack was kept
    /// (or has none kept), and note each chain walked for
    /// [`Reader::stood_still`].
    fn walk_threads(
        &mut self,
        cache: &PageCache<'_>,
        raw: &mut [RawThread],
        keep: bool,
        ran: &FastMap<i32, (u64, u64)>,
    ) {
        let mut walked = std::mem::take(&mut self.walked);
        let mut n_walked = 0;
        for t in raw.iter_mut() {
            let ran_now = t.native_tid.and_then(|tid| ran.get(&(tid as i32)));
            t.kept = keep
                && ran_now.is_some_and(|r| {
                    self.kept
                        .get(&t.tstate)
                        .is_some_and(|k| Some(k.tid) == t.native_tid && k.ran == *r)
                });
            if !t.kept {
                self.walk_thread(cache, t);
                if walked.len() <= n_walked {
                    walked.push(Chain::default());
                }
                let c = &mut walked[n_walked];
                n_walked += 1;
                c.tstate = t.tstate;
                c.cframe = t.cframe;
                c.truncated = t.truncated.is_some();
                c.frames.clear();
                c.frames.extend(t.frames.iter().map(|f| (f.addr, f.code)));
            }
        }
        walked.truncate(n_walked);
        self.walked = walked;
    }

    /// Each interpreter's GIL holder; noted, with every block read so far,
    /// for [`Reader::stood_still`] to read again.
    fn gil_holders(
        &mut self,
        cache: &PageCache<'_>,
        raw: &[RawThread],
    ) -> FastMap<u64, Option<u64>> {
        let mut gil_by_interp: FastMap<u64, Option<u64>> = FastMap::new();
        for t in raw {
            gil_by_interp
                .entry(t.interp)
                .or_insert_with(|| self.gil_holder(cache, t.interp));
        }
        self.walked_gil.clear();
        self.walked_gil
            .extend(gil_by_interp.iter().map(|(&i, &h)| (i, h)));
        self.walked_blocks.clear();
        self.walked_blocks.extend(cache.used_blocks_now());
        gil_by_interp
    }

    /// Prefetch every code object with the collectors' flags, and read
    /// whether each interpreter's collector is running (also kept, for all
    /// of them together, in `gc_collecting`).
    fn read_collectors(
        &mut self,
        cache: &PageCache<'_>,
        raw: &[RawThread],
        gil_by_interp: &FastMap<u64, Option<u64>>,
    ) -> FastMap<u64, Option<bool>> {
        // Check all code objects in one batched read, with the collectors' flags.
        let code_size = self.process.layout.code.size as usize;
        let gc_flags: FastMap<u64, Option<u64>> = gil_by_interp
            .keys()
            .map(|&i| (i, self.gc_flag_addr(i)))
            .collect();
        cache.prefetch(
            raw.iter()
                .flat_map(|t| t.frames.iter().map(|f| (f.code, code_size)))
                .chain(gc_flags.values().flatten().map(|&a| (a, 4))),
        );
        // Whether each interpreter's collector is running, read in the same pause.
        let gc_by_interp: FastMap<u64, Option<bool>> = gc_flags
            .iter()
            .map(|(&i, a)| (i, a.and_then(|a| cache.read_u32(a).ok()).map(|v| v != 0)))
            .collect();
        self.gc_collecting = gc_by_interp
            .values()
            .copied()
            .reduce(|a, b| match (a, b) {
                (Some(x), Some(y)) => Some(x || y),
                (x, None) | (None, x) => x,
            })
            .flatten();
        gc_by_interp
    }

    /// The Python frames of a walked thread, decoded through the code-object
    /// cache (`resolved` holds this snapshot's checks); the objects its
    /// locals refer to, where asked (`ReadOptions::local_objects`).
    fn python_frames(
        &mut self,
        cache: &PageCache<'_>,
        t: &RawThread,
        opts: ReadOptions,
        resolved: &mut FastMap<u64, Result<Option<Arc<CodeInfo>>, MemError>>,
        frames: &mut Vec<Frame>,
        truncated: &mut Option<String>,
    ) -> Vec<LocalRef> {
        let mut refs = Vec::new();
        for f in &t.frames {
            // Recursion repeats code objects: check each once per snapshot.
            let info = match resolved.get(&f.code) {
                Some(r) => r.clone(),
                None => {
                    let r = self.code_info(cache, f.code, opts.positions);
                    resolved.insert(f.code, r.clone());
                    r
                }
            };
            match info {
                Ok(Some(ci)) => {
                    let offset = self.byte_offset(f);
                    let line = if opts.function_lines {
                        ci.firstlineno.max(0) as u32
                    } else {
                        ci.lines
                            .line_at(offset)
                            .unwrap_or(ci.firstlineno.max(0) as u32)
                    };
                    let mut fr = Frame::python(ci.function.clone(), ci.file.clone(), line);
                    if let (Some(p), false) = (&ci.positions, opts.function_lines) {
                        fr.position = Some(p.at(offset));
                    }
                    if opts.locals > 0 {
                        let chars = LOCAL_REPR_CHARS * opts.locals as usize;
                        fr.locals = Some(self.locals(cache, &ci, f, chars));
                    }
                    if opts.local_objects != LocalObjects::None {
                        let all = opts.local_objects == LocalObjects::All;
                        refs.extend(self.local_refs(cache, &ci, f, frames.len(), all));
                    }
                    fr.mark = Some(f.mark());
                    frames.push(fr);
                }
                // Not a code object (3.13+ frames of C-level executables): not a Python frame.
                Ok(None) => {}
                Err(e) => {
                    truncated.get_or_insert_with(|| {
                        format!("code object at 0x{:x} unreadable: {e}", f.code)
                    });
                    let mut fr = Frame::python("<unknown>", "<unknown>", 0);
                    fr.mark = Some(f.mark());
                    frames.push(fr);
                }
            }
        }
        refs
    }

    /// What to keep for the next snapshot: the stacks of the threads the
    /// caller saw off their CPU (with the kernel's counts read then).
    fn keep_stacks(&mut self, out: &[ThreadSnapshot], keep: bool, ran: &FastMap<i32, (u64, u64)>) {
        self.epoch += 1;
        let (kept, epoch) = (&mut self.kept, self.epoch);
        if keep {
            for t in out {
                let Some((tid, r)) = t
                    .stack
                    .os_thread_id
                    .and_then(|tid| Some((tid, *ran.get(&(tid as i32))?)))
                else {
                    continue;
                };
                let k = kept.entry(t.tstate).or_insert_with(|| Kept {
                    epoch: 0,
                    tid,
                    ran: r,
                    frames: Vec::new(),
                    anchors: Vec::new(),
                    truncated: None,
                });
                // New, or read afresh this time: keep what was read.
                if k.epoch == 0 || k.tid != tid || k.ran != r {
                    k.tid = tid;
                    k.ran = r;
                    k.frames.clone_from(&t.stack.frames);
                    k.anchors.clone_from(&t.anchors);
                    k.truncated.clone_from(&t.stack.truncated);
                }
                k.epoch = epoch;
            }
        }
        // Threads gone, or not seen off their CPU this time.
        kept.retain(|_, k| k.epoch == epoch);
    }
}

#[cfg(test)]
mod tests {
    use super::code::MAX_LOCALS;
    use super::testing::{memory_of_words, process};
    use super::*;
    use crate::cpython_layouts::ALL;
    use crate::memory::SliceMemory;
    use crate::python::bounds::MAX_FRAMES;
    use crate::python::process::PythonProcess;
    use proptest::prelude::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_frame_chain_that_loops_is_cut() {
        use crate::cpython_layouts::{for_version, CurrentFrame};
        let layout = for_version(3, 10).unwrap();
        let (head, interp, ts, frame) = (0x1000u64, 0x2000u64, 0x3000u64, 0x4000u64);
        let mut words = Vec::new();
        let mut put = |addr: u64, v: u64| words.push((addr, v));
        put(head, interp);
        put(interp + layout.interp.tstate_head, ts);
        put(ts + layout.thread.interp, interp);
        let CurrentFrame::Direct(cur) = layout.thread.current_frame else {
            panic!("3.10 keeps the frame in the thread state")
        };
        put(ts + cur, frame);
        // Two frames pointing at each other, each with an unreadable code object.
        put(frame + layout.frame.previous, frame + 0x800);
        put(frame + 0x800 + layout.frame.previous, frame);
        put(frame + layout.frame.code, 0xdead_0000);
        put(frame + 0x800 + layout.frame.code, 0xdead_0000);
        let mem = memory_of_words(0x4000, &words);
        let mut r = Reader::new(process(layout, head));
        let snap = r
            .snapshot(
                &mem,
                ReadOptions::default(),
                &FastMap::new(),
                &FastMap::new(),
            )
            .unwrap();
        let t = &snap[0].stack;
        assert!(t.frames.len() < 8, "{} frames", t.frames.len());
        assert!(
            t.truncated.as_deref().unwrap_or("").contains("loops"),
            "{:?}",
            t.truncated
        );
    }

    /// A 3.12 process of one thread (kernel tid 77) whose cframe points at
    /// one frame with an unreadable code object, or at none.
    fn one_thread_312(with_frame: bool) -> (crate::target::Recorded, PythonProcess) {
        use crate::cpython_layouts::{for_version, CurrentFrame};
        let layout = for_version(3, 12).unwrap();
        let (head, interp, ts, cframe, frame) =
            (0x1000u64, 0x2000u64, 0x3000u64, 0x5000u64, 0x6000u64);
        let mut words = Vec::new();
        let mut put = |addr: u64, v: u64| words.push((addr, v));
        put(head, interp);
        put(interp + layout.interp.tstate_head, ts);
        put(ts + layout.thread.native_thread_id.unwrap(), 77);
        let CurrentFrame::ViaCFrame {
            cframe: cf_off,
            current_frame,
            ..
        } = layout.thread.current_frame
        else {
            panic!("3.12 reaches its frame through the cframe")
        };
        put(ts + cf_off, cframe);
        if with_frame {
            put(cframe + current_frame, frame);
            put(frame + layout.frame.code, 0xdead_0000);
        }
        (memory_of_words(0x6000, &words), process(layout, head))
    }

    #[test]
    fn a_thread_that_has_not_run_keeps_its_stack_unread() {
        let (before, p) = one_thread_312(true);
        let (after, _) = one_thread_312(false);
        let mut r = Reader::new(p);
        let states = FastMap::new();
        let frames = |r: &mut Reader,
                      mem: &crate::target::Recorded,
                      ran: &FastMap<i32, (u64, u64)>,
                      opts| {
            r.snapshot(mem, opts, &states, ran).unwrap()[0]
                .stack
                .frames
                .len()
        };
        let mut ran = FastMap::new();
        ran.insert(77, (5_000, 3));
        let plain = ReadOptions::default();
        assert_eq!(frames(&mut r, &before, &ran, plain), 1);
        // The same counts: the frame is the one read before, though the
        // memory no longer holds it.
        assert_eq!(frames(&mut r, &after, &ran, plain), 1);
        // The thread ran: read again.
        ran.insert(77, (5_001, 3));
        assert_eq!(frames(&mut r, &after, &ran, plain), 0);
        // Not seen off its CPU (no counts): read again, and nothing kept.
        assert_eq!(frames(&mut r, &before, &FastMap::new(), plain), 1);
        assert_eq!(frames(&mut r, &after, &ran, plain), 0);
        // Locals are never taken from an earlier read.
        let locals = ReadOptions { locals: 1, ..plain };
        assert_eq!(frames(&mut r, &before, &ran, locals), 1);
        assert_eq!(frames(&mut r, &after, &ran, locals), 0);
    }

    #[test]
    fn a_second_read_tells_whether_the_frames_stood_still() {
        let (before, p) = one_thread_312(true);
        let (after, _) = one_thread_312(false);
        let mut r = Reader::new(p);
        let (states, ran) = (FastMap::new(), FastMap::new());
        r.snapshot(&before, ReadOptions::default(), &states, &ran)
            .unwrap();
        assert!(r.stood_still(&before));
        // The frame is gone by the second read.
        assert!(!r.stood_still(&after));
        r.snapshot(&after, ReadOptions::default(), &states, &ran)
            .unwrap();
        assert!(r.stood_still(&after));
        // A frame appeared.
        assert!(!r.stood_still(&before));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        /// A corrupt or racing target: arbitrary bytes where the interpreter,
        /// threads, frames and objects should be. Every layout must come back
        /// with an error or a partial stack, never a panic or a hang.
        #[test]
        fn arbitrary_memory_never_panics(words in proptest::collection::vec(any::<u64>(), 512), seed in any::<u64>()) {
            const BASE: u64 = 0x10_0000;
            // Pointers that land inside the region make the walk go deep.
            let bytes: Vec<u8> = words
                .iter()
                .enumerate()
                .flat_map(|(i, w)| {
                    // And some near the top of the address space, where adding a
                    // field offset overflows.
                    let v = match (w ^ seed) % 6 {
                        0 | 3 => BASE + ((w % 4096) & !7),
                        1 => u64::MAX - (w % 512),
                        _ => *w,
                    };
                    let v = if i == 0 { BASE + 64 } else { v };
                    v.to_le_bytes()
                })
                .collect();
            let end = BASE + bytes.len() as u64;
            let mut mem = SliceMemory::new();
            mem.add(BASE, bytes);
            let mem = crate::target::Recorded::new(mem);
            for layout in ALL {
                let version = (layout.major, layout.minor);
                let started = Instant::now();
                let mut r = Reader::new(process(layout, BASE));
                let opts = ReadOptions {
                    locals: 1,
                    names: true,
                    function_lines: false,
                    positions: true,
                    gil_sync: true,
                    local_objects: LocalObjects::Locks,
                };
                // An error, or stacks within the bounds: every frame read
                // from the only memory there is, each thread's frames and
                // locals within their caps.
                if let Ok(snaps) = r.snapshot(&mem, opts, &FastMap::new(), &FastMap::new()) {
                    prop_assert!(snaps.len() <= MAX_THREADS, "{version:?}: {} threads", snaps.len());
                    for s in &snaps {
                        let frames = &s.stack.frames;
                        prop_assert!(frames.len() <= MAX_FRAMES, "{version:?}: {} frames", frames.len());
                        for f in frames {
                            let at = f.mark.map(|m| m.addr);
                            prop_assert!(
                                at.is_some_and(|a| (BASE..end).contains(&a)),
                                "{version:?}: frame {} read at {at:x?}, outside the memory", f.function
                            );
                            let locals = f.locals.as_ref().map_or(0, Vec::len);
                            prop_assert!(locals as u64 <= MAX_LOCALS, "{version:?}: {locals} locals");
                        }
                    }
                }
                if let Ok(threads) = r.python_threads(&mem) {
                    prop_assert!(threads.len() <= MAX_THREADS, "{version:?}: {} threads", threads.len());
                }
                // Never a hang: a few milliseconds each in a release build,
                // bounded generously for a debug build on a busy machine.
                let took = started.elapsed();
                prop_assert!(took < Duration::from_secs(2), "{version:?}: took {took:?}");
            }
        }
    }
}
