# -*- coding: utf-8 -*-
"""Threads parked under tail calls, for the tail-call frame tests.

    python tailcall.py LIBDIR

LIBDIR holds libtailcall.so (tailcall.c built with gcc -O2 -g), whose
helpers end in jumps to their callees:
  chain     tc_chain -> tc_mid1 => tc_mid2 => tc_leaf (=> a jump): one chain
  fork      tc_fork -> tc_split => tc_left or tc_right => tc_leaf2: two chains
  indirect  tc_indirect -> tc_maybe => tc_mid2 or a pointer => tc_leaf
Each leaf parks in nanosleep for good (its argument is negative).

READY carries each thread's native id. Runs unchanged on Python 2.7 and 3.6+.
"""
import ctypes
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fixture_util as fu  # noqa: E402

lib = ctypes.CDLL(os.path.join(sys.argv[1], "libtailcall.so"))
ENTRIES = ["chain", "fork", "indirect"]


def park(name, parked):
    entry = getattr(lib, "tc_" + name)
    entry.argtypes = [ctypes.c_int]
    parked.set()
    entry(-1)


def main():
    fu.install_ping()
    threads = {}
    events = []
    for name in ENTRIES:
        parked = fu.Parked()
        t = threading.Thread(target=park, name=name, args=(name, parked))
        t.daemon = True
        t.start()
        threads[name] = t
        events.append(parked)
    fu.wait_until(events)
    # A moment for every thread to get from parked.set() into its call.
    time.sleep(0.2)
    fu.ready(
        {
            "threads": dict(
                (name, {"native_id": fu.NATIVE_IDS.get(t.ident)})
                for name, t in threads.items()
            )
        }
    )
    while not fu.expired():
        time.sleep(0.2)
    fu.exit_now()


main()
