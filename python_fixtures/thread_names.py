# -*- coding: utf-8 -*-
"""py-spy's thread-name case: ten threads, each named after it was made
(`t.name = ...`, as py-spy's own test script does), sleeping, and the main
thread sleeping too. Runs on Python 2.7 and 3.6+.

Launched under `record` (threads start while it samples, as in py-spy's
test); runs until interrupted, or for argv[1] seconds (default 30).
"""
import sys
import threading
import time

NAMES = ["CustomThreadName-%d" % i for i in range(10)]


def sleeper(started):
    started.release()
    while True:
        time.sleep(1000)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    started = threading.Semaphore(0)
    for name in NAMES:
        t = threading.Thread(target=sleeper, args=(started,))
        t.name = name
        t.daemon = True
        t.start()
    for _ in NAMES:
        started.acquire()
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(0.5)


if __name__ == "__main__":
    # record's SIGINT at the end may come while the threads still start.
    try:
        main()
    except KeyboardInterrupt:
        pass
