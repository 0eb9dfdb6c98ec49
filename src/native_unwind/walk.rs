//! The walk from a thread's registers to its outermost frame: CFI through
//! framehop where a function has it, and a frame-pointer step
//! cross-checked by a validated stack scan where it does not (hand-written
//! assembly, JIT code), over a chunked reader of the stack's bytes.

use framehop::x86_64::UnwindRegsX86_64;
use framehop::{FrameAddress, Unwinder};

use super::{merge, scan, NativeFrame, NativeUnwinder, UnwindMethod, MAX_FRAMES};
use crate::error::Error;
use crate::memory::{Memory, MemoryExt};

/// Stack bytes fetched per read: most stacks need a handful.
const CHUNK: u64 = 4096;
/// Bound on stack bytes read for one unwind (chunks).
const MAX_CHUNKS: usize = 1024;
/// How far above the stack pointer the scan looks for a return address.
const SCAN_WORDS: u64 = 4096;
/// A frame pointer further than this above the stack pointer is not trusted.
const FP_MAX_FRAME: u64 = 1 << 20;
/// Saved-rbp candidates tried after a stack-scanned frame.
const MAX_BP_CANDIDATES: usize = 16;
/// Frames of CFI unwinding tried to judge an rbp candidate.
const CHAIN_LOOKAHEAD: usize = 16;

impl NativeUnwinder {
    /// Unwind thread `tid`, which the caller has stopped with ptrace
    /// (PTRACE_SEIZE + PTRACE_INTERRUPT + waitpid), over live memory.
    /// Innermost first. The samplers take the registers from the pauser and
    /// unwind a copy of the stack instead (see `sampler/read/native.rs`).
    pub fn unwind(&mut self, tid: i32, mem: &dyn Memory) -> Result<Vec<NativeFrame>, Error> {
        let regs =
            nix::sys::ptrace::getregs(nix::unistd::Pid::from_raw(tid)).map_err(|e| match e {
                nix::errno::Errno::ESRCH => Error::NotStoppedByUs { tid },
                errno => Error::Registers { tid, errno },
            })?;
        Ok(self.unwind_from_regs(regs.rip, regs.rsp, regs.rbp, mem))
    }

    /// Unwind from explicit registers over `mem`: the samplers pass a copy
    /// of the stack taken while the thread was stopped (a core file later).
    pub(crate) fn unwind_from_regs(
        &mut self,
        ip: u64,
        sp: u64,
        bp: u64,
        mem: &dyn Memory,
    ) -> Vec<NativeFrame> {
        let mut stack = StackReader::new(mem);
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut addr = FrameAddress::from_instruction_pointer(ip);
        let mut out: Vec<NativeFrame> = Vec::new();
        self.ended = None;
        self.refreshed_in_unwind = false;
        while out.len() < MAX_FRAMES {
            let pc = addr.address();
            let mut f = self.frame(pc, addr.is_return_address(), UnwindMethod::Cfi);
            let old_sp = regs.sp();
            f.sp = old_sp;
            out.push(f);
            let (next, how) = self.step(addr, &mut regs, &mut stack, mem);
            if let Some(last) = out.last_mut() {
                last.how = how;
            }
            let Some(ra) = next else {
                // CFI that says "no caller" is the outermost frame (`_start`,
                // `clone3`); anything else is an unwind that could not go on.
                if how != UnwindMethod::Cfi {
                    self.ended = Some(format!(
                        "no caller of 0x{pc:x} could be confirmed (code without unwind information)"
                    ));
                }
                break;
            };
            // A caller must live higher on the stack, in code: anything else
            // is a loop or garbage, and is not shown as a frame.
            if regs.sp() <= old_sp || !self.is_code(ra.wrapping_sub(1)) {
                if ra != 0 {
                    self.ended = Some(format!(
                        "the caller of 0x{pc:x} is not in code (return address 0x{ra:x})"
                    ));
                }
                break;
            }
            let Some(a) = FrameAddress::from_return_address(ra) else {
                break;
            };
            if let Some(last) = out.last_mut() {
                last.cfa = regs.sp();
            }
            addr = a;
        }
        out
    }

