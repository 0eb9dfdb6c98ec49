//! A minimal walk of the objects the garbage collector tracks, for the
//! greenlet reader: every generation list of one interpreter (and the
//! permanent one of `gc.freeze()`), bounded, never trusting a link.
//!
//! This is the one place the greenlet reader enumerates objects; a general
//! collector walker can take its place behind [`tracked_objects`].

use crate::cpython_layouts::greenlet::GreenletPython;
use crate::memory::{Memory, MemoryExt};

/// The most objects one walk visits, over all lists.
pub(crate) const MAX_GC_OBJECTS: usize = 8_000_000;

/// Calls `visit(object, its type)` for each object tracked by the collector
/// whose state is at `interp` (the interpreter, or `_PyRuntime` on 3.7 and
/// 3.8), up to `max` objects in all; returns
/// whether every list was walked to its end (false: a bound was hit or a
/// link led nowhere, as when the collector moves objects meanwhile).
pub(crate) fn tracked_objects(
    mem: &dyn Memory,
    py: &GreenletPython,
    ob_type: u64,
    interp: u64,
    max: usize,
    visit: &mut dyn FnMut(u64, u64),
) -> bool {
    let mut heads: Vec<u64> = (0..py.gc_generation_count)
        .map(|i| interp.wrapping_add(py.gc_generations + i * py.gc_generation_size))
        .collect();
    heads.push(interp.wrapping_add(py.gc_permanent));
    let max = max.min(MAX_GC_OBJECTS);
    let mut seen = 0usize;
    let mut whole = true;
    for head in heads {
        // `_gc_next` is the node's first word; its low bits may carry the
        // collector's flags while it runs.
        let mut node = match mem.read_u64(head) {
            Ok(n) => n & !7,
            Err(_) => {
                whole = false;
                continue;
            }
        };
        while node != head {
            if node == 0 || seen >= max {
                whole = false;
                break;
            }
            seen += 1;
            let obj = node.wrapping_add(py.gc_head_size);
            let Ok(ty) = mem.read_u64(obj.wrapping_add(ob_type)) else {
                whole = false;
                break;
            };
            visit(obj, ty);
            node = match mem.read_u64(node) {
                Ok(n) => n & !7,
                Err(_) => {
                    whole = false;
                    break;
                }
            };
        }
    }
    whole
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpython_layouts::greenlet::greenlet_python;
    use crate::memory::SliceMemory;
    use proptest::prelude::*;

    const BASE: u64 = 0x10_0000;

    fn memory(words: &[u64]) -> SliceMemory {
        let mut mem = SliceMemory::new();
        mem.add(BASE, words.iter().flat_map(|w| w.to_le_bytes()).collect());
        mem
    }

    fn walk(mem: &SliceMemory, max: usize) -> (Vec<(u64, u64)>, bool) {
        let py = greenlet_python(3, 12).unwrap();
        let interp = BASE - py.gc_generations;
        let mut seen = Vec::new();
        let whole = tracked_objects(mem, py, 8, interp, max, &mut |o, t| seen.push((o, t)));
        (seen, whole)
    }

    #[test]
    fn a_list_is_walked_to_its_head_and_a_loop_beside_it_is_cut() {
        // Generation 0's head at BASE, one node at BASE+0x100 (its object's
        // type at +16+8), back to the head; the other heads point at themselves
        // except generation 1, whose node loops onto itself.
        let mut w = vec![0u64; 0x200 / 8];
        let py = greenlet_python(3, 12).unwrap();
        let gen = |i: u64| (i * py.gc_generation_size / 8) as usize;
        w[gen(0)] = BASE + 0x100;
        w[0x100 / 8] = BASE;
        w[0x100 / 8 + 3] = 0xabc0;
        w[gen(1)] = BASE + 0x180;
        w[0x180 / 8] = BASE + 0x180;
        w[gen(2)] = BASE + gen(2) as u64 * 8;
        let perm = ((py.gc_permanent - py.gc_generations) / 8) as usize;
        w.resize(w.len().max(perm + 1), 0);
        w[perm] = BASE + perm as u64 * 8;
        let (seen, whole) = walk(&memory(&w), 50);
        assert!(!whole, "the loop is cut at the bound");
        assert_eq!(seen[0], (BASE + 0x110, 0xabc0));
        assert_eq!(seen.len(), 50);
    }

    proptest! {
        /// Whatever the lists hold, the walk ends within its bound.
        #[test]
        fn arbitrary_lists_end(words in proptest::collection::vec(any::<u64>(), 256)) {
            let words: Vec<u64> = words
                .iter()
                .map(|w| if w % 3 == 0 { BASE + (w % 2048) } else { *w })
                .collect();
            let (seen, _) = walk(&memory(&words), 1000);
            prop_assert!(seen.len() <= 1000);
        }
    }
}
