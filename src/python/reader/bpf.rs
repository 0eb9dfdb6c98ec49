//! What the eBPF engine asks of the reader: the thread states to give the
//! program (kernel tid → `PyThreadState` address), and the frames its
//! samples name, resolved through the same code-object cache, frame decoding
//! and line tables as a snapshot's.

use super::types::{CodeInfo, RawFrame, Reader};
use crate::cpython_layouts::{EntryMarker, InstrPosition};
use crate::error::{MemError, Result};
use crate::memory::Memory;
use crate::stack::{Frame, NameSource};
use crate::target::TargetSource;
use foldhash::HashMap as FastMap;
use foldhash::HashMapExt;
use std::sync::Arc;

/// One Python thread as the thread list gives it.
pub(crate) struct ThreadEntry {
    /// Kernel tid (in our pid namespace).
    pub(crate) tid: i32,
    pub(crate) tstate: u64,
    pub(crate) thread_id: u64,
    pub(crate) interpreter: i64,
    /// Its interpreter's `PyInterpreterState` address.
    pub(crate) interp: u64,
    pub(crate) name: Option<String>,
    /// Where its interpreter's GIL sleeps (the lock's futex words): a
    /// futex wait there is a GIL wait.
    pub(crate) gil_sync: Arc<[(u64, u64)]>,
}

/// Where the program finds a thread's frames: the offsets it is given, from
/// the layout table (or `_Py_DebugOffsets`) of the target's interpreter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WalkOffsets {
    pub(crate) tstate_frame: u32,
    pub(crate) via_cframe: bool,
    pub(crate) cframe_current: u32,
    pub(crate) cframe_previous: u32,
    pub(crate) frame_previous: u32,
    pub(crate) frame_code: u32,
    pub(crate) frame_pos: u32,
    /// The `owner` byte and the first value of a shim frame (3.12+).
    pub(crate) owner: Option<(u32, u8)>,
    /// The `is_entry` byte (3.11).
    pub(crate) entry: Option<u32>,
    /// Every frame is run by its own eval-loop call (up to 3.10).
    pub(crate) every_frame_entry: bool,
}

/// The code objects resolved for one batch of samples, by address: each is
/// checked against the target (header unchanged) once per batch.
#[derive(Default)]
pub(crate) struct CodeMemo(FastMap<u64, std::result::Result<Option<Arc<CodeInfo>>, MemError>>);

impl CodeMemo {
    pub(crate) fn new() -> CodeMemo {
        CodeMemo(FastMap::new())
    }
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

impl Reader {
    /// The offsets the eBPF program walks with, or None when this layout has
    /// a field the program cannot follow (none known today).
    pub(crate) fn walk_offsets(&self) -> Option<WalkOffsets> {
        let l = &self.process.layout;
        let small = |v: u64| u32::try_from(v).ok();
        let (tstate_frame, via_cframe, cframe_current, cframe_previous) =
            match l.thread.current_frame {
                crate::cpython_layouts::CurrentFrame::Direct(o) => (small(o)?, false, 0, 0),
                crate::cpython_layouts::CurrentFrame::ViaCFrame {
                    cframe,
                    current_frame,
                    previous,
                } => (
                    small(cframe)?,
                    true,
                    small(current_frame)?,
                    small(previous)?,
                ),
            };
        let pos = match l.frame.position {
            InstrPosition::LastiBytes(o)
            | InstrPosition::LastiCodeUnits(o)
            | InstrPosition::InstrPointer(o) => o,
        };
        let (owner, entry) = match l.frame.entry {
            EntryMarker::OwnerShim { owner, shim_from } => (Some((small(owner)?, shim_from)), None),
            EntryMarker::IsEntry(o) => (None, Some(small(o)?)),
            EntryMarker::EveryFrame => (None, None),
        };
        Some(WalkOffsets {
            tstate_frame,
            via_cframe,
            cframe_current,
            cframe_previous,
            frame_previous: small(l.frame.previous)?,
            frame_code: small(l.frame.code)?,
            frame_pos: small(pos)?,
            owner,
            entry,
            every_frame_entry: matches!(l.frame.entry, EntryMarker::EveryFrame),
        })
    }

