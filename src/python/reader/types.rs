//! The reader's shared vocabulary: the `Reader` itself and what its rooms
//! pass between them (options, raw threads and frames as walked, the chains
//! kept for `stood_still`, cached code objects, the snapshot handed out).
//! A leaf: it imports none of its siblings.

use crate::cpython_layouts::CurrentFrame;
use crate::memory::le_u64;
use crate::python::linetable::{LineTable, Positions};
use crate::python::pagecache::PageStore;
use crate::python::process::PythonProcess;
use crate::stack::{Frame, FrameMark, ThreadStack};
use foldhash::HashMap as FastMap;
use foldhash::HashMapExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// What is known of a code object; cached by address and checked against
/// the object's header on every use, so a freed-and-reused address is seen.
pub(super) struct CodeInfo {
    pub(super) header: [u64; 4],
    pub(super) firstlineno: i32,
    pub(super) function: Arc<str>,
    pub(super) file: Arc<str>,
    pub(super) lines: LineTable,
    /// Columns and end lines (3.11+ location tables).
    pub(super) positions: Option<Positions>,
    /// Number of local slots, how many are arguments, and their names.
    pub(super) nslots: u64,
    pub(super) nargs: u64,
    pub(super) varnames: u64,
    pub(super) kinds: u64,
    /// The local slots' names (up to `MAX_LOCALS`), read the first time a
    /// frame's locals are, and kept once all could be read.
    pub(super) names: std::sync::OnceLock<Arc<[Option<String>]>>,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReadOptions {
    /// 0: no locals; n: locals rendered up to n × 128 characters each.
    pub(crate) locals: u8,
    pub(crate) names: bool,
    /// Report each frame's first line (`co_firstlineno`) instead of the
    /// current one, so that samples aggregate by function (`record -F`).
    pub(crate) function_lines: bool,
    /// Decode each code object's columns and end lines (3.11+) and give
    /// frames their position. Kept off when sampling: the decoded positions
    /// are several times the size of the table, for every code object seen.
    pub(crate) positions: bool,
    /// Where each interpreter's GIL lock objects are (wait attribution).
    pub(crate) gil_sync: bool,
    /// The objects each frame's locals refer to (none, locks, all).
    pub(crate) local_objects: LocalObjects,
}

/// Which of the objects frames' locals refer to a snapshot lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum LocalObjects {
    #[default]
    None,
    /// Locks and Conditions: what a thread blocked in a futex waits for.
    Locks,
    /// Every one: who holds the largest containers (`heap`).
    All,
}

/// A local and the object it refers to (a lock, or a `threading.Condition`,
/// for naming what a thread blocked in a futex waits for).
#[derive(Debug, Clone)]
pub(crate) struct LocalRef {
    /// Index into the thread's frames (innermost first).
    pub(crate) frame: usize,
    pub(crate) name: String,
    pub(crate) obj: u64,
    /// The object's type name (`_thread.lock`, `_thread.RLock`, `Condition`, ...).
    pub(crate) kind: String,
    /// The word after the object header: a lock's `PyMutex` (3.13+) starts
    /// there; before, it holds the pointer to the lock's semaphore.
    pub(crate) inner: u64,
    /// The address of that word.
    pub(crate) inner_addr: u64,
}
/// A Python frame as walked, before it is turned into the output model.
#[derive(Debug, Clone)]
pub(crate) struct RawFrame {
    pub(crate) addr: u64,
    pub(crate) code: u64,
    pub(crate) instr: u64,
    /// First Python frame run by its own C eval-loop call (used to merge native stacks).
    pub(crate) is_entry: bool,
}

impl RawFrame {
    pub(super) fn mark(&self) -> FrameMark {
        FrameMark {
            addr: self.addr,
            is_entry: self.is_entry,
            instr: self.instr,
        }
    }
}

/// One thread as read from the interpreter.
pub(crate) struct ThreadSnapshot {
    /// Its Python frames, each with its [`FrameMark`] (address, entry).
    pub(crate) stack: ThreadStack,
    /// Eval-loop state on the C stack (3.11+), innermost first: (address of
    /// a `_PyCFrame` or of an entry shim `_PyInterpreterFrame`, address of a
    /// Python frame run by that eval-loop call). The native merge finds the
    /// C frame whose stack range holds the first address.
    pub(crate) anchors: Vec<(u64, u64)>,
    /// It holds the GIL of an interpreter whose garbage collector is running:
    /// the collection is what it does now.
    pub(crate) in_gc: bool,
    /// With `gil_sync`: the address ranges of its interpreter's GIL lock objects.
    pub(crate) gil_sync: Vec<(u64, u64)>,
    /// With `local_objects`: the locals that refer to such objects,
    /// innermost frame first.
    pub(crate) local_refs: Vec<LocalRef>,
    /// The thread state and its interpreter.
    pub(crate) tstate: u64,
    pub(crate) interp: u64,
}

impl ThreadSnapshot {
    /// Index in `stack.frames` of the Python frame read at `addr`.
    pub(crate) fn frame_index(&self, addr: u64) -> Option<usize> {
        self.stack
            .frames
            .iter()
            .position(|f| f.mark.is_some_and(|m| m.addr == addr))
    }
}

