//! A per-snapshot page cache over [`Memory`].
//!
//! One snapshot reads many small structs that share pages (3.11+ frames sit
//! side by side in a datastack chunk; code objects and strings cluster on the
//! heap). Reading whole pages once per snapshot turns dozens of syscalls into
//! a few, and `prefetch` batches the misses into one `process_vm_readv`.
//!
//! Between snapshots of one process the same pages are read again (the
//! thread states, the frame chunks, the code objects of the running
//! functions): [`PageCache::into_store`] keeps the pages the latest snapshot
//! touched, with their buffers, and [`PageCache::resume`] reads them again
//! for the next one in a single batch, so a steady target costs one or two
//! reads a tick instead of one per page. The bytes are always read afresh.

use crate::error::MemError;
use crate::memory::Memory;
use foldhash::HashMap;
use std::cell::RefCell;

/// The unit cached: smaller than a memory page, so that a 100-byte code
/// object header does not cost a 4 KiB copy every tick.
const PAGE: u64 = 1024;
/// Reads larger than this bypass the cache (a big line table, a long string).
const MAX_CACHED_READ: usize = 8192;
/// Bound on cached pages per snapshot, so a corrupt target cannot make us
/// hoard memory: past it, the cache starts afresh.
const MAX_PAGES: usize = 16384;
/// Bound on the pages carried over to the next snapshot's first batch.
pub(crate) const MAX_WARM_PAGES: usize = 1024;

struct Page {
    bytes: Box<[u8]>,
    /// The read of this page failed (its bytes are not the target's).
    unreadable: bool,
    /// A read was served from it during the current snapshot.
    used: bool,
}

/// What one snapshot's cache hands to the next (see [`PageCache::resume`]):
/// the pages it used, with their buffers, so the next snapshot reads them
/// again in one batch, into the same buffers, and allocates, hashes and
/// sorts nothing else for them.
#[derive(Default)]
pub(crate) struct PageStore {
    pages: HashMap<u64, Page>,
    spare: Vec<Box<[u8]>>,
}

pub(crate) struct PageCache<'m> {
    inner: &'m dyn Memory,
    /// Every page here was read during this cache's life.
    pages: RefCell<HashMap<u64, Page>>,
    /// Page buffers to reuse, so a tick allocates nothing.
    spare: RefCell<Vec<Box<[u8]>>>,
}

impl<'m> PageCache<'m> {
    pub(crate) fn new(inner: &'m dyn Memory) -> Self {
        Self::resume(inner, PageStore::default())
    }

    /// A cache that starts with the pages the previous snapshot used (at
    /// most [`MAX_WARM_PAGES`]), read afresh in one batch; the buffers of the
    /// others are reused. [`PageCache::into_store`] gives them all back.
    pub(crate) fn resume(inner: &'m dyn Memory, store: PageStore) -> Self {
        let PageStore {
            mut pages,
            mut spare,
        } = store;
        let mut kept = 0usize;
        pages.retain(|_, p| {
            let keep = p.used && !p.unreadable && kept < MAX_WARM_PAGES;
            if keep {
                kept += 1;
                p.used = false;
            } else {
                spare.push(std::mem::take(&mut p.bytes));
            }
            keep
        });
        spare.retain(|b| b.len() == PAGE as usize);
        spare.truncate(MAX_WARM_PAGES);
        if !pages.is_empty() {
            let failed: Vec<u64> = {
                let mut reqs: Vec<(u64, &mut [u8])> = pages
                    .iter_mut()
                    .map(|(a, p)| (*a, &mut p.bytes[..]))
                    .collect();
                // In address order, so that neighbouring blocks are read as one range.
                reqs.sort_unstable_by_key(|r| r.0);
                let results = inner.read_many(&mut reqs);
                reqs.iter()
                    .zip(results)
                    .filter(|(_, r)| r.is_err())
                    .map(|((a, _), _)| *a)
                    .collect()
            };
            for a in failed {
                if let Some(p) = pages.get_mut(&a) {
                    p.unreadable = true;
                }
            }
        }
        PageCache {
            inner,
            pages: RefCell::new(pages),
            spare: RefCell::new(spare),
        }
    }

    /// The pages and buffers, for the next snapshot's cache.
    pub(crate) fn into_store(self) -> PageStore {
        PageStore {
            pages: self.pages.into_inner(),
            spare: self.spare.into_inner(),
        }
    }