    /// Where the program tells the main interpreter's GIL holder: the
    /// address of the holder's thread-state pointer, and of the GIL's
    /// `locked` flag (0: none, the pointer is the holder's while it holds
    /// it). None where this layout does not say, or the GIL is not made yet.
    pub(crate) fn gil_words(&self, src: &dyn TargetSource) -> Option<(u64, u64)> {
        use crate::memory::MemoryExt;
        use crate::python::process::GilSource;
        match self.process.gil {
            GilSource::TstatePtr(a) => Some((a, 0)),
            GilSource::PerInterp {
                ceval_gil,
                last_holder,
                locked,
            } => {
                let interp = src.read_u64(self.process.interp_head_ptr).ok()?;
                let g = src
                    .read_u64(interp.wrapping_add(ceval_gil))
                    .ok()
                    .filter(|g| *g != 0)?;
                Some((g.wrapping_add(last_holder), g.wrapping_add(locked)))
            }
            GilSource::Unknown => None,
        }
    }

    /// Every Python thread with a kernel tid, with its thread state and name.
    pub(crate) fn thread_entries(&mut self, src: &dyn TargetSource) -> Result<Vec<ThreadEntry>> {
        let raw = self.threads(src, src)?;
        self.refresh_names(src, &raw);
        let mut gil: FastMap<u64, Arc<[(u64, u64)]>> = FastMap::new();
        Ok(raw
            .iter()
            .filter_map(|t| {
                Some(ThreadEntry {
                    tid: t.native_tid? as i32,
                    tstate: t.tstate,
                    thread_id: t.thread_id,
                    interpreter: t.interp_id,
                    interp: t.interp,
                    // From the target: escaped as every name a sample gives.
                    name: self
                        .names
                        .get(&(t.interp, t.thread_id))
                        .map(|n| crate::stack::escape_controls(n).into_owned()),
                    gil_sync: gil
                        .entry(t.interp)
                        .or_insert_with(|| self.gil_sync_ranges(src, t.interp).into())
                        .clone(),
                })
            })
            .collect())
    }

    /// The frame whose code-object and position words the program read
    /// (each the word at the layout's offset), decoded as a snapshot decodes
    /// a frame it copied. `Ok(None)`: not a code object (not a Python frame).
    pub(crate) fn frame_from_words(
        &mut self,
        mem: &dyn Memory,
        memo: &mut CodeMemo,
        code_word: u64,
        pos_word: u64,
        function_lines: bool,
    ) -> std::result::Result<Option<Frame>, MemError> {
        let Some(w) = self.walk_offsets() else {
            return Ok(None);
        };
        // A copy of the frame holding just the two words: what `frame_fields`
        // decodes (tag bits, position kind) is then decoded the one way.
        let mut buf = [0u8; 512];
        let size = (self.process.layout.frame.size as usize).min(buf.len());
        let buf = &mut buf[..size];
        for (off, word) in [(w.frame_pos, pos_word), (w.frame_code, code_word)] {
            let bytes = word.to_le_bytes();
            let off = off as usize;
            let n = size.saturating_sub(off).min(8);
            if n > 0 {
                buf[off..off + n].copy_from_slice(&bytes[..n]);
            }
        }
        let (code, instr, _, _) = self.frame_fields(buf);
        if code == 0 {
            return Ok(None);
        }
        let info = match memo.0.get(&code) {
            Some(r) => r.clone(),
            None => {
                let r = self.code_info(mem, code, false);
                memo.0.insert(code, r.clone());
                r
            }
        };
        let Some(ci) = info? else { return Ok(None) };
        let f = RawFrame {
            addr: 0,
            code,
            instr,
            is_entry: false,
        };
        let line = if function_lines {
            ci.firstlineno.max(0) as u32
        } else {
            ci.lines
                .line_at(self.byte_offset(&f))
                .unwrap_or(ci.firstlineno.max(0) as u32)
        };
        Ok(Some(Frame::python(
            ci.function.clone(),
            ci.file.clone(),
            line,
        )))
    }
}

/// Thread names come from `threading` here, as in a snapshot.
pub(crate) const NAME_SOURCE: NameSource = NameSource::Threading;
