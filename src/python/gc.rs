//! The one walker of the cyclic collector's object lists: every object the
//! collector tracks, in every generation list (the permanent one too) of
//! every interpreter, as (object address, type address).
//!
//! Each list is a circular doubly-linked list of `PyGC_Head`s whose head is
//! a field of the collector's state. The walk trusts nothing it reads: each
//! step checks that the next node's `_gc_prev` points back at the node it
//! came from (so a list that changed under a non-pausing read, or a corrupt
//! one, stops the walk instead of leading it astray; with that check a walk
//! cannot loop without coming back to its head), and the whole walk is
//! capped at `max` objects. Whatever stopped a list early is reported, and
//! the result is then partial.

use crate::cpython_layouts::gc::GcLayout;
use crate::cpython_layouts::Layout;
use crate::memory::{le_u64, Memory, MemoryExt};
use crate::python::bounds::MAX_INTERPRETERS;
use crate::python::pagecache::PageCache;

/// The low bits of `_gc_next` (`NEXT_MASK_UNREACHABLE` during a collection)
/// and `_gc_prev` (`PREV_MASK_COLLECTING`, `FINALIZED`) are flags.
const FLAG_BITS: u64 = 3;
/// Objects read through one page cache before it is dropped for a fresh
/// one (the cache stops caching when full).
const OBJECTS_PER_CACHE: usize = 4096;
/// What each read of a list's node fetches: its whole (4 KiB) memory page.
const READ_AHEAD: u64 = 4096;

/// What one walk found.
#[derive(Debug, Default)]
pub(crate) struct Tracked {
    /// (object, its type), in list order, each list after the other.
    pub(crate) objects: Vec<(u64, u64)>,
    /// Why the result is partial; empty when every list was walked whole.
    pub(crate) partial: Vec<String>,
    /// Interpreters whose lists were walked.
    pub(crate) interpreters: usize,
}

/// Where to find each interpreter's collector: the process's layout, its
/// collector table, and the word pointing at the newest interpreter.
pub(crate) struct GcWhere<'a> {
    pub(crate) layout: &'a Layout,
    pub(crate) gc: &'a GcLayout,
    pub(crate) interp_head_ptr: u64,
}

/// Every object the collectors of the process track, at most `max`.
pub(crate) fn tracked_objects(mem: &dyn Memory, at: &GcWhere, max: usize) -> Tracked {
    let mut out = Tracked::default();
    let states = match collector_states(mem, at) {
        Ok(s) => s,
        Err(why) => {
            out.partial.push(why);
            return out;
        }
    };
    out.interpreters = states.len();
    for state in states {
        let Some(lists) = at
            .gc
            .lists
            .iter()
            .find(|c| c.iter().all(|off| head_links_back(mem, state + off)))
        else {
            out.partial.push(format!(
                "no collector lists found at the interpreter's state 0x{state:x} (no candidate's \
                 heads link back to themselves)"
            ));
            continue;
        };
        for (i, off) in lists.iter().enumerate() {
            if out.objects.len() >= max {
                out.partial
                    .push(format!("stopped at {max} objects (the limit)"));
                return out;
            }
            let geometry = ListGeometry {
                gc_head_size: at.gc.gc_head_size,
                ob_type: at.layout.object.ob_type,
            };
            if let Err(why) = walk_list(mem, &geometry, state + off, max, &mut out.objects) {
                out.partial
                    .push(format!("collector list {i} at 0x{:x}: {why}", state + off));
            }
        }
    }
    out
}

/// The address of each `struct _gc_runtime_state` to walk.
fn collector_states(mem: &dyn Memory, at: &GcWhere) -> Result<Vec<u64>, String> {
    if at.gc.in_runtime {
        let (Some(head), Some(collecting)) = (
            at.layout.runtime.interpreters_head,
            at.layout.runtime.gc_collecting,
        ) else {
            return Err("this version's table has no runtime collector offset".into());
        };
        let runtime = at.interp_head_ptr.wrapping_sub(head);
        return Ok(vec![runtime
            .wrapping_add(collecting)
            .wrapping_sub(at.gc.collecting)]);
    }
    let Some(collecting) = at.layout.interp.gc_collecting else {
        return Err("this version's table has no interpreter collector offset".into());
    };
    let mut states = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut interp = mem
        .read_u64(at.interp_head_ptr)
        .map_err(|e| format!("reading the interpreter list: {e}"))?;
    while interp != 0 && states.len() < MAX_INTERPRETERS && seen.insert(interp) {
        states.push(
            interp
                .wrapping_add(collecting)
                .wrapping_sub(at.gc.collecting),
        );
        interp = mem
            .read_u64(interp.wrapping_add(at.layout.interp.next))
            .map_err(|e| format!("reading the interpreter list: {e}"))?;
    }
    Ok(states)
}

