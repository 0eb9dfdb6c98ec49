# -*- coding: utf-8 -*-
# Fixed amounts of CPU work for the eBPF engine's tests: the main thread
# loops over hot_function (three units of work) and cold_function (one
# unit), and counts the CPU time each took (thread CPU time: what an
# on-CPU sampler sees, however loaded the machine). SIGUSR2 prints
# "SPENT <hot seconds> <cold seconds>" so far. Optional argv[1]: run the
# loop that many calls of nest() deep. Runs on 2.7 and 3.6+. READY once
# both functions have run.
import signal
import sys
import time

from fixture_util import expired, ready

cpu = (
    getattr(time, "thread_time", None)
    or getattr(time, "process_time", None)
    or time.clock
)
spent = [0.0, 0.0]


def report(signum, frame):
    sys.stdout.write("SPENT %.6f %.6f\n" % (spent[0], spent[1]))
    sys.stdout.flush()


def work(n):
    x = 0
    i = 0
    while i < n:
        x += i
        i += 1
    return x


def hot_function():
    return work(30000)


def cold_function():
    return work(10000)


def nest(depth):
    if depth > 0:
        return nest(depth - 1)
    return loop()


def main():
    signal.signal(signal.SIGUSR2, report)
    depth = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    sys.setrecursionlimit(max(1000, depth + 100))
    nest(depth)


def loop():
    hot_function()
    cold_function()
    ready({})
    while not expired():
        t0 = cpu()
        hot_function()
        t1 = cpu()
        cold_function()
        t2 = cpu()
        spent[0] += t1 - t0
        spent[1] += t2 - t1


if __name__ == "__main__":
    main()
