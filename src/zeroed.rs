//! A zeroed buffer whose untouched pages cost no memory.
//!
//! Reading a large library sparingly (its symbol tables, CFI by the page, one
//! DWARF unit at a time) keeps file offsets valid by reading the parts into
//! a zeroed buffer as long as the file or section: the unread pages are
//! never touched. A zeroed `Vec` only promises that while the allocator
//! takes it straight from the kernel; glibc serves allocations up to 32 MB
//! from its heap once a large block has been freed (its mmap threshold
//! rises), and then clears them with memset: every page resident, and a long
//! `record --native` that loads DWARF units as it meets new code grew by
//! megabytes a minute. [`Zeroed`] asks the kernel for large buffers itself
//! (an anonymous private mapping, whose pages exist only once written) and
//! gives them back whole when dropped.

use std::alloc::Layout;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Buffers smaller than this come from the allocator: a mapping costs a
/// system call and at least a page.
const MAP_MIN: usize = 256 << 10;

/// A zeroed byte buffer (see the module's doc). It holds its bytes through
/// a raw pointer, so that [`Zeroed::write`] may fill a part of them while
/// the buffer is shared, as the readers by the page need.
pub(crate) struct Zeroed {
    ptr: NonNull<u8>,
    len: usize,
    /// An anonymous mapping (else an allocation, or nothing when empty).
    mapped: bool,
}

// SAFETY: the buffer owns its bytes exclusively, like a Box<[u8]>.
unsafe impl Send for Zeroed {}
// SAFETY: shared access reads; `write`'s callers keep it from racing.
unsafe impl Sync for Zeroed {}

impl Zeroed {
    /// `len` zero bytes; None when no memory is to be had.
    pub(crate) fn new(len: usize) -> Option<Zeroed> {
        if len == 0 {
            return Some(Zeroed::default());
        }
        if len < MAP_MIN {
            let layout = Layout::array::<u8>(len).ok()?;
            // SAFETY: a non-zero size.
            let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
            return Some(Zeroed {
                ptr,
                len,
                mapped: false,
            });
        }
        // SAFETY: a fresh anonymous private mapping, not aliasing anything.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // Where transparent huge pages are on for every mapping ("always"),
        // one byte written would make 2 MiB around it resident: the buffer
        // is written sparsely, so it asks for small pages. Advice only; a
        // kernel without THP refuses it harmlessly.
        // SAFETY: the mapping just made, whole.
        unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
        Some(Zeroed {
            ptr: NonNull::new(p.cast::<u8>())?,
            len,
            mapped: true,
        })
    }

    /// Copy `bytes` in at `at`, through a shared buffer.
    ///
    /// # Safety
    /// No slice of `at..at + bytes.len()` (from `Deref`) may be alive, and
    /// no other thread may read or write those bytes meanwhile.
    pub(crate) unsafe fn write(&self, at: usize, bytes: &[u8]) {
        assert!(at.checked_add(bytes.len()).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds (checked); exclusivity is the caller's promise.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(at), bytes.len())
        };
    }
}

impl From<Vec<u8>> for Zeroed {
    fn from(v: Vec<u8>) -> Zeroed {
        let z = Zeroed::new(v.len()).expect("memory for a copy");
        // SAFETY: `z` is new: nothing else sees it.
        unsafe { z.write(0, &v) };
        z
    }
}

impl Default for Zeroed {
    fn default() -> Zeroed {
        Zeroed {
            ptr: NonNull::dangling(),
            len: 0,
            mapped: false,
        }
    }
}

impl Deref for Zeroed {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes (zeroed or written), alive until
        // drop; a dangling pointer only with length 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Zeroed {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Zeroed {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: unmapping exactly the mapping made in `new`, once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        } else if self.len > 0 {
            // SAFETY: allocated in `new` with this layout.
            unsafe {
                std::alloc::dealloc(
                    self.ptr.as_ptr(),
                    Layout::array::<u8>(self.len).expect("the layout it was made with"),
                )
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Zeroed;

    /// KiB of `len` bytes from `addr` (page-aligned) resident in memory,
    /// counted page by page with mincore(2): the buffer's own pages only,
    /// whatever mapping the kernel merged it into (tests running beside it
    /// map memory too).
    fn resident_kib(addr: usize, len: usize) -> u64 {
        let page = 4096;
        let mut vec = vec![0u8; len.div_ceil(page)];
        // SAFETY: `addr..addr + len` is one live mapping of ours, and `vec`
        // has a byte per page of it.
        let rc = unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * (page as u64 / 1024)
    }

    #[test]
    fn untouched_pages_of_a_large_buffer_are_not_resident() {
        let mut z = Zeroed::new(64 << 20).unwrap();
        assert!(z.mapped);
        assert_eq!((z[0], z[32 << 20]), (0, 0));
        z[10 << 20] = 7;
        z[(64 << 20) - 1] = 9;
        assert_eq!((z[10 << 20], z[(64 << 20) - 1]), (7, 9));
        let rss = resident_kib(z.as_ptr() as usize, z.len());
        // Reading maps the shared zero page; only the written pages (and
        // none of the 64 MB besides) count.
        assert!(rss <= 64, "{rss} KiB resident of a 64 MiB buffer");
        let small = Zeroed::new(100).unwrap();
        assert!(!small.mapped && small.len() == 100 && small.iter().all(|&b| b == 0));
        // SAFETY: nothing else sees `small`.
        unsafe { small.write(98, &[1, 2]) };
        assert_eq!(&small[97..], &[0, 1, 2]);
        assert!(Zeroed::default().is_empty());
    }
}
