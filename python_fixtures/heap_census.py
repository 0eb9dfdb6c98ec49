# -*- coding: utf-8 -*-
"""The oracle of `pyinspect heap`: builds a heap of known shape, computes its
own census with exactly the semantics the command documents, puts it in its
READY line, then holds still (a sleep that allocates nothing) while the test
reads it from outside.

Semantics: the objects `gc.get_objects()` returns, plus what the built-in
containers among them (exactly list, tuple, dict, set, frozenset) hold
directly (`gc.get_referents`, and a dict's keys, which get_referents leaves
out for str-keyed dicts), each object once (by `id`), by type, with
`sys.getsizeof` bytes. Type names: a class's `__module__` + "." + its
`__name__` ("builtins" left out), a built-in type's C name (`tp_name`).

The oracle's own objects stay out of the census by construction: it takes
`gc.get_objects()` before it creates anything, that list leaves itself out,
and on 3.10 and older the function's own frame object is skipped. The
collector stays off afterwards, so no collection changes the heap before the
test reads it. Runs (to READY) on 2.7 and 3.6+ too, for the version error.
"""
import gc
import sys
import time

import fixture_util as fu

HEAPTYPE = 1 << 9
CONTAINERS = (list, tuple, dict, set, frozenset)


class Record(object):
    def __init__(self, i):
        self.i = i
        self.name = "record-%d" % i
        self.tags = ["t%d" % (i % 7)]


class Slotted(object):
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a
        self.b = (a, float(a))


def build():
    heap = {}
    heap["records"] = [Record(i) for i in range(3000)]
    heap["slotted"] = [Slotted(i) for i in range(2000)]
    heap["by_key"] = dict(("key-%d" % i, i * 1000003) for i in range(4000))
    heap["sets"] = [set(range(i % 20)) for i in range(500)]
    heap["frozen"] = [frozenset(("f", i)) for i in range(300)]
    heap["text"] = [u"\u00e9t\u00e9-%d" % i for i in range(1500)]
    heap["blobs"] = [b"x" * (i % 200) for i in range(1000)]
    heap["big_ints"] = [2 ** (i % 300) for i in range(1000)]
    heap["floats"] = tuple(i / 3.0 for i in range(2000))
    heap["nested"] = [[j for j in range(i % 10)] for i in range(1000)]
    heap["buffers"] = [bytearray(i % 300) for i in range(500)]
    if "numpy" in sys.argv[1:]:
        import numpy

        # Arrays that own their data (several dtypes and shapes, a 0-d
        # one, fixed-width strings) and views that do not.
        owners = [numpy.zeros((i % 7 + 1, 50), dtype=numpy.float64) for i in range(200)]
        owners += [numpy.arange(i * 10, dtype=numpy.int32) for i in range(200)]
        owners += [numpy.ones(i, dtype=numpy.complex128) for i in range(100)]
        owners += [numpy.array(["s%d" % i] * (i % 9), dtype="U10") for i in range(100)]
        owners += [numpy.array(float(i)) for i in range(50)]
        heap["arrays"] = owners
        heap["views"] = [a[1:] for a in owners[:300]]
    return heap


HEAP = build()

# With "grow": each SIGUSR2 adds LEAK_STEP Leak objects (each with a 1 kB
# str of its own) to the module global LEAKED, then prints "GREW <total>".
LEAKED = []
LEAK_STEP = 5000


class Leak(object):
    def __init__(self, i):
        self.payload = "p" * 1000 + str(i)


def grow(signum, frame):
    LEAKED.extend(Leak(len(LEAKED) + i) for i in range(LEAK_STEP))
    sys.stdout.write("GREW %d\n" % len(LEAKED))
    sys.stdout.flush()


def type_name(t):
    if t.__flags__ & HEAPTYPE:
        module = t.__dict__.get("__module__")
        if isinstance(module, str):
            return t.__name__ if module == "builtins" else module + "." + t.__name__
        return t.__name__
    module = t.__module__
    if module in ("builtins", "__builtin__"):
        return t.__name__
    return module + "." + t.__name__


def add(counts, names, o):
    t = type(o)
    name = names.get(t)
    if name is None:
        name = names[t] = type_name(t)
    c = counts.get(name)
    if c is None:
        c = counts[name] = [0, 0]
    c[0] += 1
    c[1] += sys.getsizeof(o)


def census():
    """[(type, count, bytes)] of the heap as it is when called."""
    me = sys._getframe() if sys.version_info < (3, 11) else None
    tracked = gc.get_objects()
    seen = set()
    counts = {}
    names = {}

    held = []
    # No closure: its cells would be made before gc.get_objects() is called.
    for o in tracked:
        if o is me:
            continue
        seen.add(id(o))
    for o in tracked:
        if o is me:
            continue
        add(counts, names, o)
        if type(o) in CONTAINERS:
            refs = gc.get_referents(o)
            if type(o) is dict:
                refs.extend(o)
            for r in refs:
                if id(r) not in seen:
                    seen.add(id(r))
                    held.append(r)
    for o in held:
        add(counts, names, o)
    out = [[k, v[0], v[1]] for k, v in counts.items()]
    del tracked, held, seen, counts, names, me
    return out


if __name__ == "__main__":
    fu.install_ping()
    if "grow" in sys.argv[1:]:
        import signal

        signal.signal(signal.SIGUSR2, grow)
    # A buffered file counts its buffer in its __sizeof__, which the command
    # does not read (the README says so); stdin's (128 kB on 3.14) is the
    # one such buffer here, and the fixture never reads stdin: drop it.
    sys.stdin = sys.__stdin__ = None
    # What READY's writing imports (platform) is imported before the census.
    fu.version_info()
    gc.collect()
    # gc.get_objects() leaves out the permanent generation (gc.freeze(); a
    # collection on 3.12 puts objects there too), which the command counts:
    # put them back among the others, after the last collection.
    if hasattr(gc, "unfreeze"):
        gc.unfreeze()
    gc.disable()
    # Nothing of the census stays bound: the heap the test reads is the one
    # the census counted, once the main thread is on its parking line (READY is
    # written from inside `fu.ready`, before its payload is freed).
    park = fu.markers(__file__)["park"]
    fu.ready({"types": census() if sys.version_info >= (3, 8) else [], "park": park})
    while not fu.expired():
        time.sleep(1)  # MARK:park
