# -*- coding: utf-8 -*-
"""A process caught inside a garbage collection. Runs on 2.7 and 3.6+.

    gc_running.py         the main thread runs gc.collect(); a gc callback
                          (a weakref callback on 2.7; called while the
                          collector runs, with `collecting` set) prints READY and spins in
                          collector_spin() until the fixture's lifetime ends
    gc_running.py idle    no collection: READY, then sleep

A second thread sleeps throughout: it must not be shown as collecting.
"""
import gc
import sys
import threading
import time
import weakref

import fixture_util as fu

STARTED = []
KEEP = []


def collector_spin():
    n = 0
    while not fu.expired():
        n += 1
    return n


def callback(phase, info):
    if phase == "start" and not STARTED:
        STARTED.append(True)
        fu.ready({"collecting": True, "main": fu.native_id()})
        collector_spin()
        fu.exit_now()


def bystander():
    while True:
        time.sleep(1000)


def main():
    fu.install_ping()
    t = threading.Thread(target=bystander, name="bystander")
    t.daemon = True
    t.start()
    if sys.argv[1:] == ["idle"]:
        gc.disable()
        fu.ready({"collecting": False, "main": fu.native_id()})
        while not fu.expired():
            time.sleep(0.5)
        fu.exit_now()
    if hasattr(gc, "callbacks"):
        gc.callbacks.append(callback)
    else:
        # 2.7 has no gc.callbacks; the collector calls the weakref callbacks
        # of the cycles it frees while it runs.
        class Cycle(object):
            pass

        c = Cycle()
        c.me = c
        KEEP.append(weakref.ref(c, lambda ref: callback("start", {})))
        del c
    gc.collect()


if __name__ == "__main__":
    main()