    /// Why the last [`unwind`](Self::unwind) stopped short of the thread's
    /// entry point, when it did.
    pub(crate) fn ended_early(&self) -> Option<&str> {
        self.ended.as_deref()
    }

    /// `addr` is in an executable mapping. When no mapping holds it, the
    /// maps are read again, at most once per unwind (a library loaded since;
    /// the stack scan asks about many words that are not code at all).
    fn is_code(&mut self, addr: u64) -> bool {
        match self.mapping(addr) {
            Some(m) => m.executable,
            None if !self.refreshed_in_unwind => {
                self.refreshed_in_unwind = true;
                self.module_for(addr).is_some() && self.mapping(addr).is_some_and(|m| m.executable)
            }
            None => false,
        }
    }

    /// Find the caller of the frame at `addr`: its return address and how.
    fn step(
        &mut self,
        addr: FrameAddress,
        regs: &mut UnwindRegsX86_64,
        stack: &mut StackReader,
        mem: &dyn Memory,
    ) -> (Option<u64>, UnwindMethod) {
        let lookup = addr.address_for_lookup();
        let mut covered = false;
        let mut callee_start = None;
        if let Some(i) = self.module_for(lookup) {
            if let Some(lm) = self.loaded(i) {
                let svma = lookup.wrapping_sub(lm.bias);
                covered = lm.has_cfi(svma);
                if !covered {
                    callee_start = lm.function_start(svma).map(|s| s.wrapping_add(lm.bias));
                }
            }
        }
        if covered {
            // Broken CFI (or a stack we could not read) falls through to the
            // rest, and so does CFI that leads outside code or down the
            // stack: hand-written kernels with an FDE that does not follow
            // their stack pointer (OpenBLAS's dgemm kernels).
            let before = *regs;
            match self.cfi_step(addr, regs, stack) {
                // "No caller" is believed from a thread's or the process's
                // entry point; elsewhere it is a frame-pointer guess that hit
                // rbp = 0 in code that uses rbp for data.
                Ok(None) if self.is_entry_point(lookup) => return (None, UnwindMethod::Cfi),
                Ok(None) => *regs = before,
                Ok(Some(ra)) if regs.sp() > before.sp() && self.is_code(ra.wrapping_sub(1)) => {
                    return (Some(ra), UnwindMethod::Cfi)
                }
                _ => *regs = before,
            }
        }
        // Code in no file (a JIT's: XLA's kernels) has neither CFI nor
        // symbols, and the JITs that emit it keep a frame pointer: rbp is
        // believed there when it leads to a return address the unwind can
        // go on from, as gdb believes it. A stale return address left lower
        // on the stack would otherwise win the scan and invent a frame.
        if !covered && self.module_for(lookup).is_none() {
            if let Some(ra) = self.frame_pointer_step(regs, stack, mem, true) {
                return (Some(ra), UnwindMethod::FramePointer);
            }
        }
        // No CFI here: a frame pointer is believed only when the scan agrees
        // that the nearest return address on the stack is the one it names;
        // otherwise the scan's return address wins (hand-written assembly
        // keeps rbp as a general register).
        let sp = regs.sp();
        let bp = regs.bp();
        let stack_end = self.mapping(sp).map(|m| m.end).unwrap_or(sp);
        if let Some((slot, ra)) = self.scan(sp, bp, stack_end, callee_start, stack, mem) {
            if slot == bp.wrapping_add(8) && bp >= sp {
                if let Ok(saved_bp) = stack.read_u64(bp) {
                    regs.set_sp(bp.wrapping_add(16));
                    regs.set_bp(saved_bp);
                    return (Some(ra), UnwindMethod::FramePointer);
                }
            }
            regs.set_sp(slot + 8);
            // Callers that keep a frame pointer need rbp back, and the
            // frame-less function may have used rbp for data after saving
            // the caller's copy somewhere in its frame. Candidates: rbp as it
            // is, and every word of the frame that points into an older
            // frame (the saved copy nearest the return address first, where
            // prologues push it). The one that lets CFI unwind the furthest
            // from the return address wins; ties keep that order.
            let older = |v: u64| v > slot && v < stack_end && v.is_multiple_of(8);
            let mut candidates = Vec::new();
            if older(bp) {
                candidates.push(bp);
            }
            let mut a = slot;
            while a > sp && candidates.len() < MAX_BP_CANDIDATES {
                a -= 8;
                if let Ok(v) = stack.read_u64(a) {
                    if older(v) && !candidates.contains(&v) {
                        candidates.push(v);
                    }
                }
            }
            if !older(bp) {
                candidates.push(bp);
            }
            if candidates.len() > 1 {
                let mut best = (0, candidates[0]);
                for &c in &candidates {
                    let score = self.chain_score(ra, slot + 8, c, stack);
                    if score > best.0 {
                        best = (score, c);
                    }
                }
                regs.set_bp(best.1);
            } else if let Some(&c) = candidates.first() {
                regs.set_bp(c);
            }
            return (Some(ra), UnwindMethod::Scan);
        }
        // Nothing within the scan window: a large frame with a frame pointer.
        match self.frame_pointer_step(regs, stack, mem, false) {
            Some(ra) => (Some(ra), UnwindMethod::FramePointer),
            None => (None, UnwindMethod::Scan),
        }
    }

