# -*- coding: utf-8 -*-
"""A program for `record` in launch mode. Runs on Python 2.7 and 3.6+.

    launched.py wait              sleeps in waiting() until ended (SIGINT ends it)
    launched.py ignore-int        ignores SIGINT, sleeps in waiting() until ended
    launched.py hot SECONDS [RC]  spins in hot_loop() for SECONDS, exits with RC

In waiting(), READY (stdout, and the ready file a test may ask for) says it
is there, its SIGINT disposition set. It stops by itself after
fixture_util's lifetime, so nothing leaks.
"""
import signal
import sys
import time

import fixture_util as fu


def waiting():
    fu.ready({"mode": sys.argv[1]})
    while not fu.expired():
        time.sleep(0.05)


def hot_loop(seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        n += 1
    return n


def main():
    mode = sys.argv[1]
    if mode == "wait":
        waiting()
    elif mode == "ignore-int":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        waiting()
    elif mode == "hot":
        hot_loop(float(sys.argv[2]))
        sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
