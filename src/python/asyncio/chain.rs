//! A thread's tasks as shown: the running ones and their awaiters first,
//! each with its coroutine chain (from the thread's stack while it runs,
//! else through what each suspended coroutine awaits).

use super::loops::Timers;
use super::state::{AsyncioReader, RawTask, MAX_CHAIN};
use crate::cpython_layouts::asyncio::{AsyncioLayout, GenFrame, StackTop};
use crate::memory::MemoryExt;
use crate::python::objects::ObjReader;
use crate::python::reader::{Reader, ThreadSnapshot};
use crate::stack::{Frame, LoopQueues, Task, TaskState, ThreadTasks};
use std::collections::{HashMap, HashSet};

impl AsyncioReader {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn thread_tasks(
        &mut self,
        reader: &mut Reader,
        objr: &ObjReader,
        l: &AsyncioLayout,
        tasks: &[RawTask],
        ks: &[usize],
        parents: &[Vec<usize>],
        running: &HashSet<u64>,
        snap: &ThreadSnapshot,
        sleeps: &mut HashMap<u64, Option<Timers>>,
        limit: usize,
        running_only: bool,
        loops: Vec<LoopQueues>,
    ) -> ThreadTasks {
        // Tasks whose coroutine frame is on this thread's stack (3.11+, where
        // the frame sits inside the coroutine): the current task and, with
        // eager tasks, the tasks still in their first step around it, by
        // their place on the stack, innermost first.
        let mut stack_pos: HashMap<usize, usize> = HashMap::new();
        let mut task_frames: HashSet<u64> = HashSet::new();
        if let GenFrame::Embedded(o) = l.gen_frame {
            let at: HashMap<u64, usize> = snap
                .stack
                .frames
                .iter()
                .enumerate()
                .filter_map(|(i, f)| Some((f.mark?.addr, i)))
                .collect();
            for &k in ks {
                let f = tasks[k].coro.wrapping_add(o);
                if let Some(&i) = at.get(&f).filter(|_| tasks[k].coro != 0) {
                    stack_pos.insert(k, i);
                    task_frames.insert(f);
                }
            }
        }
        // The running tasks (innermost first) and their awaiters first,
        // then the rest by address; the forest is drawn from these.
        let mut order: Vec<usize> = Vec::with_capacity(ks.len());
        let mut placed: HashSet<usize> = HashSet::new();
        let mut sorted: Vec<usize> = ks.to_vec();
        sorted.sort_by_key(|k| tasks[*k].addr);
        let mut runners: Vec<usize> = sorted
            .iter()
            .copied()
            .filter(|k| running.contains(&tasks[*k].addr) || stack_pos.contains_key(k))
            .collect();
        runners.sort_by_key(|k| stack_pos.get(k).copied().unwrap_or(usize::MAX));
        for k in runners {
            if placed.insert(k) {
                order.push(k);
                let mut i = order.len() - 1;
                while i < order.len() && order.len() < ks.len() {
                    for &p in &parents[order[i]] {
                        if placed.insert(p) {
                            order.push(p);
                        }
                    }
                    i += 1;
                }
            }
        }
        let chain_len = order.len();
        order.extend(sorted.into_iter().filter(|k| !placed.contains(k)));
        let take = if running_only { chain_len } else { limit };
        let shown: Vec<usize> = order.iter().copied().take(take).collect();
        let left_out = order.len().saturating_sub(shown.len()) as u64;
        let mut out = Vec::with_capacity(shown.len());
        for k in shown {
            let t = &tasks[k];
            let (frames, on_stack, first_locals, _) =
                self.chain(reader, objr, l, t.coro, snap, &task_frames);
            let state = match t.state {
                1 if t.log_tb => TaskState::DoneNotRetrieved,
                1 => TaskState::Cancelled,
                2 if t.log_tb => TaskState::DoneNotRetrieved,
                2 => TaskState::Done,
                _ if running.contains(&t.addr) || on_stack => TaskState::Running,
                _ if t.cancelling => TaskState::Cancelling,
                _ => TaskState::Pending,
            };
            let awaiting = if t.waiter != 0 && t.state == 0 {
                Some(self.awaiting(objr, l, t, &first_locals, sleeps))
            } else {
                None
            };
            // 3.12+ C tasks name themselves lazily: a counter (an int)
            // until asked. An int read as a string can pass for one (its
            // size and digits where a string's length and state are), so
            // the type decides which it is.
            let name = match objr.type_name(t.name).as_deref() {
                Ok("int") => objr.int_repr(t.name).map(|n| format!("Task-{n}")),
                _ => objr.string(t.name, 256).map(|(s, _)| s),
            }
            .unwrap_or_else(|_| format!("Task-0x{:x}", t.addr));
            out.push(Task {
                id: t.addr,
                name,
                state,
                awaited_by: parents[k].iter().map(|p| tasks[*p].addr).collect(),
                awaiting,
                frames,
                found_in: t.via,
                wait: None,
            });
        }
        ThreadTasks {
            tasks: out,
            tasks_left_out: left_out,
            loops,
            ..Default::default()
        }
    }

