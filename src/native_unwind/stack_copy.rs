//! A thread's stack as copied while it stood still (a paused thread's, or
//! one the eBPF program copied at a sample), read over the live memory:
//! code, and anything beyond the copy. To the unwinder it is memory like
//! any other; it notes how far past the copy the unwind read, so that the
//! next copy can go that deep.

use crate::error::MemError;
use crate::memory::Memory;
use std::cell::Cell;

/// Reads this far past a copy's end still count as reads of the stack.
const STACK_REACH: u64 = 1 << 20;

pub(crate) struct StackCopy<'a> {
    base: u64,
    bytes: &'a [u8],
    live: &'a dyn Memory,
    beyond: Cell<u64>,
}

impl<'a> StackCopy<'a> {
    /// `bytes` copied from `base`, over `live`.
    pub(crate) fn new(base: u64, bytes: &'a [u8], live: &'a dyn Memory) -> StackCopy<'a> {
        StackCopy {
            base,
            bytes,
            live,
            beyond: Cell::new(0),
        }
    }

    /// The end of the deepest read of the stack past the copy (0: none).
    pub(crate) fn read_beyond(&self) -> u64 {
        self.beyond.get()
    }
}

impl Memory for StackCopy<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let end = addr.saturating_add(buf.len() as u64);
        let copy_end = self.base.saturating_add(self.bytes.len() as u64);
        if addr >= self.base && end <= copy_end {
            let o = (addr - self.base) as usize;
            buf.copy_from_slice(&self.bytes[o..o + buf.len()]);
            return Ok(());
        }
        if end > self.base && addr < copy_end.saturating_add(STACK_REACH) && end > copy_end {
            // A stack read past the copy: the next copy goes deeper.
            self.beyond.set(self.beyond.get().max(end));
        }
        // The rest from the live memory; the part the copy holds from the
        // copy (the unwinder reads the stack in whole pages, and a copy
        // need not start at one: what lies below it is below the stack
        // pointer, dead).
        let live = self.live.read(addr, buf);
        let (from, to) = (addr.max(self.base), end.min(copy_end));
        if from >= to {
            return live;
        }
        if live.is_err() {
            buf.fill(0);
        }
        let (o, b) = ((from - self.base) as usize, (from - addr) as usize);
        let n = (to - from) as usize;
        buf[b..b + n].copy_from_slice(&self.bytes[o..o + n]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::StackCopy;
    use crate::error::MemError;
    use crate::memory::Memory;

    struct Live;
    impl Memory for Live {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
            buf.fill(addr as u8 ^ 0xff);
            Ok(())
        }
    }

    #[test]
    fn reads_the_copy_then_the_live_memory() {
        let bytes = [1u8, 2, 3, 4];
        let c = StackCopy::new(0x1000, &bytes, &Live);
        let mut b = [0u8; 2];
        c.read(0x1001, &mut b).unwrap();
        assert_eq!(b, [2, 3]);
        assert_eq!(c.read_beyond(), 0);
        // Straddling the copy's end: the copy's byte, then the live one;
        // the read noted.
        c.read(0x1003, &mut b).unwrap();
        assert_eq!(b, [4, 0x03 ^ 0xff]);
        assert_eq!(c.read_beyond(), 0x1005);
        // Straddling its start (a page read from below the stack pointer):
        // the copy's bytes where it has them.
        let mut page = [0u8; 4];
        c.read(0xffe, &mut page).unwrap();
        assert_eq!(page, [0xfe ^ 0xff, 0xfe ^ 0xff, 1, 2]);
        // Wholly below the copy: live, not the stack's part past it.
        c.read(0x800, &mut b).unwrap();
        assert_eq!(b, [0xff; 2]);
        assert_eq!(c.read_beyond(), 0x1005);
    }

    struct Nothing;
    impl Memory for Nothing {
        fn read(&self, addr: u64, _: &mut [u8]) -> Result<(), MemError> {
            Err(MemError::Unmapped { addr, len: 0 })
        }
    }

    #[test]
    fn the_copy_serves_what_it_holds_when_the_rest_is_unreadable() {
        let bytes = [1u8, 2];
        let c = StackCopy::new(0x1000, &bytes, &Nothing);
        let mut b = [9u8; 4];
        c.read(0xfff, &mut b).unwrap();
        assert_eq!(b, [0, 1, 2, 0]);
        assert!(c.read(0x2000, &mut b).is_err());
    }
}
