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