pub(crate) struct Reader {
    pub(crate) process: PythonProcess,
    pub(super) code_cache: FastMap<u64, Arc<CodeInfo>>,
    pub(super) code_types: FastMap<u64, bool>,
    pub(super) names: HashMap<(u64, u64), String>,
    pub(super) last_name_scan: Option<Instant>,
    /// Offset of the kernel tid inside glibc's `struct pthread` (< 3.11).
    pub(super) tid_offset: Option<Option<u64>>,
    /// The target's own tids → ours, when it runs in another pid namespace.
    pub(super) ns_tids: Option<Option<HashMap<u32, u32>>>,
    /// Whether a garbage collection was running at the latest snapshot (in
    /// any interpreter); None where the layout does not say.
    pub(crate) gc_collecting: Option<bool>,
    /// Pages the latest snapshot read from, and the latest thread listing:
    /// read again in one batch at the start of the next (see `pagecache`).
    pub(super) snapshot_pages: PageStore,
    pub(super) thread_pages: PageStore,
    /// Stacks of threads that were off their CPU at the latest snapshot, by
    /// thread state address.
    pub(super) kept: FastMap<u64, Kept>,
    /// Counts snapshots: a kept stack not touched by the latest is dropped.
    pub(super) epoch: u64,
    /// The frame chains the latest snapshot walked (see [`Reader::stood_still`]).
    pub(super) walked: Vec<Chain>,
    /// And the GIL holder of each interpreter it found.
    pub(super) walked_gil: Vec<(u64, Option<u64>)>,
    /// The blocks that walk read (thread states, frames, data stack chunks,
    /// the GIL): what [`Reader::stood_still`] reads again, without the
    /// code objects, names and line tables the rest of the snapshot read.
    pub(super) walked_blocks: Vec<(u64, usize)>,
}

/// One thread's frame chain as a snapshot walked it: where its thread state
/// and (3.11, 3.12) cframe are, and each frame's address and code object.
#[derive(Default)]
pub(super) struct Chain {
    pub(super) tstate: u64,
    pub(super) cframe: u64,
    pub(super) frames: Vec<(u64, u64)>,
    pub(super) truncated: bool,
}

pub(super) struct RawThread {
    pub(super) interp: u64,
    pub(super) interp_id: i64,
    pub(super) tstate: u64,
    pub(super) thread_id: u64,
    pub(super) native_tid: Option<u32>,
    /// Where its frame chain starts (before 3.11, 3.13+), or (3.11, 3.12)
    /// its `_PyCFrame`, whose `current_frame` does: read with the thread
    /// state, walked once the kernel tid is known.
    pub(super) top: u64,
    pub(super) cframe: u64,
    /// Its data stack's newest chunk (3.11+).
    pub(super) datastack: u64,
    pub(super) frames: Vec<RawFrame>,
    pub(super) anchors: Vec<(u64, u64)>,
    pub(super) truncated: Option<String>,
    /// Its stack is the one kept from an earlier snapshot (see [`Kept`]).
    pub(super) kept: bool,
}

/// A thread's stack as a snapshot gave it, with the kernel's count of the
/// thread's CPU time and of its times on a CPU, read before that stack.
/// While the kernel shows the same counts (and the thread off its CPU in
/// between), the thread has not run an instruction since: its frames are
/// as they were, and the next snapshot takes them from here unread.
pub(super) struct Kept {
    /// The snapshot that last found the thread (see `Reader::epoch`).
    pub(super) epoch: u64,
    pub(super) tid: u32,
    pub(super) ran: (u64, u64),
    pub(super) frames: Vec<Frame>,
    pub(super) anchors: Vec<(u64, u64)>,
    pub(super) truncated: Option<String>,
}

impl RawThread {
    /// The thread whose state `buf` holds (read at `tstate`), frames not
    /// walked yet.
    pub(super) fn from_state(
        l: &crate::cpython_layouts::Layout,
        buf: &[u8],
        tstate: u64,
    ) -> RawThread {
        let (top, cframe) = match l.thread.current_frame {
            CurrentFrame::Direct(o) => (le_u64(buf, o), 0),
            CurrentFrame::ViaCFrame { cframe, .. } => (0, le_u64(buf, cframe)),
        };
        RawThread {
            interp: 0,
            interp_id: 0,
            tstate,
            thread_id: le_u64(buf, l.thread.thread_id),
            native_tid: l
                .thread
                .native_thread_id
                .map(|o| le_u64(buf, o) as u32)
                .filter(|t| *t != 0),
            top,
            cframe,
            datastack: l.thread.datastack_chunk.map_or(0, |o| le_u64(buf, o)),
            frames: Vec::new(),
            anchors: Vec::new(),
            truncated: None,
            kept: false,
        }
    }
}

impl Reader {
    pub(crate) fn new(process: PythonProcess) -> Reader {
        Reader {
            process,
            code_cache: FastMap::new(),
            code_types: FastMap::new(),
            names: HashMap::new(),
            last_name_scan: None,
            tid_offset: None,
            ns_tids: None,
            gc_collecting: None,
            snapshot_pages: PageStore::default(),
            thread_pages: PageStore::default(),
            kept: FastMap::new(),
            epoch: 0,
            walked: Vec::new(),
            walked_gil: Vec::new(),
            walked_blocks: Vec::new(),
        }
    }
}

/// The first `n` bytes of `small`, or where a layout is larger than every
/// known one (a future `_Py_DebugOffsets`) of `large`, grown to `n`: what a
/// frame or code object is read into, on the stack for every known layout.
#[inline]
pub(super) fn stack_buf<'a>(small: &'a mut [u8], large: &'a mut Vec<u8>, n: usize) -> &'a mut [u8] {
    match small.get_mut(..n) {
        Some(b) => b,
        None => {
            large.resize(n, 0);
            large
        }
    }
}
