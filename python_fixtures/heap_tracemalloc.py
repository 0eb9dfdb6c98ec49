# -*- coding: utf-8 -*-
"""The oracle of `pyinspect heap`'s allocation sites: traces allocations
with tracemalloc, allocates at 24 known sites (each line its own number of
blocks and bytes), takes tracemalloc's own statistics by line, puts them in
its READY line, then holds still (a sleep that allocates nothing) while
the test reads the traces from outside.

    heap_tracemalloc.py [NFRAME]   tracemalloc.start(NFRAME) (1 by default)

READY: `sites`, the 40 largest of `take_snapshot().statistics("lineno")`
(filename, lineno, size, count), and with NFRAME > 1 each one's largest
traceback from `statistics("traceback")` (most recent call first);
`marks`, the allocating lines.

What the snapshot reads and the test later reads are the same traces: the
statistics are built after the snapshot copied the traces, and nothing
built from them stays alive; what READY's writing imports is imported
before; the collector is off, so no collection frees a block in between.
"""
import gc
import sys
import time
import tracemalloc

import fixture_util as fu

NFRAME = int(sys.argv[1]) if len(sys.argv) > 1 else 1
KEEP = []


def allocate(scale):
    # One line per site: `k` blocks of `k * scale` bytes each, and the
    # list that holds them.
    KEEP.append([bytearray(1 * scale) for _ in range(10)])  # MARK:site1
    KEEP.append([bytearray(2 * scale) for _ in range(20)])  # MARK:site2
    KEEP.append([bytearray(3 * scale) for _ in range(30)])  # MARK:site3
    KEEP.append([bytearray(4 * scale) for _ in range(40)])  # MARK:site4
    KEEP.append([bytearray(5 * scale) for _ in range(50)])  # MARK:site5
    KEEP.append([bytearray(6 * scale) for _ in range(60)])  # MARK:site6
    KEEP.append([bytearray(7 * scale) for _ in range(70)])  # MARK:site7
    KEEP.append([bytearray(8 * scale) for _ in range(80)])  # MARK:site8
    KEEP.append([bytearray(9 * scale) for _ in range(90)])  # MARK:site9
    KEEP.append([bytearray(10 * scale) for _ in range(100)])  # MARK:site10
    KEEP.append([bytearray(11 * scale) for _ in range(110)])  # MARK:site11
    KEEP.append([bytearray(12 * scale) for _ in range(120)])  # MARK:site12
    KEEP.append([bytearray(13 * scale) for _ in range(130)])  # MARK:site13
    KEEP.append([bytearray(14 * scale) for _ in range(140)])  # MARK:site14
    KEEP.append([bytearray(15 * scale) for _ in range(150)])  # MARK:site15
    KEEP.append([bytearray(16 * scale) for _ in range(160)])  # MARK:site16
    KEEP.append([bytearray(17 * scale) for _ in range(170)])  # MARK:site17
    KEEP.append([bytearray(18 * scale) for _ in range(180)])  # MARK:site18
    KEEP.append([bytearray(19 * scale) for _ in range(190)])  # MARK:site19
    KEEP.append([bytearray(20 * scale) for _ in range(200)])  # MARK:site20
    KEEP.append([bytearray(21 * scale) for _ in range(210)])  # MARK:site21
    KEEP.append([bytearray(22 * scale) for _ in range(220)])  # MARK:site22
    KEEP.append([bytearray(23 * scale) for _ in range(230)])  # MARK:site23
    KEEP.append([bytearray(24 * scale) for _ in range(240)])  # MARK:site24


def nested(depth, scale):
    if depth:
        return nested(depth - 1, scale)
    allocate(scale)


def statistics():
    snapshot = tracemalloc.take_snapshot()
    out = []
    by_tb = {}
    if NFRAME > 1:
        for s in snapshot.statistics("traceback"):
            top = (s.traceback[-1].filename, s.traceback[-1].lineno)
            if top not in by_tb:
                by_tb[top] = [[f.filename, f.lineno] for f in reversed(s.traceback)]
    for s in snapshot.statistics("lineno")[:40]:
        f = s.traceback[0]
        site = {"filename": f.filename, "lineno": f.lineno, "size": s.size, "count": s.count}
        if NFRAME > 1:
            site["traceback"] = by_tb.get((f.filename, f.lineno), [])
        out.append(site)
    del snapshot, by_tb
    return out


if __name__ == "__main__":
    fu.install_ping()
    sys.stdin = sys.__stdin__ = None
    # What READY's writing imports (platform) is imported before tracing.
    fu.version_info()
    marks = fu.markers(__file__)
    gc.collect()
    gc.disable()
    tracemalloc.start(NFRAME)
    nested(3, 1000)
    # The first statistics settle what the calls leave behind (a freed
    # frame's last block, say); the second are the ones the test reads.
    statistics()
    sites = statistics()
    fu.ready({"sites": sites, "marks": marks, "nframe": NFRAME})
    del sites
    while not fu.expired():
        time.sleep(1)