    /// A task's coroutine stack, innermost first, following what each
    /// suspended coroutine awaits; whether it is running on the thread (its
    /// frames then come from the thread's stack, up to the coroutine frame
    /// of the next task inside it, one of `task_frames`: an eager task's
    /// first step runs inside its creator's); the innermost frame's first
    /// local (`self` of `Queue.get`, `Lock.acquire`...); and, suspended,
    /// each frame's address, innermost first.
    pub(super) fn chain(
        &mut self,
        reader: &mut Reader,
        objr: &ObjReader,
        l: &AsyncioLayout,
        coro: u64,
        snap: &ThreadSnapshot,
        task_frames: &HashSet<u64>,
    ) -> (Vec<Frame>, bool, Vec<u64>, Vec<u64>) {
        let mem = objr.mem;
        let fl = reader.process.layout.frame.clone();
        let mut frames: Vec<Frame> = Vec::new(); // outermost first
        let mut obj = coro;
        let mut seen = HashSet::new();
        let mut first_locals = Vec::new();
        let mut addrs = Vec::new();
        while obj != 0 && frames.len() < MAX_CHAIN && seen.insert(obj) {
            let Ok(tn) = objr.type_name(obj) else { break };
            match tn.as_str() {
                "coroutine" | "generator" | "async_generator" => {}
                "async_generator_asend" | "async_generator_athrow" => {
                    obj = mem.read_u64(obj.wrapping_add(l.asend_gen)).unwrap_or(0);
                    continue;
                }
                _ => break,
            }
            let frame = match l.gen_frame {
                GenFrame::Pointer(o) => mem.read_u64(obj.wrapping_add(o)).unwrap_or(0),
                GenFrame::Embedded(o) => {
                    let finished = l.gen_frame_state.is_some_and(|s| {
                        mem.read_u8(obj.wrapping_add(s.offset))
                            .map_or(true, |v| (v as i8) >= s.finished_from)
                    });
                    if finished {
                        0
                    } else {
                        obj.wrapping_add(o)
                    }
                }
            };
            if frame == 0 {
                break;
            }
            if let Some(i) = snap.frame_index(frame) {
                // Running: the rest is on the thread's stack, down to the
                // task running inside this one, if any.
                let start = snap.stack.frames[..i]
                    .iter()
                    .rposition(|f| f.mark.is_some_and(|m| task_frames.contains(&m.addr)))
                    .map_or(0, |j| j + 1);
                let mut inner: Vec<Frame> = snap.stack.frames[start..=i].to_vec();
                inner.retain(|f| f.kind == crate::stack::FrameKind::Python);
                inner.reverse();
                frames.extend(inner);
                frames.reverse();
                return (frames, true, Vec::new(), Vec::new());
            }
            let Some((f, nslots)) = reader.frame_at(mem, frame) else {
                break;
            };
            frames.push(f);
            addrs.push(frame);
            first_locals.push(
                mem.read_u64(frame.wrapping_add(fl.localsplus))
                    .map(|v| v & !fl.pointer_tag_bits)
                    .unwrap_or(0),
            );
            let locals_end = frame.wrapping_add(fl.localsplus + nslots * 8);
            let top = match l.stack_top {
                StackTop::Pointer { at, below } => {
                    let p = mem.read_u64(frame.wrapping_add(at)).unwrap_or(0);
                    let bottom = locals_end.wrapping_add(below.saturating_sub(1) * 8);
                    (p > bottom && p - bottom <= 1 << 16).then(|| p - below * 8)
                }
                StackTop::BaseDepth { base, depth } => {
                    let b = mem.read_u64(frame.wrapping_add(base)).unwrap_or(0);
                    let d = mem.read_u32(frame.wrapping_add(depth)).unwrap_or(0) as u64;
                    (b != 0 && (1..4096).contains(&d)).then(|| b + (d - 1) * 8)
                }
                StackTop::LocalsIndex(o) => {
                    let n = mem.read_u32(frame.wrapping_add(o)).unwrap_or(0) as u64;
                    (n > nslots && n < nslots + 4096)
                        .then(|| frame.wrapping_add(fl.localsplus + (n - 1) * 8))
                }
            };
            obj = top
                .and_then(|a| mem.read_u64(a).ok())
                .map_or(0, |v| v & !fl.pointer_tag_bits);
        }
        frames.reverse();
        first_locals.reverse();
        addrs.reverse();
        (frames, false, first_locals, addrs)
    }
}
