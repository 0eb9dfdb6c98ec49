//! The greenlet reader's way into the collector's lists: each generation
//! list of one interpreter (and the permanent one of `gc.freeze()`), walked
//! by the one list walker, `crate::python::gc::walk_list`, which checks
//! every back link and stops at its bound.
//!
//! Only where the lists are differs from `pyinspect heap`'s walk: the
//! greenlet tables also cover 3.7, whose collector the heap table does not.

use crate::cpython_layouts::greenlet::GreenletPython;
use crate::memory::Memory;
use crate::python::gc::{walk_list, ListGeometry};

/// The most objects one walk visits, over all lists.
pub(crate) const MAX_GC_OBJECTS: usize = 8_000_000;

/// Calls `visit(object, its type)` for each object tracked by the collector
/// whose state is at `interp` (the interpreter, or `_PyRuntime` on 3.7 and
/// 3.8), up to `max` objects in all; returns whether every list was walked
/// to its end (false: a bound was hit or a link did not hold, as when the
/// collector moves objects meanwhile).
pub(crate) fn tracked_objects(
    mem: &dyn Memory,
    py: &GreenletPython,
    ob_type: u64,
    interp: u64,
    max: usize,
    visit: &mut dyn FnMut(u64, u64),
) -> bool {
    let heads = (0..py.gc_generation_count)
        .map(|i| interp.wrapping_add(py.gc_generations + i * py.gc_generation_size))
        .chain(std::iter::once(interp.wrapping_add(py.gc_permanent)));
    let geometry = ListGeometry {
        gc_head_size: py.gc_head_size,
        ob_type,
    };
    let max = max.min(MAX_GC_OBJECTS);
    let mut objects = Vec::new();
    let mut whole = true;
    for head in heads {
        if walk_list(mem, &geometry, head, max, &mut objects).is_err() {
            whole = false;
        }
    }
    for (obj, ty) in objects {
        visit(obj, ty);
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
    fn each_generation_and_the_permanent_list_are_walked() {
        // Generation 0 holds one node at BASE+0x100 (its object's type at
        // +16+8), linked both ways; the other heads are empty (pointing at
        // themselves both ways).
        let py = greenlet_python(3, 12).unwrap();
        let perm = ((py.gc_permanent - py.gc_generations) / 8) as usize;
        // Whole pages: the walker reads through a page cache.
        let mut w = vec![0u64; (0x1000 / 8).max(perm + 2)];
        let gen = |i: u64| (i * py.gc_generation_size / 8) as usize;
        for head in [gen(1), gen(2), perm] {
            w[head] = BASE + head as u64 * 8;
            w[head + 1] = BASE + head as u64 * 8;
        }
        w[gen(0)] = BASE + 0x100;
        w[gen(0) + 1] = BASE + 0x100;
        w[0x100 / 8] = BASE;
        w[0x100 / 8 + 1] = BASE;
        w[0x100 / 8 + 3] = 0xabc0;
        let (seen, whole) = walk(&memory(&w), 50);
        assert!(whole);
        assert_eq!(seen, vec![(BASE + 0x110, 0xabc0)]);
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
            prop_assert!(seen.len() <= 1000 * 4);
        }
    }
}
