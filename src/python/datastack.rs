//! A thread's data stack (3.12+): where the frames it has pushed lie, one
//! after another, each `co_framesize` words long, in chunks chained from the
//! thread state's `datastack_chunk`.
//!
//! Every frame a thread has pushed there is a call still running on it, so
//! each one is on the thread's frame chain, under the ones pushed after it.
//! The chain also passes through frames that are not there: generators' and
//! coroutines' (in their objects), and the entry frame of each eval-loop
//! call, a local of that call on the C stack. A chain that ends while frames
//! remain on the data stack under the last one it passed has lost a link:
//! an entry frame whose memory could not be read as it was. A core file can
//! lack it: gdb 13's gcore records none of the thread stacks of glibc 2.41+,
//! which guards them with regions inside their mapping (`MADV_GUARD_INSTALL`)
//! that make gdb's first read of the mapping fail. Threads that `threading`
//! starts link through such a frame: `Thread._bootstrap_inner` runs
//! `Thread.run` through `Context.run` (3.14+), and `Thread.run` calls a
//! bound-method target through C (3.13). [`DataStack::frame_under`]
//! gives the frame the chain goes on with.

use crate::cpython_layouts::Layout;
use crate::memory::{le_u64, Memory, MemoryExt};

use super::bounds::MAX_FRAMES;

/// Largest chunk believed: CPython doubles 16 KiB until one frame fits.
const MAX_CHUNK_BYTES: u64 = 1 << 30;
/// Most chunks followed: 16 KiB each, they hold far more than
/// [`MAX_FRAMES`] frames of common sizes.
const MAX_CHUNKS: usize = 4096;

#[derive(Clone, Copy)]
struct Chunk {
    /// Where its first frame is, where its memory ends, and (all but the
    /// newest chunk) where its last frame ends.
    start: u64,
    end: u64,
    used_end: u64,
}

/// What is under a frame on the data stack.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Under {
    /// The frame pushed before it.
    Frame(u64),
    /// Nothing: it is the first frame the thread pushed.
    Bottom,
    /// Not known: the frame is not on the data stack, or those under it
    /// do not lie end to end, or lie higher than one given before.
    Unknown,
}

pub(crate) struct DataStack {
    /// Newest first, as chained from the thread state.
    chunks: Vec<Chunk>,
    /// Where `co_framesize` is in a code object, and where a frame keeps
    /// its code object (with the tag bits to clear).
    framesize: u64,
    frame_code: u64,
    tag_bits: u64,
    /// Frames decoded so far, over every question asked: what bounds the
    /// work a corrupt target can cause.
    steps: usize,
    /// The lowest place (chunk index, address) a chain went on from: the
    /// next one must be lower still, so the chain cannot come back.
    floor: Option<(usize, u64)>,
}

impl DataStack {
    /// The data stack whose newest chunk is at `head`; `None` where the
    /// layout does not describe one (before 3.12) or its chunks cannot be
    /// read.
    pub(crate) fn read(layout: &Layout, mem: &dyn Memory, head: u64) -> Option<DataStack> {
        let c = layout.frame.stack_chunk.as_ref()?;
        let framesize = layout.code.framesize?;
        let header = c.previous.max(c.size).max(c.top) + 8;
        if head == 0 || header > 64 {
            return None;
        }
        let mut buf = [0u8; 64];
        let buf = &mut buf[..header as usize];
        let mut chunks = Vec::new();
        let mut at = head;
        // A chain of chunks that loops back meets `mark` again (Brent).
        let mut mark = 0;
        while at != 0 {
            if chunks.len() >= MAX_CHUNKS || at == mark {
                return None;
            }
            if (chunks.len() + 1).is_power_of_two() {
                mark = at;
            }
            mem.read(at, buf).ok()?;
            let previous = le_u64(buf, c.previous);
            let size = le_u64(buf, c.size);
            if !(c.data + 8..=MAX_CHUNK_BYTES).contains(&size) {
                return None;
            }
            let data = at.checked_add(c.data)?;
            let end = at.checked_add(size)?;
            // The first chunk keeps its first word free.
            let start = if previous == 0 { data + 8 } else { data };
            let used_end = le_u64(buf, c.top)
                .checked_mul(8)
                .and_then(|t| data.checked_add(t))
                .filter(|e| (start..=end).contains(e))
                .unwrap_or(start);
            chunks.push(Chunk {
                start,
                end,
                used_end,
            });
            at = previous;
        }
        Some(DataStack {
            chunks,
            framesize,
            frame_code: layout.frame.code,
            tag_bits: layout.frame.pointer_tag_bits,
            steps: 0,
            floor: None,
        })
    }

    /// The chunk whose frames' memory holds `addr`.
    pub(crate) fn holds(&self, addr: u64) -> Option<usize> {
        self.chunks
            .iter()
            .position(|c| (c.start..c.end).contains(&addr))
    }

    /// The frame pushed just before the one at `above` (which must be on
    /// this data stack), lower than any frame this asked for before.
    pub(crate) fn frame_under(&mut self, mem: &dyn Memory, above: u64) -> Under {
        match self.holds(above) {
            Some(index) => self.under(mem, index, above),
            None => Under::Unknown,
        }
    }

    fn under(&mut self, mem: &dyn Memory, mut index: usize, above: u64) -> Under {
        let mut end = above;
        // The first frame of its chunk: the one under it ends the older chunk.
        while end == self.chunks[index].start {
            index += 1;
            match self.chunks.get(index) {
                Some(c) => end = c.used_end,
                None => return Under::Bottom,
            }
        }
        match self.frame_ending_at(mem, index, end) {
            Some(f) => Under::Frame(f),
            None => Under::Unknown,
        }
    }

    /// The frame of chunk `index` that ends at `end`, lower than the last
    /// one given.
    fn frame_ending_at(&mut self, mem: &dyn Memory, index: usize, end: u64) -> Option<u64> {
        let mut f = self.chunks[index].start;
        let under = loop {
            if self.steps >= MAX_FRAMES {
                return None;
            }
            self.steps += 1;
            let code = mem.read_u64(f.checked_add(self.frame_code)?).ok()? & !self.tag_bits;
            let words = mem.read_u32(code.checked_add(self.framesize)?).ok()? as i32;
            let next = u64::try_from(words)
                .ok()
                .filter(|w| *w > 0)
                .and_then(|w| f.checked_add(w * 8))?;
            if next == end {
                break f;
            }
            if next > end {
                return None;
            }
            f = next;
        };
        // Older chunks have higher indices; in one chunk, older frames
        // lower addresses.
        if self
            .floor
            .is_some_and(|(i, a)| !(index > i || (index == i && under < a)))
        {
            return None;
        }
        self.floor = Some((index, under));
        Some(under)
    }
}
