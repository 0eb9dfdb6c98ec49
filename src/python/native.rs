//! Native frames for Python threads: unwind each paused thread, then merge
//! its C/C++/Rust frames with the Python frames the interpreter reports.

use super::reader::ThreadSnapshot;
use crate::error::Result;
use crate::memory::Memory;
use std::collections::HashMap;

use crate::native_unwind::{
    self, MergeMethod, Merged, NativeFrame, NativeUnwinder, PyFrameForMerge,
};
use crate::stack::{Frame, FrameKind, FrameMark, NameSource, ThreadStack, ThreadStatus};
use crate::target::TargetSource;
use std::rc::Rc;
use std::sync::Arc;

pub(crate) struct NativeStacks {
    unwinder: NativeUnwinder,
    keep_all: bool,
    /// Why unwinds failed or merges fell back since the last
    /// [`take_notes`](Self::take_notes): counted in record's error summary.
    notes: Vec<crate::error::Error>,
    /// Why the unwind of a thread (by tid) stopped short, since its unwind.
    ended: HashMap<i32, String>,
    counts: MergeCounts,
    names: Names,
}

/// The names a native frame is shown by, made once per symbol: its
/// demangled name (without compiler suffixes) is the `signature`, and
/// `function` is that name short (`native_unwind::short_name`), or the
/// signature itself with `--full-names`.
struct Names {
    full: bool,
    /// By the symbol's demangled name; started again once it holds
    /// [`MAX_NAME_BYTES`], so that a process with millions of (long)
    /// symbols sampled for hours stays bounded.
    made: HashMap<String, (Arc<str>, Arc<str>)>,
    /// The bytes of the names in `made`.
    bytes: usize,
}

/// Bytes of names kept in [`Names`] before it starts again: some thousands
/// of PyTorch's longest.
const MAX_NAME_BYTES: usize = 16 << 20;

impl Names {
    /// (function, signature) of `f`; no signature without a symbol.
    fn of(&mut self, f: &NativeFrame) -> (Arc<str>, Option<Arc<str>>) {
        let Some(symbol) = f.function.as_deref() else {
            return (f.name().into(), None);
        };
        if let Some((function, signature)) = self.made.get(symbol) {
            return (function.clone(), Some(signature.clone()));
        }
        let signature: Arc<str> = native_unwind::display_name(symbol).into();
        let function: Arc<str> = if self.full {
            signature.clone()
        } else {
            match native_unwind::short_name(&signature) {
                std::borrow::Cow::Borrowed(b) if b.len() == signature.len() => signature.clone(),
                short => short.into(),
            }
        };
        let size = symbol.len() + signature.len() + function.len();
        if self.bytes + size > MAX_NAME_BYTES {
            self.made.clear();
            self.bytes = 0;
        }
        self.bytes += size;
        self.made
            .insert(symbol.to_string(), (function.clone(), signature.clone()));
        (function, Some(signature))
    }

    /// The thread header's `in cuStreamSynchronize (libcuda.so.1)`, named
    /// as its frames are; a thread waiting for the GPU is in the CUDA
    /// synchronisation its program called (`cudaStreamSynchronize
    /// (libcudart.so.12)`), wherever in the driver it waits.
    fn entry(&mut self, native: &[NativeFrame]) -> Option<String> {
        let at =
            native_unwind::pools::cuda_sync(native, |f| (f.function.as_deref(), f.module.as_str()))
                .or_else(|| native_unwind::native_entry_frame(native))?;
        let f = &native[at];
        let (function, _) = self.of(f);
        Some(format!("{function} ({})", f.module))
    }
}

/// How many samples each merge method put together (see [`MergeMethod`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MergeCounts {
    pub(crate) address: u64,
    pub(crate) name: u64,
    pub(crate) fallback: u64,
}

