//! A thread's frames: the walk along `previous` (and, from 3.11, down the
//! data stack past an entry frame that cut the chain), the eval loop's
//! anchors on the C stack (3.11, 3.12), one frame's fields, a frame off
//! every stack (a suspended coroutine's), and the second read that tells
//! whether the walked chains stood still.

use super::types::{stack_buf, CodeInfo, LocalRef, RawFrame, RawThread, Reader};
use crate::cpython_layouts::{CurrentFrame, EntryMarker, InstrPosition};
use crate::memory::{le_i32, le_u64, le_u8, Memory, MemoryExt};
use crate::python::bounds::MAX_FRAMES;
use crate::python::datastack::{DataStack, Under};
use crate::python::pagecache::PageCache;
use crate::stack::Frame;
use crate::target::TargetSource;
use foldhash::HashSet as FastSet;
use foldhash::HashSetExt;
use std::sync::Arc;

impl Reader {
    /// Whether every frame chain the latest snapshot walked is in memory
    /// now as it was then (frame by frame: address and code object), and
    /// the GIL has the same holder: the check that makes a snapshot taken
    /// while its threads ran as good as one taken while they were stopped.
    /// A chain that moved and came back between the two reads could only
    /// have been read torn if this read tore it the same way. The blocks
    /// are read again in one batch; a chain cut short, or a thread state
    /// gone, is not still.
    pub(crate) fn stood_still(&mut self, src: &dyn TargetSource) -> bool {
        let l = &self.process.layout;
        let (tsize, fsize) = (l.thread.size as usize, l.frame.size as usize);
        // The blocks the snapshot's walk read, in one batch, and any block
        // of a chain that is not among them.
        let cache = PageCache::new(src);
        cache.prefetch(
            self.walked_blocks
                .iter()
                .copied()
                .chain(self.walked.iter().flat_map(|c| {
                    std::iter::once((c.tstate, tsize))
                        .chain((c.cframe != 0).then_some((c.cframe, 64)))
                        .chain(c.frames.iter().map(move |&(a, _)| (a, fsize)))
                })),
        );
        if self
            .walked_gil
            .iter()
            .any(|&(interp, holder)| self.gil_holder(&cache, interp) != holder)
        {
            return false;
        }
        let mut buf = vec![0u8; tsize];
        let walked = std::mem::take(&mut self.walked);
        let still = walked.iter().all(|c| {
            if c.truncated || cache.read(c.tstate, &mut buf).is_err() {
                return false;
            }
            let mut t = RawThread::from_state(l, &buf, c.tstate);
            self.walk_thread(&cache, &mut t);
            t.truncated.is_none()
                && t.frames.len() == c.frames.len()
                && t.frames
                    .iter()
                    .zip(&c.frames)
                    .all(|(f, &(a, code))| f.addr == a && f.code == code)
        });
        self.walked = walked;
        still
    }

    /// A thread's frames, and (3.11, 3.12) the eval loop's anchors on its C
    /// stack.
    pub(super) fn walk_thread(&self, mem: &dyn Memory, t: &mut RawThread) {
        // Most stacks fit without growing.
        t.frames.reserve(32);
        let top = match self.process.layout.thread.current_frame {
            CurrentFrame::ViaCFrame { current_frame, .. } => match t.cframe {
                0 => Ok(0),
                cf => mem.read_u64(cf.wrapping_add(current_frame)),
            },
            CurrentFrame::Direct(_) => Ok(t.top),
        };
        match top {
            Ok(f) => self.walk(mem, f, t),
            Err(e) => t.truncated = Some(format!("frame pointer unreadable: {e}")),
        }
        if let CurrentFrame::ViaCFrame {
            current_frame,
            previous,
            ..
        } = self.process.layout.thread.current_frame
        {
            cframe_anchors(mem, t.cframe, current_frame, previous, t);
        }
    }

