//! The copy of each stopped thread's stack that a native unwind reads after
//! the threads are let go (a cold unwind takes far longer than a pause).

use crate::memory::Memory;

/// Stack bytes copied per thread at its first pause, the margin added when
/// an unwind read beyond the copy, and the most ever copied.
pub(super) const STACK_COPY_FIRST: usize = 64 << 10;
pub(super) const STACK_COPY_MARGIN: usize = 16 << 10;
pub(super) const STACK_COPY_MAX: usize = 1 << 20;
/// Below the stack pointer a leaf function may keep data (the red zone).
pub(super) const RED_ZONE: u64 = 128;

/// Copy up to `want` bytes of stack from `sp` (from the start of its page,
/// which covers the red zone: the unwinder reads the stack in whole pages),
/// stopping at the end of the mapping. Returns the copy's start and bytes.
pub(super) fn copy_stack(mem: &dyn Memory, sp: u64, want: usize) -> (u64, Vec<u8>) {
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

/// A thread's stack as copied while it was stopped, over the live memory
/// (code, and anything beyond the copy). Records how deep reads went.
pub(super) struct StackCopy<'a> {
    pub(super) base: u64,
    pub(super) bytes: Vec<u8>,
    pub(super) live: &'a dyn Memory,
    pub(super) beyond: std::cell::Cell<u64>,
}

impl Memory for StackCopy<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), crate::error::MemError> {
        let end = addr.saturating_add(buf.len() as u64);
        let copy_end = self.base + self.bytes.len() as u64;
        if addr >= self.base && end <= copy_end {
            let o = (addr - self.base) as usize;
            buf.copy_from_slice(&self.bytes[o..o + buf.len()]);
            return Ok(());
        }
        if addr >= self.base && addr < copy_end.saturating_add(STACK_COPY_MAX as u64) {
            // A stack read past the copy: the next copy goes deeper.
            self.beyond.set(self.beyond.get().max(end));
        }
        self.live.read(addr, buf)
    }
}
