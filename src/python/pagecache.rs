//! A per-snapshot page cache over [`Memory`].
//!
//! One snapshot reads many small structs that share pages (3.11+ frames sit
//! side by side in a datastack chunk; code objects and strings cluster on the
//! heap). Reading whole pages once per snapshot turns dozens of syscalls into
//! a few, and `prefetch` batches the misses into one `process_vm_readv`.

use crate::error::MemError;
use crate::memory::Memory;
use std::cell::RefCell;
use std::collections::HashMap;

const PAGE: u64 = 4096;
/// Reads larger than this bypass the cache (a big line table, a long string).
const MAX_CACHED_READ: usize = 2 * PAGE as usize;
/// Bound on cached pages per snapshot, so a corrupt target cannot make us hoard memory.
const MAX_PAGES: usize = 4096;

pub struct PageCache<'m> {
    inner: &'m dyn Memory,
    pages: RefCell<HashMap<u64, Option<Box<[u8]>>>>,
}

impl<'m> PageCache<'m> {
    pub fn new(inner: &'m dyn Memory) -> Self {
        PageCache {
            inner,
            pages: RefCell::new(HashMap::new()),
        }
    }

    /// Forget everything (the next snapshot must see fresh bytes).
    pub fn clear(&self) {
        self.pages.borrow_mut().clear();
    }

    /// Load the pages holding `addrs[i]..addrs[i]+len` in one batched read.
    pub fn prefetch(&self, addrs: impl IntoIterator<Item = (u64, usize)>) {
        let mut want: Vec<u64> = Vec::new();
        {
            let pages = self.pages.borrow();
            for (a, len) in addrs {
                if len == 0 || len > MAX_CACHED_READ {
                    continue;
                }
                let first = a & !(PAGE - 1);
                let last = a.saturating_add(len as u64 - 1) & !(PAGE - 1);
                // At most three pages; checked so that the top page of the
                // address space ends the walk instead of wrapping to zero.
                let mut p = Some(first);
                while let Some(page) = p.filter(|pg| *pg <= last) {
                    if !pages.contains_key(&page) && !want.contains(&page) {
                        want.push(page);
                    }
                    p = page.checked_add(PAGE);
                }
            }
        }
        if want.is_empty() {
            return;
        }
        let mut bufs: Vec<Box<[u8]>> = want
            .iter()
            .map(|_| vec![0u8; PAGE as usize].into_boxed_slice())
            .collect();
        let results = {
            let mut reqs: Vec<(u64, &mut [u8])> = want
                .iter()
                .zip(bufs.iter_mut())
                .map(|(a, b)| (*a, &mut b[..]))
                .collect();
            self.inner.read_many(&mut reqs)
        };
        let mut pages = self.pages.borrow_mut();
        for ((addr, buf), r) in want.into_iter().zip(bufs).zip(results) {
            if pages.len() >= MAX_PAGES {
                break;
            }
            pages.insert(addr, r.ok().map(|_| buf));
        }
    }
}

impl Memory for PageCache<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        if buf.len() > MAX_CACHED_READ || buf.is_empty() {
            return self.inner.read(addr, buf);
        }
        self.prefetch([(addr, buf.len())]);
        let pages = self.pages.borrow();
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr.wrapping_add(done as u64);
            let page = a & !(PAGE - 1);
            let off = (a - page) as usize;
            let n = (PAGE as usize - off).min(buf.len() - done);
            match pages.get(&page) {
                Some(Some(p)) => buf[done..done + n].copy_from_slice(&p[off..off + n]),
                Some(None) => {
                    return Err(MemError::Unmapped {
                        addr,
                        len: buf.len(),
                    })
                }
                // Over the page bound: fall back to a direct read.
                None => {
                    drop(pages);
                    return self.inner.read(addr, buf);
                }
            }
            done += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryExt, SliceMemory};

    #[test]
    fn reads_across_pages_and_reports_holes() {
        let mut m = SliceMemory::new();
        m.add(0x10000, (0..8192u32).map(|i| i as u8).collect());
        let c = PageCache::new(&m);
        let mut b = [0u8; 16];
        c.read(0x10000 + 4090, &mut b).unwrap();
        assert_eq!(b[0], (4090u32 % 256) as u8);
        assert_eq!(b[15], (4105u32 % 256) as u8);
        assert!(c.read_u64(0x20000).is_err());
        assert!(c.read_u64(0x10000 + 8190).is_err());
    }

    #[test]
    fn top_of_address_space_is_an_error_not_a_hang() {
        let m = SliceMemory::new();
        let c = PageCache::new(&m);
        assert!(c.read_u64(u64::MAX - 7).is_err());
        assert!(c.read_u64(u64::MAX - 3).is_err());
        c.prefetch([(u64::MAX - 100, 200)]);
    }
}