    /// The pages reads were served from (readable ones only), lowest
    /// address first.
    /// The blocks read from so far in this snapshot (readable ones), as
    /// (address, length) for [`PageCache::prefetch`].
    pub(crate) fn used_blocks_now(&self) -> Vec<(u64, usize)> {
        self.pages
            .borrow()
            .iter()
            .filter(|(_, p)| p.used && !p.unreadable)
            .map(|(a, _)| (*a, PAGE as usize))
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn used_pages(&self) -> Vec<u64> {
        let pages = self.pages.borrow();
        let mut v: Vec<u64> = pages
            .iter()
            .filter(|(_, p)| p.used && !p.unreadable)
            .map(|(a, _)| *a)
            .collect();
        v.sort_unstable();
        v
    }

    /// Load the pages holding `addrs[i]..addrs[i]+len` in one batched read.
    pub(crate) fn prefetch(&self, addrs: impl IntoIterator<Item = (u64, usize)>) {
        // Gathered before the pages are borrowed: the caller's iterator
        // may itself read through this cache.
        let addrs: Vec<(u64, usize)> = addrs.into_iter().collect();
        let mut want: Vec<u64> = Vec::new();
        {
            let pages = self.pages.borrow();
            for (a, len) in addrs {
                if len == 0 || len > MAX_CACHED_READ {
                    continue;
                }
                let first = a & !(PAGE - 1);
                let last = a.saturating_add(len as u64 - 1) & !(PAGE - 1);
                // At most nine pages; checked so that the top page of the
                // address space ends the walk instead of wrapping to zero.
                let mut p = Some(first);
                while let Some(page) = p.filter(|pg| *pg <= last) {
                    if !pages.contains_key(&page) {
                        want.push(page);
                    }
                    p = page.checked_add(PAGE);
                }
            }
        }
        if want.is_empty() {
            return;
        }
        // In address order, so that neighbouring blocks are read as one range.
        want.sort_unstable();
        want.dedup();
        // Full: start afresh. Reading on past the bound a read at a time
        // made a walk over more pages than it (the collector's lists of a
        // big heap, then 10,000 greenlets' frames) a system call per word.
        if self.pages.borrow().len() + want.len() > MAX_PAGES {
            let mut pages = self.pages.borrow_mut();
            let mut spare = self.spare.borrow_mut();
            for (_, p) in pages.drain() {
                if spare.len() < MAX_WARM_PAGES {
                    spare.push(p.bytes);
                }
            }
        }
        want.truncate(MAX_PAGES);
        let mut bufs: Vec<Box<[u8]>> = {
            let mut spare = self.spare.borrow_mut();
            want.iter()
                .map(|_| {
                    spare
                        .pop()
                        .unwrap_or_else(|| vec![0u8; PAGE as usize].into_boxed_slice())
                })
                .collect()
        };
        let results = {
            let mut reqs: Vec<(u64, &mut [u8])> = want
                .iter()
                .zip(bufs.iter_mut())
                .map(|(a, b)| (*a, &mut b[..]))
                .collect();
            self.inner.read_many(&mut reqs)
        };
        let mut pages = self.pages.borrow_mut();
        for ((addr, bytes), r) in want.into_iter().zip(bufs).zip(results) {
            pages.insert(
                addr,
                Page {
                    bytes,
                    unreadable: r.is_err(),
                    used: false,
                },
            );
        }
    }

    /// Copy from cached pages; false when one of them is not cached.
    fn copy_cached(&self, addr: u64, buf: &mut [u8]) -> Option<Result<(), MemError>> {
        let mut pages = self.pages.borrow_mut();
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr.wrapping_add(done as u64);
            let page = a & !(PAGE - 1);
            let off = (a - page) as usize;
            let n = (PAGE as usize - off).min(buf.len() - done);
            let p = pages.get_mut(&page)?;
            if p.unreadable {
                return Some(Err(MemError::Unmapped {
                    addr,
                    len: buf.len(),
                }));
            }
            p.used = true;
            buf[done..done + n].copy_from_slice(&p.bytes[off..off + n]);
            done += n;
        }
        Some(Ok(()))
    }
}

