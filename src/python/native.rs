//! Native frames for Python threads: unwind each paused thread, then merge
//! its C/C++/Rust frames with the Python frames the interpreter reports.

use super::reader::ThreadSnapshot;
use crate::error::Result;
use crate::memory::Memory;
use crate::native_unwind::{self, Merged, NativeFrame, NativeUnwinder, PyFrameForMerge};
use crate::procfs;
use crate::stack::{Frame, FrameKind, ThreadStack, ThreadStatus};

pub struct NativeStacks {
    unwinder: NativeUnwinder,
    keep_all: bool,
    /// Why unwinds failed or merges fell back since the last
    /// [`take_notes`](Self::take_notes): counted in record's error summary.
    notes: Vec<String>,
}

impl NativeStacks {
    pub fn new(pid: i32, keep_all: bool) -> Result<NativeStacks> {
        Ok(NativeStacks {
            unwinder: NativeUnwinder::new(pid)?,
            keep_all,
            notes: Vec::new(),
        })
    }

    /// Unwind paused thread `tid` (call while it is stopped). Errors become
    /// an empty native stack: the Python frames are still shown.
    pub fn unwind(&mut self, tid: i32, mem: &dyn Memory) -> Vec<NativeFrame> {
        match self.unwinder.unwind(tid, mem) {
            Ok(f) => f,
            Err(e) => {
                self.notes.push(format!("native unwind failed: {e}"));
                Vec::new()
            }
        }
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
            .zip(snap.is_entry.iter())
            .map(|(frame, &is_entry)| PyFrameForMerge { frame, is_entry })
            .collect();
        let (merged, reason) = native_unwind::merge(native, &python, self.keep_all);
        if let Some(r) = reason {
            // Without the counts, so that the summary groups them as one cause.
            self.notes.push(
                "native and Python frames did not match: showed the Python frames whole".into(),
            );
            snap.stack.truncated.get_or_insert(format!(
                "native and Python frames could not be matched ({r}); showing the Python frames below the innermost native ones"
            ));
        }
        snap.stack.native_entry = native_unwind::native_entry(native);
        snap.stack.frames = self.output_frames(merged);
    }

    fn output_frames(&mut self, merged: Vec<Merged<Frame>>) -> Vec<Frame> {
        let mut out = Vec::with_capacity(merged.len());
        for m in merged {
            match m {
                Merged::Python(f) => out.push(f),
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
                            out.push(native_frame(&f));
                        }
                    }
                }
            }
        }
        out
    }

    /// A thread Python does not know (--native-all), named from the kernel.
    pub fn foreign_thread(
        &mut self,
        pid: i32,
        tid: i32,
        state: Option<char>,
        native: &[NativeFrame],
    ) -> ThreadStack {
        let merged: Vec<Merged<Frame>> = native_unwind::merge::<Frame>(native, &[], true).0;
        ThreadStack {
            thread_id: 0,
            os_thread_id: Some(tid as u32),
            name: procfs::comm(pid, tid),
            interpreter: -1,
            status: if matches!(state, Some('R' | 'D')) {
                ThreadStatus::Active
            } else {
                ThreadStatus::Idle
            },
            holds_gil: false,
            native_entry: native_unwind::native_entry(native),
            asyncio: None,
            frames: self.output_frames(merged),
            truncated: None,
        }
    }

    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    pub fn warnings(&mut self) -> Vec<String> {
        self.unwinder.take_warnings()
    }
}

fn native_frame(f: &NativeFrame) -> Frame {
    Frame {
        kind: FrameKind::Native,
        function: f.name(),
        file: f.file.clone(),
        line: f.line,
        module: Some(f.module.clone()),
        offset: Some(format!("0x{:x}", f.offset)),
        inlined: Some(f.inlined),
        tag: Some(f.tag.map(str::to_string)),
        locals: None,
    }
}
