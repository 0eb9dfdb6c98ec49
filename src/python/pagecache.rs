//! A per-snapshot page cache over [`Memory`].
//!
//! One snapshot reads many small structs that share pages (3.11+ frames sit
//! side by side in a datastack chunk; code objects and strings cluster on the
//! heap). Reading whole pages once per snapshot turns dozens of syscalls into
//! a few, and `prefetch` batches the misses into one `process_vm_readv`.
//!
//! Between snapshots of one process the same pages are read again (the
//! thread states, the frame chunks, the code objects of the running
//! functions): [`PageCache::used_pages`] says which the latest snapshot
//! touched, and [`PageCache::prefetch_pages`] loads them for the next one in
//! that same single batch, so a steady target costs one or two reads a tick
//! instead of one per page. The bytes are always read afresh.

use crate::error::MemError;
use crate::memory::Memory;
use foldhash::{HashMap, HashMapExt};
use std::cell::RefCell;

/// The unit cached: smaller than a memory page, so that a 100-byte code
/// object header does not cost a 4 KiB copy every tick.
const PAGE: u64 = 1024;
/// Reads larger than this bypass the cache (a big line table, a long string).
const MAX_CACHED_READ: usize = 8192;
/// Bound on cached pages per snapshot, so a corrupt target cannot make us hoard memory.
const MAX_PAGES: usize = 16384;
/// Bound on the pages carried over to the next snapshot's first batch.
pub(crate) const MAX_WARM_PAGES: usize = 1024;

struct Page {
    /// None: the page could not be read.
    bytes: Option<Box<[u8]>>,
    used: bool,
}

pub(crate) struct PageCache<'m> {
    inner: &'m dyn Memory,
    pages: RefCell<HashMap<u64, Page>>,
    /// Page buffers to reuse (handed over by the previous snapshot), so a
    /// tick allocates and clears nothing.
    spare: RefCell<Vec<Box<[u8]>>>,
}

impl<'m> PageCache<'m> {
    pub(crate) fn new(inner: &'m dyn Memory) -> Self {
        Self::with_buffers(inner, Vec::new())
    }

    /// A cache that fills `buffers` (page-sized; others are dropped) before
    /// allocating; [`PageCache::into_buffers`] gives them back.
    pub(crate) fn with_buffers(inner: &'m dyn Memory, mut buffers: Vec<Box<[u8]>>) -> Self {
        buffers.retain(|b| b.len() == PAGE as usize);
        buffers.truncate(MAX_WARM_PAGES);
        PageCache {
            inner,
            // Sized for what the previous snapshot held: no rehashing each tick.
            pages: RefCell::new(HashMap::with_capacity(buffers.len())),
            spare: RefCell::new(buffers),
        }
    }

    /// Every page buffer, for the next snapshot's cache (at most
    /// [`MAX_WARM_PAGES`] are kept).
    pub(crate) fn into_buffers(self) -> Vec<Box<[u8]>> {
        let mut v = self.spare.into_inner();
        v.extend(
            self.pages
                .into_inner()
                .into_values()
                .filter_map(|p| p.bytes),
        );
        v.truncate(MAX_WARM_PAGES);
        v
    }

    /// Load whole pages (addresses page-aligned; others are ignored) in one
    /// batched read: the pages an earlier snapshot used.
    pub(crate) fn prefetch_pages(&self, pages: &[u64]) {
        self.prefetch(
            pages
                .iter()
                .filter(|p| *p & (PAGE - 1) == 0)
                .take(MAX_WARM_PAGES)
                .map(|&p| (p, PAGE as usize)),
        );
    }

    /// The pages reads were served from (readable ones only), at most
    /// [`MAX_WARM_PAGES`], lowest address first.
    pub(crate) fn used_pages(&self) -> Vec<u64> {
        let pages = self.pages.borrow();
        let mut v: Vec<u64> = pages
            .iter()
            .filter(|(_, p)| p.used && p.bytes.is_some())
            .map(|(a, _)| *a)
            .collect();
        v.sort_unstable();
        v.truncate(MAX_WARM_PAGES);
        v
    }

    /// Load the pages holding `addrs[i]..addrs[i]+len` in one batched read.
    pub(crate) fn prefetch(&self, addrs: impl IntoIterator<Item = (u64, usize)>) {
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
        // In address order, so that neighbouring blocks are read as one range.
        want.sort_unstable();
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
        for ((addr, buf), r) in want.into_iter().zip(bufs).zip(results) {
            if pages.len() >= MAX_PAGES {
                break;
            }
            pages.insert(
                addr,
                Page {
                    bytes: r.ok().map(|_| buf),
                    used: false,
                },
            );
        }
    }
}

impl Memory for PageCache<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        if buf.len() > MAX_CACHED_READ || buf.is_empty() {
            return self.inner.read(addr, buf);
        }
        self.prefetch([(addr, buf.len())]);
        let mut pages = self.pages.borrow_mut();
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr.wrapping_add(done as u64);
            let page = a & !(PAGE - 1);
            let off = (a - page) as usize;
            let n = (PAGE as usize - off).min(buf.len() - done);
            match pages.get_mut(&page) {
                Some(Page {
                    bytes: Some(p),
                    used,
                }) => {
                    *used = true;
                    buf[done..done + n].copy_from_slice(&p[off..off + n]);
                }
                Some(Page { bytes: None, .. }) => {
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
        c.prefetch_pages(&[!(PAGE - 1), 0x1234]);
    }

    #[test]
    fn used_pages_are_the_ones_read_from() {
        let mut m = SliceMemory::new();
        m.add(0x10000, vec![7u8; 3 * 4096]);
        let c = PageCache::new(&m);
        c.prefetch_pages(&[0x10000, 0x11000, 0x12000, 0x40000]);
        c.read_u64(0x11008).unwrap();
        assert!(c.read_u64(0x40000).is_err());
        assert_eq!(c.used_pages(), [0x11000]);
    }
}