    /// The caller of a frame by its frame pointer: rbp within
    /// [`FP_MAX_FRAME`] above the stack pointer, the word above it a return
    /// address, from which, when `go_on` is asked, the unwind can go on
    /// (see [`Self::consistent`]). Moves `regs` to the caller when found.
    fn frame_pointer_step(
        &mut self,
        regs: &mut UnwindRegsX86_64,
        stack: &mut StackReader,
        mem: &dyn Memory,
        go_on: bool,
    ) -> Option<u64> {
        let (sp, bp) = (regs.sp(), regs.bp());
        if !(bp > sp && bp - sp < FP_MAX_FRAME && bp.is_multiple_of(8)) {
            return None;
        }
        let slot = bp.checked_add(8)?;
        let ra = stack.read_u64(slot).ok()?;
        let saved_bp = stack.read_u64(bp).ok()?;
        if !self.is_return_address(ra, mem) {
            return None;
        }
        if go_on {
            let stack_end = self.mapping(sp).map(|m| m.end).unwrap_or(sp);
            if !self.consistent(ra, slot, saved_bp, stack_end, stack) {
                return None;
            }
        }
        regs.set_sp(slot + 8);
        regs.set_bp(saved_bp);
        Some(ra)
    }

    /// The stack slot at or above `sp` holding the return address of the
    /// frame-less function starting at `callee_start` (when known): (slot,
    /// value). Stale return addresses left in a frame's uninitialised slots
    /// are the danger, so a direct call that provably targets another
    /// function is passed over, and so is a direct call to something that
    /// is not code. A candidate must also keep the unwind consistent: where
    /// CFI covers it, unwinding its frame must give a higher stack pointer
    /// and a return address in code (or the end of the stack). No candidate
    /// surviving that ends the unwind: nothing is invented.
    fn scan(
        &mut self,
        sp: u64,
        bp: u64,
        stack_end: u64,
        callee_start: Option<u64>,
        stack: &mut StackReader,
        mem: &dyn Memory,
    ) -> Option<(u64, u64)> {
        if !sp.is_multiple_of(8) {
            return None;
        }
        let limit = stack_end.min(sp.saturating_add(SCAN_WORDS * 8));
        let mut slot = sp;
        while slot + 8 <= limit {
            let Ok(v) = stack.read_u64(slot) else { break };
            if self.is_return_address(v, mem)
                && call_plausible(v, callee_start, mem, |a| self.is_code(a))
                && self.consistent(v, slot, bp, stack_end, stack)
            {
                return Some((slot, v));
            }
            slot += 8;
        }
        None
    }

    /// Whether `addr` is in `_start`, `clone3`, `start_thread` and kin.
    fn is_entry_point(&mut self, addr: u64) -> bool {
        let Some(i) = self.module_for(addr) else {
            return false;
        };
        let Some(lm) = self.loaded(i) else {
            return false;
        };
        let svma = addr.wrapping_sub(lm.bias);
        lm.symbol(svma)
            .is_some_and(|(name, _)| merge::is_start_frame(&name))
    }

