# -*- coding: utf-8 -*-
"""The memory split of `pyinspect heap`: on SIGUSR2, grows by about 200 MB of
one kind, then prints "GREW <bytes> <arenas>": the bytes it added, and the
arenas the object allocator has then (`sys._debugmallocstats()`'s "# arenas
allocated current", the allocator's own count). A debug build's blocks carry
its debug hooks' extra bytes: the allocator's own figures count them.

  bytes    one 200 MB bytes object: malloc's (an mmapped chunk), written
           through, so resident
  objects  436,000 distinct 440-byte bytes objects, each a 480-byte block
           of the object allocator (a size class that fills 4 kB and
           16 kB pools alike, 94% and 99.6%); <bytes> is what its blocks
           in use grew by
           (sys._debugmallocstats()'s "# bytes in allocated blocks")
"""
import os
import sys
import tempfile
import time

import fixture_util as fu

KEPT = []


def mallocstats():
    """{"arenas": the allocator's own arena count, "blocks": the bytes of its
    blocks in use}, from sys._debugmallocstats() (which writes to the C
    stderr)."""
    with tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode("ascii", "replace")
    out = {}
    for line in text.splitlines():
        for key, name in (("arenas", "# arenas allocated current"),
                          ("blocks", "# bytes in allocated blocks")):
            if line.startswith(name):
                out[key] = int(line.split("=")[1].replace(",", "").strip())
    return out


def grow(signum, frame):
    if "bytes" in sys.argv[1:]:
        n = 200 << 20
        KEPT.append(b"\x01" * n)
        added = n
        stats = mallocstats()
    else:
        blocks = mallocstats()["blocks"]
        KEPT.append([b"%0440d" % i for i in range(436000)])
        stats = mallocstats()
        added = stats["blocks"] - blocks
    sys.stdout.write("GREW %d %d\n" % (added, stats["arenas"]))
    sys.stdout.flush()


if __name__ == "__main__":
    import signal

    fu.install_ping()
    signal.signal(signal.SIGUSR2, grow)
    fu.ready(mallocstats())
    while not fu.expired():
        time.sleep(1)