impl NativeStacks {
    pub(crate) fn new(
        source: Rc<dyn TargetSource>,
        keep_all: bool,
        debug_info: bool,
        full_names: bool,
    ) -> Result<NativeStacks> {
        let mut unwinder = NativeUnwinder::new(source)?;
        // DWARF from separate debug files (libc6-dbg, python3.X-dbg): the
        // file:line and inlined frames gdb shows. Read after the threads
        // are resumed, once per module, and cached; off by default for its
        // cost (libc's: ~0.15 s and 70 MB).
        unwinder.set_debug_file_lines(debug_info);
        // Modules are read on their first use, by the unwind that needs
        // them: that runs on a copy of the stack after the threads are
        // resumed, so reading never lengthens a pause, and of a PyTorch
        // process's 80 code files only the dozen on its stacks are read.
        Ok(NativeStacks {
            unwinder,
            keep_all,
            notes: Vec::new(),
            ended: HashMap::new(),
            counts: MergeCounts::default(),
            names: Names {
                full: full_names,
                made: HashMap::new(),
                bytes: 0,
            },
        })
    }

    /// Unwind thread `tid` from registers taken while it was stopped, over
    /// `mem` (a copy of its stack: the thread may run again meanwhile).
    pub(crate) fn unwind_regs(
        &mut self,
        tid: i32,
        (ip, sp, bp): (u64, u64, u64),
        mem: &dyn Memory,
    ) -> Vec<NativeFrame> {
        let f = self.unwinder.unwind_from_regs(ip, sp, bp, mem);
        match self.unwinder.ended_early() {
            Some(why) => self.ended.insert(tid, why.to_string()),
            None => self.ended.remove(&tid),
        };
        f
    }

    /// Merge an unwound native stack into a thread's Python stack (the
    /// thread need not be paused any more).
    pub fn merge(&mut self, snap: &mut ThreadSnapshot, native: &[NativeFrame]) {
        if native.is_empty() {
            return;
        }
        let python: Vec<PyFrameForMerge<Frame>> = snap
            .stack
            .frames
            .drain(..)
            .map(|frame| {
                let mark = frame.mark.unwrap_or(FrameMark {
                    addr: 0,
                    is_entry: false,
                    instr: 0,
                });
                PyFrameForMerge {
                    frame,
                    is_entry: mark.is_entry,
                    addr: mark.addr,
                }
            })
            .collect();
        let (merged, method, reason) =
            native_unwind::merge(native, &python, &snap.anchors, self.keep_all);
        match method {
            MergeMethod::Address => self.counts.address += 1,
            MergeMethod::Name => self.counts.name += 1,
            MergeMethod::Fallback => self.counts.fallback += 1,
            MergeMethod::NativeOnly => {}
        }
        let ended = snap
            .stack
            .os_thread_id
            .and_then(|t| self.ended.get(&(t as i32)));
        let cut_short = matches!(method, MergeMethod::Fallback | MergeMethod::NativeOnly);
        if let Some(why) = ended.filter(|_| cut_short) {
            snap.stack
                .truncated
                .get_or_insert(format!("native unwind stopped: {why}"));
        }
        if let Some(r) = reason {
            self.notes.push(crate::error::Error::MergeMismatch);
            snap.stack.truncated.get_or_insert(format!(
                "native and Python frames could not be matched ({r}); showing the Python frames below the innermost native ones"
            ));
        }
        snap.stack.native_entry = self.names.entry(native);
        snap.stack.frames = self.output_frames(merged, native);
    }

    /// The merged frames as printed: each native frame expanded with its
    /// DWARF file:line and inlined frames, and followed by the frames of
    /// the functions that tail-called their way to it from its caller in
    /// `native` (the unwound stack the merge took). Only shown frames are
    /// looked at, so hidden interpreter plumbing costs no DWARF.
    fn output_frames(&mut self, merged: Vec<Merged<Frame>>, native: &[NativeFrame]) -> Vec<Frame> {
        let mut at: HashMap<(u64, u64, u64), usize> = HashMap::with_capacity(native.len());
        for (i, f) in native.iter().enumerate() {
            at.entry((f.ip, f.sp, f.cfa)).or_insert(i);
        }
        let mut out = Vec::with_capacity(merged.len());
        for m in merged {
            match m {
                Merged::Python(f) => out.push(f),
                Merged::EvalInlined(nf) => {
                    let lines = self.unwinder.add_lines(&nf);
                    let names = &mut self.names;
                    out.extend(
                        lines
                            .iter()
                            .filter(|f| f.inlined)
                            .map(|f| native_frame(f, names)),
                    );
                }
                Merged::Native(nf) => {
                    for f in self.unwinder.add_lines(&nf) {
                        // Merging judged the real function; the calls DWARF
                        // says were inlined into it can still be CPython's
                        // header-inline call machinery
                        // (`_PyObject_VectorcallTstate`, `PyObject_CallOneArg`),
                        // wherever it was inlined.
                        let inlined_plumbing = f.inlined
                            && f.function
                                .as_deref()
                                .is_some_and(|n| native_unwind::is_interpreter_plumbing(n, true));
                        if self.keep_all || !inlined_plumbing {
                            out.push(native_frame(&f, &mut self.names));
                        }
                    }
                    let Some(&i) = at.get(&(nf.ip, nf.sp, nf.cfa)) else {
                        continue;
                    };
                    let Some(caller) = native.get(i + 1) else {
                        continue;
                    };
                    // One frame each, named and placed already: gdb shows
                    // no inlined frames at a tail call's jump either.
                    for t in self.unwinder.tail_calls_between(&native[i], caller).iter() {
                        let plumbing = t.function.as_deref().is_some_and(|n| {
                            native_unwind::is_interpreter_plumbing(
                                n,
                                native_unwind::is_python_module(&t.module),
                            )
                        });
                        if self.keep_all || !plumbing {
                            out.push(native_frame(t, &mut self.names));
                        }
                    }
                }
            }
        }
        out
    }