    /// One CFI step (the frame at `addr` is known to be covered): CFA
    /// expressions evaluated here, every other rule by framehop.
    fn cfi_step(
        &mut self,
        addr: FrameAddress,
        regs: &mut UnwindRegsX86_64,
        stack: &mut StackReader,
    ) -> Result<Option<u64>, ()> {
        let lookup = addr.address_for_lookup();
        if let Some(i) = self.find_module(lookup) {
            let (sp, bp) = (regs.sp(), regs.bp());
            if let Some(lm) = self.loaded(i) {
                let svma = lookup.wrapping_sub(lm.bias);
                // framehop parses the FDE too: its pages are read first.
                lm.prepare_cfi(svma);
                let mut read = |a: u64| stack.read_u64(a).ok();
                match lm.expression_step(svma, sp, bp, &mut read) {
                    None => {}
                    Some(None) => return Err(()),
                    Some(Some((ra, cfa, new_bp))) => {
                        regs.set_sp(cfa);
                        regs.set_bp(new_bp);
                        return Ok(Some(ra));
                    }
                }
            }
        }
        let mut read = |a: u64| stack.read_u64(a);
        self.fh
            .unwind_frame(addr, regs, &mut self.cache, &mut read)
            .map_err(|_| ())
    }

    /// How many frames CFI unwinds from return address `ra` with stack
    /// pointer `sp` and frame pointer `bp` (up to [`CHAIN_LOOKAHEAD`]; the
    /// whole lookahead when it reaches the end of the stack cleanly).
    fn chain_score(&mut self, ra: u64, sp: u64, bp: u64, stack: &mut StackReader) -> usize {
        let mut regs = UnwindRegsX86_64::new(ra, sp, bp);
        let Some(mut addr) = FrameAddress::from_return_address(ra) else {
            return 0;
        };
        for n in 0..CHAIN_LOOKAHEAD {
            if !self.has_cfi(addr.address_for_lookup()) {
                return n;
            }
            let old_sp = regs.sp();
            match self.cfi_step(addr, &mut regs, stack) {
                Ok(None) => return CHAIN_LOOKAHEAD,
                Ok(Some(next)) if regs.sp() > old_sp && self.is_code(next.wrapping_sub(1)) => {
                    match FrameAddress::from_return_address(next) {
                        Some(a) => addr = a,
                        None => return n,
                    }
                }
                _ => return n,
            }
        }
        CHAIN_LOOKAHEAD
    }

    /// Whether CFI covers the code at `lookup` (in a module that loads).
    fn has_cfi(&mut self, lookup: u64) -> bool {
        let Some(i) = self.module_for(lookup) else {
            return false;
        };
        self.loaded(i)
            .is_some_and(|lm| lm.has_cfi(lookup.wrapping_sub(lm.bias)))
    }

    /// Whether return address `ra` found at `slot` lets CFI unwinding go on:
    /// true when no CFI covers it (nothing to check), or when its frame
    /// unwinds to a caller higher on the stack that is in code, with rbp as
    /// it is or as the nearest saved copy below the slot.
    fn consistent(
        &mut self,
        ra: u64,
        slot: u64,
        bp: u64,
        stack_end: u64,
        stack: &mut StackReader,
    ) -> bool {
        let Some(addr) = FrameAddress::from_return_address(ra) else {
            return false;
        };
        if !self.has_cfi(addr.address_for_lookup()) {
            return true;
        }
        let mut bps = vec![bp];
        let mut a = slot;
        while a > slot.saturating_sub(64 * 8) {
            a -= 8;
            if let Ok(v) = stack.read_u64(a) {
                if v > slot && v < stack_end && v.is_multiple_of(8) {
                    bps.push(v);
                    break;
                }
            }
        }
        for b in bps {
            let mut regs = UnwindRegsX86_64::new(ra, slot + 8, b);
            match self.cfi_step(addr, &mut regs, stack) {
                Ok(None) => return true,
                Ok(Some(next)) if regs.sp() > slot && self.is_code(next.wrapping_sub(1)) => {
                    return true
                }
                _ => {}
            }
        }
        false
    }

