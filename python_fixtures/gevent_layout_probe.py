"""Where gevent keeps the fields pyinspect reads, found in this process.

Prints "NAME VALUE" lines: gevent's release, then each field's place as
pyinspect's tables give it (src/cpython_layouts/greenlet.rs):

  greenlet_ident_from_base  offset of a gevent Greenlet's `_ident` (its
                            minimal_ident, a C field) past greenlet's own
                            object (the greenlet type's __basicsize__)
  timer_at_from_end         how far before the end of a libev timer object
                            its ev_timer's `at` (the deadline, on the
                            monotonic clock) lies

Each is found by reading this process's own objects through ctypes and
matching values gevent reports itself, on two objects that must agree.
"""
import ctypes
import struct
import sys

import gevent
import greenlet


def words(obj, size):
    raw = ctypes.string_at(id(obj), size)
    return [struct.unpack_from("Q", raw, o)[0] for o in range(0, size - 7, 8)]


def ident_offset():
    base = greenlet.greenlet.__basicsize__
    size = gevent.Greenlet.__basicsize__
    found = None
    gs = [gevent.Greenlet(len) for _ in range(2)]
    # Idents are small ints: several greenlets, so that the values differ.
    for g in gs:
        g.minimal_ident
    offsets = None
    for g in gs:
        want = id(g.minimal_ident)
        here = {i * 8 for i, w in enumerate(words(g, size)) if w == want and i * 8 >= base}
        offsets = here if offsets is None else offsets & here
    if offsets is not None and len(offsets) == 1:
        found = offsets.pop() - base
    return found


def timer_at_from_end():
    loop = gevent.get_hub().loop
    ts = [loop.timer(d) for d in (1000.0, 2000.0)]
    found = None
    for t in ts:
        t.start(lambda: None)
    offsets = None
    for t in ts:
        size = type(t).__basicsize__
        raw = ctypes.string_at(id(t), size)
        here = {
            size - o
            for o in range(0, size - 7, 8)
            if struct.unpack_from("d", raw, o)[0] == t.at
        }
        offsets = here if offsets is None else offsets & here
    for t in ts:
        t.stop()
    if offsets is not None and len(offsets) == 1:
        found = offsets.pop()
    return found


print("gevent", gevent.__version__)
print("loop", type(gevent.get_hub().loop).__module__)
for name, value in (
    ("greenlet_ident_from_base", ident_offset()),
    ("timer_at_from_end", timer_at_from_end()),
):
    print(name, "none" if value is None else value)
sys.stdout.flush()
