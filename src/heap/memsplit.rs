//! The whole process's memory split: its resident set (smaps, read once
//! through src/procfs.rs) into Python's object allocator (the RSS inside
//! obmalloc's arenas), malloc's heap (`[heap]`, the thread arenas and
//! mmapped chunks glibc made), other anonymous memory, thread stacks,
//! files and libraries.

use crate::memory::{le_u64, Memory};
use crate::procfs::{self, SmapsEntry};
use crate::python::obmalloc::{read_arenas, Arenas};
use crate::python::process::PythonProcess;
use crate::target::{SourceKind, TargetSource};
use serde::{Deserialize, Serialize};

/// glibc's `HEAP_MAX_SIZE` on 64-bit: a thread arena's heaps are aligned to it.
const HEAP_MAX: u64 = 64 << 20;
/// mmapped chunks followed in one stretch of memory, at most.
const MAX_CHUNKS: usize = 4096;
const PAGE: u64 = 4096;

/// The allocator's own figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct AllocatorStats {
    pub(crate) arenas: u64,
    pub(crate) arena_size: u64,
    /// Bytes of the arenas' pools in use, and of the rest (free pools and
    /// pools never carved).
    pub(crate) pools_used_bytes: u64,
    pub(crate) pools_free_bytes: u64,
}

/// Resident bytes by where they are; the rows add up to `rss`. None
/// throughout for a core file (no resident set to split).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct MemorySplit {
    pub(crate) rss: Option<u64>,
    /// Inside obmalloc's arenas (None: its arenas were not read).
    pub(crate) python_allocator: Option<u64>,
    pub(crate) malloc_heap: Option<u64>,
    pub(crate) anonymous: Option<u64>,
    pub(crate) thread_stacks: Option<u64>,
    pub(crate) files: Option<u64>,
    /// `[vdso]`, `[vvar]` and the like.
    pub(crate) other: Option<u64>,
    pub(crate) swap: Option<u64>,
    pub(crate) allocator: Option<AllocatorStats>,
    /// Why the allocator's arenas were not read.
    pub(crate) allocator_unread: Option<String>,
    pub(crate) notes: Vec<String>,
}

/// Split `source`'s memory (`process` found in it).
pub(crate) fn split(source: &dyn TargetSource, process: &PythonProcess) -> MemorySplit {
    let mut out = MemorySplit::default();
    let arenas = match read_arenas(source, process) {
        Ok(a) => {
            let used: u64 = a.arenas.iter().map(|x| x.used_pools).sum::<u64>() * a.pool_size;
            let mapped = a.arenas.len() as u64 * a.arena_size;
            out.allocator = Some(AllocatorStats {
                arenas: a.arenas.len() as u64,
                arena_size: a.arena_size,
                pools_used_bytes: used,
                pools_free_bytes: mapped.saturating_sub(used),
            });
            out.notes.extend(a.partial.iter().cloned());
            Some(a)
        }
        Err(why) => {
            out.allocator_unread = Some(why);
            None
        }
    };
    if source.kind() != SourceKind::Live {
        out.notes
            .push("a core file has no resident set: the split is of live processes".into());
        return out;
    }
    let pid = source.pid();
    let smaps = match procfs::smaps(pid) {
        Ok(s) => s,
        Err(e) => {
            out.notes.push(format!("no memory split: {e}"));
            return out;
        }
    };
    let sps: Vec<u64> = source
        .threads()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|tid| procfs::thread_stack_pointer(pid, tid))
        .collect();
    let pagemap = procfs::open_pagemap(pid);
    if pagemap.is_none() {
        out.notes
            .push("pagemap unreadable: the rows inside a mapping are estimates".into());
    }
    let rows = classify(source, &smaps, arenas.as_ref(), &sps, &|a, b| {
        pagemap
            .as_ref()
            .and_then(|f| procfs::resident_bytes(f, a, b))
    });
    out.rss = Some(rows.rss);
    out.python_allocator = arenas.as_ref().map(|_| rows.python);
    out.malloc_heap = Some(rows.malloc);
    out.anonymous = Some(rows.anonymous);
    out.thread_stacks = Some(rows.stacks);
    out.files = Some(rows.files);
    out.other = Some(rows.other);
    out.swap = Some(rows.swap);
    out
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Rows {
    rss: u64,
    python: u64,
    malloc: u64,
    anonymous: u64,
    stacks: u64,
    files: u64,
    other: u64,
    swap: u64,
}

