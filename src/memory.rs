//! One source of bytes. The CPython reader and the native unwinder only see
//! this trait, so they can be driven by a live process, a core file later,
//! or plain byte buffers in unit tests.

use crate::error::MemError;

/// Hard cap on a single remote read. Every length that comes from the target
/// is bounded by the caller, and this is the last line of defence against a
/// corrupt length asking us to allocate gigabytes.
pub(crate) const MAX_READ: usize = 16 << 20;

pub trait Memory {
    /// Fill `buf` from `addr` in the target, or fail without partial data.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError>;

    /// Read several ranges at once. Implementations that can batch (a live
    /// process through one `process_vm_readv`) override this; the default
    /// reads them one by one. Each entry's result is independent.
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Vec<Result<(), MemError>> {
        reqs.iter_mut().map(|(a, b)| self.read(*a, b)).collect()
    }
}

/// Typed helpers on top of [`Memory`]; x86-64 little-endian throughout.
pub(crate) trait MemoryExt: Memory {
    fn read_u64(&self, addr: u64) -> Result<u64, MemError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    fn read_u32(&self, addr: u64) -> Result<u32, MemError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn read_u8(&self, addr: u64) -> Result<u8, MemError> {
        let mut b = [0u8; 1];
        self.read(addr, &mut b)?;
        Ok(b[0])
    }
    /// Read `len` bytes, refusing lengths above `max` (lengths come from the target).
    fn read_vec(&self, addr: u64, len: usize, max: usize) -> Result<Vec<u8>, MemError> {
        if len > max.min(MAX_READ) {
            return Err(MemError::TooLarge { addr, len });
        }
        let mut v = vec![0u8; len];
        self.read(addr, &mut v)?;
        Ok(v)
    }
}

impl<M: Memory + ?Sized> MemoryExt for M {}

impl<M: Memory + ?Sized> Memory for &M {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        (**self).read(addr, buf)
    }
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Vec<Result<(), MemError>> {
        (**self).read_many(reqs)
    }
}

/// Little-endian field access on a local copy of a remote struct. Out-of-range
/// offsets read as zero (a NULL pointer), which callers already treat as "absent":
/// a layout mistake must not become a panic.
pub(crate) fn le_u64(buf: &[u8], off: u64) -> u64 {
    let o = off as usize;
    buf.get(o..o.saturating_add(8))
        .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
        .unwrap_or(0)
}
pub(crate) fn le_u32(buf: &[u8], off: u64) -> u32 {
    let o = off as usize;
    buf.get(o..o.saturating_add(4))
        .map(|s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
        .unwrap_or(0)
}
pub(crate) fn le_i32(buf: &[u8], off: u64) -> i32 {
    le_u32(buf, off) as i32
}
pub(crate) fn le_u8(buf: &[u8], off: u64) -> u8 {
    buf.get(off as usize).copied().unwrap_or(0)
}

/// A live process read through `process_vm_readv`.
pub struct ProcessMemory {
    pid: nix::unistd::Pid,
}

impl ProcessMemory {
    pub fn new(pid: i32) -> Self {
        ProcessMemory {
            pid: nix::unistd::Pid::from_raw(pid),
        }
    }
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        use nix::sys::uio::{process_vm_readv, RemoteIoVec};
        use std::io::IoSliceMut;
        if buf.is_empty() {
            return Ok(());
        }
        if buf.len() > MAX_READ {
            return Err(MemError::TooLarge {
                addr,
                len: buf.len(),
            });
        }
        let len = buf.len();
        let remote = [RemoteIoVec {
            base: addr as usize,
            len,
        }];
        let mut local = [IoSliceMut::new(buf)];
        match process_vm_readv(self.pid, &mut local, &remote) {
            Ok(n) if n == len => Ok(()),
            Ok(_) => Err(MemError::Unmapped { addr, len }),
            Err(nix::errno::Errno::EFAULT) | Err(nix::errno::Errno::EIO) => {
                Err(MemError::Unmapped { addr, len })
            }
            Err(nix::errno::Errno::ESRCH) => Err(MemError::Gone),
            Err(nix::errno::Errno::EPERM) => Err(MemError::Permission),
            Err(e) => Err(MemError::Os {
                addr,
                errno: e as i32,
            }),
        }
    }

    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Vec<Result<(), MemError>> {
        use nix::sys::uio::{process_vm_readv, RemoteIoVec};
        use std::io::IoSliceMut;
        // process_vm_readv stops at the first unreadable range, so one call
        // serves the common all-good case and stragglers are retried singly.
        // Below the kernel's IOV_MAX (1024) for either list.
        const BATCH: usize = 512;
        let mut out = Vec::with_capacity(reqs.len());
        for chunk in reqs.chunks_mut(BATCH) {
            let lens: Vec<usize> = chunk.iter().map(|(_, b)| b.len()).collect();
            // Adjacent requests are one remote range (the kernel pins each
            // range's pages once); the local buffers stay apart, filled in
            // order, so the byte count still tells which requests were served.
            let mut remote: Vec<RemoteIoVec> = Vec::with_capacity(chunk.len());
            for (a, b) in chunk.iter() {
                let base = *a as usize;
                match remote.last_mut() {
                    Some(r) if r.base.checked_add(r.len) == Some(base) => r.len += b.len(),
                    _ => remote.push(RemoteIoVec { base, len: b.len() }),
                }
            }
            let total: usize = lens.iter().sum();
            let done = {
                let mut local: Vec<IoSliceMut> =
                    chunk.iter_mut().map(|(_, b)| IoSliceMut::new(b)).collect();
                process_vm_readv(self.pid, &mut local, &remote).unwrap_or(0)
            };
            if done == total {
                out.extend(lens.iter().map(|_| Ok(())));
                continue;
            }
            let mut consumed = 0usize;
            for (i, (a, b)) in chunk.iter_mut().enumerate() {
                if consumed + lens[i] <= done {
                    consumed += lens[i];
                    out.push(Ok(()));
                } else {
                    consumed = usize::MAX / 2;
                    out.push(self.read(*a, b));
                }
            }
        }
        out
    }
}