/// Whether a list head at `head` is one: its first node's back link and
/// its last node's forward link point at it (an empty list's at itself).
fn head_links_back(mem: &dyn Memory, head: u64) -> bool {
    let link = |addr: u64, off: u64| -> Option<u64> {
        addr.is_multiple_of(4)
            .then(|| mem.read_u64(addr.wrapping_add(off)).ok())
            .flatten()
            .map(|v| v & !FLAG_BITS)
    };
    let (Some(next), Some(prev)) = (link(head, 0), link(head, 8)) else {
        return false;
    };
    next != 0 && prev != 0 && link(next, 8) == Some(head) && link(prev, 0) == Some(head)
}

/// What a list walk needs to know of a version: the size of `PyGC_Head`
/// (its links are its first two words on every version) and where an
/// object's type is.
pub(crate) struct ListGeometry {
    pub(crate) gc_head_size: u64,
    pub(crate) ob_type: u64,
}

/// Walk one list from its head, appending (object, type) to `out` until
/// the head comes round again or `out` holds `max`.
pub(crate) fn walk_list(
    mem: &dyn Memory,
    geometry: &ListGeometry,
    head: u64,
    max: usize,
    out: &mut Vec<(u64, u64)>,
) -> Result<(), String> {
    let hsize = geometry.gc_head_size;
    let type_at = hsize + geometry.ob_type;
    let mut first = [0u8; 16];
    mem.read(head, &mut first)
        .map_err(|e| format!("reading its head: {e}"))?;
    let mut prev = head;
    let mut node = le_u64(&first, 0) & !FLAG_BITS;
    let mut cache = PageCache::new(mem);
    let mut since_fresh = 0usize;
    let mut buf = vec![0u8; (type_at + 8) as usize];
    while node != head {
        if out.len() >= max {
            return Err(format!("stopped at {max} objects (the limit)"));
        }
        if node == 0 || !node.is_multiple_of(4) {
            return Err(format!("a node at 0x{node:x}, not an object's header"));
        }
        if since_fresh == OBJECTS_PER_CACHE {
            cache = PageCache::new(mem);
            since_fresh = 0;
        }
        since_fresh += 1;
        // The rest of its memory page too, in the same read: the objects
        // of a pool sit side by side, and the list mostly links them in
        // the order they were allocated.
        cache.prefetch([(node & !(READ_AHEAD - 1), READ_AHEAD as usize)]);
        cache
            .read(node, &mut buf)
            .map_err(|e| format!("reading the node at 0x{node:x}: {e}"))?;
        if le_u64(&buf, 8) & !FLAG_BITS != prev {
            return Err(format!(
                "the node at 0x{node:x} does not point back at 0x{prev:x} (the list changed, \
                 or is corrupt)"
            ));
        }
        out.push((node + hsize, le_u64(&buf, type_at)));
        prev = node;
        node = le_u64(&buf, 0) & !FLAG_BITS;
    }
    // The head's own back link closes the circle.
    if le_u64(&first, 8) & !FLAG_BITS != prev {
        return Err("the list does not close back at its head".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SliceMemory;

    const BASE: u64 = 0x10000;
    const INTERP: u64 = 0x11000;
    const NODES: u64 = 0x12000;

    /// A 3.12 target: one interpreter whose gen0 list links `links`
    /// (node → (next, prev)), the other lists empty.
    fn target(links: &[(u64, u64, u64)], first: u64, last: u64) -> (SliceMemory, u64) {
        let layout = crate::cpython_layouts::for_version(3, 12).unwrap();
        let gc = crate::cpython_layouts::gc::for_version(3, 12).unwrap();
        let mut mem = vec![0u8; 0x8000];
        let mut put = |addr: u64, v: u64| {
            let o = (addr - BASE) as usize;
            mem[o..o + 8].copy_from_slice(&v.to_le_bytes());
        };
        let head_ptr = BASE + 0x100;
        put(head_ptr, INTERP);
        let state = INTERP + layout.interp.gc_collecting.unwrap() - gc.collecting;
        for (i, off) in gc.lists[0].iter().enumerate() {
            let h = state + off;
            if i == 0 {
                put(h, first);
                put(h + 8, last);
            } else {
                put(h, h);
                put(h + 8, h);
            }
        }
        for &(node, next, prev) in links {
            put(node, next);
            put(node + 8, prev);
            put(node + 16 + 8, 0xabc0); // ob_type
        }
        let mut m = SliceMemory::new();
        m.add(BASE, mem);
        (m, head_ptr)
    }

    fn walk(mem: &SliceMemory, head_ptr: u64, max: usize) -> Tracked {
        let at = GcWhere {
            layout: crate::cpython_layouts::for_version(3, 12).unwrap(),
            gc: crate::cpython_layouts::gc::for_version(3, 12).unwrap(),
            interp_head_ptr: head_ptr,
        };
        tracked_objects(mem, &at, max)
    }

    fn gen0() -> u64 {
        let layout = crate::cpython_layouts::for_version(3, 12).unwrap();
        let gc = crate::cpython_layouts::gc::for_version(3, 12).unwrap();
        INTERP + layout.interp.gc_collecting.unwrap() - gc.collecting + gc.lists[0][0]
    }

    #[test]
    fn walks_a_whole_list() {
        let (a, b, c) = (NODES, NODES + 64, NODES + 128);
        let h = gen0();
        // Flag bits in the links are ignored.
        let (mem, p) = target(&[(a, b | 1, h | 2), (b, c, a), (c, h, b | 3)], a, c);
        let t = walk(&mem, p, 100);
        assert!(t.partial.is_empty(), "{:?}", t.partial);
        assert_eq!(t.interpreters, 1);
        assert_eq!(
            t.objects,
            vec![(a + 16, 0xabc0), (b + 16, 0xabc0), (c + 16, 0xabc0)]
        );
    }

    #[test]
    fn a_broken_back_link_ends_the_walk_as_partial() {
        let (a, b, c) = (NODES, NODES + 64, NODES + 128);
        let h = gen0();
        let (mem, p) = target(&[(a, b, h), (b, c, c), (c, h, b)], a, c);
        let t = walk(&mem, p, 100);
        assert_eq!(t.objects, vec![(a + 16, 0xabc0)]);
        assert!(
            t.partial[0].contains("does not point back"),
            "{:?}",
            t.partial
        );
    }

    #[test]
    fn a_loop_that_never_comes_back_is_caught() {
        // b points at itself (its back link cannot be both a and b); the
        // head's own links look right.
        let (a, b, c) = (NODES, NODES + 64, NODES + 128);
        let h = gen0();
        let (mem, p) = target(&[(a, b, h), (b, b, a), (c, h, b)], a, c);
        let t = walk(&mem, p, 1000);
        assert_eq!(t.objects.len(), 2);
        assert_eq!(t.partial.len(), 1, "{:?}", t.partial);
        assert!(
            t.partial[0].contains("does not point back"),
            "{:?}",
            t.partial
        );
    }

    #[test]
    fn stops_at_the_limit_and_says_so() {
        let (a, b, c) = (NODES, NODES + 64, NODES + 128);
        let h = gen0();
        let (mem, p) = target(&[(a, b, h), (b, c, a), (c, h, b)], a, c);
        let t = walk(&mem, p, 2);
        assert_eq!(t.objects.len(), 2);
        assert!(
            t.partial.iter().any(|p| p.contains("limit")),
            "{:?}",
            t.partial
        );
    }

    #[test]
    fn no_list_heads_is_partial_not_a_wild_walk() {
        let (mem, p) = target(&[], 0x4141_4141, 0x4242_4242);
        let t = walk(&mem, p, 100);
        assert!(t.objects.is_empty());
        assert!(
            t.partial[0].contains("no collector lists"),
            "{:?}",
            t.partial
        );
    }
}