/// Put each mapping's resident bytes in its row; `resident(a, b)`: the
/// resident bytes of `[a, b)` (None: unknown, estimated from the
/// mapping's share).
fn classify(
    mem: &dyn Memory,
    smaps: &[SmapsEntry],
    arenas: Option<&Arenas>,
    sps: &[u64],
    resident: &dyn Fn(u64, u64) -> Option<u64>,
) -> Rows {
    let mut ranges: Vec<(u64, u64, u64)> = arenas
        .map(|a| {
            a.arenas
                .iter()
                .map(|x| {
                    let end = x.address.saturating_add(a.arena_size);
                    (x.address, end, x.used_pools * a.pool_size)
                })
                .collect()
        })
        .unwrap_or_default();
    ranges.sort_unstable();
    let mut r = Rows::default();
    for (i, e) in smaps.iter().enumerate() {
        let m = &e.map;
        r.rss += e.rss;
        r.swap += e.swap;
        let anon_name = m.path.is_empty() || m.path.starts_with("[anon:");
        if m.is_file() || m.path.starts_with('/') {
            r.files += e.rss;
            continue;
        }
        if m.path == "[stack]" {
            r.stacks += e.rss;
            continue;
        }
        if !anon_name && m.path != "[heap]" {
            r.other += e.rss;
            continue;
        }
        let len = m.end - m.start;
        let share = |a: u64, b: u64| -> u64 {
            resident(a, b).unwrap_or_else(|| {
                (u128::from(e.rss) * u128::from(b - a) / u128::from(len.max(1))) as u64
            })
        };
        let mut left = e.rss;
        // The arenas inside (an arena's mapping may have merged with its
        // neighbours), and the stretches between them.
        let first = ranges.partition_point(|&(_, end, _)| end <= m.start);
        let mut gaps = Vec::new();
        let mut at = m.start;
        for &(a, b, used) in ranges[first..].iter().take_while(|(a, _, _)| *a < m.end) {
            let (a, b) = (a.max(m.start), b.min(m.end));
            let got = resident(a, b).unwrap_or(used.min(b - a)).min(left);
            r.python += got;
            left -= got;
            if a > at {
                gaps.push((at, a));
            }
            at = at.max(b);
        }
        if at < m.end {
            gaps.push((at, m.end));
        }
        if m.path == "[heap]" {
            r.malloc += left;
            continue;
        }
        let mut malloc = 0;
        for (a, b) in gaps {
            for (x, y) in glibc_regions(mem, a, b) {
                malloc += share(x, y);
            }
        }
        let malloc = malloc.min(left);
        r.malloc += malloc;
        left -= malloc;
        // A thread's stack: a thread's stack pointer is in it, or (a
        // thread running, its pointer unknown) glibc's guard page is
        // right below it.
        let guarded = i > 0 && {
            let g = &smaps[i - 1].map;
            g.end == m.start
                && g.path.is_empty()
                && !g.readable
                && !g.writable
                && g.end - g.start <= 1 << 20
        };
        if sps.iter().any(|&sp| m.contains(sp)) || (guarded && m.writable) {
            r.stacks += left;
        } else {
            r.anonymous += left;
        }
    }
    r
}