/// Bytes at known addresses, for unit tests (a core file is its own source).
#[cfg(test)]
#[derive(Default, Clone)]
pub(crate) struct SliceMemory {
    regions: Vec<(u64, Vec<u8>)>,
}

#[cfg(test)]
impl SliceMemory {
    pub(crate) fn new() -> Self {
        Self::default()
    }
    pub(crate) fn add(&mut self, addr: u64, bytes: Vec<u8>) {
        self.regions.push((addr, bytes));
    }
}

#[cfg(test)]
impl Memory for SliceMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let len = buf.len();
        for (base, bytes) in &self.regions {
            let end = base + bytes.len() as u64;
            if addr >= *base && addr.checked_add(len as u64).is_some_and(|e| e <= end) {
                let o = (addr - base) as usize;
                buf.copy_from_slice(&bytes[o..o + len]);
                return Ok(());
            }
        }
        Err(MemError::Unmapped { addr, len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_memory_reads_inside_and_refuses_outside() {
        let mut m = SliceMemory::new();
        m.add(0x1000, (0u8..32).collect());
        assert_eq!(
            m.read_u32(0x1004).unwrap(),
            u32::from_le_bytes([4, 5, 6, 7])
        );
        assert!(m.read_u64(0x101c).is_err());
        assert!(m.read_vec(0x1000, 1 << 30, 1 << 30).is_err());
    }

    #[test]
    fn field_helpers_never_panic_out_of_range() {
        let b = [1u8, 2, 3];
        assert_eq!(le_u64(&b, 0), 0);
        assert_eq!(le_u64(&b, u64::MAX), 0);
    }

    #[test]
    fn live_self_read_matches() {
        let v: Vec<u8> = (0..100).collect();
        let m = ProcessMemory::new(std::process::id() as i32);
        let mut out = vec![0u8; 100];
        m.read(v.as_ptr() as u64, &mut out).unwrap();
        assert_eq!(v, out);
        let mut a = [0u8; 10];
        let mut bad = [0u8; 10];
        let mut c = [0u8; 10];
        let mut reqs: Vec<(u64, &mut [u8])> = vec![
            (v.as_ptr() as u64, &mut a),
            (8, &mut bad),
            (v.as_ptr() as u64 + 50, &mut c),
        ];
        let r = m.read_many(&mut reqs);
        assert!(r[0].is_ok() && r[1].is_err() && r[2].is_ok());
        assert_eq!(c[0], 50);
    }
}
