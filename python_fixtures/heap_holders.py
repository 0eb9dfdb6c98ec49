# -*- coding: utf-8 -*-
"""Containers whose holders `pyinspect heap` names, each the largest of its
kind so that it is among the largest containers: a class attribute, a local
of the main thread's parked frame, and a local of another thread's frame
(and an argument it passed on, held by two frames). READY gives their
lengths and the lines the frames are parked on.

    Registry.entries   a dict of 60,000 items (a class attribute)
    batch              a list of 90,000 items, local of park() on main
    pending            a set of 40,000 items, local of worker() on a thread,
                       passed on to hold() as `items`
"""
import sys
import threading
import time

import fixture_util as fu

MARK = fu.markers(__file__)


class Registry(object):
    entries = dict((i, None) for i in range(60000))


def hold(items, started):
    started.set()
    while True:
        time.sleep(1)  # MARK:hold


def worker(started):
    pending = set(range(40000))
    hold(pending, started)  # MARK:worker


def park():
    batch = [None] * 90000
    started = threading.Event()
    t = threading.Thread(target=worker, args=(started,), name="worker")
    t.daemon = True
    t.start()
    started.wait()
    fu.ready(
        {
            "marks": MARK,
            "entries": len(Registry.entries),
            "batch": len(batch),
        }
    )
    while not fu.expired():
        time.sleep(1)  # MARK:park
    fu.exit_now()


if __name__ == "__main__":
    fu.install_ping()
    sys.stdin = sys.__stdin__ = None
    park()