/// The stretches of `[start, end)` that glibc's malloc made: a thread
/// arena's heap (its `heap_info` at a `HEAP_MAX`-aligned start), then
/// mmapped chunks (`prev_size` 0, `size` a page multiple, or one less
/// the 16-byte header, with only `IS_MMAPPED` set), one after another, each bounded by `end`.
fn glibc_regions(mem: &dyn Memory, start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut p = start;
    if p.is_multiple_of(HEAP_MAX) {
        let mut h = [0u8; 32];
        if mem.read(p, &mut h).is_ok() {
            let (ar_ptr, size, mprotect) = (le_u64(&h, 0), le_u64(&h, 16), le_u64(&h, 24));
            if ar_ptr != 0
                && size >= PAGE
                && size % PAGE == 0
                && mprotect >= size
                && mprotect <= HEAP_MAX
            {
                let stop = p.saturating_add(mprotect).min(end);
                out.push((p, stop));
                p = stop;
            }
        }
    }
    for _ in 0..MAX_CHUNKS {
        if p >= end {
            break;
        }
        let mut h = [0u8; 16];
        if mem.read(p, &mut h).is_err() {
            break;
        }
        let (prev_size, size) = (le_u64(&h, 0), le_u64(&h, 8));
        // The mapping's length, or (newer glibc: Debian sid's 2.42) that
        // less the chunk's header.
        let len = match size & !7 {
            n if n % PAGE == 0 => n,
            n => n.saturating_add(16),
        };
        if prev_size != 0 || size & 7 != 2 || len < PAGE || len % PAGE != 0 || len > end - p {
            break;
        }
        out.push((p, p + len));
        p += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::MapEntry;
    use crate::memory::SliceMemory;
    use crate::python::obmalloc::Arena;

    fn entry(start: u64, end: u64, path: &str, rss: u64) -> SmapsEntry {
        SmapsEntry {
            map: MapEntry {
                start,
                end,
                readable: true,
                writable: true,
                executable: false,
                offset: 0,
                inode: if path.starts_with('/') { 7 } else { 0 },
                path: path.into(),
            },
            rss,
            swap: 0,
        }
    }

    #[test]
    fn rows_add_up_and_find_arenas_chunks_and_stacks() {
        let mut mem = SliceMemory::new();
        // An anonymous mapping: one 1 MiB arena, then a 2 MiB mmapped chunk.
        let base = 0x7f00_0000_0000u64;
        let mut chunk = vec![0u8; 16];
        chunk[8..16].copy_from_slice(&((2u64 << 20) | 2).to_le_bytes());
        mem.add(base + (1 << 20), chunk);
        let arenas = Arenas {
            arena_size: 1 << 20,
            pool_size: 1 << 14,
            arenas: vec![Arena {
                address: base,
                used_pools: 10,
                total_pools: 64,
            }],
            partial: vec![],
        };
        let smaps = vec![
            entry(0x1000, 0x5000, "/usr/bin/python", 0x4000),
            entry(0x10000, 0x20000, "[heap]", 0x8000),
            entry(base, base + (4 << 20), "", 4 << 20),
            entry(0x7ffd_0000_0000, 0x7ffd_0001_0000, "[stack]", 0x3000),
            entry(0x7ffe_0000_0000, 0x7ffe_0000_2000, "[vdso]", 0x2000),
            entry(0x7fa0_0000_0000, 0x7fa0_0080_0000, "", 0x10000),
        ];
        // Each byte of the arena and of the chunk resident; nothing else asked.
        let resident = |a: u64, b: u64| Some(b - a);
        let r = classify(&mem, &smaps, Some(&arenas), &[0x7fa0_0000_1000], &resident);
        assert_eq!(r.python, 1 << 20);
        assert_eq!(r.malloc, 0x8000 + (2 << 20));
        assert_eq!(r.anonymous, 1 << 20);
        assert_eq!(r.stacks, 0x3000 + 0x10000);
        assert_eq!(r.files, 0x4000);
        assert_eq!(r.other, 0x2000);
        assert_eq!(
            r.rss,
            r.python + r.malloc + r.anonymous + r.stacks + r.files + r.other
        );
    }

    #[test]
    fn a_chunk_larger_than_its_stretch_is_not_one() {
        let mut mem = SliceMemory::new();
        let mut chunk = vec![0u8; 16];
        chunk[8..16].copy_from_slice(&((8u64 << 20) | 2).to_le_bytes());
        mem.add(0x10_0000, chunk);
        assert!(glibc_regions(&mem, 0x10_0000, 0x20_0000).is_empty());
    }

    #[test]
    fn chunks_of_either_glibc_follow_one_another() {
        let mut mem = SliceMemory::new();
        let head = |size: u64| {
            let mut h = vec![0u8; 16];
            h[8..16].copy_from_slice(&(size | 2).to_le_bytes());
            h
        };
        // Older glibc: the mapping's length; sid's 2.42: less the header.
        mem.add(0x10_0000, head(0x3000));
        mem.add(0x10_3000, head(0x2000 - 16));
        assert_eq!(
            glibc_regions(&mem, 0x10_0000, 0x20_0000),
            vec![(0x10_0000, 0x10_3000), (0x10_3000, 0x10_5000)]
        );
    }
}