    pub(super) fn walk(&self, mem: &dyn Memory, mut f: u64, t: &mut RawThread) {
        let l = &self.process.layout.frame;
        // A frame fits on the stack for every known layout.
        let mut small = [0u8; 512];
        let mut large = Vec::new();
        let buf = stack_buf(&mut small, &mut large, l.size as usize);
        // A racing target can show a chain that loops back: remember one
        // frame, moved to the current one at each power of two of steps, and
        // a loop shows as meeting it again (Brent), at no cost per frame.
        let (mut mark, mut steps) = (0u64, 0usize);
        // Read once a chain ends: whether it ended early (see `datastack`).
        let mut data_stack: Option<Option<DataStack>> = None;
        // The latest frame read that held a code object, and the latest
        // frame read (or not readable), which ended the chain.
        let (mut passed, mut broken, mut broken_shim) = (0u64, 0u64, false);
        loop {
            while f != 0 {
                if f == mark {
                    t.truncated = Some(format!("frame chain loops back at 0x{f:x}"));
                    return;
                }
                steps += 1;
                if steps.is_power_of_two() {
                    mark = f;
                }
                if t.frames.len() >= MAX_FRAMES || steps > 2 * MAX_FRAMES {
                    t.truncated = Some(format!("more than {MAX_FRAMES} frames"));
                    return;
                }
                (broken, broken_shim) = (f, false);
                if let Err(e) = mem.read(f, buf) {
                    t.truncated = Some(format!("frame at 0x{f:x} unreadable: {e}"));
                    break;
                }
                let (code, instr, shim, entry) = self.frame_fields(buf);
                if shim {
                    broken_shim = true;
                    // The frame inside this shim was the first one of its eval-loop call.
                    if let Some(last) = t.frames.last_mut() {
                        last.is_entry = true;
                        t.anchors.push((f, last.addr));
                    }
                } else if code != 0 {
                    t.frames.push(RawFrame {
                        addr: f,
                        code,
                        instr,
                        is_entry: entry,
                    });
                }
                if code != 0 {
                    passed = f;
                }
                f = le_u64(buf, l.previous);
            }
            // The chain ended: where frames remain on the data stack under
            // the last one it passed, it goes on with the next of them.
            let stack = data_stack
                .get_or_insert_with(|| DataStack::read(&self.process.layout, mem, t.datastack));
            let Some(stack) = stack else { break };
            let above = if stack.holds(passed).is_some() {
                Some(passed)
            } else {
                t.frames
                    .iter()
                    .rev()
                    .map(|r| r.addr)
                    .find(|a| stack.holds(*a).is_some())
            };
            let under = match above.map(|a| stack.frame_under(mem, a)) {
                Some(Under::Frame(under)) => Some(under),
                // Ended at the first frame the thread pushed: an entry frame
                // (not on the data stack) it could not read can only have
                // ended the chain.
                Some(Under::Bottom) if stack.holds(broken).is_none() => None,
                _ => break,
            };
            // What ended it was the entry frame of the eval-loop call that
            // ran the frame before it, unless already taken as one.
            if !broken_shim && stack.holds(broken).is_none() {
                if let Some(last) = t.frames.last_mut() {
                    last.is_entry = true;
                    t.anchors.push((broken, last.addr));
                }
            }
            t.truncated = None;
            match under {
                Some(under) => f = under,
                None => break,
            }
        }
        if let Some(last) = t.frames.last_mut() {
            last.is_entry = true;
        }
    }

    /// Code object, instruction position, whether it is a shim frame and
    /// whether it was entered by its own eval-loop call, from a copy of a frame.
    pub(super) fn frame_fields(&self, buf: &[u8]) -> (u64, u64, bool, bool) {
        let l = &self.process.layout.frame;
        let code = le_u64(buf, l.code) & !l.pointer_tag_bits;
        let instr = match l.position {
            InstrPosition::LastiBytes(o) => le_i32(buf, o).max(0) as u64,
            InstrPosition::LastiCodeUnits(o) => le_i32(buf, o).max(0) as u64 * 2,
            InstrPosition::InstrPointer(o) => le_u64(buf, o),
        };
        let (shim, entry) = match l.entry {
            EntryMarker::EveryFrame => (false, true),
            EntryMarker::IsEntry(o) => (false, le_u8(buf, o) != 0),
            EntryMarker::OwnerShim { owner, shim_from } => (le_u8(buf, owner) >= shim_from, false),
        };
        (code, instr, shim, entry)
    }

