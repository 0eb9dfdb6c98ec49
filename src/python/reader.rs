//! Snapshots of every thread of every interpreter: the frame walk, code
//! objects (cached), line numbers, thread names, GIL, locals.

use super::datastack::{DataStack, Under};
use super::linetable::{LineTable, Positions};
use super::objects::ObjReader;
use super::pagecache::{PageCache, PageStore};
use super::process::{GilSource, GilSyncSource, PythonProcess};
use crate::cpython_layouts::{CurrentFrame, EntryMarker, InstrPosition, LineTableFormat};
use crate::error::{Error, MemError, Result};
use crate::memory::{le_i32, le_u64, le_u8, Memory, MemoryExt};
use crate::stack::{Frame, FrameMark, Local, NameSource, ThreadStack, ThreadStatus};
use crate::target::TargetSource;
use foldhash::HashMap as FastMap;
use foldhash::HashSet as FastSet;
use foldhash::{HashMapExt, HashSetExt};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

// What the eBPF engine (src/bpf/) asks of the reader.
pub(crate) mod bpf;

pub(crate) use super::bounds::{MAX_FRAMES, MAX_INTERPRETERS, MAX_THREADS};
const MAX_CODE_CACHE: usize = 100_000;
const MAX_CODE_TYPES: usize = 1024;
/// Longest line table we decode; CPython's own are far smaller.
const MAX_LINETABLE: u64 = 1 << 20;
/// Most locals shown per frame.
const MAX_LOCALS: u64 = 256;
/// The longest repr of a local, its `...` included, per `-l` given: 80, as
/// pystack cuts them; `-ll` 160, and so on.
const LOCAL_REPR_CHARS: usize = 80;
/// A thread name missing from the cache triggers a rescan at most this often.
const NAME_RESCAN: Duration = Duration::from_millis(500);

/// What is known of a code object; cached by address and checked against
/// the object's header on every use, so a freed-and-reused address is seen.
struct CodeInfo {
    header: [u64; 4],
    firstlineno: i32,
    function: Arc<str>,
    file: Arc<str>,
    lines: LineTable,
    /// Columns and end lines (3.11+ location tables).
    positions: Option<Positions>,
    /// Number of local slots, how many are arguments, and their names.
    nslots: u64,
    nargs: u64,
    varnames: u64,
    kinds: u64,
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
    /// The lock objects (and Conditions) that each frame's locals refer to.
    pub(crate) lock_locals: bool,
}

/// A local that refers to a lock (or a `threading.Condition`), for naming
/// what a thread blocked in a futex waits for.
#[derive(Debug, Clone)]
pub(crate) struct LockRef {
    /// Index into the thread's frames (innermost first).
    pub(crate) frame: usize,
    pub(crate) name: String,
    pub(crate) obj: u64,
    /// The object's type name (`_thread.lock`, `_thread.RLock`, `Condition`).
    pub(crate) kind: String,
    /// The word after the object header: a lock's `PyMutex` (3.13+) starts
    /// there; before, it holds the pointer to the lock's semaphore.
    pub(crate) inner: u64,
    /// The address of that word.
    pub(crate) inner_addr: u64,
}