    /// `v` points into executable code just after a call instruction.
    fn is_return_address(&mut self, v: u64, mem: &dyn Memory) -> bool {
        if !self.is_code(v.wrapping_sub(1)) {
            return false;
        }
        let Some(m) = self.mapping(v.wrapping_sub(1)) else {
            return false;
        };
        let file_backed = m.is_file();
        let from = v.saturating_sub(scan::CALL_WINDOW as u64).max(m.start);
        if file_backed {
            if let Some(&r) = self.ra_cache.get(&v) {
                return r;
            }
        }
        let mut buf = [0u8; scan::CALL_WINDOW];
        let n = (v - from) as usize;
        let r = mem.read(from, &mut buf[..n]).is_ok() && scan::follows_call(&buf[..n]);
        if file_backed {
            self.ra_cache.insert(v, r);
        }
        r
    }
}

/// Whether the call instruction that ends at `ra` is a plausible call of
/// the frame-less function starting at `callee` (when known): see
/// [`call_may_target`]; with no known callee, a direct call must at least
/// target code.
fn call_plausible(
    ra: u64,
    callee: Option<u64>,
    mem: &dyn Memory,
    mut is_code: impl FnMut(u64) -> bool,
) -> bool {
    match callee {
        Some(c) => call_may_target(ra, c, mem),
        None => {
            let mut b = [0u8; 5];
            if mem.read(ra.wrapping_sub(5), &mut b).is_err() || b[0] != 0xE8 {
                return true;
            }
            let rel = i32::from_le_bytes([b[1], b[2], b[3], b[4]]) as i64;
            is_code(ra.wrapping_add(rel as u64))
        }
    }
}

/// Whether the call instruction that ends at `ra` can have called the
/// function starting at `callee`: indirect calls can, a direct `call rel32`
/// only if its target is `callee` or a PLT stub that jumps there.
fn call_may_target(ra: u64, callee: u64, mem: &dyn Memory) -> bool {
    let mut b = [0u8; 5];
    if mem.read(ra.wrapping_sub(5), &mut b).is_err() || b[0] != 0xE8 {
        return true;
    }
    let rel = i32::from_le_bytes([b[1], b[2], b[3], b[4]]) as i64;
    let target = ra.wrapping_add(rel as u64);
    if target == callee {
        return true;
    }
    // PLT stub: [endbr64] [bnd] jmp *disp32(%rip)
    let mut p = [0u8; 16];
    if mem.read(target, &mut p).is_err() {
        return false;
    }
    let mut i = if p[..4] == [0xF3, 0x0F, 0x1E, 0xFA] {
        4
    } else {
        0
    };
    if p[i] == 0xF2 {
        i += 1;
    }
    if p[i..i + 2] != [0xFF, 0x25] {
        return false;
    }
    let disp = i32::from_le_bytes([p[i + 2], p[i + 3], p[i + 4], p[i + 5]]) as i64;
    let got = target
        .wrapping_add((i + 6) as u64)
        .wrapping_add(disp as u64);
    mem.read_u64(got).is_ok_and(|t| t == callee)
}

/// Reads the target's stack in page-sized chunks: one syscall serves many
/// frames. Bounded in the number of chunks per unwind.
struct StackReader<'m> {
    mem: &'m dyn Memory,
    chunks: Vec<(u64, Option<Box<[u8]>>)>,
}

impl<'m> StackReader<'m> {
    fn new(mem: &'m dyn Memory) -> Self {
        StackReader {
            mem,
            chunks: Vec::new(),
        }
    }

    fn read_u64(&mut self, addr: u64) -> Result<u64, ()> {
        let base = addr & !(CHUNK - 1);
        let off = (addr - base) as usize;
        if off + 8 > CHUNK as usize {
            return self.mem.read_u64(addr).map_err(|_| ());
        }
        let idx = match self.chunks.iter().position(|(b, _)| *b == base) {
            Some(i) => i,
            None => {
                if self.chunks.len() >= MAX_CHUNKS {
                    return Err(());
                }
                let mut buf = vec![0u8; CHUNK as usize].into_boxed_slice();
                let ok = self.mem.read(base, &mut buf).is_ok();
                self.chunks.push((base, ok.then_some(buf)));
                self.chunks.len() - 1
            }
        };
        match &self.chunks[idx].1 {
            Some(b) => Ok(crate::memory::le_u64(b, off as u64)),
            None => self.mem.read_u64(addr).map_err(|_| ()),
        }
    }
}
