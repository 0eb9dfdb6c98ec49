# -*- coding: utf-8 -*-
# Fixed amounts of CPU work for the eBPF engine's tests: the main thread
# loops over hot_function (three units of work) and cold_function (one
# unit). Work, not time: the share is then the same whether a sampler counts
# time on a CPU (the bpf engine) or time runnable (the ptrace engine), even
# on a machine so loaded that the fixture waits for a CPU most of the time.
# Runs on 2.7 and 3.6+. READY once both functions have run.
from fixture_util import expired, ready


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


def main():
    hot_function()
    cold_function()
    ready({})
    while not expired():
        hot_function()
        cold_function()


if __name__ == "__main__":
    main()