impl Memory for PageCache<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        if buf.len() > MAX_CACHED_READ || buf.is_empty() {
            return self.inner.read(addr, buf);
        }
        // A read that wraps past the top of the address space is not
        // served from pages (they would not be contiguous).
        if addr.checked_add(buf.len() as u64).is_none() {
            return Err(MemError::Unmapped {
                addr,
                len: buf.len(),
            });
        }
        if let Some(r) = self.copy_cached(addr, buf) {
            return r;
        }
        self.prefetch([(addr, buf.len())]);
        match self.copy_cached(addr, buf) {
            Some(r) => r,
            // Not cached after all (cannot happen: the cache makes room).
            None => self.inner.read(addr, buf),
        }
    }

    /// The pages missed, in one batch (a cache over this one fetches its
    /// misses through here), then each read.
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Vec<Result<(), MemError>> {
        self.prefetch(reqs.iter().map(|(a, b)| (*a, b.len())));
        reqs.iter_mut().map(|(a, b)| self.read(*a, b)).collect()
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
        c.prefetch([(!(PAGE - 1), 8), (0x1234, 8)]);
        let c = PageCache::resume(&m, c.into_store());
        assert!(c.read_u64(u64::MAX - 7).is_err());
    }

    #[test]
    fn a_full_cache_starts_afresh() {
        let mut m = SliceMemory::new();
        let n = MAX_PAGES + 10;
        m.add(
            0x100000,
            (0..n * PAGE as usize).map(|i| (i / 8) as u8).collect(),
        );
        let c = PageCache::new(&m);
        // Every page read once, then the first again: all served, never
        // more pages held than the bound.
        for i in 0..n as u64 {
            let at = 0x100000 + i * PAGE;
            assert_eq!(c.read_u8(at).unwrap(), ((i * PAGE / 8) & 0xff) as u8);
            assert!(c.pages.borrow().len() <= MAX_PAGES);
        }
        assert!(c.pages.borrow().len() <= 10);
        assert_eq!(c.read_u8(0x100000 + 8).unwrap(), 1);
        // A batch past the bound (less the pages held) keeps its first
        // pages, as many as the bound.
        c.prefetch((0..n as u64).map(|i| (0x100000 + i * PAGE, 8)));
        let held = c.pages.borrow().len();
        assert!(held <= MAX_PAGES && held > MAX_PAGES - 20, "{held}");
        assert_eq!(c.read_u8(0x100000 + 16).unwrap(), 2);
    }

    /// Counts the reads that reach the target.
    struct Counted<'m>(&'m SliceMemory, std::cell::Cell<usize>);
    impl Memory for Counted<'_> {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
            self.1.set(self.1.get() + 1);
            self.0.read(addr, buf)
        }
        fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Vec<Result<(), MemError>> {
            self.1.set(self.1.get() + 1);
            reqs.iter_mut().map(|(a, b)| self.0.read(*a, b)).collect()
        }
    }

    #[test]
    fn a_prefetch_may_read_through_the_cache_it_fills() {
        let mut m = SliceMemory::new();
        m.add(
            0x10000,
            (0..4 * PAGE as usize).map(|i| (i / 8) as u8).collect(),
        );
        let c = PageCache::new(&m);
        // Each address is read from the cache as the batch is gathered.
        c.prefetch((0..2u64).map(|i| {
            (
                0x10000 + PAGE * (1 + (c.read_u8(0x10000 + i * 8).unwrap() as u64)),
                8,
            )
        }));
        assert_eq!(c.read_u8(0x10000 + 2 * PAGE).unwrap(), (2 * PAGE / 8) as u8);
    }

    #[test]
    fn a_cache_over_a_cache_fetches_its_misses_in_one_batch() {
        let mut m = SliceMemory::new();
        m.add(0x10000, (0..4 * PAGE as usize).map(|i| i as u8).collect());
        let counted = Counted(&m, std::cell::Cell::new(0));
        let outer = PageCache::new(&counted);
        let inner = PageCache::new(&outer);
        inner.prefetch([(0x10000, 4 * PAGE as usize), (0x50000, 8)]);
        assert_eq!(counted.1.get(), 1);
        assert_eq!(inner.read_u8(0x10000 + 3 * PAGE + 5).unwrap(), 5);
        assert!(inner.read_u64(0x50000).is_err());
        assert_eq!(outer.read_u8(0x10000 + PAGE + 7).unwrap(), 7);
        assert_eq!(counted.1.get(), 1);
    }

    #[test]
    fn used_pages_are_the_ones_read_from() {
        let mut m = SliceMemory::new();
        m.add(0x10000, vec![7u8; 3 * 4096]);
        let c = PageCache::new(&m);
        c.prefetch([(0x10000, 8), (0x11000, 8), (0x12000, 8), (0x40000, 8)]);
        c.read_u64(0x11008).unwrap();
        assert!(c.read_u64(0x40000).is_err());
        assert_eq!(c.used_pages(), [0x11000]);
    }

    #[test]
    fn a_resumed_cache_reads_its_pages_afresh() {
        let mut before = SliceMemory::new();
        before.add(0x10000, vec![1u8; 4096]);
        let c = PageCache::new(&before);
        assert_eq!(c.read_u8(0x10010).unwrap(), 1);
        assert_eq!(c.read_u8(0x10800).unwrap(), 1);
        c.prefetch([(0x10c00, 8)]);
        let store = c.into_store();
        // The target changed, and one page is gone.
        let mut after = SliceMemory::new();
        after.add(0x10000, vec![2u8; 1024]);
        let c = PageCache::resume(&after, store);
        // Only the pages read from come back, read again.
        assert!(c.used_pages().is_empty());
        assert_eq!(c.pages.borrow().len(), 2);
        assert_eq!(c.read_u8(0x10010).unwrap(), 2);
        assert!(c.read_u8(0x10800).is_err());
        assert!(c.read_u8(0x10c00).is_err());
        // What a snapshot did not use is not carried over.
        let c = PageCache::resume(&after, c.into_store());
        assert_eq!(c.pages.borrow().len(), 1);
    }
}
