//! Native stacks of a sample: each stopped thread's registers and a copy
//! of its stack, taken while it stands still; the unwind from the copy
//! after the threads are let go (a cold unwind takes far longer than a
//! pause); and the merge of the native frames with the Python ones.

use super::Target;
use crate::error::Error;
use crate::memory::Memory;
use crate::native_unwind::{NativeFrame, StackCopy};
use crate::pause::PauseGuard;
use crate::python::reader::ThreadSnapshot;
use crate::sampler::config::TargetConfig;
use crate::stack::ThreadStack;
use foldhash::{HashMap, HashMapExt};

/// Stack bytes copied per thread at its first pause, the margin added when
/// an unwind read beyond the copy, and the most ever copied.
const STACK_COPY_FIRST: usize = 64 << 10;
const STACK_COPY_MARGIN: usize = 16 << 10;
const STACK_COPY_MAX: usize = 1 << 20;
/// Below the stack pointer a leaf function may keep data (the red zone).
const RED_ZONE: u64 = 128;

/// Copy up to `want` bytes of stack from `sp` (from the start of its page,
/// which covers the red zone: the unwinder reads the stack in whole pages),
/// stopping at the end of the mapping. Returns the copy's start and bytes.
fn copy_stack(mem: &dyn Memory, sp: u64, want: usize) -> (u64, Vec<u8>) {
    const PAGE: usize = 4096;
    const CHUNK: usize = 16 * PAGE;
    let base = sp.saturating_sub(RED_ZONE) & !(PAGE as u64 - 1);
    let len = (sp - base) as usize + want;
    let len = len.div_ceil(PAGE) * PAGE;
    let mut bytes = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let n = CHUNK.min(len - got);
        if mem
            .read(base + got as u64, &mut bytes[got..got + n])
            .is_ok()
        {
            got += n;
            continue;
        }
        // The end of the mapping is in this chunk: take its pages one by one.
        while got < len
            && mem
                .read(base + got as u64, &mut bytes[got..got + PAGE])
                .is_ok()
        {
            got += PAGE;
        }
        break;
    }
    bytes.truncate(got);
    (base, bytes)
}

/// A thread's registers and its stack as copied while it stood still.
pub(super) struct Copied {
    tid: i32,
    /// ip, sp, bp.
    regs: (u64, u64, u64),
    base: u64,
    bytes: Vec<u8>,
    /// How deep the copy was asked to go.
    want: usize,
}

impl Target {
    /// Native stacks: only the registers and a copy of the stack are
    /// taken while the threads are stopped; the unwind runs from the
    /// copy after they are let go (a cold unwind takes far longer than
    /// the pause budget).
    pub(super) fn copy_stacks(
        &mut self,
        cfg: &TargetConfig,
        guard: Option<&PauseGuard>,
    ) -> Vec<Copied> {
        let mut copies = Vec::new();
        if let (Some(_), Some(g)) = (self.native.as_ref(), guard) {
            for tid in g.tids() {
                match g.registers(tid) {
                    Ok((ip, sp, bp)) => {
                        let want = self
                            .stack_copy
                            .get(&tid)
                            .copied()
                            .unwrap_or(STACK_COPY_FIRST);
                        let (base, bytes) = copy_stack(&*self.source, sp, want);
                        copies.push(Copied {
                            tid,
                            regs: (ip, sp, bp),
                            base,
                            bytes,
                            want,
                        });
                    }
                    Err(e) => self.pause_notes.push(Error::NativeUnwind(Box::new(e))),
                }
            }
        }
        if self.native.is_some() && self.live.is_none() {
            // A core: its threads stand still, with their registers saved;
            // the unwind reads the stack from the source itself (an empty
            // copy), and never asks for a deeper one.
            let tids: Vec<i32> = if cfg.read.native_all {
                self.source.threads().unwrap_or_default()
            } else {
                self.threads.iter().map(|(t, _)| *t).collect()
            };
            for tid in tids {
                match self.source.saved_registers(tid) {
                    Some(r) => copies.push(Copied {
                        tid,
                        regs: (r.ip, r.sp, r.bp),
                        base: 0,
                        bytes: Vec::new(),
                        want: usize::MAX,
                    }),
                    None => self.pause_notes.push(Error::NativeUnwind(Box::new(
                        Error::NoSavedRegisters { tid },
                    ))),
                }
            }
        }
        copies
    }

    /// Each copy's native unwind, once the threads are let go. A thread
    /// whose unwind read beyond its copy counts as late, and its next copy
    /// goes as deep as this unwind read, and a margin.
    pub(super) fn unwind(&mut self, copies: Vec<Copied>) -> HashMap<i32, Vec<NativeFrame>> {
        let mut unwound: HashMap<i32, Vec<NativeFrame>> = HashMap::new();
        if let Some(n) = self.native.as_mut() {
            let mut depths = HashMap::new();
            for c in copies {
                let copy = StackCopy::new(c.base, &c.bytes, &*self.source);
                unwound.insert(c.tid, n.unwind_regs(c.tid, c.regs, &copy));
                // Next time copy as deep as this unwind read, and a margin.
                let needed = copy.read_beyond().saturating_sub(c.regs.1) as usize;
                if needed > c.want {
                    self.late_threads += 1;
                }
                let next = if needed > c.want {
                    (needed + STACK_COPY_MARGIN).min(STACK_COPY_MAX)
                } else {
                    c.want
                };
                depths.insert(c.tid, next);
            }
            self.stack_copy = depths;
        }
        unwound
    }

    /// The native frames merged into the Python threads' stacks; the
    /// threads Python does not know, with their waits, returned (sorted
    /// by thread id).
    pub(super) fn merge_native(
        &mut self,
        snap: &mut [ThreadSnapshot],
        unwound: &HashMap<i32, Vec<NativeFrame>>,
        foreign_states: &HashMap<i32, char>,
    ) -> Vec<ThreadStack> {
        let mut foreign = Vec::new();
        if let Some(n) = self.native.as_mut() {
            for t in snap.iter_mut() {
                if let Some(frames) = t
                    .stack
                    .os_thread_id
                    .and_then(|tid| unwound.get(&(tid as i32)))
                {
                    n.merge(t, frames);
                }
            }
            for (tid, frames) in unwound {
                if !self.threads.iter().any(|(t, _)| t == tid) {
                    let state = foreign_states.get(tid).copied();
                    let mut t = n.foreign_thread(&*self.source, *tid, state, frames);
                    t.wait = self.foreign_waits.remove(tid);
                    foreign.push(t);
                }
            }
            foreign.sort_by_key(|t| t.os_thread_id);
        }
        foreign
    }
}
