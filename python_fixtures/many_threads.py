# -*- coding: utf-8 -*-
"""Parks N threads (argv[1], default 200) in one known function, then READY.

Runs unchanged on Python 2.7 and 3.6+.
"""
import os
import sys
import threading
import time

import fixture_util as fu

HERE = os.path.abspath(__file__)
MARK = fu.markers(HERE)


def parked_thread(parked):
    parked.set()
    while True:
        time.sleep(1000.0)  # MARK:parked


def main_wait():
    while not fu.expired():
        time.sleep(0.5)  # MARK:main
    fu.exit_now()


def main():
    fu.install_ping()
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    threading.stack_size(256 * 1024)  # hundreds of threads, little memory
    started = []
    for i in range(count):
        parked = fu.Parked()
        thread = threading.Thread(target=parked_thread, args=(parked,), name="parked-%d" % i)
        thread.daemon = True
        thread.start()
        started.append((thread, parked))
    fu.wait_until([p for _, p in started], timeout=60.0)
    # Give the last threads time to get from parked.set() into time.sleep().
    time.sleep(0.2)
    threads = [
        {"name": t.name, "ident": t.ident, "native_id": fu.NATIVE_IDS.get(t.ident)}
        for t, _ in started
    ]
    fu.ready(
        {
            "count": count,
            "threads": threads,
            "main": {"ident": threading.current_thread().ident, "native_id": fu.native_id()},
            "frame": fu.frame(parked_thread, MARK["parked"]),
            "main_frame": fu.frame(main_wait, MARK["main"]),
        }
    )
    main_wait()


if __name__ == "__main__":
    main()