/// Lock types whose waits can be named: `thread.lock` (2.7), `_thread.lock`,
/// `_thread.RLock`; `Condition` is followed to name a Condition's waiter.
fn is_lock_type(name: &str) -> bool {
    matches!(
        name,
        "thread.lock" | "_thread.lock" | "_thread.RLock" | "lock" | "RLock" | "Condition"
    )
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
    fn mark(&self) -> FrameMark {
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
    /// With `lock_locals`: locals that refer to locks, innermost frame first.
    pub(crate) locks: Vec<LockRef>,
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
    code_cache: FastMap<u64, Arc<CodeInfo>>,
    code_types: FastMap<u64, bool>,
    names: HashMap<(u64, u64), String>,
    last_name_scan: Option<Instant>,
    /// Offset of the kernel tid inside glibc's `struct pthread` (< 3.11).
    tid_offset: Option<Option<u64>>,
    /// The target's own tids → ours, when it runs in another pid namespace.
    ns_tids: Option<Option<HashMap<u32, u32>>>,
    /// Whether a garbage collection was running at the latest snapshot (in
    /// any interpreter); None where the layout does not say.
    pub(crate) gc_collecting: Option<bool>,
    /// Pages the latest snapshot read from, and the latest thread listing:
    /// read again in one batch at the start of the next (see `pagecache`).
    snapshot_pages: PageStore,
    thread_pages: PageStore,
    /// Stacks of threads that were off their CPU at the latest snapshot, by
    /// thread state address.
    kept: FastMap<u64, Kept>,
    /// Counts snapshots: a kept stack not touched by the latest is dropped.
    epoch: u64,
    /// The frame chains the latest snapshot walked (see [`Reader::stood_still`]).
    walked: Vec<Chain>,
    /// And the GIL holder of each interpreter it found.
    walked_gil: Vec<(u64, Option<u64>)>,
    /// The blocks that walk read (thread states, frames, data stack chunks,
    /// the GIL): what [`Reader::stood_still`] reads again, without the
    /// code objects, names and line tables the rest of the snapshot read.
    walked_blocks: Vec<(u64, usize)>,
}

/// One thread's frame chain as a snapshot walked it: where its thread state
/// and (3.11, 3.12) cframe are, and each frame's address and code object.
#[derive(Default)]
struct Chain {
    tstate: u64,
    cframe: u64,
    frames: Vec<(u64, u64)>,
    truncated: bool,
}

struct RawThread {
    interp: u64,
    interp_id: i64,
    tstate: u64,
    thread_id: u64,
    native_tid: Option<u32>,
    /// Where its frame chain starts (before 3.11, 3.13+), or (3.11, 3.12)
    /// its `_PyCFrame`, whose `current_frame` does: read with the thread
    /// state, walked once the kernel tid is known.
    top: u64,
    cframe: u64,
    /// Its data stack's newest chunk (3.11+).
    datastack: u64,
    frames: Vec<RawFrame>,
    anchors: Vec<(u64, u64)>,
    truncated: Option<String>,
    /// Its stack is the one kept from an earlier snapshot (see [`Kept`]).
    kept: bool,
}

/// A thread's stack as a snapshot gave it, with the kernel's count of the
/// thread's CPU time and of its times on a CPU, read before that stack.
/// While the kernel shows the same counts (and the thread off its CPU in
/// between), the thread has not run an instruction since: its frames are
/// as they were, and the next snapshot takes them from here unread.
struct Kept {
    /// The snapshot that last found the thread (see `Reader::epoch`).
    epoch: u64,
    tid: u32,
    ran: (u64, u64),
    frames: Vec<Frame>,
    anchors: Vec<(u64, u64)>,
    truncated: Option<String>,
}

impl RawThread {
    /// The thread whose state `buf` holds (read at `tstate`), frames not
    /// walked yet.
    fn from_state(l: &crate::cpython_layouts::Layout, buf: &[u8], tstate: u64) -> RawThread {
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

    fn interpreters(&self, mem: &dyn Memory) -> Result<Vec<(u64, i64)>> {
        let l = &self.process.layout;
        let head = mem
            .read_u64(self.process.interp_head_ptr)
            .map_err(|e| Error::from_mem(self.process.pid, e))?;
        if head == 0 {
            return Err(Error::NotInitialized {
                pid: self.process.pid,
            });
        }
        let mut out = Vec::new();
        let mut seen = FastSet::new();
        let mut i = head;
        while i != 0 && out.len() < MAX_INTERPRETERS && seen.insert(i) {
            let id = match l.interp.id {
                Some(off) => mem
                    .read_u64(i.wrapping_add(off))
                    .map(|v| v as i64)
                    .unwrap_or(-1),
                None => -1,
            };
            out.push((i, id));
            i = mem.read_u64(i.wrapping_add(l.interp.next)).unwrap_or(0);
        }
        // Without an id field, number them from the oldest (the main one, last in the list).
        if l.interp.id.is_none() {
            let n = out.len() as i64;
            for (k, e) in out.iter_mut().enumerate() {
                e.1 = n - 1 - k as i64;
            }
        }
        Ok(out)
    }

    /// Each Python thread's kernel tid, and whether it holds the GIL: what
    /// deciding which threads to pause needs, without walking any frame.
    pub(crate) fn python_threads(&mut self, src: &dyn TargetSource) -> Result<Vec<(i32, bool)>> {
        let cache = PageCache::resume(src, std::mem::take(&mut self.thread_pages));
        let threads = self.threads(src, &cache)?;
        let mut holders: FastMap<u64, Option<u64>> = FastMap::new();
        let out = threads
            .iter()
            .filter_map(|t| {
                let holder = *holders
                    .entry(t.interp)
                    .or_insert_with(|| self.gil_holder(&cache, t.interp));
                Some((t.native_tid? as i32, holder == Some(t.tstate)))
            })
            .collect();
        self.thread_pages = cache.into_store();
        Ok(out)
    }

    /// Walk interpreters and thread states (not their frames: see
    /// [`Reader::walk_thread`]).
    fn threads(&mut self, src: &dyn TargetSource, mem: &dyn Memory) -> Result<Vec<RawThread>> {
        let l = self.process.layout.clone();
        let mut out = Vec::new();
        let mut buf = vec![0u8; l.thread.size as usize];
        for (interp, interp_id) in self.interpreters(mem)? {
            let mut seen = FastSet::new();
            let mut ts = mem
                .read_u64(interp.wrapping_add(l.interp.tstate_head))
                .unwrap_or(0);
            while ts != 0 && out.len() < MAX_THREADS && seen.insert(ts) {
                if let Err(e) = mem.read(ts, &mut buf) {
                    if e == MemError::Gone {
                        return Err(Error::ProcessExited {
                            pid: self.process.pid,
                        });
                    }
                    break;
                }
                out.push(RawThread {
                    interp,
                    interp_id,
                    ..RawThread::from_state(&l, &buf, ts)
                });
                ts = le_u64(&buf, l.thread.next);
            }
        }
        if l.thread.native_thread_id.is_none() {
            self.map_pthreads(src, mem, &mut out);
        }
        self.translate_namespaced(src, &mut out);
        Ok(out)
    }

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
    fn walk_thread(&self, mem: &dyn Memory, t: &mut RawThread) {
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

    fn walk(&self, mem: &dyn Memory, mut f: u64, t: &mut RawThread) {
        let l = &self.process.layout.frame;
        // A frame fits on the stack for every known layout.
        let mut small = [0u8; 512];
        let mut large = Vec::new();
        let buf: &mut [u8] = match small.get_mut(..l.size as usize) {
            Some(b) => b,
            None => {
                large.resize(l.size as usize, 0);
                &mut large
            }
        };
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
    fn frame_fields(&self, buf: &[u8]) -> (u64, u64, bool, bool) {
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

    /// Before 3.11 the thread state has no kernel tid: find it inside
    /// glibc's `struct pthread` (which `thread_id` points at). The offset is
    /// learnt once per process from the tids the kernel lists.
    /// A containerised target records tids of its own pid namespace: turn
    /// them into ours (the map is rebuilt when a thread is not in it).
    fn translate_namespaced(&mut self, src: &dyn TargetSource, threads: &mut [RawThread]) {
        let ns = self.ns_tids.get_or_insert_with(|| src.namespaced_tids());
        let Some(map) = ns else { return };
        if threads
            .iter()
            .any(|t| t.native_tid.is_some_and(|v| !map.contains_key(&v)))
        {
            *ns = src.namespaced_tids();
        }
        let Some(map) = ns else { return };
        for t in threads.iter_mut() {
            t.native_tid = t.native_tid.and_then(|v| map.get(&v).copied());
        }
    }

    fn map_pthreads(
        &mut self,
        src: &dyn TargetSource,
        mem: &dyn Memory,
        threads: &mut [RawThread],
    ) {
        if self.tid_offset.is_none() && !threads.is_empty() {
            // Learnt once; afterwards the field is read directly, so sampling
            // does not list /proc/PID/task every time. In another pid
            // namespace glibc holds the target's own view of the tids.
            let tidset: HashSet<u32> = match src.namespaced_tids() {
                Some(map) => map.keys().copied().collect(),
                None => match src.threads() {
                    Ok(tids) => tids.iter().map(|t| *t as u32).collect(),
                    Err(_) => return,
                },
            };
            self.tid_offset = Some(calibrate_tid_offset(mem, threads, &tidset));
        }
        if let Some(Some(off)) = self.tid_offset {
            for t in threads.iter_mut() {
                // glibc writes the tid when it (re)uses a struct pthread, so
                // the field is current even for recycled thread descriptors.
                t.native_tid = mem
                    .read_u32(t.thread_id.wrapping_add(off))
                    .ok()
                    .filter(|v| *v != 0 && *v <= i32::MAX as u32);
            }
        }
    }

    fn gil_holder(&self, mem: &dyn Memory, interp: u64) -> Option<u64> {
        match self.process.gil {
            GilSource::TstatePtr(a) => mem.read_u64(a).ok(),
            GilSource::PerInterp {
                ceval_gil,
                last_holder,
                locked,
            } => {
                let g = mem
                    .read_u64(interp.wrapping_add(ceval_gil))
                    .ok()
                    .filter(|g| *g != 0)?;
                let locked = mem.read_u32(g.wrapping_add(locked)).ok()?;
                if locked == 0 {
                    return Some(0);
                }
                mem.read_u64(g.wrapping_add(last_holder)).ok()
            }
            GilSource::Unknown => None,
        }
    }

    /// Where the `collecting` flag of `interp`'s garbage collector is: the
    /// interpreter's `gc.collecting` (3.9+), or the runtime's (3.7, 3.8).
    /// None where the layout has neither.
    fn gc_flag_addr(&self, interp: u64) -> Option<u64> {
        let l = &self.process.layout;
        match (l.interp.gc_collecting, l.runtime.gc_collecting) {
            (Some(off), _) => Some(interp.wrapping_add(off)),
            // 3.7+: the head pointer lives inside `_PyRuntime`.
            (None, Some(off)) => Some(
                self.process
                    .interp_head_ptr
                    .wrapping_sub(l.runtime.interpreters_head?)
                    .wrapping_add(off),
            ),
            (None, None) => None,
        }
    }

    /// Where the GIL's mutex and condition variables of `interp` are.
    fn gil_sync_ranges(&self, mem: &dyn Memory, interp: u64) -> Vec<(u64, u64)> {
        match &self.process.gil_sync {
            GilSyncSource::Ranges(v) => v.clone(),
            GilSyncSource::Pointer { ptr, size } => match mem.read_u64(*ptr) {
                Ok(p) if p != 0 => vec![(p, p.wrapping_add(*size))],
                _ => Vec::new(),
            },
            GilSyncSource::PerInterp {
                ceval_gil,
                start,
                end,
            } => match mem.read_u64(interp.wrapping_add(*ceval_gil)) {
                Ok(g) if g != 0 => vec![(g.wrapping_add(*start), g.wrapping_add(*end))],
                _ => Vec::new(),
            },
            GilSyncSource::Unknown => Vec::new(),
        }
    }

    /// The locals of one frame that refer to locks or Conditions.
    fn lock_locals(
        &self,
        mem: &dyn Memory,
        ci: &CodeInfo,
        f: &RawFrame,
        frame: usize,
    ) -> Vec<LockRef> {
        let l = &self.process.layout;
        let objr = ObjReader::new(mem, l);
        let n = ci.nslots.min(MAX_LOCALS);
        let Ok((names, _)) = objr.tuple_items(ci.varnames, n) else {
            return Vec::new();
        };
        let slots_at = f.addr.wrapping_add(l.frame.localsplus);
        let Ok(raw) = mem.read_vec(slots_at, names.len() * 8, 1 << 20) else {
            return Vec::new();
        };
        // The object header ends after ob_type.
        let head = l.object.ob_type + 8;
        let mut out = Vec::new();
        for (i, name_obj) in names.iter().enumerate() {
            let v = le_u64(&raw, i as u64 * 8) & !l.frame.pointer_tag_bits;
            if v == 0 {
                continue;
            }
            let Ok(kind) = objr.type_name(v) else {
                continue;
            };
            if !is_lock_type(&kind) {
                continue;
            }
            let Ok(name) = objr.full_string(*name_obj) else {
                continue;
            };
            let inner_addr = v.wrapping_add(head);
            out.push(LockRef {
                frame,
                name,
                obj: v,
                kind,
                inner: mem.read_u64(inner_addr).unwrap_or(0),
                inner_addr,
            });
        }
        out
    }

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
        let keep = opts.locals == 0 && !opts.lock_locals;
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
                self.walk_thread(&cache, t);
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
        let mut gil_by_interp: FastMap<u64, Option<u64>> = FastMap::new();
        for t in &raw {
            gil_by_interp
                .entry(t.interp)
                .or_insert_with(|| self.gil_holder(&cache, t.interp));
        }
        self.walked_gil.clear();
        self.walked_gil
            .extend(gil_by_interp.iter().map(|(&i, &h)| (i, h)));
        self.walked_blocks.clear();
        self.walked_blocks.extend(cache.used_blocks_now());
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
            let mut locks = Vec::new();
            if let Some(k) = self.kept.get(&t.tstate).filter(|_| t.kept) {
                frames.clone_from(&k.frames);
                truncated.clone_from(&k.truncated);
                t.anchors.clone_from(&k.anchors);
            }
            for f in &t.frames {
                // Recursion repeats code objects: check each once per snapshot.
                let info = match resolved.get(&f.code) {
                    Some(r) => r.clone(),
                    None => {
                        let r = self.code_info(&cache, f.code, opts.positions);
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
                            fr.locals = Some(self.locals(&cache, &ci, f, chars));
                        }
                        if opts.lock_locals {
                            locks.extend(self.lock_locals(&cache, &ci, f, frames.len()));
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
                locks,
                tstate: t.tstate,
                interp: t.interp,
            });
        }
        self.snapshot_pages = cache.into_store();
        // What to keep for the next snapshot: the stacks of the threads the
        // caller saw off their CPU (with the kernel's counts read then).
        self.epoch += 1;
        let (kept, epoch) = (&mut self.kept, self.epoch);
        if keep {
            for t in &out {
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
        Ok(out)
    }

    /// Offset in bytes of the frame's instruction in its bytecode.
    fn byte_offset(&self, f: &RawFrame) -> u64 {
        let l = &self.process.layout;
        match (l.frame.position.clone(), l.code.code_adaptive) {
            (InstrPosition::InstrPointer(_), Some(adaptive)) => {
                f.instr.saturating_sub(f.code.wrapping_add(adaptive))
            }
            _ => f.instr,
        }
    }

    /// The code object at `addr`, from the cache when its header is unchanged.
    /// `Ok(None)` when the object is not a code object.
    fn code_info(
        &mut self,
        mem: &dyn Memory,
        addr: u64,
        positions: bool,
    ) -> Result<Option<Arc<CodeInfo>>, MemError> {
        let c = self.process.layout.code.clone();
        let ob_type_off = self.process.layout.object.ob_type;
        // The header fits on the stack for every known layout; a larger one
        // (a future `_Py_DebugOffsets`) takes the heap.
        let mut small = [0u8; 512];
        let mut large = Vec::new();
        let hdr: &mut [u8] = match small.get_mut(..c.size as usize) {
            Some(h) => h,
            None => {
                large.resize(c.size as usize, 0);
                &mut large
            }
        };
        mem.read(addr, hdr)?;
        let hdr: &[u8] = hdr;
        let header = [
            le_u64(hdr, ob_type_off),
            le_u64(hdr, c.filename),
            le_u64(hdr, c.name),
            le_u64(hdr, c.linetable),
        ];
        let with_positions = positions && c.linetable_format == LineTableFormat::Locations311;
        if let Some(ci) = self.code_cache.get(&addr) {
            if ci.header == header
                && ci.firstlineno == le_i32(hdr, c.firstlineno)
                && (ci.positions.is_some() || !with_positions)
            {
                return Ok(Some(ci.clone()));
            }
        }
        let objr = ObjReader::new(mem, &self.process.layout);
        let ty = header[0];
        let is_code = match self.code_types.get(&ty) {
            Some(v) => *v,
            None => {
                let v = objr.type_name(addr).map(|n| n == "code").unwrap_or(false);
                // Torn reads can show any word as a type: keep the cache small.
                if self.code_types.len() >= MAX_CODE_TYPES {
                    self.code_types.clear();
                }
                self.code_types.insert(ty, v);
                v
            }
        };
        if !is_code {
            return Ok(None);
        }
        let name = objr.full_string(header[2])?;
        let file = objr.full_string(header[1])?;
        let function = match c.qualname {
            Some(q) => objr
                .full_string(le_u64(hdr, q))
                .unwrap_or_else(|_| name.clone()),
            None => name,
        };
        let firstlineno = le_i32(hdr, c.firstlineno);
        let (table, _) = objr.bytes(header[3], MAX_LINETABLE)?;
        let lines = LineTable::parse(c.linetable_format, &table, firstlineno);
        let positions = (c.linetable_format
            == crate::cpython_layouts::LineTableFormat::Locations311)
            .then(|| Positions::parse(&table, firstlineno));
        let flags = le_i32(hdr, c.flags) as u64;
        let nargs = le_i32(hdr, c.argcount).max(0) as u64
            + c.kwonlyargcount.map_or(0, |o| le_i32(hdr, o).max(0) as u64)
            + (flags & 0x4 != 0) as u64
            + (flags & 0x8 != 0) as u64;
        let varnames = le_u64(hdr, c.varnames);
        let nslots = match c.localspluskinds {
            // 3.11+: every named slot (locals, cells, free variables).
            Some(_) => objr.tuple_items(varnames, 0).map(|(_, n)| n).unwrap_or(0),
            None => le_i32(hdr, c.nlocals).max(0) as u64,
        };
        let ci = Arc::new(CodeInfo {
            header,
            firstlineno,
            // Escaped once here, so that every sample's frames share these
            // (see `ThreadStack::escape_names`, which then finds nothing to do).
            function: crate::stack::escape_controls(&function).into(),
            file: crate::stack::escape_controls(&file).into(),
            lines,
            positions,
            nslots,
            nargs,
            varnames,
            kinds: c.localspluskinds.map_or(0, |o| le_u64(hdr, o)),
        });
        if self.code_cache.len() >= MAX_CODE_CACHE {
            self.code_cache.clear();
        }
        self.code_cache.insert(addr, ci.clone());
        Ok(Some(ci))
    }

    fn locals(&self, mem: &dyn Memory, ci: &CodeInfo, f: &RawFrame, chars: usize) -> Vec<Local> {
        let objr = ObjReader::new(mem, &self.process.layout);
        let n = ci.nslots.min(MAX_LOCALS);
        let Ok((names, _)) = objr.tuple_items(ci.varnames, n) else {
            return Vec::new();
        };
        let kinds = if ci.kinds != 0 {
            objr.bytes(ci.kinds, n).map(|(k, _)| k).unwrap_or_default()
        } else {
            Vec::new()
        };
        let slots_at = f.addr.wrapping_add(self.process.layout.frame.localsplus);
        let Ok(raw) = mem.read_vec(slots_at, names.len() * 8, 1 << 20) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, name_obj) in names.iter().enumerate() {
            // CO_FAST_HIDDEN (0x10): inlined comprehension temporaries, not user locals.
            if kinds.get(i).is_some_and(|k| k & 0x10 != 0) {
                continue;
            }
            let mut v = le_u64(&raw, i as u64 * 8) & !self.process.layout.frame.pointer_tag_bits;
            if v == 0 {
                continue;
            }
            // Cells and free variables hold a cell object: show what it holds.
            if kinds.get(i).is_some_and(|k| k & 0xc0 != 0)
                && objr.type_name(v).is_ok_and(|t| t == "cell")
            {
                match mem.read_u64(v.wrapping_add(self.process.layout.object.cell_ref)) {
                    Ok(0) | Err(_) => continue,
                    Ok(inner) => v = inner,
                }
            }
            let Ok(name) = objr.full_string(*name_obj) else {
                continue;
            };
            let r = objr.repr(v, chars);
            out.push(Local {
                name,
                repr: r.text,
                left_out: r.left_out,
                is_arg: (i as u64) < ci.nargs,
            });
        }
        out
    }

    /// Thread names from each interpreter's `threading._active`, rescanned
    /// only when a thread we have not named appears, and not too often.
    fn refresh_names(&mut self, mem: &dyn Memory, raw: &[RawThread]) {
        let missing = raw
            .iter()
            .any(|t| !self.names.contains_key(&(t.interp, t.thread_id)));
        if !missing
            || self
                .last_name_scan
                .is_some_and(|t| t.elapsed() < NAME_RESCAN)
        {
            return;
        }
        self.last_name_scan = Some(Instant::now());
        let l = &self.process.layout;
        let objr = ObjReader::new(mem, l);
        let attr = l.thread_name_attr;
        let interps: HashSet<u64> = raw.iter().map(|t| t.interp).collect();
        for interp in interps {
            let scan = || -> Result<Vec<(u64, String)>, MemError> {
                let modules = mem.read_u64(interp.wrapping_add(l.interp.modules))?;
                if modules == 0 {
                    return Ok(Vec::new());
                }
                let Some(threading) = objr.dict_get(modules, "threading")? else {
                    return Ok(Vec::new());
                };
                let md = mem.read_u64(threading.wrapping_add(l.object.module_dict))?;
                let Some(active) = objr.dict_get(md, "_active")? else {
                    return Ok(Vec::new());
                };
                let mut names = Vec::new();
                for (k, v) in objr.dict_items(active, MAX_THREADS as u64)? {
                    let Ok(ident) = objr.int_u64(k) else { continue };
                    if let Ok(Some(n)) = objr.instance_attr(v, attr) {
                        if let Ok((s, _)) = objr.string(n, 256) {
                            names.push((ident, s));
                        }
                    }
                }
                Ok(names)
            };
            if let Ok(names) = scan() {
                // Replace this interpreter's names: threads that ended drop out,
                // so a long recording of a churning pool keeps the cache small.
                self.names.retain(|(i, _), _| *i != interp);
                for (ident, name) in names {
                    self.names.insert((interp, ident), name);
                }
            }
        }
    }
}

/// Find where glibc keeps the kernel tid in `struct pthread`: an offset at
/// which every thread's pthread holds one of the process's tids.
fn calibrate_tid_offset(
    mem: &dyn Memory,
    threads: &[RawThread],
    tids: &HashSet<u32>,
) -> Option<u64> {
    const WINDOW: usize = 2048;
    let first = threads.iter().find(|t| t.thread_id != 0)?;
    let mut buf = vec![0u8; WINDOW];
    mem.read(first.thread_id, &mut buf).ok()?;
    // glibc 2.36 on x86-64 keeps it at 0x2d0; try that first, then any.
    let mut offsets: Vec<u64> = vec![0x2d0];
    offsets.extend((0..WINDOW as u64).step_by(4).filter(|o| *o != 0x2d0));
    offsets.into_iter().find(|&off| {
        let v = crate::memory::le_u32(&buf, off);
        if !tids.contains(&v) {
            return false;
        }
        let mut seen = FastSet::new();
        threads.iter().filter(|t| t.thread_id != 0).all(|t| {
            mem.read_u32(t.thread_id.wrapping_add(off))
                .is_ok_and(|v| tids.contains(&v) && seen.insert(v))
        })
    })
}

/// 3.11/3.12: each eval-loop call keeps a `_PyCFrame` on its C stack, chained
/// from `tstate->cframe` by `previous`, with `current_frame` the innermost
/// Python frame of that call. The chain ends at the thread state's root
/// cframe (not on the stack: it anchors nothing). Bounded like the frames.
fn cframe_anchors(mem: &dyn Memory, mut cf: u64, current: u64, previous: u64, t: &mut RawThread) {
    let mut seen = FastSet::new();
    while cf != 0 && t.anchors.len() < MAX_FRAMES && seen.insert(cf) {
        let (Ok(frame), Ok(prev)) = (
            mem.read_u64(cf.wrapping_add(current)),
            mem.read_u64(cf.wrapping_add(previous)),
        ) else {
            return;
        };
        if frame != 0 {
            t.anchors.push((cf, frame));
        }
        cf = prev;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpython_layouts::ALL;
    use crate::memory::SliceMemory;
    use crate::python::process::Version;
    use proptest::prelude::*;

    fn process(layout: &crate::cpython_layouts::Layout, head: u64) -> PythonProcess {
        PythonProcess {
            pid: std::process::id() as i32,
            exe: "python".into(),
            cmdline: String::new(),
            version: Version {
                major: layout.major,
                minor: layout.minor,
                patch: Some(0),
                suffix: String::new(),
            },
            layout: layout.clone(),
            interp_head_ptr: head,
            gil: GilSource::TstatePtr(head + 8),
            gil_sync: GilSyncSource::Unknown,
            warnings: Vec::new(),
            obmalloc_statics: None,
        }
    }

    /// Recorded memory of `len` bytes from 0x1000, zero but for `words`
    /// (address, little-endian u64).
    fn memory_of_words(len: usize, words: &[(u64, u64)]) -> crate::target::Recorded {
        let mut region = vec![0u8; len];
        for &(addr, v) in words {
            let o = (addr - 0x1000) as usize;
            region[o..o + 8].copy_from_slice(&v.to_le_bytes());
        }
        let mut mem = SliceMemory::new();
        mem.add(0x1000, region);
        crate::target::Recorded::new(mem)
    }

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
                    lock_locals: true,
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