    /// The frame at `addr` that is on no thread's stack (a suspended
    /// coroutine's), decoded as the thread walk decodes frames; with the
    /// number of its local slots. `None` when it holds no code object.
    pub(crate) fn frame_at(&mut self, mem: &dyn Memory, addr: u64) -> Option<(Frame, u64)> {
        let size = self.process.layout.frame.size as usize;
        let mut buf = [0u8; 512];
        let buf = buf.get_mut(..size)?;
        mem.read(addr, buf).ok()?;
        let (code, instr, _, _) = self.frame_fields(buf);
        if code == 0 {
            return None;
        }
        let ci = self.code_info(mem, code, false).ok()??;
        let f = RawFrame {
            addr,
            code,
            instr,
            is_entry: false,
        };
        let line = ci
            .lines
            .line_at(self.byte_offset(&f))
            .unwrap_or(ci.firstlineno.max(0) as u32);
        Some((
            Frame::python(ci.function.clone(), ci.file.clone(), line),
            ci.nslots,
        ))
    }
}

impl Reader {
    /// The locals of the frame at `addr` (one on no thread's stack, as
    /// [`Reader::frame_at`]'s) that refer to objects, each with its object.
    pub(crate) fn frame_locals_at(&mut self, mem: &dyn Memory, addr: u64) -> Vec<LocalRef> {
        match self.frame_code_at(mem, addr) {
            Some((ci, f)) => self.local_refs(mem, &ci, &f, 0, true),
            None => Vec::new(),
        }
    }

    /// The objects the local slots of the frame at `addr` hold, unchecked:
    /// for fetching, in one batch with other frames', the pages that
    /// [`Reader::frame_locals_at`] will read.
    pub(crate) fn frame_local_objects(&mut self, mem: &dyn Memory, addr: u64) -> Vec<u64> {
        match self.frame_code_at(mem, addr) {
            Some((ci, f)) => self.local_objects(mem, &ci, &f),
            None => Vec::new(),
        }
    }

    /// The code object of the frame at `addr`, and the frame.
    fn frame_code_at(&mut self, mem: &dyn Memory, addr: u64) -> Option<(Arc<CodeInfo>, RawFrame)> {
        let size = self.process.layout.frame.size as usize;
        let mut buf = [0u8; 512];
        let buf = buf.get_mut(..size)?;
        mem.read(addr, buf).ok()?;
        let (code, instr, _, _) = self.frame_fields(buf);
        let ci = self.code_info(mem, code, false).ok()??;
        let f = RawFrame {
            addr,
            code,
            instr,
            is_entry: false,
        };
        Some((ci, f))
    }
}

/// 3.11/3.12: each eval-loop call keeps a `_PyCFrame` on its C stack, chained
/// from `tstate->cframe` by `previous`, with `current_frame` the innermost
/// Python frame of that call. The chain ends at the thread state's root
/// cframe (not on the stack: it anchors nothing). Bounded like the frames.
fn cframe_anchors(mem: &dyn Memory, cf: u64, current: u64, previous: u64, t: &mut RawThread) {
    let room = MAX_FRAMES.saturating_sub(t.anchors.len());
    t.anchors
        .extend(cframe_chain(mem, cf, current, previous, room));
}