    /// A thread Python does not know (--native-all), named from the kernel,
    /// or, where that name is only the process's, from the thread pool its
    /// stack starts in; a pool's worker with what it waits in
    /// (`gomp_barrier_wait_end (libgomp.so.1)`), others with their library
    /// entry point. (Its wait, the futex, is the sampler's to add.)
    pub(crate) fn foreign_thread(
        &mut self,
        source: &dyn TargetSource,
        tid: i32,
        state: Option<char>,
        native: &[NativeFrame],
    ) -> ThreadStack {
        let merged: Vec<Merged<Frame>> = native_unwind::merge::<Frame>(native, &[], &[], true).0;
        let os_name = source.thread_name(tid);
        let process = source.thread_name(source.pid());
        let pool = native_unwind::pools::pool_worker(native).filter(|_| {
            native_unwind::pools::generic_thread_name(os_name.as_deref(), process.as_deref())
        });
        // A pool worker is in its pool's wait (`gomp_barrier_wait_end
        // (libgomp.so.1)`) rather than the C runtime's entry it sleeps in.
        let waiting = pool.and_then(|_| native_unwind::pools::waiting_frame(native));
        let entry = match waiting {
            Some(i) => {
                let f = &native[i];
                let (function, _) = self.names.of(f);
                Some(format!("{function} ({})", f.module))
            }
            None => self.names.entry(native),
        };
        ThreadStack {
            thread_id: 0,
            os_thread_id: Some(tid as u32),
            name: pool.map(str::to_string).or(os_name),
            interpreter: -1,
            status: if matches!(state, Some('R' | 'D')) {
                ThreadStatus::Active
            } else {
                ThreadStatus::Idle
            },
            holds_gil: false,
            native_entry: entry,
            name_source: Some(if pool.is_some() {
                NameSource::Stack
            } else {
                NameSource::Os
            }),
            asyncio: None,
            frames: self.output_frames(merged, native),
            truncated: None,
            wait: None,
        }
    }

    /// Samples merged by each method since the last call.
    pub(crate) fn take_merge_counts(&mut self) -> MergeCounts {
        std::mem::take(&mut self.counts)
    }

    pub(crate) fn take_notes(&mut self) -> Vec<crate::error::Error> {
        std::mem::take(&mut self.notes)
    }

    pub(crate) fn warnings(&mut self) -> Vec<String> {
        self.unwinder.take_warnings()
    }
}

fn native_frame(f: &NativeFrame, names: &mut Names) -> Frame {
    let (function, signature) = names.of(f);
    Frame {
        kind: FrameKind::Native,
        function,
        signature,
        file: f.file.as_deref().map(Arc::from),
        line: f.line,
        module: Some(f.module.clone()),
        offset: Some(format!("0x{:x}", f.offset)),
        symbol: f
            .function
            .as_deref()
            .filter(|s| native_unwind::display_name(s) != *s)
            .map(str::to_string),
        inlined: Some(f.inlined),
        tail_call: Some(f.tail_call),
        tag: Some(f.tag.map(str::to_string)),
        locals: None,
        position: None,
        mark: None,
    }
}