/// The `_PyCFrame` chain from `cf` (see [`cframe_anchors`]): each cframe
/// with its current frame, innermost first, `max` at most. The eBPF engine
/// walks it over the stack bytes its program copied.
pub(crate) fn cframe_chain(
    mem: &dyn Memory,
    mut cf: u64,
    current: u64,
    previous: u64,
    max: usize,
) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut seen = FastSet::new();
    // Steps bounded too: a racing target's chain of cframes with no
    // current frame would add nothing to `out`.
    let mut steps = 0;
    while cf != 0 && out.len() < max && steps <= 2 * max && seen.insert(cf) {
        steps += 1;
        let (Ok(frame), Ok(prev)) = (
            mem.read_u64(cf.wrapping_add(current)),
            mem.read_u64(cf.wrapping_add(previous)),
        ) else {
            break;
        };
        if frame != 0 {
            out.push((cf, frame));
        }
        cf = prev;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::{memory_of_words, process};
    use super::*;

    /// A 3.14 thread of three frames pushed one after another on its data
    /// stack (10, 12 and 10 words; the first one's code object says
    /// `first_size`), the innermost run by an
    /// eval-loop call whose entry frame (on the C stack, at 0x5000) holds
    /// `entry`: zeros, as a core without the thread's stack gives it, or a
    /// shim that links to the frame under; the outermost frame's entry
    /// frame is not in memory at all. The walk's frames and anchors.
    fn walk_314(first_size: u64, entry: Option<u64>) -> RawThread {
        use crate::cpython_layouts::{for_version, CurrentFrame, EntryMarker};
        let layout = for_version(3, 14).unwrap();
        let chunk = layout.frame.stack_chunk.clone().unwrap();
        let (ts, stack, e) = (0x3000u64, 0x2000u64, 0x5000u64);
        let mut words = Vec::new();
        let mut put = |addr: u64, v: u64| words.push((addr, v));
        put(stack + chunk.previous, 0);
        put(stack + chunk.size, 0x1000);
        // The first chunk leaves its first word free.
        let f1 = stack + chunk.data + 8;
        let f2 = f1 + 10 * 8;
        let f3 = f2 + 12 * 8;
        for (i, f) in [f1, f2, f3].into_iter().enumerate() {
            let code = 0x4000 + i as u64 * 0x100;
            put(f + layout.frame.code, code);
            put(
                code + layout.code.framesize.unwrap(),
                [first_size, 12, 10][i],
            );
        }
        put(f3 + layout.frame.previous, e);
        put(f2 + layout.frame.previous, f1);
        // The outermost entry frame, on a C stack the memory lacks.
        put(f1 + layout.frame.previous, 0x9000);
        if let Some(previous) = entry {
            let EntryMarker::OwnerShim { owner, shim_from } = layout.frame.entry else {
                panic!("3.14 marks entry frames by owner")
            };
            put(
                e + owner - owner % 8,
                (shim_from as u64) << (8 * (owner % 8)),
            );
            put(e + layout.frame.previous, previous);
        }
        let CurrentFrame::Direct(cur) = layout.thread.current_frame else {
            panic!("3.14 keeps the frame in the thread state")
        };
        put(ts + cur, f3);
        put(ts + layout.thread.datastack_chunk.unwrap(), stack);
        let mem = memory_of_words(0x5000, &words);
        let r = Reader::new(process(layout, 0x1000));
        let mut buf = vec![0u8; layout.thread.size as usize];
        mem.read(ts, &mut buf).unwrap();
        let mut t = RawThread::from_state(layout, &buf, ts);
        r.walk_thread(&mem, &mut t);
        t
    }

    #[test]
    fn a_chain_cut_at_an_entry_frame_goes_on_along_the_data_stack() {
        let addrs = |t: &RawThread| t.frames.iter().map(|f| f.addr).collect::<Vec<_>>();
        let (f1, f2, f3) = (0x2020, 0x2020 + 10 * 8, 0x2020 + 10 * 8 + 12 * 8);
        // The entry frame linked: the chain as it is.
        let whole = walk_314(10, Some(f2));
        assert_eq!(addrs(&whole), [f3, f2, f1]);
        // The outermost frame is the first the thread pushed: the entry
        // frame under it, unreadable, can only have ended the chain.
        assert_eq!(whole.anchors, [(0x5000, f3), (0x9000, f1)]);
        assert_eq!(whole.truncated, None);
        // Its memory zeros: the same frames, by the data stack, and the
        // same anchor.
        let cut = walk_314(10, None);
        assert_eq!(addrs(&cut), addrs(&whole));
        assert_eq!(cut.anchors, whole.anchors);
        assert!(cut.frames[0].is_entry && cut.frames[2].is_entry);
        assert_eq!(cut.truncated, None);
        // Frames that do not lie end to end: the chain ends where it did.
        let gap = walk_314(9, None);
        assert_eq!(addrs(&gap), [f3]);
    }
}
